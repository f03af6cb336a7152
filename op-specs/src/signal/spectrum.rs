//! The discrete Fourier transform DFT and STFT share, over axis -2 of ONNX's layout for signals
//! (`[..., samples, components]`, one component for a real signal, two for real and imaginary).
//!
//! Two ways to compute it, chosen by size:
//! - **A dense matrix product** (the usual case: audio frames, small DFTs): the transform is
//!   linear in the input's components, so one `[samples·components, bins·2]` matrix of
//!   `cos`/`sin` values turns a row of input into a row of output in one matmul, on any device,
//!   with no complex dtype. Each entry is `cos`/`sin` of `2π · (k·n mod N) / N`: the product
//!   reduced exactly in integers, the N values of the unit circle computed once in float64.
//! - **MLX's FFT** when that matrix would exceed [`DENSE_MATRIX_BYTES`] (long signals). MLX's CUDA
//!   backend has no FFT kernel, so it runs on MLX's CPU stream on every device; the result joins
//!   the graph like any array.

use std::cell::RefCell;

use mlx_kernels::{ops, Array, Dtype, Stream};

use crate::table::consts::{scalar, zeros};
use crate::{OpError, Result};

/// Above this many bytes of matrix the dense product gives way to the FFT (32 MiB: a real
/// signal's one-sided transform of about 2,900 samples).
const DENSE_MATRIX_BYTES: i64 = 32 << 20;

/// What a transform returns along the signal axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bins {
    /// All `length` bins, complex.
    All,
    /// The first `length / 2 + 1` bins, complex (an RFFT when the input is real).
    OneSided,
    /// An IRFFT: the real signal of `length` samples whose spectrum is Hermitian and begins with
    /// the input's `length / 2 + 1` bins (fewer are zero-padded, more are ignored).
    RealSignal,
}

#[derive(Debug, Clone, Copy)]
pub struct Transform {
    /// The transform's length `N`: the input is zero-padded or truncated to it.
    pub length: i64,
    /// `e^{+2πi kn/N} / N` instead of `e^{-2πi kn/N}`.
    pub inverse: bool,
    pub bins: Bins,
}

impl Transform {
    /// How many input samples (bins, for an IRFFT) the transform reads of the `available` ones.
    fn samples_read(&self, available: i64) -> i64 {
        match self.bins {
            Bins::RealSignal => available.min(self.length / 2 + 1),
            Bins::All | Bins::OneSided => available.min(self.length),
        }
    }

    /// The output's length along the signal axis and its components.
    fn output(&self) -> (i64, i64) {
        match self.bins {
            Bins::All => (self.length, 2),
            Bins::OneSided => (self.length / 2 + 1, 2),
            Bins::RealSignal => (self.length, 1),
        }
    }

    /// The float32 bytes of the dense matrix for `read` samples of `components` each.
    fn matrix_bytes(&self, read: i64, components: i64) -> i64 {
        let (bins, out_components) = self.output();
        read * components * bins * out_components * 4
    }
}

/// Matrices of at most this many bytes are kept between runs ([`KeptMatrices`]).
const KEPT_MATRIX_BYTES: i64 = 8 << 20;

/// How many matrices one node keeps (a signal whose length varies needs one per read length).
const KEPT_MATRICES: usize = 2;

/// What shapes a dense matrix: the transform, the samples read, the input's components.
type MatrixKey = (i64, bool, Bins, i64, i64);

/// A node's dense matrices, evaluated, kept across a plan's runs (`Lower::kept`): they depend
/// on sizes alone, so a compiled trace captures one as a constant instead of rebuilding it
/// (a dozen small kernels) at every replay. The oldest gives way past [`KEPT_MATRICES`].
#[derive(Default)]
pub struct KeptMatrices(RefCell<Vec<(MatrixKey, Array)>>);

