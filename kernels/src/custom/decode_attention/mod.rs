//! Attention for few query rows over a long, partly used KV buffer: what a decode step runs.
//!
//! MLX's own fused attention on CUDA takes no array mask (it falls back to a composed
//! matmul/softmax/matmul over every key), so a step over a shared KV buffer of `P` rows paid
//! for all of them, widened to float32. This kernel reads only each row's visible keys
//! `[lo, hi)` straight from the 16- or 32-bit buffer and scores, normalises and mixes in
//! float32, rounding once to the element type. A block serves the query heads of one key head,
//! so each key is read once for all of them; each thread scores a whole key, so a pass of 512
//! keys costs a few memory round trips; a long buffer with few blocks is split over more
//! blocks and joined by `combine_splits` (see the sources).

use super::{Backend, Kernel, Launch, TemplateArg};
use crate::error::{Error, Result};
use crate::{ops, Array, Dtype, Stream};

const MAX_HEAD: i64 = 256;

/// Whether these kernels (contiguous, paged, and the join of splits) run on `stream`: MLX's
/// CUDA backend, or Metal through their twins when the stream's `KernelChoice::metal_twins`
/// is on.
pub fn decode_attention_runs_on(stream: &Stream) -> bool {
    super::runs_on(stream, &[Backend::Cuda, Backend::Metal])
}

/// Warps (SIMD groups) a block: 16 on CUDA, but 8 for more than 4 heads a block (ptxas 13 gives
/// those up to 140 registers a thread, and 512 such threads exceed an SM's 65,536; 4 heads take
/// at most 108 over every head size, type and layout); 8 on Metal, whose threadgroups have
/// 32 KiB of memory and may be refused 512 threads.
fn warps(stream: &Stream, heads_per_block: i64) -> i32 {
    if super::backend(stream) == Some(Backend::Metal) || heads_per_block > 4 {
        8
    } else {
        16
    }
}

/// The lines of the source that [`KeyRows::source`] and [`write_source`] replace.
const ROWS_MARKER: &str = "// ROWS: the key rows' count and ROW_START(j) (generated, see mod.rs)\n";
const WRITE_MARKER: &str =
    "    // WRITE: the row's result or the split's partial sums (generated, see mod.rs)\n";

/// Whether the kernel takes heads of `head` elements of `dtype`: float16, bfloat16 or float32,
/// at most 256 elements, a row a whole number of 16-byte chunks.
pub fn decode_attention_takes(head: i64, dtype: Dtype) -> bool {
    matches!(dtype, Dtype::F16 | Dtype::BF16 | Dtype::F32)
        && (1..=MAX_HEAD).contains(&head)
        && head * dtype.size_in_bytes() as i64 % 16 == 0
}

/// `softmax(scale · q · kᵀ) · v` for each query row over keys `lo[b, s] ≤ j < hi[b, s]` only:
/// `q` `[B, Hq, S, D]`, `keys`/`values` `[B, Hkv, P, D]` (Hq a multiple of Hkv: query head `h`
/// reads key head `h / (Hq / Hkv)`), `lo`/`hi` int32 `[B, S]` (clipped to `[0, P]`); no
/// dimension may be 0. Scores, softmax and mixing in float32; a row with no visible key gives
/// zeros; a +inf score, or only -inf scores, give NaN (as a max-subtracted softmax does).
pub fn decode_attention(
    q: &Array,
    keys: &Array,
    values: &Array,
    lo: &Array,
    hi: &Array,
    scale: f32,
    stream: &Stream,
) -> Result<Array> {
    let [kb, hkv, p, kd] = four_dims(keys)?;
    let [b, _, _, d] = four_dims(q)?;
    let fits = kb == b && kd == d && values.shape() == keys.shape();
    attend(
        Operands {
            q,
            keys,
            values,
            lo,
            hi,
            scale,
            kv_heads: hkv,
        },
        fits,
        KeyRows::Contiguous { rows: p },
        stream,
    )
}

