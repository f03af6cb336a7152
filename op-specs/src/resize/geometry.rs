//! The output's dims and the scale of every axis (host), from scales or sizes, `axes` and the
//! aspect-ratio policy, as ORT's CPU kernel computes them.

use crate::shape::normalise_axis;
use crate::{OpError, Result};

use super::attributes::{Mode, Policy, Sampling};

/// The sizes request of a node, as read from its inputs and attributes.
#[derive(Clone, Debug, Default)]
pub(super) struct Request {
    /// Empty: absent (an empty tensor counts as absent, as in ONNX).
    pub(super) scales: Vec<f32>,
    pub(super) sizes: Vec<i64>,
    /// None: absent. A present roi must hold two values an axis, even when empty (ORT refuses
    /// an empty one for tf_crop_and_resize).
    pub(super) roi: Option<Vec<f32>>,
    pub(super) axes: Option<Vec<i64>>,
    pub(super) policy: Option<Policy>,
}

/// The output dims and the per-axis scale the coordinates use, computed as ORT does: from
/// scales, `trunc(scale * dim)` in float32; from sizes, `scale = out / in` in float32, then
/// the aspect-ratio policy (`round(scale * dim)` over the policy's scale).
pub(super) fn geometry(input: &[i64], req: &Request) -> Result<(Vec<i64>, Vec<f32>)> {
    let rank = input.len();
    let axes = match &req.axes {
        Some(a) => Some(resolve_axes(a, rank)?),
        None => None,
    };
    let spread = |values: usize, what: &str| -> Result<()> {
        let want = axes.as_ref().map_or(rank, Vec::len);
        if values != want {
            return Err(OpError::new(format!(
                "{what} has {values} values for {want} axes"
            )));
        }
        Ok(())
    };
    if !req.scales.is_empty() {
        if !req.sizes.is_empty() {
            return Err(OpError::new("only one of scales and sizes may be given"));
        }
        spread(req.scales.len(), "scales")?;
        let mut scales = vec![1.0f32; rank];
        match &axes {
            Some(a) => a.iter().zip(&req.scales).for_each(|(&i, &s)| scales[i] = s),
            None => scales.copy_from_slice(&req.scales),
        }
        check_scales(&scales)?;
        let out = input
            .iter()
            .zip(&scales)
            .map(|(&d, &s)| (s * d as f32) as i64)
            .collect();
        return Ok((out, scales));
    }
    if req.sizes.is_empty() {
        return Err(OpError::new("one of scales and sizes must be given"));
    }
    spread(req.sizes.len(), "sizes")?;
    let mut out = input.to_vec();
    match &axes {
        Some(a) => a.iter().zip(&req.sizes).for_each(|(&i, &s)| out[i] = s),
        None => out.copy_from_slice(&req.sizes),
    }
    let mut scales = Vec::with_capacity(rank);
    for (i, (&d, &o)) in input.iter().zip(&out).enumerate() {
        if d == 0 {
            if o != 0 {
                return Err(OpError::new(format!(
                    "axis {i} is empty but sizes asks for {o}"
                )));
            }
            scales.push(1.0);
        } else {
            scales.push(o as f32 / d as f32);
        }
    }
    let policy = req.policy.unwrap_or(Policy::Stretch);
    if policy != Policy::Stretch {
        apply_policy(policy, input, axes.as_deref(), &mut out, &mut scales);
    }
    check_scales(&scales)?;
    Ok((out, scales))
}

fn resolve_axes(axes: &[i64], rank: usize) -> Result<Vec<usize>> {
    let resolved: Vec<usize> = axes
        .iter()
        .map(|&a| normalise_axis(a, rank))
        .collect::<Result<_>>()?;
    for (i, a) in resolved.iter().enumerate() {
        if resolved[..i].contains(a) {
            return Err(OpError::new(format!("axes {axes:?} repeat an axis")));
        }
    }
    Ok(resolved)
}

/// The layouts ORT's CPU kernel interpolates (its `ScalesValidation`): linear over a 2-D or 3-D
/// input, a 4-D input whose two outer scales (or outer and inner) are 1, or a 5-D input whose
/// two outer scales are 1; cubic over 2-D, or 4-D with the two outer scales 1 (or outer and inner
/// with antialias). It fails every other node at run time, and so does the EP: interpolating
/// there would answer where ORT's CPU EP gives an error.
pub(super) fn check_layout(s: &Sampling, scales: &[f32]) -> Result<()> {
    let one = |i: usize| scales[i] == 1.0;
    let supported = match (s.mode, scales.len()) {
        (Mode::Nearest, _) => true,
        (Mode::Linear, 2 | 3) => true,
        (Mode::Linear, 4) => one(0) && (one(1) || one(3)),
        (Mode::Linear, 5) => one(0) && one(1),
        (Mode::Cubic, 2) => true,
        (Mode::Cubic, 4) => one(0) && (one(1) || (s.antialias && one(3))),
        _ => false,
    };
    if supported {
        return Ok(());
    }
    Err(OpError::new(format!(
        "{:?} mode with scales {scales:?} over a {}-D input: ORT's CPU EP interpolates only 2-D \
         and 3-D inputs (linear), and 4-D/5-D inputs whose outer scales are 1, and fails this \
         node too",
        s.mode,
        scales.len()
    )))
}

