//! RMS normalisation over the last axis in float32, rounded once to the output type.
//!
//! An LLM's norms take float16 activations (or their float32 residual sum) and give float16.
//! Rounding once after the weight, as ORT does, means MLX's fused kernel runs on float32 with
//! a cast before (for float16 input) and after: three launches where one kernel reads the input
//! type and writes the output type.

use super::{Backend, Kernel};
use crate::error::{Error, Result};
use crate::{Array, Dtype, Stream};

/// Whether this kernel runs on `stream`: MLX's CUDA backend, or Metal through its twin once
/// the stream's `KernelChoice::metal_twins` is on.
pub fn rms_norm_runs_on(stream: &Stream) -> bool {
    super::runs_on(stream, &[Backend::Cuda, Backend::Metal])
}

/// The widest row one launch takes (each thread keeps its share in registers).
pub const RMS_NORM_MAX_WIDTH: i64 = 8192;
const THREADS: i32 = 256;

/// Whether [`rms_norm`] takes rows of `width` elements from `input` to `output` types (each
/// float16 or float32).
pub fn rms_norm_takes(width: i64, input: Dtype, output: Dtype) -> bool {
    (1..=RMS_NORM_MAX_WIDTH).contains(&width)
        && matches!(input, Dtype::F16 | Dtype::F32)
        && matches!(output, Dtype::F16 | Dtype::F32)
}

/// `x / sqrt(mean(x²) + epsilon) · weight` over the last axis of `x` (float16 or float32, at
/// least one row), computed in float32 (`weight` float32, the last axis's length) and rounded
/// once to `output`.
pub fn rms_norm(
    x: &Array,
    weight: &Array,
    epsilon: f32,
    output: Dtype,
    stream: &Stream,
) -> Result<Array> {
    let (rows, width) = super::rows_of(x);
    let fits = rows > 0
        && rms_norm_takes(width, x.dtype(), output)
        && weight.dtype() == Dtype::F32
        && weight.shape() == [width];
    if !fits {
        return Err(Error::Shape(format!(
            "rms_norm: operands do not fit (x {:?} {:?}, weight {:?} {:?}, output {output:?})",
            x.shape(),
            x.dtype(),
            weight.shape(),
            weight.dtype()
        )));
    }
    let kernel = Kernel {
        name: "rms_norm_rounded",
        inputs: &["x", "weight"],
        outputs: super::OUT,
        cuda: concat!(
            include_str!("../row_of_x.cu"),
            include_str!("../per_row.cu"),
            include_str!("rms_norm.cu")
        ),
        metal: Some(concat!(
            include_str!("../row_of_x.metal"),
            include_str!("../per_row.metal"),
            include_str!("rms_norm.metal")
        )),
    };
    let epsilon = super::float_constant("EPSILON_MAGNITUDE", "EPSILON_NEGATIVE", epsilon);
    super::apply_per_row(&kernel, &[x, weight], output, &[], THREADS, epsilon, stream)
        .map(|(out, _)| out)
}

#[cfg(test)]
mod emulated_tests;
