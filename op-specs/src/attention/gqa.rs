//! com.microsoft GroupQueryAttention, as ORT 1.31.1's CPU kernel computes it.
//!
//! Layout: `query` is `[B, S, Hq·D]` (or packed `[B, S, (Hq + 2·Hkv)·D]` when `key`/`value` are
//! absent), the caches are BNSH `[B, Hkv, L, D]`. `total_sequence_length` (read on the host: it
//! decides the present length `P = max(T, L)` and whether the step is the first prompt, `S == T`)
//! and `seqlens_k` (`total − 1` per row, kept in the graph) give each row `b` its own
//! `past_b = seqlens_k[b] + 1 − S` (0 on the first prompt or without a past).
//!
//! What ORT does, step by step, and so do we:
//! - rotary embedding of Q and K (in the element type) at positions `past_b + s` (first prompt:
//!   `s`), or from `position_ids` (first prompt: `position_ids[0] + s` for every row, as ORT
//!   reads only the first element), over the first `2·cos_cache.cols` features;
//! - present = past rows `[0, past_b)`, the new rows at `[past_b, past_b + S)`, zeros after
//!   (ORT zeroes a present that is not the past's own buffer; through a session it never is);
//! - query `s` of row `b` sees keys `[lo, eff)` with `eff = min(past_b + s + 1, total_b)` (causal)
//!   or `total_b` (causal 0); a local window keeps the last `local_window_size` of them. ORT's
//!   float32 flash kernel (no softcap, sink or QK output) places that window from the query's own
//!   position `past_b + s + 1` instead, which differs on padded query rows of a ragged first prompt;
//!   we follow whichever path ORT takes (ORT_GQA_DISABLE_FLASH_ATTENTION=1 in ORT's process
//!   switches ORT to the other placement; we do not read it). A row that sees no key gives zeros;
//! - scores `scale·q·kᵀ` in float32, soft cap, `+ attention_bias`, softmax over the visible keys
//!   (with a zero sink for `smooth_softmax`, or `head_sink[h]`), mixed with V.
//!
//! `output_qk` holds the scores before (1) or the probabilities after (2) the softmax over
//! `[B, Hq, S, total_sequence_length]`, zero outside each row's visible keys, even where a NaN
//! score turns the visible ones NaN (ORT's float32 and float16 kernels never score the others;
//! bfloat16, which ORT has no kernel for, follows the same rule); ORT leaves the columns past a
//! shorter row's `total_b` uninitialised, we write zeros there.

use mlx_kernels::{custom, ops, Array, Dtype, Stream};

use super::{
    fused_attention, masked, mix, rotary_width, scores, soft_cap, softmax_rows, AttentionMask,
    Rotation, Sink,
};
use crate::table::consts::scalar;
use crate::{onnx_op, Lower, Node, OpError, Result, Verdict};

/// Steps of at most this many query rows run the hand-written decode kernel where MLX's CUDA
/// backend is in use (longer prompts keep MLX's matmul-based attention).
const DECODE_QUERY_ROWS: i64 = 16;

