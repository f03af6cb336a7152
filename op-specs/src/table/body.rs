//! Control-flow bodies: the graphs a node holds as attributes (If's branches, Loop's and Scan's
//! bodies), claimed and lowered node by node through the same table as the enclosing graph.
//! ORT cannot run a plugin EP's fused node inside a body, so a body runs on MLX only as part
//! of its control-flow node: whole, or not at all.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::sync::Arc;

use mlx_kernels::{Array, Closure, Dtype, Stream};

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
        values.insert(
            name.clone(),
            Value::Tensor(tensor_array(tensor, cx.stream())?),
        );
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

/// How many sets of input shapes one compiled body may trace before the loop lowers it node by
/// node instead: a body whose carried values grow every iteration would otherwise trace at
/// every step.
const SHAPES_PER_BODY: usize = 8;

/// The shapes and element types of a closure's inputs: what MLX keys its traces on.
type Signature = Vec<(Vec<i64>, Dtype)>;

/// A body compiled into an MLX closure once and replayed at every step of its loop: a step
/// then costs a replay of the traced graph, not a lowering of every node (an eager loop runs
/// 1.7-2.4x faster on the CPU backend, see `docs/DESIGN.md`). Inside an enclosing trace MLX
/// runs the body again at every step, which unrolls it into that trace. A body that cannot be traced (one of its nodes
/// reads a traced value on the host, such as a Slice at the iteration number) or that keeps
/// changing shape is lowered node by node from then on.
#[derive(Debug)]
pub struct CompiledBody {
    /// None where nothing outlives the lowering (a loop nested in a body): a closure traced
    /// for one lowering would cost more than it saves.
    closure: Option<Closure>,
    /// The enclosing values the body reads, in the order they follow its own inputs.
    enclosing: Vec<String>,
    /// The messages of the run-time checks the last trace made; their `holds` follow the
    /// body's outputs in the closure's results.
    checks: Rc<RefCell<Vec<String>>>,
    /// How often MLX ran the body to trace it (inside an enclosing trace, at every step: the
    /// replay is inlined), and the input shapes and types it was traced for.
    traces: Rc<Cell<u32>>,
    shapes: RefCell<HashSet<Signature>>,
    direct: Cell<bool>,
    /// Steps run by replaying the closure, and lowered node by node.
    replayed: Cell<u64>,
    lowered: Cell<u64>,
}

/// What a plan's compiled bodies did, for the session summary.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct BodiesReport {
    pub bodies: usize,
    pub traces: u64,
    pub replayed: u64,
    pub lowered: u64,
}

impl BodiesReport {
    pub(super) fn add(&mut self, body: &CompiledBody) {
        self.bodies += 1;
        self.traces += u64::from(body.traces.get());
        self.replayed += body.replayed.get();
        self.lowered += body.lowered.get();
    }
}

impl CompiledBody {
    /// The compiled `body` of `node` (a closure over a copy of both), kept for the plan's later
    /// runs under `tag` (the attribute's name).
    pub fn of(cx: &mut Lower, tag: &'static str, body: &Arc<Graph>) -> Result<Rc<CompiledBody>> {
        if !cx.keeps_across_runs() {
            return Ok(Rc::new(CompiledBody::from_parts(
                None,
                Vec::new(),
                Rc::default(),
                Rc::default(),
            )));
        }
        let (stream, node) = (cx.stream().clone(), cx.node().clone());
        let mut enclosing: Vec<String> = cx.enclosing().keys().cloned().collect();
        enclosing.sort();
        let body = Arc::clone(body);
        cx.kept(tag, move || {
            Ok(CompiledBody::new(stream, node, body, enclosing)?)
        })
    }

