//! ai.onnx Attention (opsets 23 and 24), as ORT 1.31.1's CPU kernel computes it.
//!
//! What ORT's kernel does, and so what this file does (each point checked against ORT 1.31.1):
//! - scores `scale·(Q·Kᵀ)` (scale `1/√head_size` unless given; applied after the product, as
//!   ORT's GEMM alpha, so a product that overflows is ±inf as there), then the soft cap
//!   `softcap·tanh(x/softcap)` when `softcap > 0`, then ORT's additive mask: a bool mask as 0 or
//!   the element type's lowest finite value, a float mask as given, the causal triangle written
//!   over it as lowest; keys at or past `nonpad_kv_seqlen[b]` are then overwritten with lowest.
//!   The mask is added, not selected: a NaN or +∞ score under a masked key still poisons its row;
//! - `is_causal` lets query `s` see keys `t ≤ past_sequence_length + s` (aligned to the start
//!   of the new keys, not to the end, when the query and new key lengths differ), and is
//!   ignored for a single query after a past; with `nonpad_kv_seqlen` the queries are the last
//!   of each batch entry's valid keys instead: `t ≤ s + nonpad_kv_seqlen[b] − Sq`;
//! - a row whose every key is masked (mask entries at lowest or −∞, or past the valid length)
//!   has zero probabilities whatever its scores, so its output is `0·V` (NaN where V holds NaN
//!   or ±∞); any other row is a max-subtracted float32 softmax: a NaN, a +∞ or only −∞ in it
//!   make it NaN, and a row at the lowest value is uniform, not zero;
//! - `qk_matmul_output_mode` 0 is the scaled scores, 1 after the soft cap, 2 after the masks,
//!   3 the probabilities; `softmax_precision` changes nothing (ORT ignores it);
//! - for 16-bit types ORT stores every stage (scores, capped, masked, probabilities) in the
//!   element type and computes each one in float32: the path rounds at those points.
//!
//!   A float mask is added to the unrounded scores (ORT folds it into the score GEMM) unless a
//!   soft cap or a pre-mask qk output comes between them;
//! - the checks of ORT's `checkParameters` (batch, sequence lengths, head sizes and head counts
//!   all positive) fail the run; on 4-D inputs `q_num_heads`/`kv_num_heads` are read as ORT's
//!   `int` (low 32 bits) and only checked against the shapes when positive.
//!
//! Nodes take the composed path (scores, masks, softmax and mix as MLX ops). MLX's fused
//! attention is not used here: it drops NaN/+∞ scores and masked keys where ORT's arithmetic
//! keeps them, and which rows that touches depends on the values, not on anything the claim or
//! the lowering can see (the fuzzer's triggers are in tests/ep/test_attention_edges.py). The
//! exception is short unmasked float32 attention on a GPU, which runs as one hand-written
//! kernel ([`in_one_kernel`]) that poisons rows as ORT does.

use mlx_kernels::{ops, Array, Dtype, Stream};

use super::{in_one_kernel, mix, scores, soft_cap};
use crate::{onnx_op, ElemType, Lower, Node, OpError, Result, Verdict};

/// The attributes of an Attention node, as ORT's kernel reads them.
struct Settings {
    causal: bool,
    q_heads: i64,
    kv_heads: i64,
    scale: Option<f32>,
    softcap: f32,
    /// `qk_matmul_output_mode`: which stage the qk_matmul_output shows.
    qk_mode: i64,
}

