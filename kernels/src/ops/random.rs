//! MLX's counter-based random numbers: every draw takes an explicit key, so the same key gives
//! the same numbers on every backend.

use crate::dtype::Dtype;
use crate::shape::to_mlx_shape;
use crate::{sys, Array, Result, Stream};

/// The key of `seed`.
pub fn random_key(seed: u64) -> Result<Array> {
    // SAFETY: a plain value; mlx-c writes the key into `out`.
    Array::from_op(|out| unsafe { sys::mlx_random_key(out, seed) })
}

/// Normal draws of `shape` with mean `loc` and standard deviation `scale`.
pub fn random_normal(
    shape: &[i64],
    dtype: Dtype,
    loc: f32,
    scale: f32,
    key: &Array,
    stream: &Stream,
) -> Result<Array> {
    let shape = to_mlx_shape(shape)?;
    Array::from_op(|out| {
        // SAFETY: `shape` outlives the call; all handles are live.
        unsafe {
            sys::mlx_random_normal(
                out,
                shape.as_ptr(),
                shape.len(),
                dtype.to_sys(),
                loc,
                scale,
                key.raw(),
                stream.raw(),
            )
        }
    })
}

/// Uniform draws of `shape` in `[low, high)`.
pub fn random_uniform(
    low: &Array,
    high: &Array,
    shape: &[i64],
    dtype: Dtype,
    key: &Array,
    stream: &Stream,
) -> Result<Array> {
    let shape = to_mlx_shape(shape)?;
    Array::from_op(|out| {
        // SAFETY: `shape` outlives the call; all handles are live.
        unsafe {
            sys::mlx_random_uniform(
                out,
                low.raw(),
                high.raw(),
                shape.as_ptr(),
                shape.len(),
                dtype.to_sys(),
                key.raw(),
                stream.raw(),
            )
        }
    })
}

/// `num_samples` class indices per row of `logits` (unnormalised log-probabilities) along
/// `axis`, drawn independently.
pub fn random_categorical(
    logits: &Array,
    axis: i32,
    num_samples: i32,
    key: &Array,
    stream: &Stream,
) -> Result<Array> {
    Array::from_op(|out| {
        // SAFETY: all handles are live; MLX validates the axis.
        unsafe {
            sys::mlx_random_categorical_num_samples(
                out,
                logits.raw(),
                axis,
                num_samples,
                key.raw(),
                stream.raw(),
            )
        }
    })
}
