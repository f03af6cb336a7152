//! Where MLX work runs: the CPU, or the GPU when MLX's backend has one (Metal or CUDA).

use std::fmt;

use crate::error::{capture, check, Error, Result};
use crate::sys;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceKind {
    Cpu,
    Gpu,
}

/// An owned MLX stream handle.
pub struct Stream {
    raw: sys::mlx_stream,
    kind: DeviceKind,
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
        f.debug_struct("Stream").field("kind", &self.kind).finish()
    }
}
