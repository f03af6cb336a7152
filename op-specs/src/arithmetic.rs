//! Elementwise arithmetic with numpy broadcasting: Add, Sub, Mul, Div, Pow, Mod and the
//! variadic Max, Min, Sum, Mean.

use mlx_kernels::{ops, Array, Stream};

use crate::attention::formed;
use crate::linalg::biased;
use crate::normalization::residual;
use crate::table::consts::{scalar, scalar_like};
use crate::{onnx_op, Lower, Result};

/// Elementwise sum with numpy broadcasting (integers wrap).
#[onnx_op(op = "Add", since = 7, types(T = NUMERIC), inputs(A: T, B: T), outputs(C: T), layout = Elementwise, shape = Shapeless)]
fn add(cx: &mut Lower, a: Array, b: Array) -> Result<Array> {
    let biased = biased::biased_product(cx, &a, &b).or_else(|| biased::biased_product(cx, &b, &a));
    if let Some(y) = biased {
        return Ok(y);
    }
    let y = ops::add(&a, &b, cx.stream())?;
    formed::note_masked(cx, &a, &b, &y);
    formed::note_masked(cx, &b, &a, &y);
    residual::note_sum(cx, &a, &b, &y);
    Ok(y)
}

/// Elementwise difference with numpy broadcasting (integers wrap).
#[onnx_op(op = "Sub", since = 7, types(T = NUMERIC), inputs(A: T, B: T), outputs(C: T), layout = Elementwise, shape = Shapeless)]
fn sub(cx: &mut Lower, a: Array, b: Array) -> Result<Array> {
    Ok(ops::subtract(&a, &b, cx.stream())?)
}

/// Elementwise product with numpy broadcasting (integers wrap).
#[onnx_op(op = "Mul", since = 7, types(T = NUMERIC), inputs(A: T, B: T), outputs(C: T), layout = Elementwise, shape = Shapeless)]
fn mul(cx: &mut Lower, a: Array, b: Array) -> Result<Array> {
    let y = ops::multiply(&a, &b, cx.stream())?;
    formed::note_scaled(cx, &a, &b, 1, false, &y);
    formed::note_scaled(cx, &b, &a, 0, false, &y);
    Ok(y)
}

/// Elementwise quotient. Integers divide truncating toward zero, as C (and ORT) do; an integer
/// division by zero fails the run (as in ORT's CPU EP), and `MIN / -1` wraps.
#[onnx_op(op = "Div", since = 7, types(T = NUMERIC), inputs(A: T, B: T), outputs(C: T), layout = Elementwise, shape = Shapeless)]
fn div(cx: &mut Lower, a: Array, b: Array) -> Result<Array> {
    let s = cx.stream();
    if a.dtype().is_float() {
        let y = ops::divide(&a, &b, s)?;
        formed::note_scaled(cx, &a, &b, 1, true, &y);
        return Ok(y);
    }
    let divisor = SafeDivisor::new(cx, &b, "integer division by zero")?;
    let quotient = divisor.truncating_quotient(&a, s)?;
    // x / -1 = -x (wrapping at MIN), computed only for signed types.
    let negated = match divisor.is_minus_one {
        Some(_) => Some(ops::negative(&a, s)?),
        None => None,
    };
    divisor.patch(quotient, negated.as_ref(), s)
}

/// An integer divisor with the two values that trap in C replaced by 1: zero, and -1 (for
/// `MIN / -1`). A zero divisor fails the run (ORT's CPU EP raises on one); `patch` writes the
/// right answers back where the divisor was -1.
struct SafeDivisor {
    safe: Array,
    is_minus_one: Option<Array>,
}

impl SafeDivisor {
    fn new(cx: &mut Lower, b: &Array, zero_message: &str) -> Result<SafeDivisor> {
        let s = cx.stream();
        let is_zero = ops::equal(b, &scalar_like(0.0, b, s)?, s)?;
        // ORT's CPU EP checks every divisor, even where the broadcast result is empty.
        cx.require(&ops::logical_not(&is_zero, s)?, zero_message)?;
        let is_minus_one = match is_signed_int(b) {
            true => Some(ops::equal(b, &scalar_like(-1.0, b, s)?, s)?),
            false => None,
        };
        let trapping = match &is_minus_one {
            Some(m) => ops::logical_or(&is_zero, m, s)?,
            None => is_zero.clone(),
        };
        let safe = ops::where_(&trapping, &scalar_like(1.0, b, s)?, b, s)?;
        Ok(SafeDivisor { safe, is_minus_one })
    }

