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

/// Sum over `axes` (all axes when empty); over size-1 axes only, without MLX's reduce (see
/// `reduce.rs`: an upstream crash).
pub fn sum(a: &Array, axes: &[i32], keepdims: bool, stream: &Stream) -> Result<Array> {
    let reduced = Array::from_op(|out| {
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
    })?;
    super::reduce::folded_unless_size_one(a, axes, reduced, super::add, stream)
}

/// Joins arrays along `axis`.
pub fn concatenate(arrays: &[Array], axis: i32, stream: &Stream) -> Result<Array> {
    let vector = crate::VectorArray::from_arrays(arrays)?;
    Array::from_op(|out| {
        // SAFETY: `vector` holds live arrays; MLX validates shapes and the axis.
        unsafe { sys::mlx_concatenate_axis(out, vector.raw(), axis, stream.raw()) }
    })
}

/// Joins equally shaped arrays along a new axis `axis`.
pub fn stack(arrays: &[Array], axis: i32, stream: &Stream) -> Result<Array> {
    let vector = crate::VectorArray::from_arrays(arrays)?;
    Array::from_op(|out| {
        // SAFETY: `vector` holds live arrays; MLX validates shapes and the axis.
        unsafe { sys::mlx_stack_axis(out, vector.raw(), axis, stream.raw()) }
    })
}

/// Splits `a` along `axis` before each of `indices` (ascending).
pub fn split_at(a: &Array, indices: &[i32], axis: i32, stream: &Stream) -> Result<Vec<Array>> {
    // SAFETY: an owned empty vector, filled in place and owned by `parts`.
    let mut raw = unsafe { sys::mlx_vector_array_new() };
    // SAFETY: `indices` outlives the call; all handles are live.
    let status = unsafe {
        sys::mlx_split_sections(
            &mut raw,
            a.raw(),
            indices.as_ptr(),
            indices.len(),
            axis,
            stream.raw(),
        )
    };
    let parts = crate::VectorArray::from_raw(raw);
    crate::error::check(status)?;
    parts.to_vec()
}

/// Elements of `a` at `indices` along `axis` (indices must be in range; MLX does not check).
pub fn take(a: &Array, indices: &Array, axis: i32, stream: &Stream) -> Result<Array> {
    Array::from_op(|out| {
        // SAFETY: all handles are live.
        unsafe { sys::mlx_take_axis(out, a.raw(), indices.raw(), axis, stream.raw()) }
    })
}

/// Removes the given size-1 axes.
pub fn squeeze(a: &Array, axes: &[i32], stream: &Stream) -> Result<Array> {
    Array::from_op(|out| {
        // SAFETY: `axes` outlives the call; MLX validates them.
        unsafe { sys::mlx_squeeze_axes(out, a.raw(), axes.as_ptr(), axes.len(), stream.raw()) }
    })
}

/// Inserts size-1 axes at the given positions of the result.
pub fn expand_dims(a: &Array, axes: &[i32], stream: &Stream) -> Result<Array> {
    Array::from_op(|out| {
        // SAFETY: `axes` outlives the call; MLX validates them.
        unsafe { sys::mlx_expand_dims_axes(out, a.raw(), axes.as_ptr(), axes.len(), stream.raw()) }
    })
}

/// `a[start:stop:step]` per axis (all three of length ndim; negative steps allowed).
pub fn slice(
    a: &Array,
    start: &[i32],
    stop: &[i32],
    step: &[i32],
    stream: &Stream,
) -> Result<Array> {
    Array::from_op(|out| {
        // SAFETY: the slices outlive the call; MLX validates their lengths.
        unsafe {
            sys::mlx_slice(
                out,
                a.raw(),
                start.as_ptr(),
                start.len(),
                stop.as_ptr(),
                stop.len(),
                step.as_ptr(),
                step.len(),
                stream.raw(),
            )
        }
    })
}

/// Reverses the order of elements along each of `axes`.
pub fn flip(a: &Array, axes: &[i32], stream: &Stream) -> Result<Array> {
    Array::from_op(|out| {
        // SAFETY: `axes` outlives the call; MLX validates them.
        unsafe { sys::mlx_flip_axes(out, a.raw(), axes.as_ptr(), axes.len(), stream.raw()) }
    })
}

/// `a` repeated `reps[i]` times along each axis.
pub fn tile(a: &Array, reps: &[i32], stream: &Stream) -> Result<Array> {
    Array::from_op(|out| {
        // SAFETY: `reps` outlives the call; MLX validates it.
        unsafe { sys::mlx_tile(out, a.raw(), reps.as_ptr(), reps.len(), stream.raw()) }
    })
}

