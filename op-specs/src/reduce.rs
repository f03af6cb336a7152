//! Reductions over axes (ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd,
//! ReduceSumSquare, ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp) and ArgMax/ArgMin.
//!
//! Axes are an attribute before opset 18 (ReduceSum: 13) and a host-known input after, where
//! `noop_with_empty_axes = 1` turns an empty axes list into the identity.

use mlx_kernels::{ops, Array, Dtype, Stream};

use crate::shape::normalise_axis;
use crate::{onnx_op, Lower, OpError, Result};

/// How each reduction combines values; `Sum`-based ones pre- and post-process.
#[derive(Clone, Copy)]
enum Reduction {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
    SumSquare,
    L1,
    L2,
    LogSum,
    LogSumExp,
}

fn reduce(
    cx: &mut Lower,
    x: &Array,
    how: Reduction,
    axes: Option<Vec<i64>>,
    keepdims: i64,
    noop_with_empty_axes: i64,
) -> Result<Array> {
    let s = cx.stream();
    let axes = axes.unwrap_or_default();
    // ORT reads the flag as `== 1` (as keepdims).
    let double_body = function_body_in_double(cx, x, how);
    if axes.is_empty() && noop_with_empty_axes == 1 {
        // No reduction, but the element-wise part of the reduction still applies.
        let part = elementwise_part(x, how, s)?;
        if double_body {
            let wide = widened(&part, s)?;
            return Ok(same_type(in_double_range(&wide, &wide, s)?, x.dtype(), s)?);
        }
        return Ok(part);
    }
    if x.size() == 0 {
        return empty_reduction(x, how, &axes, keep_of(keepdims), s);
    }
    if x.ndim() == 0 {
        // ORT's CPU EP ignores the axes of a scalar (any axis, keepdims or not) and reduces
        // its one element.
        let one = ops::reshape(x, &[1], s)?;
        return reduce(cx, &one, how, Some(vec![0]), 0, 0);
    }
    let resolved: Vec<i32> = if axes.is_empty() {
        (0..x.ndim() as i32).collect()
    } else {
        let mut r: Vec<i32> = axes
            .iter()
            .map(|&a| normalise_axis(a, x.ndim()).map(|a| a as i32))
            .collect::<Result<_>>()?;
        r.sort_unstable();
        r.dedup();
        r
    };
    let keep = keep_of(keepdims);
    if x.dtype() == Dtype::I64 && matches!(how, Reduction::Sum) {
        require_exact_in_double(cx, x, &resolved)?;
    }
    if x.dtype() == Dtype::I32 {
        if let Some(summed) = saturating_i32_sum(x, how, &resolved, keep, s)? {
            return Ok(summed);
        }
    }
    // 16-bit floats accumulate in float32, as ORT's CPU EP does: partial sums of float16
    // values overflow where the mean (or norm, or log) does not.
    let wide = &widened(x, s)?;
    let sum = |v: &Array| -> Result<Array> { Ok(ops::sum(v, &resolved, keep, s)?) };
    let result = match how {
        Reduction::Sum => sum(wide)?,
        Reduction::Mean => ops::mean(wide, &resolved, keep, s)?,
        // A NaN propagates (numpy's and ONNX's reference rule). ORT's CPU EP skips or keeps
        // a NaN depending on its SIMD lane, i.e. on the data's alignment (ORT 1.31.1:
        // min([3, NaN, 1, 0]) is 1, and two equal rows of one tensor can differ), which no
        // deterministic lowering can repeat.
        Reduction::Max => ops::max(x, &resolved, keep, s)?,
        Reduction::Min => ops::min(x, &resolved, keep, s)?,
        Reduction::Prod => ops::prod(wide, &resolved, keep, s)?,
        Reduction::SumSquare => sum(&ops::multiply(wide, wide, s)?)?,
        Reduction::L1 => sum(&ops::abs(wide, s)?)?,
        Reduction::L2 => ops::sqrt(&sum(&ops::multiply(wide, wide, s)?)?, s)?,
        Reduction::LogSum => ops::log(&sum(wide)?, s)?,
        Reduction::LogSumExp if double_body => in_double_range(
            &ops::logsumexp_axes(wide, &resolved, keep, s)?,
            &ops::max(wide, &resolved, keep, s)?,
            s,
        )?,
        Reduction::LogSumExp => ops::logsumexp_axes(wide, &resolved, keep, s)?,
    };
    // MLX widens some integer reductions; ONNX keeps the input type.
    Ok(same_type(result, x.dtype(), s)?)
}

