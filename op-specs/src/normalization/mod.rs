//! Normalisation: LayerNormalization, RMSNormalization, InstanceNormalization,
//! MeanVarianceNormalization, LpNormalization, LRN; and inference-mode Dropout. A residual sum
//! that a layer norm reads joins it in one kernel (`residual`).

pub(crate) mod residual;

use mlx_kernels::{custom, ops, Array, Dtype};

use crate::shape::normalise_axis;
use crate::table::consts::scalar;
use crate::{onnx_op, Lower, Result};

/// `a` as `dtype`; `a` itself when it already is (no array, nothing for MLX to schedule).
pub(crate) fn cast(a: &Array, dtype: Dtype, s: &mlx_kernels::Stream) -> Result<Array> {
    if a.dtype() == dtype {
        return Ok(a.clone());
    }
    Ok(ops::astype(a, dtype, s)?)
}

/// `(x - mean) / sqrt(var + epsilon) * Scale + B` over the axes from `axis` on, computed in
/// float32 (`stash_type` 1); the optional outputs are the mean and `1 / sqrt(var + epsilon)`.
/// `Y` takes X's type: under the `precision` option X arrives in the half type (the row
/// widens) while Scale and B stay float32.
#[onnx_op(
    op = "LayerNormalization", precision = Widens, since = 17, types(T = FLOAT, U = F32),
    ignores(stash_type: i64), inputs(X: T, Scale: T, B: T), outputs(Y: T, Mean?: U, InvStdDev?: U),
    shape = ShapeKeyed, claim = layer_norm_claim, declines = "stash_type other than 1 (float32)"
)]
fn layer_normalization(
    cx: &mut Lower,
    x: Array,
    scale: Array,
    bias: Option<Array>,
    #[attr(default = -1)] axis: i64,
    #[attr(default = 1e-5)] epsilon: f32,
) -> Result<Vec<Array>> {
    let s = cx.stream();
    let rank = x.ndim();
    let axis = normalise_axis(axis, rank)?;
    require_norm_shapes(&x, axis, &[("Scale", Some(&scale)), ("B", bias.as_ref())])?;
    let only_y = cx.node().output_count() == 1;
    // MLX's fused kernel takes only a per-element weight and bias of the last axis; ONNX also
    // allows them to broadcast (a scale of shape [1], say), which the general path does.
    let last = x.shape().last().copied();
    let per_element = |p: &Array| p.ndim() == 1 && p.shape().first().copied() == last;
    if only_y && axis + 1 == rank && per_element(&scale) && bias.as_ref().is_none_or(per_element) {
        let weight = float32_constant(cx, "scale", 1, &scale)?;
        let bias = match &bias {
            Some(b) => Some(float32_constant(cx, "bias", 2, b)?),
            None => None,
        };
        let output = x.dtype();
        if let Some(y) = residual::normalised_sum(cx, &x, &weight, bias.as_ref(), epsilon, output) {
            return Ok(vec![y]);
        }
        return Ok(vec![layer_norm_rounded(
            &x,
            &weight,
            bias.as_ref(),
            epsilon,
            output,
            s,
        )?]);
    }
    layer_norm_general(&x, &scale, bias.as_ref(), axis, epsilon, s)
}

/// `(x - mean) / std · weight + bias` over the last axis, in float32 (`weight` and `bias`
/// float32, 1-D), rounded once to `output`. MLX's fused kernel normalises in float32 but
/// rounds the normalised x to x's type before the weight and bias, where ORT rounds once at the
/// end (a float16 x / std that underflows there, times a scale of 65504, must not give 0). On
/// MLX's CUDA backend one kernel reads `x` as it is and writes `output`; elsewhere MLX's fused
/// kernel runs on float32 between casts.
pub(crate) fn layer_norm_rounded(
    x: &Array,
    weight: &Array,
    bias: Option<&Array>,
    epsilon: f32,
    output: Dtype,
    s: &mlx_kernels::Stream,
) -> Result<Array> {
    let width = x.shape().last().copied().unwrap_or(0);
    if x.size() > 0
        && custom::layer_norm_runs_on(s)
        && custom::layer_norm_takes(width, x.dtype(), output)
    {
        return Ok(custom::layer_norm(x, weight, bias, epsilon, output, s)?);
    }
    let y = ops::layer_norm(&cast(x, Dtype::F32, s)?, Some(weight), bias, epsilon, s)?;
    cast(&y, output, s)
}

