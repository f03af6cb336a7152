//! Matrix products.

use super::binary_ops;

binary_ops! {
    /// Batched matrix product with numpy semantics (1-D operands, broadcast batch dims).
    matmul => mlx_matmul,
}

/// `alpha * (a · b) + beta * c` in one op (`c` broadcasts to the product).
pub fn addmm(
    c: &crate::Array,
    a: &crate::Array,
    b: &crate::Array,
    alpha: f32,
    beta: f32,
    stream: &crate::Stream,
) -> crate::Result<crate::Array> {
    crate::Array::from_op(|out| {
        // SAFETY: all handles are live; MLX validates the shapes.
        unsafe { crate::sys::mlx_addmm(out, c.raw(), a.raw(), b.raw(), alpha, beta, stream.raw()) }
    })
}

/// N-d cross-correlation, channels last: `input [N, spatial.., C_in]`, `weight [C_out,
/// kernel.., C_in / groups]`; per spatial axis: stride, padding before/after, (kernel)
/// dilation and input dilation (zeros between input elements: a transposed convolution).
#[allow(clippy::too_many_arguments)] // MLX's own parameter list
pub fn conv(
    input: &crate::Array,
    weight: &crate::Array,
    stride: &[i32],
    padding_lo: &[i32],
    padding_hi: &[i32],
    dilation: &[i32],
    input_dilation: &[i32],
    groups: i32,
    stream: &crate::Stream,
) -> crate::Result<crate::Array> {
    crate::Array::from_op(|out| {
        // SAFETY: every slice outlives the call; MLX validates their lengths and the shapes.
        unsafe {
            crate::sys::mlx_conv_general(
                out,
                input.raw(),
                weight.raw(),
                stride.as_ptr(),
                stride.len(),
                padding_lo.as_ptr(),
                padding_lo.len(),
                padding_hi.as_ptr(),
                padding_hi.len(),
                dilation.as_ptr(),
                dilation.len(),
                input_dilation.as_ptr(),
                input_dilation.len(),
                groups,
                false,
                stream.raw(),
            )
        }
    })
}

/// numpy's `einsum` over `operands` (MLX parses the equation; ellipses and diagonals included).
pub fn einsum(
    equation: &str,
    operands: &[crate::Array],
    stream: &crate::Stream,
) -> crate::Result<crate::Array> {
    let equation = std::ffi::CString::new(equation)
        .map_err(|_| crate::Error::Mlx("an einsum equation cannot hold a NUL byte".to_owned()))?;
    let vector = crate::VectorArray::from_arrays(operands)?;
    crate::Array::from_op(|out| {
        // SAFETY: `equation` and `vector` outlive the call; MLX validates the equation.
        unsafe { crate::sys::mlx_einsum(out, equation.as_ptr(), vector.raw(), stream.raw()) }
    })
}

/// `a[lhs] · b[rhs]` over the batch dims: each index picks the matrix of `a`'s (or `b`'s)
/// flattened batch dims that its product uses, so a mixture of experts multiplies each row by
/// only its own experts' weights without copying them. An absent index set broadcasts that
/// operand's batch dims against the other's.
pub fn gather_mm(
    a: &crate::Array,
    b: &crate::Array,
    lhs_indices: Option<&crate::Array>,
    rhs_indices: Option<&crate::Array>,
    stream: &crate::Stream,
) -> crate::Result<crate::Array> {
    crate::Array::from_op(|out| {
        // SAFETY: all handles are live (an absent index set is MLX's empty handle, which
        // mlx_gather_mm reads as "not given"); MLX validates shapes and index dtypes.
        unsafe {
            crate::sys::mlx_gather_mm(
                out,
                a.raw(),
                b.raw(),
                super::optional(lhs_indices),
                super::optional(rhs_indices),
                false,
                stream.raw(),
            )
        }
    })
}
