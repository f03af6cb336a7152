//! The paged prefill body and its Metal twin run in the host emulator (`custom/emulator`):
//! packed tokens of several sequences share 16-token tiles, against a float64 reference over
//! the same rounded inputs.

use super::super::emulator::{
    assert_near, attend_row, check_cases_in_both_dialects, rounded, values, Pool,
};
use super::paged_prefill_attention;
use crate::{Array, Dtype, Stream};

/// A sequence of a packed batch: `new` tokens after `cached` ones, each seeing its causal
/// prefix (the last `window` keys of it when set) or, when not causal, every key.
struct Sequence {
    cached: i32,
    new: i32,
    causal: bool,
    window: Option<i32>,
}

struct Case {
    dtype: Dtype,
    heads: i64,
    kv_heads: i64,
    head: i64,
    sequences: &'static [Sequence],
}

const BLOCK_ROWS: i64 = 16;
const BLOCKS_PER_SEQUENCE: i64 = 4;

const CASES: &[Case] = &[
    // 26 tokens: the first tile holds two runs (5, then 11 of 20), the second the rest and a
    // one-token sequence with nothing cached; a window on the middle one; the first run's
    // keys take two tiles.
    Case {
        dtype: Dtype::F16,
        heads: 4,
        kv_heads: 2,
        head: 32,
        sequences: &[
            Sequence {
                cached: 45,
                new: 5,
                causal: true,
                window: None,
            },
            Sequence {
                cached: 40,
                new: 20,
                causal: true,
                window: Some(12),
            },
            Sequence {
                cached: 0,
                new: 1,
                causal: true,
                window: None,
            },
        ],
    },
    // Non-causal tokens over more keys than a tile of them, and a sequence with no key at all.
    Case {
        dtype: Dtype::BF16,
        heads: 2,
        kv_heads: 1,
        head: 64,
        sequences: &[
            Sequence {
                cached: 30,
                new: 18,
                causal: false,
                window: None,
            },
            Sequence {
                cached: 0,
                new: 0,
                causal: false,
                window: None,
            },
            Sequence {
                cached: 7,
                new: 3,
                causal: false,
                window: Some(0),
            },
        ],
    },
];

#[test]
fn the_bodies_attend_like_the_reference_in_both_dialects() {
    check_cases_in_both_dialects(CASES, 31, check);
}

fn check(case: &Case, seed: u64) -> crate::Result<()> {
    let cpu = Stream::cpu()?;
    let (hq, hkv, d) = (case.heads, case.kv_heads, case.head);
    let b = case.sequences.len() as i64;
    // Each token's sequence and visible keys [lo, hi).
    let mut tokens = Vec::new();
    for (s, seq) in case.sequences.iter().enumerate() {
        let total = seq.cached + seq.new;
        for p in seq.cached..total {
            let hi = if seq.causal { p + 1 } else { total };
            let lo = seq.window.map_or(0, |w| (hi - w).max(0));
            tokens.push((s as i32, lo, hi));
        }
    }
    let t = tokens.len() as i64;
    let (q, q_values) = rounded(
        &values(seed, (t * hq * d) as usize),
        &[t, hq, d],
        case.dtype,
        &cpu,
    );
    let pool = Pool::new(
        seed + 100,
        b,
        BLOCKS_PER_SEQUENCE,
        BLOCK_ROWS,
        hkv,
        d,
        case.dtype,
        &cpu,
    );
    let column = |i: usize| {
        Array::from_slice(
            &tokens
                .iter()
                .map(|t| [t.0, t.1, t.2][i])
                .collect::<Vec<_>>(),
            &[t],
        )
    };
    let scale = 1.0 / (d as f32).sqrt();
    let out = paged_prefill_attention(
        &q,
        &pool.keys,
        &pool.values,
        &pool.table_array(),
        &column(0)?,
        &column(1)?,
        &column(2)?,
        scale,
        &cpu,
    )?;
    let got = crate::ops::astype(&out, Dtype::F32, &cpu)?.to_vec::<f32>(&cpu)?;
    let tolerance = if case.dtype == Dtype::F16 { 2e-3 } else { 8e-3 };
    for (i, &(s, lo, hi)) in tokens.iter().enumerate() {
        let at = |h: i64, j: i64| pool.at(i64::from(s), h, j);
        for h in 0..hq {
            let kv_head = h / (hq / hkv);
            let row = (i as i64 * hq + h) * d;
            let want = attend_row(
                &q_values[row as usize..][..d as usize],
                i64::from(lo)..i64::from(hi.max(lo)),
                |j| &pool.key_elements[at(kv_head, j)..][..d as usize],
                |j| &pool.value_elements[at(kv_head, j)..][..d as usize],
                scale,
            );
            for (e, want) in want.iter().enumerate() {
                let found = f64::from(got[row as usize + e]);
                assert_near(found, *want, tolerance, || {
                    format!("{:?} token {i} head {h} element {e}", case.dtype)
                });
            }
        }
    }
    Ok(())
}
