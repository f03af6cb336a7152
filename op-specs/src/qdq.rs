//! Linear quantisation, as ORT's quantisation tools emit it around every Conv and MatMul of a
//! quantised CNN or encoder: ai.onnx QuantizeLinear, DequantizeLinear and
//! DynamicQuantizeLinear.
//!
//! Semantics are ORT 1.31.1's CPU kernels (checked by running them):
//! - `DequantizeLinear`: `y = float(int32(x) - int32(zero_point)) * float(scale)` in float32,
//!   rounded once to the scale's type (the output's: ORT takes the output type from the scale
//!   and reads no `output_dtype`).
//! - `QuantizeLinear`: `q = nearbyint(float(x) / float(scale)) + zero_point` in float32, clamped
//!   to the output type's range; NaN gives the type's lowest value. ORT reads neither `saturate`
//!   (float8 only) nor `precision`: the division is float32 whatever they say.
//! - Scales and zero points are per tensor (a scalar or one-element 1-D tensor), per axis (1-D
//!   of the axis' length) or blocked (`block_size`: x's rank, `ceil(D / block_size)` on the
//!   axis); any other shape fails the run, as ORT's kernels do.
//!
//! 4-bit, 2-bit and float8 element types have no MLX dtype to cross the EP in; those nodes are
//! declined by their type constraints.

use mlx_kernels::{ops, Array, Dtype, Stream};

use crate::table::consts::scalar;
use crate::{onnx_op, ElemType, Lower, Node, OpError, Result, Verdict};

/// The scale and zero point of a node, broadcastable against `x`.
struct Params {
    scale: Array,
    zero_point: Option<Array>,
}

fn per_tensor(a: &Array) -> bool {
    let shape = a.shape();
    shape.is_empty() || shape == [1]
}

/// `values [.., ceil(D / block), ..]` repeated `block` times along `axis` and cut to `D`.
fn expand_blocks(values: &Array, axis: usize, dim: i64, block: i64, s: &Stream) -> Result<Array> {
    let index: Vec<i32> = (0..dim).map(|i| (i / block) as i32).collect();
    let index = Array::from_slice(&index, &[dim])?;
    Ok(ops::take(values, &index, axis as i32, s)?)
}

/// Checks the shapes of `scale` and `zero_point` against `x` as ORT's `PrepareForQDQ` does and
/// lays them out to broadcast against `x`.
fn params(
    op: &str,
    x_shape: &[i64],
    scale: &Array,
    zero_point: Option<&Array>,
    axis: i64,
    block_size: i64,
    s: &Stream,
) -> Result<Params> {
    let fail = |what: String| Err(OpError::new(format!("{op}: {what}")));
    if per_tensor(scale) {
        if zero_point.is_some_and(|zp| !per_tensor(zp)) {
            return fail(format!(
                "x_zero_point has shape {:?}; with a per-tensor scale it must be a scalar or \
                 1-D of size 1",
                zero_point.map(Array::shape).unwrap_or_default()
            ));
        }
        if block_size != 0 {
            return fail("block_size must be 0 for per-tensor quantization".into());
        }
        let flat = |a: &Array| ops::reshape(a, &[], s);
        return Ok(Params {
            scale: flat(scale)?,
            zero_point: zero_point.map(flat).transpose()?,
        });
    }
    let rank = x_shape.len();
    let axis = crate::shape::normalise_axis(axis, rank)
        .map_err(|e| OpError::new(format!("{op}: {}", e.message)))?;
    let dim = x_shape[axis];
    if block_size == 0 {
        let ok = |a: &Array| a.shape() == [dim];
        if !ok(scale) {
            return fail(format!(
                "scale has shape {:?}; per-axis quantization takes a 1-D scale of size {dim}",
                scale.shape()
            ));
        }
        if zero_point.is_some_and(|zp| !ok(zp)) {
            return fail(format!(
                "x_zero_point must be absent or a 1-D tensor of size {dim}, like the scale"
            ));
        }
        let mut shape = vec![1; rank];
        shape[axis] = dim;
        let lay = |a: &Array| ops::reshape(a, &shape, s);
        return Ok(Params {
            scale: lay(scale)?,
            zero_point: zero_point.map(lay).transpose()?,
        });
    }
    let mut wanted = x_shape.to_vec();
    wanted[axis] = (dim + block_size - 1) / block_size;
    if scale.shape() != wanted {
        return fail(format!(
            "scale has shape {:?}; blocked quantization of x {x_shape:?} along axis {axis} \
             with block_size {block_size} takes {wanted:?}",
            scale.shape()
        ));
    }
    if zero_point.is_some_and(|zp| zp.shape() != wanted) {
        return fail(format!(
            "x_zero_point must be absent or have the scale's shape {wanted:?}"
        ));
    }
    let lay = |a: &Array| expand_blocks(a, axis, dim, block_size, s);
    Ok(Params {
        scale: lay(scale)?,
        zero_point: zero_point.map(lay).transpose()?,
    })
}

