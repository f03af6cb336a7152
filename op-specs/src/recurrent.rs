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
//! - `input_forget = 1` (LSTM) couples the gates: `f = 1 - i`.
//! - `activation_alpha`/`activation_beta` are consumed in order by the activations that take
//!   them; where ORT's defaults differ from ONNX's (Affine's and ThresholdedRelu's alpha,
//!   ScaledTanh's alpha and beta, and every default of RNN, whose CPU kernel takes one alpha and
//!   beta per direction) a node relying on a default is declined.
//!
//! Everything is computed in float32 (float16/bfloat16 inputs are widened once and the outputs
//! rounded once at the end), as ORT's CPU EP does for float16 through inserted Casts.

use mlx_kernels::{ops, Array, Dtype, Stream};

use crate::table::consts::scalar;
use crate::table::lower::float32;
use crate::{onnx_op, AttrValue, Lower, Node, OpError, Result, Verdict};

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

/// An activation function with its parameters resolved.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Activation {
    Relu,
    Tanh,
    Sigmoid,
    Softsign,
    Softplus,
    Affine { alpha: f32, beta: f32 },
    LeakyRelu { alpha: f32 },
    ThresholdedRelu { alpha: f32 },
    ScaledTanh { alpha: f32, beta: f32 },
    HardSigmoid { alpha: f32, beta: f32 },
    Elu { alpha: f32 },
}

/// How an activation uses `alpha` or `beta`.
#[derive(Clone, Copy)]
enum Param {
    Unused,
    /// Used; ORT's CPU EP and ONNX agree on this default.
    Default(f32),
    /// Used; ORT's CPU EP (0) and ONNX disagree on the default, so the node must give it.
    Given,
}

/// ONNX's activation names with how they take alpha and beta.
const ACTIVATIONS: [(&str, Param, Param); 11] = [
    ("Relu", Param::Unused, Param::Unused),
    ("Tanh", Param::Unused, Param::Unused),
    ("Sigmoid", Param::Unused, Param::Unused),
    ("Softsign", Param::Unused, Param::Unused),
    ("Softplus", Param::Unused, Param::Unused),
    ("Affine", Param::Given, Param::Default(0.0)),
    ("LeakyRelu", Param::Default(0.01), Param::Unused),
    ("ThresholdedRelu", Param::Given, Param::Unused),
    ("ScaledTanh", Param::Given, Param::Given),
    ("HardSigmoid", Param::Default(0.2), Param::Default(0.5)),
    ("Elu", Param::Default(1.0), Param::Unused),
];

fn build_activation(name: &str, alpha: f32, beta: f32) -> Activation {
    match name {
        "Relu" => Activation::Relu,
        "Tanh" => Activation::Tanh,
        "Sigmoid" => Activation::Sigmoid,
        "Softsign" => Activation::Softsign,
        "Softplus" => Activation::Softplus,
        "Affine" => Activation::Affine { alpha, beta },
        "LeakyRelu" => Activation::LeakyRelu { alpha },
        "ThresholdedRelu" => Activation::ThresholdedRelu { alpha },
        "ScaledTanh" => Activation::ScaledTanh { alpha, beta },
        "HardSigmoid" => Activation::HardSigmoid { alpha, beta },
        _ => Activation::Elu { alpha },
    }
}

/// The table row of `name`. ORT's RNN kernel matches names exactly (and silently falls back to
/// Tanh otherwise); its GRU and LSTM kernels ignore case.
fn lookup_activation(
    name: &str,
    cell: Cell,
) -> std::result::Result<(&'static str, Param, Param), String> {
    ACTIVATIONS
        .iter()
        .find(|(known, _, _)| {
            if cell == Cell::Rnn {
                *known == name
            } else {
                known.eq_ignore_ascii_case(name)
            }
        })
        .copied()
        .ok_or_else(|| format!("activation {name:?} is not one of ONNX's recurrent activations"))
}

/// The activation functions of every direction (`per_direction` each, directions in order),
/// with alpha/beta resolved as ORT's CPU EP does, or why the node cannot be run exactly.
fn resolve_activations(
    cell: Cell,
    directions: usize,
    names: Option<&[String]>,
    alphas: Option<&[f32]>,
    betas: Option<&[f32]>,
) -> std::result::Result<Vec<Activation>, String> {
    let per_direction = cell.default_activations().len();
    let names: Vec<String> = match names {
        Some(given) => given.to_vec(),
        None => (0..directions)
            .flat_map(|_| cell.default_activations().iter().map(|n| n.to_string()))
            .collect(),
    };
    let names = match (cell, directions, names.len()) {
        // ONNX's RNN default is ["Tanh", "Tanh"] whatever the direction; one direction uses the first.
        (Cell::Rnn, 1, 2) => names[..1].to_vec(),
        (_, _, n) if n == per_direction * directions => names,
        (_, _, n) => {
            return Err(format!(
                "{n} activations for {directions} direction(s): {} expected",
                per_direction * directions
            ))
        }
    };
    let rows = names
        .iter()
        .map(|n| lookup_activation(n, cell))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    if cell == Cell::Rnn {
        rnn_parameters(&rows, alphas, betas)
    } else {
        consumed_parameters(&rows, alphas, betas)
    }
}