/// Grouped-query attention with a BNSH KV cache (ORT's decoder attention): optional packed QKV,
/// past/present caches, per-row lengths from `seqlens_k`, rotary embedding (interleaved or not,
/// partial rotary dims, `position_ids`), local window, softcap, `smooth_softmax`/`head_sink`,
/// `attention_bias`, causal or not, and the `output_qk` scores. MLX's fused attention runs it
/// where ORT's semantics and MLX's agree (float32 without softcap, sink or QK output).
#[allow(clippy::too_many_arguments)] // sixteen inputs and the attributes, as ORT has them
#[onnx_op(
    domain = "com.microsoft", op = "GroupQueryAttention", precision = Float32, since = 1,
    types(T = F32 | F16 | BF16, M = I32, P = I64, S = F32),
    inputs(query: T, key: T, value: T, past_key: T, past_value: T, seqlens_k: M,
           total_sequence_length: M, cos_cache: T, sin_cache: T, position_ids: P,
           attention_bias: T, head_sink: T, k_scale: S, v_scale: S, q_norm_weight: T,
           k_norm_weight: T),
    outputs(output: T, present_key?: T, present_value?: T, output_qk?: T),
    ignores(sliding_window_cache: i64, k_quant_type: String, v_quant_type: String,
            kv_cache_bit_width: i64, qk_norm_epsilon: f32),
    shape = ShapeKeyed, claim = gqa_claim,
    declines = "a quantized KV cache (k_scale/v_scale, k_quant_type, v_quant_type, kv_cache_bit_width); q_norm_weight/k_norm_weight (ORT's CPU kernel refuses them); sliding_window_cache 1; nodes without present_key/present_value; causal outside {0, 1}, or 0 with a local window; qk_output outside {0, 1, 2} or not matching the output_qk output; head_sink with smooth_softmax; key/value sequence lengths other than the query's"
)]
fn group_query_attention(
    cx: &mut Lower,
    query: Array,
    key: Option<Array>,
    value: Option<Array>,
    past_key: Option<Array>,
    past_value: Option<Array>,
    seqlens_k: Array,
    #[host] total_sequence_length: i64,
    cos_cache: Option<Array>,
    sin_cache: Option<Array>,
    position_ids: Option<Array>,
    attention_bias: Option<Array>,
    head_sink: Option<Array>,
    _k_scale: Option<Array>,
    _v_scale: Option<Array>,
    _q_norm_weight: Option<Array>,
    _k_norm_weight: Option<Array>,
    #[attr] num_heads: i64,
    #[attr] kv_num_heads: i64,
    #[attr(default = 0.0)] scale: f32,
    #[attr(default = 0.0)] softcap: f32,
    #[attr(default = -1)] local_window_size: i64,
    #[attr(default = 0)] do_rotary: i64,
    #[attr(default = 0)] rotary_interleaved: i64,
    #[attr(default = 0)] smooth_softmax: i64,
    #[attr(default = 0)] qk_output: i64,
    #[attr(default = 1)] causal: i64,
) -> Result<Vec<Array>> {
    let s = cx.stream();
    let dtype = query.dtype();
    let geo = Geometry::of(
        &query,
        key.as_ref(),
        value.as_ref(),
        num_heads,
        kv_num_heads,
    )?;
    let Geometry {
        batch,
        seq,
        q_heads,
        kv_heads,
        head,
    } = geo;
    let (q, k, v) = split_heads(&query, key.as_ref(), value.as_ref(), &geo, s)?;

    // Past, present and the step's kind.
    let past = match (&past_key, &past_value) {
        (Some(pk), Some(pv)) => {
            for (name, cache) in [("past_key", pk), ("past_value", pv)] {
                let d = cache.shape();
                if d.len() != 4 || d[0] != batch || d[1] != kv_heads || d[3] != head {
                    return Err(OpError::new(format!(
                        "GroupQueryAttention: '{name}' has shape {d:?}; expected [{batch}, {kv_heads}, past_length, {head}] (BNSH)"
                    )));
                }
            }
            if pk.shape()[2] != pv.shape()[2] {
                return Err(OpError::new(
                    "GroupQueryAttention: 'past_key' and 'past_value' must have the same sequence length",
                ));
            }
            Some((pk, pv))
        }
        (None, None) => None,
        _ => return Err(OpError::new(
            "GroupQueryAttention: 'past_key' and 'past_value' shall be both present or both absent",
        )),
    };
    let past_len = past.map_or(0, |(pk, _)| pk.shape()[2]);
    let total = total_sequence_length;
    // In a compiled decode step the value is traced: the step is replayed for every total with
    // the same key, and what is checked on `total` beyond the key is checked at run time.
    let exact_total = attention_bias.is_some() || cx.node().output_present(3);
    let traced_total = cx.key_host_read(6, move |v| total_key(v, past_len, seq, exact_total));
    let present_len = total.max(past_len);
    let first_prompt = seq == total;
    if seq > 1 && !first_prompt && batch != 1 {
        return Err(OpError::new(
            "GroupQueryAttention: batch_size must be 1 when sequence_length > 1 and past context is given",
        ));
    }
    if seqlens_k.shape() != [batch] {
        return Err(OpError::new(format!(
            "GroupQueryAttention: seqlens_k has shape {:?}; it must be [batch_size] = [{batch}]",
            seqlens_k.shape()
        )));
    }
    if total < 1 || present_len > i32::MAX as i64 {
        return Err(OpError::new(format!(
            "GroupQueryAttention: total_sequence_length {total} is out of range"
        )));
    }
    if total != past_len + seq && total > past_len {
        // ORT's run-time check (the fuzzer found the EP answering a 0-token step it refuses).
        return Err(OpError::new(format!(
            "GroupQueryAttention: total_sequence_length {total} must equal past_sequence_length {past_len} + sequence_length {seq} (a growing cache) or be no greater than past_sequence_length (a shared buffer), as ORT's kernel requires"
        )));
    }

    let qk_wanted = cx.node().output_present(3);
    let sink = head_sink.is_some() || smooth_softmax == 1;
    let capped = softcap > 0.0;
    let flash = dtype == Dtype::F32 && softcap == 0.0 && !sink && !qk_wanted && total > 1;
    let appended = !(first_prompt || past.is_none());
    let rotary = if do_rotary == 1 {
        let (Some(cos), Some(sin)) = (&cos_cache, &sin_cache) else {
            return Err(OpError::new(
                "GroupQueryAttention: cos_cache and sin_cache must be provided when do_rotary is 1",
            ));
        };
        // ORT requires a row per position up to total_sequence_length.
        Some((
            cos,
            sin,
            rotary_width("GroupQueryAttention", cos, sin, head, total)?,
        ))
    } else {
        None
    };
    let plain_softmax = !capped && !sink && !qk_wanted;
    // A decode-sized step on MLX's CUDA backend runs the hand-written attention kernel.
    let kernel_rows = plain_softmax
        && attention_bias.is_none()
        && (1..=DECODE_QUERY_ROWS).contains(&seq)
        && batch > 0
        && custom::decode_attention_takes(head, dtype)
        && custom::decode_attention_runs_on(s);

    // What the step derives from seqlens_k, total_sequence_length, the rotary caches and
    // position_ids alone is the same in every layer of a decoder: built (and checked) once.
    let facts = StepFacts {
        batch,
        seq,
        kv_heads: geo.kv_heads,
        present_len,
        past_len,
        first_prompt,
        has_past: past.is_some(),
        window: local_window_size,
        causal,
        flash,
        kernel_rows,
        cache_rows: rotary.map(|(cos, _, _)| cos.shape().first().copied().unwrap_or(0)),
        interleaved: rotary_interleaved == 1,
    };
    let mut reads = vec![&seqlens_k];
    reads.extend(traced_total.as_ref());
    if let Some((cos, sin, _)) = rotary {
        reads.extend([cos, sin]);
        reads.extend(position_ids.as_ref());
    }
    let layout = cx.shared(
        "GroupQueryAttention step layout",
        &reads,
        &facts.key(),
        |cx| {
            step_layout(
                cx,
                &facts,
                &seqlens_k,
                traced_total.as_ref(),
                rotary.map(|(cos, sin, _)| (cos, sin)),
                position_ids.as_ref(),
            )
        },
    )?;
    let s = cx.stream();

    // Rotary embedding, in float32 over the tables' rows at each query's position.
    let (q, k) = match (rotary, &layout.rotary) {
        (Some((_, _, rotary_dim)), Some(rotation)) => {
            let turn = |x: &Array| -> Result<Array> {
                if rotary_dim == head {
                    return rotation.apply(x, s);
                }
                let parts = ops::split_at(x, &[rotary_dim as i32], 3, s)?;
                let turned = rotation.apply(&parts[0], s)?;
                Ok(ops::concatenate(&[turned, parts[1].clone()], 3, s)?)
            };
            (turn(&q)?, turn(&k)?)
        }
        _ => (q, k),
    };

    // Present: past rows [0, past_b), new rows [past_b, past_b + S), zeros after.
    let placement = &layout.placement;
    let (present_k, held_k) = placement.place(&k, past.map(|(pk, _)| pk), s)?;
    let (present_v, held_v) = placement.place(&v, past.map(|(_, pv)| pv), s)?;
    if let (Some(written), Some(held_k), Some(held_v)) = (&layout.written, &held_k, &held_v) {
        // ORT's kernel writes only the new rows into a buffer that past and present share:
        // row b's S new rows at [past_b, past_b + S) in every head (past_b = 0 on a first
        // prompt), so K and V as they are, [B, Hkv, S, D], are those rows in the buffer's order.
        cx.writes_only_rows(1, written, Some(&k), held_k);
        cx.writes_only_rows(2, written, Some(&v), held_v);
    }
    let StepLayout {
        row_total,
        lo,
        eff,
        seen,
        kernel_bounds,
        ..
    } = layout;

    // attention_bias [B|1, Hq|1, S, T], its columns padded to P with zeros (masked anyway).
    let bias = match &attention_bias {
        Some(b) => Some(bias_columns(b, &geo, total, present_len, s)?),
        None => None,
    };

    let scale = if scale == 0.0 {
        1.0 / (head as f32).sqrt()
    } else {
        scale
    };
    let attended = if let Some((lo_rows, hi_rows)) = &kernel_bounds {
        // Only the visible keys are read, in the cache's own type, and scored in float32
        // (ORT's precision).
        // It reads rows [lo, hi) only, which the buffer after the write and the present share:
        // the former, so that a shared buffer's present is never built.
        let keys = held_k.as_ref().unwrap_or(&present_k);
        let values = held_v.as_ref().unwrap_or(&present_v);
        let out = custom::decode_attention(&q, keys, values, lo_rows, hi_rows, scale, s)?;
        (out, None)
    } else {
        let key_pos = ops::reshape(&placement.row, &[1, 1, 1, present_len], s)?;
        let before_end = ops::less(&key_pos, &eff, s)?;
        // [B, 1, S, P]
        let keep = match &lo {
            Some(lo) => ops::logical_and(&ops::greater_equal(&key_pos, lo, s)?, &before_end, s)?,
            None => before_end,
        };
        // ORT mixes each row's first total_b value rows only: rows past them (a shared
        // buffer's unused tail, whatever it holds) must not reach the output, not even as
        // 0 · NaN. A present built on the past has zeros there already (past_b + S = total_b).
        let visible_v = if appended {
            present_v.clone()
        } else {
            ops::where_(
                &ops::less(&placement.row, &row_total, s)?,
                &present_v,
                &scalar(0.0, present_v.dtype(), s)?,
                s,
            )?
        };
        if plain_softmax {
            // MLX's fused attention: the same softmax over the visible keys, scored in float32
            // as ORT scores it. 16-bit operands stay 16-bit where MLX's kernel scores them in
            // float32 (cuDNN's flash attention, which rounds only the probabilities to the
            // operands' type for their product with V); elsewhere MLX's composed fallback would
            // round the scores, so they go in as float32. A bias makes the mask float32 (the
            // bias, -inf where hidden), which keeps the operands float32 too.
            let mask_dtype = bias.as_ref().map(|_| Dtype::F32);
            let operand = ops::attention_operand_dtype(dtype, seq, head, head, mask_dtype, s);
            let wide = |x: &Array| ops::astype(x, operand, s);
            let mask = match &bias {
                Some(b) => masked(&wide(b)?, &keep, f32::NEG_INFINITY, s)?,
                None => keep.clone(),
            };
            let out = fused_attention(
                &wide(&q)?,
                &wide(&present_k)?,
                &wide(&visible_v)?,
                scale,
                AttentionMask::Array(&mask),
                s,
            )?;
            (ops::astype(&out, dtype, s)?, None)
        } else {
            let mut x = scores(&q, &present_k, scale, s)?;
            if capped {
                x = soft_cap(&x, softcap, s)?;
            }
            if let Some(b) = &bias {
                x = ops::add(&x, &ops::astype(b, Dtype::F32, s)?, s)?;
            }
            let before = qk_wanted.then(|| masked(&x, &keep, 0.0, s)).transpose()?;
            let x = masked(&x, &keep, f32::NEG_INFINITY, s)?;
            let sink = match (&head_sink, smooth_softmax) {
                (Some(h), _) => {
                    if h.shape() != [q_heads] {
                        return Err(OpError::new(format!(
                            "GroupQueryAttention: head_sink has shape {:?}; it must be [num_heads] = [{q_heads}]",
                            h.shape()
                        )));
                    }
                    Some(Sink::PerHead(h))
                }
                (None, 1) => Some(Sink::Zero),
                _ => None,
            };
            // ORT's softmax runs over each row's visible window and leaves zeros past it, even
            // in a row a NaN score turned to NaN.
            let mut probs = masked(&softmax_rows(&x, sink, s)?, &keep, 0.0, s)?;
            if let Some(seen) = &seen {
                probs = masked(&probs, seen, 0.0, s)?;
            }
            let qk = match (qk_output, before) {
                (1, Some(before)) => Some(before),
                (2, _) => Some(probs.clone()),
                _ => None,
            };
            (mix(&probs, &visible_v, dtype, s)?, qk)
        }
    };
    let mut outputs = Vec::with_capacity(4);
    let (mut out, qk) = attended;
    if let Some(seen) = &seen {
        out = ops::where_(seen, &out, &scalar(0.0, dtype, s)?, s)?;
    }
    let out = ops::reshape(
        &ops::transpose(&out, &[0, 2, 1, 3], s)?,
        &[batch, seq, q_heads * head],
        s,
    )?;
    outputs.push(out);
    outputs.push(present_k);
    outputs.push(present_v);
    if let Some(qk) = qk {
        // [B, Hq, S, P] → [B, Hq, S, T] (P ≥ T).
        let qk = ops::slice(
            &qk,
            &[0, 0, 0, 0],
            &[batch as i32, q_heads as i32, seq as i32, total as i32],
            &[1, 1, 1, 1],
            s,
        )?;
        outputs.push(ops::astype(&qk, dtype, s)?);
    }
    Ok(outputs)
}

