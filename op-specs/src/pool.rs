//! Windowed pooling: MaxPool, AveragePool and LpPool (strides, dilations, pads and auto_pad,
//! ceil_mode, count_include_pad), as reductions over a strided view of the padded input;
//! GlobalLpPool.

use mlx_kernels::{ops, Array, Dtype, Stream};

use crate::conv::{conv_padding, spatial_axes};
use crate::table::consts::scalar;
use crate::{onnx_op, Lower, OpError, Result};

/// Window geometry of one pooling node.
struct Windows {
    kernel: Vec<i64>,
    strides: Vec<i64>,
    dilations: Vec<i64>,
    lo: Vec<i64>,
    hi: Vec<i64>,
    out: Vec<i64>,
}

impl Windows {
    #[allow(clippy::too_many_arguments)] // the pooling attributes, as ONNX has them
    fn new(
        x: &Array,
        kernel: Vec<i64>,
        strides: Option<Vec<i64>>,
        dilations: Option<Vec<i64>>,
        pads: Option<Vec<i64>>,
        auto_pad: &str,
        ceil_mode: bool,
    ) -> Result<Windows> {
        let input = spatial(x)?;
        let n = kernel.len();
        let strides = strides.unwrap_or_else(|| vec![1; n]);
        let dilations = dilations.unwrap_or_else(|| vec![1; n]);
        if input.len() != n || strides.len() != n || dilations.len() != n {
            return Err(OpError::new(
                "kernel_shape, strides and dilations must match the spatial rank",
            ));
        }
        if [&kernel, &strides, &dilations]
            .iter()
            .any(|v| v.iter().any(|&k| k < 1))
        {
            return Err(OpError::new(
                "kernel_shape, strides and dilations must be positive",
            ));
        }
        let (lo, mut hi) = conv_padding(
            auto_pad,
            pads.as_deref(),
            &input,
            &kernel,
            &strides,
            &dilations,
        )?;
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            let span = (kernel[i] - 1) * dilations[i] + 1;
            let room = input[i] + lo[i] + hi[i] - span;
            if room < 0 {
                return Err(OpError::new(
                    "the pooling window is larger than the padded input",
                ));
            }
            let mut count = if ceil_mode {
                (room + strides[i] - 1) / strides[i] + 1
            } else {
                room / strides[i] + 1
            };
            // A window that would start inside the end padding is dropped (ONNX, ORT).
            if ceil_mode && (count - 1) * strides[i] >= input[i] + lo[i] {
                count -= 1;
            }
            // Room for the last window when ceil_mode overhangs the padding.
            hi[i] += ((count - 1) * strides[i] + span - (input[i] + lo[i] + hi[i])).max(0);
            out.push(count);
        }
        Ok(Windows {
            kernel,
            strides,
            dilations,
            lo,
            hi,
            out,
        })
    }

    /// `[N, C, out.., kernel..]` windows of `x` padded with `fill`. With `declared_hi`, only
    /// that much end padding gets `fill` and the ceil_mode overhang past it gets zeros (for
    /// AveragePool's count_include_pad divisor).
    fn view(
        &self,
        x: &Array,
        fill: &Array,
        declared_hi: Option<&[i64]>,
        s: &Stream,
    ) -> Result<Array> {
        let n = self.kernel.len();
        let axes: Vec<i32> = (2..2 + n as i32).collect();
        let lo: Vec<i32> = self.lo.iter().map(|&v| v as i32).collect();
        let hi: Vec<i32> = match declared_hi {
            Some(d) => d.iter().map(|&v| v as i32).collect(),
            None => self.hi.iter().map(|&v| v as i32).collect(),
        };
        let mut padded = ops::pad(x, &axes, &lo, &hi, fill, false, s)?;
        if let Some(d) = declared_hi {
            // The ceil_mode overhang never counts: pad it with zeros.
            let extra: Vec<i32> = self.hi.iter().zip(d).map(|(h, d)| (h - d) as i32).collect();
            padded = ops::pad(
                &padded,
                &axes,
                &vec![0; n],
                &extra,
                &scalar(0.0, padded.dtype(), s)?,
                false,
                s,
            )?;
        }
        let padded = ops::contiguous(&padded, s)?;
        let dims = padded.shape();
        let mut element_strides = vec![1i64; dims.len()];
        for i in (0..dims.len() - 1).rev() {
            element_strides[i] = element_strides[i + 1] * dims[i + 1];
        }
        let mut shape = dims[..2].to_vec();
        shape.extend(&self.out);
        shape.extend(&self.kernel);
        let mut strides = element_strides[..2].to_vec();
        strides.extend((0..n).map(|i| element_strides[2 + i] * self.strides[i]));
        strides.extend((0..n).map(|i| element_strides[2 + i] * self.dilations[i]));
        Ok(ops::as_strided(&padded, &shape, &strides, s)?)
    }

    fn kernel_axes(&self) -> Vec<i32> {
        let n = self.kernel.len() as i32;
        (2 + n..2 + 2 * n).collect()
    }
}

