//! `com.microsoft` fusions that exporters and ORT's optimisers emit.

use mlx_kernels::{ops, Array};

use crate::activation::{gelu_erf, gelu_tanh};
use crate::table::consts::scalar_like;
use crate::{onnx_op, Lower, Result};

/// Exact GELU, `0.5 x (1 + erf(x / √2))`.
#[onnx_op(domain = "com.microsoft", op = "Gelu", since = 1, types(T = FLOAT), inputs(X: T), outputs(Y: T), shape = Shapeless)]
fn ms_gelu(cx: &mut Lower, x: Array) -> Result<Array> {
    gelu_erf(&x, cx.stream())
}

/// Tanh-approximated GELU of `X + bias` (bias optional).
#[onnx_op(
    domain = "com.microsoft", op = "FastGelu", since = 1, types(T = FLOAT),
    inputs(X: T, bias: T), outputs(Y: T), shape = Shapeless
)]
fn fast_gelu(cx: &mut Lower, x: Array, bias: Option<Array>) -> Result<Array> {
    let s = cx.stream();
    // ORT's float32 kernel checks the shapes; 16-bit types run its function body, whose Add
    // broadcasts.
    let checked = x.dtype() == mlx_kernels::Dtype::F32;
    if checked && x.ndim() == 0 {
        return Err(crate::OpError::new(
            "X must have 1 or more dimensions, not 0 (ORT's kernel refuses a scalar)",
        ));
    }
    let x = match bias {
        Some(b) => {
            if checked {
                check_bias(&x, &b)?;
            }
            ops::add(&x, &b, s)?
        }
        None => x,
    };
    gelu_tanh(&x, s)
}

/// Exact GELU of `A + B`.
#[onnx_op(
    domain = "com.microsoft", op = "BiasGelu", since = 1, types(T = FLOAT),
    inputs(A: T, B: T), outputs(C: T), shape = Shapeless
)]
fn bias_gelu(cx: &mut Lower, a: Array, b: Array) -> Result<Array> {
    let s = cx.stream();
    check_bias(&a, &b)?;
    // In float32 for 16-bit types, as ORT's kernel: a sum past float16's range stays finite.
    let wide = |x: &Array| crate::reduce::widened(x, s);
    let y = gelu_erf(&ops::add(&wide(&a)?, &wide(&b)?, s)?, s)?;
    Ok(ops::astype(&y, a.dtype(), s)?)
}

/// ORT's bias GELU kernels take a bias of one value per element of the input's last axis (not
/// any broadcastable shape) and an input of rank 1 or more.
fn check_bias(x: &Array, bias: &Array) -> Result<()> {
    let Some(&last) = x.shape().last() else {
        return Err(crate::OpError::new(
            "the input must have 1 or more dimensions, not 0",
        ));
    };
    if bias.shape() != [last] {
        return Err(crate::OpError::new(format!(
            "bias has shape {:?}: it must be 1-D with the length of the input's last axis ({last})",
            bias.shape()
        )));
    }
    Ok(())
}

/// `x * sigmoid(alpha * x)`.
#[onnx_op(domain = "com.microsoft", op = "QuickGelu", since = 1, types(T = FLOAT), inputs(X: T), outputs(Y: T), shape = Shapeless)]
fn quick_gelu(cx: &mut Lower, x: Array, #[attr(default = 1.702)] alpha: f32) -> Result<Array> {
    let s = cx.stream();
    let scaled = ops::multiply(&x, &scalar_like(alpha.into(), &x, s)?, s)?;
    Ok(ops::multiply(&x, &ops::sigmoid(&scaled, s)?, s)?)
}

/// `X + bias + skip` (bias over the channel axis, skip of X's shape).
#[onnx_op(
    domain = "com.microsoft", op = "BiasAdd", since = 1, types(T = FLOAT),
    inputs(X: T, bias: T, skip: T), outputs(Y: T), shape = Shapeless
)]
fn bias_add(cx: &mut Lower, x: Array, bias: Array, skip: Array) -> Result<Array> {
    let s = cx.stream();
    Ok(ops::add(&ops::add(&x, &bias, s)?, &skip, s)?)
}

