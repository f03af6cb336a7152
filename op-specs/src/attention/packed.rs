//! com.microsoft PackedMultiHeadAttention: multi-head attention over sequences packed without
//! padding.
//!
//! ORT 1.31.1 has only a CUDA kernel for this op, so there is no CPU answer to compare with; the
//! semantics below follow its schema and the CUDA implementation
//! (`packed_multihead_attention.cc`, `packed_multihead_attention_impl.cu`,
//! `attention_softmax.cuh`).
//!
//! - `query`, `key`, `value` hold the real tokens of every sequence back to back (`[T, N·H]`,
//!   `[T, N·H]`, `[T, N·Hv]`), or `query` is packed QKV `[T, N, 3, H]`. `bias` `[2·N·H + N·Hv]`
//!   is added to Q, K and V in the element type, as ORT's kernels add it.
//! - `cumulative_sequence_length` `[B + 1]` says which tokens form which sequence; every token
//!   attends to all the tokens of its own sequence (no causal mask): `softmax(scale·q·kᵀ + bias)`
//!   in float32, `scale` defaulting to `1/√H`.
//! - `token_offset` `[B, S]` lists where each token sat in the padded batch (`b·S + i` for token
//!   `i` of sequence `b`), then the padding positions. `attention_bias`
//!   `[B or 1, N or 1, S, S]` is indexed by those padded positions.
//! - `mask_filter_value` is in the schema but no kernel reads it: the keys past a sequence's end
//!   are left out of its softmax exactly.
//!
//! What ORT's kernels leave undefined fails the run instead: cumulative lengths that do not rise
//! from 0 to `T` or a sequence longer than `S`, and a `token_offset` whose first `T` entries are
//! not the tokens' padded positions (ORT's fused kernels ignore it, its unfused one trusts it).
//!
//! The computation is ORT's unfused one: the tokens are gathered into a padded `[B, N, S, H]`
//! batch, attended with a key mask per sequence, and the real rows gathered back.

use mlx_kernels::{ops, Array, Dtype, Stream};

use super::{clamp, fused_attention, i32s, AttentionMask, PackedSequences};
use crate::table::consts::scalar;
use crate::{onnx_op, Lower, Node, OpError, Result, Verdict};