/// The shapes ORT's layer norm kernels take. `X.shape[axis:]` must not be empty (there is
/// nothing to take the statistics of), even when `X` is empty anyway. Each parameter (`params`:
/// its name and value) must broadcast to `X` without changing `X`'s shape: no higher rank, each
/// of its dims `X`'s or 1. A scale of `[8]` over `X.shape[axis:] = [1]` would otherwise widen
/// the output to 8 (found by the fuzzer), where ORT refuses the run.
pub(crate) fn require_norm_shapes(
    x: &Array,
    axis: usize,
    params: &[(&str, Option<&Array>)],
) -> Result<()> {
    let shape = x.shape();
    if shape[axis.min(x.ndim())..].contains(&0) {
        return Err(crate::OpError::new(format!(
            "X has shape {shape:?}: the size of X.shape[axis:] (axis {axis}) must be at least 1"
        )));
    }
    for &(name, param) in params {
        let Some(param) = param else { continue };
        let dims = param.shape();
        if !crate::shape::broadcasts_into(&dims, &shape) {
            return Err(crate::OpError::new(format!(
                "{name} has shape {dims:?}: it must match X.shape[axis:] (X {shape:?}, axis \
                 {axis}) or broadcast to X without changing X's shape, as ORT's CPU EP requires"
            )));
        }
    }
    Ok(())
}

/// `stash_type` (ignored by the lowerings) is the statistics' type: only float32 (1) is computed.
pub(crate) fn layer_norm_claim(node: &crate::Node) -> crate::Verdict {
    match node.attr_or("stash_type", 1i64) {
        1 => crate::Verdict::Claim,
        other => crate::Verdict::decline(format!("stash_type {other}: only float32 statistics")),
    }
}

/// `X / sqrt(mean(X^2) + epsilon) * scale` over the axes from `axis` on, the mean of squares in
/// float32 (`stash_type` 1); `Y` takes the scale's element type.
#[onnx_op(
    op = "RMSNormalization", precision = Float32, since = 23, types(T = FLOAT, V = FLOAT), ignores(stash_type: i64),
    inputs(X: T, scale: V), outputs(Y: V), shape = ShapeKeyed, claim = layer_norm_claim,
    declines = "stash_type other than 1 (float32)"
)]
fn rms_normalization(
    cx: &mut Lower,
    x: Array,
    scale: Array,
    #[attr(default = -1)] axis: i64,
    #[attr(default = 1e-5)] epsilon: f32,
) -> Result<Array> {
    let mut outputs = rms_norm_over(cx, &x, &scale, axis, epsilon, true)?;
    Ok(outputs.swap_remove(0))
}

/// `x / sqrt(mean(x²) + epsilon) * scale` over the axes from `axis` on, statistics in float32,
/// `Y` in the scale's type; then `1 / sqrt(mean(x²) + epsilon)` unless `only_y`. `scale` is
/// the node's input 1; the shapes must be ones ORT takes ([`require_norm_shapes`]).
pub(crate) fn rms_norm_over(
    cx: &mut Lower,
    x: &Array,
    scale: &Array,
    axis: i64,
    epsilon: f32,
    only_y: bool,
) -> Result<Vec<Array>> {
    let s = cx.stream();
    let rank = x.ndim();
    let axis = normalise_axis(axis, rank)?;
    require_norm_shapes(x, axis, &[("scale", Some(scale))])?;
    let last = x.shape().last().copied();
    let weight = float32_constant(cx, "scale", 1, scale)?;
    if only_y && axis + 1 == rank && scale.ndim() == 1 && Some(scale.shape()[0]) == last {
        // MLX's fused kernel normalises the last axis in float32 but rounds x / rms to x's
        // type before the weight: a float16 element that underflows there came out 0 where
        // ORT, which rounds once after the scale, keeps 65504 * 6e-8 / rms (found by the
        // fuzzer). So the kernel runs on float32 and the result is rounded once.
        return Ok(vec![rms_norm_rounded(
            x,
            &weight,
            epsilon,
            scale.dtype(),
            s,
        )?]);
    }
    let axes: Vec<i32> = (axis as i32..rank as i32).collect();
    let Standardised {
        normalised,
        inv_std,
        ..
    } = standardise(x, &axes, epsilon, false, s)?;
    let scaled = ops::multiply(&normalised, &weight, s)?;
    Ok(vec![cast(&scaled, scale.dtype(), s)?, inv_std])
}

