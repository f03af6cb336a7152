//! Normalisation: LayerNormalization.

use mlx_kernels::{ops, Array, Dtype};

use crate::shape::normalise_axis;
use crate::table::consts::scalar;
use crate::{onnx_op, Lower, Result};

/// `(x - mean) / sqrt(var + epsilon) * Scale + B` over the axes from `axis` on, computed in
/// float32 (`stash_type` 1); the optional outputs are the mean and `1 / sqrt(var + epsilon)`.
#[onnx_op(
    op = "LayerNormalization", since = 17, types(T = FLOAT, U = F32),
    inputs(X: T, Scale: T, B: T), outputs(Y: T, Mean?: U, InvStdDev?: U), shape = ShapeKeyed,
    claim = layer_norm_claim, declines = "stash_type other than 1 (float32)"
)]
fn layer_normalization(
    cx: &mut Lower,
    x: Array,
    scale: Array,
    bias: Option<Array>,
    #[attr(default = -1)] axis: i64,
    #[attr(default = 1e-5)] epsilon: f32,
    #[attr(default = 1)] stash_type: i64,
) -> Result<Vec<Array>> {
    let _ = stash_type; // declined unless 1, see the claim
    let s = cx.stream();
    let rank = x.ndim();
    let axis = normalise_axis(axis, rank)?;
    let only_y = cx.node().output_count() == 1;
    if only_y
        && axis + 1 == rank
        && scale.ndim() <= 1
        && bias.as_ref().is_none_or(|b| b.ndim() <= 1)
    {
        // MLX's fused kernel normalises the last axis and accumulates in float32.
        return Ok(vec![ops::layer_norm(
            &x,
            Some(&scale),
            bias.as_ref(),
            epsilon,
            s,
        )?]);
    }
    layer_norm_general(&x, &scale, bias.as_ref(), axis, epsilon, s)
}

fn layer_norm_claim(node: &dyn crate::NodeView) -> crate::Verdict {
    match node.attribute("stash_type") {
        None | Some(crate::AttrValue::Int(1)) => crate::Verdict::Claim,
        Some(other) => {
            crate::Verdict::decline(format!("stash_type {other:?}: only float32 statistics"))
        }
    }
}

/// The general path: statistics in float32 over `axes`, all three outputs.
fn layer_norm_general(
    x: &Array,
    scale: &Array,
    bias: Option<&Array>,
    axis: usize,
    epsilon: f32,
    s: &mlx_kernels::Stream,
) -> Result<Vec<Array>> {
    let axes: Vec<i32> = (axis as i32..x.ndim() as i32).collect();
    let wide = ops::astype(x, Dtype::F32, s)?;
    let mean = ops::mean(&wide, &axes, true, s)?;
    let centered = ops::subtract(&wide, &mean, s)?;
    let variance = ops::mean(&ops::multiply(&centered, &centered, s)?, &axes, true, s)?;
    let inv_std = ops::rsqrt(
        &ops::add(&variance, &scalar(epsilon.into(), Dtype::F32, s)?, s)?,
        s,
    )?;
    let normalised = ops::multiply(&centered, &inv_std, s)?;
    let scaled = ops::multiply(&normalised, &ops::astype(scale, Dtype::F32, s)?, s)?;
    let shifted = match bias {
        Some(b) => ops::add(&scaled, &ops::astype(b, Dtype::F32, s)?, s)?,
        None => scaled,
    };
    Ok(vec![ops::astype(&shifted, x.dtype(), s)?, mean, inv_std])
}
