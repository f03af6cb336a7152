//! Selecting and reordering along an axis: TopK, ReverseSequence, Compress, NonZero,
//! CenterCropPad.

use mlx_kernels::{ops, Array, Dtype};

use crate::shape::{normalise_axis, resolve_slice};
use crate::table::consts::scalar;
use crate::{onnx_op, Lower, OpError, Result};

/// ORT's CPU EP reads `k` as a 32-bit unsigned count: a negative k fails, and a larger one keeps
/// its low 32 bits (k = 2^40 selects nothing, 2^32 + 2 selects two) before it is checked
/// against the axis.
fn effective_k(k: i64, dim: i64) -> Result<i64> {
    if k < 0 {
        return Err(OpError::new(format!("k = {k} is negative")));
    }
    let k32 = i64::from(k as u32);
    if k32 > dim {
        return Err(OpError::new(format!(
            "k = {k32} is larger than the axis ({dim})"
        )));
    }
    Ok(k32)
}

fn top_k_of(cx: &Lower, x: &Array, k: i64, axis: i64, largest: bool) -> Result<Vec<Array>> {
    let s = cx.stream();
    let axis = normalise_axis(axis, x.ndim())?;
    let dim = x.shape()[axis];
    let k = effective_k(k, dim)?;
    // MLX's argsort is stable, so equal values keep their order: the lower index first, as
    // ONNX wants. Largest-first sorts an order-reversing key: negation for floats, bitwise
    // NOT for integers (negating the type's minimum would overflow to itself).
    let key = match (largest, x.dtype().is_float()) {
        (false, _) => x.clone(),
        (true, true) => ops::negative(x, s)?,
        (true, false) => ops::bitwise_invert(x, s)?,
    };
    let order = ops::argsort(&key, axis as i32, s)?;
    let dims = x.shape();
    let (mut start, mut stop) = (
        vec![0i32; dims.len()],
        dims.iter().map(|&d| d as i32).collect::<Vec<_>>(),
    );
    start[axis] = 0;
    stop[axis] = k as i32;
    let picked = ops::slice(&order, &start, &stop, &vec![1; dims.len()], s)?;
    let values = ops::take_along_axis(x, &picked, axis as i32, s)?;
    Ok(vec![values, ops::astype(&picked, Dtype::I64, s)?])
}

/// `sorted = 0` leaves the order of the k results to the implementation, and ORT's CPU EP
/// returns them in the order its selection algorithm leaves them (a heap or a partition,
/// depending on k and the axis): a stable sort cannot reproduce that.
/// ORT's CPU EP also reads `largest` and `sorted` as "equals 1": `largest = -1` selects the
/// smallest and `sorted = 2` is unsorted there; such values are left to it too.
fn top_k_claim(node: &crate::Node) -> crate::Verdict {
    if let Some(sorted) = node.attr_as::<i64>("sorted") {
        if sorted != 1 {
            return crate::Verdict::decline(format!(
                "sorted = {sorted}: ORT's CPU EP returns the top k in its selection algorithm's \
                 order, which this EP does not reproduce"
            ));
        }
    }
    match node.attr_as::<i64>("largest") {
        Some(largest) if largest != 0 && largest != 1 => crate::Verdict::decline(format!(
            "largest = {largest} (ORT's CPU EP reads it as 'equals 1')"
        )),
        _ => crate::Verdict::Claim,
    }
}