/// `x / rms(x) · weight` over the last axis, in float32 (`weight` float32, 1-D), rounded once
/// to `output`. On MLX's CUDA backend one kernel reads `x` as it is and writes `output`;
/// elsewhere MLX's fused kernel runs on float32 between casts.
pub(crate) fn rms_norm_rounded(
    x: &Array,
    weight: &Array,
    epsilon: f32,
    output: Dtype,
    s: &mlx_kernels::Stream,
) -> Result<Array> {
    let width = x.shape().last().copied().unwrap_or(0);
    if x.size() > 0
        && custom::rms_norm_runs_on(s)
        && custom::rms_norm_takes(width, x.dtype(), output)
    {
        return Ok(custom::rms_norm(x, weight, epsilon, output, s)?);
    }
    let y = ops::rms_norm(&cast(x, Dtype::F32, s)?, Some(weight), epsilon, s)?;
    cast(&y, output, s)
}

/// Input `index` (`array`) in float32: a norm's weight or bias. When the input is a constant
/// it is widened once per plan (`tag` names it among the node's preparations), not every run.
pub(crate) fn float32_constant(
    cx: &mut Lower,
    tag: &'static str,
    index: usize,
    array: &Array,
) -> Result<Array> {
    if array.dtype() == Dtype::F32 {
        return Ok(array.clone());
    }
    let s = cx.stream();
    let mut wide = cx.prepared(tag, &[index], || Ok(vec![cast(array, Dtype::F32, s)?]))?;
    Ok(wide.swap_remove(0))
}

/// `X / ||X||_p` along `axis` (p = 1 or 2), the norm in float32; a zero norm gives zeros, as
/// ORT's CPU kernel does (the ONNX reference would divide by zero).
#[onnx_op(
    op = "LpNormalization", precision = Float32, since = 1, types(T = FLOAT), inputs(input: T), outputs(output: T), shape = ShapeKeyed,
    claim = lp_normalization_claim, declines = "p other than 1 or 2"
)]
fn lp_normalization(
    cx: &mut Lower,
    x: Array,
    #[attr(default = -1)] axis: i64,
    #[attr(default = 2)] p: i64,
) -> Result<Array> {
    let s = cx.stream();
    let axis = normalise_axis(axis, x.ndim())? as i32;
    let wide = ops::astype(&x, Dtype::F32, s)?;
    let norm = if p == 1 {
        ops::sum(&ops::abs(&wide, s)?, &[axis], true, s)?
    } else {
        ops::sqrt(
            &ops::sum(&ops::multiply(&wide, &wide, s)?, &[axis], true, s)?,
            s,
        )?
    };
    let zero = scalar(0.0, Dtype::F32, s)?;
    let normalised = ops::where_(
        &ops::equal(&norm, &zero, s)?,
        &zero,
        &ops::divide(&wide, &norm, s)?,
        s,
    )?;
    Ok(ops::astype(&normalised, x.dtype(), s)?)
}

fn lp_normalization_claim(node: &crate::Node) -> crate::Verdict {
    match node.attr_or("p", 2i64) {
        1 | 2 => crate::Verdict::Claim,
        other => crate::Verdict::decline(format!("p {other}: only the L1 and L2 norms")),
    }
}

/// The widest LRN window the EP takes (real models use 3 to 11).
const MAX_LRN_SIZE: i64 = 1 << 16;

/// ORT's LRN kernel, when the session is created, requires an odd positive size and positive
/// alpha and beta.
fn lrn_claim(node: &crate::Node) -> crate::Verdict {
    // The defaults are positive.
    let positive = |name: &str| node.attr_as::<f32>(name).is_none_or(|v| v > 0.0);
    match node.attr_as::<i64>("size") {
        Some(size) if size > 0 && size % 2 == 1 => {
            if size > MAX_LRN_SIZE {
                // The lowering adds one channel slice per window position, as ORT sums them.
                return crate::Verdict::decline(format!(
                    "size {size}: windows past {MAX_LRN_SIZE} channels take one MLX op a channel"
                ));
            }
        }
        other => {
            return crate::Verdict::decline(format!(
                "size {other:?}: ORT's LRN takes an odd positive size"
            ))
        }
    }
    if positive("alpha") && positive("beta") {
        crate::Verdict::Claim
    } else {
        crate::Verdict::decline("alpha or beta not positive: ORT's LRN refuses them")
    }
}

