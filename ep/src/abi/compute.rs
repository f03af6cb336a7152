//! The `OrtNodeComputeInfo` vtable: runs one plan per call of the fused node.

use std::ffi::c_void;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mlx_kernels::{bound_memory, custom, stream_copy, Array, Dtype, Stream};

use crate::capture::{Capture, Consumable, Settings};
use crate::diagnostics::{MemoryReport, PlanReport, Stats, Traffic};
use crate::huge_empty;
use crate::narrow;
use crate::options::Options;
use crate::ort::api::guard;
use crate::ort::kernel;
use crate::ort::sys;
use crate::ort::thread_bound::ThreadBound;
use crate::plan::{Evaluated, OutputSink, Plan, RunTimes, Runtime, Store};
use crate::resident::{Residency, SharedOutput};
use crate::trace::{self, Trace};

/// `base` first, so ORT's `OrtNodeComputeInfo*` is also a pointer to the whole struct.
#[repr(C)]
pub struct ComputeInfo {
    base: sys::OrtNodeComputeInfo,
    plan: Arc<Plan>,
    state: ThreadBound<Option<PlanState>>,
    stats: Arc<Mutex<Stats>>,
    options: Arc<Options>,
    trace: Option<Arc<Trace>>,
    /// Whether the session prints its summary (`verbose`): only then does a run gather the
    /// plan's report and MLX's memory for it, which a small model's run would otherwise pay
    /// for every time.
    summarised: bool,
}

/// What a plan builds on its first run, on its owning thread.
struct PlanState {
    runtime: Runtime,
    capture: Capture,
    residency: Residency,
}

impl ComputeInfo {
    pub fn create(
        plan: Plan,
        stats: Arc<Mutex<Stats>>,
        options: Arc<Options>,
        trace: Option<Arc<Trace>>,
    ) -> *mut sys::OrtNodeComputeInfo {
        let info = Box::new(ComputeInfo {
            base: sys::OrtNodeComputeInfo {
                ort_version_supported: sys::ORT_API_VERSION,
                CreateState: Some(create_state),
                Compute: Some(compute),
                ReleaseState: Some(release_state),
            },
            plan: Arc::new(plan),
            state: ThreadBound::new(None),
            stats,
            summarised: options.flag("verbose"),
            options,
            trace,
        });
        Box::into_raw(info).cast()
    }

    /// # Safety
    /// `info` must come from `create`, released once.
    pub unsafe fn destroy(info: *mut sys::OrtNodeComputeInfo) {
        if !info.is_null() {
            // SAFETY: per the contract, this is the Box made in `create`.
            drop(unsafe { Box::from_raw(info.cast::<ComputeInfo>()) });
        }
    }
}

/// The plan itself is the state: nothing per kernel instance.
unsafe extern "C" fn create_state(
    this: *mut sys::OrtNodeComputeInfo,
    _context: *mut sys::OrtNodeComputeContext,
    state: *mut *mut c_void,
) -> sys::OrtStatusPtr {
    guard("CreateState", || {
        // SAFETY: a valid out-pointer from ORT.
        unsafe { *state = this.cast() };
        Ok(())
    })
}

unsafe extern "C" fn release_state(_this: *mut sys::OrtNodeComputeInfo, _state: *mut c_void) {}

unsafe extern "C" fn compute(
    this: *mut sys::OrtNodeComputeInfo,
    _state: *mut c_void,
    context: *mut sys::OrtKernelContext,
) -> sys::OrtStatusPtr {
    guard("Compute", || {
        // SAFETY: ORT passes one of our compute infos.
        let info = unsafe { &*this.cast::<ComputeInfo>() };
        trace::scoped(info.trace.as_ref(), || {
            let _span = trace::span(&info.plan.name, "run");
            info.state.with(|state| run(info, state, context))
        })
        .and_then(|r| r)
        .map_err(|e| format!("{}: {e}", info.plan.name))
    })
}

