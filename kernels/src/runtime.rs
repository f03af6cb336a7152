//! Process-wide MLX setup, done once before the first MLX call.

use std::ffi::CStr;
use std::ptr;
use std::sync::Once;

use crate::error::{check, record_mlx_error, Result};
use crate::sys;

static INIT: Once = Once::new();
const TF32_SWITCH: &str = "MLX_ENABLE_TF32";
const CUDA_GRAPHS_SWITCH: &str = "MLX_USE_CUDA_GRAPHS";

/// Installs our MLX error handler (mlx-c's default one calls `exit()`), binds the BLAS check,
/// keeps float32 matmuls in full float32 precision and launches CUDA kernels directly. Every
/// constructor in this crate calls it; calling it again is free.
pub fn init() {
    INIT.call_once(|| {
        // MLX's CUDA backend multiplies float32 matrices in TF32 (10-bit mantissa, ~1e-3
        // relative error) unless told otherwise; ORT's CPU EP, our reference, is exact float32.
        // MLX reads the variable lazily at its first matmul, after this point. A user who wants
        // the speed sets MLX_ENABLE_TF32=1 and keeps it.
        default_unless_set(TF32_SWITCH, "0");
        // MLX's CUDA backend records each evaluation's kernels into a CUDA graph and launches
        // that; convolutions are captured from cuDNN into child graphs on every run. On an
        // H200 the graphs cost more than they save for every model the EP was measured on:
        // float16 CNNs ran 1.7-2x faster without (ResNet-18 0.75 against 1.43 ms), small models
        // 20-40%, a 12-layer encoder 3-13%, a 16-layer decode step the same or faster
        // (docs/PERFORMANCE.md, session 29). Read lazily at MLX's first evaluation on the GPU.
        default_unless_set(CUDA_GRAPHS_SWITCH, "0");
        // SAFETY: the handler is a plain `extern "C"` function that never unwinds; there is no
        // payload to free.
        unsafe { sys::mlx_set_error_handler(Some(record_mlx_error), ptr::null_mut(), None) };
        crate::blas::bind();
    });
}

/// Sets MLX's variable `name` to `value` unless the user set it (a process-wide MLX setting
/// the user keeps the last word on).
fn default_unless_set(name: &str, value: &str) {
    if std::env::var_os(name).is_none() {
        std::env::set_var(name, value);
    }
}

/// The version string of the MLX library loaded at run time.
pub fn mlx_version() -> Result<String> {
    init();
    // SAFETY: mlx_string_new returns an owned empty string that we free below.
    let mut text = unsafe { sys::mlx_string_new() };
    // SAFETY: `text` is a valid mlx_string out-parameter.
    let status = unsafe { sys::mlx_version(&mut text) };
    let result = check(status).map(|()| {
        // SAFETY: on success mlx_string_data points at a NUL-terminated buffer owned by `text`.
        unsafe { CStr::from_ptr(sys::mlx_string_data(text)) }
            .to_string_lossy()
            .into_owned()
    });
    // SAFETY: `text` was created above and is freed exactly once.
    unsafe { sys::mlx_string_free(text) };
    result
}

#[cfg(test)]
mod tests {
    #[test]
    fn tf32_and_cuda_graphs_stay_off_unless_the_user_chose() {
        let switches = [super::TF32_SWITCH, super::CUDA_GRAPHS_SWITCH];
        let preset = switches.map(|name| std::env::var(name).ok());
        super::init();
        for (name, preset) in switches.into_iter().zip(preset) {
            let now = std::env::var(name).unwrap();
            assert_eq!(now, preset.unwrap_or_else(|| "0".into()), "{name}");
        }
    }
}
