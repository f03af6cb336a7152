//! Sequences of tensors (`seq(tensor)`): SequenceEmpty, SequenceConstruct, SequenceInsert,
//! SequenceAt, SequenceErase, SequenceLength, SplitToSequence, ConcatFromSequence.
//!
//! A sequence lives only inside a plan, as the list of its tensors' arrays: ORT passes tensors
//! across a plugin EP's fused node, so the partition keeps a sequence's producer and all its
//! consumers on the same side (`ep/src/capability.rs`). Positions are read on the host, so a
//! position computed from data makes the plan run eagerly.

use mlx_kernels::{ops, Array, Dtype};

use crate::shape::normalise_axis;
use crate::table::consts::scalar;
use crate::{onnx_op, Lower, Node, OpError, Result, Sequence, Verdict};

/// `position` in `[-len, len]` (`inclusive_end`: an insertion point) or `[-len, len)`, made
/// non-negative; ORT fails the run outside it.
fn position(position: i64, len: usize, inclusive_end: bool) -> Result<usize> {
    let len = len as i64;
    let end = if inclusive_end { len } else { len - 1 };
    if !(-len..=end).contains(&position) {
        return Err(OpError::new(format!(
            "position {position} is outside [{}, {end}] for a sequence of {len}",
            -len
        )));
    }
    Ok(if position < 0 {
        position + len
    } else {
        position
    } as usize)
}

/// An empty sequence of the output's type, which `dtype` (default float) names.
fn empty_claim(node: &Node) -> Verdict {
    if !node.names_output_type(node.attr_or("dtype", 1i64)) {
        return Verdict::decline("dtype is not the output's element type");
    }
    Verdict::Claim
}

/// A sequence with no tensor.
#[onnx_op(
    op = "SequenceEmpty", since = 11, types(T = ANY), outputs(output: [T]), ignores(dtype: i64),
    shape = Shapeless, claim = empty_claim, declines = "a dtype that is not the output's element type"
)]
fn sequence_empty(_cx: &mut Lower) -> Result<Sequence> {
    Ok(Sequence(Vec::new()))
}

/// The sequence of the inputs, in order.
#[onnx_op(
    op = "SequenceConstruct", since = 11, types(T = ANY), inputs(inputs: T), outputs(output_sequence: [T]),
    shape = Shapeless
)]
fn sequence_construct(_cx: &mut Lower, inputs: Vec<Array>) -> Result<Sequence> {
    Ok(Sequence(inputs))
}

/// `tensor` inserted before `position` (default: at the end).
#[onnx_op(
    op = "SequenceInsert", since = 11, types(T = ANY, I = I32 | I64),
    inputs(input_sequence: [T], tensor: T, position: I), outputs(output_sequence: [T]), shape = ShapeKeyed
)]
fn sequence_insert(
    _cx: &mut Lower,
    input_sequence: Sequence,
    tensor: Array,
    #[host] at: Option<i64>,
) -> Result<Sequence> {
    let mut tensors = input_sequence.0;
    let index = match at {
        Some(at) => position(at, tensors.len(), true)?,
        None => tensors.len(),
    };
    tensors.insert(index, tensor);
    Ok(Sequence(tensors))
}

/// The tensor at `position`.
#[onnx_op(
    op = "SequenceAt", since = 11, types(T = ANY, I = I32 | I64),
    inputs(input_sequence: [T], position: I), outputs(tensor: T), shape = ShapeKeyed
)]
fn sequence_at(_cx: &mut Lower, input_sequence: Sequence, #[host] at: i64) -> Result<Array> {
    let tensors = input_sequence.0;
    Ok(tensors[position(at, tensors.len(), false)?].clone())
}

/// The sequence without the tensor at `position` (default: the last).
#[onnx_op(
    op = "SequenceErase", since = 11, types(T = ANY, I = I32 | I64),
    inputs(input_sequence: [T], position: I), outputs(output_sequence: [T]), shape = ShapeKeyed
)]
fn sequence_erase(
    _cx: &mut Lower,
    input_sequence: Sequence,
    #[host] at: Option<i64>,
) -> Result<Sequence> {
    let mut tensors = input_sequence.0;
    let index = position(at.unwrap_or(-1), tensors.len(), false)?;
    tensors.remove(index);
    Ok(Sequence(tensors))
}

