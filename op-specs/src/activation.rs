//! Activation functions, Clip and Where.

use mlx_kernels::{ops, Array, Dtype, Stream};

use crate::table::consts::scalar_like;
use crate::{onnx_op, Lower, Result};

/// `k * x` with `k` in `x`'s type.
fn scale(x: &Array, k: f64, s: &Stream) -> Result<Array> {
    Ok(ops::multiply(x, &scalar_like(k, x, s)?, s)?)
}

fn zero_like(x: &Array, s: &Stream) -> Result<Array> {
    scalar_like(0.0, x, s)
}

/// `max(x, 0)`.
#[onnx_op(op = "Relu", since = 6, types(T = SIGNED), inputs(X: T), outputs(Y: T), layout = Elementwise, shape = Shapeless)]
fn relu(cx: &mut Lower, x: Array) -> Result<Array> {
    relu_of(&x, cx.stream())
}

/// `x * sigmoid(x)` (SiLU, Swish).
pub(crate) fn silu_of(x: &Array, s: &Stream) -> Result<Array> {
    Ok(ops::multiply(x, &ops::sigmoid(x, s)?, s)?)
}

pub(crate) fn relu_of(x: &Array, s: &Stream) -> Result<Array> {
    Ok(ops::maximum(x, &zero_like(x, s)?, s)?)
}

/// `x` where `x >= 0`, else `alpha * x`.
#[onnx_op(op = "LeakyRelu", since = 6, types(T = FLOAT), inputs(X: T), outputs(Y: T), layout = Elementwise, shape = Shapeless)]
fn leaky_relu(cx: &mut Lower, x: Array, #[attr(default = 0.01)] alpha: f32) -> Result<Array> {
    leaky_relu_of(&x, alpha.into(), cx.stream())
}

pub(crate) fn leaky_relu_of(x: &Array, alpha: f64, s: &Stream) -> Result<Array> {
    in_float32_for_half(x, s, |x, s| {
        let positive = ops::greater_equal(x, &zero_like(x, s)?, s)?;
        Ok(ops::where_(&positive, x, &scale(x, alpha, s)?, s)?)
    })
}

/// `e^x - 1` as ORT's kernels compute it for Elu, Selu and Celu, not `expm1`: where `e^x`
/// rounds to 1 (x = -1e-10) it is 0, and a huge alpha or gamma keeps it 0, where `expm1`'s
/// exact -1e-10 became -1e28 (found by the fuzzer, Selu with gamma 1e38).
///
/// `e^x` itself is `1 + expm1(x)`, rounded once: the correctly rounded `e^x` but where the sum
/// falls within expm1's error of a tie. Near 0 the subtraction keeps every unit of `e^x`'s last
/// place, and MLX's `exp` on its CUDA backend is not correctly rounded: one unit off at x = -1e-3
/// gave -9.9945e-4 against ORT's -9.9951e-4 (6e-5 relative; 6% at x = -1e-6).
fn exp_minus_one(x: &Array, s: &Stream) -> Result<Array> {
    let one = scalar_like(1.0, x, s)?;
    let exp = ops::add(&one, &ops::expm1(x, s)?, s)?;
    Ok(ops::subtract(&exp, &one, s)?)
}

/// `alpha * (e^x - 1)` for `x < 0`, else `x`.
pub(crate) fn elu_of(x: &Array, alpha: f64, s: &Stream) -> Result<Array> {
    in_float32_for_half(x, s, |x, s| {
        let negative = ops::less(x, &zero_like(x, s)?, s)?;
        Ok(ops::where_(
            &negative,
            &scale(&exp_minus_one(x, s)?, alpha, s)?,
            x,
            s,
        )?)
    })
}

/// Exponential linear unit: `alpha * (e^x - 1)` below zero, `x` above.
#[onnx_op(op = "Elu", since = 6, types(T = FLOAT), inputs(X: T), outputs(Y: T), layout = Elementwise, shape = Shapeless)]
fn elu(cx: &mut Lower, x: Array, #[attr(default = 1.0)] alpha: f32) -> Result<Array> {
    elu_of(&x, alpha.into(), cx.stream())
}

