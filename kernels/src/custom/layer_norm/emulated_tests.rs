//! The layer-norm body runs in the host emulator (`custom/emulator`) against a float64
//! reference, for pairs of input and output types, with and without a bias; the norm of a
//! residual sum against MLX's add and the plain body, bit for bit.

use super::super::emulator::{assert_near, emulate, rounded, values};
use super::super::Backend;
use super::{layer_norm, layer_norm_of_sum};
use crate::{ops, Array, Dtype, KernelChoice, Stream};

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
    // A width past one element a thread, not a multiple of the block; an offset mean, so a
    // one-pass variance would cancel.
    let (rows, width, epsilon) = (3i64, 320i64, 1e-5f32);
    let weight_values = values(9, width as usize);
    let bias_values = values(10, width as usize);
    let weight = Array::from_slice(&weight_values, &[width]).unwrap();
    let bias = Array::from_slice(&bias_values, &[width]).unwrap();
    let offset: Vec<f32> = values(8, (rows * width) as usize)
        .iter()
        .map(|v| v + 20.0)
        .collect();
    for (input, output, with_bias) in [
        (Dtype::F16, Dtype::F16, true),
        (Dtype::F32, Dtype::F16, false),
        (Dtype::F16, Dtype::F32, true),
        (Dtype::F32, Dtype::F32, true),
        (Dtype::BF16, Dtype::BF16, true),
    ] {
        let (x, x_values) = rounded(&offset, &[rows, width], input, &cpu);
        let out = emulate(dialect, || {
            layer_norm(
                &x,
                &weight,
                with_bias.then_some(&bias),
                epsilon,
                output,
                &cpu,
            )
        })
        .unwrap();
        assert_eq!(out.dtype(), output);
        let got = ops::astype(&out, Dtype::F32, &cpu)
            .unwrap()
            .to_vec::<f32>(&cpu)
            .unwrap();
        let tolerance = match output {
            Dtype::F32 => 1e-5,
            Dtype::F16 => 2e-3,
            _ => 1e-2,
        };
        for r in 0..rows as usize {
            let row = &x_values[r * width as usize..][..width as usize];
            let mean = row.iter().map(|v| f64::from(*v)).sum::<f64>() / width as f64;
            let variance = row
                .iter()
                .map(|v| (f64::from(*v) - mean).powi(2))
                .sum::<f64>()
                / width as f64;
            let inverse = 1.0 / (variance + f64::from(epsilon)).sqrt();
            for (i, v) in row.iter().enumerate() {
                let shift = if with_bias {
                    f64::from(bias_values[i])
                } else {
                    0.0
                };
                let want = (f64::from(*v) - mean) * inverse * f64::from(weight_values[i]) + shift;
                let found = f64::from(got[r * width as usize + i]);
                assert_near(found, want, tolerance, || {
                    format!("{dialect:?}, {input:?} to {output:?} (bias {with_bias}), row {r} element {i}")
                });
            }
        }
    }
}

#[test]
fn the_norm_of_a_sum_is_the_norm_of_mlx_s_add() {
    norm_of_a_sum_is_the_norm_of_mlx_s_add(Backend::Cuda);
}

#[test]
fn the_metal_twins_norm_of_a_sum_is_the_norm_of_mlx_s_add() {
    norm_of_a_sum_is_the_norm_of_mlx_s_add(Backend::Metal);
}