/// Stable Diffusion's GEGLU: `X + bias` split in half on the last axis, `left * Gelu(right)`
/// (exact GELU).
#[onnx_op(
    domain = "com.microsoft", op = "BiasSplitGelu", since = 1, types(T = F32 | F16), inputs(X: T, bias: T),
    outputs(Y: T), shape = ShapeKeyed
)]
fn bias_split_gelu(cx: &mut Lower, x: Array, bias: Array) -> Result<Array> {
    let s = cx.stream();
    let width = x.shape().last().copied().unwrap_or(0);
    if x.ndim() == 0 || width % 2 != 0 {
        return Err(crate::OpError::new(
            "the last axis of X must have an even size",
        ));
    }
    // ORT's kernel (CUDA; the CPU EP has none) adds in the input type, then computes the GELU
    // and the product in float32 and rounds once: in float16, `1 + erf(z)` moves in steps of
    // 4.9e-4 (erf(-2.5) + 1 is 4.1e-4), an error that a large left half scales up.
    let sum = ops::astype(&ops::add(&x, &bias, s)?, mlx_kernels::Dtype::F32, s)?;
    let halves = ops::split_at(&sum, &[(width / 2) as i32], x.ndim() as i32 - 1, s)?;
    let [left, right] = <[Array; 2]>::try_from(halves)
        .map_err(|_| crate::OpError::new("splitting X in half did not give two parts"))?;
    Ok(ops::astype(
        &ops::multiply(&left, &gelu_erf(&right, s)?, s)?,
        x.dtype(),
        s,
    )?)
}

#[cfg(test)]
mod tests {
    use crate::table::testing::{f32s, node, run1, values_f32};
    use crate::ElemType;

    #[test]
    fn microsoft_fusions_match_their_definitions() {
        let x = f32s(&[-1.0, 0.0, 1.5], &[3]);
        let bias = f32s(&[0.5, 0.5, 0.5], &[3]);
        let ms = |op: &str, inputs: usize| {
            node(op, 1, &vec![ElemType::Float; inputs], ElemType::Float).in_domain("com.microsoft")
        };
        let bias_gelu = values_f32(&run1(
            &ms("BiasGelu", 2),
            &[Some(x.clone()), Some(bias.clone())],
        ));
        let plain = values_f32(&run1(
            &ms("Gelu", 1),
            &[Some(f32s(&[-0.5, 0.5, 2.0], &[3]))],
        ));
        assert_eq!(bias_gelu, plain);
        // Reference values of the exact GELU: x·Φ(x).
        for (got, want) in plain.iter().zip([-0.154_268_5f32, 0.345_731_5, 1.954_5]) {
            assert!((got - want).abs() < 1e-4, "{got} vs {want}");
        }
        let quick = values_f32(&run1(&ms("QuickGelu", 1), &[Some(x.clone())]));
        let expected: Vec<f32> = [-1.0f32, 0.0, 1.5]
            .iter()
            .map(|v| v / (1.0 + (-1.702 * v).exp()))
            .collect();
        for (g, e) in quick.iter().zip(&expected) {
            assert!((g - e).abs() < 1e-6);
        }
        let skip = f32s(&[1.0, 1.0, 1.0], &[3]);
        let added = values_f32(&run1(
            &ms("BiasAdd", 3),
            &[Some(x.clone()), Some(bias.clone()), Some(skip)],
        ));
        assert_eq!(added, vec![0.5, 1.5, 3.0]);
        let fast_with_bias = values_f32(&run1(&ms("FastGelu", 2), &[Some(x), Some(bias)]));
        let fast_plain = values_f32(&run1(
            &ms("FastGelu", 1),
            &[Some(f32s(&[-0.5, 0.5, 2.0], &[3]))],
        ));
        assert_eq!(fast_with_bias, fast_plain);
    }
}
