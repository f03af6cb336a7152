//! Shape and data movement: Shape, Size, Reshape, Squeeze, Unsqueeze, Flatten, Transpose,
//! Concat, Split, Slice, Expand. Target shapes, axes and split sizes are host-known inputs (constants,
//! or values computed from shapes), so plans with these ops compile per input shape.

use mlx_kernels::{ops, Array};

use crate::{onnx_op, Lower, OpError, Result};

/// `axis` in `[-rank, rank)` as a non-negative index.
pub(crate) fn normalise_axis(axis: i64, rank: usize) -> Result<usize> {
    let r = rank as i64;
    let resolved = if axis < 0 { axis + r } else { axis };
    if resolved < 0 || resolved >= r {
        return Err(OpError::new(format!(
            "axis {axis} is out of range for rank {rank}"
        )));
    }
    Ok(resolved as usize)
}

fn as_mlx_axes(axes: &[usize]) -> Vec<i32> {
    axes.iter().map(|&a| a as i32).collect()
}

/// The dims of `x` from `start` to `end`, clamped as ONNX's Shape-15 says.
fn shape_slice(x: &Array, start: i64, end: Option<i64>) -> Result<Array> {
    let dims = x.shape();
    let rank = dims.len() as i64;
    let clamp = |v: i64| (if v < 0 { v + rank } else { v }).clamp(0, rank) as usize;
    let (from, to) = (clamp(start), clamp(end.unwrap_or(rank)));
    let picked: Vec<i64> = if from < to {
        dims[from..to].to_vec()
    } else {
        Vec::new()
    };
    let len = picked.len() as i64;
    Ok(Array::from_slice(&picked, &[len])?)
}

/// The input's dims as a 1-D int64 tensor; from opset 15 only those from `start` to `end`
/// (negative values count from the end; clamped).
#[onnx_op(op = "Shape", since = 1, types(T = ANY, T1 = I64), inputs(data: T), outputs(shape: T1), shape = ShapeKeyed)]
fn shape(
    _cx: &mut Lower,
    x: Array,
    #[attr(default = 0, since = 15)] start: i64,
    #[attr(since = 15)] end: Option<i64>,
) -> Result<Array> {
    shape_slice(&x, start, end)
}

/// The number of elements, as an int64 scalar.
#[onnx_op(op = "Size", since = 1, types(T = ANY, T1 = I64), inputs(data: T), outputs(size: T1), shape = ShapeKeyed)]
fn size(_cx: &mut Lower, x: Array) -> Result<Array> {
    Ok(Array::scalar(x.size() as i64)?)
}

/// ONNX Reshape's target: 0 copies the input dim (unless `allowzero`), one -1 is inferred.
pub(crate) fn reshape_target(input: &[i64], shape: &[i64], allowzero: bool) -> Result<Vec<i64>> {
    let mut dims = Vec::with_capacity(shape.len());
    let mut infer = None;
    for (i, &d) in shape.iter().enumerate() {
        match d {
            -1 if infer.is_none() => {
                infer = Some(i);
                dims.push(1);
            }
            -1 => return Err(OpError::new("shape has more than one -1")),
            0 if !allowzero => dims.push(*input.get(i).ok_or_else(|| {
                OpError::new(format!(
                    "shape[{i}] = 0 copies a dim the input does not have"
                ))
            })?),
            d if d < 0 => return Err(OpError::new(format!("shape[{i}] = {d} is negative"))),
            d => dims.push(d),
        }
    }
    let total: i64 = input.iter().product();
    if let Some(i) = infer {
        let known: i64 = dims.iter().product();
        // ORT's CPU EP infers -1 next to a real zero (allowzero) from the nonzero dims alone:
        // [0, 6] to [0, 2, -1] gives [0, 2, 3]. ONNX calls that ambiguous; users expect ORT.
        let nonzero = |d: &[i64]| d.iter().filter(|&&v| v != 0).product::<i64>();
        let (total, known) = if known == 0 && allowzero {
            (nonzero(input), nonzero(&dims))
        } else {
            (total, known)
        };
        if known == 0 || total % known != 0 {
            return Err(OpError::new(format!(
                "cannot infer -1 reshaping {input:?} to {shape:?}"
            )));
        }
        dims[i] = total / known;
    }
    if dims.iter().product::<i64>() != total {
        return Err(OpError::new(format!(
            "cannot reshape {input:?} to {shape:?}"
        )));
    }
    Ok(dims)
}

/// The same elements in a new shape (0 copies a dim, one -1 is inferred); from opset 14, with
/// `allowzero = 1`, a 0 is a real zero-size dim.
#[onnx_op(
    op = "Reshape", since = 5, types(T = ANY, I = I64), inputs(data: T, shape: I), outputs(reshaped: T),
    shape = ShapeKeyed
)]
fn reshape(
    cx: &mut Lower,
    x: Array,
    #[host] shape: Vec<i64>,
    #[attr(default = 0, since = 14)] allowzero: i64,
) -> Result<Array> {
    Ok(ops::reshape(
        &x,
        // ORT's CPU EP reads allowzero as "equals 1": -1 still copies zeros there.
        &reshape_target(&x.shape(), &shape, allowzero == 1)?,
        cx.stream(),
    )?)
}

