//! The attention family: com.microsoft GroupQueryAttention, MultiHeadAttention, Attention and
//! PagedAttention, ai.onnx Attention, and the rotary embeddings, one file each.
//!
//! This module is the core they share. The ops differ in how they lay out Q/K/V, which positions
//! they mask and with what value, where the soft cap sits and what they return, so the core offers
//! building blocks rather than one entry point: an op composes them in its own order. Scores and
//! softmax are float32 whatever the input type, as ORT's CPU kernels compute them, and rounded to
//! the element type once, when the values are mixed. Where MLX's fused
//! `scaled_dot_product_attention` has exactly an op's semantics, the op calls it instead.

mod bert;
mod dmmha;
pub(crate) mod formed;
mod gqa;
mod mha;
mod onnx_attention;
mod packed;
mod paged;
mod rotary;

use mlx_kernels::{custom, ops, Array, Dtype, Stream};

use crate::table::lower::float32;
use crate::{Lower, OpError, Result};

/// An extra logit in every softmax row: it takes probability mass without contributing a value.
#[derive(Debug, Clone, Copy)]
pub enum Sink<'a> {
    /// A zero logit (ORT's `smooth_softmax`: `exp(x_i) / (1 + Σ exp(x_j))`).
    Zero,
    /// One logit per query head, shape `[Hq]` (ORT's `head_sink`).
    PerHead(&'a Array),
}

/// The most keys for which unmasked float32 attention runs as one hand-written kernel
/// ([`custom::dense_attention`]) on a GPU. MLX composes float32 attention from its scores'
/// product, a softmax and the mix, after copying the heads out of their rows: five launches
/// or more, each costing MLX's backend host time (11–20 µs a primitive on an H100 host,
/// `docs/PERFORMANCE.md`), where the kernel is one. Its arithmetic runs on CUDA cores with
/// tiles in shared memory, where the scores' products run on cuBLAS, so for long rows of keys
/// MLX's path stays: up to 128 keys the products are small beside the launches, and at 256
/// the kernel measured slower (an H100, the encoder layer at seq 256: 256 µs a run against
/// 229 with MLX's path, `docs/PERFORMANCE.md`).
const ONE_KERNEL_MAX_KEYS: i64 = 128;

/// The rewrite the plan's summary counts when [`in_one_kernel`] answers.
pub(crate) const ONE_KERNEL: &str = "attention(s) in one hand-written kernel";

/// `softmax(scale · q·kᵀ) · v` over every key, for `q` `[B, Hq, L, D]` and `k`, `v`
/// `[B, Hkv, S, D]` float32 heads, as one hand-written kernel where the stream runs it, the
/// plan's shapes are fixed (the kernel's launch is built for them) and the keys are few
/// ([`ONE_KERNEL_MAX_KEYS`]); `None` otherwise, for the caller's own path. Like a
/// max-subtracted softmax, the kernel answers NaN on a row holding a NaN or +inf score, or
/// only -inf ones.
pub(crate) fn in_one_kernel(
    cx: &Lower,
    q: &Array,
    k: &Array,
    v: &Array,
    scale: f32,
) -> Result<Option<Array>> {
    let s = cx.stream();
    let (qs, ks) = (q.shape(), k.shape());
    let short = ks.len() == 4 && ks[2] <= ONE_KERNEL_MAX_KEYS;
    let float32 = [q, k, v].iter().all(|a| a.dtype() == Dtype::F32);
    let takes = float32 && custom::dense_attention_takes(&qs, &ks, &v.shape(), Dtype::F32);
    if !(short && takes && cx.shapes_fixed() && custom::paged_prefill_attention_runs_on(s)) {
        return Ok(None);
    }
    // The kernel is held to its reference with positive scales; a negated query with the
    // scale's magnitude is the same product exactly (negation is exact).
    let y = if scale < 0.0 {
        custom::dense_attention(&ops::negative(q, s)?, k, v, -scale, s)?
    } else {
        custom::dense_attention(q, k, v, scale, s)?
    };
    cx.note_rewrite(ONE_KERNEL);
    Ok(Some(y))
}

/// `(batch, heads, seq, dim)` of a 4-D attention operand.
fn dims4(a: &Array, what: &str) -> Result<[i64; 4]> {
    <[i64; 4]>::try_from(a.shape()).map_err(|_| {
        OpError::new(format!(
            "{what} has shape {:?}: attention operands are [batch, heads, sequence, head_size]",
            a.shape()
        ))
    })
}

