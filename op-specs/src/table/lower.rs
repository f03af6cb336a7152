//! What a lowering function gets: the MLX stream, the node's attributes, and typed helpers the
//! generated adapters call.

use std::any::Any;
use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mlx_kernels::{Array, Dtype, Stream};

use super::dtypes::ElemType;
use super::node::{AttrValue, Node, ValueInfo};
use super::spec::AttrKind;

/// A lowering failure. The EP adds the node's name and op type when it reports one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpError {
    pub message: String,
}

impl OpError {
    pub fn new(message: impl Into<String>) -> OpError {
        OpError {
            message: message.into(),
        }
    }
}

impl fmt::Display for OpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for OpError {}

impl From<mlx_kernels::Error> for OpError {
    fn from(e: mlx_kernels::Error) -> Self {
        OpError::new(e.to_string())
    }
}

pub type Result<T> = std::result::Result<T, OpError>;

/// A condition on the node's input values, known only once they exist (an index in range, an
/// integer divisor that is not zero). ORT's CPU EP fails the run when one does not hold; MLX
/// never checks, so the plan evaluates these with the outputs and fails the run itself.
#[derive(Debug, Clone)]
pub struct RuntimeCheck {
    /// A 0-d bool: true when the condition holds.
    pub holds: Array,
    /// What went wrong, in the words of the node's op ("an index of 'indices' is out of range").
    pub message: String,
    /// Whether ORT's CPU EP fails on the same input (the model's data is at fault), or answers
    /// it in a way the EP does not repeat (its rounding past an exact range: the EP's limit).
    pub ort_fails_too: bool,
}

/// Which rows of an output the node writes when ORT hands that output the buffer of one of its
/// inputs (onnxruntime-genai's shared past/present KV cache): ORT's kernels then write those
/// rows in place and leave the others as the buffer holds them, while a buffer of the output's
/// own gets every row the lowering computed. `rows` is a bool array that broadcasts to the
/// output's shape without its last axis (a row is a last-axis vector). `values`, when the
/// lowering has them at hand, are those rows' contents in row-major order of the rows they go
/// to (any shape with that many elements, the output's type): the host then copies them
/// straight into the buffer, with no gather from the output on the device. `held` is the
/// whole buffer after that write (the output's shape: the written rows over the input's): the
/// EP keeps it on the device as the input's contents for the next run.
#[derive(Debug, Clone)]
pub struct WrittenRows {
    pub output: usize,
    pub rows: Array,
    pub values: Option<Array>,
    pub held: Array,
}

/// A projection of host values: what of them a lowering's structure depends on.
pub type Projection = Arc<dyn Fn(&[i64]) -> Vec<i64> + Send + Sync>;

/// What a host read of a traced value made the lowering depend on: `project(values)` must
/// equal `key` for the lowering (a compiled trace) to be valid for other values. By default
/// the projection is the values themselves; [`Lower::key_host_read`] narrows it.
#[derive(Clone)]
pub struct HostKey {
    pub input: usize,
    pub key: Vec<i64>,
    pub project: Projection,
}

impl fmt::Debug for HostKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HostKey(input {}, key {:?})", self.input, self.key)
    }
}

/// What lowering one node produced: an array per output slot, the run-time checks the outputs
/// are only valid under, the rows an in-place output writes, and what its host reads of traced
/// values made it depend on.
#[derive(Debug)]
pub struct Lowered {
    pub outputs: Vec<Value>,
    pub checks: Vec<RuntimeCheck>,
    pub written_rows: Vec<WrittenRows>,
    pub host_keys: Vec<HostKey>,
}

/// A value a lowering reads or writes: a tensor, or a sequence of tensors (ONNX's
/// `seq(tensor)`, which lives only inside a plan: ORT passes tensors across a fused node).
#[derive(Debug, Clone)]
pub enum Value {
    Tensor(Array),
    Sequence(Vec<Array>),
}

impl Value {
    /// The tensor, or an error naming `what` when the value is a sequence.
    pub fn into_tensor(self, what: &str) -> Result<Array> {
        match self {
            Value::Tensor(array) => Ok(array),
            Value::Sequence(_) => Err(OpError::new(format!(
                "{what} is a sequence where a tensor is expected"
            ))),
        }
    }

    /// Every array the value holds (one for a tensor).
    pub fn arrays(&self) -> &[Array] {
        match self {
            Value::Tensor(array) => std::slice::from_ref(array),
            Value::Sequence(arrays) => arrays,
        }
    }
}

/// A sequence-valued parameter or result of a lowering (a port declared `Name: [T]`).
#[derive(Debug, Clone, Default)]
pub struct Sequence(pub Vec<Array>);

