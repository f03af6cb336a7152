//! com.microsoft MultiHeadAttention, as ORT 1.31.1's CPU kernel computes it, and the attention
//! step it shares with com.microsoft Attention (`bert.rs`).
//!
//! What ORT's CPU kernel does, and so what this does:
//! - scores are `scale · q·kᵀ` in float32 (`scale` 0 means `1/√head_size`), then the additive
//!   `attention_bias`, then the additive mask; float16 nodes run the same float32 arithmetic (ORT
//!   casts them to float around its float kernel) and round once at the end;
//! - a masked key adds `mask_filter_value` (default −10000) to its score, it does not replace it,
//!   so a row whose keys are all masked is the softmax of its shifted scores (not NaN and not
//!   uniform);
//! - `unidirectional` (when the query has more than one position) sets the score of key `m` for
//!   query `s` to float's lowest value when `m > past + s`, aligned to the start of the new keys,
//!   except in the last query row, which ORT's loop leaves unmasked;
//! - the `qk` output is the scores after the bias and the mask, before the softmax.

use mlx_kernels::{ops, Array, Dtype, Stream};

use super::{fused_attention, in_one_kernel, mix, scores, softmax_rows, AttentionMask};
use crate::table::consts::zeros;
use crate::{onnx_op, Lower, Node, OpError, Result, Verdict};

/// Which keys each batch entry keeps, before the causal mask.
pub(super) enum Padding {
    None,
    /// `[B]` int32: keys `j < end[b]` are kept.
    End(Array),
    /// `[B]` ends and `[B]` starts: keys `start[b] <= j < end[b]` are kept.
    EndStart(Array, Array),
    /// `[B, T]` int32: keys whose entry is positive are kept.
    Keys(Array),
    /// `[B, S, T]` int32: per query position, keys whose entry is positive are kept.
    Positions(Array),
}

/// The options of one attention step.
pub(super) struct Step<'a> {
    /// The `scale` attribute (0: `1/√head_size`).
    pub scale: f32,
    pub mask_filter_value: f32,
    pub unidirectional: bool,
    pub padding: Padding,
    /// `[B or 1, N or 1, S, T]`, added to the scaled scores.
    pub attention_bias: Option<&'a Array>,
    /// Whether the node asks for the scores (`qk`).
    pub want_scores: bool,
    /// The element type of the output.
    pub out: Dtype,
}

/// The attention of `q` `[B, N, S, H]` over `k` `[B, N, T, H]` and `v` `[B, N, T, Hv]` whose
/// first `past` positions are the past: the output `[B, S, N·Hv]` (in `step.out`) and, when asked
/// for, the float32 scores `[B, N, S, T]` after the bias and the mask.
pub(super) fn attend(
    cx: &Lower,
    q: &Array,
    k: &Array,
    v: &Array,
    past: i64,
    step: &Step<'_>,
) -> Result<(Array, Option<Array>)> {
    let s = cx.stream();
    let [b, n, sq, h] = dims4(q)?;
    let t = dims4(k)?[2];
    let hv = dims4(v)?[3];
    let causal = step.unidirectional && sq > 1;
    if sq == 0 || t == 0 {
        // No query, or no key: ORT writes zeros.
        let out = zeros(&[b, sq, n * hv], step.out, s)?;
        let qk = zeros(&[b, n, sq, t], Dtype::F32, s)?;
        return Ok((out, step.want_scores.then_some(qk)));
    }
    let scale = if step.scale == 0.0 {
        1.0 / (h as f32).sqrt()
    } else {
        step.scale
    };
    let plain = matches!(step.padding, Padding::None)
        && step.attention_bias.is_none()
        && !step.want_scores
        && h == hv
        && h > 0;
    if plain {
        // MLX's fused kernel, with ORT's causal mask as ORT applies it: added to the scores, so a
        // hidden key whose score is infinite or NaN still poisons its row, as on ORT's CPU EP
        // (MLX's own causal mask would skip it; fuzz s1-MultiHeadAttention-1-40).
        let causal_mask = additive_mask(step, b, sq, t, past, causal, s)?;
        // Nothing masked: short float32 heads run as one hand-written kernel on a GPU, which
        // scores in float32 and poisons a row as ORT's softmax does (NaN, +inf, all -inf).
        if causal_mask.is_none() {
            if let Some(o) = in_one_kernel(cx, q, k, v, scale)? {
                return Ok((merge_heads(&o, s)?, None));
            }
        }
        let mask = match &causal_mask {
            Some(m) => AttentionMask::Array(m),
            None => AttentionMask::None,
        };
        // Scored in float32 whatever the node's type, rounded once at the end, as ORT computes
        // it: scores rounded to float16 would overflow where ORT's stay finite. 16-bit operands
        // stay 16-bit only where MLX's kernel scores them in float32, and not beside the
        // float32 causal mask.
        let mask_dtype = causal_mask.as_ref().map(Array::dtype);
        let operand = ops::attention_operand_dtype(q.dtype(), sq, h, hv, mask_dtype, s);
        let cast = |a: &Array| ops::astype(a, operand, s);
        let o = fused_attention(&cast(q)?, &cast(k)?, &cast(v)?, scale, mask, s)?;
        let o = ops::astype(&o, step.out, s)?;
        return Ok((merge_heads(&o, s)?, None));
    }
    let mut logits = scores(q, k, 1.0, s)?;
    if h > 0 {
        logits = ops::multiply(&logits, &Array::scalar(scale)?, s)?;
    }
    if let Some(bias) = step.attention_bias {
        logits = ops::add(&logits, &ops::astype(bias, Dtype::F32, s)?, s)?;
    }
    if let Some(mask) = additive_mask(step, b, sq, t, past, causal, s)? {
        logits = ops::add(&logits, &mask, s)?;
    }
    let probs = softmax_rows(&logits, None, s)?;
    let o = mix(&probs, v, step.out, s)?;
    Ok((merge_heads(&o, s)?, step.want_scores.then_some(logits)))
}

