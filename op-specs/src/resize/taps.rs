//! Interpolation kernels (host): per axis, the input pixels and weights of every output
//! position, for nearest, linear, cubic and antialiased modes.

use super::attributes::{Mode, Sampling};
use super::coordinates::{round_nearest, Axis};

/// One axis's resampling: output `j` is `sum_k weight[j*width+k] * input[index[j*width+k]]`
/// (or the plain pick when `weight` is `None`), replaced by the extrapolation value where
/// `outside[j]`.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Taps {
    pub(super) width: usize,
    pub(super) index: Vec<i32>,
    pub(super) weight: Option<Vec<f32>>,
    pub(super) outside: Vec<bool>,
}

fn nearest_taps(s: &Sampling, axis: &Axis) -> Taps {
    let (mut index, mut outside) = (Vec::new(), Vec::new());
    for j in 0..axis.output {
        let c = axis.source(s.transform, j as f32);
        outside.push(axis.beyond(s.transform, c));
        index.push(axis.clamp(round_nearest(s.rounding, c, axis.scale < 1.0)));
    }
    Taps {
        width: 1,
        index,
        weight: None,
        outside,
    }
}

fn linear_taps(s: &Sampling, axis: &Axis) -> Taps {
    let (mut index, mut weight, mut outside) = (Vec::new(), Vec::new(), Vec::new());
    let last = axis.input - 1;
    for j in 0..axis.output {
        let c = axis.source(s.transform, j as f32);
        outside.push(axis.beyond(s.transform, c));
        let v = c.min(last as f32).max(0.0);
        let lo = (v as i64).min(last);
        let hi = (lo + 1).min(last);
        // ORT weighs each neighbour by the distance to the other one.
        let (w_lo, w_hi) = if lo == hi {
            (0.5, 0.5)
        } else {
            ((v - hi as f32).abs(), (v - lo as f32).abs())
        };
        index.extend([lo as i32, hi as i32]);
        weight.extend([w_lo, w_hi]);
    }
    Taps {
        width: 2,
        index,
        weight: Some(weight),
        outside,
    }
}

/// Keys' cubic convolution weights of the four neighbours of a point `s` past the floor.
fn cubic_coefficients(s: f32, a: f32) -> [f32; 4] {
    let s = s.abs();
    let outer = |d: f32| ((a * d - 5.0 * a) * d + 8.0 * a) * d - 4.0 * a;
    let inner = |d: f32| ((a + 2.0) * d - (a + 3.0)) * d * d + 1.0;
    [outer(s + 1.0), inner(s), inner(1.0 - s), outer(2.0 - s)]
}

fn cubic_taps(s: &Sampling, axis: &Axis) -> Taps {
    let (mut index, mut weight, mut outside) = (Vec::new(), Vec::new(), Vec::new());
    for j in 0..axis.output {
        let c = axis.source(s.transform, j as f32);
        outside.push(axis.beyond(s.transform, c));
        let base = c.floor() as i64;
        let mut coeffs = cubic_coefficients(c - base as f32, s.cubic_a);
        let mut total = 1.0f32;
        if s.exclude_outside {
            total = 0.0;
            for (k, w) in coeffs.iter_mut().enumerate() {
                let at = base - 1 + k as i64;
                if at < 0 || at >= axis.input {
                    *w = 0.0;
                }
                total += *w;
            }
        }
        for (k, w) in coeffs.iter().enumerate() {
            index.push(axis.clamp(base - 1 + k as i64));
            weight.push(w / total);
        }
    }
    Taps {
        width: 4,
        index,
        weight: Some(weight),
        outside,
    }
}

/// Pillow-style antialiasing filters, as ORT implements them.
fn filter(mode: Mode, a: f32, x: f32) -> f32 {
    let x = x.abs();
    match mode {
        Mode::Cubic if x < 1.0 => ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0,
        Mode::Cubic if x < 2.0 => (((x - 5.0) * x + 8.0) * x - 4.0) * a,
        Mode::Linear if x < 1.0 => 1.0 - x,
        _ => 0.0,
    }
}

/// Antialiased taps: the filter stretched by the downsampling factor. Without
/// exclude_outside, weight that falls outside the input lands on the edge pixel (ORT's fold);
/// with it, outside taps are dropped and the rest renormalised.
fn antialias_taps(s: &Sampling, axis: &Axis) -> Taps {
    let support_size = if s.mode == Mode::Cubic { 4.0f32 } else { 2.0 };
    let scale = 1.0 / axis.scale;
    let support = if scale >= 1.0 {
        (support_size * 0.5) * scale
    } else {
        support_size * 0.5
    };
    let inv_scale = if scale >= 1.0 { 1.0 / scale } else { 1.0 };
    let mut rows: Vec<Vec<(i32, f32)>> = Vec::new();
    let mut outside = Vec::new();
    for j in 0..axis.output {
        let center = 0.5
            + if scale == 1.0 {
                j as f32
            } else {
                axis.source(s.transform, j as f32)
            };
        outside.push(axis.beyond(s.transform, center - 0.5));
        let lo_real = (center - support + 0.5).floor() as i64;
        let hi_real = (center + support + 0.5).floor() as i64;
        let (lo_cut, hi_cut) = (lo_real.max(0), hi_real.min(axis.input));
        let (lo, hi) = if s.exclude_outside {
            (lo_cut, hi_cut)
        } else {
            (lo_real, hi_real)
        };
        let mut total = 0.0f32;
        let mut row: Vec<(i32, f32)> = Vec::new();
        for at in lo..hi {
            let w = filter(s.mode, s.cubic_a, (at as f32 - center + 0.5) * inv_scale);
            total += w;
            if hi_cut <= lo_cut {
                continue; // no tap inside the input: ORT leaves the output at 0
            }
            let pixel = at.clamp(lo_cut, hi_cut - 1) as i32;
            match row.last_mut() {
                Some((p, acc)) if *p == pixel => *acc += w,
                _ => row.push((pixel, w)),
            }
        }
        let inv_total = if total == 0.0 { 1.0 } else { 1.0 / total };
        row.iter_mut().for_each(|(_, w)| *w *= inv_total);
        rows.push(row);
    }
    pad_rows(rows, outside)
}

