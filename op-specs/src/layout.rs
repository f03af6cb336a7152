//! Rearranging and padding: Pad (constant, edge, reflect, wrap; negative pads crop),
//! DepthToSpace, SpaceToDepth, EyeLike, GatherElements.

use mlx_kernels::{ops, Array, Dtype, Stream};

use crate::shape::normalise_axis;
use crate::table::consts::scalar_like;
use crate::{onnx_op, Lower, OpError, Result};

/// `x[from..to]` along `axis`.
fn take_range(x: &Array, axis: usize, from: i64, to: i64, s: &Stream) -> Result<Array> {
    let dims = x.shape();
    let mut start = vec![0i32; dims.len()];
    let mut stop: Vec<i32> = dims.iter().map(|&d| d as i32).collect();
    start[axis] = from as i32;
    stop[axis] = to as i32;
    Ok(ops::slice(x, &start, &stop, &vec![1; dims.len()], s)?)
}

/// Pads one axis by `lo`/`hi` (negative: crops) in `mode`.
fn pad_axis(
    x: Array,
    axis: usize,
    lo: i64,
    hi: i64,
    mode: &str,
    value: &Array,
    s: &Stream,
) -> Result<Array> {
    let dim = x.shape()[axis];
    // Negative pads remove elements first.
    let (from, to) = (lo.min(0).abs(), dim - hi.min(0).abs());
    if from > to && mode == "constant" {
        // The crop reaches into the other side's padding (x[1] padded by 1, cropped by 2: ORT
        // gives length 0): pad first, then crop the padded axis.
        let padded = pad_axis(x, axis, lo.max(0), hi.max(0), mode, value, s)?;
        return pad_axis(padded, axis, lo.min(0), hi.min(0), mode, value, s);
    }
    if from > to {
        return Err(OpError::new(format!(
            "pads crop more than axis {axis} holds"
        )));
    }
    let x = if from > 0 || to < dim {
        take_range(&x, axis, from, to, s)?
    } else {
        x
    };
    let (lo, hi, dim) = (lo.max(0), hi.max(0), to - from);
    if lo == 0 && hi == 0 {
        return Ok(x);
    }
    let ax = [axis as i32];
    match mode {
        "constant" => Ok(ops::pad(
            &x,
            &ax,
            &[lo as i32],
            &[hi as i32],
            value,
            false,
            s,
        )?),
        _ if dim == 0 => Err(OpError::new(format!("{mode} padding of an empty axis"))),
        "edge" => Ok(ops::pad(
            &x,
            &ax,
            &[lo as i32],
            &[hi as i32],
            value,
            true,
            s,
        )?),
        "reflect" => {
            if lo >= dim || hi >= dim {
                return Err(OpError::new(format!(
                    "reflect pads ({lo}, {hi}) must be smaller than the axis ({dim})"
                )));
            }
            let before = ops::flip(&take_range(&x, axis, 1, lo + 1, s)?, &ax, s)?;
            let after = ops::flip(&take_range(&x, axis, dim - 1 - hi, dim - 1, s)?, &ax, s)?;
            Ok(ops::concatenate(&[before, x, after], axis as i32, s)?)
        }
        "wrap" => {
            if lo > dim || hi > dim {
                return Err(OpError::new(format!(
                    "wrap pads ({lo}, {hi}) exceed the axis ({dim})"
                )));
            }
            let before = take_range(&x, axis, dim - lo, dim, s)?;
            let after = take_range(&x, axis, 0, hi, s)?;
            Ok(ops::concatenate(&[before, x, after], axis as i32, s)?)
        }
        other => Err(OpError::new(format!(
            "pad mode {other:?} is not an ONNX mode"
        ))),
    }
}

