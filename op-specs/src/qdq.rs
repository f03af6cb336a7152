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
//! int4 and uint4 (opset 21+) and the four float8 types (19+) are carried in int8, uint8 and
//! float16 (`table::narrow`). For float8, ORT's kernels differ from the integer ones:
//! DequantizeLinear computes `float(x) * scale` and fails the run on a non-zero zero point;
//! QuantizeLinear ignores the zero point and converts `x / scale` (float32) to the float8 type
//! rounding to nearest even, `saturate` (default 1) clamping what is beyond the largest finite
//! value (±inf included) to it, and without it giving NaN (e5m2: ±inf), except for two ranges
//! where ORT's bit-level conversion answers otherwise (see `float8_grid`). float4e2m1 and
//! int2/uint2 are not claimed: ORT 1.31.1's CPU EP has no kernel for them.

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
pub(crate) fn expand_blocks(
    values: &Array,
    axis: usize,
    dim: i64,
    block: i64,
    s: &Stream,
) -> Result<Array> {
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

/// `(x - zero_point) * scale`: x int8, uint8, int16, uint16, int32, int4 or uint4, the
/// difference taken in int32 (wrapping as ORT's), converted to float32, multiplied by the
/// float32 scale and rounded once to the scale's type; float8 x: `float(x) * scale` the same
/// way, a zero point other than 0 failing the run as in ORT. Per tensor, per axis (`axis`) or
/// blocked (`block_size`). bfloat16 scales are computed the same way (ORT's CPU EP has no
/// kernel for them).
#[allow(clippy::too_many_arguments)] // three inputs and three attributes, as ONNX has them
#[onnx_op(
    op = "DequantizeLinear", precision = Float32, since = 10,
    types(T1 = I8 | U8 | I16 | I32 | UINT | since(19, FLOAT8) | since(21, I4 | U4), T2 = FLOAT),
    inputs(x: T1, x_scale: T2, x_zero_point: T1), outputs(y: T2),
    ignores(output_dtype: i64), shape = ShapeKeyed, claim = block_size_claim,
    declines = "a negative block_size (ORT refuses it); float4e2m1, int2 and uint2 inputs (ORT 1.31.1's CPU EP has no kernel for them)"
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
    let q = if is_float8(cx.node().input_type(0)) {
        if let Some(zp) = &p.zero_point {
            // ORT compares the bits with 0, so -0.0 (its sign bit set) fails too: +0 is the
            // zero whose reciprocal is +inf.
            let naught = scalar(0.0, zp.dtype(), s)?;
            let positive = ops::greater(&ops::reciprocal(zp, s)?, &naught, s)?;
            let zero = ops::logical_and(&ops::equal(zp, &naught, s)?, &positive, s)?;
            cx.require(
                &zero,
                "DequantizeLinear: a float8 x_zero_point must be +0 (ORT's kernel fails otherwise)",
            )?;
        }
        ops::astype(&x, Dtype::F32, s)?
    } else {
        let mut q = ops::astype(&x, Dtype::I32, s)?;
        if let Some(zp) = &p.zero_point {
            q = ops::subtract(&q, &ops::astype(zp, Dtype::I32, s)?, s)?;
        }
        ops::astype(&q, Dtype::F32, s)?
    };
    let y = ops::multiply(&q, &ops::astype(&p.scale, Dtype::F32, s)?, s)?;
    Ok(ops::astype(&y, x_scale.dtype(), s)?)
}

fn is_float8(elem: Option<ElemType>) -> bool {
    elem.is_some_and(|t| crate::dtypes::FLOAT8.contains(t))
}

