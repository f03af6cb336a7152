//! RotaryEmbedding: ai.onnx (opset 23) and com.microsoft, as ORT 1.31.1's CPU kernels compute
//! them.
//!
//! Both rotate the first `rotary_embedding_dim` features of every head (all of them by default)
//! with rows of a cos/sin cache and pass the rest through, computing in float32 and rounding
//! once (the core's [`rotate`]). They differ in how the rows are chosen:
//! - ai.onnx: `position_ids` `[B, S]` pick rows of a `[max_position, rot/2]` cache; without
//!   it the caches are already `[B, S, rot/2]`;
//! - com.microsoft: `position_ids` is either `[B, S]` or one value, the position of the first
//!   token (token `s` uses row `base + s`); the cache is `[max_sequence, rot/2]`, and for 3-D
//!   inputs without `num_heads` the head size is twice the cache width. Its `scale` attribute
//!   only matters for growing the cache, which ORT's CPU kernel does not do: it is read and
//!   ignored, as there.
//!
//! A position outside the cache fails the run, as in ORT (a run-time check; the positions are
//! clamped for the gather). Inputs are `[B, S, hidden]` (heads of `hidden / num_heads`) or
//! `[B, N, S, head]`.

use mlx_kernels::{ops, Array, Dtype, Stream};

use super::rotate;
use crate::{onnx_op, Lower, Node, OpError, Result, Verdict};

fn err(op: &str, message: String) -> OpError {
    OpError::new(format!("{op}: {message}"))
}

/// ORT's rotary kernels refuse `num_heads` or `rotary_embedding_dim` outside `[0, INT_MAX]`
/// when the session is built.
fn attrs_out_of_range(node: &Node) -> Option<Verdict> {
    ["num_heads", "rotary_embedding_dim"]
        .into_iter()
        .find_map(|name| {
            let v = node.attr_or(name, 0i64);
            (!(0..=i64::from(i32::MAX)).contains(&v)).then(|| {
                Verdict::decline(format!(
                    "{name} {v}: ORT's kernel requires it in [0, {}]",
                    i32::MAX
                ))
            })
        })
}

/// `x` as `[B, S, N, H]` (3-D input) or `[B, N, S, H]` (4-D), with the head size.
fn heads(x: &Array, num_heads: i64, head: Option<i64>, op: &str, s: &Stream) -> Result<Array> {
    let shape = x.shape();
    match shape.len() {
        4 => Ok(x.clone()),
        3 => {
            let hidden = shape[2];
            let head = match head {
                Some(h) => h,
                None if num_heads > 0 && hidden % num_heads == 0 => hidden / num_heads,
                None => {
                    return Err(err(
                        op,
                        format!("input has shape {shape:?}: its hidden size must split into num_heads={num_heads} heads"),
                    ))
                }
            };
            if head <= 0 || hidden % head != 0 {
                return Err(err(
                    op,
                    format!("input has shape {shape:?}: its hidden size is not a multiple of the head size {head}"),
                ));
            }
            Ok(ops::reshape(
                x,
                &[shape[0], shape[1], hidden / head, head],
                s,
            )?)
        }
        _ => Err(err(
            op,
            format!(
                "input has shape {shape:?}: it must be [batch, sequence, hidden] or [batch, heads, sequence, head_size]"
            ),
        )),
    }
}