fn pad_with(
    cx: &Lower,
    x: &Array,
    pads: &[i64],
    value: Option<Array>,
    axes: Option<Vec<i64>>,
    mode: &str,
) -> Result<Array> {
    let s = cx.stream();
    let axes: Vec<usize> = match axes {
        Some(a) => a
            .iter()
            .map(|&a| normalise_axis(a, x.ndim()))
            .collect::<Result<_>>()?,
        None => (0..x.ndim()).collect(),
    };
    if pads.len() != 2 * axes.len() {
        return Err(OpError::new(format!(
            "{} pads for {} axes",
            pads.len(),
            axes.len()
        )));
    }
    let value = match value {
        Some(v) => ops::astype(&v, x.dtype(), s)?,
        None => scalar_like(0.0, x, s)?,
    };
    let n = axes.len();
    let dims = x.shape();
    let mut out_shape = dims.clone();
    for (i, &axis) in axes.iter().enumerate() {
        // In i128: pads reach i64's extremes (ORT fails on a negative length; MLX's dims are i32).
        let padded = i128::from(dims[axis]) + i128::from(pads[i]) + i128::from(pads[i + n]);
        if padded < 0 || padded > i128::from(i32::MAX) {
            return Err(OpError::new(format!(
                "pads {} and {} give axis {axis} (of length {}) a length of {padded}",
                pads[i],
                pads[i + n],
                dims[axis]
            )));
        }
        if mode != "constant" && dims[axis] == 0 && padded > 0 {
            return Err(OpError::new(format!(
                "{mode} padding of axis {axis}, which is empty, to a length of {padded} (ORT \
                 refuses it too)"
            )));
        }
        out_shape[axis] = padded as i64;
    }
    if out_shape.contains(&0) {
        // Nothing to fill: ORT answers an empty output whatever the mode's limits (a reflection
        // wider than its axis, a crop of an empty axis), and so does the EP.
        return crate::table::consts::zeros(&out_shape, x.dtype(), s);
    }
    axes.iter()
        .enumerate()
        .try_fold(x.clone(), |acc, (i, &axis)| {
            pad_axis(acc, axis, pads[i], pads[i + n], mode, &value, s)
        })
}

fn pad_claim(node: &crate::Node) -> crate::Verdict {
    match node.attr_as::<String>("mode") {
        None => crate::Verdict::Claim,
        Some(m) if ["constant", "edge", "reflect", "wrap"].contains(&m.as_str()) => {
            crate::Verdict::Claim
        }
        Some(other) => crate::Verdict::decline(format!("pad mode {other:?}")),
    }
}

/// Pads `axes` (default: all) by `pads` (begins then ends), with `constant_value` (default 0),
/// edge copies, a reflection or a wrap-around; negative pads crop. Up to opset 10 `pads` and
/// the fill `value` are attributes; `axes` is new in opset 18, and so is bool data.
#[onnx_op(
    op = "Pad", since = 2, types(T = NUMERIC | since(18, BOOL), I = I64, A = I32 | I64),
    inputs(data: T, pads: I, constant_value: T, axes: A), outputs(output: T),
    shape = ShapeKeyed, claim = pad_claim, declines = "modes other than constant, edge, reflect, wrap"
)]
fn pad(
    cx: &mut Lower,
    x: Array,
    #[host(attr_until = 10)] pads: Vec<i64>,
    #[input(attr_until = 10, attr = f32, name = "value")] value: Option<Array>,
    #[host(since = 18)] axes: Option<Vec<i64>>,
    #[attr(default = "constant")] mode: String,
) -> Result<Array> {
    // The legacy float attribute fills data of any type: converted as a cast would.
    let value = value
        .map(|v| ops::astype(&v, x.dtype(), cx.stream()))
        .transpose()?;
    pad_with(cx, &x, &pads, value, axes, &mode)
}

fn blocks(x: &Array, blocksize: i64) -> Result<(i64, i64, i64, i64, i64)> {
    let dims = x.shape();
    if dims.len() != 4 || blocksize <= 0 {
        return Err(OpError::new(
            "expects [N, C, H, W] and a positive blocksize",
        ));
    }
    Ok((dims[0], dims[1], dims[2], dims[3], blocksize))
}

