//! com.microsoft Attention (BERT/GPT-2 style: one input projected to Q, K and V by fused
//! weights), as ORT 1.31.1's CPU kernel computes it. The projection is `input · weights + bias`
//! in float32; the attention step is MultiHeadAttention's (`mha.rs`), with the same float32
//! scores, additive masks and causal rule.

use mlx_kernels::{ops, Array, Dtype};

use super::mha::{attend, check_attention_bias, positive_heads, split_heads, Padding, Step};
use crate::{onnx_op, Lower, Node, OpError, Result, Verdict};

/// Self-attention of `input` `[B, S, D_i]` projected by `weights` `[D_i, D_q + D_k + D_v]` and
/// `bias` (sizes from `qkv_hidden_sizes`, else three equal thirds), with `mask_index` (`[B]` end
/// positions, `[2B]` end and start positions, `[B, T]` or `[B, S, T]` with positive entries
/// kept; `[B or 1, 1]` means no mask), `past` `[2, B, N, P, H]` giving `present`
/// `[2, B, N, P + S, H]`, additive `attention_bias`, `unidirectional`, `scale` and
/// `mask_filter_value`.
#[allow(clippy::too_many_arguments)] // seven inputs and eight attributes, as ORT has them
#[onnx_op(
    domain = "com.microsoft", op = "Attention", since = 1, types(T = F32 | F16, M = I32),
    inputs(input: T, weights: T, bias: T, mask_index: M, past: T, attention_bias: T,
           past_sequence_length: M),
    outputs(output: T, present?: T), shape = ShapeKeyed, claim = attention_claim,
    // Declined unless off, see the claim.
    ignores(do_rotary: i64, rotary_embedding_dim: i64, past_present_share_buffer: i64),
    declines = "no bias (ORT's CPU kernel crashes without one); do_rotary (ORT's CPU kernel refuses it); past_present_share_buffer; a 4-D (Megatron) mask_index (not implemented by ORT's CPU kernel); past together with attention_bias, or past without the present output (ORT refuses both); qkv_hidden_sizes that ORT refuses (not 3 multiples of num_heads, or Q and K sizes that differ), or with K and V sizes that differ when past or present is used; num_heads < 1; num_heads or rotary_embedding_dim beyond 32 bits (ORT's narrowing_error)"
)]
fn attention(
    cx: &mut Lower,
    input: Array,
    weights: Array,
    bias: Option<Array>,
    mask_index: Option<Array>,
    past: Option<Array>,
    attention_bias: Option<Array>,
    // Only the shared-buffer path (declined) reads it.
    _past_sequence_length: Option<Array>,
    #[attr] num_heads: i64,
    #[attr] qkv_hidden_sizes: Option<Vec<i64>>,
    #[attr(default = 0)] unidirectional: i64,
    #[attr(default = 0.0)] scale: f32,
    #[attr(default = -10000.0)] mask_filter_value: f32,
) -> Result<Vec<Array>> {
    let s = cx.stream();
    let Some(bias) = bias else {
        return Err(OpError::new(
            "Attention needs its bias input on ORT's CPU EP",
        ));
    };
    let n = num_heads;
    let shape = input.shape();
    let [b, sq, di] = <[i64; 3]>::try_from(shape.clone()).map_err(|_| {
        OpError::new(format!(
            "input has shape {shape:?}: expected [batch, sequence, input_hidden]"
        ))
    })?;
    let ws = weights.shape();
    if ws.len() != 2 || ws[0] != di || bias.shape() != [ws[1]] {
        return Err(OpError::new(format!(
            "weights {ws:?} and bias {:?} do not fit input {shape:?}: expected [{di}, D] and [D]",
            bias.shape()
        )));
    }
    let [dq, dk, dv] = match qkv_hidden_sizes.as_deref() {
        Some(&[q, k, v]) => [q, k, v],
        _ => [ws[1] / 3; 3],
    };
    if dq + dk + dv != ws[1] || dq % n != 0 || dv % n != 0 {
        return Err(OpError::new(format!(
            "hidden sizes {dq}, {dk}, {dv} do not split weights {ws:?} into {n} heads"
        )));
    }
    // gemm(B·S, D) = input · weights + bias, in float32.
    let wide = |a: &Array| ops::astype(a, Dtype::F32, s);
    let qkv = ops::add(
        &ops::matmul(&wide(&input)?, &wide(&weights)?, s)?,
        &wide(&bias)?,
        s,
    )?;
    let parts = ops::split_at(&qkv, &[dq as i32, (dq + dk) as i32], 2, s)?;
    let q = split_heads(&parts[0], n, "Q", s)?;
    let mut k = split_heads(&parts[1], n, "K", s)?;
    let mut v = split_heads(&parts[2], n, "V", s)?;
    let h = dk / n;
    let mut p = 0;
    if let Some(past) = &past {
        let ps = past.shape();
        if ps.len() != 5 || ps[0] != 2 || ps[1] != b || ps[2] != n || ps[4] != h {
            return Err(OpError::new(format!(
                "past has shape {ps:?}: expected [2, {b}, {n}, P, {h}]"
            )));
        }
        p = ps[3];
        let halves = ops::split_at(&wide(past)?, &[1], 0, s)?;
        k = ops::concatenate(&[ops::squeeze(&halves[0], &[0], s)?, k], 2, s)?;
        v = ops::concatenate(&[ops::squeeze(&halves[1], &[0], s)?, v], 2, s)?;
    }
    let t = p + sq;
    let padding = match mask_index {
        None => Padding::None,
        Some(mask) => {
            let ms = mask.shape();
            match ms.as_slice() {
                [len] if *len == b => {
                    require_ends(cx, &mask)?;
                    Padding::End(mask)
                }
                [len] if *len == 2 * b => {
                    let halves = ops::split_at(&mask, &[b as i32], 0, s)?;
                    require_ends(cx, &halves[0])?;
                    Padding::EndStart(halves[0].clone(), halves[1].clone())
                }
                // The GPU kernels' 3B+2 layout (ends, starts, then sequence offsets): ORT's CPU
                // kernel reads its first B values as the ends and nothing else.
                [len] if *len == 3 * b + 2 => {
                    let ends = ops::split_at(&mask, &[b as i32], 0, s)?.swap_remove(0);
                    require_ends(cx, &ends)?;
                    Padding::End(ends)
                }
                [mb, mt] if *mb == b && *mt == t => Padding::Keys(mask),
                // A mask broadcast from one column is the same for every key: no mask.
                [mb, 1] if *mb == b || *mb == 1 => Padding::None,
                [mb, ms_, mt] if *mb == b && *ms_ == sq && *mt == t => Padding::Positions(mask),
                [_, _, _, _] => {
                    return Err(OpError::new(
                        "4D mask in attention cpu kernel is not supported (as on ORT's CPU EP)",
                    ))
                }
                _ => {
                    return Err(OpError::new(format!(
                        "mask_index has shape {ms:?}: expected [{b}], [{}], [{}], [{b}, {t}], [{b}, 1] or [{b}, {sq}, {t}]",
                        2 * b,
                        3 * b + 2
                    )))
                }
            }
        }
    };
    if let Some(bias) = &attention_bias {
        check_attention_bias(bias, b, n, sq, t)?;
    }
    let dtype = input.dtype();
    let step = Step {
        scale,
        mask_filter_value,
        unidirectional: unidirectional == 1,
        padding,
        attention_bias: attention_bias.as_ref(),
        want_scores: false,
        out: dtype,
    };
    let (out, _) = attend(cx, &q, &k, &v, p, &step)?;
    if !cx.node().output_present(1) {
        return Ok(vec![out]);
    }
    let present = ops::stack(&[k, v], 0, s)?;
    Ok(vec![out, ops::astype(&present, dtype, s)?])
}

