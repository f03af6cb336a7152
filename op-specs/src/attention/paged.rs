//! com.microsoft PagedAttention: packed variable-length batches over a block KV cache.
//!
//! ORT 1.31.1 has only a CUDA kernel for this op, so there is no CPU answer to compare with; the
//! semantics below follow its schema and the CUDA implementation (`paged_attention.cc`,
//! `paged_attention_impl.cu`, `paged_attention_helper.h`).
//!
//! - `query` holds the new tokens of every sequence back to back (`[T, Hq·D]`, or packed QKV
//!   `[T, (Hq + 2·Hkv)·D]`); `cumulative_sequence_length` `[B + 1]` says which tokens belong to
//!   which sequence and `past_seqlens` `[B]` how many tokens each sequence already has cached.
//!   Token `j` of sequence `b` sits at position `p = past_seqlens[b] + j`; the sequence then has
//!   `L_b = past_seqlens[b] + q_len_b` tokens.
//! - Rotary embedding (`do_rotary`) turns Q and K at position `p` over the first
//!   `2·cos_cache.cols` features, before K is cached.
//! - The caches `[num_blocks, block_size, Hkv, D]` get each new K/V row at slot
//!   `block_table[b, p / block_size]·block_size + p % block_size`, or at `slot_mapping[t]`
//!   (`-1`: not written). Every other row comes out unchanged.
//! - Every token then attends over its own sequence's keys, read from the updated cache through
//!   `block_table`: keys `[0, p]` when causal (bottom-right aligned), `[0, L_b)` when not; a
//!   `local_window_size` `W > 0` keeps keys `≥ p + 1 − W` (it bounds the left only; `W ≤ 0` is
//!   no window, as in ORT's kernels). Scores are `scale·q·kᵀ` in float32, soft-capped, with
//!   `head_sink[h]` as an extra logit in the softmax denominator.
//!
//! What the CUDA kernel leaves undefined fails the run instead: a token outside the sequence
//! lengths, a position past the block table's capacity, a block id outside `[0, num_blocks)` that
//! a token reads or writes, a slot outside `[-1, num_blocks·block_size)`, and two tokens writing
//! the same slot (a race on the GPU).
//!
//! On the GPU, without soft cap or sink, hand-written kernels read the caches in place through
//! the block table (`InPlace`: a decode kernel for about one new token a sequence, a prefill
//! kernel for more). Elsewhere two composed shapes of the same computation, chosen from the
//! static shapes by their cost: per token (each token's sequence gathered for it: decode steps)
//! or all tokens against all sequences with a mask to their own (prefill). MLX's fused attention
//! runs both when there is no soft cap or sink.

use mlx_kernels::ops::ScatterMode;
use mlx_kernels::{custom, ops, Array, Dtype, Stream};

use super::{
    clamp, fused_attention, i32s, masked, mix, rotary_width, rotate, scores, soft_cap,
    softmax_rows, AttentionMask, PackedSequences, Sink,
};
use crate::table::consts::scalar;
use crate::{onnx_op, Lower, Node, OpError, Result, Verdict};

