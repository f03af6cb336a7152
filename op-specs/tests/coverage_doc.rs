//! docs/COVERAGE.md is generated from the table and is the only copy: this test compares the
//! committed file with what the table generates now, so a stale file fails here.

use op_specs::table::coverage;

#[test]
fn committed_coverage_doc_matches_the_table() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(coverage::PATH_IN_REPO);
    let committed = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) => panic!(
            "cannot read {}: {e}; run `make docs` to generate it and commit it",
            path.display()
        ),
    };
    let generated = coverage::markdown();
    if committed != generated {
        // The first differing line, so the failure says what changed without a diff tool.
        let first = committed
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| committed.lines().count().min(generated.lines().count()));
        panic!(
            "{} is stale (first difference at line {}: committed {:?}, table gives {:?}): run \
             `make docs` and commit docs/COVERAGE.md",
            path.display(),
            first + 1,
            committed.lines().nth(first).unwrap_or("<end of file>"),
            generated.lines().nth(first).unwrap_or("<end of file>"),
        );
    }
}