    /// `a / b` rounded toward zero (with `b` made safe).
    fn truncating_quotient(&self, a: &Array, s: &Stream) -> Result<Array> {
        let zero = scalar_like(0.0, a, s)?;
        let floor = ops::floor_divide(a, &self.safe, s)?;
        let rest = ops::remainder(a, &self.safe, s)?;
        // Floor and trunc differ by one when the division is inexact and the signs differ.
        let inexact = ops::not_equal(&rest, &zero, s)?;
        let signs_differ = ops::not_equal(
            &ops::less(a, &zero, s)?,
            &ops::less(&self.safe, &zero, s)?,
            s,
        )?;
        let adjust = ops::logical_and(&inexact, &signs_differ, s)?;
        Ok(ops::where_(
            &adjust,
            &ops::add(&floor, &scalar_like(1.0, a, s)?, s)?,
            &floor,
            s,
        )?)
    }

    /// `when_minus_one` where the divisor was -1, `value` elsewhere.
    fn patch(&self, value: Array, when_minus_one: Option<&Array>, s: &Stream) -> Result<Array> {
        Ok(match (&self.is_minus_one, when_minus_one) {
            (Some(mask), Some(replacement)) => ops::where_(mask, replacement, &value, s)?,
            _ => value,
        })
    }
}

fn is_signed_int(a: &Array) -> bool {
    use mlx_kernels::Dtype::*;
    matches!(a.dtype(), I8 | I16 | I32 | I64)
}

/// Elementwise power. Two floats of different types, or 16-bit ones, are raised in float32
/// and rounded to the base's type; a float32 base takes an int32 or int64 exponent; an integer
/// base with a float exponent is declined (ORT raises it in double).
#[onnx_op(
    op = "Pow", since = 7, types(T = FLOAT | I32 | I64, T1 = FLOAT | I32 | I64),
    inputs(X: T, Y: T1), outputs(Z: T), shape = Shapeless, claim = pow_claim,
    declines = "an exponent type different from the base's, unless both are floats or the base is float32 and the exponent an integer; an int64 base (ORT raises it through double)"
)]
fn pow(cx: &mut Lower, x: Array, y: Array) -> Result<Array> {
    let s = cx.stream();
    if x.dtype() == mlx_kernels::Dtype::I32 {
        return int32_pow(&x, &y, s);
    }
    use mlx_kernels::Dtype::{BF16, F16, F32};
    if x.dtype() == F32 && !y.dtype().is_float() {
        return float_int_pow(&x, &y, s);
    }
    if x.dtype() != y.dtype() || matches!(x.dtype(), F16 | BF16) {
        // Two floats (the claim), at least one 16-bit: raised in float32, into which both
        // widen exactly, and rounded once, as ORT's std::pow evaluates in the wider type.
        // Rounding the exponent to the base's type first is off by far more than the
        // result's rounding: a float16 1.666015625 is 1.6640625 in bfloat16, which moved
        // 65536^y by 2.5%, and -1e-45 (float32) became -0 (bfloat16), so (-inf)^y gave 1.
        let power = ops::power(&ops::astype(&x, F32, s)?, &ops::astype(&y, F32, s)?, s)?;
        return Ok(ops::astype(&power, x.dtype(), s)?);
    }
    Ok(ops::power(&x, &y, s)?)
}