/// Paged attention for continuous batching (vLLM-style): packed variable-length Q/K/V (or packed
/// QKV), a block KV cache updated at each token's slot (derived from `past_seqlens` and
/// `block_table`, or from `slot_mapping` with `-1` skipping the write), per-token causal or
/// bidirectional masks over the sequence's cached keys, GQA, rotary embedding (interleaved or
/// not, partial), local window, softcap and `head_sink`. Bad lengths, block ids or slots fail
/// the run.
#[allow(clippy::too_many_arguments)] // seventeen inputs and the attributes, as ORT has them
#[onnx_op(
    domain = "com.microsoft", op = "PagedAttention", precision = Float32, since = 1,
    types(T = F16 | BF16, S = I32, K = F32),
    inputs(query: T, key: T, value: T, key_cache: T, value_cache: T,
           cumulative_sequence_length: S, past_seqlens: S, block_table: S, cos_cache: T,
           sin_cache: T, slot_mapping: S, head_sink: T, q_norm_weight: T, k_norm_weight: T,
           k_scale: K, v_scale: K, attention_metadata: S),
    outputs(output: T, key_cache_out?: T, value_cache_out?: T),
    ignores(rotary_offset: i64, kv_cache_layout: String, qk_norm_epsilon: f32, k_quant_type: String,
            v_quant_type: String, k_cache_dtype: String, v_cache_dtype: String),
    shape = ShapeKeyed, claim = paged_claim,
    declines = "kv_cache_layout LATENT (absorbed MLA); quantized caches (k_quant_type/v_quant_type other than NONE, k_scale/v_scale, k_cache_dtype/v_cache_dtype set, caches of another type than the query); q_norm_weight/k_norm_weight (the Q/K RMS-norm prologue); rotary_offset other than 0; is_causal, do_rotary or rotary_interleaved outside {0, 1}; num_heads/kv_num_heads that ORT's kernel refuses at construction; a non-positive qk_norm_epsilon"
)]
fn paged_attention(
    cx: &mut Lower,
    query: Array,
    key: Option<Array>,
    value: Option<Array>,
    key_cache: Array,
    value_cache: Option<Array>,
    cumulative_sequence_length: Array,
    past_seqlens: Array,
    block_table: Array,
    cos_cache: Option<Array>,
    sin_cache: Option<Array>,
    slot_mapping: Option<Array>,
    head_sink: Option<Array>,
    _q_norm_weight: Option<Array>,
    _k_norm_weight: Option<Array>,
    _k_scale: Option<Array>,
    _v_scale: Option<Array>,
    attention_metadata: Option<Array>,
    #[attr] num_heads: i64,
    #[attr] kv_num_heads: i64,
    #[attr(default = 0.0)] scale: f32,
    #[attr(default = 0.0)] softcap: f32,
    #[attr(default = -1)] local_window_size: i64,
    #[attr(default = 1)] is_causal: i64,
    #[attr(default = 0)] do_rotary: i64,
    #[attr(default = 0)] rotary_interleaved: i64,
    #[attr(default = 0)] v_head_size: i64,
) -> Result<Vec<Array>> {
    let dtype = query.dtype();
    let g = Geometry::of(
        &query,
        key.as_ref(),
        value.as_ref(),
        &key_cache,
        value_cache.as_ref(),
        &cumulative_sequence_length,
        &past_seqlens,
        &block_table,
        num_heads,
        kv_num_heads,
    )?;
    let value_cache = value_cache.expect("checked by Geometry::of");
    if v_head_size != 0 && v_head_size != g.head {
        return Err(OpError::new(format!(
            "PagedAttention: v_head_size {v_head_size} may only differ from head_size {} when kv_cache_layout is LATENT",
            g.head
        )));
    }
    if let Some(sm) = &slot_mapping {
        if sm.shape() != [g.tokens] {
            return Err(OpError::new(format!(
                "PagedAttention: slot_mapping has shape {:?}; it must be [token_count] = [{}]",
                sm.shape(),
                g.tokens
            )));
        }
    }
    if let Some(h) = &head_sink {
        if h.shape() != [g.q_heads] {
            return Err(OpError::new(format!(
                "PagedAttention: head_sink has shape {:?}; it must be [num_heads] = [{}]",
                h.shape(),
                g.q_heads
            )));
        }
    }
    let rotary = match (&cos_cache, &sin_cache) {
        (Some(c), Some(sn)) => Some((c, sn, rotary_width("PagedAttention", c, sn, g.head, 1)?)),
        (None, None) => None,
        _ => {
            return Err(OpError::new(
                "PagedAttention: cos_cache and sin_cache shall be both present or both absent",
            ))
        }
    };
    if do_rotary == 1 && rotary.is_none() {
        return Err(OpError::new(
            "PagedAttention: cos_cache and sin_cache must be passed when do_rotary is 1",
        ));
    }
    if let Some(md) = &attention_metadata {
        check_metadata(cx, md, g.capacity())?;
    }
    if g.tokens == 0 {
        // Nothing to attend or write: the caches pass through.
        let s = cx.stream();
        let empty = ops::broadcast_to(&scalar(0.0, dtype, s)?, &[0, g.q_heads * g.head], s)?;
        return Ok(vec![empty, key_cache, value_cache]);
    }

    let s = cx.stream();
    let rows = Rows::of(cx, &g, &cumulative_sequence_length, &past_seqlens)?;
    let (q, k, v) = split_heads(&query, key.as_ref(), value.as_ref(), &g, s)?;

    // Rotary embedding of Q and K at each token's position.
    let (q, k) = match rotary {
        Some((cos, sin, dim)) if do_rotary == 1 => {
            let table_rows = cos.shape()[0].min(sin.shape()[0]);
            cx.require_in_range(
                &rows.position,
                0,
                table_rows - 1,
                format!("PagedAttention: a token's position (past_seqlens + its index in the sequence) must lie in [0, {table_rows}), the rotary cache's rows"),
            )?;
            let s = cx.stream();
            let at = crate::indexing::in_bounds(&rows.position, table_rows, s)?;
            // [T, rd/2] → [T, 1, rd/2], broadcast over the heads.
            let angle = |table: &Array| -> Result<Array> {
                Ok(ops::expand_dims(&ops::take(table, &at, 0, s)?, &[1], s)?)
            };
            let (cos, sin) = (angle(cos)?, angle(sin)?);
            let interleaved = rotary_interleaved == 1;
            let turn = |x: &Array| -> Result<Array> {
                if dim == g.head {
                    return rotate(x, &cos, &sin, interleaved, s);
                }
                let parts = ops::split_at(x, &[dim as i32], 2, s)?;
                let turned = rotate(&parts[0], &cos, &sin, interleaved, s)?;
                Ok(ops::concatenate(&[turned, parts[1].clone()], 2, s)?)
            };
            (turn(&q)?, turn(&k)?)
        }
        _ => (q, k),
    };

    // The cache write.
    let slots = write_slots(cx, &g, &rows, &block_table, slot_mapping.as_ref())?;
    let s = cx.stream();
    let key_cache_out = write_rows(&key_cache, &k, &slots, &g, s)?;
    let value_cache_out = write_rows(&value_cache, &v, &slots, &g, s)?;
    // A pool bound as its own output (ORT's in-place op) changes in the tokens' rows only.
    let written = written_slots(&slots, &g, s)?;
    cx.writes_only_rows(1, &written, None, &key_cache_out);
    cx.writes_only_rows(2, &written, None, &value_cache_out);
    let s = cx.stream();

    // The read: every sequence's keys through its block table, [B, Hkv, Lcap, D].
    let ids = ops::astype(&block_table, Dtype::I32, s)?;
    let id_ok = ops::logical_and(
        &ops::greater_equal(&ids, &i32s(0, s)?, s)?,
        &ops::less(&ids, &i32s(g.blocks, s)?, s)?,
        s,
    )?;
    let safe_ids = clamp(&ids, 0, g.blocks - 1, s)?;
    let cap = g.capacity();
    let gather = |cache: &Array| -> Result<Array> {
        let flat_ids = ops::reshape(&safe_ids, &[g.batch * g.max_blocks], s)?;
        let pages = ops::take(cache, &flat_ids, 0, s)?; // [B·M, bs, Hkv, D]
        let seqs = ops::reshape(&pages, &[g.batch, cap, g.kv_heads, g.head], s)?;
        Ok(ops::transpose(&seqs, &[0, 2, 1, 3], s)?)
    };
    // Whether each position's block id is a real block, [B, Lcap].
    let position_ok = ops::reshape(
        &ops::broadcast_to(
            &ops::expand_dims(&id_ok, &[2], s)?,
            &[g.batch, g.max_blocks, g.block_size],
            s,
        )?,
        &[g.batch, cap],
        s,
    )?;

    // Which of its sequence's positions each token sees, [T, Lcap].
    let key_pos = ops::reshape(
        &ops::arange(0.0, cap as f64, 1.0, Dtype::I32, s)?,
        &[1, cap],
        s,
    )?;
    let (lo, hi) = rows.key_ranges(is_causal == 1, local_window_size, s)?;
    let column = |a: &Array| ops::reshape(a, &[g.tokens, 1], s);
    let visible = ops::logical_and(
        &ops::greater_equal(&key_pos, &column(&lo)?, s)?,
        &ops::less(&key_pos, &column(&hi)?, s)?,
        s,
    )?;
    let token_ok = ops::take(&position_ok, &rows.sequence, 0, s)?;
    cx.require(
        &ops::logical_or(&ops::logical_not(&visible, s)?, &token_ok, s)?,
        format!(
            "PagedAttention: a block_table entry that a token attends to is not a block id in [0, {})",
            g.blocks
        ),
    )?;
    let s = cx.stream();

    let scale = if scale == 0.0 {
        1.0 / (g.head as f32).sqrt()
    } else {
        scale
    };
    let sink = head_sink.as_ref().map(Sink::PerHead);
    let attend = |q4: &Array, k4: &Array, v4: &Array, keep: &Array| -> Result<Array> {
        if softcap <= 0.0 && sink.is_none() {
            return fused_attention(q4, k4, v4, scale, AttentionMask::Array(keep), s)
                .map_err(OpError::from);
        }
        let mut x = scores(q4, k4, scale, s)?;
        if softcap > 0.0 {
            x = soft_cap(&x, softcap, s)?;
        }
        let x = masked(&x, keep, f32::NEG_INFINITY, s)?;
        let probs = softmax_rows(&x, sink, s)?;
        mix(&probs, v4, dtype, s)
    };
    let hidden = g.q_heads * g.head;
    if softcap <= 0.0 && sink.is_none() {
        let in_place = InPlace {
            q: &q,
            key_pool: &key_cache_out,
            value_pool: &value_cache_out,
            table: &safe_ids,
            sequence: &rows.sequence,
            lo: &lo,
            hi: &hi,
            scale,
        };
        if let Some(out) = in_place.attend(&g, dtype, s)? {
            let out = ops::reshape(&out, &[g.tokens, hidden], s)?;
            return Ok(vec![out, key_cache_out, value_cache_out]);
        }
    }
    let keys = gather(&key_cache_out)?;
    let values = gather(&value_cache_out)?;
    let out = if g.per_token_is_cheaper() {
        // [T, Hq, 1, D] against each token's own sequence [T, Hkv, Lcap, D].
        let q4 = ops::expand_dims(&q, &[2], s)?;
        let k4 = ops::take(&keys, &rows.sequence, 0, s)?;
        let v4 = ops::take(&values, &rows.sequence, 0, s)?;
        let keep = ops::reshape(&visible, &[g.tokens, 1, 1, cap], s)?;
        let out = attend(&q4, &k4, &v4, &keep)?;
        ops::reshape(&out, &[g.tokens, hidden], s)?
    } else {
        // [1, Hq, T, D] against every sequence side by side [1, Hkv, B·Lcap, D].
        let q4 = ops::expand_dims(&ops::transpose(&q, &[1, 0, 2], s)?, &[0], s)?;
        let side_by_side = |x: &Array| -> Result<Array> {
            let x = ops::transpose(x, &[1, 0, 2, 3], s)?;
            Ok(ops::reshape(
                &x,
                &[1, g.kv_heads, g.batch * cap, g.head],
                s,
            )?)
        };
        let (k4, v4) = (side_by_side(&keys)?, side_by_side(&values)?);
        let batch_ids = ops::reshape(
            &ops::arange(0.0, g.batch as f64, 1.0, Dtype::I32, s)?,
            &[1, g.batch, 1],
            s,
        )?;
        let own = ops::equal(
            &batch_ids,
            &ops::reshape(&rows.sequence, &[g.tokens, 1, 1], s)?,
            s,
        )?;
        let keep = ops::logical_and(&own, &ops::expand_dims(&visible, &[1], s)?, s)?;
        let keep = ops::reshape(&keep, &[1, 1, g.tokens, g.batch * cap], s)?;
        let out = attend(&q4, &k4, &v4, &keep)?; // [1, Hq, T, D]
        let out = ops::transpose(&ops::squeeze(&out, &[0], s)?, &[1, 0, 2], s)?;
        ops::reshape(&out, &[g.tokens, hidden], s)?
    };
    Ok(vec![out, key_cache_out, value_cache_out])
}

