//! The recurrent activation functions, and how `activation_alpha`/`activation_beta` reach them
//! as ORT's CPU EP reads them (or why a node cannot be run exactly).

use mlx_kernels::{ops, Array, Dtype, Stream};

use super::Cell;
use crate::table::consts::scalar;
use crate::Result;
use Param::{Disputed, Shared, Unused};

/// An activation function with its parameters resolved.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Activation {
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

/// What an activation's alpha (or beta) is when the node's list has no value left for it.
#[derive(Clone, Copy, Debug)]
enum Param {
    /// The activation takes no such parameter.
    Unused,
    /// ONNX's default, which ORT's CPU EP shares.
    Shared(f32),
    /// ORT's CPU EP takes 0 and ONNX's operator its own default: a node leaving it out is
    /// declined.
    Disputed,
}

/// One of ONNX's recurrent activation functions.
struct Kind {
    name: &'static str,
    alpha: Param,
    beta: Param,
    /// The function with its alpha and beta (0 where unused).
    make: fn(f32, f32) -> Activation,
}

#[rustfmt::skip] // one row per activation reads as a table
const KINDS: [Kind; 11] = [
    Kind { name: "Relu", alpha: Unused, beta: Unused, make: |_, _| Activation::Relu },
    Kind { name: "Tanh", alpha: Unused, beta: Unused, make: |_, _| Activation::Tanh },
    Kind { name: "Sigmoid", alpha: Unused, beta: Unused, make: |_, _| Activation::Sigmoid },
    Kind { name: "Softsign", alpha: Unused, beta: Unused, make: |_, _| Activation::Softsign },
    Kind { name: "Softplus", alpha: Unused, beta: Unused, make: |_, _| Activation::Softplus },
    Kind { name: "Affine", alpha: Disputed, beta: Shared(0.0),
           make: |alpha, beta| Activation::Affine { alpha, beta } },
    Kind { name: "LeakyRelu", alpha: Shared(0.01), beta: Unused,
           make: |alpha, _| Activation::LeakyRelu { alpha } },
    Kind { name: "ThresholdedRelu", alpha: Disputed, beta: Unused,
           make: |alpha, _| Activation::ThresholdedRelu { alpha } },
    Kind { name: "ScaledTanh", alpha: Disputed, beta: Disputed,
           make: |alpha, beta| Activation::ScaledTanh { alpha, beta } },
    Kind { name: "HardSigmoid", alpha: Shared(0.2), beta: Shared(0.5),
           make: |alpha, beta| Activation::HardSigmoid { alpha, beta } },
    Kind { name: "Elu", alpha: Shared(1.0), beta: Unused, make: |alpha, _| Activation::Elu { alpha } },
];

/// The kind named `name`. ORT's RNN kernel matches names exactly (and silently falls back to
/// Tanh otherwise); its GRU and LSTM kernels ignore case.
fn lookup(name: &str, cell: Cell) -> std::result::Result<&'static Kind, String> {
    KINDS
        .iter()
        .find(|kind| {
            if cell == Cell::Rnn {
                kind.name == name
            } else {
                kind.name.eq_ignore_ascii_case(name)
            }
        })
        .ok_or_else(|| {
            let case = if cell == Cell::Rnn {
                " (RNN matches names case-sensitively)"
            } else {
                ""
            };
            format!("activation {name:?} is not one of ONNX's recurrent activations{case}")
        })
}

/// The activation functions of every direction (`per_direction` each, directions in order),
/// with alpha/beta resolved as ORT's CPU EP does, or why the node cannot be run exactly.
pub(super) fn resolve_activations(
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
    let kinds = names
        .iter()
        .map(|n| lookup(n, cell))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    if cell == Cell::Rnn {
        rnn_parameters(&kinds, alphas, betas)
    } else {
        consumed_parameters(&kinds, alphas, betas)
    }
}

/// GRU/LSTM: alphas (betas) are consumed in order by the activations that take one; past the
/// end of the list, the default.
fn consumed_parameters(
    kinds: &[&Kind],
    alphas: Option<&[f32]>,
    betas: Option<&[f32]>,
) -> std::result::Result<Vec<Activation>, String> {
    let mut alphas = alphas.unwrap_or_default().iter();
    let mut betas = betas.unwrap_or_default().iter();
    let take = |param: Param, list: &mut std::slice::Iter<f32>, name: &str, which: &str| match param
    {
        Unused => Ok(0.0),
        Shared(v) => Ok(list.next().copied().unwrap_or(v)),
        Disputed => list.next().copied().ok_or_else(|| {
            format!(
                "{name} without an {which}: ORT's CPU EP defaults it to 0, ONNX's operator \
                 differently; give it in the node"
            )
        }),
    };
    kinds
        .iter()
        .map(|kind| {
            let alpha = take(kind.alpha, &mut alphas, kind.name, "activation_alpha")?;
            let beta = take(kind.beta, &mut betas, kind.name, "activation_beta")?;
            Ok((kind.make)(alpha, beta))
        })
        .collect()
}

