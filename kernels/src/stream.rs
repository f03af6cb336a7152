//! Where MLX work runs: the CPU, or the GPU when MLX's backend has one (Metal or CUDA).

use std::fmt;

use crate::error::{capture, check, Error, Result};
use crate::sys;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceKind {
    Cpu,
    Gpu,
}

/// Which hand-written kernels (`crate::custom`, and the copies of `crate::stream_copy`) the
/// work lowered onto a stream may use. It travels with the [`Stream`] handle rather than living
/// in a process-wide switch, so two sessions in one process can choose differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelChoice {
    /// The hand-written GPU work at all; off, MLX's own composed path runs everywhere (a
    /// switch for comparisons and for working around a kernel).
    pub hand_written: bool,
    /// The Metal twins of the CUDA kernels. Off by default: no machine here runs Metal, so
    /// they wait for a macOS run (the macOS workflow turns them on).
    pub metal_twins: bool,
}

impl Default for KernelChoice {
    fn default() -> KernelChoice {
        KernelChoice {
            hand_written: true,
            metal_twins: false,
        }
    }
}

/// An owned MLX stream handle, with the kernels work on it may use.
pub struct Stream {
    raw: sys::mlx_stream,
    kind: DeviceKind,
    kernels: KernelChoice,
}

impl Stream {
    /// The default stream of the CPU device.
    pub fn cpu() -> Result<Stream> {
        crate::init();
        // SAFETY: returns an owned stream handle (freed by Drop), or an empty one plus a
        // recorded error, which `capture` turns into Err.
        let raw = capture(|| unsafe { sys::mlx_default_cpu_stream_new() })?;
        Ok(Stream {
            raw,
            kind: DeviceKind::Cpu,
            kernels: KernelChoice::default(),
        })
    }

    /// The default stream of the GPU device; an error when MLX's backend has no GPU.
    pub fn gpu() -> Result<Stream> {
        if !Stream::gpu_available() {
            return Err(Error::Mlx(
                "MLX was built without a GPU backend (no Metal, no CUDA)".into(),
            ));
        }
        // SAFETY: as in `cpu`.
        let raw = capture(|| unsafe { sys::mlx_default_gpu_stream_new() })?;
        Ok(Stream {
            raw,
            kind: DeviceKind::Gpu,
            kernels: KernelChoice::default(),
        })
    }

    /// The GPU when the loaded MLX has one, else the CPU: the same binary runs on both the
    /// CPU-only and the CUDA build of libmlx.
    pub fn best() -> Result<Stream> {
        if Stream::gpu_available() {
            Stream::gpu()
        } else {
            Stream::cpu()
        }
    }

    /// Whether the libmlx loaded at run time offers a GPU device.
    pub fn gpu_available() -> bool {
        crate::init();
        // SAFETY: device handle created and freed here; `available` is a valid out-parameter.
        unsafe {
            let device = sys::mlx_device_new_type(sys::mlx_device_type::MLX_GPU, 0);
            let mut available = false;
            let status = sys::mlx_device_is_available(&mut available, device);
            sys::mlx_device_free(device);
            status == 0 && available
        }
    }

    pub fn kind(&self) -> DeviceKind {
        self.kind
    }

    /// The same stream, its work limited to `kernels`.
    pub fn with_kernels(mut self, kernels: KernelChoice) -> Stream {
        self.kernels = kernels;
        self
    }

    pub fn kernels(&self) -> KernelChoice {
        self.kernels
    }

    /// Waits for all work queued on this stream.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: `raw` is a live stream handle.
        check(unsafe { sys::mlx_synchronize(self.raw) })
    }

    pub(crate) fn raw(&self) -> sys::mlx_stream {
        self.raw
    }
}

impl Clone for Stream {
    /// Another handle to the same MLX stream.
    fn clone(&self) -> Stream {
        // SAFETY: an owned empty handle that mlx_stream_set points at `self`'s stream; setting a
        // live handle from a live one cannot fail.
        let raw = unsafe {
            let mut raw = sys::mlx_stream_new();
            sys::mlx_stream_set(&mut raw, self.raw);
            raw
        };
        Stream {
            raw,
            kind: self.kind,
            kernels: self.kernels,
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // SAFETY: each Stream owns one handle, freed exactly once.
        unsafe { sys::mlx_stream_free(self.raw) };
    }
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stream")
            .field("kind", &self.kind)
            .field("kernels", &self.kernels)
            .finish()
    }
}