/// How many query heads share one key/value head.
fn group_size(q_heads: i64, kv_heads: i64) -> Result<i64> {
    if kv_heads <= 0 || q_heads % kv_heads != 0 {
        return Err(OpError::new(format!(
            "{q_heads} query heads cannot share {kv_heads} key/value heads: the query head count must be a positive multiple of the key/value head count"
        )));
    }
    Ok(q_heads / kv_heads)
}

/// `scale · q·kᵀ` in float32, `[B, Hq, Sq, Skv]`, for `q` `[B, Hq, Sq, D]` and `k`
/// `[B, Hkv, Skv, D]`. Query head `h` reads key head `h / (Hq / Hkv)`, as ORT and MLX group them.
/// The scale multiplies the dot products, as ORT's GEMM applies its alpha: scaling `q` first
/// instead keeps a product that overflows float32 finite (fuzz s1-MultiHeadAttention-1-37).
pub fn scores(q: &Array, k: &Array, scale: f32, s: &Stream) -> Result<Array> {
    let [b, hq, sq, d] = dims4(q, "Q")?;
    let [_, hkv, skv, _] = dims4(k, "K")?;
    let group = group_size(hq, hkv)?;
    let (q, k) = (float32(q, s)?, float32(k, s)?);
    let products = if group == 1 {
        ops::matmul(&q, &ops::transpose(&k, &[0, 1, 3, 2], s)?, s)?
    } else {
        // [B, Hkv, group, Sq, D] against [B, Hkv, 1, D, Skv]: no copy of K per query head.
        let q = ops::reshape(&q, &[b, hkv, group, sq, d], s)?;
        let k = ops::expand_dims(&ops::transpose(&k, &[0, 1, 3, 2], s)?, &[2], s)?;
        ops::reshape(&ops::matmul(&q, &k, s)?, &[b, hq, sq, skv], s)?
    };
    Ok(ops::multiply(&products, &Array::scalar(scale)?, s)?)
}

/// `cap · tanh(scores / cap)`.
pub fn soft_cap(scores: &Array, cap: f32, s: &Stream) -> Result<Array> {
    let cap = Array::scalar(cap)?;
    let squashed = ops::tanh(&ops::divide(scores, &cap, s)?, s)?;
    Ok(ops::multiply(&squashed, &cap, s)?)
}

/// `scores` where `keep` holds, `fill` elsewhere (`keep` is boolean, broadcastable).
pub fn masked(scores: &Array, keep: &Array, fill: f32, s: &Stream) -> Result<Array> {
    Ok(ops::where_(keep, scores, &Array::scalar(fill)?, s)?)
}

/// Float32 softmax over the last axis of `scores` `[B, H, Sq, Skv]`, with an optional sink logit
/// in every row's denominator.
pub fn softmax_rows(scores: &Array, sink: Option<Sink<'_>>, s: &Stream) -> Result<Array> {
    let scores = float32(scores, s)?;
    let Some(sink) = sink else {
        return Ok(ops::softmax(&scores, -1, true, s)?);
    };
    let shape = scores.shape();
    let [b, h, sq, _] = <[i64; 4]>::try_from(shape.clone())
        .map_err(|_| OpError::new(format!("scores have shape {shape:?}, not 4-D")))?;
    let logit = match sink {
        Sink::Zero => ops::broadcast_to(&Array::scalar(0f32)?, &[b, h, sq, 1], s)?,
        Sink::PerHead(per_head) => {
            let per_head = ops::reshape(&float32(per_head, s)?, &[1, h, 1, 1], s)?;
            ops::broadcast_to(&per_head, &[b, h, sq, 1], s)?
        }
    };
    // The sink is one more column of the row: softmax over both, then drop it.
    let with_sink = ops::concatenate(&[scores, logit], -1, s)?;
    let probs = ops::softmax(&with_sink, -1, true, s)?;
    let columns = shape[3] as i32;
    Ok(ops::slice(
        &probs,
        &[0, 0, 0, 0],
        &[b as i32, h as i32, sq as i32, columns],
        &[1, 1, 1, 1],
        s,
    )?)
}

/// `probs · v` rounded to `out`: `probs` float32 `[B, Hq, Sq, Skv]`, `v` `[B, Hkv, Skv, Dv]`,
/// grouped as in [`scores`]; the result is `[B, Hq, Sq, Dv]`.
pub fn mix(probs: &Array, v: &Array, out: Dtype, s: &Stream) -> Result<Array> {
    let [b, hq, sq, skv] = dims4(probs, "the attention probabilities")?;
    let [_, hkv, _, dv] = dims4(v, "V")?;
    let group = group_size(hq, hkv)?;
    let v = float32(v, s)?;
    let mixed = if group == 1 {
        ops::matmul(probs, &v, s)?
    } else {
        let probs = ops::reshape(probs, &[b, hkv, group, sq, skv], s)?;
        let grouped = ops::matmul(&probs, &ops::expand_dims(&v, &[2], s)?, s)?;
        ops::reshape(&grouped, &[b, hq, sq, dv], s)?
    };
    Ok(ops::astype(&mixed, out, s)?)
}