impl KeptMatrices {
    fn matrix(&self, t: &Transform, read: i64, components: i64, s: &Stream) -> Result<Array> {
        let key = (t.length, t.inverse, t.bins, read, components);
        if let Some((_, found)) = self.0.borrow().iter().find(|(k, _)| *k == key) {
            return Ok(found.clone());
        }
        let matrix = dense_matrix(t, read, components, s)?;
        if t.matrix_bytes(read, components) <= KEPT_MATRIX_BYTES {
            Array::eval_all(std::slice::from_ref(&matrix))?;
            let mut kept = self.0.borrow_mut();
            if kept.len() == KEPT_MATRICES {
                kept.remove(0);
            }
            kept.push((key, matrix.clone()));
        }
        Ok(matrix)
    }
}

/// `x` (`[..., samples, 1 or 2]`, float32) transformed along axis -2, each sample first
/// multiplied by `window` (1-D, at least as long as the samples read) when one is given.
pub fn transform(
    x: &Array,
    t: &Transform,
    window: Option<&Array>,
    kept: &KeptMatrices,
    s: &Stream,
) -> Result<Array> {
    transform_within(x, t, window, kept, DENSE_MATRIX_BYTES, s)
}

/// [`transform`] with the dense matrix limited to `dense_bytes`.
fn transform_within(
    x: &Array,
    t: &Transform,
    window: Option<&Array>,
    kept: &KeptMatrices,
    dense_bytes: i64,
    s: &Stream,
) -> Result<Array> {
    let dims = x.shape();
    let rank = dims.len();
    if rank < 2 || !matches!(dims[rank - 1], 1 | 2) {
        return Err(OpError::new(format!(
            "the signal's last axis must hold 1 (real) or 2 (real, imaginary) components, not \
             shape {dims:?}"
        )));
    }
    if t.length < 1 || t.length > i64::from(i32::MAX) {
        return Err(OpError::new(format!(
            "the transform's length {} is outside 1..=2^31-1",
            t.length
        )));
    }
    let components = dims[rank - 1];
    let read = t.samples_read(dims[rank - 2]);
    let x = leading(x, rank - 2, read, s)?;
    // The window as a `[read, 1]` column: it scales each sample's components alike.
    let window = window
        .map(|w| -> Result<Array> { Ok(ops::reshape(&leading(w, 0, read, s)?, &[read, 1], s)?) })
        .transpose()?;
    let windowed = |x: &Array| -> Result<Array> {
        Ok(match &window {
            Some(w) => ops::multiply(x, w, s)?,
            None => x.clone(),
        })
    };
    let (bins, out_components) = t.output();
    let matrix_bytes = t.matrix_bytes(read, components);
    let batch = &dims[..rank - 2];
    let rows: i64 = batch.iter().product();
    let shape: Vec<i64> = batch
        .iter()
        .copied()
        .chain([bins, out_components])
        .collect();
    if rows == 0 || read == 0 {
        // No signal, or no samples to read: zeros, without the (length-sized) twiddles.
        return zeros(&shape, x.dtype(), s);
    }
    let y = if matrix_bytes <= dense_bytes {
        let matrix = kept.matrix(t, read, components, s)?;
        let columns = bins * out_components;
        // The window scales the matrix's rows instead of the signal's samples when the matrix
        // is the smaller of the two (an STFT's many frames): one pass over the frames less.
        let (x, matrix) = if rows > columns {
            let by_sample = ops::reshape(&matrix, &[read, components * columns], s)?;
            let scaled = ops::reshape(&windowed(&by_sample)?, &[read * components, columns], s)?;
            (x, scaled)
        } else {
            (windowed(&x)?, matrix)
        };
        ops::matmul(
            &ops::reshape(&x, &[rows, read * components], s)?,
            &matrix,
            s,
        )?
    } else {
        by_fft(&windowed(&x)?, t, components == 2)?
    };
    Ok(ops::reshape(&y, &shape, s)?)
}