/// Softmax attention over Q, K, V (3-D `[batch, seq, heads·head_size]` with `q_num_heads` and
/// `kv_num_heads`, or 4-D `[batch, heads, seq, head_size]`), with a bool or additive mask,
/// causal masking, a soft cap, a past key/value cache (returned extended as present_key and
/// present_value) and the qk_matmul_output of any mode. From opset 24, `nonpad_kv_seqlen`
/// (int64 `[batch]`): keys at or past `nonpad_kv_seqlen[b]` are masked for batch entry `b` (a
/// value outside `[0, total_sequence_length]` fails the run, as in ORT).
#[onnx_op(
    op = "Attention", since = 23, types(T = FLOAT, U = BOOL | FLOAT, I = I64), ignores(softmax_precision: i64),
    inputs(Q: T, K: T, V: T, attn_mask: U, past_key: T, past_value: T, nonpad_kv_seqlen: I),
    outputs(Y: T, present_key?: T, present_value?: T, qk_matmul_output?: T),
    shape = ShapeKeyed, claim = attention_claim,
    declines = "a float attn_mask of another type than Q; scale <= 0; qk_matmul_output_mode outside 0..=3 with the qk output; only one of past_key/past_value, or a past without its present output; nonpad_kv_seqlen with a past; 3-D inputs without q_num_heads and kv_num_heads (ORT's kernel refuses or fails on each)"
)]
#[allow(clippy::too_many_arguments)] // seven inputs and six attributes, as ONNX has them
fn attention(
    cx: &mut Lower,
    q: Array,
    k: Array,
    v: Array,
    attn_mask: Option<Array>,
    past_key: Option<Array>,
    past_value: Option<Array>,
    #[input(since = 24)] nonpad_kv_seqlen: Option<Array>,
    #[attr(default = 0)] is_causal: i64,
    #[attr(default = 0)] kv_num_heads: i64,
    #[attr(default = 0)] q_num_heads: i64,
    #[attr(default = 0)] qk_matmul_output_mode: i64,
    #[attr] scale: Option<f32>,
    #[attr(default = 0.0)] softcap: f32,
) -> Result<Vec<Array>> {
    let settings = Settings {
        causal: is_causal == 1,
        q_heads: ort_int(q_num_heads),
        kv_heads: ort_int(kv_num_heads),
        scale,
        softcap,
        qk_mode: qk_matmul_output_mode,
    };
    let past = past_key.as_ref().zip(past_value.as_ref());
    attend(
        cx,
        &q,
        &k,
        &v,
        attn_mask.as_ref(),
        past,
        nonpad_kv_seqlen.as_ref(),
        &settings,
    )
}

/// An int64 attribute as ORT's kernel holds it: `static_cast<int>`, the low 32 bits.
fn ort_int(v: i64) -> i64 {
    i64::from(v as i32)
}

/// What ORT's kernel refuses when the session is built, or fails on at run time whatever the
/// values: declined, so ORT's CPU EP fails the same way.
fn attention_claim(node: &Node) -> Verdict {
    if let Some(scale) = node.attr_as::<f32>("scale") {
        if !scale.is_nan() && scale <= 0.0 {
            return Verdict::decline(format!("scale {scale}: ORT's kernel requires scale > 0"));
        }
    }
    let mode = node.attr_or("qk_matmul_output_mode", 0i64);
    if node.output_present(3) && !(0..=3).contains(&mode) {
        return Verdict::decline(format!(
            "qk_matmul_output_mode {mode}: ORT's kernel takes 0, 1, 2 or 3"
        ));
    }
    let (past_key, past_value) = (node.input_present(4), node.input_present(5));
    if past_key != past_value {
        return Verdict::decline("only one of past_key and past_value (ORT needs both or none)");
    }
    if (past_key && !node.output_present(1)) || (past_value && !node.output_present(2)) {
        return Verdict::decline(
            "a past_key/past_value without its present_key/present_value output (ORT's kernel does not support it)",
        );
    }
    if past_key && node.input_present(6) {
        return Verdict::decline(
            "nonpad_kv_seqlen with past_key/past_value (ORT refuses the pair)",
        );
    }
    if let Some(mask) = node.input_type(3) {
        if mask != ElemType::Bool && Some(mask) != node.input_type(0) {
            return Verdict::decline(format!(
                "a {mask:?} attn_mask with {:?} Q: ORT's kernel takes a bool mask or one of Q's type",
                node.input_type(0)
            ));
        }
    }
    let heads = |name| ort_int(node.attr_or(name, 0i64)) > 0;
    if node.input_rank(0) == Some(3) && !(heads("q_num_heads") && heads("kv_num_heads")) {
        return Verdict::decline(
            "3-D inputs without positive q_num_heads and kv_num_heads (ORT cannot split the heads)",
        );
    }
    Verdict::Claim
}