/// Removes `axes` (all size-1 axes when absent); each must have size 1. An axis named twice
/// (`[0, 0]`, or `[0, -2]` at rank 2) is removed once, and an empty `axes` means all size-1
/// axes, as ORT's CPU EP does.
fn squeeze_axes(cx: &Lower, x: &Array, axes: Option<Vec<i64>>) -> Result<Array> {
    let dims = x.shape();
    let axes: Vec<usize> = match axes.filter(|a| !a.is_empty()) {
        None => (0..dims.len()).filter(|&a| dims[a] == 1).collect(),
        Some(axes) => {
            let mut resolved = axes
                .iter()
                .map(|&a| normalise_axis(a, dims.len()))
                .collect::<Result<Vec<_>>>()?;
            resolved.sort_unstable();
            resolved.dedup();
            resolved
        }
    };
    if let Some(&bad) = axes.iter().find(|&&a| dims[a] != 1) {
        return Err(OpError::new(format!(
            "cannot squeeze axis {bad} of size {}",
            dims[bad]
        )));
    }
    Ok(ops::squeeze(x, &as_mlx_axes(&axes), cx.stream())?)
}

/// Removes size-1 axes: `axes` (an attribute up to opset 12, an input from 13), or all of them.
#[onnx_op(
    op = "Squeeze", since = 1, types(T = ANY, I = I64), inputs(data: T, axes: I), outputs(squeezed: T),
    shape = ShapeKeyed
)]
fn squeeze(
    cx: &mut Lower,
    x: Array,
    #[host(attr_until = 12)] axes: Option<Vec<i64>>,
) -> Result<Array> {
    squeeze_axes(cx, &x, axes)
}

/// Inserts size-1 axes at `axes`, positions of the output (negative: from its end).
fn unsqueeze_axes(cx: &Lower, x: &Array, axes: &[i64]) -> Result<Array> {
    let out_rank = x.ndim() + axes.len();
    let mut resolved: Vec<usize> = axes
        .iter()
        .map(|&a| normalise_axis(a, out_rank))
        .collect::<Result<_>>()?;
    resolved.sort_unstable();
    if resolved.windows(2).any(|w| w[0] == w[1]) {
        return Err(OpError::new(format!("axes {axes:?} repeat a position")));
    }
    Ok(ops::expand_dims(x, &as_mlx_axes(&resolved), cx.stream())?)
}

/// Inserts size-1 axes at `axes` (an attribute up to opset 12, an input from 13).
#[onnx_op(
    op = "Unsqueeze", since = 1, types(T = ANY, I = I64), inputs(data: T, axes: I), outputs(expanded: T),
    shape = ShapeKeyed
)]
fn unsqueeze(cx: &mut Lower, x: Array, #[host(attr_until = 12)] axes: Vec<i64>) -> Result<Array> {
    unsqueeze_axes(cx, &x, &axes)
}

/// The input as a matrix `[prod(dims[..axis]), prod(dims[axis..])]`; `axis` in `[-rank, rank]`.
#[onnx_op(op = "Flatten", since = 1, types(T = ANY), inputs(input: T), outputs(output: T), shape = ShapeKeyed)]
fn flatten(cx: &mut Lower, x: Array, #[attr(default = 1)] axis: i64) -> Result<Array> {
    let dims = x.shape();
    let rank = dims.len() as i64;
    let axis = if axis < 0 { axis + rank } else { axis };
    if !(0..=rank).contains(&axis) {
        return Err(OpError::new(format!(
            "axis is out of range for rank {rank}"
        )));
    }
    let (outer, inner) = dims.split_at(axis as usize);
    Ok(ops::reshape(
        &x,
        &[outer.iter().product(), inner.iter().product()],
        cx.stream(),
    )?)
}

/// Permutes the axes by `perm` (default: reversed).
#[onnx_op(op = "Transpose", since = 1, types(T = ANY), inputs(data: T), outputs(transposed: T), shape = ShapeKeyed)]
fn transpose(cx: &mut Lower, x: Array, #[attr] perm: Option<Vec<i64>>) -> Result<Array> {
    let rank = x.ndim();
    let perm: Vec<usize> = match perm {
        None => (0..rank).rev().collect(),
        Some(p) => p
            .iter()
            .map(|&a| normalise_axis(a, rank))
            .collect::<Result<_>>()?,
    };
    let mut seen = vec![false; rank];
    if perm.len() != rank || perm.iter().any(|&a| std::mem::replace(&mut seen[a], true)) {
        return Err(OpError::new(format!(
            "perm {perm:?} is not a permutation of {rank} axes"
        )));
    }
    Ok(ops::transpose(&x, &as_mlx_axes(&perm), cx.stream())?)
}