/// GRU/LSTM: alphas (betas) are consumed in order by the activations that take one; past the
/// end of the list, the default.
fn consumed_parameters(
    rows: &[(&'static str, Param, Param)],
    alphas: Option<&[f32]>,
    betas: Option<&[f32]>,
) -> std::result::Result<Vec<Activation>, String> {
    let mut alphas = alphas.unwrap_or_default().iter();
    let mut betas = betas.unwrap_or_default().iter();
    let take = |param: Param, list: &mut std::slice::Iter<f32>, name: &str, which: &str| match param
    {
        Param::Unused => Ok(0.0),
        Param::Default(v) => Ok(list.next().copied().unwrap_or(v)),
        Param::Given => list.next().copied().ok_or_else(|| {
            format!(
                "{name} without an {which}: ORT's CPU EP defaults it to 0, \
                     ONNX's operator differently"
            )
        }),
    };
    rows.iter()
        .map(|&(name, a, b)| {
            let alpha = take(a, &mut alphas, name, "activation_alpha")?;
            let beta = take(b, &mut betas, name, "activation_beta")?;
            Ok(build_activation(name, alpha, beta))
        })
        .collect()
}

/// RNN: ORT's CPU kernel reads `activation_alpha[direction]` (default 0) while ONNX consumes
/// the list in order by the activations that take a value, with per-operator defaults. They
/// agree when the k-th taker is direction k's activation and the list has its value.
fn rnn_parameters(
    rows: &[(&'static str, Param, Param)],
    alphas: Option<&[f32]>,
    betas: Option<&[f32]>,
) -> std::result::Result<Vec<Activation>, String> {
    let per_direction =
        |list: Option<&[f32]>, uses: fn(&(&str, Param, Param)) -> bool, which: &str| {
            let mut values = vec![0.0; rows.len()];
            let takers = rows.iter().enumerate().filter(|(_, r)| uses(r));
            // The k-th taker reads list[k] in ONNX and list[d] in ORT: equal when k == d.
            for (k, (d, row)) in takers.enumerate() {
                match list {
                    Some(list) if k == d && d < list.len() => values[d] = list[d],
                    _ => {
                        return Err(format!(
                            "RNN {which} for {}: ORT's CPU EP reads {which}[direction] \
                             (default 0), ONNX the next unused value (default: the operator's)",
                            row.0
                        ))
                    }
                }
            }
            Ok(values)
        };
    let alphas = per_direction(
        alphas,
        |r| !matches!(r.1, Param::Unused),
        "activation_alpha",
    )?;
    let betas = per_direction(betas, |r| !matches!(r.2, Param::Unused), "activation_beta")?;
    Ok(rows
        .iter()
        .zip(alphas.iter().zip(&betas))
        .map(|(&(name, _, _), (&alpha, &beta))| build_activation(name, alpha, beta))
        .collect())
}

/// `[false]`, `[true]` or `[false, true]`: whether each direction runs backwards.
fn directions(direction: &str) -> std::result::Result<Vec<bool>, String> {
    match direction {
        "forward" => Ok(vec![false]),
        "reverse" => Ok(vec![true]),
        "bidirectional" => Ok(vec![false, true]),
        other => Err(format!("direction {other:?} is not an ONNX direction")),
    }
}

// --------------------------------------------------------------------------------------------
// Claims

fn strings(node: &Node, name: &str) -> Option<Vec<String>> {
    match node.attribute(name) {
        Some(AttrValue::Strings(v)) => Some(v),
        _ => None,
    }
}

fn floats(node: &Node, name: &str) -> Option<Vec<f32>> {
    match node.attribute(name) {
        Some(AttrValue::Floats(v)) => Some(v),
        _ => None,
    }
}

fn recurrent_claim(node: &Node, cell: Cell) -> Verdict {
    let direction = match node.attribute("direction") {
        Some(AttrValue::String(d)) => d,
        _ => "forward".to_owned(),
    };
    let dirs = match directions(&direction) {
        Ok(d) => d,
        Err(reason) => return Verdict::decline(reason),
    };
    if let Err(reason) = resolve_activations(
        cell,
        dirs.len(),
        strings(node, "activations").as_deref(),
        floats(node, "activation_alpha").as_deref(),
        floats(node, "activation_beta").as_deref(),
    ) {
        return Verdict::decline(reason);
    }
    match node.attribute("hidden_size") {
        Some(AttrValue::Int(h)) if h > 0 => {}
        other => {
            return Verdict::decline(format!("hidden_size {other:?}: a positive size is needed"))
        }
    }
    if let Some(AttrValue::Float(c)) = node.attribute("clip") {
        // ORT's GRU/LSTM kernels reject it and its RNN kernel treats it as "no clip".
        if c.is_nan() || c <= 0.0 {
            return Verdict::decline(format!("clip {c}: only a positive threshold"));
        }
    }
    if let Some(AttrValue::Int(layout)) = node.attribute("layout") {
        if layout != 0 && layout != 1 {
            return Verdict::decline(format!("layout {layout}: only 0 and 1"));
        }
    }
    Verdict::Claim
}

fn rnn_claim(node: &Node) -> Verdict {
    recurrent_claim(node, Cell::Rnn)
}

fn gru_claim(node: &Node) -> Verdict {
    recurrent_claim(node, Cell::Gru)
}

fn lstm_claim(node: &Node) -> Verdict {
    recurrent_claim(node, Cell::Lstm)
}

// --------------------------------------------------------------------------------------------
// Lowering

/// The node's attributes, resolved.
struct Config {
    cell: Cell,
    hidden: i64,
    /// Per direction: whether it runs backwards.
    reverse: Vec<bool>,
    /// `per_direction` activations per direction, directions in order.
    activations: Vec<Activation>,
    clip: Option<f32>,
    linear_before_reset: bool,
    input_forget: bool,
    batch_major: bool,
}

#[allow(clippy::too_many_arguments)] // the attributes every recurrent op shares
fn config(
    cell: Cell,
    hidden: i64,
    direction: &str,
    activations: Option<Vec<String>>,
    alphas: Option<Vec<f32>>,
    betas: Option<Vec<f32>>,
    clip: Option<f32>,
    layout: i64,
) -> Result<Config> {
    let reverse = directions(direction).map_err(OpError::new)?;
    let activations = resolve_activations(
        cell,
        reverse.len(),
        activations.as_deref(),
        alphas.as_deref(),
        betas.as_deref(),
    )
    .map_err(OpError::new)?;
    Ok(Config {
        cell,
        hidden,
        reverse,
        activations,
        clip,
        linear_before_reset: false,
        input_forget: false,
        batch_major: layout == 1,
    })
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

fn zeros(shape: &[i64], dtype: Dtype, s: &Stream) -> Result<Array> {
    Ok(ops::broadcast_to(&scalar(0.0, dtype, s)?, shape, s)?)
}

fn expect_shape(what: &str, a: &Array, want: &[i64]) -> Result<()> {
    if a.shape() != want {
        return Err(OpError::new(format!(
            "{what} has shape {:?}, expected {want:?}",
            a.shape()
        )));
    }
    Ok(())
}

/// `a[index]` along the first axis, that axis dropped.
fn row(a: &Array, index: i64, s: &Stream) -> Result<Array> {
    let dims = a.shape();
    let mut start = vec![0i32; dims.len()];
    let mut stop: Vec<i32> = dims.iter().map(|&d| d as i32).collect();
    start[0] = index as i32;
    stop[0] = index as i32 + 1;
    let step = vec![1i32; dims.len()];
    let part = ops::slice(a, &start, &stop, &step, s)?;
    Ok(ops::reshape(&part, &dims[1..], s)?)
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

fn clip(x: Array, bound: Option<f32>, s: &Stream) -> Result<Array> {
    match bound {
        None => Ok(x),
        Some(c) => {
            let low = ops::maximum(&x, &scalar(-f64::from(c), Dtype::F32, s)?, s)?;
            Ok(ops::minimum(&low, &scalar(c.into(), Dtype::F32, s)?, s)?)
        }
    }
}

/// One activation, in float32, as ORT's CPU kernels define it (the shared activation bodies;
/// Affine and ScaledTanh exist only here).
fn activate(act: Activation, x: &Array, s: &Stream) -> Result<Array> {
    use crate::activation as a;
    let k = |v: f32| scalar(v.into(), Dtype::F32, s);
    match act {
        Activation::Relu => a::relu_of(x, s),
        Activation::Tanh => Ok(ops::tanh(x, s)?),
        Activation::Sigmoid => Ok(ops::sigmoid(x, s)?),
        Activation::Softsign => a::softsign_of(x, s),
        Activation::Softplus => a::softplus_of(x, s),
        Activation::Affine { alpha, beta } => {
            Ok(ops::add(&ops::multiply(x, &k(alpha)?, s)?, &k(beta)?, s)?)
        }
        Activation::LeakyRelu { alpha } => a::leaky_relu_of(x, alpha.into(), s),
        Activation::ThresholdedRelu { alpha } => a::thresholded_relu_of(x, alpha.into(), s),
        Activation::ScaledTanh { alpha, beta } => Ok(ops::multiply(
            &ops::tanh(&ops::multiply(x, &k(beta)?, s)?, s)?,
            &k(alpha)?,
            s,
        )?),
        Activation::HardSigmoid { alpha, beta } => {
            a::hard_sigmoid_of(x, alpha.into(), beta.into(), s)
        }
        Activation::Elu { alpha } => a::elu_of(x, alpha.into(), s),
    }
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

/// The biases folded into the projection: `Wb + Rb`, except the GRU hidden gate's `Rb` under
/// `linear_before_reset` (it is multiplied by the reset gate), returned separately.
fn fold_bias(cfg: &Config, b: &Array, s: &Stream) -> Result<(Array, Option<Array>)> {
    let width = cfg.cell.gates() * cfg.hidden;
    let wb = columns(b, 0, width, s)?;
    let rb = columns(b, width, 2 * width, s)?;
    if cfg.cell == Cell::Gru && cfg.linear_before_reset {
        let h = cfg.hidden;
        let zr = ops::add(&columns(&wb, 0, 2 * h, s)?, &columns(&rb, 0, 2 * h, s)?, s)?;
        let folded = ops::concatenate(&[zr, columns(&wb, 2 * h, 3 * h, s)?], 0, s)?;
        return Ok((folded, Some(columns(&rb, 2 * h, 3 * h, s)?)));
    }
    Ok((ops::add(&wb, &rb, s)?, None))
}

fn prepare_direction(
    cfg: &Config,
    d: i64,
    x2d: &Array,
    steps: i64,
    batch: i64,
    inputs: &Inputs,
    s: &Stream,
) -> Result<Direction> {
    let width = cfg.cell.gates() * cfg.hidden;
    let w_t = ops::transpose(&float32(&row(&inputs.w, d, s)?, s)?, &[1, 0], s)?;
    let input_size = w_t.shape()[0];
    // One matmul for every step; a sum over an empty input axis is zeros, without a kernel over
    // zero-size operands.
    let mut projected = if input_size == 0 {
        zeros(&[steps * batch, width], Dtype::F32, s)?
    } else {
        ops::matmul(x2d, &w_t, s)?
    };
    let mut recurrent_bias_h = None;
    if let Some(b) = &inputs.b {
        let (folded, rb_h) = fold_bias(cfg, &float32(&row(b, d, s)?, s)?, s)?;
        projected = ops::add(&projected, &folded, s)?;
        recurrent_bias_h = rb_h;
    }
    let projected = ops::reshape(&projected, &[steps, batch, width], s)?;
    let cuts: Vec<i32> = (1..steps as i32).collect();
    let projected = ops::split_at(&projected, &cuts, 0, s)?
        .iter()
        .map(|p| Ok(ops::reshape(p, &[batch, width], s)?))
        .collect::<Result<Vec<_>>>()?;
    let recurrent_t = ops::transpose(&float32(&row(&inputs.r, d, s)?, s)?, &[1, 0], s)?;
    let recurrent_zr_h_t = match cfg.cell {
        Cell::Gru => Some((
            columns(&recurrent_t, 0, 2 * cfg.hidden, s)?,
            columns(&recurrent_t, 2 * cfg.hidden, 3 * cfg.hidden, s)?,
        )),
        _ => None,
    };
    let peepholes = match &inputs.p {
        Some(p) => {
            let p = float32(&row(p, d, s)?, s)?;
            let parts = gates(&p, 3, cfg.hidden, s)?;
            let [i, o, f]: [Array; 3] = parts
                .try_into()
                .map_err(|_| OpError::new("P does not split into three gates"))?;
            Some([i, o, f])
        }
        None => None,
    };
    let state = |given: Option<&Array>| -> Result<Array> {
        match given {
            Some(a) => float32(&row(a, d, s)?, s),
            None => zeros(&[batch, cfg.hidden], Dtype::F32, s),
        }
    };
    Ok(Direction {
        projected,
        recurrent_t,
        recurrent_zr_h_t,
        recurrent_bias_h,
        peepholes,
        h0: state(inputs.h0.as_ref())?,
        c0: state(inputs.c0.as_ref())?,
    })
}

/// One step of the cell: the new hidden state, and the new cell state (LSTM; else `c`).
fn step(
    cfg: &Config,
    acts: &[Activation],
    dir: &Direction,
    projected: &Array,
    h: &Array,
    c: &Array,
    s: &Stream,
) -> Result<(Array, Array)> {
    let hidden = cfg.hidden;
    let bound = cfg.clip;
    match cfg.cell {
        Cell::Rnn => {
            let pre = ops::addmm(projected, h, &dir.recurrent_t, 1.0, 1.0, s)?;
            Ok((activate(acts[0], &clip(pre, bound, s)?, s)?, c.clone()))
        }
        Cell::Gru => gru_step(cfg, acts, dir, projected, h, s).map(|h| (h, c.clone())),
        Cell::Lstm => {
            let all = ops::addmm(projected, h, &dir.recurrent_t, 1.0, 1.0, s)?;
            let [i, o, f, g]: [Array; 4] = gates(&all, 4, hidden, s)?
                .try_into()
                .map_err(|_| OpError::new("LSTM gates do not split in four"))?;
            let peep = |gate: Array, k: usize, state: &Array| -> Result<Array> {
                match &dir.peepholes {
                    Some(p) => Ok(ops::add(&gate, &ops::multiply(&p[k], state, s)?, s)?),
                    None => Ok(gate),
                }
            };
            let (f_act, g_act, h_act) = (acts[0], acts[1], acts[2]);
            let i = activate(f_act, &clip(peep(i, 0, c)?, bound, s)?, s)?;
            let f = if cfg.input_forget {
                ops::subtract(&scalar(1.0, Dtype::F32, s)?, &i, s)?
            } else {
                activate(f_act, &clip(peep(f, 2, c)?, bound, s)?, s)?
            };
            let g = activate(g_act, &clip(g, bound, s)?, s)?;
            let c_new = ops::add(&ops::multiply(&f, c, s)?, &ops::multiply(&i, &g, s)?, s)?;
            let o = activate(f_act, &clip(peep(o, 1, &c_new)?, bound, s)?, s)?;
            let h_new = ops::multiply(&o, &activate(h_act, &c_new, s)?, s)?;
            Ok((h_new, c_new))
        }
    }
}

/// `z`, `r` from `X·W + H·R`; the hidden gate from `r` applied before (default) or after
/// (`linear_before_reset`) the recurrent product; `H = (1 - z) h + z H`.
fn gru_step(
    cfg: &Config,
    acts: &[Activation],
    dir: &Direction,
    projected: &Array,
    h: &Array,
    s: &Stream,
) -> Result<Array> {
    let hidden = cfg.hidden;
    let bound = cfg.clip;
    let (r_zr, r_h) = dir
        .recurrent_zr_h_t
        .as_ref()
        .ok_or_else(|| OpError::new("GRU weights were not split"))?;
    let zr = ops::addmm(&columns(projected, 0, 2 * hidden, s)?, h, r_zr, 1.0, 1.0, s)?;
    let [z, r]: [Array; 2] = gates(&zr, 2, hidden, s)?
        .try_into()
        .map_err(|_| OpError::new("GRU gates do not split in two"))?;
    let z = activate(acts[0], &clip(z, bound, s)?, s)?;
    let r = activate(acts[0], &clip(r, bound, s)?, s)?;
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
    let candidate = activate(acts[1], &clip(pre, bound, s)?, s)?;
    let keep = ops::multiply(&z, h, s)?;
    let one_minus_z = ops::subtract(&scalar(1.0, Dtype::F32, s)?, &z, s)?;
    Ok(ops::add(
        &ops::multiply(&one_minus_z, &candidate, s)?,
        &keep,
        s,
    )?)
}

/// Runs one direction over every step: the per-step outputs (in time order) and the final
/// hidden and cell states.
fn run_direction(
    cfg: &Config,
    acts: &[Activation],
    dir: &Direction,
    reverse: bool,
    lens: Option<&Array>,
    s: &Stream,
) -> Result<(Vec<Array>, Array, Array)> {
    let steps = dir.projected.len();
    let zero = scalar(0.0, Dtype::F32, s)?;
    let (mut h, mut c) = (dir.h0.clone(), dir.c0.clone());
    let mut outputs: Vec<Option<Array>> = vec![None; steps];
    let order: Vec<usize> = if reverse {
        (0..steps).rev().collect()
    } else {
        (0..steps).collect()
    };
    for t in order {
        let (h_new, c_new) = step(cfg, acts, dir, &dir.projected[t], &h, &c, s)?;
        match lens {
            // Past its length an entry keeps its state (so a reverse pass starts at its own
            // last step) and outputs zeros.
            Some(lens) => {
                let valid = ops::greater(lens, &scalar(t as f64, Dtype::I32, s)?, s)?;
                outputs[t] = Some(ops::where_(&valid, &h_new, &zero, s)?);
                h = ops::where_(&valid, &h_new, &h, s)?;
                if cfg.cell == Cell::Lstm {
                    c = ops::where_(&valid, &c_new, &c, s)?;
                }
            }
            None => {
                outputs[t] = Some(h_new.clone());
                h = h_new;
                c = c_new;
            }
        }
    }
    let outputs = outputs
        .into_iter()
        .map(|o| o.ok_or_else(|| OpError::new("a time step was not computed")))
        .collect::<Result<Vec<_>>>()?;
    Ok((outputs, h, c))
}

/// The recurrent layer: `[Y, Y_h, Y_c]` (absent outputs get a placeholder the EP drops).
fn recurrent(cx: &mut Lower, cfg: &Config, mut inputs: Inputs) -> Result<Vec<Array>> {
    let s = cx.stream();
    let out_dtype = inputs.x.dtype();
    if inputs.x.ndim() != 3 {
        return Err(OpError::new(format!(
            "X must have rank 3, not {}",
            inputs.x.ndim()
        )));
    }
    if cfg.batch_major {
        // [batch, seq, input] to the sequence-major form the steps slice.
        inputs.x = ops::transpose(&inputs.x, &[1, 0, 2], s)?;
        for state in [&mut inputs.h0, &mut inputs.c0].into_iter().flatten() {
            *state = ops::transpose(state, &[1, 0, 2], s)?;
        }
    }
    let dims = inputs.x.shape();
    let (steps, batch, input_size) = (dims[0], dims[1], dims[2]);
    let (dirs, hidden, width) = (
        cfg.reverse.len() as i64,
        cfg.hidden,
        cfg.cell.gates() * cfg.hidden,
    );
    check_shapes(&inputs, dirs, batch, input_size, hidden, width)?;
    if let Some(lens) = &inputs.lens {
        check_lengths(cx, lens, steps)?;
    }
    let want = |i: usize| cx.node().output_present(i);
    if steps == 0 || batch == 0 {
        // No step runs: empty Y, zero states (ORT's CPU EP gives zeros for a zero length).
        let y = zeros(&[steps, dirs, batch, hidden], out_dtype, s)?;
        let state = zeros(&[dirs, batch, hidden], out_dtype, s)?;
        return finish(cfg, y, state.clone(), state, s);
    }
    let x2d = ops::reshape(&float32(&inputs.x, s)?, &[steps * batch, input_size], s)?;
    let lens = match &inputs.lens {
        Some(l) => Some(ops::reshape(
            &ops::astype(l, Dtype::I32, s)?,
            &[batch, 1],
            s,
        )?),
        None => None,
    };
    let per_direction = cfg.cell.default_activations().len();
    let (mut ys, mut hs, mut cs) = (Vec::new(), Vec::new(), Vec::new());
    for (d, &reverse) in cfg.reverse.iter().enumerate() {
        let dir = prepare_direction(cfg, d as i64, &x2d, steps, batch, &inputs, s)?;
        let acts = &cfg.activations[d * per_direction..(d + 1) * per_direction];
        let (outputs, h, c) = run_direction(cfg, acts, &dir, reverse, lens.as_ref(), s)?;
        if want(0) {
            ys.push(ops::stack(&outputs, 0, s)?);
        }
        hs.push(h);
        cs.push(c);
    }
    let mut y_h = ops::stack(&hs, 0, s)?;
    let mut y_c = ops::stack(&cs, 0, s)?;
    if let Some(lens) = &lens {
        // A zero-length entry ends with zero states, not its initial ones.
        let started = ops::greater(lens, &scalar(0.0, Dtype::I32, s)?, s)?;
        let zero = scalar(0.0, Dtype::F32, s)?;
        y_h = ops::where_(&started, &y_h, &zero, s)?;
        y_c = ops::where_(&started, &y_c, &zero, s)?;
    }
    let narrow = |a: &Array| -> Result<Array> { Ok(ops::astype(a, out_dtype, s)?) };
    let y = if want(0) {
        narrow(&ops::stack(&ys, 1, s)?)?
    } else {
        y_h.clone() // the EP drops an absent output
    };
    finish(cfg, y, narrow(&y_h)?, narrow(&y_c)?, s)
}

/// `[Y, Y_h, Y_c]` in the node's layout.
fn finish(cfg: &Config, y: Array, y_h: Array, y_c: Array, s: &Stream) -> Result<Vec<Array>> {
    if !cfg.batch_major {
        return Ok(vec![y, y_h, y_c]);
    }
    let states = |a: &Array| -> Result<Array> { Ok(ops::transpose(a, &[1, 0, 2], s)?) };
    let y = if y.ndim() == 4 {
        ops::transpose(&y, &[2, 0, 1, 3], s)?
    } else {
        y
    };
    Ok(vec![y, states(&y_h)?, states(&y_c)?])
}

/// ORT's CPU EP fails the run on a length outside `[0, seq_length]`; the steps themselves
/// stay safe for any length (each only compares against the step index).
fn check_lengths(cx: &mut Lower, lens: &Array, steps: i64) -> Result<()> {
    cx.require_in_range(
        lens,
        0,
        steps,
        format!("invalid sequence_lens: every length must lie in [0, {steps}] (seq_length)"),
    )
}

fn check_shapes(
    inputs: &Inputs,
    dirs: i64,
    batch: i64,
    input_size: i64,
    hidden: i64,
    width: i64,
) -> Result<()> {
    expect_shape("W", &inputs.w, &[dirs, width, input_size])?;
    expect_shape("R", &inputs.r, &[dirs, width, hidden])?;
    if let Some(b) = &inputs.b {
        expect_shape("B", b, &[dirs, 2 * width])?;
    }
    if let Some(lens) = &inputs.lens {
        expect_shape("sequence_lens", lens, &[batch])?;
    }
    for (name, state) in [("initial_h", &inputs.h0), ("initial_c", &inputs.c0)] {
        if let Some(state) = state {
            expect_shape(name, state, &[dirs, batch, hidden])?;
        }
    }
    if let Some(p) = &inputs.p {
        expect_shape("P", p, &[dirs, 3 * hidden])?;
    }
    Ok(())
}

// --------------------------------------------------------------------------------------------
// Entries: opsets 7-13 have no `layout`; 14 added it (22 only widened the types).

/// Elman RNN: `H = f(clip(X·Wᵀ + H·Rᵀ + Wb + Rb))` per step, forward, reverse or both.
#[allow(clippy::too_many_arguments)] // six inputs and six attributes, as ONNX has them
#[onnx_op(
    op = "RNN", opset = 7..=13, types(T = FLOAT, T1 = I32),
    inputs(X: T, W: T, R: T, B: T, sequence_lens: T1, initial_h: T), outputs(Y?: T, Y_h?: T),
    shape = ShapeKeyed, claim = rnn_claim, declines = "activation names other than ONNX's (case-sensitive); alpha/beta that ORT's CPU EP (one per direction, default 0) and ONNX (consumed in order, operator defaults) read differently; a non-positive clip or hidden_size; an unknown direction"
)]
fn rnn_7(
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
) -> Result<Vec<Array>> {
    rnn(
        cx,
        [x, w, r],
        [b, sequence_lens, initial_h],
        (activation_alpha, activation_beta, activations),
        clip,
        direction,
        hidden_size,
        0,
    )
}

/// Elman RNN: `H = f(clip(X·Wᵀ + H·Rᵀ + Wb + Rb))` per step, forward, reverse or both;
/// `layout = 1` puts the batch first.
#[allow(clippy::too_many_arguments)] // six inputs and seven attributes, as ONNX has them
#[onnx_op(
    op = "RNN", since = 14, types(T = FLOAT, T1 = I32),
    inputs(X: T, W: T, R: T, B: T, sequence_lens: T1, initial_h: T), outputs(Y?: T, Y_h?: T),
    shape = ShapeKeyed, claim = rnn_claim, declines = "activation names other than ONNX's (case-sensitive); alpha/beta that ORT's CPU EP (one per direction, default 0) and ONNX (consumed in order, operator defaults) read differently; a non-positive clip or hidden_size; an unknown direction"
)]
fn rnn_14(
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
    #[attr(default = 0)] layout: i64,
) -> Result<Vec<Array>> {
    rnn(
        cx,
        [x, w, r],
        [b, sequence_lens, initial_h],
        (activation_alpha, activation_beta, activations),
        clip,
        direction,
        hidden_size,
        layout,
    )
}

type ActivationAttrs = (Option<Vec<f32>>, Option<Vec<f32>>, Option<Vec<String>>);

#[allow(clippy::too_many_arguments)] // the shared attributes, passed through
fn rnn(
    cx: &mut Lower,
    [x, w, r]: [Array; 3],
    [b, lens, h0]: [Option<Array>; 3],
    (alphas, betas, names): ActivationAttrs,
    clip: Option<f32>,
    direction: String,
    hidden: i64,
    layout: i64,
) -> Result<Vec<Array>> {
    let cfg = config(
        Cell::Rnn,
        hidden,
        &direction,
        names,
        alphas,
        betas,
        clip,
        layout,
    )?;
    let inputs = Inputs {
        x,
        w,
        r,
        b,
        lens,
        h0,
        c0: None,
        p: None,
    };
    let mut out = recurrent(cx, &cfg, inputs)?;
    out.truncate(2);
    Ok(out)
}

/// Gated recurrent unit: `z, r = f(X·W + H·R + b)`, `h = g(X·Wh + (r ⊙ H)·Rh + b)` (or
/// `r ⊙ (H·Rh + Rbh)` with `linear_before_reset`), `H = (1 - z) ⊙ h + z ⊙ H`.
#[allow(clippy::too_many_arguments)] // six inputs and seven attributes, as ONNX has them
#[onnx_op(
    op = "GRU", opset = 7..=13, types(T = FLOAT, T1 = I32),
    inputs(X: T, W: T, R: T, B: T, sequence_lens: T1, initial_h: T), outputs(Y?: T, Y_h?: T),
    shape = ShapeKeyed, claim = gru_claim, declines = "activation names other than ONNX's; Affine/ThresholdedRelu without activation_alpha, ScaledTanh without activation_alpha/beta (ORT's CPU EP and ONNX default them differently); a non-positive clip or hidden_size; an unknown direction"
)]
fn gru_7(
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
    #[attr(default = 0)] linear_before_reset: i64,
) -> Result<Vec<Array>> {
    gru(
        cx,
        [x, w, r],
        [b, sequence_lens, initial_h],
        (activation_alpha, activation_beta, activations),
        (clip, direction, hidden_size),
        linear_before_reset,
        0,
    )
}

/// Gated recurrent unit: `z, r = f(X·W + H·R + b)`, `h = g(X·Wh + (r ⊙ H)·Rh + b)` (or
/// `r ⊙ (H·Rh + Rbh)` with `linear_before_reset`), `H = (1 - z) ⊙ h + z ⊙ H`; `layout = 1`
/// puts the batch first.
#[allow(clippy::too_many_arguments)] // six inputs and eight attributes, as ONNX has them
#[onnx_op(
    op = "GRU", since = 14, types(T = FLOAT, T1 = I32),
    inputs(X: T, W: T, R: T, B: T, sequence_lens: T1, initial_h: T), outputs(Y?: T, Y_h?: T),
    shape = ShapeKeyed, claim = gru_claim, declines = "activation names other than ONNX's; Affine/ThresholdedRelu without activation_alpha, ScaledTanh without activation_alpha/beta (ORT's CPU EP and ONNX default them differently); a non-positive clip or hidden_size; an unknown direction"
)]
fn gru_14(
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
    #[attr(default = 0)] layout: i64,
    #[attr(default = 0)] linear_before_reset: i64,
) -> Result<Vec<Array>> {
    gru(
        cx,
        [x, w, r],
        [b, sequence_lens, initial_h],
        (activation_alpha, activation_beta, activations),
        (clip, direction, hidden_size),
        linear_before_reset,
        layout,
    )
}