fn run(
    info: &ComputeInfo,
    state: &mut Option<PlanState>,
    context: *mut sys::OrtKernelContext,
) -> Result<(), String> {
    if state.is_none() {
        let settings = Settings::of(&info.options);
        let runtime = info.plan.start(settings.device)?;
        let capture = Capture::new(&info.plan, settings);
        let residency = Residency::new(
            kernel::input_count(context)?,
            info.options.flag("kv_mirror"),
        );
        *state = Some(PlanState {
            runtime,
            capture,
            residency,
        });
    }
    let PlanState {
        runtime,
        capture,
        residency,
    } = state.as_mut().expect("set above");
    let copying = Instant::now();
    let copy_in = trace::span("copy in", "copy");
    let count = kernel::input_count(context)?;
    // SAFETY: ORT keeps the inputs alive and unchanged during this compute call, and the
    // arrays borrowing them are held (Evaluated::keep_alive) until the outputs are copied.
    let tensors = (0..count)
        .map(|index| unsafe { kernel::input(context, index) })
        .collect::<Result<Vec<_>, String>>()?;
    if huge_empty::needed(&tensors) {
        // Empty inputs with dimensions MLX cannot hold: the outputs are empty, shapes only.
        residency.forget();
        let shapes = huge_empty::output_shapes(&info.plan, runtime, &tensors)?;
        for (index, (shape, output)) in shapes.iter().zip(&info.plan.outputs).enumerate() {
            // SAFETY: the live kernel context of this call; an empty output has no bytes.
            unsafe { kernel::output(context, index, shape, output.elem) }?;
        }
        return Ok(());
    }
    let mut traffic = Traffic::default();
    let mut inputs = Vec::with_capacity(count);
    // Where each input's bytes live: an output handed the same buffer shares it (see resident.rs).
    let mut buffers = Vec::with_capacity(count);
    // Inputs fed from a device mirror, which the run may update in place (capture::Consumable),
    // with their bytes in ORT's buffer to make them again from.
    let mut mirrored = Vec::with_capacity(count);
    for (index, tensor) in tensors.into_iter().enumerate() {
        let array = match tensor {
            None => None,
            Some(_) if !info.plan.reads_input(index) => None,
            Some(tensor) if tensor.elem.is_narrow() => {
                // Decoded into a buffer of our own: no output can share ORT's packed bytes.
                buffers.push(None);
                Some(narrow::input_array(
                    tensor.elem,
                    &tensor.shape,
                    tensor.bytes,
                )?)
            }
            Some(tensor) => {
                let dtype = tensor
                    .elem
                    .to_mlx()
                    .ok_or("an input type MLX cannot hold")?;
                buffers.push(Some((tensor.bytes.as_ptr() as usize, tensor.bytes.len())));
                let mirror = residency.mirrored_input(index, tensor.bytes, &tensor.shape, dtype);
                if mirror.is_some() {
                    mirrored.push((index, tensor.bytes, tensor.shape.clone(), dtype));
                }
                Some(match mirror {
                    Some(array) => array,
                    None => {
                        // SAFETY: as above: the bytes outlive every use, and `inputs` holds
                        // the arrays.
                        let (array, bound) =
                            unsafe { input_array(tensor.bytes, &tensor.shape, dtype) }?;
                        if bound {
                            traffic.bound_in += 1;
                        } else {
                            traffic.copied_in += tensor.bytes.len();
                        }
                        array
                    }
                })
            }
        };
        if array.is_none() {
            buffers.push(None);
        }
        inputs.push(array);
    }
    let mut consumed = vec![false; inputs.len()];
    for (index, ..) in &mirrored {
        consumed[*index] = true;
    }
    // What the write-back compares outputs with: not the consumable inputs, which must have no
    // other holder while the run evaluates.
    let fed: Vec<Option<Array>> = inputs
        .iter()
        .zip(&consumed)
        .map(|(input, &consumed)| if consumed { None } else { input.clone() })
        .collect();
    let reload = |index: usize| -> Result<Array, String> {
        let (_, bytes, shape, dtype) = mirrored
            .iter()
            .find(|(i, ..)| *i == index)
            .ok_or("no such mirrored input")?;
        // SAFETY: as above: ORT's bytes outlive the run, and the run holds the array.
        unsafe { input_array(bytes, shape, *dtype) }.map(|(array, _)| array)
    };
    let consumable = Consumable {
        inputs: consumed,
        reload: &reload,
    };
    let mut times = RunTimes::default();
    let mut copies = copying.elapsed();
    drop(copy_in);
    let mut outputs = RunOutputs {
        context,
        plan: &info.plan,
        buffers: &buffers,
        stream: &runtime.stream,
        copies_on_stream: stream_copy::available(&runtime.stream),
        stored: vec![None; info.plan.outputs.len()],
    };
    let evaluated = {
        let _span = trace::span("execute", "execute");
        capture
            .run(
                &info.plan,
                runtime,
                inputs,
                &consumable,
                &mut times,
                &mut outputs,
            )
            .inspect_err(|_| residency.forget())?
    };
    let copying = Instant::now();
    let copy_out = trace::span("copy out", "copy");
    let written = write_outputs(&outputs, &evaluated, &fed, residency, runtime);
    drop(copy_out);
    if written.is_err() {
        residency.forget();
    }
    let (write_back, written_traffic) = written?;
    traffic.add(written_traffic);
    drop(evaluated);
    copies += copying.elapsed();
    if let Ok(mut stats) = info.stats.lock() {
        stats.runs += 1;
        stats.translate += times.translate;
        stats.eval += times.eval;
        stats.copies += copies;
        stats.prepare += times.prepare;
        stats.prologue += times.prologue;
        stats.replay += times.replay;
        stats.write_back += write_back;
        stats.traffic.add(traffic);
        if info.summarised {
            // A plan's first run uploads its constants and compiles MLX's kernels: not the
            // op's steady cost, so the profile starts with its second run.
            if stats.plan_reports.contains_key(&info.plan.name) {
                stats.op_profile.merge(&times.ops);
            }
            stats.memory = MemoryReport::now();
            let report = plan_report(info, capture, residency, runtime);
            stats.plan_reports.insert(info.plan.name.clone(), report);
        }
    }
    if info.trace.is_some() {
        let memory = MemoryReport::now();
        let mib = |bytes: usize| bytes as f64 / (1024.0 * 1024.0);
        trace::counter(
            "mlx memory (MiB)",
            &[("active", mib(memory.active)), ("peak", mib(memory.peak))],
        );
    }
    Ok(())
}