/// Declines a negative `block_size` (ORT's kernel refuses it when the session is created) and
/// 32/64-bit unsigned quantised types (no ONNX schema has them; the type sets are named sets).
fn block_size_claim(node: &Node) -> Verdict {
    let quantised = if node.op_type() == "QuantizeLinear" {
        node.output_type(0)
    } else {
        node.input_type(0)
    };
    if let Some(t @ (ElemType::Uint32 | ElemType::Uint64)) = quantised {
        return Verdict::decline(format!(
            "{} is not a quantised type of {}",
            t.onnx_name(),
            node.op_type()
        ));
    }
    match node.attr_or("block_size", 0i64) {
        b if b < 0 => Verdict::decline(format!("block_size {b}: ORT requires block_size >= 0")),
        _ => Verdict::Claim,
    }
}

/// `(x - zero_point) * scale`: x int8, uint8, int16, uint16 or int32, the difference taken in
/// int32 (wrapping as ORT's), converted to float32, multiplied by the float32 scale and
/// rounded once to the scale's type. Per tensor, per axis (`axis`) or blocked (`block_size`).
/// bfloat16 scales are computed the same way (ORT's CPU EP has no kernel for them).
#[allow(clippy::too_many_arguments)] // three inputs and three attributes, as ONNX has them
#[onnx_op(
    op = "DequantizeLinear", since = 10,
    types(T1 = I8 | U8 | I16 | I32 | UINT, T2 = FLOAT),
    inputs(x: T1, x_scale: T2, x_zero_point: T1), outputs(y: T2),
    ignores(output_dtype: i64), shape = ShapeKeyed, claim = block_size_claim,
    declines = "a negative block_size (ORT refuses it); 4-bit, 2-bit and float8 inputs (no MLX dtype holds them)"
)]
fn dequantize_linear(
    cx: &mut Lower,
    x: Array,
    x_scale: Array,
    x_zero_point: Option<Array>,
    #[attr(default = 1)] axis: i64,
    #[attr(default = 0)] block_size: i64,
) -> Result<Array> {
    let s = cx.stream();
    let p = params(
        "DequantizeLinear",
        &x.shape(),
        &x_scale,
        x_zero_point.as_ref(),
        axis,
        block_size,
        s,
    )?;
    let mut q = ops::astype(&x, Dtype::I32, s)?;
    if let Some(zp) = &p.zero_point {
        q = ops::subtract(&q, &ops::astype(zp, Dtype::I32, s)?, s)?;
    }
    let y = ops::multiply(
        &ops::astype(&q, Dtype::F32, s)?,
        &ops::astype(&p.scale, Dtype::F32, s)?,
        s,
    )?;
    Ok(ops::astype(&y, x_scale.dtype(), s)?)
}

/// The range of an integer quantised type.
fn range_of(dtype: Dtype) -> Result<(f64, f64)> {
    Ok(match dtype {
        Dtype::I8 => (-128.0, 127.0),
        Dtype::U8 => (0.0, 255.0),
        Dtype::I16 => (-32768.0, 32767.0),
        Dtype::U16 => (0.0, 65535.0),
        other => {
            return Err(OpError::new(format!(
                "no quantised integer type {other:?}: int8, uint8, int16 or uint16"
            )))
        }
    })
}

/// How ORT's kernel turns `x / scale` into the quantised type.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rounding {
    /// MLAS's float32 kernel: `nearbyint(x / scale) + zero_point` clamped in float32; NaN gives
    /// the lowest value, ±inf the ends.
    Float,
    /// ORT's scalar loops (float16 x; float32 x blocked along an axis that is not innermost):
    /// `clamp(int32(nearbyint(x / scale)) + zero_point)` in int32 on x86: a quotient that is
    /// NaN or outside int32 becomes `INT32_MIN`, and the int32 sum wraps.
    Int32,
}

