//! A product and its bias as one call. Linear layers exported without a graph optimizer spell
//! `x · W + b` as a MatMul and an Add. MatMul records what its answer is made of when the Add
//! alone will read it ([`note_product`]); the Add, finding such a product on one side and a
//! row of biases on the other, answers with MLX's `addmm` ([`biased_product`]). On MLX's CUDA
//! backend that is one cuBLASLt product whose epilogue adds the bias, where the graph's nodes
//! are a product and an elementwise pass over it. It pays where no elementwise node follows
//! for MLX's compiler to fuse the Add into: the query, key and value projections of an
//! attention, read next by the fused attention kernel.
//!
//! The same sum, rounded no more often: in float32 the bias joins the product's float32
//! result; in float16 and bfloat16 MLX's GPU product adds it to the float32 accumulator, where
//! the graph rounds the product and then the sum.
//!
//! Only where the lowering's shapes are those of every run it stands for
//! ([`Lower::shapes_fixed`]): `addmm` broadcasts the bias to the product's rows when it is
//! built, which a shapeless closure would replay for other row counts.

use mlx_kernels::{ops, Array};

use crate::Lower;

/// Recorded on a MatMul's answer `a · b` that one Add alone reads.
const PRODUCT: &str = "linear: product";
/// The rewrite the plan's summary counts.
pub(crate) const BIASED: &str = "bias add(s) fused into their MatMul";

/// What a product is made of: `a` `[.., M, K]` (at least 2-D) and `b` `[K, N]`.
#[derive(Clone)]
struct Product {
    a: Array,
    b: Array,
}

/// MatMul's answer `y = a · b` (the node's only output) is recorded as a product that a bias
/// may join when one node alone reads it, the shapes are fixed, `b` is a matrix, `a` has rows,
/// both are one float type and the product sums over something (`K > 0`) into something.
pub(crate) fn note_product(cx: &Lower, a: &Array, b: &Array, y: &Array) {
    let linear = a.ndim() >= 2 && b.ndim() == 2 && a.shape().last().is_some_and(|&k| k > 0);
    let typed = a.dtype().is_float() && a.dtype() == b.dtype();
    if linear && typed && y.size() > 0 && cx.output_read_once(0) && cx.shapes_fixed() {
        let product = Product {
            a: a.clone(),
            b: b.clone(),
        };
        cx.record_form(PRODUCT, y, product);
    }
}

/// Add's `x + bias` as one `addmm`, when `x` is a recorded product and `bias` (of its type)
/// holds one value per column (`[N]`, or `[1, .., N]` no deeper than `x`); `None` otherwise,
/// and when MLX refuses to build it, for the plain sum.
pub(crate) fn biased_product(cx: &Lower, x: &Array, bias: &Array) -> Option<Array> {
    let product = cx.form_of::<Product>(PRODUCT, x)?;
    let columns = *x.shape().last()?;
    let dims = bias.shape();
    let row = dims.last() == Some(&columns) && dims.iter().rev().skip(1).all(|&d| d == 1);
    if !row || bias.ndim() > x.ndim() || bias.dtype() != x.dtype() {
        return None;
    }
    let s = cx.stream();
    let bias = ops::reshape(bias, &[columns], s).ok()?;
    let y = ops::addmm(&bias, &product.a, &product.b, 1.0, 1.0, s).ok()?;
    cx.note_rewrite(BIASED);
    Some(y)
}