/// Cross-channel local response normalisation, in float32:
/// `x / (bias + alpha / size * sum of x^2 over the size channels around c)^beta`.
#[onnx_op(
    op = "LRN", precision = Float32, since = 1, types(T = FLOAT), inputs(X: T), outputs(Y: T), shape = ShapeKeyed,
    claim = lrn_claim, declines = "a size that is not positive and odd, alpha or beta not positive (ORT's kernel refuses them); a size past 2^16"
)]
fn lrn(
    cx: &mut Lower,
    x: Array,
    #[attr(default = 1e-4)] alpha: f32,
    #[attr(default = 0.75)] beta: f32,
    #[attr(default = 1.0)] bias: f32,
    #[attr] size: i64,
) -> Result<Array> {
    let s = cx.stream();
    if x.ndim() != 4 {
        // ORT's CPU kernel takes NCHW only.
        return Err(crate::OpError::new(format!(
            "X has rank {}: LRN takes [N, C, H, W] (give it rank 4)",
            x.ndim()
        )));
    }
    if x.size() == 0 {
        return Ok(x);
    }
    // ORT's order, so that rounding and infinities come out as there (alpha = inf gives NaN
    // from inf - inf): squares scaled by alpha / size, padded to C + size - 1 channels; the
    // first channel's scale is bias plus the first `size` of them, each next one the previous
    // plus the entering square less the leaving one; then `x * scale^-beta`.
    let channels = x.shape()[1];
    let before = (size - 1) / 2;
    let wide = ops::astype(&x, Dtype::F32, s)?;
    let zero = scalar(0.0, Dtype::F32, s)?;
    let step = alpha / size as f32;
    let terms = ops::multiply(
        &ops::pad(
            &ops::multiply(&wide, &wide, s)?,
            &[1],
            &[before as i32],
            &[(size - 1 - before) as i32],
            &zero,
            false,
            s,
        )?,
        &scalar(step.into(), Dtype::F32, s)?,
        s,
    )?;
    let dims = terms.shape();
    let channel = |c: i64| -> Result<Array> {
        let mut start = vec![0i32; dims.len()];
        let mut stop: Vec<i32> = dims.iter().map(|&d| d as i32).collect();
        start[1] = c as i32;
        stop[1] = c as i32 + 1;
        Ok(ops::slice(&terms, &start, &stop, &vec![1; dims.len()], s)?)
    };
    let mut scale = scalar(bias.into(), Dtype::F32, s)?;
    for c in 0..size {
        scale = ops::add(&scale, &channel(c)?, s)?;
    }
    let mut scales = vec![scale.clone()];
    for c in 1..channels {
        scale = ops::subtract(
            &ops::add(&scale, &channel(c + size - 1)?, s)?,
            &channel(c - 1)?,
            s,
        )?;
        scales.push(scale.clone());
    }
    let scale = ops::concatenate(&scales, 1, s)?;
    let factor = ops::power(&scale, &scalar((-beta).into(), Dtype::F32, s)?, s)?;
    Ok(ops::astype(
        &ops::multiply(&wide, &factor, s)?,
        x.dtype(),
        s,
    )?)
}

/// The general path: statistics in float32 over `axes`, all three outputs.
/// `x` standardised over `axes`, in float32: `(x - mean) / sqrt(var + epsilon)` when
/// `centred`, else `x / sqrt(mean(x²) + epsilon)` (RMS). The statistics keep their axes.
pub(crate) struct Standardised {
    pub normalised: Array,
    /// The mean (zero for RMS statistics).
    pub mean: Array,
    pub inv_std: Array,
}

pub(crate) fn standardise(
    x: &Array,
    axes: &[i32],
    epsilon: f32,
    centred: bool,
    s: &mlx_kernels::Stream,
) -> Result<Standardised> {
    let wide = cast(x, Dtype::F32, s)?;
    let (mean, centered) = if centred {
        let mean = ops::mean(&wide, axes, true, s)?;
        let centered = ops::subtract(&wide, &mean, s)?;
        (mean, centered)
    } else {
        (scalar(0.0, Dtype::F32, s)?, wide)
    };
    let variance = ops::mean(&ops::multiply(&centered, &centered, s)?, axes, true, s)?;
    let inv_std = ops::rsqrt(
        &ops::add(&variance, &scalar(epsilon.into(), Dtype::F32, s)?, s)?,
        s,
    )?;
    Ok(Standardised {
        normalised: ops::multiply(&centered, &inv_std, s)?,
        mean,
        inv_std,
    })
}

