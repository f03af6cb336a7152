//! Resampling: Resize (opsets 10, 11-12, 13+) and Upsample (7-8, 9), declared here; the files
//! beside hold one job each: attribute values (`attributes`), the claims (`claims`), output
//! dims and scales (`geometry`), coordinate transformations (`coordinates`), interpolation
//! kernels (`taps`) and the MLX lowering (`lowering`).
//!
//! Every mode is separable, so each resized axis becomes host-computed taps: for each output
//! position, input indices and float weights (nearest 1, linear 2, cubic 4, antialiased a
//! window). On MLX an axis is one `take` of its taps plus a weighted sum over them. The tap
//! arithmetic follows ORT's CPU kernel (`upsamplebase.h`, `upsample.cc`,
//! `upsample_antialias.h`) operation by operation in float32, because nearest indices flip on
//! one-ulp differences and ORT is the oracle. Where ORT and ONNX's reference disagree
//! (`align_corners`/`tf_crop_and_resize` with scales use the floored output length; Resize-10
//! rounds nearest with truncation, or ceil when downsampling), ORT's rule holds.
//!
//! The interpolating modes run on the layouts ORT's `ScalesValidation` lists (linear: 2-D, 3-D,
//! and 4-D/5-D with unit outer scales; cubic: 2-D and 4-D with unit outer scales); other layouts
//! fail the run with the reason, as they fail on ORT's CPU EP.

mod attributes;
mod claims;
mod coordinates;
mod geometry;
mod lowering;
mod taps;

use mlx_kernels::Array;

use crate::{onnx_op, Lower, OpError, Result};

use attributes::{parse_or_error, sampling, Policy, Sampling};
use claims::{legacy_claim, resize_claim};
use geometry::Request;
use lowering::{host_floats, resample};

/// Nearest or linear resampling by `scales` (asymmetric coordinates; nearest truncates, or
/// takes the ceiling on a shrinking axis, as ORT does). A row of its own: input 1 is `scales`
/// here and `roi` from opset 11 (the ports' layout changed).
#[onnx_op(
    op = "Resize", precision = Float32, opset = 10..=10, types(T = ANY, F = F32), inputs(X: T, scales: F), outputs(Y: T),
    shape = ShapeKeyed, claim = legacy_claim, declines = "unknown modes; linear on integer tensors"
)]
fn resize_10(
    cx: &mut Lower,
    x: Array,
    scales: Array,
    #[attr(default = "nearest")] mode: String,
) -> Result<Array> {
    let req = Request {
        scales: host_floats(cx, Some(&scales))?,
        ..Request::default()
    };
    resample(cx, x, &Sampling::legacy(&mode)?, &req)
}

/// Nearest (four roundings), linear or cubic resampling by `scales` or `sizes`, with every
/// coordinate transformation; `roi` and `extrapolation_value` for tf_crop_and_resize (`roi` and
/// `scales` are required inputs, empty when unused, up to opset 12). From
/// opset 18, `antialias` (linear/cubic downsampling through a widened filter), `axes`
/// (scales/sizes/roi for those axes only) and `keep_aspect_ratio_policy` (with sizes); from 19,
/// the half_pixel_symmetric coordinate transformation.
#[allow(clippy::too_many_arguments)] // Resize's inputs and attributes, as ONNX has them
#[onnx_op(
    op = "Resize", precision = Float32, since = 11, types(T1 = ANY, T2 = FLOAT, F = F32, I = I64),
    inputs(X: T1, roi: T2, scales: F, sizes: I), outputs(Y: T1), shape = ShapeKeyed,
    claim = resize_claim, declines = "unknown attribute values; linear/cubic on integer tensors; antialias with nearest; exclude_outside without cubic or antialiased linear; half_pixel_symmetric before opset 19; a keep_aspect_ratio_policy over negative axes (ORT leaves them out of it)"
)]
fn resize(
    cx: &mut Lower,
    x: Array,
    #[input(required_until = 12)] roi: Option<Array>,
    #[input(required_until = 12)] scales: Option<Array>,
    #[host] sizes: Option<Vec<i64>>,
    #[attr(default = 0, since = 18)] antialias: i64,
    #[attr(since = 18)] axes: Option<Vec<i64>>,
    #[attr(default = "half_pixel")] coordinate_transformation_mode: String,
    #[attr(default = -0.75)] cubic_coeff_a: f32,
    #[attr(default = 0)] exclude_outside: i64,
    #[attr(default = 0.0)] extrapolation_value: f32,
    #[attr(default = "stretch", since = 18)] keep_aspect_ratio_policy: String,
    #[attr(default = "nearest")] mode: String,
    #[attr(default = "round_prefer_floor")] nearest_mode: String,
) -> Result<Array> {
    let s = sampling(
        &mode,
        &coordinate_transformation_mode,
        &nearest_mode,
        cubic_coeff_a,
        exclude_outside,
        antialias,
        extrapolation_value,
    )?;
    let req = Request {
        scales: host_floats(cx, scales.as_ref())?,
        sizes: sizes.unwrap_or_default(),
        roi: roi.map(|r| host_floats(cx, Some(&r))).transpose()?,
        axes,
        policy: Some(parse_or_error(
            Policy::parse,
            "keep_aspect_ratio_policy",
            &keep_aspect_ratio_policy,
        )?),
    };
    resample(cx, x, &s, &req)
}