/// Scaled ELU: `gamma * (alpha * (e^x - 1))` for `x <= 0`, `gamma * x` above.
#[onnx_op(op = "Selu", since = 6, types(T = FLOAT), inputs(X: T), outputs(Y: T), layout = Elementwise, shape = Shapeless)]
fn selu(
    cx: &mut Lower,
    x: Array,
    #[attr(default = 1.673_263_2)] alpha: f32,
    #[attr(default = 1.050_701)] gamma: f32,
) -> Result<Array> {
    // ORT's order: `gamma * x` above 0, else `(gamma * alpha) * (e^x - 1)` with the product
    // taken in float32 first (so -0 gives +0, and the last bit is ORT's).
    in_float32_for_half(&x, cx.stream(), |x, s| {
        let curve = scale(&exp_minus_one(x, s)?, f64::from(gamma * alpha), s)?;
        let positive = ops::greater(x, &zero_like(x, s)?, s)?;
        Ok(ops::where_(
            &positive,
            &scale(x, gamma.into(), s)?,
            &curve,
            s,
        )?)
    })
}

/// Continuously differentiable ELU: `max(0, x) + min(0, alpha * (e^(x/alpha) - 1))`.
#[onnx_op(op = "Celu", since = 12, types(T = FLOAT), inputs(X: T), outputs(Y: T), layout = Elementwise, shape = Shapeless)]
fn celu(cx: &mut Lower, x: Array, #[attr(default = 1.0)] alpha: f32) -> Result<Array> {
    let s = cx.stream();
    let alpha = f64::from(alpha);
    let zero = zero_like(&x, s)?;
    // A negative alpha is applied as a negation of |alpha|, which is exact: mx.compile merges
    // scalar constants that compare equal, so a -0.0 alpha beside the 0.0 above became +0.0
    // in compiled runs (x / -0 turned from -inf into +inf: found by the fuzzer).
    let signed = |v: Array| -> Result<Array> {
        if alpha.is_sign_negative() {
            Ok(ops::negative(&v, s)?)
        } else {
            Ok(v)
        }
    };
    let magnitude = alpha.abs();
    let ratio = signed(ops::divide(&x, &scalar_like(magnitude, &x, s)?, s)?)?;
    let curve = signed(scale(&exp_minus_one(&ratio, s)?, magnitude, s)?)?;
    // std::min(curve, 0) keeps a NaN curve (alpha = -0 gives -0 * inf), as ORT's scalar path
    // does; its SIMD lanes drop it, so which one a position gets there depends on its lane.
    let negative_part = ops::where_(&ops::greater(&curve, &zero, s)?, &zero, &curve, s)?;
    Ok(ops::add(&ops::maximum(&x, &zero, s)?, &negative_part, s)?)
}

/// `0.5 x (1 + erf(x / √2))`.
pub(crate) fn gelu_erf(x: &Array, s: &Stream) -> Result<Array> {
    let inner = ops::erf(&scale(x, std::f64::consts::FRAC_1_SQRT_2, s)?, s)?;
    let one_plus = ops::add(&inner, &scalar_like(1.0, x, s)?, s)?;
    Ok(ops::multiply(&scale(x, 0.5, s)?, &one_plus, s)?)
}

/// `0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³)))`.
pub(crate) fn gelu_tanh(x: &Array, s: &Stream) -> Result<Array> {
    let cube = ops::multiply(&ops::multiply(x, x, s)?, x, s)?;
    let inner = ops::add(x, &scale(&cube, 0.044_715, s)?, s)?;
    let t = ops::tanh(&scale(&inner, (2.0 / std::f64::consts::PI).sqrt(), s)?, s)?;
    let one_plus = ops::add(&t, &scalar_like(1.0, x, s)?, s)?;
    Ok(ops::multiply(&scale(x, 0.5, s)?, &one_plus, s)?)
}

/// Gaussian error linear unit, exact (`approximate = "none"`) or the tanh approximation.
#[onnx_op(
    op = "Gelu", since = 20, types(T = FLOAT), inputs(X: T), outputs(Y: T), layout = Elementwise, shape = Shapeless,
    claim = gelu_claim, declines = "approximate other than \"none\" or \"tanh\""
)]
fn gelu(cx: &mut Lower, x: Array, #[attr(default = "none")] approximate: String) -> Result<Array> {
    in_float32_for_half(&x, cx.stream(), |x, s| match approximate.as_str() {
        "tanh" => gelu_tanh(x, s),
        _ => gelu_erf(x, s),
    })
}