pub(crate) fn layer_norm_general(
    x: &Array,
    scale: &Array,
    bias: Option<&Array>,
    axis: usize,
    epsilon: f32,
    s: &mlx_kernels::Stream,
) -> Result<Vec<Array>> {
    let axes: Vec<i32> = (axis as i32..x.ndim() as i32).collect();
    let Standardised {
        normalised,
        mean,
        inv_std,
    } = standardise(x, &axes, epsilon, true, s)?;
    let scaled = ops::multiply(&normalised, &ops::astype(scale, Dtype::F32, s)?, s)?;
    let shifted = match bias {
        Some(b) => ops::add(&scaled, &ops::astype(b, Dtype::F32, s)?, s)?,
        None => scaled,
    };
    Ok(vec![ops::astype(&shifted, x.dtype(), s)?, mean, inv_std])
}

/// `(x - mean) / sqrt(var + epsilon) * scale[c] + B[c]`, statistics per sample and channel
/// over the spatial axes (in float32 for 16-bit inputs).
#[onnx_op(
    op = "InstanceNormalization", precision = Float32, since = 6, types(T = FLOAT), inputs(input: T, scale: T, B: T), outputs(output: T),
    shape = ShapeKeyed
)]
fn instance_normalization(
    cx: &mut Lower,
    x: Array,
    scale: Array,
    b: Array,
    #[attr(default = 1e-5)] epsilon: f32,
) -> Result<Array> {
    let s = cx.stream();
    let rank = x.ndim();
    if rank < 3 {
        return Err(crate::OpError::new(
            "InstanceNormalization needs [N, C, spatial..]",
        ));
    }
    let channels = x.shape()[1];
    for (name, p) in [("scale", &scale), ("B", &b)] {
        if p.shape() != [channels] {
            return Err(crate::OpError::new(format!(
                "{name} has shape {:?}: it must be [C] = [{channels}]",
                p.shape()
            )));
        }
    }
    let axes: Vec<i32> = (2..rank as i32).collect();
    let normalised = standardise(&x, &axes, epsilon, true, s)?.normalised;
    let y = ops::add(
        &ops::multiply(&normalised, &per_channel_f32(&scale, rank, s)?, s)?,
        &per_channel_f32(&b, rank, s)?,
        s,
    )?;
    Ok(ops::astype(&y, x.dtype(), s)?)
}

/// `[C]` parameters in float32 as `[C, 1, ..]`, to broadcast along axis 1 of a rank-`rank` tensor.
fn per_channel_f32(p: &Array, rank: usize, s: &mlx_kernels::Stream) -> Result<Array> {
    let mut shape = vec![1i64; rank - 1];
    shape[0] = p.size() as i64;
    Ok(ops::reshape(&ops::astype(p, Dtype::F32, s)?, &shape, s)?)
}

/// `x` standardised per sample over each of `groups` groups of consecutive channels (and the
/// spatial axes), in float32, in `x`'s shape. Channels on axis 1, or last when `channels_last`.
pub(crate) fn group_standardise(
    x: &Array,
    groups: i64,
    epsilon: f32,
    channels_last: bool,
    s: &mlx_kernels::Stream,
) -> Result<Array> {
    let shape = x.shape();
    let channels = if channels_last {
        shape.last().copied()
    } else {
        shape.get(1).copied()
    }
    .filter(|_| shape.len() >= 2)
    .ok_or_else(|| crate::OpError::new("group normalisation needs a channel axis"))?;
    if groups < 1 || channels % groups != 0 {
        return Err(crate::OpError::new(format!(
            "{channels} channels do not split into {groups} groups"
        )));
    }
    let batch = shape[0];
    // [N, G, C/G * spatial] channels first; [N, spatial, G, C/G] channels last.
    let (grouped, axes): (Vec<i64>, Vec<i32>) = if channels_last {
        let spatial: i64 = shape[1..shape.len() - 1].iter().product();
        (vec![batch, spatial, groups, channels / groups], vec![1, 3])
    } else {
        (vec![batch, groups, -1], vec![2])
    };
    if x.size() == 0 {
        return Ok(ops::astype(x, Dtype::F32, s)?); // no statistics to take
    }
    let standardised = standardise(&ops::reshape(x, &grouped, s)?, &axes, epsilon, true, s)?;
    Ok(ops::reshape(&standardised.normalised, &shape, s)?)
}

/// ORT's CPU EP runs GroupNormalization as its function body, whose Reshapes fail on an empty
/// X (a zero dim copied past the rank, or `-1` over nothing); so does the node here.
fn refuse_empty_group_norm(x: &Array) -> Result<()> {
    if x.size() == 0 {
        return Err(crate::OpError::new(format!(
            "X has shape {:?}: GroupNormalization of an empty tensor fails on ORT's CPU EP (its \
             function body's Reshape)",
            x.shape()
        )));
    }
    Ok(())
}

