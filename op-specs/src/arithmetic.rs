//! Elementwise arithmetic with numpy broadcasting: Add, Sub, Mul, Div, Pow, Mod and the
//! variadic Max, Min, Sum, Mean.

use mlx_kernels::{ops, Array, Stream};

use crate::table::consts::{scalar, scalar_like};
use crate::{onnx_op, Lower, Result};

/// Elementwise sum with numpy broadcasting (integers wrap).
#[onnx_op(op = "Add", since = 7, types(T = NUMERIC), inputs(A: T, B: T), outputs(C: T), shape = Shapeless)]
fn add(cx: &mut Lower, a: Array, b: Array) -> Result<Array> {
    Ok(ops::add(&a, &b, cx.stream())?)
}

/// Elementwise difference with numpy broadcasting (integers wrap).
#[onnx_op(op = "Sub", since = 7, types(T = NUMERIC), inputs(A: T, B: T), outputs(C: T), shape = Shapeless)]
fn sub(cx: &mut Lower, a: Array, b: Array) -> Result<Array> {
    Ok(ops::subtract(&a, &b, cx.stream())?)
}

/// Elementwise product with numpy broadcasting (integers wrap).
#[onnx_op(op = "Mul", since = 7, types(T = NUMERIC), inputs(A: T, B: T), outputs(C: T), shape = Shapeless)]
fn mul(cx: &mut Lower, a: Array, b: Array) -> Result<Array> {
    Ok(ops::multiply(&a, &b, cx.stream())?)
}

/// Elementwise quotient. Integers divide truncating toward zero, as C (and ORT) do; an integer
/// division by zero gives 0 instead of trapping the process.
#[onnx_op(op = "Div", since = 7, types(T = NUMERIC), inputs(A: T, B: T), outputs(C: T), shape = Shapeless)]
fn div(cx: &mut Lower, a: Array, b: Array) -> Result<Array> {
    let s = cx.stream();
    if a.dtype().is_float() {
        return Ok(ops::divide(&a, &b, s)?);
    }
    truncating_int_division(&a, &b, s)
}

/// `a / b` rounded toward zero for integer arrays, never trapping: zero divisors give 0, and
/// `MIN / -1` wraps like two's complement.
fn truncating_int_division(a: &Array, b: &Array, s: &Stream) -> Result<Array> {
    let zero = scalar_like(0.0, b, s)?;
    let one = scalar_like(1.0, b, s)?;
    let divisor_is_zero = ops::equal(b, &zero, s)?;
    let safe_b = ops::where_(&divisor_is_zero, &one, b, s)?;
    let floor = ops::floor_divide(a, &safe_b, s)?;
    let rest = ops::remainder(a, &safe_b, s)?;
    // Floor and trunc differ by one when the division is inexact and the signs differ.
    let inexact = ops::not_equal(&rest, &zero, s)?;
    let signs_differ = ops::not_equal(&ops::less(a, &zero, s)?, &ops::less(&safe_b, &zero, s)?, s)?;
    let adjust = ops::logical_and(&inexact, &signs_differ, s)?;
    let trunc = ops::where_(&adjust, &ops::add(&floor, &one, s)?, &floor, s)?;
    Ok(ops::where_(
        &divisor_is_zero,
        &scalar_like(0.0, &trunc, s)?,
        &trunc,
        s,
    )?)
}

/// Elementwise power. The exponent is converted to the base's type when both are floats;
/// mixed integer/float operands are declined (ORT's type rules for them are not MLX's).
#[onnx_op(
    op = "Pow", since = 7, types(T = FLOAT | I32 | I64, T1 = FLOAT | I32 | I64),
    inputs(X: T, Y: T1), outputs(Z: T), shape = Shapeless, claim = pow_claim,
    declines = "an exponent type different from the base's, unless both are floats"
)]
fn pow(cx: &mut Lower, x: Array, y: Array) -> Result<Array> {
    let s = cx.stream();
    let y = if y.dtype() == x.dtype() {
        y
    } else {
        ops::astype(&y, x.dtype(), s)?
    };
    Ok(ops::power(&x, &y, s)?)
}

fn pow_claim(node: &dyn crate::NodeView) -> crate::Verdict {
    match (node.input_type(0), node.input_type(1)) {
        (Some(x), Some(y)) if x == y => crate::Verdict::Claim,
        (Some(x), Some(y)) if is_float(x) && is_float(y) => crate::Verdict::Claim,
        (x, y) => crate::Verdict::decline(format!(
            "base {} with exponent {}: only equal types or two floats",
            x.map_or("?", |t| t.short_name()),
            y.map_or("?", |t| t.short_name())
        )),
    }
}

