//! Convolution and the per-channel ops around it: Conv, BatchNormalization (inference),
//! GlobalAveragePool, GlobalMaxPool. ONNX is channels-first; MLX's convolution is
//! channels-last, so Conv transposes in and out (MLX fuses the copies where it can).

use mlx_kernels::{ops, Array, Dtype};

use crate::table::channels_last::{to_channels_first, to_channels_last};
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
        // ORT's convolutions read the first 2n values and ignore any after them (a model whose
        // input rank its shape inference cannot see gets that far), and refuse fewer.
        "NOTSET" => match pads {
            None => Ok((vec![0; n], vec![0; n])),
            Some(p) if p.len() >= 2 * n && p[..2 * n].iter().all(|&v| v >= 0) => {
                Ok((p[..n].to_vec(), p[n..2 * n].to_vec()))
            }
            Some(p) => Err(OpError::new(format!(
                "pads {p:?} do not fit {n} spatial axes (ORT's kernel needs 2 non-negative \
                 values an axis)"
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

/// Conv's attributes, shared by every op that convolves.
struct ConvAttrs {
    auto_pad: String,
    dilations: Option<Vec<i64>>,
    group: i64,
    kernel_shape: Option<Vec<i64>>,
    pads: Option<Vec<i64>>,
    strides: Option<Vec<i64>>,
}

/// Strides and dilations (ONNX's default 1 per spatial axis), checked against `spatial`.
fn strides_and_dilations(attrs: &ConvAttrs, spatial: usize) -> Result<(Vec<i64>, Vec<i64>)> {
    let strides = attrs.strides.clone().unwrap_or_else(|| vec![1; spatial]);
    let dilations = attrs.dilations.clone().unwrap_or_else(|| vec![1; spatial]);
    if strides.len() != spatial || dilations.len() != spatial {
        return Err(OpError::new(
            "strides/dilations do not match the spatial rank",
        ));
    }
    if strides.iter().chain(&dilations).any(|&v| v < 1) {
        return Err(OpError::new("strides and dilations must be positive"));
    }
    Ok((strides, dilations))
}

/// The kernel's spatial size from `W [_, _, k..]`, checked against `kernel_shape` and X's rank.
fn kernel_of(x: &Array, w: &Array, attrs: &ConvAttrs) -> Result<Vec<i64>> {
    let rank = x.ndim();
    if rank < 3 || w.ndim() != rank {
        return Err(OpError::new(format!(
            "X of rank {rank} and W of rank {} do not make a convolution",
            w.ndim()
        )));
    }
    let kernel: Vec<i64> = w.shape()[2..].to_vec();
    if attrs.kernel_shape.as_ref().is_some_and(|k| *k != kernel) {
        return Err(OpError::new(format!(
            "kernel_shape {:?} differs from W's {kernel:?}",
            attrs.kernel_shape
        )));
    }
    Ok(kernel)
}

/// ORT's convolutions take one bias value per output channel (`maps`), not any shape that
/// broadcasts.
fn require_channel_bias(b: Option<&Array>, maps: i64) -> Result<()> {
    match b {
        Some(b) if b.shape() != [maps] => Err(OpError::new(format!(
            "B has shape {:?}: it must be 1-D with one value per output channel ({maps})",
            b.shape()
        ))),
        _ => Ok(()),
    }
}

/// `conv(X, W) + B`, channels first in and out. MLX convolves channels-last: X's channels-last
/// form is read when an earlier node left one, and the answer leaves its own (see `Layout`).
fn convolve(
    cx: &mut Lower,
    x: &Array,
    w: &Array,
    b: Option<&Array>,
    attrs: &ConvAttrs,
) -> Result<Array> {
    let s = cx.stream();
    let rank = x.ndim();
    let kernel = kernel_of(x, w, attrs)?;
    let spatial = rank - 2;
    require_channel_bias(b, w.shape()[0])?;
    let (strides, dilations) = strides_and_dilations(attrs, spatial)?;
    let (lo, hi) = conv_padding(
        &attrs.auto_pad,
        attrs.pads.as_deref(),
        &x.shape()[2..],
        &kernel,
        &strides,
        &dilations,
    )?;
    // ORT fails on an output extent that is not positive (an input shorter than the dilated
    // kernel, or an empty one without the padding to cover a kernel).
    let same = attrs.auto_pad.starts_with("SAME");
    let mut lengths = Vec::with_capacity(spatial);
    for i in 0..spatial {
        let input = x.shape()[2 + i];
        let span = input + lo[i] + hi[i] - (dilations[i] * (kernel[i] - 1) + 1);
        let length = match (same, span < 0) {
            (true, _) => (input + strides[i] - 1) / strides[i],
            (false, true) => 0,
            (false, false) => span / strides[i] + 1,
        };
        if length <= 0 {
            return Err(OpError::new(format!(
                "X has shape {:?}: spatial axis {i} leaves no output (invalid input shape)",
                x.shape()
            )));
        }
        lengths.push(length);
    }
    if x.shape()[2..].contains(&0) {
        // Padding alone reaches the kernel: the output is B (or zeros) throughout.
        let mut shape = vec![x.shape()[0], w.shape()[0]];
        shape.extend(&lengths);
        let zeros = ops::broadcast_to(&scalar_like(0.0, x, s)?, &shape, s)?;
        return Ok(match b {
            Some(b) => ops::add(&zeros, &per_channel(b, rank, s)?, s)?,
            None => zeros,
        });
    }
    let channels = x.shape()[1];
    if attrs.group < 1 || channels % attrs.group != 0 || w.shape()[1] * attrs.group != channels {
        return Err(OpError::new(format!(
            "X's {channels} channels do not split into {} groups of W's {}",
            attrs.group,
            w.shape()[1]
        )));
    }
    // Zero input channels sum to zero (the output is the bias), but MLX's CUDA backend traps
    // (SIGFPE) convolving them: one zero channel per group gives the same sums.
    let (x, w_last) = if channels == 0 {
        let zero = |shape: Vec<i64>| -> Result<Array> {
            let zero = crate::table::consts::scalar(0.0, x.dtype(), s)?;
            Ok(ops::broadcast_to(&zero, &shape, s)?)
        };
        let mut x_shape = x.shape();
        x_shape[1] = attrs.group;
        let mut w_shape = w.shape();
        w_shape[1] = 1;
        (zero(x_shape)?, to_channels_last(&zero(w_shape)?, s)?)
    } else {
        // A weight's channels-last copy is made once per session when W is a constant, not
        // transposed again by every run (a ResNet's twenty copies): it costs the weight's size
        // again in memory, small next to a CNN's activations.
        let mut w_last = cx.prepared("W channels-last", &[1], || {
            Ok(vec![ops::contiguous(&to_channels_last(w, s)?, s)?])
        })?;
        (x.clone(), w_last.swap_remove(0))
    };
    let x_last = cx.in_channels_last(&x)?;
    let y = ops::conv(
        &x_last,
        &w_last,
        &to_i32(&strides),
        &to_i32(&lo),
        &to_i32(&hi),
        &to_i32(&dilations),
        &vec![1; spatial],
        attrs.group as i32,
        s,
    )?;
    let y = match b {
        Some(b) => ops::add(&y, b, s)?,
        None => y,
    };
    cx.answer_from_channels_last(y)
}

/// N-d convolution (cross-correlation) with groups, strides, dilations and padding.
#[allow(clippy::too_many_arguments)] // three inputs and six attributes, as ONNX has them
#[onnx_op(
    op = "Conv", since = 1, types(T = FLOAT), inputs(X: T, W: T, B: T), outputs(Y: T), shape = ShapeKeyed,
    layout = ChannelsLast, claim = conv_claim, declines = "auto_pad values other than ONNX's four, or one besides NOTSET together with pads (ORT refuses both); grouped convolutions beyond 2-D (MLX has none); strides or dilations beyond 65535 (MLX's GPU convolution)"
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
    let attrs = ConvAttrs {
        auto_pad,
        dilations,
        group,
        kernel_shape,
        pads,
        strides,
    };
    convolve(cx, &x, &w, b.as_ref(), &attrs)
}

/// ORT's Conv fusion: `activation(conv(X, W) + B + Z)`, the activation one of MLAS's.
#[allow(clippy::too_many_arguments)] // four inputs and eight attributes, as ORT has them
#[onnx_op(
    domain = "com.microsoft", op = "FusedConv", since = 1, types(T = F32 | F16), inputs(X: T, W: T, B: T, Z: T),
    outputs(Y: T), shape = ShapeKeyed, layout = ChannelsLast, claim = fused_conv_claim,
    declines = "activations other than Relu, Tanh, Sigmoid, LeakyRelu, Clip, HardSigmoid; Conv's declines"
)]
fn fused_conv(
    cx: &mut Lower,
    x: Array,
    w: Array,
    b: Option<Array>,
    z: Option<Array>,
    #[attr(default = "")] activation: String,
    #[attr] activation_params: Option<Vec<f32>>,
    #[attr(default = "NOTSET")] auto_pad: String,
    #[attr] dilations: Option<Vec<i64>>,
    #[attr(default = 1)] group: i64,
    #[attr] kernel_shape: Option<Vec<i64>>,
    #[attr] pads: Option<Vec<i64>>,
    #[attr] strides: Option<Vec<i64>>,
) -> Result<Array> {
    let s = cx.stream();
    let attrs = ConvAttrs {
        auto_pad,
        dilations,
        group,
        kernel_shape,
        pads,
        strides,
    };
    let y = convolve(cx, &x, &w, b.as_ref(), &attrs)?;
    let y = match z {
        // ORT's kernel sums Z into its output buffer: no broadcast (found by the fuzzer).
        Some(z) if z.shape() != y.shape() => {
            return Err(OpError::new(format!(
                "Z has shape {:?}: it must be the convolution's output shape {:?}, as ORT's \
                 kernel requires",
                z.shape(),
                y.shape()
            )))
        }
        Some(z) => ops::add(&y, &z, s)?,
        None => y,
    };
    let params = activation_params.unwrap_or_default();
    let param = |i: usize| -> Result<f64> {
        params.get(i).map(|&p| f64::from(p)).ok_or_else(|| {
            OpError::new(format!(
                "activation {activation} needs activation_params[{i}]"
            ))
        })
    };
    match activation.as_str() {
        "" => Ok(y),
        "Relu" => crate::activation::relu_of(&y, s),
        "Tanh" => Ok(ops::tanh(&y, s)?),
        "Sigmoid" => Ok(ops::sigmoid(&y, s)?),
        "LeakyRelu" => crate::activation::leaky_relu_of(&y, param(0)?, s),
        "HardSigmoid" => crate::activation::hard_sigmoid_of(&y, param(0)?, param(1)?, s),
        "Clip" => {
            let low = ops::maximum(&y, &scalar_like(param(0)?, &y, s)?, s)?;
            Ok(ops::minimum(&low, &scalar_like(param(1)?, &y, s)?, s)?)
        }
        other => Err(OpError::new(format!("activation {other:?}"))),
    }
}

fn fused_conv_claim(node: &crate::Node) -> crate::Verdict {
    const KNOWN: [&str; 6] = [
        "Relu",
        "Tanh",
        "Sigmoid",
        "LeakyRelu",
        "HardSigmoid",
        "Clip",
    ];
    // An empty name is no activation to ORT's kernel either: it refuses the node.
    match node.attr_as::<String>("activation") {
        Some(a) if !KNOWN.contains(&a.as_str()) => {
            crate::Verdict::decline(format!("activation {a:?}"))
        }
        _ => conv_claim(node),
    }
}

/// The gradient of Conv: `X` scattered through `W` (`W [C_in, C_out / group, k..]`), with
/// strides, dilations, pads, `output_padding` and `output_shape` as ORT's CPU EP reads them.
#[allow(clippy::too_many_arguments)] // three inputs and eight attributes, as ONNX has them
#[onnx_op(
    op = "ConvTranspose", since = 1, types(T = FLOAT), inputs(X: T, W: T, B: T), outputs(Y: T), shape = ShapeKeyed,
    layout = ChannelsLast, claim = conv_claim, declines = "auto_pad values other than ONNX's four, or one besides NOTSET together with pads (ORT refuses both); grouped convolutions beyond 2-D (MLX has none); strides or dilations beyond 65535 (MLX's GPU convolution)"
)]
fn conv_transpose(
    cx: &mut Lower,
    x: Array,
    w: Array,
    b: Option<Array>,
    #[attr(default = "NOTSET")] auto_pad: String,
    #[attr] dilations: Option<Vec<i64>>,
    #[attr(default = 1)] group: i64,
    #[attr] kernel_shape: Option<Vec<i64>>,
    #[attr] output_padding: Option<Vec<i64>>,
    #[attr] output_shape: Option<Vec<i64>>,
    #[attr] pads: Option<Vec<i64>>,
    #[attr] strides: Option<Vec<i64>>,
) -> Result<Array> {
    let s = cx.stream();
    let attrs = ConvAttrs {
        auto_pad,
        dilations,
        group,
        kernel_shape,
        pads,
        strides,
    };
    let kernel = kernel_of(&x, &w, &attrs)?;
    let rank = x.ndim();
    let spatial = rank - 2;
    require_channel_bias(b.as_ref(), w.shape()[1].saturating_mul(attrs.group))?;
    let empty_spatial = x.shape()[2..].contains(&0);
    if empty_spatial && output_shape.is_some() {
        return Err(OpError::new(format!(
            "X has shape {:?}: with output_shape, ORT's ConvTranspose needs every input spatial \
             dimension positive",
            x.shape()
        )));
    }
    let (strides, dilations) = strides_and_dilations(&attrs, spatial)?;
    let extra = output_padding.unwrap_or_else(|| vec![0; spatial]);
    let wanted = match output_shape {
        // output_shape names the spatial dims only, or all of them (ORT refuses other lengths).
        Some(shape) if shape.len() == spatial || shape.len() == spatial + 2 => {
            Some(shape[shape.len() - spatial..].to_vec())
        }
        Some(shape) => {
            return Err(OpError::new(format!(
                "output_shape {shape:?} has {} elements: it names the {spatial} spatial dims, or \
                 all {} dims",
                shape.len(),
                spatial + 2
            )))
        }
        None => None,
    };
    if extra.len() != spatial {
        return Err(OpError::new(
            "output_padding does not match the spatial rank",
        ));
    }
    for i in 0..spatial {
        // ORT's bound: padding past the last stride would add positions no input reaches.
        if extra[i] >= strides[i].max(dilations[i]) {
            return Err(OpError::new(format!(
                "output_padding[{i}] ({}) must be less than max(stride, dilation) ({})",
                extra[i],
                strides[i].max(dilations[i])
            )));
        }
    }
    let group = attrs.group;
    let (c_in, c_out_per_group) = (w.shape()[0], w.shape()[1]);
    if group < 1 || c_in % group != 0 || x.shape()[1] != c_in {
        return Err(OpError::new(format!(
            "X's {} channels do not match W's {c_in} in {group} groups",
            x.shape()[1]
        )));
    }
    if let Some(p) = attrs.pads.as_deref().filter(|p| p.len() != 2 * spatial) {
        // Unlike Conv, ORT's ConvTranspose takes exactly two values an axis.
        return Err(OpError::new(format!(
            "pads {p:?} do not fit {spatial} spatial axes (ORT's ConvTranspose refuses them too)"
        )));
    }
    let mut lo = Vec::with_capacity(spatial);
    let mut hi = Vec::with_capacity(spatial);
    let mut lengths = Vec::with_capacity(spatial);
    let mut reaching = Vec::with_capacity(spatial);
    for i in 0..spatial {
        let (head, tail) = transposed_padding(
            &attrs,
            i,
            x.shape()[2 + i],
            kernel[i],
            strides[i],
            dilations[i],
            extra[i],
            wanted.as_ref().map(|w| w[i]),
        )?;
        // A transposed convolution is a convolution of the stride-dilated input with the
        // flipped kernel, padded by the kernel's reach less the ONNX pads.
        let reach = dilations[i] * (kernel[i] - 1);
        let length = strides[i] * (x.shape()[2 + i] - 1) + extra[i] + reach + 1 - head - tail;
        if length <= 0 {
            return Err(OpError::new(format!(
                "output spatial dimension {i} would be {length}: ORT's ConvTranspose needs it \
                 positive"
            )));
        }
        let input = x.shape()[2 + i];
        let extent = strides[i]
            .saturating_mul(input - 1)
            .saturating_add(reach + 1 + extra[i])
            .saturating_add((reach - head).max(0))
            .saturating_add((reach - tail + extra[i]).max(0));
        let (head, tail, inputs) = if extent > i64::from(i32::MAX) && !empty_spatial {
            // A stride or padding of billions: MLX's stride-dilated input would pass its
            // 32-bit dims. Only inputs whose taps land in the output matter (the tap of input
            // `j` at `j * stride + d * dilation - head`); the rest are dropped and the padding
            // moved by as many strides, which changes no output value.
            let first = (head - reach).max(0).saturating_add(strides[i] - 1) / strides[i];
            let last = (head.saturating_add(length - 1)).div_euclid(strides[i]);
            let (first, last) = (first.min(input), last.min(input - 1));
            let kept = (last - first + 1).max(0);
            let head = head - first * strides[i];
            let tail = strides[i] * (kept - 1) + extra[i] + reach + 1 - head - length;
            (head, tail, Some((first, kept)))
        } else {
            (head, tail, None)
        };
        reaching.push(inputs);
        lengths.push(length);
        lo.push(reach - head);
        hi.push(reach - tail + extra[i]);
    }
    // With one input left on an axis its stride no longer matters (MLX takes 32-bit strides).
    let strides: Vec<i64> = (0..spatial)
        .map(|i| match reaching[i] {
            Some((_, kept)) if kept <= 1 => 1,
            _ => strides[i],
        })
        .collect();
    if let Some(big) = strides
        .iter()
        .chain(&dilations)
        .find(|&&v| v > i64::from(i32::MAX))
    {
        return Err(OpError::new(format!(
            "a stride or dilation of {big} reaches the output more than once: beyond MLX's \
             32-bit convolution parameters"
        )));
    }
    let x = if reaching.iter().any(Option::is_some) {
        let shape = x.shape();
        let mut start = vec![0i32; rank];
        let mut stop: Vec<i32> = shape.iter().map(|&d| d as i32).collect();
        for (i, kept) in reaching.iter().enumerate() {
            if let Some((first, kept)) = *kept {
                start[2 + i] = first as i32;
                stop[2 + i] = (first + kept) as i32;
            }
        }
        ops::slice(&x, &start, &stop, &vec![1; rank], s)?
    } else {
        x
    };
    if x.size() == 0 {
        // Nothing scatters into the output (an empty input, or none that reaches it): it is B
        // (or zeros) at each position.
        let mut shape = vec![x.shape()[0], group * c_out_per_group];
        shape.extend(&lengths);
        let zeros = ops::broadcast_to(&scalar_like(0.0, &x, s)?, &shape, s)?;
        return Ok(match b {
            Some(b) => ops::add(&zeros, &per_channel(&b, rank, s)?, s)?,
            None => zeros,
        });
    }
    // W [C_in, C_out/g, k..] -> MLX's [C_out, k.., C_in/g], kernel flipped on every spatial axis;
    // made once per session when W is a constant (as Conv's).
    let mut weight = cx.prepared("W as a flipped channels-last kernel", &[1], || {
        let mut grouped_shape = vec![group, c_in / group, c_out_per_group];
        grouped_shape.extend(&kernel);
        let grouped = ops::reshape(&w, &grouped_shape, s)?;
        let mut order: Vec<i32> = vec![0, 2];
        order.extend(3..3 + spatial as i32);
        order.push(1);
        let mut weight_shape = vec![group * c_out_per_group];
        weight_shape.extend(&kernel);
        weight_shape.push(c_in / group);
        let spatial_axes: Vec<i32> = (1..=spatial as i32).collect();
        let flipped = ops::flip(
            &ops::reshape(&ops::transpose(&grouped, &order, s)?, &weight_shape, s)?,
            &spatial_axes,
            s,
        )?;
        Ok(vec![ops::contiguous(&flipped, s)?])
    })?;
    let weight = weight.swap_remove(0);
    // An input sliced above has no recorded form: it is transposed here.
    let x_last = cx.in_channels_last(&x)?;
    // MLX pads only outwards: negative padding (ONNX pads wider than the kernel's reach) is a
    // crop of the result instead.
    let y = ops::conv(
        &x_last,
        &weight,
        &vec![1; spatial],
        &to_i32(&lo.iter().map(|&p| p.max(0)).collect::<Vec<_>>()),
        &to_i32(&hi.iter().map(|&p| p.max(0)).collect::<Vec<_>>()),
        &to_i32(&dilations),
        &to_i32(&strides),
        group as i32,
        s,
    )?;
    let y = crop_negative_padding(&y, &lo, &hi, s)?;
    let y = match b {
        Some(b) => ops::add(&y, &b, s)?,
        None => y,
    };
    cx.answer_from_channels_last(y)
}

