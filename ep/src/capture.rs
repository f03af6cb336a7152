//! Compiled capture: trace a plan once into an MLX closure, compile it (`mlx_compile` fuses
//! kernels) and replay it on later runs.
//!
//! The path follows the table: a plan whose nodes are all `Shapeless` gets one closure for
//! every shape (retraced only when the rank, dtype or broadcast pattern of an input changes);
//! one whose nodes are at most `ShapeKeyed` gets one closure per input-shape key, in a bounded
//! least-recently-used cache; a plan with an `Eager` node, or whose trace, compile or replay
//! fails, runs eagerly. A shape-keyed plan whose run changed the shapes of inputs that reach
//! only a prologue of small nodes (an LLM's growing attention mask) runs that prologue eagerly
//! and replays the rest compiled (`split`): a decode step is traced once, not per token.
//! Settings (`options.rs`; each an EP option or an `ONNXRUNTIME_EP_MLX_*` variable):
//! `no_compile` (eager only), `compile_cache` (entries per plan, default 16), `compile_after`
//! (eager runs of a shape before it is compiled, default 1: one-shot sessions never pay for
//! compilation), `no_shapeless` (shape-keyed closures even for shapeless plans), `no_fuse`
//! (closures traced without MLX's kernel fusion: on the CPU backend every new fused kernel costs
//! a C++ compile at first use), `no_split` (no prologue split: every new shape is a new trace).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use mlx_kernels::{Array, Closure, Dtype};
use op_specs::ShapeSafety;

use crate::device::Device;
use crate::options::Options;
use crate::plan::{
    Constants, EvalError, Evaluated, Guard, InPlace, Lowering, NodeCheck, OutputSink, Plan,
    RunTimes, Runtime, SlotKey,
};
use crate::split::{self, Split};
use crate::trace;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    Eager,
    ShapeKeyed,
    Shapeless,
}

impl Path {
    pub fn name(self) -> &'static str {
        match self {
            Path::Eager => "eager",
            Path::ShapeKeyed => "shape-keyed",
            Path::Shapeless => "shapeless",
        }
    }
}

/// A plan's capture settings, from its session's options.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub enabled: bool,
    pub shapeless: bool,
    /// Fault injection for tests of the fallback: `ONNXRUNTIME_EP_MLX_FAULT=compile` makes
    /// every compile fail.
    pub fail_compile: bool,
    pub capacity: usize,
    pub compile_after: u32,
    /// Whether traces fuse kernels (MLX's own setting is per process: the last plan to trace
    /// sets it, so sessions in one process should agree).
    pub fuse: bool,
    /// Per-op profiling (`op_profile`): eager runs that evaluate node by node.
    pub profile_ops: bool,
    /// Whether runs that changed only a prologue's input shapes replay the rest compiled.
    pub split: bool,
    /// Where traces run (a closure traces on the stream it makes).
    pub device: Device,
}

impl Settings {
    pub fn of(options: &Options) -> Settings {
        let profile_ops = options.flag("profile_ops");
        Settings {
            // Per-op profiling evaluates node by node, which a trace cannot.
            enabled: !options.flag("no_compile") && !profile_ops,
            shapeless: !options.flag("no_shapeless"),
            fail_compile: options.text("fault") == Some("compile"),
            capacity: usize::try_from(options.count("compile_cache")).unwrap_or(usize::MAX),
            compile_after: u32::try_from(options.count("compile_after")).unwrap_or(u32::MAX),
            fuse: !options.flag("no_fuse"),
            profile_ops,
            split: !options.flag("no_split"),
            device: Device::of(options),
        }
    }
}

/// What identifies a trace: per input, its dtype and its dims. For a shapeless path the dims
/// are abstracted to which are 1 and which are equal to which (across all inputs, and the
/// plan's constants, whose dims are baked into the trace): broadcasts are decided at trace
/// time, and a replay is only valid when the same dims still meet.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ShapeKey(Vec<(Dtype, Vec<i64>)>);

