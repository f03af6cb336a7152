//! Writes docs/COVERAGE.md from the op table: `cargo run -p op-specs --bin gen-coverage [PATH]`.

fn main() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("op-specs lives in the workspace");
    let path = std::env::args()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| root.join(op_specs::table::coverage::PATH_IN_REPO));
    if let Err(e) = std::fs::write(&path, op_specs::table::coverage::markdown()) {
        eprintln!("gen-coverage: cannot write {}: {e}", path.display());
        std::process::exit(1);
    }
    println!("wrote {}", path.display());
}