/// How the plan has run so far, for the session summary.
fn plan_report(
    info: &ComputeInfo,
    capture: &Capture,
    residency: &Residency,
    runtime: &Runtime,
) -> PlanReport {
    PlanReport {
        path: capture.path().name(),
        traces: capture.traces,
        hits: capture.hits,
        fallback: capture.fallback.clone(),
        split_runs: capture.split_runs,
        split_fallback: capture.split_fallback.clone(),
        shared_rows_written: residency.rows_written,
        shared_rows: residency.rows_aliased,
        mirror_hits: residency.mirror_hits,
        mirrors_in_place: residency.mirrors_in_place,
        constants: info.plan.constants_report(runtime),
        half_nodes: info.plan.half_nodes(),
        channels_last_lowered: info.plan.channels_last_lowered(),
        rewrites: info.plan.rewrites(),
    }
}

/// An array for an input's bytes, and whether they were MLX memory already: over the tensor
/// itself when a user placed it in the EP's memory (no copy), else borrowing ORT's bytes.
///
/// # Safety
/// As [`Array::from_borrowed_bytes`]: the bytes outlive every use, and the caller holds the array.
unsafe fn input_array(
    bytes: &[u8],
    shape: &[i64],
    dtype: mlx_kernels::Dtype,
) -> Result<(Array, bool), String> {
    // SAFETY: the caller's contract, passed on.
    let made = match unsafe { bound_memory::array_over(bytes, shape, dtype) } {
        Some(bound) => bound.map(|array| (array, true)),
        // SAFETY: the caller's contract, passed on.
        None => unsafe { Array::from_borrowed_bytes(bytes, shape, dtype) }.map(|a| (a, false)),
    };
    made.map_err(|e| e.to_string())
}

/// The fused node's outputs in this run: ORT's context that places them, and which of them the
/// evaluation wrote itself. On a GPU the run's own evaluation writes them where it can, so that
/// the run ends with one synchronisation instead of MLX's and a driver copy's after it: every
/// output by a copy on MLX's CUDA stream behind the run's kernels (`mlx_kernels::stream_copy`)
/// where MLX's stream can be had, else an output bound in the EP's memory by one more kernel of
/// the evaluation (`custom::store_bytes`). Everything else (a buffer shared with an input,
/// narrow types, the CPU backend) is left to [`write_outputs`].
struct RunOutputs<'a> {
    context: *mut sys::OrtKernelContext,
    plan: &'a Plan,
    buffers: &'a [Option<(usize, usize)>],
    stream: &'a Stream,
    /// Whether this run's outputs can be copied on MLX's stream (`stream_copy::available`).
    copies_on_stream: bool,
    /// How the evaluation wrote each output, if it did.
    stored: Vec<Option<Stored>>,
}

