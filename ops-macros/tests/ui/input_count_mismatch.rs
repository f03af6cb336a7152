use ops_macros::onnx_op;

#[onnx_op(op = "Add", since = 7, types(T = FLOAT), inputs(A: T, B: T), outputs(C: T), shape = Shapeless)]
fn add(cx: &mut Lower, a: Array) -> Result<Array> {
    todo!()
}

fn main() {}