/// `f(x)` computed in float32 and rounded once when `x` is float16 or bfloat16, as ORT's CPU EP
/// does for activations (float16 arithmetic throughout was 18 float16 ulps off for Gelu(-3)).
/// It also keeps float32 attributes exact: rounded to 16 bits, HardSigmoid's alpha of 1e-45
/// became 0 (NaN at x = inf, where ORT gives 1) and a threshold moved to the next float16.
fn in_float32_for_half(
    x: &Array,
    s: &Stream,
    f: impl FnOnce(&Array, &Stream) -> Result<Array>,
) -> Result<Array> {
    let half = x.dtype();
    if !matches!(half, Dtype::F16 | Dtype::BF16) {
        return f(x, s);
    }
    let y = f(&ops::astype(x, Dtype::F32, s)?, s)?;
    Ok(ops::astype(&y, half, s)?)
}

fn gelu_claim(node: &crate::Node) -> crate::Verdict {
    match node.attr_as::<String>("approximate") {
        None => crate::Verdict::Claim,
        Some(a) if a == "none" || a == "tanh" => crate::Verdict::Claim,
        Some(other) => {
            crate::Verdict::decline(format!("approximate={other:?} is not an ONNX Gelu mode"))
        }
    }
}

/// `clamp(alpha * x + beta, 0, 1)`.
pub(crate) fn hard_sigmoid_of(x: &Array, alpha: f64, beta: f64, s: &Stream) -> Result<Array> {
    in_float32_for_half(x, s, |x, s| {
        let linear = ops::add(&scale(x, alpha, s)?, &scalar_like(beta, x, s)?, s)?;
        let low = ops::maximum(&linear, &zero_like(x, s)?, s)?;
        Ok(ops::minimum(&low, &scalar_like(1.0, x, s)?, s)?)
    })
}

/// `max(0, min(1, alpha * x + beta))`.
#[onnx_op(op = "HardSigmoid", since = 6, types(T = FLOAT), inputs(X: T), outputs(Y: T), layout = Elementwise, shape = Shapeless)]
fn hard_sigmoid(
    cx: &mut Lower,
    x: Array,
    #[attr(default = 0.2)] alpha: f32,
    #[attr(default = 0.5)] beta: f32,
) -> Result<Array> {
    hard_sigmoid_of(&x, alpha.into(), beta.into(), cx.stream())
}

/// `x * max(0, min(1, x / 6 + 0.5))`.
#[onnx_op(op = "HardSwish", since = 14, types(T = FLOAT), inputs(X: T), outputs(Y: T), layout = Elementwise, shape = Shapeless)]
fn hard_swish(cx: &mut Lower, x: Array) -> Result<Array> {
    in_float32_for_half(&x, cx.stream(), |x, s| {
        Ok(ops::multiply(
            x,
            &hard_sigmoid_of(x, 1.0 / 6.0, 0.5, s)?,
            s,
        )?)
    })
}

/// `ln(1 + e^x)`, computed without overflow.
pub(crate) fn softplus_of(x: &Array, s: &Stream) -> Result<Array> {
    Ok(ops::logaddexp(x, &zero_like(x, s)?, s)?)
}

/// `x * tanh(softplus(x))`.
#[onnx_op(op = "Mish", since = 18, types(T = FLOAT), inputs(X: T), outputs(Y: T), layout = Elementwise, shape = Shapeless)]
fn mish(cx: &mut Lower, x: Array) -> Result<Array> {
    let s = cx.stream();
    Ok(ops::multiply(&x, &ops::tanh(&softplus_of(&x, s)?, s)?, s)?)
}

/// `x * sigmoid(alpha * x)` (SiLU at alpha 1), as ORT's CPU kernel computes it; 16-bit inputs
/// in float32, rounded once.
#[onnx_op(op = "Swish", since = 24, types(T = FLOAT), inputs(X: T), outputs(Y: T), layout = Elementwise, shape = Shapeless)]
fn swish(cx: &mut Lower, x: Array, #[attr(default = 1.0)] alpha: f32) -> Result<Array> {
    in_float32_for_half(&x, cx.stream(), |x, s| {
        let scaled = ops::multiply(x, &scalar_like(alpha.into(), x, s)?, s)?;
        Ok(ops::multiply(x, &ops::sigmoid(&scaled, s)?, s)?)
    })
}

/// `slope * x` where `x < 0`, else `x`; `slope` broadcasts to `X`.
#[onnx_op(op = "PRelu", since = 7, types(T = SIGNED), inputs(X: T, slope: T), outputs(Y: T), layout = Elementwise, shape = Shapeless)]
fn prelu(cx: &mut Lower, x: Array, slope: Array) -> Result<Array> {
    let s = cx.stream();
    let negative = ops::less(&x, &zero_like(&x, s)?, s)?;
    // ORT's kernel broadcasts both ways (ONNX says slope broadcasts to X): X of shape [] with
    // a [3, 1] slope gives [3, 1], and MLX's multiply and where broadcast the same way.
    let scaled = ops::multiply(&x, &slope, s)?;
    Ok(ops::where_(&negative, &scaled, &x, s)?)
}

