//! The generic part of every claim: attributes, input/output slots, and type constraints,
//! read off the spec. A custom claim function runs only after these pass.

use std::collections::HashMap;

use super::dtypes::ElemType;
use super::node::{AttrValue, Node};
use super::spec::{gate_label, port_for, AttrKind, OpSpec, Verdict};

pub fn check(spec: &OpSpec, node: &Node) -> Verdict {
    let verdict = attributes(spec, node)
        .and_then(|()| ports(spec, node))
        .and_then(|()| implicit_inputs(node))
        .and_then(|()| type_constraints(spec, node))
        .and_then(|()| dims_fit(spec, node));
    match (verdict, spec.custom_claim) {
        (Err(reason), _) => Verdict::Decline { reason },
        (Ok(()), Some(custom)) => custom(node),
        (Ok(()), None) => Verdict::Claim,
    }
}

fn attributes(spec: &OpSpec, node: &Node) -> Result<(), String> {
    let version = node.since_version();
    for name in node.attribute_names() {
        // An attribute the declaration does not read would be silently ignored: refuse it.
        let Some(declared) = spec.attributes.iter().find(|a| a.name == name) else {
            return Err(format!(
                "attribute '{name}' is not supported by this EP's {}",
                spec.op
            ));
        };
        if !declared.exists_at(version) {
            return Err(format!(
                "attribute '{name}' is not part of {}-{version} (it exists in opsets{})",
                spec.op,
                gate_label(declared.since, declared.until)
            ));
        }
        if let Some(value) = node.attribute(&name) {
            if !kind_matches(declared.kind, &value) {
                return Err(format!(
                    "attribute '{name}' is a {} where {:?} is expected",
                    value.kind_name(),
                    declared.kind
                ));
            }
        }
    }
    match spec
        .attributes
        .iter()
        .find(|a| a.required && a.exists_at(version) && node.attribute(a.name).is_none())
    {
        Some(missing) => Err(format!("required attribute '{}' is missing", missing.name)),
        None => Ok(()),
    }
}

fn kind_matches(kind: AttrKind, value: &AttrValue) -> bool {
    matches!(
        (kind, value),
        (AttrKind::Int, AttrValue::Int(_))
            | (AttrKind::Float, AttrValue::Float(_))
            | (AttrKind::String, AttrValue::String(_))
            | (AttrKind::Ints, AttrValue::Ints(_))
            | (AttrKind::Floats, AttrValue::Floats(_))
            | (AttrKind::Strings, AttrValue::Strings(_))
            | (AttrKind::Tensor, AttrValue::Tensor(_))
            | (AttrKind::Graph, AttrValue::Graph(_))
    )
}

/// "a tensor", "a sequence", "an optional tensor" or "an optional sequence".
fn kind_name((sequence, optional): (bool, bool)) -> &'static str {
    match (sequence, optional) {
        (false, false) => "a tensor",
        (true, false) => "a sequence",
        (false, true) => "an optional tensor",
        (true, true) => "an optional sequence",
    }
}

/// What a node's bodies read from the enclosing scopes becomes an array of the lowering: it
/// must be a tensor MLX holds.
fn implicit_inputs(node: &Node) -> Result<(), String> {
    match node
        .implicit_inputs
        .iter()
        .find(|v| !v.is_tensor() || v.elem.and_then(ElemType::carrier).is_none())
    {
        Some(value) => Err(format!(
            "'{}', which a body reads, is not a tensor of an element type MLX holds",
            value.name
        )),
        None => Ok(()),
    }
}

fn ports(spec: &OpSpec, node: &Node) -> Result<(), String> {
    for (what, count, declared) in [
        ("inputs", node.input_count(), spec.inputs),
        ("outputs", node.output_count(), spec.outputs),
    ] {
        if (0..count).any(|i| port_for(declared, i).is_none()) {
            return Err(format!(
                "{count} {what} where the op takes {}",
                declared.len()
            ));
        }
    }
    let version = node.since_version();
    for (index, port) in spec.inputs.iter().enumerate() {
        // Connected is enough here: a tensor of a type this EP does not know (int2) is named as
        // such by the type check, not reported missing.
        let present = node.input_present(index);
        if version < port.since {
            // Not a slot yet at this opset (absent, or still an attribute): it must not be used.
            if node.input_present(index) {
                return Err(format!(
                    "input '{}' does not exist in {}-{version} (it is new in opset {})",
                    port.name, spec.op, port.since
                ));
            }
            continue;
        }
        if port.required_at(version) && !present {
            return Err(format!("required input '{}' is missing", port.name));
        }
    }
    Ok(())
}