/// Rotary embedding over the whole last axis of `x` (`D` even), computed in float32 and rounded
/// back to `x`'s type. `cos` and `sin` broadcast to `x[..., D/2]`. Non-interleaved rotates the
/// halves `(x1, x2) → (x1·cos − x2·sin, x2·cos + x1·sin)`; interleaved rotates the pairs
/// `(x[2i], x[2i+1])` the same way.
pub fn rotate(x: &Array, cos: &Array, sin: &Array, interleaved: bool, s: &Stream) -> Result<Array> {
    Rotation::new(cos, sin, interleaved, s)?.apply(x, s)
}

/// A rotary rotation's tables, ready for any number of `apply`s (a decoder's layers share one
/// per step). `x` is viewed as pairs `[..., 2, D/2]` (halves) or `[..., D/2, 2]` (interleaved);
/// the rotation is then one elementwise expression, `pairs · cos + swapped · (−sin, sin)`, with
/// `swapped` the pairs in the other order: no split and no concatenation, so MLX fuses it into
/// one kernel beside the swap's gather.
#[derive(Clone)]
pub struct Rotation {
    /// `cos` with the pair axis inserted (broadcast over it), float32.
    cos: Array,
    /// `(−sin, sin)` along the pair axis, float32.
    signed_sin: Array,
    interleaved: bool,
}

impl Rotation {
    pub fn new(cos: &Array, sin: &Array, interleaved: bool, s: &Stream) -> Result<Rotation> {
        let axis = Rotation::pair_axis(interleaved);
        let cos = ops::expand_dims(&float32(cos, s)?, &[axis], s)?;
        let sin = ops::expand_dims(&float32(sin, s)?, &[axis], s)?;
        let signed_sin = ops::concatenate(&[ops::negative(&sin, s)?, sin], axis, s)?;
        Ok(Rotation {
            cos,
            signed_sin,
            interleaved,
        })
    }

    /// The pair axis, counted from the end: `[..., 2, D/2]` or `[..., D/2, 2]`.
    fn pair_axis(interleaved: bool) -> i32 {
        if interleaved {
            -1
        } else {
            -2
        }
    }

    /// `x` rotated, in `x`'s type.
    pub fn apply(&self, x: &Array, s: &Stream) -> Result<Array> {
        let shape = x.shape();
        let d = *shape.last().unwrap_or(&0);
        if d % 2 != 0 {
            return Err(OpError::new(format!(
                "rotary embedding over {d} features: the rotated size must be even"
            )));
        }
        let mut pairs_shape = shape[..shape.len().saturating_sub(1)].to_vec();
        pairs_shape.extend(if self.interleaved {
            [d / 2, 2]
        } else {
            [2, d / 2]
        });
        let pairs = ops::reshape(x, &pairs_shape, s)?;
        // Each pair swapped: the pair axis read backwards, a view that the products read in
        // place (a gather would be a kernel of its own).
        let axis = (pairs_shape.len() as i32 + Rotation::pair_axis(self.interleaved)) as usize;
        let mut start = vec![0; pairs_shape.len()];
        let mut stop: Vec<i32> = pairs_shape.iter().map(|&d| d as i32).collect();
        let mut step = vec![1; pairs_shape.len()];
        // From index 1 down to index 0: a stop of -3 is one before the first of 2.
        (start[axis], stop[axis], step[axis]) = (1, -3, -1);
        let swapped = ops::slice(&pairs, &start, &stop, &step, s)?;
        let rotated = ops::add(
            &ops::multiply(&float32(&pairs, s)?, &self.cos, s)?,
            &ops::multiply(&float32(&swapped, s)?, &self.signed_sin, s)?,
            s,
        )?;
        Ok(ops::reshape(
            &ops::astype(&rotated, x.dtype(), s)?,
            &shape,
            s,
        )?)
    }
}