/// Rotates the first `rot` features of `x4`'s heads (the last axis) with `cos`/`sin`
/// broadcastable to `x4[..., rot/2]`, and returns the result in `shape`.
#[allow(clippy::too_many_arguments)] // the rotation's operands and layout
fn rotate_heads(
    x4: &Array,
    cos: &Array,
    sin: &Array,
    rot: i64,
    interleaved: bool,
    shape: &[i64],
    op: &str,
    s: &Stream,
) -> Result<Array> {
    let dims = x4.shape();
    let head = dims[3];
    if rot <= 0 || rot > head {
        return Err(err(
            op,
            format!("rotary_embedding_dim {rot} must be positive and at most the head size {head}"),
        ));
    }
    if rot % 2 != 0 {
        // ORT's kernels run it, but leave the last rotated feature unwritten: their answer is
        // uninitialised memory (ORT 1.31.1 returns different values run to run).
        return Err(err(
            op,
            format!("an odd rotation width {rot} (rotary_embedding_dim, else the head size): ORT's CPU EP leaves the last rotated feature unwritten, answering uninitialised memory, so there is no answer to match (make the rotation width even)"),
        ));
    }
    let rotated = if rot == head {
        rotate(x4, cos, sin, interleaved, s)?
    } else {
        let parts = ops::split_at(x4, &[rot as i32], 3, s)?;
        let turned = rotate(&parts[0], cos, sin, interleaved, s)?;
        ops::concatenate(&[turned, parts[1].clone()], 3, s)?
    };
    Ok(ops::reshape(&rotated, shape, s)?)
}

/// Rows `positions` (any shape, int64) of a `[rows, width]` cache, after checking they lie in
/// the cache (a run-time check; clamped for the gather).
fn cache_rows(
    cx: &mut Lower,
    cache: &Array,
    positions: &Array,
    what: &str,
    op: &str,
) -> Result<Array> {
    let s = cx.stream();
    let rows = cache.shape()[0];
    if rows <= 0 {
        return Err(err(op, format!("the {what} has no rows")));
    }
    cx.require_in_range(
        positions,
        0,
        rows - 1,
        format!("{op}: position_ids out of range: each position must lie in [0, {rows})"),
    )?;
    let safe = crate::indexing::in_bounds(positions, rows, s)?;
    Ok(ops::take(cache, &safe, 0, s)?)
}

/// `cos`/`sin` rows `[B, S, rot/2]` laid out to broadcast against `[B, S, N, H]` (3-D input) or
/// `[B, N, S, H]` (4-D input).
fn for_layout(rows: &Array, rank: usize, s: &Stream) -> Result<Array> {
    let axis = if rank == 3 { 2 } else { 1 };
    Ok(ops::expand_dims(rows, &[axis], s)?)
}

/// Rotary position embedding of ai.onnx: rotates the first `rotary_embedding_dim` features of
/// each head (all by default; the rest pass through) by the cos/sin rows of `position_ids`
/// (`[batch, sequence]` into a `[max_position, rot/2]` cache), or by caches already laid out as
/// `[batch, sequence, rot/2]`; `interleaved` rotates feature pairs instead of halves.
#[onnx_op(
    op = "RotaryEmbedding", since = 23, types(T = FLOAT, M = I64),
    inputs(X: T, cos_cache: T, sin_cache: T, position_ids: M), outputs(Y: T),
    shape = ShapeKeyed, claim = onnx_rotary_claim,
    declines = "3-D inputs without a positive num_heads (ORT's kernel fails them); num_heads or rotary_embedding_dim outside [0, INT_MAX] (ORT refuses them)"
)]
#[allow(clippy::too_many_arguments)] // four inputs and three attributes, as ONNX has them
fn rotary_embedding(
    cx: &mut Lower,
    x: Array,
    cos_cache: Array,
    sin_cache: Array,
    position_ids: Option<Array>,
    #[attr(default = 0)] interleaved: i64,
    #[attr(default = 0)] num_heads: i64,
    #[attr(default = 0)] rotary_embedding_dim: i64,
) -> Result<Array> {
    const OP: &str = "RotaryEmbedding";
    let s = cx.stream();
    let shape = x.shape();
    let x4 = heads(&x, num_heads, None, OP, s)?;
    let [b, seq] = match shape.len() {
        3 => [shape[0], shape[1]],
        _ => [shape[0], shape[2]],
    };
    let head = x4.shape()[3];
    let rot = if rotary_embedding_dim > 0 {
        rotary_embedding_dim
    } else {
        head
    };
    let (cos_shape, sin_shape) = (cos_cache.shape(), sin_cache.shape());
    if cos_shape != sin_shape {
        return Err(err(
            OP,
            format!("cos_cache {cos_shape:?} and sin_cache {sin_shape:?} must have the same shape"),
        ));
    }
    let (cos, sin) = match &position_ids {
        Some(ids) => {
            if cos_shape.len() != 2 || cos_shape[1] != rot / 2 {
                return Err(err(
                    OP,
                    format!("with position_ids the caches must be [max_position, {}], not {cos_shape:?}", rot / 2),
                ));
            }
            if ids.shape() != [b, seq] {
                return Err(err(
                    OP,
                    format!(
                        "position_ids has shape {:?}: it must be [batch={b}, sequence={seq}]",
                        ids.shape()
                    ),
                ));
            }
            if seq > cos_shape[0] {
                return Err(err(
                    OP,
                    format!("a sequence of {seq} is longer than the {}-row cache (ORT does not grow it)", cos_shape[0]),
                ));
            }
            (
                cache_rows(cx, &cos_cache, ids, "cos_cache", OP)?,
                cache_rows(cx, &sin_cache, ids, "sin_cache", OP)?,
            )
        }
        None => {
            if cos_shape != [b, seq, rot / 2] {
                return Err(err(
                    OP,
                    format!("without position_ids the caches must be [batch={b}, sequence={seq}, {}], not {cos_shape:?}", rot / 2),
                ));
            }
            (cos_cache.clone(), sin_cache.clone())
        }
    };
    let rank = shape.len();
    rotate_heads(
        &x4,
        &for_layout(&cos, rank, s)?,
        &for_layout(&sin, rank, s)?,
        rot,
        interleaved == 1,
        &shape,
        OP,
        s,
    )
}

