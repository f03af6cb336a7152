//! Shared by the build scripts of crates whose artifacts load libmlx (`#[path]`-included).
//!
//! A link-arg emitted by mlx-kernels' build script reaches only its own targets, so each crate
//! with binaries, tests or a cdylib sets its own runpath from the folder mlx-kernels publishes
//! (`links = "mlx"` → `DEP_MLX_LIBDIR`). RUNPATH rather than RPATH, so that `LD_LIBRARY_PATH`
//! can swap in another libmlx.so (MLX's CUDA build) at run time.

pub fn link_to_mlx() {
    let Some(libdir) = std::env::var_os("DEP_MLX_LIBDIR") else {
        return;
    };
    let origin = if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-arg=-Wl,--enable-new-dtags");
        "$ORIGIN"
    } else {
        "@loader_path"
    };
    // First, the installed wheel's layout: site-packages/onnxruntime_ep_mlx/ next to the mlx
    // package's lib/ (absent from a checkout's target/, so the build's own MLX comes next).
    println!("cargo:rustc-link-arg=-Wl,-rpath,{origin}/../mlx/lib");
    println!(
        "cargo:rustc-link-arg=-Wl,-rpath,{}",
        std::path::Path::new(&libdir).display()
    );
}
