//! The `OrtNodeComputeInfo` vtable: runs one plan per call of the fused node.

use std::ffi::c_void;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use mlx_kernels::Array;

use crate::capture::{Capture, Settings};
use crate::diagnostics::{PlanReport, Stats};
use crate::ort::api::guard;
use crate::ort::kernel;
use crate::ort::sys;
use crate::ort::thread_bound::ThreadBound;
use crate::plan::{Plan, RunTimes, Runtime};

/// `base` first, so ORT's `OrtNodeComputeInfo*` is also a pointer to the whole struct.
#[repr(C)]
pub struct ComputeInfo {
    base: sys::OrtNodeComputeInfo,
    plan: Arc<Plan>,
    state: ThreadBound<Option<PlanState>>,
    stats: Arc<Mutex<Stats>>,
}

/// What a plan builds on its first run, on its owning thread.
struct PlanState {
    runtime: Runtime,
    capture: Capture,
}

impl ComputeInfo {
    pub fn create(plan: Plan, stats: Arc<Mutex<Stats>>) -> *mut sys::OrtNodeComputeInfo {
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
        info.state
            .with(|state| run(info, state, context))
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
        let runtime = info.plan.start()?;
        let capture = Capture::new(&info.plan, Settings::from_env());
        *state = Some(PlanState { runtime, capture });
    }
    let PlanState { runtime, capture } = state.as_mut().expect("set above");
    let copying = Instant::now();
    let count = kernel::input_count(context)?;
    let mut inputs = Vec::with_capacity(count);
    for index in 0..count {
        // SAFETY: ORT keeps the inputs alive and unchanged during this compute call, and the
        // arrays borrowing them are held (Evaluated::keep_alive) until the outputs are copied.
        let array = match unsafe { kernel::input(context, index) }? {
            None => None,
            Some(tensor) => {
                let dtype = tensor
                    .elem
                    .to_mlx()
                    .ok_or("an input type MLX cannot hold")?;
                // SAFETY: as above: the bytes outlive every use, and `inputs` holds the arrays.
                let array =
                    unsafe { Array::from_borrowed_bytes(tensor.bytes, &tensor.shape, dtype) };
                Some(array.map_err(|e| e.to_string())?)
            }
        };
        inputs.push(array);
    }
    let mut times = RunTimes::default();
    let mut copies = copying.elapsed();
    let evaluated = capture.run(&info.plan, runtime, inputs, &mut times)?;
    let copying = Instant::now();
    for (index, array) in evaluated.outputs.iter().enumerate() {
        let shape = array.shape();
        // SAFETY: the live kernel context of this call; ORT allocates the output.
        let bytes =
            unsafe { kernel::output(context, index, &shape, array.dtype().size_in_bytes()) }?;
        array
            .copy_to(bytes, &runtime.stream)
            .map_err(|e| e.to_string())?;
    }
    drop(evaluated);
    copies += copying.elapsed();
    if let Ok(mut stats) = info.stats.lock() {
        stats.runs += 1;
        stats.translate += times.translate;
        stats.eval += times.eval;
        stats.copies += copies;
        stats.plan_reports.insert(
            info.plan.name.clone(),
            PlanReport {
                path: capture.path().name(),
                traces: capture.traces,
                hits: capture.hits,
                fallback: capture.fallback.clone(),
            },
        );
    }
    Ok(())
}
