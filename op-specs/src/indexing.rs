//! Indexing: Gather.

use mlx_kernels::{ops, Array};

use crate::shape::normalise_axis;
use crate::table::consts::scalar_like;
use crate::{onnx_op, Lower, Result};

/// Entries of `data` along `axis` at `indices` (negative indices count from the end). ONNX
/// leaves out-of-range indices an error, which ORT raises; MLX does not check them, so they
/// are clamped into range here rather than read out of bounds.
#[onnx_op(
    op = "Gather", since = 1, types(T = ANY, Tind = I32 | I64), inputs(data: T, indices: Tind), outputs(output: T),
    shape = ShapeKeyed
)]
fn gather(
    cx: &mut Lower,
    data: Array,
    indices: Array,
    #[attr(default = 0)] axis: i64,
) -> Result<Array> {
    let s = cx.stream();
    let axis = normalise_axis(axis, data.ndim())?;
    if data.shape()[axis] == 0 && indices.size() > 0 {
        return Err(crate::OpError::new(
            "indices into an empty axis are out of range",
        ));
    }
    let dim = data.shape()[axis] as f64;
    let negative = ops::less(&indices, &scalar_like(0.0, &indices, s)?, s)?;
    let wrapped = ops::where_(
        &negative,
        &ops::add(&indices, &scalar_like(dim, &indices, s)?, s)?,
        &indices,
        s,
    )?;
    let low = ops::maximum(&wrapped, &scalar_like(0.0, &indices, s)?, s)?;
    let safe = ops::minimum(&low, &scalar_like((dim - 1.0).max(0.0), &indices, s)?, s)?;
    Ok(ops::take(&data, &safe, axis as i32, s)?)
}
