//! Activations kept channels-last between convolutions, as the table's `layout` field says
//! (`op_specs::Layout`): MLX convolves channels-last, so a convolution leaves its answer in that
//! form, and the nodes between it and the next op that prefers that form run on it too. ONNX's
//! channels-first layout is then only a lazy transpose, which MLX never evaluates unless an op
//! that needs it reads it (a reshape, a graph output).
//!
//! The `ChannelsLast` rows look their input's form up themselves (`Lower::channels_last_of`);
//! the plan runs the `Elementwise` rows on the forms of their inputs (every operand permuted
//! alike), but only where a consumer wants the form: elsewhere that would add a transpose.

use std::collections::HashSet;

use mlx_kernels::{ops, Stream};
use op_specs::table::channels_last::to_channels_last;
use op_specs::{Layout, SharedDerivations, Value};

/// What deciding where forms are wanted needs of a plan node: its row's layout, and its input
/// and output slots.
pub(crate) struct NodeSlots<'a> {
    pub layout: Layout,
    pub inputs: &'a [Option<usize>],
    pub outputs: &'a [Option<usize>],
}

/// Per node (in plan order, producers first): whether the plan runs it over its inputs'
/// channels-last forms. An `Elementwise` row does when its output is wanted in that form: read
/// as the first input of a `ChannelsLast` row, or by another node that runs so.
pub(crate) fn runs_channels_last(nodes: &[NodeSlots]) -> Vec<bool> {
    let mut wanted: HashSet<usize> = HashSet::new();
    let mut runs = vec![false; nodes.len()];
    for (index, node) in nodes.iter().enumerate().rev() {
        match node.layout {
            Layout::ChannelsLast => wanted.extend(node.inputs.first().copied().flatten()),
            Layout::Elementwise => {
                let output = node.outputs.first().copied().flatten();
                if output.is_some_and(|slot| wanted.contains(&slot)) {
                    runs[index] = true;
                    wanted.extend(node.inputs.iter().flatten());
                }
            }
            Layout::ChannelsFirst => {}
        }
    }
    runs
}

/// An elementwise node's arguments in channels-last form, when one of its tensors has a form
/// recorded in `forms` and every other tensor can be permuted alike (its rank at most the
/// form's: it is given leading 1s, as broadcasting would, then permuted; a scalar stays as it
/// is). `None` when no argument has a form or one cannot follow.
pub(crate) fn args_in_channels_last(
    args: &[Option<Value>],
    forms: &SharedDerivations,
    s: &Stream,
) -> Result<Option<Vec<Option<Value>>>, String> {
    let tensors = || {
        args.iter().flatten().filter_map(|v| match v {
            Value::Tensor(a) => Some(a),
            Value::Sequence(_) => None,
        })
    };
    let Some(rank) = tensors().find_map(|a| forms.channels_last_of(a).map(|_| a.ndim())) else {
        return Ok(None);
    };
    let sequences = args
        .iter()
        .flatten()
        .any(|v| matches!(v, Value::Sequence(_)));
    if sequences || tensors().any(|a| a.ndim() > rank) {
        return Ok(None);
    }
    let permuted = |a: &mlx_kernels::Array| -> Result<mlx_kernels::Array, String> {
        if let Some(form) = forms.channels_last_of(a) {
            return Ok(form);
        }
        if a.ndim() == 0 {
            return Ok(a.clone());
        }
        let mut shape = vec![1; rank - a.ndim()];
        shape.extend(a.shape());
        let full = ops::reshape(a, &shape, s).map_err(|e| e.to_string())?;
        to_channels_last(&full, s).map_err(|e| e.message)
    };
    args.iter()
        .map(|arg| match arg {
            Some(Value::Tensor(a)) => permuted(a).map(|p| Some(Value::Tensor(p))),
            other => Ok(other.clone()),
        })
        .collect::<Result<Vec<_>, String>>()
        .map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node<'a>(
        layout: Layout,
        inputs: &'a [Option<usize>],
        outputs: &'a [Option<usize>],
    ) -> NodeSlots<'a> {
        NodeSlots {
            layout,
            inputs,
            outputs,
        }
    }

    #[test]
    fn elementwise_nodes_between_convolutions_run_channels_last_and_others_do_not() {
        use Layout::*;
        // conv(0) -> 1; relu(1) -> 2; add(2, 9) -> 3; conv(3) -> 4; sigmoid(4) -> 5 (a graph
        // output read by nothing that prefers the form); reshape(1) -> 6.
        let nodes = [
            node(ChannelsLast, &[Some(0), Some(7)], &[Some(1)]),
            node(Elementwise, &[Some(1)], &[Some(2)]),
            node(Elementwise, &[Some(2), Some(9)], &[Some(3)]),
            node(ChannelsLast, &[Some(3), Some(8)], &[Some(4)]),
            node(Elementwise, &[Some(4)], &[Some(5)]),
            node(ChannelsFirst, &[Some(1)], &[Some(6)]),
        ];
        assert_eq!(
            runs_channels_last(&nodes),
            [false, true, true, false, false, false]
        );
    }

    #[test]
    fn a_weight_input_of_a_convolution_is_not_wanted_channels_last() {
        use Layout::*;
        // mul(0, 1) -> 2 feeds conv's weight (input 1), not its X.
        let nodes = [
            node(Elementwise, &[Some(0), Some(1)], &[Some(2)]),
            node(ChannelsLast, &[Some(3), Some(2)], &[Some(4)]),
        ];
        assert_eq!(runs_channels_last(&nodes), [false, false]);
    }
}