/// Attention read straight from the pools through the block table by a GPU kernel: the caches
/// are not gathered.
struct InPlace<'a> {
    q: &'a Array,
    key_pool: &'a Array,
    value_pool: &'a Array,
    /// The block table with ids clamped to the pool (bad ones already fail the run).
    table: &'a Array,
    /// Each token's sequence and visible keys `[lo, hi)`, `[T]` int32 ([`Rows::key_ranges`]).
    sequence: &'a Array,
    lo: &'a Array,
    hi: &'a Array,
    scale: f32,
}

impl InPlace<'_> {
    /// The output `[T, Hq, D]` (or `[T, Hq, 1, D]`), or `None` where no kernel takes the call.
    /// A batch of about one new token a sequence runs the decode kernel (a block per token and
    /// key head, long caches split over blocks); more tokens a sequence run the prefill kernel,
    /// which reads each key tile once for up to 16 of a sequence's tokens.
    fn attend(&self, g: &Geometry, dtype: Dtype, s: &Stream) -> Result<Option<Array>> {
        let decode_like = g.tokens < 4 * g.batch;
        if decode_like
            && custom::decode_attention_runs_on(s)
            && custom::decode_attention_takes(g.head, dtype)
        {
            let table = ops::take(self.table, self.sequence, 0, s)?; // [T, M]
            let column = |a: &Array| ops::reshape(a, &[g.tokens, 1], s);
            let q4 = ops::expand_dims(self.q, &[2], s)?; // [T, Hq, 1, D]
            let out = custom::paged_decode_attention(
                &q4,
                self.key_pool,
                self.value_pool,
                &table,
                &column(self.lo)?,
                &column(self.hi)?,
                self.scale,
                s,
            )?;
            return Ok(Some(out));
        }
        if custom::paged_prefill_attention_runs_on(s)
            && custom::paged_prefill_attention_takes(g.head, dtype)
        {
            let out = custom::paged_prefill_attention(
                self.q,
                self.key_pool,
                self.value_pool,
                self.table,
                self.sequence,
                self.lo,
                self.hi,
                self.scale,
                s,
            )?;
            return Ok(Some(out));
        }
        Ok(None)
    }
}