/// ORT's function body broadcasts 1-D `scale` and `bias` (length `count`, or 1) against the
/// grouped X; any other length fails there (a broadcast or its final Reshape), and so here.
fn group_norm_parameter(p: &Array, name: &str, count: i64, per: &str) -> Result<()> {
    if p.ndim() != 1 || (p.shape()[0] != count && p.shape()[0] != 1) {
        return Err(crate::OpError::new(format!(
            "{name} has shape {:?}: it must be [{count}] (one per {per}) or [1] (ORT's CPU EP \
             fails on other shapes too)",
            p.shape()
        )));
    }
    Ok(())
}

/// Ranks above 1 for `scale` or `bias` give shapes from ORT's function body that no formula
/// states (a `[G, 1]` scale runs there); left to ORT's CPU EP. Rank 0 is also how ORT's API
/// describes an unknown shape: a scalar fails the run-time check instead.
fn group_norm_claim(node: &crate::Node) -> crate::Verdict {
    for (index, name) in [(1, "scale"), (2, "bias")] {
        if let Some(rank) = node.input_rank(index).filter(|&r| r > 1) {
            return crate::Verdict::decline(format!(
                "{name} of rank {rank} (ORT's function body broadcasts it its own way)"
            ));
        }
    }
    layer_norm_claim(node)
}

/// Group normalisation (opset 21): statistics per sample over `num_groups` groups of channels,
/// in float32 (`stash_type` 1), then `scale` and `bias` per channel.
#[onnx_op(
    op = "GroupNormalization", precision = Float32, since = 21, types(T = FLOAT), ignores(stash_type: i64),
    inputs(X: T, scale: T, bias: T), outputs(Y: T), shape = ShapeKeyed, claim = group_norm_claim,
    declines = "stash_type other than 1 (float32); scale or bias of a rank other than 1"
)]
fn group_normalization(
    cx: &mut Lower,
    x: Array,
    scale: Array,
    bias: Array,
    #[attr(default = 1e-5)] epsilon: f32,
    #[attr] num_groups: i64,
) -> Result<Array> {
    let s = cx.stream();
    refuse_empty_group_norm(&x)?;
    let channels = x.shape().get(1).copied().unwrap_or(0);
    group_norm_parameter(&scale, "scale", channels, "channel")?;
    group_norm_parameter(&bias, "bias", channels, "channel")?;
    let normalised = group_standardise(&x, num_groups, epsilon, false, s)?;
    let rank = x.ndim();
    let y = ops::add(
        &ops::multiply(&normalised, &per_channel_f32(&scale, rank, s)?, s)?,
        &per_channel_f32(&bias, rank, s)?,
        s,
    )?;
    Ok(ops::astype(&y, x.dtype(), s)?)
}

/// Group normalisation as opset 18 defined it: `scale` and `bias` per group, not per channel.
/// A row of its own: the same inputs mean something else from opset 21 (per channel there).
#[onnx_op(
    op = "GroupNormalization", precision = Float32, opset = 18..=20, types(T = FLOAT), inputs(X: T, scale: T, bias: T), outputs(Y: T),
    shape = ShapeKeyed, claim = group_norm_claim, declines = "scale or bias of a rank other than 1"
)]
fn group_normalization_18(
    cx: &mut Lower,
    x: Array,
    scale: Array,
    bias: Array,
    #[attr(default = 1e-5)] epsilon: f32,
    #[attr] num_groups: i64,
) -> Result<Array> {
    let s = cx.stream();
    refuse_empty_group_norm(&x)?;
    group_norm_parameter(&scale, "scale", num_groups, "group")?;
    group_norm_parameter(&bias, "bias", num_groups, "group")?;
    let normalised = group_standardise(&x, num_groups, epsilon, false, s)?;
    // Per group: [G] (or [1]) as [N=1, G, 1] against the [N, G, C/G * spatial] view.
    let per_group = |p: &Array| -> Result<Array> {
        Ok(ops::reshape(
            &ops::astype(p, Dtype::F32, s)?,
            &[1, p.size() as i64, 1],
            s,
        )?)
    };
    let grouped_shape = [x.shape()[0], num_groups, -1];
    let y = ops::add(
        &ops::multiply(
            &ops::reshape(&normalised, &grouped_shape, s)?,
            &per_group(&scale)?,
            s,
        )?,
        &per_group(&bias)?,
        s,
    )?;
    Ok(ops::astype(
        &ops::reshape(&y, &x.shape(), s)?,
        x.dtype(),
        s,
    )?)
}

