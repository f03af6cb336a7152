//! Windowed pooling: MaxPool, AveragePool and LpPool (strides, dilations, pads and auto_pad,
//! ceil_mode, count_include_pad), as reductions over a strided view of the padded input;
//! GlobalLpPool; MaxUnpool, which puts MaxPool's maxima back where its indices say.

use mlx_kernels::{ops, Array, Dtype, Stream};

use crate::conv::{conv_padding, spatial_axes};
use crate::table::consts::scalar;
use crate::{onnx_op, Lower, OpError, Result};

/// Window geometry of one pooling node.
struct Windows {
    kernel: Vec<i64>,
    strides: Vec<i64>,
    dilations: Vec<i64>,
    /// Padding before each spatial axis; negative (SAME with a stride above the kernel) drops
    /// that many leading elements, as ORT's window start `o * stride - lo` does.
    lo: Vec<i64>,
    /// Padding after each axis as the pads (or SAME) give it; may be negative, like `lo`.
    tail: Vec<i64>,
    /// Padding after each axis that the view adds: the tail, widened to reach the last
    /// window where it overhangs (ceil_mode, or a window larger than the padded input).
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
        let (lo, tail) = match auto_pad {
            "SAME_UPPER" | "SAME_LOWER" => same_padding(auto_pad, &input, &kernel, &strides),
            _ => conv_padding(
                auto_pad,
                pads.as_deref(),
                &input,
                &kernel,
                &strides,
                &dilations,
            )?,
        };
        let mut out = Vec::with_capacity(n);
        let mut hi = Vec::with_capacity(n);
        let mut strides = strides;
        for i in 0..n {
            let span = dilated_span(kernel[i], dilations[i]).ok_or_else(|| {
                OpError::new(format!(
                    "kernel_shape {kernel:?} dilated by {dilations:?} passes int64"
                ))
            })?;
            let count = output_length(input[i], lo[i], tail[i], span, strides[i], ceil_mode)?;
            // Where the last window ends, counted from the first input element.
            let reach = (count - 1) * strides[i] + span - lo[i];
            hi.push(tail[i].max(reach - input[i]).max(0));
            out.push(count);
            // One window has no stride to take: a stride past MLX's 32-bit strides (which
            // ORT's int64 arithmetic accepts) must not reach the strided view.
            if count <= 1 {
                strides[i] = 1;
            }
        }
        Ok(Windows {
            kernel,
            strides,
            dilations,
            lo,
            tail,
            hi,
            out,
        })
    }

    fn has_negative_padding(&self) -> bool {
        self.lo.iter().chain(&self.tail).any(|&p| p < 0)
    }

    /// `[N, C, out.., kernel..]` windows of `x` padded with `fill`. With `overhang_zero`, only
    /// the declared end padding gets `fill` and the overhang past it gets zeros (for
    /// AveragePool's count_include_pad divisor: ORT counts padding, never the overhang).
    fn view(&self, x: &Array, fill: &Array, overhang_zero: bool, s: &Stream) -> Result<Array> {
        let n = self.kernel.len();
        if self.out.contains(&0) {
            // No windows: an empty view, with no padding or striding to get wrong.
            let mut shape = x.shape()[..2].to_vec();
            shape.extend(&self.out);
            shape.extend(&self.kernel);
            return Ok(ops::broadcast_to(&scalar(0.0, x.dtype(), s)?, &shape, s)?);
        }
        let padded = self.padded(x, fill, overhang_zero, 2, s)?;
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
        // Copied before anyone reduces it: MLX 0.32.4's reductions misread some overlapping
        // strided views (kernel 2, stride 1, dilation 2 over 5 elements sums the wrong taps
        // in every channel after the first), while a contiguous copy reduces correctly.
        let windows = ops::as_strided(&padded, &shape, &strides, s)?;
        Ok(ops::contiguous(&windows, s)?)
    }

    /// `x` padded as the windows need, its spatial axes starting at `spatial_from` (2
    /// channels-first, 1 channels-last): `fill` before and after (negative padding crops
    /// instead); with `overhang_zero`, zeros past the declared end padding.
    fn padded(
        &self,
        x: &Array,
        fill: &Array,
        overhang_zero: bool,
        spatial_from: usize,
        s: &Stream,
    ) -> Result<Array> {
        let n = self.kernel.len();
        let axes: Vec<i32> = (spatial_from..spatial_from + n).map(|a| a as i32).collect();
        let dims = x.shape();
        let mut source = x.clone();
        if self.lo.iter().any(|&p| p < 0) {
            let mut start = vec![0i32; dims.len()];
            for (i, &p) in self.lo.iter().enumerate() {
                let axis = spatial_from + i;
                start[axis] = (-p).clamp(0, dims[axis]) as i32;
            }
            let stop: Vec<i32> = dims.iter().map(|&d| d as i32).collect();
            source = ops::slice(&source, &start, &stop, &vec![1; dims.len()], s)?;
        }
        let lo: Vec<i32> = self.lo.iter().map(|&v| v.max(0) as i32).collect();
        let declared: Vec<i64> = self.tail.iter().map(|&t| t.max(0)).collect();
        let first_hi = if overhang_zero { &declared } else { &self.hi };
        let hi: Vec<i32> = first_hi.iter().map(|&v| v as i32).collect();
        let mut padded = ops::pad(&source, &axes, &lo, &hi, fill, false, s)?;
        if overhang_zero {
            let extra: Vec<i32> = self
                .hi
                .iter()
                .zip(&declared)
                .map(|(h, d)| (h - d) as i32)
                .collect();
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
        Ok(padded)
    }

    /// Whether [`Windows::fold_taps`] can take these windows: undilated, at most
    /// `SLICED_TAPS` taps, and at least one window on every axis.
    fn foldable(&self) -> bool {
        self.dilations.iter().all(|&d| d == 1)
            && self.kernel.iter().product::<i64>() <= SLICED_TAPS
            && !self.out.contains(&0)
    }

    /// `fold` of each window, tap by tap: each of the kernel's taps is a strided slice of the
    /// padded input (a view), and the taps are folded pairwise. No window is materialised
    /// (the windows are `taps` times the answer, copied), and a compiled closure fuses the
    /// taps into one kernel. `spatial_from` and `overhang_zero` as in [`Windows::padded`];
    /// only when `foldable`.
    fn fold_taps(
        &self,
        x: &Array,
        fill: &Array,
        spatial_from: usize,
        overhang_zero: bool,
        fold: impl Fn(&Array, &Array) -> Result<Array>,
        s: &Stream,
    ) -> Result<Array> {
        let padded = self.padded(x, fill, overhang_zero, spatial_from, s)?;
        let dims = padded.shape();
        let n = self.kernel.len();
        let mut answer: Option<Array> = None;
        let mut tap = vec![0i64; n];
        loop {
            let (mut start, mut stop, mut step) = (
                vec![0i32; dims.len()],
                dims.iter().map(|&d| d as i32).collect::<Vec<_>>(),
                vec![1i32; dims.len()],
            );
            for (i, &offset) in tap.iter().enumerate() {
                let axis = spatial_from + i;
                start[axis] = offset as i32;
                stop[axis] = (offset + (self.out[i] - 1) * self.strides[i] + 1) as i32;
                step[axis] = self.strides[i] as i32;
            }
            let taken = ops::slice(&padded, &start, &stop, &step, s)?;
            answer = Some(match answer {
                Some(folded) => fold(&folded, &taken)?,
                None => taken,
            });
            // The next tap, the last axis fastest.
            let Some(axis) = (0..n).rev().find(|&i| tap[i] + 1 < self.kernel[i]) else {
                break;
            };
            tap[axis] += 1;
            tap[axis + 1..].iter_mut().for_each(|t| *t = 0);
        }
        answer.ok_or_else(|| OpError::new("a kernel without taps"))
    }

    fn kernel_axes(&self) -> Vec<i32> {
        let n = self.kernel.len() as i32;
        (2 + n..2 + 2 * n).collect()
    }
}

