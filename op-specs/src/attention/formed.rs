//! Attention formed from its parts. Encoders exported without a graph optimizer spell attention
//! out: `MatMul(Q, Kᵀ)`, a scale (`Mul` or `Div` by a constant), an additive mask (`Add`),
//! `Softmax` over the last axis, `MatMul(P, V)`, over `[B, H, L, D]` heads or, as PyTorch's
//! `nn.MultiheadAttention` exports them, `[B·H, L, D]`. Each of those lowerings answers as usual
//! and records beside its answer what the answer is made of ([`Lower::record_form`]); the last
//! MatMul, finding the whole chain behind its left operand, answers with one call of MLX's
//! fused `scaled_dot_product_attention` instead (or, for short unmasked float32 heads on a GPU,
//! one hand-written kernel: [`in_one_kernel`]). The chain's own arrays are then left unread,
//! and MLX evaluates only what an output depends on, so they cost nothing unless another node
//! (or a graph output) reads them.
//!
//! The fused call is the same function, rounded no more often: in float32 it is the graph's
//! arithmetic reordered (where MLX has no fused kernel it composes the same ops); in float16
//! and bfloat16, MLX's GPU kernels score and normalise in float32 where the graph rounds the
//! scores to the element type twice. Where the graph's softmax row is NaN because of its mask
//! alone (a NaN or +inf in it, or every key at -inf), MLX's kernels promise nothing, so those
//! rows are set to NaN after the fused call.

use mlx_kernels::{ops, Array, Dtype};

use super::{fused_attention, in_one_kernel, AttentionMask};
use crate::{Lower, Result};

/// Recorded on `scale · q·kᵀ + mask` (a scale of 1 for the bare product, no mask until an Add).
const SCORES: &str = "attention: scaled scores";
/// Recorded on `softmax(scale · q·kᵀ + mask)` over the last axis.
const WEIGHTS: &str = "attention: weights";
/// The rewrite the plan's summary counts.
pub(crate) const FORMED: &str = "attention(s) fused from MatMul, Softmax and MatMul";

/// What scores are made of: `q` `[B, H, L, D]`, `k_t` `[B, H or 1, D, S]` (or both without
/// `B`), the scale, and an additive mask that broadcasts to the scores.
#[derive(Clone)]
struct Scores {
    q: Array,
    k_t: Array,
    scale: f32,
    mask: Option<Array>,
}

/// The dims of a stack of matrices attention reads: `[B, H, rows, columns]` or `[N, rows,
/// columns]`, not empty.
fn stacked(a: &Array) -> Option<Vec<i64>> {
    Some(a.shape()).filter(|dims| matches!(dims.len(), 3 | 4) && a.size() > 0)
}

/// Whether keys (or values) of leading dims `kv` serve queries of leading dims `q` as MLX's
/// kernel reads them: the same batch, and the same heads or one head for all (MatMul's
/// broadcast of a 1 is then MLX's grouping of every query head on key head 0; other head
/// counts do not broadcast in MatMul, and MLX would group them instead).
fn serves(kv: &[i64], q: &[i64]) -> bool {
    let heads = q.len() - 1;
    kv.len() == q.len() && kv[..heads] == q[..heads] && (kv[heads] == q[heads] || kv[heads] == 1)
}

/// MatMul's answer `y = a · b` is scores when `a` is `[B, H, L, D]` and `b` `[B, H, D, S]` (or
/// both 3-D), of one float type, `b` with `a`'s leading dims or a single head.
pub(crate) fn note_product(cx: &Lower, a: &Array, b: &Array, y: &Array) {
    let (Some(a_dims), Some(b_dims)) = (stacked(a), stacked(b)) else {
        return;
    };
    let n = a_dims.len();
    let served = b_dims.len() == n && serves(&b_dims[..n - 2], &a_dims[..n - 2]);
    if a.dtype().is_float() && served && a_dims[n - 1] == b_dims[n - 2] {
        let scores = Scores {
            q: a.clone(),
            k_t: b.clone(),
            scale: 1.0,
            mask: None,
        };
        cx.record_form(SCORES, y, scores);
    }
}

/// Mul's (or Div's, `divides`) answer `y = x · factor` (`x / factor`) is scores scaled again
/// when `x` is unmasked scores and `factor`, input `factor_index`, is a constant of one element
/// that does not raise the rank.
pub(crate) fn note_scaled(
    cx: &mut Lower,
    x: &Array,
    factor: &Array,
    factor_index: usize,
    divides: bool,
    y: &Array,
) {
    let Some(scores) = cx.form_of::<Scores>(SCORES, x).filter(|s| s.mask.is_none()) else {
        return;
    };
    if !cx.input_is_constant(factor_index) || factor.size() != 1 || factor.ndim() > x.ndim() {
        return;
    }
    // The constant as the graph multiplies by it (already rounded to a half type under
    // `precision`), read on the host once per session rather than at every eager run; a
    // read that fails only leaves the chain unformed: the node's own answer stands.
    let s = cx.stream();
    let tag = ["attention scale of input 0", "attention scale of input 1"][factor_index.min(1)];
    let read = cx.kept(tag, || {
        let values = ops::astype(factor, Dtype::F32, s)?.to_vec::<f32>(s)?;
        Ok(values.first().copied())
    });
    let Some(value) = read.ok().and_then(|value| *value) else {
        return;
    };
    let by = if divides { value.recip() } else { value };
    if by.is_finite() && by != 0.0 {
        let scale = scores.scale * by;
        cx.record_form(SCORES, y, Scores { scale, ..scores });
    }
}