/// ORT's CPU EP has no float16/bfloat16 kernel for ReduceLogSumExp-18 and runs ONNX's function
/// body instead: `Log(ReduceSum(Exp(Cast<double>(x))))`, unshifted. Its double `exp` overflows
/// past `ln(DBL_MAX)` and rounds to 0 below `ln(2^-1075)`, so a row whose log-sum-exp is above
/// 709.78 gives +inf, and one whose every term is below -745.13 gives -inf (log 0), where the
/// shifted float32 computation (opsets 1-17, float32 kernels) stays finite.
fn function_body_in_double(cx: &Lower, x: &Array, how: Reduction) -> bool {
    matches!(how, Reduction::LogSumExp)
        && matches!(x.dtype(), Dtype::F16 | Dtype::BF16)
        && cx.node().since_version() >= 18
}

/// `lse` as the double-precision function body gives it: +inf past `ln(DBL_MAX)`, -inf where
/// the largest term `top` makes every double `exp` round to 0 (NaN stays NaN).
fn in_double_range(lse: &Array, top: &Array, s: &Stream) -> Result<Array> {
    let k = |v: f64| crate::table::consts::scalar_like(v, lse, s);
    let overflow = ops::greater(lse, &k(f64::MAX.ln())?, s)?;
    let capped = ops::where_(&overflow, &k(f64::INFINITY)?, lse, s)?;
    let underflow = ops::less(top, &k(-1075.0 * std::f64::consts::LN_2)?, s)?;
    Ok(ops::where_(&underflow, &k(f64::NEG_INFINITY)?, &capped, s)?)
}

/// ORT reads keepdims as `keepdims == 1`: 2 or -1 drop the reduced axes as 0 does.
fn keep_of(keepdims: i64) -> bool {
    keepdims == 1
}

/// A reduction of an empty tensor as ORT's CPU EP gives it (MLX refuses some reductions of
/// empty arrays): the reduction's value over an empty set where a reduced axis is empty, an
/// empty result otherwise. ORT's empty path reads only the axes in `[0, rank)` (a negative or
/// too large axis is ignored, not an error) and, when none is left of a non-empty list,
/// returns the input's shape unreduced.
fn empty_reduction(
    x: &Array,
    how: Reduction,
    axes: &[i64],
    keep: bool,
    s: &Stream,
) -> Result<Array> {
    let dims = x.shape();
    let rank = dims.len() as i64;
    let reduced = |i: usize| axes.is_empty() || axes.contains(&(i as i64));
    let shape: Vec<i64> = if !axes.is_empty() && !axes.iter().any(|a| (0..rank).contains(a)) {
        dims.clone()
    } else {
        dims.iter()
            .enumerate()
            .filter_map(|(i, &d)| match (reduced(i), keep) {
                (false, _) => Some(d),
                (true, true) => Some(1),
                (true, false) => None,
            })
            .collect()
    };
    let extreme = matches!(how, Reduction::Max | Reduction::Min);
    if x.dtype() == Dtype::Bool && extreme && shape.iter().all(|&d| d > 0) {
        return Err(OpError::new(
            "the maximum or minimum of an empty set of booleans is undefined (ORT's CPU EP fails \
             too)",
        ));
    }
    let identity = empty_set_value(how);
    let value = crate::table::consts::scalar(identity, x.dtype(), s)?;
    Ok(ops::broadcast_to(&value, &shape, s)?)
}

/// `x` in float32 when it is a 16-bit float (for accumulating), else `x`.
pub(crate) fn widened(x: &Array, s: &Stream) -> Result<Array> {
    Ok(match x.dtype() {
        Dtype::F16 | Dtype::BF16 => ops::astype(x, Dtype::F32, s)?,
        _ => x.clone(),
    })
}

/// ORT's CPU EP sums int32 in a wider type and saturates the result to int32 (no wrap-around):
/// summing in int64 and clipping gives the same, exactly, below 2^32 elements. Squares and
/// absolute values are clipped to 2^31 first, which cannot change a saturated result and keeps
/// the int64 sum from overflowing. `None` for reductions that do not sum.
fn saturating_i32_sum(
    x: &Array,
    how: Reduction,
    axes: &[i32],
    keep: bool,
    s: &Stream,
) -> Result<Option<Array>> {
    let wide = ops::astype(x, Dtype::I64, s)?;
    let bound = |v: f64| crate::table::consts::scalar(v, Dtype::I64, s);
    let terms = match how {
        Reduction::Sum => wide,
        Reduction::SumSquare => {
            let square = ops::multiply(&wide, &wide, s)?;
            ops::minimum(&square, &bound(2f64.powi(31))?, s)?
        }
        Reduction::L1 => ops::abs(&wide, s)?,
        _ => return Ok(None),
    };
    let sum = ops::sum(&terms, axes, keep, s)?;
    let low = bound(f64::from(i32::MIN))?;
    let high = bound(f64::from(i32::MAX))?;
    let clipped = ops::minimum(&ops::maximum(&sum, &low, s)?, &high, s)?;
    Ok(Some(ops::astype(&clipped, Dtype::I32, s)?))
}