/// [`decode_attention`] over a paged cache: `key_pool`/`value_pool` `[NB, BS, Hkv, D]` hold
/// blocks of `BS` rows, and row `b`'s key `j` is row `j % BS` of block `table[b, j / BS]`
/// (`table` int32 `[B, M]`; `lo`/`hi` are clipped to `[0, M·BS]`). Block ids outside
/// `[0, NB)` read a block at the edge instead: the caller checks them and fails such a run.
#[allow(clippy::too_many_arguments)] // the attention's operands, as decode_attention's plus one
pub fn paged_decode_attention(
    q: &Array,
    key_pool: &Array,
    value_pool: &Array,
    table: &Array,
    lo: &Array,
    hi: &Array,
    scale: f32,
    stream: &Stream,
) -> Result<Array> {
    let [blocks, block_rows, hkv, kd] = four_dims(key_pool)?;
    let [b, _, _, d] = four_dims(q)?;
    let table_shape = table.shape();
    let fits = kd == d
        && value_pool.shape() == key_pool.shape()
        && blocks > 0
        && block_rows > 0
        && table.dtype() == Dtype::I32
        && table_shape.len() == 2
        && table_shape[0] == b
        && table_shape[1] > 0;
    let per_row = table_shape.get(1).copied().unwrap_or(0);
    attend(
        Operands {
            q,
            keys: key_pool,
            values: value_pool,
            lo,
            hi,
            scale,
            kv_heads: hkv,
        },
        fits,
        KeyRows::Paged {
            table,
            blocks,
            block_rows,
            per_row,
        },
        stream,
    )
}

/// What both kernels take.
struct Operands<'a> {
    q: &'a Array,
    keys: &'a Array,
    values: &'a Array,
    lo: &'a Array,
    hi: &'a Array,
    scale: f32,
    kv_heads: i64,
}

/// Where key `j` of a query row lies: the one difference between the two kernels.
enum KeyRows<'a> {
    /// `[B, Hkv, P, D]` buffers of `rows` = P rows.
    Contiguous { rows: i64 },
    /// `[NB, BS, Hkv, D]` pools of `blocks` blocks of `block_rows` rows, and `per_row` block
    /// ids a query row in `table`.
    Paged {
        table: &'a Array,
        blocks: i64,
        block_rows: i64,
        per_row: i64,
    },
}

impl KeyRows<'_> {
    /// How many key rows a query row may address.
    fn count(&self) -> i64 {
        match self {
            KeyRows::Contiguous { rows } => *rows,
            KeyRows::Paged {
                block_rows,
                per_row,
                ..
            } => per_row.saturating_mul(*block_rows),
        }
    }

    /// The source lines that define `ROWS` and `ROW_START(j)` (an element offset): the same
    /// C++ for the CUDA and Metal bodies.
    fn source(&self) -> &'static str {
        match self {
            KeyRows::Contiguous { .. } => {
                "constexpr int ROWS = P;\n\
                 const size_t kv_offset = (static_cast<size_t>(batch) * HKV + kv_head) * P * D;\n\
                 #define ROW_START(j) (kv_offset + static_cast<size_t>(j) * D)\n"
            }
            KeyRows::Paged { .. } => {
                "constexpr int ROWS = M * BS;\n\
                 const size_t table_offset = static_cast<size_t>(batch) * M;\n\
                 #define BLOCK_OF(j) min(max(table[table_offset + (j) / BS], 0), NB - 1)\n\
                 #define ROW_START(j) \\\n\
                   (((static_cast<size_t>(BLOCK_OF(j)) * BS + (j) % BS) * HKV + kv_head) * D)\n"
            }
        }
    }
}

fn four_dims(a: &Array) -> Result<[i64; 4]> {
    <[i64; 4]>::try_from(a.shape()).map_err(|_| {
        Error::Shape(format!(
            "decode_attention: a 4-D operand expected, got {:?}",
            a.shape()
        ))
    })
}