/// Arrays derived from a plan's constants alone (a weight's repacked scales), computed and
/// evaluated at the first run that needs them and reused by every later run of the plan,
/// compiled or eager. Keyed by the node's position in the plan and a tag of the lowering's.
#[derive(Default)]
pub struct Prepared {
    entries: HashMap<(usize, &'static str), Vec<Array>>,
    /// What a lowering keeps for later runs besides arrays (a body compiled into an MLX
    /// closure), by the same key (see [`Lower::kept`]).
    kept: HashMap<(usize, &'static str), Rc<dyn Any>>,
    /// How many times a preparation ran (once per key, unless it failed), how long they took
    /// in all, and the memory MLX held more after them.
    pub computed: u64,
    pub time: Duration,
    pub bytes: usize,
}

impl Prepared {
    /// How many preparations are kept.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl Prepared {
    /// What the bodies compiled for control-flow nodes did so far.
    pub fn bodies(&self) -> super::body::BodiesReport {
        let mut report = super::body::BodiesReport::default();
        for kept in self.kept.values() {
            if let Some(body) = kept.downcast_ref::<super::body::CompiledBody>() {
                report.add(body);
            }
        }
        report
    }
}

impl fmt::Debug for Prepared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Prepared")
            .field("entries", &self.entries.len())
            .field("kept", &self.kept.len())
            .field("computed", &self.computed)
            .finish()
    }
}

/// What several nodes of one lowering derive alike (see [`Lower::shared`]), kept for the length
/// of that lowering (one trace, or one eager run).
#[derive(Default)]
pub struct SharedDerivations {
    entries: Vec<SharedEntry>,
    /// The rewrites the lowering made (see [`Lower::note_rewrite`]), one entry each.
    rewrites: Vec<&'static str>,
    /// Earlier nodes' answers that a node computed again, with the copy later nodes read (see
    /// [`Lower::answer_again`]), until the plan takes them.
    answered_again: Vec<(Array, Array)>,
}

struct SharedEntry {
    tag: &'static str,
    /// The arrays the derivation read, kept alive so that their identities stay theirs.
    inputs: Vec<Array>,
    extra: Vec<i64>,
    /// The derivation's result (of the type its lowering chose).
    value: Box<dyn Any>,
}

impl SharedDerivations {
    fn find<T: Clone + 'static>(&self, tag: &str, inputs: &[&Array], extra: &[i64]) -> Option<T> {
        self.entries
            .iter()
            .find(|e| {
                e.tag == tag
                    && e.extra == extra
                    && e.inputs.len() == inputs.len()
                    && e.inputs.iter().zip(inputs).all(|(a, b)| a.id() == b.id())
            })
            .and_then(|e| e.value.downcast_ref::<T>().cloned())
    }

    /// Records `value` as what `tag` derives from `inputs` and `extra` (as [`Lower::shared`]
    /// would after computing it).
    pub(super) fn record<T: Clone + 'static>(
        &mut self,
        tag: &'static str,
        inputs: &[&Array],
        extra: &[i64],
        value: T,
    ) {
        self.entries.push(SharedEntry {
            tag,
            inputs: inputs.iter().map(|&a| a.clone()).collect(),
            extra: extra.to_vec(),
            value: Box::new(value),
        });
    }

    /// The channels-last form of `first` an earlier node of this lowering left, if any (see
    /// `Layout`).
    pub fn channels_last_of(&self, first: &Array) -> Option<Array> {
        self.find::<Array>(super::channels_last::FORM, &[first], &[])
    }

    /// The rewrites this lowering made, one entry per node that answered with one.
    pub fn rewrites(&self) -> &[&'static str] {
        &self.rewrites
    }

    /// The answers computed again since the last call (see [`Lower::answer_again`]): each
    /// earlier answer with the copy that the nodes after this one must read instead.
    pub fn take_answered_again(&mut self) -> Vec<(Array, Array)> {
        std::mem::take(&mut self.answered_again)
    }

    /// How many derivations were computed (each once).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl fmt::Debug for SharedDerivations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tags: Vec<&str> = self.entries.iter().map(|e| e.tag).collect();
        f.debug_struct("SharedDerivations")
            .field("tags", &tags)
            .finish()
    }
}

/// What a plan tells a node's lowering about its inputs: which are the plan's constants
/// (absent optional inputs count as constant), where arrays prepared from them are kept, and
/// the values of inputs that are traced arrays in a compiled closure but known on the host
/// for the run being traced (empty when none is); and about its outputs, which one node alone
/// reads.
#[derive(Debug, Clone, Copy)]
pub struct ConstantInputs<'a> {
    pub node: usize,
    pub constant: &'a [bool],
    pub prepared: &'a RefCell<Prepared>,
    pub host_values: &'a [Option<Vec<i64>>],
    /// Per output: whether exactly one node of the plan reads it, once, and the plan does not
    /// hand it on (see [`Lower::output_read_once`]).
    pub read_once: &'a [bool],
    /// Whether every run this lowering stands for has its shapes: an eager run, or a closure
    /// traced for one set of input shapes (see [`Lower::shapes_fixed`]).
    pub shapes_fixed: bool,
    /// What this lowering's nodes derived alike, shared between them.
    pub shared: &'a RefCell<SharedDerivations>,
}

/// The lowering context of one node.
pub struct Lower<'a> {
    stream: &'a Stream,
    node: &'a Node,
    checks: Vec<RuntimeCheck>,
    written_rows: Vec<WrittenRows>,
    constants: Option<ConstantInputs<'a>>,
    /// Host reads served from `ConstantInputs::host_values`, and the traced arrays they stand
    /// for.
    host_keys: Vec<(HostKey, Array)>,
    /// The node's implicit inputs, by name (see [`Lower::enclosing`]).
    enclosing: HashMap<String, Array>,
}

