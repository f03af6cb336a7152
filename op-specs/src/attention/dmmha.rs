//! com.microsoft DecoderMaskedMultiHeadAttention, as ORT 1.31.1's CPU kernel computes it
//! (float32 and float16; checked by running ORT, the stored sources mix versions).
//!
//! One query position per row, in one of two forms:
//! - **self-attention over a shared buffer**: `past_key`/`past_value` are `[B, N, M, H]` buffers
//!   whose first `past_sequence_length` (P) rows are the past; the new key and value (3-D
//!   `[B, 1, D]` plus the packed `bias`, or already `[B, N, 1, H]`) go to row P of the present
//!   outputs (every other row is the past's), and the query attends over the P + 1 rows. ORT
//!   requires `past_present_share_buffer` 1 and P in `[0, M)`.
//! - **cross-attention**: no past and no present outputs; `key`/`value` are the whole keys
//!   `[B, N, L, H]`, or 3-D `[B, L, D]`, which ORT reads as `[B, N, L, H]` in memory order (a
//!   reinterpretation, not a transpose) and without their part of `bias` (only the query's is
//!   added). ORT refuses `attention_bias` here.
//!
//! Scores are `scale · q·kᵀ` in float32 (`scale` 0 means `1/√H`), then the additive
//! `attention_bias` `[B or 1, N or 1, 1, T]`, then `mask_filter_value` at masked keys of the 2-D
//! `mask_index` `[B, T]` (the only mask form ORT takes). Without beams (no `cache_indirection`) a
//! key is kept where its mask entry is positive, as in MultiHeadAttention (`mha.rs`, whose
//! attention step this reuses). With beams (`cache_indirection` `[B / W, W, M]`, `W` =
//! `beam_width`, or `cache_indirection`'s second dimension without it) ORT's beam loop differs:
//! past row `j` of batch row `b` comes from batch row `(b / W)·W + cache_indirection[b / W,
//! b % W, j]` (only the first P entries are read, and checked to lie in `[0, W)`), a key is
//! masked only where its mask entry is 0 (negative entries are kept), and a batched
//! `attention_bias` `[B, N, 1, T]` is read at row `b / W` (`[B, 1, 1, T]` it reads past its
//! end: declined). `qk` is the float32 scores after the bias and the mask (before the softmax), rounded
//! to the element type; float16 nodes compute in float32 and round once.

use mlx_kernels::{ops, Array, Dtype, Stream};

use super::mha::{
    add_bias, attend, check_attention_bias, dims4, positive_heads, split_heads, Padding, Step,
};
use crate::{onnx_op, Lower, Node, OpError, Result, Verdict};

const OP: &str = "DecoderMaskedMultiHeadAttention";

