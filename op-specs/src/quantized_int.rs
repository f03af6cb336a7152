//! Integer matrix products of quantised models: ai.onnx MatMulInteger and QLinearMatMul.
//!
//! ORT accumulates `(a - a_zero_point) · (b - b_zero_point)` exactly in int32 (wrapping past
//! 2^31). MLX's matmul takes floating types only, so the centred operands (integers in
//! [-255, 255]) are split into 4-bit halves, `v = 16·hi + lo` with `lo` in [0, 15] and `hi` in
//! [-16, 15]: each of the four float32 products `hi·hi`, `hi·lo`, `lo·hi`, `lo·lo` sums terms of
//! magnitude at most 256, so over at most 65,536 terms every partial sum is an integer below
//! 2^24 and float32 holds it exactly, in any summation order. Longer K is cut into chunks of
//! 65,536. The four products are recombined in int32 with wrap-around, which is ORT's int32
//! sum.
//!
//! The sums are exact for every input. ORT's uint8 x int8 kernel on x86 CPUs without VNNI
//! (`vpmaddubsw`) saturates the int16 sum of each pair of products, so for int8 B values
//! outside [-64, 63] ORT's answer can differ from the exact one (its quantisation tool's
//! `reduce_range` exists for that); the EP gives the exact sum there.

use mlx_kernels::{ops, Array, Dtype, Stream};

use crate::qdq::{quantize, Rounding};
use crate::table::consts::scalar;
use crate::table::dtypes::ElemType;
use crate::{onnx_op, Lower, Node, OpError, Result, Verdict};

/// The most terms a float32 product of 4-bit halves sums exactly (see the module doc).
const EXACT_K: i64 = 65_536;

fn one_element(a: &Array) -> bool {
    let shape = a.shape();
    shape.is_empty() || shape == [1]
}

/// `x` (int8/uint8) minus its zero point, as int32.
fn centred(x: &Array, zero_point: Option<&Array>, s: &Stream) -> Result<Array> {
    let x = ops::astype(x, Dtype::I32, s)?;
    Ok(match zero_point {
        Some(zp) => ops::subtract(&x, &ops::astype(zp, Dtype::I32, s)?, s)?,
        None => x,
    })
}

/// A per-tensor parameter of `op` as a 0-d array; `what` names it in the error.
fn per_tensor(op: &str, a: &Array, what: &str, s: &Stream) -> Result<Array> {
    if !one_element(a) {
        return Err(OpError::new(format!(
            "{op}: {what} has shape {:?}; it must be a scalar or 1-D of size 1",
            a.shape()
        )));
    }
    Ok(ops::reshape(a, &[], s)?)
}

/// A parameter of B (zero point or scale): one value, or one per column of B (`[N]`, or B's
/// shape with 1 for K; `[N]` only for a 2-D B), laid out to broadcast against the product.
fn per_column(op: &str, p: &Array, b_shape: &[i64], what: &str, s: &Stream) -> Result<Array> {
    if one_element(p) {
        return Ok(ops::reshape(p, &[], s)?);
    }
    let shape = p.shape();
    let rank = b_shape.len();
    if rank == 2 && shape == [b_shape[1]] {
        return Ok(p.clone());
    }
    if rank >= 2 {
        let mut column = b_shape.to_vec();
        column[rank - 2] = 1;
        if shape == column {
            return Ok(p.clone());
        }
    }
    Err(OpError::new(format!(
        "{op}: {what} has shape {shape:?}; for B {b_shape:?} it must be a scalar, 1-D of size \
         1, [N] (B 2-D), or B's shape with 1 for K"
    )))
}

/// `[hi, lo]` of int32 `v`: `v = 16·hi + lo`, `lo` in [0, 15], as float32.
fn halves(v: &Array, s: &Stream) -> Result<(Array, Array)> {
    let four = scalar(4.0, Dtype::I32, s)?;
    let fifteen = scalar(15.0, Dtype::I32, s)?;
    let hi = ops::astype(&ops::right_shift(v, &four, s)?, Dtype::F32, s)?;
    let lo = ops::astype(&ops::bitwise_and(v, &fifteen, s)?, Dtype::F32, s)?;
    Ok((hi, lo))
}