/// The `k` largest (or, from opset 11, with `largest = 0`, smallest) values along `axis` and
/// their indices, sorted; equal values by lower index first. `k` is an attribute up to opset 9
/// and the input `K` from 10; integer types and `largest`/`sorted` come with opset 11 (`sorted`
/// is left unread: the claim admits only 1, the order this lowering always gives).
#[onnx_op(
    op = "TopK", since = 1, types(T = FLOAT | since(11, INT), I = I64), ignores(sorted: i64 since 11),
    inputs(X: T, K: I), outputs(Values: T, Indices: I), shape = ShapeKeyed, claim = top_k_claim,
    declines = "sorted other than 1 (ORT's order is its selection algorithm's); largest other than 0 or 1"
)]
fn top_k(
    cx: &mut Lower,
    x: Array,
    #[host(attr_until = 9, name = "k")] k: i64,
    #[attr(default = -1)] axis: i64,
    #[attr(default = 1, since = 11)] largest: i64,
) -> Result<Vec<Array>> {
    top_k_of(cx, &x, k, axis, largest != 0)
}

/// ONNX allows only 0 and 1 for the two axes; ORT's CPU EP accepts any pair of different values
/// below 2 and reads only whether `time_axis` is 0 (batch_axis -4 acts as 1). Leave any other
/// pair to it.
fn reverse_sequence_claim(node: &crate::Node) -> crate::Verdict {
    let (batch, time) = (
        node.attr_or("batch_axis", 1i64),
        node.attr_or("time_axis", 0i64),
    );
    if [(batch, time), (time, batch)].contains(&(0, 1)) {
        crate::Verdict::Claim
    } else {
        crate::Verdict::decline(format!(
            "batch_axis {batch} and time_axis {time} are not 0 and 1 (ORT's CPU EP reads such \
             pairs its own way)"
        ))
    }
}

/// Reverses the first `sequence_lens[b]` steps along `time_axis` of each batch entry `b`; a
/// length outside `[0, steps]` fails the run, as in ORT's CPU EP.
#[onnx_op(
    op = "ReverseSequence", since = 10, types(T = ANY, I = I64), inputs(input: T, sequence_lens: I), outputs(Y: T),
    shape = ShapeKeyed, claim = reverse_sequence_claim, declines = "axes other than 0 and 1"
)]
fn reverse_sequence(
    cx: &mut Lower,
    x: Array,
    lens: Array,
    #[attr(default = 1)] batch_axis: i64,
    #[attr(default = 0)] time_axis: i64,
) -> Result<Array> {
    let s = cx.stream();
    let (batch_axis, time_axis) = (
        normalise_axis(batch_axis, x.ndim())?,
        normalise_axis(time_axis, x.ndim())?,
    );
    if batch_axis == time_axis || x.ndim() < 2 {
        return Err(OpError::new(
            "batch_axis and time_axis must be two different axes",
        ));
    }
    let dims = x.shape();
    let steps = dims[time_axis];
    if lens.shape() != [dims[batch_axis]] {
        return Err(OpError::new(format!(
            "sequence_lens has shape {:?} for a batch of {}",
            lens.shape(),
            dims[batch_axis]
        )));
    }
    let along = |axis: usize, a: Array| -> Result<Array> {
        let mut shape = vec![1i64; dims.len()];
        shape[axis] = dims[axis];
        Ok(ops::reshape(&a, &shape, s)?)
    };
    let t = along(
        time_axis,
        ops::arange(0.0, steps as f64, 1.0, Dtype::I64, s)?,
    )?;
    cx.require_in_range(
        &lens,
        0,
        steps,
        format!("a sequence length is outside [0, {steps}] (ORT's CPU EP fails there too)"),
    )?;
    let lens = along(batch_axis, lens)?;
    let inside = ops::less(&t, &lens, s)?;
    let mirrored = ops::subtract(
        &ops::subtract(&lens, &scalar(1.0, Dtype::I64, s)?, s)?,
        &t,
        s,
    )?;
    let source = ops::broadcast_to(&ops::where_(&inside, &mirrored, &t, s)?, &dims, s)?;
    Ok(ops::take_along_axis(&x, &source, time_axis as i32, s)?)
}

