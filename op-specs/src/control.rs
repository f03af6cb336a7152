//! Control flow: If, Loop and Scan, whose bodies join the enclosing MLX graph.
//!
//! ORT cannot place a plugin EP's fused node inside a control-flow body, so the EP claims the
//! control-flow node itself, bodies and all ([`crate::table::body`]): a body whose every node
//! the table claims is lowered into the same MLX graph as the node around it, reading the
//! enclosing scopes' values (the node's implicit inputs, [`Lower::enclosing`]).

use std::sync::Arc;

use mlx_kernels::{ops, Array, Dtype};

use crate::shape::normalise_axis;
use crate::table::body::{bodies_shape_safety, claim_body, lower_body, CompiledBody};
use crate::table::consts::{scalar, zeros};
use crate::table::lower::{host_values, FromHost};
use crate::{onnx_op, ElemType, Graph, Lower, Node, OpError, Result, ValueInfo, Verdict};

const BRANCHES: [&str; 2] = ["then_branch", "else_branch"];

/// Both branches run whole on MLX and give one output per output of the node.
fn if_claim(node: &Node) -> Verdict {
    for name in BRANCHES {
        let Some(branch) = node.graph(name) else {
            return Verdict::decline(format!("{name} is not a graph"));
        };
        if branch.outputs.len() != node.output_count() {
            return Verdict::decline(format!(
                "{name} gives {} outputs for the node's {}",
                branch.outputs.len(),
                node.output_count()
            ));
        }
        if let verdict @ Verdict::Decline { .. } = claim_body(branch, name) {
            return verdict;
        }
    }
    Verdict::Claim
}

/// The branch `cond` names, lowered in place: only that branch's work is in the MLX graph.
/// The condition is read on the host: a constant or a value computed from shapes costs
/// nothing in a compiled trace (which is keyed on it); one computed from data is read once
/// per run, on the eager path.
#[onnx_op(
    op = "If", precision = Float32, since = 1, types(B = BOOL, V = ANY), inputs(cond: B), outputs(outputs...: V),
    heterogeneous(outputs), shape = bodies_shape_safety, claim = if_claim,
    declines = "a branch with a node this EP declines, an output that is not a tensor (sequences, optionals), or another output count than the node's"
)]
fn if_(
    cx: &mut Lower,
    #[host] cond: i64,
    #[attr] then_branch: Arc<Graph>,
    #[attr] else_branch: Arc<Graph>,
) -> Result<Vec<Array>> {
    let branch = if cond != 0 { then_branch } else { else_branch };
    let outputs = lower_body(cx, &branch, cx.enclosing().clone())?;
    for (index, output) in outputs.iter().enumerate() {
        let declared = cx.output_dtype(index)?;
        if output.dtype() != declared {
            return Err(OpError::new(format!(
                "the branch's output {index} is {:?} where the node declares {declared:?}",
                output.dtype()
            )));
        }
    }
    Ok(outputs)
}

/// Every this many iterations an eager loop evaluates what it carries, so a long loop holds a
/// bounded graph. Inside a compiled trace the evaluation fails and the plan runs eagerly, each
/// iteration a replay of the compiled body: tracing a longer loop unrolled would fuse (and, on
/// the CPU backend, C++-compile) kernels for every iteration, minutes for a few hundred.
const ITERATIONS_PER_EVALUATION: i64 = 64;

/// Per-iteration values stacked along `axis` (in iteration order, or reversed); with no
/// iteration, an empty tensor of the body output's declared shape (which must then be known).
fn stack_iterations(
    cx: &Lower,
    slices: Vec<Array>,
    axis: i64,
    reverse: bool,
    declared: &ValueInfo,
) -> Result<Array> {
    let s = cx.stream();
    if slices.is_empty() {
        let dims: Option<Vec<i64>> = declared
            .shape
            .as_ref()
            .and_then(|d| d.iter().copied().collect());
        let dtype = declared.elem.and_then(ElemType::carrier);
        let (Some(mut dims), Some(dtype)) = (dims, dtype) else {
            return Err(OpError::new(format!(
                "no iteration ran, and the body's output '{}' has no static shape to make its \
                 empty scan output from",
                declared.name
            )));
        };
        let at = normalise_axis(axis, dims.len() + 1)?;
        dims.insert(at, 0);
        return zeros(&dims, dtype, s);
    }
    let at = normalise_axis(axis, slices[0].ndim() + 1)?;
    let mut slices = slices;
    if reverse {
        slices.reverse();
    }
    Ok(ops::stack(&slices, at as i32, s)?)
}