/// The exact int32 `product(a, b)` of a bilinear float32 product (matmul, convolution) over
/// int32 operands, from four products of their 4-bit halves, each exact in float32:
/// `256·(ah·bh) + 16·(ah·bl + al·bh) + al·bl`.
fn product_of_halves(
    a: &Array,
    b: &Array,
    s: &Stream,
    product: impl Fn(&Array, &Array) -> Result<Array>,
) -> Result<Array> {
    let (ah, al) = halves(a, s)?;
    let (bh, bl) = halves(b, s)?;
    let hh = product(&ah, &bh)?;
    let mixed = ops::add(&product(&ah, &bl)?, &product(&al, &bh)?, s)?;
    let ll = product(&al, &bl)?;
    Ok(ops::add(
        &ops::add(
            &ops::multiply(&hh, &scalar(256.0, Dtype::I32, s)?, s)?,
            &ops::multiply(&mixed, &scalar(16.0, Dtype::I32, s)?, s)?,
            s,
        )?,
        &ll,
        s,
    )?)
}

/// `x[..., start..stop]` along `axis`.
fn cut(x: &Array, axis: usize, start: i64, stop: i64, s: &Stream) -> Result<Array> {
    let shape = x.shape();
    let mut from = vec![0; shape.len()];
    let mut to: Vec<i32> = shape.iter().map(|&d| d as i32).collect();
    from[axis] = start as i32;
    to[axis] = stop as i32;
    let step = vec![1; shape.len()];
    Ok(ops::slice(x, &from, &to, &step, s)?)
}

/// The exact int32 product (numpy matmul rules) of centred int32 operands in [-255, 255].
pub(crate) fn exact_matmul(a: &Array, b: &Array, s: &Stream) -> Result<Array> {
    if a.ndim() == 0 || b.ndim() == 0 {
        return Err(OpError::new("matmul operands must have rank >= 1"));
    }
    let k = a.shape().last().copied().unwrap_or(0);
    let b_k_axis = if b.ndim() == 1 { 0 } else { b.ndim() - 2 };
    if b.shape()[b_k_axis] != k {
        return Err(OpError::new(format!(
            "shapes {:?} and {:?} do not line up for a matrix product",
            a.shape(),
            b.shape()
        )));
    }
    if k == 0 {
        // A sum over nothing: zeros of the product's shape.
        let shape = ops::matmul(
            &ops::astype(a, Dtype::F32, s)?,
            &ops::astype(b, Dtype::F32, s)?,
            s,
        )?
        .shape();
        return Ok(ops::broadcast_to(&scalar(0.0, Dtype::I32, s)?, &shape, s)?);
    }
    let i32s = |v: &Array| ops::astype(v, Dtype::I32, s);
    let mut total: Option<Array> = None;
    let mut start = 0;
    while start < k {
        let stop = (start + EXACT_K).min(k);
        let (a_part, b_part) = if start == 0 && stop == k {
            (a.clone(), b.clone())
        } else {
            (
                cut(a, a.ndim() - 1, start, stop, s)?,
                cut(b, b_k_axis, start, stop, s)?,
            )
        };
        let part = product_of_halves(&a_part, &b_part, s, |a, b| {
            Ok(i32s(&ops::matmul(a, b, s)?)?)
        })?;
        total = Some(match total {
            Some(t) => ops::add(&t, &part, s)?,
            None => part,
        });
        start = stop;
    }
    total.ok_or_else(|| OpError::new("empty product"))
}