/// Moves depth into blocks of space: `[N, C, H, W]` → `[N, C/b², H·b, W·b]` (DCR or CRD order).
#[onnx_op(
    op = "DepthToSpace", since = 1, types(T = ANY), inputs(input: T), outputs(output: T), shape = ShapeKeyed,
    claim = depth_to_space_claim, declines = "modes other than DCR and CRD"
)]
fn depth_to_space(
    cx: &mut Lower,
    x: Array,
    #[attr] blocksize: i64,
    #[attr(default = "DCR")] mode: String,
) -> Result<Array> {
    let s = cx.stream();
    let (n, c, h, w, b) = blocks(&x, blocksize)?;
    if c % (b * b) != 0 {
        return Err(OpError::new(format!(
            "{c} channels do not split into {b}x{b} blocks"
        )));
    }
    let depth = c / (b * b);
    let (split, perm): (Vec<i64>, [i32; 6]) = if mode == "CRD" {
        (vec![n, depth, b, b, h, w], [0, 1, 4, 2, 5, 3])
    } else {
        (vec![n, b, b, depth, h, w], [0, 3, 4, 1, 5, 2])
    };
    let moved = ops::transpose(&ops::reshape(&x, &split, s)?, &perm, s)?;
    Ok(ops::reshape(&moved, &[n, depth, h * b, w * b], s)?)
}

fn depth_to_space_claim(node: &crate::Node) -> crate::Verdict {
    match node.attr_as::<String>("mode") {
        None => crate::Verdict::Claim,
        Some(m) if m == "DCR" || m == "CRD" => crate::Verdict::Claim,
        Some(other) => crate::Verdict::decline(format!("mode {other:?}")),
    }
}

/// Moves blocks of space into depth: `[N, C, H, W]` → `[N, C·b², H/b, W/b]`.
#[onnx_op(op = "SpaceToDepth", since = 1, types(T = ANY), inputs(input: T), outputs(output: T), shape = ShapeKeyed)]
fn space_to_depth(cx: &mut Lower, x: Array, #[attr] blocksize: i64) -> Result<Array> {
    let s = cx.stream();
    let (n, c, h, w, b) = blocks(&x, blocksize)?;
    if h % b != 0 || w % b != 0 {
        return Err(OpError::new(format!(
            "{h}x{w} does not split into {b}x{b} blocks"
        )));
    }
    let split = ops::reshape(&x, &[n, c, h / b, b, w / b, b], s)?;
    let moved = ops::transpose(&split, &[0, 3, 5, 1, 2, 4], s)?;
    Ok(ops::reshape(&moved, &[n, c * b * b, h / b, w / b], s)?)
}

/// A `dtype` that names no element type, or another than the graph gives the output (0 and
/// garbage codes load: shape inference keeps the input's type), is refused by ORT's kernel
/// when it runs ("Unsupported data type"); declined, it fails there.
fn eye_like_claim(node: &crate::Node) -> crate::Verdict {
    match node.attr_as::<i64>("dtype") {
        Some(code) if !node.names_output_type(code) => crate::Verdict::decline(format!(
            "dtype {code} is not the output's element type (ORT's kernel refuses it)"
        )),
        _ => crate::Verdict::Claim,
    }
}

/// Ones on diagonal `k` of a matrix shaped like the input, zeros elsewhere; the element type
/// is `dtype` (default: the input's), which the claim holds to the output's type, so the
/// lowering reads the output's type instead.
#[onnx_op(
    op = "EyeLike", since = 9, types(T1 = ANY, T2 = ANY), ignores(dtype: i64), inputs(input: T1), outputs(output: T2),
    shape = ShapeKeyed, claim = eye_like_claim,
    declines = "a dtype that is not the output's element type (ORT's kernel refuses it)"
)]
fn eye_like(cx: &mut Lower, x: Array, #[attr(default = 0)] k: i64) -> Result<Array> {
    let dims = x.shape();
    if dims.len() != 2 {
        return Err(OpError::new("EyeLike needs a matrix"));
    }
    let s = cx.stream();
    let k = k.clamp(-dims[0].max(1), dims[1].max(1));
    // row + k == column, compared elementwise: MLX's eye scatters, and its GPU scatter has no
    // 64-bit kernels.
    let rows = ops::reshape(
        &ops::arange(k as f64, (dims[0] + k) as f64, 1.0, Dtype::I32, s)?,
        &[dims[0], 1],
        s,
    )?;
    let columns = ops::arange(0.0, dims[1] as f64, 1.0, Dtype::I32, s)?;
    Ok(ops::astype(
        &ops::equal(&rows, &columns, s)?,
        cx.output_dtype(0)?,
        s,
    )?)
}