/// Multi-head attention of one decoding step: self-attention over a shared max-length KV
/// buffer (`past_present_share_buffer`, `past_sequence_length`, present outputs), with beam
/// search through `beam_width`/`cache_indirection`, or cross-attention over given keys and
/// values; `mask_index` `[B, T]`, additive `attention_bias`, packed `bias`, `scale`,
/// `mask_filter_value` and the pre-softmax scores `qk` (`output_qk`).
#[allow(clippy::too_many_arguments)] // eleven inputs and five attributes, as ORT has them
#[onnx_op(
    domain = "com.microsoft", op = "DecoderMaskedMultiHeadAttention", precision = Float32, since = 1,
    types(T = F32 | F16, M = I32, QK = F32 | F16),
    inputs(query: T, key: T, value: T, mask_index: M, attention_bias: T, past_key: T,
           past_value: T, past_sequence_length: M, beam_width: M, cache_indirection: M, bias: T),
    outputs(output: T, present_key?: T, present_value?: T, qk?: QK), shape = ShapeKeyed,
    // Both checked by the claim.
    ignores(past_present_share_buffer: i64, output_qk: i64), claim = dmmha_claim,
    declines = "packed QKV (no key or no value): ORT's CPU kernel fails on it; self-attention (past or present outputs) without past_present_share_buffer 1, without both past_key and past_value, without both present outputs, or without past_sequence_length (ORT refuses or crashes); cross-attention with attention_bias or past_present_share_buffer 1 (ORT refuses both), or with past_value alone; a 4-D key or value in self-attention together with bias; attention_bias [B, 1, 1, T] (batched, broadcast over heads) with cache_indirection, which ORT's beam kernel reads past its end (a run-time error when its shape is not known in the graph); a qk output without output_qk 1 (ORT leaves it unset) or of another type than the query; num_heads < 1"
)]
fn decoder_masked_multi_head_attention(
    cx: &mut Lower,
    query: Array,
    key: Option<Array>,
    value: Option<Array>,
    mask_index: Option<Array>,
    attention_bias: Option<Array>,
    past_key: Option<Array>,
    past_value: Option<Array>,
    #[host] past_sequence_length: Option<i64>,
    #[host] beam_width: Option<Vec<i64>>,
    cache_indirection: Option<Array>,
    bias: Option<Array>,
    #[attr] num_heads: i64,
    #[attr(default = 0.0)] scale: f32,
    #[attr(default = -10000.0)] mask_filter_value: f32,
) -> Result<Vec<Array>> {
    let s = cx.stream();
    let (Some(key), Some(value)) = (key, value) else {
        return Err(err(
            "packed QKV (no key or no value) is not supported; ORT's CPU kernel fails on it too",
        ));
    };
    let n = num_heads;
    let dtype = query.dtype();
    let qshape = query.shape();
    let [b, sq, d] = <[i64; 3]>::try_from(qshape.clone()).map_err(|_| {
        err(format!(
            "query has shape {qshape:?}: expected [batch, 1, hidden]"
        ))
    })?;
    if sq != 1 {
        return Err(err(format!(
            "Input sequence length should be 1 to use DecoderMaskedMultiHeadAttention. Actual length is {sq}"
        )));
    }
    if d % n != 0 {
        return Err(err(format!(
            "query hidden size {d} is not a multiple of num_heads {n}"
        )));
    }
    let h = d / n;
    if let Some(bias) = &bias {
        if bias.shape() != [3 * d] {
            return Err(err(format!(
                "bias has shape {:?}: expected [{}] (2 * hidden_size + v_hidden_size)",
                bias.shape(),
                3 * d
            )));
        }
    }
    // The biased operands are rounded to the element type, as ORT keeps them.
    let rounded = |x: Array| ops::astype(&x, dtype, s);
    let q = split_heads(
        &rounded(add_bias(&query, bias.as_ref(), 0, s)?)?,
        n,
        "query",
        s,
    )?;
    let want_scores = cx.node().output_present(3);
    let options = Options {
        scale,
        mask_filter_value,
        want_scores,
        out: dtype,
    };
    let step = |padding, attention_bias| options.step(padding, attention_bias);
    let qk_dtype = if want_scores {
        cx.output_dtype(3)?
    } else {
        dtype
    };
    let finish = |out: Array, qk: Option<Array>| -> Result<Array> {
        match qk {
            Some(qk) => Ok(ops::astype(&qk, qk_dtype, s)?),
            None => Ok(out),
        }
    };

    let Some(past_key) = past_key else {
        // Cross-attention: the keys and values are given whole.
        let (k, v) = cross_operands(&key, &value, b, n, h, s)?;
        let l = dims4(&k)?[2];
        let padding = key_padding(mask_index, b, l)?;
        let (out, qk) = attend(cx, &q, &k, &v, 0, &step(padding, None))?;
        let qk = finish(out.clone(), qk)?;
        return Ok(vec![out.clone(), out.clone(), out, qk]);
    };
    let Some(past_value) = past_value else {
        return Err(err("past_key and past_value must come together"));
    };

    // Self-attention over the shared buffer.
    let new_operand = |x: &Array, from: i64, what: &str| -> Result<Array> {
        match x.ndim() {
            3 => {
                if x.shape() != [b, 1, d] {
                    return Err(err(format!(
                        "{what} has shape {:?}: expected [{b}, 1, {d}]",
                        x.shape()
                    )));
                }
                split_heads(&rounded(add_bias(x, bias.as_ref(), from, s)?)?, n, what, s)
            }
            4 if x.shape() == [b, n, 1, h] && bias.is_none() => Ok(x.clone()),
            _ => Err(err(format!(
                "{what} has shape {:?}: expected [{b}, 1, {d}] (or [{b}, {n}, 1, {h}] without bias)",
                x.shape()
            ))),
        }
    };
    let k_new = new_operand(&key, d, "key")?;
    let v_new = new_operand(&value, 2 * d, "value")?;
    let m = match (past_key.shape().as_slice(), past_value.shape().as_slice()) {
        ([kb, kn, km, kh], [vb, vn, vm, vh])
            if *kb == b && *kn == n && *kh == h && [*vb, *vn, *vm, *vh] == [b, n, *km, h] =>
        {
            *km
        }
        (ks, vs) => {
            return Err(err(format!(
                "past_key {ks:?} and past_value {vs:?}: expected both [{b}, {n}, max_sequence_length, {h}]"
            )))
        }
    };
    let Some(p) = past_sequence_length else {
        return Err(err(
            "past_sequence_length is required when past_present_share_buffer is set",
        ));
    };
    if p < 0 || p >= m {
        return Err(err(format!(
            "past_sequence_length must be non-negative and less than max_sequence_length ({m}), got {p}"
        )));
    }
    let t = p + 1;
    if let Some(bias) = &attention_bias {
        check_attention_bias(bias, b, n, 1, t)?;
    }
    // Without beam_width ORT takes the beam count from cache_indirection's shape.
    let beams = match &beam_width {
        None => match &cache_indirection {
            Some(indirection) if indirection.ndim() == 3 => indirection.shape()[1],
            _ => 1,
        },
        Some(values) => *values
            .first()
            .ok_or_else(|| err("beam_width holds no value"))?,
    };

    // Present: the past with row P replaced by the new key/value, scattered into the past's
    // own buffer (B·N rows), which MLX writes in place when nothing else holds it: a buffer
    // shared with the present and fed from the EP's device mirror. Only those rows change.
    let (k_new, v_new) = (
        ops::astype(&k_new, dtype, s)?,
        ops::astype(&v_new, dtype, s)?,
    );
    let present_key = write_row(&past_key, &k_new, p, s)?;
    let present_value = write_row(&past_value, &v_new, p, s)?;
    let row_p = ops::equal(
        &ops::arange(0.0, m as f64, 1.0, Dtype::I32, s)?,
        &Array::scalar(p as i32)?,
        s,
    )?;
    cx.writes_only_rows(1, &row_p, Some(&k_new), &present_key);
    cx.writes_only_rows(2, &row_p, Some(&v_new), &present_value);
    let s = cx.stream();

    let (out, qk) = match cache_indirection {
        None => {
            if beams > 1 {
                return Err(err(
                    "If beam width is greater than 1, then cache indirection buffer MUST be present",
                ));
            }
            // The past's rows read from the present (the same rows): reading the past would
            // hold its buffer, which the write above then could not reuse.
            let k = ops::concatenate(&[rows(&present_key, p, s)?, k_new], 2, s)?;
            let v = ops::concatenate(&[rows(&present_value, p, s)?, v_new], 2, s)?;
            let padding = key_padding(mask_index, b, t)?;
            attend(cx, &q, &k, &v, p, &step(padding, attention_bias.as_ref()))?
        }
        Some(indirection) => {
            let source = beam_sources(cx, &indirection, beams, b, m, p)?;
            let s = cx.stream();
            let k = ops::concatenate(&[gather_rows(&present_key, &source, s)?, k_new], 2, s)?;
            let v = ops::concatenate(&[gather_rows(&present_value, &source, s)?, v_new], 2, s)?;
            // ORT's beam loop masks entries equal to 0 and reads a batched bias at row b / W.
            let padding = match key_padding(mask_index, b, t)? {
                Padding::Keys(mask) => Padding::Keys(ops::astype(
                    &ops::not_equal(&mask, &Array::scalar(0i32)?, s)?,
                    Dtype::I32,
                    s,
                )?),
                other => other,
            };
            let attention_bias = match attention_bias {
                Some(bias) if bias.shape()[0] != 1 && bias.shape()[1] == 1 && n > 1 => {
                    return Err(err(format!(
                        "attention_bias of shape {:?} (per batch row, broadcast over heads) with cache_indirection: ORT's beam kernel reads it at batch row · num_heads, past its end; give it as [{b}, {n}, 1, {t}] or [1, ·, 1, {t}]",
                        bias.shape()
                    )));
                }
                Some(bias) if bias.shape()[0] != 1 => {
                    let of_row = ops::floor_divide(
                        &ops::arange(0.0, b as f64, 1.0, Dtype::I32, s)?,
                        &Array::scalar(beams as i32)?,
                        s,
                    )?;
                    Some(ops::take(&bias, &of_row, 0, s)?)
                }
                other => other,
            };
            attend(cx, &q, &k, &v, p, &step(padding, attention_bias.as_ref()))?
        }
    };
    let qk = finish(out.clone(), qk)?;
    Ok(vec![out, present_key, present_value, qk])
}