/// The float32 mask added to the scores, broadcastable to `[B, 1, S, T]`: `mask_filter_value`
/// at padded keys (0 elsewhere), float's lowest value where the causal mask hides a key.
fn additive_mask(
    step: &Step<'_>,
    b: i64,
    sq: i64,
    t: i64,
    past: i64,
    causal: bool,
    s: &Stream,
) -> Result<Option<Array>> {
    let keys = ops::arange(0.0, t as f64, 1.0, Dtype::I32, s)?;
    let keep = match &step.padding {
        Padding::None => None,
        Padding::End(end) => Some(ops::less(&keys, &column(end, b, s)?, s)?),
        Padding::EndStart(end, start) => Some(ops::logical_and(
            &ops::less(&keys, &column(end, b, s)?, s)?,
            &ops::greater_equal(&keys, &column(start, b, s)?, s)?,
            s,
        )?),
        Padding::Keys(raw) => Some(ops::greater(raw, &Array::scalar(0i32)?, s)?),
        Padding::Positions(raw) => Some(ops::greater(raw, &Array::scalar(0i32)?, s)?),
    };
    let padding = match keep {
        None => None,
        Some(keep) => {
            let shape = if keep.ndim() == 3 {
                [b, 1, sq, t]
            } else {
                [b, 1, 1, t]
            };
            let keep = ops::reshape(&keep, &shape, s)?;
            let fill = Array::scalar(step.mask_filter_value)?;
            Some(ops::where_(&keep, &Array::scalar(0f32)?, &fill, s)?)
        }
    };
    if !causal {
        return Ok(padding);
    }
    // Query s sees keys m <= past + s; ORT's loop leaves the last query row unmasked.
    let rows = ops::reshape(
        &ops::arange(0.0, sq as f64, 1.0, Dtype::I32, s)?,
        &[sq, 1],
        s,
    )?;
    let limit = ops::add(&rows, &Array::scalar(past as i32)?, s)?;
    let seen = ops::less_equal(&keys, &limit, s)?;
    let last = ops::equal(&rows, &Array::scalar(sq as i32 - 1)?, s)?;
    let seen = ops::logical_or(&seen, &last, s)?;
    let open = match padding {
        Some(p) => p,
        None => Array::scalar(0f32)?,
    };
    Ok(Some(ops::where_(
        &seen,
        &open,
        &Array::scalar(f32::MIN)?,
        s,
    )?))
}

/// `[B]` as `[B, 1]`.
fn column(a: &Array, b: i64, s: &Stream) -> Result<Array> {
    Ok(ops::reshape(a, &[b, 1], s)?)
}

pub(super) fn dims4(a: &Array) -> Result<[i64; 4]> {
    <[i64; 4]>::try_from(a.shape())
        .map_err(|_| OpError::new(format!("expected a 4-D operand, got {:?}", a.shape())))
}