/// ONNX's pads before and after spatial axis `i` of a transposed convolution: from
/// `output_shape` (the total split as ORT splits it), `auto_pad` SAME_* (output = input x
/// stride), or `pads`.
#[allow(clippy::too_many_arguments)] // one axis's geometry
fn transposed_padding(
    attrs: &ConvAttrs,
    i: usize,
    input: i64,
    kernel: i64,
    stride: i64,
    dilation: i64,
    extra: i64,
    wanted: Option<i64>,
) -> Result<(i64, i64)> {
    let reach = dilation * (kernel - 1) + 1;
    let full = stride * (input - 1) + extra + reach;
    if let Some(wanted) = wanted {
        // ORT 1.31's consistency check: the input size that its padding (the total clamped
        // at 0, output_padding left out) implies for `wanted` must be the real one. So a
        // shorter `wanted` needs output_padding below the stride, and a longer one (the end
        // then holds only B) must be shorter than the next input size's result.
        let padding = full.saturating_sub(wanted).max(0);
        let implied = wanted.saturating_sub(reach).saturating_add(padding) / stride + 1;
        if implied != input {
            return Err(OpError::new(format!(
                "output_shape {wanted} on spatial axis {i} fits an input of {implied}, not \
                 {input} (stride {stride}, kernel {kernel}, dilation {dilation}, \
                 output_padding {extra}); ORT's ConvTranspose refuses it too"
            )));
        }
    }
    let same = matches!(attrs.auto_pad.as_str(), "SAME_UPPER" | "SAME_LOWER");
    let target = match wanted {
        Some(w) => Some(w),
        None if same => Some(input * stride),
        None => None,
    };
    if let Some(target) = target {
        // ONNX's split: the odd unit of padding at the start, except for SAME_UPPER. A target
        // larger than the full result (negative padding) extends the end, where only B lands.
        let total = full - target;
        let half = total / 2;
        return Ok(if total < 0 && wanted.is_none() {
            // ORT's CPU EP floors a negative SAME padding at 0: the output is the full
            // result, shorter than `input * stride` (kernel 1, stride 3, input 5: 13, not 15).
            (0, 0)
        } else if total < 0 {
            (0, total)
        } else if attrs.auto_pad == "SAME_UPPER" {
            (half, total - half)
        } else {
            (total - half, half)
        });
    }
    match (attrs.auto_pad.as_str(), attrs.pads.as_deref()) {
        ("VALID", _) | (_, None) => Ok((0, 0)),
        (_, Some(p)) if p.len() % 2 == 0 && i < p.len() / 2 => Ok((p[i], p[p.len() / 2 + i])),
        (_, Some(p)) => Err(OpError::new(format!(
            "pads {p:?} do not fit the spatial axes"
        ))),
    }
}