/// What the lowering's structure takes from `total_sequence_length`: with a buffer that holds
/// at least `total` rows (genai's shared KV buffer, total ≤ past length) only whether the step
/// is a first prompt (total == sequence_length) and whether more than one key exists — the
/// present keeps the buffer's length and every row mask comes from `seqlens_k`; otherwise the
/// value itself (a growing cache's present length, or the width of attention_bias/output_qk).
fn total_key(values: &[i64], past_len: i64, seq: i64, exact: bool) -> Vec<i64> {
    match *values {
        [total] if !exact && (1..=past_len).contains(&total) => {
            vec![-1, i64::from(total == seq), i64::from(total > 1)]
        }
        _ => values.to_vec(),
    }
}

/// What a step's layout depends on besides its arrays (the key of its sharing between
/// layers, `Lower::shared`).
struct StepFacts {
    batch: i64,
    seq: i64,
    kv_heads: i64,
    present_len: i64,
    past_len: i64,
    first_prompt: bool,
    has_past: bool,
    window: i64,
    causal: i64,
    /// Whether ORT runs its float32 flash kernel (it places a local window differently).
    flash: bool,
    /// Whether the decode kernel runs (and its `[B, S]` bounds are wanted).
    kernel_rows: bool,
    /// The rotary caches' rows, with rotary embedding.
    cache_rows: Option<i64>,
    interleaved: bool,
}