/// `x + bias` below `-lambd`, `x - bias` above `lambd`, 0 between. Integers and 16-bit floats
/// are compared and shifted in float32 and converted back, as ORT does: a fractional `bias`
/// matters to an integer, and a `lambd` past float16's range (1e38) is not infinite (found by
/// the fuzzer: float16 inf was kept by ORT, zeroed when compared in float16).
#[onnx_op(op = "Shrink", since = 9, types(T = SIGNED), inputs(input: T), outputs(output: T), shape = Shapeless)]
fn shrink(
    cx: &mut Lower,
    x: Array,
    #[attr(default = 0.0)] bias: f32,
    #[attr(default = 0.5)] lambd: f32,
) -> Result<Array> {
    let s = cx.stream();
    let (bias, lambd) = (f64::from(bias), f64::from(lambd));
    let wide = match x.dtype() {
        Dtype::F32 | Dtype::F64 => x.clone(),
        _ => ops::astype(&x, Dtype::F32, s)?,
    };
    let below = ops::less(&wide, &scalar_like(-lambd, &wide, s)?, s)?;
    let above = ops::greater(&wide, &scalar_like(lambd, &wide, s)?, s)?;
    let raised = ops::add(&wide, &scalar_like(bias, &wide, s)?, s)?;
    let lowered = ops::subtract(&wide, &scalar_like(bias, &wide, s)?, s)?;
    let middle = ops::where_(&above, &lowered, &zero_like(&wide, s)?, s)?;
    let result = ops::where_(&below, &raised, &middle, s)?;
    Ok(if result.dtype() == x.dtype() {
        result
    } else {
        ops::astype(&result, x.dtype(), s)?
    })
}

/// `ln(1 + e^x)`.
#[onnx_op(op = "Softplus", since = 1, types(T = FLOAT), inputs(X: T), outputs(Y: T), layout = Elementwise, shape = Shapeless)]
fn softplus(cx: &mut Lower, x: Array) -> Result<Array> {
    softplus_of(&x, cx.stream())
}

/// `x / (1 + |x|)`.
#[onnx_op(op = "Softsign", since = 1, types(T = FLOAT), inputs(input: T), outputs(output: T), layout = Elementwise, shape = Shapeless)]
fn softsign(cx: &mut Lower, x: Array) -> Result<Array> {
    softsign_of(&x, cx.stream())
}

pub(crate) fn softsign_of(x: &Array, s: &Stream) -> Result<Array> {
    let denominator = ops::add(&ops::abs(x, s)?, &scalar_like(1.0, x, s)?, s)?;
    Ok(ops::divide(x, &denominator, s)?)
}

/// `x` where `x > alpha`, else 0.
#[onnx_op(op = "ThresholdedRelu", since = 10, types(T = FLOAT), inputs(X: T), outputs(Y: T), layout = Elementwise, shape = Shapeless)]
fn thresholded_relu(cx: &mut Lower, x: Array, #[attr(default = 1.0)] alpha: f32) -> Result<Array> {
    thresholded_relu_of(&x, alpha.into(), cx.stream())
}

pub(crate) fn thresholded_relu_of(x: &Array, alpha: f64, s: &Stream) -> Result<Array> {
    in_float32_for_half(x, s, |x, s| {
        let above = ops::greater(x, &scalar_like(alpha, x, s)?, s)?;
        Ok(ops::where_(&above, x, &zero_like(x, s)?, s)?)
    })
}

/// `1 / (1 + e^-x)`.
#[onnx_op(op = "Sigmoid", since = 6, types(T = FLOAT), inputs(X: T), outputs(Y: T), layout = Elementwise, shape = Shapeless)]
fn sigmoid(cx: &mut Lower, x: Array) -> Result<Array> {
    Ok(ops::sigmoid(&x, cx.stream())?)
}

/// Hyperbolic tangent.
#[onnx_op(op = "Tanh", since = 6, types(T = FLOAT), inputs(input: T), outputs(output: T), layout = Elementwise, shape = Shapeless)]
fn tanh(cx: &mut Lower, x: Array) -> Result<Array> {
    Ok(ops::tanh(&x, cx.stream())?)
}