/// `(A - a_zero_point) · (B - b_zero_point)` in int32 (numpy matmul rules), exact and wrapping
/// past 2^31 as ORT's int32 accumulation. `a_zero_point` is one value; `b_zero_point` one
/// value or one per column of B. Computed as float32 products of 4-bit halves, each provably
/// exact (the file's header says why).
#[onnx_op(
    op = "MatMulInteger", since = 10,
    types(T1 = I8 | U8, T2 = I8 | U8, T3 = I32),
    inputs(A: T1, B: T2, a_zero_point: T1, b_zero_point: T2), outputs(Y: T3),
    shape = ShapeKeyed
)]
fn matmul_integer(
    cx: &mut Lower,
    a: Array,
    b: Array,
    a_zero_point: Option<Array>,
    b_zero_point: Option<Array>,
) -> Result<Array> {
    let s = cx.stream();
    let op = "MatMulInteger";
    let a_zp = a_zero_point
        .map(|zp| per_tensor(op, &zp, "a_zero_point", s))
        .transpose()?;
    let b_zp = b_zero_point
        .map(|zp| per_column(op, &zp, &b.shape(), "b_zero_point", s))
        .transpose()?;
    exact_matmul(
        &centred(&a, a_zp.as_ref(), s)?,
        &centred(&b, b_zp.as_ref(), s)?,
        s,
    )
}

/// The int8/uint8 pairs ORT's QLinearMatMul kernels take: uint8 A with uint8 or int8 B into
/// uint8, int8 A with int8 B into int8.
fn qlinear_matmul_claim(node: &Node) -> Verdict {
    let (a, b, y) = (node.input_type(0), node.input_type(3), node.output_type(0));
    match (a, b, y) {
        (Some(ElemType::Uint8), _, Some(ElemType::Uint8)) => Verdict::Claim,
        (Some(ElemType::Int8), Some(ElemType::Int8), Some(ElemType::Int8)) => Verdict::Claim,
        _ => Verdict::decline(format!(
            "a {a:?}, b {b:?}, y {y:?}: ORT's CPU kernels take uint8 a (uint8 or int8 b) into \
             uint8, or int8 a and b into int8"
        )),
    }
}

/// Quantised matrix product: the exact int32 product of the centred operands (as
/// MatMulInteger), times `a_scale · b_scale / y_scale` in float32, rounded half to even, plus
/// `y_zero_point`, saturated (NaN to the lowest value), as ORT's x86 requantisation. `b_scale`
/// and `b_zero_point` may be per column; the other parameters are single values. float16
/// scales (opset 21) are widened to float32 first: ORT runs its float kernel behind casts.
#[allow(clippy::too_many_arguments)] // eight inputs, as ONNX has them
#[onnx_op(
    op = "QLinearMatMul", precision = Float32, since = 10,
    types(T1 = I8 | U8, TS = F32 | F16, T2 = I8 | U8, T3 = I8 | U8),
    inputs(a: T1, a_scale: TS, a_zero_point: T1, b: T2, b_scale: TS, b_zero_point: T2,
           y_scale: TS, y_zero_point: T3),
    outputs(y: T3), shape = ShapeKeyed, claim = qlinear_matmul_claim,
    declines = "int8 a with uint8 b, and outputs of another signedness than a (ORT's CPU EP has no kernel for them)"
)]
fn qlinear_matmul(
    cx: &mut Lower,
    a: Array,
    a_scale: Array,
    a_zero_point: Array,
    b: Array,
    b_scale: Array,
    b_zero_point: Array,
    y_scale: Array,
    y_zero_point: Array,
) -> Result<Array> {
    let s = cx.stream();
    let op = "QLinearMatMul";
    let b_shape = b.shape();
    let a_zp = per_tensor(op, &a_zero_point, "a_zero_point", s)?;
    let b_zp = per_column(op, &b_zero_point, &b_shape, "b_zero_point", s)?;
    let y_zp = per_tensor(op, &y_zero_point, "y_zero_point", s)?;
    // float16 scales are widened exactly, as ORT's cast insertion does for its float kernel.
    let f32 = |a: Array| ops::astype(&a, Dtype::F32, s);
    let a_scale = f32(per_tensor(op, &a_scale, "a_scale", s)?)?;
    let b_scale = f32(per_column(op, &b_scale, &b_shape, "b_scale", s)?)?;
    let y_scale = f32(per_tensor(op, &y_scale, "y_scale", s)?)?;
    let acc = exact_matmul(
        &centred(&a, Some(&a_zp), s)?,
        &centred(&b, Some(&b_zp), s)?,
        s,
    )?;
    // (a_scale * b_scale) / y_scale, in ORT's order.
    let scale = ops::divide(&ops::multiply(&a_scale, &b_scale, s)?, &y_scale, s)?;
    let v = ops::multiply(&ops::astype(&acc, Dtype::F32, s)?, &scale, s)?;
    let one = scalar(1.0, Dtype::F32, s)?;
    quantize(
        &v,
        &one,
        Some(&y_zp),
        y_zero_point.dtype(),
        Rounding::Float,
        s,
    )
}