/// The most taps a kernel is folded tap by tap ([`Windows::fold_taps`]); larger kernels reduce
/// materialised windows, one op instead of a chain of hundreds.
const SLICED_TAPS: i64 = 32;

/// The number of windows along one axis, as ORT's CPU EP counts them (its own rule, not ONNX's
/// formula in two places): the floor division truncates toward zero, so a window larger than
/// the padded input still yields one output when the shortfall is under a stride; ceil_mode
/// divides in float32 and drops a last window that would start in the end padding. Zero
/// windows is a valid, empty answer; a negative count fails as in ORT.
fn output_length(
    input: i64,
    lo: i64,
    hi: i64,
    span: i64,
    stride: i64,
    ceil_mode: bool,
) -> Result<i64> {
    let numerator = input + lo + hi - span;
    let count = if ceil_mode {
        let count = (numerator as f32 / stride as f32).ceil() as i64 + 1;
        if (count - 1) * stride >= input + lo {
            count - 1
        } else {
            count
        }
    } else {
        numerator / stride + 1
    };
    if count < 0 {
        return Err(OpError::new(
            "the pooling window is larger than the padded input: the output length would be \
             negative (check kernel_shape, pads, strides and dilations)",
        ));
    }
    Ok(count)
}

/// SAME_UPPER/SAME_LOWER padding as ORT's CPU EP computes it for pools: from the undilated
/// kernel (the claim declines dilations with SAME), halved by truncation toward zero. With a
/// stride above the kernel the total can be negative; ORT then starts the windows later and
/// (except in MaxPool's single-output float path, which refuses it) still pools.
fn same_padding(
    auto_pad: &str,
    input: &[i64],
    kernel: &[i64],
    strides: &[i64],
) -> (Vec<i64>, Vec<i64>) {
    let mut lo = Vec::with_capacity(input.len());
    let mut hi = Vec::with_capacity(input.len());
    for i in 0..input.len() {
        let target = (input[i] + strides[i] - 1) / strides[i];
        let needed = (target - 1) * strides[i] + kernel[i] - input[i];
        let head = if auto_pad == "SAME_LOWER" {
            (needed + 1) / 2
        } else {
            needed / 2
        };
        lo.push(head);
        hi.push(needed - head);
    }
    (lo, hi)
}

