//! A fused subgraph, copied out of ORT at compile time, and its execution on MLX.
//!
//! Values are numbered slots. Constant initializers are copied once at compile time and handed
//! to MLX at the first run (on the thread that will own them), which leaves the plan without a
//! host copy; initializers with identical bytes share one buffer. Every run then builds one lazy
//! MLX graph from the table's lowerings and evaluates it once, at the boundary; what lowerings
//! derive from constants alone is prepared once and kept (`op_specs::Prepared`).

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mlx_kernels::{custom, ops, stream_copy, Array, Dtype, Stream};
use op_specs::table::channels_last::answer_from_channels_last;
use op_specs::{
    decide, BodiesReport, ConstantInputs, Decision, ElemType, HostKey, Lower, Lowered, Node,
    OpSpec, Prepared, ShapeSafety, SharedDerivations, Value, ValueInfo,
};

use crate::channels_last::{self, NodeSlots};
use crate::device::Device;
use crate::diagnostics;
use crate::op_profile::OpProfile;
use crate::trace;

/// A tensor the plan owns: an initializer copied out of ORT.
#[derive(Debug, Clone)]
pub struct HostConstant {
    pub name: String,
    pub elem: ElemType,
    pub shape: Vec<i64>,
    pub bytes: Vec<u8>,
}

/// Initializers smaller than this are never compared for twins: shape vectors and scalars
/// cost nothing to hold twice.
const TWIN_MIN_BYTES: usize = 1024;

/// A constant of the plan: its bytes until the first run hands them to MLX, or the earlier
/// constant it is a byte-for-byte twin of (ORT's constant folding turns a Reshape of a weight,
/// as in tied embeddings, into a second initializer with the same bytes).
#[derive(Debug)]
struct PlanConstant {
    slot: usize,
    name: String,
    elem: ElemType,
    shape: Vec<i64>,
    len: usize,
    source: Source,
}

impl PlanConstant {
    /// Whether the plan still holds exactly these bytes for this constant.
    fn holds(&self, bytes: &[u8]) -> bool {
        match &self.source {
            Source::Bytes(own) => own.lock().is_ok_and(|own| own.as_deref() == Some(bytes)),
            Source::TwinOf(_) => false,
        }
    }

    /// The bytes, moved out of the plan (they go to MLX, which then owns the only copy).
    fn take(&self, bytes: &Mutex<Option<Vec<u8>>>) -> Result<Vec<u8>, String> {
        bytes.lock().ok().and_then(|mut b| b.take()).ok_or_else(|| {
            format!(
                "initializer '{}' was handed to MLX by an earlier start of this plan that \
                 failed; create the session again",
                self.name
            )
        })
    }
}

#[derive(Debug)]
enum Source {
    /// Taken at the first run, when MLX becomes their owner.
    Bytes(Mutex<Option<Vec<u8>>>),
    /// A reshape of the constant at this index of the plan's constants (an earlier one).
    TwinOf(usize),
}

/// A constant's element type, shape, and host bytes (integer constants only; empty otherwise).
pub type ConstantValues = (ElemType, Vec<i64>, Vec<u8>);

/// What the plan's constants are, for the session summary.
#[derive(Debug, Default, Clone, Copy)]
pub struct ConstantsReport {
    /// Bytes of the initializers MLX holds (twins once), and how many initializers are twins.
    pub bytes: usize,
    pub twins: usize,
    /// Arrays prepared from constants (each a key of `Prepared`), how many times a
    /// preparation ran, in how long, and the memory it added.
    pub prepared: usize,
    pub prepare_runs: u64,
    pub prepare_time: Duration,
    pub prepared_bytes: usize,
    /// Float32 constants rounded to the session's half type (the `precision` option).
    pub rounded: usize,
    /// What the control-flow bodies compiled once for their steps did.
    pub bodies: BodiesReport,
}

#[derive(Debug)]
pub(crate) struct PlanNode {
    node: Node,
    spec: &'static OpSpec,
    pub(crate) inputs: Vec<Option<usize>>,
    /// Per input: whether it is a constant of the plan (an absent input counts as one).
    constant_inputs: Vec<bool>,
    pub(crate) outputs: Vec<Option<usize>>,
    /// Per output: whether one node of the plan reads it, once, and the plan does not hand it
    /// on (`Lower::output_read_once`).
    read_once: Vec<bool>,
}

impl PlanNode {
    fn shape_safety(&self) -> ShapeSafety {
        self.spec.shape_safety(&self.node)
    }