/// Conv's attributes, as ConvInteger and QLinearConv carry them.
struct ConvAttrs {
    auto_pad: String,
    dilations: Option<Vec<i64>>,
    group: i64,
    kernel_shape: Option<Vec<i64>>,
    pads: Option<Vec<i64>>,
    strides: Option<Vec<i64>>,
}

fn to_i32(values: &[i64]) -> Vec<i32> {
    values.iter().map(|&v| v as i32).collect()
}

/// The exact int32 convolution (channels first, ONNX's Conv rules) of centred int32 `x [N, C,
/// d..]` and `w [M, C / group, k..]` with values in [-255, 255]: zero padding, which is the
/// padding ORT's kernels apply (they pad x with its zero point before centring).
fn exact_conv(op: &str, x: &Array, w: &Array, attrs: &ConvAttrs, s: &Stream) -> Result<Array> {
    let fail = |what: String| Err(OpError::new(format!("{op}: {what}")));
    let rank = x.ndim();
    if rank < 3 || w.ndim() != rank {
        return fail(format!(
            "x of rank {rank} and w of rank {} do not make a convolution",
            w.ndim()
        ));
    }
    let (x_shape, w_shape) = (x.shape(), w.shape());
    let spatial = rank - 2;
    let kernel = w_shape[2..].to_vec();
    if attrs.kernel_shape.as_ref().is_some_and(|k| *k != kernel) {
        return fail(format!(
            "kernel_shape {:?} differs from w's {kernel:?}",
            attrs.kernel_shape
        ));
    }
    let group = attrs.group;
    let channels = x_shape[1];
    if group < 1
        || channels % group != 0
        || w_shape[1] * group != channels
        || w_shape[0] % group != 0
    {
        return fail(format!(
            "x's {channels} channels and w {w_shape:?} do not split into {group} groups"
        ));
    }
    let terms = w_shape[1..].iter().product::<i64>();
    if terms > EXACT_K {
        return fail(format!(
            "{terms} products per output: past {EXACT_K} a float32 sum of 4-bit halves is not \
             exact (run the node on ORT's CPU EP)"
        ));
    }
    let strides = attrs.strides.clone().unwrap_or_else(|| vec![1; spatial]);
    let dilations = attrs.dilations.clone().unwrap_or_else(|| vec![1; spatial]);
    if strides.len() != spatial || dilations.len() != spatial {
        return fail("strides/dilations do not match the spatial rank".into());
    }
    if strides.iter().chain(&dilations).any(|&v| v < 1) {
        return fail("strides and dilations must be positive".into());
    }
    let (lo, hi) = crate::conv::conv_padding(
        &attrs.auto_pad,
        attrs.pads.as_deref(),
        &x_shape[2..],
        &kernel,
        &strides,
        &dilations,
    )
    .map_err(|e| OpError::new(format!("{op}: {}", e.message)))?;
    let same = attrs.auto_pad.starts_with("SAME");
    let mut out_shape = vec![x_shape[0], w_shape[0]];
    for i in 0..spatial {
        let span = x_shape[2 + i] + lo[i] + hi[i] - (dilations[i] * (kernel[i] - 1) + 1);
        let length = match (same, span < 0) {
            (true, _) => (x_shape[2 + i] + strides[i] - 1) / strides[i],
            (false, true) => 0,
            (false, false) => span / strides[i] + 1,
        };
        // ORT checks every output extent before it looks at the batch.
        if length <= 0 {
            return fail(format!(
                "x has shape {x_shape:?}: spatial axis {i} leaves no output (invalid input shape)"
            ));
        }
        out_shape.push(length);
    }
    let zeros = || -> Result<Array> {
        Ok(ops::broadcast_to(
            &scalar(0.0, Dtype::I32, s)?,
            &out_shape,
            s,
        )?)
    };
    if x_shape[0] == 0 || w_shape[0] == 0 {
        // No images or no output channels: an empty output, as ORT's.
        return zeros();
    }
    // ORT's GEMM of depth 0 (no input channels, or an empty kernel) writes nothing: its
    // answer is uninitialised memory (ORT 1.31.1 returns different values run to run).
    if channels == 0 || kernel.contains(&0) {
        return fail(format!(
            "x {x_shape:?} with w {w_shape:?} sums no products (no input channels or an empty \
             kernel): ORT's CPU EP answers with uninitialised memory, so there is no answer to \
             match (give the node input channels and a kernel)"
        ));
    }
    if x_shape[2..].contains(&0) {
        // An empty spatial axis whose padding alone covers the kernel: ORT pads x with its zero
        // point, so every product is 0 once centred and each sum is 0 (QLinearConv then adds
        // the bias and requantises).
        return zeros();
    }
    let last: Vec<i32> = std::iter::once(0)
        .chain(2..rank as i32)
        .chain(std::iter::once(1))
        .collect();
    let first: Vec<i32> = std::iter::once(0)
        .chain(std::iter::once(rank as i32 - 1))
        .chain(1..rank as i32 - 1)
        .collect();
    let conv = |a: &Array, b: &Array| -> Result<Array> {
        let y = ops::conv(
            a,
            b,
            &to_i32(&strides),
            &to_i32(&lo),
            &to_i32(&hi),
            &to_i32(&dilations),
            &vec![1; spatial],
            group as i32,
            s,
        )?;
        Ok(ops::astype(&y, Dtype::I32, s)?)
    };
    let y = product_of_halves(
        &ops::transpose(x, &last, s)?,
        &ops::transpose(w, &last, s)?,
        s,
        conv,
    )?;
    Ok(ops::transpose(&y, &first, s)?)
}