/// `(x - E[x]) / sqrt(E[(x - E[x])²])` over `axes`, as ORT's CPU EP computes it: two passes
/// in float32 and no epsilon (a constant block gives NaN), where ONNX's function body's
/// `E[x²] - E[x]²` loses every digit for data far from zero (an offset of 1000 gave errors of
/// 0.15). Axes outside the rank are dropped, as ORT does (rank 3 with the default
/// `[0, 2, 3]` normalises over `[0, 2]`).
#[onnx_op(op = "MeanVarianceNormalization", precision = Float32, since = 9, types(T = FLOAT), inputs(X: T), outputs(Y: T), shape = ShapeKeyed)]
fn mean_variance_normalization(
    cx: &mut Lower,
    x: Array,
    #[attr] axes: Option<Vec<i64>>,
) -> Result<Array> {
    let s = cx.stream();
    let rank = x.ndim() as i64;
    let axes = axes.unwrap_or_else(|| vec![0, 2, 3]);
    // ORT's float32 kernel ignores an axis out of range; other types run its function body,
    // whose ReduceMean refuses one.
    if x.dtype() != Dtype::F32 {
        if let Some(axis) = axes.iter().find(|&&a| !(-rank..rank).contains(&a)) {
            return Err(crate::OpError::new(format!(
                "axis {axis} is out of range for X of rank {rank} (ORT's CPU EP refuses it for \
                 this type too)"
            )));
        }
    }
    let mut axes: Vec<i32> = axes
        .into_iter()
        .filter(|&a| (-rank..rank).contains(&a))
        .map(|a| (if a < 0 { a + rank } else { a }) as i32)
        .collect();
    axes.sort_unstable();
    axes.dedup();
    if axes.is_empty() {
        return Err(crate::OpError::new(format!(
            "no valid axes are specified for X of rank {rank}: name at least one axis in [-{rank}, {rank})"
        )));
    }
    let wide = ops::astype(&x, Dtype::F32, s)?;
    // Means as ORT takes them, sum / count: MLX's mean multiplies by 1/count, which rounds
    // differently at the denormal edge (-3 * 2^-149 / 6 is -0 by division, -2^-149 by the
    // reciprocal, which then divides a zero spread into inf instead of NaN: found by the fuzzer).
    let shape = x.shape();
    let count: i64 = axes.iter().map(|&a| shape[a as usize]).product();
    let mean = |v: &Array| -> Result<Array> {
        Ok(ops::divide(
            &ops::sum(v, &axes, true, s)?,
            &crate::table::consts::scalar(count as f64, Dtype::F32, s)?,
            s,
        )?)
    };
    let centred = ops::subtract(&wide, &mean(&wide)?, s)?;
    let spread = ops::sqrt(&mean(&ops::multiply(&centred, &centred, s)?)?, s)?;
    Ok(ops::astype(
        &ops::divide(&centred, &spread, s)?,
        x.dtype(),
        s,
    )?)
}

/// The input unchanged, and (when the node asks for it) an all-ones mask of the mask's type.
fn inference_dropout(cx: &Lower, x: Array) -> Result<Vec<Array>> {
    let s = cx.stream();
    if cx.node().output_count() < 2 {
        return Ok(vec![x]);
    }
    // All true, built elementwise from `x` so that a shapeless replay gives the new shape (a
    // broadcast to `x.shape()` would bake the traced shape in: found by the fuzzer).
    let nan = ops::isnan(&x, s)?;
    let all_true = ops::logical_or(&nan, &ops::logical_not(&nan, s)?, s)?;
    let mask = ops::astype(&all_true, cx.output_dtype(1)?, s)?;
    Ok(vec![x, mask])
}