fn gru(
    cx: &mut Lower,
    [x, w, r]: [Array; 3],
    [b, lens, h0]: [Option<Array>; 3],
    (alphas, betas, names): ActivationAttrs,
    (clip, direction, hidden): (Option<f32>, String, i64),
    linear_before_reset: i64,
    layout: i64,
) -> Result<Vec<Array>> {
    let mut cfg = config(
        Cell::Gru,
        hidden,
        &direction,
        names,
        alphas,
        betas,
        clip,
        layout,
    )?;
    cfg.linear_before_reset = linear_before_reset != 0;
    let inputs = Inputs {
        x,
        w,
        r,
        b,
        lens,
        h0,
        c0: None,
        p: None,
    };
    let mut out = recurrent(cx, &cfg, inputs)?;
    out.truncate(2);
    Ok(out)
}

/// Long short-term memory: gates `i, o, f = f(X·W + H·R + P ⊙ C + b)`, `c = g(...)`,
/// `C = f ⊙ C + i ⊙ c`, `H = o ⊙ h(C)`; optional peepholes `P`, `input_forget` (`f = 1 - i`).
#[allow(clippy::too_many_arguments)] // eight inputs and seven attributes, as ONNX has them
#[onnx_op(
    op = "LSTM", opset = 7..=13, types(T = FLOAT, T1 = I32),
    inputs(X: T, W: T, R: T, B: T, sequence_lens: T1, initial_h: T, initial_c: T, P: T),
    outputs(Y?: T, Y_h?: T, Y_c?: T),
    shape = ShapeKeyed, claim = lstm_claim, declines = "activation names other than ONNX's; Affine/ThresholdedRelu without activation_alpha, ScaledTanh without activation_alpha/beta (ORT's CPU EP and ONNX default them differently); a non-positive clip or hidden_size; an unknown direction"
)]
fn lstm_7(
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
) -> Result<Vec<Array>> {
    lstm(
        cx,
        [x, w, r],
        [b, sequence_lens, initial_h, initial_c, p],
        (activation_alpha, activation_beta, activations),
        (clip, direction, hidden_size),
        input_forget,
        0,
    )
}

