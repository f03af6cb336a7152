//! Elementwise math functions of one tensor, plus the IsNaN/IsInf predicates.

use mlx_kernels::{ops, Array, Dtype, Stream};

use crate::table::consts::scalar;

use crate::{onnx_op, Lower, Result};

/// Declares `Y = f(X)` ops that map one-to-one onto an MLX function.
macro_rules! unary {
    ($($(#[$doc:meta])* $name:ident = $op:tt since $since:tt over $set:ident ($input:ident -> $output:ident) by $mlx:path;)*) => {$(
        $(#[$doc])*
        #[onnx_op(op = $op, since = $since, types(T = $set), inputs($input: T), outputs($output: T), shape = Shapeless)]
        fn $name(cx: &mut Lower, x: Array) -> Result<Array> {
            Ok($mlx(&x, cx.stream())?)
        }
    )*};
}

unary! {
    /// `1 / x`.
    reciprocal = "Reciprocal" since 6 over FLOAT (X -> Y) by ops::reciprocal;
    /// Square root (NaN below zero).
    sqrt = "Sqrt" since 6 over FLOAT (X -> Y) by ops::sqrt;
    /// Natural logarithm (NaN below zero, -inf at zero).
    log = "Log" since 6 over FLOAT (input -> output) by ops::log;
    /// Round toward +inf.
    ceil = "Ceil" since 6 over FLOAT (X -> Y) by ops::ceil;
    /// Round toward -inf.
    floor = "Floor" since 6 over FLOAT (X -> Y) by ops::floor;
    /// Gauss error function.
    erf = "Erf" since 9 over FLOAT (input -> output) by ops::erf;
    /// Sine.
    sin = "Sin" since 7 over FLOAT (input -> output) by ops::sin;
    /// Cosine.
    cos = "Cos" since 7 over FLOAT (input -> output) by ops::cos;
    /// Tangent.
    tan = "Tan" since 7 over FLOAT (input -> output) by ops::tan;
    /// Arcsine.
    asin = "Asin" since 7 over FLOAT (input -> output) by ops::arcsin;
    /// Arccosine.
    acos = "Acos" since 7 over FLOAT (input -> output) by ops::arccos;
    /// Arctangent.
    atan = "Atan" since 7 over FLOAT (input -> output) by ops::arctan;
    /// Hyperbolic sine.
    sinh = "Sinh" since 9 over FLOAT (input -> output) by ops::sinh;
    /// Hyperbolic cosine.
    cosh = "Cosh" since 9 over FLOAT (input -> output) by ops::cosh;
    /// Inverse hyperbolic sine.
    asinh = "Asinh" since 9 over FLOAT (input -> output) by ops::arcsinh;
    /// Inverse hyperbolic cosine.
    acosh = "Acosh" since 9 over FLOAT (input -> output) by ops::arccosh;
    /// Inverse hyperbolic tangent.
    atanh = "Atanh" since 9 over FLOAT (input -> output) by ops::arctanh;
}

/// Absolute value (integers wrap at their minimum).
#[onnx_op(op = "Abs", since = 6, types(T = NUMERIC), inputs(X: T), outputs(Y: T), shape = Shapeless)]
fn abs(cx: &mut Lower, x: Array) -> Result<Array> {
    wrapping_abs(&x, cx.stream())
}

/// Negation (integers wrap at their minimum).
#[onnx_op(op = "Neg", since = 6, types(T = SIGNED), inputs(X: T), outputs(Y: T), shape = Shapeless)]
fn neg(cx: &mut Lower, x: Array) -> Result<Array> {
    wrapping_negative(&x, cx.stream())
}

/// The unsigned type of a signed integer type's width.
fn unsigned_twin(dtype: Dtype) -> Option<Dtype> {
    match dtype {
        Dtype::I8 => Some(Dtype::U8),
        Dtype::I16 => Some(Dtype::U16),
        Dtype::I32 => Some(Dtype::U32),
        Dtype::I64 => Some(Dtype::U64),
        _ => None,
    }
}

/// `-x`, wrapping at a signed integer type's minimum as ORT does (`-INT64_MIN` is
/// `INT64_MIN`), computed in the unsigned type of its width: MLX compiles fused kernels as
/// C++, where a signed overflow lets the compiler reason it away (`Sign(Neg(INT64_MIN))` came
/// out 1 once compiled, -1 eagerly).
fn wrapping_negative(x: &Array, s: &Stream) -> Result<Array> {
    let Some(unsigned) = unsigned_twin(x.dtype()) else {
        return Ok(ops::negative(x, s)?);
    };
    let bits = ops::view(x, unsigned, s)?;
    let negated = ops::subtract(&scalar(0.0, unsigned, s)?, &bits, s)?;
    Ok(ops::view(&negated, x.dtype(), s)?)
}

/// `|x|`, wrapping at a signed integer type's minimum as ORT does (`|INT64_MIN|` is
/// `INT64_MIN`), for the reason of [`wrapping_negative`].
fn wrapping_abs(x: &Array, s: &Stream) -> Result<Array> {
    if unsigned_twin(x.dtype()).is_none() {
        return Ok(ops::abs(x, s)?);
    }
    let negative = ops::less(x, &scalar(0.0, x.dtype(), s)?, s)?;
    Ok(ops::where_(&negative, &wrapping_negative(x, s)?, x, s)?)
}

/// -1, 0 or 1 by the sign of the value. A float32 NaN stays NaN, as in ORT's CPU EP (MLX's
/// sign gives 0); ORT's float16 kernel gives 0 for NaN, like MLX.
#[onnx_op(op = "Sign", since = 9, types(T = NUMERIC), inputs(input: T), outputs(output: T), shape = Shapeless)]
fn sign(cx: &mut Lower, x: Array) -> Result<Array> {
    let s = cx.stream();
    let signs = ops::sign(&x, s)?;
    if x.dtype() != Dtype::F32 {
        return Ok(signs);
    }
    Ok(ops::where_(&ops::isnan(&x, s)?, &x, &signs, s)?)
}

/// `e^x`. MLX's CPU kernel overflows from x ≈ 88.1 where float32 reaches 88.72 (ORT gives
/// 3.3e38 for e^88.7, MLX inf), so the top of the range is taken as `e^(x - 8) * e^8` (the
/// subtraction is exact there).
#[onnx_op(op = "Exp", since = 6, types(T = FLOAT), inputs(input: T), outputs(output: T), shape = Shapeless)]
fn exp(cx: &mut Lower, x: Array) -> Result<Array> {
    exp_of(&x, cx.stream())
}

/// `e^x` up to float32's last finite value (see Exp).
fn exp_of(x: &Array, s: &Stream) -> Result<Array> {
    let plain = ops::exp(x, s)?;
    if x.dtype() != Dtype::F32 {
        return Ok(plain);
    }
    let shift = scalar(8.0, Dtype::F32, s)?;
    let shifted = ops::multiply(
        &ops::exp(&ops::subtract(x, &shift, s)?, s)?,
        &scalar(8f64.exp(), Dtype::F32, s)?,
        s,
    )?;
    let high = ops::greater(x, &scalar(88.0, Dtype::F32, s)?, s)?;
    Ok(ops::where_(&high, &shifted, &plain, s)?)
}

/// Round to the nearest integer, halves to even.
#[onnx_op(op = "Round", since = 11, types(T = FLOAT), inputs(X: T), outputs(Y: T), shape = Shapeless)]
fn round(cx: &mut Lower, x: Array) -> Result<Array> {
    Ok(ops::round(&x, 0, cx.stream())?)
}

/// True where the value is NaN.
#[onnx_op(op = "IsNaN", since = 9, types(T1 = FLOAT, T2 = BOOL), inputs(X: T1), outputs(Y: T2), shape = Shapeless)]
fn is_nan(cx: &mut Lower, x: Array) -> Result<Array> {
    Ok(ops::isnan(&x, cx.stream())?)
}

/// True where the value is +inf (if `detect_positive`) or -inf (if `detect_negative`).
#[onnx_op(op = "IsInf", since = 10, types(T1 = FLOAT, T2 = BOOL), inputs(X: T1), outputs(Y: T2), shape = Shapeless)]
fn is_inf(
    cx: &mut Lower,
    x: Array,
    #[attr(default = 1)] detect_negative: i64,
    #[attr(default = 1)] detect_positive: i64,
) -> Result<Array> {
    let s = cx.stream();
    Ok(match (detect_negative != 0, detect_positive != 0) {
        (true, true) => ops::isinf(&x, s)?,
        (true, false) => ops::isneginf(&x, s)?,
        (false, true) => ops::isposinf(&x, s)?,
        // Neither sign selected: nothing is reported.
        (false, false) => ops::logical_and(&ops::isinf(&x, s)?, &scalar(0.0, Dtype::Bool, s)?, s)?,
    })
}

#[cfg(test)]
mod tests {
    use crate::table::testing::{f32s, node, run1, stream, values_f32};
    use crate::{AttrValue, ElemType};

    #[test]
    fn round_takes_halves_to_even() {
        let x = f32s(&[0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4999, 3.5000002], &[8]);
        let y = run1(
            &node("Round", 11, &[ElemType::Float], ElemType::Float),
            &[Some(x)],
        );
        assert_eq!(
            values_f32(&y),
            vec![0.0, 2.0, 2.0, -0.0, -2.0, -2.0, 2.0, 4.0]
        );
    }

    #[test]
    fn is_inf_honours_its_sign_flags() {
        let x = f32s(&[f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 1.0], &[4]);
        let s = stream();
        let check = |neg: i64, pos: i64, expected: [bool; 4]| {
            let n = node("IsInf", 20, &[ElemType::Float], ElemType::Bool)
                .attr("detect_negative", AttrValue::Int(neg))
                .attr("detect_positive", AttrValue::Int(pos));
            assert_eq!(
                run1(&n, &[Some(x.clone())]).to_vec::<bool>(&s).unwrap(),
                expected.to_vec(),
                "{neg} {pos}"
            );
        };
        check(1, 1, [true, true, false, false]);
        check(1, 0, [false, true, false, false]);
        check(0, 1, [true, false, false, false]);
        check(0, 0, [false, false, false, false]);
        let nan = run1(
            &node("IsNaN", 20, &[ElemType::Float], ElemType::Bool),
            &[Some(x)],
        );
        assert_eq!(
            nan.to_vec::<bool>(&s).unwrap(),
            vec![false, false, true, false]
        );
    }
}
