//! The table's own rules: no overlapping entries, lookups by opset, and declines that always
//! say why.

mod common;

use common::*;
use op_specs::{all, decide, lookup, overlaps, AttrValue, Decision, ElemType, PortKind};

#[test]
fn no_two_entries_overlap() {
    let found = overlaps();
    assert!(found.is_empty(), "overlapping entries: {found:?}");
}

#[test]
fn every_entry_is_documented_and_well_formed() {
    let specs = all();
    assert!(specs.len() >= 80, "only {} entries", specs.len());
    for spec in specs {
        assert!(!spec.doc.is_empty(), "{spec:?} has no doc comment");
        assert!(!spec.outputs.is_empty(), "{spec:?} has no outputs");
        for port in spec.inputs.iter().chain(spec.outputs) {
            assert!(
                spec.type_var(port.type_var).is_some(),
                "{spec:?}: {} has no type variable",
                port.name
            );
        }
        let variadic = spec
            .inputs
            .iter()
            .filter(|p| p.kind == PortKind::Variadic)
            .count();
        assert!(variadic <= 1, "{spec:?}: several variadic inputs");
    }
}

#[test]
fn lookup_follows_opset_ranges() {
    assert_eq!(
        lookup("", "Softmax", 11).unwrap().function,
        "softmax_legacy"
    );
    assert_eq!(lookup("", "Softmax", 13).unwrap().function, "softmax");
    assert_eq!(
        lookup("ai.onnx", "Softmax", 21).unwrap().function,
        "softmax"
    );
    assert!(lookup("", "Clip", 1).is_none());
    // One declaration from opset 6: the bounds' attribute and input forms are its gates.
    assert_eq!(lookup("", "Clip", 6).unwrap().function, "clip");
    assert_eq!(lookup("", "Clip", 13).unwrap().function, "clip");
    assert_eq!(lookup("", "Resize", 10).unwrap().function, "resize_10");
    assert_eq!(lookup("", "Resize", 11).unwrap().function, "resize");
    assert_eq!(
        lookup("com.microsoft", "Gelu", 1).unwrap().function,
        "ms_gelu"
    );
    assert_eq!(lookup("", "Gelu", 20).unwrap().function, "gelu");
}

fn add_node() -> op_specs::Node {
    node(
        "Add",
        14,
        &[ElemType::Float, ElemType::Float],
        ElemType::Float,
    )
}

#[test]
fn claims_a_plain_node_with_its_shape_safety() {
    match decide(&add_node()) {
        Decision::Claim { spec, shape } => {
            assert_eq!(spec.op, "Add");
            assert_eq!(shape, op_specs::ShapeSafety::Shapeless);
        }
        Decision::Decline { reason } => panic!("declined: {reason}"),
    }
}

#[test]
fn declines_always_carry_a_reason() {
    let cases = [
        (
            node("NoSuchOp", 1, &[ElemType::Float], ElemType::Float),
            "no MLX lowering",
        ),
        (
            node("Clip", 1, &[ElemType::Float], ElemType::Float),
            "opset 1 is not covered (covered: 6+)",
        ),
        (
            add_node().attr("broadcast", AttrValue::Int(1)),
            "attribute 'broadcast'",
        ),
        (
            node(
                "Add",
                14,
                &[ElemType::Double, ElemType::Double],
                ElemType::Double,
            ),
            "'A' is f64",
        ),
        (
            node(
                "Add",
                14,
                &[ElemType::String, ElemType::String],
                ElemType::String,
            ),
            "'A' is string",
        ),
        (
            node(
                "Add",
                14,
                &[ElemType::Float, ElemType::Int32],
                ElemType::Float,
            ),
            "'A' is f32 but 'B' is i32",
        ),
        (
            node("Add", 14, &[ElemType::Float], ElemType::Float),
            "required input 'B' is missing",
        ),
        (
            node(
                "BitShift",
                11,
                &[ElemType::Uint8, ElemType::Uint8],
                ElemType::Uint8,
            ),
            "required attribute 'direction'",
        ),
        (
            node("Softmax", 13, &[ElemType::Float], ElemType::Float)
                .attr("axis", AttrValue::Float(1.0)),
            "attribute 'axis' is a float",
        ),
        (
            node(
                "Mod",
                13,
                &[ElemType::Float, ElemType::Float],
                ElemType::Float,
            ),
            "fmod=0 is invalid for floating-point inputs",
        ),
        (
            node(
                "Pow",
                15,
                &[ElemType::Int32, ElemType::Float],
                ElemType::Int32,
            ),
            "an int32 base with a f32 exponent",
        ),
        (
            node("Gelu", 20, &[ElemType::Float], ElemType::Float)
                .attr("approximate", AttrValue::String("erf".into())),
            "approximate",
        ),
        (
            node(
                "Equal",
                19,
                &[ElemType::Float, ElemType::Float],
                ElemType::Float,
            ),
            "'C' is f32; this EP runs Equal-19 with T1 = {bool}",
        ),
    ];
    for (node, expected) in cases {
        let reason =
            decline_reason(&node).unwrap_or_else(|| panic!("{} was claimed", node.op_type));
        assert!(
            reason.contains(expected),
            "{}: reason {reason:?} lacks {expected:?}",
            node.op_type
        );
    }
}

/// Every entry declines a node carrying an attribute it does not name, naming it: an ignored
/// attribute would be a silently wrong answer.
#[test]
fn every_entry_declines_unknown_attributes_by_name() {
    for spec in all() {
        let mut n = op_specs::Node::new(spec.op, spec.since).in_domain(spec.domain);
        for port in spec.inputs.iter().chain(spec.outputs) {
            let t = spec
                .type_var(port.type_var)
                .unwrap()
                .allowed
                .iter()
                .next()
                .unwrap();
            n = if spec.inputs.iter().any(|p| std::ptr::eq(p, port)) {
                n.input(t)
            } else {
                n.output(t)
            };
        }
        let n = n.attr("surely_not_an_onnx_attribute", AttrValue::Int(0));
        let reason =
            decline_reason(&n).unwrap_or_else(|| panic!("{spec:?} claimed an unknown attribute"));
        assert!(
            reason.contains("surely_not_an_onnx_attribute"),
            "{spec:?}: {reason}"
        );
    }
}