/// The attributes of every step of this node.
struct Options {
    scale: f32,
    mask_filter_value: f32,
    want_scores: bool,
    out: Dtype,
}

impl Options {
    fn step<'a>(&self, padding: Padding, attention_bias: Option<&'a Array>) -> Step<'a> {
        Step {
            scale: self.scale,
            mask_filter_value: self.mask_filter_value,
            unidirectional: false,
            padding,
            attention_bias,
            want_scores: self.want_scores,
            out: self.out,
        }
    }
}

/// `buffer` `[B, N, M, H]` with row `p` of every (batch, head) replaced by `new` `[B, N, 1, H]`.
fn write_row(buffer: &Array, new: &Array, p: i64, s: &Stream) -> Result<Array> {
    let shape = buffer.shape();
    let [b, n, m, h] = <[i64; 4]>::try_from(shape.as_slice())
        .map_err(|_| err(format!("a past buffer of shape {shape:?}: expected 4-D")))?;
    let rows = ops::add(
        &ops::multiply(
            &ops::arange(0.0, (b * n) as f64, 1.0, Dtype::I32, s)?,
            &Array::scalar(m as i32)?,
            s,
        )?,
        &Array::scalar(p as i32)?,
        s,
    )?;
    let flat = ops::reshape(buffer, &[b * n * m, h], s)?;
    let written = ops::scatter_rows(
        &flat,
        &rows,
        &ops::reshape(new, &[b * n, 1, h], s)?,
        ops::ScatterMode::Set,
        s,
    )?;
    Ok(ops::reshape(&written, &shape, s)?)
}

