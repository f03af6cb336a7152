//! A few rows of activations times block-quantised 4-bit weights, in ORT's own packing: what
//! each projection of an int4 LLM runs per decode step.
//!
//! MLX's quantized matmul accumulates 16-bit activations in 16-bit partial sums (its float32
//! kernel is exact but reads float32 activations, scales and biases, and runs 1.4-1.8x
//! slower). This kernel reads the 16-bit activations and scales and ORT's packed bytes as they
//! are, and accumulates in float32: the float32 product of the dequantised weights rounded
//! once, like ORT's CPU kernel at accuracy levels 0-3 and like the float32 path.

use super::{Backend, Kernel, Launch, TemplateArg};
use crate::error::{Error, Result};
use crate::{Array, Dtype, Stream};

/// Whether this kernel runs on `stream`: MLX's CUDA backend (it has no Metal twin).
pub fn quantized_matvec_runs_on(stream: &Stream) -> bool {
    super::runs_on(stream, &[Backend::Cuda])
}

/// The most rows of activations one launch takes (a decode step has one per sequence).
pub const QUANTIZED_MATVEC_MAX_ROWS: i64 = 8;
const WARPS: i32 = 8;

/// `x · dequant(w)ᵀ` for `x` `[M, K]` (float32 or float16, M ≤
/// [`QUANTIZED_MATVEC_MAX_ROWS`]) and `w` `[N, K]` packed as MatMulNBits packs 4-bit values
/// (`packed`: `N · K / 2` uint8, two values a byte, low nibble first, no zero points: the
/// midpoint 8), `scales` `N · K / block` values of x's type (one per block of `block` values
/// along K). K must be a multiple of 32 and of `block`, `block` a multiple of 32. The result is
/// `[M, N]` in x's type.
pub fn quantized_matvec(
    x: &Array,
    packed: &Array,
    scales: &Array,
    n: i64,
    block: i64,
    stream: &Stream,
) -> Result<Array> {
    let dtype = x.dtype();
    let [m, k] = <[i64; 2]>::try_from(x.shape()).map_err(|_| {
        Error::Shape(format!(
            "quantized_matvec: x must be [M, K], got {:?}",
            x.shape()
        ))
    })?;
    let fits = (1..=QUANTIZED_MATVEC_MAX_ROWS).contains(&m)
        && n > 0
        && k > 0
        && k % 32 == 0
        && block >= 32
        && block % 32 == 0
        && k % block == 0
        && matches!(dtype, Dtype::F16 | Dtype::F32)
        && packed.dtype() == Dtype::U8
        && packed.size() as i64 == n * k / 2
        && scales.dtype() == dtype
        && scales.size() as i64 == n * (k / block);
    if !fits {
        return Err(Error::Shape(format!(
            "quantized_matvec: operands do not fit (x {:?} {dtype:?}, packed {:?} {:?}, scales {:?} {:?}, N {n}, block {block})",
            x.shape(),
            packed.shape(),
            packed.dtype(),
            scales.shape(),
            scales.dtype()
        )));
    }
    let size = |v: i64| super::size("quantized_matvec", v);
    let kernel = Kernel {
        name: "quantized_matvec_4bit",
        inputs: &["x", "packed", "scales"],
        outputs: super::OUT,
        cuda: include_str!("quantized_matvec.cu"),
        metal: None,
    };
    let out_shape = [size(m)?, size(n)?];
    kernel.apply_one(
        &[x, packed, scales],
        &Launch {
            outputs: &[(&out_shape, dtype)],
            // One warp per output column.
            blocks: size((n + WARPS as i64 - 1) / WARPS as i64)?,
            threads: WARPS * 32,
            template: &[
                ("T", TemplateArg::Type(dtype)),
                ("K", TemplateArg::Int(size(k)?)),
                ("N", TemplateArg::Int(out_shape[1])),
                ("M", TemplateArg::Int(out_shape[0])),
                ("BLOCK", TemplateArg::Int(size(block)?)),
                ("WARPS", TemplateArg::Int(WARPS)),
            ],
        },
        stream,
    )
}

#[cfg(test)]
mod emulated_tests;