/// How many tensors the sequence holds, as an int64 scalar.
#[onnx_op(
    op = "SequenceLength", since = 11, types(S = ANY, I = I64), inputs(input_sequence: [S]),
    outputs(length: I), shape = Shapeless
)]
fn sequence_length(cx: &mut Lower, input_sequence: Sequence) -> Result<Array> {
    scalar(input_sequence.0.len() as f64, Dtype::I64, cx.stream())
}

/// `input` cut along `axis`: into chunks of `split` (a scalar; the last may be shorter), of the
/// sizes `split` lists, or (no `split`) into pieces of one, without the axis when `keepdims` is 0.
#[onnx_op(
    op = "SplitToSequence", since = 11, types(T = ANY, I = I32 | I64), inputs(input: T, split: I),
    outputs(output_sequence: [T]), shape = ShapeKeyed
)]
fn split_to_sequence(
    cx: &mut Lower,
    input: Array,
    #[host] split: Option<Vec<i64>>,
    #[attr(default = 0)] axis: i64,
    #[attr(default = 1)] keepdims: i64,
) -> Result<Sequence> {
    let s = cx.stream();
    let dims = input.shape();
    let axis = normalise_axis(axis, dims.len())?;
    let length = dims[axis];
    // A scalar split is a chunk size; a 1-D one lists sizes (one value of an unknown rank
    // reads as a chunk size: as a list it must be the whole axis, which cuts alike).
    let listed = cx.node().input_rank(1) == Some(1);
    let squeeze = split.is_none() && keepdims == 0;
    let sizes: Vec<i64> = match split {
        None => vec![1; length as usize],
        Some(split) if split.len() == 1 && !listed => {
            let chunk = split[0];
            if chunk < 1 {
                return Err(OpError::new(format!(
                    "a split of {chunk}: it must be at least 1"
                )));
            }
            let full = length / chunk;
            let mut sizes = vec![chunk; full as usize];
            if length % chunk != 0 {
                sizes.push(length % chunk);
            }
            sizes
        }
        Some(sizes) => {
            if sizes.iter().any(|&size| size < 0) || sizes.iter().sum::<i64>() != length {
                return Err(OpError::new(format!(
                    "split {sizes:?} does not cut an axis of {length}"
                )));
            }
            sizes
        }
    };
    let mut start = 0i64;
    let mut pieces = Vec::with_capacity(sizes.len());
    for size in sizes {
        let mut from = vec![0i32; dims.len()];
        let mut to: Vec<i32> = dims.iter().map(|&d| d as i32).collect();
        from[axis] = start as i32;
        to[axis] = (start + size) as i32;
        let piece = ops::slice(&input, &from, &to, &vec![1; dims.len()], s)?;
        pieces.push(if squeeze {
            ops::squeeze(&piece, &[axis as i32], s)?
        } else {
            piece
        });
        start += size;
    }
    Ok(Sequence(pieces))
}

/// The sequence's tensors joined along `axis`, or stacked along a new one when `new_axis` is 1.
#[onnx_op(
    op = "ConcatFromSequence", since = 11, types(T = ANY), inputs(input_sequence: [T]),
    outputs(concat_result: T), shape = ShapeKeyed
)]
fn concat_from_sequence(
    cx: &mut Lower,
    input_sequence: Sequence,
    #[attr] axis: i64,
    #[attr(default = 0)] new_axis: i64,
) -> Result<Array> {
    let s = cx.stream();
    let tensors = input_sequence.0;
    let Some(first) = tensors.first() else {
        return Err(OpError::new("an empty sequence has nothing to concatenate"));
    };
    let rank = first.ndim() + usize::from(new_axis == 1);
    let axis = normalise_axis(axis, rank)? as i32;
    Ok(if new_axis == 1 {
        ops::stack(&tensors, axis, s)?
    } else {
        ops::concatenate(&tensors, axis, s)?
    })
}
