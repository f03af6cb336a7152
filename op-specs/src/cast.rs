//! Type conversion and identity.

use mlx_kernels::{ops, Array};

use crate::{onnx_op, Lower, Result};

/// Converts to the type named by `to`: floats to integers truncate toward zero, anything to
/// bool is `!= 0`. The output's declared type is `to` (ONNX type inference guarantees it), so
/// `to` itself is not read. `saturate` and `round_mode` only concern float8/float4 targets, which
/// are not claimed.
#[onnx_op(
    op = "Cast", since = 6, types(T1 = ANY, T2 = ANY), ignores(to: i64, saturate: i64, round_mode: String),
    inputs(input: T1), outputs(output: T2), shape = Shapeless
)]
fn cast(cx: &mut Lower, x: Array) -> Result<Array> {
    let target = cx.output_dtype(0)?;
    Ok(ops::astype(&x, target, cx.stream())?)
}

/// Converts `input` to the element type of `target_type`.
#[onnx_op(
    op = "CastLike", since = 15, types(T1 = ANY, T2 = ANY), ignores(saturate: i64, round_mode: String),
    inputs(input: T1, target_type: T2), outputs(output: T2), shape = Shapeless
)]
fn cast_like(cx: &mut Lower, x: Array, target: Array) -> Result<Array> {
    Ok(ops::astype(&x, target.dtype(), cx.stream())?)
}

/// The input, unchanged.
#[onnx_op(op = "Identity", since = 1, types(T = ANY), inputs(input: T), outputs(output: T), shape = Shapeless)]
fn identity(_cx: &mut Lower, x: Array) -> Result<Array> {
    Ok(x)
}

#[cfg(test)]
mod tests {
    use mlx_kernels::{ops, Array, Dtype};

    use crate::table::testing::{f32s, node, run1, stream, values_f32};
    use crate::{AttrValue, ElemType};

    #[test]
    fn cast_truncates_floats_and_rounds_to_half_types() {
        let s = stream();
        let x = f32s(&[2.7, -2.7, 0.0, 1e-3, 65519.0], &[5]);
        let to_i32 =
            node("Cast", 13, &[ElemType::Float], ElemType::Int32).attr("to", AttrValue::Int(6));
        assert_eq!(
            run1(&to_i32, &[Some(x.clone())]).to_vec::<i32>(&s).unwrap(),
            vec![2, -2, 0, 0, 65519]
        );
        let to_bool =
            node("Cast", 13, &[ElemType::Float], ElemType::Bool).attr("to", AttrValue::Int(9));
        assert_eq!(
            run1(&to_bool, &[Some(x.clone())])
                .to_vec::<bool>(&s)
                .unwrap(),
            vec![true, true, false, true, true]
        );
        let to_f16 =
            node("Cast", 19, &[ElemType::Float], ElemType::Float16).attr("to", AttrValue::Int(10));
        let half = run1(&to_f16, &[Some(x)]);
        assert_eq!(half.dtype(), Dtype::F16);
        // 65519 rounds to the largest half (65504); 1e-3 to the nearest half, 1049 · 2^-20.
        let held = values_f32(&ops::astype(&half, Dtype::F32, &s).unwrap());
        assert_eq!(held[4], 65504.0);
        assert_eq!(held[3], 1049.0 / 1_048_576.0);
        let like = node(
            "CastLike",
            15,
            &[ElemType::Int64, ElemType::Float],
            ElemType::Float,
        );
        let ints = Array::from_slice(&[3i64, -4], &[2]).unwrap();
        let target = f32s(&[0.0], &[1]);
        assert_eq!(
            values_f32(&run1(&like, &[Some(ints), Some(target)])),
            vec![3.0, -4.0]
        );
    }
}
