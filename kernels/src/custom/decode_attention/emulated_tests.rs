//! The decode-attention bodies and their Metal twins run in the host emulator
//! (`custom/emulator`): the wrappers plan, generate and launch as on a GPU, and every output
//! row is held to a float64 reference over the same rounded inputs.

use super::super::emulator::{
    assert_near, attend_row, check_cases_in_both_dialects, emulate, rounded, values, Pool,
};
use super::super::Backend;
use super::{decode_attention, paged_decode_attention};
use crate::{ops, Array, Dtype, Stream};

/// One launch's shapes: `rows` keys a sequence may address, each sequence's visible range.
struct Case {
    dtype: Dtype,
    heads: i64,
    kv_heads: i64,
    head: i64,
    /// `Some(block_rows)`: a pool of shuffled blocks read through a table.
    paged: Option<i64>,
    rows: i64,
    ranges: &'static [(i32, i32)],
}

const CASES: &[Case] = &[
    // 4 query heads a key head over 600 keys: two splits of one pass, joined.
    Case {
        dtype: Dtype::F16,
        heads: 8,
        kv_heads: 2,
        head: 64,
        paged: None,
        rows: 600,
        ranges: &[(37, 590)],
    },
    // A pool, one query head a key head, and a sequence that sees nothing (zeros).
    Case {
        dtype: Dtype::BF16,
        heads: 2,
        kv_heads: 2,
        head: 32,
        paged: Some(16),
        rows: 80,
        ranges: &[(0, 70), (10, 10)],
    },
    // 8 query heads a block (the narrower block), float32, a range past the buffer (clipped).
    Case {
        dtype: Dtype::F32,
        heads: 16,
        kv_heads: 2,
        head: 16,
        paged: None,
        rows: 300,
        ranges: &[(0, 300), (5, 123), (290, 900)],
    },
    // Heads of 256 in float32: 64 chunks a row, the widest row.
    Case {
        dtype: Dtype::F32,
        heads: 4,
        kv_heads: 1,
        head: 256,
        paged: None,
        rows: 200,
        ranges: &[(3, 197)],
    },
    // Heads of 96: 12 chunks a row, which do not divide a block's threads.
    Case {
        dtype: Dtype::F16,
        heads: 6,
        kv_heads: 3,
        head: 96,
        paged: Some(16),
        rows: 160,
        ranges: &[(0, 150), (40, 41)],
    },
    // Heads of 256 (a lane holds 8 elements, one key at a time), split.
    Case {
        dtype: Dtype::F16,
        heads: 2,
        kv_heads: 1,
        head: 256,
        paged: None,
        rows: 300,
        ranges: &[(1, 299)],
    },
    // Heads of 128 (4 elements a lane, two keys at a time) in a pool.
    Case {
        dtype: Dtype::BF16,
        heads: 6,
        kv_heads: 2,
        head: 128,
        paged: Some(16),
        rows: 96,
        ranges: &[(0, 96), (17, 50)],
    },
    // A pool split in two.
    Case {
        dtype: Dtype::F16,
        heads: 4,
        kv_heads: 1,
        head: 64,
        paged: Some(16),
        rows: 640,
        ranges: &[(3, 630)],
    },
];

#[test]
fn the_bodies_attend_like_the_reference_in_both_dialects() {
    check_cases_in_both_dialects(CASES, 11, check);
}

/// Where row `j` of sequence `s`, key head `h` starts in the keys' (and values') elements.
type RowAt = Box<dyn Fn(i64, i64, i64) -> usize>;

fn check(case: &Case, seed: u64) -> crate::Result<()> {
    let cpu = Stream::cpu()?;
    let (b, hq, hkv, d) = (
        case.ranges.len() as i64,
        case.heads,
        case.kv_heads,
        case.head,
    );
    let (q, q_values) = rounded(
        &values(seed, (b * hq * d) as usize),
        &[b, hq, 1, d],
        case.dtype,
        &cpu,
    );
    let lo = Array::from_slice(
        &case.ranges.iter().map(|r| r.0).collect::<Vec<_>>(),
        &[b, 1],
    )?;
    let hi = Array::from_slice(
        &case.ranges.iter().map(|r| r.1).collect::<Vec<_>>(),
        &[b, 1],
    )?;
    let scale = 1.0 / (d as f32).sqrt();
    let (out, keys, values_read, at): (_, Vec<f32>, Vec<f32>, RowAt) = match case.paged {
        None => {
            let shape = [b, hkv, case.rows, d];
            let n = (b * hkv * case.rows * d) as usize;
            let (k, kv) = rounded(&values(seed + 100, n), &shape, case.dtype, &cpu);
            let (v, vv) = rounded(&values(seed + 200, n), &shape, case.dtype, &cpu);
            let out = decode_attention(&q, &k, &v, &lo, &hi, scale, &cpu)?;
            let rows = case.rows;
            (
                out,
                kv,
                vv,
                Box::new(move |s, h, j| (((s * hkv + h) * rows + j) * d) as usize),
            )
        }
        Some(block_rows) => {
            let per_row = case.rows / block_rows;
            let pool = Pool::new(seed + 100, b, per_row, block_rows, hkv, d, case.dtype, &cpu);
            let out = paged_decode_attention(
                &q,
                &pool.keys,
                &pool.values,
                &pool.table_array(),
                &lo,
                &hi,
                scale,
                &cpu,
            )?;
            let (kv, vv) = (pool.key_elements.clone(), pool.value_elements.clone());
            (out, kv, vv, Box::new(move |s, h, j| pool.at(s, h, j)))
        }
    };
    let got = ops::astype(&out, Dtype::F32, &cpu)?.to_vec::<f32>(&cpu)?;
    let tolerance = match case.dtype {
        Dtype::F32 => 1e-5,
        Dtype::F16 => 2e-3,
        _ => 8e-3,
    };
    for s in 0..b {
        let (first, end) = case.ranges[s as usize];
        let (first, end) = (
            i64::from(first).clamp(0, case.rows),
            i64::from(end).clamp(0, case.rows),
        );
        for h in 0..hq {
            let kv_head = h / (hq / hkv);
            let query = &q_values[((s * hq + h) * d) as usize..][..d as usize];
            let want = attend_row(
                query,
                first..end.max(first),
                |j| &keys[at(s, kv_head, j)..][..d as usize],
                |j| &values_read[at(s, kv_head, j)..][..d as usize],
                scale,
            );
            for e in 0..d {
                let want = want[e as usize];
                let found = f64::from(got[((s * hq + h) * d + e) as usize]);
                assert_near(found, want, tolerance, || {
                    format!("{:?} sequence {s} head {h} element {e}", case.dtype)
                });
            }
        }
    }
    Ok(())
}