impl StepFacts {
    fn key(&self) -> Vec<i64> {
        let flag = i64::from;
        vec![
            self.batch,
            self.seq,
            self.kv_heads,
            self.present_len,
            self.past_len,
            flag(self.first_prompt),
            flag(self.has_past),
            self.window,
            self.causal,
            flag(self.flash),
            flag(self.kernel_rows),
            self.cache_rows.unwrap_or(-1),
            flag(self.interleaved),
        ]
    }

    /// One new token after the past, without a window: it sees its row's first total_b keys.
    fn one_token(&self) -> bool {
        self.seq == 1 && !self.first_prompt && self.has_past && self.window < 0
    }

    fn windowed(&self) -> bool {
        !self.one_token() && self.window >= 0
    }
}

/// A step's rows and masks: what every layer of a decoder derives alike.
#[derive(Clone)]
struct StepLayout {
    /// `total_b` as `[B, 1, 1, 1]`.
    row_total: Array,
    placement: Placement,
    /// `[B, 1, P]` rows a shared buffer gets written (with a past).
    written: Option<Array>,
    /// The rotation by the rotary tables' rows at each query's position.
    rotary: Option<Rotation>,
    /// Each query row sees keys `[lo, eff)` (`lo` absent: from the first), as `[B, 1, S, 1]`;
    /// `seen`: rows that see any (with a window).
    lo: Option<Array>,
    eff: Array,
    seen: Option<Array>,
    /// `lo` and `eff` as the decode kernel's `[B, S]` bounds.
    kernel_bounds: Option<(Array, Array)>,
}

