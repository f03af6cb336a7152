//! The CUDA kernels' own route: each body is wrapped into a whole source
//! ([`source::whole`]), compiled by NVRTC to a cubin for the process's GPU, kept on disk
//! ([`cache`]) and run through MLX's precompiled-kernel primitive, scheduled like any other.
//!
//! Why not MLX's `fast::cuda_kernel`, which compiles a body itself: it does so in every process
//! (MLX 0.32 keeps its fused kernels on disk, not custom ones) and with MLX's whole device
//! header, 2-3 s a kernel variant on an H200, paid again by each new process before its first
//! run. A whole source with CUDA's half-type headers alone compiles in a tenth of a second, and
//! a later process reads the cubin back. Where this route has no binary (no NVRTC or headers
//! found, or a compile error), the kernel goes through MLX's primitive as before, and
//! [`cuda_builds`] says why.

mod cache;
mod nvrtc;
mod source;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use super::{Kernel, Launch};
use crate::error::{check, Result};
use crate::{sys, Array, VectorArray};

/// How this process's hand-written CUDA kernels were had, counted per distinct kernel variant.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CudaBuilds {
    /// Compiled by NVRTC in this process, and the seconds that took.
    pub built: u64,
    pub build_seconds: f64,
    /// Read from the disk cache, built by an earlier process.
    pub from_disk: u64,
    /// Left to MLX's own custom-kernel primitive (compiled there, every process), and why the
    /// first of them was.
    pub through_mlx: u64,
    pub through_mlx_because: Option<String>,
}

static BUILT: AtomicU64 = AtomicU64::new(0);
static BUILD_NANOS: AtomicU64 = AtomicU64::new(0);
static FROM_DISK: AtomicU64 = AtomicU64::new(0);
static THROUGH_MLX: AtomicU64 = AtomicU64::new(0);
static THROUGH_MLX_BECAUSE: Mutex<Option<String>> = Mutex::new(None);

/// This process's counts so far.
pub fn cuda_builds() -> CudaBuilds {
    CudaBuilds {
        built: BUILT.load(Ordering::Relaxed),
        build_seconds: BUILD_NANOS.load(Ordering::Relaxed) as f64 * 1e-9,
        from_disk: FROM_DISK.load(Ordering::Relaxed),
        through_mlx: THROUGH_MLX.load(Ordering::Relaxed),
        through_mlx_because: THROUGH_MLX_BECAUSE.lock().ok().and_then(|why| why.clone()),
    }
}

/// Applies `kernel`'s CUDA body through its cubin; `None` when it has none (the caller then
/// uses MLX's primitive).
pub(super) fn apply(
    kernel: &Kernel<'_>,
    inputs: &[&Array],
    launch: &Launch<'_>,
    stream: &crate::Stream,
) -> Result<Option<Vec<Array>>> {
    let whole = source::whole(kernel, inputs, launch)?;
    let (binary, origin) = binary(nvrtc::nvrtc(), kernel.name, &whole.text);
    match (&binary, origin) {
        (_, cache::Origin::Process) => {}
        (Ok(_), cache::Origin::Built) => _ = BUILT.fetch_add(1, Ordering::Relaxed),
        (Ok(_), cache::Origin::Disk) => _ = FROM_DISK.fetch_add(1, Ordering::Relaxed),
        (Err(why), _) => {
            THROUGH_MLX.fetch_add(1, Ordering::Relaxed);
            if let Ok(mut first) = THROUGH_MLX_BECAUSE.lock() {
                first.get_or_insert_with(|| format!("{}: {why}", kernel.name));
            }
        }
    }
    match binary {
        Ok(binary) => {
            launch_binary(kernel, &binary, inputs, launch, &whole.scalars, stream).map(Some)
        }
        Err(_) => Ok(None),
    }
}

/// The cubin of kernel `name`'s whole source `text` by `compiler` (or why there is none), and
/// where it came from. Without a compiler, a variant fails once like a source that does not
/// compile, so that each is counted once.
fn binary(
    compiler: std::result::Result<&nvrtc::Nvrtc, &str>,
    name: &str,
    text: &str,
) -> (cache::Kept, cache::Origin) {
    let identity = format!(
        "// {}\n{text}",
        compiler.map_or("no NVRTC", |c| c.identity.as_str())
    );
    cache::binary(name, &identity, || {
        let compiler = compiler?;
        let started = Instant::now();
        let built = compiler.compile(text, name);
        BUILD_NANOS.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        built
    })
}

/// Compiles the whole source of an emulated CUDA launch with the tests' NVRTC, when there is one
/// ([`nvrtc::for_tests`]): what only a GPU compiler checks (CUDA's type rules, registers,
/// shared memory) then fails a test on any machine. Sources already compiled, in this process
/// or an earlier one (the disk cache), are not compiled again.
#[cfg(test)]
pub(super) fn check_compiles(
    kernel: &Kernel<'_>,
    inputs: &[&Array],
    launch: &Launch<'_>,
) -> Result<()> {
    let Some(compiler) = nvrtc::for_tests() else {
        return Ok(());
    };
    let whole = source::whole(kernel, inputs, launch)?;
    binary(Ok(compiler), kernel.name, &whole.text)
        .0
        .map_err(|log| {
            crate::error::Error::Mlx(format!(
                "{}: NVRTC rejects its CUDA source:\n{log}",
                kernel.name
            ))
        })?;
    COMPILE_CHECKED.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// Emulated CUDA launches whose whole source NVRTC compiled (or had compiled).
#[cfg(test)]
pub(super) static COMPILE_CHECKED: AtomicU64 = AtomicU64::new(0);

fn launch_binary(
    kernel: &Kernel<'_>,
    binary: &[u8],
    inputs: &[&Array],
    launch: &Launch<'_>,
    scalars: &[i32],
    stream: &crate::Stream,
) -> Result<Vec<Array>> {
    let name = super::c_string(kernel.name)?;
    let inputs = VectorArray::from_arrays(&inputs.iter().map(|&a| a.clone()).collect::<Vec<_>>())?;
    let shapes: Vec<i32> = launch
        .outputs
        .iter()
        .flat_map(|(shape, _)| shape.iter().copied())
        .collect();
    let ndims: Vec<i32> = launch
        .outputs
        .iter()
        .map(|(shape, _)| shape.len() as i32)
        .collect();
    let dtypes: Vec<_> = launch
        .outputs
        .iter()
        .map(|(_, dtype)| dtype.to_sys())
        .collect();
    let total = launch.total_threads(kernel.name)?;
    // SAFETY: an owned empty vector, filled in place and owned by `outputs`.
    let mut raw = unsafe { sys::mlx_vector_array_new() };
    // SAFETY: every pointer and handle is alive for the call, and each array holds as many
    // elements as the count passed with it; MLX copies what it keeps. A failure is reported
    // through the error handler, which `check` reads.
    let status = unsafe {
        sys::mlx_ep_precompiled_cuda_kernel_apply(
            &mut raw,
            name.as_ptr(),
            binary.as_ptr().cast(),
            binary.len(),
            inputs.raw(),
            shapes.as_ptr(),
            ndims.as_ptr(),
            dtypes.as_ptr(),
            dtypes.len(),
            scalars.as_ptr(),
            scalars.len(),
            total,
            launch.threads,
            stream.raw(),
        )
    };
    let outputs = VectorArray::from_raw(raw);
    check(status)?;
    launch.declared(outputs.to_vec()?, kernel.name)
}

#[cfg(test)]
mod tests;
