//! Indexing: Gather, GatherElements-style take/put, GatherND, ScatterElements, ScatterND, Scatter,
//! TensorScatter.

use mlx_kernels::{ops, Array};

use crate::shape::normalise_axis;
use crate::table::consts::{scalar, scalar_like};
use crate::{onnx_op, Lower, Result};

/// Entries of `data` along `axis` at `indices` (negative indices count from the end). An
/// out-of-range index fails the run, as in ORT's CPU EP.
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
    let safe = checked_in_bounds(cx, &indices, data.shape()[axis], axis)?;
    Ok(ops::take(&data, &safe, axis as i32, s)?)
}

/// Indices in `[0, dim)`, with a run-time check that every index was in `[-dim, dim)` before:
/// ORT's CPU EP fails the run on one that is not, and so does the plan. Since such a run fails,
/// any in-bounds position serves for those (MLX must not read out of bounds meanwhile):
/// `index mod dim`, one kernel, is each checked index's own position.
pub(crate) fn checked_in_bounds(
    cx: &mut Lower,
    indices: &Array,
    dim: i64,
    axis: usize,
) -> Result<Array> {
    cx.require_in_range(
        indices,
        -dim,
        dim - 1,
        format!(
            "an index is out of range: indices along axis {axis} must lie in [{}, {}]",
            -dim,
            dim - 1
        ),
    )?;
    if dim == 0 {
        // No position to give; the check fails the run unless there is no index at all.
        return in_bounds(indices, dim, cx.stream());
    }
    let s = cx.stream();
    Ok(ops::remainder(
        indices,
        &scalar_like(dim as f64, indices, s)?,
        s,
    )?)
}

/// Negative indices wrapped by `dim` and everything clamped into `[0, dim)`: ONNX calls
/// out-of-range indices an error (ORT raises it); MLX does not check, so they are kept in
/// bounds here rather than read or written out of range.
pub(crate) fn in_bounds(indices: &Array, dim: i64, s: &mlx_kernels::Stream) -> Result<Array> {
    let dim = dim as f64;
    let negative = ops::less(indices, &scalar_like(0.0, indices, s)?, s)?;
    let wrapped = ops::where_(
        &negative,
        &ops::add(indices, &scalar_like(dim, indices, s)?, s)?,
        indices,
        s,
    )?;
    let low = ops::maximum(&wrapped, &scalar_like(0.0, indices, s)?, s)?;
    Ok(ops::minimum(
        &low,
        &scalar_like((dim - 1.0).max(0.0), indices, s)?,
        s,
    )?)
}

/// For `indices [.., k]` addressing `k` axes of a tensor with dims `addressed` (the first of
/// them axis `first_axis`): the row-major position of each addressed slice (shape
/// `indices.shape[..-1]`), each index checked and kept in bounds.
fn linear_index(
    cx: &mut Lower,
    indices: &Array,
    addressed: &[i64],
    first_axis: usize,
) -> Result<Array> {
    let s = cx.stream();
    let k = addressed.len();
    let coords = match k {
        0 => Vec::new(),
        _ => ops::split_at(
            &ops::astype(indices, mlx_kernels::Dtype::I64, s)?,
            &(1..k as i32).collect::<Vec<_>>(),
            -1,
            s,
        )?,
    };
    let mut linear = crate::table::consts::scalar(0.0, mlx_kernels::Dtype::I64, s)?;
    let mut stride: i64 = addressed.iter().product();
    for (j, coord) in coords.iter().enumerate() {
        stride /= addressed[j].max(1);
        let coord = ops::squeeze(
            &checked_in_bounds(cx, coord, addressed[j], first_axis + j)?,
            &[coord.ndim() as i32 - 1],
            s,
        )?;
        linear = ops::add(
            &linear,
            &ops::multiply(&coord, &scalar_like(stride as f64, &coord, s)?, s)?,
            s,
        )?;
    }
    let shape = indices.shape();
    // (With k = 0 every lookup addresses slice 0.)
    Ok(ops::broadcast_to(&linear, &shape[..shape.len() - 1], s)?)
}

