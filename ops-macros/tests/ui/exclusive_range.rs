use ops_macros::onnx_op;

#[onnx_op(op = "Relu", opset = 6..13, types(T = FLOAT), inputs(X: T), outputs(Y: T), shape = Shapeless)]
fn relu(cx: &mut Lower, x: Array) -> Result<Array> {
    todo!()
}

fn main() {}
