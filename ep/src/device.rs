//! Which MLX device a plan runs on: `ONNXRUNTIME_EP_MLX_DEVICE=cpu|gpu`, or (unset) the GPU when
//! the loaded libmlx has one.

use mlx_kernels::{Result, Stream};

pub const DEVICE_ENV: &str = "ONNXRUNTIME_EP_MLX_DEVICE";

pub fn stream() -> Result<Stream> {
    match std::env::var(DEVICE_ENV).as_deref() {
        Ok("cpu") => Stream::cpu(),
        Ok("gpu") => Stream::gpu(),
        _ => Stream::best(),
    }
}

/// "gpu" or "cpu": what `stream()` would pick, for device metadata and summaries.
pub fn describe() -> &'static str {
    match std::env::var(DEVICE_ENV).as_deref() {
        Ok("cpu") => "cpu",
        Ok("gpu") => "gpu",
        _ if Stream::gpu_available() => "gpu",
        _ => "cpu",
    }
}