/// Slices of `data` addressed by the last axis of `indices` (after `batch_dims` shared leading
/// axes).
#[onnx_op(
    op = "GatherND", since = 11, types(T = ANY, I = I64), inputs(data: T, indices: I), outputs(output: T),
    shape = ShapeKeyed
)]
fn gather_nd(
    cx: &mut Lower,
    data: Array,
    indices: Array,
    #[attr(default = 0)] batch_dims: i64,
) -> Result<Array> {
    let s = cx.stream();
    let (dims, idx_dims) = (data.shape(), indices.shape());
    let b = usize::try_from(batch_dims).map_err(|_| crate::OpError::new("negative batch_dims"))?;
    let k = *idx_dims
        .last()
        .ok_or_else(|| crate::OpError::new("indices must have rank >= 1"))? as usize;
    if b >= idx_dims.len() || b + k > dims.len() {
        return Err(crate::OpError::new(format!(
            "indices {idx_dims:?} do not address data {dims:?} with batch_dims {b}"
        )));
    }
    // ONNX wants the batch axes equal. ORT's kernel only wants the indices' batch a multiple
    // of the data's, and deals the lookups out evenly: with data batch 2 and indices batch 4,
    // the first half of the lookups read data's batch entry 0 and the second half entry 1.
    let batch: i64 = dims[..b].iter().product();
    let indices_batch: i64 = idx_dims[..b].iter().product();
    if dims[..b] != idx_dims[..b] && (batch == 0 || indices_batch % batch != 0) {
        return Err(crate::OpError::new(format!(
            "the indices' batch size {indices_batch} is not a multiple of the data's, {batch} \
             (batch_dims {b}; ORT's CPU EP refuses it too)"
        )));
    }
    let lookups = &idx_dims[..idx_dims.len() - 1];
    if dims[b + k..].contains(&0) || lookups.contains(&0) {
        // Nothing is read, so nothing is checked (ORT's CPU EP accepts any index here too).
        let out_shape = [lookups, &dims[b + k..]].concat();
        return Ok(Array::from_bytes(&[], &out_shape, data.dtype())?);
    }
    if dims[b..b + k].contains(&0) && indices.size() > 0 {
        return Err(crate::OpError::new(
            "indices into an empty axis are out of range",
        ));
    }
    // One linear index per addressed slice, into data viewed as [batch * addressed, rest..].
    let addressed: i64 = dims[b..b + k].iter().product();
    let rest: Vec<i64> = dims[b + k..].to_vec();
    let linear = linear_index(cx, &indices, &dims[b..b + k], b)?;
    let linear = if b > 0 {
        // Offset each lookup to its batch entry's block of `addressed` slices: lookup i (in
        // row-major order) belongs to entry i / (lookups / batch), which is its own batch
        // index when the batch axes are equal.
        let lookups_count: i64 = lookups.iter().product();
        let i64s = mlx_kernels::Dtype::I64;
        let order = ops::arange(0.0, lookups_count as f64, 1.0, i64s, s)?;
        let per_entry = scalar((lookups_count / batch) as f64, i64s, s)?;
        let entry = ops::floor_divide(&order, &per_entry, s)?;
        let offsets = ops::multiply(&entry, &scalar(addressed as f64, i64s, s)?, s)?;
        ops::add(&linear, &ops::reshape(&offsets, lookups, s)?, s)?
    } else {
        linear
    };
    let mut view = vec![batch * addressed];
    view.extend(&rest);
    Ok(ops::take(&ops::reshape(&data, &view, s)?, &linear, 0, s)?)
}

