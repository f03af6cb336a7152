//! MelWeightMatrix: the triangular mel filter bank, built on the host from its five scalars the
//! way ORT's CPU kernel builds it, then handed to MLX as one constant.

use mlx_kernels::Array;

use crate::table::lower::float32;
use crate::{onnx_op, Lower, OpError, Result};

/// `2595 · log10(1 + f/700)`.
fn hertz_to_mel(hertz: f64) -> f64 {
    2595.0 * (1.0 + hertz / 700.0).log10()
}

fn mel_to_hertz(mel: f64) -> f64 {
    700.0 * (10f64.powf(mel / 2595.0) - 1.0)
}

/// The filter bank's scalars.
struct Bank {
    mel_bins: i64,
    dft_length: i64,
    sample_rate: i64,
    lower_hertz: f32,
    upper_hertz: f32,
}

impl Bank {
    /// The one-sided spectrum's bins: `dft_length / 2 + 1`.
    fn spectrum_bins(&self) -> i64 {
        self.dft_length / 2 + 1
    }

    /// The spectrum bin of an edge, as ORT's range check computes it (in float32).
    fn edge_bin(&self, hertz: f32) -> f32 {
        ((self.dft_length + 1) as f32 * hertz / self.sample_rate as f32).floor()
    }

    /// The `mel_bins + 2` spectrum bins where the triangles start, peak and end: evenly spaced
    /// on the mel scale from the lower edge, in steps of `(upper - lower) / (mel_bins + 2)`
    /// (so the last point falls one step short of the upper edge, as in ORT).
    fn corner_bins(&self) -> Result<Vec<usize>> {
        let low = hertz_to_mel(f64::from(self.lower_hertz));
        let high = hertz_to_mel(f64::from(self.upper_hertz));
        let points = self.mel_bins + 2;
        let step = (high - low) / f64::from(points as f32);
        let bins = self.spectrum_bins();
        let mut corners = Vec::with_capacity(points as usize);
        for i in 0..points {
            let hertz = mel_to_hertz(low + step * i as f64);
            let bin = ((self.dft_length + 1) as f64 * hertz / self.sample_rate as f64).floor();
            if !(0.0..bins as f64).contains(&bin) {
                return Err(OpError::new(format!(
                    "mel point {i} falls on spectrum bin {bin}, outside 0..{bins}"
                )));
            }
            corners.push(bin as usize);
        }
        Ok(corners)
    }

    /// The `[spectrum bins, mel bins]` weights, row-major.
    fn weights(&self) -> Result<Vec<f32>> {
        for (name, hertz) in [
            ("lower_edge_hertz", self.lower_hertz),
            ("upper_edge_hertz", self.upper_hertz),
        ] {
            let bin = self.edge_bin(hertz);
            if !(bin >= 0.0 && bin < self.spectrum_bins() as f32) {
                return Err(OpError::new(format!(
                    "{name} = {hertz} produces a mel triangle filter bank that is out of range \
                     given dft_length {} and sample_rate {}",
                    self.dft_length, self.sample_rate
                )));
            }
        }
        let columns = self.mel_bins as usize;
        let mut weights = vec![0f32; self.spectrum_bins() as usize * columns];
        let corners = self.corner_bins()?;
        // With upper_edge_hertz below lower_edge_hertz the points run backwards; ORT's loops
        // then write only where two points coincide (a 1 at the peak), as these do.
        for (mel, corner) in corners.windows(3).enumerate() {
            let (start, peak, end) = (corner[0], corner[1], corner[2]);
            if peak == start {
                weights[peak * columns + mel] = 1.0;
            } else if start < peak {
                let rising = (peak - start) as f32;
                for bin in start..=peak {
                    weights[bin * columns + mel] = (bin - start) as f32 / rising;
                }
            }
            if peak < end {
                let falling = (end - peak) as f32;
                for bin in peak..end {
                    weights[bin * columns + mel] = (end - bin) as f32 / falling;
                }
            }
        }
        Ok(weights)
    }
}

/// The `[dft_length/2 + 1, num_mel_bins]` matrix mapping a one-sided spectrum to mel bins:
/// triangles of height 1, each spanning from its left neighbour's peak to its right one's.
#[onnx_op(
    op = "MelWeightMatrix", precision = Float32, since = 17, types(T1 = I32 | I64, T2 = FLOAT, T3 = FLOAT),
    inputs(num_mel_bins: T1, dft_length: T1, sample_rate: T1, lower_edge_hertz: T2, upper_edge_hertz: T2),
    outputs(output: T3), ignores(output_datatype: i64), shape = ShapeKeyed,
    claim = super::window::output_datatype_claim,
    declines = "an output_datatype that is not the output's type"
)]
fn mel_weight_matrix(
    cx: &mut Lower,
    #[host] num_mel_bins: i64,
    #[host] dft_length: i64,
    #[host] sample_rate: i64,
    lower_edge_hertz: Array,
    upper_edge_hertz: Array,
) -> Result<Array> {
    let s = cx.stream();
    let hertz = |a: &Array, name: &str| -> Result<f32> {
        match float32(a, s)?.to_vec::<f32>(s)?.as_slice() {
            [one] => Ok(*one),
            values => Err(OpError::new(format!(
                "{name} must hold one value, not {}",
                values.len()
            ))),
        }
    };
    // dft_length is left to the edges' range check, as in ORT (0 makes one spectrum bin).
    if num_mel_bins < 0 || sample_rate < 1 {
        return Err(OpError::new(format!(
            "num_mel_bins ({num_mel_bins}) must be at least 0 and sample_rate ({sample_rate}) at \
             least 1"
        )));
    }
    let bank = Bank {
        mel_bins: num_mel_bins,
        dft_length,
        sample_rate,
        lower_hertz: hertz(&lower_edge_hertz, "lower_edge_hertz")?,
        upper_hertz: hertz(&upper_edge_hertz, "upper_edge_hertz")?,
    };
    let elements = bank.spectrum_bins().checked_mul(num_mel_bins);
    if elements.is_none_or(|e| e > i64::from(i32::MAX)) {
        return Err(OpError::new(format!(
            "a [{}, {num_mel_bins}] filter bank is larger than MLX holds in one array",
            bank.spectrum_bins()
        )));
    }
    let weights = bank.weights()?;
    let matrix = Array::from_slice(&weights, &[bank.spectrum_bins(), num_mel_bins])?;
    Ok(mlx_kernels::ops::astype(&matrix, cx.output_dtype(0)?, s)?)
}