fn pool_claim(node: &dyn crate::NodeView) -> crate::Verdict {
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

fn spatial(x: &Array) -> Result<Vec<i64>> {
    if x.ndim() < 3 {
        return Err(OpError::new("pooling needs [N, C, spatial..]"));
    }
    Ok(x.shape()[2..].to_vec())
}

/// The maximum of each window (padding never wins); `Indices`, when asked for, is the flat
/// index into X of the first maximum in window order (row-major, or with the spatial axes
/// column-major for `storage_order` 1), as ORT's CPU EP gives it.
#[allow(clippy::too_many_arguments)] // the pooling attributes, as ONNX has them
#[onnx_op(
    op = "MaxPool", opset = 8..=11, types(T = FLOAT, I = I64), inputs(X: T), outputs(Y: T, Indices?: I), shape = ShapeKeyed,
    claim = pool_claim
)]
fn max_pool_8(
    cx: &mut Lower,
    x: Array,
    #[attr(default = "NOTSET")] auto_pad: String,
    #[attr(default = 0)] ceil_mode: i64,
    #[attr] dilations: Option<Vec<i64>>,
    #[attr] kernel_shape: Vec<i64>,
    #[attr] pads: Option<Vec<i64>>,
    #[attr(default = 0)] storage_order: i64,
    #[attr] strides: Option<Vec<i64>>,
) -> Result<Vec<Array>> {
    let windows = Windows::new(
        &x,
        kernel_shape,
        strides,
        dilations,
        pads,
        &auto_pad,
        ceil_mode != 0,
    )?;
    max_pool_outputs(cx, &x, &windows, storage_order != 0)
}

/// MaxPool from opset 12, which adds int8 and uint8: as [`max_pool_8`].
#[allow(clippy::too_many_arguments)] // the pooling attributes, as ONNX has them
#[onnx_op(
    op = "MaxPool", since = 12, types(T = FLOAT | I8 | U8, I = I64), inputs(X: T), outputs(Y: T, Indices?: I),
    shape = ShapeKeyed, claim = pool_claim
)]
fn max_pool(
    cx: &mut Lower,
    x: Array,
    #[attr(default = "NOTSET")] auto_pad: String,
    #[attr(default = 0)] ceil_mode: i64,
    #[attr] dilations: Option<Vec<i64>>,
    #[attr] kernel_shape: Vec<i64>,
    #[attr] pads: Option<Vec<i64>>,
    #[attr(default = 0)] storage_order: i64,
    #[attr] strides: Option<Vec<i64>>,
) -> Result<Vec<Array>> {
    let windows = Windows::new(
        &x,
        kernel_shape,
        strides,
        dilations,
        pads,
        &auto_pad,
        ceil_mode != 0,
    )?;
    max_pool_outputs(cx, &x, &windows, storage_order != 0)
}