impl fmt::Debug for Lower<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Lower({} {})", self.node.op_type(), self.node.name())
    }
}

impl<'a> Lower<'a> {
    pub fn new(stream: &'a Stream, node: &'a Node) -> Lower<'a> {
        Lower {
            stream,
            node,
            checks: Vec::new(),
            written_rows: Vec::new(),
            constants: None,
            host_keys: Vec::new(),
            enclosing: HashMap::new(),
        }
    }

    /// The arrays of the node's implicit inputs, by name.
    pub(super) fn set_enclosing(
        &mut self,
        names: &[ValueInfo],
        values: &[Option<Value>],
    ) -> Result<()> {
        if names.len() != values.len() {
            return Err(OpError::new(format!(
                "{} values for the node's {} implicit inputs",
                values.len(),
                names.len()
            )));
        }
        for (info, value) in names.iter().zip(values) {
            let what = format!("implicit input '{}'", info.name);
            let array = value
                .clone()
                .ok_or_else(|| OpError::new(format!("{what} was not given")))?
                .into_tensor(&what)?;
            self.enclosing.insert(info.name.clone(), array);
        }
        Ok(())
    }

    /// What the node's bodies read from the enclosing scopes (its implicit inputs), by name.
    pub fn enclosing(&self) -> &HashMap<String, Array> {
        &self.enclosing
    }

    /// The context inside a plan, which knows its constants and keeps what is prepared from
    /// them. Without it (unit tests) nothing is constant and nothing is kept.
    pub fn with_constants(mut self, constants: ConstantInputs<'a>) -> Lower<'a> {
        self.constants = Some(constants);
        self
    }

    /// Whether input `index` is one of the plan's constants (an initializer): the same
    /// values on every run. An absent input (past the node's last) counts as constant.
    pub fn input_is_constant(&self, index: usize) -> bool {
        self.constants
            .is_some_and(|c| c.constant.get(index).copied().unwrap_or(true))
    }

    /// Whether output `index` has one reader in the plan, which reads it once, and is no output
    /// of the plan: a later node may then answer for this one and the reader together (a
    /// [`Lower::record_form`]) without the plan computing this answer as well. `false` without
    /// a plan's context.
    pub fn output_read_once(&self, index: usize) -> bool {
        self.constants
            .is_some_and(|c| c.read_once.get(index).copied().unwrap_or(false))
    }

    /// Whether the shapes this lowering sees are those of every run its answer serves: an eager
    /// run, or a closure traced for one set of input shapes, not a shapeless one that MLX
    /// replays for others (where only what MLX derives from the inputs' shapes, not shapes
    /// read while lowering, follows them). `false` without a plan's context.
    pub fn shapes_fixed(&self) -> bool {
        self.constants.is_some_and(|c| c.shapes_fixed)
    }

    /// Arrays computed by `compute` from the inputs `reads` (their indices) only. When all of
    /// them are constants the arrays are computed and evaluated once, at the first run, and
    /// the same arrays are returned on every later run: per-run work on weights (repacking
    /// scales) then happens once per session. Otherwise `compute`'s lazy arrays are returned,
    /// part of this run's graph. `compute` must read nothing that varies between runs besides
    /// the inputs it names (the node's attributes are fixed). Keep what is prepared no larger
    /// than the weight it comes from: it lives as long as the plan.
    pub fn prepared(
        &mut self,
        tag: &'static str,
        reads: &[usize],
        compute: impl FnOnce() -> Result<Vec<Array>>,
    ) -> Result<Vec<Array>> {
        let Some(constants) = self
            .constants
            .filter(|_| reads.iter().all(|&index| self.input_is_constant(index)))
        else {
            return compute();
        };
        let key = (constants.node, tag);
        if let Some(arrays) = constants.prepared.borrow().entries.get(&key) {
            return Ok(arrays.clone());
        }
        let started = Instant::now();
        let before = mlx_kernels::memory::active_memory().unwrap_or(0);
        let arrays = compute()?;
        // Evaluated now, so later runs (and compiled traces, which may evaluate arrays that do
        // not depend on their inputs) find them ready.
        Array::eval_all(&arrays)?;
        let after = mlx_kernels::memory::active_memory().unwrap_or(0);
        let mut prepared = constants.prepared.borrow_mut();
        prepared.computed += 1;
        prepared.time += started.elapsed();
        prepared.bytes += after.saturating_sub(before);
        prepared.entries.insert(key, arrays.clone());
        Ok(arrays)
    }

    /// Whether what [`Lower::kept`] keeps outlives this lowering (inside a plan).
    pub fn keeps_across_runs(&self) -> bool {
        self.constants.is_some()
    }

    /// The object `make` builds, kept for the plan's later runs under `tag` (made once, at the
    /// first run that asks): state a lowering carries between runs that is not an array, such
    /// as a body compiled into an MLX closure. Without a plan's context (unit tests, nodes of
    /// a body) `make` runs every time.
    pub fn kept<T: 'static>(
        &mut self,
        tag: &'static str,
        make: impl FnOnce() -> Result<T>,
    ) -> Result<Rc<T>> {
        let Some(constants) = self.constants else {
            return make().map(Rc::new);
        };
        let key = (constants.node, tag);
        let found = constants.prepared.borrow().kept.get(&key).cloned();
        if let Some(kept) = found.and_then(|k| k.downcast::<T>().ok()) {
            return Ok(kept);
        }
        let made = Rc::new(make()?);
        constants
            .prepared
            .borrow_mut()
            .kept
            .insert(key, made.clone() as Rc<dyn Any>);
        Ok(made)
    }

    /// What `compute` derives (lazy arrays, in any structure) from `inputs` (arrays this node
    /// was given, or derived from them) and `extra` (every other value `compute` depends on:
    /// sizes, attributes, host-read values) alone. Another node of the same lowering asking for
    /// the same `tag` over the same arrays and `extra` gets a clone of it back instead of
    /// computing it again, run-time
    /// checks included (registered once, by the first node): what every layer of a decoder
    /// derives from one attention mask (positions, rotary rows, row masks, range checks) is
    /// then built, evaluated and checked once a step. Without a plan's context (unit tests)
    /// `compute` runs every time.
    pub fn shared<T: Clone + 'static>(
        &mut self,
        tag: &'static str,
        inputs: &[&Array],
        extra: &[i64],
        compute: impl FnOnce(&mut Self) -> Result<T>,
    ) -> Result<T> {
        let Some(store) = self.constants.map(|c| c.shared) else {
            return compute(self);
        };
        if let Some(found) = store.borrow().find(tag, inputs, extra) {
            return Ok(found);
        }
        let value = compute(self)?;
        store.borrow_mut().record(tag, inputs, extra, value.clone());
        Ok(value)
    }

    /// What an earlier node of this lowering recorded under `tag` about its answer `x` (what
    /// `x` is made of, say), if any; `None` without a plan's context.
    pub fn form_of<T: Clone + 'static>(&self, tag: &'static str, x: &Array) -> Option<T> {
        self.constants?.shared.borrow().find(tag, &[x], &[])
    }

    /// Records `value` under `tag` as what this node knows about its answer `x`, for the nodes
    /// after it (see [`Lower::form_of`]). Nothing is recorded without a plan's context.
    pub fn record_form<T: Clone + 'static>(&self, tag: &'static str, x: &Array, value: T) {
        if let Some(constants) = self.constants {
            constants.shared.borrow_mut().record(tag, &[x], &[], value);
        }
    }

    /// Records that this node's computation gave `earlier`, the answer of a node before it, too,
    /// as `again` (the same values, shape and type): the nodes after this one read `again`, so
    /// `earlier`'s own computation, read by no node lowered before this one, is left out of the
    /// run. Nothing is recorded without a plan's context, nor for an `again` of another shape
    /// or type.
    pub fn answer_again(&self, earlier: &Array, again: Array) {
        let alike = again.shape() == earlier.shape() && again.dtype() == earlier.dtype();
        if let (Some(constants), true) = (self.constants, alike) {
            let mut shared = constants.shared.borrow_mut();
            shared.answered_again.push((earlier.clone(), again));
        }
    }

    /// Notes that this node answered with `what`: a computation that stands for several nodes
    /// (their answers, recorded by [`Lower::record_form`], left unread), which the plan's
    /// summary counts.
    pub fn note_rewrite(&self, what: &'static str) {
        if let Some(constants) = self.constants {
            constants.shared.borrow_mut().rewrites.push(what);
        }
    }

    /// The channels-last form of `x` (`[N, d.., C]`) that an earlier node of this lowering
    /// left (see `Layout::ChannelsLast`), if any; `None` without a plan's context.
    pub fn channels_last_of(&self, x: &Array) -> Option<Array> {
        super::channels_last::recorded_form(self.constants.map(|c| c.shared), x)
    }

    /// The node's answer from its channels-last form `last`: the channels-first view ONNX
    /// expects, recorded with `last` for the nodes after it that prefer it.
    pub fn answer_from_channels_last(&self, last: Array) -> Result<Array> {
        super::channels_last::answer_from_channels_last(
            last,
            self.constants.map(|c| c.shared),
            self.stream,
        )
    }

    /// `x` channels-last: the form an earlier node left, else a lazy transpose of `x`.
    pub fn in_channels_last(&self, x: &Array) -> Result<Array> {
        match self.channels_last_of(x) {
            Some(last) => Ok(last),
            None => super::channels_last::to_channels_last(x, self.stream),
        }
    }

    /// `compute(x, first spatial axis)` in whichever layout `x` is at hand: over its
    /// channels-last form when an earlier node left one (spatial axes from 1; the answer is
    /// this node's form, answered as with [`Lower::answer_from_channels_last`]), else over `x`
    /// itself (spatial axes from 2). For ops that work along the spatial axes alike in both.
    pub fn in_either_layout(
        &self,
        x: &Array,
        compute: impl FnOnce(&Array, usize) -> Result<Array>,
    ) -> Result<Array> {
        match self.channels_last_of(x) {
            Some(last) => self.answer_from_channels_last(compute(&last, 1)?),
            None => compute(x, 2),
        }
    }

    /// Makes the run fail with `message` unless every element of `holds` (bool, any shape) is
    /// true. Costs one reduction in the same evaluation as the outputs, and a 1-byte read.
    pub fn require(&mut self, holds: &Array, message: impl Into<String>) -> Result<()> {
        self.check(holds, message.into(), true)
    }

    /// [`Lower::require`] for inputs that ORT's CPU EP does answer, in a way the EP does not
    /// repeat (a rounding past an exact range): the run fails with `message`, which says why
    /// and how to run the node on ORT's CPU EP instead.
    pub fn require_unlike_ort(&mut self, holds: &Array, message: impl Into<String>) -> Result<()> {
        self.check(holds, message.into(), false)
    }

    fn check(&mut self, holds: &Array, message: String, ort_fails_too: bool) -> Result<()> {
        let holds = mlx_kernels::ops::all(holds, self.stream)?;
        self.checks.push(RuntimeCheck {
            holds,
            message,
            ort_fails_too,
        });
        Ok(())
    }

    /// [`Lower::require`] that every element of `values` (integers) lies in `[low, high]`: the
    /// bounds check of indices, ids and lengths.
    pub fn require_in_range(
        &mut self,
        values: &Array,
        low: i64,
        high: i64,
        message: impl Into<String>,
    ) -> Result<()> {
        let holds = self.in_range(values, low, high)?;
        self.require(&holds, message)
    }

    /// Whether each element of `values` (integers) lies in `[low, high]`.
    pub fn in_range(&self, values: &Array, low: i64, high: i64) -> Result<Array> {
        use mlx_kernels::ops;
        let s = self.stream;
        let bound = |v: i64| super::consts::scalar_like(v as f64, values, s);
        Ok(ops::logical_and(
            &ops::greater_equal(values, &bound(low)?, s)?,
            &ops::less_equal(values, &bound(high)?, s)?,
            s,
        )?)
    }

    /// Declares that output `output`, when it shares an input's buffer, writes only the rows
    /// where `rows` is true, holding `values` when given, and leaves the buffer as `held` (see
    /// [`WrittenRows`]).
    pub fn writes_only_rows(
        &mut self,
        output: usize,
        rows: &Array,
        values: Option<&Array>,
        held: &Array,
    ) {
        self.written_rows.push(WrittenRows {
            output,
            rows: rows.clone(),
            values: values.cloned(),
            held: held.clone(),
        });
    }

    /// Narrows what this lowering's host read of input `input` depends on to `project` of its
    /// values (by default, all of them). A compiled trace is replayed for any later values with
    /// the same projection, so the lowering may use the values on the host only through it.
    /// Returns the input's traced array when the read was of one (inside such a trace): what the
    /// lowering checked on the host value beyond the projection it must then check on that
    /// array at run time (`require`). `None`: the value is the run's own, nothing to add.
    pub fn key_host_read(
        &mut self,
        input: usize,
        project: impl Fn(&[i64]) -> Vec<i64> + Send + Sync + 'static,
    ) -> Option<Array> {
        let (key, traced) = self.host_keys.iter_mut().find(|(k, _)| k.input == input)?;
        let values = std::mem::take(&mut key.key);
        key.key = project(&values);
        key.project = Arc::new(project);
        Some(traced.clone())
    }

    /// The values of input `index` when the plan knows them on the host for a traced array
    /// (recorded as a host read the trace depends on).
    fn known_host_values(&mut self, index: usize, array: &Array) -> Option<Vec<i64>> {
        let values = self.constants?.host_values.get(index)?.clone()?;
        self.host_keys.push((
            HostKey {
                input: index,
                key: values.clone(),
                project: Arc::new(|v: &[i64]| v.to_vec()),
            },
            array.clone(),
        ));
        Some(values)
    }

    /// What the lowering recorded besides its outputs: run-time checks, written rows, and the
    /// host keys of traced values it read.
    pub fn into_records(self) -> (Vec<RuntimeCheck>, Vec<WrittenRows>, Vec<HostKey>) {
        let keys = self.host_keys.into_iter().map(|(k, _)| k).collect();
        (self.checks, self.written_rows, keys)
    }

    pub fn stream(&self) -> &'a Stream {
        self.stream
    }

    pub fn node(&self) -> &'a Node {
        self.node
    }

    /// An attribute, `None` when the node does not carry it.
    pub fn attr<T: FromAttr>(&self, name: &str) -> Result<Option<T>> {
        match self.node.attribute(name) {
            None => Ok(None),
            Some(value) => T::from_attr(&value).map(Some).ok_or_else(|| {
                OpError::new(format!("attribute '{name}' has kind {}", value.kind_name()))
            }),
        }
    }

    pub fn required_attr<T: FromAttr>(&self, name: &str) -> Result<T> {
        self.attr(name)?
            .ok_or_else(|| OpError::new(format!("required attribute '{name}' is missing")))
    }

    /// The MLX dtype of output `index`, as the graph declares it (a narrow type's carrier).
    pub fn output_dtype(&self, index: usize) -> Result<Dtype> {
        self.node
            .output_type(index)
            .and_then(ElemType::carrier)
            .ok_or_else(|| OpError::new(format!("output {index} has no MLX dtype")))
    }
}

