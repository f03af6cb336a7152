use ops_macros::onnx_op;

#[onnx_op(op = "Concat", since = 13, types(T = FLOAT), inputs(inputs: T), outputs(concat_result: T),
          heterogeneous(input), shape = ShapeKeyed)]
fn concat(cx: &mut Lower, inputs: Vec<Array>) -> Result<Array> {
    todo!()
}

fn main() {}