/// `data` with `updates` combined into it at `indices` along `axis` (`reduction`: none, add,
/// mul, max, min). With duplicate indices and no reduction (undefined in ONNX) the last update
/// wins, as on ORT's CPU EP, on every backend.
#[onnx_op(
    op = "ScatterElements", since = 11, types(T = ANY, Tind = I32 | I64), inputs(data: T, indices: Tind, updates: T),
    outputs(output: T), shape = ShapeKeyed, claim = scatter_claim,
    declines = "reductions on 64-bit integers (MLX's GPU scatter has no 64-bit kernels)"
)]
fn scatter_elements(
    cx: &mut Lower,
    data: Array,
    indices: Array,
    updates: Array,
    #[attr(default = 0)] axis: i64,
    #[attr(default = "none")] reduction: String,
) -> Result<Array> {
    let s = cx.stream();
    let axis = normalise_axis(axis, data.ndim())?;
    if indices.shape() != updates.shape() || indices.ndim() != data.ndim() {
        return Err(crate::OpError::new(
            "indices and updates must match, with data's rank",
        ));
    }
    let dims = data.shape();
    let idx_dims = indices.shape();
    if (0..dims.len()).any(|a| a != axis && idx_dims[a] > dims[a]) {
        return Err(crate::OpError::new(format!(
            "indices {idx_dims:?} exceed data {dims:?} on an axis other than {axis}"
        )));
    }
    if indices.size() == 0 {
        return Ok(data);
    }
    if dims[axis] == 0 {
        return Err(crate::OpError::new(
            "indices into an empty axis are out of range",
        ));
    }
    // Each update's position in the flattened data: its own coordinates, with the one along
    // `axis` taken from `indices`.
    let mut linear = crate::table::consts::scalar(0.0, mlx_kernels::Dtype::I64, s)?;
    let mut stride = 1i64;
    for a in (0..dims.len()).rev() {
        let coord = if a == axis {
            ops::astype(
                &checked_in_bounds(cx, &indices, dims[a], a)?,
                mlx_kernels::Dtype::I64,
                s,
            )?
        } else {
            let mut shape = vec![1i64; dims.len()];
            shape[a] = idx_dims[a];
            ops::reshape(
                &ops::arange(0.0, idx_dims[a] as f64, 1.0, mlx_kernels::Dtype::I64, s)?,
                &shape,
                s,
            )?
        };
        linear = ops::add(
            &linear,
            &ops::multiply(&coord, &scalar_like(stride as f64, &coord, s)?, s)?,
            s,
        )?;
        stride *= dims[a];
    }
    let count = indices.size() as i64;
    let rows = ops::reshape(&ops::broadcast_to(&linear, &idx_dims, s)?, &[count], s)?;
    let flat = ops::reshape(&data, &[data.size() as i64], s)?;
    let values = ops::reshape(&updates, &[count, 1], s)?;
    let written = scatter_rows(&flat, &rows, &values, scatter_mode(&reduction)?, s)?;
    Ok(ops::reshape(&written, &dims, s)?)
}

fn scatter_mode(reduction: &str) -> Result<ops::ScatterMode> {
    Ok(match reduction {
        "none" => ops::ScatterMode::Set,
        "add" => ops::ScatterMode::Add,
        "mul" => ops::ScatterMode::Mul,
        "max" => ops::ScatterMode::Max,
        "min" => ops::ScatterMode::Min,
        other => return Err(crate::OpError::new(format!("reduction {other:?}"))),
    })
}

fn scatter_claim(node: &crate::Node) -> crate::Verdict {
    let wide = matches!(
        node.input_type(0),
        Some(crate::ElemType::Int64 | crate::ElemType::Uint64)
    );
    let reduction = node.attr_or("reduction", String::from("none"));
    if reduction == "none" {
        return crate::Verdict::Claim;
    }
    match scatter_mode(&reduction) {
        Ok(_) if wide => crate::Verdict::decline(format!(
            "reduction {reduction:?} on 64-bit integers: MLX's GPU scatter has no 64-bit kernels"
        )),
        Ok(_) => crate::Verdict::Claim,
        Err(_) => crate::Verdict::decline(format!("reduction {reduction:?} is not an ONNX mode")),
    }
}

