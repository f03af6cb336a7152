//! Which MLX device a plan runs on: `ONNXRUNTIME_EP_MLX_DEVICE=cpu|gpu`, or (unset) the GPU when
//! the loaded libmlx has one; `ONNXRUNTIME_EP_MLX_NO_CUDA_KERNELS=1` keeps the hand-written CUDA
//! kernels (`mlx_kernels::cuda`) out of the graphs lowered from then on.

use mlx_kernels::{Result, Stream};

pub const DEVICE_ENV: &str = "ONNXRUNTIME_EP_MLX_DEVICE";

pub const NO_CUDA_KERNELS_ENV: &str = "ONNXRUNTIME_EP_MLX_NO_CUDA_KERNELS";

pub fn stream() -> Result<Stream> {
    mlx_kernels::cuda::set_enabled(!std::env::var(NO_CUDA_KERNELS_ENV).is_ok_and(|v| v == "1"));
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