/// `nearbyint(x / scale) + zero_point`, saturated to `out` as `rounding` says, computed in
/// float32 (`x`, `scale` and `zero_point` of any float or integer type, broadcasting).
pub(crate) fn quantize(
    x: &Array,
    scale: &Array,
    zero_point: Option<&Array>,
    out: Dtype,
    rounding: Rounding,
    s: &Stream,
) -> Result<Array> {
    let (low, high) = range_of(out)?;
    let f32 = |a: &Array| ops::astype(a, Dtype::F32, s);
    let q = ops::round(&ops::divide(&f32(x)?, &f32(scale)?, s)?, 0, s)?;
    if rounding == Rounding::Int32 {
        let i64s = |v: f64| scalar(v, Dtype::I64, s);
        let limit = 2f64.powi(31);
        // int32(q) on x86: INT32_MIN for NaN and for anything outside [-2^31, 2^31).
        let outside = ops::logical_or(
            &ops::logical_not(&ops::less(&q, &scalar(limit, Dtype::F32, s)?, s)?, s)?,
            &ops::less(&q, &scalar(-limit, Dtype::F32, s)?, s)?,
            s,
        )?;
        let safe = ops::where_(&outside, &scalar(-limit, Dtype::F32, s)?, &q, s)?;
        let mut sum = ops::astype(&safe, Dtype::I64, s)?;
        if let Some(zp) = zero_point {
            sum = ops::add(&sum, &ops::astype(zp, Dtype::I64, s)?, s)?;
        }
        // The int32 sum wraps: past INT32_MAX it is negative, below INT32_MIN positive.
        let clamped = ops::minimum(&ops::maximum(&sum, &i64s(low)?, s)?, &i64s(high)?, s)?;
        let wrapped_low = ops::greater(&sum, &i64s(limit - 1.0)?, s)?;
        let wrapped_high = ops::less(&sum, &i64s(-limit)?, s)?;
        let v = ops::where_(&wrapped_low, &i64s(low)?, &clamped, s)?;
        let v = ops::where_(&wrapped_high, &i64s(high)?, &v, s)?;
        return Ok(ops::astype(&v, out, s)?);
    }
    let mut v = q;
    if let Some(zp) = zero_point {
        v = ops::add(&v, &f32(zp)?, s)?;
    }
    let low = scalar(low, Dtype::F32, s)?;
    let high = scalar(high, Dtype::F32, s)?;
    let clamped = ops::minimum(&ops::maximum(&v, &low, s)?, &high, s)?;
    let clamped = ops::where_(&ops::isnan(&v, s)?, &low, &clamped, s)?;
    Ok(ops::astype(&clamped, out, s)?)
}

/// `clamp(nearbyint(x / scale) + zero_point)` to int8, uint8, int16 or uint16 (the zero
/// point's type, else `output_dtype`, else uint8), computed in float32 with rounding half to
/// even. Saturation follows the loop ORT's kernel takes: float32 x (except blocked along an
/// axis with inner dims) clamps in float32, NaN giving the lowest value and ±inf the ends;
/// float16 x, and float32 x blocked along a non-innermost axis, convert to int32 first as x86
/// does (NaN, ±inf and quotients past int32 become INT32_MIN, then the zero point is added
/// with int32 wrap-around and the sum clamped: the lowest value, or the highest for a
/// negative zero point). x and the scale share one type
/// (float32, float16; bfloat16 computed the same way, where ORT's CPU EP has no kernel). Per
/// tensor, per axis (`axis`) or blocked (`block_size`). `saturate` applies to float8 outputs
/// only and `precision` is not read by ORT (its division is float32): both are accepted and
/// change nothing.
#[allow(clippy::too_many_arguments)] // three inputs and five attributes, as ONNX has them
#[onnx_op(
    op = "QuantizeLinear", since = 10,
    types(T1 = FLOAT, T2 = I8 | U8 | I16 | UINT),
    inputs(x: T1, y_scale: T1, y_zero_point: T2), outputs(y: T2),
    ignores(saturate: i64, output_dtype: i64, precision: i64), shape = ShapeKeyed, claim = block_size_claim,
    declines = "a negative block_size (ORT refuses it); a scale of another type than x (ORT's kernel reads it as x's type); 4-bit, 2-bit and float8 outputs (no MLX dtype holds them)"
)]
fn quantize_linear(
    cx: &mut Lower,
    x: Array,
    y_scale: Array,
    y_zero_point: Option<Array>,
    #[attr(default = 1)] axis: i64,
    #[attr(default = 0)] block_size: i64,
) -> Result<Array> {
    let s = cx.stream();
    let out = cx.output_dtype(0)?;
    let p = params(
        "QuantizeLinear",
        &x.shape(),
        &y_scale,
        y_zero_point.as_ref(),
        axis,
        block_size,
        s,
    )?;
    // ORT's kernel picks its loop by x's type and the layout; each saturates differently.
    let x_shape = x.shape();
    let inner_after_axis = || {
        crate::shape::normalise_axis(axis, x_shape.len())
            .map(|a| x_shape[a + 1..].iter().product::<i64>())
            .unwrap_or(1)
    };
    let rounding = match x.dtype() {
        Dtype::F16 => Rounding::Int32,
        Dtype::F32 if block_size > 0 && !per_tensor(&y_scale) && inner_after_axis() > 1 => {
            Rounding::Int32
        }
        _ => Rounding::Float,
    };
    quantize(&x, &p.scale, p.zero_point.as_ref(), out, rounding, s)
}

