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
