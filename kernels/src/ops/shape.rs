//! Layout, type conversion and shape manipulation.

use crate::dtype::Dtype;
use crate::shape::to_mlx_shape;
use crate::{sys, Array, Result, Stream};

/// Same elements, new shape (at most one `-1`).
pub fn reshape(a: &Array, shape: &[i64], stream: &Stream) -> Result<Array> {
    // -1 is MLX's "infer" marker; everything else must be a valid dimension.
    let dims: Vec<i32> = shape
        .iter()
        .map(|&d| {
            if d == -1 {
                Ok(-1)
            } else {
                to_mlx_shape(&[d]).map(|v| v[0])
            }
        })
        .collect::<Result<_>>()?;
    Array::from_op(|out| {
        // SAFETY: `dims` outlives the call; all handles are live.
        unsafe { sys::mlx_reshape(out, a.raw(), dims.as_ptr(), dims.len(), stream.raw()) }
    })
}

/// Permutes the axes (`axes` is a permutation of `0..ndim`).
pub fn transpose(a: &Array, axes: &[i32], stream: &Stream) -> Result<Array> {
    Array::from_op(|out| {
        // SAFETY: `axes` outlives the call; MLX validates the permutation.
        unsafe { sys::mlx_transpose_axes(out, a.raw(), axes.as_ptr(), axes.len(), stream.raw()) }
    })
}

pub fn broadcast_to(a: &Array, shape: &[i64], stream: &Stream) -> Result<Array> {
    let dims = to_mlx_shape(shape)?;
    Array::from_op(|out| {
        // SAFETY: `dims` outlives the call; all handles are live.
        unsafe { sys::mlx_broadcast_to(out, a.raw(), dims.as_ptr(), dims.len(), stream.raw()) }
    })
}

/// Converts the element type (value conversion).
pub fn astype(a: &Array, dtype: Dtype, stream: &Stream) -> Result<Array> {
    Array::from_op(|out| {
        // SAFETY: all handles are live.
        unsafe { sys::mlx_astype(out, a.raw(), dtype.to_sys(), stream.raw()) }
    })
}

/// Reinterprets the bits as another element type.
pub fn view(a: &Array, dtype: Dtype, stream: &Stream) -> Result<Array> {
    Array::from_op(|out| {
        // SAFETY: all handles are live.
        unsafe { sys::mlx_view(out, a.raw(), dtype.to_sys(), stream.raw()) }
    })
}

/// A row-major dense copy (or the array itself when it already is one).
pub fn contiguous(a: &Array, stream: &Stream) -> Result<Array> {
    Array::from_op(|out| {
        // SAFETY: all handles are live.
        unsafe { sys::mlx_contiguous(out, a.raw(), false, stream.raw()) }
    })
}

/// Sum over `axes` (all axes when empty).
pub fn sum(a: &Array, axes: &[i32], keepdims: bool, stream: &Stream) -> Result<Array> {
    Array::from_op(|out| {
        // SAFETY: `axes` outlives the call; all handles are live.
        unsafe {
            if axes.is_empty() {
                sys::mlx_sum(out, a.raw(), keepdims, stream.raw())
            } else {
                sys::mlx_sum_axes(
                    out,
                    a.raw(),
                    axes.as_ptr(),
                    axes.len(),
                    keepdims,
                    stream.raw(),
                )
            }
        }
    })
}