/// Joins the inputs along `axis`. As in ORT's CPU EP, an input with no elements only adds its
/// `axis` dim: its other dims need not match (the first non-empty input sets them). Where that
/// dim is not 0, ORT reserves a slab it never writes, at the end of the axis: it writes the
/// non-empty inputs one after another from the start, skipping the empty ones (found by the
/// fuzzer with the empty input first). The EP does the same, the slab zeros (ORT's holds
/// whatever its allocation held).
#[onnx_op(op = "Concat", since = 4, types(T = ANY), inputs(inputs: T), outputs(concat_result: T), shape = ShapeKeyed)]
fn concat(cx: &mut Lower, inputs: Vec<Array>, #[attr] axis: i64) -> Result<Array> {
    let s = cx.stream();
    let first = inputs
        .first()
        .ok_or_else(|| OpError::new("Concat needs an input"))?;
    let rank = first.ndim();
    if inputs.iter().any(|a| a.ndim() != rank) {
        return Err(OpError::new("the inputs differ in rank"));
    }
    let axis = normalise_axis(axis, rank)?;
    let reference = inputs.iter().find(|a| a.size() > 0).unwrap_or(first);
    let slab = |along: i64| -> Result<Array> {
        let mut dims = reference.shape();
        dims[axis] = along;
        let zero = crate::table::consts::scalar_like(0.0, reference, s)?;
        Ok(ops::broadcast_to(&zero, &dims, s)?)
    };
    let mut parts: Vec<Array> = inputs.iter().filter(|a| a.size() > 0).cloned().collect();
    let reserved: i64 = inputs
        .iter()
        .filter(|a| a.size() == 0)
        .map(|a| a.shape()[axis])
        .sum();
    if reserved > 0 || parts.is_empty() {
        parts.push(slab(reserved)?);
    }
    Ok(ops::concatenate(&parts, axis as i32, s)?)
}

/// Sizes of the parts of a Split: the given `split`, else `parts` (near-)equal chunks.
pub(crate) fn split_sizes(
    dim: i64,
    split: Option<Vec<i64>>,
    parts: usize,
    uneven_ok: bool,
) -> Result<Vec<i64>> {
    if let Some(split) = split {
        if split.len() != parts || split.iter().any(|&s| s < 0) || split.iter().sum::<i64>() != dim
        {
            return Err(OpError::new(format!(
                "split {split:?} does not cut a dim of {dim} into {parts} parts"
            )));
        }
        return Ok(split);
    }
    if parts == 0 {
        return Err(OpError::new("Split needs at least one output"));
    }
    let n = parts as i64;
    if !uneven_ok {
        if dim % n != 0 {
            return Err(OpError::new(format!(
                "a dim of {dim} does not split evenly into {parts} parts"
            )));
        }
        return Ok(vec![dim / n; parts]);
    }
    // Opset 18's num_outputs: chunks of ceil(dim / n), the last one smaller. ORT's CPU EP
    // refuses more outputs than the dim and a last chunk that would be empty (4 into 3 would
    // be [2, 2, 0]).
    let chunk = (dim + n - 1) / n;
    if dim < n || dim - (n - 1) * chunk <= 0 {
        return Err(OpError::new(format!(
            "num_outputs {parts} cannot cut a dim of {dim} into nonempty chunks (ORT's CPU EP \
             refuses that too)"
        )));
    }
    Ok((0..n).map(|i| (dim - i * chunk).min(chunk)).collect())
}

fn split_along(cx: &Lower, x: &Array, axis: i64, sizes: &[i64]) -> Result<Vec<Array>> {
    let axis = normalise_axis(axis, x.ndim())?;
    let cuts: Vec<i32> = sizes[..sizes.len().saturating_sub(1)]
        .iter()
        .scan(0i64, |at, &s| {
            *at += s;
            Some(*at as i32)
        })
        .collect();
    Ok(ops::split_at(x, &cuts, axis as i32, cx.stream())?)
}

/// Cuts the input along `axis` into the node's outputs: by `split` (an attribute up to opset
/// 12, an input from 13), else into equal parts, or from opset 18 into `num_outputs` chunks
/// (the last one smaller when the dim does not divide).
#[onnx_op(
    op = "Split", since = 2, types(T = ANY, I = I64), inputs(input: T, split: I), outputs(outputs...: T),
    shape = ShapeKeyed, claim = split_claim, declines = "both a split input and num_outputs (ONNX allows one; ORT refuses both)"
)]
fn split(
    cx: &mut Lower,
    x: Array,
    #[host(attr_until = 12)] split: Option<Vec<i64>>,
    #[attr(default = 0)] axis: i64,
    #[attr(since = 18)] num_outputs: Option<i64>,
) -> Result<Vec<Array>> {
    let parts = cx.node().output_count();
    if num_outputs.is_some_and(|n| n != parts as i64) {
        return Err(OpError::new(format!(
            "num_outputs {num_outputs:?} but the node has {parts} outputs"
        )));
    }
    let dim = x.shape()[normalise_axis(axis, x.ndim())?];
    split_along(
        cx,
        &x,
        axis,
        &split_sizes(dim, split, parts, num_outputs.is_some())?,
    )
}