/// ORT's ai.onnx kernel fails every 3-D input without a positive `num_heads`.
fn onnx_rotary_claim(node: &Node) -> Verdict {
    if let Some(declined) = attrs_out_of_range(node) {
        return declined;
    }
    if node.input_rank(0) == Some(3) && node.attr_or("num_heads", 0i64) <= 0 {
        return Verdict::decline(
            "a 3-D input without a positive num_heads (ORT's kernel cannot split the heads)",
        );
    }
    Verdict::Claim
}

/// com.microsoft rotary position embedding: rotates the first `rotary_embedding_dim` features of
/// each head (all by default; the rest pass through) by rows of `[max_sequence, rot/2]` cos/sin
/// caches, picked by `position_ids` `[batch, sequence]` or by one start position (token `s` at
/// `start + s`); `interleaved` rotates feature pairs instead of halves. `scale` is read and
/// ignored, as by ORT's CPU kernel (it only applies when a cache is grown, which ORT refuses).
#[onnx_op(
    domain = "com.microsoft", op = "RotaryEmbedding", since = 1, types(T = F32 | F16 | BF16, M = I64),
    inputs(input: T, position_ids: M, cos_cache: T, sin_cache: T), outputs(output: T),
    // ORT's CPU kernel only uses `scale` to grow the cache, which it refuses.
    ignores(scale: f32), shape = ShapeKeyed, claim = ms_rotary_claim,
    declines = "rotary_embedding_dim without num_heads; num_heads or rotary_embedding_dim outside [0, INT_MAX] (ORT's kernel refuses each); caches wider than rotary_embedding_dim / 2 (ORT reads them with a row stride of rotary_embedding_dim / 2)"
)]
#[allow(clippy::too_many_arguments)] // four inputs and three attributes, as ORT has them
fn ms_rotary_embedding(
    cx: &mut Lower,
    input: Array,
    position_ids: Array,
    cos_cache: Array,
    sin_cache: Array,
    #[attr(default = 0)] interleaved: i64,
    #[attr(default = 0)] num_heads: i64,
    #[attr(default = 0)] rotary_embedding_dim: i64,
) -> Result<Array> {
    const OP: &str = "com.microsoft.RotaryEmbedding";
    let s = cx.stream();
    let shape = input.shape();
    let (cos_shape, sin_shape) = (cos_cache.shape(), sin_cache.shape());
    if cos_shape.len() != 2 || cos_shape != sin_shape {
        return Err(err(
            OP,
            format!("cos_cache {cos_shape:?} and sin_cache {sin_shape:?} must be the same [max_sequence, rotary_embedding_dim / 2]"),
        ));
    }
    let (rows, width) = (cos_shape[0], cos_shape[1]);
    // 3-D without num_heads: the head size is twice the cache width, as in ORT.
    let head = (shape.len() == 3 && num_heads <= 0).then_some(2 * width);
    let x4 = heads(&input, num_heads, head, OP, s)?;
    let [b, seq] = match shape.len() {
        3 => [shape[0], shape[1]],
        _ => [shape[0], shape[2]],
    };
    // A 4-D input names its heads itself: ORT ignores num_heads then (2 over a 1-head input
    // gives the 1-head answer).
    let head = x4.shape()[3];
    let rot = if rotary_embedding_dim > 0 {
        rotary_embedding_dim
    } else {
        head
    };
    if width != rot / 2 {
        // ORT also takes a cache head_size / 2 wide under a smaller rotary_embedding_dim, but
        // reads it with a row stride of rotary_embedding_dim / 2 (the claim declines such
        // caches when their width is declared).
        let ort_reads_it = width == head / 2 && rot < head;
        let hint = if ort_reads_it {
            format!(" (ORT reads such caches with a row stride of {}: run this node on ORT's CPU EP, ONNXRUNTIME_EP_MLX_EXCLUDE_OPS)", rot / 2)
        } else {
            String::new()
        };
        return Err(err(
            OP,
            format!(
                "the caches are {width} wide: they must be rotary_embedding_dim / 2 = {}{hint}",
                rot / 2
            ),
        ));
    }
    if seq > rows {
        return Err(err(
            OP,
            format!(
                "a sequence of {seq} is longer than the {rows}-row cache (ORT does not grow it)"
            ),
        ));
    }
    let ids_shape = position_ids.shape();
    let positions = if ids_shape.iter().product::<i64>() == 1 && ids_shape.len() <= 1 {
        // One start position: token s at start + s, for every batch entry.
        let start = ops::reshape(&position_ids, &[1, 1], s)?;
        cx.require_in_range(
            &start,
            0,
            rows - seq,
            format!("{OP}: the position_ids start with sequence length {seq} exceeds the cos/sin cache range [0, {rows})"),
        )?;
        let steps = ops::reshape(
            &ops::arange(0.0, seq as f64, 1.0, Dtype::I64, s)?,
            &[1, seq],
            s,
        )?;
        ops::broadcast_to(&ops::add(&start, &steps, s)?, &[b, seq], s)?
    } else if ids_shape == [b, seq] {
        position_ids.clone()
    } else {
        return Err(err(
            OP,
            format!("position_ids has shape {ids_shape:?}: it must hold one value or be [batch={b}, sequence={seq}]"),
        ));
    };
    let cos = cache_rows(cx, &cos_cache, &positions, "cos_cache", OP)?;
    let sin = cache_rows(cx, &sin_cache, &positions, "sin_cache", OP)?;
    let rank = shape.len();
    rotate_heads(
        &x4,
        &for_layout(&cos, rank, s)?,
        &for_layout(&sin, rank, s)?,
        rot,
        interleaved == 1,
        &shape,
        OP,
        s,
    )
}

