//! An evaluated result stored into memory MLX did not allocate for it, as a step of the same
//! evaluation: how an output bound in the EP's memory is written on the GPU.
//!
//! Copying a result into a bound output after MLX's evaluation costs a driver copy and a second
//! synchronisation per run (~20 µs on an H200, a tenth of a small model's run). Evaluated with
//! the run instead, the store is one more kernel in MLX's stream, and the run ends with MLX's one
//! synchronisation.
//!
//! The host emulator checks the body (`emulated_tests.rs`); on the GPU,
//! `tests/ep/test_bound_memory.py` checks that every bound output was stored, and equal.

use super::{Backend, Kernel, Launch};
use crate::error::{Error, Result};
use crate::{Array, Dtype, Stream};

/// Whether this kernel runs on `stream`: MLX's CUDA backend (it has no Metal twin).
pub fn store_bytes_runs_on(stream: &Stream) -> bool {
    super::runs_on(stream, &[Backend::Cuda])
}

/// Bytes one thread stores: store_bytes.cu's unit, one 16-byte word when aligned.
const UNIT: usize = 16;
const THREADS: i32 = 256;

/// Whether [`store_bytes`] takes `bytes` bytes: at least one, and a 32-bit length.
pub fn store_bytes_takes(bytes: usize) -> bool {
    bytes > 0 && i32::try_from(bytes).is_ok()
}

/// An array whose evaluation writes the bytes of `src` (row-major; MLX makes it contiguous
/// first when it is not) into the memory of `dst`, a 1-D uint8 array of exactly as many bytes
/// over memory that outlives the evaluation. The returned one-byte array carries nothing: it
/// is what to evaluate (with the rest of the run) for the store to happen. MLX does not know
/// that `dst` changes: nothing evaluated with the store may read `dst`.
pub fn store_bytes(src: &Array, dst: &Array, stream: &Stream) -> Result<Array> {
    let bytes = src.nbytes();
    if dst.dtype() != Dtype::U8 || dst.shape() != [bytes as i64] || !store_bytes_takes(bytes) {
        return Err(Error::Shape(format!(
            "store_bytes: {bytes} bytes into a {:?} array of shape {:?} (a 1-D uint8 array of \
             as many bytes, 1 to 2^31 - 1)",
            dst.dtype(),
            dst.shape()
        )));
    }
    let units = bytes.div_ceil(UNIT);
    let size = |v: usize| super::size("store_bytes", v as i64);
    Kernel {
        name: "store_bytes",
        inputs: &["src", "dst"],
        outputs: super::OUT,
        cuda: include_str!("store_bytes.cu"),
        metal: None,
    }
    .apply_one(
        &[src, dst],
        &Launch {
            outputs: &[(&[1], Dtype::U8)],
            blocks: size(units.div_ceil(THREADS as usize))?,
            threads: THREADS,
            template: &[],
        },
        stream,
    )
}

#[cfg(test)]
mod emulated_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_uint8_destination_of_as_many_bytes_is_taken() {
        let cpu = Stream::cpu().unwrap();
        let src = Array::from_slice(&[1.0f32, 2.0], &[2]).unwrap();
        let wrong = [
            Array::from_slice(&[0u8; 4], &[4]).unwrap(),
            Array::from_slice(&[0i8; 8], &[8]).unwrap(),
            Array::from_slice(&[0u8; 8], &[2, 4]).unwrap(),
        ];
        for dst in &wrong {
            let refused = store_bytes(&src, dst, &cpu).unwrap_err().to_string();
            assert!(refused.contains("store_bytes: 8 bytes"), "{refused}");
        }
        assert!(!store_bytes_takes(0) && store_bytes_takes(1) && !store_bytes_takes(1 << 31));
    }

    #[test]
    fn the_cpu_backend_runs_no_store() {
        assert!(!store_bytes_runs_on(&Stream::cpu().unwrap()));
    }
}