/// A Loop body that runs whole on MLX: it takes the iteration number, the condition and the
/// carried values, and gives the condition, the carried values and the scan outputs.
fn loop_claim(node: &Node) -> Verdict {
    let Some(body) = node.graph("body") else {
        return Verdict::decline("body is not a graph");
    };
    let Some(carried) = body.inputs.len().checked_sub(2) else {
        return Verdict::decline("the body takes fewer than 2 inputs");
    };
    if body.outputs.len() < 1 + carried || node.output_count() != body.outputs.len() - 1 {
        return Verdict::decline(format!(
            "the body gives {} outputs for {carried} carried values and the node's {} outputs",
            body.outputs.len(),
            node.output_count()
        ));
    }
    claim_body(body, "body")
}

/// The loop unrolled into the MLX graph: the body lowered once per iteration while the
/// iteration number is below `M` and the condition holds, each iteration's carried values
/// feeding the next; scan outputs stacked along a new first axis. `M` and the conditions are
/// read on the host: a "for" loop over a constant count whose condition passes through (the
/// usual export) compiles, keyed on the count; a condition computed from data runs eagerly.
#[onnx_op(
    op = "Loop", precision = Float32, since = 1, types(I = I64, B = BOOL, V = ANY), inputs(M: I, cond: B, v_initial: V),
    outputs(v_final_and_scan_outputs...: V), heterogeneous(v_initial, v_final_and_scan_outputs),
    shape = bodies_shape_safety, claim = loop_claim,
    declines = "a body with a node this EP declines or a non-tensor output (sequences, optionals), or whose outputs do not match the node's"
)]
fn loop_(
    cx: &mut Lower,
    #[host] m: Option<i64>,
    #[host] cond: Option<i64>,
    values: Vec<Array>,
    #[attr] body: Arc<Graph>,
) -> Result<Vec<Array>> {
    let carried_count = body.inputs.len() - 2;
    if values.len() != carried_count {
        return Err(OpError::new(format!(
            "{} initial values for the body's {carried_count} carried ones",
            values.len()
        )));
    }
    let step = CompiledBody::of(cx, "body", &body)?;
    let mut carried = values;
    let scan_count = body.outputs.len() - 1 - carried_count;
    let mut scans: Vec<Vec<Array>> = vec![Vec::new(); scan_count];
    let mut going = cond.is_none_or(|c| c != 0);
    let mut iteration = 0i64;
    while going && m.is_none_or(|m| iteration < m) {
        let s = cx.stream();
        let own = [
            scalar(iteration as f64, Dtype::I64, s)?,
            scalar(f64::from(u8::from(going)), Dtype::Bool, s)?,
        ];
        let own = own.into_iter().chain(carried).collect();
        let mut outputs = step.run(cx, &body, own)?.into_iter();
        let condition = outputs
            .next()
            .expect("the claim checked the body's outputs");
        carried = outputs.by_ref().take(carried_count).collect();
        for (scan, element) in scans.iter_mut().zip(outputs) {
            scan.push(element);
        }
        let what = "the body's condition";
        going = i64::from_host(host_values(cx, &condition, what)?, what)? != 0;
        iteration += 1;
        if iteration % ITERATIONS_PER_EVALUATION == 0 {
            let held: Vec<Array> = carried
                .iter()
                .chain(scans.iter().flatten())
                .cloned()
                .collect();
            Array::eval_all(&held)?;
        }
    }
    let declared = &body.outputs[1 + carried_count..];
    let stacked = scans
        .into_iter()
        .zip(declared)
        .map(|(slices, output)| stack_iterations(cx, slices, 0, false, output));
    carried.into_iter().map(Ok).chain(stacked).collect()
}

/// One scan input: stepped along `axis`, from the end when `reverse`.
struct Sequence {
    input: Array,
    axis: usize,
    reverse: bool,
}

/// `length` steps of a Scan body: each lowers the body on the state and one slice of every
/// sequence; returns the final state and, per scan output, each step's element.
fn scan_steps(
    cx: &mut Lower,
    body: &Arc<Graph>,
    mut state: Vec<Array>,
    sequences: &[Sequence],
    length: i64,
) -> Result<(Vec<Array>, Vec<Vec<Array>>)> {
    let s = cx.stream();
    let states = state.len();
    let step = CompiledBody::of(cx, "body", body)?;
    let mut scans: Vec<Vec<Array>> = vec![Vec::new(); body.outputs.len() - states];
    for index in 0..length {
        let mut own = state;
        for sequence in sequences {
            let at = if sequence.reverse {
                length - 1 - index
            } else {
                index
            };
            let at = scalar(at as f64, Dtype::I32, s)?;
            own.push(ops::take(&sequence.input, &at, sequence.axis as i32, s)?);
        }
        let mut outputs = step.run(cx, body, own)?.into_iter();
        state = outputs.by_ref().take(states).collect();
        for (scan, element) in scans.iter_mut().zip(outputs) {
            scan.push(element);
        }
    }
    Ok((state, scans))
}

