//! Convolution and the per-channel ops around it: Conv, BatchNormalization (inference),
//! GlobalAveragePool, GlobalMaxPool. ONNX is channels-first; MLX's convolution is
//! channels-last, so Conv transposes in and out (MLX fuses the copies where it can).

use mlx_kernels::{ops, Array, Dtype};

use crate::table::consts::scalar_like;
use crate::{onnx_op, Lower, OpError, Result};

/// Padding before and after each spatial axis, from `pads` or `auto_pad`.
pub(crate) fn conv_padding(
    auto_pad: &str,
    pads: Option<&[i64]>,
    input: &[i64],
    kernel: &[i64],
    strides: &[i64],
    dilations: &[i64],
) -> Result<(Vec<i64>, Vec<i64>)> {
    let n = input.len();
    match auto_pad {
        "NOTSET" => match pads {
            None => Ok((vec![0; n], vec![0; n])),
            Some(p) if p.len() == 2 * n && p.iter().all(|&v| v >= 0) => {
                Ok((p[..n].to_vec(), p[n..].to_vec()))
            }
            Some(p) => Err(OpError::new(format!(
                "pads {p:?} do not fit {n} spatial axes"
            ))),
        },
        "VALID" => Ok((vec![0; n], vec![0; n])),
        "SAME_UPPER" | "SAME_LOWER" => {
            let (mut lo, mut hi) = (Vec::with_capacity(n), Vec::with_capacity(n));
            for i in 0..n {
                let out = (input[i] + strides[i] - 1) / strides[i];
                let needed = (out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1;
                let total = (needed - input[i]).max(0);
                let small = total / 2;
                let (before, after) = if auto_pad == "SAME_UPPER" {
                    (small, total - small)
                } else {
                    (total - small, small)
                };
                lo.push(before);
                hi.push(after);
            }
            Ok((lo, hi))
        }
        other => Err(OpError::new(format!(
            "auto_pad {other:?} is not an ONNX mode"
        ))),
    }
}

fn to_i32(values: &[i64]) -> Vec<i32> {
    values.iter().map(|&v| v as i32).collect()
}

/// Channels-first `[N, C, d..]` to channels-last `[N, d.., C]`, and back.
fn channels_last(rank: usize) -> Vec<i32> {
    std::iter::once(0)
        .chain(2..rank as i32)
        .chain(std::iter::once(1))
        .collect()
}

fn channels_first(rank: usize) -> Vec<i32> {
    std::iter::once(0)
        .chain(std::iter::once(rank as i32 - 1))
        .chain(1..rank as i32 - 1)
        .collect()
}

/// N-d convolution (cross-correlation) with groups, strides, dilations and padding.
#[allow(clippy::too_many_arguments)] // three inputs and six attributes, as ONNX has them
#[onnx_op(
    op = "Conv", since = 1, types(T = FLOAT), inputs(X: T, W: T, B: T), outputs(Y: T), shape = ShapeKeyed,
    claim = conv_claim, declines = "auto_pad values other than ONNX's four; grouped convolutions beyond 2-D (MLX has none)"
)]
fn conv(
    cx: &mut Lower,
    x: Array,
    w: Array,
    b: Option<Array>,
    #[attr(default = "NOTSET")] auto_pad: String,
    #[attr] dilations: Option<Vec<i64>>,
    #[attr(default = 1)] group: i64,
    #[attr] kernel_shape: Option<Vec<i64>>,
    #[attr] pads: Option<Vec<i64>>,
    #[attr] strides: Option<Vec<i64>>,
) -> Result<Array> {
    let s = cx.stream();
    let rank = x.ndim();
    if rank < 3 || w.ndim() != rank {
        return Err(OpError::new(format!(
            "X of rank {rank} and W of rank {} do not make a convolution",
            w.ndim()
        )));
    }
    let spatial = rank - 2;
    let kernel: Vec<i64> = w.shape()[2..].to_vec();
    if kernel_shape.as_ref().is_some_and(|k| *k != kernel) {
        return Err(OpError::new(format!(
            "kernel_shape {kernel_shape:?} differs from W's {kernel:?}"
        )));
    }
    let strides = strides.unwrap_or_else(|| vec![1; spatial]);
    let dilations = dilations.unwrap_or_else(|| vec![1; spatial]);
    if strides.len() != spatial || dilations.len() != spatial {
        return Err(OpError::new(
            "strides/dilations do not match the spatial rank",
        ));
    }
    let (lo, hi) = conv_padding(
        &auto_pad,
        pads.as_deref(),
        &x.shape()[2..],
        &kernel,
        &strides,
        &dilations,
    )?;
    let x_last = ops::transpose(&x, &channels_last(rank), s)?;
    let w_last = ops::transpose(&w, &channels_last(rank), s)?;
    let y = ops::conv(
        &x_last,
        &w_last,
        &to_i32(&strides),
        &to_i32(&lo),
        &to_i32(&hi),
        &to_i32(&dilations),
        group as i32,
        s,
    )?;
    let y = match b {
        Some(b) => ops::add(&y, &b, s)?,
        None => y,
    };
    Ok(ops::transpose(&y, &channels_first(rank), s)?)
}

fn conv_claim(node: &dyn crate::NodeView) -> crate::Verdict {
    let grouped = matches!(node.attribute("group"), Some(crate::AttrValue::Int(g)) if g != 1);
    if grouped && node.input_rank(0).is_none_or(|rank| rank > 4) {
        return crate::Verdict::decline(
            "grouped convolution of more (or unknown) than 2 spatial axes: MLX has none",
        );
    }
    match node.attribute("auto_pad") {
        None => crate::Verdict::Claim,
        Some(crate::AttrValue::String(p))
            if ["NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"].contains(&p.as_str()) =>
        {
            crate::Verdict::Claim
        }
        Some(other) => crate::Verdict::decline(format!("auto_pad {other:?}")),
    }
}

