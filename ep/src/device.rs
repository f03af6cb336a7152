//! Which MLX device a session's plans run on (the `device` setting: cpu, gpu, or unset for the
//! GPU when the loaded libmlx has one), and whether the hand-written CUDA kernels
//! (`mlx_kernels::cuda`) join the graphs lowered from then on (`no_cuda_kernels`).

use mlx_kernels::{Result, Stream};

use crate::options::Options;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Device {
    /// `Some("cpu" | "gpu")` when the session named one.
    named: Option<&'static str>,
    cuda_kernels: bool,
}

impl Default for Device {
    /// The best device, hand-written kernels on: what no setting gives.
    fn default() -> Device {
        Device {
            named: None,
            cuda_kernels: true,
        }
    }
}

impl Device {
    pub fn of(options: &Options) -> Device {
        let named = match options.text("device") {
            Some("cpu") => Some("cpu"),
            Some("gpu") => Some("gpu"),
            _ => None,
        };
        Device {
            named,
            cuda_kernels: !options.flag("no_cuda_kernels"),
        }
    }

    pub fn stream(self) -> Result<Stream> {
        mlx_kernels::cuda::set_enabled(self.cuda_kernels);
        match self.named {
            Some("cpu") => Stream::cpu(),
            Some("gpu") => Stream::gpu(),
            _ => Stream::best(),
        }
    }

    /// "gpu" or "cpu": what `stream()` picks, for device metadata and summaries.
    pub fn describe(self) -> &'static str {
        match self.named {
            Some(named) => named,
            None if Stream::gpu_available() => "gpu",
            None => "cpu",
        }
    }
}