/// `data` picked element by element along `axis` by `indices` (negative ones count from the
/// end). An out-of-range index fails the run, as in ORT's CPU EP.
#[onnx_op(
    op = "GatherElements", since = 11, types(T = ANY, Tind = I32 | I64), inputs(data: T, indices: Tind), outputs(output: T),
    shape = ShapeKeyed
)]
fn gather_elements(
    cx: &mut Lower,
    data: Array,
    indices: Array,
    #[attr(default = 0)] axis: i64,
) -> Result<Array> {
    let s = cx.stream();
    let axis = normalise_axis(axis, data.ndim())?;
    if indices.ndim() != data.ndim() {
        return Err(OpError::new("indices must have the rank of data"));
    }
    let (dims, idx_dims) = (data.shape(), indices.shape());
    if (0..dims.len()).any(|a| a != axis && idx_dims[a] > dims[a]) {
        return Err(OpError::new(format!(
            "indices {idx_dims:?} exceed data {dims:?} on an axis other than {axis}"
        )));
    }
    let dim = dims[axis];
    if dim == 0 && indices.size() > 0 {
        return Err(OpError::new("indices into an empty axis are out of range"));
    }
    // The output has the indices' shape: on the other axes, element i reads data's element i,
    // so data is cut to the indices' extent there (MLX's take_along_axis would broadcast).
    let mut stop = dims.clone();
    for (a, extent) in stop.iter_mut().enumerate() {
        if a != axis {
            *extent = idx_dims[a];
        }
    }
    let data = if stop == dims {
        data
    } else {
        let stop: Vec<i32> = stop.iter().map(|&d| d as i32).collect();
        ops::slice(&data, &vec![0; dims.len()], &stop, &vec![1; dims.len()], s)?
    };
    let safe = crate::indexing::checked_in_bounds(cx, &indices, dim, axis)?;
    Ok(ops::take_along_axis(&data, &safe, axis as i32, s)?)
}

#[cfg(test)]
mod tests {
    use crate::table::testing::{declined, f32s, node, run1, values_f32};
    use crate::{AttrValue, ElemType};

    const F: ElemType = ElemType::Float;
    const I: ElemType = ElemType::Int64;

    #[test]
    fn pad_pads_and_value_are_attributes_up_to_opset_10_and_axes_new_in_18() {
        let legacy = |opset| {
            node("Pad", opset, &[F], F)
                .attr("pads", AttrValue::Ints(vec![1, 0]))
                .attr("value", AttrValue::Float(7.0))
        };
        let x = f32s(&[1.0, 2.0], &[2]);
        assert_eq!(
            values_f32(&run1(&legacy(2), &[Some(x)])),
            vec![7.0, 1.0, 2.0]
        );
        assert!(declined(&legacy(11)).is_some_and(|why| why.contains("not part of Pad-11")));
        assert_eq!(declined(&node("Pad", 11, &[F, I, F], F)), None);
        assert!(declined(&node("Pad", 10, &[F, I], F)).is_some());
        assert_eq!(declined(&node("Pad", 18, &[F, I, F, I], F)), None);
        assert!(declined(&node("Pad", 17, &[F, I, F, I], F))
            .is_some_and(|why| why.contains("does not exist in Pad-17")));
        // bool data from opset 18.
        let b = ElemType::Bool;
        assert_eq!(declined(&node("Pad", 18, &[b, I], b)), None);
        assert!(declined(&node("Pad", 13, &[b, I], b)).is_some());
    }
}
