//! The RMS-norm body runs in the host emulator (`custom/emulator`) against a float64
//! reference, for each pair of input and output types.

use super::super::emulator::{assert_near, emulate, rounded, values};
use super::super::Backend;
use super::rms_norm;
use crate::{ops, Array, Dtype, Stream};

#[test]
fn the_body_normalises_like_the_reference() {
    normalises_like_the_reference(Backend::Cuda);
}

#[test]
fn the_metal_twin_normalises_like_the_reference() {
    normalises_like_the_reference(Backend::Metal);
}

fn normalises_like_the_reference(dialect: Backend) {
    let cpu = Stream::cpu().unwrap();
    let (rows, width, epsilon) = (3i64, 320i64, 1e-5f32);
    let weight_values = values(9, width as usize);
    let weight = Array::from_slice(&weight_values, &[width]).unwrap();
    for (input, output) in [
        (Dtype::F16, Dtype::F16),
        (Dtype::F32, Dtype::F16),
        (Dtype::F16, Dtype::F32),
        (Dtype::F32, Dtype::F32),
    ] {
        let (x, x_values) = rounded(
            &values(8, (rows * width) as usize),
            &[rows, width],
            input,
            &cpu,
        );
        let out = emulate(dialect, || rms_norm(&x, &weight, epsilon, output, &cpu)).unwrap();
        assert_eq!(out.dtype(), output);
        let got = ops::astype(&out, Dtype::F32, &cpu)
            .unwrap()
            .to_vec::<f32>(&cpu)
            .unwrap();
        for r in 0..rows as usize {
            let row = &x_values[r * width as usize..][..width as usize];
            let mean_square = row.iter().map(|v| f64::from(*v).powi(2)).sum::<f64>() / width as f64;
            let inverse = 1.0 / (mean_square + f64::from(epsilon)).sqrt();
            for (i, v) in row.iter().enumerate() {
                let want = f64::from(*v) * inverse * f64::from(weight_values[i]);
                let found = f64::from(got[r * width as usize + i]);
                let tolerance = if output == Dtype::F16 { 2e-3 } else { 1e-5 };
                assert_near(found, want, tolerance, || {
                    format!("{input:?} to {output:?}, row {r} element {i}")
                });
            }
        }
    }
}