fn max_pool_outputs(
    cx: &mut Lower,
    x: &Array,
    windows: &Windows,
    column_major: bool,
) -> Result<Vec<Array>> {
    if !cx.node().output_present(1) {
        return Ok(vec![window_max(cx, x, windows)?]);
    }
    let s = cx.stream();
    // Windows flattened to one axis of K taps, in row-major window order.
    let flat = |windows_view: Array| -> Result<Array> {
        let mut shape = windows_view.shape()[..2 + windows.kernel.len()].to_vec();
        shape.push(-1);
        Ok(ops::reshape(&windows_view, &shape, s)?)
    };
    let values = flat(windows.view(x, &lowest_value(x.dtype(), s)?, None, s)?)?;
    let positions = flat(windows.view(
        &flat_positions(x, column_major, s)?,
        &scalar(-1.0, Dtype::I64, s)?,
        None,
        s,
    )?)?;
    let y = ops::max(&values, &[-1], true, s)?;
    // The first tap that holds the maximum and lies inside X (padding can tie an integer minimum).
    let hit = ops::logical_and(
        &ops::equal(&values, &y, s)?,
        &ops::greater_equal(&positions, &scalar(0.0, Dtype::I64, s)?, s)?,
        s,
    )?;
    let first = ops::argmax(&ops::astype(&hit, Dtype::U8, s)?, -1, true, s)?;
    let indices = ops::take_along_axis(&positions, &first, -1, s)?;
    Ok(vec![
        ops::squeeze(&y, &[-1], s)?,
        ops::squeeze(&indices, &[-1], s)?,
    ])
}

/// Each element's flat index into X (int64): row-major, or with the spatial axes column-major
/// (the first spatial axis fastest) behind the row-major batch and channel.
fn flat_positions(x: &Array, column_major: bool, s: &Stream) -> Result<Array> {
    let shape = x.shape();
    let total: i64 = shape.iter().product();
    let row_major = ops::reshape(
        &ops::arange(0.0, total as f64, 1.0, Dtype::I64, s)?,
        &shape,
        s,
    )?;
    if !column_major || shape.len() <= 3 {
        return Ok(row_major);
    }
    // Column-major over the spatial axes: the row-major numbering of the reversed spatial axes,
    // transposed back.
    let rank = shape.len();
    let mut reversed_shape = shape[..2].to_vec();
    reversed_shape.extend(shape[2..].iter().rev());
    let numbering = ops::reshape(
        &ops::arange(0.0, total as f64, 1.0, Dtype::I64, s)?,
        &reversed_shape,
        s,
    )?;
    let order: Vec<i32> = [0, 1].into_iter().chain((2..rank as i32).rev()).collect();
    Ok(ops::transpose(&numbering, &order, s)?)
}

/// The value that never beats a real element: -inf for floats, the type's minimum for integers.
fn lowest_value(dtype: Dtype, s: &Stream) -> Result<Array> {
    let lowest = match dtype {
        Dtype::I8 => f64::from(i8::MIN),
        Dtype::U8 => 0.0,
        _ => f64::NEG_INFINITY,
    };
    scalar(lowest, dtype, s)
}

/// MaxPool before opset 8: no dilations, ceil_mode or Indices output.
#[onnx_op(op = "MaxPool", opset = 1..=7, types(T = FLOAT), inputs(X: T), outputs(Y: T), shape = ShapeKeyed, claim = pool_claim)]
fn max_pool_legacy(
    cx: &mut Lower,
    x: Array,
    #[attr(default = "NOTSET")] auto_pad: String,
    #[attr] kernel_shape: Vec<i64>,
    #[attr] pads: Option<Vec<i64>>,
    #[attr] strides: Option<Vec<i64>>,
) -> Result<Array> {
    let windows = Windows::new(&x, kernel_shape, strides, None, pads, &auto_pad, false)?;
    window_max(cx, &x, &windows)
}

fn window_max(cx: &mut Lower, x: &Array, windows: &Windows) -> Result<Array> {
    let s = cx.stream();
    let lowest = lowest_value(x.dtype(), s)?;
    Ok(ops::max(
        &windows.view(x, &lowest, None, s)?,
        &windows.kernel_axes(),
        false,
        s,
    )?)
}