/// Removes `-pad` elements from each end of every spatial axis whose padding is negative.
fn crop_negative_padding(
    y: &Array,
    lo: &[i64],
    hi: &[i64],
    s: &mlx_kernels::Stream,
) -> Result<Array> {
    if lo.iter().chain(hi).all(|&p| p >= 0) {
        return Ok(y.clone());
    }
    let shape = y.shape();
    let mut start = vec![0i32; shape.len()];
    let mut stop: Vec<i32> = shape.iter().map(|&d| d as i32).collect();
    for i in 0..lo.len() {
        start[1 + i] = (-lo[i]).max(0) as i32;
        stop[1 + i] -= (-hi[i]).max(0) as i32;
        if stop[1 + i] < start[1 + i] {
            return Err(OpError::new("pads leave no output"));
        }
    }
    Ok(ops::slice(y, &start, &stop, &vec![1; shape.len()], s)?)
}

/// The largest stride or dilation claimed (a 16-bit bound, far above any real model's).
const MAX_STRIDE: i64 = 65535;

/// What Conv's attributes must be for MLX's convolution and ORT's rules; the integer
/// convolutions (ConvInteger, QLinearConv), which carry the same attributes, claim through it.
pub(crate) fn conv_claim(node: &crate::Node) -> crate::Verdict {
    // MLX divides by the group count unchecked (group 0 raised SIGFPE on its CUDA backend).
    let group = node.attr_or("group", 1i64);
    if group < 1 || group > i64::from(i32::MAX) {
        return crate::Verdict::decline(format!("group {group} is not a positive 32-bit count"));
    }
    if group != 1 && node.input_rank(0).is_none_or(|rank| rank > 4) {
        return crate::Verdict::decline(
            "grouped convolution of more (or unknown) than 2 spatial axes: MLX has none",
        );
    }
    // MLX's CUDA convolution cannot build a graph for strides or dilations of 2^31 - 1 (seen on
    // an H200: "encode_capturing" failed at run time), while ORT's CPU EP answers; no real model
    // comes near this bound.
    for name in ["strides", "dilations"] {
        let values = node.attr_as::<Vec<i64>>(name).unwrap_or_default();
        if let Some(v) = values.iter().find(|&&v| v > MAX_STRIDE) {
            return crate::Verdict::decline(format!(
                "{name} {v}: beyond {MAX_STRIDE}, which MLX's GPU convolution takes"
            ));
        }
    }
    match node.attr_as::<String>("auto_pad") {
        None => crate::Verdict::Claim,
        // ORT's ConvAttributes refuse both attributes at once when the session is created.
        Some(p) if p != "NOTSET" && node.attribute("pads").is_some() => {
            crate::Verdict::decline(format!("auto_pad {p} with pads: ORT's kernel refuses both"))
        }
        Some(p) if ["NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"].contains(&p.as_str()) => {
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
/// channel (axis 1). Training is declined: `training_mode = 1` (from opset 14) and any statistics
/// output (`mean`, `var`, `saved_mean`, `saved_var` up to opset 13; `running_mean`, `running_var`
/// from 14). Opset 15's own types for scale/B (T1) and mean/var (T2) serve every opset, as ORT's
/// schema check binds them to T before 15; so do 9-13's four optional outputs, as it allows only
/// two from 14.
#[onnx_op(
    op = "BatchNormalization", since = 9, types(T = FLOAT, T1 = FLOAT, T2 = FLOAT),
    ignores(momentum: f32, training_mode: i64 since 14),
    inputs(X: T, scale: T1, B: T1, input_mean: T2, input_var: T2),
    outputs(Y: T, running_mean?: T2, running_var?: T2, saved_mean?: T, saved_var?: T),
    shape = ShapeKeyed, layout = ChannelsLast, claim = batch_norm_claim,
    declines = "training mode (running statistics outputs)"
)]
fn batch_normalization(
    cx: &mut Lower,
    x: Array,
    scale: Array,
    b: Array,
    mean: Array,
    var: Array,
    #[attr(default = 1e-5)] epsilon: f32,
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
    let channels = x.shape()[1];
    for (name, p) in [("scale", scale), ("B", b), ("mean", mean), ("var", var)] {
        if p.shape() != [channels] {
            return Err(OpError::new(format!(
                "{name} has shape {:?}: it must be [C] = [{channels}]",
                p.shape()
            )));
        }
    }
    // 16-bit inputs are normalised in float32 and rounded once, as ORT's CPU EP does.
    let wide = if matches!(x.dtype(), Dtype::F16 | Dtype::BF16) {
        Dtype::F32
    } else {
        x.dtype()
    };
    let param = |p: &Array| -> Result<Array> { Ok(ops::astype(p, wide, s)?) };
    // ORT's order: one factor per channel, scale / sqrt(var + eps), then `x * factor + (B -
    // mean * factor)`. Normalising first overflows where ORT does not (x = 3e38, var 0.25,
    // scale 0.5: x / 0.5 is inf before the scale could bring it back).
    let epsilon = crate::table::consts::scalar(epsilon.into(), wide, s)?;
    let std = ops::sqrt(&ops::add(&param(var)?, &epsilon, s)?, s)?;
    let channel_scale = ops::multiply(&ops::reciprocal(&std, s)?, &param(scale)?, s)?;
    let channel_bias = ops::subtract(
        &param(b)?,
        &ops::multiply(&param(mean)?, &channel_scale, s)?,
        s,
    )?;
    let normalised = |x: &Array, scale: &Array, bias: &Array| -> Result<Array> {
        let xw = ops::astype(x, wide, s)?;
        let y = ops::add(&ops::multiply(&xw, scale, s)?, bias, s)?;
        Ok(ops::astype(&y, x.dtype(), s)?)
    };
    match cx.channels_last_of(x) {
        // Channels-last, the [C] factors already lie along the last axis.
        Some(last) => {
            cx.answer_from_channels_last(normalised(&last, &channel_scale, &channel_bias)?)
        }
        None => normalised(
            x,
            &per_channel(&channel_scale, rank, s)?,
            &per_channel(&channel_bias, rank, s)?,
        ),
    }
}

fn batch_norm_claim(node: &crate::Node) -> crate::Verdict {
    if node.attr_or("training_mode", 0i64) != 0 || node.output_count() > 1 {
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

/// ORT's pool kernels refuse an empty input unless its batch is what is empty; then the result
/// is `[0, C, 1, ..]`. `None`: the input is not empty.
fn empty_global_pool(x: &Array) -> Result<Option<Array>> {
    let dims = x.shape();
    if x.size() > 0 {
        return Ok(None);
    }
    if dims.first() != Some(&0) {
        return Err(OpError::new(format!(
            "global pooling of an empty tensor {dims:?}"
        )));
    }
    let mut out = dims.clone();
    out.iter_mut().skip(2).for_each(|d| *d = 1);
    Ok(Some(Array::from_bytes(&[], &out, x.dtype())?))
}

/// Mean over the spatial axes, kept as size 1.
#[onnx_op(
    op = "GlobalAveragePool", since = 1, types(T = FLOAT), inputs(X: T), outputs(Y: T), shape = ShapeKeyed,
    layout = ChannelsLast
)]
fn global_average_pool(cx: &mut Lower, x: Array) -> Result<Array> {
    let s = cx.stream();
    if let Some(empty) = empty_global_pool(&x)? {
        return Ok(empty);
    }
    // 16-bit floats are summed in float32, as ORT's CPU EP does: the sum of a few large
    // float16 values overflows float16 though their mean does not.
    let mean = |x: &Array, axes: &[i32]| -> Result<Array> {
        let wide = crate::reduce::widened(x, s)?;
        Ok(ops::astype(
            &ops::mean(&wide, axes, true, s)?,
            x.dtype(),
            s,
        )?)
    };
    match cx.channels_last_of(&x) {
        Some(last) => Ok(to_channels_first(
            &mean(&last, &last_spatial_axes(&last))?,
            s,
        )?),
        None => mean(&x, &spatial_axes(&x)?),
    }
}

/// The spatial axes of a channels-last `[N, d.., C]`.
fn last_spatial_axes(last: &Array) -> Vec<i32> {
    (1..last.ndim() as i32 - 1).collect()
}

/// Maximum over the spatial axes, kept as size 1.
#[onnx_op(
    op = "GlobalMaxPool", since = 1, types(T = FLOAT), inputs(X: T), outputs(Y: T), shape = ShapeKeyed,
    layout = ChannelsLast
)]
fn global_max_pool(cx: &mut Lower, x: Array) -> Result<Array> {
    if let Some(empty) = empty_global_pool(&x)? {
        return Ok(empty);
    }
    let s = cx.stream();
    match cx.channels_last_of(&x) {
        Some(last) => Ok(to_channels_first(
            &ops::max(&last, &last_spatial_axes(&last), true, s)?,
            s,
        )?),
        None => Ok(ops::max(&x, &spatial_axes(&x)?, true, s)?),
    }
}