/// `min(max(x, min), max)`. Up to opset 10 the bounds are float attributes whose absence
/// means the float range; from opset 11 they are inputs of T, and an absent one does not clip.
#[onnx_op(
    op = "Clip", since = 6, types(T = FLOAT | since(11, INTEGER)), inputs(input: T, min: T, max: T),
    outputs(output: T), layout = Elementwise, shape = Shapeless,
    claim = clip_claim, declines = "attribute bounds (opsets 6–10) with min > max (or NaN): ORT's kernel refuses them"
)]
fn clip(
    cx: &mut Lower,
    x: Array,
    #[input(attr_until = 10, attr = f32)] min: Option<Array>,
    #[input(attr_until = 10, attr = f32)] max: Option<Array>,
) -> Result<Array> {
    let s = cx.stream();
    let version = cx.node().since_version();
    // An absent bound: the float range for the attribute forms; from opset 11 ORT's CPU EP
    // clips to the type's finite range, so an absent max still turns +inf into the largest
    // finite value.
    let bound = |given: Option<Array>, sign: f64| -> Result<Option<Array>> {
        let absent = if version <= 10 {
            Some(f64::from(f32::MAX))
        } else {
            largest_finite(x.dtype(), version)
        };
        Ok(match (given, absent) {
            (Some(given), _) => Some(ops::astype(&given, x.dtype(), s)?),
            (None, Some(largest)) => Some(scalar_like(sign * largest, &x, s)?),
            (None, None) => None,
        })
    };
    let min = bound(min, -1.0)?;
    let max = bound(max, 1.0)?;
    clip_between(&x, min.as_ref(), max.as_ref(), s)
}

/// ORT's Clip-6 kernel requires `min <= max` when the session is created.
fn clip_claim(node: &crate::Node) -> crate::Verdict {
    if node.since_version() > 10 {
        return crate::Verdict::Claim;
    }
    let (min, max) = (node.attr_or("min", f32::MIN), node.attr_or("max", f32::MAX));
    if min <= max {
        crate::Verdict::Claim
    } else {
        crate::Verdict::decline(format!("min {min} > max {max}: ORT's kernel refuses it"))
    }
}

/// The largest finite value of a float type that ORT clips to when a bound is absent (`None`
/// for integers, whose extremes clip nothing, and the 16-bit types where ORT leaves infinities).
fn largest_finite(dtype: Dtype, since_version: i64) -> Option<f64> {
    match dtype {
        Dtype::F32 => Some(f32::MAX.into()),
        // Clip-11 leaves float16 infinities unclipped there; from Clip-12 on it clips them.
        Dtype::F16 if since_version >= 12 => Some(65504.0),
        // ORT's CPU EP leaves bfloat16 infinities unclipped when a bound is absent.
        _ => None,
    }
}

/// ORT's CPU EP clamps with `x < min ? min : x`, then `max < y ? max : y`: a NaN in `x` stays
/// NaN, a NaN bound clips nothing, and `min > max` gives `max`. MLX's maximum/minimum
/// propagate a NaN from either side, so the comparisons are spelled out.
fn clip_between(x: &Array, min: Option<&Array>, max: Option<&Array>, s: &Stream) -> Result<Array> {
    let low = match min {
        Some(min) => ops::where_(&ops::less(x, min, s)?, min, x, s)?,
        None => x.clone(),
    };
    Ok(match max {
        Some(max) => ops::where_(&ops::less(max, &low, s)?, max, &low, s)?,
        None => low,
    })
}

/// `X` where `condition`, else `Y`, all three broadcasting together.
#[onnx_op(
    op = "Where", since = 9, types(B = BOOL, T = ANY),
    inputs(condition: B, X: T, Y: T), outputs(output: T), shape = Shapeless
)]
fn where_op(cx: &mut Lower, condition: Array, x: Array, y: Array) -> Result<Array> {
    Ok(ops::where_(&condition, &x, &y, cx.stream())?)
}

#[cfg(test)]
mod tests {
    use mlx_kernels::Array;

    use crate::table::testing::{f32s, node, run1, values_f32};
    use crate::{AttrValue, ElemType};

    fn clip_node(inputs: usize) -> crate::Node {
        node("Clip", 13, &vec![ElemType::Float; inputs], ElemType::Float)
    }