fn is_float(t: crate::ElemType) -> bool {
    crate::dtypes::FLOAT.contains(t)
}

/// Elementwise remainder. `fmod = 0` (integers only): the result takes the divisor's sign, as
/// Python's `%`; `fmod = 1`: C's `fmod`, the dividend's sign. Integer remainder by zero gives 0.
#[onnx_op(
    op = "Mod", since = 10, types(T = NUMERIC), inputs(A: T, B: T), outputs(C: T),
    shape = Shapeless, claim = mod_claim, declines = "fmod=0 on floats (invalid in ONNX)"
)]
fn modulo(cx: &mut Lower, a: Array, b: Array, #[attr(default = 0)] fmod: i64) -> Result<Array> {
    let s = cx.stream();
    let zero = scalar_like(0.0, &b, s)?;
    let divisor_is_zero = ops::equal(&b, &zero, s)?;
    let safe_b = if b.dtype().is_float() {
        b.clone()
    } else {
        ops::where_(&divisor_is_zero, &scalar_like(1.0, &b, s)?, &b, s)?
    };
    // MLX's remainder has Python semantics (sign of the divisor).
    let python = ops::remainder(&a, &safe_b, s)?;
    let result = if fmod == 0 {
        python
    } else {
        // C fmod: shift by one divisor when the Python result's sign disagrees with the dividend.
        let nonzero = ops::not_equal(&python, &zero, s)?;
        let signs_differ =
            ops::not_equal(&ops::less(&python, &zero, s)?, &ops::less(&a, &zero, s)?, s)?;
        let shift = ops::logical_and(&nonzero, &signs_differ, s)?;
        ops::where_(&shift, &ops::subtract(&python, &safe_b, s)?, &python, s)?
    };
    if b.dtype().is_float() {
        return Ok(result);
    }
    Ok(ops::where_(
        &divisor_is_zero,
        &scalar_like(0.0, &result, s)?,
        &result,
        s,
    )?)
}

fn mod_claim(node: &dyn crate::NodeView) -> crate::Verdict {
    let fmod = matches!(node.attribute("fmod"), Some(crate::AttrValue::Int(1)));
    match node.input_type(0) {
        Some(t) if is_float(t) && !fmod => {
            crate::Verdict::decline("fmod=0 is invalid for floating-point inputs")
        }
        _ => crate::Verdict::Claim,
    }
}

/// Folds variadic inputs pairwise (numpy broadcasting across all of them).
fn fold(
    inputs: Vec<Array>,
    s: &Stream,
    f: fn(&Array, &Array, &Stream) -> mlx_kernels::Result<Array>,
) -> Result<Array> {
    let mut iter = inputs.into_iter();
    let first = iter
        .next()
        .ok_or_else(|| crate::OpError::new("needs at least one input"))?;
    iter.try_fold(first, |acc, x| Ok(f(&acc, &x, s)?))
}

/// Elementwise maximum of all inputs (NaN propagates).
#[onnx_op(op = "Max", since = 6, types(T = NUMERIC), inputs(data_0: T), outputs(max: T), shape = Shapeless)]
fn max(cx: &mut Lower, data: Vec<Array>) -> Result<Array> {
    fold(data, cx.stream(), ops::maximum)
}

/// Elementwise minimum of all inputs (NaN propagates).
#[onnx_op(op = "Min", since = 6, types(T = NUMERIC), inputs(data_0: T), outputs(min: T), shape = Shapeless)]
fn min(cx: &mut Lower, data: Vec<Array>) -> Result<Array> {
    fold(data, cx.stream(), ops::minimum)
}

/// Elementwise sum of all inputs.
#[onnx_op(op = "Sum", since = 6, types(T = FLOAT), inputs(data_0: T), outputs(sum: T), shape = Shapeless)]
fn sum(cx: &mut Lower, data: Vec<Array>) -> Result<Array> {
    fold(data, cx.stream(), ops::add)
}

/// Elementwise mean of all inputs.
#[onnx_op(op = "Mean", since = 6, types(T = FLOAT), inputs(data_0: T), outputs(mean: T), shape = Shapeless)]
fn mean(cx: &mut Lower, data: Vec<Array>) -> Result<Array> {
    let s = cx.stream();
    let count = data.len() as f64;
    let total = fold(data, s, ops::add)?;
    Ok(ops::divide(&total, &scalar(count, total.dtype(), s)?, s)?)
}