/// ORT's float32 power by an integer, `(float)std::pow((double)x, (double)y)`: |x| raised in
/// float32 (the rounded exponent moves the result by an ulp at most where it is finite), the
/// sign from the exponent's parity, read from the integer itself because float32 rounds odd
/// exponents past 2^24 to even ones. Past 2^53 the double ORT raises by is even, so those
/// exponents count as even here too.
fn float_int_pow(x: &Array, y: &Array, s: &Stream) -> Result<Array> {
    let zero = scalar_like(0.0, x, s)?;
    let magnitude = ops::power(
        &ops::abs(x, s)?,
        &ops::astype(y, mlx_kernels::Dtype::F32, s)?,
        s,
    )?;
    let ones_bit = ops::bitwise_and(y, &scalar_like(1.0, y, s)?, s)?;
    let mut odd = ops::not_equal(&ones_bit, &scalar_like(0.0, y, s)?, s)?;
    if y.dtype() == mlx_kernels::Dtype::I64 {
        let exact_in_double = ops::less(&ops::abs(y, s)?, &scalar_like(2f64.powi(53), y, s)?, s)?;
        odd = ops::logical_and(&odd, &exact_in_double, s)?;
    }
    // The sign bit, -0.0 included (1 / -0.0 is -inf): (-0)^-3 is -inf.
    let negative = ops::logical_or(
        &ops::less(x, &zero, s)?,
        &ops::logical_and(
            &ops::equal(x, &zero, s)?,
            &ops::less(&ops::reciprocal(x, s)?, &zero, s)?,
            s,
        )?,
        s,
    )?;
    let flip = ops::logical_and(&negative, &odd, s)?;
    Ok(ops::where_(
        &flip,
        &ops::negative(&magnitude, s)?,
        &magnitude,
        s,
    )?)
}

/// ORT's int32 power, `(int32_t)std::pow((double)x, (double)y)`: truncated toward zero (2^-1
/// is 0, (-1)^-3 is -1), and INT32_MIN, x86's answer to an out-of-range conversion, where the
/// power leaves the int32 range or is infinite (0^-1); but see the shortcut below. Exact powers in int64 stand in for the
/// double ones (exact below 2^53); a float32 estimate keeps the int64 power from wrapping.
fn int32_pow(x: &Array, y: &Array, s: &Stream) -> Result<Array> {
    use mlx_kernels::Dtype::{F32, I32, I64};
    let k = |v: f64| scalar(v, I64, s);
    let (xw, yw) = (ops::astype(x, I64, s)?, ops::astype(y, I64, s)?);
    let positive_y = ops::maximum(&yw, &k(0.0)?, s)?;
    let estimate = ops::exp(
        &ops::multiply(
            &ops::astype(&positive_y, F32, s)?,
            &ops::log(&ops::abs(&ops::astype(&xw, F32, s)?, s)?, s)?,
            s,
        )?,
        s,
    )?;
    let huge = ops::greater(&estimate, &scalar(2f64.powi(40), F32, s)?, s)?;
    let exact = ops::power(&ops::where_(&huge, &k(1.0)?, &xw, s)?, &positive_y, s)?;
    // A negative exponent leaves only ±1 (by parity), an infinity (base 0) or a fraction (0).
    let unit = ops::equal(&ops::abs(&xw, s)?, &k(1.0)?, s)?;
    let unit_power = ops::power(
        &ops::where_(&unit, &xw, &k(1.0)?, s)?,
        &ops::abs(&yw, s)?,
        s,
    )?;
    let negative_y = ops::less(&yw, &k(0.0)?, s)?;
    let value = ops::where_(
        &negative_y,
        &ops::where_(&unit, &unit_power, &k(0.0)?, s)?,
        &exact,
        s,
    )?;
    let out_of_range = ops::logical_or(
        &ops::less(&value, &k(i32::MIN.into())?, s)?,
        &ops::greater(&value, &k(i32::MAX.into())?, s)?,
        s,
    )?;
    let infinite = ops::logical_and(&negative_y, &ops::equal(&xw, &k(0.0)?, s)?, s)?;
    let invalid = ops::logical_or(&ops::logical_or(&huge, &out_of_range, s)?, &infinite, s)?;
    let result = ops::astype(
        &ops::where_(&invalid, &k(i32::MIN.into())?, &value, s)?,
        I32,
        s,
    )?;
    if y.size() != 1 || x.size() == 1 {
        return Ok(result);
    }
    // A one-element exponent of 2 or 3 takes ORT's shortcut, `x * x` or `x * x * x` in int32,
    // which wraps instead.
    let square = ops::multiply(x, x, s)?;
    let cube = ops::multiply(&square, x, s)?;
    let exponent = |v: f64| -> Result<Array> { Ok(ops::equal(&yw, &k(v)?, s)?) };
    Ok(ops::where_(
        &exponent(2.0)?,
        &square,
        &ops::where_(&exponent(3.0)?, &cube, &result, s)?,
        s,
    )?)
}

