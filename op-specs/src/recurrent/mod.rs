//! Recurrent layers: RNN, GRU and LSTM, unrolled over the time steps.
//!
//! Where ONNX leaves a detail open, ORT's CPU EP (the oracle) settles it:
//! - `sequence_lens`: a batch entry's steps at and past its length give zeros in `Y`, its
//!   `Y_h`/`Y_c` is the state after its last valid step, and the reverse pass starts at its own
//!   last valid step. A length of 0 (and a zero-length sequence) gives zero states, not the
//!   initial ones. The lengths stay a runtime tensor: each step selects, per batch entry, between
//!   the new state and the carried one, so no host read is needed. Lengths outside
//!   `[0, seq_length]` fail the run, as in ORT's CPU EP (a run-time check).
//! - `clip` bounds the input of the gate activations only (not the cell state fed to `h`).
//!   GRU and LSTM bound it even without `clip` (to float32's largest value), and a node with a
//!   bias turns a NaN there into the upper bound, as ORT's kernels do ([`gate_input`]).
//! - `input_forget = 1` (LSTM) couples the gates: `f = 1 - i`.
//! - `activation_alpha`/`activation_beta` are consumed in order by the activations that take
//!   them; where ORT's defaults differ from ONNX's (Affine's and ThresholdedRelu's alpha,
//!   ScaledTanh's alpha and beta, and every default of RNN, whose CPU kernel takes one alpha and
//!   beta per direction) a node relying on a default is declined.
//! - `layout` (opset 14 on; 22 only widened the types) puts the batch first when 1.
//!
//! Everything is computed in float32 (float16/bfloat16 inputs are widened once and the outputs
//! rounded once at the end), as ORT's CPU EP does for float16 through inserted Casts.
//!
//! This module holds what the three ops share: the node's attributes resolved ([`Config`]), the
//! claim, and small tensor helpers. `activation.rs` resolves the activation functions,
//! `unroll.rs` runs the directions over the steps, and `rnn.rs`, `gru.rs` and `lstm.rs` each
//! declare one op with its cell step.

mod activation;
mod gru;
mod lstm;
mod rnn;
mod unroll;

use mlx_kernels::{ops, Array, Dtype, Stream};

use crate::table::consts::scalar;
use crate::{Node, OpError, Result, Verdict};
use activation::{resolve_activations, Activation};

/// The three cells: how many gates each has and which activations it takes per direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cell {
    Rnn,
    Gru,
    Lstm,
}

impl Cell {
    fn gates(self) -> i64 {
        match self {
            Cell::Rnn => 1,
            Cell::Gru => 3,
            Cell::Lstm => 4,
        }
    }

    /// ONNX's default activations of one direction.
    fn default_activations(self) -> &'static [&'static str] {
        match self {
            Cell::Rnn => &["Tanh"],
            Cell::Gru => &["Sigmoid", "Tanh"],
            Cell::Lstm => &["Sigmoid", "Tanh", "Tanh"],
        }
    }
}

/// `[false]`, `[true]` or `[false, true]`: whether each direction runs backwards.
fn directions(direction: &str) -> std::result::Result<Vec<bool>, String> {
    match direction {
        "forward" => Ok(vec![false]),
        "reverse" => Ok(vec![true]),
        "bidirectional" => Ok(vec![false, true]),
        other => Err(format!(
            "direction {other:?} is not an ONNX direction (forward, reverse or bidirectional)"
        )),
    }
}

/// The claim of all three ops: everything the lowering would otherwise fail on, or could not
/// run as ORT's CPU EP does, is declined here with its reason.
fn claim(node: &Node, cell: Cell) -> Verdict {
    match claim_reason(node, cell) {
        Ok(()) => Verdict::Claim,
        Err(reason) => Verdict::decline(reason),
    }
}

fn claim_reason(node: &Node, cell: Cell) -> std::result::Result<(), String> {
    let dirs = directions(&node.attr_or("direction", "forward".to_owned()))?;
    resolve_activations(
        cell,
        dirs.len(),
        node.attr_as::<Vec<String>>("activations").as_deref(),
        node.attr_as::<Vec<f32>>("activation_alpha").as_deref(),
        node.attr_as::<Vec<f32>>("activation_beta").as_deref(),
    )?;
    let hidden = node.attr_or("hidden_size", 0i64);
    if hidden <= 0 {
        return Err(format!("hidden_size {hidden}: a positive size is needed"));
    }
    if let Some(c) = node.attr_as::<f32>("clip") {
        // ORT's GRU/LSTM kernels reject it and its RNN kernel treats it as "no clip".
        if c.is_nan() || c <= 0.0 {
            return Err(format!("clip {c}: only a positive threshold"));
        }
    }
    let layout = node.attr_or("layout", 0i64);
    if layout != 0 && layout != 1 {
        return Err(format!(
            "layout {layout}: only 0 (sequence first) and 1 (batch first)"
        ));
    }
    Ok(())
}