/// Packed (padding-free) multi-head attention for BERT-like encoders: separate Q/K/V or packed
/// QKV `[T, N, 3, H]`, an optional input-projection bias, per-sequence bidirectional attention
/// from `cumulative_sequence_length`, and an `attention_bias` in padded positions (broadcast
/// over batch and heads). Cumulative lengths or token offsets that disagree fail the run.
#[allow(clippy::too_many_arguments)] // seven inputs and three attributes, as ORT has them
#[onnx_op(
    domain = "com.microsoft", op = "PackedMultiHeadAttention", since = 1,
    types(T = F32 | F16, M = I32),
    inputs(query: T, key: T, value: T, bias: T, token_offset: M,
           cumulative_sequence_length: M, attention_bias: T),
    outputs(output: T), ignores(mask_filter_value: f32),
    shape = ShapeKeyed, claim = packed_claim,
    declines = "num_heads < 1 (ORT's kernel refuses it at construction)"
)]
fn packed_multi_head_attention(
    cx: &mut Lower,
    query: Array,
    key: Option<Array>,
    value: Option<Array>,
    bias: Option<Array>,
    token_offset: Array,
    cumulative_sequence_length: Array,
    attention_bias: Option<Array>,
    #[attr] num_heads: i64,
    #[attr(default = 0.0)] scale: f32,
) -> Result<Vec<Array>> {
    let dtype = query.dtype();
    let g = Geometry::of(
        &query,
        key.as_ref(),
        value.as_ref(),
        &token_offset,
        &cumulative_sequence_length,
        num_heads,
    )?;
    if let Some(b) = &bias {
        let want = g.heads * (2 * g.head + g.v_head);
        if b.shape() != [want] {
            return Err(OpError::new(format!(
                "PackedMultiHeadAttention: bias has shape {:?}; it must be [hidden_size + hidden_size + v_hidden_size] = [{want}]",
                b.shape()
            )));
        }
    }
    if let Some(ab) = &attention_bias {
        let d = ab.shape();
        let fits = d.len() == 4
            && (d[0] == g.batch || d[0] == 1)
            && (d[1] == g.heads || d[1] == 1)
            && d[2] == g.seq
            && d[3] == g.seq;
        if !fits {
            return Err(OpError::new(format!(
                "PackedMultiHeadAttention: attention_bias has shape {d:?}; it must be [batch_size ({}) or 1, num_heads ({}) or 1, sequence_length ({}), sequence_length]",
                g.batch, g.heads, g.seq
            )));
        }
    }

    let rows = PackedSequences::of(
        cx,
        "PackedMultiHeadAttention",
        &cumulative_sequence_length,
        g.batch,
        g.tokens,
        g.seq,
        format!(
            "PackedMultiHeadAttention: cumulative_sequence_length must be non-decreasing, each sequence at most sequence_length = {} tokens (token_offset's dimension 1)",
            g.seq
        ),
    )?;
    if g.tokens == 0 {
        let s = cx.stream();
        let empty = ops::broadcast_to(&scalar(0.0, dtype, s)?, &[0, g.heads * g.v_head], s)?;
        return Ok(vec![empty]);
    }
    let s = cx.stream();
    let (sequence, index) = rows.of_tokens(g.batch, g.tokens, s)?;
    // Each token's padded position b·S + i, which token_offset must list first.
    let padded_at = ops::add(&ops::multiply(&sequence, &i32s(g.seq, s)?, s)?, &index, s)?;
    let offsets = ops::reshape(&token_offset, &[g.batch * g.seq], s)?;
    let listed = ops::slice(&offsets, &[0], &[g.tokens as i32], &[1], s)?;
    cx.require(
        &ops::equal(&ops::astype(&listed, Dtype::I32, s)?, &padded_at, s)?,
        format!(
            "PackedMultiHeadAttention: token_offset must start with each token's position in the padded batch (b · sequence_length + i for token i of sequence b, sequence_length = {}), in token order",
            g.seq
        ),
    )?;
    let s = cx.stream();

    let (q, k, v) = split_heads(&query, key.as_ref(), value.as_ref(), bias.as_ref(), &g, s)?;
    // The padded batch: slot (b, i) holds token cu[b] + i when i < len[b].
    let (b_, s_) = (g.batch, g.seq);
    let i = ops::reshape(
        &ops::arange(0.0, s_ as f64, 1.0, Dtype::I32, s)?,
        &[1, s_],
        s,
    )?;
    let column = |a: &Array| ops::reshape(a, &[b_, 1], s);
    let source = ops::add(&column(&rows.starts)?, &i, s)?;
    let source = clamp(&source, 0, g.tokens - 1, s)?;
    let source = ops::reshape(&source, &[b_ * s_], s)?;
    let real = ops::less(&i, &column(&rows.lengths)?, s)?; // [B, S]
    let pad = |x: &Array, d: i64| -> Result<Array> {
        let x = ops::take(x, &source, 0, s)?;
        let x = ops::reshape(&x, &[b_, s_, g.heads, d], s)?;
        let x = ops::transpose(&x, &[0, 2, 1, 3], s)?;
        Ok(ops::astype(&x, Dtype::F32, s)?)
    };
    let (q4, k4, v4) = (pad(&q, g.head)?, pad(&k, g.head)?, pad(&v, g.v_head)?);
    let keys = ops::reshape(&real, &[b_, 1, 1, s_], s)?;
    let scale = if scale == 0.0 {
        1.0 / (g.head as f32).sqrt()
    } else {
        scale
    };
    // Float32 throughout, rounded once: ORT's softmax reads its scores in float32.
    let out = match &attention_bias {
        Some(ab) => {
            let ab = ops::astype(ab, Dtype::F32, s)?;
            let additive = ops::where_(&keys, &ab, &Array::scalar(f32::NEG_INFINITY)?, s)?;
            fused_attention(&q4, &k4, &v4, scale, AttentionMask::Array(&additive), s)?
        }
        None => fused_attention(&q4, &k4, &v4, scale, AttentionMask::Array(&keys), s)?,
    };
    // [B, N, S, Hv] → [B·S, N·Hv], then each token's row.
    let out = ops::transpose(&out, &[0, 2, 1, 3], s)?;
    let out = ops::reshape(&out, &[b_ * s_, g.heads * g.v_head], s)?;
    let at = clamp(&padded_at, 0, b_ * s_ - 1, s)?;
    let out = ops::take(&out, &at, 0, s)?;
    Ok(vec![ops::astype(&out, dtype, s)?])
}

/// The shapes of one call.
struct Geometry {
    tokens: i64,
    heads: i64,
    head: i64,
    v_head: i64,
    batch: i64,
    seq: i64,
    packed: bool,
}