/// The step layout, with ORT's run-time checks on `total_sequence_length` (when traced),
/// `seqlens_k` and the rotary positions.
fn step_layout(
    cx: &mut Lower,
    facts: &StepFacts,
    seqlens_k: &Array,
    traced_total: Option<&Array>,
    rotary: Option<(&Array, &Array)>,
    position_ids: Option<&Array>,
) -> Result<StepLayout> {
    let StepFacts {
        batch,
        seq,
        present_len,
        past_len,
        first_prompt,
        has_past,
        ..
    } = *facts;
    if let Some(traced) = traced_total {
        let rows = facts.cache_rows.unwrap_or(i32::MAX as i64);
        cx.require_in_range(
            traced,
            1,
            rows,
            format!("GroupQueryAttention: total_sequence_length is out of range [1, {rows}] (the rotary cache's rows)"),
        )?;
    }

    // ORT's run-time checks on seqlens_k, as one range (one reduction a step, not three).
    let at_least = format!(", at least sequence_length {seq} - 1");
    let (low, high, bounds) = match (first_prompt, has_past) {
        (true, _) => (0, present_len - 1, String::new()),
        (false, false) => ((seq - 1).max(0), present_len - 1, at_least),
        (false, true) => (
            (seq - 1).max(0),
            (present_len - 1).min(past_len + seq - 1),
            format!(
                "{at_least}, and at most past + sequence_length - 1 = {}",
                past_len + seq - 1
            ),
        ),
    };
    cx.require_in_range(
        seqlens_k,
        low,
        high,
        format!(
            "GroupQueryAttention: seqlens_k is out of range [{low}, {high}]: at most the present buffer's {present_len} rows{bounds}"
        ),
    )?;

    let s = cx.stream();
    let i32s = |v: i64| scalar(v as f64, Dtype::I32, s);
    // Per row: total_b = seqlens_k + 1 and the past length past_b, as [B, 1, 1, 1].
    let row_total = ops::reshape(
        &ops::add(&ops::astype(seqlens_k, Dtype::I32, s)?, &i32s(1)?, s)?,
        &[batch, 1, 1, 1],
        s,
    )?;
    let row_past = if first_prompt || !has_past {
        ops::broadcast_to(&i32s(0)?, &[batch, 1, 1, 1], s)?
    } else {
        ops::subtract(&row_total, &i32s(seq)?, s)?
    };

    let rotary = match (rotary, facts.cache_rows) {
        (Some((cos, sin)), Some(cache_rows)) => {
            let positions = positions(
                cx,
                position_ids,
                &row_total,
                batch,
                seq,
                first_prompt,
                cache_rows,
            )?;
            let s = cx.stream();
            // The rotation runs in float32: the (usually constant) tables are widened once.
            let (cos_in, sin_in) = (cos.clone(), sin.clone());
            let wide = cx.prepared("rotary tables in float32", &[7, 8], || {
                Ok(vec![
                    super::float32(&cos_in, s)?,
                    super::float32(&sin_in, s)?,
                ])
            })?;
            // [B, S, rd/2] → [B, 1, S, rd/2], broadcast over the heads.
            let angle = |table: &Array| -> Result<Array> {
                let rows = ops::take(table, &positions, 0, s)?;
                Ok(ops::expand_dims(&rows, &[1], s)?)
            };
            Some(Rotation::new(
                &angle(&wide[0])?,
                &angle(&wide[1])?,
                facts.interleaved,
                s,
            )?)
        }
        _ => None,
    };
    let s = cx.stream();
    let i32s = |v: i64| scalar(v as f64, Dtype::I32, s);

    let placement = Placement::new(&row_past, facts, s)?;
    let written = has_past
        .then(|| ops::squeeze(&placement.is_new, &[3], s))
        .transpose()?;

    let (lo, eff, seen) = if facts.one_token() {
        (None, row_total.clone(), None)
    } else {
        let query_pos = ops::reshape(
            &ops::arange(0.0, seq as f64, 1.0, Dtype::I32, s)?,
            &[1, 1, seq, 1],
            s,
        )?;
        let end = if facts.causal == 1 {
            ops::add(&ops::add(&row_past, &query_pos, s)?, &i32s(1)?, s)?
        } else {
            ops::broadcast_to(&row_total, &[batch, 1, seq, 1], s)?
        };
        let eff = ops::minimum(&end, &row_total, s)?;
        if facts.windowed() {
            let from = if facts.flash { &end } else { &eff };
            let lo = ops::maximum(&ops::subtract(from, &i32s(facts.window)?, s)?, &i32s(0)?, s)?;
            let seen = ops::greater(&eff, &lo, s)?;
            (Some(lo), eff, Some(seen))
        } else {
            (None, eff, None)
        }
    };
    let kernel_bounds = if facts.kernel_rows {
        let rows = |x: &Array| -> Result<Array> {
            let x = ops::broadcast_to(x, &[batch, 1, seq, 1], s)?;
            Ok(ops::reshape(&x, &[batch, seq], s)?)
        };
        let first = match &lo {
            Some(lo) => rows(lo)?,
            None => rows(&i32s(0)?)?,
        };
        Some((first, rows(&eff)?))
    } else {
        None
    };
    Ok(StepLayout {
        row_total,
        placement,
        written,
        rotary,
        lo,
        eff,
        seen,
        kernel_bounds,
    })
}