/// The shapes of one call.
struct Geometry {
    tokens: i64,
    q_heads: i64,
    kv_heads: i64,
    head: i64,
    packed: bool,
    blocks: i64,
    block_size: i64,
    batch: i64,
    max_blocks: i64,
}

impl Geometry {
    #[allow(clippy::too_many_arguments)]
    fn of(
        query: &Array,
        key: Option<&Array>,
        value: Option<&Array>,
        key_cache: &Array,
        value_cache: Option<&Array>,
        cumulative: &Array,
        past: &Array,
        block_table: &Array,
        num_heads: i64,
        kv_num_heads: i64,
    ) -> Result<Geometry> {
        let err = |m: String| Err(OpError::new(format!("PagedAttention: {m}")));
        if num_heads <= 0 || kv_num_heads <= 0 || num_heads % kv_num_heads != 0 {
            return err(format!(
                "num_heads {num_heads} must be a positive multiple of kv_num_heads {kv_num_heads}"
            ));
        }
        let d = query.shape();
        if d.len() != 2 {
            return err(format!(
                "'query' has shape {d:?}; it must be [token_count, hidden_size]"
            ));
        }
        let (tokens, hidden) = (d[0], d[1]);
        let (head, packed) = match (key, value) {
            (None, None) => (hidden / (num_heads + 2 * kv_num_heads), true),
            (Some(k), Some(v)) => {
                let head = hidden / num_heads;
                if head * num_heads != hidden {
                    return err(format!(
                        "'query' hidden size {hidden} is not a multiple of num_heads {num_heads}"
                    ));
                }
                for (name, t) in [("key", k), ("value", v)] {
                    if t.shape() != [tokens, kv_num_heads * head] {
                        return err(format!(
                            "'{name}' has shape {:?}; expected [{tokens}, kv_num_heads · head_size] = [{tokens}, {}]",
                            t.shape(),
                            kv_num_heads * head
                        ));
                    }
                }
                (head, false)
            }
            _ => return err(
                "'key' and 'value' shall be both present, or both absent in the case of packed qkv"
                    .into(),
            ),
        };
        if head <= 0 || head % 8 != 0 {
            return err(format!(
                "head_size must be a positive multiple of 8, got {head}"
            ));
        }
        let Some(value_cache) = value_cache else {
            return err("'value_cache' is required unless kv_cache_layout is LATENT".into());
        };
        let c = key_cache.shape();
        if c.len() != 4 || c[2] != kv_num_heads || c[3] != head {
            return err(format!(
                "'key_cache' has shape {c:?}; it must be [num_blocks, block_size, {kv_num_heads}, {head}]"
            ));
        }
        if value_cache.shape() != c {
            return err(format!(
                "'value_cache' has shape {:?}; it must match 'key_cache' {c:?}",
                value_cache.shape()
            ));
        }
        let (blocks, block_size) = (c[0], c[1]);
        if block_size < 16 || block_size & (block_size - 1) != 0 {
            return err(format!(
                "block_size must be a power of two and at least 16, got {block_size}"
            ));
        }
        let cu = cumulative.shape();
        if cu.len() != 1 || cu[0] < 2 {
            return err(format!(
                "cumulative_sequence_length has shape {cu:?}; it must be [batch_size + 1] with batch_size >= 1"
            ));
        }
        let batch = cu[0] - 1;
        if past.shape() != [batch] {
            return err(format!(
                "past_seqlens has shape {:?}; it must be [batch_size] = [{batch}]",
                past.shape()
            ));
        }
        let bt = block_table.shape();
        if bt.len() != 2 || bt[0] != batch {
            return err(format!(
                "block_table has shape {bt:?}; it must be [batch_size = {batch}, max_blocks_per_sequence]"
            ));
        }
        let max_blocks = bt[1];
        if tokens > 0 && (max_blocks < 1 || blocks < 1) {
            return err(format!(
                "{tokens} new tokens need cache blocks: num_blocks {blocks}, max_blocks_per_sequence {max_blocks}"
            ));
        }
        let g = Geometry {
            tokens,
            q_heads: num_heads,
            kv_heads: kv_num_heads,
            head,
            packed,
            blocks,
            block_size,
            batch,
            max_blocks,
        };
        let slots = blocks.checked_mul(block_size);
        if slots.is_none_or(|n| n >= i32::MAX as i64) || g.capacity() >= i32::MAX as i64 {
            return err("the cache or the block table addresses more than 2^31 slots".into());
        }
        Ok(g)
    }