/// The mean of each window: over the window's input elements, or (`count_include_pad`) over
/// its declared padding too.
#[allow(clippy::too_many_arguments)] // the pooling attributes, as ONNX has them
#[onnx_op(
    op = "AveragePool", since = 7, types(T = FLOAT), inputs(X: T), outputs(Y: T), shape = ShapeKeyed, claim = pool_claim
)]
fn average_pool(
    cx: &mut Lower,
    x: Array,
    #[attr(default = "NOTSET")] auto_pad: String,
    #[attr(default = 0)] ceil_mode: i64,
    #[attr(default = 0)] count_include_pad: i64,
    #[attr] dilations: Option<Vec<i64>>,
    #[attr] kernel_shape: Vec<i64>,
    #[attr] pads: Option<Vec<i64>>,
    #[attr] strides: Option<Vec<i64>>,
) -> Result<Array> {
    let s = cx.stream();
    let declared_hi = match (&pads, auto_pad.as_str()) {
        (Some(p), "NOTSET") => p[p.len() / 2..].to_vec(),
        _ => vec![0; kernel_shape.len()],
    };
    let windows = Windows::new(
        &x,
        kernel_shape,
        strides,
        dilations,
        pads,
        &auto_pad,
        ceil_mode != 0,
    )?;
    let wide = ops::astype(&x, Dtype::F32, s)?;
    let zero = scalar(0.0, Dtype::F32, s)?;
    let sums = ops::sum(
        &windows.view(&wide, &zero, None, s)?,
        &windows.kernel_axes(),
        false,
        s,
    )?;
    // Each window's divisor: its input elements, plus its declared padding when counted.
    let ones = ops::broadcast_to(&scalar(1.0, Dtype::F32, s)?, &x.shape(), s)?;
    let pad_weight = scalar(
        if count_include_pad != 0 { 1.0 } else { 0.0 },
        Dtype::F32,
        s,
    )?;
    let counted = if count_include_pad != 0 && auto_pad == "NOTSET" {
        windows.view(&ones, &pad_weight, Some(&declared_hi), s)?
    } else {
        windows.view(&ones, &pad_weight, None, s)?
    };
    let counts = ops::sum(&counted, &windows.kernel_axes(), false, s)?;
    Ok(ops::astype(&ops::divide(&sums, &counts, s)?, x.dtype(), s)?)
}

fn lp_claim(node: &dyn crate::NodeView) -> crate::Verdict {
    match node.attribute("p") {
        Some(crate::AttrValue::Int(p)) if p < 1 => {
            crate::Verdict::decline(format!("p = {p} (the norm needs p >= 1)"))
        }
        _ => pool_claim(node),
    }
}

/// The p-norm of `x` over `axes`, accumulated in float32: `(sum |x|^p)^(1/p)`.
fn lp_norm(x: &Array, p: i64, axes: &[i32], keepdims: bool, s: &Stream) -> Result<Array> {
    let wide = ops::astype(x, Dtype::F32, s)?;
    let powered = ops::power(&ops::abs(&wide, s)?, &scalar(p as f64, Dtype::F32, s)?, s)?;
    let sums = ops::sum(&powered, axes, keepdims, s)?;
    let root = ops::power(&sums, &scalar(1.0 / p as f64, Dtype::F32, s)?, s)?;
    Ok(ops::astype(&root, x.dtype(), s)?)
}

/// The p-norm of each window; padding contributes zero.
#[allow(clippy::too_many_arguments)] // the pooling attributes, as ONNX has them
#[onnx_op(
    op = "LpPool", since = 2, types(T = FLOAT), inputs(X: T), outputs(Y: T), shape = ShapeKeyed, claim = lp_claim,
    declines = "p < 1"
)]
fn lp_pool(
    cx: &mut Lower,
    x: Array,
    #[attr(default = "NOTSET")] auto_pad: String,
    #[attr(default = 0)] ceil_mode: i64,
    #[attr] dilations: Option<Vec<i64>>,
    #[attr] kernel_shape: Vec<i64>,
    #[attr(default = 2)] p: i64,
    #[attr] pads: Option<Vec<i64>>,
    #[attr] strides: Option<Vec<i64>>,
) -> Result<Array> {
    let s = cx.stream();
    let windows = Windows::new(
        &x,
        kernel_shape,
        strides,
        dilations,
        pads,
        &auto_pad,
        ceil_mode != 0,
    )?;
    let zero = scalar(0.0, x.dtype(), s)?;
    lp_norm(
        &windows.view(&x, &zero, None, s)?,
        p,
        &windows.kernel_axes(),
        false,
        s,
    )
}

/// The p-norm over all spatial axes, kept as size 1.
#[onnx_op(
    op = "GlobalLpPool", since = 2, types(T = FLOAT), inputs(X: T), outputs(Y: T), shape = ShapeKeyed, claim = lp_claim,
    declines = "p < 1"
)]
fn global_lp_pool(cx: &mut Lower, x: Array, #[attr(default = 2)] p: i64) -> Result<Array> {
    lp_norm(&x, p, &spatial_axes(&x)?, true, cx.stream())
}
