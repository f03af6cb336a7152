//! A fused subgraph, copied out of ORT at compile time, and its execution on MLX.
//!
//! Values are numbered slots. Constant initializers are copied once at compile time and become
//! MLX arrays at the first run (on the thread that will own them); every run then builds one
//! lazy MLX graph from the table's lowerings and evaluates it once, at the boundary.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mlx_kernels::{Array, Stream};
use op_specs::{decide, Decision, ElemType, Node, OpSpec, ShapeSafety};

use crate::device;

/// A tensor the plan owns: an initializer copied out of ORT.
#[derive(Debug, Clone)]
pub struct HostConstant {
    pub name: String,
    pub elem: ElemType,
    pub shape: Vec<i64>,
    pub bytes: Vec<u8>,
}

#[derive(Debug)]
struct PlanNode {
    node: Node,
    spec: &'static OpSpec,
    inputs: Vec<Option<usize>>,
    outputs: Vec<Option<usize>>,
}

impl PlanNode {
    fn shape_safety(&self) -> ShapeSafety {
        self.spec.shape_safety(&self.node)
    }
}

#[derive(Debug, Clone, Copy)]
pub struct PlanOutput {
    pub slot: usize,
    pub elem: ElemType,
}

#[derive(Debug)]
pub struct Plan {
    pub name: String,
    nodes: Vec<PlanNode>,
    slot_count: usize,
    inputs: Vec<usize>,
    pub outputs: Vec<PlanOutput>,
    constants: Vec<(usize, HostConstant)>,
}

/// The MLX side of a plan, created on (and owned by) the thread that first runs it.
pub struct Runtime {
    pub stream: Stream,
    pub constants: Vec<(usize, Array)>,
}

/// Time spent per phase of one run.
#[derive(Debug, Default, Clone, Copy)]
pub struct RunTimes {
    pub translate: Duration,
    pub eval: Duration,
}

/// A run-time check of one node (see `op_specs::RuntimeCheck`), its message naming the node.
#[derive(Debug, Clone)]
pub struct NodeCheck {
    pub holds: Array,
    /// Shared: a compiled closure's replays reuse the messages its trace recorded.
    pub message: Arc<str>,
}

/// The lazy MLX graph of one run: outputs, the checks they are valid under, and every array
/// of the graph (kept until evaluation).
pub struct Lowering {
    pub outputs: Vec<Array>,
    pub checks: Vec<NodeCheck>,
    pub keep_alive: Vec<Option<Array>>,
}

/// Why evaluating a lowering failed.
#[derive(Debug)]
pub enum EvalError {
    /// MLX could not evaluate the graph (or a lowering produced the wrong type).
    Mlx(String),
    /// A run-time check did not hold: the input values are at fault, on any path.
    Input(String),
}

impl From<EvalError> for String {
    fn from(e: EvalError) -> String {
        match e {
            EvalError::Mlx(m) | EvalError::Input(m) => m,
        }
    }
}

/// The outputs of one run, evaluated. `keep_alive` holds every array of the run, inputs
/// included, until the outputs are copied out: MLX must never become the sole owner of an
/// input that borrows ORT's memory (it could reuse the buffer).
pub struct Evaluated {
    pub outputs: Vec<Array>,
    #[allow(dead_code)]
    keep_alive: Vec<Option<Array>>,
}

