//! MLX's fused `fast` kernels: attention, normalisation, rotary embeddings.

use std::ffi::CString;
use std::sync::OnceLock;

use super::optional;
use crate::{sys, Array, DeviceKind, Dtype, Result, Stream};

/// The attention mask of [`scaled_dot_product_attention`].
#[derive(Debug, Clone, Copy)]
pub enum AttentionMask<'a> {
    None,
    /// Query i attends to keys ≤ i (aligned to the end when there are more keys than queries).
    Causal,
    /// Additive (float) or boolean mask, broadcastable to the score matrix.
    Array(&'a Array),
}

/// `softmax(q·kᵀ·scale + mask)·v` for `[batch, heads, seq, dim]` operands (grouped-query
/// attention when `k`/`v` have fewer heads).
pub fn scaled_dot_product_attention(
    queries: &Array,
    keys: &Array,
    values: &Array,
    scale: f32,
    mask: AttentionMask<'_>,
    stream: &Stream,
) -> Result<Array> {
    let (mode, mask_array) = match mask {
        AttentionMask::None => ("", None),
        AttentionMask::Causal => ("causal", None),
        AttentionMask::Array(m) => ("array", Some(m)),
    };
    let mode = CString::new(mode).expect("static mode strings have no NUL");
    Array::from_op(|out| {
        // SAFETY: `mode` outlives the call; absent arrays are passed as empty handles, which
        // mlx-c documents as "may be null".
        unsafe {
            sys::mlx_fast_scaled_dot_product_attention(
                out,
                queries.raw(),
                keys.raw(),
                values.raw(),
                scale,
                mode.as_ptr(),
                optional(mask_array),
                optional(None),
                false,
                stream.raw(),
            )
        }
    })
}

/// The type to hand [`scaled_dot_product_attention`] `dtype` operands in so that it scores in
/// float32, as ORT's attention kernels do: `dtype` itself for float32, and for float16 and
/// bfloat16 where MLX 0.32's CUDA backend passes the call to cuDNN's flash attention (compute
/// capability 8 or later, both head sizes a multiple of 8 up to 128, more than one query row,
/// cuDNN not turned off with `MLX_CUDA_USE_CUDNN_SDPA=0`, which MLX too reads once; the masks
/// callers pass are arrays, never a causal mode with more queries than keys). Elsewhere MLX
/// composes the attention in the operands' type and would round the scores to it, so 16-bit
/// operands go in as float32. So do they beside an additive `mask` of a wider type (float32):
/// MLX refuses a mask whose type does not promote to the operands' ("Mask type must promote to
/// output type bfloat16", an H100 run).
pub fn attention_operand_dtype(
    dtype: Dtype,
    query_rows: i64,
    qk_head: i64,
    v_head: i64,
    mask: Option<Dtype>,
    stream: &Stream,
) -> Dtype {
    if matches!(mask, Some(Dtype::F32 | Dtype::F64)) {
        return Dtype::F32;
    }
    static CUDNN_OFF: OnceLock<bool> = OnceLock::new();
    let cudnn_off = *CUDNN_OFF
        .get_or_init(|| std::env::var("MLX_CUDA_USE_CUDNN_SDPA").is_ok_and(|v| v.trim() == "0"));
    let head_fits = |d: i64| d > 0 && d % 8 == 0 && d <= 128;
    let cudnn = matches!(dtype, Dtype::F16 | Dtype::BF16)
        && query_rows > 1
        && head_fits(qk_head)
        && head_fits(v_head)
        && !cudnn_off
        && stream.kind() == DeviceKind::Gpu
        && crate::cuda::compute_capability().is_some_and(|(major, _)| major >= 8);
    if dtype == Dtype::F32 || cudnn {
        dtype
    } else {
        Dtype::F32
    }
}

/// `x / sqrt(mean(x², last axis) + eps) * weight`.
pub fn rms_norm(x: &Array, weight: Option<&Array>, eps: f32, stream: &Stream) -> Result<Array> {
    Array::from_op(|out| {
        // SAFETY: all handles are live or empty ("may be null").
        unsafe { sys::mlx_fast_rms_norm(out, x.raw(), optional(weight), eps, stream.raw()) }
    })
}

/// Layer normalisation over the last axis, with optional affine weight and bias.
pub fn layer_norm(
    x: &Array,
    weight: Option<&Array>,
    bias: Option<&Array>,
    eps: f32,
    stream: &Stream,
) -> Result<Array> {
    Array::from_op(|out| {
        // SAFETY: all handles are live or empty ("may be null").
        unsafe {
            sys::mlx_fast_layer_norm(
                out,
                x.raw(),
                optional(weight),
                optional(bias),
                eps,
                stream.raw(),
            )
        }
    })
}

/// Rotary position embedding over the first `dims` features of the last axis.
pub fn rope(
    x: &Array,
    dims: i32,
    traditional: bool,
    base: f32,
    scale: f32,
    offset: i32,
    stream: &Stream,
) -> Result<Array> {
    let base = sys::mlx_optional_float {
        value: base,
        has_value: true,
    };
    Array::from_op(|out| {
        // SAFETY: all handles are live; no custom frequencies (empty handle).
        unsafe {
            sys::mlx_fast_rope(
                out,
                x.raw(),
                dims,
                traditional,
                base,
                scale,
                offset,
                optional(None),
                stream.raw(),
            )
        }
    })
}