    /// Positions one sequence can address: `max_blocks · block_size`.
    fn capacity(&self) -> i64 {
        self.max_blocks.saturating_mul(self.block_size)
    }

    /// Whether gathering each token's own sequence (cost `T·Lcap·(2·Hkv·D + Hq)`) beats
    /// attending all sequences side by side (`B·Lcap·2·Hkv·D + Hq·T·B·Lcap`).
    fn per_token_is_cheaper(&self) -> bool {
        let kv = 2 * self.kv_heads * self.head;
        let per_token = self.tokens as f64 * (kv + self.q_heads) as f64;
        let side_by_side = self.batch as f64 * (kv as f64 + (self.q_heads * self.tokens) as f64);
        per_token <= side_by_side
    }
}

/// Per token (each `[T]`, int32): its sequence, its position `past + j` and its sequence's length
/// `past + q_len`. The lengths are checked as ORT's helper checks them.
struct Rows {
    sequence: Array,
    position: Array,
    length: Array,
}

impl Rows {
    fn of(cx: &mut Lower, g: &Geometry, cumulative: &Array, past: &Array) -> Result<Rows> {
        let sequences = PackedSequences::of(
            cx,
            "PagedAttention",
            cumulative,
            g.batch,
            g.tokens,
            i32::MAX as i64,
            "PagedAttention: cumulative_sequence_length must be non-decreasing".into(),
        )?;
        let s = cx.stream();
        let past = ops::astype(past, Dtype::I32, s)?;
        let cap = g.capacity();
        cx.require_in_range(
            &past,
            0,
            cap,
            format!("PagedAttention: past_seqlens must lie in [0, max_blocks_per_sequence · block_size = {cap}]"),
        )?;
        let s = cx.stream();
        let total = ops::add(&past, &sequences.lengths, s)?;
        cx.require_in_range(
            &total,
            0,
            cap,
            format!("PagedAttention: past_seqlens + query length exceeds the block table's capacity of {cap} positions"),
        )?;
        let s = cx.stream();
        let (sequence, index) = sequences.of_tokens(g.batch, g.tokens, s)?;
        let of_row = |a: &Array| ops::take(a, &sequence, 0, s);
        let row_past = of_row(&past)?;
        Ok(Rows {
            position: ops::add(&row_past, &index, s)?,
            length: ops::add(&row_past, &of_row(&sequences.lengths)?, s)?,
            sequence,
        })
    }
}

