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

/// `fn name(a, axes, keepdims, stream)` for each `mlx_*_axes` reduction.
macro_rules! axis_reductions {
    ($($(#[$doc:meta])* $name:ident => $ffi:ident),* $(,)?) => {$(
        $(#[$doc])*
        pub fn $name(a: &Array, axes: &[i32], keepdims: bool, stream: &Stream) -> Result<Array> {
            Array::from_op(|out| {
                // SAFETY: `axes` outlives the call; MLX validates them.
                unsafe { sys::$ffi(out, a.raw(), axes.as_ptr(), axes.len(), keepdims, stream.raw()) }
            })
        }
    )*};
}

axis_reductions! {
    /// Mean over `axes`.
    mean => mlx_mean_axes,
    /// Maximum over `axes`.
    max => mlx_max_axes,
    /// Minimum over `axes`.
    min => mlx_min_axes,
    /// Product over `axes`.
    prod => mlx_prod_axes,
    /// `log(sum(exp(a)))` over `axes`, computed stably.
    logsumexp_axes => mlx_logsumexp_axes,
}

/// Index of the minimum along `axis` (uint32).
pub fn argmin(a: &Array, axis: i32, keepdims: bool, stream: &Stream) -> Result<Array> {
    Array::from_op(|out| {
        // SAFETY: all handles are live; MLX validates the axis.
        unsafe { sys::mlx_argmin_axis(out, a.raw(), axis, keepdims, stream.raw()) }
    })
}

/// Running sum along `axis`; `inclusive = false` shifts it by one (exclusive scan).
pub fn cumsum(
    a: &Array,
    axis: i32,
    reverse: bool,
    inclusive: bool,
    stream: &Stream,
) -> Result<Array> {
    let same = sys::mlx_optional_dtype {
        value: a.dtype().to_sys(),
        has_value: false,
    };
    Array::from_op(|out| {
        // SAFETY: all handles are live; MLX validates the axis.
        unsafe { sys::mlx_cumsum_axis(out, a.raw(), axis, reverse, inclusive, same, stream.raw()) }
    })
}

/// Running product along `axis`; `inclusive = false` shifts it by one (exclusive scan).
pub fn cumprod(
    a: &Array,
    axis: i32,
    reverse: bool,
    inclusive: bool,
    stream: &Stream,
) -> Result<Array> {
    let same = sys::mlx_optional_dtype {
        value: a.dtype().to_sys(),
        has_value: false,
    };
    Array::from_op(|out| {
        // SAFETY: all handles are live; MLX validates the axis.
        unsafe { sys::mlx_cumprod_axis(out, a.raw(), axis, reverse, inclusive, same, stream.raw()) }
    })
}