impl OutputSink for RunOutputs<'_> {
    fn store(&mut self, index: usize, output: &Array) -> Result<Option<Store>, String> {
        // An evaluation that failed may have stored it: the one asking now decides.
        let Some(stored) = self.stored.get_mut(index) else {
            return Ok(None);
        };
        *stored = None;
        let elem = self.plan.outputs[index].elem;
        let on_stream = self.copies_on_stream;
        let by_kernel =
            custom::store_bytes_runs_on(self.stream) && custom::store_bytes_takes(output.nbytes());
        if elem.is_narrow() || output.nbytes() == 0 || !(on_stream || by_kernel) {
            return Ok(None);
        }
        // SAFETY: the live kernel context of this call; ORT allocates the output (or hands the
        // buffer bound to it), and gives `write_outputs` the same one if it asks again.
        let bytes = unsafe { kernel::output(self.context, index, &output.shape(), elem) }?;
        let address = (bytes.as_ptr() as usize, bytes.len());
        if bytes.len() != output.nbytes() || self.buffers.contains(&Some(address)) {
            return Ok(None);
        }
        let ours = bound_memory::is_ours(bytes);
        if on_stream {
            // A host read of an output of ours since the last run (ORT's copy) moved its pages
            // there: they are sent back before the GPU writes them.
            bound_memory::toward_gpu(bytes);
            self.stored[index] = Some(if ours {
                Stored::OnStreamIntoOurs
            } else {
                Stored::OnStreamIntoHost
            });
            // SAFETY: ORT keeps the output's buffer beyond this call, whose evaluation writes
            // it, and nothing reads or writes it until then.
            return Ok(Some(Store::CopyInto(unsafe {
                stream_copy::Destination::new(bytes)
            })));
        }
        // SAFETY: as above; the store's array holds `dst` until then. `array_over` sends the
        // pages of an output of ours back toward the GPU as above; other memory is not taken.
        let dst = unsafe { bound_memory::array_over(bytes, &[bytes.len() as i64], Dtype::U8) };
        let Some(Ok(dst)) = dst else {
            return Ok(None);
        };
        // MLX refusing the kernel leaves the output to the copy after the evaluation.
        let Ok(kernel) = custom::store_bytes(output, &dst, self.stream) else {
            return Ok(None);
        };
        self.stored[index] = Some(Stored::ByKernel);
        Ok(Some(Store::Kernel(kernel)))
    }

    fn not_stored(&mut self, index: usize) {
        if let Some(stored) = self.stored.get_mut(index) {
            *stored = None;
        }
    }
}

/// How the run's own evaluation wrote an output.
#[derive(Clone, Copy)]
enum Stored {
    /// Into the EP's memory, by a kernel of the evaluation (`custom::store_bytes`).
    ByKernel,
    /// Into the EP's memory, by a copy on MLX's stream (`mlx_kernels::stream_copy`).
    OnStreamIntoOurs,
    /// Into ORT's host memory, by a copy on MLX's stream.
    OnStreamIntoHost,
}

/// Copies the outputs into ORT's tensors. An output whose buffer is one of the inputs' (a
/// shared KV cache) gets only its changed rows, after every other output: another output may
/// still read that input's bytes (on the CPU backend arrays borrow ORT's memory). Returns the
/// time the shared buffers took, and what crossed to ORT's memory.
fn write_outputs(
    placed: &RunOutputs,
    evaluated: &Evaluated,
    inputs: &[Option<Array>],
    residency: &mut Residency,
    runtime: &Runtime,
) -> Result<(Duration, Traffic), String> {
    let RunOutputs {
        context,
        plan,
        buffers,
        stored,
        ..
    } = placed;
    let mut traffic = Traffic::default();
    let mut shared = Vec::new();
    let outputs = &evaluated.outputs;
    for ((index, array), output) in outputs.iter().enumerate().zip(&plan.outputs) {
        if let Some(Some(how)) = stored.get(index) {
            if let Stored::OnStreamIntoHost = how {
                traffic.copied_out += array.nbytes();
                traffic.read_on_stream += 1;
            } else {
                traffic.bound_out += 1;
                traffic.stored_out += 1;
                traffic.stored_on_stream += u64::from(matches!(how, Stored::OnStreamIntoOurs));
            }
            continue;
        }
        let shape = array.shape();
        // SAFETY: the live kernel context of this call; ORT allocates the output (or hands the
        // buffer bound to it). No input slice is alive any more: inputs are known by address.
        let bytes = unsafe { kernel::output(*context, index, &shape, output.elem) }?;
        // Written below by copies that may run on the host (narrow types, shared rows, the CPU
        // backend): a buffer of ours sends its pages back toward the GPU when next read.
        bound_memory::touched_by_host(bytes);
        if output.elem.is_narrow() {
            narrow::write_output(array, output.elem, bytes, &runtime.stream)
                .map_err(|e| format!("{}: {e}", plan.output_producer(index)))?;
            continue;
        }
        let address = (bytes.as_ptr() as usize, bytes.len());
        let same = buffers
            .iter()
            .position(|b| !bytes.is_empty() && *b == Some(address));
        match same {
            Some(input) => shared.push(SharedOutput {
                index: input,
                input: inputs[input].as_ref(),
                output: array,
                written: evaluated.written_rows.get(index).and_then(Option::as_ref),
                buffer: bytes,
            }),
            None => {
                // An output bound in our memory is written by MLX into its own memory.
                if bound_memory::is_ours(bytes) {
                    traffic.bound_out += 1;
                } else {
                    traffic.copied_out += bytes.len();
                }
                array
                    .copy_to(bytes, &runtime.stream)
                    .map_err(|e| e.to_string())?
            }
        }
    }
    let started = Instant::now();
    residency.write_back(shared, &runtime.stream)?;
    Ok((started.elapsed(), traffic))
}