/// The first `count` entries of `a` along `axis` (all of them when it has no more).
fn leading(a: &Array, axis: usize, count: i64, s: &Stream) -> Result<Array> {
    let dims = a.shape();
    if dims[axis] <= count {
        return Ok(a.clone());
    }
    let start = vec![0; dims.len()];
    let mut stop: Vec<i32> = dims.iter().map(|&d| d as i32).collect();
    stop[axis] = count as i32;
    Ok(ops::slice(a, &start, &stop, &vec![1; dims.len()], s)?)
}

/// `cos` and `sin` of `2π m / n` for `m` in `0..n`, computed in float64 and rounded once, so
/// the transform's exact zeros (`sin π`, `cos π/2`) stay zeros to float32's last bit.
fn unit_circle(n: i64) -> Result<(Array, Array)> {
    let angles = (0..n).map(|m| 2.0 * std::f64::consts::PI * m as f64 / n as f64);
    let cos: Vec<f32> = angles.clone().map(|a| a.cos() as f32).collect();
    let sin: Vec<f32> = angles.map(|a| a.sin() as f32).collect();
    Ok((
        Array::from_slice(&cos, &[n])?,
        Array::from_slice(&sin, &[n])?,
    ))
}

/// The `[read·components, bins·out_components]` matrix of the transform: row `(n, part)` holds
/// what input sample `n`'s real or imaginary part adds to each output bin's parts.
fn dense_matrix(t: &Transform, read: i64, components: i64, s: &Stream) -> Result<Array> {
    let (bins, _) = t.output();
    let n = t.length;
    // k·n < 2^31: the matrix limit bounds read·bins well below it.
    let rows = ops::reshape(
        &ops::arange(0.0, read as f64, 1.0, Dtype::I32, s)?,
        &[read, 1],
        s,
    )?;
    let cols = ops::reshape(
        &ops::arange(0.0, bins as f64, 1.0, Dtype::I32, s)?,
        &[1, bins],
        s,
    )?;
    let turns = ops::remainder(
        &ops::multiply(&rows, &cols, s)?,
        &scalar(n as f64, Dtype::I32, s)?,
        s,
    )?;
    let (cos_table, sin_table) = unit_circle(n)?;
    let cos = ops::take(&cos_table, &turns, 0, s)?;
    let sin = ops::take(&sin_table, &turns, 0, s)?;
    let scaled = |a: &Array, by: f64| -> Result<Array> {
        Ok(ops::multiply(a, &scalar(by, Dtype::F32, s)?, s)?)
    };
    let matrix = match t.bins {
        Bins::All | Bins::OneSided => {
            // y_k = Σ x_n (cos θ + i·sign·sin θ) / scale, θ = 2π kn/N.
            let (sign, scale) = if t.inverse {
                (1.0, 1.0 / n as f64)
            } else {
                (-1.0, 1.0)
            };
            let re = scaled(&cos, scale)?;
            let im = scaled(&sin, sign * scale)?;
            let real_part = ops::stack(&[re.clone(), im.clone()], -1, s)?;
            if components == 1 {
                real_part
            } else {
                // (a + ib)(c + id): the imaginary part adds -d to the real bin and c to the
                // imaginary one.
                let imaginary_part = ops::stack(&[ops::negative(&im, s)?, re], -1, s)?;
                ops::stack(&[real_part, imaginary_part], 1, s)?
            }
        }
        Bins::RealSignal => {
            // x_n = Σ_k w_k (Re X_k cos θ - Im X_k sin θ) / N, θ = 2π kn/N: every bin but the
            // first and (for even N) the middle one stands for itself and its mirror image.
            let single = ops::logical_or(
                &ops::equal(&rows, &scalar(0.0, Dtype::I32, s)?, s)?,
                &ops::equal(
                    &ops::multiply(&rows, &scalar(2.0, Dtype::I32, s)?, s)?,
                    &scalar(n as f64, Dtype::I32, s)?,
                    s,
                )?,
                s,
            )?;
            let weight = ops::where_(
                &single,
                &scalar(1.0 / n as f64, Dtype::F32, s)?,
                &scalar(2.0 / n as f64, Dtype::F32, s)?,
                s,
            )?;
            let re = ops::multiply(&cos, &weight, s)?;
            let im = ops::negative(&ops::multiply(&sin, &weight, s)?, s)?;
            ops::stack(&[re, im], 1, s)?
        }
    };
    let (_, out_components) = t.output();
    Ok(ops::reshape(
        &matrix,
        &[read * components, bins * out_components],
        s,
    )?)
}

