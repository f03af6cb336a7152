//! Real MLX computations on the CPU backend, checked against plain references.

mod common;

use common::{array, assert_close, matmul_ref, stream, Rng};
use mlx_kernels::ops::{self, AttentionMask};
use mlx_kernels::{Array, Dtype, Stream};

#[test]
fn add_broadcasts_like_numpy() {
    let s = stream();
    let a = array(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let b = array(&[10.0, 20.0, 30.0], &[3]);
    let c = array(&[100.0, 200.0], &[2, 1]);
    let ab = ops::add(&a, &b, &s).unwrap();
    assert_eq!(ab.shape(), vec![2, 3]);
    assert_eq!(
        ab.to_vec::<f32>(&s).unwrap(),
        vec![11.0, 22.0, 33.0, 14.0, 25.0, 36.0]
    );
    let ac = ops::add(&a, &c, &s).unwrap();
    assert_eq!(
        ac.to_vec::<f32>(&s).unwrap(),
        vec![101.0, 102.0, 103.0, 204.0, 205.0, 206.0]
    );
    // A scalar broadcasts against everything.
    let two = Array::scalar(2.0f32).unwrap();
    let a2 = ops::multiply(&a, &two, &s).unwrap();
    assert_eq!(
        a2.to_vec::<f32>(&s).unwrap(),
        vec![2.0, 4.0, 6.0, 8.0, 10.0, 12.0]
    );
}

#[test]
fn matmul_matches_reference() {
    let s = stream();
    let mut rng = Rng::new(1);
    let (m, k, n) = (17, 33, 9);
    let (a, b) = (rng.vec(m * k), rng.vec(k * n));
    let product = ops::matmul(
        &array(&a, &[m as i64, k as i64]),
        &array(&b, &[k as i64, n as i64]),
        &s,
    )
    .unwrap();
    assert_eq!(product.shape(), vec![m as i64, n as i64]);
    assert_close(
        &product.to_vec::<f32>(&s).unwrap(),
        &matmul_ref(&a, &b, m, k, n),
        1e-5,
    );
}

#[test]
fn transposed_views_copy_out_row_major() {
    let s = stream();
    let a = array(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let t = ops::transpose(&a, &[1, 0], &s).unwrap();
    assert_eq!(t.shape(), vec![3, 2]);
    assert_eq!(
        t.to_vec::<f32>(&s).unwrap(),
        vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]
    );
    let wide = ops::broadcast_to(&array(&[7.0, 8.0], &[2, 1]), &[2, 3], &s).unwrap();
    assert_eq!(
        wide.to_vec::<f32>(&s).unwrap(),
        vec![7.0, 7.0, 7.0, 8.0, 8.0, 8.0]
    );
}

/// softmax(q kᵀ scale + mask) v for one head, `[seq, dim]` row-major.
fn attention_ref(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    lq: usize,
    lk: usize,
    d: usize,
    causal: bool,
) -> Vec<f32> {
    let scale = 1.0 / (d as f32).sqrt();
    let mut out = vec![0f32; lq * d];
    for i in 0..lq {
        let visible = |j: usize| !causal || j + lq <= i + lk;
        let scores: Vec<f32> = (0..lk)
            .map(|j| {
                if visible(j) {
                    (0..d).map(|x| q[i * d + x] * k[j * d + x]).sum::<f32>() * scale
                } else {
                    f32::NEG_INFINITY
                }
            })
            .collect();
        let max = scores.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        let weights: Vec<f32> = scores.iter().map(|s| (s - max).exp()).collect();
        let total: f32 = weights.iter().sum();
        for j in 0..lk {
            for x in 0..d {
                out[i * d + x] += weights[j] / total * v[j * d + x];
            }
        }
    }
    out
}

#[test]
fn fast_sdpa_with_and_without_causal_mask() {
    let s = stream();
    let mut rng = Rng::new(2);
    let (lq, lk, d) = (5, 7, 16);
    let (q, k, v) = (rng.vec(lq * d), rng.vec(lk * d), rng.vec(lk * d));
    let shape = |l: usize| [1i64, 1, l as i64, d as i64];
    let (qa, ka, va) = (
        array(&q, &shape(lq)),
        array(&k, &shape(lk)),
        array(&v, &shape(lk)),
    );
    let scale = 1.0 / (d as f32).sqrt();
    for (mask, causal) in [(AttentionMask::None, false), (AttentionMask::Causal, true)] {
        let out = ops::scaled_dot_product_attention(&qa, &ka, &va, scale, mask, &s).unwrap();
        assert_eq!(out.shape(), shape(lq).to_vec());
        assert_close(
            &out.to_vec::<f32>(&s).unwrap(),
            &attention_ref(&q, &k, &v, lq, lk, d, causal),
            1e-5,
        );
    }
}

#[test]
fn fast_rms_norm_matches_reference() {
    let s = stream();
    let mut rng = Rng::new(3);
    let (rows, d) = (4, 32);
    let (x, w) = (rng.vec(rows * d), rng.vec(d));
    let eps = 1e-5;
    let out = ops::rms_norm(
        &array(&x, &[rows as i64, d as i64]),
        Some(&array(&w, &[d as i64])),
        eps,
        &s,
    )
    .unwrap();
    let expected: Vec<f32> = x
        .chunks(d)
        .flat_map(|row| {
            let rms = (row.iter().map(|v| v * v).sum::<f32>() / d as f32 + eps).sqrt();
            row.iter()
                .zip(&w)
                .map(move |(v, g)| v / rms * g)
                .collect::<Vec<_>>()
        })
        .collect();
    assert_close(&out.to_vec::<f32>(&s).unwrap(), &expected, 1e-5);
}

#[test]
fn four_bit_quantized_matmul() {
    let s = stream();
    let mut rng = Rng::new(4);
    let (m, k, n, group) = (3, 128, 8, 64);
    let x = rng.vec(m * k);
    let w = rng.vec(n * k); // [n, k]: quantised along k, used transposed
    let wq = ops::quantize(&array(&w, &[n as i64, k as i64]), group, 4, &s).unwrap();
    assert_eq!(wq.weight.dtype(), Dtype::U32);
    assert_eq!(wq.weight.shape(), vec![n as i64, (k / 8) as i64]); // eight 4-bit values per u32
    let xa = array(&x, &[m as i64, k as i64]);
    let out = ops::quantized_matmul(&xa, &wq, true, &s)
        .unwrap()
        .to_vec::<f32>(&s)
        .unwrap();

    // Exactly the product with the dequantised weight...
    let wd = ops::dequantize(&wq, &s).unwrap().to_vec::<f32>(&s).unwrap();
    let wd_t: Vec<f32> = (0..k)
        .flat_map(|p| (0..n).map(move |j| (p, j)))
        .map(|(p, j)| wd[j * k + p])
        .collect();
    assert_close(&out, &matmul_ref(&x, &wd_t, m, k, n), 1e-4);
    // ...and close to the float product: 4 bits over a [-1, 1) range is a step of ~0.13.
    let w_t: Vec<f32> = (0..k)
        .flat_map(|p| (0..n).map(move |j| (p, j)))
        .map(|(p, j)| w[j * k + p])
        .collect();
    let exact = matmul_ref(&x, &w_t, m, k, n);
    let worst = out
        .iter()
        .zip(&exact)
        .map(|(a, e)| (a - e).abs())
        .fold(0.0, f32::max);
    assert!(worst < 0.5, "4-bit matmul drifted by {worst}");
    // Each value lands within one quantisation step of its group's range (MLX shifts the grid
    // so that zero is exactly representable, so the error can exceed half a step).
    for (orig, deq) in w.chunks(group as usize).zip(wd.chunks(group as usize)) {
        let (lo, hi) = orig
            .iter()
            .fold((f32::MAX, f32::MIN), |(l, h), v| (l.min(*v), h.max(*v)));
        let step = (hi - lo) / 15.0;
        for (o, d) in orig.iter().zip(deq) {
            assert!(
                (o - d).abs() <= step * 1.01,
                "{o} dequantised to {d} (step {step})"
            );
        }
    }
}

#[test]
fn fp16_and_bf16_round_trip_through_host_bytes() {
    let s = stream();
    // 1.0, -2.5, 65504 (max f16), smallest subnormal, NaN, -0.0 as IEEE half bits.
    let half_bits: [u16; 6] = [0x3C00, 0xC100, 0x7BFF, 0x0001, 0x7E00, 0x8000];
    // 1.0, -2.5, 3.389e38 (max bf16), NaN, -0.0 as bfloat16 bits.
    let bf16_bits: [u16; 5] = [0x3F80, 0xC020, 0x7F7F, 0x7FC0, 0x8000];
    for (dtype, bits, as_f32) in [
        (
            Dtype::F16,
            &half_bits[..],
            vec![1.0f32, -2.5, 65504.0, 5.960_464_5e-8],
        ),
        (
            Dtype::BF16,
            &bf16_bits[..],
            vec![1.0f32, -2.5, 3.389_531_4e38],
        ),
    ] {
        let bytes: Vec<u8> = bits.iter().flat_map(|b| b.to_ne_bytes()).collect();
        let a = Array::from_bytes(&bytes, &[bits.len() as i64], dtype).unwrap();
        assert_eq!(a.dtype(), dtype);
        assert_eq!(
            a.to_bytes(&s).unwrap(),
            bytes,
            "{dtype:?} bytes changed on the round trip"
        );
        // MLX sees real values, not just bits.
        let widened = ops::astype(&a, Dtype::F32, &s)
            .unwrap()
            .to_vec::<f32>(&s)
            .unwrap();
        assert_eq!(&widened[..as_f32.len()], &as_f32[..], "{dtype:?} values");
        // And f32 -> half -> bits is MLX's own rounding of the same values.
        let narrowed = ops::astype(&array(&as_f32, &[as_f32.len() as i64]), dtype, &s).unwrap();
        assert_eq!(
            narrowed.to_bytes(&s).unwrap(),
            bytes[..as_f32.len() * 2].to_vec()
        );
    }
}

#[test]
fn zero_size_and_scalar_arrays() {
    let s = stream();
    let empty = Array::from_slice::<f32>(&[], &[0, 3]).unwrap();
    let sum = ops::add(&empty, &array(&[1.0, 2.0, 3.0], &[3]), &s).unwrap();
    assert_eq!(sum.shape(), vec![0, 3]);
    assert!(sum.to_bytes(&s).unwrap().is_empty());
    let scalar = Array::scalar(7i64).unwrap();
    assert_eq!(scalar.shape(), Vec::<i64>::new());
    assert_eq!(scalar.to_vec::<i64>(&s).unwrap(), vec![7]);
}

/// `values` of shape `dims` reduced over axis `k` by `f`, on the host.
fn host_reduce(values: &[f32], dims: &[i64], k: usize, f: fn(f32, f32) -> f32) -> Vec<f32> {
    let (outer, extent) = (dims[..k].iter().product::<i64>(), dims[k]);
    let inner: i64 = dims[k + 1..].iter().product();
    let mut out = Vec::new();
    for o in 0..outer {
        for i in 0..inner {
            let at = |e: i64| values[((o * extent + e) * inner + i) as usize];
            out.push((1..extent).fold(at(0), |acc, e| f(acc, at(e))));
        }
    }
    out
}

#[test]
fn reductions_over_short_axes_are_folded_to_the_same_values() {
    // Axes of 2..=8 elements are folded over slices; 9 takes MLX's reduction: both checked.
    let s = stream();
    let mut rng = Rng::new(7);
    for extent in [2i64, 3, 8, 9] {
        let dims = [extent, 5, extent];
        let values = rng.vec(dims.iter().product::<i64>() as usize);
        let x = array(&values, &dims);
        for axis in [0i32, 1, 2, -1] {
            let k = axis.rem_euclid(3) as usize;
            for keep in [false, true] {
                let mut shape = dims.to_vec();
                if keep {
                    shape[k] = 1;
                } else {
                    shape.remove(k);
                }
                type Reduce = fn(&Array, &[i32], bool, &Stream) -> mlx_kernels::Result<Array>;
                type Reference = fn(f32, f32) -> f32;
                let cases: [(Reduce, Reference, f32); 4] = [
                    (ops::sum, |a, b| a + b, 1e-5),
                    (ops::max, f32::max, 0.0),
                    (ops::min, f32::min, 0.0),
                    (ops::prod, |a, b| a * b, 1e-5),
                ];
                for (reduce, f, tolerance) in cases {
                    let got = reduce(&x, &[axis], keep, &s).unwrap();
                    assert_eq!(got.shape(), shape, "extent {extent}, axis {axis}");
                    assert_close(
                        &got.to_vec::<f32>(&s).unwrap(),
                        &host_reduce(&values, &dims, k, f),
                        tolerance,
                    );
                }
            }
        }
    }
    // float16 sums accumulate in float32 (no overflow on the way), as MLX's reduction does.
    let halves = ops::astype(&array(&[6e4, 6e4, -6e4], &[3]), Dtype::F16, &s).unwrap();
    let sum = ops::sum(&halves, &[0], false, &s).unwrap();
    assert_eq!(sum.dtype(), Dtype::F16);
    let sum = ops::astype(&sum, Dtype::F32, &s).unwrap();
    assert_eq!(sum.to_vec::<f32>(&s).unwrap(), vec![6e4]);
    // uint8 sums widen to uint32 first, as MLX's reduction does.
    let bytes = ops::astype(&array(&[200.0, 100.0], &[1, 2]), Dtype::U8, &s).unwrap();
    let sum = ops::sum(&bytes, &[1], false, &s).unwrap();
    assert_eq!(sum.dtype(), Dtype::U32);
    assert_eq!(sum.to_vec::<u32>(&s).unwrap(), vec![300]);
}
