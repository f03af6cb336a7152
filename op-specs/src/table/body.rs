//! Control-flow bodies: the graphs a node holds as attributes (If's branches, Loop's and Scan's
//! bodies), claimed and lowered node by node through the same table as the enclosing graph.
//! ORT cannot run a plugin EP's fused node inside a body, so a body runs on MLX only as part
//! of its control-flow node: whole, or not at all.

use std::collections::HashMap;

use mlx_kernels::Array;

use super::consts::tensor_array;
use super::lower::{Lower, OpError, Result, Value};
use super::node::{AttrValue, Graph, Node, ValueInfo};
use super::registry::{decide, Decision};
use super::spec::{ShapeSafety, Verdict};

/// Whether every node of `body` is claimed and every output is a tensor MLX holds; the first
/// problem's reason otherwise. `what` names the body in the reason ("then_branch").
pub fn claim_body(body: &Graph, what: &str) -> Verdict {
    for node in &body.nodes {
        if let Decision::Decline { reason } = decide(node) {
            return Verdict::decline(format!(
                "{what}: node '{}' ({}) stays on ORT's CPU EP: {reason}",
                node.name, node.op_type
            ));
        }
    }
    if let Some(output) = body
        .outputs
        .iter()
        .find(|v| v.elem.is_none() || !v.is_tensor())
    {
        return Verdict::decline(format!(
            "{what}: output '{}' is not a tensor of an element type this EP knows",
            output.name
        ));
    }
    Verdict::Claim
}

/// A control-flow node's shape safety: no more compile-friendly than any node of its bodies,
/// and at least shape-keyed, since what picks the work (If's condition, Loop's trip count and
/// conditions, Scan's sequence length) is read on the host or from shapes.
pub fn bodies_shape_safety(node: &Node) -> ShapeSafety {
    node.attributes
        .iter()
        .filter_map(|(_, value)| match value {
            AttrValue::Graph(body) => Some(body),
            _ => None,
        })
        .flat_map(|body| &body.nodes)
        .map(|node| match decide(node) {
            Decision::Claim { shape, .. } => shape,
            Decision::Decline { .. } => ShapeSafety::Eager,
        })
        .fold(ShapeSafety::ShapeKeyed, ShapeSafety::max)
}

/// Lowers `body` over `values` (every value its nodes read from outside it, by name: the
/// enclosing scopes' and the body's own inputs) and its initializers; returns its outputs in
/// order. The nodes' run-time checks become the enclosing node's.
pub fn lower_body(
    cx: &mut Lower,
    body: &Graph,
    given: HashMap<String, Array>,
) -> Result<Vec<Array>> {
    let mut values: HashMap<String, Value> = given
        .into_iter()
        .map(|(name, array)| (name, Value::Tensor(array)))
        .collect();
    for (name, tensor) in &body.initializers {
        values.insert(name.clone(), Value::Tensor(tensor_array(tensor)?));
    }
    // ORT lists a graph's nodes in topological order; a pass that finds a node whose inputs
    // are not all ready yet keeps it for the next pass, so any order lowers.
    let mut pending: Vec<&Node> = body.nodes.iter().collect();
    while !pending.is_empty() {
        let before = pending.len();
        let mut later = Vec::new();
        for node in pending {
            if reads_ready(node, &values) {
                lower_node(cx, node, &mut values)?;
            } else {
                later.push(node);
            }
        }
        if later.len() == before {
            return Err(OpError::new(format!(
                "node '{}' ({}) of a body reads a value that nothing in or around the body \
                 provides",
                later[0].name, later[0].op_type
            )));
        }
        pending = later;
    }
    body.outputs
        .iter()
        .map(|output| {
            let what = format!("the body's output '{}'", output.name);
            values
                .get(&output.name)
                .cloned()
                .ok_or_else(|| OpError::new(format!("{what} is never computed")))?
                .into_tensor(&what)
        })
        .collect()
}

fn reads_ready(node: &Node, values: &HashMap<String, Value>) -> bool {
    node.reads().all(|v| values.contains_key(&v.name))
}

fn lower_node(cx: &mut Lower, node: &Node, values: &mut HashMap<String, Value>) -> Result<()> {
    let in_body = |message: &str| {
        OpError::new(format!(
            "node '{}' ({}) of a body: {message}",
            node.name, node.op_type
        ))
    };
    let spec = match decide(node) {
        Decision::Claim { spec, .. } => spec,
        Decision::Decline { reason } => return Err(in_body(&reason)),
    };
    let value = |v: &ValueInfo| values.get(&v.name).cloned();
    let args: Vec<Option<Value>> = node
        .inputs
        .iter()
        .map(|slot| slot.as_ref().filter(|v| !v.name.is_empty()).and_then(value))
        .chain(node.implicit_inputs.iter().map(value))
        .collect();
    let lowered = spec
        .lower_node(cx.stream(), node, &args)
        .map_err(|e| in_body(&e.message))?;
    for check in lowered.checks {
        cx.require(
            &check.holds,
            format!("node '{}' of a body: {}", node.name, check.message),
        )?;
    }
    for (slot, array) in node.outputs.iter().zip(lowered.outputs) {
        if let Some(value) = slot.as_ref().filter(|v| !v.name.is_empty()) {
            values.insert(value.name.clone(), array);
        }
    }
    Ok(())
}