/// The transform through MLX's FFT on its CPU stream: `[batch.., samples, components]` in,
/// `[batch.., bins, out_components]` out.
fn by_fft(x: &Array, t: &Transform, complex_input: bool) -> Result<Array> {
    let cpu = Stream::cpu()?;
    let s = &cpu;
    let dims = x.shape();
    let rank = dims.len() as i32;
    let part = |index: f64| -> Result<Array> {
        Ok(ops::take(x, &scalar(index, Dtype::I32, s)?, rank - 1, s)?)
    };
    let signal = if complex_input {
        ops::complex(&part(0.0)?, &part(1.0)?, s)?
    } else {
        part(0.0)?
    };
    let n = t.length as i32;
    let spectrum = match (t.bins, t.inverse) {
        (Bins::RealSignal, _) => {
            let real = ops::irfft(&signal, n, -1, s)?;
            return Ok(ops::expand_dims(&real, &[-1], s)?);
        }
        (Bins::OneSided, false) if !complex_input => ops::rfft(&signal, n, -1, s)?,
        (_, false) => ops::fft(&signal, n, -1, s)?,
        (_, true) => ops::ifft(&signal, n, -1, s)?,
    };
    let spectrum =
        if t.bins == Bins::OneSided && spectrum.shape()[rank as usize - 2] > n as i64 / 2 + 1 {
            leading(&spectrum, rank as usize - 2, i64::from(n) / 2 + 1, s)?
        } else {
            spectrum
        };
    Ok(ops::stack(
        &[ops::real(&spectrum, s)?, ops::imag(&spectrum, s)?],
        -1,
        s,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::testing::{f32s, stream, values_f32};

    /// A deterministic signal with no special structure.
    fn signal(shape: &[i64]) -> Array {
        let count: i64 = shape.iter().product();
        let values: Vec<f32> = (0..count)
            .map(|i| ((i * 7919 % 1013) as f32 / 1013.0 - 0.5) * 4.0)
            .collect();
        f32s(&values, shape)
    }

    /// The transform by the dense product and by the FFT, as host values.
    fn both_ways(x: &Array, t: &Transform, window: Option<&Array>) -> (Vec<f32>, Vec<f32>) {
        let s = stream();
        let kept = KeptMatrices::default();
        let dense = transform_within(x, t, window, &kept, i64::MAX, &s).unwrap();
        let fft = transform_within(x, t, window, &kept, 0, &s).unwrap();
        assert_eq!(dense.shape(), fft.shape());
        (values_f32(&dense), values_f32(&fft))
    }

    fn assert_close(a: &[f32], b: &[f32], scale: f32) {
        let worst = a
            .iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max);
        assert!(worst <= 2e-5 * scale, "max |dense - fft| = {worst}");
    }

    #[test]
    fn the_dense_product_and_the_fft_agree_on_every_form() {
        let cases = [
            ([3, 12, 1], 12, false, Bins::All),
            ([3, 12, 2], 12, true, Bins::All),
            ([2, 9, 1], 9, false, Bins::OneSided),
            ([2, 9, 2], 16, false, Bins::OneSided), // complex one-sided, zero-padded
            ([2, 20, 2], 7, true, Bins::All),       // truncated, odd
            ([2, 6, 2], 10, true, Bins::RealSignal),
            ([2, 6, 2], 11, true, Bins::RealSignal),
            ([2, 4, 2], 10, true, Bins::RealSignal), // fewer bins than N/2 + 1: zero-padded
        ];
        for (shape, length, inverse, bins) in cases {
            let x = signal(&shape);
            let t = Transform {
                length,
                inverse,
                bins,
            };
            let (dense, fft) = both_ways(&x, &t, None);
            assert_close(&dense, &fft, length as f32);
        }
    }

    #[test]
    fn a_window_scales_the_samples_before_the_transform() {
        // 2 rows: the window scales the samples; 16 rows (more than the matrix's 10 columns):
        // it scales the matrix's rows instead, real and complex.
        for shape in [[2, 8, 1], [16, 8, 1], [16, 8, 2]] {
            let x = signal(&shape);
            let window = f32s(&[0.0, 0.25, 0.5, 1.0, 1.0, 0.5, 0.25, 0.0], &[8]);
            let t = Transform {
                length: 8,
                inverse: false,
                bins: Bins::OneSided,
            };
            let (dense, fft) = both_ways(&x, &t, Some(&window));
            assert_close(&dense, &fft, 8.0);
            if shape[2] == 1 {
                // Bin 0 is the windowed sum.
                let samples = values_f32(&x);
                let weights = [0.0, 0.25, 0.5, 1.0, 1.0, 0.5, 0.25, 0.0];
                let sum: f32 = samples[..8].iter().zip(weights).map(|(x, w)| x * w).sum();
                assert!((dense[0] - sum).abs() < 1e-5, "{} vs {sum}", dense[0]);
                assert_eq!(dense[1], 0.0);
            }
        }
    }

    #[test]
    fn a_transform_of_an_impulse_is_flat_and_its_inverse_comes_back() {
        let s = stream();
        let mut impulse = vec![0.0f32; 10];
        impulse[0] = 1.0;
        let x = f32s(&impulse, &[1, 10, 1]);
        let forward = Transform {
            length: 10,
            inverse: false,
            bins: Bins::All,
        };
        let spectrum = transform(&x, &forward, None, &KeptMatrices::default(), &s).unwrap();
        let values = values_f32(&spectrum);
        for bin in values.chunks(2) {
            assert!(
                (bin[0] - 1.0).abs() < 1e-6 && bin[1].abs() < 1e-6,
                "{bin:?}"
            );
        }
        let inverse = Transform {
            inverse: true,
            ..forward
        };
        let back = values_f32(
            &transform(&spectrum, &inverse, None, &KeptMatrices::default(), &s).unwrap(),
        );
        for (n, value) in back.chunks(2).enumerate() {
            assert!((value[0] - impulse[n]).abs() < 1e-6 && value[1].abs() < 1e-6);
        }
    }

    #[test]
    fn matrices_are_kept_by_what_shapes_them_the_oldest_giving_way() {
        let s = stream();
        let kept = KeptMatrices::default();
        let t = |length| Transform {
            length,
            inverse: false,
            bins: Bins::OneSided,
        };
        let keys = || -> Vec<i64> { kept.0.borrow().iter().map(|(k, _)| k.0).collect() };
        kept.matrix(&t(8), 8, 1, &s).unwrap();
        kept.matrix(&t(8), 8, 1, &s).unwrap();
        assert_eq!(keys(), [8]);
        kept.matrix(&t(16), 16, 1, &s).unwrap();
        kept.matrix(&t(32), 32, 1, &s).unwrap();
        assert_eq!(keys(), [16, 32]);
        // 2,048 samples by 1,025 bins by 2: 16 MiB, made but not kept.
        let big = kept.matrix(&t(2048), 2048, 1, &s).unwrap();
        assert_eq!(big.shape(), [2048, 2050]);
        assert_eq!(keys(), [16, 32]);
    }

    #[test]
    fn bad_layouts_and_lengths_are_errors() {
        let s = stream();
        let t = Transform {
            length: 8,
            inverse: false,
            bins: Bins::All,
        };
        assert!(transform(&signal(&[2, 8, 3]), &t, None, &KeptMatrices::default(), &s).is_err());
        let empty = Transform { length: 0, ..t };
        assert!(transform(
            &signal(&[2, 8, 1]),
            &empty,
            None,
            &KeptMatrices::default(),
            &s
        )
        .is_err());
    }
}