impl ShapeKey {
    fn of(inputs: &[Array], constants: &[(usize, Array)], path: Path) -> ShapeKey {
        let mut classes: Vec<i64> = Vec::new();
        let mut class_of = |d: i64| -> i64 {
            if d == 1 {
                return -1;
            }
            match classes.iter().position(|&c| c == d) {
                Some(i) => i as i64,
                None => {
                    classes.push(d);
                    classes.len() as i64 - 1
                }
            }
        };
        if path == Path::Shapeless {
            for dim in constants.iter().flat_map(|(_, c)| c.shape()) {
                class_of(dim);
            }
        }
        ShapeKey(
            inputs
                .iter()
                .map(|a| {
                    let dims = a.shape();
                    let dims = match path {
                        Path::Shapeless => dims.into_iter().map(&mut class_of).collect(),
                        _ => dims,
                    };
                    (a.dtype(), dims)
                })
                .collect(),
        )
    }
}

/// What a cache entry is for: the shapes of the closure's inputs, and which plan inputs a
/// split left to its prologue (none: the closure takes the plan's inputs).
#[derive(Debug, Clone, PartialEq, Eq)]
struct CacheKey {
    prologue_inputs: Vec<bool>,
    shapes: ShapeKey,
}

enum Entry {
    /// Seen this many times, still below the compile threshold.
    Warming(u32),
    /// Closures for this key, one per set of host keys their traces recorded (most recently
    /// used last). Each returns the plan's outputs, then the written-rows masks of the outputs
    /// its trace recorded, then one array per run-time check (their messages recorded too).
    Compiled(Vec<(Closure, TraceRecord)>),
}

/// What a trace recorded besides its arrays, for its replays: which outputs have a
/// written-rows mask (and which of the distinct masks the closure returns: nodes that share one
/// return it once), the run-time checks' messages, in the order the closure returns them,
/// and what the trace took from host values of traced inputs (a replay needs the same).
#[derive(Debug, Default, Clone)]
struct Recorded {
    /// The outputs written in place.
    masked_outputs: Vec<MaskedOutput>,
    /// How many arrays (distinct masks, then values and buffers) follow the plan's outputs.
    in_place_arrays: usize,
    messages: Vec<Arc<str>>,
    host_keys: Vec<SlotKey>,
}

/// An output written in place: its index, and where its distinct mask, its values (if any) and
/// its buffer after the write are among the arrays the closure returns after the plan's outputs.
#[derive(Debug, Clone, Copy)]
struct MaskedOutput {
    output: usize,
    mask: usize,
    values: Option<usize>,
    held: usize,
}

impl Recorded {
    fn holds_for(&self, host_values: &HashMap<usize, Vec<i64>>) -> bool {
        self.host_keys.iter().all(|k| {
            host_values
                .get(&k.slot)
                .is_some_and(|values| k.holds_for(values))
        })
    }
}

type TraceRecord = Arc<Mutex<Recorded>>;

/// Inputs a run may consume: the EP's device mirrors of shared KV buffers
/// (`ep/src/resident.rs`). MLX writes a result into an input's buffer (a scatter of new rows into
/// the cache) only when nothing else holds that input, so before evaluating a compiled graph its
/// caller drops every reference of its own to them: the lowering's `keep_alive`, the input lists
/// and the fallback's copy. Should the evaluation then fail, `reload` makes them again from
/// ORT's bytes (which the mirror equals) for the eager fallback.
pub struct Consumable<'a> {
    /// Per input: whether the run may consume it.
    pub inputs: Vec<bool>,
    pub reload: &'a dyn Fn(usize) -> Result<Array, String>,
}

impl Consumable<'_> {
    /// The lowering and the fallback's inputs without the consumable inputs; `arrays` (this
    /// run's inputs, as given) are dropped.
    fn release(
        &self,
        mut lowering: Lowering,
        mut inputs: Vec<Option<Array>>,
        arrays: Vec<Array>,
    ) -> (Lowering, Vec<Option<Array>>) {
        let mut released = Vec::new();
        for (input, &consumed) in inputs.iter_mut().zip(&self.inputs) {
            if consumed {
                released.extend(input.take().map(|a| a.id()));
            }
        }
        drop(arrays);
        for kept in &mut lowering.keep_alive {
            if kept.as_ref().is_some_and(|a| released.contains(&a.id())) {
                *kept = None;
            }
        }
        (lowering, inputs)
    }

    /// `inputs` with the released ones made again, for the eager fallback.
    fn restore(&self, mut inputs: Vec<Option<Array>>) -> Result<Vec<Option<Array>>, String> {
        for (index, (input, &consumed)) in inputs.iter_mut().zip(&self.inputs).enumerate() {
            if consumed && input.is_none() {
                *input = Some((self.reload)(index)?);
            }
        }
        Ok(inputs)
    }
}