#[cfg(test)]
mod tests {
    use crate::table::testing::declined;
    use crate::{AttrValue, ElemType, Node};

    fn batch_norm(opset: i64, types: [ElemType; 3]) -> Node {
        let [t, t1, t2] = types;
        Node::new("BatchNormalization", opset)
            .input(t)
            .input(t1)
            .input(t1)
            .input(t2)
            .input(t2)
            .output(t)
    }

    #[test]
    fn one_declaration_serves_batch_normalization_9_to_15_by_its_gates() {
        use ElemType::{Float, Float16};
        let momentum =
            |opset| batch_norm(opset, [Float; 3]).attr("momentum", AttrValue::Float(0.5));
        for opset in [9, 13, 14, 15] {
            assert_eq!(declined(&momentum(opset)), None, "opset {opset}");
        }
        // training_mode exists from opset 14; 1 is declined.
        let training =
            |opset, on| batch_norm(opset, [Float; 3]).attr("training_mode", AttrValue::Int(on));
        assert_eq!(declined(&training(14, 0)), None);
        let why = declined(&training(13, 0)).expect("declined");
        assert!(why.contains("not part of BatchNormalization-13"), "{why}");
        let why = declined(&training(14, 1)).expect("declined");
        assert!(why.contains("training mode"), "{why}");
        // Opset 15's scale/B and mean/var types (ORT's schema binds them to T before).
        assert_eq!(declined(&batch_norm(15, [Float16, Float, Float16])), None);
        // The statistics outputs of 9-13 and of 14+ are training outputs either way.
        let saved = batch_norm(9, [Float; 3]).output(Float).output(Float);
        assert!(declined(&saved).is_some_and(|why| why.contains("training mode")));
    }
}
