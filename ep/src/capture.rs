//! Compiled capture: trace a plan once into an MLX closure, compile it (`mlx_compile` fuses
//! kernels) and replay it on later runs.
//!
//! The path follows the table: a plan whose nodes are all `Shapeless` gets one closure for
//! every shape (retraced only when the rank, dtype or broadcast pattern of an input changes);
//! one whose nodes are at most `ShapeKeyed` gets one closure per input-shape key, in a bounded
//! least-recently-used cache; a plan with an `Eager` node, or whose trace, compile or replay
//! fails, runs eagerly. Environment knobs:
//! `ONNXRUNTIME_EP_MLX_NO_COMPILE=1` (eager only), `ONNXRUNTIME_EP_MLX_COMPILE_CACHE=N` (entries
//! per plan, default 16), `ONNXRUNTIME_EP_MLX_COMPILE_AFTER=N` (eager runs of a shape before
//! it is compiled, default 1: one-shot sessions never pay for compilation),
//! `ONNXRUNTIME_EP_MLX_NO_SHAPELESS=1` (shape-keyed closures even for shapeless plans),
//! `ONNXRUNTIME_EP_MLX_NO_FUSE=1` (closures traced without MLX's kernel fusion: on the CPU
//! backend every new fused kernel costs a C++ compile at first use).

use std::sync::{Arc, Mutex};
use std::time::Instant;

use mlx_kernels::{Array, Closure, Dtype};
use op_specs::ShapeSafety;

use crate::device;
use crate::op_profile;
use crate::plan::{Constants, EvalError, Evaluated, Lowering, NodeCheck, Plan, RunTimes, Runtime};

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

/// Settings read from the environment once per plan.
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
}

impl Settings {
    pub fn from_env() -> Settings {
        let number = |name: &str, default: usize| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(default)
        };
        let profile_ops = op_profile::enabled();
        Settings {
            // Per-op profiling evaluates node by node, which a trace cannot.
            enabled: !std::env::var("ONNXRUNTIME_EP_MLX_NO_COMPILE").is_ok_and(|v| v == "1")
                && !profile_ops,
            shapeless: !std::env::var("ONNXRUNTIME_EP_MLX_NO_SHAPELESS").is_ok_and(|v| v == "1"),
            fail_compile: std::env::var("ONNXRUNTIME_EP_MLX_FAULT").is_ok_and(|v| v == "compile"),
            capacity: number("ONNXRUNTIME_EP_MLX_COMPILE_CACHE", 16).max(1),
            compile_after: number("ONNXRUNTIME_EP_MLX_COMPILE_AFTER", 1) as u32,
            fuse: !std::env::var("ONNXRUNTIME_EP_MLX_NO_FUSE").is_ok_and(|v| v == "1"),
            profile_ops,
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

enum Entry {
    /// Seen this many times, still below the compile threshold.
    Warming(u32),
    /// The closure returns the plan's outputs, then the written-rows masks of the outputs its
    /// trace recorded, then one array per run-time check (their messages recorded too).
    Compiled(Closure, TraceRecord),
}

/// What a trace recorded besides its arrays, for its replays: which outputs have a
/// written-rows mask, and the run-time checks' messages, in the order the closure returns them.
#[derive(Debug, Default, Clone)]
struct Recorded {
    masked_outputs: Vec<usize>,
    messages: Vec<Arc<str>>,
}

type TraceRecord = Arc<Mutex<Recorded>>;

/// The compiled path of one plan (owned by the plan's thread, like its runtime).
pub struct Capture {
    path: Path,
    settings: Settings,
    cache: Vec<(ShapeKey, Entry)>,
    pub traces: u64,
    pub hits: u64,
    pub fallback: Option<String>,
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
        }
    }

    pub fn path(&self) -> Path {
        self.path
    }

    /// Runs the plan on its compiled path when it has one. A compile or replay failure falls
    /// back to the eager path for good (with the reason kept), unless the eager path fails
    /// too: then the inputs were at fault, and the error is the eager one.
    pub fn run(
        &mut self,
        plan: &Arc<Plan>,
        runtime: &Runtime,
        inputs: Vec<Option<Array>>,
        times: &mut RunTimes,
    ) -> Result<Evaluated, String> {
        // Zero-size inputs run eagerly: the plan replaces zero-size results by constants, which a
        // trace made for other shapes would not do (and MLX's CUDA kernels trap on them).
        let present: Option<Vec<Array>> = inputs.iter().cloned().collect();
        let present = present.filter(|arrays| arrays.iter().all(|a| a.size() > 0));
        let (Path::ShapeKeyed | Path::Shapeless, Some(arrays)) = (self.path, present) else {
            return plan.run(runtime, inputs, times, self.settings.profile_ops);
        };
        match self.compiled(plan, runtime, &arrays, times) {
            Ok(Some(lowering)) => match plan.evaluate(lowering, &runtime.stream, times) {
                Ok(evaluated) => Ok(evaluated),
                // The inputs are at fault, not the trace: the eager path would fail the same way.
                Err(EvalError::Input(message)) => Err(message),
                Err(EvalError::Mlx(reason)) => self.fall_back(plan, runtime, inputs, times, reason),
            },
            Ok(None) => plan.run(runtime, inputs, times, self.settings.profile_ops),
            Err(reason) => self.fall_back(plan, runtime, inputs, times, reason),
        }
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
        reason: String,
    ) -> Result<Evaluated, String> {
        let evaluated = plan.run(runtime, inputs, times, self.settings.profile_ops)?;
        self.path = Path::Eager;
        self.cache.clear();
        self.fallback = Some(reason);
        Ok(evaluated)
    }