fn pow_claim(node: &crate::Node) -> crate::Verdict {
    match (node.input_type(0), node.input_type(1)) {
        (Some(crate::ElemType::Int64), _) => crate::Verdict::decline(
            "an int64 base: ORT's CPU EP raises int64 through double (inexact past 2^53, \
             INT64_MIN past the range), which MLX's exact int64 power cannot match",
        ),
        (Some(x), Some(y)) if x == y => crate::Verdict::Claim,
        (Some(x), Some(y)) if is_float(x) && is_float(y) => crate::Verdict::Claim,
        (Some(crate::ElemType::Float), Some(crate::ElemType::Int32 | crate::ElemType::Int64)) => {
            crate::Verdict::Claim
        }
        (Some(crate::ElemType::Int32), Some(y)) if is_float(y) => crate::Verdict::decline(format!(
            "an int32 base with a {} exponent: ORT raises it in double and truncates, and int32 \
             bases past 2^24 need more precision than float32 (MLX's GPUs have no float64)",
            y.short_name()
        )),
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
/// Python's `%`; `fmod = 1`: C's `fmod`, the dividend's sign. An integer remainder by zero fails
/// the run (as in ORT's CPU EP).
#[onnx_op(
    op = "Mod", since = 10, types(T = NUMERIC), inputs(A: T, B: T), outputs(C: T),
    shape = Shapeless, claim = mod_claim,
    declines = "fmod=0 on floats (invalid in ONNX); at run time, fmod=1 over 64-bit integers beyond ±2^53 (ORT computes it in double precision)"
)]
fn modulo(cx: &mut Lower, a: Array, b: Array, #[attr(default = 0)] fmod: i64) -> Result<Array> {
    let s = cx.stream();
    if a.dtype().is_float() {
        // fmod(a, b) = ±(|a| mod |b|): both operands positive, so MLX's Python-style remainder
        // is the exact C one; the sign comes from the dividend. (Shifting a Python remainder by
        // one divisor instead would round tiny results away.)
        let magnitude = ops::remainder(&ops::abs(&a, s)?, &ops::abs(&b, s)?, s)?;
        let negative = ops::less(&a, &scalar_like(0.0, &a, s)?, s)?;
        return Ok(ops::where_(
            &negative,
            &ops::negative(&magnitude, s)?,
            &magnitude,
            s,
        )?);
    }
    let divisor = SafeDivisor::new(cx, &b, "integer modulo by zero")?;
    let rest = if fmod == 0 {
        ops::remainder(&a, &divisor.safe, s)?
    } else {
        require_fmod_exact_in_double(cx, &a, &b)?;
        // a - b * trunc(a / b), exact in wrapping integer arithmetic.
        let quotient = divisor.truncating_quotient(&a, s)?;
        ops::subtract(&a, &ops::multiply(&divisor.safe, &quotient, s)?, s)?
    };
    // Anything modulo -1 is 0, which `rest` already is (the divisor was made 1).
    Ok(rest)
}

/// ORT's CPU EP computes `fmod = 1` on integers with C's `std::fmod`, which takes doubles: 64-bit
/// operands past 2^53 are rounded first (`fmod(2^53 + 1, 2)` gives 0 there), which the EP's
/// exact integer remainder does not repeat: the run fails with the reason instead. Within ±2^53
/// both agree exactly (narrower integers always do), and so does any dividend over a divisor
/// of ±1 (0 on both sides, `MIN % -1` included).
fn require_fmod_exact_in_double(cx: &mut Lower, a: &Array, b: &Array) -> Result<()> {
    use mlx_kernels::Dtype::{I64, U64};
    const EXACT: i64 = 1 << 53;
    let low = match a.dtype() {
        I64 => -EXACT,
        U64 => 0,
        _ => return Ok(()),
    };
    let s = cx.stream();
    let unit = cx.in_range(&ops::abs(b, s)?, 1, 1)?;
    let dividend = ops::logical_or(&cx.in_range(a, low, EXACT)?, &unit, s)?;
    let exact = ops::logical_and(&dividend, &cx.in_range(b, low, EXACT)?, s)?;
    cx.require_unlike_ort(
        &exact,
        "Mod with fmod=1 over 64-bit integers beyond ±2^53 (divisors other than ±1): ORT's \
         CPU EP computes it in double precision, which rounds them first, and the EP does not \
         repeat that rounding; run this node on ORT's CPU EP (ONNXRUNTIME_EP_MLX_DISABLE=1)",
    )
}

