//! Attention for few query rows over a long, partly used KV buffer: what a decode step runs.
//!
//! MLX's own fused attention on CUDA takes no array mask (it falls back to a composed
//! matmul/softmax/matmul over every key), so a step over a shared KV buffer of `P` rows paid
//! for all of them, widened to float32. This kernel reads only each row's visible keys
//! `[lo, hi)` straight from the 16- or 32-bit buffer and scores, normalises and mixes in
//! float32, rounding once to the element type. Each thread scores a whole key, so a pass of
//! 512 keys costs a few memory round trips (see the source).

use super::{CudaKernel, Launch, TemplateArg};
use crate::error::{Error, Result};
use crate::{ops, Array, Dtype, Stream};

const MAX_HEAD: i64 = 256;
const WARPS: i32 = 16;

/// Whether the kernel takes heads of `head` elements of `dtype`: float16 or float32, at most
/// 256 elements, a row a whole number of 16-byte chunks.
pub fn decode_attention_takes(head: i64, dtype: Dtype) -> bool {
    matches!(dtype, Dtype::F16 | Dtype::F32)
        && (1..=MAX_HEAD).contains(&head)
        && head * dtype.size_in_bytes() as i64 % 16 == 0
}

/// `softmax(scale · q · kᵀ) · v` for each query row over keys `lo[b, s] ≤ j < hi[b, s]` only:
/// `q` `[B, Hq, S, D]`, `keys`/`values` `[B, Hkv, P, D]` (Hq a multiple of Hkv: query head `h`
/// reads key head `h / (Hq / Hkv)`), `lo`/`hi` int32 `[B, S]` (clipped to `[0, P]`); no dimension may be 0. Scores,
/// softmax and mixing in float32; a row with no visible key gives zeros; a +inf score, or only
/// -inf scores, give NaN (as a max-subtracted softmax does).
pub fn decode_attention(
    q: &Array,
    keys: &Array,
    values: &Array,
    lo: &Array,
    hi: &Array,
    scale: f32,
    stream: &Stream,
) -> Result<Array> {
    let shape = |a: &Array| -> Result<[i64; 4]> {
        <[i64; 4]>::try_from(a.shape()).map_err(|_| {
            Error::Shape(format!(
                "decode_attention: a 4-D operand expected, got {:?}",
                a.shape()
            ))
        })
    };
    let [b, hq, s, d] = shape(q)?;
    let [kb, hkv, p, kd] = shape(keys)?;
    let dtype = q.dtype();
    let fits = b * hq * s > 0
        && kb == b
        && kd == d
        && values.shape() == keys.shape()
        && hkv > 0
        && hq % hkv == 0
        && decode_attention_takes(d, dtype)
        && keys.dtype() == dtype
        && values.dtype() == dtype
        && lo.shape() == [b, s]
        && hi.shape() == [b, s]
        && lo.dtype() == Dtype::I32
        && hi.dtype() == Dtype::I32;
    if !fits {
        return Err(Error::Shape(format!(
            "decode_attention: operands do not fit (q {:?} {dtype:?}, keys {:?}, values {:?}, lo {:?}, hi {:?})",
            q.shape(),
            keys.shape(),
            values.shape(),
            lo.shape(),
            hi.shape()
        )));
    }
    let size = |v: i64| super::size("decode_attention", v);
    let out_shape = [size(b)?, size(hq)?, size(s)?, size(d)?];
    let kernel = CudaKernel::new(
        "decode_attention",
        &["q", "keys", "values", "lo", "hi", "scale"],
        &["out"],
        include_str!("decode_attention.cu"),
    )?;
    let scale = ops::reshape(&Array::scalar(scale)?, &[1], stream)?;
    kernel.apply(
        &[q, keys, values, lo, hi, &scale],
        &Launch {
            output: (&out_shape, dtype),
            blocks: size(b * hq * s)?,
            threads: WARPS * 32,
            template: &[
                ("T", TemplateArg::Type(dtype)),
                ("D", TemplateArg::Int(out_shape[3])),
                ("HQ", TemplateArg::Int(out_shape[1])),
                ("HKV", TemplateArg::Int(size(hkv)?)),
                ("S", TemplateArg::Int(out_shape[2])),
                ("P", TemplateArg::Int(size(p)?)),
                ("WARPS", TemplateArg::Int(WARPS)),
            ],
        },
        stream,
    )
}