    #[test]
    fn clip_bounds_are_optional_and_attribute_forms_default_to_the_float_range() {
        let x = f32s(&[-5.0, 0.5, 5.0], &[3]);
        let lo = f32s(&[-1.0], &[]);
        let hi = f32s(&[1.0], &[]);
        assert_eq!(
            values_f32(&run1(
                &clip_node(3),
                &[Some(x.clone()), Some(lo.clone()), Some(hi.clone())]
            )),
            vec![-1.0, 0.5, 1.0]
        );
        assert_eq!(
            values_f32(&run1(&clip_node(2), &[Some(x.clone()), Some(lo)])),
            vec![-1.0, 0.5, 5.0]
        );
        let max_only = node("Clip", 13, &[ElemType::Float], ElemType::Float)
            .absent_input()
            .input(ElemType::Float);
        assert_eq!(
            values_f32(&run1(&max_only, &[Some(x.clone()), None, Some(hi)])),
            vec![-5.0, 0.5, 1.0]
        );
        let legacy =
            node("Clip", 6, &[ElemType::Float], ElemType::Float).attr("max", AttrValue::Float(2.0));
        assert_eq!(values_f32(&run1(&legacy, &[Some(x)])), vec![-5.0, 0.5, 2.0]);
    }

    #[test]
    fn prelu_slope_broadcasts_per_channel() {
        let x = f32s(&[-1.0, -2.0, 3.0, -4.0], &[2, 2]);
        let slope = f32s(&[0.5, 0.25], &[2]);
        let out = run1(
            &node("PRelu", 16, &[ElemType::Float; 2], ElemType::Float),
            &[Some(x), Some(slope)],
        );
        assert_eq!(values_f32(&out), vec![-0.5, -0.5, 3.0, -1.0]);
    }

    #[test]
    fn where_broadcasts_across_all_three_inputs() {
        let a = f32s(&[1.0, 2.0], &[2, 1]);
        let b = f32s(&[10.0, 20.0, 30.0], &[3]);
        let cond = Array::from_slice(&[true, false, true], &[3]).unwrap();
        let pick = node(
            "Where",
            16,
            &[ElemType::Bool, ElemType::Float, ElemType::Float],
            ElemType::Float,
        );
        let out = run1(&pick, &[Some(cond), Some(a), Some(b)]);
        assert_eq!(values_f32(&out), vec![1.0, 20.0, 1.0, 2.0, 20.0, 2.0]);
    }

    #[test]
    fn clip_bounds_are_float_attributes_up_to_opset_10() {
        use crate::table::testing::declined;
        let f = ElemType::Float;
        let attrs = |opset, min: f32, max: f32| {
            node("Clip", opset, &[f], f)
                .attr("min", AttrValue::Float(min))
                .attr("max", AttrValue::Float(max))
        };
        assert_eq!(declined(&attrs(6, -1.0, 1.0)), None);
        assert!(declined(&attrs(6, 1.0, -1.0)).is_some_and(|why| why.contains("min 1 > max -1")));
        assert!(
            declined(&attrs(11, -1.0, 1.0)).is_some_and(|why| why.contains("not part of Clip-11"))
        );
        assert_eq!(declined(&node("Clip", 11, &[f, f, f], f)), None);
        assert!(declined(&node("Clip", 10, &[f, f, f], f)).is_some());
        // Integers from opset 11 only.
        let i = ElemType::Int32;
        assert_eq!(declined(&node("Clip", 12, &[i], i)), None);
        assert!(declined(&node("Clip", 10, &[i], i)).is_some());
    }

    #[test]
    fn swish_is_x_times_the_sigmoid_of_alpha_x() {
        let x = f32s(&[-2.0, 0.0, 1.5], &[3]);
        let swish = |alpha: f32| {
            let n = node("Swish", 24, &[ElemType::Float], ElemType::Float)
                .attr("alpha", AttrValue::Float(alpha));
            values_f32(&run1(&n, &[Some(x.clone())]))
        };
        let expected = |alpha: f32| -> Vec<f32> {
            [-2.0f32, 0.0, 1.5]
                .iter()
                .map(|&v| v / (1.0 + (-alpha * v).exp()))
                .collect()
        };
        for alpha in [1.0, 1.702, -0.5] {
            let (got, want) = (swish(alpha), expected(alpha));
            for (g, w) in got.iter().zip(&want) {
                assert!(
                    (g - w).abs() <= 1e-6 * w.abs().max(1.0),
                    "{alpha}: {got:?} vs {want:?}"
                );
            }
        }
    }
}