/// `[B, N, S, H]` → `[B, S, N·H]`.
fn merge_heads(o: &Array, s: &Stream) -> Result<Array> {
    let [b, n, sq, h] = dims4(o)?;
    let o = ops::transpose(o, &[0, 2, 1, 3], s)?;
    Ok(ops::reshape(&o, &[b, sq, n * h], s)?)
}

/// `[B, S, N·H]` → `[B, N, S, H]`.
pub(super) fn split_heads(x: &Array, heads: i64, what: &str, s: &Stream) -> Result<Array> {
    let shape = x.shape();
    let [b, sq, d] = <[i64; 3]>::try_from(shape.clone())
        .map_err(|_| OpError::new(format!("{what} has shape {shape:?}, not 3-D")))?;
    if d % heads != 0 {
        return Err(OpError::new(format!(
            "{what} has hidden size {d}, which {heads} heads do not divide"
        )));
    }
    let x = ops::reshape(x, &[b, sq, heads, d / heads], s)?;
    Ok(ops::transpose(&x, &[0, 2, 1, 3], s)?)
}

/// `x + bias[from..from + len]` in float32 (`x` unchanged without a bias).
pub(super) fn add_bias(x: &Array, bias: Option<&Array>, from: i64, s: &Stream) -> Result<Array> {
    let Some(bias) = bias else {
        return Ok(x.clone());
    };
    let len = *x.shape().last().unwrap_or(&0);
    let part = ops::slice(bias, &[from as i32], &[(from + len) as i32], &[1], s)?;
    Ok(ops::add(
        &ops::astype(x, Dtype::F32, s)?,
        &ops::astype(&part, Dtype::F32, s)?,
        s,
    )?)
}

/// `[past; new]` along the sequence axis of `[B, N, ·, H]` operands.
pub(super) fn with_past(past: Option<&Array>, new: &Array, s: &Stream) -> Result<Array> {
    match past {
        None => Ok(new.clone()),
        Some(past) => {
            let wide = |a: &Array| ops::astype(a, Dtype::F32, s);
            Ok(ops::concatenate(&[wide(past)?, wide(new)?], 2, s)?)
        }
    }
}

/// Checks `attention_bias` against `[B or 1, N or 1, S, T]`, as ORT does.
pub(super) fn check_attention_bias(bias: &Array, b: i64, n: i64, sq: i64, t: i64) -> Result<()> {
    let shape = bias.shape();
    let ok = shape.len() == 4
        && (shape[0] == b || shape[0] == 1)
        && (shape[1] == n || shape[1] == 1)
        && shape[2] == sq
        && shape[3] == t;
    if ok {
        Ok(())
    } else {
        Err(OpError::new(format!(
            "attention_bias has shape {shape:?}: expected [{b} or 1, {n} or 1, {sq}, {t}]"
        )))
    }
}

/// ORT's answer over no keys at all (`[B, 0, D]` keys and `[B, 0, D_v]` values, no past) when
/// the heads divide the values' width unevenly, or the query's with no query rows (S = 0),
/// which it checks only once there are keys or rows: zeros `[B, S, D_v]`, present keys and
/// values `[B, N, 0, D / N]` and `[B, N, 0, D_v / N]` (widths truncated) and scores
/// `[B, N, S, 0]`. (With keys, or query rows of an uneven width, it fails reshaping them, and so
/// does the main path; it also decides a query, keys or values of other shapes.)
fn over_no_keys(
    cx: &Lower,
    [b, sq, d]: [i64; 3],
    key: &Array,
    value: &Array,
    past: bool,
    n: i64,
) -> Result<Option<Vec<Array>>> {
    let (ks, vs) = (key.shape(), value.shape());
    let [kb, l, kd] = ks[..] else { return Ok(None) };
    let [vb, vl, dv] = vs[..] else {
        return Ok(None);
    };
    let fits = kb == b && vb == b && kd == d && l == 0 && vl == 0 && !past;
    let uneven = if d % n == 0 { dv % n != 0 } else { sq == 0 };
    if !fits || !uneven {
        return Ok(None);
    }
    let s = cx.stream();
    let dtype = key.dtype();
    let scores = if cx.node().output_present(3) {
        cx.output_dtype(3)?
    } else {
        dtype
    };
    Ok(Some(vec![
        zeros(&[b, sq, dv], dtype, s)?,
        zeros(&[b, n, 0, d / n], dtype, s)?,
        zeros(&[b, n, 0, dv / n], dtype, s)?,
        zeros(&[b, n, sq, 0], scores, s)?,
    ]))
}

