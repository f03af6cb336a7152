//! Hand-written GPU kernels, run through MLX's custom-kernel primitives and scheduled like any
//! other primitive, inside compiled closures too: on CUDA compiled by the EP and kept on disk
//! (`cubin/`), on Metal compiled by MLX at first use.
//!
//! One folder per kernel: its CUDA source, its Metal twin where it has one (the same algorithm,
//! line for line, in Metal's dialect), and the Rust wrapper that checks the operands, declares
//! the output, grid and template constants and picks the source for the stream's backend.
//! Element types: float32, float16 and bfloat16 where a wrapper says so.
//!
//! The CPU backend runs none of them, so every caller keeps a composed MLX path and asks the
//! kernel's `*_runs_on` first.

mod cubin;
mod decode_attention;
#[cfg(test)]
mod emulator;
mod launch;
mod layer_norm;
mod made;
mod pack_bytes;
mod paged_prefill_attention;
mod quantized_matvec;
mod rms_norm;
mod skip_norm;
mod store_bytes;

use std::cell::RefCell;
use std::ffi::{c_char, CString};

use crate::error::{Error, Result};
use crate::{sys, Array, DeviceKind, Dtype, Stream};

pub use cubin::{cuda_builds, CudaBuilds};
pub use decode_attention::{
    decode_attention, decode_attention_runs_on, decode_attention_takes, paged_decode_attention,
};
pub use layer_norm::{layer_norm, layer_norm_of_sum, layer_norm_runs_on, layer_norm_takes};
pub use pack_bytes::{
    pack_bytes, pack_bytes_runs_on, pack_bytes_takes, PACK_BYTES_MAX_PARTS, PACK_BYTES_MAX_TOTAL,
};
pub use paged_prefill_attention::{
    dense_attention, dense_attention_takes, paged_prefill_attention,
    paged_prefill_attention_runs_on, paged_prefill_attention_takes,
};
pub use quantized_matvec::{quantized_matvec, quantized_matvec_runs_on, QUANTIZED_MATVEC_MAX_ROWS};
pub use rms_norm::{rms_norm, rms_norm_runs_on, rms_norm_takes, RMS_NORM_MAX_WIDTH};
pub use skip_norm::{norm_of_skip_sum, skip_norm_runs_on, skip_norm_takes, SkipNorm};
pub use store_bytes::{store_bytes, store_bytes_runs_on, store_bytes_takes};

/// The GPU backends MLX builds with, each with its own kernel language.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    Cuda,
    Metal,
}

/// The backend of work on `stream`: a GPU stream is Metal's on macOS and CUDA's elsewhere
/// (MLX has no other GPU backend); `None` on the CPU.
fn backend(stream: &Stream) -> Option<Backend> {
    #[cfg(test)]
    if let Some(dialect) = emulator::dialect() {
        return Some(dialect);
    }
    if stream.kind() != DeviceKind::Gpu {
        return None;
    }
    Some(if cfg!(target_os = "macos") {
        Backend::Metal
    } else {
        Backend::Cuda
    })
}

/// Whether a kernel with sources for `backends` runs on `stream`: its backend is one of them
/// and the stream's [`KernelChoice`](crate::KernelChoice) allows it (Metal's twins by their own
/// switch too).
fn runs_on(stream: &Stream, backends: &[Backend]) -> bool {
    let choice = stream.kernels();
    let allowed = |b: Backend| b != Backend::Metal || choice.metal_twins;
    choice.hand_written && backend(stream).is_some_and(|b| backends.contains(&b) && allowed(b))
}

/// A compile-time constant of a kernel's source (`constexpr int` / `using T = ...` on CUDA,
/// a template parameter on Metal).
enum TemplateArg {
    Int(i32),
    Type(Dtype),
}