/// Conv's claim on the attributes ([`crate::conv::conv_claim`]: group, strides, dilations,
/// auto_pad), and no more products per output than a float32 sum of 4-bit halves holds exactly
/// (when W's shape is declared).
fn conv_claim(node: &Node, w_index: usize) -> Verdict {
    let attributes = crate::conv::conv_claim(node);
    if !attributes.is_claim() {
        return attributes;
    }
    if let Some(dims) = node.input_shape(w_index) {
        let terms: Option<i64> = dims[1..].iter().copied().product();
        if terms.is_some_and(|t| t > EXACT_K) {
            return Verdict::decline(format!(
                "more than {EXACT_K} products per output: a float32 sum of 4-bit halves is not \
                 exact past that"
            ));
        }
    }
    Verdict::Claim
}

fn conv_integer_claim(node: &Node) -> Verdict {
    conv_claim(node, 1)
}

/// `conv(x - x_zero_point, w - w_zero_point)` in int32, exact (float32 convolutions of 4-bit
/// halves, as MatMulInteger), with Conv's attributes; padding contributes zeros, as ORT pads x
/// with its zero point. Zero points are single values (ORT's kernel takes no other).
#[allow(clippy::too_many_arguments)] // four inputs and six attributes, as ONNX has them
#[onnx_op(
    op = "ConvInteger", since = 10,
    types(T1 = I8 | U8, T2 = I8 | U8, T3 = I32),
    inputs(x: T1, w: T2, x_zero_point: T1, w_zero_point: T2), outputs(y: T3),
    shape = ShapeKeyed, claim = conv_integer_claim,
    declines = "Conv's declines (auto_pad outside ONNX's four or with pads, grouped convolutions beyond 2-D, strides or dilations beyond 65535); more than 65536 products per output (W's shape declared)"
)]
fn conv_integer(
    cx: &mut Lower,
    x: Array,
    w: Array,
    x_zero_point: Option<Array>,
    w_zero_point: Option<Array>,
    #[attr(default = "NOTSET")] auto_pad: String,
    #[attr] dilations: Option<Vec<i64>>,
    #[attr(default = 1)] group: i64,
    #[attr] kernel_shape: Option<Vec<i64>>,
    #[attr] pads: Option<Vec<i64>>,
    #[attr] strides: Option<Vec<i64>>,
) -> Result<Array> {
    let s = cx.stream();
    let op = "ConvInteger";
    let x_zp = x_zero_point
        .map(|zp| per_tensor(op, &zp, "x_zero_point", s))
        .transpose()?;
    let w_zp = w_zero_point
        .map(|zp| per_tensor(op, &zp, "w_zero_point", s))
        .transpose()?;
    let attrs = ConvAttrs {
        auto_pad,
        dilations,
        group,
        kernel_shape,
        pads,
        strides,
    };
    exact_conv(
        op,
        &centred(&x, x_zp.as_ref(), s)?,
        &centred(&w, w_zp.as_ref(), s)?,
        &attrs,
        s,
    )
}