/// ONNX allows a `split` input or `num_outputs`, not both; ORT refuses the node when both are
/// given (found by the fuzzer: the EP answered by `split`).
fn split_claim(node: &crate::Node) -> crate::Verdict {
    if node.attribute("num_outputs").is_some() && node.input_present(1) {
        return crate::Verdict::decline("both a split input and num_outputs (ONNX allows one)");
    }
    crate::Verdict::Claim
}

/// Whether `dims` broadcasts to `shape` without changing it (unidirectional broadcasting): no
/// higher rank, each of its trailing dims `shape`'s or 1.
pub(crate) fn broadcasts_into(dims: &[i64], shape: &[i64]) -> bool {
    dims.len() <= shape.len()
        && dims
            .iter()
            .rev()
            .zip(shape.iter().rev())
            .all(|(&d, &s)| d == s || d == 1)
}

/// numpy's broadcast of two shapes.
pub(crate) fn broadcast_shapes(a: &[i64], b: &[i64]) -> Result<Vec<i64>> {
    let rank = a.len().max(b.len());
    let at = |s: &[i64], i: usize| {
        if i + s.len() >= rank {
            s[i + s.len() - rank]
        } else {
            1
        }
    };
    (0..rank)
        .map(|i| match (at(a, i), at(b, i)) {
            (x, y) if x == y => Ok(x),
            (1, y) => Ok(y),
            (x, 1) => Ok(x),
            (x, y) => Err(OpError::new(format!(
                "shapes {a:?} and {b:?} do not broadcast ({x} vs {y})"
            ))),
        })
        .collect()
}

/// Broadcasts the input and `shape` together (numpy rules, either side may be 1).
#[onnx_op(
    op = "Expand", since = 8, types(T = ANY, I = I64), inputs(input: T, shape: I), outputs(output: T),
    shape = ShapeKeyed
)]
fn expand(cx: &mut Lower, x: Array, #[host] shape: Vec<i64>) -> Result<Array> {
    let target = broadcast_shapes(&x.shape(), &shape)?;
    Ok(ops::broadcast_to(&x, &target, cx.stream())?)
}

/// One axis of a Slice, resolved: `[start, stop)` by a positive `step`, on the axis reversed
/// first when ONNX's step was negative. Every field lies in `[0, dim]` (the step in `[1, dim]`),
/// so it fits MLX's 32-bit slice arguments whatever the inputs held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AxisSlice {
    pub reversed: bool,
    pub start: i64,
    pub stop: i64,
    pub step: i64,
}

/// Slice's clamping rules for one axis of size `dim`, as ORT's CPU EP applies them: the step is
/// clamped to `[-dim, dim]` (one step that size already leaves the axis), and an `end` of
/// `INT32_MAX` or `INT64_MAX` means "through the last element in the step's direction" (numpy's
/// `None`), so with a negative step it reaches index 0 where ONNX's clamp would stop short.
pub(crate) fn resolve_slice(dim: i64, start: i64, end: i64, step: i64) -> Result<AxisSlice> {
    if step == 0 {
        return Err(OpError::new("slice step 0"));
    }
    let empty = AxisSlice {
        reversed: false,
        start: 0,
        stop: 0,
        step: 1,
    };
    if dim <= 0 {
        return Ok(empty);
    }
    let step = step.clamp(-dim, dim);
    // Both bounds are clamped right after, so saturating cannot change the result.
    let from_end = |v: i64| if v < 0 { v.saturating_add(dim) } else { v };
    let whole_axis = end == i64::from(i32::MAX) || end == i64::MAX;
    let (start, end) = if step > 0 {
        let start = from_end(start).clamp(0, dim);
        let end = if whole_axis {
            dim
        } else {
            from_end(end).clamp(0, dim)
        };
        (start, end)
    } else {
        let start = from_end(start).clamp(0, dim - 1);
        let end = if whole_axis {
            -1
        } else {
            from_end(end).clamp(-1, dim)
        };
        (start, end)
    };
    let span = if step > 0 { end - start } else { start - end };
    let stride = step.abs();
    let count = if span > 0 {
        (span + stride - 1) / stride
    } else {
        0
    };
    if count == 0 {
        return Ok(empty);
    }
    // On the reversed axis, original index i is dim - 1 - i.
    let first = if step > 0 { start } else { dim - 1 - start };
    Ok(AxisSlice {
        reversed: step < 0,
        start: first,
        stop: first + (count - 1) * stride + 1,
        step: stride,
    })
}