/// How a launch divides the work between blocks.
#[derive(Debug, PartialEq)]
struct Plan {
    /// Query heads a block serves (they share one key head, so read each key once).
    heads_per_block: i64,
    /// Blocks each query row's key range is split over.
    splits: i64,
}

/// At most this many query heads a block: the heads' probabilities and sums fill shared memory
/// and registers (8 heads of 256 elements take 40 KiB of the 48).
const MAX_HEADS_PER_BLOCK: i64 = 8;
/// Enough blocks to keep every SM busy: two per SM of an H200's 132. A 512-thread block (104
/// registers a thread) fits only once an SM, and `KEYS_PER_SPLIT` usually caps the splits
/// first: the ~1B decoder's step at 3,043 keys gets 88 blocks, 44 SMs idle, yet plans of more,
/// smaller blocks measured slower there (PERFORMANCE.md, 2026-12-04).
const TARGET_BLOCKS: i64 = 264;
/// A split is worth a block only with this many keys of the buffer or more. A pass costs about
/// the same for any number of keys up to a block's threads, so a split of half a pass trades a
/// second pass for more blocks (H200, ncu, one sequence over 3,029 keys: 27.5 µs a layer in 5
/// splits, 24.5 in 11, with the value loads in flight together).
const KEYS_PER_SPLIT: i64 = 256;
const MAX_SPLITS: i64 = 32;

impl Plan {
    /// `cells` blocks' worth of (batch, key head, step) without splitting, `group` query heads
    /// per key head, `keys` the rows a query row may address.
    fn of(cells: i64, group: i64, keys: i64) -> Plan {
        let heads_per_block = (1..=MAX_HEADS_PER_BLOCK.min(group))
            .rev()
            .find(|n| group % n == 0)
            .unwrap_or(1);
        let blocks = cells.saturating_mul(group / heads_per_block).max(1);
        let wanted = (TARGET_BLOCKS + blocks - 1) / blocks;
        let splits = wanted.min(keys / KEYS_PER_SPLIT).clamp(1, MAX_SPLITS);
        Plan {
            heads_per_block,
            splits,
        }
    }
}