fn err(message: impl Into<String>) -> OpError {
    OpError::new(format!("{OP}: {}", message.into()))
}

/// The first `p` rows of a `[B, N, M, H]` buffer.
fn rows(buffer: &Array, p: i64, s: &Stream) -> Result<Array> {
    let [b, n, _, h] = dims4(buffer)?;
    Ok(ops::slice(
        buffer,
        &[0, 0, 0, 0],
        &[b as i32, n as i32, p as i32, h as i32],
        &[1, 1, 1, 1],
        s,
    )?)
}

/// The 2-D key padding mask `[B, T]`, the only form ORT's kernel accepts.
fn key_padding(mask: Option<Array>, b: i64, t: i64) -> Result<Padding> {
    match mask {
        None => Ok(Padding::None),
        Some(mask) if mask.shape() == [b, t] => Ok(Padding::Keys(mask)),
        Some(mask) => Err(err(format!(
            "mask_index has shape {:?}: only the 2-D key padding mask [{b}, {t}] (batch, total_sequence_length) is supported, as in ORT",
            mask.shape()
        ))),
    }
}

/// Cross-attention keys and values as `[B, N, L, H]`: 4-D as given, 3-D `[B, L, D]` read in
/// memory order as ORT does.
fn cross_operands(
    key: &Array,
    value: &Array,
    b: i64,
    n: i64,
    h: i64,
    s: &Stream,
) -> Result<(Array, Array)> {
    let (ks, vs) = (key.shape(), value.shape());
    if ks != vs {
        return Err(err(format!(
            "key {ks:?} and value {vs:?} must have the same shape"
        )));
    }
    match ks.as_slice() {
        [kb, kn, _, kh] if *kb == b && *kn == n && *kh == h => Ok((key.clone(), value.clone())),
        [kb, l, kd] if *kb == b && *kd == n * h => {
            let as_heads = |x: &Array| ops::reshape(x, &[b, n, *l, h], s);
            Ok((as_heads(key)?, as_heads(value)?))
        }
        _ => Err(err(format!(
            "key and value have shape {ks:?}: expected [{b}, {n}, L, {h}] or [{b}, L, {}]",
            n * h
        ))),
    }
}

/// The batch row each past position of each batch row reads, `[B, P]` int32: row
/// `(b / W)·W + cache_indirection[b / W, b % W, j]`, with the indirection checked at run time.
fn beam_sources(
    cx: &mut Lower,
    indirection: &Array,
    beams: i64,
    b: i64,
    m: i64,
    p: i64,
) -> Result<Array> {
    let shape = indirection.shape();
    if shape.len() != 3 {
        return Err(err(format!(
            "Input 'cache_indirection' is expected to have 3 dimensions, got {}",
            shape.len()
        )));
    }
    if shape[1] != beams {
        return Err(err(format!(
            "Input 'beam_width' should match cache_indirection dimension 1, got {beams} and {}",
            shape[1]
        )));
    }
    if beams < 1 || shape[0] * beams != b || shape[2] != m {
        return Err(err(format!(
            "cache_indirection has shape {shape:?}: expected [{}, {beams}, {m}] (batch_size / beam_width, beam_width, max_sequence_length)",
            if beams >= 1 { b / beams } else { 0 }
        )));
    }
    let s = cx.stream();
    let past = ops::slice(
        &ops::reshape(indirection, &[b, m], s)?,
        &[0, 0],
        &[b as i32, p as i32],
        &[1, 1],
        s,
    )?;
    cx.require_in_range(
        &past,
        0,
        beams - 1,
        format!("{OP}: cache_indirection beam index out of range. Expected [0, {beams})"),
    )?;
    let s = cx.stream();
    // Clamped for the gather (a failed check fails the run anyway).
    let past = ops::minimum(
        &ops::maximum(
            &ops::astype(&past, Dtype::I32, s)?,
            &Array::scalar(0i32)?,
            s,
        )?,
        &Array::scalar((beams - 1) as i32)?,
        s,
    )?;
    let first = ops::multiply(
        &ops::floor_divide(
            &ops::arange(0.0, b as f64, 1.0, Dtype::I32, s)?,
            &Array::scalar(beams as i32)?,
            s,
        )?,
        &Array::scalar(beams as i32)?,
        s,
    )?;
    Ok(ops::add(&past, &ops::reshape(&first, &[b, 1], s)?, s)?)
}