/// The slices along `axis` (the flattened input without one) where `condition` is true.
#[onnx_op(
    op = "Compress", since = 9, types(T = ANY, B = BOOL), inputs(input: T, condition: B), outputs(output: T), shape = Eager
)]
fn compress(
    cx: &mut Lower,
    x: Array,
    condition: Array,
    #[attr] axis: Option<i64>,
) -> Result<Array> {
    let s = cx.stream();
    let keep: Vec<i32> = condition
        .to_vec::<bool>(s)?
        .iter()
        .enumerate()
        .filter_map(|(i, &c)| c.then_some(i as i32))
        .collect();
    let (source, axis) = match axis {
        Some(a) => (x.clone(), normalise_axis(a, x.ndim())?),
        None => (ops::reshape(&x, &[x.size() as i64], s)?, 0),
    };
    let dim = source.shape()[axis] as i32;
    let keep: Vec<i32> = keep.into_iter().filter(|&i| i < dim).collect();
    let index = Array::from_slice(&keep, &[keep.len() as i64])?;
    Ok(ops::take(&source, &index, axis as i32, s)?)
}

/// The coordinates of the non-zero elements (NaN counts, -0.0 does not), `[rank, count]` in
/// row-major order; a 0-d input reads as a one-element vector, as ORT reads it. The count is
/// the data's, so the node runs eagerly and reads a mask of its input on the host.
#[onnx_op(
    op = "NonZero", since = 9, types(T = ANY, I = I64), inputs(X: T), outputs(Y: I), shape = Eager
)]
fn non_zero(cx: &mut Lower, x: Array) -> Result<Array> {
    let s = cx.stream();
    let zero = crate::table::consts::scalar_like(0.0, &x, s)?;
    let mask = ops::not_equal(&x, &zero, s)?.to_vec::<bool>(s)?;
    let dims = match x.shape() {
        shape if shape.is_empty() => vec![1],
        shape => shape,
    };
    let hits: Vec<usize> = mask
        .iter()
        .enumerate()
        .filter_map(|(i, &set)| set.then_some(i))
        .collect();
    let mut coordinates = vec![0i64; dims.len() * hits.len()];
    let mut stride = 1usize;
    for (axis, &dim) in dims.iter().enumerate().rev() {
        let row = &mut coordinates[axis * hits.len()..(axis + 1) * hits.len()];
        for (slot, &flat) in row.iter_mut().zip(&hits) {
            *slot = ((flat / stride) % dim as usize) as i64;
        }
        stride *= dim as usize;
    }
    Ok(Array::from_slice(
        &coordinates,
        &[dims.len() as i64, hits.len() as i64],
    )?)
}

