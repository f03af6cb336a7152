//! Attention over dense `[B, H, L, D]` heads in one launch of the paged prefill kernel.
//!
//! A dense batch is a pool of one block per sequence: keys `[B, Hkv, S, D]` read as
//! `[B, S, Hkv, D]` are the pool of `B` blocks of `S` rows, block `b` serves sequence `b`, and
//! the queries `[B, Hq, L, D]` read as `[B·L, Hq, D]` are the packed tokens, each seeing all `S`
//! keys. Where the heads were split from `[B, L, H, D]` rows by a transpose (as attention's
//! projections make them), those reads are views of the rows as they lie, so the call is one
//! kernel where MLX composes scores, softmax and mix from several (with the heads' copies
//! before them) in float32.

use super::{paged_prefill_attention, paged_prefill_attention_takes};
use crate::error::{Error, Result};
use crate::{ops, Array, Dtype, Stream};

/// The fewest query rows (`B·L`) and table rows the call builds its index operands for: each
/// is an int32 array of that many elements, and MLX's CUDA allocator would put one of 8 bytes
/// or fewer in its shared pool of small unified-memory arrays, where a kernel's read of it
/// waits (`docs/DESIGN.md`, the CUDA kernels).
const MIN_ROWS: i64 = 4;

/// Whether [`dense_attention`] takes `q` `[B, Hq, L, D]`, `k` `[B, Hkv, S, D]` and `v` of `k`'s
/// shape, all of `dtype`: `Hq` a multiple of `Hkv`, at least 4 query rows in all (`B·L`), no
/// empty dim, heads the prefill kernel takes
/// ([`paged_prefill_attention_takes`]).
pub fn dense_attention_takes(q: &[i64], k: &[i64], v: &[i64], dtype: Dtype) -> bool {
    let [b, hq, l, d] = q else { return false };
    let [kb, hkv, s, kd] = k else { return false };
    q.iter().chain(k).all(|&n| n > 0)
        && v == k
        && kb == b
        && kd == d
        && hq % hkv == 0
        && b.saturating_mul(*l) >= MIN_ROWS
        && i32::try_from(b.saturating_mul(*l)).is_ok()
        && i32::try_from(*s).is_ok()
        && paged_prefill_attention_takes(*d, dtype)
}

/// `softmax(scale · q·kᵀ) · v` over every key, for `q` `[B, Hq, L, D]`, `k` and `v`
/// `[B, Hkv, S, D]` (query head `h` reads key head `h / (Hq / Hkv)`): `[B, Hq, L, D]`. Scores,
/// softmax and mix in float32, rounded once to the operands' type. An error, never a launch,
/// for operands [`dense_attention_takes`] refuses.
pub fn dense_attention(
    q: &Array,
    k: &Array,
    v: &Array,
    scale: f32,
    stream: &Stream,
) -> Result<Array> {
    let (qs, ks) = (q.shape(), k.shape());
    if !dense_attention_takes(&qs, &ks, &v.shape(), q.dtype())
        || k.dtype() != q.dtype()
        || v.dtype() != q.dtype()
    {
        return Err(Error::Shape(format!(
            "dense_attention: operands do not fit (q {qs:?} {:?}, k {ks:?} {:?}, v {:?} {:?})",
            q.dtype(),
            k.dtype(),
            v.shape(),
            v.dtype()
        )));
    }
    let (b, heads, l, d) = (qs[0], qs[1], qs[2], qs[3]);
    let keys = ks[2];
    let rows = |a: &Array| ops::transpose(a, &[0, 2, 1, 3], stream);
    let tokens = ops::reshape(&rows(q)?, &[b * l, heads, d], stream)?;
    // Sequence b's one block is block b; rows past B (padding, see MIN_ROWS) are never read.
    let table: Vec<i32> = (0..b.max(MIN_ROWS))
        .map(|row| if row < b { row as i32 } else { 0 })
        .collect();
    let sequence: Vec<i32> = (0..b * l).map(|t| (t / l) as i32).collect();
    let column = |values: &[i32]| Array::from_slice(values, &[values.len() as i64]);
    let out = paged_prefill_attention(
        &tokens,
        &rows(k)?,
        &rows(v)?,
        &Array::from_slice(&table, &[table.len() as i64, 1])?,
        &column(&sequence)?,
        &column(&vec![0; sequence.len()])?,
        &column(&vec![keys as i32; sequence.len()])?,
        scale,
        stream,
    )?;
    rows(&ops::reshape(&out, &[b, l, heads, d], stream)?)
}

#[cfg(test)]
mod tests;