/// Attribute value types a lowering can ask for.
pub trait FromAttr: Sized {
    const KIND: AttrKind;
    fn from_attr(value: &AttrValue) -> Option<Self>;
}

macro_rules! from_attr {
    ($($t:ty => $kind:ident),* $(,)?) => {$(
        impl FromAttr for $t {
            const KIND: AttrKind = AttrKind::$kind;
            fn from_attr(value: &AttrValue) -> Option<Self> {
                match value {
                    AttrValue::$kind(v) => Some(v.clone()),
                    _ => None,
                }
            }
        }
    )*};
}
from_attr!(i64 => Int, f32 => Float, String => String, Vec<i64> => Ints, Vec<f32> => Floats, Vec<String> => Strings);
from_attr!(super::node::TensorValue => Tensor, std::sync::Arc<super::node::Graph> => Graph);

/// An attribute value as the array input that later opsets turned it into (Clip's `min`,
/// Pad's `value`, Upsample's `scales`): a scalar or a 1-D array.
pub trait AttrArray {
    fn into_array(self) -> Result<Array>;
}

impl AttrArray for f32 {
    fn into_array(self) -> Result<Array> {
        Ok(Array::scalar(self)?)
    }
}

impl AttrArray for i64 {
    fn into_array(self) -> Result<Array> {
        Ok(Array::scalar(self)?)
    }
}

