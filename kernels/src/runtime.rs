//! Process-wide MLX setup, done once before the first MLX call.

use std::ffi::CStr;
use std::ptr;
use std::sync::Once;

use crate::error::{check, record_mlx_error, Result};
use crate::sys;

static INIT: Once = Once::new();
const TF32_SWITCH: &str = "MLX_ENABLE_TF32";

/// Installs our MLX error handler (mlx-c's default one calls `exit()`), binds the BLAS check,
/// and keeps float32 matmuls in full float32 precision. Every constructor in this crate calls
/// it; calling it again is free.
pub fn init() {
    INIT.call_once(|| {
        // MLX's CUDA backend multiplies float32 matrices in TF32 (10-bit mantissa, ~1e-3
        // relative error) unless told otherwise; ORT's CPU EP, our reference, is exact float32.
        // MLX reads the variable lazily at its first matmul, after this point. A user who wants
        // the speed sets MLX_ENABLE_TF32=1 and keeps it.
        if std::env::var_os(TF32_SWITCH).is_none() {
            std::env::set_var(TF32_SWITCH, "0");
        }
        // SAFETY: the handler is a plain `extern "C"` function that never unwinds; there is no
        // payload to free.
        unsafe { sys::mlx_set_error_handler(Some(record_mlx_error), ptr::null_mut(), None) };
        crate::blas::bind();
    });
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
    fn float32_matmuls_stay_float32_unless_the_user_opted_in() {
        let preset = std::env::var(super::TF32_SWITCH).ok();
        super::init();
        let now = std::env::var(super::TF32_SWITCH).unwrap();
        assert_eq!(now, preset.unwrap_or_else(|| "0".into()));
    }
}