/// RNN: ORT's CPU kernel reads `activation_alpha[direction]` (default 0) while ONNX consumes
/// the list in order by the activations that take a value, with per-operator defaults. They
/// agree when the k-th taker is direction k's activation and the list has its value.
fn rnn_parameters(
    kinds: &[&Kind],
    alphas: Option<&[f32]>,
    betas: Option<&[f32]>,
) -> std::result::Result<Vec<Activation>, String> {
    let per_direction = |list: Option<&[f32]>, param: fn(&Kind) -> Param, which: &str| {
        let mut values = vec![0.0; kinds.len()];
        let takers = kinds
            .iter()
            .enumerate()
            .filter(|(_, kind)| !matches!(param(kind), Unused));
        // The k-th taker reads list[k] in ONNX and list[d] in ORT: equal when k == d.
        for (k, (d, kind)) in takers.enumerate() {
            match list {
                Some(list) if k == d && d < list.len() => values[d] = list[d],
                _ => {
                    return Err(format!(
                        "RNN {which} for {}: ORT's CPU EP reads {which}[direction] \
                         (default 0), ONNX the next unused value (default: the operator's)",
                        kind.name
                    ))
                }
            }
        }
        Ok(values)
    };
    let alphas = per_direction(alphas, |kind| kind.alpha, "activation_alpha")?;
    let betas = per_direction(betas, |kind| kind.beta, "activation_beta")?;
    Ok(kinds
        .iter()
        .zip(alphas.iter().zip(&betas))
        .map(|(kind, (&alpha, &beta))| (kind.make)(alpha, beta))
        .collect())
}

/// One activation of a gate, in float32, as ORT's CPU recurrent kernels compute it. Most share
/// the standalone ops' bodies; two differ from them at the edges, and the recurrent kernels are
/// the oracle here: HardSigmoid maps NaN to 0 (a comparison that NaN fails picks 0), and Softplus
/// is the plain `log(1 + e^x)`, which is infinite from x ≈ 89 on. Affine and ScaledTanh exist
/// only here. [`activate_state`] is the variant for a state.
pub(super) fn activate(act: Activation, x: &Array, s: &Stream) -> Result<Array> {
    use crate::activation as a;
    let k = |v: f32| scalar(v.into(), Dtype::F32, s);
    match act {
        Activation::Relu => a::relu_of(x, s),
        Activation::Tanh => Ok(ops::tanh(x, s)?),
        Activation::Sigmoid => Ok(ops::sigmoid(x, s)?),
        Activation::Softsign => a::softsign_of(x, s),
        Activation::Softplus => Ok(ops::log(&ops::add(&ops::exp(x, s)?, &k(1.0)?, s)?, s)?),
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
            let linear = ops::add(&ops::multiply(x, &k(alpha)?, s)?, &k(beta)?, s)?;
            let below_one = ops::minimum(&linear, &k(1.0)?, s)?;
            Ok(ops::where_(
                &ops::greater(&linear, &k(0.0)?, s)?,
                &below_one,
                &k(0.0)?,
                s,
            )?)
        }
        Activation::Elu { alpha } => a::elu_of(x, alpha.into(), s),
    }
}

/// An activation applied to a state rather than a gate: LSTM's `h(C)` and RNN's `f`. ORT's
/// kernels compute Relu there as `x > 0 ? x : 0`, so NaN gives 0 (a gate's Relu keeps NaN).
pub(super) fn activate_state(act: Activation, x: &Array, s: &Stream) -> Result<Array> {
    match act {
        Activation::Relu => {
            let zero = scalar(0.0, Dtype::F32, s)?;
            Ok(ops::where_(&ops::greater(x, &zero, s)?, x, &zero, s)?)
        }
        _ => activate(act, x, s),
    }
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
    fn every_kind_makes_its_own_activation() {
        for kind in &KINDS {
            let made = format!("{:?}", (kind.make)(0.5, 0.25));
            assert!(made.starts_with(kind.name), "{} makes {made}", kind.name);
        }
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
        // An unknown name is an error, never some other activation.
        let gelu = resolve_activations(Cell::Gru, 1, Some(&names(&["Gelu", "Tanh"])), None, None);
        assert!(gelu.unwrap_err().contains("\"Gelu\""));
        assert!(resolve_activations(Cell::Gru, 1, Some(&names(&["Sigmoid"])), None, None).is_err());
    }
}