/// The edges one pass of softmax has, kept by both dialects with and without splits: keys
/// outside a row's range never count (not even NaN or inf ones), a NaN or +inf score makes
/// the row NaN, a -inf score weighs nothing, only -inf scores give NaN, an empty range gives zeros.
#[test]
fn the_bodies_keep_the_edges_of_one_softmax_pass() {
    let cpu = Stream::cpu().unwrap();
    let (hq, d) = (2i64, 16i64);
    // (visible range, what is planted at key 5: outside the range, or inside it)
    let sequences: [((i32, i32), f32); 6] = [
        ((10, 30), f32::NAN),         // hidden: a NaN key and value outside the range
        ((0, 30), f32::INFINITY),     // a +inf score
        ((0, 30), f32::NEG_INFINITY), // one -inf score among finite ones
        ((5, 6), f32::NEG_INFINITY),  // only -inf scores
        ((20, 20), 1.0),              // nothing visible
        ((0, 30), f32::NAN),          // a NaN score: the sums are poisoned
    ];
    let b = sequences.len() as i64;
    for rows in [40i64, 600] {
        let mut q = values(3, (b * hq * d) as usize);
        let mut keys = values(4, (b * rows * d) as usize);
        let mut vals = values(5, (b * rows * d) as usize);
        for (s, (_, planted)) in sequences.iter().enumerate() {
            for h in 0..hq as usize {
                q[(s * hq as usize + h) * d as usize] = 1.0; // the planted element scores fully
            }
            let at = (s * rows as usize + 5) * d as usize;
            keys[at] = *planted;
            if planted.is_nan() {
                vals[at] = f32::NAN;
            }
        }
        let shape = [b, 1, rows, d];
        let lo = Array::from_slice(
            &sequences.iter().map(|s| s.0 .0).collect::<Vec<_>>(),
            &[b, 1],
        )
        .unwrap();
        let hi = Array::from_slice(
            &sequences.iter().map(|s| s.0 .1).collect::<Vec<_>>(),
            &[b, 1],
        )
        .unwrap();
        // A negative scale too: it reaches the kernel as template integers (`float_constant`).
        for (dialect, scale) in [
            (Backend::Cuda, 0.25),
            (Backend::Metal, 0.25),
            (Backend::Cuda, -0.25),
            (Backend::Metal, -0.25),
        ] {
            let out = emulate(dialect, || {
                decode_attention(
                    &Array::from_slice(&q, &[b, hq, 1, d])?,
                    &Array::from_slice(&keys, &shape)?,
                    &Array::from_slice(&vals, &shape)?,
                    &lo,
                    &hi,
                    scale,
                    &cpu,
                )
            })
            .unwrap();
            let got = out.to_vec::<f32>(&cpu).unwrap();
            for (s, ((first, end), _)) in sequences.iter().enumerate() {
                let row = |j: i64| (s * rows as usize + j as usize) * d as usize;
                for h in 0..hq as usize {
                    let at = (s * hq as usize + h) * d as usize;
                    let want = attend_row(
                        &q[at..][..d as usize],
                        i64::from(*first)..i64::from(*end),
                        |j| &keys[row(j)..][..d as usize],
                        |j| &vals[row(j)..][..d as usize],
                        scale,
                    );
                    for (e, want) in want.iter().enumerate() {
                        let found = f64::from(got[at + e]);
                        let same = if want.is_nan() {
                            found.is_nan()
                        } else {
                            (found - want).abs() <= 1e-5 * (1.0 + want.abs())
                        };
                        assert!(same, "{dialect:?}, scale {scale}, {rows} rows, sequence {s} head {h} element {e}: {found} against {want}");
                    }
                }
            }
        }
    }
}