fn attention_claim(node: &Node) -> Verdict {
    if let Some(v) = positive_heads(node) {
        return v;
    }
    let int = |name| node.attr_or(name, 0i64);
    for name in ["num_heads", "rotary_embedding_dim"] {
        if i32::try_from(int(name)).is_err() {
            return Verdict::decline(format!(
                "{name} {} does not fit ORT's int (its kernel fails with narrowing_error)",
                int(name)
            ));
        }
    }
    if !node.input_present(2) {
        return Verdict::decline("no bias: ORT's CPU kernel needs one (it crashes without)");
    }
    if int("do_rotary") != 0 {
        return Verdict::decline("do_rotary: ORT's CPU kernel refuses rotary embedding");
    }
    if int("past_present_share_buffer") != 0 {
        return Verdict::decline("past_present_share_buffer (the shared-buffer decoding path)");
    }
    if node.input_rank(3) == Some(4) {
        return Verdict::decline(
            "a 4-D (Megatron) mask_index: ORT's CPU kernel does not implement it",
        );
    }
    let past = node.input_present(4);
    if past && node.input_present(5) {
        return Verdict::decline("past together with attention_bias: ORT refuses both");
    }
    if past && !node.output_present(1) {
        return Verdict::decline("past without the present output: ORT refuses it");
    }
    let heads = node.attr_or("num_heads", 1i64);
    if let Some(sizes) = node.attr_as::<Vec<i64>>("qkv_hidden_sizes") {
        if sizes.len() != 3 || sizes.iter().any(|&d| d < 0 || d % heads != 0) {
            return Verdict::decline(format!(
                "qkv_hidden_sizes {sizes:?}: ORT needs three multiples of num_heads"
            ));
        }
        if sizes[0] != sizes[1] {
            return Verdict::decline(format!(
                "qkv_hidden_sizes {sizes:?}: ORT needs equal Q and K sizes"
            ));
        }
        if sizes[1] != sizes[2] && (past || node.output_present(1)) {
            return Verdict::decline(format!(
                "qkv_hidden_sizes {sizes:?} with past or present: ORT's kernel needs equal K and V sizes there"
            ));
        }
    }
    Verdict::Claim
}

/// ORT's CPU kernel refuses a negative end position in a 1-D mask_index (the first `batch`
/// values) at run time: so does the EP.
fn require_ends(cx: &mut Lower, ends: &Array) -> Result<()> {
    cx.require_in_range(
        ends,
        0,
        i64::from(i32::MAX),
        "Attention: a mask_index end position is negative: mask_index end_position values must be non-negative (as ORT's CPU kernel requires)",
    )
}