fn err(message: String) -> OpError {
    OpError::new(format!("Attention: {message}"))
}

/// `[B, S, heads·size]` → `[B, heads, S, size]`.
fn split_heads(x: &Array, heads: i64, what: &str, s: &Stream) -> Result<Array> {
    let shape = x.shape();
    if heads <= 0 || shape[2] % heads != 0 {
        return Err(err(format!(
            "{what} has shape {shape:?}: its last axis must split into {heads} heads (set q_num_heads and kv_num_heads for 3-D inputs)"
        )));
    }
    let split = ops::reshape(x, &[shape[0], shape[1], heads, shape[2] / heads], s)?;
    Ok(ops::transpose(&split, &[0, 2, 1, 3], s)?)
}

fn dims4(a: &Array) -> Result<[i64; 4]> {
    <[i64; 4]>::try_from(a.shape())
        .map_err(|shape| err(format!("an operand has shape {shape:?}, not 4-D")))
}

/// The element type's lowest finite value, which ORT writes into masked scores.
fn lowest(dtype: Dtype) -> f32 {
    match dtype {
        Dtype::F16 => -65504.0,
        Dtype::BF16 => f32::from_bits(0xff7f_0000),
        _ => f32::MIN,
    }
}

/// Keep-mask of causal attention: key `t` visible from query `s` when `t ≤ s + offset`, where
/// `offset` is the past length (`[1, 1, Sq, T]`), or with `nonpad_kv_seqlen` each batch entry's
/// valid key count minus `Sq` (`[B, 1, Sq, T]`: the queries are the last of the valid keys).
fn causal_keep(
    sq: i64,
    total: i64,
    past: i64,
    lengths: Option<&Array>,
    s: &Stream,
) -> Result<Array> {
    let rows = ops::reshape(
        &ops::arange(0.0, sq as f64, 1.0, Dtype::I64, s)?,
        &[1, 1, sq, 1],
        s,
    )?;
    let cols = ops::reshape(
        &ops::arange(0.0, total as f64, 1.0, Dtype::I64, s)?,
        &[1, 1, 1, total],
        s,
    )?;
    let offset = match lengths {
        Some(lengths) => {
            let b = lengths.shape().first().copied().unwrap_or(1);
            let lengths = ops::reshape(&ops::astype(lengths, Dtype::I64, s)?, &[b, 1, 1, 1], s)?;
            ops::subtract(
                &lengths,
                &crate::table::consts::scalar(sq as f64, Dtype::I64, s)?,
                s,
            )?
        }
        None => crate::table::consts::scalar(past as f64, Dtype::I64, s)?,
    };
    Ok(ops::less_equal(&cols, &ops::add(&rows, &offset, s)?, s)?)
}

/// The mask as `[B or 1, Hq or 1, Sq, T]`, checked as ORT checks it.
fn mask_4d(mask: &Array, b: i64, hq: i64, sq: i64, total: i64, s: &Stream) -> Result<Array> {
    let shape = mask.shape();
    let rank = shape.len();
    let fits = (2..=4).contains(&rank)
        && shape[rank - 1] == total
        && shape[rank - 2] == sq
        && (rank < 3 || shape[rank - 3] == 1 || shape[rank - 3] == hq)
        && (rank < 4 || shape[0] == 1 || shape[0] == b);
    if !fits {
        return Err(err(format!(
            "attn_mask has shape {shape:?}: it must be [q_sequence_length={sq}, total_sequence_length={total}] with optional leading [batch={b} or 1, q_num_heads={hq} or 1]"
        )));
    }
    let mut full = vec![1i64; 4 - rank];
    full.extend(&shape);
    Ok(ops::reshape(mask, &full, s)?)
}