/// The attributes the three ops share, as the node gives them.
struct Attributes {
    activations: Option<Vec<String>>,
    activation_alpha: Option<Vec<f32>>,
    activation_beta: Option<Vec<f32>>,
    clip: Option<f32>,
    direction: String,
    hidden_size: i64,
    layout: i64,
}

/// The node's attributes, resolved.
struct Config {
    cell: Cell,
    hidden: i64,
    /// Per direction: whether it runs backwards.
    reverse: Vec<bool>,
    /// `per_direction` activations per direction, directions in order.
    activations: Vec<Activation>,
    clip: Option<f32>,
    /// Whether the node has a bias `B`: ORT's GRU and LSTM kernels clamp a gate input while
    /// adding the bias (NaN becomes the upper bound there) and clamp it alone otherwise (NaN
    /// stays), so the bias input decides what a NaN gate input becomes.
    has_bias: bool,
    /// GRU only.
    linear_before_reset: bool,
    /// LSTM only.
    input_forget: bool,
    batch_major: bool,
}

impl Config {
    /// The claim declined every node this fails on; the errors guard a lowering reached
    /// without it.
    fn new(cell: Cell, attrs: Attributes, has_bias: bool) -> Result<Config> {
        let reverse = directions(&attrs.direction).map_err(OpError::new)?;
        let activations = resolve_activations(
            cell,
            reverse.len(),
            attrs.activations.as_deref(),
            attrs.activation_alpha.as_deref(),
            attrs.activation_beta.as_deref(),
        )
        .map_err(OpError::new)?;
        Ok(Config {
            cell,
            hidden: attrs.hidden_size,
            reverse,
            activations,
            clip: attrs.clip,
            has_bias,
            linear_before_reset: false,
            input_forget: false,
            batch_major: attrs.layout == 1,
        })
    }
}

/// The inputs, as the node gives them.
struct Inputs {
    x: Array,
    w: Array,
    r: Array,
    b: Option<Array>,
    lens: Option<Array>,
    h0: Option<Array>,
    c0: Option<Array>,
    p: Option<Array>,
}

/// One direction's weights, widened, and its input projection for every step.
struct Direction {
    /// `X[t] · Wᵀ` plus the biases that can be folded in, one `[batch, gates * hidden]` per step.
    projected: Vec<Array>,
    /// `Rᵀ`, `[hidden, gates * hidden]`.
    recurrent_t: Array,
    /// GRU: `Rᵀ` split into the update/reset gates' columns and the hidden gate's.
    recurrent_zr_h_t: Option<(Array, Array)>,
    /// GRU with `linear_before_reset`: `Rb` of the hidden gate, added inside the reset product.
    recurrent_bias_h: Option<Array>,
    /// LSTM peepholes `[P_i, P_o, P_f]`, each `[hidden]`.
    peepholes: Option<[Array; 3]>,
    h0: Array,
    c0: Array,
}

/// Columns `[from, to)` of a matrix (or of the last axis).
fn columns(a: &Array, from: i64, to: i64, s: &Stream) -> Result<Array> {
    let dims = a.shape();
    let last = dims.len() - 1;
    let mut start = vec![0i32; dims.len()];
    let mut stop: Vec<i32> = dims.iter().map(|&d| d as i32).collect();
    start[last] = from as i32;
    stop[last] = to as i32;
    let step = vec![1i32; dims.len()];
    Ok(ops::slice(a, &start, &stop, &step, s)?)
}

/// Splits the last axis into `n` parts of `width`.
fn gates(a: &Array, n: i64, width: i64, s: &Stream) -> Result<Vec<Array>> {
    let cuts: Vec<i32> = (1..n).map(|k| (k * width) as i32).collect();
    let axis = a.ndim() as i32 - 1;
    Ok(ops::split_at(a, &cuts, axis, s)?)
}

