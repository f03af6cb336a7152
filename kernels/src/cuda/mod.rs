//! Hand-written CUDA kernels, run through MLX's custom-kernel primitive (`fast::cuda_kernel`):
//! MLX compiles each source with NVRTC at its first use (cached with MLX's own fused kernels)
//! and schedules it like any other primitive, inside compiled closures too.
//!
//! Element types: float32 and float16, the ones run on a GPU here (bfloat16 compiles the same
//! way but has not been run; its callers take the composed path).
//!
//! Only MLX's CUDA backend runs them (the CPU backend throws, Metal has its own kernel
//! language), so every caller keeps a composed path and asks [`available`] first.

mod decode_attention;
mod pack_bytes;
mod paged_prefill_attention;
mod quantized_matvec;
mod rms_norm;

use std::ffi::{c_char, CString};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use crate::error::{capture, check, Error, Result};
use crate::{sys, Array, DeviceKind, Dtype, Stream, VectorArray};

pub use decode_attention::{decode_attention, decode_attention_takes, paged_decode_attention};
pub use pack_bytes::{pack_bytes, pack_bytes_takes, PACK_BYTES_MAX_PARTS, PACK_BYTES_MAX_TOTAL};
pub use paged_prefill_attention::{paged_prefill_attention, paged_prefill_attention_takes};
pub use quantized_matvec::{quantized_matvec, QUANTIZED_MATVEC_MAX_ROWS};
pub use rms_norm::{rms_norm, rms_norm_takes, RMS_NORM_MAX_WIDTH};

static ENABLED: AtomicBool = AtomicBool::new(true);

/// Turns the hand-written kernels off (or on again) for graphs lowered from now on: the
/// composed MLX path then runs everywhere (a switch for comparisons and for working around a
/// kernel).
pub fn set_enabled(enabled: bool) {
    ENABLED.store(enabled, Ordering::Relaxed);
}

/// Whether work on `stream` can run these kernels: a GPU stream of a CUDA build of MLX (on
/// macOS the GPU is Metal's).
pub fn available(stream: &Stream) -> bool {
    ENABLED.load(Ordering::Relaxed)
        && !cfg!(target_os = "macos")
        && stream.kind() == DeviceKind::Gpu
}

/// Whether handing work between MLX's CPU stream and the GPU costs a GPU round trip of its
/// own. On MLX's CUDA backend every event of the CPU stream is signalled by a kernel on the GPU
/// that writes unified memory the host is waiting on: 130-330 us each on an H200 (measured
/// with ncu, three a decode step when its prologue ran on the CPU). Small per-run work then
/// belongs on the GPU stream.
pub fn cpu_stream_syncs_through_gpu() -> bool {
    compute_capability().is_some()
}

/// The CUDA compute capability (major, minor) of MLX's GPU device, read once; `None` off
/// MLX's CUDA backend or when MLX does not report it.
pub fn compute_capability() -> Option<(usize, usize)> {
    static CAPABILITY: OnceLock<Option<(usize, usize)>> = OnceLock::new();
    *CAPABILITY.get_or_init(|| {
        if cfg!(target_os = "macos") || !Stream::gpu_available() {
            return None;
        }
        let read = |info: sys::mlx_device_info, key: &str| -> Option<usize> {
            let key = CString::new(key).ok()?;
            let mut value = 0usize;
            // SAFETY: `info` is live; `key` outlives the call; `value` is a valid out-parameter.
            let status = unsafe { sys::mlx_device_info_get_size(&mut value, info, key.as_ptr()) };
            (status == 0).then_some(value)
        };
        // SAFETY: the device and info handles are created and freed here; a failed query
        // leaves the info empty, and its keys are then simply missing.
        unsafe {
            let device = sys::mlx_device_new_type(sys::mlx_device_type::MLX_GPU, 0);
            let mut info = sys::mlx_device_info_new();
            let found = sys::mlx_device_info_get(&mut info, device) == 0;
            let capability = if found {
                read(info, "compute_capability_major").zip(read(info, "compute_capability_minor"))
            } else {
                None
            };
            sys::mlx_device_info_free(info);
            sys::mlx_device_free(device);
            capability
        }
    })
}

/// A compile-time constant of a kernel's source (`constexpr int` / `using T = ...`).
enum TemplateArg {
    Int(i32),
    Type(Dtype),
}

/// One kernel: MLX's handle over its name, argument names and source body.
struct CudaKernel {
    raw: sys::mlx_fast_cuda_kernel,
}

/// How one application of a single-output kernel is laid out: its output, threads and template
/// constants.
struct Launch<'a> {
    output: (&'a [i32], Dtype),
    /// `blocks` blocks of `threads` threads along x.
    blocks: i32,
    threads: i32,
    template: &'a [(&'a str, TemplateArg)],
}

/// `value` as one of a launch's sizes (MLX's grids and shapes are 32-bit), or an error naming
/// `kernel`.
fn size(kernel: &str, value: i64) -> Result<i32> {
    i32::try_from(value)
        .map_err(|_| Error::Shape(format!("{kernel}: {value} exceeds a 32-bit size")))
}

