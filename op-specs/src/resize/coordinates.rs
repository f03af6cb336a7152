//! Coordinate transformations: where an output position reads the input along one axis, and
//! how a fractional position picks a pixel.

use super::attributes::{Rounding, Transform};

/// One axis's lengths, scale and ROI.
#[derive(Clone, Copy, Debug)]
pub(super) struct Axis {
    pub(super) input: i64,
    pub(super) output: i64,
    pub(super) scale: f32,
    pub(super) roi: (f32, f32),
}

impl Axis {
    /// Where output position `x` samples the input (ORT's float32 arithmetic, with its
    /// double-precision steps where its C++ promotes).
    pub(super) fn source(&self, t: Transform, x: f32) -> f32 {
        let (scale, out_len, in_len) = (self.scale, self.output as f32, self.input as f32);
        match t {
            Transform::Asymmetric => x / scale,
            Transform::HalfPixel => ((x + 0.5) / scale) - 0.5,
            Transform::TfHalfPixelForNn => (x + 0.5) / scale,
            Transform::PytorchHalfPixel if out_len > 1.0 => (x + 0.5) / scale - 0.5,
            Transform::PytorchHalfPixel => 0.0,
            Transform::AlignCorners if out_len == 1.0 => 0.0,
            Transform::AlignCorners => x * (in_len - 1.0) / (out_len - 1.0),
            Transform::TfCropAndResize => {
                let (start, end) = self.roi;
                if out_len > 1.0 {
                    start * (in_len - 1.0) + (x * (end - start) * (in_len - 1.0)) / (out_len - 1.0)
                } else {
                    (0.5 * f64::from(start + end) * f64::from(in_len - 1.0)) as f32
                }
            }
            Transform::HalfPixelSymmetric => {
                let adjustment = out_len / (scale * in_len);
                let offset = (in_len / 2.0) * (1.0 - adjustment);
                (f64::from(offset) + (f64::from(x) + 0.5) / f64::from(scale) - 0.5) as f32
            }
        }
    }

    /// Whether a source coordinate lies outside the input (extrapolated by tf_crop_and_resize).
    pub(super) fn beyond(&self, t: Transform, c: f32) -> bool {
        t == Transform::TfCropAndResize && (c < 0.0 || c > (self.input - 1) as f32)
    }

    pub(super) fn clamp(&self, i: i64) -> i32 {
        i.clamp(0, self.input - 1) as i32
    }
}

pub(super) fn round_nearest(r: Rounding, c: f32, downsampling: bool) -> i64 {
    match r {
        Rounding::Legacy if downsampling => c.ceil() as i64,
        Rounding::Legacy => c as i64,
        Rounding::RoundPreferCeil => c.round() as i64,
        Rounding::Floor => c.floor() as i64,
        Rounding::Ceil => c.ceil() as i64,
        // ORT's tie test: against the truncated value plus a half.
        Rounding::RoundPreferFloor if c == (c as i64) as f32 + 0.5 => c.floor() as i64,
        Rounding::RoundPreferFloor => c.round() as i64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundings_break_ties_as_named_and_legacy_truncates() {
        assert_eq!(round_nearest(Rounding::RoundPreferFloor, 1.5, false), 1);
        assert_eq!(round_nearest(Rounding::RoundPreferFloor, 1.6, false), 2);
        assert_eq!(round_nearest(Rounding::RoundPreferCeil, 1.5, false), 2);
        assert_eq!(round_nearest(Rounding::Floor, 1.9, false), 1);
        assert_eq!(round_nearest(Rounding::Ceil, 1.1, false), 2);
        assert_eq!(round_nearest(Rounding::Legacy, 1.9, false), 1);
        assert_eq!(round_nearest(Rounding::Legacy, 1.1, true), 2);
    }
}
