//! Many small arrays' bytes in one array: what the host reads of a run, read once.
//!
//! Every host read of a device array is a round trip to the GPU, so a run's checks, written-row
//! masks and new KV rows are read as one array. MLX's `concatenate` makes that with a copy
//! kernel per part (a bool part needs a cast first): ~40 launches in a decoder's step, each
//! costing the host more than the bytes cost the GPU. This kernel copies every part in one
//! launch.

use super::{Backend, Kernel, Launch, TemplateArg};
use crate::error::{Error, Result};
use crate::{Array, Dtype, Stream};

/// Whether this kernel runs on `stream`: MLX's CUDA backend (it has no Metal twin).
pub fn pack_bytes_runs_on(stream: &Stream) -> bool {
    super::runs_on(stream, &[Backend::Cuda])
}

/// The most parts one launch takes (one kernel parameter each).
pub const PACK_BYTES_MAX_PARTS: usize = 256;
/// The most bytes one launch takes: past this, MLX's copies are as cheap per byte and the
/// launches no longer matter.
pub const PACK_BYTES_MAX_TOTAL: usize = 1 << 20;
const THREADS: i32 = 256;

/// Whether [`pack_bytes`] takes `parts` parts of `total` bytes in all.
pub fn pack_bytes_takes(parts: usize, total: usize) -> bool {
    (1..=PACK_BYTES_MAX_PARTS).contains(&parts) && (1..=PACK_BYTES_MAX_TOTAL).contains(&total)
}

/// The bytes of each of `parts` (row-major, any element type), one part after another, as a
/// 1-D uint8 array. Empty parts contribute nothing; at least one byte in all.
pub fn pack_bytes(parts: &[Array], stream: &Stream) -> Result<Array> {
    let parts: Vec<&Array> = parts.iter().filter(|a| a.nbytes() > 0).collect();
    let total: usize = parts.iter().map(|a| a.nbytes()).sum();
    if !pack_bytes_takes(parts.len(), total) {
        return Err(Error::Shape(format!(
            "pack_bytes: {} non-empty parts of {total} bytes in all (at most {PACK_BYTES_MAX_PARTS} parts and {PACK_BYTES_MAX_TOTAL} bytes, at least one)",
            parts.len()
        )));
    }
    let mut offsets = Vec::with_capacity(parts.len() + 1);
    offsets.push(0u32);
    for part in &parts {
        // Below PACK_BYTES_MAX_TOTAL, so within u32.
        offsets.push(offsets[offsets.len() - 1] + part.nbytes() as u32);
    }
    let offsets = Array::from_slice(&offsets, &[offsets.len() as i64])?;
    let names: Vec<String> = (0..parts.len())
        .map(|p| format!("part{p}"))
        .chain(["offsets".to_string()])
        .collect();
    let cases: String = (0..parts.len())
        .map(|p| {
            format!("case {p}: from = reinterpret_cast<const unsigned char*>(part{p}); break;\n")
        })
        .collect();
    let source = include_str!("pack_bytes.cu").replace(
        "// PARTS: one case per part, generated (see pack_bytes.rs)\n",
        &cases,
    );
    // The source differs with the number of parts: so does the name MLX caches it under.
    let name = format!("pack_bytes_{}", parts.len());
    let names = names.iter().map(String::as_str).collect::<Vec<_>>();
    let kernel = Kernel {
        name: &name,
        inputs: &names,
        outputs: super::OUT,
        cuda: &source,
        metal: None,
    };
    let mut inputs = parts;
    inputs.push(&offsets);
    let size = |v: usize| super::size("pack_bytes", v as i64);
    kernel.apply_one(
        &inputs,
        &Launch {
            outputs: &[(&[size(total)?], Dtype::U8)],
            blocks: size(total.div_ceil(THREADS as usize))?,
            threads: THREADS,
            template: &[("N", TemplateArg::Int(size(inputs.len() - 1)?))],
        },
        stream,
    )
}

#[cfg(test)]
mod emulated_tests;