/// `a` with `updates` (`[count, 1, rest..]`) combined into its rows `rows` (`[count]`). A
/// reduction is MLX's scatter (the claim declines 64-bit ones: MLX's GPU scatter has no 64-bit
/// kernels). An assignment is resolved as ORT's CPU EP does it, the last update of a row
/// winning: MLX's GPU scatter writes duplicate rows in no fixed order (and the halves of a
/// 64-bit value independently), so each row's last writer is found first (a 32-bit max
/// scatter of update numbers) and its update gathered.
pub(crate) fn scatter_rows(
    a: &Array,
    rows: &Array,
    updates: &Array,
    mode: ops::ScatterMode,
    s: &mlx_kernels::Stream,
) -> Result<Array> {
    use mlx_kernels::Dtype::I32;
    let extreme = matches!(mode, ops::ScatterMode::Max | ops::ScatterMode::Min);
    if extreme && a.dtype().is_float() {
        return scatter_extreme_as_ort(a, rows, updates, mode, s);
    }
    if !matches!(mode, ops::ScatterMode::Set) {
        return Ok(ops::scatter_rows(a, rows, updates, mode, s)?);
    }
    let dims = a.shape();
    let count = rows.size() as i64;
    let writer = last_update(dims[0], rows, s)?;
    let written = ops::greater_equal(&writer, &crate::table::consts::scalar(0.0, I32, s)?, s)?;
    let picked = ops::maximum(&writer, &crate::table::consts::scalar(0.0, I32, s)?, s)?;
    let by_update = ops::reshape(updates, &[[count].as_slice(), &dims[1..]].concat(), s)?;
    let gathered = ops::take(&by_update, &picked, 0, s)?;
    let mut mask_shape = vec![dims[0]];
    mask_shape.extend(std::iter::repeat_n(1, dims.len() - 1));
    let written = ops::reshape(&written, &mask_shape, s)?;
    Ok(ops::where_(&written, &gathered, a, s)?)
}

/// Per row of an array with `row_count` rows: the number of the last of the updates `rows`
/// (`[count]`) sends there, or -1 (a 32-bit max scatter of update numbers: MLX's GPU scatter
/// combines duplicate rows in no fixed order).
fn last_update(row_count: i64, rows: &Array, s: &mlx_kernels::Stream) -> Result<Array> {
    use mlx_kernels::Dtype::I32;
    let count = rows.size() as i64;
    let nobody = ops::broadcast_to(
        &crate::table::consts::scalar(-1.0, I32, s)?,
        &[row_count],
        s,
    )?;
    let numbers = ops::reshape(
        &ops::arange(0.0, count as f64, 1.0, I32, s)?,
        &[count, 1],
        s,
    )?;
    Ok(ops::scatter_rows(
        &nobody,
        rows,
        &numbers,
        ops::ScatterMode::Max,
        s,
    )?)
}

/// `data` with the slices addressed by the last axis of `indices` combined with `updates`
/// (`reduction`: none, add, mul, max, min). Duplicate indices without a reduction (undefined in
/// ONNX): the last update wins, as on ORT's CPU EP, on every backend.
#[onnx_op(
    op = "ScatterND", since = 11, types(T = ANY, I = I64), inputs(data: T, indices: I, updates: T), outputs(output: T),
    shape = ShapeKeyed, claim = scatter_claim,
    declines = "reductions on 64-bit integers (MLX's GPU scatter has no 64-bit kernels)"
)]
fn scatter_nd(
    cx: &mut Lower,
    data: Array,
    indices: Array,
    updates: Array,
    #[attr(default = "none")] reduction: String,
) -> Result<Array> {
    let s = cx.stream();
    let (dims, idx_dims) = (data.shape(), indices.shape());
    let k = *idx_dims
        .last()
        .ok_or_else(|| crate::OpError::new("indices must have rank >= 1"))? as usize;
    let lookups = &idx_dims[..idx_dims.len() - 1];
    let count: i64 = lookups.iter().product();
    if k > dims.len() || updates.shape() != [lookups, &dims[k..]].concat() {
        return Err(crate::OpError::new(format!(
            "updates must be shaped {lookups:?} + {:?}",
            &dims[k.min(dims.len())..]
        )));
    }
    if count == 0 {
        return Ok(data);
    }
    if dims[..k].contains(&0) {
        return Err(crate::OpError::new(
            "indices into an empty axis are out of range",
        ));
    }
    let addressed: i64 = dims[..k].iter().product();
    let rest = &dims[k..];
    let rows = ops::reshape(&linear_index(cx, &indices, &dims[..k], 0)?, &[count], s)?;
    let view = ops::reshape(&data, &[[addressed].as_slice(), rest].concat(), s)?;
    let slices = ops::reshape(&updates, &[[count, 1].as_slice(), rest].concat(), s)?;
    let written = scatter_rows(&view, &rows, &slices, scatter_mode(&reduction)?, s)?;
    Ok(ops::reshape(&written, &dims, s)?)
}

