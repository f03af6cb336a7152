//! Tensors made from attributes, shapes and scalars: ConstantOfShape, Range; and the structural
//! ops Tile, Trilu and CumSum. (No Constant: ORT turns Constant nodes into initializers when it
//! loads a graph, so an EP never sees one.)

use mlx_kernels::{ops, Array, Dtype};

use crate::shape::normalise_axis;
use crate::table::consts::{scalar, tensor_array};
use crate::{onnx_op, Lower, OpError, Result, TensorValue};

/// A tensor of the given shape filled with the one element of `value` (default: float32 zero).
#[onnx_op(
    op = "ConstantOfShape", since = 9, types(I = I64, T = NUMERIC | BOOL), inputs(input: I), outputs(output: T),
    shape = ShapeKeyed
)]
fn constant_of_shape(
    cx: &mut Lower,
    #[host] shape: Vec<i64>,
    #[attr] value: Option<TensorValue>,
) -> Result<Array> {
    let s = cx.stream();
    if shape.iter().any(|&d| d < 0) {
        return Err(OpError::new(format!("negative dimension in {shape:?}")));
    }
    let fill = match value {
        Some(v) if v.shape.iter().product::<i64>() == 1 => {
            ops::reshape(&tensor_array(&v, s)?, &[], s)?
        }
        Some(v) => {
            return Err(OpError::new(format!(
                "value must hold one element, not shape {:?}",
                v.shape
            )))
        }
        None => scalar(0.0, cx.output_dtype(0)?, s)?,
    };
    Ok(ops::broadcast_to(&fill, &shape, s)?)
}

/// `start, start + delta, ...` below `limit` (above, for a negative delta). Computed on the
/// host as ORT's CPU EP does: the count from the bounds in float64, the values accumulated in
/// the element type (`value += delta`).
#[onnx_op(
    op = "Range", precision = Float32, since = 11, types(T = F32 | I16 | I32 | I64), inputs(start: T, limit: T, delta: T), outputs(output: T),
    shape = Eager
)]
fn range(cx: &mut Lower, start: Array, limit: Array, delta: Array) -> Result<Array> {
    let s = cx.stream();
    let dtype = start.dtype();
    if dtype == Dtype::F32 {
        let read = |a: &Array| -> Result<f32> { first(a.to_vec::<f32>(s)?) };
        let (from, to, step) = (read(&start)?, read(&limit)?, read(&delta)?);
        let count = element_count(
            (f64::from(to) - f64::from(from)) / f64::from(step),
            step == 0.0,
        )?;
        let values: Vec<f32> = std::iter::successors(Some(from), |v| Some(v + step))
            .take(count)
            .collect();
        return Ok(Array::from_slice(&values, &[count as i64])?);
    }
    let read =
        |a: &Array| -> Result<i64> { first(ops::astype(a, Dtype::I64, s)?.to_vec::<i64>(s)?) };
    let (from, to, step) = (read(&start)?, read(&limit)?, read(&delta)?);
    // In float64 like ORT's CPU EP: no overflow for INT64_MIN..INT64_MAX, and large bounds
    // round (2^62 .. 2^62 + 3 holds no element there).
    let count = element_count((to as f64 - from as f64) / step as f64, step == 0)?;
    let values: Vec<i64> = (0..count as i64)
        .map(|i| from.wrapping_add(i.wrapping_mul(step)))
        .collect();
    Ok(ops::astype(
        &Array::from_slice(&values, &[count as i64])?,
        dtype,
        s,
    )?)
}

fn first<T: Copy>(values: Vec<T>) -> Result<T> {
    match values[..] {
        [one] => Ok(one),
        _ => Err(OpError::new(format!(
            "Range bounds must be scalars, not {} values",
            values.len()
        ))),
    }
}