/// `x` rounded to `dtype` and widened back to float32: where ORT stores a stage in the element
/// type, so do we.
fn stored(x: &Array, dtype: Dtype, s: &Stream) -> Result<Array> {
    if dtype == Dtype::F32 {
        return Ok(x.clone());
    }
    Ok(ops::astype(&ops::astype(x, dtype, s)?, Dtype::F32, s)?)
}

#[allow(clippy::too_many_arguments)] // the node's inputs and settings
fn attend(
    cx: &mut Lower,
    q: &Array,
    k: &Array,
    v: &Array,
    mask: Option<&Array>,
    past: Option<(&Array, &Array)>,
    nonpad: Option<&Array>,
    a: &Settings,
) -> Result<Vec<Array>> {
    let s = cx.stream();
    let dtype = q.dtype();
    let rank = q.ndim();
    if !(rank == 3 || rank == 4) || k.ndim() != rank || v.ndim() != rank {
        return Err(err(format!(
            "Q, K and V have shapes {:?}, {:?}, {:?}: they must all be 3-D or all 4-D",
            q.shape(),
            k.shape(),
            v.shape()
        )));
    }
    let (q4, k4, v4) = if rank == 4 {
        // ORT takes 4-D head counts from the shapes; a positive q_num_heads/kv_num_heads (after
        // its 32-bit truncation) must agree with them, zero or negative ones are ignored.
        let (hq, hkv) = (q.shape()[1], k.shape()[1]);
        if (a.q_heads > 0 && a.q_heads != hq)
            || (a.kv_heads > 0 && (a.kv_heads != hkv || a.kv_heads != v.shape()[1]))
        {
            return Err(err(format!(
                "q_num_heads {} / kv_num_heads {} differ from Q's {hq} / K's {hkv} heads (ORT's kernel fails on it too)",
                a.q_heads, a.kv_heads
            )));
        }
        (q.clone(), k.clone(), v.clone())
    } else {
        (
            split_heads(q, a.q_heads, "Q", s)?,
            split_heads(k, a.kv_heads, "K", s)?,
            split_heads(v, a.kv_heads, "V", s)?,
        )
    };
    let [b, hq, sq, d] = dims4(&q4)?;
    let [kb, hkv, kv_len, kd] = dims4(&k4)?;
    let [vb, vh, v_len, _] = dims4(&v4)?;
    if kb != b || vb != b || kd != d || vh != hkv || v_len != kv_len {
        return Err(err(format!(
            "Q {:?}, K {:?} and V {:?} disagree on batch, heads, head_size or sequence length",
            q.shape(),
            k.shape(),
            v.shape()
        )));
    }
    let dv = v4.shape()[3];
    // ORT's checkParameters: each of these fails the run there.
    for (what, size) in [
        ("the batch size", b),
        ("the query sequence length", sq),
        ("the key/value sequence length", kv_len),
        ("the head size", d),
        ("the value head size", dv),
        ("the query head count", hq),
        ("the key/value head count", hkv),
    ] {
        if size <= 0 {
            return Err(err(format!(
                "{what} is {size}: ORT's kernel requires it to be greater than 0"
            )));
        }
    }
    let (keys, values, past_len) = match past {
        Some((pk, pv)) => {
            let p = pk.shape().get(2).copied().unwrap_or(-1);
            if pk.shape() != [b, hkv, p, d] || pv.shape() != [b, hkv, p, dv] {
                return Err(err(format!(
                    "past_key {:?} / past_value {:?} must be [batch={b}, kv_num_heads={hkv}, past_sequence_length, head_size={d} / v_head_size={dv}]",
                    pk.shape(),
                    pv.shape()
                )));
            }
            (
                ops::concatenate(&[pk.clone(), k4.clone()], 2, s)?,
                ops::concatenate(&[pv.clone(), v4.clone()], 2, s)?,
                p,
            )
        }
        None => (k4.clone(), v4.clone(), 0),
    };
    let total = past_len + kv_len;
    let scale = a
        .scale
        .filter(|x| !x.is_nan())
        .unwrap_or((1.0 / (d as f64).sqrt()) as f32);

    let mask = mask.map(|m| mask_4d(m, b, hq, sq, total, s)).transpose()?;
    let (bool_mask, float_mask) = match mask {
        Some(m) if m.dtype() == Dtype::Bool => (Some(m), None),
        Some(m) => (None, Some(m)),
        None => (None, None),
    };
    let causal = a.causal && !(sq == 1 && past_len > 0);
    let nonpad_keep = match nonpad {
        Some(lengths) => {
            if lengths.shape() != [b] {
                return Err(err(format!(
                    "nonpad_kv_seqlen has shape {:?}: it must be [batch={b}]",
                    lengths.shape()
                )));
            }
            cx.require_in_range(
                lengths,
                0,
                total,
                format!("nonpad_kv_seqlen is out of range: each value must lie in [0, {total}]"),
            )?;
            let cols = ops::arange(0.0, total as f64, 1.0, Dtype::I64, s)?;
            let lengths = ops::reshape(lengths, &[b, 1, 1, 1], s)?;
            Some(ops::less(
                &ops::reshape(&cols, &[1, 1, 1, total], s)?,
                &lengths,
                s,
            )?)
        }
        None => None,
    };

    let want_qk = cx.node().output_present(3);
    // Nothing masked or capped, and only the output asked for: short float32 heads run as one
    // hand-written kernel on a GPU, the same float32 arithmetic (`scale·(q·k)`, a
    // max-subtracted softmax whose row a NaN, a +∞ or only −∞ poisons).
    let unmasked = bool_mask.is_none() && float_mask.is_none() && !causal && nonpad.is_none();
    if unmasked && a.softcap <= 0.0 && !want_qk {
        if let Some(y) = in_one_kernel(cx, &q4, &keys, &values, scale)? {
            return Ok(vec![merge_heads(&y, rank, s)?, keys, values]);
        }
    }
    let mode = a.qk_mode;
    let fill = lowest(dtype);
    let fill_array = Array::scalar(fill)?;
    let zero = Array::scalar(0f32)?;

    // ORT's additive mask (its `mask_data`, in the element type): a bool mask as 0 / lowest,
    // a float mask as given, and the causal triangle overlaid as lowest.
    let mut additive = match (&bool_mask, &float_mask) {
        (Some(m), _) => Some(ops::where_(m, &zero, &fill_array, s)?),
        (_, Some(m)) => Some(stored(&ops::astype(m, Dtype::F32, s)?, dtype, s)?),
        _ => None,
    };
    if causal {
        let keep = causal_keep(sq, total, past_len, nonpad, s)?;
        additive = Some(match additive {
            Some(m) => ops::where_(&keep, &m, &fill_array, s)?,
            None => ops::where_(&keep, &zero, &fill_array, s)?,
        });
    }
    // A row every key of which is masked (by the mask's lowest or −∞ entries, or past
    // nonpad_kv_seqlen) gets zero probabilities, whatever its scores (NaN included); any other
    // row is a plain max-subtracted float32 softmax: a NaN, a +∞ or only −∞ in it gives NaN.
    let mut hidden: Option<Array> = additive
        .as_ref()
        .map(|m| ops::less_equal(m, &fill_array, s))
        .transpose()?;
    if let Some(n) = &nonpad_keep {
        let past_end = ops::logical_not(n, s)?;
        hidden = Some(match hidden {
            Some(h) => ops::logical_or(&h, &past_end, s)?,
            None => past_end,
        });
    }

    // ORT scales after the product (GEMM alpha): `scale·(q·k)`, which overflows where
    // `(scale·q)·k` may not.
    let exact = ops::multiply(&scores(&q4, &keys, 1.0, s)?, &Array::scalar(scale)?, s)?;
    let raw = stored(&exact, dtype, s)?;
    let mut sc = raw.clone();
    if a.softcap > 0.0 {
        sc = stored(&soft_cap(&sc, a.softcap, s)?, dtype, s)?;
    }
    let capped = sc.clone();
    if let Some(m) = &additive {
        // ORT folds the mask into the score GEMM (one rounding of `scores + mask`) unless a
        // soft cap or a pre-mask qk output sits between them.
        let folded = a.softcap <= 0.0 && !(want_qk && mode <= 1);
        let base = if folded { &exact } else { &sc };
        sc = stored(&ops::add(base, m, s)?, dtype, s)?;
    }
    if let Some(n) = &nonpad_keep {
        sc = ops::where_(n, &sc, &fill_array, s)?; // written over, not added
    }
    let probs = ops::softmax(&sc, -1, true, s)?;
    let probs = match &hidden {
        Some(h) => {
            let all_hidden = ops::min(&ops::astype(h, Dtype::F32, s)?, &[-1], true, s)?;
            let dead = ops::greater(&all_hidden, &zero, s)?;
            ops::where_(&dead, &zero, &probs, s)?
        }
        None => probs,
    };
    let probs = stored(&probs, dtype, s)?;
    let y = mix(&probs, &values, dtype, s)?;
    let mut outputs = vec![merge_heads(&y, rank, s)?, keys, values];
    if want_qk {
        let qk = match mode {
            0 => raw,
            1 => capped,
            2 => sc,
            _ => probs,
        };
        outputs.push(ops::astype(&qk, dtype, s)?);
    }
    Ok(outputs)
}