/// Lower (`upper = false`) or upper triangle of the last two axes, from diagonal `k`.
pub fn triangle(a: &Array, k: i32, upper: bool, stream: &Stream) -> Result<Array> {
    Array::from_op(|out| {
        // SAFETY: all handles are live.
        unsafe {
            if upper {
                sys::mlx_triu(out, a.raw(), k, stream.raw())
            } else {
                sys::mlx_tril(out, a.raw(), k, stream.raw())
            }
        }
    })
}

/// Elements of `a` at `indices` along `axis`, position by position (indices shaped like `a`
/// except along `axis`; they must be in range, MLX does not check).
pub fn take_along_axis(a: &Array, indices: &Array, axis: i32, stream: &Stream) -> Result<Array> {
    Array::from_op(|out| {
        // SAFETY: all handles are live.
        unsafe { sys::mlx_take_along_axis(out, a.raw(), indices.raw(), axis, stream.raw()) }
    })
}

/// Pads `axes` by `low`/`high` elements: with `value` (mode "constant") or the edge values
/// (mode "edge").
pub fn pad(
    a: &Array,
    axes: &[i32],
    low: &[i32],
    high: &[i32],
    value: &Array,
    edge: bool,
    stream: &Stream,
) -> Result<Array> {
    let mode = std::ffi::CString::new(if edge { "edge" } else { "constant" }).expect("no NUL");
    Array::from_op(|out| {
        // SAFETY: the slices and `mode` outlive the call; MLX validates their lengths.
        unsafe {
            sys::mlx_pad(
                out,
                a.raw(),
                axes.as_ptr(),
                axes.len(),
                low.as_ptr(),
                low.len(),
                high.as_ptr(),
                high.len(),
                value.raw(),
                mode.as_ptr(),
                stream.raw(),
            )
        }
    })
}

/// A 2-D array with ones on diagonal `k` and zeros elsewhere.
pub fn eye(rows: i32, cols: i32, k: i32, dtype: crate::Dtype, stream: &Stream) -> Result<Array> {
    Array::from_op(|out| {
        // SAFETY: plain values and a live stream.
        unsafe { sys::mlx_eye(out, rows, cols, k, dtype.to_sys(), stream.raw()) }
    })
}

/// How a scatter combines an update with what is already there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScatterMode {
    Set,
    Add,
    Mul,
    Max,
    Min,
}

/// `a` with `updates` combined (per `mode`) into the rows `indices` of axis 0; `updates` is
/// shaped `indices.shape + [1] + a.shape[1..]`.
pub fn scatter_rows(
    a: &Array,
    indices: &Array,
    updates: &Array,
    mode: ScatterMode,
    stream: &Stream,
) -> Result<Array> {
    let index_list = crate::VectorArray::from_arrays(std::slice::from_ref(indices))?;
    let axes = [0i32];
    let scatter = match mode {
        ScatterMode::Set => sys::mlx_scatter,
        ScatterMode::Add => sys::mlx_scatter_add,
        ScatterMode::Mul => sys::mlx_scatter_prod,
        ScatterMode::Max => sys::mlx_scatter_max,
        ScatterMode::Min => sys::mlx_scatter_min,
    };
    Array::from_op(|out| {
        // SAFETY: all handles are live and `axes` outlives the call; MLX validates the shapes.
        unsafe {
            scatter(
                out,
                a.raw(),
                index_list.raw(),
                updates.raw(),
                axes.as_ptr(),
                1,
                stream.raw(),
            )
        }
    })
}

/// The indices that would sort `a` along `axis`.
pub fn argsort(a: &Array, axis: i32, stream: &Stream) -> Result<Array> {
    Array::from_op(|out| {
        // SAFETY: all handles are live; MLX validates the axis.
        unsafe { sys::mlx_argsort_axis(out, a.raw(), axis, stream.raw()) }
    })
}

/// A view of `a`'s (row-contiguous) buffer with the given shape and element strides.
pub fn as_strided(a: &Array, shape: &[i64], strides: &[i64], stream: &Stream) -> Result<Array> {
    let dims = crate::shape::to_mlx_shape(shape)?;
    Array::from_op(|out| {
        // SAFETY: the slices outlive the call; the caller keeps every index in bounds.
        unsafe {
            sys::mlx_as_strided(
                out,
                a.raw(),
                dims.as_ptr(),
                dims.len(),
                strides.as_ptr(),
                strides.len(),
                0,
                stream.raw(),
            )
        }
    })
}