/// A float32 constant of the call (a scale, an epsilon) as two template integers: its bits with
/// the sign cleared (`magnitude`) and its sign (`negative`, 0 or 1), which a source reads back as
/// `(N ? -1.f : 1.f) * __int_as_float(M)` (CUDA) or `as_type<float>(M)` (Metal). Two, because
/// MLX names a compiled kernel after its template integers and a negative one ("-") would not
/// make a name. A constant, not an operand: MLX's CUDA allocator keeps arrays of 8 bytes or
/// fewer in one pool of unified memory that host-written scalars share, and a custom kernel
/// reading one there waited ~25 µs on the H200 (`docs/DESIGN.md`, the CUDA kernels). One
/// compiled kernel per distinct value.
fn float_constant(
    magnitude: &'static str,
    negative: &'static str,
    value: f32,
) -> [(&'static str, TemplateArg); 2] {
    let bits = value.to_bits();
    [
        (magnitude, TemplateArg::Int((bits & 0x7fff_ffff) as i32)),
        (negative, TemplateArg::Int((bits >> 31) as i32)),
    ]
}

/// How one application of a kernel is laid out: its outputs, threads and template constants.
struct Launch<'a> {
    /// Each output's shape and type, in the order of the kernel's output names.
    outputs: &'a [(&'a [i32], Dtype)],
    /// `blocks` blocks (threadgroups) of `threads` threads along x.
    blocks: i32,
    threads: i32,
    template: &'a [(&'a str, TemplateArg)],
}

impl Launch<'_> {
    /// The grid as MLX takes it: total threads along x (rounded up to whole blocks by MLX).
    fn total_threads(&self, kernel: &str) -> Result<i32> {
        self.blocks.checked_mul(self.threads).ok_or_else(|| {
            Error::Shape(format!(
                "{kernel}: a launch of {} blocks is too large",
                self.blocks
            ))
        })
    }

    /// `outputs`, once there are as many as the launch declares (`by` names who made them).
    fn declared(&self, outputs: Vec<Array>, by: &str) -> Result<Vec<Array>> {
        if outputs.len() != self.outputs.len() {
            return Err(Error::Mlx(format!(
                "{by} returned {} outputs for {}",
                outputs.len(),
                self.outputs.len()
            )));
        }
        Ok(outputs)
    }
}

/// Whether a body reads the shape of `array` under input `name`: as MLX decides it, by the
/// name `{name}_shape` in the body, for arrays of at least one dimension.
fn reads_shape(body: &str, name: &str, array: &Array) -> bool {
    array.ndim() > 0 && body.contains(&format!("{name}_shape"))
}

/// The rows and the width of `x` seen as rows of its last axis (no rows when that axis is 0).
fn rows_of(x: &Array) -> (i64, i64) {
    let width = x.shape().last().copied().unwrap_or(0);
    let rows = if width > 0 {
        x.size() as i64 / width
    } else {
        0
    };
    (rows, width)
}

/// Applies a row-wise kernel (a norm): one block of `threads` threads per row of the last axis
/// of `operands[0]` (`x`), its first output of x's shape in `output` and then `more` outputs,
/// and the template constants `TI` (x's type), `TO`, `H` (the width) and `THREADS`, then
/// `extra`. Its CUDA body starts with `per_row.cu` (the row in registers, a block-wide sum).
/// Returns the first output and the others.
fn apply_per_row(
    kernel: &Kernel<'_>,
    operands: &[&Array],
    output: Dtype,
    more: &[(&[i32], Dtype)],
    threads: i32,
    extra: impl IntoIterator<Item = (&'static str, TemplateArg)>,
    stream: &Stream,
) -> Result<(Array, Vec<Array>)> {
    let x = operands[0];
    let (rows, width) = rows_of(x);
    let size = |v: i64| self::size(kernel.name, v);
    let mut template = vec![
        ("TI", TemplateArg::Type(x.dtype())),
        ("TO", TemplateArg::Type(output)),
        ("H", TemplateArg::Int(size(width)?)),
        ("THREADS", TemplateArg::Int(threads)),
    ];
    template.extend(extra);
    let out_shape = sizes(kernel.name, &x.shape())?;
    let mut outputs = vec![(out_shape.as_slice(), output)];
    outputs.extend_from_slice(more);
    let mut made = kernel.apply(
        operands,
        &Launch {
            outputs: &outputs,
            blocks: size(rows)?,
            threads,
            template: &template,
        },
        stream,
    )?;
    let out = made.remove(0);
    Ok((out, made))
}

thread_local! {
    static CUDA: made::Made<launch::CudaKernel> = RefCell::default();
    static METAL: made::Made<launch::MetalKernel> = RefCell::default();
}

/// The output names of a kernel with one output.
const OUT: &[&str] = &["out"];

/// A kernel's name, argument names and body, one body per backend it has.
struct Kernel<'a> {
    name: &'a str,
    inputs: &'a [&'a str],
    outputs: &'a [&'a str],
    cuda: &'a str,
    /// The Metal twin, where there is one.
    metal: Option<&'a str>,
}