/// What a new trace lowers: the whole plan, or a split's body with the host values of its
/// prologue's results.
enum TraceOf {
    Plan,
    Body(Arc<Split>, HashMap<usize, Vec<i64>>),
}

/// The inputs a split takes into its prologue, and whether they changed in value only.
type SplitKey = (Vec<bool>, bool);

/// The compiled path of one plan (owned by the plan's thread, like its runtime).
pub struct Capture {
    path: Path,
    settings: Settings,
    cache: Vec<(CacheKey, Entry)>,
    pub traces: u64,
    pub hits: u64,
    pub fallback: Option<String>,
    /// The previous run's input shapes, to see which inputs changed.
    last_shapes: Vec<Vec<i64>>,
    /// Per set of changed inputs: its split, `None` when the plan cannot be split there.
    splits: Vec<(SplitKey, Option<Arc<Split>>)>,
    /// Compiled runs of a split body, and why runs stopped being split (a split trace or
    /// replay failed where the eager path did not).
    pub split_runs: u64,
    pub split_fallback: Option<String>,
    /// A trace read data on the host (an If's condition computed from an input): runs then
    /// split off the small integer and bool inputs, and key each trace on what the prologue
    /// computes from them, instead of running eagerly for good.
    keyed_on_values: bool,
    /// Whether split runs replay before reading the prologue's host values (see
    /// [`Capture::run_split`]); off for good after a guess that did not fit, since a plan
    /// whose keys change with the values (an If's condition) would pay for two runs at a time.
    speculating: bool,
}

impl Capture {
    pub fn new(plan: &Plan, settings: Settings) -> Capture {
        let path = match (settings.enabled, plan.shape_safety()) {
            (false, _) | (_, ShapeSafety::Eager) => Path::Eager,
            (true, ShapeSafety::Shapeless) if settings.shapeless => Path::Shapeless,
            (true, _) => Path::ShapeKeyed,
        };
        Capture {
            path,
            settings,
            cache: Vec::new(),
            traces: 0,
            hits: 0,
            fallback: None,
            last_shapes: Vec::new(),
            splits: Vec::new(),
            split_runs: 0,
            split_fallback: None,
            keyed_on_values: false,
            speculating: true,
        }
    }

    pub fn path(&self) -> Path {
        self.path
    }

    /// Runs the plan on its compiled path when it has one. A compile or replay failure falls
    /// back to the eager path for good (with the reason kept), unless the eager path fails
    /// too: then the inputs were at fault, and the error is the eager one. The compiled paths
    /// hand the evaluation the only references to the `consumable` inputs (see [`Consumable`]).
    pub fn run(
        &mut self,
        plan: &Arc<Plan>,
        runtime: &Runtime,
        inputs: Vec<Option<Array>>,
        consumable: &Consumable<'_>,
        times: &mut RunTimes,
        sink: &mut dyn OutputSink,
    ) -> Result<Evaluated, String> {
        // Zero-size inputs run eagerly: the plan replaces zero-size results by constants, which a
        // trace made for other shapes would not do (and MLX's CUDA kernels trap on them).
        let present: Option<Vec<Array>> = inputs.iter().cloned().collect();
        let present = present.filter(|arrays| arrays.iter().all(|a| a.size() > 0));
        let (Path::ShapeKeyed | Path::Shapeless, Some(arrays)) = (self.path, present) else {
            return plan.run(runtime, inputs, times, sink, self.settings.profile_ops);
        };
        if let Some(split) = self.split_for(plan, &arrays) {
            let speculate = self.speculating;
            return self.run_split(
                plan, runtime, arrays, inputs, split, consumable, times, sink, speculate,
            );
        }
        let started = Instant::now();
        let prepared_before = runtime.constants.prepare_time();
        let key = CacheKey {
            prologue_inputs: Vec::new(),
            shapes: ShapeKey::of(&arrays, &runtime.constants.arrays, self.path),
        };
        if self.warming(&key) {
            return plan.run(runtime, inputs, times, sink, self.settings.profile_ops);
        }
        let replaying = Instant::now();
        let replayed = self.replay(plan, runtime, key, &arrays, TraceOf::Plan);
        times.replay += replaying.elapsed();
        let lowering = replayed.and_then(|replayed| replayed.into_lowering(plan, &arrays));
        let lowering = match lowering {
            Ok(lowering) => lowering,
            Err(reason) => return self.fall_back(plan, runtime, inputs, times, sink, reason),
        };
        times.charge_translation(runtime, started, prepared_before);
        let (lowering, inputs) = consumable.release(lowering, inputs, arrays);
        match plan.evaluate(lowering, &runtime.stream, times, sink) {
            Ok(evaluated) => Ok(evaluated),
            // The inputs are at fault, not the trace: the eager path would fail the same way.
            Err(EvalError::Input(message)) => Err(message),
            Err(error @ (EvalError::Mlx(_) | EvalError::Stale)) => {
                let inputs = consumable.restore(inputs)?;
                self.fall_back(plan, runtime, inputs, times, sink, error.into())
            }
        }
    }