/// The shapes of one call.
struct Geometry {
    batch: i64,
    seq: i64,
    q_heads: i64,
    kv_heads: i64,
    head: i64,
}

impl Geometry {
    fn of(
        query: &Array,
        key: Option<&Array>,
        value: Option<&Array>,
        num_heads: i64,
        kv_num_heads: i64,
    ) -> Result<Geometry> {
        let d = query.shape();
        if d.len() != 3 {
            return Err(OpError::new(format!(
                "GroupQueryAttention: 'query' has shape {d:?}; it must be [batch, sequence, hidden]"
            )));
        }
        if num_heads <= 0 || kv_num_heads <= 0 || num_heads % kv_num_heads != 0 {
            return Err(OpError::new(format!(
                "GroupQueryAttention: num_heads {num_heads} must be a positive multiple of kv_num_heads {kv_num_heads}"
            )));
        }
        let (batch, seq, hidden) = (d[0], d[1], d[2]);
        let head = match (key, value) {
            (None, None) => hidden / (num_heads + 2 * kv_num_heads),
            (Some(k), Some(v)) => {
                let head = hidden / num_heads;
                for (name, t) in [("key", k), ("value", v)] {
                    if t.shape() != [batch, seq, kv_num_heads * head] {
                        return Err(OpError::new(format!(
                            "GroupQueryAttention: '{name}' has shape {:?}; expected [{batch}, {seq}, {}]",
                            t.shape(),
                            kv_num_heads * head
                        )));
                    }
                }
                head
            }
            _ => {
                return Err(OpError::new(
                    "GroupQueryAttention: 'key' and 'value' shall be both present, or both absent in the case of packed qkv",
                ))
            }
        };
        let heads = if key.is_some() {
            num_heads
        } else {
            num_heads + 2 * kv_num_heads
        };
        if hidden != heads * head {
            return Err(OpError::new(format!(
                "GroupQueryAttention: the query's hidden size {hidden} is not {heads} heads of one size"
            )));
        }
        if head == 0 || head % 8 != 0 {
            return Err(OpError::new(format!(
                "GroupQueryAttention: head_size must be a positive multiple of 8, got {head}"
            )));
        }
        Ok(Geometry {
            batch,
            seq,
            q_heads: num_heads,
            kv_heads: kv_num_heads,
            head,
        })
    }
}

/// Q `[B, Hq, S, D]`, K and V `[B, Hkv, S, D]` from the separate or packed inputs.
fn split_heads(
    query: &Array,
    key: Option<&Array>,
    value: Option<&Array>,
    g: &Geometry,
    s: &Stream,
) -> Result<(Array, Array, Array)> {
    let bnsh = |x: &Array, heads: i64| -> Result<Array> {
        let x = ops::reshape(x, &[g.batch, g.seq, heads, g.head], s)?;
        Ok(ops::transpose(&x, &[0, 2, 1, 3], s)?)
    };
    match (key, value) {
        (Some(k), Some(v)) => Ok((
            bnsh(query, g.q_heads)?,
            bnsh(k, g.kv_heads)?,
            bnsh(v, g.kv_heads)?,
        )),
        _ => {
            let q_end = (g.q_heads * g.head) as i32;
            let k_end = q_end + (g.kv_heads * g.head) as i32;
            let v_end = k_end + (g.kv_heads * g.head) as i32; // the hidden size, checked
            debug_assert_eq!(query.shape()[2], v_end as i64);
            let parts = ops::split_at(query, &[q_end, k_end], 2, s)?;
            Ok((
                bnsh(&parts[0], g.q_heads)?,
                bnsh(&parts[1], g.kv_heads)?,
                bnsh(&parts[2], g.kv_heads)?,
            ))
        }
    }
}

/// Rotary positions `[B, S]` (int32): ORT's default `past_b + s` (first prompt: `s`), or
/// `position_ids` (first prompt: its first element `+ s`; otherwise its first `B·S` values,
/// as ORT indexes it with a stride of `S`). Checked against the cache's rows.
fn positions(
    cx: &mut Lower,
    position_ids: Option<&Array>,
    row_total: &Array,
    batch: i64,
    seq: i64,
    first_prompt: bool,
    cache_rows: i64,
) -> Result<Array> {
    let s = cx.stream();
    let steps = ops::reshape(
        &ops::arange(0.0, seq as f64, 1.0, Dtype::I32, s)?,
        &[1, seq],
        s,
    )?;
    let positions = match position_ids {
        Some(ids) => {
            let d = ids.shape();
            if d.len() != 2 || d[0] != batch || d[1] < seq {
                return Err(OpError::new(format!(
                    "GroupQueryAttention: position_ids has shape {d:?}; it must be [{}, >= {}]",
                    batch, seq
                )));
            }
            let flat = ops::astype(&ops::reshape(ids, &[-1], s)?, Dtype::I32, s)?;
            if first_prompt {
                let start = ops::slice(&flat, &[0], &[1], &[1], s)?;
                let start = ops::reshape(&start, &[1, 1], s)?;
                ops::broadcast_to(&ops::add(&start, &steps, s)?, &[batch, seq], s)?
            } else {
                let used = ops::slice(&flat, &[0], &[(batch * seq) as i32], &[1], s)?;
                ops::reshape(&used, &[batch, seq], s)?
            }
        }
        None if first_prompt => ops::broadcast_to(&steps, &[batch, seq], s)?,
        None => {
            let past = ops::subtract(
                &ops::reshape(row_total, &[batch, 1], s)?,
                &scalar(seq as f64, Dtype::I32, s)?,
                s,
            )?;
            ops::add(&past, &steps, s)?
        }
    };
    if cache_rows < 1 {
        return Err(OpError::new("GroupQueryAttention: cos_cache has no rows"));
    }
    cx.require_in_range(
        &positions,
        0,
        cache_rows - 1,
        format!("GroupQueryAttention: position ids must lie in [0, {cache_rows}) (the rotary cache's rows)"),
    )?;
    crate::indexing::in_bounds(&positions, cache_rows, cx.stream())
}

