use ops_macros::onnx_op;

#[onnx_op(op = "MaxPool", since = 8, types(T = FLOAT | from(12, I8)), inputs(X: T), outputs(Y: T), shape = ShapeKeyed)]
fn max_pool(cx: &mut Lower, x: Array) -> Result<Array> {
    todo!()
}

fn main() {}
