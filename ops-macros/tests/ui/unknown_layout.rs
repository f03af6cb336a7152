use ops_macros::onnx_op;

#[onnx_op(op = "Relu", since = 7, types(T = FLOAT), inputs(X: T), outputs(Y: T), shape = Shapeless, layout = Sideways)]
fn relu(cx: &mut Lower, x: Array) -> Result<Array> {
    todo!()
}

fn main() {}