/// ORT's CPU EP sums int64 in double precision. While every term's magnitude is at most
/// 2^53 / n (n terms per sum), every partial sum is an integer below 2^53, so the double
/// arithmetic is exact and equals MLX's int64 sum. Past that ORT rounds (and saturates), which
/// the EP does not repeat: the run fails with the reason rather than give a different answer.
/// (Masks summed into sequence lengths, as LLM decoders do, are far inside the bound.)
fn require_exact_in_double(cx: &mut Lower, x: &Array, axes: &[i32]) -> Result<()> {
    let dims = x.shape();
    let terms: i64 = axes
        .iter()
        .map(|&a| dims[a as usize])
        .product::<i64>()
        .max(1);
    let bound = (1i64 << 53) / terms;
    let exact = cx.in_range(x, -bound, bound)?;
    cx.require_unlike_ort(
        &exact,
        format!(
            "int64 terms beyond ±{bound} in a sum of {terms}: ORT's CPU EP sums int64 in double \
             precision, inexact there, and the EP does not repeat its rounding; run this node on \
             ORT's CPU EP (ONNXRUNTIME_EP_MLX_DISABLE=1)"
        ),
    )
}

/// Declines the integer reductions whose results ORT's CPU EP computes in floating point and
/// saturates: int64 sums of squares and absolute values lose precision past 2^53 there and an
/// overflowing product saturates (int64 and int32), where MLX's integer arithmetic is exact and
/// wraps. int32 sums are matched exactly (`saturating_i32_sum`), int64 sums where ORT's double
/// sum is exact (`require_exact_in_double`).
fn integer_reduction_claim(node: &crate::Node) -> crate::Verdict {
    if let Some(decline) = non_binary_flag(node) {
        return decline;
    }
    let sums = ["ReduceSumSquare", "ReduceL1"];
    let op = node.op_type();
    match node.input_type(0) {
        Some(crate::ElemType::Int64) if sums.contains(&op) || op == "ReduceProd" => {
            crate::Verdict::decline(format!(
                "{op} of int64: ORT's CPU EP accumulates int64 in floating point (inexact past \
                 2^53, saturating on overflow), which MLX's exact, wrapping int64 cannot match"
            ))
        }
        Some(crate::ElemType::Int32) if op == "ReduceProd" => crate::Verdict::decline(
            "ReduceProd of int32: ORT's CPU EP multiplies in floating point and saturates on \
             overflow, which MLX's wrapping int32 product cannot match",
        ),
        _ => crate::Verdict::Claim,
    }
}

/// ONNX's 0/1 flags of the reductions. Another value is outside the spec: ORT's kernels read it
/// as `== 1`, its function bodies and references as nonzero, so the EP leaves it to ORT.
fn non_binary_flag(node: &crate::Node) -> Option<crate::Verdict> {
    ["keepdims", "noop_with_empty_axes", "select_last_index"]
        .into_iter()
        .find_map(|flag| match node.attr_as::<i64>(flag) {
            Some(v) if v != 0 && v != 1 => Some(crate::Verdict::decline(format!(
                "{flag}={v}: ONNX allows only 0 and 1"
            ))),
            _ => None,
        })
}

fn arg_claim(node: &crate::Node) -> crate::Verdict {
    non_binary_flag(node).unwrap_or(crate::Verdict::Claim)
}

/// The value of a reduction over an empty set (for integers, through saturating casts: the
/// type's extremes). ONNX leaves the mean of nothing undefined; ORT's CPU EP gives 0.
fn empty_set_value(how: Reduction) -> f64 {
    match how {
        Reduction::Sum | Reduction::SumSquare | Reduction::L1 | Reduction::L2 | Reduction::Mean => {
            0.0
        }
        Reduction::Prod => 1.0,
        Reduction::Max | Reduction::LogSum | Reduction::LogSumExp => f64::NEG_INFINITY,
        Reduction::Min => f64::INFINITY,
    }
}