impl Geometry {
    fn of(
        query: &Array,
        key: Option<&Array>,
        value: Option<&Array>,
        token_offset: &Array,
        cumulative: &Array,
        num_heads: i64,
    ) -> Result<Geometry> {
        let err = |m: String| Err(OpError::new(format!("PackedMultiHeadAttention: {m}")));
        let q = query.shape();
        let (tokens, hidden, packed) = match q.as_slice() {
            [t, h] => (*t, *h, false),
            [t, n, three, h] => {
                if *n != num_heads || *three != 3 {
                    return err(format!(
                        "packed QKV query has shape {q:?}; it must be [token_count, num_heads = {num_heads}, 3, head_size]"
                    ));
                }
                (*t, n * h, true)
            }
            _ => {
                return err(format!(
                    "query has shape {q:?}; it must be [token_count, hidden_size] or packed QKV [token_count, num_heads, 3, head_size]"
                ))
            }
        };
        let mut v_hidden = hidden;
        if packed {
            if key.is_some() || value.is_some() {
                return err("key and value must be absent when query is packed QKV (4-D)".into());
            }
        } else {
            let (Some(k), Some(v)) = (key, value) else {
                return err("key and value are required when query is 2-D".into());
            };
            if k.shape() != q {
                return err(format!(
                    "key has shape {:?}; it must be the query's shape {q:?}",
                    k.shape()
                ));
            }
            match v.shape().as_slice() {
                [t, vh] if *t == tokens => v_hidden = *vh,
                d => {
                    return err(format!(
                        "value has shape {d:?}; it must be [token_count = {tokens}, v_hidden_size]"
                    ))
                }
            }
        }
        if num_heads < 1 || hidden % num_heads != 0 || v_hidden % num_heads != 0 {
            return err(format!(
                "hidden_size {hidden} and v_hidden_size {v_hidden} must be multiples of num_heads {num_heads}"
            ));
        }
        let (batch, seq) = match token_offset.shape().as_slice() {
            [b, s] => (*b, *s),
            d => {
                return err(format!(
                    "token_offset has shape {d:?}; it must be [batch_size, sequence_length]"
                ))
            }
        };
        if cumulative.shape() != [batch + 1] {
            return err(format!(
                "cumulative_sequence_length has shape {:?}; it must be [batch_size + 1] = [{}]",
                cumulative.shape(),
                batch + 1
            ));
        }
        let slots = batch.checked_mul(seq);
        if slots.is_none_or(|n| n >= i32::MAX as i64 || tokens > n) {
            return err(format!(
                "{tokens} tokens do not fit a padded batch of batch_size {batch} × sequence_length {seq} (token_offset's shape), or it has 2^31 positions or more"
            ));
        }
        Ok(Geometry {
            tokens,
            heads: num_heads,
            head: hidden / num_heads,
            v_head: v_hidden / num_heads,
            batch,
            seq,
            packed,
        })
    }
}

/// Q `[T, N, H]`, K `[T, N, H]` and V `[T, N, Hv]` from the separate or packed inputs, with the
/// bias added in the element type.
fn split_heads(
    query: &Array,
    key: Option<&Array>,
    value: Option<&Array>,
    bias: Option<&Array>,
    g: &Geometry,
    s: &Stream,
) -> Result<(Array, Array, Array)> {
    let (t, n) = (g.tokens, g.heads);
    let (q, k, v) = match (g.packed, key, value) {
        (false, Some(k), Some(v)) => (
            ops::reshape(query, &[t, n, g.head], s)?,
            ops::reshape(k, &[t, n, g.head], s)?,
            ops::reshape(v, &[t, n, g.v_head], s)?,
        ),
        _ => {
            // [T, N, 3, H]: the three along axis 2.
            let parts = ops::split_at(query, &[1, 2], 2, s)?;
            let one = |p: &Array| ops::squeeze(p, &[2], s);
            (one(&parts[0])?, one(&parts[1])?, one(&parts[2])?)
        }
    };
    let Some(bias) = bias else {
        return Ok((q, k, v));
    };
    let qk = (n * g.head) as i32;
    let parts = ops::split_at(bias, &[qk, 2 * qk], 0, s)?;
    let add = |x: &Array, b: &Array, d: i64| -> Result<Array> {
        let b = ops::astype(&ops::reshape(b, &[1, n, d], s)?, x.dtype(), s)?;
        Ok(ops::add(x, &b, s)?)
    };
    Ok((
        add(&q, &parts[0], g.head)?,
        add(&k, &parts[1], g.head)?,
        add(&v, &parts[2], g.v_head)?,
    ))
}

fn packed_claim(node: &Node) -> Verdict {
    match node.attr_as::<i64>("num_heads") {
        Some(n) if n >= 1 => Verdict::Claim,
        _ => Verdict::decline(
            "num_heads missing or below 1: ORT's kernel refuses the node at construction",
        ),
    }
}
