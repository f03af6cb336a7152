//! Misusing `#[onnx_op]` is a compile error that points at the offending token.

#[test]
fn misuse_is_a_pointed_compile_error() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/*.rs");
}