/// A Scan body that runs whole on MLX, with as many state values as inputs minus scan inputs.
fn scan_claim(node: &Node) -> Verdict {
    let Some(body) = node.graph("body") else {
        return Verdict::decline("body is not a graph");
    };
    let scan_inputs = node.attr_or("num_scan_inputs", 0i64);
    let states = body.inputs.len() as i64 - scan_inputs;
    if scan_inputs < 1 || states < 0 || body.outputs.len() as i64 != node.output_count() as i64 {
        return Verdict::decline(format!(
            "num_scan_inputs {scan_inputs} with a body of {} inputs and {} outputs for the \
             node's {} outputs",
            body.inputs.len(),
            body.outputs.len(),
            node.output_count()
        ));
    }
    claim_body(body, "body")
}

/// One of a Scan's per-input or per-output lists, or its default (axis 0, forward).
fn per_value(list: &Option<Vec<i64>>, index: usize, what: &str) -> Result<i64> {
    match list {
        None => Ok(0),
        Some(values) => values
            .get(index)
            .copied()
            .ok_or_else(|| OpError::new(format!("{what} has {} entries, too few", values.len()))),
    }
}

/// Scan unrolled over the scan inputs' axis (its length known from their shapes): each step
/// lowers the body on the state and one slice of every scan input, in its direction; the
/// scan outputs stack each step's elements along their axis, in their direction.
#[onnx_op(
    op = "Scan", precision = Float32, since = 9, types(V = ANY), inputs(initial_state_and_scan_inputs: V),
    outputs(final_state_and_scan_outputs...: V),
    heterogeneous(initial_state_and_scan_inputs, final_state_and_scan_outputs),
    shape = bodies_shape_safety, claim = scan_claim,
    declines = "a body with a node this EP declines or a non-tensor output, or whose inputs and outputs do not match num_scan_inputs and the node's outputs"
)]
#[allow(clippy::too_many_arguments)] // ONNX's attribute list
fn scan(
    cx: &mut Lower,
    values: Vec<Array>,
    #[attr] body: Arc<Graph>,
    #[attr] num_scan_inputs: i64,
    #[attr] scan_input_axes: Option<Vec<i64>>,
    #[attr] scan_input_directions: Option<Vec<i64>>,
    #[attr] scan_output_axes: Option<Vec<i64>>,
    #[attr] scan_output_directions: Option<Vec<i64>>,
) -> Result<Vec<Array>> {
    let scan_inputs = num_scan_inputs as usize;
    let states = body.inputs.len() - scan_inputs;
    if values.len() != states + scan_inputs {
        return Err(OpError::new(format!(
            "{} inputs for {states} states and {scan_inputs} scan inputs",
            values.len()
        )));
    }
    let mut sequences = Vec::with_capacity(scan_inputs);
    let mut length = None;
    for (index, input) in values[states..states + scan_inputs].iter().enumerate() {
        let axis = normalise_axis(
            per_value(&scan_input_axes, index, "scan_input_axes")?,
            input.ndim(),
        )?;
        let reverse = per_value(&scan_input_directions, index, "scan_input_directions")? == 1;
        let steps = input.shape()[axis];
        if *length.get_or_insert(steps) != steps {
            return Err(OpError::new(format!(
                "scan inputs of {steps} and {} steps",
                length.unwrap_or(0)
            )));
        }
        sequences.push(Sequence {
            input: input.clone(),
            axis,
            reverse,
        });
    }
    let (state, scans) = scan_steps(
        cx,
        &body,
        values[..states].to_vec(),
        &sequences,
        length.unwrap_or(0),
    )?;
    let mut results = state;
    for (index, (slices, declared)) in scans.into_iter().zip(&body.outputs[states..]).enumerate() {
        let axis = per_value(&scan_output_axes, index, "scan_output_axes")?;
        let reverse = per_value(&scan_output_directions, index, "scan_output_directions")? == 1;
        results.push(stack_iterations(cx, slices, axis, reverse, declared)?);
    }
    Ok(results)
}