/// ONNX's `max(ceil((limit - start) / delta), 0)`, bounded so a bad input cannot ask for an
/// absurd allocation.
fn element_count(span: f64, zero_step: bool) -> Result<usize> {
    if zero_step {
        return Err(OpError::new("Range delta is 0"));
    }
    // Checked before the clamp: NaN.max(0.0) is 0 in Rust, where ORT's CPU EP fails.
    if !span.is_finite() {
        return Err(OpError::new(format!(
            "Range's element count {span} is not finite"
        )));
    }
    let count = span.ceil().max(0.0);
    if count > i32::MAX as f64 {
        return Err(OpError::new(format!("Range would have {count} elements")));
    }
    Ok(count as usize)
}

/// The input repeated `repeats[i]` times along axis `i`.
#[onnx_op(
    op = "Tile", since = 6, types(T = ANY, I = I64), inputs(input: T, repeats: I), outputs(output: T), shape = ShapeKeyed
)]
fn tile(cx: &mut Lower, x: Array, #[host] repeats: Vec<i64>) -> Result<Array> {
    if repeats.len() != x.ndim() || repeats.iter().any(|&r| r < 0) {
        return Err(OpError::new(format!(
            "repeats {repeats:?} do not fit rank {}",
            x.ndim()
        )));
    }
    let reps: Vec<i32> = repeats.iter().map(|&r| r as i32).collect();
    Ok(ops::tile(&x, &reps, cx.stream())?)
}

/// The upper (`upper = 1`, default) or lower triangle of the last two axes, from diagonal `k`.
#[onnx_op(
    op = "Trilu", since = 14, types(T = ANY, I = I64), inputs(input: T, k: I), outputs(output: T), shape = ShapeKeyed
)]
fn trilu(
    cx: &mut Lower,
    x: Array,
    #[host] k: Option<i64>,
    #[attr(default = 1)] upper: i64,
) -> Result<Array> {
    if x.ndim() < 2 {
        return Err(OpError::new("Trilu needs at least two axes"));
    }
    // Beyond [-rows, cols] every k keeps all or nothing; clamping there keeps MLX's own
    // index arithmetic clear of overflow (k = INT32_MIN flipped the answer).
    let dims = x.shape();
    let (rows, cols) = (dims[dims.len() - 2], dims[dims.len() - 1]);
    let k = k.unwrap_or(0).clamp(-rows, cols) as i32;
    Ok(ops::triangle(&x, k, upper != 0, cx.stream())?)
}

/// ORT's CPU EP refuses `exclusive` and `reverse` values other than 0 and 1 when it loads the
/// node; leave those to it.
fn flags_claim(node: &crate::Node) -> crate::Verdict {
    for flag in ["exclusive", "reverse"] {
        let v = node.attr_or(flag, 0i64);
        if v != 0 && v != 1 {
            return crate::Verdict::decline(format!("{flag} = {v} (ORT accepts only 0 or 1)"));
        }
    }
    crate::Verdict::Claim
}

/// A running sum or product along `axis`. Half-precision inputs run in float32 and round each
/// output once, as ORT's CPU EP keeps its float16 accumulator in float32 ([300, 300, 0.5]
/// gives [300, inf, 44992] there; rounding every step gave inf at the end).
fn running(
    cx: &Lower,
    x: Array,
    axis: i64,
    op: impl Fn(&Array, i32, &mlx_kernels::Stream) -> Result<Array>,
) -> Result<Array> {
    if x.size() == 0 {
        // ORT's CPU EP returns an empty input as it is, whatever the axis says.
        return Ok(x);
    }
    let s = cx.stream();
    let axis = normalise_axis(axis, x.ndim())? as i32;
    if matches!(x.dtype(), Dtype::F16 | Dtype::BF16) {
        let wide = op(&ops::astype(&x, Dtype::F32, s)?, axis, s)?;
        return Ok(ops::astype(&wide, x.dtype(), s)?);
    }
    op(&x, axis, s)
}

