//! The MLX side: host reads of scales and roi, and each resized axis as one `take` of its taps
//! plus a weighted sum over them.

use mlx_kernels::{ops, Array, Dtype, Stream};

use crate::table::consts::scalar;
use crate::{Lower, OpError, Result};

use super::attributes::{Mode, Sampling, Transform};
use super::coordinates::Axis;
use super::geometry::{check_dims, check_layout, full_roi, geometry, Request};
use super::taps::{axis_taps, Taps};

/// Reads a float input (scales, roi) on the host; it must be a constant or computed from
/// shapes (else the read fails inside a compiled trace and the plan runs eagerly).
pub(super) fn host_floats(cx: &Lower, array: Option<&Array>) -> Result<Vec<f32>> {
    let Some(array) = array else {
        return Ok(Vec::new());
    };
    let s = cx.stream();
    match array.dtype() {
        Dtype::F64 => Ok(array.to_vec::<f64>(s)?.iter().map(|&v| v as f32).collect()),
        Dtype::F32 | Dtype::F16 | Dtype::BF16 => {
            Ok(ops::astype(array, Dtype::F32, s)?.to_vec::<f32>(s)?)
        }
        other => Err(OpError::new(format!(
            "scales and roi must be float tensors, not {other:?}"
        ))),
    }
}

pub(super) fn resample(cx: &Lower, x: Array, s: &Sampling, req: &Request) -> Result<Array> {
    let st = cx.stream();
    let input = x.shape();
    if input.is_empty() {
        return Err(OpError::new("Resize needs an input of rank >= 1"));
    }
    let (output, scales) = geometry(&input, req)?;
    check_layout(s, &scales)?;
    check_dims(&output)?;
    if output == input {
        return Ok(x);
    }
    if output.contains(&0) {
        return Ok(ops::broadcast_to(
            &scalar(0.0, x.dtype(), st)?,
            &output,
            st,
        )?);
    }
    let roi = if s.transform == Transform::TfCropAndResize {
        full_roi(req.roi.as_deref(), input.len(), req.axes.as_deref())?
    } else {
        full_roi(None, input.len(), None)?
    };
    let rank = input.len();
    let interpolates = s.mode != Mode::Nearest;
    let mut y = if interpolates && x.dtype() != Dtype::F32 {
        ops::astype(&x, Dtype::F32, st)?
    } else {
        x.clone()
    };
    let mut outside: Option<Array> = None;
    for i in 0..rank {
        let axis = Axis {
            input: input[i],
            output: output[i],
            scale: scales[i],
            roi: (roi[i], roi[rank + i]),
        };
        let Some(taps) = axis_taps(s, &axis) else {
            continue;
        };
        y = resample_axis(&y, i, &taps, st)?;
        if taps.outside.contains(&true) {
            let mut shape = vec![1i64; rank];
            shape[i] = output[i];
            let mask = Array::from_slice(&taps.outside, &shape)?;
            outside = Some(match outside {
                Some(m) => ops::logical_or(&m, &mask, st)?,
                None => mask,
            });
        }
    }
    if let Some(mask) = outside {
        let fill = ops::astype(
            &extrapolation_fill(s.extrapolation, x.dtype(), st)?,
            y.dtype(),
            st,
        )?;
        y = ops::where_(&mask, &fill, &y, st)?;
    }
    Ok(ops::astype(&y, x.dtype(), st)?)
}

/// The extrapolation value as the input's dtype. ORT's `static_cast` of the float to an
/// integer type truncates and then wraps on x86 (-7.6 as uint8 is 249), so integers go through
/// int64 and MLX's wrapping cast rather than a saturating one.
fn extrapolation_fill(value: f32, dtype: Dtype, st: &Stream) -> Result<Array> {
    match dtype {
        Dtype::F32 | Dtype::F16 | Dtype::BF16 | Dtype::F64 | Dtype::Bool => {
            scalar(f64::from(value), dtype, st)
        }
        _ => Ok(ops::astype(
            &Array::scalar(value.trunc() as i64)?,
            dtype,
            st,
        )?),
    }
}

/// `x` resampled along `axis`: one take of every tap, then the weighted sum over the taps.
fn resample_axis(x: &Array, axis: usize, taps: &Taps, st: &Stream) -> Result<Array> {
    let out = taps.outside.len() as i64;
    let index = Array::from_slice(&taps.index, &[taps.index.len() as i64])?;
    let picked = ops::take(x, &index, axis as i32, st)?;
    let Some(weight) = &taps.weight else {
        return Ok(picked);
    };
    let width = taps.width as i64;
    let mut shape = x.shape();
    shape[axis] = out;
    shape.insert(axis + 1, width);
    let picked = ops::reshape(&picked, &shape, st)?;
    let mut weight_shape = vec![1i64; shape.len()];
    weight_shape[axis] = out;
    weight_shape[axis + 1] = width;
    let weight = Array::from_slice(weight, &weight_shape)?;
    Ok(ops::sum(
        &ops::multiply(&picked, &weight, st)?,
        &[axis as i32 + 1],
        false,
        st,
    )?)
}