/// Multi-head attention over separate Q/K/V (`[B, S, D]`, keys and values `[B, L, D]` /
/// `[B, L, D_v]`, or already split into heads `[B, N, L, H]`), with an optional packed
/// `bias` `[D + D + D_v]` (added to Q only when K/V come in heads), `key_padding_mask` (`[B]`
/// end positions, `[3B + 2]` whose first `B` entries are end positions, `[B, T]` or
/// `[B, S, T]` with positive entries kept), additive `attention_bias`, past keys and values
/// (`[B, N, P, H]`) giving `present_key`/`present_value` `[B, N, P + L, H]`, `unidirectional`,
/// `scale`, `mask_filter_value`, and the pre-softmax scores `qk`.
#[allow(clippy::too_many_arguments)] // ten inputs and four attributes, as ORT has them
#[onnx_op(
    domain = "com.microsoft", op = "MultiHeadAttention", since = 1,
    types(T = F32 | F16, M = I32, QK = F32 | F16),
    inputs(query: T, key: T, value: T, bias: T, key_padding_mask: M, attention_bias: T,
           past_key: T, past_value: T, past_sequence_length: M, cache_indirection: M),
    outputs(output: T, present_key?: T, present_value?: T, qk?: QK), shape = ShapeKeyed,
    claim = mha_claim,
    declines = "packed QKV (no key) and packed KV (no value, or a 5-D query or key): ORT's CPU kernel has neither; past_sequence_length and cache_indirection (the shared-buffer decoding path); past_key without past_value or the reverse; past_key/past_value without both present outputs (ORT's kernel then reads past the end of key and value); num_heads < 1"
)]
fn multi_head_attention(
    cx: &mut Lower,
    query: Array,
    key: Option<Array>,
    value: Option<Array>,
    bias: Option<Array>,
    key_padding_mask: Option<Array>,
    attention_bias: Option<Array>,
    past_key: Option<Array>,
    past_value: Option<Array>,
    past_sequence_length: Option<Array>,
    cache_indirection: Option<Array>,
    #[attr] num_heads: i64,
    #[attr(default = 0)] unidirectional: i64,
    #[attr(default = 0.0)] scale: f32,
    #[attr(default = -10000.0)] mask_filter_value: f32,
) -> Result<Vec<Array>> {
    let s = cx.stream();
    let _ = (past_sequence_length, cache_indirection); // declined, see the claim
    let (Some(key), Some(value)) = (key, value) else {
        return Err(OpError::new(
            "MultiHeadAttention without key or value (packed QKV/KV) is not implemented for ORT's CPU EP",
        ));
    };
    let n = num_heads;
    let qshape = query.shape();
    let [b, sq, d] = <[i64; 3]>::try_from(qshape.clone()).map_err(|_| {
        OpError::new(format!(
            "query has shape {qshape:?}: expected [batch, sequence, hidden]"
        ))
    })?;
    if let Some(outputs) = over_no_keys(cx, [b, sq, d], &key, &value, past_key.is_some(), n)? {
        return Ok(outputs);
    }
    let q = split_heads(&add_bias(&query, bias.as_ref(), 0, s)?, n, "query", s)?;
    let h = d / n;
    let (k, v, dv) = match (key.ndim(), value.ndim()) {
        (3, 3) => {
            let (ks, vs) = (key.shape(), value.shape());
            if ks[0] != b || vs[0] != b || ks[2] != d || ks[1] != vs[1] {
                return Err(OpError::new(format!(
                    "key {ks:?} and value {vs:?} do not fit query {qshape:?}: expected [{b}, L, {d}] and [{b}, L, D_v]"
                )));
            }
            let dv = vs[2];
            if let Some(bias) = &bias {
                let want = 2 * d + dv;
                if bias.shape() != [want] {
                    return Err(OpError::new(format!(
                        "bias has shape {:?}: expected [{want}] (2 * hidden_size + v_hidden_size)",
                        bias.shape()
                    )));
                }
            }
            let k = split_heads(&add_bias(&key, bias.as_ref(), d, s)?, n, "key", s)?;
            let v = split_heads(&add_bias(&value, bias.as_ref(), 2 * d, s)?, n, "value", s)?;
            (k, v, dv)
        }
        (4, 4) => {
            // Keys and values already in heads: ORT adds no bias to them.
            let (ks, vs) = (key.shape(), value.shape());
            if ks != vs || ks[0] != b || ks[1] != n || ks[3] != h {
                return Err(OpError::new(format!(
                    "key {ks:?} and value {vs:?}: expected both [{b}, {n}, L, {h}]"
                )));
            }
            (key, value, n * h)
        }
        (kr, vr) => {
            return Err(OpError::new(format!(
                "key of rank {kr} and value of rank {vr}: expected both 3-D or both 4-D"
            )))
        }
    };
    let hv = dv / n;
    if dv % n != 0 {
        return Err(OpError::new(format!(
            "value hidden size {dv} is not a multiple of num_heads {n}"
        )));
    }
    let l = dims4(&k)?[2];
    let past = match (&past_key, &past_value) {
        (Some(pk), Some(pv)) => {
            let (ps, vs) = (pk.shape(), pv.shape());
            if ps.len() != 4 || vs.len() != 4 || ps[0] != b || ps[1] != n || ps[3] != h {
                return Err(OpError::new(format!(
                    "past_key has shape {ps:?}: expected [{b}, {n}, P, {h}]"
                )));
            }
            if vs[0] != b || vs[1] != n || vs[2] != ps[2] || vs[3] != hv {
                return Err(OpError::new(format!(
                    "past_value has shape {vs:?}: expected [{b}, {n}, {}, {hv}]",
                    ps[2]
                )));
            }
            ps[2]
        }
        _ => 0,
    };
    let t = past + l;
    let k = with_past(past_key.as_ref(), &k, s)?;
    let v = with_past(past_value.as_ref(), &v, s)?;
    let padding = match key_padding_mask {
        None => Padding::None,
        Some(mask) => {
            let ms = mask.shape();
            match ms.as_slice() {
                [len] if *len == b => Padding::End(mask),
                [len] if *len == 3 * b + 2 => {
                    // ORT reads only the first B entries, as end positions.
                    Padding::End(ops::slice(&mask, &[0], &[b as i32], &[1], s)?)
                }
                [mb, mt] if *mb == b && *mt == t => Padding::Keys(mask),
                [mb, ms_, mt] if *mb == b && *ms_ == sq && *mt == t => Padding::Positions(mask),
                _ => {
                    return Err(OpError::new(format!(
                        "key_padding_mask has shape {ms:?}: expected [{b}], [{}], [{b}, {t}] or [{b}, {sq}, {t}]",
                        3 * b + 2
                    )))
                }
            }
        }
    };
    if let Some(bias) = &attention_bias {
        check_attention_bias(bias, b, n, sq, t)?;
    }
    let dtype = query.dtype();
    let step = Step {
        scale,
        mask_filter_value,
        unidirectional: unidirectional == 1,
        padding,
        attention_bias: attention_bias.as_ref(),
        want_scores: cx.node().output_present(3),
        out: dtype,
    };
    let (out, qk) = attend(cx, &q, &k, &v, past, &step)?;
    let qk = match qk {
        Some(qk) => ops::astype(&qk, cx.output_dtype(3)?, s)?,
        None => out.clone(),
    };
    Ok(vec![
        out,
        ops::astype(&k, dtype, s)?,
        ops::astype(&v, dtype, s)?,
        qk,
    ])
}