/// A float max/min reduction with NaN as ORT's CPU EP gives it. ORT folds each element's
/// updates in order with `acc = (u < acc) ? acc : u` (max; min mirrored), so a NaN is taken
/// when it comes and dropped by the next update: the answer is NaN when the last update (or, with
/// no update, the data) is NaN, and otherwise the extreme of what follows the last NaN. MLX's
/// GPU scatter combines in no fixed order with its own NaN rule, so the order is rebuilt from
/// update numbers: per row the last update, per element the last NaN update (32-bit max
/// scatters), then one scatter of the updates that follow that NaN, into the data only where no NaN came
/// before them.
fn scatter_extreme_as_ort(
    a: &Array,
    rows: &Array,
    updates: &Array,
    mode: ops::ScatterMode,
    s: &mlx_kernels::Stream,
) -> Result<Array> {
    use crate::table::consts::scalar;
    use mlx_kernels::Dtype::I32;
    let dims = a.shape();
    let count = rows.size() as i64;
    let neutral = match mode {
        ops::ScatterMode::Max => f64::NEG_INFINITY,
        _ => f64::INFINITY,
    };
    let none = ops::broadcast_to(&scalar(-1.0, I32, s)?, &dims, s)?;
    let mut number_shape = vec![count];
    number_shape.extend(std::iter::repeat_n(1, updates.ndim() - 1));
    let numbers = ops::broadcast_to(
        &ops::reshape(
            &ops::arange(0.0, count as f64, 1.0, I32, s)?,
            &number_shape,
            s,
        )?,
        &updates.shape(),
        s,
    )?;
    // Per row (every element of a row has the same last update), shaped to broadcast.
    let mut row_shape = vec![dims[0]];
    row_shape.extend(std::iter::repeat_n(1, dims.len() - 1));
    let last = ops::reshape(&last_update(dims[0], rows, s)?, &row_shape, s)?;
    let nan_numbers = ops::where_(
        &ops::isnan(updates, s)?,
        &numbers,
        &scalar(-1.0, I32, s)?,
        s,
    )?;
    let last_nan = ops::scatter_rows(&none, rows, &nan_numbers, ops::ScatterMode::Max, s)?;
    // An update counts when it comes after its element's last NaN update.
    let nan_before = ops::reshape(&ops::take(&last_nan, rows, 0, s)?, &updates.shape(), s)?;
    let counted = ops::where_(
        &ops::greater(&numbers, &nan_before, s)?,
        updates,
        &scalar(neutral, a.dtype(), s)?,
        s,
    )?;
    // The data counts when it is not NaN and no NaN update came.
    let data_counts = ops::logical_and(
        &ops::less(&last_nan, &scalar(0.0, I32, s)?, s)?,
        &ops::logical_not(&ops::isnan(a, s)?, s)?,
        s,
    )?;
    let base = ops::where_(&data_counts, a, &scalar(neutral, a.dtype(), s)?, s)?;
    let reduced = ops::scatter_rows(&base, rows, &counted, mode, s)?;
    let last_is_nan = ops::logical_and(
        &ops::greater_equal(&last_nan, &scalar(0.0, I32, s)?, s)?,
        &ops::equal(&last_nan, &last, s)?,
        s,
    )?;
    let nan = scalar(f64::NAN, a.dtype(), s)?;
    let updated = ops::where_(&last_is_nan, &nan, &reduced, s)?;
    let untouched = ops::less(&last, &scalar(0.0, I32, s)?, s)?;
    Ok(ops::where_(&untouched, a, &updated, s)?)
}

