//! Type conversion and identity.

use mlx_kernels::{ops, Array, Dtype, Stream};

use crate::qdq::float8_grid;
use crate::table::consts::scalar;
use crate::{onnx_op, ElemType, Lower, OpError, Result};

/// Converts to the type named by `to`: floats to integers truncate toward zero, saturating at
/// the integer type's range (NaN gives 0), anything to bool is `!= 0`. The output's declared type
/// is `to` (ONNX type inference guarantees it), so `to` itself is not read. To a float8 type, the
/// value is rounded to nearest even on its grid, `saturate` (default 1) clamping what lies past
/// its largest finite value; to int4/uint4, as ORT 1.31.1 does, a float is rounded half away
/// from zero and every integer keeps its low four bits (NaN and ±inf give 0). Float8 and 4-bit
/// values travel in carriers that hold them exactly (DESIGN.md, narrow element types), so casts
/// from them convert the carrier. `round_mode` concerns float8e8m0 and float4, not claimed.
#[onnx_op(
    op = "Cast", precision = Float32, since = 6,
    types(T1 = ANY | since(19, FLOAT8) | since(21, I4 | U4), T2 = ANY | since(19, FLOAT8) | since(21, I4 | U4)),
    ignores(to: i64, round_mode: String),
    inputs(input: T1), outputs(output: T2), shape = Shapeless, claim = cast_claim,
    declines = "int2, uint2, float4e2m1 and float8e8m0 (no carrier), and float64 (in no general set); a to that is not the output's type; saturate other than 1 on a cast to anything but float8 (ORT refuses 0 and misreads the rest)"
)]
fn cast(cx: &mut Lower, x: Array, #[attr(default = 1, since = 19)] saturate: i64) -> Result<Array> {
    let node = cx.node();
    let to = node
        .output_type(0)
        .ok_or_else(|| OpError::new("the output's type is unknown"))?;
    convert_to(&x, to, saturate == 1, cx.stream())
}

/// The lowering converts to the output's type, ORT's kernel to `to`: they agree when `to` names
/// the output's type. A `to` that names no type (0, which type inference lets through when the
/// graph declares the output's type) makes ORT's Cast fail, so such a node is left to it.
fn cast_claim(node: &crate::Node) -> crate::Verdict {
    to_mismatch(node).unwrap_or_else(|| saturate_claim(node))
}

/// The decline of a node whose `to` does not name its output's type (Cast and BitCast lower to
/// the output's type; ORT's kernels read `to`).
fn to_mismatch(node: &crate::Node) -> Option<crate::Verdict> {
    let to = node.attr_or("to", 0i64);
    (!node.names_output_type(to))
        .then(|| crate::Verdict::decline(format!("to {to} does not name the output's type")))
}

/// `saturate` other than its default (1) is for float8 targets: ORT's Cast refuses 0 for any
/// other target and answers from an uninitialised buffer for other values (2, -1) to integers
/// and bool. Such a node is left to it.
fn saturate_claim(node: &crate::Node) -> crate::Verdict {
    let target = node.output_type(0);
    let float8 = target.is_some_and(|t| crate::dtypes::FLOAT8.contains(t));
    let saturate = node.attr_or("saturate", 1i64);
    if saturate != 1 && !float8 {
        return crate::Verdict::decline(format!(
            "saturate = {saturate} on a cast to {}: ORT's Cast takes it only for float8 targets",
            target.map_or("?", ElemType::short_name)
        ));
    }
    crate::Verdict::Claim
}

/// Converts `input` to the element type of `target_type` (as Cast, `saturate` included).
#[onnx_op(
    op = "CastLike", precision = Float32, since = 15,
    types(T1 = ANY | since(19, FLOAT8) | since(21, I4 | U4), T2 = ANY | since(19, FLOAT8) | since(21, I4 | U4)),
    ignores(round_mode: String),
    inputs(input: T1, target_type: T2), outputs(output: T2), shape = Shapeless, claim = saturate_claim,
    declines = "int2, uint2, float4e2m1 and float8e8m0 (no carrier), and float64 (in no general set); saturate other than 1 on a cast to anything but float8 (ORT refuses 0 and misreads the rest)"
)]
fn cast_like(
    cx: &mut Lower,
    x: Array,
    target: Array,
    #[attr(default = 1, since = 19)] saturate: i64,
) -> Result<Array> {
    let _ = target; // only its type matters: the node says it
    let node = cx.node();
    let to = node
        .input_type(1)
        .ok_or_else(|| OpError::new("target_type's type is unknown"))?;
    convert_to(&x, to, saturate == 1, cx.stream())
}

/// `x` (its own type, or a narrow type's carrier) as element type `to`, in `to`'s carrier when
/// it is narrow.
fn convert_to(x: &Array, to: ElemType, saturate: bool, s: &Stream) -> Result<Array> {
    if crate::dtypes::FLOAT8.contains(to) {
        return float8_grid(&ops::astype(x, Dtype::F32, s)?, to, saturate, s);
    }
    if matches!(to, ElemType::Int4 | ElemType::Uint4) {
        return low_nibble(x, to == ElemType::Int4, s);
    }
    let target = to
        .to_mlx()
        .ok_or_else(|| OpError::new(format!("no MLX type for {}", to.onnx_name())))?;
    convert(x, target, s)
}

