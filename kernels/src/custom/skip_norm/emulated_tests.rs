//! The skip norms run in the host emulator (`custom/emulator`) in both dialects against the
//! composed path they replace, bit for bit: the float32 sum by MLX's ops, then the plain norm
//! kernel on it and MLX's cast of it. Skip rows as x's, as one sequence's, and ORT's modulo
//! case; with and without a skip bias and a kept sum.

use super::super::emulator::{check_cases_in_both_dialects, emulate, rounded, values};
use super::super::{assert_twins, layer_norm, rms_norm, Backend};
use super::{norm_of_skip_sum, SkipNorm};
use crate::error::Result;
use crate::{ops, Array, Dtype, Stream};

struct Case {
    rms: bool,
    input: Dtype,
    output: Dtype,
    /// x `[batch, sequence, width]`, skip with `skip_batch` of them (0: `[sequence, width]`).
    batch: i64,
    skip_batch: i64,
    sequence: i64,
    width: i64,
    skip_bias: bool,
    layer_bias: bool,
    keep_sum: bool,
}

const CASES: [Case; 7] = [
    // An LLM's decode step: one token, float16, the sum kept for the next layer.
    Case {
        rms: true,
        input: Dtype::F16,
        output: Dtype::F16,
        batch: 1,
        skip_batch: 1,
        sequence: 1,
        width: 2048,
        skip_bias: false,
        layer_bias: false,
        keep_sum: true,
    },
    Case {
        rms: true,
        input: Dtype::F32,
        output: Dtype::F32,
        batch: 2,
        skip_batch: 0,
        sequence: 3,
        width: 33,
        skip_bias: true,
        layer_bias: false,
        keep_sum: false,
    },
    Case {
        rms: true,
        input: Dtype::F16,
        output: Dtype::F16,
        batch: 4,
        skip_batch: 2,
        sequence: 2,
        width: 300,
        skip_bias: true,
        layer_bias: false,
        keep_sum: true,
    },
    Case {
        rms: false,
        input: Dtype::F16,
        output: Dtype::F16,
        batch: 2,
        skip_batch: 2,
        sequence: 3,
        width: 768,
        skip_bias: true,
        layer_bias: true,
        keep_sum: true,
    },
    Case {
        rms: false,
        input: Dtype::BF16,
        output: Dtype::BF16,
        batch: 3,
        skip_batch: 1,
        sequence: 2,
        width: 257,
        skip_bias: false,
        layer_bias: true,
        keep_sum: true,
    },
    Case {
        rms: false,
        input: Dtype::F32,
        output: Dtype::F32,
        batch: 1,
        skip_batch: 0,
        sequence: 4,
        width: 5,
        skip_bias: false,
        layer_bias: false,
        keep_sum: false,
    },
    Case {
        rms: false,
        input: Dtype::F32,
        output: Dtype::F16,
        batch: 4,
        skip_batch: 2,
        sequence: 1,
        width: 64,
        skip_bias: true,
        layer_bias: true,
        keep_sum: true,
    },
];

#[test]
fn the_norm_of_a_skip_sum_is_the_composed_norm_bit_for_bit() {
    check_cases_in_both_dialects(&CASES, 40, check);
}

fn check(case: &Case, seed: u64) -> Result<()> {
    let cpu = Stream::cpu()?;
    let (b, s, h) = (case.batch, case.sequence, case.width);
    let skip_shape = match case.skip_batch {
        0 => vec![s, h],
        n => vec![n, s, h],
    };
    let skip_len = skip_shape.iter().product::<i64>() as usize;
    let n = (b * s * h) as usize;
    // Magnitudes far apart, so that the float32 sums round when they leave as the input type.
    let x_values: Vec<f32> = values(seed, n).iter().map(|v| v * 300.0).collect();
    let skip_values: Vec<f32> = values(seed + 100, skip_len)
        .iter()
        .map(|v| v * v * v)
        .collect();
    let (x, _) = rounded(&x_values, &[b, s, h], case.input, &cpu);
    let (skip, skip_rounded) = rounded(&skip_values, &skip_shape, case.input, &cpu);
    let parameter = |seed: u64| Array::from_slice(&values(seed, h as usize), &[h]);
    let (weight, skip_bias, layer_bias) = (
        parameter(seed + 1)?,
        parameter(seed + 2)?,
        parameter(seed + 3)?,
    );
    let skip_bias = case.skip_bias.then_some(&skip_bias);
    let layer_bias = case.layer_bias.then_some(&layer_bias);
    // The composed path: skip element i % skip's size for x's element i, added in float32.
    let expanded: Vec<f32> = (0..n).map(|i| skip_rounded[i % skip_len]).collect();
    let (skip_wide, _) = rounded(&expanded, &[b, s, h], Dtype::F32, &cpu);
    let mut sum = ops::add(&ops::astype(&x, Dtype::F32, &cpu)?, &skip_wide, &cpu)?;
    if let Some(bias) = skip_bias {
        sum = ops::add(&sum, bias, &cpu)?;
    }
    let epsilon = 1e-5;
    let norm = match case.rms {
        true => SkipNorm::Rms,
        false => SkipNorm::Layer { bias: layer_bias },
    };
    // Run inside the emulated dialect of `check_cases_in_both_dialects`.
    let (out, kept) = norm_of_skip_sum(
        norm,
        (&x, &skip, skip_bias),
        &weight,
        epsilon,
        case.output,
        case.keep_sum,
        &cpu,
    )?;
    let composed = match case.rms {
        true => rms_norm(&sum, &weight, epsilon, case.output, &cpu)?,
        false => layer_norm(&sum, &weight, layer_bias, epsilon, case.output, &cpu)?,
    };
    let bytes = |a: &Array| a.to_bytes(&cpu);
    assert_eq!((out.shape(), out.dtype()), (x.shape(), case.output));
    assert_eq!(bytes(&out)?, bytes(&composed)?, "the norm");
    assert_eq!(kept.is_some(), case.keep_sum);
    if let Some(kept) = kept {
        assert_eq!((kept.shape(), kept.dtype()), (x.shape(), case.input));
        assert_eq!(
            bytes(&kept)?,
            bytes(&ops::astype(&sum, case.input, &cpu)?)?,
            "the sum"
        );
    }
    Ok(())
}

#[test]
fn operands_that_do_not_fit_are_refused() {
    let cpu = Stream::cpu().unwrap();
    let x = Array::from_slice(&[1.0f32; 8], &[2, 4]).unwrap();
    let weight = Array::from_slice(&[1.0f32; 4], &[4]).unwrap();
    let narrow_skip = Array::from_slice(&[1.0f32; 6], &[2, 3]).unwrap();
    let half_skip = ops::astype(&x, Dtype::F16, &cpu).unwrap();
    let narrow = Array::from_slice(&[1.0f32; 3], &[3]).unwrap();
    for (skip, skip_bias) in [
        (&narrow_skip, None),
        (&half_skip, None),
        (&x, Some(&narrow)),
    ] {
        let refused = emulate(Backend::Cuda, || {
            norm_of_skip_sum(
                SkipNorm::Rms,
                (&x, skip, skip_bias),
                &weight,
                1e-5,
                Dtype::F32,
                true,
                &cpu,
            )
        });
        assert!(refused.unwrap_err().to_string().contains("do not fit"));
    }
}

#[test]
fn the_metal_twin_of_the_loader_keeps_the_cuda_algorithm() {
    assert_twins(
        include_str!("row_of_skip_sum.cu"),
        include_str!("row_of_skip_sum.metal"),
    );
}