fn qlinear_conv_claim(node: &Node) -> Verdict {
    let (x, w, y) = (node.input_type(0), node.input_type(3), node.output_type(0));
    match (x, w, y) {
        (Some(ElemType::Uint8), _, Some(ElemType::Uint8))
        | (Some(ElemType::Int8), Some(ElemType::Int8), Some(ElemType::Int8)) => conv_claim(node, 3),
        _ => Verdict::decline(format!(
            "x {x:?}, w {w:?}, y {y:?}: ORT's CPU kernels take uint8 x (uint8 or int8 w) into \
             uint8, or int8 x and w into int8"
        )),
    }
}

/// A per-output-channel parameter of w (one value, or `[M]`) shaped to broadcast against
/// channels-first `[N, M, d..]` (or against w itself, `[M, C/g, k..]`).
fn per_channel(op: &str, p: &Array, m: i64, rank: usize, what: &str, s: &Stream) -> Result<Array> {
    if one_element(p) {
        return Ok(ops::reshape(p, &[], s)?);
    }
    if p.shape() != [m] {
        return Err(OpError::new(format!(
            "{op}: {what} has shape {:?}; it must be a scalar, 1-D of size 1 or [M] = [{m}]",
            p.shape()
        )));
    }
    let mut shape = vec![1; rank];
    shape[1] = m;
    Ok(ops::reshape(p, &shape, s)?)
}

