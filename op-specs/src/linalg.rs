//! Matrix products: MatMul and Gemm.

use mlx_kernels::{ops, Array};

use crate::table::consts::scalar_like;
use crate::{onnx_op, Lower, OpError, Result};

/// numpy's matmul: batched, broadcasting batch dims, 1-D operands promoted and squeezed back.
#[onnx_op(op = "MatMul", since = 1, types(T = FLOAT), inputs(A: T, B: T), outputs(Y: T), shape = Shapeless)]
fn matmul(cx: &mut Lower, a: Array, b: Array) -> Result<Array> {
    if a.ndim() == 0 || b.ndim() == 0 {
        return Err(OpError::new("MatMul operands must have rank >= 1"));
    }
    let s = cx.stream();
    let product = ops::matmul(&a, &b, s)?;
    if a.shape().last() == Some(&0) && product.size() > 0 {
        // A sum over nothing: zeros, without a kernel over zero-size operands.
        return Ok(ops::broadcast_to(
            &scalar_like(0.0, &product, s)?,
            &product.shape(),
            s,
        )?);
    }
    Ok(product)
}

/// `alpha * A' · B' + beta * C`, with `A' = Aᵀ` if `transA` and `B' = Bᵀ` if `transB`; `C`
/// broadcasts to the product.
#[allow(clippy::too_many_arguments)] // three inputs and four attributes, as ONNX has them
#[onnx_op(op = "Gemm", opset = 7..=10, types(T = FLOAT), inputs(A: T, B: T, C: T), outputs(Y: T), shape = Shapeless)]
fn gemm_7(
    cx: &mut Lower,
    a: Array,
    b: Array,
    c: Array,
    #[attr(default = 1.0)] alpha: f32,
    #[attr(default = 1.0)] beta: f32,
    #[attr(name = "transA", default = 0)] trans_a: i64,
    #[attr(name = "transB", default = 0)] trans_b: i64,
) -> Result<Array> {
    general_product(cx, a, b, Some(c), alpha, beta, trans_a != 0, trans_b != 0)
}

/// `alpha * A' · B' + beta * C`, with `A' = Aᵀ` if `transA` and `B' = Bᵀ` if `transB`; `C` is
/// optional and broadcasts to the product.
#[allow(clippy::too_many_arguments)] // three inputs and four attributes, as ONNX has them
#[onnx_op(op = "Gemm", since = 11, types(T = FLOAT), inputs(A: T, B: T, C: T), outputs(Y: T), shape = Shapeless)]
fn gemm(
    cx: &mut Lower,
    a: Array,
    b: Array,
    c: Option<Array>,
    #[attr(default = 1.0)] alpha: f32,
    #[attr(default = 1.0)] beta: f32,
    #[attr(name = "transA", default = 0)] trans_a: i64,
    #[attr(name = "transB", default = 0)] trans_b: i64,
) -> Result<Array> {
    general_product(cx, a, b, c, alpha, beta, trans_a != 0, trans_b != 0)
}

#[allow(clippy::too_many_arguments)] // Gemm's inputs and attributes, passed through
fn general_product(
    cx: &Lower,
    a: Array,
    b: Array,
    c: Option<Array>,
    alpha: f32,
    beta: f32,
    trans_a: bool,
    trans_b: bool,
) -> Result<Array> {
    let s = cx.stream();
    if a.ndim() != 2 || b.ndim() != 2 {
        return Err(OpError::new("Gemm operands must be matrices"));
    }
    let a = if trans_a {
        ops::transpose(&a, &[1, 0], s)?
    } else {
        a
    };
    let b = if trans_b {
        ops::transpose(&b, &[1, 0], s)?
    } else {
        b
    };
    match c {
        // MLX's fused form, when C is there.
        Some(c) => Ok(ops::addmm(&c, &a, &b, alpha, beta, s)?),
        None => {
            let product = ops::matmul(&a, &b, s)?;
            if alpha == 1.0 {
                Ok(product)
            } else {
                Ok(ops::multiply(
                    &product,
                    &scalar_like(alpha.into(), &product, s)?,
                    s,
                )?)
            }
        }
    }
}