/// A SAME-padded pool with a dilation above 1 is declined: ORT's CPU EP sizes its padding from
/// the undilated kernel (`(ceil(in / stride) - 1) * stride + kernel - in`) but dilates the
/// window, so its output is shorter than ONNX's `ceil(in / stride)` and its windows sit
/// elsewhere than ONNX's formula puts them; the EP would have to copy that departure.
fn pool_claim(node: &crate::Node) -> crate::Verdict {
    let same = node
        .attr_as::<String>("auto_pad")
        .is_some_and(|p| p.starts_with("SAME_"));
    let dilated = node
        .attr_as::<Vec<i64>>("dilations")
        .is_some_and(|d| d.iter().any(|&v| v != 1));
    if same && dilated {
        return crate::Verdict::decline(
            "SAME auto_pad with dilations > 1: ORT's CPU EP pads as if the kernel were \
             undilated, departing from ONNX's output shape",
        );
    }
    pool_attributes_claim(node)
}

/// ceil_mode is read as "equals 1" throughout, as ORT's CPU EP reads it (2 is floor mode there).
/// What ORT's CPU EP refuses when it loads the node is left to it: a storage_order other than 0
/// or 1, and a pad as large as the kernel on either side (ORT compares with the undilated
/// kernel, so dilated pools with such pads are refused too).
fn pool_attributes_claim(node: &crate::Node) -> crate::Verdict {
    let order = node.attr_or("storage_order", 0i64);
    if order != 0 && order != 1 {
        return crate::Verdict::decline(format!("storage_order {order} (ORT accepts 0 or 1)"));
    }
    if let (Some(kernel), Some(pads)) = (
        node.attr_as::<Vec<i64>>("kernel_shape"),
        node.attr_as::<Vec<i64>>("pads"),
    ) {
        if pads.len() != 2 * kernel.len() {
            return crate::Verdict::decline(format!(
                "pads {pads:?} are not two values for each of kernel_shape's {} axes (ORT's CPU \
                 EP refuses the node)",
                kernel.len()
            ));
        }
        let too_large = |(i, &k): (usize, &i64)| {
            [pads.get(i), pads.get(i + kernel.len())]
                .into_iter()
                .flatten()
                .any(|&p| p >= k)
        };
        if kernel.iter().enumerate().any(too_large) {
            return crate::Verdict::decline(format!(
                "pads {pads:?} not all smaller than kernel_shape {kernel:?} (ORT's CPU EP refuses \
                 the node: \"Pad should be smaller than kernel\")"
            ));
        }
    }
    if let (Some(kernel), Some(dilations)) = (
        node.attr_as::<Vec<i64>>("kernel_shape"),
        node.attr_as::<Vec<i64>>("dilations"),
    ) {
        if kernel
            .iter()
            .zip(&dilations)
            .any(|(&k, &d)| dilated_span(k, d).is_none())
        {
            return crate::Verdict::decline(format!(
                "dilations {dilations:?} over kernel_shape {kernel:?} pass int64 (ORT's CPU EP \
                 fails on the overflow)"
            ));
        }
    }
    match node.attr_or("auto_pad", String::from("NOTSET")).as_str() {
        "NOTSET" | "VALID" | "SAME_UPPER" | "SAME_LOWER" => crate::Verdict::Claim,
        other => crate::Verdict::decline(format!("auto_pad {other:?} is not an ONNX mode")),
    }
}

/// The extent of a dilated window, `(kernel - 1) * dilation + 1`, unless it passes int64.
fn dilated_span(kernel: i64, dilation: i64) -> Option<i64> {
    kernel.checked_sub(1)?.checked_mul(dilation)?.checked_add(1)
}

fn spatial(x: &Array) -> Result<Vec<i64>> {
    if x.ndim() < 3 {
        return Err(OpError::new("pooling needs [N, C, spatial..]"));
    }
    only_n_may_be_empty(x)?;
    Ok(x.shape()[2..].to_vec())
}

