//! Boolean logic and bitwise integer ops.

use mlx_kernels::{ops, Array};

use crate::table::consts::scalar_like;
use crate::{onnx_op, Lower, OpError, Result};

/// Elementwise logical and, numpy broadcasting.
#[onnx_op(op = "And", since = 7, types(T = BOOL), inputs(A: T, B: T), outputs(C: T), shape = Shapeless)]
fn and(cx: &mut Lower, a: Array, b: Array) -> Result<Array> {
    Ok(ops::logical_and(&a, &b, cx.stream())?)
}

/// Elementwise logical or, numpy broadcasting.
#[onnx_op(op = "Or", since = 7, types(T = BOOL), inputs(A: T, B: T), outputs(C: T), shape = Shapeless)]
fn or(cx: &mut Lower, a: Array, b: Array) -> Result<Array> {
    Ok(ops::logical_or(&a, &b, cx.stream())?)
}

/// Elementwise logical exclusive or, numpy broadcasting.
#[onnx_op(op = "Xor", since = 7, types(T = BOOL), inputs(A: T, B: T), outputs(C: T), shape = Shapeless)]
fn xor(cx: &mut Lower, a: Array, b: Array) -> Result<Array> {
    Ok(ops::not_equal(&a, &b, cx.stream())?)
}

/// Elementwise logical negation.
#[onnx_op(op = "Not", since = 1, types(T = BOOL), inputs(X: T), outputs(Y: T), shape = Shapeless)]
fn not(cx: &mut Lower, x: Array) -> Result<Array> {
    Ok(ops::logical_not(&x, cx.stream())?)
}

/// Elementwise bitwise and of integers.
#[onnx_op(op = "BitwiseAnd", since = 18, types(T = INTEGER), inputs(A: T, B: T), outputs(C: T), shape = Shapeless)]
fn bitwise_and(cx: &mut Lower, a: Array, b: Array) -> Result<Array> {
    Ok(ops::bitwise_and(&a, &b, cx.stream())?)
}

/// Elementwise bitwise or of integers.
#[onnx_op(op = "BitwiseOr", since = 18, types(T = INTEGER), inputs(A: T, B: T), outputs(C: T), shape = Shapeless)]
fn bitwise_or(cx: &mut Lower, a: Array, b: Array) -> Result<Array> {
    Ok(ops::bitwise_or(&a, &b, cx.stream())?)
}

/// Elementwise bitwise exclusive or of integers.
#[onnx_op(op = "BitwiseXor", since = 18, types(T = INTEGER), inputs(A: T, B: T), outputs(C: T), shape = Shapeless)]
fn bitwise_xor(cx: &mut Lower, a: Array, b: Array) -> Result<Array> {
    Ok(ops::bitwise_xor(&a, &b, cx.stream())?)
}

/// Elementwise bitwise complement of integers.
#[onnx_op(op = "BitwiseNot", since = 18, types(T = INTEGER), inputs(X: T), outputs(Y: T), shape = Shapeless)]
fn bitwise_not(cx: &mut Lower, x: Array) -> Result<Array> {
    Ok(ops::bitwise_invert(&x, cx.stream())?)
}

/// Logical shift of unsigned integers; shifting by the bit width or more gives 0.
#[onnx_op(
    op = "BitShift", since = 11, types(T = UINT), inputs(X: T, Y: T), outputs(Z: T), shape = Shapeless,
    claim = bit_shift_claim, declines = "direction other than LEFT or RIGHT"
)]
fn bit_shift(cx: &mut Lower, x: Array, y: Array, #[attr] direction: String) -> Result<Array> {
    let s = cx.stream();
    let width = scalar_like((x.dtype().size_in_bytes() * 8) as f64, &y, s)?;
    let shifted = match direction.as_str() {
        "LEFT" => ops::left_shift(&x, &y, s)?,
        "RIGHT" => ops::right_shift(&x, &y, s)?,
        other => {
            return Err(OpError::new(format!(
                "direction must be LEFT or RIGHT, not {other:?}"
            )))
        }
    };
    // C leaves over-wide shifts undefined; a shift past the width moves every bit out.
    let too_far = ops::greater_equal(&y, &width, s)?;
    let zero = scalar_like(0.0, &shifted, s)?;
    Ok(ops::where_(&too_far, &zero, &shifted, s)?)
}

fn bit_shift_claim(node: &crate::Node) -> crate::Verdict {
    // A required attribute: the generic claim has declined a node without it.
    match node.attr_or("direction", String::new()).as_str() {
        "LEFT" | "RIGHT" => crate::Verdict::Claim,
        other => crate::Verdict::decline(format!("direction {other:?} is neither LEFT nor RIGHT")),
    }
}

#[cfg(test)]
mod tests {
    use mlx_kernels::Array;

    use crate::table::testing::{node, run1, stream};
    use crate::{AttrValue, ElemType};

    #[test]
    fn bit_shift_past_the_width_is_zero() {
        let x = Array::from_slice(&[1u8, 128, 255, 16], &[4]).unwrap();
        let y = Array::from_slice(&[3u8, 1, 8, 9], &[4]).unwrap();
        let s = stream();
        let shift = |direction: &str| {
            node(
                "BitShift",
                11,
                &[ElemType::Uint8, ElemType::Uint8],
                ElemType::Uint8,
            )
            .attr("direction", AttrValue::String(direction.into()))
        };
        assert_eq!(
            run1(&shift("LEFT"), &[Some(x.clone()), Some(y.clone())])
                .to_vec::<u8>(&s)
                .unwrap(),
            vec![8, 0, 0, 0]
        );
        assert_eq!(
            run1(&shift("RIGHT"), &[Some(x), Some(y)])
                .to_vec::<u8>(&s)
                .unwrap(),
            vec![0, 64, 0, 0]
        );
    }

    #[test]
    fn not_and_bitwise_not_invert_every_bit() {
        let s = stream();
        let not = run1(
            &node("Not", 1, &[ElemType::Bool], ElemType::Bool),
            &[Some(Array::from_slice(&[true, false], &[2]).unwrap())],
        );
        assert_eq!(not.to_vec::<bool>(&s).unwrap(), vec![false, true]);
        let inv = run1(
            &node("BitwiseNot", 18, &[ElemType::Int8], ElemType::Int8),
            &[Some(Array::from_slice(&[0i8, -1, 5], &[3]).unwrap())],
        );
        assert_eq!(inv.to_vec::<i8>(&s).unwrap(), vec![-1, 0, -6]);
    }
}