/// Quantised convolution: the exact int32 `conv(x - x_zero_point, w - w_zero_point)` (as
/// ConvInteger) plus the int32 bias `B`, times `x_scale · w_scale / y_scale` in float32,
/// rounded half to even, plus `y_zero_point`, saturated (NaN to the lowest value), as ORT's
/// x86 requantisation. `w_scale` and `w_zero_point` may be per output channel.
#[allow(clippy::too_many_arguments)] // nine inputs and six attributes, as ONNX has them
#[onnx_op(
    op = "QLinearConv", precision = Float32, since = 10,
    types(T1 = I8 | U8, TS = F32, T2 = I8 | U8, T3 = I8 | U8, T4 = I32),
    inputs(x: T1, x_scale: TS, x_zero_point: T1, w: T2, w_scale: TS, w_zero_point: T2,
           y_scale: TS, y_zero_point: T3, B: T4),
    outputs(y: T3), shape = ShapeKeyed, claim = qlinear_conv_claim,
    declines = "int8 x with uint8 w, and outputs of another signedness than x (ORT's CPU EP has no kernel for them); ConvInteger's declines"
)]
fn qlinear_conv(
    cx: &mut Lower,
    x: Array,
    x_scale: Array,
    x_zero_point: Array,
    w: Array,
    w_scale: Array,
    w_zero_point: Array,
    y_scale: Array,
    y_zero_point: Array,
    b: Option<Array>,
    #[attr(default = "NOTSET")] auto_pad: String,
    #[attr] dilations: Option<Vec<i64>>,
    #[attr(default = 1)] group: i64,
    #[attr] kernel_shape: Option<Vec<i64>>,
    #[attr] pads: Option<Vec<i64>>,
    #[attr] strides: Option<Vec<i64>>,
) -> Result<Array> {
    let s = cx.stream();
    let op = "QLinearConv";
    let rank = x.ndim();
    let m = w.shape().first().copied().unwrap_or(0);
    let x_zp = per_tensor(op, &x_zero_point, "x_zero_point", s)?;
    let y_zp = per_tensor(op, &y_zero_point, "y_zero_point", s)?;
    let x_scale = per_tensor(op, &x_scale, "x_scale", s)?;
    let y_scale = per_tensor(op, &y_scale, "y_scale", s)?;
    let w_scale = per_channel(op, &w_scale, m, rank, "w_scale", s)?;
    let w_zp = per_channel(op, &w_zero_point, m, rank, "w_zero_point", s)?;
    // w's zero point against w [M, C/g, k..]: per channel along axis 0.
    let w_zp_w = if w_zp.ndim() > 0 {
        let mut shape = vec![1; w.ndim()];
        shape[0] = m;
        ops::reshape(&w_zp, &shape, s)?
    } else {
        w_zp
    };
    let attrs = ConvAttrs {
        auto_pad,
        dilations,
        group,
        kernel_shape,
        pads,
        strides,
    };
    let mut acc = exact_conv(
        op,
        &centred(&x, Some(&x_zp), s)?,
        &centred(&w, Some(&w_zp_w), s)?,
        &attrs,
        s,
    )?;
    if let Some(b) = b {
        if b.shape() != [m] {
            return Err(OpError::new(format!(
                "{op}: B has shape {:?}; it must be 1-D with one value per output channel ({m})",
                b.shape()
            )));
        }
        let mut shape = vec![1; rank];
        shape[1] = m;
        acc = ops::add(&acc, &ops::reshape(&b, &shape, s)?, s)?;
    }
    // (x_scale * w_scale) / y_scale, in ORT's order.
    let scale = ops::divide(&ops::multiply(&x_scale, &w_scale, s)?, &y_scale, s)?;
    let v = ops::multiply(&ops::astype(&acc, Dtype::F32, s)?, &scale, s)?;
    let one = scalar(1.0, Dtype::F32, s)?;
    quantize(
        &v,
        &one,
        Some(&y_zp),
        y_zero_point.dtype(),
        Rounding::Float,
        s,
    )
}

/// `float(acc) · multiplier + bias` in float32, the output stage ORT's MatMulIntegerToFloat
/// and DynamicQuantizeMatMul share (`multiplier = a_scale · b_scale`, per tensor or column).
fn scale_and_bias(
    op: &str,
    acc: &Array,
    a_scale: &Array,
    b_scale: &Array,
    b_shape: &[i64],
    bias: Option<&Array>,
    s: &Stream,
) -> Result<Array> {
    let f32 = |a: &Array| ops::astype(a, Dtype::F32, s);
    let b_scale = per_column(op, b_scale, b_shape, "b_scale", s)?;
    let multiplier = ops::multiply(&f32(a_scale)?, &f32(&b_scale)?, s)?;
    let y = ops::multiply(&f32(acc)?, &multiplier, s)?;
    match bias {
        Some(bias) => {
            let n = b_shape.last().copied().unwrap_or(1);
            if bias.shape() != [n] {
                return Err(OpError::new(format!(
                    "{op}: bias has shape {:?}; it must be 1-D with one value per column ({n})",
                    bias.shape()
                )));
            }
            Ok(ops::add(&y, &f32(bias)?, s)?)
        }
        None => Ok(y),
    }
}