/// ORT's CPU EP pools a zero-size input only when N is 0 (`Size() > 0 || N == 0`): with an
/// empty batch any other axis may be 0 too, and the output is as empty.
fn only_n_may_be_empty(x: &Array) -> Result<()> {
    let dims = x.shape();
    if dims.first() != Some(&0) && dims.contains(&0) {
        return Err(OpError::new(format!(
            "input shape {:?}: only N may be 0 (ORT's CPU EP fails here too)",
            x.shape()
        )));
    }
    Ok(())
}

/// The maximum of each window (padding never wins); `Indices`, when asked for, is the flat
/// index into X of the first maximum in window order (row-major, or with the spatial axes
/// column-major for `storage_order` 1), as ORT's CPU EP gives it. Opset 12 adds int8/uint8.
#[allow(clippy::too_many_arguments)] // the pooling attributes, as ONNX has them
#[onnx_op(
    op = "MaxPool", since = 8, types(T = FLOAT | since(12, I8 | U8), I = I64), inputs(X: T), outputs(Y: T, Indices?: I),
    shape = ShapeKeyed, layout = ChannelsLast, claim = pool_claim,
    declines = "SAME auto_pad with dilations > 1 (ORT departs from ONNX there); pads not smaller than the kernel, or not two for each kernel axis, and dilated windows past int64 (ORT refuses each)"
)]
fn max_pool(
    cx: &mut Lower,
    x: Array,
    #[attr(default = "NOTSET")] auto_pad: String,
    #[attr(default = 0, since = 10)] ceil_mode: i64,
    #[attr(since = 10)] dilations: Option<Vec<i64>>,
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
        ceil_mode == 1,
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
        if !column_major {
            refuse_negative_padding(x, windows)?;
        }
        return Ok(vec![window_max(cx, x, windows)?]);
    }
    let s = cx.stream();
    if windows.out.contains(&0) || x.size() == 0 {
        // No windows or no images (MLX's argmax refuses an empty array): both outputs are empty.
        let mut shape = x.shape()[..2].to_vec();
        shape.extend(&windows.out);
        let empty =
            |dtype| -> Result<Array> { Ok(ops::broadcast_to(&scalar(0.0, dtype, s)?, &shape, s)?) };
        return Ok(vec![empty(x.dtype())?, empty(Dtype::I64)?]);
    }
    // Windows flattened to one axis of K taps, in row-major window order.
    let taps: i64 = windows.kernel.iter().product();
    let flat = |windows_view: Array| -> Result<Array> {
        let mut shape = windows_view.shape()[..2 + windows.kernel.len()].to_vec();
        shape.push(taps);
        Ok(ops::reshape(&windows_view, &shape, s)?)
    };
    let values = flat(windows.view(x, &padding_value(x.dtype(), s)?, false, s)?)?;
    let numbering = flat_positions(x, column_major, s)?;
    let positions = flat(windows.view(&numbering, &scalar(-1.0, Dtype::I64, s)?, false, s)?)?;
    let y = ops::max(&values, &[-1], true, s)?;
    // The first tap that holds the maximum and lies inside X (padding can tie an integer minimum).
    let hit = ops::logical_and(
        &ops::equal(&values, &y, s)?,
        &ops::greater_equal(&positions, &scalar(0.0, Dtype::I64, s)?, s)?,
        s,
    )?;
    let first = ops::argmax(&ops::astype(&hit, Dtype::U8, s)?, -1, true, s)?;
    let indices = ops::take_along_axis(&positions, &first, -1, s)?;
    let (y, indices) = (
        ops::squeeze(&y, &[-1], s)?,
        ops::squeeze(&indices, &[-1], s)?,
    );
    // A window of padding only (dilations can make one): ORT reports every spatial index of
    // its never-updated maximum as -1, folded into the flat index like real ones.
    let padding_only = ops::less(
        &ops::max(&positions, &[-1], false, s)?,
        &scalar(0.0, Dtype::I64, s)?,
        s,
    )?;
    let origin = origin_index(&numbering, windows.kernel.len(), column_major, s)?;
    let indices = ops::where_(&padding_only, &origin, &indices, s)?;
    Ok(vec![empty_window_answer(&y, &padding_only, s)?, indices])
}

/// Each (n, c) image's flat index of the spatial position (-1, ..., -1), shaped
/// `[N, C, 1, ...]`: the index ORT's CPU EP gives a window that holds padding only.
fn origin_index(
    numbering: &Array,
    spatial: usize,
    column_major: bool,
    s: &Stream,
) -> Result<Array> {
    let dims = numbering.shape();
    let mut stop: Vec<i32> = dims.iter().map(|&d| d as i32).collect();
    for d in &mut stop[2..] {
        *d = 1;
    }
    let corner = ops::slice(
        numbering,
        &vec![0; dims.len()],
        &stop,
        &vec![1; dims.len()],
        s,
    )?;
    let spatial_dims = &dims[2..2 + spatial];
    // The flat step of each spatial axis in the numbering's storage order.
    let step = |i: usize| -> i64 {
        if column_major {
            spatial_dims[..i].iter().product()
        } else {
            spatial_dims[i + 1..].iter().product()
        }
    };
    let back: i64 = (0..spatial).map(step).sum();
    Ok(ops::subtract(
        &corner,
        &scalar(back as f64, Dtype::I64, s)?,
        s,
    )?)
}

