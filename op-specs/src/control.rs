//! Control flow: If, whose branch joins the enclosing MLX graph.
//!
//! ORT cannot place a plugin EP's fused node inside a control-flow body, so the EP claims the
//! control-flow node itself, bodies and all ([`crate::table::body`]): a body whose every node
//! the table claims is lowered into the same MLX graph as the node around it, reading the
//! enclosing scopes' values (ORT's implicit inputs, which follow the node's own inputs).

use std::collections::HashMap;
use std::sync::Arc;

use mlx_kernels::Array;

use crate::table::body::{body_shape_safety, claim_body, lower_body};
use crate::table::spec::ShapeSafety;
use crate::{onnx_op, Graph, Lower, Node, OpError, Result, Verdict};

const BRANCHES: [&str; 2] = ["then_branch", "else_branch"];

/// Both branches run whole on MLX and give one output per output of the node.
fn if_claim(node: &Node) -> Verdict {
    for name in BRANCHES {
        let Some(branch) = node.graph(name) else {
            return Verdict::decline(format!("{name} is not a graph"));
        };
        if branch.outputs.len() != node.output_count() {
            return Verdict::decline(format!(
                "{name} gives {} outputs for the node's {}",
                branch.outputs.len(),
                node.output_count()
            ));
        }
        if let verdict @ Verdict::Decline { .. } = claim_body(branch, name) {
            return verdict;
        }
    }
    Verdict::Claim
}

/// The condition is read on the host (a trace is keyed on it), so at least shape-keyed; and
/// no more compile-friendly than either branch.
fn if_shape(node: &Node) -> ShapeSafety {
    BRANCHES
        .iter()
        .filter_map(|name| node.graph(name))
        .map(body_shape_safety)
        .fold(ShapeSafety::ShapeKeyed, ShapeSafety::max)
}

/// The branch `cond` names, lowered in place: only that branch's work is in the MLX graph.
/// The condition is read on the host: a constant or a value computed from shapes costs
/// nothing in a compiled trace (which is keyed on it); one computed from data is read once
/// per run, on the eager path.
#[onnx_op(
    op = "If", since = 1, types(B = BOOL, V = ANY), inputs(cond: B, outer: V), outputs(outputs...: V),
    heterogeneous(outer, outputs), shape = if_shape, claim = if_claim,
    declines = "a branch with a node this EP declines, an output that is not a tensor (sequences, optionals), or another output count than the node's"
)]
fn if_(
    cx: &mut Lower,
    #[host] cond: i64,
    outer: Vec<Array>,
    #[attr] then_branch: Arc<Graph>,
    #[attr] else_branch: Arc<Graph>,
) -> Result<Vec<Array>> {
    let branch = if cond != 0 { then_branch } else { else_branch };
    let names = cx
        .node()
        .inputs
        .iter()
        .skip(1)
        .flatten()
        .map(|v| v.name.clone());
    let values: HashMap<String, Array> = names.zip(outer).collect();
    let outputs = lower_body(cx, &branch, values)?;
    for (index, output) in outputs.iter().enumerate() {
        let declared = cx.output_dtype(index)?;
        if output.dtype() != declared {
            return Err(OpError::new(format!(
                "the branch's output {index} is {:?} where the node declares {declared:?}",
                output.dtype()
            )));
        }
    }
    Ok(outputs)
}