    /// The split for this run: on the shape-keyed path, when some inputs (not all) changed
    /// shape since the last run, or (once a trace read data on the host) at the small integer
    /// and bool inputs, and the plan can be split there.
    fn split_for(&mut self, plan: &Plan, arrays: &[Array]) -> Option<Arc<Split>> {
        let shapes: Vec<Vec<i64>> = arrays.iter().map(Array::shape).collect();
        let last = std::mem::replace(&mut self.last_shapes, shapes.clone());
        if self.path != Path::ShapeKeyed
            || !self.settings.split
            || self.split_fallback.is_some()
            || last.len() != shapes.len()
        {
            return None;
        }
        let mut changed: Vec<bool> = shapes.iter().zip(&last).map(|(a, b)| a != b).collect();
        let by_value = self.keyed_on_values && !changed.contains(&true);
        if by_value {
            changed = arrays.iter().map(split::is_host_value).collect();
        }
        if !changed.contains(&true) || !changed.contains(&false) {
            return None;
        }
        let key = (changed, by_value);
        if let Some((_, split)) = self.splits.iter().find(|(k, _)| *k == key) {
            return split.clone();
        }
        let split = Split::of(plan, &key.0, by_value).map(Arc::new);
        // Bounded like the cache: a plan whose inputs change in ever new combinations keeps
        // the latest ones.
        if self.splits.len() >= self.settings.capacity {
            self.splits.remove(0);
        }
        self.splits.push((key, split.clone()));
        split
    }