/// uint8 quantisation of float32 `x` with parameters from its range, as ORT's kernel computes
/// them: `min = min(x ∪ {0})`, `max = max(x ∪ {0})` (NaN ignored), `scale = (max - min) / 255`
/// (1 when max == min, every value 0 or NaN, or x empty), `zero_point = round_half_even(clamp(-min
/// / scale, 0, 255))` (255 when that is NaN, e.g. an infinite range), then QuantizeLinear.
/// With NaN in x, ORT's range is not a function of the values: its MLAS min/max keeps or drops
/// a NaN (and the values sharing its SIMD lane) by position, ISA and thread split; the EP
/// ignores NaN, which is ORT's answer when NaN sits in the scalar tail or x is short.
#[onnx_op(
    op = "DynamicQuantizeLinear", since = 11,
    types(T1 = F32, T2 = U8),
    inputs(x: T1), outputs(y: T2, y_scale: T1, y_zero_point: T2),
    shape = ShapeKeyed
)]
fn dynamic_quantize_linear(cx: &mut Lower, x: Array) -> Result<Vec<Array>> {
    let s = cx.stream();
    let (scale, zero_point) = dynamic_params(&x, s)?;
    let y = quantize(&x, &scale, Some(&zero_point), Dtype::U8, Rounding::Float, s)?;
    Ok(vec![y, scale, ops::astype(&zero_point, Dtype::U8, s)?])
}

/// `(scale, zero_point)` (0-d float32) of ORT's uint8 dynamic quantisation of float32 `x` (see
/// DynamicQuantizeLinear).
pub(crate) fn dynamic_params(x: &Array, s: &Stream) -> Result<(Array, Array)> {
    let f = |v: f64| scalar(v, Dtype::F32, s);
    let zero = f(0.0)?;
    if x.size() == 0 {
        return Ok((f(1.0)?, zero));
    }
    // NaN never wins ORT's min/max; the range includes 0 anyway, so NaN counts as 0.
    let flat = ops::reshape(x, &[-1], s)?;
    let clean = ops::where_(&ops::isnan(&flat, s)?, &zero, &flat, s)?;
    let low = ops::minimum(&ops::min(&clean, &[0], false, s)?, &zero, s)?;
    let high = ops::maximum(&ops::max(&clean, &[0], false, s)?, &zero, s)?;
    let scale = ops::where_(
        &ops::equal(&high, &low, s)?,
        &f(1.0)?,
        &ops::divide(&ops::subtract(&high, &low, s)?, &f(255.0)?, s)?,
        s,
    )?;
    // std::max(0, std::min(255, 0 - min / scale)): NaN goes to 255.
    let initial = ops::subtract(&zero, &ops::divide(&low, &scale, s)?, s)?;
    let top = f(255.0)?;
    let upper = ops::where_(&ops::less(&initial, &top, s)?, &initial, &top, s)?;
    let bounded = ops::where_(&ops::less(&zero, &upper, s)?, &upper, &zero, s)?;
    Ok((scale, ops::round(&bounded, 0, s)?))
}