/// ORT's value for a max window of padding only is the type's lowest finite value for float32
/// (its running maximum starts there); for the other types it is what the padding already
/// holds (-inf for float16, the minimum for integers).
fn empty_window_answer(y: &Array, padding_only: &Array, s: &Stream) -> Result<Array> {
    if y.dtype() != Dtype::F32 {
        return Ok(y.clone());
    }
    let lowest = scalar(f64::from(f32::MIN), Dtype::F32, s)?;
    Ok(ops::where_(padding_only, &lowest, y, s)?)
}

/// ORT's CPU EP runs a float MaxPool with one output and row-major storage through a kernel
/// that refuses negative padding (SAME with a stride above the kernel), where its other
/// paths pool anyway: fail the same way.
fn refuse_negative_padding(x: &Array, windows: &Windows) -> Result<()> {
    if x.dtype().is_float() && windows.has_negative_padding() {
        return Err(OpError::new(
            "SAME padding comes out negative here (a stride larger than the kernel); ORT's \
             CPU EP refuses this MaxPool too",
        ));
    }
    Ok(())
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

/// The padding of a max window, below every real element: -inf for floats, the type's
/// minimum for integers.
fn padding_value(dtype: Dtype, s: &Stream) -> Result<Array> {
    let lowest = match dtype {
        Dtype::I8 => f64::from(i8::MIN),
        Dtype::U8 => 0.0,
        _ => f64::NEG_INFINITY,
    };
    scalar(lowest, dtype, s)
}

/// MaxPool before opset 8: no dilations, ceil_mode or Indices output. A row of its own: opset 8
/// adds an output (`Indices`), and outputs have no opset gate in the table.
#[onnx_op(
    op = "MaxPool", opset = 1..=7, types(T = FLOAT), inputs(X: T), outputs(Y: T), shape = ShapeKeyed,
    layout = ChannelsLast, claim = pool_attributes_claim, declines = "pads not smaller than the kernel, or not two for each kernel axis (ORT refuses both)"
)]
fn max_pool_legacy(
    cx: &mut Lower,
    x: Array,
    #[attr(default = "NOTSET")] auto_pad: String,
    #[attr] kernel_shape: Vec<i64>,
    #[attr] pads: Option<Vec<i64>>,
    #[attr] strides: Option<Vec<i64>>,
) -> Result<Array> {
    let windows = Windows::new(&x, kernel_shape, strides, None, pads, &auto_pad, false)?;
    refuse_negative_padding(&x, &windows)?;
    window_max(cx, &x, &windows)
}

fn window_max(cx: &mut Lower, x: &Array, windows: &Windows) -> Result<Array> {
    let s = cx.stream();
    if windows.foldable() {
        // Undilated pads are smaller than the kernel: every window holds an input element.
        let fill = padding_value(x.dtype(), s)?;
        let max = |a: &Array, b: &Array| -> Result<Array> { Ok(ops::maximum(a, b, s)?) };
        return cx.in_either_layout(x, |x, spatial_from| {
            windows.fold_taps(x, &fill, spatial_from, false, max, s)
        });
    }
    let y = ops::max(
        &windows.view(x, &padding_value(x.dtype(), s)?, false, s)?,
        &windows.kernel_axes(),
        false,
        s,
    )?;
    if windows.dilations.iter().all(|&d| d == 1) {
        // Pads are smaller than the kernel, so every undilated window holds an input element.
        return Ok(y);
    }
    let ones = ops::broadcast_to(&scalar(1.0, Dtype::F32, s)?, &x.shape(), s)?;
    let inside = ops::max(
        &windows.view(&ones, &scalar(0.0, Dtype::F32, s)?, false, s)?,
        &windows.kernel_axes(),
        false,
        s,
    )?;
    let padding_only = ops::equal(&inside, &scalar(0.0, Dtype::F32, s)?, s)?;
    empty_window_answer(&y, &padding_only, s)
}