/// The range of an integer quantised type.
fn range_of(elem: ElemType) -> Result<(f64, f64)> {
    Ok(match elem {
        ElemType::Int8 => (-128.0, 127.0),
        ElemType::Uint8 => (0.0, 255.0),
        ElemType::Int16 => (-32768.0, 32767.0),
        ElemType::Uint16 => (0.0, 65535.0),
        ElemType::Int4 => (-8.0, 7.0),
        ElemType::Uint4 => (0.0, 15.0),
        other => {
            return Err(OpError::new(format!(
                "no quantised integer type {}: int8, uint8, int16, uint16, int4 or uint4",
                other.onnx_name()
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
    quantize_to(x, scale, zero_point, ElemType::from_mlx(out), rounding, s)
}

/// [`quantize`] to integer element type `out`, int4 and uint4 included (in their carriers).
fn quantize_to(
    x: &Array,
    scale: &Array,
    zero_point: Option<&Array>,
    out_elem: ElemType,
    rounding: Rounding,
    s: &Stream,
) -> Result<Array> {
    let (low, high) = range_of(out_elem)?;
    let out = out_elem
        .carrier()
        .ok_or_else(|| OpError::new(format!("{} has no carrier", out_elem.onnx_name())))?;
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

/// `clamp(nearbyint(x / scale) + zero_point)` to int8, uint8, int16, uint16, int4 or uint4 (the
/// zero point's type, else `output_dtype`, else uint8), computed in float32 with rounding half to
/// even; to a float8 type, `x / scale` in float32 rounded to nearest even on its grid, the zero
/// point ignored and `saturate` applied as ORT does (see the module doc). Saturation follows the loop ORT's kernel takes: float32 x (except blocked along an
/// axis with inner dims) clamps in float32, NaN giving the lowest value and ±inf the ends;
/// float16 x, float32 x blocked along a non-innermost axis, and float32 x quantised per axis
/// along the innermost axis to int4/uint4, convert to int32 first as x86 does (NaN, ±inf and quotients past int32 become INT32_MIN, then the zero point is added
/// with int32 wrap-around and the sum clamped: the lowest value, or the highest for a
/// negative zero point). x and the scale share one type
/// (float32, float16; bfloat16 computed the same way, where ORT's CPU EP has no kernel). Per
/// tensor, per axis (`axis`) or blocked (`block_size`). `saturate` applies to float8 outputs
/// only and `precision` is not read by ORT (its division is float32): it is accepted and
/// changes nothing.
#[allow(clippy::too_many_arguments)] // three inputs and five attributes, as ONNX has them
#[onnx_op(
    op = "QuantizeLinear", precision = Float32, since = 10,
    types(T1 = FLOAT, T2 = I8 | U8 | I16 | UINT | since(19, FLOAT8) | since(21, I4 | U4)),
    inputs(x: T1, y_scale: T1, y_zero_point: T2), outputs(y: T2),
    ignores(output_dtype: i64, precision: i64), shape = ShapeKeyed, claim = block_size_claim,
    declines = "a negative block_size (ORT refuses it); a scale of another type than x (ORT's kernel reads it as x's type); float4e2m1, int2 and uint2 outputs (ORT 1.31.1's CPU EP has no kernel for them)"
)]
fn quantize_linear(
    cx: &mut Lower,
    x: Array,
    y_scale: Array,
    y_zero_point: Option<Array>,
    #[attr(default = 1)] axis: i64,
    #[attr(default = 0)] block_size: i64,
    #[attr(default = 1)] saturate: i64,
) -> Result<Array> {
    let s = cx.stream();
    let out = cx
        .node()
        .output_type(0)
        .ok_or_else(|| OpError::new("QuantizeLinear: y has no element type"))?;
    let p = params(
        "QuantizeLinear",
        &x.shape(),
        &y_scale,
        y_zero_point.as_ref(),
        axis,
        block_size,
        s,
    )?;
    if is_float8(Some(out)) {
        let f32 = |a: &Array| ops::astype(a, Dtype::F32, s);
        let x = f32(&x)?;
        // A NaN x stays itself, sign included, as the CPU's division keeps it (MLX's CUDA
        // backend answers the canonical NaN).
        let v = ops::where_(
            &ops::isnan(&x, s)?,
            &x,
            &ops::divide(&x, &f32(&p.scale)?, s)?,
            s,
        )?;
        return float8_grid(&v, out, saturate != 0, s);
    }
    // ORT's kernel picks its loop by x's type and the layout; each saturates differently.
    let x_shape = x.shape();
    let inner_after_axis = || {
        crate::shape::normalise_axis(axis, x_shape.len())
            .map(|a| x_shape[a + 1..].iter().product::<i64>())
            .unwrap_or(1)
    };
    let outer_blocked = block_size > 0 && !per_tensor(&y_scale) && inner_after_axis() > 1;
    let four_bit = matches!(out, ElemType::Int4 | ElemType::Uint4);
    let rounding = match x.dtype() {
        Dtype::F16 => Rounding::Int32,
        Dtype::F32 if outer_blocked => Rounding::Int32,
        // bfloat16 has no ORT kernel: its 4-bit outputs take float32's loops (fuzz
        // s1-QuantizeLinear-21-46: inf blocked along an outer axis saturates as int32 does).
        Dtype::BF16 if outer_blocked && four_bit => Rounding::Int32,
        _ => Rounding::Float,
    };
    let zp = p.zero_point.as_ref();
    // bfloat16 (no ORT kernel) is computed as float32 is.
    let float_x = matches!(x.dtype(), Dtype::F32 | Dtype::BF16);
    if !(four_bit && float_x && rounding == Rounding::Float) {
        return quantize_to(&x, &p.scale, zp, out, rounding, s);
    }
    // ORT's 4-bit kernel packs whole bytes with MLAS (the float32 loop) and quantises the
    // element that starts or ends a run of one scale on a half byte with its int32 loop.
    let segments = if per_tensor(&y_scale) {
        Segments::Whole
    } else {
        let axis = crate::shape::normalise_axis(axis, x_shape.len())
            .map_err(|e| OpError::new(format!("QuantizeLinear: {}", e.message)))?;
        Segments::along(&x_shape, axis, block_size)
    };
    let scalar_loop = Array::from_slice(&segments.half_byte_ends(&x_shape), &x_shape)?;
    Ok(ops::where_(
        &scalar_loop,
        &quantize_to(&x, &p.scale, zp, out, Rounding::Int32, s)?,
        &quantize_to(&x, &p.scale, zp, out, Rounding::Float, s)?,
        s,
    )?)
}

/// How ORT's 4-bit QuantizeLinear splits x (row-major) into runs that share one scale.
enum Segments {
    /// Per tensor: one run.
    Whole,
    /// Runs of `run` elements (per axis: the dims after the axis).
    Fixed { run: usize },
    /// Blocked along the innermost axis: `block` elements, the last of each row shorter.
    Rows { row: usize, block: usize },
}

impl Segments {
    /// Per axis (`block_size` 0) or blocked along the innermost axis.
    fn along(shape: &[i64], axis: usize, block_size: i64) -> Segments {
        if block_size > 0 {
            return Segments::Rows {
                row: shape[axis] as usize,
                block: block_size as usize,
            };
        }
        Segments::Fixed {
            run: shape[axis + 1..].iter().product::<i64>() as usize,
        }
    }

    /// `[start, end)` of the run holding flat index `i` of a tensor of `n` elements.
    fn run_of(&self, i: usize, n: usize) -> (usize, usize) {
        match *self {
            Segments::Whole => (0, n),
            Segments::Fixed { run } => (i / run * run, i / run * run + run),
            Segments::Rows { row, block } => {
                let row_start = i / row * row;
                let start = row_start + (i - row_start) / block * block;
                (start, (start + block).min(row_start + row))
            }
        }
    }

    /// Per element of x: whether it is a run's first element at an odd index or its last
    /// element before an odd end (ORT's int32 loop), rather than MLAS's float32 loop.
    fn half_byte_ends(&self, shape: &[i64]) -> Vec<bool> {
        let n = shape.iter().product::<i64>() as usize;
        (0..n)
            .map(|i| {
                let (start, end) = self.run_of(i, n);
                (i == start && start % 2 == 1) || (i + 1 == end && end % 2 == 1)
            })
            .collect()
    }
}

/// A float8 type's grid: mantissa bits, the exponent of its smallest normal, its largest
/// finite value, and what an overflow becomes without saturation.
struct Grid {
    mantissa_bits: i32,
    min_exponent: i32,
    max: f64,
    overflow: Overflow,
}

#[derive(PartialEq, Eq)]
enum Overflow {
    /// NaN (e4m3fn, both FNUZ types).
    Nan,
    /// ±inf (e5m2).
    Infinity,
}

fn grid_of(elem: ElemType) -> Result<Grid> {
    let (mantissa_bits, min_exponent, max, overflow) = match elem {
        ElemType::Float8E4M3FN => (3, -6, 448.0, Overflow::Nan),
        ElemType::Float8E4M3FNUZ => (3, -7, 240.0, Overflow::Nan),
        ElemType::Float8E5M2 => (2, -14, 57344.0, Overflow::Infinity),
        ElemType::Float8E5M2FNUZ => (2, -15, 57344.0, Overflow::Nan),
        other => {
            return Err(OpError::new(format!(
                "{} is not a float8 type",
                other.onnx_name()
            )))
        }
    };
    Ok(Grid {
        mantissa_bits,
        min_exponent,
        max,
        overflow,
    })
}

/// Float32 `v` converted to float8 `elem` as ORT 1.31.1's CPU conversion does, in its float16
/// carrier. Rounding is to nearest even on the type's grid: the quantum of `v` is
/// `2^(max(exponent(v), min_exponent) - mantissa_bits)` (subnormals share the smallest normal's),
/// and `round(v / quantum) * quantum` is exact in float32 (the division is by a power of two).
/// Beyond the largest finite value: `saturate` clamps to it (±inf too); otherwise NaN, or ±inf
/// for e5m2, except where ORT's bit-level code answers otherwise: e4m3fn maps |v| in [480, 496)
/// to ±448, e5m2 maps |v| in [61440, 65536) to NaN. NaN stays NaN; the FNUZ types have no -0.
pub(crate) fn float8_grid(v: &Array, elem: ElemType, saturate: bool, s: &Stream) -> Result<Array> {
    let grid = grid_of(elem)?;
    let int = |value: i64| scalar(value as f64, Dtype::I32, s);
    let float = |value: f64| scalar(value, Dtype::F32, s);
    let bits = ops::view(&ops::contiguous(v, s)?, Dtype::I32, s)?;
    let biased = ops::bitwise_and(&ops::right_shift(&bits, &int(23)?, s)?, &int(0xFF)?, s)?;
    let exponent = ops::subtract(&biased, &int(127)?, s)?;
    let quantum_exponent = ops::subtract(
        &ops::maximum(&exponent, &int(i64::from(grid.min_exponent))?, s)?,
        &int(i64::from(grid.mantissa_bits))?,
        s,
    )?;
    let quantum_bits = ops::left_shift(&ops::add(&quantum_exponent, &int(127)?, s)?, &int(23)?, s)?;
    let quantum = ops::view(&quantum_bits, Dtype::F32, s)?;
    let rounded = ops::multiply(
        &ops::round(&ops::divide(v, &quantum, s)?, 0, s)?,
        &quantum,
        s,
    )?;

    let magnitude = ops::abs(v, s)?;
    let negative = ops::less(v, &float(0.0)?, s)?;
    let signed = |value: f64| -> Result<Array> {
        Ok(ops::where_(&negative, &float(-value)?, &float(value)?, s)?)
    };
    // A NaN's sign is set by bits: MLX's CUDA backend answers arithmetic on NaN (negation
    // included) with the canonical, positive NaN.
    let signed_nan = || -> Result<Array> {
        let nan_with_sign = |bits: u32| -> Result<Array> {
            Ok(ops::view(&int(i64::from(bits as i32))?, Dtype::F32, s)?)
        };
        Ok(ops::where_(
            &negative,
            &nan_with_sign(0xFFC0_0000)?,
            &nan_with_sign(0x7FC0_0000)?,
            s,
        )?)
    };
    let within = |low: f64, high: f64| -> Result<Array> {
        Ok(ops::logical_and(
            &ops::greater_equal(&magnitude, &float(low)?, s)?,
            &ops::less(&magnitude, &float(high)?, s)?,
            s,
        )?)
    };
    let over = ops::greater(&ops::abs(&rounded, s)?, &float(grid.max)?, s)?;
    let mut r = if saturate {
        ops::where_(&over, &signed(grid.max)?, &rounded, s)?
    } else {
        let beyond = match grid.overflow {
            Overflow::Nan => signed_nan()?,
            Overflow::Infinity => signed(f64::INFINITY)?,
        };
        let mut r = ops::where_(&over, &beyond, &rounded, s)?;
        match elem {
            ElemType::Float8E4M3FN => {
                r = ops::where_(&within(480.0, 496.0)?, &signed(grid.max)?, &r, s)?;
            }
            ElemType::Float8E5M2 => {
                let quirk = ops::logical_and(&over, &within(0.0, 65536.0)?, s)?;
                r = ops::where_(&quirk, &signed_nan()?, &r, s)?;
            }
            _ => {}
        }
        r
    };
    r = ops::where_(&ops::isnan(v, s)?, v, &r, s)?;
    if grid.overflow == Overflow::Nan && elem != ElemType::Float8E4M3FN {
        // FNUZ: one zero, +0.
        let zero = float(0.0)?;
        r = ops::where_(&ops::equal(&r, &zero, s)?, &zero, &r, s)?;
    }
    to_f16_keeping_sign(&r, s)
}

/// Float32 `v` as float16, each value's sign bit kept, NaN's included: the conversion itself
/// gives every NaN the canonical positive one on MLX's CUDA backend, and a float8 code keeps
/// the sign of its NaN (ORT's `0xFF` against `0x7F` for e4m3fn).
fn to_f16_keeping_sign(v: &Array, s: &Stream) -> Result<Array> {
    let sign = |bits: u32| scalar(f64::from(bits), Dtype::U32, s);
    let half = |bits: u16| scalar(f64::from(bits), Dtype::U16, s);
    let converted = ops::view(&ops::astype(v, Dtype::F16, s)?, Dtype::U16, s)?;
    let sign_bit = ops::bitwise_and(
        &ops::view(&ops::contiguous(v, s)?, Dtype::U32, s)?,
        &sign(0x8000_0000)?,
        s,
    )?;
    let sign_bit = ops::astype(&ops::right_shift(&sign_bit, &sign(16)?, s)?, Dtype::U16, s)?;
    let magnitude = ops::bitwise_and(&converted, &half(0x7FFF)?, s)?;
    Ok(ops::view(
        &ops::bitwise_or(&magnitude, &sign_bit, s)?,
        Dtype::F16,
        s,
    )?)
}

/// uint8 quantisation of float32 `x` with parameters from its range, as ORT's kernel computes
/// them: `min = min(x ∪ {0})`, `max = max(x ∪ {0})` (NaN ignored), `scale = (max - min) / 255`
/// (1 when max == min, every value 0 or NaN, or x empty), `zero_point = round_half_even(clamp(-min
/// / scale, 0, 255))` (255 when that is NaN, e.g. an infinite range), then QuantizeLinear.
/// With NaN in x, ORT's range is not a function of the values: its MLAS min/max keeps or drops
/// a NaN (and the values sharing its SIMD lane) by position, ISA and thread split; the EP
/// ignores NaN, which is ORT's answer when NaN sits in the scalar tail or x is short.
#[onnx_op(
    op = "DynamicQuantizeLinear", precision = Float32, since = 11,
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
    // NaN counts as 0 (the range includes 0 anyway): ORT's scalar min/max never keeps a NaN,
    // and its SIMD one keeps it only from one lane of the last block (x86 with AVX: index 7
    // of 8, 15 of 16 or 31 of 33 gave a NaN scale), which depends on the machine's vectors.
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

#[cfg(test)]
mod tests {
    use mlx_kernels::{ops, Array, Dtype};

    use crate::table::testing::{decline_reason, f32s, run, stream, values_f32};
    use crate::{AttrValue, ElemType as E, Node};

    fn dq(opset: i64, x: E) -> Node {
        Node::new("DequantizeLinear", opset)
            .input(x)
            .input(E::Float)
            .input(x)
            .output(E::Float)
    }

    fn q(opset: i64, y: E, saturate: i64) -> Node {
        Node::new("QuantizeLinear", opset)
            .input(E::Float)
            .input(E::Float)
            .output(y)
            .attr("saturate", AttrValue::Int(saturate))
    }

    #[test]
    fn narrow_types_are_claimed_from_the_opsets_that_define_them() {
        for (opset, x) in [(21, E::Int4), (21, E::Uint4), (19, E::Float8E4M3FN)] {
            assert!(crate::table::testing::claimed(&dq(opset, x)), "{x:?}");
        }
        assert!(decline_reason(&dq(19, E::Int4)).contains("i4"));
        assert!(decline_reason(&dq(18, E::Float8E5M2)).contains("f8e5m2"));
        assert!(decline_reason(&dq(23, E::Float4E2M1)).contains("f4e2m1"));
        assert!(decline_reason(&q(23, E::Float4E2M1, 1)).contains("f4e2m1"));
    }

    /// QuantizeLinear to `y` with scale 1, the float8 result widened to float32.
    fn quantized(y: E, saturate: i64, x: &[f32]) -> Vec<f32> {
        let s = stream();
        let scale = Array::scalar(1.0f32).unwrap();
        let out = run(
            &q(21, y, saturate),
            &[Some(f32s(x, &[x.len() as i64])), Some(scale)],
        )
        .unwrap()
        .remove(0);
        assert_eq!(out.dtype(), Dtype::F16, "float8 is carried in float16");
        values_f32(&ops::astype(&out, Dtype::F32, &s).unwrap())
    }

    fn same(got: &[f32], want: &[f32]) {
        let bits = |v: &[f32]| -> Vec<u32> {
            v.iter()
                .map(|x| if x.is_nan() { 0x7FC0_0000 } else { x.to_bits() })
                .collect()
        };
        assert_eq!(bits(got), bits(want), "got {got:?}, want {want:?}");
    }

    #[test]
    fn float8_nans_keep_their_sign_in_the_carrier() {
        // -NaN stays -NaN; without saturation -inf overflows to -NaN and +inf to +NaN; -0 stays.
        let negative_nan = f32::from_bits(0xFFC0_0000);
        let x = [
            negative_nan,
            f32::NAN,
            f32::NEG_INFINITY,
            f32::INFINITY,
            -0.0,
        ];
        let s = stream();
        let out = run(
            &q(21, E::Float8E4M3FN, 0),
            &[Some(f32s(&x, &[5])), Some(Array::scalar(1.0f32).unwrap())],
        )
        .unwrap()
        .remove(0);
        let bits = ops::view(&out, Dtype::U16, &s).unwrap();
        let bits = bits.to_vec::<u16>(&s).unwrap();
        let signs: Vec<u16> = bits.iter().map(|b| b >> 15).collect();
        assert_eq!(signs, [1, 0, 1, 0, 1], "{bits:x?}");
        assert!(bits[..4].iter().all(|b| b & 0x7FFF > 0x7C00), "{bits:x?}");
    }

    #[test]
    fn float8_rounds_to_nearest_even_and_saturates_as_ort() {
        let nan = f32::NAN;
        let x = [
            1.0,
            1.0625,
            1.1875,
            470.0,
            485.0,
            500.0,
            -1e-30,
            f32::INFINITY,
            nan,
        ];
        // 1.0625 is a tie (to 1.0), 1.1875 a tie up to the even 1.25.
        same(
            &quantized(E::Float8E4M3FN, 0, &x),
            &[1.0, 1.0, 1.25, nan, 448.0, nan, -0.0, nan, nan],
        );
        same(
            &quantized(E::Float8E4M3FN, 1, &x),
            &[1.0, 1.0, 1.25, 448.0, 448.0, 448.0, -0.0, 448.0, nan],
        );
        // Subnormals: e4m3fn's smallest is 2^-9; 1.5 * 2^-10 rounds to it, 2^-10 (a tie) to 0.
        let tiny = 2f32.powi(-10);
        same(
            &quantized(E::Float8E4M3FN, 1, &[tiny, 1.5 * tiny, 3.0 * tiny]),
            &[0.0, 2.0 * tiny, 4.0 * tiny],
        );
        // FNUZ has no -0; e5m2 overflows to inf, except ORT's NaN just past its largest value.
        same(
            &quantized(E::Float8E4M3FNUZ, 0, &[-1e-30, 250.0]),
            &[0.0, nan],
        );
        same(
            &quantized(E::Float8E5M2, 0, &[61440.0, 70000.0, -f32::INFINITY]),
            &[nan, f32::INFINITY, f32::NEG_INFINITY],
        );
        same(
            &quantized(E::Float8E5M2FNUZ, 1, &[1e9, 2f32.powi(-18)]),
            &[57344.0, 0.0],
        );
    }

    #[test]
    fn a_float8_zero_point_other_than_zero_fails_the_run() {
        let s = stream();
        let half = |v: f32| ops::astype(&Array::scalar(v).unwrap(), Dtype::F16, &s).unwrap();
        let x = ops::astype(&f32s(&[1.0, 2.0], &[2]), Dtype::F16, &s).unwrap();
        let node = dq(19, E::Float8E4M3FN);
        let scale = Array::scalar(0.5f32).unwrap();
        let ok = run(
            &node,
            &[Some(x.clone()), Some(scale.clone()), Some(half(0.0))],
        )
        .unwrap();
        assert_eq!(values_f32(&ok[0]), [0.5, 1.0]);
        for bad in [2.0, -0.0] {
            let err = run(
                &node,
                &[Some(x.clone()), Some(scale.clone()), Some(half(bad))],
            )
            .unwrap_err();
            assert!(err.contains("zero_point must be +0"), "{bad}: {err}");
        }
    }
}
