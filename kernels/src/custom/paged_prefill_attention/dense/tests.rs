//! Dense attention through the prefill body, in both dialects of the host emulator, against a
//! float64 reference over the same rounded inputs; the heads split from `[B, L, H, D]` rows by
//! a transpose, as attention's projections make them.

use super::super::super::emulator::{
    assert_near, attend_row, check_cases_in_both_dialects, rounded, values,
};
use super::{dense_attention, dense_attention_takes};
use crate::{ops, Array, Dtype, Stream};

struct Case {
    dtype: Dtype,
    batch: i64,
    heads: i64,
    kv_heads: i64,
    queries: i64,
    keys: i64,
    head: i64,
}

const CASES: &[Case] = &[
    // An encoder's self-attention: keys past one tile (37), two batches sharing no tile.
    Case {
        dtype: Dtype::F32,
        batch: 2,
        heads: 4,
        kv_heads: 4,
        queries: 5,
        keys: 37,
        head: 64,
    },
    // The fewest rows (one batch of 4 queries: the table padded), grouped heads, more keys
    // than queries.
    Case {
        dtype: Dtype::F32,
        batch: 1,
        heads: 4,
        kv_heads: 2,
        queries: 4,
        keys: 70,
        head: 32,
    },
    // float32's largest head, a tile of queries spanning three batches.
    Case {
        dtype: Dtype::F32,
        batch: 3,
        heads: 2,
        kv_heads: 1,
        queries: 7,
        keys: 9,
        head: 128,
    },
    Case {
        dtype: Dtype::F16,
        batch: 2,
        heads: 2,
        kv_heads: 2,
        queries: 9,
        keys: 33,
        head: 64,
    },
];

#[test]
fn dense_heads_attend_like_the_reference_in_both_dialects() {
    check_cases_in_both_dialects(CASES, 71, check);
}

fn check(case: &Case, seed: u64) -> crate::Result<()> {
    let cpu = Stream::cpu()?;
    let (b, hq, hkv, l, s, d) = (
        case.batch,
        case.heads,
        case.kv_heads,
        case.queries,
        case.keys,
        case.head,
    );
    // Rows as the projections leave them, `[B, L, H, D]`, and their heads as a transposed view.
    let made = |seed: u64, len: i64, heads: i64| {
        let (rows, elements) = rounded(
            &values(seed, (b * len * heads * d) as usize),
            &[b, len, heads, d],
            case.dtype,
            &cpu,
        );
        (
            ops::transpose(&rows, &[0, 2, 1, 3], &cpu).unwrap(),
            elements,
        )
    };
    let (q, q_rows) = made(seed, l, hq);
    let (k, k_rows) = made(seed + 1, s, hkv);
    let (v, v_rows) = made(seed + 2, s, hkv);
    assert!(dense_attention_takes(
        &q.shape(),
        &k.shape(),
        &v.shape(),
        case.dtype
    ));
    let scale = 1.0 / (d as f32).sqrt();
    let out = dense_attention(&q, &k, &v, scale, &cpu)?;
    assert_eq!(out.shape(), [b, hq, l, d]);
    let got = ops::astype(&out, Dtype::F32, &cpu)?.to_vec::<f32>(&cpu)?;
    let tolerance = match case.dtype {
        Dtype::F32 => 2e-6,
        _ => 2e-3,
    };
    // Row `j` of head `head` of batch `batch` in `[B, len, heads, D]` elements.
    let row = |elements: &[f32], len: i64, heads: i64, batch: i64, head: i64, j: i64| {
        let at = (((batch * len + j) * heads + head) * d) as usize;
        elements[at..at + d as usize].to_vec()
    };
    for batch in 0..b {
        for h in 0..hq {
            let kv_head = h / (hq / hkv);
            let keys: Vec<Vec<f32>> = (0..s)
                .map(|j| row(&k_rows, s, hkv, batch, kv_head, j))
                .collect();
            let vals: Vec<Vec<f32>> = (0..s)
                .map(|j| row(&v_rows, s, hkv, batch, kv_head, j))
                .collect();
            for i in 0..l {
                let want = attend_row(
                    &row(&q_rows, l, hq, batch, h, i),
                    0..s,
                    |j| &keys[j as usize],
                    |j| &vals[j as usize],
                    scale,
                );
                let at = (((batch * hq + h) * l + i) * d) as usize;
                for (e, want) in want.iter().enumerate() {
                    let found = f64::from(got[at + e]);
                    assert_near(found, *want, tolerance, || {
                        format!(
                            "{:?} batch {batch} head {h} query {i} element {e}",
                            case.dtype
                        )
                    });
                }
            }
        }
    }
    Ok(())
}

#[test]
fn what_it_refuses_it_refuses_without_a_launch() {
    let cpu = Stream::cpu().unwrap();
    let takes = |q: &[i64], k: &[i64], dtype| dense_attention_takes(q, k, k, dtype);
    assert!(takes(&[1, 4, 4, 64], &[1, 2, 9, 64], Dtype::F32));
    // Three query rows in all; heads that do not group; another head size; float32's head of
    // 256 (its tiles would not fit); an empty key axis; an integer type.
    assert!(!takes(&[1, 4, 3, 64], &[1, 4, 9, 64], Dtype::F32));
    assert!(!takes(&[1, 4, 4, 64], &[1, 3, 9, 64], Dtype::F32));
    assert!(!takes(&[1, 4, 4, 64], &[1, 4, 9, 32], Dtype::F32));
    assert!(!takes(&[1, 4, 4, 256], &[1, 4, 9, 256], Dtype::F32));
    assert!(takes(&[1, 4, 4, 256], &[1, 4, 9, 256], Dtype::BF16));
    assert!(!takes(&[1, 4, 4, 64], &[1, 4, 0, 64], Dtype::F32));
    assert!(!takes(&[1, 4, 4, 64], &[1, 4, 9, 64], Dtype::I32));
    let q = Array::from_slice(&[0f32; 3 * 64], &[1, 1, 3, 64]).unwrap();
    let err = dense_attention(&q, &q, &q, 1.0, &cpu).unwrap_err();
    assert!(err.to_string().contains("do not fit"), "{err}");
}
