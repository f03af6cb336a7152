//! docs/COVERAGE.md is generated from the table and must not go stale.

use op_specs::table::coverage;

#[test]
fn committed_coverage_doc_matches_the_table() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(coverage::PATH_IN_REPO);
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == coverage::markdown(),
        "{} is stale: run `cargo run -p op-specs --bin gen-coverage` (or `make docs`) and commit it",
        path.display()
    );
}

#[test]
fn coverage_doc_snapshot() {
    insta::assert_snapshot!("coverage", coverage::markdown());
}