fn norm_of_a_sum_is_the_norm_of_mlx_s_add(dialect: Backend) {
    let cpu = Stream::cpu().unwrap();
    let (rows, width, epsilon) = (3i64, 300i64, 1e-5f32);
    let weight = Array::from_slice(&values(9, width as usize), &[width]).unwrap();
    let bias = Array::from_slice(&values(10, width as usize), &[width]).unwrap();
    let n = (rows * width) as usize;
    // Magnitudes far apart, so that the sums round (within float16's range).
    let x_values: Vec<f32> = values(11, n).iter().map(|v| v * 1e4).collect();
    let r_values: Vec<f32> = values(12, n).iter().map(|v| v * v * v * 4e3).collect();
    for (input, output, keep_sum) in [
        (Dtype::F16, Dtype::F16, true),
        (Dtype::F16, Dtype::F16, false),
        (Dtype::BF16, Dtype::BF16, true),
        (Dtype::F32, Dtype::F32, true),
        (Dtype::F32, Dtype::F16, false),
    ] {
        let (x, _) = rounded(&x_values, &[rows, width], input, &cpu);
        let (residual, _) = rounded(&r_values, &[rows, width], input, &cpu);
        let added = ops::add(&x, &residual, &cpu).unwrap();
        let (fused, plain) = emulate(dialect, || {
            let fused = layer_norm_of_sum(
                (&x, &residual),
                &weight,
                Some(&bias),
                epsilon,
                output,
                keep_sum,
                &cpu,
            );
            let plain = layer_norm(&added, &weight, Some(&bias), epsilon, output, &cpu);
            (fused.unwrap(), plain.unwrap())
        });
        let (out, sum) = fused;
        let bytes = |a: &Array| a.to_bytes(&cpu).unwrap();
        assert_eq!(sum.is_some(), keep_sum, "{input:?}");
        if let Some(sum) = &sum {
            assert_eq!((sum.shape(), sum.dtype()), (added.shape(), input));
            assert_eq!(
                bytes(sum),
                bytes(&added),
                "{dialect:?}, {input:?}: the sum, bit for bit"
            );
        }
        assert_eq!(out.dtype(), output);
        assert_eq!(
            bytes(&out),
            bytes(&plain),
            "{dialect:?}, {input:?} to {output:?}: the norm"
        );
    }
    let other = Array::from_slice(&[1.0f32; 4], &[4]).unwrap();
    let x = Array::from_slice(&[1.0f32; 8], &[2, 4]).unwrap();
    let refused = emulate(Backend::Cuda, || {
        layer_norm_of_sum((&x, &other), &other, None, 1e-5, Dtype::F32, true, &cpu)
    });
    assert!(refused.unwrap_err().to_string().contains("residual"));
}

#[test]
fn operands_that_do_not_fit_are_refused() {
    let cpu = Stream::cpu().unwrap();
    let x = Array::from_slice(&[1.0f32; 8], &[2, 4]).unwrap();
    let narrow = Array::from_slice(&[1.0f32; 3], &[3]).unwrap();
    let half_weight = ops::astype(
        &Array::from_slice(&[1.0f32; 4], &[4]).unwrap(),
        Dtype::F16,
        &cpu,
    )
    .unwrap();
    for weight in [&narrow, &half_weight] {
        let refused = emulate(Backend::Cuda, || {
            layer_norm(&x, weight, None, 1e-5, Dtype::F32, &cpu)
        });
        assert!(refused.is_err());
    }
}

#[test]
fn it_runs_where_the_streams_kernel_choice_allows() {
    let runs =
        |backend: Backend, stream: &Stream| emulate(backend, || super::layer_norm_runs_on(stream));
    let choose = |hand_written: bool, metal_twins: bool| {
        Stream::cpu().unwrap().with_kernels(KernelChoice {
            hand_written,
            metal_twins,
        })
    };
    let default = Stream::cpu().unwrap();
    assert!(runs(Backend::Cuda, &default));
    // The Metal twins wait for the stream's `metal_twins` (off by default).
    assert!(!runs(Backend::Metal, &default));
    let twins = choose(true, true);
    let none = choose(false, true);
    assert!(runs(Backend::Metal, &twins));
    // Hand-written work off turns the twins off with the rest; each handle keeps its own.
    assert!(!runs(Backend::Cuda, &none));
    assert!(!runs(Backend::Metal, &none));
    assert!(runs(Backend::Metal, &twins) && runs(Backend::Cuda, &default));
}

#[test]
fn the_metal_twins_keep_the_cuda_algorithm() {
    for (cuda, metal) in [
        (
            concat!(
                include_str!("../row_of_x.cu"),
                include_str!("../per_row.cu")
            ),
            concat!(
                include_str!("../row_of_x.metal"),
                include_str!("../per_row.metal")
            ),
        ),
        (
            include_str!("row_of_sum.cu"),
            include_str!("row_of_sum.metal"),
        ),
        (
            include_str!("layer_norm.cu"),
            include_str!("layer_norm.metal"),
        ),
        (
            include_str!("../rms_norm/rms_norm.cu"),
            include_str!("../rms_norm/rms_norm.metal"),
        ),
    ] {
        super::super::assert_twins(cuda, metal);
    }
}