impl Kernel<'_> {
    /// Runs the body for `stream`'s backend on `inputs` (one array per input name) and returns
    /// its outputs, one per output name.
    fn apply(&self, inputs: &[&Array], launch: &Launch<'_>, stream: &Stream) -> Result<Vec<Array>> {
        if inputs.len() != self.inputs.len() || launch.outputs.len() != self.outputs.len() {
            return Err(Error::Shape(format!(
                "{}: {} inputs and {} outputs for {} and {} names",
                self.name,
                inputs.len(),
                launch.outputs.len(),
                self.inputs.len(),
                self.outputs.len()
            )));
        }
        #[cfg(test)]
        if emulator::dialect().is_some() {
            return emulator::run(self, inputs, launch);
        }
        match (backend(stream), self.metal) {
            (Some(Backend::Cuda), _) => {
                if let Some(outputs) = cubin::apply(self, inputs, launch, stream)? {
                    return Ok(outputs);
                }
                let make =
                    || launch::CudaKernel::new(self.name, self.inputs, self.outputs, self.cuda);
                made::made(&CUDA, self.names(), self.cuda, make)?.apply(inputs, launch, stream)
            }
            (Some(Backend::Metal), Some(metal)) => {
                let make = || launch::MetalKernel::new(self.name, self.inputs, self.outputs, metal);
                made::made(&METAL, self.names(), metal, make)?.apply(inputs, launch, stream)
            }
            (found, _) => Err(Error::Mlx(format!(
                "{}: this hand-written kernel runs on {}, not on this stream ({found:?} GPU backend)",
                self.name,
                if self.metal.is_some() {
                    "MLX's CUDA or Metal GPU"
                } else {
                    "MLX's CUDA GPU"
                }
            ))),
        }
    }

    /// What the kernel's made objects are known by, besides the body.
    fn names(&self) -> (&str, &[&str], &[&str]) {
        (self.name, self.inputs, self.outputs)
    }

    /// [`Kernel::apply`] for a kernel with one output.
    fn apply_one(&self, inputs: &[&Array], launch: &Launch<'_>, stream: &Stream) -> Result<Array> {
        let mut outputs = self.apply(inputs, launch, stream)?;
        match (outputs.pop(), outputs.is_empty()) {
            (Some(output), true) => Ok(output),
            _ => Err(Error::Mlx(format!("{}: not one output", self.name))),
        }
    }
}

/// `value` as one of a launch's sizes (MLX's grids and shapes are 32-bit), or an error naming
/// `kernel`.
fn size(kernel: &str, value: i64) -> Result<i32> {
    i32::try_from(value)
        .map_err(|_| Error::Shape(format!("{kernel}: {value} exceeds a 32-bit size")))
}

/// `dims` as a launch's shape (each one of its sizes, see [`size`]).
fn sizes(kernel: &str, dims: &[i64]) -> Result<Vec<i32>> {
    dims.iter().map(|&d| size(kernel, d)).collect()
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

/// Checks that a Metal twin keeps its CUDA source's algorithm where a test can see it: the same
/// template constants and macros, the same block-shared arrays, and identical lines after a
/// `// COMMON` marker where the sources have one. Line-for-line review does the rest.
#[cfg(test)]
fn assert_twins(cuda: &str, metal: &str) {
    use std::collections::BTreeSet;
    let constants = |source: &str| -> BTreeSet<String> {
        source
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| {
                !w.is_empty()
                    && w.chars().next().is_some_and(|c| c.is_ascii_uppercase())
                    && w.chars()
                        .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            })
            .map(String::from)
            .collect()
    };
    let shared = |source: &str, keyword: &str| -> Vec<String> {
        source
            .lines()
            .filter_map(|line| line.trim().strip_prefix(keyword))
            .filter_map(|rest| rest.split('[').next())
            .filter_map(|decl| decl.split_whitespace().last().map(String::from))
            .collect()
    };
    // Comments may name backend words; the code may not differ in its constants.
    let code = |source: &str| -> String {
        source
            .lines()
            .map(|line| line.split("//").next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(constants(&code(cuda)), constants(&code(metal)));
    assert_eq!(shared(cuda, "__shared__ "), shared(metal, "threadgroup "));
    let common = |source: &str| {
        source
            .split_once("// COMMON")
            .map(|(_, rest)| rest.to_owned())
    };
    if let Some(cuda_common) = common(cuda) {
        let metal_common = common(metal).expect("both twins mark their common lines");
        let after_marker = |rest: &str| rest.split_once('\n').map(|(_, r)| r.to_owned());
        assert_eq!(after_marker(&cuda_common), after_marker(&metal_common));
    }
}