/// The mean of each window: over the window's input elements, or (`count_include_pad`) over
/// its declared padding too.
#[allow(clippy::too_many_arguments)] // the pooling attributes, as ONNX has them
#[onnx_op(
    op = "AveragePool", since = 7, types(T = FLOAT), inputs(X: T), outputs(Y: T), shape = ShapeKeyed,
    layout = ChannelsLast, claim = pool_claim,
    declines = "SAME auto_pad with dilations > 1 (ORT departs from ONNX there); pads not smaller than the kernel, or not two for each kernel axis, and dilated windows past int64 (ORT refuses each)"
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
    let windows = Windows::new(
        &x,
        kernel_shape,
        strides,
        dilations,
        pads,
        &auto_pad,
        ceil_mode == 1,
    )?;
    let zero = scalar(0.0, Dtype::F32, s)?;
    let pad_weight = scalar(
        if count_include_pad != 0 { 1.0 } else { 0.0 },
        Dtype::F32,
        s,
    )?;
    if windows.foldable() {
        let add = |a: &Array, b: &Array| -> Result<Array> { Ok(ops::add(a, b, s)?) };
        // Each window's divisor depends on its position alone: folded over one image of ones.
        let mean = |x: &Array, spatial_from: usize| -> Result<Array> {
            let sums = windows.fold_taps(
                &ops::astype(x, Dtype::F32, s)?,
                &zero,
                spatial_from,
                false,
                add,
                s,
            )?;
            let mut image = x.shape();
            let channels = if spatial_from == 2 {
                1
            } else {
                image.len() - 1
            };
            image[0] = 1;
            image[channels] = 1;
            let ones = ops::broadcast_to(&scalar(1.0, Dtype::F32, s)?, &image, s)?;
            let counts = windows.fold_taps(&ones, &pad_weight, spatial_from, true, add, s)?;
            Ok(ops::astype(&ops::divide(&sums, &counts, s)?, x.dtype(), s)?)
        };
        return cx.in_either_layout(&x, mean);
    }
    let wide = ops::astype(&x, Dtype::F32, s)?;
    let sums = ops::sum(
        &windows.view(&wide, &zero, false, s)?,
        &windows.kernel_axes(),
        false,
        s,
    )?;
    // Each window's divisor: its input elements, plus its declared padding when counted.
    let ones = ops::broadcast_to(&scalar(1.0, Dtype::F32, s)?, &x.shape(), s)?;
    let counted = windows.view(&ones, &pad_weight, true, s)?;
    // A window of padding only (dilations can make one) counts nothing: ORT's answer is 0.
    let counts = ops::maximum(
        &ops::sum(&counted, &windows.kernel_axes(), false, s)?,
        &scalar(1.0, Dtype::F32, s)?,
        s,
    )?;
    Ok(ops::astype(&ops::divide(&sums, &counts, s)?, x.dtype(), s)?)
}

fn lp_claim(node: &crate::Node) -> crate::Verdict {
    match node.attr_or("p", 2i64) {
        p if p < 1 => crate::Verdict::decline(format!("p = {p} (the norm needs p >= 1)")),
        _ => pool_claim(node),
    }
}

/// The p-norm of `x` over `axes`, accumulated in float32: `(sum |x|^p)^(1/p)`.
fn lp_norm(x: &Array, p: i64, axes: &[i32], keepdims: bool, s: &Stream) -> Result<Array> {
    let sums = ops::sum(&lp_powers(x, p, s)?, axes, keepdims, s)?;
    lp_root(&sums, p, x.dtype(), s)
}

/// `|x|^p` in float32, the terms of a p-norm.
fn lp_powers(x: &Array, p: i64, s: &Stream) -> Result<Array> {
    let wide = ops::astype(x, Dtype::F32, s)?;
    Ok(ops::power(
        &ops::abs(&wide, s)?,
        &scalar(p as f64, Dtype::F32, s)?,
        s,
    )?)
}

/// `sums^(1/p)` in `dtype`, a p-norm from its summed terms.
fn lp_root(sums: &Array, p: i64, dtype: Dtype, s: &Stream) -> Result<Array> {
    let root = ops::power(sums, &scalar(1.0 / p as f64, Dtype::F32, s)?, s)?;
    Ok(ops::astype(&root, dtype, s)?)
}

/// The p-norm of each window; padding contributes zero.
#[allow(clippy::too_many_arguments)] // the pooling attributes, as ONNX has them
#[onnx_op(
    op = "LpPool", since = 2, types(T = FLOAT), inputs(X: T), outputs(Y: T), shape = ShapeKeyed,
    layout = ChannelsLast, claim = lp_claim,
    declines = "p < 1; SAME auto_pad with dilations > 1 (ORT departs from ONNX there); pads not smaller than the kernel, or not two for each kernel axis, and dilated windows past int64 (ORT refuses each)"
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
        ceil_mode == 1,
    )?;
    if windows.foldable() {
        // Padding adds zero terms; the taps' terms are summed as slices (as AveragePool's).
        let zero = scalar(0.0, Dtype::F32, s)?;
        let add = |a: &Array, b: &Array| -> Result<Array> { Ok(ops::add(a, b, s)?) };
        let norm = |x: &Array, spatial_from: usize| -> Result<Array> {
            let terms = lp_powers(x, p, s)?;
            let sums = windows.fold_taps(&terms, &zero, spatial_from, false, add, s)?;
            lp_root(&sums, p, x.dtype(), s)
        };
        return cx.in_either_layout(&x, norm);
    }
    let zero = scalar(0.0, x.dtype(), s)?;
    lp_norm(
        &windows.view(&x, &zero, false, s)?,
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
    only_n_may_be_empty(&x)?;
    lp_norm(&x, p, &spatial_axes(&x)?, true, cx.stream())
}

