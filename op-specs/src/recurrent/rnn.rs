//! RNN: the Elman cell.

use mlx_kernels::{ops, Array, Stream};

use super::activation::{activate_state, Activation};
use super::unroll::recurrent;
use super::{gate_input, Attributes, Cell, Config, Direction, Inputs};
use crate::{onnx_op, Lower, Node, Result, Verdict};

fn rnn_claim(node: &Node) -> Verdict {
    super::claim(node, Cell::Rnn)
}

/// Elman RNN: `H = f(clip(X·Wᵀ + H·Rᵀ + Wb + Rb))` per step, forward, reverse or both;
/// `layout = 1` (opset 14 on) puts the batch first.
#[allow(clippy::too_many_arguments)] // six inputs and seven attributes, as ONNX has them
#[onnx_op(
    op = "RNN", precision = Float32, since = 7, types(T = FLOAT, T1 = I32),
    inputs(X: T, W: T, R: T, B: T, sequence_lens: T1, initial_h: T), outputs(Y?: T, Y_h?: T),
    shape = ShapeKeyed, claim = rnn_claim, declines = "activation names other than ONNX's (case-sensitive), or not one per direction; alpha/beta that ORT's CPU EP (one per direction, default 0) and ONNX (consumed in order, operator defaults) read differently; a non-positive clip or hidden_size; an unknown direction; a layout other than 0 or 1"
)]
fn rnn(
    cx: &mut Lower,
    x: Array,
    w: Array,
    r: Array,
    b: Option<Array>,
    sequence_lens: Option<Array>,
    initial_h: Option<Array>,
    #[attr] activation_alpha: Option<Vec<f32>>,
    #[attr] activation_beta: Option<Vec<f32>>,
    #[attr] activations: Option<Vec<String>>,
    #[attr] clip: Option<f32>,
    #[attr(default = "forward")] direction: String,
    #[attr] hidden_size: i64,
    #[attr(default = 0, since = 14)] layout: i64,
) -> Result<Vec<Array>> {
    let attrs = Attributes {
        activations,
        activation_alpha,
        activation_beta,
        clip,
        direction,
        hidden_size,
        layout,
    };
    let cfg = Config::new(Cell::Rnn, attrs, b.is_some())?;
    let inputs = Inputs {
        x,
        w,
        r,
        b,
        lens: sequence_lens,
        h0: initial_h,
        c0: None,
        p: None,
    };
    let mut out = recurrent(cx, &cfg, inputs)?;
    out.truncate(2);
    Ok(out)
}

/// `H = f(clip(X·Wᵀ + Wb + Rb + H·Rᵀ))`, the projection given.
pub(super) fn step(
    cfg: &Config,
    acts: &[Activation],
    dir: &Direction,
    projected: &Array,
    h: &Array,
    s: &Stream,
) -> Result<Array> {
    let pre = ops::addmm(projected, h, &dir.recurrent_t, 1.0, 1.0, s)?;
    activate_state(acts[0], &gate_input(cfg, pre, s)?, s)
}

#[cfg(test)]
mod tests {
    use super::super::tests::{claimed, decline_reason, layout_gate, node};
    use crate::AttrValue;

    #[test]
    fn one_declaration_serves_rnn_7_to_13_and_14_on_by_the_layout_gate() {
        layout_gate("RNN");
    }

    #[test]
    fn rnn_names_are_case_sensitive_as_in_ort() {
        let names = |v: &[&str]| AttrValue::Strings(v.iter().map(|n| n.to_string()).collect());
        assert!(claimed(
            &node("RNN", 14).attr("activations", names(&["Relu"]))
        ));
        let reason = decline_reason(&node("RNN", 14).attr("activations", names(&["relu"])));
        assert!(reason.contains("case-sensitively"), "{reason}");
    }
}