/// Long short-term memory: gates `i, o, f = f(X·W + H·R + P ⊙ C + b)`, `c = g(...)`,
/// `C = f ⊙ C + i ⊙ c`, `H = o ⊙ h(C)`; optional peepholes `P`, `input_forget` (`f = 1 - i`);
/// `layout = 1` puts the batch first.
#[allow(clippy::too_many_arguments)] // eight inputs and eight attributes, as ONNX has them
#[onnx_op(
    op = "LSTM", since = 14, types(T = FLOAT, T1 = I32),
    inputs(X: T, W: T, R: T, B: T, sequence_lens: T1, initial_h: T, initial_c: T, P: T),
    outputs(Y?: T, Y_h?: T, Y_c?: T),
    shape = ShapeKeyed, claim = lstm_claim, declines = "activation names other than ONNX's; Affine/ThresholdedRelu without activation_alpha, ScaledTanh without activation_alpha/beta (ORT's CPU EP and ONNX default them differently); a non-positive clip or hidden_size; an unknown direction"
)]
fn lstm_14(
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
    #[attr(default = 0)] layout: i64,
) -> Result<Vec<Array>> {
    lstm(
        cx,
        [x, w, r],
        [b, sequence_lens, initial_h, initial_c, p],
        (activation_alpha, activation_beta, activations),
        (clip, direction, hidden_size),
        input_forget,
        layout,
    )
}

