//! Softmax, LogSoftmax and Hardmax: the opset-13 per-axis form, and the older form that
//! flattens the input to 2-D at `axis`.

use mlx_kernels::{ops, Array, Dtype, Stream};

use crate::attention::formed;
use crate::{onnx_op, Lower, OpError, Result};

type AxisFn = fn(&Array, i32, &Stream) -> Result<Array>;

fn normalise_axis(axis: i64, rank: usize) -> Result<i32> {
    let rank = rank as i64;
    let resolved = if axis < 0 { axis + rank } else { axis };
    if resolved < 0 || resolved >= rank.max(1) {
        return Err(OpError::new(format!(
            "axis {axis} is out of range for rank {rank}"
        )));
    }
    Ok(resolved as i32)
}

/// Opset 13+: apply `f` along `axis`.
fn along_axis(x: &Array, axis: i64, s: &Stream, f: AxisFn) -> Result<Array> {
    if x.ndim() == 0 {
        return Err(OpError::new("input must have rank >= 1"));
    }
    f(x, normalise_axis(axis, x.ndim())?, s)
}

/// ORT's Softmax, LogSoftmax and Hardmax kernels keep the axis in 32 bits (2^32 + 1 is axis 1,
/// 2^63 - 1 is -1).
fn ort_axis(axis: i64) -> i64 {
    i64::from(axis as i32)
}

/// Opsets 1–12: view the input as `[prod(dims[..axis]), prod(dims[axis..])]`, apply `f` on the
/// second axis, and restore the shape.
fn flattened(x: &Array, axis: i64, s: &Stream, f: AxisFn) -> Result<Array> {
    let shape = x.shape();
    if x.ndim() == 0 {
        return Err(OpError::new(
            "input must have rank >= 1 (ORT's CPU EP refuses a scalar)",
        ));
    }
    if x.size() == 0 {
        // ORT's CPU EP returns an empty input before it checks the axis (opsets 1-10; from 11
        // ONNX's shape inference refuses such an axis at load).
        return Ok(x.clone());
    }
    let axis = normalise_axis(axis, x.ndim())? as usize;
    let outer: i64 = shape[..axis].iter().product();
    let inner: i64 = shape[axis..].iter().product();
    let flat = ops::reshape(x, &[outer, inner], s)?;
    Ok(ops::reshape(&f(&flat, 1, s)?, &shape, s)?)
}

fn softmax_axis(x: &Array, axis: i32, s: &Stream) -> Result<Array> {
    Ok(ops::softmax(x, axis, true, s)?)
}

/// `(x - max) - log(sum(exp(x - max)))`, ORT's CPU EP's formula, so that infinities give its
/// answers (a row holding +inf is NaN throughout; MLX's logsumexp special-cases infinities and
/// gave [NaN, -inf, ..]). In float32 for 16-bit floats, rounded once at the end: in float16 the
/// log-sum-exp of a peaked row rounds to a value that cancels `x` to a few ulps (ORT computes in
/// float32 too).
fn log_softmax_axis(x: &Array, axis: i32, s: &Stream) -> Result<Array> {
    if x.size() == 0 {
        return Ok(x.clone());
    }
    let wide = crate::reduce::widened(x, s)?;
    let shifted = ops::subtract(&wide, &ops::max(&wide, &[axis], true, s)?, s)?;
    let total = ops::sum(&ops::exp(&shifted, s)?, &[axis], true, s)?;
    let result = ops::subtract(&shifted, &ops::log(&total, s)?, s)?;
    Ok(ops::astype(&result, x.dtype(), s)?)
}

/// 1 at the first maximum along `axis`, 0 elsewhere.
fn hardmax_axis(x: &Array, axis: i32, s: &Stream) -> Result<Array> {
    if x.size() == 0 {
        return Ok(x.clone());
    }
    let width = x.shape()[axis as usize];
    let winner = ops::argmax(x, axis, true, s)?;
    let mut index_shape = vec![1i64; x.ndim()];
    index_shape[axis as usize] = width;
    let positions = ops::reshape(
        &ops::arange(0.0, width as f64, 1.0, winner.dtype(), s)?,
        &index_shape,
        s,
    )?;
    Ok(ops::astype(
        &ops::equal(&positions, &winner, s)?,
        x.dtype(),
        s,
    )?)
}