/// ORT's cast to int4/uint4: floats rounded half away from zero, then the low four bits of the
/// integer (two's complement for int4). Floats past 2^31 are multiples of 16 and NaN and ±inf
/// give 0, as on x86 (whose conversion makes them INT32_MIN, low bits 0).
fn low_nibble(x: &Array, signed: bool, s: &Stream) -> Result<Array> {
    let whole = if x.dtype().is_float() {
        let v = ops::astype(x, Dtype::F32, s)?;
        let f = |value: f64| scalar(value, Dtype::F32, s);
        let truncated = ops::trunc(&v, s)?;
        let away = ops::greater_equal(
            &ops::abs(&ops::subtract(&v, &truncated, s)?, s)?,
            &f(0.5)?,
            s,
        )?;
        let rounded = ops::where_(
            &away,
            &ops::add(&truncated, &ops::sign(&v, s)?, s)?,
            &truncated,
            s,
        )?;
        let small = ops::less(&ops::abs(&rounded, s)?, &f(2f64.powi(31))?, s)?;
        ops::astype(&ops::where_(&small, &rounded, &f(0.0)?, s)?, Dtype::I64, s)?
    } else {
        ops::astype(x, Dtype::I64, s)?
    };
    let i64s = |value: f64| scalar(value, Dtype::I64, s);
    let mut nibble = ops::bitwise_and(&whole, &i64s(15.0)?, s)?;
    if signed {
        let high = ops::greater_equal(&nibble, &i64s(8.0)?, s)?;
        nibble = ops::where_(&high, &ops::subtract(&nibble, &i64s(16.0)?, s)?, &nibble, s)?;
    }
    Ok(ops::astype(
        &nibble,
        if signed { Dtype::I8 } else { Dtype::U8 },
        s,
    )?)
}

/// `input`'s bits read as the output's element type, which has the same width (`to` is the
/// output's type, as for Cast). A view: NaN payloads and signed zeros pass unchanged.
#[onnx_op(
    op = "BitCast", precision = Float32, since = 26, types(T1 = NUMERIC, T2 = NUMERIC), ignores(to: i64),
    inputs(input: T1), outputs(output: T2), shape = Shapeless, claim = same_width_claim,
    declines = "element types of different widths (ONNX requires equal ones); a to that is not the output's type"
)]
fn bit_cast(cx: &mut Lower, x: Array) -> Result<Array> {
    Ok(ops::view(&x, cx.output_dtype(0)?, cx.stream())?)
}

/// A BitCast between types of one width, whose `to` names the output's type (ORT fails on a
/// `to` that names no type, 0 for one).
fn same_width_claim(node: &crate::Node) -> crate::Verdict {
    if let Some(declined) = to_mismatch(node) {
        return declined;
    }
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

    use crate::table::testing::{claimed, decline_reason, f32s, node, run1, stream, values_f32};
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
        let to = |elem: ElemType| {
            node("Cast", 13, &[ElemType::Float], elem).attr("to", AttrValue::Int(elem as i64))
        };
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

    #[test]
    fn four_bit_targets_keep_the_low_bits_of_the_value_rounded_half_away() {
        let s = stream();
        let x = f32s(
            &[
                -10.0,
                -8.5,
                -7.5,
                -0.5,
                2.5,
                7.5,
                100.0,
                f32::NAN,
                f32::INFINITY,
                3e9,
            ],
            &[10],
        );
        let to_i4 =
            node("Cast", 21, &[ElemType::Float], ElemType::Int4).attr("to", AttrValue::Int(22));
        assert_eq!(
            run1(&to_i4, &[Some(x.clone())]).to_vec::<i8>(&s).unwrap(),
            vec![6, 7, -8, -1, 3, -8, 4, 0, 0, 0]
        );
        let to_u4 =
            node("Cast", 21, &[ElemType::Float], ElemType::Uint4).attr("to", AttrValue::Int(21));
        assert_eq!(
            run1(&to_u4, &[Some(x)]).to_vec::<u8>(&s).unwrap(),
            vec![6, 7, 8, 15, 3, 8, 4, 0, 0, 0]
        );
    }

    #[test]
    fn float8_targets_saturate_unless_told_not_to_and_saturate_elsewhere_is_declined() {
        let s = stream();
        let x = f32s(&[1000.0, -17.0, 0.1], &[3]);
        let to_f8 = |saturate: i64| {
            node("Cast", 19, &[ElemType::Float], ElemType::Float8E4M3FN)
                .attr("to", AttrValue::Int(17))
                .attr("saturate", AttrValue::Int(saturate))
        };
        let held = |n: &crate::Node| {
            values_f32(&ops::astype(&run1(n, &[Some(x.clone())]), Dtype::F32, &s).unwrap())
        };
        // On e4m3's grid -17 ties to even (-16) and 0.1 is 0.1015625; 1000 saturates or is NaN.
        assert_eq!(held(&to_f8(1)), vec![448.0, -16.0, 0.1015625]);
        assert!(held(&to_f8(0))[0].is_nan());
        assert!(held(&to_f8(2))[0].is_nan());
        let to_i32 = node("Cast", 19, &[ElemType::Float], ElemType::Int32)
            .attr("to", AttrValue::Int(6))
            .attr("saturate", AttrValue::Int(0));
        assert!(!claimed(&to_i32));
        assert!(decline_reason(&to_i32).contains("float8"));
    }

    #[test]
    fn a_to_that_is_not_the_output_type_is_declined() {
        for to in [0, 6, 99] {
            let cast = node("Cast", 13, &[ElemType::Uint8], ElemType::Float)
                .attr("to", AttrValue::Int(to));
            assert!(decline_reason(&cast).contains(&format!("to {to} does not name")));
        }
        let cast =
            node("Cast", 13, &[ElemType::Uint8], ElemType::Float).attr("to", AttrValue::Int(1));
        assert!(claimed(&cast));
    }
}