/// The rotated width `2·cos_cache.cols` of an op with `[max_position, rotary_dim / 2]` cos/sin
/// caches, checked as ORT's kernels check them (equal widths, a multiple of 8, at most half of
/// a head size that is a multiple of 16, at least `min_rows` rows); `op` names the op in errors.
pub fn rotary_width(op: &str, cos: &Array, sin: &Array, head: i64, min_rows: i64) -> Result<i64> {
    let (c, sn) = (cos.shape(), sin.shape());
    if c.len() != 2 || sn.len() != 2 {
        return Err(OpError::new(format!(
            "{op}: cos_cache and sin_cache must be 2-D [max_position, rotary_dim / 2]"
        )));
    }
    if head % 16 != 0 {
        return Err(OpError::new(format!(
            "{op}: head_size shall be a multiple of 16 with rotary embedding, got {head}"
        )));
    }
    if c[1] != sn[1] || c[1] == 0 || c[1] > (head / 16) * 8 || c[1] % 8 != 0 {
        return Err(OpError::new(format!(
            "{op}: cos_cache/sin_cache dimension 1 ({}, {}) must be equal, positive, <= head_size / 2 and a multiple of 8",
            c[1], sn[1]
        )));
    }
    if c[0] < min_rows || sn[0] < min_rows {
        return Err(OpError::new(format!(
            "{op}: cos_cache/sin_cache have {} and {} rows, fewer than {min_rows}",
            c[0], sn[0]
        )));
    }
    Ok(2 * c[1])
}

/// An int32 scalar (positions, lengths and indices are int32 in the attention lowerings).
pub fn i32s(v: i64, s: &Stream) -> Result<Array> {
    crate::table::consts::scalar(v as f64, Dtype::I32, s)
}

/// `a` (int32) clamped to `[low, high]`: indices made safe for a gather whose run-time check
/// reports the out-of-range ones.
pub fn clamp(a: &Array, low: i64, high: i64, s: &Stream) -> Result<Array> {
    Ok(ops::minimum(
        &ops::maximum(a, &i32s(low, s)?, s)?,
        &i32s(high, s)?,
        s,
    )?)
}

/// A packed variable-length batch (PackedMultiHeadAttention, PagedAttention): sequence `b` holds
/// tokens `[cumulative[b], cumulative[b + 1])`. Per sequence (`[B]`, int32) its first token,
/// length and end.
pub struct PackedSequences {
    pub starts: Array,
    pub lengths: Array,
    pub ends: Array,
}

impl PackedSequences {
    /// Reads `cumulative_sequence_length` `[B + 1]`, checked at run time to start at 0 and end at
    /// `tokens`, with every length in `[0, max_length]` (`too_long` says what that bound is;
    /// a negative length means the sums decrease).
    pub fn of(
        cx: &mut crate::Lower,
        op: &str,
        cumulative: &Array,
        batch: i64,
        tokens: i64,
        max_length: i64,
        too_long: String,
    ) -> Result<PackedSequences> {
        let s = cx.stream();
        let b = batch as i32;
        let cu = ops::astype(cumulative, Dtype::I32, s)?;
        let starts = ops::slice(&cu, &[0], &[b], &[1], s)?;
        let ends = ops::slice(&cu, &[1], &[b + 1], &[1], s)?;
        let lengths = ops::subtract(&ends, &starts, s)?;
        let first = ops::slice(&cu, &[0], &[1], &[1], s)?;
        let last = ops::slice(&cu, &[b], &[b + 1], &[1], s)?;
        cx.require(
            &ops::equal(&first, &i32s(0, s)?, s)?,
            format!("{op}: cumulative_sequence_length must start with 0"),
        )?;
        cx.require(
            &ops::equal(&last, &i32s(tokens, s)?, s)?,
            format!("{op}: cumulative_sequence_length must end with token_count {tokens}"),
        )?;
        cx.require_in_range(&lengths, 0, max_length, too_long)?;
        Ok(PackedSequences {
            starts,
            lengths,
            ends,
        })
    }

    /// Per token (`[T]`, `T ≥ 1`): its sequence and its index in it. Token t belongs to the
    /// sequence whose range holds it: the number of sequences that end at or before t.
    pub fn of_tokens(&self, batch: i64, tokens: i64, s: &Stream) -> Result<(Array, Array)> {
        let t = ops::arange(0.0, tokens as f64, 1.0, Dtype::I32, s)?;
        let ended = ops::less_equal(
            &ops::reshape(&self.ends, &[1, batch], s)?,
            &ops::reshape(&t, &[tokens, 1], s)?,
            s,
        )?;
        let sequence = ops::sum(&ops::astype(&ended, Dtype::I32, s)?, &[1], false, s)?;
        let sequence = clamp(&ops::astype(&sequence, Dtype::I32, s)?, 0, batch - 1, s)?;
        let index = ops::subtract(&t, &ops::take(&self.starts, &sequence, 0, s)?, s)?;
        Ok((sequence, index))
    }
}

pub use mlx_kernels::ops::{scaled_dot_product_attention as fused_attention, AttentionMask};