impl Plan {
    /// Builds a plan from a fused subgraph: its nodes (any order), the names of the fused
    /// node's inputs and outputs, and its constant initializers.
    pub fn build(
        name: String,
        nodes: Vec<Node>,
        input_names: &[String],
        outputs: &[(String, Option<ElemType>)],
        constants: Vec<HostConstant>,
    ) -> Result<Plan, String> {
        let mut slots = Slots::default();
        let constants: Vec<(usize, HostConstant)> = constants
            .into_iter()
            .map(|c| (slots.of(&c.name), c))
            .collect();
        let inputs: Vec<usize> = input_names.iter().map(|n| slots.of(n)).collect();
        let mut available: Vec<bool> = vec![true; slots.len()];

        let mut plan_nodes = Vec::with_capacity(nodes.len());
        for node in order_by_dependencies(nodes) {
            let spec = match decide(&node) {
                Decision::Claim { spec, .. } => spec,
                Decision::Decline { reason } => {
                    return Err(format!(
                        "node '{}' ({}) was fused but is now declined: {reason}",
                        node.name, node.op_type
                    ))
                }
            };
            let inputs = node
                .inputs
                .iter()
                .map(|v| {
                    v.as_ref()
                        .filter(|v| !v.name.is_empty())
                        .map(|v| slots.of(&v.name))
                })
                .collect::<Vec<_>>();
            for (value, s) in node.inputs.iter().zip(&inputs) {
                if let (Some(value), Some(s)) = (value, s) {
                    if !available.get(*s).copied().unwrap_or(false) {
                        return Err(format!(
                            "node '{}' ({}) reads '{}', which nothing in the fused graph provides",
                            node.name, node.op_type, value.name
                        ));
                    }
                }
            }
            let outputs: Vec<Option<usize>> = node
                .outputs
                .iter()
                .map(|v| {
                    v.as_ref()
                        .filter(|v| !v.name.is_empty())
                        .map(|v| slots.of(&v.name))
                })
                .collect();
            available.resize(slots.len(), false);
            for s in outputs.iter().flatten() {
                available[*s] = true;
            }
            plan_nodes.push(PlanNode {
                node,
                spec,
                inputs,
                outputs,
            });
        }
        let outputs = outputs
            .iter()
            .map(|(name, elem)| {
                let slot = slots
                    .find(name)
                    .ok_or_else(|| format!("fused output '{name}' is produced by no node"))?;
                let elem = elem.ok_or_else(|| {
                    format!("fused output '{name}' is not a tensor of a known type")
                })?;
                Ok(PlanOutput { slot, elem })
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Plan {
            name,
            nodes: plan_nodes,
            slot_count: slots.len(),
            inputs,
            outputs,
            constants,
        })
    }

    /// The MLX state of this plan: its stream and its constants as arrays.
    pub fn start(&self) -> Result<Runtime, String> {
        let stream = device::stream().map_err(|e| e.to_string())?;
        let constants = self
            .constants
            .iter()
            .map(|(slot, c)| {
                let dtype = c
                    .elem
                    .to_mlx()
                    .ok_or_else(|| format!("initializer '{}' has no MLX type", c.name))?;
                Array::from_bytes(&c.bytes, &c.shape, dtype)
                    .map(|a| (*slot, a))
                    .map_err(|e| format!("initializer '{}': {e}", c.name))
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Runtime { stream, constants })
    }

    /// The constant initializers the plan copied out of ORT.
    pub fn constants(&self) -> impl Iterator<Item = &HostConstant> {
        self.constants.iter().map(|(_, c)| c)
    }

    /// The least flexible shape safety of the plan's nodes: `Shapeless` only if every node is.
    pub fn shape_safety(&self) -> ShapeSafety {
        self.nodes
            .iter()
            .map(PlanNode::shape_safety)
            .max()
            .unwrap_or(ShapeSafety::Shapeless)
    }

    /// Lowers every node into one lazy MLX graph and evaluates the outputs together.
    pub fn run(
        &self,
        runtime: &Runtime,
        inputs: Vec<Option<Array>>,
        times: &mut RunTimes,
    ) -> Result<Evaluated, String> {
        let started = Instant::now();
        let lowering = self.lower(&runtime.stream, &runtime.constants, inputs)?;
        times.translate += started.elapsed();
        Ok(self.evaluate(lowering, &runtime.stream, times)?)
    }

    /// Evaluates the outputs (checking their types against the graph's) and the run-time
    /// checks in one go, failing the run on the first check that does not hold; keeps every
    /// array of the lowering until the caller has copied the outputs out.
    pub fn evaluate(
        &self,
        lowering: Lowering,
        stream: &Stream,
        times: &mut RunTimes,
    ) -> Result<Evaluated, EvalError> {
        let Lowering {
            outputs,
            checks,
            keep_alive,
        } = lowering;
        for (array, expected) in outputs.iter().zip(&self.outputs) {
            let produced = ElemType::from_mlx(array.dtype());
            if produced != expected.elem {
                return Err(EvalError::Mlx(format!(
                    "a lowering produced {} where the graph declares {} (table bug; set \
                     ONNXRUNTIME_EP_MLX_CLAIM_DEBUG=1 to see which node)",
                    produced.short_name(),
                    expected.elem.short_name()
                )));
            }
        }
        let evaluating = Instant::now();
        let mut all = outputs.clone();
        all.extend(checks.iter().map(|c| c.holds.clone()));
        Array::eval_all(&all)
            .map_err(|e| EvalError::Mlx(format!("MLX evaluation of {} failed: {e}", self.name)))?;
        times.eval += evaluating.elapsed();
        for check in &checks {
            let holds = check
                .holds
                .to_vec::<bool>(stream)
                .map_err(|e| EvalError::Mlx(format!("reading a check of {}: {e}", self.name)))?;
            if holds != [true] {
                return Err(EvalError::Input(check.message.to_string()));
            }
        }
        Ok(Evaluated {
            outputs,
            keep_alive,
        })
    }

    /// Builds the lazy MLX graph of the plan over `inputs` (one per fused-node input). Also the
    /// body of a compiled closure, where `inputs` are MLX's tracers.
    pub fn lower(
        &self,
        stream: &Stream,
        constants: &[(usize, Array)],
        inputs: Vec<Option<Array>>,
    ) -> Result<Lowering, String> {
        let mut env: Vec<Option<Array>> = vec![None; self.slot_count];
        for (slot, array) in constants {
            env[*slot] = Some(array.clone());
        }
        if inputs.len() != self.inputs.len() {
            return Err(format!(
                "{} inputs given, the fused graph takes {}",
                inputs.len(),
                self.inputs.len()
            ));
        }
        for (slot, array) in self.inputs.iter().zip(inputs) {
            env[*slot] = array;
        }
        let mut checks = Vec::new();
        for planned in &self.nodes {
            let args: Vec<Option<Array>> = planned
                .inputs
                .iter()
                .map(|s| s.and_then(|s| env[s].clone()))
                .collect();
            let lowered = planned
                .spec
                .lower_node(stream, &planned.node, &args)
                .map_err(|e| node_error(&planned.node, &e.message))?;
            checks.extend(lowered.checks.into_iter().map(|c| NodeCheck {
                holds: c.holds,
                message: failed_check(&planned.node, &c.message).into(),
            }));
            for (slot, result) in planned.outputs.iter().zip(lowered.outputs) {
                if let Some(slot) = slot {
                    env[*slot] = Some(without_kernel_if_empty(result)?);
                }
            }
        }
        let outputs = self
            .outputs
            .iter()
            .map(|o| {
                env[o.slot]
                    .clone()
                    .ok_or_else(|| "a fused output was never computed".to_owned())
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Lowering {
            outputs,
            checks,
            keep_alive: env,
        })
    }
}

/// A zero-size result as a constant: nothing to compute, and MLX's CUDA backend traps
/// (SIGFPE) launching some kernels over zero elements, so no kernel may ever see one.
fn without_kernel_if_empty(array: Array) -> Result<Array, String> {
    if array.size() > 0 {
        return Ok(array);
    }
    Array::from_bytes(&[], &array.shape(), array.dtype()).map_err(|e| e.to_string())
}

/// Value names numbered in order of first appearance.
#[derive(Default)]
struct Slots(HashMap<String, usize>);

impl Slots {
    fn of(&mut self, name: &str) -> usize {
        let next = self.0.len();
        *self.0.entry(name.to_owned()).or_insert(next)
    }

    fn find(&self, name: &str) -> Option<usize> {
        self.0.get(name).copied()
    }

    fn len(&self) -> usize {
        self.0.len()
    }
}

fn node_error(node: &Node, message: &str) -> String {
    format!(
        "{}: {message}. Set ONNXRUNTIME_EP_MLX_DISABLE=1 to run the model on ORT's CPU EP and \
         please report the model",
        node_label(node)
    )
}

/// A check that failed is the model's input data at fault (ORT's CPU EP rejects it too), not
/// the EP: the message says which node and what to fix.
fn failed_check(node: &Node, message: &str) -> String {
    format!(
        "{}: {message} (ORT's CPU EP rejects this input too; check the values fed to the node)",
        node_label(node)
    )
}

/// `node 'name' (domain.Op)`.
fn node_label(node: &Node) -> String {
    let dot = if node.domain().is_empty() { "" } else { "." };
    format!(
        "node '{}' ({}{dot}{})",
        node.name(),
        node.domain(),
        node.op_type()
    )
}

/// Orders nodes so that every value is produced before it is consumed.
fn order_by_dependencies(nodes: Vec<Node>) -> Vec<Node> {
    let predecessors = crate::ort::graph::predecessors(&nodes);
    let order = crate::partition::topological_order(&predecessors);
    let mut slots: Vec<Option<Node>> = nodes.into_iter().map(Some).collect();
    order.into_iter().filter_map(|i| slots[i].take()).collect()
}