impl AttrArray for Vec<f32> {
    fn into_array(self) -> Result<Array> {
        Ok(Array::from_slice(&self, &[self.len() as i64])?)
    }
}

impl AttrArray for Vec<i64> {
    fn into_array(self) -> Result<Array> {
        Ok(Array::from_slice(&self, &[self.len() as i64])?)
    }
}

/// What a lowering returns: one array or several.
pub trait IntoOutputs {
    fn into_outputs(self) -> Result<Vec<Value>>;
}

impl IntoOutputs for Array {
    fn into_outputs(self) -> Result<Vec<Value>> {
        Ok(vec![Value::Tensor(self)])
    }
}

impl IntoOutputs for Vec<Array> {
    fn into_outputs(self) -> Result<Vec<Value>> {
        Ok(self.into_iter().map(Value::Tensor).collect())
    }
}

impl IntoOutputs for Sequence {
    fn into_outputs(self) -> Result<Vec<Value>> {
        Ok(vec![Value::Sequence(self.0)])
    }
}

impl IntoOutputs for Vec<Value> {
    fn into_outputs(self) -> Result<Vec<Value>> {
        Ok(self)
    }
}

/// Input `index` as a tensor (the generic claim has checked that a tensor port gets one).
fn tensor_at(inputs: &[Option<Value>], index: usize, name: &str) -> Result<Option<Array>> {
    match inputs.get(index).cloned().flatten() {
        None => Ok(None),
        Some(value) => value.into_tensor(&format!("input '{name}'")).map(Some),
    }
}