    fn new(
        stream: Stream,
        node: Node,
        body: Arc<Graph>,
        enclosing: Vec<String>,
    ) -> mlx_kernels::Result<CompiledBody> {
        let checks = Rc::new(RefCell::new(Vec::new()));
        let traces = Rc::new(Cell::new(0));
        let names: Vec<String> = body
            .inputs
            .iter()
            .map(|input| input.name.clone())
            .chain(enclosing.iter().cloned())
            .collect();
        let (messages, traced) = (Rc::clone(&checks), Rc::clone(&traces));
        // MLX calls this when it traces (a new set of input shapes), and at every step inside
        // an enclosing trace.
        let trace = move |args: &[Array]| -> mlx_kernels::Result<Vec<Array>> {
            traced.set(traced.get() + 1);
            let values = names.iter().cloned().zip(args.iter().cloned()).collect();
            let mut cx = Lower::new(&stream, &node);
            let mut outputs = lower_body(&mut cx, &body, values)
                .map_err(|e| mlx_kernels::Error::Callback(e.message))?;
            let (checks, _, _) = cx.into_records();
            *messages.borrow_mut() = checks.iter().map(|c| c.message.clone()).collect();
            outputs.extend(checks.into_iter().map(|c| c.holds));
            Ok(outputs)
        };
        let closure = Closure::new(trace).compile(false)?;
        Ok(CompiledBody::from_parts(
            Some(closure),
            enclosing,
            checks,
            traces,
        ))
    }

    /// A body that steps through `closure`, or node by node when there is none.
    fn from_parts(
        closure: Option<Closure>,
        enclosing: Vec<String>,
        checks: Rc<RefCell<Vec<String>>>,
        traces: Rc<Cell<u32>>,
    ) -> CompiledBody {
        CompiledBody {
            direct: Cell::new(closure.is_none()),
            closure,
            enclosing,
            checks,
            traces,
            shapes: RefCell::default(),
            replayed: Cell::new(0),
            lowered: Cell::new(0),
        }
    }

    /// Runs the body on its own inputs `own` (in its input order) and the enclosing values
    /// `cx` holds; returns its outputs. Run-time checks of its nodes become `cx`'s.
    pub fn run(&self, cx: &mut Lower, body: &Graph, own: Vec<Array>) -> Result<Vec<Array>> {
        if !self.direct.get() {
            if let Some(outputs) = self.replay(cx, body, &own)? {
                self.replayed.set(self.replayed.get() + 1);
                return Ok(outputs);
            }
            self.direct.set(true);
        }
        self.lowered.set(self.lowered.get() + 1);
        let mut values = cx.enclosing().clone();
        for (input, value) in body.inputs.iter().zip(own) {
            values.insert(input.name.clone(), value);
        }
        lower_body(cx, body, values)
    }

    /// The replayed outputs, or `None` when the body cannot be traced. After too many traces
    /// the next steps lower directly.
    fn replay(&self, cx: &mut Lower, body: &Graph, own: &[Array]) -> Result<Option<Vec<Array>>> {
        let mut args = own.to_vec();
        for name in &self.enclosing {
            let value = cx.enclosing().get(name).ok_or_else(|| {
                OpError::new(format!("the body reads '{name}', which was not given"))
            })?;
            args.push(value.clone());
        }
        let Some(closure) = &self.closure else {
            return Ok(None);
        };
        let signature = args.iter().map(|a| (a.shape(), a.dtype())).collect();
        let mut shapes = self.shapes.borrow_mut();
        if shapes.len() == SHAPES_PER_BODY && !shapes.contains(&signature) {
            return Ok(None);
        }
        shapes.insert(signature);
        drop(shapes);
        // A failure is the trace's (a host read of a traced value): lowering node by node
        // then either works or reports the node's own error.
        let Ok(mut results) = closure.apply(&args) else {
            return Ok(None);
        };
        let messages = self.checks.borrow();
        let outputs = body.outputs.len();
        if results.len() != outputs + messages.len() {
            return Ok(None);
        }
        for (holds, message) in results.split_off(outputs).iter().zip(messages.iter()) {
            cx.require(holds, message.clone())?;
        }
        Ok(Some(results))
    }
}