/// Inference-mode dropout: the input unchanged (and, from opset 12, an all-true mask). Before
/// opset 12 the mask output is declined (ORT's CPU EP does not fill it with ones there); a
/// `training_mode` input is declined: its value is not known when claiming. `ratio` does not
/// change an inference result, but from opset 12 (an input) ORT's kernel fails a run whose ratio
/// is not a single value in `[0, 1)`, and so does the node; the attribute before 12 is not checked
/// there (a ratio of 1.5 runs), nor here.
#[onnx_op(
    op = "Dropout", since = 7, types(T = FLOAT, T1 = FLOAT, T2 = BOOL | until(9, FLOAT)), ignores(seed: i64 since 12),
    inputs(data: T, ratio: T1, training_mode: T2), outputs(output: T, mask?: T2),
    shape = dropout_shape, claim = dropout_claim, declines = "the mask output before opset 12; a training_mode input"
)]
fn dropout(
    cx: &mut Lower,
    x: Array,
    #[input(attr_until = 11, attr = f32, name = "ratio")] ratio: Option<Array>,
    #[input(since = 12)] _training: Option<Array>,
) -> Result<Vec<Array>> {
    if let Some(ratio) = ratio.filter(|_| cx.node().since_version() >= 12) {
        require_ratio(cx, &ratio)?;
    }
    inference_dropout(cx, x)
}

/// ORT's Dropout kernel (opset 12 on) takes one ratio value in `[0, 1)`, compared in float32 (a
/// NaN, 1, or a double that rounds to 1 fail the run).
fn require_ratio(cx: &mut Lower, ratio: &Array) -> Result<()> {
    if ratio.size() != 1 {
        return Err(crate::OpError::new(format!(
            "ratio has shape {:?}: it must hold a single value (ORT's kernel refuses others)",
            ratio.shape()
        )));
    }
    let s = cx.stream();
    let ratio = ops::astype(ratio, Dtype::F32, s)?;
    let holds = ops::logical_and(
        &ops::greater_equal(&ratio, &scalar(0.0, Dtype::F32, s)?, s)?,
        &ops::less(&ratio, &scalar(1.0, Dtype::F32, s)?, s)?,
        s,
    )?;
    cx.require(
        &holds,
        "Dropout: ratio must be in the range [0, 1) (ORT's CPU kernel fails the run otherwise)",
    )
}

/// The ratio input's size is read when lowering, so a node with one retraces per shape.
fn dropout_shape(node: &crate::Node) -> crate::table::spec::ShapeSafety {
    use crate::table::spec::ShapeSafety;
    if node.since_version() >= 12 && node.input_present(1) {
        ShapeSafety::ShapeKeyed
    } else {
        ShapeSafety::Shapeless
    }
}

fn dropout_claim(node: &crate::Node) -> crate::Verdict {
    if node.since_version() < 12 && node.output_present(1) {
        return crate::Verdict::decline("the mask output of a pre-12 Dropout");
    }
    if node.input_present(2) {
        return crate::Verdict::decline("a training_mode input (training-mode dropout is random)");
    }
    crate::Verdict::Claim
}

#[cfg(test)]
mod tests {
    use crate::table::testing::declined;
    use crate::{AttrValue, ElemType, Node};

    #[test]
    fn stash_type_is_accepted_and_only_float32_statistics_are_claimed() {
        let layer_norm = |stash| {
            Node::new("LayerNormalization", 17)
                .input(ElemType::Float)
                .input(ElemType::Float)
                .output(ElemType::Float)
                .attr("stash_type", AttrValue::Int(stash))
        };
        assert_eq!(declined(&layer_norm(1)), None);
        let why = declined(&layer_norm(0)).expect("declined");
        assert!(why.contains("stash_type 0"), "{why}");
    }

    #[test]
    fn dropout_ratio_is_an_attribute_up_to_opset_11_and_training_mode_new_in_12() {
        let dropout = |opset| {
            Node::new("Dropout", opset)
                .input(ElemType::Float)
                .output(ElemType::Float)
        };
        assert_eq!(
            declined(&dropout(7).attr("ratio", AttrValue::Float(0.3))),
            None
        );
        let why = declined(&dropout(12).attr("ratio", AttrValue::Float(0.3))).expect("declined");
        assert!(why.contains("not part of Dropout-12"), "{why}");
        let with_ratio = |opset| {
            Node::new("Dropout", opset)
                .input(ElemType::Float)
                .input(ElemType::Float)
                .output(ElemType::Float)
        };
        assert_eq!(declined(&with_ratio(12)), None);
        let why = declined(&with_ratio(11)).expect("declined");
        assert!(why.contains("does not exist in Dropout-11"), "{why}");
        // The mask output: all true from 12, declined before (ORT does not fill it there).
        let masked = |opset, mask| dropout(opset).output(mask);
        assert_eq!(declined(&masked(12, ElemType::Bool)), None);
        assert!(declined(&masked(10, ElemType::Bool)).is_some());
    }
}