/// What a reduction does to each element before combining (`noop_with_empty_axes = 1`).
fn elementwise_part(x: &Array, how: Reduction, s: &Stream) -> Result<Array> {
    if x.dtype() == Dtype::I32 && matches!(how, Reduction::SumSquare | Reduction::L1) {
        // ORT saturates int32 squares and absolute values (|-2^31| is 2^31 - 1, not -2^31).
        let wide = ops::astype(x, Dtype::I64, s)?;
        let terms = match how {
            Reduction::SumSquare => ops::multiply(&wide, &wide, s)?,
            _ => ops::abs(&wide, s)?,
        };
        let bound = |v: i32| crate::table::consts::scalar(v.into(), Dtype::I64, s);
        let high = ops::minimum(&terms, &bound(i32::MAX)?, s)?;
        return Ok(ops::astype(&high, Dtype::I32, s)?);
    }
    Ok(match how {
        Reduction::Sum
        | Reduction::Mean
        | Reduction::Max
        | Reduction::Min
        | Reduction::Prod
        | Reduction::LogSumExp => x.clone(),
        Reduction::SumSquare => ops::multiply(x, x, s)?,
        Reduction::L1 | Reduction::L2 => ops::abs(x, s)?,
        Reduction::LogSum => ops::log(x, s)?,
    })
}

fn same_type(a: Array, dtype: Dtype, s: &Stream) -> mlx_kernels::Result<Array> {
    if a.dtype() == dtype {
        Ok(a)
    } else {
        ops::astype(&a, dtype, s)
    }
}

/// Declares one reduction over all its opsets: `axes` is an attribute up to `$until` and a
/// host-known input after, where `noop_with_empty_axes` appears with it.
macro_rules! reduction {
    ($($(#[$doc:meta])* $name:ident = $op:tt over $set:ident by $how:ident, axes attribute until $until:tt, input since $since:tt, declining $declines:literal;)*) => {$(
        $(#[$doc])*
        #[onnx_op(
            op = $op, precision = Float32, since = 1, types(T = $set, I = I64), inputs(data: T, axes: I), outputs(reduced: T),
            shape = ShapeKeyed, claim = integer_reduction_claim, declines = $declines
        )]
        fn $name(
            cx: &mut Lower,
            x: Array,
            #[host(attr_until = $until)] axes: Option<Vec<i64>>,
            #[attr(default = 1)] keepdims: i64,
            #[attr(default = 0, since = $since)] noop_with_empty_axes: i64,
        ) -> Result<Array> {
            reduce(cx, &x, Reduction::$how, axes, keepdims, noop_with_empty_axes)
        }
    )*};
}

reduction! {
    /// Sum over `axes` (all axes when none are given).
    reduce_sum = "ReduceSum" over NUMERIC by Sum, axes attribute until 12, input since 13, declining "keepdims or noop_with_empty_axes other than 0/1; at run time, int64 terms beyond ±2^53/n in a sum of n (ORT sums int64 in double precision)";
    /// Mean over `axes`.
    reduce_mean = "ReduceMean" over FLOAT by Mean, axes attribute until 17, input since 18, declining "keepdims or noop_with_empty_axes other than 0/1";
    /// Maximum over `axes`.
    reduce_max = "ReduceMax" over ANY by Max, axes attribute until 17, input since 18, declining "keepdims or noop_with_empty_axes other than 0/1";
    /// Minimum over `axes`.
    reduce_min = "ReduceMin" over ANY by Min, axes attribute until 17, input since 18, declining "keepdims or noop_with_empty_axes other than 0/1";
    /// Product over `axes`.
    reduce_prod = "ReduceProd" over NUMERIC by Prod, axes attribute until 17, input since 18, declining "int32 and int64 (ORT multiplies them in floating point); keepdims or noop_with_empty_axes other than 0/1";
    /// Sum of squares over `axes`.
    reduce_sum_square = "ReduceSumSquare" over SIGNED by SumSquare, axes attribute until 17, input since 18, declining "int64 (ORT sums it in floating point); keepdims or noop_with_empty_axes other than 0/1";
    /// Sum of absolute values over `axes`.
    reduce_l1 = "ReduceL1" over SIGNED by L1, axes attribute until 17, input since 18, declining "int64 (ORT sums it in floating point); keepdims or noop_with_empty_axes other than 0/1";
    /// Euclidean norm over `axes`.
    reduce_l2 = "ReduceL2" over FLOAT by L2, axes attribute until 17, input since 18, declining "keepdims or noop_with_empty_axes other than 0/1";
    /// `log(sum(x))` over `axes`.
    reduce_log_sum = "ReduceLogSum" over FLOAT by LogSum, axes attribute until 17, input since 18, declining "keepdims or noop_with_empty_axes other than 0/1";
    /// `log(sum(exp(x)))` over `axes`, computed stably.
    reduce_log_sum_exp = "ReduceLogSumExp" over FLOAT by LogSumExp, axes attribute until 17, input since 18, declining "keepdims or noop_with_empty_axes other than 0/1";
}

