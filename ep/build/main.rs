//! Generates ORT's C API bindings (API 29 headers, fetched by `make setup`) and gives the
//! cdylib a runpath to MLX's library folder.
//!
//! ORT is never linked: it hands us its `OrtApi` table at registration.

#[path = "../../build-support/runpath.rs"]
mod runpath;

use std::env;
use std::path::PathBuf;

fn main() {
    let workspace = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"))
        .parent()
        .expect("ep/ lives in the workspace")
        .to_path_buf();
    println!("cargo:rerun-if-env-changed=ORT_HEADERS_DIR");
    let headers = env::var_os("ORT_HEADERS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join(".deps/ort"));
    let api_header = headers.join("onnxruntime_c_api.h");
    if !api_header.is_file() {
        eprintln!(
            "onnxruntime-ep-mlx build: ORT headers not found at {}: run `make setup` or set ORT_HEADERS_DIR",
            headers.display()
        );
        std::process::exit(1);
    }
    println!("cargo:rerun-if-changed={}", api_header.display());

    // onnxruntime_c_api.h includes onnxruntime_ep_c_api.h at its end, and the latter has no
    // include guard: only the former is given to bindgen.
    let bindings = bindgen::Builder::default()
        .header(api_header.display().to_string())
        .clang_arg(format!("-I{}", headers.display()))
        .allowlist_type("Ort.*")
        .allowlist_function("OrtGetApiBase")
        .allowlist_var("ORT_.*")
        // Vtables start all-None: functions we do not implement stay NULL.
        .derive_default(true)
        .default_enum_style(bindgen::EnumVariation::Rust {
            non_exhaustive: false,
        })
        .layout_tests(false)
        .generate_comments(false)
        .generate()
        .unwrap_or_else(|e| {
            eprintln!("onnxruntime-ep-mlx build: bindgen over ORT headers failed: {e}");
            std::process::exit(1);
        });
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    bindings
        .write_to_file(out.join("ort_bindings.rs"))
        .expect("write ORT bindings");

    runpath::link_to_mlx();
}
