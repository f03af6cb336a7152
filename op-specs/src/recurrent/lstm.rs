//! LSTM: long short-term memory, with optional peepholes.

use mlx_kernels::{ops, Array, Dtype, Stream};

use super::activation::{activate, activate_state, Activation};
use super::unroll::recurrent;
use super::{gate_input, gates, Attributes, Cell, Config, Direction, Inputs};
use crate::table::consts::scalar;
use crate::{onnx_op, Lower, Node, OpError, Result, Verdict};

fn lstm_claim(node: &Node) -> Verdict {
    super::claim(node, Cell::Lstm)
}

/// Long short-term memory: gates `i, o, f = f(X·W + H·R + P ⊙ C + b)`, `c = g(...)`,
/// `C = f ⊙ C + i ⊙ c`, `H = o ⊙ h(C)`; optional peepholes `P`, `input_forget` (`f = 1 - i`);
/// `layout = 1` (opset 14 on) puts the batch first.
#[allow(clippy::too_many_arguments)] // eight inputs and eight attributes, as ONNX has them
#[onnx_op(
    op = "LSTM", precision = Float32, since = 7, types(T = FLOAT, T1 = I32),
    inputs(X: T, W: T, R: T, B: T, sequence_lens: T1, initial_h: T, initial_c: T, P: T),
    outputs(Y?: T, Y_h?: T, Y_c?: T),
    shape = ShapeKeyed, claim = lstm_claim, declines = "activation names other than ONNX's, or not three per direction; Affine/ThresholdedRelu without activation_alpha, ScaledTanh without activation_alpha/beta (ORT's CPU EP and ONNX default them differently); a non-positive clip or hidden_size; an unknown direction; a layout other than 0 or 1"
)]
fn lstm(
    cx: &mut Lower,
    x: Array,
    w: Array,
    r: Array,
    b: Option<Array>,
    sequence_lens: Option<Array>,
    initial_h: Option<Array>,
    initial_c: Option<Array>,
    p: Option<Array>,
    #[attr] activation_alpha: Option<Vec<f32>>,
    #[attr] activation_beta: Option<Vec<f32>>,
    #[attr] activations: Option<Vec<String>>,
    #[attr] clip: Option<f32>,
    #[attr(default = "forward")] direction: String,
    #[attr] hidden_size: i64,
    #[attr(default = 0)] input_forget: i64,
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
    let mut cfg = Config::new(Cell::Lstm, attrs, b.is_some())?;
    cfg.input_forget = input_forget != 0;
    let inputs = Inputs {
        x,
        w,
        r,
        b,
        lens: sequence_lens,
        h0: initial_h,
        c0: initial_c,
        p,
    };
    recurrent(cx, &cfg, inputs)
}

/// Gates `i, o, f, c` from one product; peepholes on `i`, `f` (old cell state) and `o` (new);
/// the new hidden and cell states.
pub(super) fn step(
    cfg: &Config,
    acts: &[Activation],
    dir: &Direction,
    projected: &Array,
    h: &Array,
    c: &Array,
    s: &Stream,
) -> Result<(Array, Array)> {
    let all = ops::addmm(projected, h, &dir.recurrent_t, 1.0, 1.0, s)?;
    let [i, o, f, g]: [Array; 4] = gates(&all, 4, cfg.hidden, s)?
        .try_into()
        .map_err(|_| OpError::new("LSTM gates do not split in four"))?;
    let peep = |gate: Array, k: usize, state: &Array| -> Result<Array> {
        match &dir.peepholes {
            Some(p) => Ok(ops::add(&gate, &ops::multiply(&p[k], state, s)?, s)?),
            None => Ok(gate),
        }
    };
    let (f_act, g_act, h_act) = (acts[0], acts[1], acts[2]);
    let i = activate(f_act, &gate_input(cfg, peep(i, 0, c)?, s)?, s)?;
    let f = if cfg.input_forget {
        ops::subtract(&scalar(1.0, Dtype::F32, s)?, &i, s)?
    } else {
        activate(f_act, &gate_input(cfg, peep(f, 2, c)?, s)?, s)?
    };
    let g = activate(g_act, &gate_input(cfg, g, s)?, s)?;
    let c_new = ops::add(&ops::multiply(&f, c, s)?, &ops::multiply(&i, &g, s)?, s)?;
    let o = activate(f_act, &gate_input(cfg, peep(o, 1, &c_new)?, s)?, s)?;
    let h_new = ops::multiply(&o, &activate_state(h_act, &c_new, s)?, s)?;
    Ok((h_new, c_new))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{claimed, decline_reason, layout_gate, node};
    use crate::AttrValue;

    #[test]
    fn one_declaration_serves_lstm_7_to_13_and_14_on_by_the_layout_gate() {
        layout_gate("LSTM");
        let coupled = |opset| node("LSTM", opset).attr("input_forget", AttrValue::Int(1));
        assert!(claimed(&coupled(7)) && claimed(&coupled(14)));
    }

    #[test]
    fn lstm_without_a_disputed_alpha_is_declined() {
        let names = |v: &[&str]| AttrValue::Strings(v.iter().map(|n| n.to_string()).collect());
        let affine = node("LSTM", 7).attr("activations", names(&["Affine", "Tanh", "Tanh"]));
        let reason = decline_reason(&affine);
        assert!(
            reason.contains("Affine without an activation_alpha"),
            "{reason}"
        );
        let given = affine.attr("activation_alpha", AttrValue::Floats(vec![0.5]));
        assert!(claimed(&given));
    }
}
