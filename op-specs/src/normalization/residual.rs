//! A residual sum and the layer norm that reads it, as one kernel. A transformer block adds its
//! sublayer's answer to the residual stream and normalises the sum: on MLX's CUDA backend an
//! elementwise add, then the layer-norm kernel, with the sum written and read back in between.
//! Add records what its answer is made of ([`note_sum`]); LayerNormalization, finding such a
//! sum as its X, computes the sum and its norm in one kernel ([`normalised_sum`]). Where other
//! nodes read the sum too (a pre-norm block's residual stream goes on to the next add), the
//! kernel keeps it and they read that copy ([`Lower::answer_again`]), so the add is left out.
//!
//! The same values, bit for bit: the kernel rounds the sum as MLX's add does and normalises it
//! with the layer-norm kernel's body (`custom::layer_norm_of_sum`). Only where LayerNormalization
//! takes that kernel (MLX's CUDA backend, a last-axis norm with per-element parameters) and the
//! shapes are those of every run the lowering stands for ([`Lower::shapes_fixed`]: the kernel's
//! grid is fixed when it is built).

use mlx_kernels::{custom, Array, Dtype};

use crate::Lower;

/// Recorded on an Add's answer `a + b` of two arrays of one float type and shape.
const SUM: &str = "residual: sum";
/// The rewrite the plan's summary counts.
pub(crate) const JOINED: &str = "residual add(s) joined to their layer norm";

/// What a sum is made of, and whether the layer norm is its only reader.
#[derive(Clone)]
struct Sum {
    a: Array,
    b: Array,
    read_once: bool,
}

/// Add's answer `y = a + b` (the node's only output) is recorded as a sum a layer norm may
/// take in when `a` and `b` are one float type and one shape (no broadcast), `y` is not
/// empty and the shapes are fixed.
pub(crate) fn note_sum(cx: &Lower, a: &Array, b: &Array, y: &Array) {
    let float = matches!(a.dtype(), Dtype::F32 | Dtype::F16 | Dtype::BF16);
    let alike = a.dtype() == b.dtype() && a.shape() == b.shape();
    if float && alike && y.size() > 0 && cx.shapes_fixed() {
        let sum = Sum {
            a: a.clone(),
            b: b.clone(),
            read_once: cx.output_read_once(0),
        };
        cx.record_form(SUM, y, sum);
    }
}

/// The layer norm of `x` over its last axis (`weight` and `bias` float32, per element), rounded
/// to `output`, when `x` is a recorded sum and the fused kernel runs here: one kernel for the
/// sum and its norm. `None` otherwise, and when the kernel refuses the operands, for the plain
/// path.
pub(crate) fn normalised_sum(
    cx: &Lower,
    x: &Array,
    weight: &Array,
    bias: Option<&Array>,
    epsilon: f32,
    output: Dtype,
) -> Option<Array> {
    let s = cx.stream();
    if !custom::layer_norm_runs_on(s) {
        return None;
    }
    let sum = cx.form_of::<Sum>(SUM, x)?;
    let keep_sum = !sum.read_once;
    let operands = (&sum.a, &sum.b);
    let (y, kept) =
        custom::layer_norm_of_sum(operands, weight, bias, epsilon, output, keep_sum, s).ok()?;
    if let Some(kept) = kept {
        cx.answer_again(x, kept);
    }
    cx.note_rewrite(JOINED);
    Some(y)
}

#[cfg(test)]
mod tests {
    use mlx_kernels::ops;

    use super::*;
    use crate::table::testing::{stream, PlanStores};
    use crate::Node;

    /// Whether an Add of `a` and `b` is noted as a sum (and then whether the norm would be its
    /// only reader), in a plan whose shapes are fixed or not.
    fn noted(a: &Array, b: &Array, shapes_fixed: bool, read_once: bool) -> Option<bool> {
        let s = stream();
        let node = Node::new("Add", 2);
        let stores = PlanStores::default();
        let read_once = [read_once];
        let context = stores.context(&[false, false], &read_once, shapes_fixed);
        let cx = Lower::new(&s, &node).with_constants(context);
        let y = ops::add(a, b, &s).unwrap();
        note_sum(&cx, a, b, &y);
        cx.form_of::<Sum>(SUM, &y).map(|sum| sum.read_once)
    }

    #[test]
    fn a_sum_is_noted_of_one_float_type_and_shape_where_shapes_are_fixed() {
        let s = stream();
        let x = Array::from_slice(&[1.0f32; 6], &[2, 3]).unwrap();
        let row = Array::from_slice(&[1.0f32; 3], &[3]).unwrap();
        let half = ops::astype(&x, Dtype::F16, &s).unwrap();
        let ints = Array::from_slice(&[1i32; 6], &[2, 3]).unwrap();
        assert_eq!(noted(&x, &x, true, true), Some(true));
        assert_eq!(
            noted(&x, &x, true, false),
            Some(false),
            "read by others too"
        );
        assert_eq!(noted(&half, &half, true, false), Some(false));
        assert_eq!(noted(&x, &row, true, true), None, "a broadcast add");
        assert_eq!(noted(&ints, &ints, true, true), None, "integers");
        assert_eq!(
            noted(&x, &x, false, true),
            None,
            "a plan that may replay shapeless"
        );
    }

    #[test]
    fn off_the_cuda_backend_the_norm_takes_its_plain_path() {
        let s = stream();
        let node = Node::new("LayerNormalization", 3);
        let stores = PlanStores::default();
        let context = stores.context(&[false, true, true], &[true], true);
        let cx = Lower::new(&s, &node).with_constants(context);
        let x = Array::from_slice(&[1.0f32, 2.0, 3.0, 5.0], &[2, 2]).unwrap();
        let y = ops::add(&x, &x, &s).unwrap();
        note_sum(&cx, &x, &x, &y);
        let weight = Array::from_slice(&[1.0f32; 2], &[2]).unwrap();
        let joined = normalised_sum(&cx, &y, &weight, None, 1e-5, Dtype::F32);
        assert_eq!(joined.is_some(), custom::layer_norm_runs_on(&s));
        assert!(stores.shared.borrow_mut().take_answered_again().is_empty());
    }
}