/// ORT's CPU EP has float32 Softmax-13/LogSoftmax-13 kernels only: for 16-bit floats it runs
/// ONNX's function body, whose ReduceMax takes the axis in 64 bits and refuses one outside
/// `[-rank, rank - 1]` at load, where the float32 kernel reads the axis in 32 bits.
fn softmax13_claim(node: &crate::Node) -> crate::Verdict {
    let Some(axis) = node.attr_as::<i64>("axis") else {
        return crate::Verdict::Claim;
    };
    let wide = node.input_type(0) != Some(crate::ElemType::Float);
    if wide && ort_axis(axis) != axis {
        return crate::Verdict::decline(format!(
            "axis {axis} beyond 32 bits on a 16-bit float input (ORT's CPU EP expands the \
             function, whose ReduceMax refuses the axis)"
        ));
    }
    crate::Verdict::Claim
}

/// `exp(x) / sum(exp(x))` along `axis`.
#[onnx_op(
    op = "Softmax", precision = Widens, since = 13, types(T = FLOAT), inputs(input: T), outputs(output: T), shape = Shapeless,
    claim = softmax13_claim, declines = "an axis beyond 32 bits on 16-bit floats (ORT's function expansion refuses it)"
)]
fn softmax(cx: &mut Lower, x: Array, #[attr(default = -1)] axis: i64) -> Result<Array> {
    let y = along_axis(&x, ort_axis(axis), cx.stream(), softmax_axis)?;
    let axis = normalise_axis(ort_axis(axis), x.ndim())?;
    formed::note_softmax(cx, &x, axis as usize, &y);
    Ok(y)
}

/// Softmax over the input flattened to 2-D at `axis`.
/// A row of its own: opset 13 takes one axis instead of flattening (the same node, other results).
#[onnx_op(op = "Softmax", precision = Widens, opset = 1..=12, types(T = FLOAT), inputs(input: T), outputs(output: T), shape = ShapeKeyed)]
fn softmax_legacy(cx: &mut Lower, x: Array, #[attr(default = 1)] axis: i64) -> Result<Array> {
    let y = flattened(&x, ort_axis(axis), cx.stream(), softmax_axis)?;
    // Flattened at the last axis, the rows are the last axis's.
    if x.size() > 0 {
        let axis = normalise_axis(ort_axis(axis), x.ndim())?;
        formed::note_softmax(cx, &x, axis as usize, &y);
    }
    Ok(y)
}

/// `x - log(sum(exp(x)))` along `axis`.
#[onnx_op(
    op = "LogSoftmax", precision = Float32, since = 13, types(T = FLOAT), inputs(input: T), outputs(output: T), shape = Shapeless,
    claim = softmax13_claim, declines = "an axis beyond 32 bits on 16-bit floats (ORT's function expansion refuses it)"
)]
fn log_softmax(cx: &mut Lower, x: Array, #[attr(default = -1)] axis: i64) -> Result<Array> {
    along_axis(&x, ort_axis(axis), cx.stream(), log_softmax_axis)
}

/// LogSoftmax over the input flattened to 2-D at `axis`.
/// A row of its own: opset 13 takes one axis instead of flattening (the same node, other results).
#[onnx_op(op = "LogSoftmax", precision = Float32, opset = 1..=12, types(T = FLOAT), inputs(input: T), outputs(output: T), shape = ShapeKeyed)]
fn log_softmax_legacy(cx: &mut Lower, x: Array, #[attr(default = 1)] axis: i64) -> Result<Array> {
    flattened(&x, ort_axis(axis), cx.stream(), log_softmax_axis)
}

/// One-hot of the first maximum along `axis`.
#[onnx_op(op = "Hardmax", since = 13, types(T = FLOAT), inputs(input: T), outputs(output: T), shape = ShapeKeyed)]
fn hardmax(cx: &mut Lower, x: Array, #[attr(default = -1)] axis: i64) -> Result<Array> {
    along_axis(&x, ort_axis(axis), cx.stream(), hardmax_axis)
}

/// Hardmax over the input flattened to 2-D at `axis`.
/// A row of its own: opset 13 takes one axis instead of flattening (the same node, other results).
#[onnx_op(op = "Hardmax", opset = 1..=12, types(T = FLOAT), inputs(input: T), outputs(output: T), shape = ShapeKeyed)]
fn hardmax_legacy(cx: &mut Lower, x: Array, #[attr(default = 1)] axis: i64) -> Result<Array> {
    flattened(&x, ort_axis(axis), cx.stream(), hardmax_axis)
}