fn type_constraints(spec: &OpSpec, node: &Node) -> Result<(), String> {
    let mut bound: HashMap<&str, (ElemType, &str)> = HashMap::new();
    let slots = (0..node.input_count())
        .map(|i| {
            (
                port_for(spec.inputs, i),
                node.input_present(i),
                node.input_type(i),
                node.input_kind(i),
            )
        })
        .chain((0..node.output_count()).map(|i| {
            (
                port_for(spec.outputs, i),
                node.output_present(i),
                node.output_type(i),
                node.output_kind(i),
            )
        }));
    for (port, present, elem, kind) in slots {
        let Some(port) = port else { continue };
        if present && kind != (port.sequence, port.optional_value) {
            return Err(format!(
                "'{}' is {} where the op takes {}",
                port.name,
                kind_name(kind),
                kind_name((port.sequence, port.optional_value))
            ));
        }
        let elem = match (present, elem) {
            (false, _) => continue,
            (true, Some(elem)) => elem,
            (true, None) => {
                return Err(format!(
                    "'{}' is not a tensor of an element type this EP knows",
                    port.name
                ))
            }
        };
        let var = spec
            .type_var(port.type_var)
            .ok_or_else(|| format!("declaration error: no type variable {}", port.type_var))?;
        let allowed = var.allowed_at(node.since_version());
        if !allowed.contains(elem) {
            return Err(format!(
                "'{}' is {}; this EP runs {}-{} with {} = {{{}}}",
                port.name,
                elem.short_name(),
                spec.op,
                node.since_version(),
                var.name,
                allowed.describe()
            ));
        }
        if port.heterogeneous {
            continue;
        }
        match bound.get(var.name) {
            Some((first, first_port)) if *first != elem => {
                return Err(format!(
                    "'{first_port}' is {} but '{}' is {} (both {})",
                    first.short_name(),
                    port.name,
                    elem.short_name(),
                    var.name
                ))
            }
            _ => {
                bound.insert(var.name, (elem, port.name));
            }
        }
    }
    Ok(())
}

/// MLX dims are `i32`. A declared dim beyond that (even on a tensor with no elements, such as
/// `[0, 2^31]`, which ORT's CPU EP handles) cannot become an MLX array, whatever the op: it is
/// declined here once for every op. Host-known shape values (Reshape's target, Expand's shape,
/// ConstantOfShape's input...) are caught here too whenever ORT inferred the output's shape from
/// them; dims known only at run time still reach the lowering, which refuses them by name.
fn dims_fit(spec: &OpSpec, node: &Node) -> Result<(), String> {
    let slots = (0..node.input_count())
        .map(|i| ("input", port_for(spec.inputs, i), node.input_shape(i)))
        .chain(
            (0..node.output_count())
                .map(|i| ("output", port_for(spec.outputs, i), node.output_shape(i))),
        );
    for (what, port, dims) in slots {
        let Some(dims) = dims else { continue };
        if let Some(big) = dims.iter().flatten().find(|&&d| d > i64::from(i32::MAX)) {
            let shape: Vec<String> = dims
                .iter()
                .map(|d| d.map_or_else(|| "?".to_owned(), |d| d.to_string()))
                .collect();
            return Err(format!(
                "{what} '{}' has a dim of {big} (shape [{}]); MLX dims are 32-bit (at most {})",
                port.map_or("?", |p| p.name),
                shape.join(", "),
                i32::MAX
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::table::testing::declined;
    use crate::{ElemType, Node};

    fn relu() -> Node {
        Node::new("Relu", 14)
            .input(ElemType::Float)
            .output(ElemType::Float)
    }

    #[test]
    fn a_dim_beyond_i32_is_declined_even_on_an_empty_tensor() {
        let big = Some(1i64 << 31);
        let on_input = relu().input_dims(0, &[Some(0), big]);
        let why = declined(&on_input).expect("declined");
        assert!(
            why.contains("input 'X' has a dim of 2147483648 (shape [0, 2147483648])"),
            "{why}"
        );
        let on_output = relu().output_dims(0, &[None, big]);
        let why = declined(&on_output).expect("declined");
        assert!(
            why.contains("output 'Y'") && why.contains("[?, 2147483648]"),
            "{why}"
        );
    }

    #[test]
    fn dims_up_to_i32_max_and_symbolic_dims_are_claimed() {
        let node = relu()
            .input_dims(0, &[Some(0), Some(i64::from(i32::MAX)), None])
            .output_dims(0, &[None, None, None]);
        assert_eq!(declined(&node), None);
    }
}