/// Checks what both kernels need (`fits`: what the layout needs) and launches the blocks of
/// [`Plan`], then, for a split key range, the kernel that joins the splits.
fn attend(o: Operands<'_>, fits: bool, rows: KeyRows<'_>, stream: &Stream) -> Result<Array> {
    let [b, hq, s, d] = four_dims(o.q)?;
    let dtype = o.q.dtype();
    let fits = fits
        && b * hq * s > 0
        && o.kv_heads > 0
        && hq % o.kv_heads == 0
        && decode_attention_takes(d, dtype)
        && o.keys.dtype() == dtype
        && o.values.dtype() == dtype
        && o.lo.shape() == [b, s]
        && o.hi.shape() == [b, s]
        && o.lo.dtype() == Dtype::I32
        && o.hi.dtype() == Dtype::I32;
    if !fits {
        return Err(Error::Shape(format!(
            "decode_attention: operands do not fit (q {:?} {dtype:?}, keys {:?}, values {:?}, lo {:?}, hi {:?})",
            o.q.shape(),
            o.keys.shape(),
            o.values.shape(),
            o.lo.shape(),
            o.hi.shape()
        )));
    }
    let size = |v: i64| super::size("decode_attention", v);
    let out_shape = [size(b)?, size(hq)?, size(s)?, size(d)?];
    let plan = Plan::of(b * o.kv_heads * s, hq / o.kv_heads, rows.count());
    let warps = warps(stream, plan.heads_per_block);
    let mut template = vec![
        ("T", TemplateArg::Type(dtype)),
        ("D", TemplateArg::Int(out_shape[3])),
        ("HQ", TemplateArg::Int(out_shape[1])),
        ("HKV", TemplateArg::Int(size(o.kv_heads)?)),
        ("S", TemplateArg::Int(out_shape[2])),
        ("GH", TemplateArg::Int(size(plan.heads_per_block)?)),
        ("SPLITS", TemplateArg::Int(size(plan.splits)?)),
        ("WARPS", TemplateArg::Int(warps)),
    ];
    template.extend(super::float_constant(
        "SCALE_MAGNITUDE",
        "SCALE_NEGATIVE",
        o.scale,
    ));
    let bounds = key_bounds(o.lo, o.hi, stream)?;
    let mut inputs = vec![o.q, o.keys, o.values, &bounds];
    let mut names = vec!["q", "keys", "values", "bounds"];
    let name = match &rows {
        KeyRows::Contiguous { rows } => {
            template.push(("P", TemplateArg::Int(size(*rows)?)));
            "decode_attention"
        }
        KeyRows::Paged {
            table,
            blocks,
            block_rows,
            per_row,
        } => {
            template.push(("NB", TemplateArg::Int(size(*blocks)?)));
            template.push(("BS", TemplateArg::Int(size(*block_rows)?)));
            template.push(("M", TemplateArg::Int(size(*per_row)?)));
            inputs.push(table);
            names.push("table");
            "paged_decode_attention"
        }
    };
    // A row's keys are numbered in int32 (`ROWS`).
    size(rows.count())?;
    let split = plan.splits > 1;
    let generate = |body: &str| {
        body.replace(ROWS_MARKER, rows.source())
            .replace(WRITE_MARKER, write_source(split))
    };
    let (cuda, metal) = (
        generate(include_str!("decode_attention.cu")),
        generate(include_str!("decode_attention.metal")),
    );
    let blocks = size(b * o.kv_heads * s * (hq / o.kv_heads / plan.heads_per_block) * plan.splits)?;
    let query_rows = size(b * hq * s)?;
    let record = size(d + 3)?;
    let parts_shape = [query_rows, size(plan.splits)?, record];
    let kernel = Kernel {
        name,
        inputs: &names,
        outputs: super::OUT,
        cuda: &cuda,
        metal: Some(&metal),
    };
    let output = kernel.apply_one(
        &inputs,
        &Launch {
            outputs: &[if split {
                (&parts_shape, Dtype::F32)
            } else {
                (&out_shape, dtype)
            }],
            blocks,
            threads: warps * 32,
            template: &template,
        },
        stream,
    )?;
    if !split {
        return Ok(output);
    }
    let combine = Kernel {
        name: "combine_splits",
        inputs: &["parts"],
        outputs: super::OUT,
        cuda: include_str!("combine_splits.cu"),
        metal: Some(include_str!("combine_splits.metal")),
    };
    combine.apply_one(
        &[&output],
        &Launch {
            outputs: &[(&out_shape, dtype)],
            blocks: query_rows,
            threads: COMBINE_THREADS,
            template: &[
                ("T", TemplateArg::Type(dtype)),
                ("D", TemplateArg::Int(out_shape[3])),
                ("SPLITS", TemplateArg::Int(parts_shape[1])),
                ("THREADS", TemplateArg::Int(COMBINE_THREADS)),
            ],
        },
        stream,
    )
}

const COMBINE_THREADS: i32 = 128;

/// Each query row's `lo` and `hi` side by side, `[max(R, 2), 2]` int32 for `R` rows (a second,
/// unread row when there is only one), so that the operand is never 8 bytes or fewer: MLX's
/// CUDA allocator serves those from a pool of unified memory shared with host-written scalars,
/// and this kernel reading a decode step's 4-byte `lo` and `hi` there took 37 µs a launch on
/// the H200, 10.7 with them out of the pool (ncu; MLX's own kernels read the pool without that
/// wait). Identical across a step's layers, so a compiled step builds it once.
fn key_bounds(lo: &Array, hi: &Array, stream: &Stream) -> Result<Array> {
    let rows = lo.size() as i64;
    let column = |a: &Array| ops::reshape(a, &[rows, 1], stream);
    let bounds = ops::concatenate(&[column(lo)?, column(hi)?], 1, stream)?;
    if rows >= 2 {
        return Ok(bounds);
    }
    let zero = Array::scalar(0i32)?;
    ops::pad(&bounds, &[0], &[0], &[1], &zero, false, stream)
}

