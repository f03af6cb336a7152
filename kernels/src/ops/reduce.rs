//! Reductions and softmax-style normalisations along one axis.

use crate::dtype::Dtype;
use crate::{sys, Array, Result, Stream};

/// Softmax along `axis`; `precise` accumulates low-precision inputs in float32.
pub fn softmax(a: &Array, axis: i32, precise: bool, stream: &Stream) -> Result<Array> {
    Array::from_op(|out| {
        // SAFETY: all handles are live; MLX validates the axis.
        unsafe { sys::mlx_softmax_axis(out, a.raw(), axis, precise, stream.raw()) }
    })
}

/// `log(sum(exp(a)))` along `axis`, computed stably.
pub fn logsumexp(a: &Array, axis: i32, keepdims: bool, stream: &Stream) -> Result<Array> {
    Array::from_op(|out| {
        // SAFETY: all handles are live; MLX validates the axis.
        unsafe { sys::mlx_logsumexp_axis(out, a.raw(), axis, keepdims, stream.raw()) }
    })
}

/// Index of the maximum along `axis` (uint32).
pub fn argmax(a: &Array, axis: i32, keepdims: bool, stream: &Stream) -> Result<Array> {
    Array::from_op(|out| {
        // SAFETY: all handles are live; MLX validates the axis.
        unsafe { sys::mlx_argmax_axis(out, a.raw(), axis, keepdims, stream.raw()) }
    })
}

/// `start, start + step, ...` below `stop`.
pub fn arange(start: f64, stop: f64, step: f64, dtype: Dtype, stream: &Stream) -> Result<Array> {
    Array::from_op(|out| {
        // SAFETY: plain values and a live stream.
        unsafe { sys::mlx_arange(out, start, stop, step, dtype.to_sys(), stream.raw()) }
    })
}