impl Rows {
    /// Each token's visible keys `[lo, hi)`, `[T]` int32: up to its own position when causal
    /// (never past its sequence's length), from `W - 1` before it with a window `W > 0`. The
    /// composed paths' mask and the kernels' ranges both come from here.
    fn key_ranges(&self, causal: bool, window: i64, s: &Stream) -> Result<(Array, Array)> {
        let (pos, len) = (&self.position, &self.length);
        let hi = if causal {
            ops::minimum(&ops::add(pos, &i32s(1, s)?, s)?, len, s)?
        } else {
            len.clone()
        };
        let lo = if window > 0 {
            ops::subtract(pos, &i32s(window - 1, s)?, s)?
        } else {
            ops::broadcast_to(&i32s(0, s)?, &pos.shape(), s)?
        };
        Ok((lo, hi))
    }
}

/// Q `[T, Hq, D]`, K and V `[T, Hkv, D]` from the separate or packed inputs.
fn split_heads(
    query: &Array,
    key: Option<&Array>,
    value: Option<&Array>,
    g: &Geometry,
    s: &Stream,
) -> Result<(Array, Array, Array)> {
    let heads = |x: &Array, n: i64| ops::reshape(x, &[g.tokens, n, g.head], s);
    if let (false, Some(k), Some(v)) = (g.packed, key, value) {
        return Ok((
            heads(query, g.q_heads)?,
            heads(k, g.kv_heads)?,
            heads(v, g.kv_heads)?,
        ));
    }
    let q_end = (g.q_heads * g.head) as i32;
    let k_end = q_end + (g.kv_heads * g.head) as i32;
    let v_end = k_end + (g.kv_heads * g.head) as i32;
    // A packed hidden size may carry a remainder past the heads; ORT ignores it.
    let used = ops::slice(query, &[0, 0], &[g.tokens as i32, v_end], &[1, 1], s)?;
    let parts = ops::split_at(&used, &[q_end, k_end], 1, s)?;
    Ok((
        heads(&parts[0], g.q_heads)?,
        heads(&parts[1], g.kv_heads)?,
        heads(&parts[2], g.kv_heads)?,
    ))
}

/// `attention_metadata` as ORT checks it: shape (2) or (3), entries non-negative, the lower
/// bound not above the upper one. The bounds only size ORT's launches, so they change nothing
/// here.
fn check_metadata(cx: &mut Lower, md: &Array, capacity: i64) -> Result<()> {
    let n = match md.shape().as_slice() {
        [n] if *n == 2 || *n == 3 => *n,
        d => {
            return Err(OpError::new(format!(
                "PagedAttention: 'attention_metadata' must have shape (2) or (3), got {d:?}"
            )))
        }
    };
    cx.require_in_range(
        md,
        0,
        i32::MAX as i64,
        "PagedAttention: 'attention_metadata' entries must be non-negative (0 means unknown)",
    )?;
    if n == 3 {
        let s = cx.stream();
        let md = ops::astype(md, Dtype::I32, s)?;
        let kv_bound = ops::slice(&md, &[1], &[2], &[1], s)?;
        let lower = ops::slice(&md, &[2], &[3], &[1], s)?;
        let cap = i32s(capacity, s)?;
        let given = ops::logical_and(
            &ops::greater(&kv_bound, &i32s(0, s)?, s)?,
            &ops::less(&kv_bound, &cap, s)?,
            s,
        )?;
        let upper = ops::where_(&given, &kv_bound, &cap, s)?;
        let holds = ops::less_equal(&lower, &upper, s)?;
        cx.require(
            &holds,
            "PagedAttention: attention_metadata max_kv_len_lower_bound must not exceed max_kv_len_bound",
        )?;
    }
    Ok(())
}

