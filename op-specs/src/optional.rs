//! Optional tensors: Optional, OptionalHasElement, OptionalGetElement.
//!
//! An optional that holds a tensor is that tensor inside a plan. Like a sequence it never
//! crosses a fused node's edge, and the only ways to make an empty one (a graph input, or
//! Optional with its `type` attribute, a TypeProto ORT's C API cannot describe) stay on ORT's
//! CPU EP: every optional an MLX plan sees holds its tensor.

use mlx_kernels::{Array, Dtype};

use crate::table::consts::scalar;
use crate::{onnx_op, Lower, OpError, Result};

/// An optional holding `input` (a node without one carries a `type` attribute and is declined).
#[onnx_op(
    op = "Optional", since = 15, types(V = ANY), inputs(input: V), outputs(output: ?V),
    shape = Shapeless, declines = "no input (an empty optional of the `type` attribute)"
)]
fn optional(_cx: &mut Lower, input: Option<Array>) -> Result<Array> {
    // Without an input the node carries `type`, which the generic claim refuses.
    input.ok_or_else(|| OpError::new("an empty optional is not made on MLX"))
}

/// Whether the optional holds a tensor: always, for an optional an MLX plan sees (see above).
#[onnx_op(
    op = "OptionalHasElement", since = 15, types(V = ANY, B = BOOL), inputs(input: ?V), outputs(output: B),
    shape = Shapeless, declines = "no input, or a plain tensor or sequence (opset 18 accepts them)"
)]
fn optional_has_element(cx: &mut Lower, _input: Array) -> Result<Array> {
    scalar(1.0, Dtype::Bool, cx.stream())
}

/// The tensor the optional holds.
#[onnx_op(
    op = "OptionalGetElement", since = 15, types(V = ANY), inputs(input: ?V), outputs(output: V),
    shape = Shapeless, declines = "a plain tensor or sequence (opset 18 accepts them), or an optional sequence"
)]
fn optional_get_element(_cx: &mut Lower, input: Array) -> Result<Array> {
    Ok(input)
}