/// Index of the first (or, with `select_last_index`, last) extreme along `axis`, as int64.
fn arg_extreme(
    cx: &Lower,
    x: &Array,
    axis: i64,
    keepdims: i64,
    last: i64,
    max: bool,
) -> Result<Array> {
    let s = cx.stream();
    if x.ndim() == 0 {
        // ORT's CPU EP ignores the axis of a scalar: its one element is at index 0.
        return crate::table::consts::scalar(0.0, Dtype::I64, s);
    }
    if x.size() == 0 {
        return empty_arg_extreme(cx, x, axis, keep_of(keepdims));
    }
    let axis = normalise_axis(axis, x.ndim())?;
    let pick = |v: &Array| -> mlx_kernels::Result<Array> {
        if max {
            ops::argmax(v, axis as i32, keep_of(keepdims), s)
        } else {
            ops::argmin(v, axis as i32, keep_of(keepdims), s)
        }
    };
    let index = if last != 0 {
        // The first extreme of the reversed axis is the last one of the original.
        let reversed = pick(&ops::flip(x, &[axis as i32], s)?)?;
        let top = crate::table::consts::scalar_like((x.shape()[axis] - 1) as f64, &reversed, s)?;
        ops::subtract(&top, &reversed, s)?
    } else {
        pick(x)?
    };
    Ok(ops::astype(&index, Dtype::I64, s)?)
}

/// ArgMax/ArgMin of an empty tensor as ORT's CPU EP gives it (every opset, either
/// `select_last_index`): its empty-input path drops (or, with keepdims, sets to 1) only the axis
/// in `[0, rank)` as written, so a negative or too large axis leaves the input's shape unreduced,
/// and it has no index to fill a non-empty result with, so it fails there.
fn empty_arg_extreme(cx: &Lower, x: &Array, axis: i64, keep: bool) -> Result<Array> {
    let shape: Vec<i64> = x
        .shape()
        .iter()
        .enumerate()
        .filter_map(|(i, &d)| match (i as i64 == axis, keep) {
            (false, _) => Some(d),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect();
    if shape.iter().all(|&d| d > 0) {
        return Err(OpError::new(format!(
            "{} of the empty tensor {:?} along axis {axis} gives a non-empty result of shape \
             {shape:?} with no index to fill it with (ORT's CPU EP fails too); feed a tensor with \
             a non-empty reduced axis",
            cx.node().op_type(),
            x.shape(),
        )));
    }
    let none = crate::table::consts::scalar(0.0, Dtype::I64, cx.stream())?;
    Ok(ops::broadcast_to(&none, &shape, cx.stream())?)
}

/// Index of the maximum along `axis` (ties: the first, or the last with `select_last_index`).
#[onnx_op(
    op = "ArgMax", since = 1, types(T = NUMERIC, I = I64), inputs(data: T), outputs(reduced: I), shape = ShapeKeyed,
    claim = arg_claim, declines = "keepdims or select_last_index other than 0/1"
)]
fn arg_max(
    cx: &mut Lower,
    x: Array,
    #[attr(default = 0)] axis: i64,
    #[attr(default = 1)] keepdims: i64,
    #[attr(default = 0)] select_last_index: i64,
) -> Result<Array> {
    arg_extreme(cx, &x, axis, keepdims, select_last_index, true)
}