/// Running sum along `axis` (an input), exclusive and/or reversed on request.
#[onnx_op(
    op = "CumSum", precision = Float32, since = 11, types(T = F32 | F16 | BF16 | I32 | I64 | U32 | U64, I = I32 | I64),
    inputs(x: T, axis: I), outputs(y: T), shape = ShapeKeyed, claim = flags_claim,
    declines = "exclusive or reverse other than 0 and 1"
)]
fn cumsum(
    cx: &mut Lower,
    x: Array,
    #[host] axis: i64,
    #[attr(default = 0)] exclusive: i64,
    #[attr(default = 0)] reverse: i64,
) -> Result<Array> {
    running(cx, x, axis, |wide, axis, s| {
        Ok(ops::cumsum(wide, axis, reverse != 0, exclusive == 0, s)?)
    })
}

/// Running product along `axis` (an input), exclusive and/or reversed on request.
#[onnx_op(
    op = "CumProd", precision = Float32, since = 26, types(T = F32 | F16 | BF16 | I32 | I64 | U32 | U64, I = I32 | I64),
    inputs(x: T, axis: I), outputs(y: T), shape = ShapeKeyed, claim = flags_claim,
    declines = "exclusive or reverse other than 0 and 1"
)]
fn cumprod(
    cx: &mut Lower,
    x: Array,
    #[host] axis: i64,
    #[attr(default = 0)] exclusive: i64,
    #[attr(default = 0)] reverse: i64,
) -> Result<Array> {
    running(cx, x, axis, |wide, axis, s| {
        Ok(ops::cumprod(wide, axis, reverse != 0, exclusive == 0, s)?)
    })
}

/// One-hot along `axis`: `values[1]` where the position equals the index (negative indices
/// count from `depth`), `values[0]` elsewhere; out-of-range indices, and float indices that are
/// not whole numbers, give all `values[0]`.
#[onnx_op(
    op = "OneHot", since = 9, types(T1 = NUMERIC, T2 = NUMERIC, T3 = ANY), inputs(indices: T1, depth: T2, values: T3),
    outputs(output: T3), shape = ShapeKeyed
)]
fn one_hot(
    cx: &mut Lower,
    indices: Array,
    depth: Array,
    values: Array,
    #[attr(default = -1)] axis: i64,
) -> Result<Array> {
    let s = cx.stream();
    // Read in float32 or int64, never float64: MLX's GPU has no float64.
    let depth = if depth.dtype().is_float() {
        ops::astype(&depth, Dtype::F32, s)?
            .to_vec::<f32>(s)?
            .first()
            .map(|d| d.trunc() as i64)
    } else {
        ops::astype(&depth, Dtype::I64, s)?
            .to_vec::<i64>(s)?
            .first()
            .copied()
    }
    .ok_or_else(|| OpError::new("depth must be a scalar"))?;
    if depth < 1 || values.size() != 2 {
        return Err(OpError::new(
            "OneHot needs depth >= 1 and two values [off, on]",
        ));
    }
    let rank = indices.ndim() + 1;
    let axis = normalise_axis(axis, rank)?;
    // Float indices are compared as they are, as ORT's CPU EP does: 2.7 or NaN matches no
    // position (only integer values are hot); float16/bfloat16 widen to float32 exactly.
    let kind = if indices.dtype().is_float() {
        Dtype::F32
    } else {
        Dtype::I64
    };
    let idx = ops::astype(&indices, kind, s)?;
    let negative = ops::less(&idx, &scalar(0.0, kind, s)?, s)?;
    let idx = ops::where_(
        &negative,
        &ops::add(&idx, &scalar(depth as f64, kind, s)?, s)?,
        &idx,
        s,
    )?;
    let idx = ops::expand_dims(&idx, &[axis as i32], s)?;
    let mut position_shape = vec![1i64; rank];
    position_shape[axis] = depth;
    let positions = ops::reshape(
        &ops::arange(0.0, depth as f64, 1.0, kind, s)?,
        &position_shape,
        s,
    )?;
    let hot = ops::equal(&idx, &positions, s)?;
    let flat = ops::reshape(&values, &[2], s)?;
    let pick = |i: usize| -> Result<Array> {
        let sections = ops::split_at(&flat, &[1], 0, s)?;
        Ok(ops::reshape(&sections[i], &[], s)?)
    };
    Ok(ops::where_(&hot, &pick(1)?, &pick(0)?, s)?)
}