pub fn required_input(inputs: &[Option<Value>], index: usize, name: &str) -> Result<Array> {
    tensor_at(inputs, index, name)?
        .ok_or_else(|| OpError::new(format!("required input '{name}' is missing")))
}

pub fn optional_input(inputs: &[Option<Value>], index: usize) -> Option<Array> {
    tensor_at(inputs, index, "").ok().flatten()
}

/// A sequence input (`Name: [T]`).
pub fn sequence_input(inputs: &[Option<Value>], index: usize, name: &str) -> Result<Sequence> {
    match inputs.get(index).cloned().flatten() {
        Some(Value::Sequence(arrays)) => Ok(Sequence(arrays)),
        Some(Value::Tensor(_)) => Err(OpError::new(format!(
            "input '{name}' is a tensor where a sequence is expected"
        ))),
        None => Err(OpError::new(format!("required input '{name}' is missing"))),
    }
}

pub fn variadic_inputs(inputs: &[Option<Value>], from: usize, name: &str) -> Result<Vec<Array>> {
    (from..inputs.len())
        .map(|index| {
            tensor_at(inputs, index, name)?
                .ok_or_else(|| OpError::new(format!("variadic input '{name}' has an empty slot")))
        })
        .collect()
}

/// Values a lowering reads on the host (`#[host]` parameters): integer tensors as `i64`s.
pub trait FromHost: Sized {
    fn from_host(values: Vec<i64>, name: &str) -> Result<Self>;
}

impl FromHost for Vec<i64> {
    fn from_host(values: Vec<i64>, _name: &str) -> Result<Self> {
        Ok(values)
    }
}

impl FromHost for i64 {
    fn from_host(values: Vec<i64>, name: &str) -> Result<Self> {
        match values.as_slice() {
            [one] => Ok(*one),
            _ => Err(OpError::new(format!(
                "input '{name}' must hold one value, not {}",
                values.len()
            ))),
        }
    }
}

/// Reads an integer (or bool: 0/1) input's values on the host. Constants and values computed from shapes are
/// plain MLX arrays even inside a compiled trace; a value computed from the data cannot be
/// read while tracing, and the resulting error sends the plan to its eager path.
pub(crate) fn host_values(cx: &Lower, array: &Array, name: &str) -> Result<Vec<i64>> {
    if !array.dtype().is_integer() && array.dtype() != Dtype::Bool {
        return Err(OpError::new(format!(
            "input '{name}' must be an integer or bool tensor"
        )));
    }
    let wide = mlx_kernels::ops::astype(array, Dtype::I64, cx.stream())?;
    Ok(wide.to_vec::<i64>(cx.stream())?)
}

