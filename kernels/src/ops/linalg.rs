//! Matrix products.

use super::binary_ops;

binary_ops! {
    /// Batched matrix product with numpy semantics (1-D operands, broadcast batch dims).
    matmul => mlx_matmul,
}