/// `float((A - a_zero_point) · (B - b_zero_point)) · (a_scale · b_scale) + bias` in float32:
/// the exact int32 product (as MatMulInteger), then ORT's scale-and-bias output stage.
/// `a_scale` and `a_zero_point` are single values; `b_scale` and `b_zero_point` one value or
/// one per column of B.
#[allow(clippy::too_many_arguments)] // seven inputs, as ORT has them
#[onnx_op(
    domain = "com.microsoft", op = "MatMulIntegerToFloat", precision = Float32, since = 1,
    types(T1 = I8 | U8, T2 = I8 | U8, T3 = F32),
    inputs(A: T1, B: T2, a_scale: T3, b_scale: T3, a_zero_point: T1, b_zero_point: T2, bias: T3),
    outputs(Y: T3), shape = ShapeKeyed
)]
fn matmul_integer_to_float(
    cx: &mut Lower,
    a: Array,
    b: Array,
    a_scale: Array,
    b_scale: Array,
    a_zero_point: Option<Array>,
    b_zero_point: Option<Array>,
    bias: Option<Array>,
) -> Result<Array> {
    let s = cx.stream();
    let op = "MatMulIntegerToFloat";
    let b_shape = b.shape();
    let a_scale = per_tensor(
        op,
        &a_scale,
        "a_scale (ORT swaps a per-column a_scale with b_scale; the EP takes only a single a_scale)",
        s,
    )?;
    let a_zp = a_zero_point
        .map(|zp| per_tensor(op, &zp, "a_zero_point", s))
        .transpose()?;
    let b_zp = b_zero_point
        .map(|zp| per_column(op, &zp, &b_shape, "b_zero_point", s))
        .transpose()?;
    let acc = exact_matmul(
        &centred(&a, a_zp.as_ref(), s)?,
        &centred(&b, b_zp.as_ref(), s)?,
        s,
    )?;
    scale_and_bias(op, &acc, &a_scale, &b_scale, &b_shape, bias.as_ref(), s)
}

/// `A · dequant(B) + bias` with A quantised on the fly as DynamicQuantizeLinear does (uint8,
/// range from A's values, NaN ignored): the exact int32 product of the quantised operands,
/// times `a_scale · b_scale`, plus `bias`, in float32. `b_scale` and `b_zero_point` are one
/// value or one per column of B.
#[onnx_op(
    domain = "com.microsoft", op = "DynamicQuantizeMatMul", precision = Float32, since = 1,
    types(T1 = F32, T2 = I8 | U8),
    inputs(A: T1, B: T2, b_scale: T1, b_zero_point: T2, bias: T1), outputs(Y: T1),
    shape = ShapeKeyed
)]
fn dynamic_quantize_matmul(
    cx: &mut Lower,
    a: Array,
    b: Array,
    b_scale: Array,
    b_zero_point: Option<Array>,
    bias: Option<Array>,
) -> Result<Array> {
    let s = cx.stream();
    let op = "DynamicQuantizeMatMul";
    let b_shape = b.shape();
    let (a_scale, a_zp) = crate::qdq::dynamic_params(&a, s)?;
    let a_q = quantize(&a, &a_scale, Some(&a_zp), Dtype::U8, Rounding::Float, s)?;
    let b_zp = b_zero_point
        .map(|zp| per_column(op, &zp, &b_shape, "b_zero_point", s))
        .transpose()?;
    let acc = exact_matmul(
        &centred(&a_q, Some(&a_zp), s)?,
        &centred(&b, b_zp.as_ref(), s)?,
        s,
    )?;
    scale_and_bias(op, &acc, &a_scale, &b_scale, &b_shape, bias.as_ref(), s)
}