/// `[C]` parameters as `[C, 1, ..]`, to broadcast along axis 1 of a rank-`rank` tensor.
fn per_channel(p: &Array, rank: usize, s: &mlx_kernels::Stream) -> Result<Array> {
    let mut shape = vec![1i64; rank.saturating_sub(1)];
    if let Some(first) = shape.first_mut() {
        *first = p.size() as i64;
    }
    Ok(ops::reshape(p, &shape, s)?)
}

/// Inference-mode batch normalisation: `(x - mean) / sqrt(var + epsilon) * scale + B`, per
/// channel (axis 1). The training outputs (running and saved statistics) are declined.
#[onnx_op(
    op = "BatchNormalization", opset = 9..=13, types(T = FLOAT),
    inputs(X: T, scale: T, B: T, mean: T, var: T),
    outputs(Y: T, mean?: T, var?: T, saved_mean?: T, saved_var?: T),
    shape = ShapeKeyed, claim = batch_norm_claim, declines = "training outputs (running statistics)"
)]
#[allow(clippy::too_many_arguments)] // five inputs and two attributes, as ONNX has them
fn batch_normalization_9(
    cx: &mut Lower,
    x: Array,
    scale: Array,
    b: Array,
    mean: Array,
    var: Array,
    #[attr(default = 1e-5)] epsilon: f32,
    #[attr(name = "momentum", default = 0.9)] _momentum: f32,
) -> Result<Array> {
    batch_norm(cx, &x, &scale, &b, &mean, &var, epsilon)
}

/// Inference-mode batch normalisation: `(x - mean) / sqrt(var + epsilon) * scale + B`, per
/// channel (axis 1). `training_mode = 1` and the running-statistics outputs are declined.
#[onnx_op(
    op = "BatchNormalization", since = 14, types(T = FLOAT, T1 = FLOAT, T2 = FLOAT),
    inputs(X: T, scale: T1, B: T1, input_mean: T2, input_var: T2), outputs(Y: T, running_mean?: T2, running_var?: T2),
    shape = ShapeKeyed, claim = batch_norm_claim, declines = "training mode (running statistics outputs)"
)]
#[allow(clippy::too_many_arguments)] // five inputs and three attributes, as ONNX has them
fn batch_normalization(
    cx: &mut Lower,
    x: Array,
    scale: Array,
    b: Array,
    mean: Array,
    var: Array,
    #[attr(default = 1e-5)] epsilon: f32,
    #[attr(name = "momentum", default = 0.9)] _momentum: f32,
    #[attr(name = "training_mode", default = 0)] _training_mode: i64,
) -> Result<Array> {
    batch_norm(cx, &x, &scale, &b, &mean, &var, epsilon)
}

fn batch_norm(
    cx: &Lower,
    x: &Array,
    scale: &Array,
    b: &Array,
    mean: &Array,
    var: &Array,
    epsilon: f32,
) -> Result<Array> {
    let s = cx.stream();
    let rank = x.ndim();
    if rank < 2 {
        return Err(OpError::new("BatchNormalization needs a channel axis"));
    }
    // 16-bit inputs are normalised in float32 and rounded once, as ORT's CPU EP does.
    let wide = if matches!(x.dtype(), Dtype::F16 | Dtype::BF16) {
        Dtype::F32
    } else {
        x.dtype()
    };
    let xw = ops::astype(x, wide, s)?;
    let param = |p: &Array| -> Result<Array> { per_channel(&ops::astype(p, wide, s)?, rank, s) };
    let inv_std = ops::rsqrt(
        &ops::add(&param(var)?, &scalar_like(epsilon.into(), &xw, s)?, s)?,
        s,
    )?;
    let normalised = ops::multiply(&ops::subtract(&xw, &param(mean)?, s)?, &inv_std, s)?;
    let y = ops::add(
        &ops::multiply(&normalised, &param(scale)?, s)?,
        &param(b)?,
        s,
    )?;
    Ok(ops::astype(&y, x.dtype(), s)?)
}

fn batch_norm_claim(node: &dyn crate::NodeView) -> crate::Verdict {
    let training =
        matches!(node.attribute("training_mode"), Some(crate::AttrValue::Int(t)) if t != 0);
    if training || node.output_count() > 1 {
        return crate::Verdict::decline("training mode: running statistics are not computed");
    }
    crate::Verdict::Claim
}

pub(crate) fn spatial_axes(x: &Array) -> Result<Vec<i32>> {
    if x.ndim() < 3 {
        return Err(OpError::new("global pooling needs [N, C, spatial..]"));
    }
    Ok((2..x.ndim() as i32).collect())
}

/// Mean over the spatial axes, kept as size 1.
#[onnx_op(op = "GlobalAveragePool", since = 1, types(T = FLOAT), inputs(X: T), outputs(Y: T), shape = ShapeKeyed)]
fn global_average_pool(cx: &mut Lower, x: Array) -> Result<Array> {
    Ok(ops::mean(&x, &spatial_axes(&x)?, true, cx.stream())?)
}

/// Maximum over the spatial axes, kept as size 1.
#[onnx_op(op = "GlobalMaxPool", since = 1, types(T = FLOAT), inputs(X: T), outputs(Y: T), shape = ShapeKeyed)]
fn global_max_pool(cx: &mut Lower, x: Array) -> Result<Array> {
    if x.size() == 0 {
        return Err(OpError::new("GlobalMaxPool of an empty tensor"));
    }
    Ok(ops::max(&x, &spatial_axes(&x)?, true, cx.stream())?)
}
