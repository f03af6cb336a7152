//! Builds mlx-c against the pinned MLX, generates its Rust bindings and links `libmlx`.
//!
//! Inputs (all prepared by `make setup`, overridable for other layouts):
//! - `MLX_ROOT`: MLX's install prefix (`include/`, `lib/`); default: the `mlx` folder of the
//!   workspace's `.venv` (the `mlx-cpu` wheel on Linux, `mlx` on macOS).
//! - `MLX_C_SRC`: the mlx-c 0.7.0 source root; default: `.deps/mlx-c`.

mod locate;
mod mlx_c;

use std::env;
use std::path::PathBuf;

fn main() {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let paths = locate::Paths::discover();

    let include_dirs = mlx_c::compile(&paths, &out_dir);
    mlx_c::generate_bindings(&paths, &include_dirs, &out_dir);
    link(&paths);
}

fn link(paths: &locate::Paths) {
    let lib_dir = paths.mlx_lib_dir();
    println!("cargo:rustc-link-search=native={}", lib_dir.display());
    // On Linux the mlx-cpu wheel carries a reference BLAS that is 30x slower than OpenBLAS.
    // Naming OpenBLAS *before* libmlx puts it ahead in our DT_NEEDED list, so the dynamic loader
    // binds MLX's cblas_*/LAPACK calls to it, even when ORT dlopens us with RTLD_LOCAL.
    // (macOS MLX uses Accelerate and needs nothing.)
    if env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-lib=dylib:+verbatim=libopenblas.so.0");
    }
    println!("cargo:rustc-link-lib=dylib=mlx");
    // Dependants (the EP cdylib) read this as DEP_MLX_LIBDIR to set their runpath.
    println!("cargo:libdir={}", lib_dir.display());
    // Our own tests and examples need the runpath too. RUNPATH (not RPATH) so that
    // LD_LIBRARY_PATH can swap in another libmlx.so (MLX's CUDA build) at run time.
    if env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-arg=-Wl,--enable-new-dtags");
    }
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib_dir.display());
}