fn mha_claim(node: &Node) -> Verdict {
    if let Some(v) = positive_heads(node) {
        return v;
    }
    let present = |i| node.input_present(i);
    if !present(1) || !present(2) {
        return Verdict::decline(
            "no key or no value (packed QKV or packed KV): ORT's CPU kernel implements neither",
        );
    }
    if node.input_rank(0) == Some(5) || node.input_rank(1) == Some(5) {
        return Verdict::decline(
            "a 5-D query or key (packed QKV/KV): ORT's CPU kernel implements neither",
        );
    }
    if present(8) || present(9) {
        return Verdict::decline(
            "past_sequence_length or cache_indirection (the shared-buffer decoding path)",
        );
    }
    if present(6) != present(7) {
        return Verdict::decline(
            "past_key and past_value must come together (ORT refuses one alone)",
        );
    }
    if present(6) && !(node.output_present(1) && node.output_present(2)) {
        return Verdict::decline(
            "past_key/past_value without both present outputs: ORT's CPU kernel then ignores the past while sizing for it",
        );
    }
    Verdict::Claim
}

/// ORT's attention kernels require `num_heads > 0` when the session is created.
pub(super) fn positive_heads(node: &Node) -> Option<Verdict> {
    match node.attr_as::<i64>("num_heads") {
        Some(n) if n > 0 && n <= i32::MAX as i64 => None,
        other => Some(Verdict::decline(format!(
            "num_heads {other:?}: ORT requires a positive head count"
        ))),
    }
}