fn lstm(
    cx: &mut Lower,
    [x, w, r]: [Array; 3],
    [b, lens, h0, c0, p]: [Option<Array>; 5],
    (alphas, betas, names): ActivationAttrs,
    (clip, direction, hidden): (Option<f32>, String, i64),
    input_forget: i64,
    layout: i64,
) -> Result<Vec<Array>> {
    let mut cfg = config(
        Cell::Lstm,
        hidden,
        &direction,
        names,
        alphas,
        betas,
        clip,
        layout,
    )?;
    cfg.input_forget = input_forget != 0;
    let inputs = Inputs {
        x,
        w,
        r,
        b,
        lens,
        h0,
        c0,
        p,
    };
    recurrent(cx, &cfg, inputs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn defaults_per_cell_and_direction() {
        let lstm = resolve_activations(Cell::Lstm, 2, None, None, None).unwrap();
        assert_eq!(lstm.len(), 6);
        assert_eq!(lstm[3], Activation::Sigmoid);
        assert_eq!(lstm[5], Activation::Tanh);
        let rnn = resolve_activations(Cell::Rnn, 1, Some(&names(&["Tanh", "Tanh"])), None, None);
        assert_eq!(rnn.unwrap(), vec![Activation::Tanh]);
    }

    #[test]
    fn alphas_are_consumed_by_the_activations_that_take_them() {
        let acts = resolve_activations(
            Cell::Gru,
            2,
            Some(&names(&["LeakyRelu", "Tanh", "HardSigmoid", "Elu"])),
            Some(&[0.5, 0.25]),
            None,
        )
        .unwrap();
        assert_eq!(acts[0], Activation::LeakyRelu { alpha: 0.5 });
        assert_eq!(
            acts[2],
            Activation::HardSigmoid {
                alpha: 0.25,
                beta: 0.5
            }
        );
        // The list ran out: Elu's default, on which ORT and ONNX agree.
        assert_eq!(acts[3], Activation::Elu { alpha: 1.0 });
    }

    #[test]
    fn disputed_defaults_decline() {
        let affine = resolve_activations(
            Cell::Lstm,
            1,
            Some(&names(&["Affine", "Tanh", "Tanh"])),
            None,
            None,
        );
        assert!(affine.unwrap_err().contains("Affine"));
        let rnn = resolve_activations(Cell::Rnn, 1, Some(&names(&["LeakyRelu"])), None, None);
        assert!(rnn
            .unwrap_err()
            .contains("RNN activation_alpha for LeakyRelu"));
        let mixed = resolve_activations(
            Cell::Rnn,
            2,
            Some(&names(&["Tanh", "LeakyRelu"])),
            Some(&[0.1, 0.2]),
            None,
        );
        assert!(mixed.is_err(), "ORT would give LeakyRelu 0.2, ONNX 0.1");
        let both = resolve_activations(
            Cell::Rnn,
            2,
            Some(&names(&["LeakyRelu", "Elu"])),
            Some(&[0.1, 0.2]),
            None,
        );
        assert_eq!(both.unwrap()[1], Activation::Elu { alpha: 0.2 });
        // Only the first direction's activation takes a beta: both readings give it beta[0].
        let first = resolve_activations(
            Cell::Rnn,
            2,
            Some(&names(&["Affine", "LeakyRelu"])),
            Some(&[0.5, 0.2]),
            Some(&[0.25]),
        );
        assert_eq!(
            first.unwrap()[0],
            Activation::Affine {
                alpha: 0.5,
                beta: 0.25
            }
        );
    }

    #[test]
    fn names_are_exact_for_rnn_and_caseless_for_gru_lstm() {
        assert!(resolve_activations(Cell::Rnn, 1, Some(&names(&["tanh"])), None, None).is_err());
        let lstm = resolve_activations(
            Cell::Lstm,
            1,
            Some(&names(&["sigmoid", "TANH", "relu"])),
            None,
            None,
        );
        assert_eq!(lstm.unwrap()[2], Activation::Relu);
        assert!(
            resolve_activations(Cell::Gru, 1, Some(&names(&["Gelu", "Tanh"])), None, None).is_err()
        );
        assert!(resolve_activations(Cell::Gru, 1, Some(&names(&["Sigmoid"])), None, None).is_err());
    }
}