/// ScatterElements under its opset-9 name (no reduction).
#[onnx_op(
    op = "Scatter", opset = 9..=10, types(T = ANY, Tind = I32 | I64), inputs(data: T, indices: Tind, updates: T),
    outputs(output: T), shape = ShapeKeyed
)]
fn scatter_legacy(
    cx: &mut Lower,
    data: Array,
    indices: Array,
    updates: Array,
    #[attr(default = 0)] axis: i64,
) -> Result<Array> {
    scatter_elements(cx, data, indices, updates, axis, "none".into())
}

/// A KV-cache update: `past_cache` with `update`'s rows written along `axis` from each batch
/// row's `write_indices` (0 when absent), wrapping around the cache in `circular` mode. Every
/// cache row takes either the update row that lands there or its past value, so the output is
/// one gather and one select, shape-static: the write positions stay on the device. A
/// negative write index, or (linear mode) rows past the cache's end, fail the run as on ORT.
#[onnx_op(
    op = "TensorScatter", since = 24, types(T = ANY, I = I64),
    inputs(past_cache: T, update: T, write_indices: I), outputs(present_cache: T),
    shape = ShapeKeyed, claim = tensor_scatter_claim,
    declines = "a mode other than linear and circular"
)]
fn tensor_scatter(
    cx: &mut Lower,
    past: Array,
    update: Array,
    write_indices: Option<Array>,
    #[attr(default = -2)] axis: i64,
    #[attr(default = "linear")] mode: String,
) -> Result<Array> {
    let s = cx.stream();
    let (past_shape, update_shape) = (past.shape(), update.shape());
    let rank = past_shape.len();
    let axis = normalise_axis(axis, rank)?;
    let fits = rank >= 2
        && axis >= 1
        && update_shape.len() == rank
        && (0..rank).all(|d| d == axis || past_shape[d] == update_shape[d]);
    if !fits {
        return Err(crate::OpError::new(format!(
            "past_cache {past_shape:?} and update {update_shape:?} must match except on axis {axis} (not the batch axis)"
        )));
    }
    let (batch, capacity, rows) = (past_shape[0], past_shape[axis], update_shape[axis]);
    if rows > capacity {
        return Err(crate::OpError::new(format!(
            "update holds {rows} rows along axis {axis}, more than the cache's {capacity}"
        )));
    }
    let starts = match write_indices {
        Some(w) => {
            if w.shape() != [batch] {
                return Err(crate::OpError::new(format!(
                    "write_indices has shape {:?}: expected [{batch}]",
                    w.shape()
                )));
            }
            let limit = if mode == "circular" {
                i64::MAX
            } else {
                capacity - rows
            };
            cx.require_in_range(
                &w,
                0,
                limit,
                format!("a write index is negative, or (linear mode) writes past the cache's {capacity} rows"),
            )?;
            ops::astype(&w, mlx_kernels::Dtype::I64, s)?
        }
        None => crate::table::consts::zeros(&[batch], mlx_kernels::Dtype::I64, s)?,
    };
    // Checked first: ORT refuses a bad write index even when nothing would be written.
    if rows == 0 || past.size() == 0 {
        return Ok(past);
    }
    // Per batch row and cache row j: the update row that lands on j, `j - start` (mod the
    // capacity when circular), if it is one of the update's rows.
    let mut column = vec![1i64; rank];
    column[axis] = capacity;
    let cache_rows = ops::reshape(
        &ops::arange(0.0, capacity as f64, 1.0, mlx_kernels::Dtype::I64, s)?,
        &column,
        s,
    )?;
    let mut per_batch = vec![1i64; rank];
    per_batch[0] = batch;
    let offset = ops::subtract(&cache_rows, &ops::reshape(&starts, &per_batch, s)?, s)?;
    let source = if mode == "circular" {
        let cap = crate::table::consts::scalar(capacity as f64, mlx_kernels::Dtype::I64, s)?;
        ops::remainder(&offset, &cap, s)?
    } else {
        offset
    };
    let zero = crate::table::consts::scalar(0.0, mlx_kernels::Dtype::I64, s)?;
    let last = crate::table::consts::scalar((rows - 1) as f64, mlx_kernels::Dtype::I64, s)?;
    let lands = ops::logical_and(
        &ops::greater_equal(&source, &zero, s)?,
        &ops::less_equal(&source, &last, s)?,
        s,
    )?;
    let picked = ops::minimum(&ops::maximum(&source, &zero, s)?, &last, s)?;
    let mut gather_shape = update_shape.clone();
    gather_shape[axis] = capacity;
    let index = ops::broadcast_to(
        &ops::astype(&picked, mlx_kernels::Dtype::I32, s)?,
        &gather_shape,
        s,
    )?;
    let written = ops::take_along_axis(&update, &index, axis as i32, s)?;
    Ok(ops::where_(&lands, &written, &past, s)?)
}

