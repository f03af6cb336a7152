//! Support for the unit tests in the family files: a node built from its types, run through the
//! table (claim, lowering, run-time checks) as the EP runs it, and its results read back. The
//! suites in op-specs/tests/ have their own copy in tests/common, since `cfg(test)` code is not
//! compiled into the library they link.

use std::cell::RefCell;

use mlx_kernels::{Array, Stream};

use super::dtypes::ElemType;
use super::lower::{ConstantInputs, Prepared, SharedDerivations, Value};
use super::node::Node;
use super::registry::{decide, Decision};

pub fn stream() -> Stream {
    Stream::best().expect("MLX has a default device")
}

/// What a plan lends a node's lowering (its prepared constants and the derivations its nodes
/// share), for tests that lower in a plan's context (`Lower::with_constants`).
#[derive(Debug, Default)]
pub struct PlanStores {
    pub prepared: RefCell<Prepared>,
    pub shared: RefCell<SharedDerivations>,
}

impl PlanStores {
    /// The context of node 0 of a plan: `constant` per input, `read_once` per output, no host
    /// values, and whether the plan's shapes are fixed.
    pub fn context<'a>(
        &'a self,
        constant: &'a [bool],
        read_once: &'a [bool],
        shapes_fixed: bool,
    ) -> ConstantInputs<'a> {
        ConstantInputs {
            node: 0,
            constant,
            prepared: &self.prepared,
            host_values: &[],
            read_once,
            shapes_fixed,
            shared: &self.shared,
        }
    }
}

/// A node of `op` at opset `since` with one input per type in `inputs` and one output.
pub fn node(op: &str, since: i64, inputs: &[ElemType], output: ElemType) -> Node {
    inputs
        .iter()
        .fold(Node::new(op, since), |n, t| n.input(*t))
        .output(output)
}

/// Why the table declines `node`, or `None` when it claims it.
pub fn declined(node: &Node) -> Option<String> {
    match decide(node) {
        Decision::Claim { .. } => None,
        Decision::Decline { reason } => Some(reason),
    }
}

/// Whether the table claims `node`.
pub fn claimed(node: &Node) -> bool {
    declined(node).is_none()
}

/// Why the table declines `node`; fails the test when it claims it.
pub fn decline_reason(node: &Node) -> String {
    declined(node).unwrap_or_else(|| panic!("claimed {node:?}"))
}

/// Claims `node` through the table (failing the test on a decline) and lowers it; a run-time
/// check that does not hold is an error, as in the EP.
pub fn run(node: &Node, inputs: &[Option<Array>]) -> Result<Vec<Array>, String> {
    let lowered = match decide(node) {
        Decision::Claim { spec, .. } => spec
            .lower_node(&stream(), node, &tensors(inputs))
            .map_err(|e| e.to_string())?,
        Decision::Decline { reason } => panic!("{} declined: {reason}", node.op_type),
    };
    for check in &lowered.checks {
        let holds = check
            .holds
            .to_vec::<bool>(&stream())
            .map_err(|e| e.to_string())?;
        if holds != [true] {
            return Err(check.message.clone());
        }
    }
    lowered
        .outputs
        .into_iter()
        .map(|v| v.into_tensor("an output").map_err(|e| e.to_string()))
        .collect()
}

/// Tensor inputs as a lowering takes them.
pub fn tensors(inputs: &[Option<Array>]) -> Vec<Option<Value>> {
    inputs
        .iter()
        .map(|a| a.clone().map(Value::Tensor))
        .collect()
}

/// The first output of a node that must run.
pub fn run1(node: &Node, inputs: &[Option<Array>]) -> Array {
    run(node, inputs).unwrap().remove(0)
}

pub fn f32s(values: &[f32], shape: &[i64]) -> Array {
    Array::from_slice(values, shape).unwrap()
}

pub fn values_f32(a: &Array) -> Vec<f32> {
    a.to_vec::<f32>(&stream()).unwrap()
}