fn mod_claim(node: &crate::Node) -> crate::Verdict {
    // ORT's kernel refuses any other value when the session is created.
    let fmod = node.attr_or("fmod", 0i64);
    if fmod != 0 && fmod != 1 {
        return crate::Verdict::decline(format!("fmod={fmod}: ONNX allows only 0 and 1"));
    }
    match node.input_type(0) {
        Some(t) if is_float(t) && fmod == 0 => {
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

/// Opsets 6 and 7 of Sum, Mean, Max and Min do not broadcast: ORT's CPU kernels for them fail
/// on inputs whose shapes differ, and so does the node here.
fn same_shapes_before_8(cx: &Lower, data: &[Array]) -> Result<()> {
    if cx.node().since_version() >= 8 {
        return Ok(());
    }
    match data.split_first() {
        Some((first, rest)) if rest.iter().any(|a| a.shape() != first.shape()) => {
            Err(crate::OpError::new(format!(
                "inputs of shapes {:?}: before opset 8 all inputs must have the same shape \
                 (opset 8 added broadcasting)",
                data.iter().map(Array::shape).collect::<Vec<_>>()
            )))
        }
        _ => Ok(()),
    }
}

/// Before opset 8 the lowering compares input shapes, so a closure must retrace per shape.
fn variadic_shape(node: &crate::Node) -> crate::table::spec::ShapeSafety {
    use crate::table::spec::ShapeSafety;
    if node.since_version() < 8 {
        ShapeSafety::ShapeKeyed
    } else {
        ShapeSafety::Shapeless
    }
}

/// Elementwise maximum of all inputs (NaN propagates).
#[onnx_op(op = "Max", since = 6, types(T = NUMERIC), inputs(data_0: T), outputs(max: T), shape = variadic_shape)]
fn max(cx: &mut Lower, data: Vec<Array>) -> Result<Array> {
    same_shapes_before_8(cx, &data)?;
    fold(data, cx.stream(), ops::maximum)
}

/// Elementwise minimum of all inputs (NaN propagates).
#[onnx_op(op = "Min", since = 6, types(T = NUMERIC), inputs(data_0: T), outputs(min: T), shape = variadic_shape)]
fn min(cx: &mut Lower, data: Vec<Array>) -> Result<Array> {
    same_shapes_before_8(cx, &data)?;
    fold(data, cx.stream(), ops::minimum)
}

/// Elementwise sum of all inputs; 16-bit floats add up in float32 and round once, as in ORT's
/// CPU EP (a float16 Mean of [6e4, 6e4] is 6e4 there, not inf).
#[onnx_op(op = "Sum", since = 6, types(T = FLOAT), inputs(data_0: T), outputs(sum: T), shape = variadic_shape)]
fn sum(cx: &mut Lower, data: Vec<Array>) -> Result<Array> {
    same_shapes_before_8(cx, &data)?;
    let s = cx.stream();
    let dtype = data.first().map(Array::dtype);
    let total = fold(all_widened(data, s)?, s, ops::add)?;
    narrowed(total, dtype, s)
}

/// Elementwise mean of all inputs (16-bit floats in float32, as [`sum`]).
#[onnx_op(op = "Mean", since = 6, types(T = FLOAT), inputs(data_0: T), outputs(mean: T), shape = variadic_shape)]
fn mean(cx: &mut Lower, data: Vec<Array>) -> Result<Array> {
    same_shapes_before_8(cx, &data)?;
    let s = cx.stream();
    let count = data.len() as f64;
    let dtype = data.first().map(Array::dtype);
    let total = fold(all_widened(data, s)?, s, ops::add)?;
    let mean = ops::divide(&total, &scalar(count, total.dtype(), s)?, s)?;
    narrowed(mean, dtype, s)
}

fn all_widened(data: Vec<Array>, s: &Stream) -> Result<Vec<Array>> {
    data.iter().map(|a| crate::reduce::widened(a, s)).collect()
}

/// `a` back in the inputs' dtype.
fn narrowed(a: Array, dtype: Option<mlx_kernels::Dtype>, s: &Stream) -> Result<Array> {
    match dtype {
        Some(d) if d != a.dtype() => Ok(ops::astype(&a, d, s)?),
        _ => Ok(a),
    }
}

#[cfg(test)]
mod tests {
    use mlx_kernels::Array;

    use crate::table::testing::{f32s, node, run, run1, stream, values_f32};
    use crate::{AttrValue, ElemType};

    #[test]
    fn integer_division_truncates_and_never_traps() {
        let n = node(
            "Div",
            14,
            &[ElemType::Int32, ElemType::Int32],
            ElemType::Int32,
        );
        let a = Array::from_slice(&[7i32, -7, 7, -7, i32::MIN, i32::MIN, 9], &[7]).unwrap();
        let b = Array::from_slice(&[2i32, 2, -2, -2, -1, 1, 3], &[7]).unwrap();
        let q = run1(&n, &[Some(a), Some(b)])
            .to_vec::<i32>(&stream())
            .unwrap();
        assert_eq!(q, vec![3, -3, -3, 3, i32::MIN, i32::MIN, 3]);
    }

    #[test]
    fn an_integer_zero_divisor_fails_the_run_even_for_an_empty_result() {
        let ints = [ElemType::Int64, ElemType::Int64];
        for (op, opset, fmod) in [
            ("Div", 14, None),
            ("Mod", 13, Some(0)),
            ("Mod", 13, Some(1)),
        ] {
            let n = node(op, opset, &ints, ElemType::Int64);
            let n = match fmod {
                Some(f) => n.attr("fmod", AttrValue::Int(f)),
                None => n,
            };
            let a = Array::from_slice(&[7i64, 5], &[2]).unwrap();
            let b = Array::from_slice(&[3i64, 0], &[2]).unwrap();
            let error = run(&n, &[Some(a), Some(b)]).unwrap_err();
            assert!(error.contains("by zero"), "{op}: {error}");
            let empty = Array::from_slice::<i64>(&[], &[0]).unwrap();
            let zero = Array::from_slice(&[0i64], &[]).unwrap();
            let error = run(&n, &[Some(empty), Some(zero)]).unwrap_err();
            assert!(
                error.contains("by zero"),
                "{op} of an empty tensor: {error}"
            );
        }
    }

    #[test]
    fn modulo_follows_fmod_attribute_and_never_traps() {
        let a = Array::from_slice(&[7i64, -7, 7, -7, 5, i64::MIN], &[6]).unwrap();
        let b = Array::from_slice(&[3i64, 3, -3, -3, 1, -1], &[6]).unwrap();
        let python = node(
            "Mod",
            13,
            &[ElemType::Int64, ElemType::Int64],
            ElemType::Int64,
        );
        let c = python.clone().attr("fmod", AttrValue::Int(1));
        let s = stream();
        let py = run1(&python, &[Some(a.clone()), Some(b.clone())])
            .to_vec::<i64>(&s)
            .unwrap();
        assert_eq!(py, vec![1, 2, -2, -1, 0, 0]);
        // fmod = 1 within ±2^53, where ORT's double arithmetic is exact (see below).
        let a = Array::from_slice(&[7i64, -7, 7, -7, 5], &[5]).unwrap();
        let b = Array::from_slice(&[3i64, 3, -3, -3, 1], &[5]).unwrap();
        let cm = run1(&c, &[Some(a), Some(b)]).to_vec::<i64>(&s).unwrap();
        assert_eq!(cm, vec![1, -1, 1, -1, 0]);
        // Float fmod keeps tiny remainders exactly (no round trip through a shifted remainder).
        let fa = f32s(&[-1e-8, 5.5, -5.5, 1.0], &[4]);
        let fb = f32s(&[1.0, 2.0, 2.0, 0.0], &[4]);
        let nf = node(
            "Mod",
            13,
            &[ElemType::Float, ElemType::Float],
            ElemType::Float,
        )
        .attr("fmod", AttrValue::Int(1));
        let r = values_f32(&run1(&nf, &[Some(fa), Some(fb)]));
        assert_eq!(&r[..3], &[-1e-8, 1.5, -1.5]);
        assert!(r[3].is_nan());
    }

    #[test]
    fn fmod_over_64_bit_integers_fails_where_orts_double_arithmetic_rounds() {
        let exact = 1i64 << 53;
        for ty in [ElemType::Int64, ElemType::Uint64] {
            let n = node("Mod", 13, &[ty, ty], ty).attr("fmod", AttrValue::Int(1));
            let array = |v: &[i64]| match ty {
                ElemType::Int64 => Array::from_slice(v, &[v.len() as i64]).unwrap(),
                _ => {
                    let v: Vec<u64> = v.iter().map(|&x| x as u64).collect();
                    Array::from_slice(&v, &[v.len() as i64]).unwrap()
                }
            };
            // Within 2^53 both answer exactly...
            let within = run1(&n, &[Some(array(&[exact, 7])), Some(array(&[3, exact]))]);
            let within =
                mlx_kernels::ops::astype(&within, mlx_kernels::Dtype::I64, &stream()).unwrap();
            assert_eq!(within.to_vec::<i64>(&stream()).unwrap(), [exact % 3, 7]);
            // ...past it ORT answers fmod(2^53 + 1, 2) = 0 (its double rounds to 2^53)...
            for (a, b) in [(exact + 1, 2), (7, exact + 1)] {
                let error = run(&n, &[Some(array(&[a])), Some(array(&[b]))]).unwrap_err();
                assert!(error.contains("beyond ±2^53"), "{ty:?}: {error}");
            }
            // ...but by 1, which gives 0 on both sides whatever the dividend.
            let unit = run1(&n, &[Some(array(&[i64::MAX, -1])), Some(array(&[1, 1]))]);
            let unit = mlx_kernels::ops::astype(&unit, mlx_kernels::Dtype::I64, &stream()).unwrap();
            assert_eq!(unit.to_vec::<i64>(&stream()).unwrap(), [0, 0]);
        }
        let n =
            node("Mod", 13, &[ElemType::Int32; 2], ElemType::Int32).attr("fmod", AttrValue::Int(1));
        let a = Array::from_slice(&[i32::MIN, i32::MAX], &[2]).unwrap();
        let b = Array::from_slice(&[7i32, -3], &[2]).unwrap();
        let r = run1(&n, &[Some(a), Some(b)])
            .to_vec::<i32>(&stream())
            .unwrap();
        assert_eq!(
            r,
            [i32::MIN % 7, i32::MAX % -3],
            "int32 is exact in double: no check"
        );
    }

    #[test]
    fn variadic_ops_broadcast_across_all_inputs() {
        let a = f32s(&[1.0, 2.0], &[2, 1]);
        let b = f32s(&[10.0, 20.0, 30.0], &[3]);
        let c = f32s(&[100.0], &[1]);
        let sum = node("Sum", 13, &[ElemType::Float; 3], ElemType::Float);
        let out = run1(&sum, &[Some(a.clone()), Some(b.clone()), Some(c.clone())]);
        assert_eq!(out.shape(), vec![2, 3]);
        assert_eq!(
            values_f32(&out),
            vec![111.0, 121.0, 131.0, 112.0, 122.0, 132.0]
        );
        let mean = node("Mean", 13, &[ElemType::Float; 3], ElemType::Float);
        assert_eq!(
            values_f32(&run1(&mean, &[Some(a), Some(b.clone()), Some(c)]))[0],
            37.0
        );
        let max = node("Max", 13, &[ElemType::Float], ElemType::Float);
        assert_eq!(values_f32(&run1(&max, &[Some(b)])), vec![10.0, 20.0, 30.0]);
    }

    /// int32 only: an int64 base is declined (ORT raises int64 through double).
    #[test]
    fn integer_pow_is_exact() {
        let base = Array::from_slice(&[2i32, -3, 5, 0], &[4]).unwrap();
        let exponent = Array::from_slice(&[10i32, 3, 0, 2], &[4]).unwrap();
        let pow = node("Pow", 15, &[ElemType::Int32; 2], ElemType::Int32);
        assert_eq!(
            run1(&pow, &[Some(base), Some(exponent)])
                .to_vec::<i32>(&stream())
                .unwrap(),
            vec![1024, -27, 1, 0]
        );
    }

    #[test]
    fn a_zero_size_input_broadcasts_to_a_zero_size_result() {
        let empty = Array::from_slice::<f32>(&[], &[0, 4]).unwrap();
        let row = f32s(&[1.0, 2.0, 3.0, 4.0], &[4]);
        let out = run1(
            &node("Add", 14, &[ElemType::Float; 2], ElemType::Float),
            &[Some(empty), Some(row)],
        );
        assert_eq!(out.shape(), vec![0, 4]);
    }
}