    /// A split run: the prologue eagerly, the body compiled for the shapes and host keys of
    /// the prologue's results. A failure of the split (not of the inputs) stops splitting.
    ///
    /// With `speculate`, the body's closure last used for these shapes replays before the
    /// prologue's host values are known: they are read with the run's one evaluation and
    /// checked there (`plan::Guard`), instead of costing a device round trip of their own
    /// before it. A decode step's values change every token, the keys its trace took from them
    /// rarely (genai's loop: never). When they did, the run is made again without guessing,
    /// its consumed inputs reloaded from ORT's bytes (nothing was written back), and the plan
    /// stops guessing.
    #[allow(clippy::too_many_arguments)]
    fn run_split(
        &mut self,
        plan: &Arc<Plan>,
        runtime: &Runtime,
        arrays: Vec<Array>,
        inputs: Vec<Option<Array>>,
        split: Arc<Split>,
        consumable: &Consumable<'_>,
        times: &mut RunTimes,
        sink: &mut dyn OutputSink,
        speculate: bool,
    ) -> Result<Evaluated, String> {
        let started = Instant::now();
        let prepared_before = runtime.constants.prepare_time();
        let attempt = (|| -> Result<Option<(Lowering, bool)>, String> {
            let stream = &runtime.stream;
            let prologue_started = Instant::now();
            let prologue = split.lower_prologue(plan, stream, &runtime.constants, &arrays)?;
            let body_inputs = split.body_inputs(&arrays, &prologue);
            let key = CacheKey {
                prologue_inputs: split.prologue_inputs.clone(),
                shapes: ShapeKey::of(&body_inputs, &[], Path::ShapeKeyed),
            };
            if self.warming(&key) {
                return Ok(None);
            }
            let lowered = prologue_started.elapsed();
            let replaying = Instant::now();
            let guessed = speculate
                .then(|| self.speculative_replay(&key, &body_inputs))
                .flatten();
            if let Some(replayed) = guessed {
                times.prologue += lowered;
                times.replay += replaying.elapsed();
                let replayed = replayed?;
                let guard = guard_of(
                    &replayed.recorded,
                    prologue.host_value_arrays(&split, stream)?,
                );
                let body = replayed.into_lowering(plan, &body_inputs)?;
                let mut lowering = split.join(plan, prologue, body);
                lowering.guard = Some(guard);
                return Ok(Some((lowering, true)));
            }
            let host_values = prologue.host_values(&split, stream)?;
            times.prologue += prologue_started.elapsed();
            let trace = TraceOf::Body(Arc::clone(&split), host_values);
            let replaying = Instant::now();
            let replayed = self.replay(plan, runtime, key, &body_inputs, trace);
            times.replay += replaying.elapsed();
            let replayed = replayed?;
            let body = replayed.into_lowering(plan, &body_inputs)?;
            Ok(Some((split.join(plan, prologue, body), false)))
        })();
        let (reason, inputs) = match attempt {
            Ok(Some((lowering, guessed))) => {
                times.charge_translation(runtime, started, prepared_before);
                let (lowering, inputs) = consumable.release(lowering, inputs, arrays);
                let evaluated = plan.evaluate(lowering, &runtime.stream, times, sink);
                if !matches!(evaluated, Err(EvalError::Stale)) {
                    self.split_runs += 1;
                    self.hits += u64::from(guessed);
                }
                match evaluated {
                    Ok(evaluated) => return Ok(evaluated),
                    Err(EvalError::Input(message)) => return Err(message),
                    Err(EvalError::Stale) => {
                        self.speculating = false;
                        let inputs = consumable.restore(inputs)?;
                        let arrays = inputs.iter().cloned().collect::<Option<Vec<_>>>();
                        let arrays = arrays.ok_or("a split run lost an input (EP bug)")?;
                        return self.run_split(
                            plan, runtime, arrays, inputs, split, consumable, times, sink, false,
                        );
                    }
                    Err(EvalError::Mlx(reason)) => (reason, consumable.restore(inputs)?),
                }
            }
            Ok(None) => return plan.run(runtime, inputs, times, sink, self.settings.profile_ops),
            Err(reason) => (reason, inputs),
        };
        let evaluated = plan.run(runtime, inputs, times, sink, self.settings.profile_ops)?;
        self.split_fallback = Some(reason);
        Ok(evaluated)
    }

    /// The closure most recently used for `key` (see [`Capture::run_split`]) applied to
    /// `inputs`; `None` when the key has none yet.
    fn speculative_replay(
        &self,
        key: &CacheKey,
        inputs: &[Array],
    ) -> Option<Result<Replayed, String>> {
        let (last, Entry::Compiled(closures)) = self.cache.last()? else {
            return None;
        };
        let (closure, record) = closures.last().filter(|_| last == key)?;
        let recorded = record.lock().ok()?.clone();
        Some(applied(closure, inputs).map(|arrays| Replayed { arrays, recorded }))
    }

    /// A compile or replay failure sends the plan to its eager path for good (the reason kept),
    /// unless the eager path fails too: then the inputs were at fault, and the error is the
    /// eager one.
    fn fall_back(
        &mut self,
        plan: &Arc<Plan>,
        runtime: &Runtime,
        inputs: Vec<Option<Array>>,
        times: &mut RunTimes,
        sink: &mut dyn OutputSink,
        reason: String,
    ) -> Result<Evaluated, String> {
        let small_inputs = inputs.iter().flatten().any(split::is_host_value);
        let evaluated = plan.run(runtime, inputs, times, sink, self.settings.profile_ops)?;
        // MLX's words for a host read inside a trace: once, try keying traces on the values.
        if reason.contains(mlx_kernels::EVAL_WHILE_TRACING)
            && small_inputs
            && !self.keyed_on_values
            && self.path == Path::ShapeKeyed
            && self.settings.split
            && self.split_fallback.is_none()
        {
            self.keyed_on_values = true;
            return Ok(evaluated);
        }
        self.path = Path::Eager;
        self.cache.clear();
        self.fallback = Some(reason);
        Ok(evaluated)
    }