/// `[B, H, S, Dv]` back to the input layout: unchanged for 4-D, `[B, S, H·Dv]` for 3-D.
fn merge_heads(y: &Array, rank: usize, s: &Stream) -> Result<Array> {
    if rank == 4 {
        return Ok(y.clone());
    }
    let [b, h, sq, dv] = dims4(y)?;
    let moved = ops::transpose(y, &[0, 2, 1, 3], s)?;
    Ok(ops::reshape(&moved, &[b, sq, h * dv], s)?)
}

#[cfg(test)]
mod tests {
    use crate::table::testing::claimed;
    use crate::{AttrValue, Decision, ElemType, Node};

    fn attention(opset: i64) -> Node {
        Node::new("Attention", opset)
            .input(ElemType::Float)
            .input(ElemType::Float)
            .input(ElemType::Float)
            .output(ElemType::Float)
    }

    #[test]
    fn softmax_precision_is_accepted_and_the_qk_mode_checked() {
        let precision = |opset| attention(opset).attr("softmax_precision", AttrValue::Int(1));
        assert!(claimed(&precision(23)));
        assert!(claimed(&precision(24)));
        let nonpad = attention(24)
            .absent_input()
            .absent_input()
            .absent_input()
            .input(ElemType::Int64);
        assert!(claimed(&nonpad));
        let mode = |m| {
            attention(23)
                .attr("qk_matmul_output_mode", AttrValue::Int(m))
                .output(ElemType::Float)
                .output(ElemType::Float)
                .output(ElemType::Float)
        };
        assert!(claimed(&mode(3)));
        assert!(!claimed(&mode(4)));
    }

    #[test]
    fn nonpad_kv_seqlen_is_new_in_opset_24() {
        let nonpad = |opset| {
            attention(opset)
                .absent_input()
                .absent_input()
                .absent_input()
                .input(ElemType::Int64)
        };
        assert!(claimed(&nonpad(24)));
        match crate::decide(&nonpad(23)) {
            Decision::Decline { reason } => {
                assert!(
                    reason.contains("does not exist in Attention-23"),
                    "{reason}"
                )
            }
            Decision::Claim { .. } => panic!("claimed"),
        }
    }
}