pub fn host_input<T: FromHost>(
    cx: &mut Lower,
    inputs: &[Option<Value>],
    index: usize,
    name: &str,
) -> Result<T> {
    let array = required_input(inputs, index, name)?;
    T::from_host(read_host(cx, index, &array, name)?, name)
}

pub fn optional_host_input<T: FromHost>(
    cx: &mut Lower,
    inputs: &[Option<Value>],
    index: usize,
    name: &str,
) -> Result<Option<T>> {
    match optional_input(inputs, index) {
        None => Ok(None),
        Some(array) => T::from_host(read_host(cx, index, &array, name)?, name).map(Some),
    }
}

/// The values the plan knows for a traced input, else the array's own.
fn read_host(cx: &mut Lower, index: usize, array: &Array, name: &str) -> Result<Vec<i64>> {
    match cx.known_host_values(index, array) {
        Some(values) => Ok(values),
        None => host_values(cx, array, name),
    }
}

/// `a` cast to float32: the type ORT's CPU kernels compute in where an op mixes several values
/// (attention scores, recurrent gates), so lowerings widen their inputs once and round once.
pub fn float32(a: &Array, s: &Stream) -> Result<Array> {
    Ok(mlx_kernels::ops::astype(a, Dtype::F32, s)?)
}

#[cfg(test)]
mod prepared_tests {
    use super::*;
    use crate::table::testing::stream;

    /// Runs `prepared` the way a plan's lowering does, with inputs 0 and 1 of which only the
    /// ones in `constant` are constants; returns the array and how often `compute` ran.
    fn prepare(store: &RefCell<Prepared>, constant: &[bool], reads: &[usize]) -> (Vec<f32>, u32) {
        let s = stream();
        let shared = RefCell::new(SharedDerivations::default());
        let node = Node::new("Test", 1);
        let mut cx = Lower::new(&s, &node).with_constants(ConstantInputs {
            node: 0,
            constant,
            prepared: store,
            host_values: &[],
            read_once: &[],
            shapes_fixed: false,
            shared: &shared,
        });
        let mut runs = 0;
        let arrays = cx
            .prepared("doubled", reads, || {
                runs += 1;
                let x = Array::from_slice(&[1.0f32, 2.0], &[2])?;
                Ok(vec![mlx_kernels::ops::add(&x, &x, &s)?])
            })
            .unwrap();
        (arrays[0].to_vec::<f32>(&s).unwrap(), runs)
    }

    #[test]
    fn constant_inputs_are_prepared_once_and_kept() {
        let store = RefCell::new(Prepared::default());
        assert_eq!(prepare(&store, &[true, true], &[0, 1]), (vec![2.0, 4.0], 1));
        assert_eq!(prepare(&store, &[true, true], &[0, 1]), (vec![2.0, 4.0], 0));
        let kept = store.borrow();
        assert_eq!((kept.len(), kept.computed), (1, 1));
    }

    #[test]
    fn absent_inputs_count_as_constant() {
        let store = RefCell::new(Prepared::default());
        prepare(&store, &[true], &[0, 3]);
        assert_eq!(store.borrow().computed, 1);
    }

    #[test]
    fn a_varying_input_is_computed_every_run_and_nothing_kept() {
        let store = RefCell::new(Prepared::default());
        for _ in 0..2 {
            assert_eq!(
                prepare(&store, &[false, true], &[0, 1]),
                (vec![2.0, 4.0], 1)
            );
        }
        assert!(store.borrow().is_empty());
        // Outside a plan (unit tests of lowerings) nothing is constant.
        let s = stream();
        let node = Node::new("Test", 1);
        let cx = Lower::new(&s, &node);
        assert!(!cx.input_is_constant(0));
    }
}

#[cfg(test)]
mod answer_again_tests {
    use super::*;
    use crate::table::testing::{stream, PlanStores};

    #[test]
    fn an_answer_given_again_is_kept_for_the_plan_only_when_alike() {
        let s = stream();
        let node = Node::new("Test", 1);
        let stores = PlanStores::default();
        let shared = &stores.shared;
        let cx = Lower::new(&s, &node).with_constants(stores.context(&[], &[], true));
        let earlier = Array::from_slice(&[1.0f32, 2.0], &[2]).unwrap();
        let again = Array::from_slice(&[1.0f32, 2.0], &[2]).unwrap();
        cx.answer_again(&earlier, again.clone());
        // Another shape, another type: not the same answer, not kept.
        cx.answer_again(&earlier, Array::from_slice(&[1.0f32; 3], &[3]).unwrap());
        cx.answer_again(&earlier, Array::from_slice(&[1i32, 2], &[2]).unwrap());
        let taken = shared.borrow_mut().take_answered_again();
        let ids: Vec<_> = taken.iter().map(|(e, a)| (e.id(), a.id())).collect();
        assert_eq!(ids, [(earlier.id(), again.id())]);
        assert!(
            shared.borrow_mut().take_answered_again().is_empty(),
            "taken once"
        );
        // Outside a plan (unit tests of lowerings) there is nothing to keep it in.
        Lower::new(&s, &node).answer_again(&earlier, again);
        assert!(shared.borrow_mut().take_answered_again().is_empty());
    }
}

