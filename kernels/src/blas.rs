//! Which BLAS serves MLX's CPU matmuls.
//!
//! The Linux `mlx-cpu` wheel bundles a reference BLAS (≈30× slower than OpenBLAS). The build
//! lists OpenBLAS ahead of libmlx among our needed libraries; referencing one of its symbols
//! here keeps the linker (`--as-needed`) from dropping it, so the loader binds MLX's `cblas_*`
//! calls to OpenBLAS. `tests/foundation/test_blas.py` checks the binding itself.

use std::sync::OnceLock;

static DESCRIPTION: OnceLock<String> = OnceLock::new();

#[cfg(target_os = "linux")]
mod openblas {
    use std::ffi::{c_char, CStr};

    extern "C" {
        fn openblas_get_config() -> *const c_char;
    }

    pub fn describe() -> String {
        // SAFETY: OpenBLAS returns a pointer to a static NUL-terminated string.
        let config = unsafe { CStr::from_ptr(openblas_get_config()) };
        format!("OpenBLAS ({})", config.to_string_lossy().trim())
    }
}

pub(crate) fn bind() {
    DESCRIPTION.get_or_init(describe);
}

#[cfg(target_os = "linux")]
fn describe() -> String {
    openblas::describe()
}

#[cfg(not(target_os = "linux"))]
fn describe() -> String {
    "the platform BLAS of MLX (Accelerate on macOS)".to_owned()
}

/// A human-readable name of the BLAS our build binds for MLX.
pub fn description() -> &'static str {
    crate::init();
    DESCRIPTION.get_or_init(describe)
}
