//! Process-wide MLX setup, done once before the first MLX call.

use std::ffi::CStr;
use std::ptr;
use std::sync::Once;

use crate::error::{check, record_mlx_error, Result};
use crate::sys;

static INIT: Once = Once::new();

/// Installs our MLX error handler (mlx-c's default one calls `exit()`) and binds the BLAS
/// check. Every constructor in this crate calls it; calling it again is free.
pub fn init() {
    INIT.call_once(|| {
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
