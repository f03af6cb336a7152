//! Resize's and Upsample's attribute values, parsed once: the claims decline what does not
//! parse, and the lowerings fail with the value's name should a declined node reach them.

use crate::{OpError, Result};

#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Mode {
    Nearest,
    Linear,
    Cubic,
}

impl Mode {
    pub(super) fn parse(name: &str) -> Option<Mode> {
        match name {
            "nearest" => Some(Mode::Nearest),
            "linear" => Some(Mode::Linear),
            "cubic" => Some(Mode::Cubic),
            _ => None,
        }
    }
}

/// How an output coordinate maps back to the input (`coordinate_transformation_mode`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Transform {
    HalfPixel,
    HalfPixelSymmetric,
    PytorchHalfPixel,
    AlignCorners,
    Asymmetric,
    /// Dropped from ONNX at opset 13; ORT still runs it, so it is claimed at every opset.
    TfHalfPixelForNn,
    TfCropAndResize,
}

impl Transform {
    pub(super) fn parse(name: &str) -> Option<Transform> {
        Some(match name {
            "half_pixel" => Transform::HalfPixel,
            "half_pixel_symmetric" => Transform::HalfPixelSymmetric,
            "pytorch_half_pixel" => Transform::PytorchHalfPixel,
            "align_corners" => Transform::AlignCorners,
            "asymmetric" => Transform::Asymmetric,
            "tf_half_pixel_for_nn" => Transform::TfHalfPixelForNn,
            "tf_crop_and_resize" => Transform::TfCropAndResize,
            _ => return None,
        })
    }
}

/// How a fractional source coordinate picks a pixel (`nearest_mode`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Rounding {
    /// Upsample and Resize-10 (no `nearest_mode`): ORT truncates, or takes the ceiling when
    /// the axis shrinks.
    Legacy,
    RoundPreferFloor,
    RoundPreferCeil,
    Floor,
    Ceil,
}

impl Rounding {
    pub(super) fn parse(name: &str) -> Option<Rounding> {
        Some(match name {
            "round_prefer_floor" => Rounding::RoundPreferFloor,
            "round_prefer_ceil" => Rounding::RoundPreferCeil,
            "floor" => Rounding::Floor,
            "ceil" => Rounding::Ceil,
            _ => return None,
        })
    }
}

/// `keep_aspect_ratio_policy` (opset 18+; applies to `sizes` only).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Policy {
    Stretch,
    NotLarger,
    NotSmaller,
}

impl Policy {
    pub(super) fn parse(name: &str) -> Option<Policy> {
        Some(match name {
            "stretch" => Policy::Stretch,
            "not_larger" => Policy::NotLarger,
            "not_smaller" => Policy::NotSmaller,
            _ => return None,
        })
    }
}

/// What decides the taps of one axis.
#[derive(Clone, Copy, Debug)]
pub(super) struct Sampling {
    pub(super) mode: Mode,
    pub(super) transform: Transform,
    pub(super) rounding: Rounding,
    pub(super) cubic_a: f32,
    pub(super) exclude_outside: bool,
    pub(super) antialias: bool,
    pub(super) extrapolation: f32,
}

impl Sampling {
    /// Upsample and Resize-10: asymmetric coordinates, legacy rounding.
    pub(super) fn legacy(mode: &str) -> Result<Sampling> {
        Ok(Sampling {
            mode: parse_or_error(Mode::parse, "mode", mode)?,
            transform: Transform::Asymmetric,
            rounding: Rounding::Legacy,
            cubic_a: -0.75,
            exclude_outside: false,
            antialias: false,
            extrapolation: 0.0,
        })
    }
}

pub(super) fn parse_or_error<T>(
    parse: fn(&str) -> Option<T>,
    attr: &str,
    value: &str,
) -> Result<T> {
    parse(value).ok_or_else(|| OpError::new(format!("{attr} {value:?} is not an ONNX value")))
}

/// Resize's attributes, checked (the claim declines the same values).
#[allow(clippy::too_many_arguments)] // Resize's attributes, as ONNX has them
pub(super) fn sampling(
    mode: &str,
    transform: &str,
    nearest_mode: &str,
    cubic_a: f32,
    exclude_outside: i64,
    antialias: i64,
    extrapolation: f32,
) -> Result<Sampling> {
    Ok(Sampling {
        mode: parse_or_error(Mode::parse, "mode", mode)?,
        transform: parse_or_error(
            Transform::parse,
            "coordinate_transformation_mode",
            transform,
        )?,
        rounding: parse_or_error(Rounding::parse, "nearest_mode", nearest_mode)?,
        cubic_a,
        exclude_outside: exclude_outside != 0,
        antialias: antialias != 0,
        extrapolation,
    })
}