/// What ORT's MaxUnpool refuses when it loads the node: left to it, so that its error is the one
/// the user sees.
fn max_unpool_claim(node: &crate::Node) -> crate::Verdict {
    let ints = |name: &str| node.attr_as::<Vec<i64>>(name).unwrap_or_default();
    let (kernel, strides) = (ints("kernel_shape"), ints("strides"));
    if kernel.iter().chain(&strides).any(|&v| v <= 0) {
        return crate::Verdict::decline(format!(
            "kernel_shape {kernel:?} or strides {strides:?} not positive (ORT refuses them)"
        ));
    }
    // Its pads, as the pools': two an axis, each smaller than the kernel.
    pool_attributes_claim(node)
}

/// MaxPool's inverse: `Y` of zeros with each element of `X` written at its index in `I`, a
/// flat index into the whole of `Y` (batch and channels included, as MaxPool's Indices are).
/// `Y`'s shape is `output_shape` when given, else each spatial axis `(in - 1)·stride + kernel -
/// pads`. Where several elements share an index the last one wins, as in ORT's loop; an index
/// outside `Y` fails the run, as on ORT.
#[onnx_op(
    op = "MaxUnpool", since = 9, types(T1 = FLOAT, T2 = I64),
    inputs(X: T1, I: T2, output_shape: T2), outputs(output: T1),
    shape = ShapeKeyed, claim = max_unpool_claim,
    declines = "kernel_shape or strides not positive; pads not smaller than the kernel, or not two for each kernel axis (ORT refuses them)"
)]
fn max_unpool(
    cx: &mut Lower,
    x: Array,
    indices: Array,
    #[host] output_shape: Option<Vec<i64>>,
    #[attr] kernel_shape: Vec<i64>,
    #[attr] pads: Option<Vec<i64>>,
    #[attr] strides: Option<Vec<i64>>,
) -> Result<Array> {
    let s = cx.stream();
    let dims = x.shape();
    let r = kernel_shape.len();
    if dims.len() != r + 2 || indices.shape() != dims {
        return Err(OpError::new(format!(
            "X {dims:?} and I {:?} must have the same shape, with {r} spatial axes (kernel_shape {kernel_shape:?})",
            indices.shape()
        )));
    }
    let strides = strides.unwrap_or_else(|| vec![1; r]);
    let pads = pads.unwrap_or_else(|| vec![0; 2 * r]);
    if strides.len() != r || pads.len() != 2 * r {
        return Err(OpError::new(format!(
            "strides {strides:?} and pads {pads:?} do not fit kernel_shape {kernel_shape:?}"
        )));
    }
    // ORT computes this shape whether or not output_shape is given, and refuses a run where
    // one of its dimensions is not positive or output_shape is smaller.
    let mut inferred = dims[..2].to_vec();
    inferred.extend(
        (0..r).map(|d| (dims[d + 2] - 1) * strides[d] + kernel_shape[d] - pads[d] - pads[r + d]),
    );
    if let Some(d) = (0..r).find(|&d| inferred[d + 2] <= 0) {
        return Err(OpError::new(format!(
            "the output's spatial axis {d} would be {} (ORT's CPU EP refuses such a run too)",
            inferred[d + 2]
        )));
    }
    if let Some(shape) = &output_shape {
        let smaller = shape.len() == dims.len() && (2..dims.len()).any(|d| shape[d] < inferred[d]);
        if smaller {
            return Err(OpError::new(format!(
                "output_shape {shape:?} is smaller than the {inferred:?} the pooling implies (ORT's \
                 CPU EP refuses it too)"
            )));
        }
    }
    let out_shape = output_shape.unwrap_or(inferred);
    if out_shape.len() != dims.len()
        || out_shape.iter().any(|&d| d < 0)
        || out_shape[..2] != dims[..2]
    {
        return Err(OpError::new(format!(
            "the output shape {out_shape:?} does not fit X {dims:?} (batch and channels must match)"
        )));
    }
    let total: i64 = out_shape.iter().product();
    let count = x.size() as i64;
    if count == 0 || total == 0 {
        if count > 0 {
            return Err(OpError::new(format!(
                "X holds {count} elements but the output {out_shape:?} none: every index is out of bounds"
            )));
        }
        return crate::table::consts::zeros(&out_shape, x.dtype(), s);
    }
    let flat_indices = ops::reshape(&indices, &[count], s)?;
    cx.require_in_range(
        &flat_indices,
        0,
        total - 1,
        format!("an index of I is out of bounds: the valid range is [0, {total})"),
    )?;
    // Kept in bounds whatever the check finds: MLX's scatter does not check.
    let rows = crate::indexing::in_bounds(&flat_indices, total, s)?;
    let empty = crate::table::consts::zeros(&[total], x.dtype(), s)?;
    let values = ops::reshape(&x, &[count, 1], s)?;
    let y = crate::indexing::scatter_rows(&empty, &rows, &values, ops::ScatterMode::Set, s)?;
    Ok(ops::reshape(&y, &out_shape, s)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::testing::decline_reason;

    #[test]
    fn window_counts_follow_ort_truncation_and_ceil_rules() {
        // (input, lo, hi, span, stride, ceil) -> ORT 1.31.1's output length.
        let cases = [
            ((3, 0, 0, 5, 1, true), None),     // negative: ORT fails
            ((3, 0, 0, 5, 1, false), None),    // negative: ORT fails
            ((3, 1, 1, 6, 1, true), Some(0)),  // zero windows
            ((3, 0, 0, 5, 2, true), Some(0)),  // zero windows
            ((1, 0, 0, 2, 2, false), Some(1)), // -1 / 2 truncates to 0
            ((1, 0, 0, 2, 2, true), Some(1)),
            ((5, 0, 0, 2, 2, true), Some(3)),
            ((5, 0, 0, 2, 2, false), Some(2)),
            ((4, 0, 1, 2, 2, true), Some(2)), // the third would start in the end padding
        ];
        for ((input, lo, hi, span, stride, ceil), want) in cases {
            let got = output_length(input, lo, hi, span, stride, ceil).ok();
            assert_eq!(got, want, "{input} {lo} {hi} {span} {stride} {ceil}");
        }
    }

    #[test]
    fn same_padding_halves_by_truncation_and_may_go_negative() {
        assert_eq!(
            same_padding("SAME_UPPER", &[9], &[2], &[8]),
            (vec![0], vec![1])
        );
        assert_eq!(
            same_padding("SAME_LOWER", &[9], &[2], &[8]),
            (vec![1], vec![0])
        );
        // (ceil(4 / 7) - 1) * 7 + 1 - 4 = -3: UPPER -3 / 2 = -1, LOWER -2 / 2 = -1.
        assert_eq!(
            same_padding("SAME_UPPER", &[4], &[1], &[7]),
            (vec![-1], vec![-2])
        );
        assert_eq!(
            same_padding("SAME_LOWER", &[4], &[1], &[7]),
            (vec![-1], vec![-2])
        );
    }

    #[test]
    fn same_padding_with_dilations_is_declined() {
        let node = crate::Node::new("MaxPool", 12)
            .attr("auto_pad", crate::AttrValue::String("SAME_UPPER".into()))
            .attr("dilations", crate::AttrValue::Ints(vec![1, 2]));
        let crate::Verdict::Decline { reason } = pool_claim(&node) else {
            panic!("claimed")
        };
        assert!(reason.contains("dilations > 1"), "{reason}");
        let undilated = crate::Node::new("MaxPool", 12)
            .attr("auto_pad", crate::AttrValue::String("SAME_UPPER".into()))
            .attr("dilations", crate::AttrValue::Ints(vec![1, 1]));
        assert!(pool_claim(&undilated).is_claim());
    }

    fn max_pool(opset: i64, x: crate::ElemType) -> crate::Node {
        crate::Node::new("MaxPool", opset)
            .input(x)
            .output(x)
            .attr("kernel_shape", crate::AttrValue::Ints(vec![2, 2]))
    }

    #[test]
    fn one_declaration_serves_max_pool_8_to_12_by_its_gates() {
        use crate::{AttrValue, Decision, ElemType};
        // int8/uint8 from opset 12 only.
        assert!(matches!(
            crate::decide(&max_pool(12, ElemType::Int8)),
            Decision::Claim { .. }
        ));
        let reason = decline_reason(&max_pool(11, ElemType::Uint8));
        assert!(reason.contains("MaxPool-11"), "{reason}");
        // ceil_mode and dilations exist from opset 10.
        let ceil = |opset| max_pool(opset, ElemType::Float).attr("ceil_mode", AttrValue::Int(1));
        assert!(matches!(crate::decide(&ceil(10)), Decision::Claim { .. }));
        let reason = decline_reason(&ceil(8));
        assert!(reason.contains("not part of MaxPool-8"), "{reason}");
    }
}