/// ORT's com.microsoft kernel refuses `rotary_embedding_dim` without `num_heads` when the
/// session is built.
fn ms_rotary_claim(node: &Node) -> Verdict {
    if let Some(declined) = attrs_out_of_range(node) {
        return declined;
    }
    let rot = node.attr_or("rotary_embedding_dim", 0i64);
    let num_heads = node.attr_or("num_heads", 0i64);
    if rot > 0 && num_heads <= 0 {
        return Verdict::decline(
            "rotary_embedding_dim without num_heads (ORT's kernel refuses it)",
        );
    }
    if let Some(width) = node
        .input_shape(2)
        .and_then(|dims| dims.get(1).copied().flatten())
    {
        if rot > 0 && width != rot / 2 {
            return Verdict::decline(format!(
                "caches {width} wide with rotary_embedding_dim {rot}: ORT takes a cache head_size / 2 wide there but reads it with a row stride of rotary_embedding_dim / 2"
            ));
        }
    }
    Verdict::Claim
}

/// Which position stream (0 = T, 1 = H, 2 = W) feeds each of the `half` cos/sin columns:
/// contiguous sections (`mrope_layout` 0, Qwen2-VL) or H and W every third column from 1 and 2
/// (`mrope_layout` 1, Qwen3-VL), as ORT assigns them.
fn stream_of_columns(section: &[i64], interleaved_layout: bool, half: i64) -> Vec<i32> {
    let half = half.max(0) as usize;
    let mut owner = vec![0i32; half];
    if interleaved_layout {
        for (stream, &count) in section.iter().enumerate().take(3).skip(1) {
            let end = (count.max(0) as usize).saturating_mul(3).min(half);
            for column in (stream..end).step_by(3) {
                owner[column] = stream as i32;
            }
        }
    } else {
        let mut column = 0usize;
        for (stream, &count) in section.iter().enumerate().take(3) {
            for _ in 0..count.max(0) {
                if column < half {
                    owner[column] = stream as i32;
                    column += 1;
                }
            }
        }
    }
    owner
}

