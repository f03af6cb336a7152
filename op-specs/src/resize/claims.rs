//! What the Resize and Upsample rows claim beyond their declarations: known attribute values,
//! and only the combinations ORT's CPU EP computes the way the lowering does.

use crate::{ElemType, Node, Verdict};

use super::attributes::{Mode, Policy, Rounding, Transform};

fn is_float(t: Option<ElemType>) -> bool {
    matches!(
        t,
        Some(ElemType::Float | ElemType::Float16 | ElemType::BFloat16)
    )
}

/// What every opset shares: a known mode, and interpolation only on float tensors.
fn mode_verdict(node: &Node, allowed: &[Mode]) -> std::result::Result<Mode, Verdict> {
    let name = node.attr_or("mode", String::from("nearest"));
    let mode = match Mode::parse(&name) {
        Some(m) if allowed.contains(&m) => m,
        _ => {
            return Err(Verdict::decline(format!(
                "mode {name:?} is not one of this opset's modes"
            )))
        }
    };
    if mode != Mode::Nearest && !is_float(node.input_type(0)) {
        return Err(Verdict::decline(
            "linear/cubic on integer tensors: ORT's CPU EP truncates or rounds through 8-bit \
             fixed point depending on the layout; only nearest is claimed for them",
        ));
    }
    Ok(mode)
}

pub(super) fn legacy_claim(node: &Node) -> Verdict {
    match mode_verdict(node, &[Mode::Nearest, Mode::Linear]) {
        Ok(_) => Verdict::Claim,
        Err(v) => v,
    }
}

pub(super) fn resize_claim(node: &Node) -> Verdict {
    let mode = match mode_verdict(node, &[Mode::Nearest, Mode::Linear, Mode::Cubic]) {
        Ok(m) => m,
        Err(v) => return v,
    };
    let transform = node.attr_or("coordinate_transformation_mode", String::from("half_pixel"));
    match Transform::parse(&transform) {
        None => return Verdict::decline(format!("coordinate_transformation_mode {transform:?}")),
        // A value added at opset 19: one row serves 13 to 19+, so its opset is checked here.
        Some(Transform::HalfPixelSymmetric) if node.since_version() < 19 => {
            return Verdict::decline(format!(
                "coordinate_transformation_mode \"half_pixel_symmetric\" is not part of Resize-{} \
                 (it exists from opset 19)",
                node.since_version()
            ))
        }
        Some(_) => {}
    }
    let rounding = node.attr_or("nearest_mode", String::from("round_prefer_floor"));
    if Rounding::parse(&rounding).is_none() {
        return Verdict::decline(format!("nearest_mode {rounding:?}"));
    }
    let policy = node.attr_or("keep_aspect_ratio_policy", String::from("stretch"));
    if Policy::parse(&policy).is_none() {
        return Verdict::decline(format!("keep_aspect_ratio_policy {policy:?}"));
    }
    // ORT's kernel matches the policy's axes against dims unnormalised, so a negative axis is
    // left out of the common scale and keeps its dim (ONNX counts it from the end; found by
    // the fuzzer). The node is left to ORT rather than the EP repeating that.
    let axes = node.attr_as::<Vec<i64>>("axes").unwrap_or_default();
    if policy != "stretch" && axes.iter().any(|&a| a < 0) {
        return Verdict::decline(format!(
            "keep_aspect_ratio_policy {policy:?} with negative axes {axes:?}: ORT's kernel leaves \
             them out of the policy"
        ));
    }
    let antialias = node.attr_or("antialias", 0i64) != 0;
    if antialias && mode == Mode::Nearest {
        return Verdict::decline("antialias with mode nearest (ORT's CPU EP rejects it)");
    }
    let exclude_outside = node.attr_or("exclude_outside", 0i64) != 0;
    if exclude_outside && mode != Mode::Cubic && !antialias {
        return Verdict::decline(
            "exclude_outside without cubic or antialiased linear (ORT's CPU EP rejects it)",
        );
    }
    Verdict::Claim
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AttrValue;

    fn resize_node(opset: i64, input: ElemType, attrs: &[(&str, AttrValue)]) -> Node {
        let mut node = Node::new("Resize", opset)
            .input(input)
            .absent_input()
            .input(ElemType::Float)
            .output(input);
        for (name, value) in attrs {
            node = node.attr(name, value.clone());
        }
        node
    }

    fn text(v: &str) -> AttrValue {
        AttrValue::String(v.into())
    }

    #[test]
    fn claims_decline_what_ort_rejects_or_computes_differently() {
        let declined = |n: &Node| !resize_claim(n).is_claim();
        assert!(!declined(&resize_node(19, ElemType::Uint8, &[])));
        assert!(declined(&resize_node(
            19,
            ElemType::Uint8,
            &[("mode", text("linear"))]
        )));
        assert!(declined(&resize_node(
            18,
            ElemType::Float,
            &[(
                "coordinate_transformation_mode",
                text("half_pixel_symmetric")
            )]
        )));
        assert!(!declined(&resize_node(
            19,
            ElemType::Float,
            &[(
                "coordinate_transformation_mode",
                text("half_pixel_symmetric")
            )]
        )));
        assert!(declined(&resize_node(
            18,
            ElemType::Float,
            &[("antialias", AttrValue::Int(1))]
        )));
        assert!(declined(&resize_node(
            13,
            ElemType::Float,
            &[
                ("exclude_outside", AttrValue::Int(1)),
                ("mode", text("linear"))
            ]
        )));
        assert!(declined(&resize_node(
            13,
            ElemType::Float,
            &[("mode", text("bicubic"))]
        )));
    }
}