/// Where a step's rows go in a present cache `[B, Hkv, P, D]`: row `j` of the present is a
/// past row when `j < past_b`, the new row `j − past_b` when `j ∈ [past_b, past_b + S)`, zero
/// after. Built once a step for K, V, every layer and the written-rows mask.
#[derive(Clone)]
struct Placement {
    /// `j` as `[1, 1, P, 1]` (int32).
    row: Array,
    /// `[B, 1, P, 1]`: rows the step writes, and rows a present keeps (the past's and those).
    is_new: Array,
    kept: Array,
    /// With a past: the rows of `[B·Hkv·P, D]` that the new rows `[B·Hkv·S]` go to.
    scatter_rows: Option<Array>,
}

impl Placement {
    fn new(row_past: &Array, facts: &StepFacts, s: &Stream) -> Result<Placement> {
        let StepFacts {
            batch: b,
            seq,
            kv_heads: h,
            present_len,
            has_past,
            ..
        } = *facts;
        let i32s = |v: i64| scalar(v as f64, Dtype::I32, s);
        let arange = |n: i64, shape: &[i64]| -> Result<Array> {
            Ok(ops::reshape(
                &ops::arange(0.0, n as f64, 1.0, Dtype::I32, s)?,
                shape,
                s,
            )?)
        };
        let row = arange(present_len, &[1, 1, present_len, 1])?;
        let is_new = if seq == 1 {
            ops::equal(&row, row_past, s)?
        } else {
            let offset = ops::subtract(&row, row_past, s)?;
            ops::logical_and(
                &ops::greater_equal(&offset, &i32s(0)?, s)?,
                &ops::less(&offset, &i32s(seq)?, s)?,
                s,
            )?
        };
        let written_end = ops::add(row_past, &i32s(seq)?, s)?;
        let scatter_rows = if has_past {
            // Row (b, h, past_b + i) of the buffer as a row of [B·H·P, D]: past_b comes from
            // seqlens_k, whose range is a run-time check, so the rows are clamped into the
            // buffer (a run that fails the check writes somewhere harmless, never outside).
            let row_past = ops::reshape(row_past, &[b, 1, 1], s)?;
            let within = ops::minimum(
                &ops::maximum(
                    &ops::add(&row_past, &arange(seq, &[1, 1, seq])?, s)?,
                    &i32s(0)?,
                    s,
                )?,
                &i32s(present_len - 1)?,
                s,
            )?;
            let heads = ops::add(
                &ops::multiply(&arange(b, &[b, 1, 1])?, &i32s(h * present_len)?, s)?,
                &ops::multiply(&arange(h, &[1, h, 1])?, &i32s(present_len)?, s)?,
                s,
            )?;
            Some(ops::reshape(
                &ops::add(&heads, &within, s)?,
                &[b * h * seq],
                s,
            )?)
        } else {
            None
        };
        Ok(Placement {
            kept: ops::less(&row, &written_end, s)?,
            row,
            is_new,
            scatter_rows,
        })
    }

    /// The present of `new` `[B, Hkv, S, D]` written after each row's past (rows
    /// `[past_b, past_b + S)`, the past's rows before them; `past_b` = 0 on a first prompt), zeros
    /// after; and, with a past, the past's buffer with the new rows written in: what a buffer
    /// that past and present share holds after the step. That one is a scatter into the past,
    /// which MLX makes in the past's own buffer when nothing else holds it (the EP's device
    /// mirror of a shared buffer, `ep/src/resident.rs`): a decode step then writes its new rows
    /// and nothing else, and the present is built from it only when ORT wants one of its own.
    fn place(
        &self,
        new: &Array,
        past: Option<&Array>,
        s: &Stream,
    ) -> Result<(Array, Option<Array>)> {
        let present_len = self.row.shape()[2];
        let (Some(past), Some(rows)) = (past, &self.scatter_rows) else {
            return Ok((padded_rows(new, present_len, s)?, None));
        };
        let [b, h, seq, d] = <[i64; 4]>::try_from(new.shape())
            .map_err(|_| OpError::new("GroupQueryAttention: K/V must be 4-D here"))?;
        if rows.shape() != [b * h * seq] {
            return Err(OpError::new(format!(
                "GroupQueryAttention: new K/V rows of shape {:?} do not match the step's placement of {} rows",
                new.shape(),
                rows.shape()[0]
            )));
        }
        let past = fitted_rows(past, present_len, s)?;
        let flat = ops::reshape(&past, &[b * h * present_len, d], s)?;
        let updates = ops::reshape(new, &[b * h * seq, 1, d], s)?;
        let held = ops::reshape(
            &ops::scatter_rows(&flat, rows, &updates, ops::ScatterMode::Set, s)?,
            &[b, h, present_len, d],
            s,
        )?;
        let present = ops::where_(&self.kept, &held, &scalar(0.0, new.dtype(), s)?, s)?;
        Ok((present, Some(held)))
    }
}