/// Crops (centred) or zero-pads (centred) each of `axes` to the given `shape`.
#[onnx_op(
    op = "CenterCropPad", since = 18, types(T = ANY, I = I64), inputs(input_data: T, shape: I), outputs(output_data: T),
    shape = ShapeKeyed
)]
fn center_crop_pad(
    cx: &mut Lower,
    x: Array,
    #[host] shape: Vec<i64>,
    #[attr] axes: Option<Vec<i64>>,
) -> Result<Array> {
    let s = cx.stream();
    let axes: Vec<usize> = match axes {
        Some(a) => a
            .iter()
            .map(|&a| normalise_axis(a, x.ndim()))
            .collect::<Result<_>>()?,
        None => (0..x.ndim()).collect(),
    };
    let mut seen = vec![false; x.ndim()];
    if axes.iter().any(|&a| std::mem::replace(&mut seen[a], true)) {
        return Err(OpError::new(format!(
            "axes {axes:?} name an axis twice (ORT fails there too)"
        )));
    }
    if axes.len() != shape.len() {
        return Err(OpError::new(format!(
            "shape {shape:?} does not fit axes {axes:?}"
        )));
    }
    let zero = crate::table::consts::scalar_like(0.0, &x, s)?;
    axes.iter()
        .zip(&shape)
        .try_fold(x, |acc, (&axis, &target)| {
            let dims = acc.shape();
            let dim = dims[axis];
            if target <= dim {
                // ORT runs ONNX's function body: Slice from (dim - target) / 2 for target
                // elements, in wrapping int64 arithmetic, clamped as Slice clamps. A negative
                // target crops to nothing; INT64_MIN wraps around to the whole axis.
                let from = dim.wrapping_sub(target) / 2;
                let kept = resolve_slice(dim, from, from.wrapping_add(target), 1)?;
                let (mut start, mut stop) = (
                    vec![0i32; dims.len()],
                    dims.iter().map(|&d| d as i32).collect::<Vec<_>>(),
                );
                start[axis] = kept.start as i32;
                stop[axis] = kept.stop as i32;
                Ok(ops::slice(&acc, &start, &stop, &vec![1; dims.len()], s)?)
            } else {
                let before = (target - dim) / 2;
                let after = target - dim - before;
                Ok(ops::pad(
                    &acc,
                    &[axis as i32],
                    &[before as i32],
                    &[after as i32],
                    &zero,
                    false,
                    s,
                )?)
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::testing::{claimed, decline_reason};

    #[test]
    fn k_keeps_its_low_32_bits_as_in_ort() {
        assert_eq!(effective_k(0, 4).unwrap(), 0);
        assert_eq!(effective_k(4, 4).unwrap(), 4);
        assert_eq!(effective_k(1 << 40, 4).unwrap(), 0);
        assert_eq!(effective_k((1 << 32) + 2, 4).unwrap(), 2);
        assert!(effective_k(5, 4).is_err());
        assert!(effective_k(-1, 4).is_err());
        assert!(effective_k(i64::MAX, 4).is_err());
    }

    /// A TopK node on `t`, with the input K when `k_input`.
    fn top_k_node(opset: i64, t: crate::ElemType, k_input: bool) -> crate::Node {
        let node = crate::Node::new("TopK", opset).input(t);
        let node = if k_input {
            node.input(crate::ElemType::Int64)
        } else {
            node
        };
        node.output(t).output(crate::ElemType::Int64)
    }

    #[test]
    fn one_declaration_serves_top_k_1_to_11_by_its_gates() {
        use crate::{AttrValue::Int, ElemType};
        let f = ElemType::Float;
        // k: an attribute up to opset 9, the input K from 10.
        let with_attr = |opset| top_k_node(opset, f, false).attr("k", Int(2));
        assert!(claimed(&with_attr(1)) && claimed(&with_attr(9)));
        let reason = decline_reason(&with_attr(10));
        assert!(reason.contains("not part of TopK-10"), "{reason}");
        let reason = decline_reason(&top_k_node(9, f, false));
        assert!(reason.contains("required attribute 'k'"), "{reason}");
        assert!(claimed(&top_k_node(10, f, true)));
        let reason = decline_reason(&top_k_node(9, f, true).attr("k", Int(2)));
        assert!(reason.contains("input 'K' does not exist"), "{reason}");
        // Integer types, largest and sorted from opset 11.
        assert!(claimed(&top_k_node(11, ElemType::Int32, true)));
        let reason = decline_reason(&top_k_node(10, ElemType::Int32, true));
        assert!(reason.contains("TopK-10"), "{reason}");
        for attr in ["largest", "sorted"] {
            let set = |opset| top_k_node(opset, f, true).attr(attr, Int(1));
            assert!(claimed(&set(11)), "{attr}");
            let reason = decline_reason(&set(10));
            assert!(reason.contains("not part of TopK-10"), "{reason}");
        }
    }

    #[test]
    fn unsorted_top_k_is_declined() {
        let node = crate::Node::new("TopK", 11).attr("sorted", crate::AttrValue::Int(0));
        assert!(!top_k_claim(&node).is_claim());
        let sorted = crate::Node::new("TopK", 11).attr("sorted", crate::AttrValue::Int(1));
        assert!(top_k_claim(&sorted).is_claim());
    }
}