/// The WRITE line: a row's normalised result, or the split's record for combine_splits.cu
/// (running max, sum, whether it saw a visible key, then the unnormalised mix).
fn write_source(split: bool) -> &'static str {
    if split {
        "const size_t record = (Q_ROW(g) * SPLITS + split) * (D + 3);\n\
         out[record + 3 + d] = mixed;\n\
         if (d == 0) {\n\
           out[record] = running_max[g];\n\
           out[record + 1] = running_sum[g];\n\
           out[record + 2] = first < end ? 1.f : 0.f;\n\
         }\n"
    } else {
        "float result;\n\
         if (first >= end) {\n\
           result = 0.f;  // no visible key: zeros\n\
         } else if (running_max[g] == -INFINITY) {\n\
           result = NAN;  // no finite score: the softmax is 0/0\n\
         } else {\n\
           result = mixed / running_sum[g];\n\
         }\n\
         out[Q_ROW(g) * D + d] = static_cast<T>(result);\n"
    }
}

#[cfg(test)]
mod emulated_tests;

#[cfg(test)]
mod tests {
    use super::{write_source, KeyRows, Plan, ROWS_MARKER, WRITE_MARKER};
    use crate::Array;

    /// The kernels are only compiled on a GPU: here, that both layouts get their addressing and
    /// both ways of finishing fill the body's one WRITE line.
    #[test]
    fn the_generated_lines_fill_the_body() {
        for body in [
            include_str!("decode_attention.cu"),
            include_str!("decode_attention.metal"),
        ] {
            fill(body);
        }
    }

    #[test]
    fn the_metal_twins_keep_the_cuda_algorithm() {
        super::super::assert_twins(
            include_str!("decode_attention.cu"),
            include_str!("decode_attention.metal"),
        );
        super::super::assert_twins(
            include_str!("combine_splits.cu"),
            include_str!("combine_splits.metal"),
        );
    }

    fn fill(body: &str) {
        assert_eq!(body.matches(ROWS_MARKER).count(), 1);
        assert_eq!(body.matches(WRITE_MARKER).count(), 1);
        let table = Array::from_slice(&[0i32], &[1, 1]).unwrap();
        let layouts = [
            KeyRows::Contiguous { rows: 4 },
            KeyRows::Paged {
                table: &table,
                blocks: 1,
                block_rows: 16,
                per_row: 1,
            },
        ];
        for rows in layouts {
            let source = body.replace(ROWS_MARKER, rows.source());
            assert!(source.contains("constexpr int ROWS"));
            assert!(source.contains("#define ROW_START(j)"));
        }
        for split in [false, true] {
            let source = body.replace(WRITE_MARKER, write_source(split));
            assert!(source.contains(if split {
                "out[record + 3 + d]"
            } else {
                "out[Q_ROW(g)"
            }));
        }
    }

    #[test]
    fn plans_share_keys_between_heads_and_split_only_long_ranges() {
        let plan = |cells, group, keys| {
            let p = Plan::of(cells, group, keys);
            (p.heads_per_block, p.splits)
        };
        // The batch: 8 sequences, 8 key heads of 4 query heads, 4,096 keys.
        assert_eq!(plan(64, 4, 4096), (4, 5));
        // Many rows already fill the GPU; a short buffer is not worth splitting.
        assert_eq!(plan(512, 4, 4096), (4, 1));
        // One sequence: its 8 blocks split 3,029 keys 11 ways.
        assert_eq!(plan(8, 4, 3029), (4, 11));
        assert_eq!(plan(1, 32, 511), (8, 1));
        // Heads per block divide the group, at most 8.
        assert_eq!(plan(1, 12, 0).0, 6);
        assert_eq!(plan(1, 7, 0).0, 7);
        assert_eq!(plan(1, 16, 0).0, 8);
        assert_eq!(plan(1, 1, 1 << 20), (1, 32));
    }
}