/// Rows of different lengths as one `width`: short rows repeat their last pixel with weight 0
/// (a row with no tap reads pixel 0 with weight 0).
fn pad_rows(rows: Vec<Vec<(i32, f32)>>, outside: Vec<bool>) -> Taps {
    let width = rows.iter().map(Vec::len).max().unwrap_or(0).max(1);
    let (mut index, mut weight) = (Vec::new(), Vec::new());
    for row in rows {
        let last = row.last().map_or(0, |&(p, _)| p);
        for k in 0..width {
            let (p, w) = row.get(k).copied().unwrap_or((last, 0.0));
            index.push(p);
            weight.push(w);
        }
    }
    Taps {
        width,
        index,
        weight: Some(weight),
        outside,
    }
}

/// The taps of one axis, or `None` when the axis is left as it is: ORT copies an axis whose
/// scale is exactly 1 (and, antialiased, one whose length does not change).
pub(super) fn axis_taps(s: &Sampling, axis: &Axis) -> Option<Taps> {
    if axis.scale == 1.0 || (s.antialias && axis.input == axis.output) {
        return None;
    }
    Some(match s.mode {
        Mode::Nearest => nearest_taps(s, axis),
        _ if s.antialias => antialias_taps(s, axis),
        Mode::Linear => linear_taps(s, axis),
        Mode::Cubic => cubic_taps(s, axis),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resize::attributes::{Rounding, Transform};

    fn sampling_of(mode: Mode, transform: Transform) -> Sampling {
        Sampling {
            mode,
            transform,
            rounding: Rounding::RoundPreferFloor,
            cubic_a: -0.75,
            exclude_outside: false,
            antialias: false,
            extrapolation: 0.0,
        }
    }

    fn axis(input: i64, output: i64, scale: f32) -> Axis {
        Axis {
            input,
            output,
            scale,
            roi: (0.0, 1.0),
        }
    }

    /// Per output position, the sum of its weights.
    fn row_sums(t: &Taps) -> Vec<f32> {
        let w = t.weight.as_ref().expect("weights");
        w.chunks(t.width).map(|r| r.iter().sum()).collect()
    }

    #[test]
    fn align_corners_uses_the_floored_output_length() {
        // 4 -> floor(4 * 0.6) = 2: ORT maps output 1 to input 3 (ONNX's reference to 2.14).
        let t = linear_taps(
            &sampling_of(Mode::Linear, Transform::AlignCorners),
            &axis(4, 2, 0.6),
        );
        assert_eq!(t.index, vec![0, 1, 3, 3]);
        assert_eq!(t.weight, Some(vec![1.0, 0.0, 0.5, 0.5]));
    }

    #[test]
    fn cubic_exclude_outside_drops_and_renormalises_edge_taps() {
        let mut s = sampling_of(Mode::Cubic, Transform::HalfPixel);
        s.exclude_outside = true;
        let t = cubic_taps(&s, &axis(4, 8, 2.0));
        let w = t.weight.clone().unwrap();
        // Output 0 samples -0.25: taps -2 and -1 are outside the input.
        assert_eq!(&w[..2], &[0.0, 0.0]);
        assert!(row_sums(&t).iter().all(|s| (s - 1.0).abs() < 1e-6));
    }

    #[test]
    fn antialias_widens_the_window_and_normalises() {
        let mut s = sampling_of(Mode::Linear, Transform::HalfPixel);
        s.antialias = true;
        let t = antialias_taps(&s, &axis(12, 3, 0.25));
        assert!(t.width >= 8, "a 4x shrink spans about 8 input pixels");
        assert!(row_sums(&t).iter().all(|s| (s - 1.0).abs() < 1e-6));
        assert!(t.index.iter().all(|&i| (0..12).contains(&i)));
    }

    #[test]
    fn tf_crop_and_resize_marks_positions_outside_the_input() {
        let s = sampling_of(Mode::Nearest, Transform::TfCropAndResize);
        let a = Axis {
            roi: (-0.5, 1.5),
            ..axis(4, 5, 1.25)
        };
        let t = nearest_taps(&s, &a);
        assert_eq!(t.outside, vec![true, false, false, false, true]);
    }

    #[test]
    fn an_axis_with_scale_one_is_copied() {
        let s = sampling_of(Mode::Cubic, Transform::TfCropAndResize);
        assert_eq!(axis_taps(&s, &axis(5, 5, 1.0)), None);
    }
}