/// Where a step's tokens write their new K/V rows: one scatter into the cache itself, so that
/// MLX writes the rows in place when nothing else holds the cache (a pool bound as its own
/// output: the EP's device mirror). A spare row for the tokens that write nothing would make
/// the scatter's input a copy of the whole pool every call; instead each of them writes a
/// writing token's row again with that token's values (two writes of one value to a row agree
/// in any order), or, when no token writes, row 0 with what it holds.
struct Slots {
    /// Each token's row in the flattened cache `[num_blocks·block_size, Hkv, D]`.
    target: Array,
    skipped: Option<Skipped>,
}

/// The tokens that write nothing (slot_mapping -1) and the token whose write they repeat.
struct Skipped {
    skip: Array,
    /// Its negation: the tokens that write.
    writes: Array,
    /// A writing token when there is one, else token 0 (a scalar index).
    chosen: Array,
    chosen_writes: Array,
}

impl Slots {
    /// What each token writes at its `target` row of `base` `[rows, ...]`, given `updates`
    /// `[T, ...]`: its own update, or the repeated one.
    fn values(&self, base: &Array, updates: &Array, s: &Stream) -> Result<Array> {
        let Some(k) = &self.skipped else {
            return Ok(updates.clone());
        };
        let repeated = ops::where_(
            &k.chosen_writes,
            &ops::take(updates, &k.chosen, 0, s)?,
            &ops::take(base, &i32s(0, s)?, 0, s)?,
            s,
        )?;
        let axes: Vec<i32> = (1..updates.ndim() as i32).collect();
        Ok(ops::where_(
            &ops::expand_dims(&k.skip, &axes, s)?,
            &repeated,
            updates,
            s,
        )?)
    }
}

/// The tokens' [`Slots`], checked: in range, no two writing one row.
fn write_slots(
    cx: &mut Lower,
    g: &Geometry,
    rows: &Rows,
    block_table: &Array,
    slot_mapping: Option<&Array>,
) -> Result<Slots> {
    let s = cx.stream();
    let slots = g.blocks * g.block_size;
    let (target, skip) = match slot_mapping {
        Some(sm) => {
            let sm = ops::astype(sm, Dtype::I32, s)?;
            cx.require_in_range(
                &sm,
                -1,
                slots - 1,
                format!("PagedAttention: slot_mapping values must lie in [-1, num_blocks · block_size = {slots})"),
            )?;
            let s = cx.stream();
            let skip = ops::less(&sm, &i32s(0, s)?, s)?;
            (sm, Some(skip))
        }
        None => {
            let bs = i32s(g.block_size, s)?;
            let column = clamp(
                &ops::floor_divide(&rows.position, &bs, s)?,
                0,
                g.max_blocks - 1,
                s,
            )?;
            let flat = ops::add(
                &ops::multiply(&rows.sequence, &i32s(g.max_blocks, s)?, s)?,
                &column,
                s,
            )?;
            let table = ops::astype(
                &ops::reshape(block_table, &[g.batch * g.max_blocks], s)?,
                Dtype::I32,
                s,
            )?;
            let id = ops::take(&table, &flat, 0, s)?;
            cx.require_in_range(
                &id,
                0,
                g.blocks - 1,
                format!(
                    "PagedAttention: the block_table entry a new token is written to is not a block id in [0, {})",
                    g.blocks
                ),
            )?;
            let s = cx.stream();
            let offset = ops::remainder(&rows.position, &bs, s)?;
            let slot = ops::add(&ops::multiply(&id, &bs, s)?, &offset, s)?;
            (slot, None)
        }
    };
    let s = cx.stream();
    let target = clamp(&target, 0, slots - 1, s)?;
    let skipped = match &skip {
        Some(skip) => {
            let writes = ops::logical_not(skip, s)?;
            // The largest of the 0/1 flags: a writing token when there is one.
            let chosen = ops::argmax(&ops::astype(&writes, Dtype::I32, s)?, 0, false, s)?;
            Some(Skipped {
                skip: skip.clone(),
                chosen_writes: ops::take(&writes, &chosen, 0, s)?,
                writes,
                chosen,
            })
        }
        None => None,
    };
    if g.tokens > 1 {
        // Two tokens writing one slot race on the GPU: distinct keys for the skipped ones, then
        // no two neighbours equal once sorted.
        let t = ops::arange(0.0, g.tokens as f64, 1.0, Dtype::I32, s)?;
        let keys = match &skip {
            Some(skip) => ops::where_(skip, &ops::subtract(&i32s(-1, s)?, &t, s)?, &target, s)?,
            None => target.clone(),
        };
        let sorted = ops::take(&keys, &ops::argsort(&keys, 0, s)?, 0, s)?;
        let n = g.tokens as i32;
        let head = ops::slice(&sorted, &[0], &[n - 1], &[1], s)?;
        let tail = ops::slice(&sorted, &[1], &[n], &[1], s)?;
        let distinct = ops::not_equal(&head, &tail, s)?;
        cx.require(
            &distinct,
            "PagedAttention: two tokens write the same cache slot",
        )?;
    }
    let target = match &skipped {
        Some(k) => {
            let row = ops::where_(
                &k.chosen_writes,
                &ops::take(&target, &k.chosen, 0, s)?,
                &i32s(0, s)?,
                s,
            )?;
            ops::where_(&k.skip, &row, &target, s)?
        }
        None => target,
    };
    Ok(Slots { target, skipped })
}

