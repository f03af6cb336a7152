use ops_macros::onnx_op;

#[onnx_op(op = "Softmax", since = 13, types(T = FLOAT), inputs(X: T), outputs(Y: T), shape = Shapeless)]
fn softmax(cx: &mut Lower, x: Array, #[attr(default = 1)] axis: Option<i64>) -> Result<Array> {
    todo!()
}

fn main() {}