/// Index of the minimum along `axis` (ties: the first, or the last with `select_last_index`).
#[onnx_op(
    op = "ArgMin", since = 1, types(T = NUMERIC, I = I64), inputs(data: T), outputs(reduced: I), shape = ShapeKeyed,
    claim = arg_claim, declines = "keepdims or select_last_index other than 0/1"
)]
fn arg_min(
    cx: &mut Lower,
    x: Array,
    #[attr(default = 0)] axis: i64,
    #[attr(default = 1)] keepdims: i64,
    #[attr(default = 0)] select_last_index: i64,
) -> Result<Array> {
    arg_extreme(cx, &x, axis, keepdims, select_last_index, false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::testing::{claimed, decline_reason};
    use crate::table::testing::{node, run, stream};
    use crate::{AttrValue, ElemType, Node};

    fn claims(op: &str, t: ElemType) -> bool {
        integer_reduction_claim(&Node::new(op, 13).input(t).output(t)).is_claim()
    }

    #[test]
    fn integer_reductions_that_orts_cpu_does_in_floating_point_are_declined() {
        for op in ["ReduceSumSquare", "ReduceL1", "ReduceProd"] {
            assert!(!claims(op, ElemType::Int64), "{op}");
            assert!(claims(op, ElemType::Float), "{op}");
        }
        // int64 sums run, checked at run time to stay where ORT's double sum is exact.
        assert!(claims("ReduceSum", ElemType::Int64));
        assert!(!claims("ReduceProd", ElemType::Int32));
        for op in [
            "ReduceSum",
            "ReduceSumSquare",
            "ReduceL1",
            "ReduceMax",
            "ReduceMin",
        ] {
            assert!(claims(op, ElemType::Int32), "{op}");
        }
        assert!(claims("ReduceMax", ElemType::Int64));
    }

    #[test]
    fn one_declaration_serves_each_reduction_by_its_gates() {
        use crate::AttrValue::{Int, Ints};
        let f = ElemType::Float;
        let ops = [
            ("ReduceSum", 13),
            ("ReduceMean", 18),
            ("ReduceMax", 18),
            ("ReduceMin", 18),
            ("ReduceProd", 18),
            ("ReduceSumSquare", 18),
            ("ReduceL1", 18),
            ("ReduceL2", 18),
            ("ReduceLogSum", 18),
            ("ReduceLogSumExp", 18),
        ];
        for (op, first_input) in ops {
            let last_attr = first_input - 1;
            let attr_form = |opset| {
                Node::new(op, opset)
                    .input(f)
                    .output(f)
                    .attr("axes", Ints(vec![0]))
            };
            let input_form = |opset| {
                Node::new(op, opset)
                    .input(f)
                    .input(ElemType::Int64)
                    .output(f)
            };
            // axes: an attribute up to the boundary, an input after.
            assert!(claimed(&attr_form(1)), "{op}-1");
            assert!(claimed(&attr_form(last_attr)), "{op}-{last_attr}");
            let reason = decline_reason(&attr_form(first_input));
            assert!(
                reason.contains(&format!("not part of {op}-{first_input}")),
                "{reason}"
            );
            assert!(claimed(&input_form(first_input)), "{op}-{first_input}");
            let reason = decline_reason(&input_form(last_attr));
            assert!(reason.contains("input 'axes' does not exist"), "{reason}");
            // noop_with_empty_axes comes with the input.
            let noop = |opset| {
                Node::new(op, opset)
                    .input(f)
                    .output(f)
                    .attr("noop_with_empty_axes", Int(1))
            };
            assert!(claimed(&noop(first_input)), "{op}-{first_input}");
            let reason = decline_reason(&noop(last_attr));
            assert!(
                reason.contains(&format!("not part of {op}-{last_attr}")),
                "{reason}"
            );
        }
    }

    #[test]
    fn int32_sums_saturate_instead_of_wrapping() {
        let s = Stream::cpu().unwrap();
        let x =
            Array::from_slice(&[i32::MAX, 1, 5, i32::MIN, -1, 0, 3, -7, 46341], &[3, 3]).unwrap();
        let expect = [
            (Reduction::Sum, [i32::MAX, i32::MIN, 46337]),
            // 3² + 7² + 46341² is 2147488339, past i32::MAX.
            (Reduction::SumSquare, [i32::MAX, i32::MAX, i32::MAX]),
            (Reduction::L1, [i32::MAX, i32::MAX, 46351]),
        ];
        for (how, want) in expect {
            let got = saturating_i32_sum(&x, how, &[1], false, &s)
                .unwrap()
                .unwrap();
            assert_eq!(got.to_vec::<i32>(&s).unwrap(), want);
        }
        assert!(saturating_i32_sum(&x, Reduction::Max, &[1], false, &s)
            .unwrap()
            .is_none());
    }

    const F: ElemType = ElemType::Float;
    const I: ElemType = ElemType::Int64;

    /// x[i][j][k] = i*12 + j*4 + k - 10, shape [2, 3, 4].
    fn x() -> (Array, Vec<f32>) {
        let v: Vec<f32> = (0..24).map(|i| i as f32 - 10.0).collect();
        (Array::from_slice(&v, &[2, 3, 4]).unwrap(), v)
    }

    /// Reference over axis 1 of [2, 3, 4], keepdims = 0.
    fn over_axis1(v: &[f32], f: impl Fn(&[f32]) -> f32) -> Vec<f32> {
        let mut out = Vec::new();
        for i in 0..2 {
            for k in 0..4 {
                let column: Vec<f32> = (0..3).map(|j| v[i * 12 + j * 4 + k]).collect();
                out.push(f(&column));
            }
        }
        out
    }

    fn reduced(op: &str, opset: i64, attr_form: bool) -> Vec<f32> {
        let (x, _) = x();
        let n = if attr_form {
            node(op, opset, &[F], F)
                .attr("axes", AttrValue::Ints(vec![-2]))
                .attr("keepdims", AttrValue::Int(0))
        } else {
            node(op, opset, &[F, I], F).attr("keepdims", AttrValue::Int(0))
        };
        let axes = Array::from_slice(&[1i64], &[1]).unwrap();
        let inputs = if attr_form {
            vec![Some(x)]
        } else {
            vec![Some(x), Some(axes)]
        };
        let out = run(&n, &inputs).unwrap().remove(0);
        assert_eq!(out.shape(), vec![2, 4], "{op}-{opset}");
        out.to_vec::<f32>(&stream()).unwrap()
    }

    #[test]
    fn every_reduction_matches_its_reference_in_both_forms() {
        let (_, v) = x();
        type Reference = fn(&[f32]) -> f32;
        let cases: [(&str, i64, Reference); 10] = [
            ("ReduceSum", 13, |c| c.iter().sum()),
            ("ReduceMean", 18, |c| c.iter().sum::<f32>() / c.len() as f32),
            ("ReduceMax", 18, |c| {
                c.iter().cloned().fold(f32::MIN, f32::max)
            }),
            ("ReduceMin", 18, |c| {
                c.iter().cloned().fold(f32::MAX, f32::min)
            }),
            ("ReduceProd", 18, |c| c.iter().product()),
            ("ReduceSumSquare", 18, |c| c.iter().map(|x| x * x).sum()),
            ("ReduceL1", 18, |c| c.iter().map(|x| x.abs()).sum()),
            ("ReduceL2", 18, |c| {
                c.iter().map(|x| x * x).sum::<f32>().sqrt()
            }),
            ("ReduceLogSum", 18, |c| c.iter().sum::<f32>().ln()),
            ("ReduceLogSumExp", 18, |c| {
                c.iter().map(|x| x.exp()).sum::<f32>().ln()
            }),
        ];
        for (op, modern, reference) in cases {
            let want = over_axis1(&v, reference);
            let legacy = if op == "ReduceSum" { 11 } else { 13 };
            for got in [reduced(op, modern, false), reduced(op, legacy, true)] {
                for (g, w) in got.iter().zip(&want) {
                    assert!(
                        (g - w).abs() <= 1e-5 * w.abs().max(1.0) || (g.is_nan() && w.is_nan()),
                        "{op}: {got:?} vs {want:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn empty_axes_reduce_everything_or_nothing() {
        let (x, v) = x();
        let s = stream();
        let all = run(&node("ReduceSum", 13, &[F], F), &[Some(x.clone())])
            .unwrap()
            .remove(0);
        assert_eq!(all.shape(), vec![1, 1, 1]);
        assert_eq!(all.to_vec::<f32>(&s).unwrap(), vec![v.iter().sum::<f32>()]);
        let noop =
            node("ReduceSum", 13, &[F, I], F).attr("noop_with_empty_axes", AttrValue::Int(1));
        let empty = Array::from_slice::<i64>(&[], &[0]).unwrap();
        let same = run(&noop, &[Some(x), Some(empty)]).unwrap().remove(0);
        assert_eq!(
            (same.shape(), same.to_vec::<f32>(&s).unwrap()),
            (vec![2, 3, 4], v)
        );
    }

    #[test]
    fn integer_sums_keep_their_type() {
        let x = Array::from_slice(&[1i32, 2, 3, 4], &[2, 2]).unwrap();
        let n = node("ReduceSum", 13, &[ElemType::Int32], ElemType::Int32);
        let out = run(&n, &[Some(x)]).unwrap().remove(0);
        assert_eq!(out.to_vec::<i32>(&stream()).unwrap(), vec![10]);
    }

    #[test]
    fn arg_extremes_break_ties_first_or_last() {
        let x = Array::from_slice(&[1.0f32, 5.0, 5.0, 0.0, 0.0, 2.0], &[2, 3]).unwrap();
        let s = stream();
        let argmax = |last: i64| {
            let n = node("ArgMax", 13, &[F], I)
                .attr("axis", AttrValue::Int(1))
                .attr("select_last_index", AttrValue::Int(last));
            run(&n, &[Some(x.clone())]).unwrap().remove(0)
        };
        let first = argmax(0);
        assert_eq!(
            (first.shape(), first.to_vec::<i64>(&s).unwrap()),
            (vec![2, 1], vec![1, 2])
        );
        assert_eq!(argmax(1).to_vec::<i64>(&s).unwrap(), vec![2, 2]);
        let argmin = node("ArgMin", 13, &[F], I)
            .attr("axis", AttrValue::Int(-1))
            .attr("keepdims", AttrValue::Int(0))
            .attr("select_last_index", AttrValue::Int(1));
        let out = run(&argmin, &[Some(x)]).unwrap().remove(0);
        assert_eq!(
            (out.shape(), out.to_vec::<i64>(&s).unwrap()),
            (vec![2], vec![0, 1])
        );
    }

    #[test]
    fn arg_extremes_of_empty_tensors_follow_orts_empty_path() {
        // ORT 1.31.1's CPU EP, every opset: the axis as written, a negative one ignored, and a
        // failure where the result would not be empty.
        let shape_of = |op: &str, opset: i64, dims: &[i64], axis: i64, keep: i64, last: i64| {
            let n = node(op, opset, &[F], I)
                .attr("axis", AttrValue::Int(axis))
                .attr("keepdims", AttrValue::Int(keep));
            let n = if opset >= 12 {
                n.attr("select_last_index", AttrValue::Int(last))
            } else {
                n
            };
            let x = Array::from_slice::<f32>(&[], dims).unwrap();
            run(&n, &[Some(x)]).map(|mut o| o.remove(0).shape())
        };
        for (op, opset, last) in [("ArgMin", 11, 0), ("ArgMax", 1, 0), ("ArgMax", 13, 1)] {
            let s = |dims: &[i64], axis, keep| shape_of(op, opset, dims, axis, keep, last);
            assert_eq!(s(&[0, 3, 4], -1, 1).unwrap(), vec![0, 3, 4]);
            assert_eq!(s(&[0, 3, 4], -1, 0).unwrap(), vec![0, 3, 4]);
            assert_eq!(s(&[0, 3, 4], 1, 0).unwrap(), vec![0, 4]);
            assert_eq!(s(&[0, 3, 4], 2, 1).unwrap(), vec![0, 3, 1]);
            assert_eq!(s(&[2, 0, 3], 0, 1).unwrap(), vec![1, 0, 3]);
            assert_eq!(s(&[2, 3, 0], 1, 1).unwrap(), vec![2, 1, 0]);
            assert!(s(&[0, 3, 4], 0, 1).is_err());
            assert!(s(&[2, 0, 3], 1, 0).is_err());
        }
        // Opsets before 11 take an axis past the rank; the empty path ignores it too.
        assert_eq!(
            shape_of("ArgMin", 1, &[2, 0, 3], 3, 1, 0).unwrap(),
            vec![2, 0, 3]
        );
    }

    #[test]
    fn max_and_min_over_an_empty_set_give_the_identity() {
        let empty = Array::from_slice::<f32>(&[], &[2, 0, 3]).unwrap();
        let s = stream();
        let max = node("ReduceMax", 18, &[F, I], F).attr("keepdims", AttrValue::Int(1));
        let axes = Array::from_slice(&[1i64], &[1]).unwrap();
        let out = run(&max, &[Some(empty.clone()), Some(axes.clone())])
            .unwrap()
            .remove(0);
        assert_eq!(out.shape(), vec![2, 1, 3]);
        assert!(out
            .to_vec::<f32>(&s)
            .unwrap()
            .iter()
            .all(|v| *v == f32::NEG_INFINITY));
        let ints = Array::from_slice::<i32>(&[], &[0, 2]).unwrap();
        let min = node("ReduceMin", 13, &[ElemType::Int32], ElemType::Int32)
            .attr("axes", AttrValue::Ints(vec![0]))
            .attr("keepdims", AttrValue::Int(0));
        let out = run(&min, &[Some(ints)]).unwrap().remove(0);
        assert_eq!(out.to_vec::<i32>(&s).unwrap(), vec![i32::MAX, i32::MAX]);
    }
}