fn slice_with(
    cx: &Lower,
    x: &Array,
    starts: &[i64],
    ends: &[i64],
    axes: Option<Vec<i64>>,
    steps: Option<Vec<i64>>,
) -> Result<Array> {
    let dims = x.shape();
    let axes: Vec<usize> = match axes {
        Some(a) => a
            .iter()
            .map(|&a| normalise_axis(a, dims.len()))
            .collect::<Result<_>>()?,
        None if starts.len() <= dims.len() => (0..starts.len()).collect(),
        None => {
            return Err(OpError::new(format!(
                "{} starts for rank {}",
                starts.len(),
                dims.len()
            )))
        }
    };
    let mut seen = vec![false; dims.len()];
    if axes.iter().any(|&a| std::mem::replace(&mut seen[a], true)) {
        return Err(OpError::new(format!(
            "axes {axes:?} name an axis twice (ORT's CPU EP refuses that too)"
        )));
    }
    let steps = steps.unwrap_or_else(|| vec![1; starts.len()]);
    if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
        return Err(OpError::new(
            "starts, ends, axes and steps differ in length",
        ));
    }
    let mut start: Vec<i32> = vec![0; dims.len()];
    let mut stop: Vec<i32> = dims.iter().map(|&d| d as i32).collect();
    let mut stride: Vec<i32> = vec![1; dims.len()];
    let mut reverse = Vec::new();
    for (i, &axis) in axes.iter().enumerate() {
        let resolved = resolve_slice(dims[axis], starts[i], ends[i], steps[i])?;
        if resolved.reversed {
            reverse.push(axis as i32);
        }
        // resolve_slice keeps every field within [0, dim], and dim came from an MLX shape.
        start[axis] = resolved.start as i32;
        stop[axis] = resolved.stop as i32;
        stride[axis] = resolved.step as i32;
    }
    let s = cx.stream();
    let source = if reverse.is_empty() {
        x.clone()
    } else {
        ops::flip(x, &reverse, s)?
    };
    Ok(ops::slice(&source, &start, &stop, &stride, s)?)
}

