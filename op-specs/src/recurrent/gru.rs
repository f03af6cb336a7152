//! GRU: the gated recurrent unit.

use mlx_kernels::{ops, Array, Dtype, Stream};

use super::activation::{activate, Activation};
use super::unroll::recurrent;
use super::{columns, gate_input, gates, Attributes, Cell, Config, Direction, Inputs};
use crate::table::consts::scalar;
use crate::{onnx_op, Lower, Node, OpError, Result, Verdict};

fn gru_claim(node: &Node) -> Verdict {
    super::claim(node, Cell::Gru)
}

/// Gated recurrent unit: `z, r = f(X·W + H·R + b)`, `h = g(X·Wh + (r ⊙ H)·Rh + b)` (or
/// `r ⊙ (H·Rh + Rbh)` with `linear_before_reset`), `H = (1 - z) ⊙ h + z ⊙ H`; `layout = 1`
/// (opset 14 on) puts the batch first.
#[allow(clippy::too_many_arguments)] // six inputs and eight attributes, as ONNX has them
#[onnx_op(
    op = "GRU", precision = Float32, since = 7, types(T = FLOAT, T1 = I32),
    inputs(X: T, W: T, R: T, B: T, sequence_lens: T1, initial_h: T), outputs(Y?: T, Y_h?: T),
    shape = ShapeKeyed, claim = gru_claim, declines = "activation names other than ONNX's, or not two per direction; Affine/ThresholdedRelu without activation_alpha, ScaledTanh without activation_alpha/beta (ORT's CPU EP and ONNX default them differently); a non-positive clip or hidden_size; an unknown direction; a layout other than 0 or 1"
)]
fn gru(
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
    #[attr(default = 0)] linear_before_reset: i64,
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
    let mut cfg = Config::new(Cell::Gru, attrs, b.is_some())?;
    cfg.linear_before_reset = linear_before_reset != 0;
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

/// `z`, `r` from `X·W + H·R`; the hidden gate from `r` applied before (default) or after
/// (`linear_before_reset`) the recurrent product; `H = (1 - z) h + z H`.
pub(super) fn step(
    cfg: &Config,
    acts: &[Activation],
    dir: &Direction,
    projected: &Array,
    h: &Array,
    s: &Stream,
) -> Result<Array> {
    let hidden = cfg.hidden;
    let (r_zr, r_h) = dir
        .recurrent_zr_h_t
        .as_ref()
        .ok_or_else(|| OpError::new("GRU weights were not split"))?;
    let zr = ops::addmm(&columns(projected, 0, 2 * hidden, s)?, h, r_zr, 1.0, 1.0, s)?;
    let zr = activate(acts[0], &gate_input(cfg, zr, s)?, s)?;
    let [z, r]: [Array; 2] = gates(&zr, 2, hidden, s)?
        .try_into()
        .map_err(|_| OpError::new("GRU gates do not split in two"))?;
    let projected_h = columns(projected, 2 * hidden, 3 * hidden, s)?;
    let pre = if cfg.linear_before_reset {
        let mut linear = ops::matmul(h, r_h, s)?;
        if let Some(rb) = &dir.recurrent_bias_h {
            linear = ops::add(&linear, rb, s)?;
        }
        ops::add(&projected_h, &ops::multiply(&r, &linear, s)?, s)?
    } else {
        ops::addmm(&projected_h, &ops::multiply(&r, h, s)?, r_h, 1.0, 1.0, s)?
    };
    let candidate = activate(acts[1], &gate_input(cfg, pre, s)?, s)?;
    let keep = ops::multiply(&z, h, s)?;
    let one_minus_z = ops::subtract(&scalar(1.0, Dtype::F32, s)?, &z, s)?;
    Ok(ops::add(
        &ops::multiply(&one_minus_z, &candidate, s)?,
        &keep,
        s,
    )?)
}

#[cfg(test)]
mod tests {
    use super::super::tests::{claimed, decline_reason, layout_gate, node};
    use crate::AttrValue;

    #[test]
    fn one_declaration_serves_gru_7_to_13_and_14_on_by_the_layout_gate() {
        layout_gate("GRU");
        let lbr = |opset| node("GRU", opset).attr("linear_before_reset", AttrValue::Int(1));
        assert!(claimed(&lbr(7)) && claimed(&lbr(14)));
    }

    #[test]
    fn gru_takes_two_activations_per_direction() {
        let names = |v: &[&str]| AttrValue::Strings(v.iter().map(|n| n.to_string()).collect());
        let one = node("GRU", 14).attr("activations", names(&["Sigmoid"]));
        assert!(decline_reason(&one).contains("2 expected"));
        assert!(claimed(
            &node("GRU", 14).attr("activations", names(&["sigmoid", "TANH"]))
        ));
    }
}
