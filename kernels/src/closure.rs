//! MLX closures: a Rust function over arrays that MLX can call, trace and compile.

use std::cell::RefCell;
use std::ffi::c_void;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::array::Array;
use crate::error::{check, Error, Result};
use crate::sys;
use crate::vector::VectorArray;

type Body = Box<dyn Fn(&[Array]) -> Result<Vec<Array>>>;

thread_local! {
    /// The error of the last failed closure body on this thread: mlx-c only learns "non-zero",
    /// so `apply` reports this instead of mlx-c's generic message.
    static BODY_ERROR: RefCell<Option<Error>> = const { RefCell::new(None) };
}

/// An owned `mlx_closure`. Compiling one gives another closure that replays the traced graph.
pub struct Closure {
    raw: sys::mlx_closure,
}

impl Closure {
    /// Wraps a Rust function. Its errors (and panics) surface from [`Closure::apply`].
    pub fn new<F>(body: F) -> Closure
    where
        F: Fn(&[Array]) -> Result<Vec<Array>> + 'static,
    {
        crate::init();
        let payload: *mut Body = Box::into_raw(Box::new(Box::new(body)));
        // SAFETY: mlx-c keeps `payload` alive until it calls `drop_body` exactly once; the
        // trampoline only reads it while the closure exists.
        let raw = unsafe {
            sys::mlx_closure_new_func_payload(Some(trampoline), payload.cast(), Some(drop_body))
        };
        Closure { raw }
    }

    pub fn apply(&self, inputs: &[Array]) -> Result<Vec<Array>> {
        let args = VectorArray::from_arrays(inputs)?;
        BODY_ERROR.with(|slot| slot.borrow_mut().take());
        // SAFETY: an owned empty vector handle; mlx_closure_apply fills it (allocating its
        // context if needed), and `results` takes ownership of whatever it holds afterwards.
        let mut out = unsafe { sys::mlx_vector_array_new() };
        // SAFETY: all handles are live.
        let status = unsafe { sys::mlx_closure_apply(&mut out, self.raw, args.raw()) };
        let results = VectorArray::from_raw(out);
        if let Err(mlx_error) = check(status) {
            return Err(BODY_ERROR
                .with(|slot| slot.borrow_mut().take())
                .unwrap_or(mlx_error));
        }
        results.to_vec()
    }

    /// Compiles the closure (`mlx_compile`): the first apply traces, later ones replay with
    /// fused kernels. `shapeless` replays across input shapes without retracing.
    pub fn compile(&self, shapeless: bool) -> Result<Closure> {
        // SAFETY: an owned empty closure handle that receives the result.
        let raw = unsafe { sys::mlx_closure_new() };
        let mut compiled = Closure { raw };
        // SAFETY: both handles are live.
        check(unsafe { sys::mlx_compile(&mut compiled.raw, self.raw, shapeless) })?;
        Ok(compiled)
    }
}

/// Whether closures traced from now on fuse elementwise chains into generated kernels (MLX's
/// default). On the CPU backend each new fused kernel is C++ compiled at first use (cached in
/// MLX's kernel cache); without fusion a compiled closure still replays its simplified graph.
/// MLX keeps this per process and reads it when a closure traces.
pub fn set_kernel_fusion(enabled: bool) -> Result<()> {
    crate::init();
    let mode = if enabled {
        sys::mlx_compile_mode_::MLX_COMPILE_MODE_ENABLED
    } else {
        sys::mlx_compile_mode_::MLX_COMPILE_MODE_NO_FUSE
    };
    // SAFETY: sets a plain process-wide value.
    check(unsafe { sys::mlx_set_compile_mode(mode) })
}

impl Drop for Closure {
    fn drop(&mut self) {
        // SAFETY: each Closure owns one handle, freed exactly once.
        unsafe { sys::mlx_closure_free(self.raw) };
    }
}

impl fmt::Debug for Closure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Closure")
    }
}

/// Called by MLX with the inputs; writes the outputs into `out`. Never unwinds.
extern "C" fn trampoline(
    out: *mut sys::mlx_vector_array,
    inputs: sys::mlx_vector_array,
    payload: *mut c_void,
) -> i32 {
    let run = || -> Result<()> {
        // SAFETY: `payload` is the Body boxed in `Closure::new`, alive while MLX can call us.
        let body = unsafe { &*payload.cast::<Body>() };
        let count = {
            // SAFETY: `inputs` is a live vector owned by mlx-c for the duration of the call.
            unsafe { sys::mlx_vector_array_size(inputs) }
        };
        let args = (0..count)
            .map(|i| {
                Array::from_op(|a| {
                    // SAFETY: `i` < size of the live vector `inputs`.
                    unsafe { sys::mlx_vector_array_get(a, inputs, i) }
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let results = VectorArray::from_arrays(&body(&args)?)?;
        // SAFETY: `out` points at the results handle mlx-c made for this call (possibly without
        // storage yet); mlx_vector_array_set fills it in place with shared references.
        check(unsafe { sys::mlx_vector_array_set(out, results.raw()) })?;
        Ok(())
    };
    let error = match catch_unwind(AssertUnwindSafe(run)) {
        Ok(Ok(())) => return 0,
        Ok(Err(e)) => e,
        Err(panic) => Error::Callback(format!("closure body panicked: {}", panic_message(&panic))),
    };
    BODY_ERROR.with(|slot| *slot.borrow_mut() = Some(error));
    1
}

extern "C" fn drop_body(payload: *mut c_void) {
    // SAFETY: mlx-c calls this once, when the last copy of the closure is gone.
    let body = unsafe { Box::from_raw(payload.cast::<Body>()) };
    // A panicking destructor must not unwind into C++.
    let _ = catch_unwind(AssertUnwindSafe(move || drop(body)));
}

pub(crate) fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".into())
}