    /// The compiled closure's lazy outputs for `inputs`; `Ok(None)`: this shape is still
    /// warming up, run it eagerly.
    fn compiled(
        &mut self,
        plan: &Arc<Plan>,
        runtime: &Runtime,
        inputs: &[Array],
        times: &mut RunTimes,
    ) -> Result<Option<Lowering>, String> {
        let started = Instant::now();
        let prepared_before = runtime.constants.prepare_time();
        let key = ShapeKey::of(inputs, &runtime.constants.arrays, self.path);
        let index = match self.cache.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                self.cache.push((key, Entry::Warming(0)));
                if self.cache.len() > self.settings.capacity {
                    self.cache.remove(0);
                }
                self.cache.len() - 1
            }
        };
        // Most recently used last.
        let (key, entry) = self.cache.remove(index);
        let entry = match entry {
            Entry::Warming(seen) if seen < self.settings.compile_after => {
                self.cache.push((key, Entry::Warming(seen + 1)));
                return Ok(None);
            }
            Entry::Warming(_) if self.settings.fail_compile => {
                return Err("compile failed: injected by ONNXRUNTIME_EP_MLX_FAULT=compile".into());
            }
            Entry::Warming(_) => {
                self.traces += 1;
                let record = TraceRecord::default();
                let body = trace_body(
                    Arc::clone(plan),
                    runtime.constants.clone(),
                    Arc::clone(&record),
                );
                let closure = Closure::new(body)
                    .compile(self.path == Path::Shapeless)
                    .map_err(|e| format!("compile failed: {e}"))?;
                // MLX reads the fusion setting when the closure traces: at the apply below.
                mlx_kernels::set_kernel_fusion(self.settings.fuse)
                    .map_err(|e| format!("compile failed: {e}"))?;
                Entry::Compiled(closure, record)
            }
            compiled => {
                self.hits += 1;
                compiled
            }
        };
        let Entry::Compiled(closure, record) = &entry else {
            unreachable!("compiled above")
        };
        let applied = closure
            .apply(inputs)
            .map_err(|e| format!("compiled replay failed: {e}"));
        let record = record.lock().map(|r| r.clone()).unwrap_or_default();
        self.cache.push((key, entry));
        let mut outputs = applied?;
        let produced = outputs.len();
        let masks = record.masked_outputs.len();
        let expected = plan.outputs.len() + masks + record.messages.len();
        if produced != expected {
            return Err(format!(
                "compiled replay returned {produced} arrays for {expected} outputs, masks and checks"
            ));
        }
        let checks = outputs
            .split_off(plan.outputs.len() + masks)
            .into_iter()
            .zip(record.messages)
            .map(|(holds, message)| NodeCheck { holds, message })
            .collect();
        let mut written_rows = vec![None; plan.outputs.len()];
        for (output, mask) in record
            .masked_outputs
            .iter()
            .zip(outputs.split_off(plan.outputs.len()))
        {
            written_rows[*output] = Some(mask);
        }
        // A trace lowers the plan, and may be the first to prepare arrays from constants.
        let prepare = runtime.constants.prepare_time() - prepared_before;
        times.prepare += prepare;
        times.translate += started.elapsed().saturating_sub(prepare);
        Ok(Some(Lowering {
            outputs,
            checks,
            written_rows,
            keep_alive: inputs.iter().cloned().map(Some).collect(),
        }))
    }
}

/// The closure MLX traces: the plan's lowering over its inputs, constants captured. It returns
/// the outputs, then the written-rows masks, then the run-time checks, and records which outputs
/// the masks belong to and the checks' messages for the replays.
fn trace_body(
    plan: Arc<Plan>,
    constants: Constants,
    record: TraceRecord,
) -> impl Fn(&[Array]) -> mlx_kernels::Result<Vec<Array>> {
    move |inputs: &[Array]| {
        let stream = device::stream()?;
        let lowering = plan
            .lower(
                &stream,
                &constants,
                inputs.iter().cloned().map(Some).collect(),
            )
            .map_err(mlx_kernels::Error::Callback)?;
        let mut arrays = lowering.outputs;
        let mut recorded = Recorded::default();
        for (output, mask) in lowering.written_rows.into_iter().enumerate() {
            if let Some(mask) = mask {
                arrays.push(mask);
                recorded.masked_outputs.push(output);
            }
        }
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