fn tensor_scatter_claim(node: &crate::Node) -> crate::Verdict {
    match node.attr_or("mode", "linear".to_string()).as_str() {
        "linear" | "circular" => crate::Verdict::Claim,
        other => crate::Verdict::decline(format!(
            "mode {other:?}; TensorScatter has linear and circular"
        )),
    }
}

#[cfg(test)]
mod tests {
    use mlx_kernels::Array;

    use crate::table::testing::{node, run, run1, values_f32};
    use crate::{AttrValue, ElemType};

    const F: ElemType = ElemType::Float;
    const I: ElemType = ElemType::Int64;

    #[test]
    fn gather_takes_negative_indices_and_fails_on_out_of_range_ones() {
        let values: Vec<f32> = (0..12).map(|v| v as f32).collect();
        let data = Array::from_slice(&values, &[3, 4]).unwrap();
        let idx = Array::from_slice(&[-1i64, 0], &[2]).unwrap();
        let rows = run1(
            &node("Gather", 13, &[F, I], F),
            &[Some(data.clone()), Some(idx)],
        );
        assert_eq!(
            (rows.shape(), values_f32(&rows)[..4].to_vec()),
            (vec![2, 4], vec![8.0, 9.0, 10.0, 11.0])
        );
        let cols = node("Gather", 13, &[F, ElemType::Int32], F).attr("axis", AttrValue::Int(1));
        let idx = Array::from_slice(&[[3i32, 1], [0, -4]].concat(), &[2, 2]).unwrap();
        let picked = run1(&cols, &[Some(data.clone()), Some(idx)]);
        assert_eq!(picked.shape(), vec![3, 2, 2]);
        assert_eq!(values_f32(&picked)[..4].to_vec(), vec![3.0, 1.0, 0.0, 0.0]);
        for wild in [7i64, -4, 3] {
            let wild = Array::from_slice(&[0, wild], &[2]).unwrap();
            let error = run(
                &node("Gather", 13, &[F, I], F),
                &[Some(data.clone()), Some(wild)],
            );
            assert!(error.unwrap_err().contains("out of range"));
        }
    }

    #[test]
    fn an_assignment_to_a_row_written_twice_keeps_the_last_update() {
        use crate::table::testing::stream;
        let s = stream();
        let i64s = |v: &[i64], shape: &[i64]| Array::from_slice(v, shape).unwrap();
        // Rows 2 and 0 written twice, 64-bit values whose halves both differ.
        let data = i64s(&[0, 0, 0, 0], &[4]);
        let indices = i64s(&[2, 0, 2, 0, 3], &[5]);
        let updates = i64s(&[1 << 40, -1, (7 << 40) | 5, i64::MIN, 9], &[5]);
        let scatter = node(
            "ScatterElements",
            11,
            &[ElemType::Int64, ElemType::Int64, ElemType::Int64],
            ElemType::Int64,
        );
        let out = run1(&scatter, &[Some(data), Some(indices), Some(updates)]);
        assert_eq!(
            out.to_vec::<i64>(&s).unwrap(),
            vec![i64::MIN, 0, (7 << 40) | 5, 9]
        );
    }
}