fn c_string(text: &str) -> Result<CString> {
    CString::new(text).map_err(|_| Error::Mlx(format!("a kernel string holds a NUL: {text:?}")))
}

/// An owned `mlx_vector_string` of `names`.
struct Names {
    raw: sys::mlx_vector_string,
}

impl Names {
    fn new(names: &[&str]) -> Result<Names> {
        let owned = names
            .iter()
            .map(|n| c_string(n))
            .collect::<Result<Vec<_>>>()?;
        let mut pointers: Vec<*const c_char> = owned.iter().map(|n| n.as_ptr()).collect();
        // SAFETY: `pointers` point into `owned`, alive for the call; mlx-c copies the strings.
        let raw = unsafe { sys::mlx_vector_string_new_data(pointers.as_mut_ptr(), pointers.len()) };
        Ok(Names { raw })
    }
}

impl Drop for Names {
    fn drop(&mut self) {
        // SAFETY: each Names owns one handle, freed exactly once.
        unsafe { sys::mlx_vector_string_free(self.raw) };
    }
}

impl CudaKernel {
    fn new(name: &str, inputs: &[&str], outputs: &[&str], source: &str) -> Result<CudaKernel> {
        crate::init();
        let (name, source, header) = (c_string(name)?, c_string(source)?, c_string("")?);
        let (inputs, outputs) = (Names::new(inputs)?, Names::new(outputs)?);
        // SAFETY: every pointer is alive for the call; mlx-c copies what it keeps. A failure
        // is reported through the error handler, which `capture` reads.
        let raw = capture(|| unsafe {
            sys::mlx_fast_cuda_kernel_new(
                name.as_ptr(),
                inputs.raw,
                outputs.raw,
                source.as_ptr(),
                header.as_ptr(),
                true,
                0,
            )
        })?;
        if raw.ctx.is_null() {
            return Err(Error::Mlx("MLX could not create a CUDA kernel".into()));
        }
        Ok(CudaKernel { raw })
    }

    fn apply(&self, inputs: &[&Array], launch: &Launch<'_>, stream: &Stream) -> Result<Array> {
        let inputs =
            VectorArray::from_arrays(&inputs.iter().map(|&a| a.clone()).collect::<Vec<_>>())?;
        let config = Config::new()?;
        let (shape, dtype) = launch.output;
        // SAFETY: `shape` outlives the call; the config copies it.
        check(unsafe {
            sys::mlx_fast_cuda_kernel_config_add_output_arg(
                config.raw,
                shape.as_ptr(),
                shape.len(),
                dtype.to_sys(),
            )
        })?;
        // MLX takes the grid as total threads per axis and rounds up to whole blocks.
        let total = launch.blocks.checked_mul(launch.threads).ok_or_else(|| {
            Error::Shape(format!("a launch of {} blocks is too large", launch.blocks))
        })?;
        // SAFETY: plain values into a live config.
        check(unsafe { sys::mlx_fast_cuda_kernel_config_set_grid(config.raw, total, 1, 1) })?;
        // SAFETY: as above.
        check(unsafe {
            sys::mlx_fast_cuda_kernel_config_set_thread_group(config.raw, launch.threads, 1, 1)
        })?;
        for (name, value) in launch.template {
            let name = c_string(name)?;
            // SAFETY: `name` outlives the call; the config copies it.
            check(unsafe {
                match value {
                    TemplateArg::Int(v) => sys::mlx_fast_cuda_kernel_config_add_template_arg_int(
                        config.raw,
                        name.as_ptr(),
                        *v,
                    ),
                    TemplateArg::Type(d) => {
                        sys::mlx_fast_cuda_kernel_config_add_template_arg_dtype(
                            config.raw,
                            name.as_ptr(),
                            d.to_sys(),
                        )
                    }
                }
            })?;
        }
        // SAFETY: an owned empty vector, filled in place and owned by `outputs`.
        let mut raw = unsafe { sys::mlx_vector_array_new() };
        // SAFETY: all handles are live.
        let status = unsafe {
            sys::mlx_fast_cuda_kernel_apply(
                &mut raw,
                self.raw,
                inputs.raw(),
                config.raw,
                stream.raw(),
            )
        };
        let outputs = VectorArray::from_raw(raw);
        check(status)?;
        let mut outputs = outputs.to_vec()?;
        outputs
            .pop()
            .ok_or_else(|| Error::Mlx("a CUDA kernel returned no output".into()))
    }
}

impl Drop for CudaKernel {
    fn drop(&mut self) {
        // SAFETY: each CudaKernel owns one handle, freed exactly once.
        unsafe { sys::mlx_fast_cuda_kernel_free(self.raw) };
    }
}

/// An owned launch configuration.
struct Config {
    raw: sys::mlx_fast_cuda_kernel_config,
}

impl Config {
    fn new() -> Result<Config> {
        // SAFETY: returns an owned config, freed by Drop.
        let raw = unsafe { sys::mlx_fast_cuda_kernel_config_new() };
        Ok(Config { raw })
    }
}

impl Drop for Config {
    fn drop(&mut self) {
        // SAFETY: each Config owns one handle, freed exactly once.
        unsafe { sys::mlx_fast_cuda_kernel_config_free(self.raw) };
    }
}