/// Scan-8: every input has a batch axis first and the scan axis second. Each batch entry is
/// scanned on its own slices, for its `sequence_lens` steps (all of them by default; forward,
/// or from its last valid step back); its scan outputs are zero-padded to the sequence axis,
/// and the entries are stacked back along the batch axis.
#[onnx_op(
    op = "Scan", precision = Float32, opset = 8..=8, types(I = I64, V = ANY),
    inputs(sequence_lens: I, initial_state_and_scan_inputs: V),
    outputs(final_state_and_scan_outputs...: V),
    heterogeneous(initial_state_and_scan_inputs, final_state_and_scan_outputs),
    shape = bodies_shape_safety, claim = scan_claim,
    declines = "a body with a node this EP declines or a non-tensor output, or whose inputs and outputs do not match num_scan_inputs and the node's outputs"
)]
fn scan_batched(
    cx: &mut Lower,
    #[host] sequence_lens: Option<Vec<i64>>,
    values: Vec<Array>,
    #[attr] body: Arc<Graph>,
    #[attr] num_scan_inputs: i64,
    #[attr] directions: Option<Vec<i64>>,
) -> Result<Vec<Array>> {
    let s = cx.stream();
    let scan_inputs = num_scan_inputs as usize;
    let states = body.inputs.len() - scan_inputs;
    if values.len() != states + scan_inputs || scan_inputs == 0 {
        return Err(OpError::new(format!(
            "{} inputs for {states} states and {scan_inputs} scan inputs",
            values.len()
        )));
    }
    let first = &values[states];
    let (batch, steps) = match first.shape()[..] {
        [batch, steps, ..] => (batch, steps),
        _ => return Err(OpError::new("a scan input must be [batch, sequence, ...]")),
    };
    if values.iter().any(|v| v.shape().first() != Some(&batch))
        || values[states..]
            .iter()
            .any(|v| v.shape().get(1) != Some(&steps))
    {
        return Err(OpError::new(
            "every input must share the batch axis, and every scan input the sequence axis",
        ));
    }
    if batch == 0 {
        return Err(OpError::new(
            "an empty batch: no entry to scan and no element shape to build the outputs from",
        ));
    }
    let lengths = sequence_lens.unwrap_or_else(|| vec![steps; batch as usize]);
    // ORT refuses a length of 0 too.
    if lengths.len() != batch as usize || lengths.iter().any(|l| !(1..=steps).contains(l)) {
        return Err(OpError::new(format!(
            "sequence_lens {lengths:?} must hold {batch} lengths in 1..={steps}"
        )));
    }
    let entry = |value: &Array, b: i64| -> Result<Array> {
        Ok(ops::take(value, &scalar(b as f64, Dtype::I32, s)?, 0, s)?)
    };
    let mut per_entry: Vec<Vec<Array>> = Vec::with_capacity(batch as usize);
    for (b, &length) in lengths.iter().enumerate() {
        let b = b as i64;
        let state = values[..states]
            .iter()
            .map(|v| entry(v, b))
            .collect::<Result<Vec<_>>>()?;
        let mut sequences = Vec::with_capacity(scan_inputs);
        for (index, input) in values[states..].iter().enumerate() {
            sequences.push(Sequence {
                input: entry(input, b)?,
                axis: 0,
                reverse: per_value(&directions, index, "directions")? == 1,
            });
        }
        let (state, scans) = scan_steps(cx, &body, state, &sequences, length)?;
        let mut results = state;
        for (slices, declared) in scans.into_iter().zip(&body.outputs[states..]) {
            let stacked = stack_iterations(cx, slices, 0, false, declared)?;
            results.push(pad_steps(cx, stacked, steps)?);
        }
        per_entry.push(results);
    }
    (0..body.outputs.len())
        .map(|output| {
            let entries: Vec<Array> = per_entry.iter().map(|e| e[output].clone()).collect();
            Ok(ops::stack(&entries, 0, s)?)
        })
        .collect()
}

/// `stacked` (`[length, ...]`) padded with zeros to `steps` along its first axis.
fn pad_steps(cx: &Lower, stacked: Array, steps: i64) -> Result<Array> {
    let s = cx.stream();
    let dims = stacked.shape();
    if dims[0] == steps {
        return Ok(stacked);
    }
    let mut padding = dims.clone();
    padding[0] = steps - dims[0];
    let padding = zeros(&padding, stacked.dtype(), s)?;
    Ok(ops::concatenate(&[stacked, padding], 0, s)?)
}
