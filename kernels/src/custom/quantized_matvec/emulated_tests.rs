//! The quantized matrix-vector body runs in the host emulator (`custom/emulator`) against a
//! float64 reference of MatMulNBits' 4-bit packing.

use super::super::emulator::{assert_near, emulate, rounded, values};
use super::super::Backend;
use super::quantized_matvec;
use crate::{ops, Array, Dtype, Stream};

#[test]
fn the_body_multiplies_like_the_reference() {
    let cpu = Stream::cpu().unwrap();
    // Five columns (the last warp of the second block has none), two blocks along K, 3 rows.
    let (m, k, n, block) = (3i64, 128i64, 5i64, 64i64);
    for dtype in [Dtype::F16, Dtype::F32] {
        let (x, x_values) = rounded(&values(5, (m * k) as usize), &[m, k], dtype, &cpu);
        let bytes: Vec<u8> = values(6, (n * k / 2) as usize)
            .iter()
            .map(|v| ((v + 2.0) * 63.99) as u8)
            .collect();
        let packed = Array::from_slice(&bytes, &[n, k / 2]).unwrap();
        let (scales, scale_values) = rounded(
            &values(7, (n * k / block) as usize),
            &[n, k / block],
            dtype,
            &cpu,
        );
        let out = emulate(Backend::Cuda, || {
            quantized_matvec(&x, &packed, &scales, n, block, &cpu)
        })
        .unwrap();
        let got = ops::astype(&out, Dtype::F32, &cpu)
            .unwrap()
            .to_vec::<f32>(&cpu)
            .unwrap();
        for row in 0..m {
            for column in 0..n {
                let want: f64 = (0..k)
                    .map(|i| {
                        let byte = bytes[(column * k / 2 + i / 2) as usize];
                        let q = f64::from((byte >> (4 * (i % 2))) & 0xF) - 8.0;
                        let scale =
                            f64::from(scale_values[(column * (k / block) + i / block) as usize]);
                        q * scale * f64::from(x_values[(row * k + i) as usize])
                    })
                    .sum();
                let found = f64::from(got[(row * n + column) as usize]);
                let tolerance = if dtype == Dtype::F16 { 2e-3 } else { 1e-5 };
                assert_near(found, want, tolerance, || {
                    format!("{dtype:?} row {row} column {column}")
                });
            }
        }
    }
}
