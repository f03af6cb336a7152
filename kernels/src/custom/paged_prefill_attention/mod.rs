//! Attention of many packed tokens over a paged KV cache: what a (chunked) prefill runs.
//!
//! The composed path gathers every sequence's blocks into one contiguous copy and attends all
//! tokens against all sequences with a mask, `T · B · L` scores in float32. This kernel reads
//! the keys and values straight from the pools through each sequence's block-table row and
//! keeps an online softmax per row, so memory stays at the output's size; a tile of keys is
//! read once for the up to 16 tokens of one sequence that a block serves (see the source).

use super::{Backend, Kernel, Launch, TemplateArg};
use crate::error::{Error, Result};
use crate::{Array, Dtype, Stream};

const WARPS: i32 = 4;

/// Whether this kernel runs on `stream`: MLX's CUDA backend, or Metal through its twin once
/// the stream's `KernelChoice::metal_twins` is on.
pub fn paged_prefill_attention_runs_on(stream: &Stream) -> bool {
    super::runs_on(stream, &[Backend::Cuda, Backend::Metal])
}
/// Tokens a block serves: 4 rows per warp (`RPW` in the source).
const TOKENS_PER_BLOCK: i64 = WARPS as i64 * 4;
/// The bytes of one head the tiles are sized for. A block's tiles (16 query rows, 32 keys and
/// 32 values) of heads of 512 bytes take 43 KiB, under CUDA's 48 KiB of static shared memory;
/// Apple GPUs give a threadgroup 32 KiB, so there heads of 256 bytes.
const MAX_HEAD_BYTES: i64 = if cfg!(target_os = "macos") { 256 } else { 512 };

/// Whether the kernel takes heads of `head` elements of `dtype`: float16, bfloat16 or float32,
/// a multiple of 8 elements of at most 512 bytes (256 elements of a half type, 128 of float32;
/// half that on macOS, where the GPU is Metal's).
pub fn paged_prefill_attention_takes(head: i64, dtype: Dtype) -> bool {
    let element = match dtype {
        Dtype::F16 | Dtype::BF16 => 2,
        Dtype::F32 => 4,
        _ => return false,
    };
    head > 0 && head % 8 == 0 && head * element <= MAX_HEAD_BYTES
}

/// `softmax(scale · q · kᵀ) · v` for each packed token `t` over keys `lo[t] ≤ j < hi[t]` of its
/// sequence `sequence[t]`: `q` `[T, Hq, D]`; `key_pool`/`value_pool` `[NB, BS, Hkv, D]` (Hq a
/// multiple of Hkv); key `j` of sequence `b` is row `j % BS` of block `table[b, j / BS]`
/// (`table` int32 `[B, M]`; ids outside `[0, NB)` read a block at the edge: the caller checks
/// them); `sequence`, `lo`, `hi` int32 `[T]`, `lo`/`hi` clipped to `[0, M·BS]`. Tokens of one
/// sequence must be adjacent (packed order) for the tiles to share keys; any order is correct.
/// A row with no visible key gives zeros; a +inf score, or only -inf scores, give NaN.
#[allow(clippy::too_many_arguments)] // the attention's operands
pub fn paged_prefill_attention(
    q: &Array,
    key_pool: &Array,
    value_pool: &Array,
    table: &Array,
    sequence: &Array,
    lo: &Array,
    hi: &Array,
    scale: f32,
    stream: &Stream,
) -> Result<Array> {
    let dims = |a: &Array| a.shape();
    let (qs, pool, ts) = (dims(q), dims(key_pool), dims(table));
    let dtype = q.dtype();
    let fits = qs.len() == 3
        && pool.len() == 4
        && ts.len() == 2
        && qs[0] > 0
        && qs[1] > 0
        && pool.iter().all(|&n| n > 0)
        && ts[0] > 0
        && ts[1] > 0
        && pool[3] == qs[2]
        && qs[1] % pool[2] == 0
        && paged_prefill_attention_takes(qs[2], dtype)
        && key_pool.dtype() == dtype
        && value_pool.dtype() == dtype
        && value_pool.shape() == pool
        && table.dtype() == Dtype::I32
        && [sequence, lo, hi]
            .iter()
            .all(|a| a.shape() == [qs[0]] && a.dtype() == Dtype::I32);
    if !fits {
        return Err(Error::Shape(format!(
            "paged_prefill_attention: operands do not fit (q {qs:?} {dtype:?}, pools {pool:?} {:?}/{:?}, table {ts:?} {:?}, sequence {:?}, lo {:?}, hi {:?})",
            key_pool.dtype(),
            value_pool.dtype(),
            table.dtype(),
            sequence.shape(),
            lo.shape(),
            hi.shape()
        )));
    }
    let size = |v: i64| super::size("paged_prefill_attention", v);
    // A sequence's keys are numbered in int32 (`ROWS`).
    size(ts[1].saturating_mul(pool[1]))?;
    let (tokens, heads, d) = (qs[0], qs[1], qs[2]);
    let mut template = vec![
        ("T", TemplateArg::Type(dtype)),
        ("TOKENS", TemplateArg::Int(size(tokens)?)),
        ("B", TemplateArg::Int(size(ts[0])?)),
        ("D", TemplateArg::Int(size(d)?)),
        ("HQ", TemplateArg::Int(size(heads)?)),
        ("HKV", TemplateArg::Int(size(pool[2])?)),
        ("NB", TemplateArg::Int(size(pool[0])?)),
        ("BS", TemplateArg::Int(size(pool[1])?)),
        ("M", TemplateArg::Int(size(ts[1])?)),
        ("WARPS", TemplateArg::Int(WARPS)),
    ];
    template.extend(super::float_constant(
        "SCALE_MAGNITUDE",
        "SCALE_NEGATIVE",
        scale,
    ));
    let names = [
        "q",
        "key_pool",
        "value_pool",
        "table",
        "sequence",
        "lo",
        "hi",
    ];
    let kernel = Kernel {
        name: "paged_prefill_attention",
        inputs: &names,
        outputs: super::OUT,
        cuda: include_str!("paged_prefill_attention.cu"),
        metal: Some(include_str!("paged_prefill_attention.metal")),
    };
    let out_shape = [size(tokens)?, size(heads)?, size(d)?];
    let tiles = (tokens + TOKENS_PER_BLOCK - 1) / TOKENS_PER_BLOCK;
    kernel.apply_one(
        &[q, key_pool, value_pool, table, sequence, lo, hi],
        &Launch {
            outputs: &[(&out_shape, dtype)],
            blocks: size(tiles.saturating_mul(heads))?,
            threads: WARPS * 32,
            template: &template,
        },
        stream,
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_metal_twin_keeps_the_cuda_algorithm() {
        super::super::assert_twins(
            include_str!("paged_prefill_attention.cu"),
            include_str!("paged_prefill_attention.metal"),
        );
    }
}

#[cfg(test)]
mod emulated_tests;

mod dense;
pub use dense::{dense_attention, dense_attention_takes};
