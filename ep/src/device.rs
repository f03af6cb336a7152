//! Which MLX device a session's plans run on (the `device` setting: cpu, gpu, or unset for the
//! GPU when the loaded libmlx has one), and whether the hand-written GPU kernels
//! (`mlx_kernels::custom`) join the session's graphs (`no_cuda_kernels`, and `metal_kernels`
//! for their Metal twins).

use mlx_kernels::{KernelChoice, Result, Stream};

use crate::options::Options;

/// The device a session names, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Named {
    Best,
    Cpu,
    Gpu,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Device {
    named: Named,
    cuda_kernels: bool,
    metal_kernels: bool,
}

impl Default for Device {
    /// The best device, hand-written kernels on: what no setting gives.
    fn default() -> Device {
        Device {
            named: Named::Best,
            cuda_kernels: true,
            metal_kernels: false,
        }
    }
}

impl Device {
    pub fn of(options: &Options) -> Device {
        let named = match options.text("device") {
            Some("cpu") => Named::Cpu,
            Some("gpu") => Named::Gpu,
            _ => Named::Best,
        };
        Device {
            named,
            cuda_kernels: !options.flag("no_cuda_kernels"),
            metal_kernels: options.flag("metal_kernels"),
        }
    }

    /// The session's stream, carrying its choice of hand-written kernels: the choice is the
    /// session's own, whatever other sessions in the process chose.
    pub fn stream(self) -> Result<Stream> {
        let stream = match self.named {
            Named::Cpu => Stream::cpu(),
            Named::Gpu => Stream::gpu(),
            Named::Best => Stream::best(),
        }?;
        Ok(stream.with_kernels(KernelChoice {
            hand_written: self.cuda_kernels,
            metal_twins: self.metal_kernels,
        }))
    }

    /// "gpu" or "cpu": what `stream()` picks, for device metadata and summaries.
    pub fn describe(self) -> &'static str {
        match self.named {
            Named::Cpu => "cpu",
            Named::Gpu => "gpu",
            Named::Best if Stream::gpu_available() => "gpu",
            Named::Best => "cpu",
        }
    }
}
