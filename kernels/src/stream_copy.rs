//! Results copied to their destinations (ORT's output tensors: host memory, or memory of ours a
//! user bound) on MLX's own CUDA stream, behind the kernels of the evaluation that computes
//! them, with one wait for all of it (`shim/device_copy.cpp`, `mlx_ep_eval_then_copy`).
//!
//! Why not the other two ways: a copy after MLX's evaluation is a second round trip to the GPU,
//! and a store kernel evaluated with the run ([`crate::custom::store_bytes`]) is one more MLX
//! primitive, whose host work is what any second primitive costs MLX's CUDA backend (12.7 us a
//! run on an H100, measured in direct MLX). A copy queued on the stream costs one driver call.
//!
//! MLX has no public way to its stream: the shim reads it where MLX 0.32.4 keeps it, so this
//! route is MLX 0.32.4's CUDA backend only ([`available`]); elsewhere the callers keep theirs.

use crate::error::{check, Error, Result};
use crate::{sys, Array, DeviceKind, Stream, VectorArray};

/// Where a copy goes: bytes that outlive the evaluation that writes them.
#[derive(Debug)]
pub struct Destination {
    start: *mut u8,
    len: usize,
}

impl Destination {
    /// The destination `bytes`.
    ///
    /// # Safety
    /// `bytes` stay valid, and are neither read nor written by anyone else, until the
    /// [`eval_then_copy`] given this destination has returned.
    pub unsafe fn new(bytes: &mut [u8]) -> Destination {
        Destination {
            start: bytes.as_mut_ptr(),
            len: bytes.len(),
        }
    }
}

/// Whether [`eval_then_copy`] copies on `stream` in this process: MLX 0.32.4's CUDA backend,
/// with the CUDA driver's copy functions, and the stream's hand-written GPU work on
/// ([`KernelChoice`](crate::KernelChoice): off, a run takes MLX's plain path, for comparisons).
pub fn available(stream: &Stream) -> bool {
    stream.kernels().hand_written
        && stream.kind() == DeviceKind::Gpu
        // SAFETY: `stream` is a live handle; the shim catches every exception.
        && unsafe { sys::mlx_ep_copies_on_stream(stream.raw()) }
}

/// Evaluates `arrays`, then copies each `(src, dst)`: the bytes of `src` (evaluated with
/// `arrays`, as many bytes as `dst` holds) to `dst`. Returns, for each copy, whether it was
/// made: one that was not (a source computed on another stream, or of another size) is the
/// caller's to make after. A strided source is made row-major first, on the same stream.
/// `None` when this route is not [`available`]: nothing was evaluated. MLX does not know that a
/// destination changes: nothing in `arrays` may read one.
pub fn eval_then_copy(
    arrays: &[Array],
    copies: &[(&Array, &Destination)],
    stream: &Stream,
) -> Result<Option<Vec<bool>>> {
    let vector = VectorArray::from_arrays(arrays)?;
    let srcs: Vec<sys::mlx_array> = copies.iter().map(|(src, _)| src.raw()).collect();
    let dsts: Vec<*mut std::ffi::c_void> = copies.iter().map(|(_, dst)| dst.start.cast()).collect();
    let sizes: Vec<usize> = copies.iter().map(|(_, dst)| dst.len).collect();
    let mut copied = vec![0i32; copies.len()];
    // SAFETY: every handle is live for the call; the four arrays hold `copies.len()` elements
    // each; each destination is valid for its length until the call returns (its constructor's
    // contract); the shim catches every exception.
    let status = unsafe {
        sys::mlx_ep_eval_then_copy(
            vector.raw(),
            srcs.as_ptr(),
            dsts.as_ptr(),
            sizes.as_ptr(),
            copies.len(),
            stream.raw(),
            copied.as_mut_ptr(),
        )
    };
    match status {
        0 => Ok(Some(copied.iter().map(|&c| c == 1).collect())),
        1 => Ok(None),
        2 => check(status).map(|()| None),
        cuda => Err(Error::Mlx(format!(
            "the copy of a result on MLX's CUDA stream failed (CUDA error {})",
            cuda - 3
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_backend_has_no_stream_to_copy_on() {
        let cpu = Stream::cpu().unwrap();
        assert!(!available(&cpu));
        let a = Array::from_slice(&[1.0f32, 2.0], &[2]).unwrap();
        let mut bytes = [0u8; 8];
        // SAFETY: `bytes` outlives the call below, and nothing else touches them.
        let dst = unsafe { Destination::new(&mut bytes) };
        let done = eval_then_copy(std::slice::from_ref(&a), &[(&a, &dst)], &cpu).unwrap();
        assert!(done.is_none(), "nothing evaluated, nothing copied");
        assert_eq!(bytes, [0; 8]);
    }
}