/// `cache` with `new` `[T, Hkv, D]` written at the tokens' rows of its flattened view.
fn write_rows(
    cache: &Array,
    new: &Array,
    slots: &Slots,
    g: &Geometry,
    s: &Stream,
) -> Result<Array> {
    let flat = ops::reshape(cache, &[g.blocks * g.block_size, g.kv_heads, g.head], s)?;
    let updates = ops::reshape(
        &ops::astype(new, cache.dtype(), s)?,
        &[g.tokens, g.kv_heads, g.head],
        s,
    )?;
    let updates = ops::reshape(
        &slots.values(&flat, &updates, s)?,
        &[g.tokens, 1, g.kv_heads, g.head],
        s,
    )?;
    let written = ops::scatter_rows(&flat, &slots.target, &updates, ScatterMode::Set, s)?;
    Ok(ops::reshape(
        &written,
        &[g.blocks, g.block_size, g.kv_heads, g.head],
        s,
    )?)
}

/// The cache rows the tokens write, `[num_blocks, block_size, 1]` (broadcast over the heads):
/// what a pool bound as its own output has to copy back to ORT's buffer.
fn written_slots(slots: &Slots, g: &Geometry, s: &Stream) -> Result<Array> {
    let none = ops::broadcast_to(
        &scalar(0.0, Dtype::Bool, s)?,
        &[g.blocks * g.block_size, 1],
        s,
    )?;
    let writes = match &slots.skipped {
        Some(k) => k.writes.clone(),
        None => ops::broadcast_to(&scalar(1.0, Dtype::Bool, s)?, &[g.tokens], s)?,
    };
    let flags = slots.values(&none, &ops::reshape(&writes, &[g.tokens, 1], s)?, s)?;
    let marked = ops::scatter_rows(
        &none,
        &slots.target,
        &ops::reshape(&flags, &[g.tokens, 1, 1], s)?,
        ScatterMode::Set,
        s,
    )?;
    Ok(ops::reshape(&marked, &[g.blocks, g.block_size, 1], s)?)
}

fn paged_claim(node: &Node) -> Verdict {
    let layout = node.attr_or("kv_cache_layout", String::from("SEPARATE"));
    if layout != "SEPARATE" {
        return Verdict::decline(format!(
            "kv_cache_layout {layout:?}: only SEPARATE (LATENT, absorbed MLA, is not implemented)"
        ));
    }
    for name in ["k_quant_type", "v_quant_type"] {
        if let Some(t) = node.attr_as::<String>(name).filter(|t| t != "NONE") {
            return Verdict::decline(format!(
                "{name} {t:?}: a quantized KV cache is not implemented"
            ));
        }
    }
    for name in ["k_cache_dtype", "v_cache_dtype"] {
        if let Some(t) = node.attr_as::<String>(name).filter(|t| !t.is_empty()) {
            return Verdict::decline(format!(
                "{name} {t:?}: only the cache tensor's own element type (an empty value)"
            ));
        }
    }
    for (index, name) in [
        (12, "q_norm_weight"),
        (13, "k_norm_weight"),
        (14, "k_scale"),
        (15, "v_scale"),
    ] {
        if node.input_present(index) {
            return Verdict::decline(format!(
                "input '{name}' (the Q/K RMS-norm prologue or a quantized KV cache) is not implemented"
            ));
        }
    }
    if node.attr_or("rotary_offset", 0i64) != 0 {
        return Verdict::decline(
            "rotary_offset other than 0 (offset rotary for MLA) is not implemented",
        );
    }
    for name in ["is_causal", "do_rotary", "rotary_interleaved"] {
        if let Some(v) = node.attr_as::<i64>(name).filter(|v| !(0..=1).contains(v)) {
            return Verdict::decline(format!("{name} {v}: only 0 and 1"));
        }
    }
    let heads = node.attr_or("num_heads", 0i64);
    let kv_heads = node.attr_or("kv_num_heads", 0i64);
    if heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0 {
        return Verdict::decline(format!(
            "num_heads {heads} and kv_num_heads {kv_heads}: ORT's kernel requires positive counts, num_heads a multiple of kv_num_heads"
        ));
    }
    if node.attr_as::<i64>("v_head_size").is_some_and(|v| v < 0) {
        return Verdict::decline("a negative v_head_size (ORT's kernel refuses it)");
    }
    if let Some(e) = node.attr_as::<f32>("qk_norm_epsilon") {
        if !(e.is_finite() && e > 0.0) {
            return Verdict::decline(format!(
                "qk_norm_epsilon {e}: ORT's kernel requires a positive finite value"
            ));
        }
    }
    Verdict::Claim
}