fn check_scales(scales: &[f32]) -> Result<()> {
    match scales.iter().find(|&&s| s.is_nan() || s <= 0.0) {
        Some(s) => Err(OpError::new(format!("scale {s} must be positive"))),
        None => Ok(()),
    }
}

/// `not_larger` / `not_smaller`: one scale (the smallest / largest over the policy's axes) for
/// all of them, every other axis kept.
fn apply_policy(
    policy: Policy,
    input: &[i64],
    axes: Option<&[usize]>,
    out: &mut [i64],
    scales: &mut [f32],
) {
    let chosen = |i: usize| axes.is_none_or(|a| a.contains(&i));
    let picked = (0..scales.len()).filter(|&i| chosen(i)).map(|i| scales[i]);
    let scale = match policy {
        Policy::NotLarger => picked.fold(f32::MAX, f32::min),
        _ => picked.fold(f32::MIN_POSITIVE, f32::max),
    };
    for i in 0..scales.len() {
        if chosen(i) {
            scales[i] = scale;
            out[i] = (scale * input[i] as f32).round() as i64;
        } else {
            scales[i] = 1.0;
            out[i] = input[i];
        }
    }
}

/// ROI as `[starts.., ends..]` over all axes: the default `[0.., 1..]` when absent, spread
/// over `axes` when given for them.
pub(super) fn full_roi(roi: Option<&[f32]>, rank: usize, axes: Option<&[i64]>) -> Result<Vec<f32>> {
    let mut full: Vec<f32> = (0..2 * rank)
        .map(|i| if i < rank { 0.0 } else { 1.0 })
        .collect();
    let Some(roi) = roi else {
        return Ok(full);
    };
    match axes {
        Some(a) => {
            let a = resolve_axes(a, rank)?;
            if roi.len() != 2 * a.len() {
                return Err(OpError::new(format!(
                    "roi has {} values for {} axes (ORT's Resize refuses it too: two an axis)",
                    roi.len(),
                    a.len()
                )));
            }
            for (k, &i) in a.iter().enumerate() {
                full[i] = roi[k];
                full[rank + i] = roi[a.len() + k];
            }
        }
        None if roi.len() == 2 * rank => full.copy_from_slice(roi),
        None => {
            return Err(OpError::new(format!(
                "roi has {} values for rank {rank} (ORT's Resize refuses it too: two an axis)",
                roi.len()
            )))
        }
    }
    Ok(full)
}

pub(super) fn check_dims(dims: &[i64]) -> Result<()> {
    match dims.iter().find(|&&d| d < 0 || d > i64::from(i32::MAX)) {
        Some(d) => Err(OpError::new(format!(
            "output dim {d} does not fit MLX's 32-bit shapes"
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_lengths_are_float32_products_truncated() {
        let req = Request {
            scales: vec![1.4, 0.6],
            ..Request::default()
        };
        // 1.4f32 * 5 rounds to exactly 7 in float32 (6.99.. in float64).
        let (out, _) = geometry(&[5, 4], &req).unwrap();
        assert_eq!(out, vec![7, 2]);
    }

    #[test]
    fn sizes_with_a_policy_keep_the_aspect_ratio_over_the_named_axes() {
        let req = Request {
            sizes: vec![7, 7],
            axes: Some(vec![2, 3]),
            policy: Some(Policy::NotLarger),
            ..Request::default()
        };
        let (out, scales) = geometry(&[1, 2, 4, 5], &req).unwrap();
        assert_eq!(out, vec![1, 2, 6, 7]); // scale 7/5 for both, round(1.4 * 4) = 6
        assert_eq!(scales, vec![1.0, 1.0, 1.4, 1.4]);
    }

    #[test]
    fn scales_and_sizes_together_or_neither_are_errors() {
        let both = Request {
            scales: vec![2.0],
            sizes: vec![4],
            ..Request::default()
        };
        assert!(geometry(&[2], &both).is_err());
        assert!(geometry(&[2], &Request::default()).is_err());
        let shrink_to_zero = Request {
            sizes: vec![0],
            ..Request::default()
        };
        assert!(geometry(&[2], &shrink_to_zero).is_err());
    }
}