    /// Counts a sighting of `key`: whether it is still below the compile threshold (then the
    /// run is eager). Keeps the entry most recently used, the cache bounded.
    fn warming(&mut self, key: &CacheKey) -> bool {
        let index = match self.cache.iter().position(|(k, _)| k == key) {
            Some(i) => i,
            None => {
                self.cache.push((key.clone(), Entry::Warming(0)));
                if self.cache.len() > self.settings.capacity {
                    self.cache.remove(0);
                }
                self.cache.len() - 1
            }
        };
        let entry = self.cache.remove(index);
        match entry {
            (key, Entry::Warming(seen)) if seen < self.settings.compile_after => {
                self.cache.push((key, Entry::Warming(seen + 1)));
                true
            }
            entry => {
                self.cache.push(entry);
                false
            }
        }
    }

    /// The compiled closure for `key` (warmed up: see [`Capture::warming`]) applied to
    /// `inputs`, traced now if no closure of the key holds for this run's host values.
    fn replay(
        &mut self,
        plan: &Arc<Plan>,
        runtime: &Runtime,
        key: CacheKey,
        inputs: &[Array],
        trace: TraceOf,
    ) -> Result<Replayed, String> {
        let entry = match self.cache.last() {
            Some((k, _)) if *k == key => self.cache.pop().map(|(_, e)| e),
            _ => None,
        };
        let mut closures = match entry {
            Some(Entry::Compiled(closures)) => closures,
            _ => Vec::new(),
        };
        let no_values = HashMap::new();
        let host_values = match &trace {
            TraceOf::Plan => &no_values,
            TraceOf::Body(_, values) => values,
        };
        let found = closures.iter().position(|(_, record)| {
            record
                .lock()
                .is_ok_and(|recorded| recorded.holds_for(host_values))
        });
        let (closure, record) = match found {
            Some(i) => {
                self.hits += 1;
                closures.remove(i)
            }
            None if self.settings.fail_compile => {
                self.cache.push((key, Entry::Compiled(closures)));
                return Err("compile failed: injected by ONNXRUNTIME_EP_MLX_FAULT=compile".into());
            }
            None => {
                self.traces += 1;
                let record = TraceRecord::default();
                let body = trace_body(
                    Arc::clone(plan),
                    runtime.constants.clone(),
                    trace,
                    Arc::clone(&record),
                    self.settings.device,
                );
                let _span = trace::span("compile", "compile");
                let compiled = Closure::new(body)
                    .compile(self.path == Path::Shapeless)
                    .and_then(|closure| {
                        // MLX reads the fusion setting when the closure traces: at the apply.
                        mlx_kernels::set_kernel_fusion(self.settings.fuse).map(|_| closure)
                    });
                match compiled {
                    Ok(closure) => (closure, record),
                    Err(e) => {
                        self.cache.push((key, Entry::Compiled(closures)));
                        return Err(format!("compile failed: {e}"));
                    }
                }
            }
        };
        // A new closure traces (lowers every node) inside its first apply.
        let applied = applied(&closure, inputs);
        let recorded = record.lock().map(|r| r.clone()).unwrap_or_default();
        // A closure whose trace failed recorded nothing to key it by: it is not kept.
        if applied.is_ok() {
            closures.push((closure, record));
        }
        if closures.len() > self.settings.capacity {
            closures.remove(0);
        }
        self.cache.push((key, Entry::Compiled(closures)));
        Ok(Replayed {
            arrays: applied?,
            recorded,
        })
    }
}

/// What a compiled closure returned, with its trace's record.
struct Replayed {
    arrays: Vec<Array>,
    recorded: Recorded,
}

