//! Reductions and softmax-style normalisations along one axis.

use crate::dtype::Dtype;
use crate::ops::{astype, maximum, minimum, multiply, reshape, slice, transpose};
use crate::{sys, Array, Result, Stream};

// MLX 0.32.4 corrupts its heap (SIGSEGV, "double free") when a shapeless compiled closure holds
// a reduction whose reduced axes all have size 1, e.g. `sum(x[1, 4], axis 0)`; softmax and
// logsumexp over a size-1 axis that is not the last reduce that way inside MLX. Such a
// reduction changes no value, so every reduction here takes it without MLX's reduce: the
// bug cannot be reached through this crate (docs/DESIGN.md lists the upstream bug).

/// Whether reducing `a` over `axes` (all of them when empty) combines nothing: every reduced
/// axis has size 1.
fn reduces_only_size_one_axes(a: &Array, axes: &[i32]) -> bool {
    let dims = a.shape();
    if axes.is_empty() {
        return dims.iter().all(|&d| d == 1);
    }
    let rank = dims.len() as i32;
    axes.iter().all(|&axis| {
        let axis = if axis < 0 { axis + rank } else { axis };
        usize::try_from(axis).is_ok_and(|axis| dims.get(axis) == Some(&1))
    })
}

/// `reduced` (MLX's reduction of `a` over `axes`, built lazily) unless it reduces only size-1
/// axes: then `a` reshaped and cast to its shape and dtype (the lazy `reduced` is dropped
/// unevaluated; it only says which shape and dtype MLX's rules give).
pub(super) fn unless_size_one(
    a: &Array,
    axes: &[i32],
    reduced: Array,
    stream: &Stream,
) -> Result<Array> {
    if !reduces_only_size_one_axes(a, axes) {
        return Ok(reduced);
    }
    astype(
        &reshape(a, &reduced.shape(), stream)?,
        reduced.dtype(),
        stream,
    )
}

/// Reductions over one axis of at most this many elements are folded pairwise over slices.
const FOLDED_EXTENT: i64 = 8;

/// How a folded reduction combines two slices.
pub(super) type Combine = fn(&Array, &Array, &Stream) -> Result<Array>;

/// `reduced` (MLX's reduction of `a` over `axes`, built lazily), unless a cheaper form gives
/// the same values: reshaped `a` when only size-1 axes are reduced (above), or, when one axis
/// of 2..=8 elements is, its slices folded by `combine` (accumulated in float32 for 16-bit
/// floats, as MLX accumulates them). MLX's CUDA reduction of a short axis is a slow kernel of
/// its own (a spectrum's real and imaginary parts summed: 1.1 ms of a 1.6 ms audio front end
/// on the H200), where the folded slices are elementwise work a compiled closure fuses with
/// their neighbours. Bool inputs (MLX widens them) keep MLX's reduction.
pub(super) fn folded_unless_size_one(
    a: &Array,
    axes: &[i32],
    reduced: Array,
    combine: Combine,
    stream: &Stream,
) -> Result<Array> {
    let dims = a.shape();
    let rank = dims.len() as i32;
    let few = match axes {
        [axis] if a.dtype() != Dtype::Bool => {
            let axis = if *axis < 0 { axis + rank } else { *axis };
            usize::try_from(axis).ok().filter(|&axis| {
                dims.get(axis)
                    .is_some_and(|&d| (2..=FOLDED_EXTENT).contains(&d))
            })
        }
        _ => None,
    };
    let Some(axis) = few else {
        return unless_size_one(a, axes, reduced, stream);
    };
    let wide = match reduced.dtype() {
        Dtype::F16 | Dtype::BF16 => Dtype::F32,
        other => other,
    };
    let source = astype(a, wide, stream)?;
    let tap = |i: i32| -> Result<Array> {
        let mut start = vec![0i32; dims.len()];
        let mut stop: Vec<i32> = dims.iter().map(|&d| d as i32).collect();
        start[axis] = i;
        stop[axis] = i + 1;
        slice(&source, &start, &stop, &vec![1; dims.len()], stream)
    };
    let mut folded = tap(0)?;
    for i in 1..dims[axis] as i32 {
        folded = combine(&folded, &tap(i)?, stream)?;
    }
    astype(
        &reshape(&folded, &reduced.shape(), stream)?,
        reduced.dtype(),
        stream,
    )
}

/// Softmax along `axis`; `precise` accumulates low-precision inputs in float32. A size-1 axis
/// that is not the last is moved last, where MLX's fused softmax takes it (see above).
pub fn softmax(a: &Array, axis: i32, precise: bool, stream: &Stream) -> Result<Array> {
    let rank = a.ndim() as i32;
    let last = rank - 1;
    let resolved = if axis < 0 { axis + rank } else { axis };
    if resolved != last && reduces_only_size_one_axes(a, &[axis]) {
        let mut order: Vec<i32> = (0..rank).collect();
        order.swap(resolved as usize, last as usize);
        let moved = softmax(&transpose(a, &order, stream)?, -1, precise, stream)?;
        // Swapping two axes is its own inverse.
        return transpose(&moved, &order, stream);
    }
    Array::from_op(|out| {
        // SAFETY: all handles are live; MLX validates the axis.
        unsafe { sys::mlx_softmax_axis(out, a.raw(), axis, precise, stream.raw()) }
    })
}

/// `log(sum(exp(a)))` along `axis`, computed stably.
pub fn logsumexp(a: &Array, axis: i32, keepdims: bool, stream: &Stream) -> Result<Array> {
    let reduced = Array::from_op(|out| {
        // SAFETY: all handles are live; MLX validates the axis.
        unsafe { sys::mlx_logsumexp_axis(out, a.raw(), axis, keepdims, stream.raw()) }
    })?;
    unless_size_one(a, &[axis], reduced, stream)
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

/// `fn name(a, axes, keepdims, stream)` for each `mlx_*_axes` reduction; those given a
/// combining op fold a short axis (`folded_unless_size_one`).
macro_rules! axis_reductions {
    ($($(#[$doc:meta])* $name:ident => $ffi:ident, $combine:expr;)*) => {$(
        $(#[$doc])*
        pub fn $name(a: &Array, axes: &[i32], keepdims: bool, stream: &Stream) -> Result<Array> {
            let reduced = Array::from_op(|out| {
                // SAFETY: `axes` outlives the call; MLX validates them.
                unsafe { sys::$ffi(out, a.raw(), axes.as_ptr(), axes.len(), keepdims, stream.raw()) }
            })?;
            match $combine {
                Some(combine) => folded_unless_size_one(a, axes, reduced, combine, stream),
                None => unless_size_one(a, axes, reduced, stream),
            }
        }
    )*};
}

axis_reductions! {
    /// Mean over `axes`.
    mean => mlx_mean_axes, None::<Combine>;
    /// Maximum over `axes`.
    max => mlx_max_axes, Some(maximum as Combine);
    /// Minimum over `axes`.
    min => mlx_min_axes, Some(minimum as Combine);
    /// Product over `axes`.
    prod => mlx_prod_axes, Some(multiply as Combine);
    /// `log(sum(exp(a)))` over `axes`, computed stably.
    logsumexp_axes => mlx_logsumexp_axes, None::<Combine>;
}

/// Whether every element is true (nonzero), as a 0-d bool; true for an empty array.
pub fn all(a: &Array, stream: &Stream) -> Result<Array> {
    Array::from_op(|out| {
        // SAFETY: all handles are live.
        unsafe { sys::mlx_all(out, a.raw(), false, stream.raw()) }
    })
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