/// Multimodal rotary embedding (Qwen2-VL's M-RoPE): like com.microsoft RotaryEmbedding with
/// `position_ids` `[3, batch, sequence]`, one position stream each for time, height and width;
/// each cos/sin column comes from the stream `mrope_section` (and `mrope_layout`: 0 sectioned,
/// 1 interleaved) assigns it, scaled by `scale` and rounded to the element type, as in ORT.
#[onnx_op(
    domain = "com.microsoft", op = "MRotaryEmbedding", since = 1, types(T = F32 | F16 | BF16, M = I64),
    inputs(input: T, position_ids: M, cos_cache: T, sin_cache: T), outputs(output: T),
    shape = ShapeKeyed, claim = mrotary_claim,
    declines = "rotary_embedding_dim without num_heads, rotary_embedding_dim or num_heads outside [0, INT_MAX], mrope_section not three non-negative values, mrope_layout other than 0 or 1 (ORT's kernel refuses each)"
)]
#[allow(clippy::too_many_arguments)] // four inputs and seven attributes, as ORT has them
fn m_rotary_embedding(
    cx: &mut Lower,
    input: Array,
    position_ids: Array,
    cos_cache: Array,
    sin_cache: Array,
    #[attr] mrope_section: Vec<i64>,
    #[attr(default = 0)] interleaved: i64,
    #[attr(default = 0)] num_heads: i64,
    #[attr(default = 0)] rotary_embedding_dim: i64,
    #[attr(default = 0)] mrope_layout: i64,
    #[attr(default = 0)] is_packed_batching: i64,
    #[attr(default = 1.0)] scale: f32,
) -> Result<Array> {
    const OP: &str = "com.microsoft.MRotaryEmbedding";
    let s = cx.stream();
    let shape = input.shape();
    if shape.len() == 3 && num_heads <= 0 {
        return Err(err(OP, "num_heads must be positive for a 3-D input".into()));
    }
    let x4 = heads(&input, num_heads, None, OP, s)?;
    let [b, seq] = match shape.len() {
        3 => [shape[0], shape[1]],
        _ => [shape[0], shape[2]],
    };
    let head = x4.shape()[3];
    let rot = if rotary_embedding_dim > 0 {
        rotary_embedding_dim
    } else {
        head
    };
    let (cos_shape, sin_shape) = (cos_cache.shape(), sin_cache.shape());
    if cos_shape.len() != 2 || cos_shape != sin_shape || cos_shape[1] != rot / 2 {
        return Err(err(
            OP,
            format!("cos_cache {cos_shape:?} and sin_cache {sin_shape:?} must both be [max_sequence, rotary_embedding_dim / 2 = {}]", rot / 2),
        ));
    }
    let half = rot / 2;
    if mrope_section.iter().sum::<i64>() != half {
        return Err(err(
            OP,
            format!(
                "mrope_section {mrope_section:?} must add up to rotary_embedding_dim / 2 = {half}"
            ),
        ));
    }
    if position_ids.shape() != [3, b, seq] {
        return Err(err(
            OP,
            format!(
                "position_ids has shape {:?}: it must be [3, batch={b}, sequence={seq}]",
                position_ids.shape()
            ),
        ));
    }
    let rows = cos_shape[0];
    if is_packed_batching != 1 && seq > rows {
        return Err(err(
            OP,
            format!(
                "a sequence of {seq} is longer than the {rows}-row cache (ORT does not grow it)"
            ),
        ));
    }
    let owner = stream_of_columns(&mrope_section, mrope_layout == 1, half);
    let owner = Array::from_slice(&owner, &[half])?;
    let streams = ops::split_at(&position_ids, &[1, 2], 0, s)?;
    let mut pick = |cache: &Array, what: &str| -> Result<Array> {
        let mut combined: Option<Array> = None;
        for (k, ids) in streams.iter().enumerate() {
            let ids = ops::reshape(ids, &[b, seq], s)?;
            let rows_k = cache_rows(cx, cache, &ids, what, OP)?;
            combined = Some(match combined {
                None => rows_k,
                Some(c) => {
                    let mine = ops::equal(&owner, &Array::scalar(k as i32)?, s)?;
                    ops::where_(&mine, &rows_k, &c, s)?
                }
            });
        }
        let combined = combined.ok_or_else(|| err(OP, "no position streams".into()))?;
        // ORT scales each column in float32 and stores it in the element type.
        let scaled = ops::multiply(
            &ops::astype(&combined, Dtype::F32, s)?,
            &Array::scalar(scale)?,
            s,
        )?;
        Ok(ops::astype(&scaled, cache.dtype(), s)?)
    };
    let cos = pick(&cos_cache, "cos_cache")?;
    let sin = pick(&sin_cache, "sin_cache")?;
    let rank = shape.len();
    rotate_heads(
        &x4,
        &for_layout(&cos, rank, s)?,
        &for_layout(&sin, rank, s)?,
        rot,
        interleaved == 1,
        &shape,
        OP,
        s,
    )
}