/// `out[b, n, j] = buffer[source[b, j], n, j]` for `buffer` `[B, N, M, H]` and `source`
/// `[B, P]`: the past rows of each beam, `[B, N, P, H]`.
fn gather_rows(buffer: &Array, source: &Array, s: &Stream) -> Result<Array> {
    let [b, n, m, h] = dims4(buffer)?;
    let p = source.shape()[1];
    let flat = ops::reshape(
        &ops::transpose(buffer, &[0, 2, 1, 3], s)?,
        &[b * m, n * h],
        s,
    )?;
    let positions = ops::reshape(&ops::arange(0.0, p as f64, 1.0, Dtype::I32, s)?, &[1, p], s)?;
    let index = ops::add(
        &ops::multiply(source, &Array::scalar(m as i32)?, s)?,
        &positions,
        s,
    )?;
    let picked = ops::take(&flat, &ops::reshape(&index, &[b * p], s)?, 0, s)?;
    let picked = ops::reshape(&picked, &[b, p, n, h], s)?;
    Ok(ops::transpose(&picked, &[0, 2, 1, 3], s)?)
}

fn dmmha_claim(node: &Node) -> Verdict {
    if let Some(v) = positive_heads(node) {
        return v;
    }
    let present = |i| node.input_present(i);
    if !present(1) || !present(2) {
        return Verdict::decline(
            "no key or no value (packed QKV): ORT's CPU kernel fails reshaping it",
        );
    }
    let share = node.attr_or("past_present_share_buffer", 0i64);
    let output_qk = node.attr_or("output_qk", 0i64);
    if node.output_present(3) {
        if output_qk == 0 {
            return Verdict::decline(
                "a qk output without output_qk 1: ORT's kernel leaves it unset",
            );
        }
        if node.output_type(3) != node.input_type(0) {
            return Verdict::decline(
                "a qk output of another type than the query: ORT writes it in the query's type",
            );
        }
    }
    let self_attention = present(5) || node.output_present(1) || node.output_present(2);
    if !self_attention {
        if present(4) {
            return Verdict::decline("attention_bias in cross-attention: ORT's kernel refuses it");
        }
        if share != 0 {
            return Verdict::decline(
                "past_present_share_buffer in cross-attention: ORT's kernel fails the run",
            );
        }
        if present(6) {
            return Verdict::decline("past_value without past_key");
        }
        return Verdict::Claim;
    }
    if share != 1 {
        return Verdict::decline(
            "past/present without past_present_share_buffer 1: ORT's kernel enforces the shared buffer",
        );
    }
    if !present(5) || !present(6) {
        return Verdict::decline(
            "self-attention needs both past_key and past_value (ORT enforces it)",
        );
    }
    if !node.output_present(1) || !node.output_present(2) {
        return Verdict::decline(
            "past_key/past_value without both present outputs: ORT's kernel writes through a missing output",
        );
    }
    if !present(7) {
        return Verdict::decline("no past_sequence_length with a shared buffer: ORT refuses it");
    }
    if present(9) {
        if let Some(shape) = node.input_shape(4) {
            let heads = node.attr_or("num_heads", 0i64);
            if shape.len() == 4 && shape[0] != Some(1) && shape[1] == Some(1) && heads > 1 {
                return Verdict::decline(
                    "attention_bias [B, 1, 1, T] with cache_indirection: ORT's beam kernel reads it past its end",
                );
            }
        }
    }
    if present(10) && (node.input_rank(1) == Some(4) || node.input_rank(2) == Some(4)) {
        return Verdict::decline("a 4-D key or value with bias in self-attention");
    }
    Verdict::Claim
}