/// Add's answer `y = x + mask` is masked scores when `x` is scores without a mask and `mask`
/// (of their type, not empty) broadcasts to their shape without enlarging it.
pub(crate) fn note_masked(cx: &Lower, x: &Array, mask: &Array, y: &Array) {
    let Some(scores) = cx.form_of::<Scores>(SCORES, x).filter(|s| s.mask.is_none()) else {
        return;
    };
    let shape = x.shape();
    let fits = crate::shape::broadcasts_into(&mask.shape(), &shape);
    if fits && mask.dtype() == x.dtype() && mask.size() > 0 && y.shape() == shape {
        let mask = Some(mask.clone());
        cx.record_form(SCORES, y, Scores { mask, ..scores });
    }
}

/// Softmax's answer `y` over `axis` (normalised) of `x` is attention weights when `x` is scores
/// and `axis` is the last.
pub(crate) fn note_softmax(cx: &Lower, x: &Array, axis: usize, y: &Array) {
    if axis + 1 != x.ndim() {
        return;
    }
    if let Some(scores) = cx.form_of::<Scores>(SCORES, x) {
        cx.record_form(WEIGHTS, y, scores);
    }
}

/// MatMul's `p · v` as one fused attention, when `p` is attention weights and `v` is
/// `[B, H, S, Dv]` (or 3-D, as the scores are) with the keys' leading dims, their `S` and
/// their type; `None` otherwise, and when MLX refuses to build it, for the plain product.
pub(crate) fn fused_product(cx: &mut Lower, p: &Array, v: &Array) -> Option<Array> {
    let scores = cx.form_of::<Scores>(WEIGHTS, p)?;
    let (k_dims, v_dims) = (stacked(&scores.k_t)?, stacked(v)?);
    let n = k_dims.len();
    let same_stack = v_dims.len() == n && v_dims[..n - 2] == k_dims[..n - 2];
    if !same_stack || v_dims[n - 2] != k_dims[n - 1] || v.dtype() != scores.q.dtype() {
        return None;
    }
    let fused = fused_attention_of(cx, &scores, v).ok()?;
    cx.note_rewrite(FORMED);
    Some(fused)
}

/// `softmax(scale · q·kᵀ + mask) · v`, NaN on the rows the mask alone makes NaN.
fn fused_attention_of(cx: &mut Lower, scores: &Scores, v: &Array) -> Result<Array> {
    let s = cx.stream();
    // MLX's kernel takes `[B, H, L, D]`: a 3-D stack is one batch of heads, and a 3-D mask
    // (the scores' own rank) gains that batch axis too; a smaller one broadcasts as it is.
    let flat = scores.q.ndim() == 3;
    let heads = |a: &Array| {
        if flat && a.ndim() == 3 {
            ops::expand_dims(a, &[0], s)
        } else {
            Ok(a.clone())
        }
    };
    let k_t = heads(&scores.k_t)?;
    let k = ops::transpose(&k_t, &[0, 1, 3, 2], s)?;
    let (q, v) = (heads(&scores.q)?, heads(v)?);
    // MLX's CUDA kernel for half types answers NaN throughout for a negative scale (an H200
    // run: float16, scale -1/0.7, no mask). The negated query with the scale's magnitude is
    // the same product exactly (negation is exact).
    let (q, scale) = if scores.scale < 0.0 {
        (ops::negative(&q, s)?, -scores.scale)
    } else {
        (q, scores.scale)
    };
    let Some(mask) = &scores.mask else {
        let y = match in_one_kernel(cx, &q, &k, &v, scale)? {
            Some(y) => y,
            None => fused_attention(&q, &k, &v, scale, AttentionMask::None, s)?,
        };
        return Ok(if flat { ops::squeeze(&y, &[0], s)? } else { y });
    };
    let masked = AttentionMask::Array(&heads(mask)?);
    let y = fused_attention(&q, &k, &v, scale, masked, s)?;
    let y = if flat { ops::squeeze(&y, &[0], s)? } else { y };
    let poisoned = cx.shared(POISONED, &[mask], &[], |cx| {
        poisoned_rows(mask, cx.stream())
    })?;
    let nan = ops::astype(&Array::scalar(f32::NAN)?, y.dtype(), s)?;
    Ok(ops::where_(&poisoned, &nan, &y, s)?)
}

/// Shared by every layer that reads one mask.
const POISONED: &str = "attention: rows a mask makes NaN";

/// Where `softmax(scores + mask)` is NaN whatever the scores: rows of `mask` (along its last
/// axis, kept as 1 so that it lines up with the attention's value axis) holding a NaN or +inf,
/// or -inf throughout.
fn poisoned_rows(mask: &Array, s: &mlx_kernels::Stream) -> Result<Array> {
    let mask = match mask.ndim() {
        0 => ops::reshape(mask, &[1], s)?,
        _ => mask.clone(),
    };
    let last = [mask.ndim() as i32 - 1];
    let spoils = ops::logical_or(&ops::isnan(&mask, s)?, &ops::isposinf(&mask, s)?, s)?;
    let spoilt = ops::max(&ops::astype(&spoils, Dtype::F32, s)?, &last, true, s)?;
    let spoilt = ops::greater(&spoilt, &Array::scalar(0f32)?, s)?;
    let all_out = ops::isneginf(&ops::max(&mask, &last, true, s)?, s)?;
    Ok(ops::logical_or(&spoilt, &all_out, s)?)
}