impl Replayed {
    /// The plan's lazy outputs, their written-rows masks and the run-time checks.
    fn into_lowering(self, plan: &Plan, inputs: &[Array]) -> Result<Lowering, String> {
        let Replayed {
            arrays: mut outputs,
            recorded,
        } = self;
        let produced = outputs.len();
        let masks = recorded.in_place_arrays;
        let expected = plan.outputs.len() + masks + recorded.messages.len();
        if produced != expected {
            return Err(format!(
                "compiled replay returned {produced} arrays for {expected} outputs, masks and checks"
            ));
        }
        let checks = outputs
            .split_off(plan.outputs.len() + masks)
            .into_iter()
            .zip(recorded.messages)
            .map(|(holds, message)| NodeCheck { holds, message })
            .collect();
        let in_place = outputs.split_off(plan.outputs.len());
        let mut written_rows = vec![None; plan.outputs.len()];
        for masked in &recorded.masked_outputs {
            let (Some(mask), Some(held)) = (in_place.get(masked.mask), in_place.get(masked.held))
            else {
                continue;
            };
            written_rows[masked.output] = Some(InPlace {
                mask: mask.clone(),
                values: masked.values.and_then(|v| in_place.get(v).cloned()),
                held: held.clone(),
            });
        }
        Ok(Lowering {
            outputs,
            checks,
            written_rows,
            keep_alive: inputs.iter().cloned().map(Some).collect(),
            guard: None,
        })
    }
}

/// `closure` applied to `inputs`, in the trace's "replay" span.
fn applied(closure: &Closure, inputs: &[Array]) -> Result<Vec<Array>, String> {
    let _span = trace::span("replay", "replay");
    closure
        .apply(inputs)
        .map_err(|e| format!("compiled replay failed: {e}"))
}

/// The guard of a speculative replay: whether `recorded`'s host keys hold for the values
/// `host` (a split prologue's results, by slot) turn out to have.
fn guard_of(recorded: &Recorded, host: Vec<(usize, Array)>) -> Guard {
    let (slots, values): (Vec<usize>, Vec<Array>) = host.into_iter().unzip();
    let recorded = recorded.clone();
    Guard {
        values,
        holds: Box::new(move |read: &[Vec<i64>]| {
            let by_slot = slots.iter().copied().zip(read.iter().cloned()).collect();
            recorded.holds_for(&by_slot)
        }),
    }
}

/// The closure MLX traces: the plan's (or a split body's) lowering over its inputs, constants
/// captured. It returns the outputs, then the written-rows masks, then the run-time checks, and
/// records which outputs the masks belong to, the checks' messages and the host keys for the
/// replays.
fn trace_body(
    plan: Arc<Plan>,
    constants: Constants,
    trace: TraceOf,
    record: TraceRecord,
    device: Device,
) -> impl Fn(&[Array]) -> mlx_kernels::Result<Vec<Array>> {
    move |inputs: &[Array]| {
        let stream = device.stream()?;
        let (lowering, host_keys) = match &trace {
            TraceOf::Plan => plan
                .lower(
                    &stream,
                    &constants,
                    inputs.iter().cloned().map(Some).collect(),
                )
                .map(|lowering| (lowering, Vec::new())),
            TraceOf::Body(split, host_values) => {
                split.lower_body(&plan, &stream, &constants, inputs, host_values)
            }
        }
        .map_err(mlx_kernels::Error::Callback)?;
        let mut arrays = lowering.outputs;
        let mut recorded = Recorded {
            host_keys,
            ..Recorded::default()
        };
        // Distinct masks first (the layers of a decoder share one), then each output's values
        // and buffer.
        let mut in_place: Vec<Array> = Vec::new();
        let mut per_output = Vec::new();
        for (output, written) in lowering.written_rows.into_iter().enumerate() {
            if let Some(InPlace { mask, values, held }) = written {
                let index = match in_place.iter().position(|m| m.id() == mask.id()) {
                    Some(index) => index,
                    None => {
                        in_place.push(mask);
                        in_place.len() - 1
                    }
                };
                per_output.push((output, index, values, held));
            }
        }
        for (output, mask, values, held) in per_output {
            let values = values.map(|rows| {
                in_place.push(rows);
                in_place.len() - 1
            });
            in_place.push(held);
            recorded.masked_outputs.push(MaskedOutput {
                output,
                mask,
                values,
                held: in_place.len() - 1,
            });
        }
        recorded.in_place_arrays = in_place.len();
        arrays.extend(in_place);
        for check in lowering.checks {
            arrays.push(check.holds);
            recorded.messages.push(check.message);
        }
        if let Ok(mut slot) = record.lock() {
            *slot = recorded;
        }
        Ok(arrays)
    }
}
