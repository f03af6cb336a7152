//! Type conversion and identity.

use mlx_kernels::{ops, Array, Dtype, Stream};

use crate::table::consts::scalar;
use crate::{onnx_op, Lower, Result};

/// Converts to the type named by `to`: floats to integers truncate toward zero, saturating at
/// the integer type's range (NaN gives 0), anything to bool is `!= 0`. The output's declared type
/// is `to` (ONNX type inference guarantees it), so `to` itself is not read. `saturate` and
/// `round_mode` only concern float8/float4 targets, which are not claimed.
#[onnx_op(
    op = "Cast", since = 6, types(T1 = ANY, T2 = ANY), ignores(to: i64, saturate: i64, round_mode: String),
    inputs(input: T1), outputs(output: T2), shape = Shapeless
)]
fn cast(cx: &mut Lower, x: Array) -> Result<Array> {
    let target = cx.output_dtype(0)?;
    convert(&x, target, cx.stream())
}

/// Converts `input` to the element type of `target_type`.
#[onnx_op(
    op = "CastLike", since = 15, types(T1 = ANY, T2 = ANY), ignores(saturate: i64, round_mode: String),
    inputs(input: T1, target_type: T2), outputs(output: T2), shape = Shapeless
)]
fn cast_like(cx: &mut Lower, x: Array, target: Array) -> Result<Array> {
    convert(&x, target.dtype(), cx.stream())
}

/// `input`'s bits read as the output's element type, which has the same width (`to` is the
/// output's type, as for Cast). A view: NaN payloads and signed zeros pass unchanged.
#[onnx_op(
    op = "BitCast", since = 26, types(T1 = NUMERIC, T2 = NUMERIC), ignores(to: i64),
    inputs(input: T1), outputs(output: T2), shape = Shapeless, claim = same_width_claim,
    declines = "element types of different widths (ONNX requires equal ones)"
)]
fn bit_cast(cx: &mut Lower, x: Array) -> Result<Array> {
    Ok(ops::view(&x, cx.output_dtype(0)?, cx.stream())?)
}

/// A BitCast between types of one width.
fn same_width_claim(node: &crate::Node) -> crate::Verdict {
    let width = |t: Option<crate::ElemType>| {
        t.and_then(crate::ElemType::to_mlx)
            .map(Dtype::size_in_bytes)
    };
    match (width(node.input_type(0)), width(node.output_type(0))) {
        (Some(a), Some(b)) if a == b => crate::Verdict::Claim,
        (a, b) => crate::Verdict::decline(format!(
            "element widths {a:?} and {b:?} bytes: BitCast needs equal ones"
        )),
    }
}

/// `x` as `target`. A float out of an integer type's range (NaN, ±inf, 3e9 to int32) has no
/// defined conversion in ONNX or C++, and MLX's answer for it differed between an eager run and
/// a compiled one of the same session; the EP saturates, as Rust's `as` and ORT on ARM64 do:
/// NaN → 0, below the range → its minimum, above → its maximum.
fn convert(x: &Array, target: Dtype, s: &Stream) -> Result<Array> {
    let Some((min, max)) = integer_range(target).filter(|_| x.dtype().is_float()) else {
        return Ok(ops::astype(x, target, s)?);
    };
    // Compared in float32 (exact for the 16-bit floats); float64 stays float64.
    let wide = if x.dtype() == Dtype::F64 {
        Dtype::F64
    } else {
        Dtype::F32
    };
    let v = ops::astype(x, wide, s)?;
    // `max + 1` and `min` are powers of two (or 0), so exact in any float type.
    let below = ops::less(&v, &scalar(min, wide, s)?, s)?;
    let above = ops::greater_equal(&v, &scalar(max + 1.0, wide, s)?, s)?;
    let nan = ops::isnan(&v, s)?;
    let outside = ops::logical_or(&ops::logical_or(&below, &above, s)?, &nan, s)?;
    let inside = ops::where_(&outside, &scalar(0.0, wide, s)?, &v, s)?;
    let converted = ops::astype(&inside, target, s)?;
    let saturated = ops::where_(&below, &scalar(min, target, s)?, &converted, s)?;
    Ok(ops::where_(
        &above,
        &scalar(max, target, s)?,
        &saturated,
        s,
    )?)
}

/// An integer type's range, as floats (`max` rounded: only `max + 1` is used exactly).
fn integer_range(dtype: Dtype) -> Option<(f64, f64)> {
    let bits = (dtype.size_in_bytes() * 8) as i32;
    match dtype {
        Dtype::I8 | Dtype::I16 | Dtype::I32 | Dtype::I64 => {
            Some((-(2f64.powi(bits - 1)), 2f64.powi(bits - 1) - 1.0))
        }
        Dtype::U8 | Dtype::U16 | Dtype::U32 | Dtype::U64 => Some((0.0, 2f64.powi(bits) - 1.0)),
        _ => None,
    }
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

    #[test]
    fn floats_outside_an_integer_range_saturate_and_nan_is_zero() {
        let s = stream();
        let x = f32s(
            &[
                f32::NAN,
                f32::INFINITY,
                f32::NEG_INFINITY,
                3e9,
                -3e9,
                -2147483648.0,
                2.9,
            ],
            &[7],
        );
        let to = |elem| node("Cast", 13, &[ElemType::Float], elem);
        assert_eq!(
            run1(&to(ElemType::Int32), &[Some(x.clone())])
                .to_vec::<i32>(&s)
                .unwrap(),
            vec![0, i32::MAX, i32::MIN, i32::MAX, i32::MIN, i32::MIN, 2]
        );
        assert_eq!(
            run1(&to(ElemType::Uint8), &[Some(x.clone())])
                .to_vec::<u8>(&s)
                .unwrap(),
            vec![0, 255, 0, 255, 0, 0, 2]
        );
        assert_eq!(
            run1(&to(ElemType::Int64), &[Some(x)])
                .to_vec::<i64>(&s)
                .unwrap(),
            vec![
                0,
                i64::MAX,
                i64::MIN,
                3_000_000_000,
                -3_000_000_000,
                -2147483648,
                2
            ]
        );
    }

    #[test]
    fn bit_cast_reads_the_bits_and_declines_other_widths() {
        use crate::table::testing::{claimed, decline_reason};
        let s = stream();
        let to_i32 =
            node("BitCast", 26, &[ElemType::Float], ElemType::Int32).attr("to", AttrValue::Int(6));
        let x = f32s(&[1.0, -0.0, f32::from_bits(0x7fc0_0001)], &[3]);
        assert_eq!(
            run1(&to_i32, &[Some(x)]).to_vec::<i32>(&s).unwrap(),
            vec![0x3f80_0000, i32::MIN, 0x7fc0_0001]
        );
        let wider =
            node("BitCast", 26, &[ElemType::Float], ElemType::Int64).attr("to", AttrValue::Int(7));
        assert!(!claimed(&wider));
        assert!(decline_reason(&wider).contains("equal ones"));
    }
}