/// `past` `[B, H, L, D]` cut or padded with zero rows to `present_len` rows.
fn fitted_rows(past: &Array, present_len: i64, s: &Stream) -> Result<Array> {
    let d = past.shape();
    if d[2] > present_len {
        let end = [d[0] as i32, d[1] as i32, present_len as i32, d[3] as i32];
        return Ok(ops::slice(past, &[0, 0, 0, 0], &end, &[1, 1, 1, 1], s)?);
    }
    padded_rows(past, present_len, s)
}

/// `x` `[B, H, L, D]` with zero rows appended up to `present_len` (a first prompt's present:
/// every row's past is empty, its new rows come first).
fn padded_rows(x: &Array, present_len: i64, s: &Stream) -> Result<Array> {
    let have = x.shape()[2];
    if have == present_len {
        return Ok(x.clone());
    }
    let zero = scalar(0.0, x.dtype(), s)?;
    Ok(ops::pad(
        x,
        &[2],
        &[0],
        &[(present_len - have) as i32],
        &zero,
        false,
        s,
    )?)
}

/// `attention_bias` checked as ORT checks it, its columns padded from `T` to `P` with zeros.
fn bias_columns(
    bias: &Array,
    g: &Geometry,
    total: i64,
    present_len: i64,
    s: &Stream,
) -> Result<Array> {
    let d = bias.shape();
    let ok = d.len() == 4
        && (d[0] == g.batch || d[0] == 1)
        && (d[1] == g.q_heads || d[1] == 1)
        && d[2] == g.seq
        && d[3] == total;
    if !ok {
        return Err(OpError::new(format!(
            "GroupQueryAttention: attention_bias has shape {d:?}; it must be [batch or 1, num_heads or 1, {}, total_sequence_length = {total}]",
            g.seq
        )));
    }
    if total == present_len {
        return Ok(bias.clone());
    }
    let zero = scalar(0.0, bias.dtype(), s)?;
    Ok(ops::pad(
        bias,
        &[3],
        &[0],
        &[(present_len - total) as i32],
        &zero,
        false,
        s,
    )?)
}

fn gqa_claim(node: &Node) -> Verdict {
    for (index, name) in [
        (12, "k_scale"),
        (13, "v_scale"),
        (14, "q_norm_weight"),
        (15, "k_norm_weight"),
    ] {
        if node.input_present(index) {
            return Verdict::decline(format!(
                "input '{name}' (a quantized KV cache or the Q/K RMS-norm prologue) is not implemented"
            ));
        }
    }
    for name in ["k_quant_type", "v_quant_type"] {
        let kind = node.attr_or(name, String::from("NONE"));
        if kind != "NONE" {
            return Verdict::decline(format!(
                "{name} {kind:?}: a quantized KV cache is not implemented"
            ));
        }
    }
    if node.attr_or("kv_cache_bit_width", 0i64) != 0 {
        return Verdict::decline(
            "kv_cache_bit_width other than 0: a quantized KV cache is not implemented",
        );
    }
    if node.attr_or("sliding_window_cache", 0i64) != 0 {
        return Verdict::decline("sliding_window_cache 1 (a windowed KV cache) is not implemented");
    }
    let causal = node.attr_or("causal", 1i64);
    let window = node.attr_or("local_window_size", -1i64);
    if !(0..=1).contains(&causal) {
        return Verdict::decline(format!("causal {causal}: only 0 and 1"));
    }
    if causal == 0 && window != -1 {
        return Verdict::decline(
            "causal 0 with a local window: ORT's kernel requires local_window_size -1 then",
        );
    }
    let qk_output = node.attr_or("qk_output", 0i64);
    if !(0..=2).contains(&qk_output) {
        return Verdict::decline(format!("qk_output {qk_output}: only 0, 1 and 2"));
    }
    if (qk_output != 0) != node.output_present(3) {
        return Verdict::decline(
            "qk_output and the output_qk output must go together (ORT fails without the output and leaves it unwritten without the attribute)",
        );
    }
    if node.input_present(11) && node.attr_or("smooth_softmax", 0i64) == 1 {
        return Verdict::decline("head_sink with smooth_softmax 1: ORT's kernel refuses the pair");
    }
    if !node.output_present(1) || !node.output_present(2) {
        return Verdict::decline(
            "no present_key/present_value outputs: ORT's kernel then reads only the new keys",
        );
    }
    let seq_of =
        |index: usize| -> Option<i64> { node.input_shape(index)?.get(1).copied().flatten() };
    if let (Some(q), Some(k)) = (seq_of(0), seq_of(1)) {
        if q != k {
            return Verdict::decline(format!(
                "key sequence length {k} differs from the query's {q} (shared KV) and is not implemented"
            ));
        }
    }
    Verdict::Claim
}
