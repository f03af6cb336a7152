//! Finds MLX's prefix and the mlx-c sources, failing with a message that says how to fix it.

use std::env;
use std::path::{Path, PathBuf};

pub struct Paths {
    pub mlx_root: PathBuf,
    pub mlx_c_src: PathBuf,
}

impl Paths {
    pub fn discover() -> Self {
        println!("cargo:rerun-if-env-changed=MLX_ROOT");
        println!("cargo:rerun-if-env-changed=MLX_C_SRC");
        let workspace = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"))
            .parent()
            .expect("kernels/ lives inside the workspace")
            .to_path_buf();

        let mlx_root = match env::var_os("MLX_ROOT") {
            Some(root) => PathBuf::from(root),
            None => venv_mlx_root(&workspace).unwrap_or_else(|| {
                fail("MLX not found: run `make setup` (creates .venv with MLX) or set MLX_ROOT")
            }),
        };
        if !mlx_root.join("include/mlx/mlx.h").is_file() {
            fail(&format!(
                "{} has no include/mlx/mlx.h: set MLX_ROOT to an MLX prefix",
                mlx_root.display()
            ));
        }

        let mlx_c_src = env::var_os("MLX_C_SRC")
            .map(PathBuf::from)
            .unwrap_or_else(|| workspace.join(".deps/mlx-c"));
        if !mlx_c_src.join("mlx/c/mlx.h").is_file() {
            fail(&format!(
                "mlx-c sources not found at {}: run `make setup` or set MLX_C_SRC",
                mlx_c_src.display()
            ));
        }
        // setup.sh rewrites this stamp whenever it replaces the sources.
        println!(
            "cargo:rerun-if-changed={}",
            mlx_c_src.join(".sha256").display()
        );
        println!(
            "cargo:rerun-if-changed={}",
            mlx_root.join("include/mlx/version.h").display()
        );
        Paths {
            mlx_root,
            mlx_c_src,
        }
    }

    pub fn mlx_include_dir(&self) -> PathBuf {
        self.mlx_root.join("include")
    }

    pub fn mlx_lib_dir(&self) -> PathBuf {
        self.mlx_root.join("lib")
    }
}

/// `.venv/lib/python3.*/site-packages/mlx`, where the MLX wheels put their C++ prefix.
fn venv_mlx_root(workspace: &Path) -> Option<PathBuf> {
    let lib = workspace.join(".venv/lib");
    let mut candidates: Vec<PathBuf> = std::fs::read_dir(lib)
        .ok()?
        .filter_map(|entry| entry.ok().map(|e| e.path().join("site-packages/mlx")))
        .filter(|p| p.join("include/mlx/mlx.h").is_file())
        .collect();
    candidates.sort();
    candidates.pop()
}

pub fn fail(message: &str) -> ! {
    eprintln!("mlx-kernels build: {message}");
    std::process::exit(1);
}