/// What ORT's MRotaryEmbedding kernel refuses whatever the inputs.
fn mrotary_claim(node: &Node) -> Verdict {
    if let Some(declined) = attrs_out_of_range(node) {
        return declined;
    }
    let (rot, heads) = (
        node.attr_or("rotary_embedding_dim", 0i64),
        node.attr_or("num_heads", 0i64),
    );
    if rot < 0 || heads < 0 || (rot > 0 && heads == 0) {
        return Verdict::decline(format!(
            "rotary_embedding_dim {rot} with num_heads {heads} (ORT's kernel needs both non-negative, and num_heads with rotary_embedding_dim)"
        ));
    }
    match node.attr_as::<Vec<i64>>("mrope_section") {
        Some(v) if v.len() == 3 && v.iter().all(|&x| (0..=i32::MAX as i64).contains(&x)) => {}
        _ => {
            return Verdict::decline(
                "mrope_section other than three non-negative values (ORT's kernel refuses it)",
            )
        }
    }
    let layout = node.attr_or("mrope_layout", 0i64);
    if layout != 0 && layout != 1 {
        return Verdict::decline(format!("mrope_layout {layout} (ORT's kernel takes 0 or 1)"));
    }
    if node.input_rank(0) == Some(3) && heads <= 0 {
        return Verdict::decline("a 3-D input without num_heads (ORT's kernel fails it)");
    }
    Verdict::Claim
}
