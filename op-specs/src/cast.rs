//! Type conversion and identity.

use mlx_kernels::{ops, Array};

use crate::{onnx_op, Lower, Result};

/// Converts to the type named by `to`: floats to integers truncate toward zero, anything to
/// bool is `!= 0`. `saturate` and `round_mode` only concern float8/float4 targets, which are not
/// claimed.
#[onnx_op(op = "Cast", since = 6, types(T1 = ANY, T2 = ANY), inputs(input: T1), outputs(output: T2), shape = Shapeless)]
fn cast(
    cx: &mut Lower,
    x: Array,
    #[attr] to: i64,
    #[attr(name = "saturate", default = 1)] _saturate: i64,
    #[attr(name = "round_mode", default = "up")] _round_mode: String,
) -> Result<Array> {
    let target = cx.output_dtype(0)?;
    let _ = to; // the graph's output type is `to` (ONNX type inference guarantees it)
    Ok(ops::astype(&x, target, cx.stream())?)
}

/// Converts `input` to the element type of `target_type`.
#[onnx_op(
    op = "CastLike", since = 15, types(T1 = ANY, T2 = ANY),
    inputs(input: T1, target_type: T2), outputs(output: T2), shape = Shapeless
)]
fn cast_like(
    cx: &mut Lower,
    x: Array,
    target: Array,
    #[attr(name = "saturate", default = 1)] _saturate: i64,
    #[attr(name = "round_mode", default = "up")] _round_mode: String,
) -> Result<Array> {
    Ok(ops::astype(&x, target.dtype(), cx.stream())?)
}

/// The input, unchanged.
#[onnx_op(op = "Identity", since = 1, types(T = ANY), inputs(input: T), outputs(output: T), shape = Shapeless)]
fn identity(_cx: &mut Lower, x: Array) -> Result<Array> {
    Ok(x)
}