/// `data[starts:ends:steps]` on `axes`, clamped as ONNX says; negative steps walk backwards.
/// Up to opset 9 `starts`, `ends` and `axes` are attributes and the step is 1; `steps` is new in
/// opset 10.
#[onnx_op(
    op = "Slice", since = 1, types(T = ANY, I = I32 | I64),
    inputs(data: T, starts: I, ends: I, axes: I, steps: I), outputs(output: T), shape = ShapeKeyed
)]
fn slice(
    cx: &mut Lower,
    x: Array,
    #[host(attr_until = 9)] starts: Vec<i64>,
    #[host(attr_until = 9)] ends: Vec<i64>,
    #[host(attr_until = 9)] axes: Option<Vec<i64>>,
    #[host(since = 10)] steps: Option<Vec<i64>>,
) -> Result<Array> {
    slice_with(cx, &x, &starts, &ends, axes, steps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::testing::{claimed, decline_reason, declined};
    use crate::table::testing::{node, run, stream};
    use crate::{AttrValue, ElemType};
    use proptest::prelude::*;

    #[test]
    fn reshape_copies_zeros_and_infers_one_dim() {
        assert_eq!(
            reshape_target(&[2, 3, 4], &[0, -1], false).unwrap(),
            vec![2, 12]
        );
        assert_eq!(
            reshape_target(&[2, 3, 4], &[4, 0, -1], false).unwrap(),
            vec![4, 3, 2]
        );
        assert_eq!(reshape_target(&[0, 3], &[3, 0], true).unwrap(), vec![3, 0]);
        assert!(reshape_target(&[2, 3], &[-1, -1], false).is_err());
        assert!(reshape_target(&[2, 3], &[4, -1], false).is_err());
        // -1 next to a real zero: ORT infers it from the nonzero dims.
        assert_eq!(reshape_target(&[0, 3], &[-1, 0], true).unwrap(), vec![3, 0]);
        assert_eq!(reshape_target(&[0], &[0, -1], true).unwrap(), vec![0, 1]);
        assert_eq!(
            reshape_target(&[0, 6], &[0, 2, -1], true).unwrap(),
            vec![0, 2, 3]
        );
        assert!(reshape_target(&[0, 6], &[0, 4, -1], true).is_err());
        assert!(reshape_target(&[0, 3], &[0, -1], false).is_err()); // a copied 0, as in ORT
    }

    #[test]
    fn one_declaration_serves_reshape_and_shape_by_their_gates() {
        use crate::{AttrValue::Int, ElemType::*, Node};
        let reshape = |opset| {
            Node::new("Reshape", opset)
                .input(Float)
                .input(Int64)
                .output(Float)
                .attr("allowzero", Int(1))
        };
        assert!(claimed(&reshape(14)));
        let reason = decline_reason(&reshape(13));
        assert!(reason.contains("not part of Reshape-13"), "{reason}");
        for attr in ["start", "end"] {
            let shape = |opset| {
                Node::new("Shape", opset)
                    .input(Float)
                    .output(Int64)
                    .attr(attr, Int(1))
            };
            assert!(claimed(&shape(15)), "{attr}");
            let reason = decline_reason(&shape(14));
            assert!(reason.contains("not part of Shape-14"), "{reason}");
        }
    }

    #[test]
    fn one_declaration_serves_split_2_to_18_by_its_gates() {
        use crate::{
            AttrValue::{Int, Ints},
            ElemType::*,
            Node,
        };
        let parts = |node: Node| node.output(Float).output(Float);
        // split: an attribute up to opset 12, an input from 13.
        let with_attr =
            |opset| parts(Node::new("Split", opset).input(Float)).attr("split", Ints(vec![1, 2]));
        let with_input = |opset| parts(Node::new("Split", opset).input(Float).input(Int64));
        assert!(claimed(&with_attr(2)) && claimed(&with_attr(12)));
        let reason = decline_reason(&with_attr(13));
        assert!(reason.contains("not part of Split-13"), "{reason}");
        assert!(claimed(&with_input(13)));
        let reason = decline_reason(&with_input(12));
        assert!(reason.contains("input 'split' does not exist"), "{reason}");
        // num_outputs from opset 18.
        let chunks =
            |opset| parts(Node::new("Split", opset).input(Float)).attr("num_outputs", Int(2));
        assert!(claimed(&chunks(18)));
        let reason = decline_reason(&chunks(17));
        assert!(reason.contains("not part of Split-17"), "{reason}");
    }

    /// The indices a Slice takes on one axis, by ORT's CPU EP (checked against ORT 1.31.1 over
    /// these edge values), in i128 so that the reference itself cannot overflow.
    fn ort_slice_indices(dim: i64, start: i64, end: i64, step: i64) -> Vec<i64> {
        if dim == 0 {
            return Vec::new();
        }
        let (dim, step) = (
            i128::from(dim),
            i128::from(step).clamp(-i128::from(dim), i128::from(dim)),
        );
        let adjust = |v: i64| {
            if v < 0 {
                i128::from(v) + dim
            } else {
                i128::from(v)
            }
        };
        let whole = end == i64::from(i32::MAX) || end == i64::MAX;
        let (mut i, end) = if step > 0 {
            (
                adjust(start).clamp(0, dim),
                if whole {
                    dim
                } else {
                    adjust(end).clamp(0, dim)
                },
            )
        } else {
            (
                adjust(start).clamp(0, dim - 1),
                if whole {
                    -1
                } else {
                    adjust(end).clamp(-1, dim)
                },
            )
        };
        let mut out = Vec::new();
        while (step > 0 && i < end) || (step < 0 && i > end) {
            out.push(i as i64);
            i += step;
        }
        out
    }

    /// Bounds and steps where clamping and overflow matter.
    fn edge_value() -> impl Strategy<Value = i64> {
        let i32_edges = [i32::MAX, i32::MIN].map(i64::from);
        prop_oneof![
            -15i64..15,
            prop::sample::select(vec![
                i32_edges[0],
                i32_edges[0] + 1,
                i32_edges[1],
                i32_edges[1] - 1,
                1 << 32,
                i64::MAX,
                i64::MAX - 1,
                i64::MIN,
                i64::MIN + 1,
            ]),
        ]
    }

    #[test]
    fn huge_steps_take_one_element_and_int_max_ends_reach_the_front() {
        let one = resolve_slice(4, 0, 4, 1 << 31).unwrap();
        assert_eq!(resolved_indices(4, one), vec![0]);
        let back = resolve_slice(4, 3, i64::from(i32::MAX), -1).unwrap();
        assert_eq!(resolved_indices(4, back), vec![3, 2, 1, 0]);
        let min_step = resolve_slice(4, -1, i64::MIN, i64::MIN).unwrap();
        assert_eq!(resolved_indices(4, min_step), vec![3]);
    }

    fn resolved_indices(dim: i64, r: AxisSlice) -> Vec<i64> {
        (r.start..r.stop)
            .step_by(r.step as usize)
            .map(|i| if r.reversed { dim - 1 - i } else { i })
            .collect()
    }

    proptest! {
        /// Slice's clamping, huge values and negative steps pick exactly ORT's indices.
        #[test]
        fn slices_pick_ort_indices(dim in 0i64..12, start in edge_value(), end in edge_value(), step in edge_value()) {
            prop_assume!(step != 0);
            let resolved = resolve_slice(dim, start, end, step).unwrap();
            prop_assert!(0 <= resolved.start && resolved.start <= resolved.stop && resolved.stop <= dim.max(0));
            prop_assert!(1 <= resolved.step && resolved.step <= dim.max(1));
            prop_assert_eq!(resolved_indices(dim, resolved), ort_slice_indices(dim, start, end, step));
        }

        /// Splits cover the dim exactly, in as many parts as asked, each at most one chunk.
        #[test]
        fn split_sizes_partition_the_dim(dim in 0i64..40, parts in 1usize..8) {
            let n = parts as i64;
            let chunk = (dim + n - 1) / n;
            let nonempty = dim >= n && dim - (n - 1) * chunk > 0;
            match split_sizes(dim, None, parts, true) {
                Ok(_) if !nonempty => prop_assert!(false, "{dim} into {parts} must fail"),
                Err(_) if !nonempty => {}
                Ok(sizes) => {
                    prop_assert_eq!(sizes.len(), parts);
                    prop_assert_eq!(sizes.iter().sum::<i64>(), dim);
                    let chunk = (dim + parts as i64 - 1) / parts as i64;
                    prop_assert!(sizes.iter().all(|&s| (0..=chunk).contains(&s)));
                    prop_assert!(sizes.windows(2).all(|w| w[0] >= w[1]), "{:?}", sizes);
                }
                Err(e) => prop_assert!(false, "{}", e.message),
            }
            let even = split_sizes(dim, None, parts, false);
            prop_assert_eq!(even.is_ok(), dim % parts as i64 == 0);
        }

        /// Broadcasting agrees with a dim-by-dim reference and is symmetric.
        #[test]
        fn broadcast_shapes_follow_numpy(a in prop::collection::vec(1i64..4, 0..4), b in prop::collection::vec(1i64..4, 0..4)) {
            let rank = a.len().max(b.len());
            let pad = |s: &Vec<i64>| [vec![1; rank - s.len()], s.clone()].concat();
            let (pa, pb) = (pad(&a), pad(&b));
            let expected: Option<Vec<i64>> = pa.iter().zip(&pb).map(|(&x, &y)| {
                if x == y || y == 1 { Some(x) } else if x == 1 { Some(y) } else { None }
            }).collect();
            let got = broadcast_shapes(&a, &b).ok();
            prop_assert_eq!(&got, &expected);
            prop_assert_eq!(got, broadcast_shapes(&b, &a).ok());
        }

        /// Reshaping keeps the element count, and the result reshapes back.
        #[test]
        fn reshape_keeps_the_count(dims in prop::collection::vec(1i64..5, 1..4), infer in any::<prop::sample::Index>()) {
            let total: i64 = dims.iter().product();
            let mut target = vec![total];
            target.push(1);
            let i = infer.index(target.len());
            target[i] = -1;
            let out = reshape_target(&dims, &target, false).unwrap();
            prop_assert_eq!(out.iter().product::<i64>(), total);
            prop_assert_eq!(reshape_target(&out, &dims, false).unwrap(), dims);
        }
    }

    const F: ElemType = ElemType::Float;
    const I: ElemType = ElemType::Int64;

    /// 0, 1, 2... in `shape`.
    fn counting(n: usize, shape: &[i64]) -> Array {
        let values: Vec<f32> = (0..n).map(|v| v as f32).collect();
        Array::from_slice(&values, shape).unwrap()
    }

    fn ints(values: &[i64]) -> Array {
        Array::from_slice(values, &[values.len() as i64]).unwrap()
    }

    fn out(n: &crate::Node, inputs: &[Option<Array>]) -> Vec<Array> {
        run(n, inputs).unwrap()
    }

    fn values(a: &Array) -> Vec<f32> {
        a.to_vec::<f32>(&stream()).unwrap()
    }

    #[test]
    fn shape_and_size_read_dims() {
        let x = counting(24, &[2, 3, 4]);
        let s = stream();
        let all = out(&node("Shape", 13, &[F], I), &[Some(x.clone())]);
        assert_eq!(all[0].to_vec::<i64>(&s).unwrap(), vec![2, 3, 4]);
        let part = node("Shape", 15, &[F], I)
            .attr("start", AttrValue::Int(-2))
            .attr("end", AttrValue::Int(100));
        assert_eq!(
            out(&part, &[Some(x.clone())])[0].to_vec::<i64>(&s).unwrap(),
            vec![3, 4]
        );
        let size = out(&node("Size", 13, &[F], I), &[Some(x)]);
        assert_eq!(
            (size[0].shape(), size[0].to_vec::<i64>(&s).unwrap()),
            (vec![], vec![24])
        );
    }

    #[test]
    fn reshape_squeeze_unsqueeze_flatten_transpose() {
        let x = counting(24, &[2, 3, 4]);
        let r = out(
            &node("Reshape", 14, &[F, I], F),
            &[Some(x.clone()), Some(ints(&[0, -1]))],
        );
        assert_eq!(r[0].shape(), vec![2, 12]);
        let u = out(
            &node("Unsqueeze", 13, &[F, I], F),
            &[Some(x.clone()), Some(ints(&[0, -1]))],
        );
        assert_eq!(u[0].shape(), vec![1, 2, 3, 4, 1]);
        let sq = out(
            &node("Squeeze", 13, &[F, I], F),
            &[Some(u[0].clone()), Some(ints(&[-1]))],
        );
        assert_eq!(sq[0].shape(), vec![1, 2, 3, 4]);
        let all = out(&node("Squeeze", 13, &[F], F), &[Some(u[0].clone())]);
        assert_eq!(all[0].shape(), vec![2, 3, 4]);
        assert!(run(
            &node("Squeeze", 13, &[F, I], F),
            &[Some(x.clone()), Some(ints(&[0]))]
        )
        .is_err());
        let legacy = node("Unsqueeze", 11, &[F], F).attr("axes", AttrValue::Ints(vec![1]));
        assert_eq!(
            out(&legacy, &[Some(x.clone())])[0].shape(),
            vec![2, 1, 3, 4]
        );
        let flat = node("Flatten", 13, &[F], F).attr("axis", AttrValue::Int(-1));
        assert_eq!(out(&flat, &[Some(x.clone())])[0].shape(), vec![6, 4]);
        let flat0 = node("Flatten", 13, &[F], F).attr("axis", AttrValue::Int(0));
        assert_eq!(out(&flat0, &[Some(x.clone())])[0].shape(), vec![1, 24]);
        let t = out(
            &node("Transpose", 13, &[F], F),
            &[Some(counting(6, &[2, 3]))],
        );
        assert_eq!(
            (t[0].shape(), values(&t[0])),
            (vec![3, 2], vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0])
        );
        let p = node("Transpose", 13, &[F], F).attr("perm", AttrValue::Ints(vec![1, 2, 0]));
        assert_eq!(out(&p, &[Some(x)])[0].shape(), vec![3, 4, 2]);
    }

    #[test]
    fn concat_split_expand() {
        let a = counting(4, &[2, 2]);
        let b = counting(2, &[2, 1]);
        let c = out(
            &node("Concat", 13, &[F, F], F).attr("axis", AttrValue::Int(-1)),
            &[Some(a), Some(b)],
        );
        assert_eq!(
            (c[0].shape(), values(&c[0])),
            (vec![2, 3], vec![0.0, 1.0, 0.0, 2.0, 3.0, 1.0])
        );

        let x = counting(10, &[10]);
        let three = node("Split", 18, &[F, I], F).output(F).output(F);
        let parts = out(&three, &[Some(x.clone()), Some(ints(&[2, 0, 8]))]);
        let shapes: Vec<Vec<i64>> = parts.iter().map(|p| p.shape()).collect();
        assert_eq!(shapes, vec![vec![2], vec![0], vec![8]]);
        assert_eq!(values(&parts[2])[0], 2.0);
        let uneven = node("Split", 18, &[F], F)
            .attr("num_outputs", AttrValue::Int(3))
            .output(F)
            .output(F);
        let parts = out(&uneven, &[Some(x.clone())]);
        let shapes: Vec<Vec<i64>> = parts.iter().map(|p| p.shape()).collect();
        assert_eq!(shapes, vec![vec![4], vec![4], vec![2]]);
        let legacy = node("Split", 11, &[F], F).output(F);
        let halves = out(&legacy, &[Some(x.clone())]);
        assert_eq!((halves[0].shape(), halves[1].shape()), (vec![5], vec![5]));
        // 10 does not split into three equal parts.
        assert!(run(&node("Split", 11, &[F], F).output(F).output(F), &[Some(x)]).is_err());

        let e = out(
            &node("Expand", 13, &[F, I], F),
            &[Some(counting(3, &[3, 1])), Some(ints(&[2, 1, 4]))],
        );
        assert_eq!(e[0].shape(), vec![2, 3, 4]);
    }

    #[test]
    fn slice_clamps_and_walks_backwards() {
        let x = counting(20, &[4, 5]);
        let s = stream();
        // Rows 3, 1 (step -2 from the end); columns 1..end (INT64_MAX end), every other.
        let n = node("Slice", 13, &[F, I, I, I, I], F);
        let inputs = [
            Some(x.clone()),
            Some(ints(&[-1, 1])),
            Some(ints(&[-10, i64::MAX])),
            Some(ints(&[0, 1])),
            Some(ints(&[-2, 2])),
        ];
        let sliced = run(&n, &inputs).unwrap().remove(0);
        assert_eq!(sliced.shape(), vec![2, 2]);
        assert_eq!(
            sliced.to_vec::<f32>(&s).unwrap(),
            vec![16.0, 18.0, 6.0, 8.0]
        );
        // Attribute form, axes omitted; an empty range gives a zero-size result.
        let legacy = node("Slice", 9, &[F], F)
            .attr("starts", AttrValue::Ints(vec![2, 3]))
            .attr("ends", AttrValue::Ints(vec![2, 5]));
        assert_eq!(out(&legacy, &[Some(x.clone())])[0].shape(), vec![0, 2]);
        let zero_step = [
            Some(x),
            Some(ints(&[0])),
            Some(ints(&[1])),
            Some(ints(&[0])),
            Some(ints(&[0])),
        ];
        assert!(run(&n, &zero_step).is_err());
    }

    #[test]
    fn slice_bounds_are_attributes_up_to_opset_9_and_steps_new_in_10() {
        let legacy = node("Slice", 1, &[F], F)
            .attr("starts", AttrValue::Ints(vec![0]))
            .attr("ends", AttrValue::Ints(vec![1]));
        assert_eq!(declined(&legacy), None);
        let with_inputs = node("Slice", 9, &[F, I, I], F)
            .attr("starts", AttrValue::Ints(vec![0]))
            .attr("ends", AttrValue::Ints(vec![1]));
        let why = declined(&with_inputs).expect("declined");
        assert!(why.contains("does not exist in Slice-9"), "{why}");
        assert_eq!(declined(&node("Slice", 10, &[F, I, I, I, I], F)), None);
        let why = declined(&node("Slice", 10, &[F], F).attr("starts", AttrValue::Ints(vec![0])))
            .expect("declined");
        assert!(why.contains("not part of Slice-10"), "{why}");
    }
}