/// Upsampling by `scales` (nearest or linear, asymmetric coordinates, as Resize-10): a float
/// attribute up to opset 8, an input (host-known) at 9.
#[onnx_op(
    op = "Upsample", precision = Float32, opset = 7..=9, types(T = ANY, F = F32), inputs(X: T, scales: F), outputs(Y: T),
    shape = ShapeKeyed, claim = legacy_claim, declines = "unknown modes; linear on integer tensors"
)]
fn upsample(
    cx: &mut Lower,
    x: Array,
    #[input(attr_until = 8, attr = Vec<f32>)] scales: Array,
    #[attr(default = "nearest")] mode: String,
) -> Result<Array> {
    let scales = host_floats(cx, Some(&scales))?;
    // Upsample's scales must not shrink (ORT rejects a scale below 1).
    if let Some(s) = scales.iter().find(|&&s| s.is_nan() || s < 1.0) {
        return Err(OpError::new(format!("Upsample scale {s} is below 1")));
    }
    let req = Request {
        scales,
        ..Request::default()
    };
    resample(cx, x, &Sampling::legacy(&mode)?, &req)
}

#[cfg(test)]
mod tests {
    use crate::table::testing::{claimed, decline_reason};
    use crate::{AttrValue, ElemType, Node};

    /// Resize by `scales` (input 2) with no `roi`, float32.
    fn resize(opset: i64) -> Node {
        Node::new("Resize", opset)
            .input(ElemType::Float)
            .absent_input()
            .input(ElemType::Float)
            .output(ElemType::Float)
    }

    fn text(v: &str) -> AttrValue {
        AttrValue::String(v.into())
    }

    #[test]
    fn one_declaration_serves_resize_13_to_19_by_its_gates() {
        // antialias, axes and keep_aspect_ratio_policy exist from opset 18.
        let linear = |opset| resize(opset).attr("mode", text("linear"));
        for (name, value) in [
            ("antialias", AttrValue::Int(1)),
            ("axes", AttrValue::Ints(vec![2, 3])),
            ("keep_aspect_ratio_policy", text("not_larger")),
        ] {
            assert!(
                claimed(&linear(18).attr(name, value.clone())),
                "{name} at 18"
            );
            assert!(
                claimed(&linear(19).attr(name, value.clone())),
                "{name} at 19"
            );
            let reason = decline_reason(&linear(17).attr(name, value.clone()));
            assert!(reason.contains("not part of Resize-17"), "{reason}");
            let reason = decline_reason(&linear(13).attr(name, value));
            assert!(reason.contains("not part of Resize-13"), "{reason}");
        }
        // half_pixel_symmetric is a value of opset 19.
        let symmetric = |opset| {
            resize(opset).attr(
                "coordinate_transformation_mode",
                text("half_pixel_symmetric"),
            )
        };
        assert!(claimed(&symmetric(19)));
        let reason = decline_reason(&symmetric(18));
        assert!(reason.contains("not part of Resize-18"), "{reason}");
        let reason = decline_reason(&symmetric(13));
        assert!(reason.contains("not part of Resize-13"), "{reason}");
        // What every opset of the row shares.
        assert!(claimed(&resize(13)));
        assert!(claimed(
            &linear(17).attr("exclude_outside", AttrValue::Int(0))
        ));
    }

    #[test]
    fn roi_and_scales_are_required_up_to_resize_12() {
        // One row from opset 11: roi is required there, optional from 13.
        assert!(claimed(&resize(13)));
        let reason = decline_reason(&resize(12));
        assert!(
            reason.contains("required input 'roi' is missing"),
            "{reason}"
        );
        let with_roi = |opset| {
            Node::new("Resize", opset)
                .input(ElemType::Float)
                .input(ElemType::Float)
                .input(ElemType::Float)
                .output(ElemType::Float)
        };
        assert!(claimed(&with_roi(11)));
        let reason = decline_reason(&with_roi(12).attr("antialias", AttrValue::Int(1)));
        assert!(reason.contains("not part of Resize-12"), "{reason}");
    }

    #[test]
    fn upsample_scales_are_an_attribute_up_to_opset_8() {
        let upsample = |opset| {
            Node::new("Upsample", opset)
                .input(ElemType::Float)
                .output(ElemType::Float)
        };
        let scales = AttrValue::Floats(vec![1.0, 1.0, 2.0, 2.0]);
        assert!(claimed(&upsample(7).attr("scales", scales.clone())));
        let reason = decline_reason(&upsample(7));
        assert!(reason.contains("required attribute 'scales'"), "{reason}");
        let reason = decline_reason(&upsample(9).attr("scales", scales));
        assert!(reason.contains("not part of Upsample-9"), "{reason}");
        let reason = decline_reason(&upsample(9));
        assert!(
            reason.contains("required input 'scales' is missing"),
            "{reason}"
        );
    }
}