/// The input of a gate activation, bounded as ORT's CPU kernels bound it, NaN included. GRU and
/// LSTM always clamp to `[-clip, clip]` (no `clip`: float32's largest value), so an infinite gate
/// input reaches even an unbounded activation (Relu, Affine) finite; a NaN becomes `+clip` in a
/// node with a bias and stays NaN in one without ([`Config::has_bias`]). RNN clamps only when the
/// node gives `clip`, and keeps NaN (ORT's RNN turns a NaN into `-clip` for some elements and
/// keeps it for others, so no rule matches it everywhere; NaN is the spec's answer).
fn gate_input(cfg: &Config, x: Array, s: &Stream) -> Result<Array> {
    let (bound, nan_becomes) = match (cfg.cell, cfg.clip) {
        (Cell::Rnn, None) => return Ok(x),
        (Cell::Rnn, Some(c)) => (c, None),
        (_, c) => {
            let c = c.unwrap_or(f32::MAX);
            (c, cfg.has_bias.then_some(c))
        }
    };
    // Comparisons, as ORT writes the clamp: NaN fails both and stays NaN on every backend,
    // whatever a backend's maximum/minimum make of it.
    let (high, low) = (
        scalar(bound.into(), Dtype::F32, s)?,
        scalar(-f64::from(bound), Dtype::F32, s)?,
    );
    let above = ops::where_(&ops::greater(&x, &high, s)?, &high, &x, s)?;
    let clamped = ops::where_(&ops::less(&x, &low, s)?, &low, &above, s)?;
    match nan_becomes {
        None => Ok(clamped),
        Some(v) => {
            let v = scalar(v.into(), Dtype::F32, s)?;
            Ok(ops::where_(&ops::isnan(&x, s)?, &v, &clamped, s)?)
        }
    }
}

#[cfg(test)]
mod tests {
    pub(super) use crate::table::testing::{claimed, decline_reason};
    use crate::{AttrValue, ElemType, Node};

    /// A float node of `op` at `opset` with X, W, R, the outputs its cell has and no attributes.
    fn bare(op: &str, opset: i64) -> Node {
        let outputs = if op == "LSTM" { 3 } else { 2 };
        let mut node = Node::new(op, opset)
            .input(ElemType::Float)
            .input(ElemType::Float)
            .input(ElemType::Float);
        for _ in 0..outputs {
            node = node.output(ElemType::Float);
        }
        node
    }

    /// [`bare`] with a hidden size.
    pub(super) fn node(op: &str, opset: i64) -> Node {
        bare(op, opset).attr("hidden_size", AttrValue::Int(5))
    }

    /// `layout` exists from opset 14 (one declaration serves 7-13 and 14+); 0 and 1 only.
    pub(super) fn layout_gate(op: &str) {
        let layout = |opset, value| node(op, opset).attr("layout", AttrValue::Int(value));
        assert!(claimed(&node(op, 7)));
        assert!(claimed(&node(op, 13)));
        assert!(claimed(&layout(14, 1)));
        assert!(claimed(&layout(22, 0)));
        let reason = decline_reason(&layout(13, 0));
        assert!(reason.contains(&format!("not part of {op}-13")), "{reason}");
        let reason = decline_reason(&layout(7, 1));
        assert!(reason.contains(&format!("not part of {op}-7")), "{reason}");
        let reason = decline_reason(&layout(14, 2));
        assert!(reason.contains("layout 2"), "{reason}");
    }

    #[test]
    fn unknown_activation_names_and_directions_are_declined_with_a_reason() {
        for (op, per_direction) in [("RNN", 1), ("GRU", 2), ("LSTM", 3)] {
            let gelus = AttrValue::Strings(vec!["Gelu".into(); per_direction]);
            let gelu = node(op, 14).attr("activations", gelus);
            let reason = decline_reason(&gelu);
            assert!(reason.contains("\"Gelu\""), "{op}: {reason}");
            let sideways = node(op, 14).attr("direction", AttrValue::String("sideways".into()));
            let reason = decline_reason(&sideways);
            assert!(reason.contains("\"sideways\""), "{op}: {reason}");
        }
    }

    #[test]
    fn non_positive_hidden_size_and_clip_are_declined() {
        let hidden = bare("GRU", 7).attr("hidden_size", AttrValue::Int(0));
        assert!(decline_reason(&hidden).contains("hidden_size 0"));
        let clip = node("LSTM", 14).attr("clip", AttrValue::Float(0.0));
        assert!(decline_reason(&clip).contains("clip 0"));
        assert!(claimed(&node("RNN", 7).attr("clip", AttrValue::Float(0.5))));
    }
}