    #[cfg(test)]
    pub(crate) fn op(&self) -> &str {
        self.node.op_type()
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
    pub(crate) nodes: Vec<PlanNode>,
    slot_count: usize,
    /// The slot of each fused-node input.
    pub(crate) inputs: Vec<usize>,
    /// Fused-node inputs the plan never reads: constants it already holds, which ORT feeds
    /// when it keeps a partition's initializers for a compiled model (`context`).
    unread_inputs: Vec<bool>,
    pub outputs: Vec<PlanOutput>,
    constants: Vec<PlanConstant>,
    /// Under the `precision` option: the type each node's float32 inputs are given in (the
    /// session's half type, or float32 where the node's row computes in float32).
    float32_inputs_as: Vec<Option<Dtype>>,
    half: Option<ElemType>,
    /// Per node: whether it runs over its inputs' channels-last forms (see channels_last.rs).
    channels_last: Vec<bool>,
    /// Node lowerings that did, over all runs and traces (a lowering that could not falls back
    /// to channels-first and is not counted).
    channels_last_lowered: AtomicUsize,
    /// Rewrites node lowerings made (several nodes answered by one computation), by what they
    /// made, over all runs and traces.
    rewrites: Mutex<BTreeMap<&'static str, usize>>,
}

/// The MLX side of a plan, created on (and owned by) the thread that first runs it.
pub struct Runtime {
    pub stream: Stream,
    pub constants: Constants,
}

/// What a lowering reads besides the run's inputs: the constants as arrays, by slot, and what
/// lowerings prepared from them. Cloning shares both (a compiled closure holds a clone).
#[derive(Clone)]
pub struct Constants {
    pub arrays: Vec<(usize, Array)>,
    /// Slots of the one-element float constants that hold -0.0 (see [`Constants::at_use`]).
    pub negative_zeros: Vec<usize>,
    pub prepared: Rc<RefCell<Prepared>>,
    /// Float32 constants rounded to the session's half type, by slot, made at first use.
    pub rounded: Rc<RefCell<HashMap<usize, Array>>>,
}

impl Constants {
    /// Time spent preparing arrays from constants so far.
    pub fn prepare_time(&self) -> Duration {
        self.prepared.borrow().time
    }
}

/// Time spent per phase of one run. `prepare` (arrays derived from constants, once per plan)
/// is not part of `translate`.
#[derive(Debug, Default, Clone)]
pub struct RunTimes {
    pub translate: Duration,
    pub eval: Duration,
    pub prepare: Duration,
    /// Of `translate`/`eval` on a compiled path: an eager prologue (lowered, evaluated and read
    /// on the host), and applying the compiled closure.
    pub prologue: Duration,
    pub replay: Duration,
    /// Per-op times, filled only when `ONNXRUNTIME_EP_MLX_PROFILE_OPS` is on.
    pub ops: OpProfile,
}

impl RunTimes {
    /// Adds the host time since `started` to `translate`, apart from what preparing constants
    /// took since `prepared_before` (a lowering, or a trace, may be the first to prepare them).
    pub fn charge_translation(
        &mut self,
        runtime: &Runtime,
        started: Instant,
        prepared_before: Duration,
    ) {
        let prepare = runtime.constants.prepare_time() - prepared_before;
        self.prepare += prepare;
        self.translate += started.elapsed().saturating_sub(prepare);
    }
}

/// The bytes of `parts` (any element types), one part after another in one 1-D uint8 array
/// (`None` when there are none): what the host reads of a run, read once, since every read of
/// a device array is a round trip on the GPU. On MLX's CUDA backend one kernel packs them
/// (`concatenate` would launch a copy per part, and a cast per bool part).
pub(crate) fn bytes_together(
    parts: impl IntoIterator<Item = Array>,
    stream: &Stream,
) -> mlx_kernels::Result<Option<Array>> {
    let parts: Vec<Array> = parts.into_iter().collect();
    let total = parts.iter().map(Array::nbytes).sum();
    if parts.len() > 1
        && custom::pack_bytes_runs_on(stream)
        && custom::pack_bytes_takes(parts.len(), total)
    {
        return custom::pack_bytes(&parts, stream).map(Some);
    }
    let flat = parts
        .iter()
        .map(|a| {
            // 1-D first: MLX views a 0-d array only as a type of its own size.
            let flat = ops::reshape(a, &[-1], stream)?;
            if a.dtype() == Dtype::Bool {
                ops::astype(&flat, Dtype::U8, stream)
            } else {
                ops::view(&ops::contiguous(&flat, stream)?, Dtype::U8, stream)
            }
        })
        .collect::<mlx_kernels::Result<Vec<_>>>()?;
    match flat.len() {
        0 => Ok(None),
        1 => Ok(flat.into_iter().next()),
        _ => ops::concatenate(&flat, 0, stream).map(Some),
    }
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
    /// Per output: the rows it writes in a buffer shared with an input, when its node said
    /// (`op_specs::WrittenRows`); `None`: every row.
    pub written_rows: Vec<Option<InPlace>>,
    pub keep_alive: Vec<Option<Array>>,
    /// What a speculative replay assumed, checked before anything else of the run is read.
    pub guard: Option<Guard>,
}

/// Values a replay was chosen without (a split prologue's host values, `capture.rs`): the
/// arrays (int64) are read with the run's checks, and `holds` says whether the replayed
/// trace was right for their values. When it was not, the evaluation fails as stale before any
/// check is read: the checks of a trace made for other values mean nothing.
pub struct Guard {
    pub values: Vec<Array>,
    pub holds: GuardTest,
}

/// Whether a guard holds for its values as read (one `Vec` per array).
pub type GuardTest = Box<dyn Fn(&[Vec<i64>]) -> bool>;

/// What a node said about an output it writes in place (`op_specs::WrittenRows`), lazily: the
/// rows' mask, when it had them the rows' values, and the buffer after the write.
#[derive(Debug, Clone)]
pub struct InPlace {
    pub mask: Array,
    pub values: Option<Array>,
    pub held: Array,
}

/// Why evaluating a lowering failed.
#[derive(Debug)]
pub enum EvalError {
    /// MLX could not evaluate the graph (or a lowering produced the wrong type).
    Mlx(String),
    /// A run-time check did not hold: the input values are at fault, on any path.
    Input(String),
    /// The lowering's guard did not hold (see [`Guard`]): run it again, without guessing.
    Stale,
}

impl From<EvalError> for String {
    fn from(e: EvalError) -> String {
        match e {
            EvalError::Mlx(m) | EvalError::Input(m) => m,
            EvalError::Stale => "a speculative replay did not fit the run (EP bug)".into(),
        }
    }
}

/// The outputs of one run, evaluated. `keep_alive` holds every array of the run, inputs
/// included, until the outputs are copied out: MLX must never become the sole owner of an
/// input that borrows ORT's memory (it could reuse the buffer). The exception is an input the
/// run may consume, a device mirror of our own (`capture::Consumable`).
pub struct Evaluated {
    pub outputs: Vec<Array>,
    pub written_rows: Vec<Option<RowMask>>,
    #[allow(dead_code)]
    keep_alive: Vec<Option<Array>>,
}

/// Where a run's outputs go, asked before the evaluation, once their shapes are known.
pub trait OutputSink {
    /// How the evaluation itself writes output `index` into its destination (on a GPU), or
    /// `None` to have it copied after the evaluation.
    fn store(&mut self, index: usize, output: &Array) -> Result<Option<Store>, String>;
    /// Output `index`, whose store [`OutputSink::store`] gave, was not made by the evaluation
    /// after all: it is copied after it.
    fn not_stored(&mut self, index: usize);
}

/// How an evaluation writes an output into its destination.
pub enum Store {
    /// By a kernel evaluated with the run (`custom::store_bytes`): the array to evaluate.
    Kernel(Array),
    /// By a copy on MLX's CUDA stream behind the run's kernels, into this destination.
    CopyInto(stream_copy::Destination),
}

/// Which rows an output writes in place (`op_specs::WrittenRows`): the mask on the device, and
/// its values (uint8, row-major, of `shape`) on the host; with the rows' contents (their bytes,
/// in row order) when the node gave them; and the buffer after the write (evaluated with the
/// run, in place of the output).
pub struct RowMask {
    pub shape: Vec<i64>,
    pub flags: Vec<u8>,
    pub values: Option<Vec<u8>>,
    pub held: Array,
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
        let constants = plan_constants(constants, &mut slots);
        let unread_inputs: Vec<bool> = input_names
            .iter()
            .map(|n| constants.iter().any(|c| &c.name == n))
            .collect();
        // An unread input gets a slot no node reads, so whatever it is fed leaves the constant
        // alone.
        let inputs: Vec<usize> = input_names
            .iter()
            .zip(&unread_inputs)
            .map(|(n, &unread)| {
                slots.of(&if unread {
                    format!("\0unread {n}")
                } else {
                    n.clone()
                })
            })
            .collect();
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
            // Input slots, then the implicit inputs (what the node's bodies read), which its
            // lowering receives after the inputs.
            let read: Vec<Option<&ValueInfo>> = node
                .inputs
                .iter()
                .map(Option::as_ref)
                .chain(node.implicit_inputs.iter().map(Some))
                .collect();
            let inputs = read
                .iter()
                .map(|v| v.filter(|v| !v.name.is_empty()).map(|v| slots.of(&v.name)))
                .collect::<Vec<_>>();
            for (value, s) in read.iter().zip(&inputs) {
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
            let constant_inputs = inputs
                .iter()
                .map(|s| s.is_none_or(|s| constants.iter().any(|c| c.slot == s)))
                .collect();
            plan_nodes.push(PlanNode {
                node,
                spec,
                inputs,
                constant_inputs,
                outputs,
                read_once: Vec::new(),
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
        mark_read_once(&mut plan_nodes, &outputs, slots.len());
        let channels_last = channels_last::runs_channels_last(
            &plan_nodes
                .iter()
                .map(|n| NodeSlots {
                    layout: n.spec.layout,
                    inputs: &n.inputs,
                    outputs: &n.outputs,
                })
                .collect::<Vec<_>>(),
        );
        Ok(Plan {
            name,
            channels_last,
            channels_last_lowered: AtomicUsize::new(0),
            rewrites: Mutex::default(),
            float32_inputs_as: vec![None; plan_nodes.len()],
            half: None,
            nodes: plan_nodes,
            slot_count: slots.len(),
            inputs,
            unread_inputs,
            outputs,
            constants,
        })
    }

    /// The plan computing its float32 values in `half` (float16 or bfloat16; `None`: as the
    /// graph says): each node is given its float32 inputs in `half` where its row computes in
    /// that type (`OpSpec::computes_in`), in float32 otherwise, and float32 outputs leave in
    /// float32.
    pub fn in_precision(mut self, half: Option<ElemType>) -> Plan {
        self.half = half;
        self.float32_inputs_as = self
            .nodes
            .iter()
            .map(|n| {
                let half = half?;
                Some(if n.spec.computes_in(&n.node, half) {
                    half.to_mlx()?
                } else {
                    Dtype::F32
                })
            })
            .collect();
        self
    }

    /// Under the `precision` option: its name, the nodes computing in the half type and all
    /// the plan's nodes.
    pub fn half_nodes(&self) -> Option<(&'static str, usize, usize)> {
        let name = match self.half? {
            ElemType::BFloat16 => "bf16",
            _ => "fp16",
        };
        let computing = self
            .float32_inputs_as
            .iter()
            .filter(|d| matches!(d, Some(Dtype::F16 | Dtype::BF16)))
            .count();
        Some((name, computing, self.nodes.len()))
    }

    /// How many elementwise node lowerings ran over channels-last forms, between convolutions.
    pub fn channels_last_lowered(&self) -> usize {
        self.channels_last_lowered.load(Ordering::Relaxed)
    }

    /// The rewrites node lowerings made, by what they made, over all runs and traces.
    pub fn rewrites(&self) -> Vec<(&'static str, usize)> {
        let rewrites = self.rewrites.lock().unwrap_or_else(|e| e.into_inner());
        rewrites.iter().map(|(&what, &n)| (what, n)).collect()
    }

    /// Whether the run needs fused-node input `index` (a constant the plan holds does not).
    pub fn reads_input(&self, index: usize) -> bool {
        !self.unread_inputs.get(index).copied().unwrap_or(false)
    }

    /// The MLX state of this plan: its stream and its constants as arrays. The constants' bytes
    /// move into MLX here (the plan keeps no copy), so a plan starts once.
    pub fn start(&self, device: Device) -> Result<Runtime, String> {
        let dtypes = self
            .constants
            .iter()
            .map(|c| {
                c.elem
                    .to_mlx()
                    .ok_or_else(|| format!("initializer '{}' has no MLX type", c.name))
            })
            .collect::<Result<Vec<_>, String>>()?;
        let stream = device.stream().map_err(|e| e.to_string())?;
        let mut arrays: Vec<Array> = Vec::with_capacity(self.constants.len());
        let mut negative_zeros = Vec::new();
        for (c, dtype) in self.constants.iter().zip(dtypes) {
            let array = match &c.source {
                Source::Bytes(bytes) => {
                    let bytes = c.take(bytes)?;
                    if op_specs::table::consts::holds_negative_zero(c.elem, &bytes) {
                        negative_zeros.push(c.slot);
                    }
                    Array::from_owned_bytes(bytes, &c.shape, dtype)
                }
                // Twins are at least TWIN_MIN_BYTES: never one element.
                Source::TwinOf(first) => ops::reshape(&arrays[*first], &c.shape, &stream),
            };
            arrays.push(array.map_err(|e| format!("initializer '{}': {e}", c.name))?);
        }
        // Evaluated now: a twin becomes a view of its first's buffer, not a copy.
        Array::eval_all(&arrays).map_err(|e| format!("loading the initializers: {e}"))?;
        let arrays = self.constants.iter().map(|c| c.slot).zip(arrays).collect();
        Ok(Runtime {
            stream,
            constants: Constants {
                arrays,
                negative_zeros,
                prepared: Rc::default(),
                rounded: Rc::default(),
            },
        })
    }

    /// The constants' element types and shapes, and the host bytes of the integer ones (read
    /// back from MLX: the plan keeps no copy), which are what host-side shape reasoning needs.
    pub fn integer_constants(&self, runtime: &Runtime) -> Result<Vec<ConstantValues>, String> {
        self.constants
            .iter()
            .zip(&runtime.constants.arrays)
            .map(|(c, (_, array))| {
                let bytes = match c.elem {
                    ElemType::Int64 | ElemType::Int32 => array
                        .to_bytes(&runtime.stream)
                        .map_err(|e| format!("reading initializer '{}': {e}", c.name))?,
                    _ => Vec::new(),
                };
                Ok((c.elem, c.shape.clone(), bytes))
            })
            .collect()
    }

    /// The constants' sizes and what was prepared from them so far.
    pub fn constants_report(&self, runtime: &Runtime) -> ConstantsReport {
        let prepared = runtime.constants.prepared.borrow();
        ConstantsReport {
            bytes: self
                .constants
                .iter()
                .filter(|c| matches!(c.source, Source::Bytes(_)))
                .map(|c| c.len)
                .sum(),
            twins: self
                .constants
                .iter()
                .filter(|c| matches!(c.source, Source::TwinOf(_)))
                .count(),
            prepared: prepared.len(),
            prepare_runs: prepared.computed,
            prepare_time: prepared.time,
            prepared_bytes: prepared.bytes,
            rounded: runtime.constants.rounded.borrow().len(),
            bodies: prepared.bodies(),
        }
    }

    /// The least flexible shape safety of the plan's nodes: `Shapeless` only if every node is.
    pub fn shape_safety(&self) -> ShapeSafety {
        self.nodes
            .iter()
            .map(PlanNode::shape_safety)
            .max()
            .unwrap_or(ShapeSafety::Shapeless)
    }

    /// Lowers every node into one lazy MLX graph and evaluates the outputs together; with
    /// `profile_ops`, node by node, each node's times recorded in `times.ops`.
    pub fn run(
        &self,
        runtime: &Runtime,
        inputs: Vec<Option<Array>>,
        times: &mut RunTimes,
        sink: &mut dyn OutputSink,
        profile_ops: bool,
    ) -> Result<Evaluated, String> {
        let started = Instant::now();
        let prepared_before = runtime.constants.prepare_time();
        let profile = profile_ops.then_some(&mut times.ops);
        let lowering = {
            let _span = trace::span("lower", "lower");
            self.lower_with(&runtime.stream, &runtime.constants, inputs, profile)?
        };
        times.charge_translation(runtime, started, prepared_before);
        Ok(self.evaluate(lowering, &runtime.stream, times, sink)?)
    }

    /// Evaluates the outputs (checking their types against the graph's) and the run-time
    /// checks in one go, failing the run on the first check that does not hold; keeps every
    /// array of the lowering until the caller has copied the outputs out.
    pub fn evaluate(
        &self,
        lowering: Lowering,
        stream: &Stream,
        times: &mut RunTimes,
        sink: &mut dyn OutputSink,
    ) -> Result<Evaluated, EvalError> {
        let Lowering {
            outputs,
            checks,
            written_rows,
            keep_alive,
            guard,
        } = lowering;
        for (array, expected) in outputs.iter().zip(&self.outputs) {
            let produced = ElemType::from_mlx(array.dtype());
            // A narrow type (int4, float8...) is produced in its carrier (int8, float16...).
            if expected.elem.carrier() != Some(array.dtype()) {
                return Err(EvalError::Mlx(format!(
                    "a lowering produced {} where the graph declares {} (table bug; set \
                     ONNXRUNTIME_EP_MLX_CLAIM_DEBUG=1 to see which node)",
                    produced.short_name(),
                    expected.elem.short_name()
                )));
            }
        }
        let evaluating = Instant::now();
        let _span = trace::span("mlx eval", "eval");
        let mlx_error =
            |e: mlx_kernels::Error| EvalError::Mlx(format!("checks of {}: {e}", self.name));
        // What the host reads after the evaluation, as one array of bytes read once (each
        // array read on the host costs a device round trip on the GPU): a guard's values, the
        // checks (a decoder step has dozens), the written-rows masks (one per distinct mask:
        // every layer of a decoder shares one) and the written rows' values that nodes gave.
        let mut read: Vec<Array> = Vec::new();
        let mut lengths: Vec<usize> = Vec::new();
        let mut push = |a: &Array| -> mlx_kernels::Result<usize> {
            read.push(a.clone());
            lengths.push(a.nbytes());
            Ok(lengths.len() - 1)
        };
        let guarded = match &guard {
            Some(guard) => guard
                .values
                .iter()
                .map(&mut push)
                .collect::<mlx_kernels::Result<Vec<_>>>()
                .map_err(mlx_error)?,
            None => Vec::new(),
        };
        for check in &checks {
            push(&check.holds).map_err(mlx_error)?;
        }
        let mut distinct: Vec<(usize, usize)> = Vec::new();
        let mut parts_of: Vec<Option<(usize, Option<usize>)>> =
            Vec::with_capacity(written_rows.len());
        for written in &written_rows {
            let Some(written) = written else {
                parts_of.push(None);
                continue;
            };
            let id = written.mask.id();
            let mask = match distinct.iter().find(|(d, _)| *d == id) {
                Some(&(_, part)) => part,
                None => {
                    let part = push(&written.mask).map_err(mlx_error)?;
                    distinct.push((id, part));
                    part
                }
            };
            let values = written
                .values
                .as_ref()
                .map(&mut push)
                .transpose()
                .map_err(mlx_error)?;
            parts_of.push(Some((mask, values)));
        }
        // Outputs stored in place as steps of this evaluation. Not in a speculative replay:
        // its outputs may have the wrong shapes, and the sink fixes an output's shape for
        // the run.
        let mut store_kernels = Vec::new();
        let mut copies_into = Vec::new();
        if guard.is_none() {
            for (index, (output, written)) in outputs.iter().zip(&written_rows).enumerate() {
                if written.is_some() {
                    continue;
                }
                match sink.store(index, output).map_err(EvalError::Input)? {
                    Some(Store::Kernel(store)) => store_kernels.push(store),
                    Some(Store::CopyInto(dst)) => copies_into.push((index, dst)),
                    None => {}
                }
            }
        }
        let flat = bytes_together(read, stream).map_err(mlx_error)?;
        // An output written in place is evaluated as the buffer after the write: ORT usually
        // hands it the input's buffer (then nothing else of it is needed), and when it does not,
        // copying the output out evaluates it then.
        let mut all: Vec<Array> = outputs
            .iter()
            .zip(&written_rows)
            .map(|(output, written)| match written {
                Some(written) => written.held.clone(),
                None => output.clone(),
            })
            .collect();
        all.extend(flat.clone());
        all.extend(store_kernels);
        let failed = |e| EvalError::Mlx(format!("MLX evaluation of {} failed: {e}", self.name));
        let copies: Vec<(&Array, &stream_copy::Destination)> = copies_into
            .iter()
            .map(|(index, dst)| (&outputs[*index], dst))
            .collect();
        let copied = if copies.is_empty() {
            None
        } else {
            stream_copy::eval_then_copy(&all, &copies, stream).map_err(failed)?
        };
        if copied.is_none() {
            Array::eval_all(&all).map_err(failed)?;
        }
        for (k, (index, _)) in copies_into.iter().enumerate() {
            if copied.as_ref().and_then(|made| made.get(k)) != Some(&true) {
                sink.not_stored(*index);
            }
        }
        times.eval += evaluating.elapsed();
        let flat = match flat {
            Some(flat) => flat.to_vec::<u8>(stream).map_err(mlx_error)?,
            None => Vec::new(),
        };
        let mut parts: Vec<&[u8]> = Vec::with_capacity(lengths.len());
        let mut at = 0;
        for &length in &lengths {
            parts.push(flat.get(at..at + length).ok_or_else(|| {
                EvalError::Mlx(format!("{}: the host read came back short", self.name))
            })?);
            at += length;
        }
        if let Some(guard) = &guard {
            let values: Vec<Vec<i64>> = guarded
                .iter()
                .map(|&part| {
                    parts[part]
                        .chunks_exact(8)
                        .filter_map(|b| <[u8; 8]>::try_from(b).ok().map(i64::from_ne_bytes))
                        .collect()
                })
                .collect();
            if !(guard.holds)(&values) {
                return Err(EvalError::Stale);
            }
        }
        let checked = &parts[guarded.len()..guarded.len() + checks.len()];
        if let Some(failed) = checked.iter().position(|holds| holds.contains(&0)) {
            return Err(EvalError::Input(checks[failed].message.to_string()));
        }
        let written_rows = written_rows
            .into_iter()
            .zip(parts_of)
            .map(|(written, part)| {
                let (written, (mask, values)) = (written?, part?);
                Some(RowMask {
                    shape: written.mask.shape(),
                    flags: parts[mask].to_vec(),
                    values: values.map(|v| parts[v].to_vec()),
                    held: written.held,
                })
            })
            .collect();
        Ok(Evaluated {
            outputs,
            written_rows,
            keep_alive,
        })
    }

    /// Builds the lazy MLX graph of the plan over `inputs` (one per fused-node input). Also the
    /// body of a compiled closure, where `inputs` are MLX's tracers.
    pub fn lower(
        &self,
        stream: &Stream,
        constants: &Constants,
        inputs: Vec<Option<Array>>,
    ) -> Result<Lowering, String> {
        self.lower_with(stream, constants, inputs, None)
    }

    /// [`Plan::lower`], evaluating each node's outputs as soon as it is lowered and recording
    /// both times in `profile` when one is given (eager runs only: a trace cannot evaluate).
    fn lower_with(
        &self,
        stream: &Stream,
        constants: &Constants,
        inputs: Vec<Option<Array>>,
        profile: Option<&mut OpProfile>,
    ) -> Result<Lowering, String> {
        if inputs.len() != self.inputs.len() {
            return Err(format!(
                "{} inputs given, the fused graph takes {}",
                inputs.len(),
                self.inputs.len()
            ));
        }
        let part = Part {
            nodes: &mut (0..self.nodes.len()),
            seeds: self.inputs.iter().copied().zip(inputs).collect(),
            host_values: &HashMap::new(),
        };
        let lowered = self.lower_part(stream, constants, part, profile)?;
        self.finish(lowered, stream)
    }

    /// The plan's outputs from a lowering that computed them, with its checks and the rows
    /// they write.
    pub(crate) fn finish(
        &self,
        lowered: PartLowering,
        stream: &Stream,
    ) -> Result<Lowering, String> {
        let PartLowering {
            env,
            checks,
            mut rows_of_slot,
            ..
        } = lowered;
        let outputs = self
            .outputs
            .iter()
            .map(|o| {
                let array = env[o.slot]
                    .clone()
                    .ok_or_else(|| "a fused output was never computed".to_owned())?;
                // Computed in a half type under the `precision` option: leaves as declared.
                // (Without the option such an output is a table bug, which `evaluate` reports.)
                let half = matches!(array.dtype(), Dtype::F16 | Dtype::BF16);
                if self.half.is_some() && o.elem == ElemType::Float && half {
                    return ops::astype(&array, Dtype::F32, stream).map_err(|e| e.to_string());
                }
                Ok(array)
            })
            .collect::<Result<Vec<_>, String>>()?;
        let written_rows = self
            .outputs
            .iter()
            .map(|o| rows_of_slot.remove(&o.slot))
            .collect();
        Ok(Lowering {
            outputs,
            checks,
            written_rows,
            keep_alive: env,
            guard: None,
        })
    }

    /// Lowers the nodes `part` names (in plan order) over the constants and its seeded slots.
    pub(crate) fn lower_part(
        &self,
        stream: &Stream,
        constants: &Constants,
        part: Part,
        mut profile: Option<&mut OpProfile>,
    ) -> Result<PartLowering, String> {
        let mut env: Vec<Option<Array>> = vec![None; self.slot_count];
        for (slot, array) in &constants.arrays {
            env[*slot] = Some(constants.at_use(*slot, array, stream)?);
        }
        for (slot, array) in part.seeds {
            env[slot] = array;
        }
        // Sequences live only between the nodes of one lowering (ORT passes tensors across a
        // fused node, and the partition keeps a sequence's producer and consumers together).
        let mut sequences: HashMap<usize, Vec<Array>> = HashMap::new();
        let mut lowered_part = PartLowering::default();
        let shared = RefCell::new(SharedDerivations::default());
        // Conservative: a plan that may trace shapeless is treated as tracing so in every run.
        let shapes_fixed = self.shape_safety() != ShapeSafety::Shapeless;
        for index in part.nodes {
            let planned = &self.nodes[index];
            let args: Vec<Option<Value>> = planned
                .inputs
                .iter()
                .map(|s| {
                    s.and_then(|s| match &env[s] {
                        Some(array) => Some(Value::Tensor(array.clone())),
                        None => sequences.get(&s).cloned().map(Value::Sequence),
                    })
                })
                .collect();
            let args = match self.float32_inputs_as[index] {
                Some(dtype) => float32_args_as(planned, args, dtype, constants, stream)?,
                None => args,
            };
            let host_values: Vec<Option<Vec<i64>>> = if part.host_values.is_empty() {
                Vec::new()
            } else {
                planned
                    .inputs
                    .iter()
                    .map(|s| s.and_then(|s| part.host_values.get(&s).cloned()))
                    .collect()
            };
            let constant_inputs = ConstantInputs {
                node: index,
                constant: &planned.constant_inputs,
                prepared: &constants.prepared,
                host_values: &host_values,
                read_once: &planned.read_once,
                shapes_fixed,
                shared: &shared,
            };
            let lowering_started = Instant::now();
            let arrays_before = mlx_kernels::arrays_created();
            let span = trace::span_with(planned.node.op_type(), "op", || {
                vec![
                    ("node", planned.node.name().into()),
                    ("inputs", value_shapes(&args).into()),
                ]
            });
            let in_channels_last = match self.channels_last[index] {
                true => lowered_channels_last(planned, &args, constant_inputs, stream),
                false => None,
            };
            let lowered = match in_channels_last {
                Some(lowered) => {
                    self.channels_last_lowered.fetch_add(1, Ordering::Relaxed);
                    lowered
                }
                None => planned
                    .spec
                    .lower_in(
                        Lower::new(stream, &planned.node).with_constants(constant_inputs),
                        &args,
                    )
                    .map_err(|e| node_error(&planned.node, &e.message))?,
            };
            drop(span);
            if let Some(profile) = profile.as_deref_mut() {
                let lowered_in = lowering_started.elapsed();
                let evaluating = Instant::now();
                let arrays: Vec<Array> = lowered
                    .outputs
                    .iter()
                    .flat_map(|v| v.arrays().to_vec())
                    .collect();
                Array::eval_all(&arrays).map_err(|e| node_error(&planned.node, &e.to_string()))?;
                profile.record(
                    &diagnostics::qualified_op(&planned.node),
                    lowered_in,
                    evaluating.elapsed(),
                    mlx_kernels::arrays_created() - arrays_before,
                );
            }
            lowered_part
                .checks
                .extend(lowered.checks.into_iter().map(|c| NodeCheck {
                    holds: c.holds,
                    message: failed_check(&planned.node, &c.message, c.ort_fails_too).into(),
                }));
            for written in lowered.written_rows {
                if let Some(Some(slot)) = planned.outputs.get(written.output) {
                    lowered_part.rows_of_slot.insert(
                        *slot,
                        InPlace {
                            mask: written.rows,
                            values: written.values,
                            held: written.held,
                        },
                    );
                }
            }
            for key in lowered.host_keys {
                if let Some(Some(slot)) = planned.inputs.get(key.input) {
                    lowered_part.host_keys.push(SlotKey { slot: *slot, key });
                }
            }
            for (slot, result) in planned.outputs.iter().zip(lowered.outputs) {
                match (slot, result) {
                    (Some(slot), Value::Tensor(array)) => {
                        env[*slot] = Some(without_kernel_if_empty(array)?)
                    }
                    (Some(slot), Value::Sequence(arrays)) => {
                        sequences.insert(*slot, arrays);
                    }
                    (None, _) => {}
                }
            }
            // Earlier answers this node computed again: the nodes after it read its copy.
            for (earlier, again) in shared.borrow_mut().take_answered_again() {
                for held in env.iter_mut().flatten() {
                    if held.id() == earlier.id() {
                        *held = again.clone();
                    }
                }
            }
        }
        let made = shared.borrow();
        if !made.rewrites().is_empty() {
            let mut rewrites = self.rewrites.lock().unwrap_or_else(|e| e.into_inner());
            for &what in made.rewrites() {
                *rewrites.entry(what).or_default() += 1;
            }
        }
        lowered_part.env = env;
        Ok(lowered_part)
    }
}

/// Fills each node's `read_once`: a slot is read once when one input of one node reads it
/// (implicit inputs count) and no output of the plan is it.
fn mark_read_once(nodes: &mut [PlanNode], outputs: &[PlanOutput], slot_count: usize) {
    let mut reads = vec![0usize; slot_count];
    for &slot in nodes.iter().flat_map(|n| n.inputs.iter().flatten()) {
        if let Some(count) = reads.get_mut(slot) {
            *count += 1;
        }
    }
    let once = |slot: usize| reads.get(slot) == Some(&1) && outputs.iter().all(|o| o.slot != slot);
    for node in nodes {
        node.read_once = node.outputs.iter().map(|s| s.is_some_and(once)).collect();
    }
}

/// An elementwise node lowered over its inputs' channels-last forms, answered channels-first
/// (a lazy transpose) with the form recorded for the nodes after it; `None` when its inputs have
/// no form, or when its lowering gives more than one plain tensor (checks or written rows would
/// need remapping): the caller then lowers it as it is.
fn lowered_channels_last(
    planned: &PlanNode,
    args: &[Option<Value>],
    constant_inputs: ConstantInputs,
    stream: &Stream,
) -> Option<Lowered> {
    let forms = constant_inputs.shared;
    let permuted = channels_last::args_in_channels_last(args, &forms.borrow(), stream).ok()??;
    let cx = Lower::new(stream, &planned.node).with_constants(constant_inputs);
    let mut lowered = planned.spec.lower_in(cx, &permuted).ok()?;
    let plain = lowered.checks.is_empty()
        && lowered.written_rows.is_empty()
        && lowered.host_keys.is_empty()
        && lowered.outputs.len() == 1;
    let Some(Value::Tensor(last)) = lowered.outputs.pop().filter(|_| plain) else {
        return None;
    };
    let first = answer_from_channels_last(last, Some(forms), stream).ok()?;
    lowered.outputs.push(Value::Tensor(first));
    Some(lowered)
}

/// `args` with the float32 tensors of `planned` (those the graph types float32, which may
/// arrive in a half type) in `dtype`. A constant is rounded to a half type once per session.
fn float32_args_as(
    planned: &PlanNode,
    mut args: Vec<Option<Value>>,
    dtype: Dtype,
    constants: &Constants,
    stream: &Stream,
) -> Result<Vec<Option<Value>>, String> {
    for (i, arg) in args.iter_mut().enumerate() {
        let Some(Value::Tensor(array)) = arg else {
            continue;
        };
        let float = matches!(array.dtype(), Dtype::F32 | Dtype::F16 | Dtype::BF16);
        let dtype = if planned.spec.takes_half_at(i) {
            dtype
        } else {
            Dtype::F32
        };
        if planned.node.input_type(i) != Some(ElemType::Float) || !float || array.dtype() == dtype {
            continue;
        }
        let slot = planned.inputs.get(i).copied().flatten();
        let constant = planned.constant_inputs.get(i).copied().unwrap_or(false);
        let cast = match slot {
            Some(slot) if constant && dtype != Dtype::F32 => {
                constants.rounded(slot, array, dtype, stream)
            }
            _ => ops::astype(array, dtype, stream).map_err(|e| e.to_string()),
        };
        *array = cast.map_err(|e| node_error(&planned.node, &e))?;
    }
    Ok(args)
}

impl Constants {
    /// The constant in `slot` (`array`) in `dtype`, made and evaluated at its first use (in a
    /// trace too: it depends on no input) and kept for the session's later runs.
    fn rounded(
        &self,
        slot: usize,
        array: &Array,
        dtype: Dtype,
        stream: &Stream,
    ) -> Result<Array, String> {
        if let Some(made) = self.rounded.borrow().get(&slot) {
            return self.at_use(slot, made, stream);
        }
        let made = within_finite_range(array, dtype, stream)
            .and_then(|finite| ops::astype(&finite, dtype, stream))
            .map_err(|e| e.to_string())?;
        Array::eval_all(std::slice::from_ref(&made)).map_err(|e| e.to_string())?;
        self.rounded.borrow_mut().insert(slot, made.clone());
        self.at_use(slot, &made, stream)
    }

    /// The array a lowering reads for the constant in `slot` (`array`, or its rounding). One
    /// holding -0.0 in its one element is made there as an op, the negation of +0.0: mx.compile
    /// writes a one-element constant into its fused kernels as a literal, which loses the sign
    /// of -0.0 (`x / -0.0` came out with the opposite sign in compiled runs only), while an
    /// op's result keeps it (as `op_specs::table::consts::scalar` does for the lowerings').
    fn at_use(&self, slot: usize, array: &Array, stream: &Stream) -> Result<Array, String> {
        if !self.negative_zeros.contains(&slot) {
            return Ok(array.clone());
        }
        op_specs::table::consts::one_negative_zero(&array.shape(), array.dtype(), stream)
            .map_err(|e| e.to_string())
    }
}

/// `a` with its finite values past `half`'s range set to `half`'s largest finite value of
/// their sign (infinities and NaN as they are), so that a finite constant stays finite when
/// rounded, as onnxconverter-common's float16 conversion clamps: an exported encoder's mask
/// fill of float32's lowest (`(1 - mask) · lowest`) would otherwise round to -inf, and
/// `0 · -inf` is NaN where `0 · -65504` is 0.
fn within_finite_range(a: &Array, half: Dtype, s: &Stream) -> mlx_kernels::Result<Array> {
    let largest = match half {
        Dtype::F16 => 65504.0f32,
        Dtype::BF16 => f32::from_bits(0x7F7F_0000),
        _ => return Ok(a.clone()),
    };
    let largest = Array::scalar(largest)?;
    let beyond = ops::logical_and(
        &ops::greater(&ops::abs(a, s)?, &largest, s)?,
        &ops::logical_not(&ops::isinf(a, s)?, s)?,
        s,
    )?;
    let edge = ops::multiply(&ops::sign(a, s)?, &largest, s)?;
    ops::where_(&beyond, &edge, a, s)
}

/// Which nodes a lowering covers and what it starts from besides the constants.
pub(crate) struct Part<'a> {
    /// Node indices, in plan order.
    pub nodes: &'a mut dyn Iterator<Item = usize>,
    /// Slots given before the first node (the plan's inputs, or a body's).
    pub seeds: Vec<(usize, Option<Array>)>,
    /// Values known on the host for seeded slots that are traced arrays.
    pub host_values: &'a HashMap<usize, Vec<i64>>,
}

/// What lowering a part produced: every slot's array, the checks, the rows in-place outputs
/// write (by slot), and the host keys of traced values its nodes read (by slot).
#[derive(Default)]
pub(crate) struct PartLowering {
    pub env: Vec<Option<Array>>,
    pub checks: Vec<NodeCheck>,
    pub rows_of_slot: HashMap<usize, InPlace>,
    pub host_keys: Vec<SlotKey>,
}

/// A host key (`op_specs::HostKey`) of the value in `slot`.
#[derive(Debug, Clone)]
pub struct SlotKey {
    pub slot: usize,
    pub key: HostKey,
}

impl SlotKey {
    /// Whether a trace that recorded this key holds for `values` of its slot.
    pub fn holds_for(&self, values: &[i64]) -> bool {
        (self.key.project)(values) == self.key.key
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

/// The plan's constants, each given its slot; an initializer whose bytes equal an earlier one's
/// (same type, at least `TWIN_MIN_BYTES`) keeps no bytes of its own and becomes its twin.
/// Candidates are found by length and a fingerprint of their ends, so distinct weights of one
/// size cost a hash of 512 bytes each, and only true twins a full comparison.
fn plan_constants(constants: Vec<HostConstant>, slots: &mut Slots) -> Vec<PlanConstant> {
    let mut seen: HashMap<(usize, u64), Vec<usize>> = HashMap::new();
    let mut kept: Vec<PlanConstant> = Vec::with_capacity(constants.len());
    for c in constants {
        let len = c.bytes.len();
        let mut twin = None;
        if len >= TWIN_MIN_BYTES {
            let candidates = seen.entry((len, fingerprint(&c.bytes))).or_default();
            twin = candidates
                .iter()
                .copied()
                .find(|&i| kept[i].elem == c.elem && kept[i].holds(&c.bytes));
            if twin.is_none() {
                candidates.push(kept.len());
            }
        }
        kept.push(PlanConstant {
            slot: slots.of(&c.name),
            name: c.name,
            elem: c.elem,
            shape: c.shape,
            len,
            source: match twin {
                Some(first) => Source::TwinOf(first),
                None => Source::Bytes(Mutex::new(Some(c.bytes))),
            },
        });
    }
    kept
}

/// A hash of the first and last 256 bytes.
fn fingerprint(bytes: &[u8]) -> u64 {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let edge = bytes.len().min(256);
    let mut hasher = DefaultHasher::new();
    bytes[..edge].hash(&mut hasher);
    bytes[bytes.len() - edge..].hash(&mut hasher);
    hasher.finish()
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

/// `dtype[dims]` of each input a node was given (`-` absent, `seq(n)` a sequence), for traces.
fn value_shapes(args: &[Option<Value>]) -> String {
    let one = |v: &Option<Value>| match v {
        None => "-".to_owned(),
        Some(Value::Tensor(a)) => format!("{:?}{:?}", a.dtype(), a.shape()),
        Some(Value::Sequence(s)) => format!("seq({})", s.len()),
    };
    args.iter().map(one).collect::<Vec<_>>().join(", ")
}

/// A lowering's or MLX's error, naming the node. Most say what is wrong with the node's inputs
/// or attributes, which ORT's CPU EP then rejects too; one that ORT runs is the EP's fault. The
/// EP cannot tell which from here, so the advice covers both.
fn node_error(node: &Node, message: &str) -> String {
    format!(
        "{}: {message}. Set ONNXRUNTIME_EP_MLX_DISABLE=1 to run the model on ORT's CPU EP; if \
         that runs it, please report the model",
        node_label(node)
    )
}

/// A failed check's error, naming the node. Most checks fail on the model's input data, which
/// ORT's CPU EP rejects too: the message then says so and what to fix. The others are inputs ORT
/// answers and the EP does not, whose message already says why and what to do instead.
fn failed_check(node: &Node, message: &str, ort_fails_too: bool) -> String {
    let label = node_label(node);
    if ort_fails_too {
        format!(
            "{label}: {message} (ORT's CPU EP rejects this input too; check the values fed to \
             the node)"
        )
    } else {
        format!("{label}: {message}")
    }
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

impl Plan {
    /// The slots of the plan's constants.
    pub(crate) fn constant_slots(&self) -> impl Iterator<Item = usize> + '_ {
        self.constants.iter().map(|c| c.slot)
    }

    pub(crate) fn slot_count(&self) -> usize {
        self.slot_count
    }

    /// `node 'name' (domain.Op)` of the node producing fused output `index`, for messages.
    pub fn output_producer(&self, index: usize) -> String {
        let slot = self.outputs.get(index).map(|o| o.slot);
        self.nodes
            .iter()
            .find(|n| slot.is_some() && n.outputs.contains(&slot))
            .map_or_else(|| format!("fused output {index}"), |n| node_label(&n.node))
    }
}

/// Orders nodes so that every value is produced before it is consumed.
fn order_by_dependencies(nodes: Vec<Node>) -> Vec<Node> {
    let predecessors = crate::ort::graph::predecessors(&nodes);
    let order = crate::partition::topological_order(&predecessors);
    let mut slots: Vec<Option<Node>> = nodes.into_iter().map(Some).collect();
    order.into_iter().filter_map(|i| slots[i].take()).collect()
}

#[cfg(test)]
mod twin_tests {
    use super::*;

    fn initializer(name: &str, elem: ElemType, shape: &[i64], bytes: Vec<u8>) -> HostConstant {
        HostConstant {
            name: name.into(),
            elem,
            shape: shape.to_vec(),
            bytes,
        }
    }

    #[test]
    fn initializers_with_the_same_type_and_bytes_are_held_once() {
        let table: Vec<u8> = (0..4096u32).map(|i| (i * 31 % 251) as u8).collect();
        let mut other = table.clone();
        other[2000] ^= 1; // same ends, same fingerprint: only the full comparison tells
        let u8 = ElemType::Uint8;
        let constants = plan_constants(
            vec![
                initializer("B", u8, &[64, 4, 16], table.clone()),
                initializer("folded", u8, &[64, 64], table.clone()),
                initializer("other", u8, &[64, 64], other),
                initializer("as_int8", ElemType::Int8, &[4096], table),
                initializer("axes", ElemType::Int64, &[1], vec![0; 8]),
                initializer("axes_again", ElemType::Int64, &[1], vec![0; 8]),
            ],
            &mut Slots::default(),
        );
        let sources: Vec<Option<usize>> = constants
            .iter()
            .map(|c| match c.source {
                Source::TwinOf(first) => Some(first),
                Source::Bytes(_) => None,
            })
            .collect();
        // Small constants are never compared: they cost nothing to hold twice.
        assert_eq!(sources, [None, Some(0), None, None, None, None]);
        let slots: Vec<usize> = constants.iter().map(|c| c.slot).collect();
        assert_eq!(slots, [0, 1, 2, 3, 4, 5]);
    }
}