#[cfg(test)]
mod host_key_tests {
    use super::*;
    use crate::table::testing::stream;

    #[test]
    fn a_traced_input_reads_the_plans_values_and_keys_the_lowering_by_a_projection() {
        let s = stream();
        let node = Node::new("Test", 1);
        let store = RefCell::new(Prepared::default());
        let shared = RefCell::new(SharedDerivations::default());
        // The array holds 3; the plan says the traced value of this run is 7.
        let traced = Array::from_slice(&[3i64], &[1]).unwrap();
        let known = [Some(vec![7i64]), None];
        let mut cx = Lower::new(&s, &node).with_constants(ConstantInputs {
            node: 0,
            constant: &[false, false],
            prepared: &store,
            host_values: &known,
            read_once: &[],
            shapes_fixed: false,
            shared: &shared,
        });
        let inputs = [
            Some(Value::Tensor(traced.clone())),
            Some(Value::Tensor(traced)),
        ];
        let value: i64 = host_input(&mut cx, &inputs, 0, "n").unwrap();
        assert_eq!(value, 7);
        // Input 1 has no known value: its own is read, and nothing is keyed by it.
        let own: i64 = host_input(&mut cx, &inputs, 1, "m").unwrap();
        assert_eq!(own, 3);
        assert!(cx.key_host_read(1, |v| v.to_vec()).is_none());
        let array = cx.key_host_read(0, |v| vec![i64::from(v[0] > 5)]);
        assert!(
            array.is_some(),
            "the traced array comes back for run-time checks"
        );
        let (_, _, keys) = cx.into_records();
        assert_eq!(keys.len(), 1);
        assert_eq!((keys[0].input, keys[0].key.clone()), (0, vec![1]));
        assert_eq!((keys[0].project)(&[9]), vec![1]);
        assert_eq!((keys[0].project)(&[2]), vec![0]);
    }

    #[test]
    fn without_a_projection_the_key_is_the_values() {
        let s = stream();
        let node = Node::new("Test", 1);
        let store = RefCell::new(Prepared::default());
        let shared = RefCell::new(SharedDerivations::default());
        let known = [Some(vec![4i64, 5])];
        let mut cx = Lower::new(&s, &node).with_constants(ConstantInputs {
            node: 0,
            constant: &[false],
            prepared: &store,
            host_values: &known,
            read_once: &[],
            shapes_fixed: false,
            shared: &shared,
        });
        let inputs = [Some(Value::Tensor(
            Array::from_slice(&[0i64, 0], &[2]).unwrap(),
        ))];
        let values: Vec<i64> = host_input(&mut cx, &inputs, 0, "shape").unwrap();
        assert_eq!(values, [4, 5]);
        let (_, _, keys) = cx.into_records();
        assert_eq!(keys[0].key, [4, 5]);
        assert_eq!((keys[0].project)(&[4, 6]), [4, 6]);
    }
}

#[cfg(test)]
mod shared_tests {
    use super::*;
    use crate::table::testing::stream;

    /// Lowers one node that derives `x + x` from `x` through `Lower::shared` with `extra`;
    /// returns the result, whether `compute` ran and how many checks the node registered.
    fn derive(
        store: &RefCell<SharedDerivations>,
        x: &Array,
        extra: &[i64],
    ) -> (Array, bool, usize) {
        let s = stream();
        let node = Node::new("Test", 1);
        let prepared = RefCell::new(Prepared::default());
        let mut cx = Lower::new(&s, &node).with_constants(ConstantInputs {
            node: 0,
            constant: &[false],
            prepared: &prepared,
            host_values: &[],
            read_once: &[],
            shapes_fixed: false,
            shared: store,
        });
        let mut ran = false;
        let arrays = cx
            .shared("doubled", &[x], extra, |cx| {
                ran = true;
                let doubled = mlx_kernels::ops::add(x, x, cx.stream())?;
                cx.require_in_range(&doubled, 0, 10, "out of range")?;
                Ok(vec![doubled])
            })
            .unwrap();
        let (checks, _, _) = cx.into_records();
        (arrays[0].clone(), ran, checks.len())
    }

    #[test]
    fn nodes_deriving_the_same_from_the_same_arrays_share_one_result_and_its_checks() {
        let store = RefCell::new(SharedDerivations::default());
        let x = Array::from_slice(&[1i64, 2], &[2]).unwrap();
        let (first, ran, checks) = derive(&store, &x, &[3]);
        assert!(ran);
        assert_eq!(checks, 1);
        // A second node over the same array (a clone: the same graph value) gets it back.
        let (again, ran, checks) = derive(&store, &x.clone(), &[3]);
        assert!(!ran);
        assert_eq!(checks, 0, "the first node's check covers it");
        assert_eq!(first.id(), again.id());
        // Other sizes, or an equal array that is another value, derive their own.
        assert!(derive(&store, &x, &[4]).1);
        let y = Array::from_slice(&[1i64, 2], &[2]).unwrap();
        assert!(derive(&store, &y, &[3]).1);
        assert_eq!(store.borrow().len(), 3);
    }
}