/// ORT's fusion of `Softmax(data + bias)`: the bias broadcasts as the Add it replaced did
/// (numpy's rules), and the softmax runs over the axes from `axis` on, flattened.
#[onnx_op(
    domain = "com.microsoft", op = "BiasSoftmax", precision = Float32, since = 1, types(T = FLOAT), ignores(is_inner_broadcast: i64),
    inputs(data: T, bias: T), outputs(output: T), shape = ShapeKeyed
)]
fn bias_softmax(
    cx: &mut Lower,
    data: Array,
    bias: Array,
    #[attr(default = 1)] axis: i64,
) -> Result<Array> {
    let s = cx.stream();
    // ORT's kernels (CUDA/ROCm; the CPU EP has none) load 16-bit data and bias into float32
    // accumulators, add and normalise there, and round once: rounding data + bias to float16
    // first moved 65504 - 2.3 by a float16 step, and the softmax with it.
    let wide = |a: &Array| -> Result<Array> {
        Ok(match a.dtype() {
            Dtype::F16 | Dtype::BF16 => ops::astype(a, Dtype::F32, s)?,
            _ => a.clone(),
        })
    };
    let sum = ops::add(&wide(&data)?, &wide(&bias)?, s)?;
    if sum.shape() != data.shape() {
        return Err(OpError::new("bias must broadcast to data's shape"));
    }
    Ok(ops::astype(
        &flattened(&sum, axis, s, softmax_axis)?,
        data.dtype(),
        s,
    )?)
}

#[cfg(test)]
mod tests {
    use mlx_kernels::Array;

    use crate::table::testing::{f32s, node, run1, values_f32};
    use crate::{AttrValue, ElemType};

    #[test]
    fn legacy_softmax_flattens_at_axis_and_new_softmax_uses_one_axis() {
        let data: Vec<f32> = (0..12).map(|i| i as f32 * 0.25).collect();
        let x = f32s(&data, &[2, 3, 2]);
        let legacy = node("Softmax", 11, &[ElemType::Float], ElemType::Float); // axis = 1: rows of 6
        let y = values_f32(&run1(&legacy, &[Some(x.clone())]));
        for row in 0..2 {
            let chunk = &data[row * 6..row * 6 + 6];
            let total: f32 = chunk.iter().map(|v| v.exp()).sum();
            for (i, v) in chunk.iter().enumerate() {
                assert!((y[row * 6 + i] - v.exp() / total).abs() < 1e-6);
            }
        }
        let modern = node("Softmax", 13, &[ElemType::Float], ElemType::Float)
            .attr("axis", AttrValue::Int(1));
        let y = values_f32(&run1(&modern, &[Some(x.clone())]));
        // Along axis 1 (3 elements, stride 2).
        let total: f32 = [0, 2, 4].iter().map(|&i| data[i].exp()).sum();
        assert!((y[2] - data[2].exp() / total).abs() < 1e-6);
        let log = node("LogSoftmax", 13, &[ElemType::Float], ElemType::Float);
        let y = values_f32(&run1(&log, &[Some(x)]));
        let pair_total = (data[0].exp() + data[1].exp()).ln();
        assert!((y[0] - (data[0] - pair_total)).abs() < 1e-6);
    }

    #[test]
    fn hardmax_marks_the_first_maximum() {
        let x = f32s(&[1.0, 3.0, 3.0, 0.0, -1.0, -1.0], &[2, 3]);
        let y = run1(
            &node("Hardmax", 13, &[ElemType::Float], ElemType::Float),
            &[Some(x.clone())],
        );
        assert_eq!(values_f32(&y), vec![0.0, 1.0, 0.0, 1.0, 0.0, 0.0]);
        let flat = run1(
            &node("Hardmax", 11, &[ElemType::Float], ElemType::Float)
                .attr("axis", AttrValue::Int(0)),
            &[Some(x)],
        );
        assert_eq!(values_f32(&flat), vec![0.0, 1.0, 0.0, 0.0, 0.0, 0.0]);
    }

    #[test]
    fn a_zero_size_input_gives_a_zero_size_softmax() {
        let empty = Array::from_slice::<f32>(&[], &[0, 4]).unwrap();
        let out = run1(
            &node("Softmax", 13, &[ElemType::Float], ElemType::Float),
            &[Some(empty)],
        );
        assert_eq!(out.shape(), vec![0, 4]);
    }
}
