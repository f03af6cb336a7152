//! Decode steps without retracing. An LLM's decode step changes one input shape per token (the
//! attention mask grows by one), so a closure keyed on exact input shapes would be traced for
//! every token. When the inputs whose shapes changed since the last run reach only a few nodes
//! before anything else joins them (genai's mask: `ReduceSum` → `seqlens_k`, `Shape` →
//! `total_sequence_length`), the plan is split in two: the **prologue**, the nodes computed from
//! those inputs and constants alone, is lowered eagerly on every run; the **body**, every other
//! node, is compiled once and fed the plan's unchanged inputs and the prologue's results, whose
//! shapes stay the same from token to token. Small integer results are read on the host too,
//! and handed to the body's lowerings that read them as host values: what those lowerings take
//! from the values is their key (`Lower::key_host_read`), recorded by the trace and checked
//! before each replay.
//!
//! A prologue whose results are all such host values runs on MLX's CPU, whatever the plan's
//! device: a GPU would compute a few integers from a host input (the mask) only to hand them
//! back, a synchronisation in the middle of every step. Except on MLX's CUDA backend, where the
//! CPU stream is the dearer round trip (`cuda::cpu_stream_syncs_through_gpu`): there the
//! prologue runs on the GPU and its few integers are copied back from device memory.

use std::collections::HashMap;
use std::sync::OnceLock;

use mlx_kernels::{cuda, Array, Dtype, Stream};

use crate::plan::{Constants, Lowering, Part, PartLowering, Plan, SlotKey};

/// Integer results of the prologue up to this many elements are read on the host for the body.
const HOST_VALUE_LIMIT: usize = 16;

/// A plan cut into an eager prologue and a compiled body, for one set of changed inputs.
#[derive(Debug)]
pub struct Split {
    prologue: Vec<usize>,
    body: Vec<usize>,
    /// Plan input positions the body reads (the unchanged ones), then the prologue's slots it
    /// reads (or that are plan outputs): the body's inputs, in this order.
    kept_inputs: Vec<usize>,
    frontier: Vec<usize>,
    /// Per plan input: whether the prologue takes it (it changed shape), part of the cache key.
    pub prologue_inputs: Vec<bool>,
    /// Whether the prologue runs on MLX's CPU, decided at its first lowering (every result a
    /// host value).
    on_host: OnceLock<bool>,
}

/// The prologue of one run, lowered: its results for the body, and what else it produced.
pub struct Prologue {
    pub frontier: Vec<Array>,
    lowered: PartLowering,
    /// MLX's CPU stream when it runs there (see the module's notes), else the plan's stream.
    host: Option<Stream>,
}

/// Whether a prologue result is read on the host for the body: a small integer (or bool:
/// an If's condition) array.
pub(crate) fn is_host_value(array: &Array) -> bool {
    (array.dtype().is_integer() || array.dtype() == Dtype::Bool) && array.size() <= HOST_VALUE_LIMIT
}

impl Split {
    /// The split of `plan` where the inputs marked in `varying` changed shape: `None` when a
    /// node outside the prologue reads one of them (or one is a plan output), so the body's
    /// shapes would change as well. With `by_value` the inputs vary in value only (small
    /// integer and bool inputs whose values the body reads on the host): the body may then read
    /// them too, handed over with the prologue's results.
    pub fn of(plan: &Plan, varying: &[bool], by_value: bool) -> Option<Split> {
        // Slots the prologue can compute: constants, the changed inputs, and its own results.
        let mut known = vec![false; plan.slot_count()];
        for slot in plan.constant_slots() {
            known[slot] = true;
        }
        let mut varying_slots = Vec::new();
        for (&slot, _) in plan.inputs.iter().zip(varying).filter(|(_, &v)| v) {
            known[slot] = true;
            varying_slots.push(slot);
        }
        let (mut prologue, mut body) = (Vec::new(), Vec::new());
        for (index, node) in plan.nodes.iter().enumerate() {
            if node.inputs.iter().flatten().all(|&slot| known[slot]) {
                prologue.push(index);
                for &slot in node.outputs.iter().flatten() {
                    known[slot] = true;
                }
            } else {
                body.push(index);
            }
        }
        let produced_by_prologue = |slot: usize| {
            prologue
                .iter()
                .any(|&i| plan.nodes[i].outputs.contains(&Some(slot)))
        };
        let body_reads: Vec<usize> = body
            .iter()
            .flat_map(|&i| plan.nodes[i].inputs.iter().flatten().copied())
            .chain(plan.outputs.iter().map(|o| o.slot))
            .collect();
        let read_varying = |slot: &usize| varying_slots.contains(slot);
        if !by_value && body_reads.iter().any(read_varying) {
            return None;
        }
        let mut frontier: Vec<usize> = Vec::new();
        for &slot in &body_reads {
            if (produced_by_prologue(slot) || read_varying(&slot)) && !frontier.contains(&slot) {
                frontier.push(slot);
            }
        }
        let kept_inputs = (0..plan.inputs.len()).filter(|&i| !varying[i]).collect();
        Some(Split {
            prologue,
            body,
            kept_inputs,
            frontier,
            prologue_inputs: varying.to_vec(),
            on_host: OnceLock::new(),
        })
    }

    /// Lowers the prologue over the run's inputs (lazily: its results are evaluated by
    /// [`Prologue::host_values`], or with the body): on MLX's CPU when every result is a host
    /// value, else on the plan's stream.
    pub fn lower_prologue(
        &self,
        plan: &Plan,
        stream: &Stream,
        constants: &Constants,
        inputs: &[Array],
    ) -> Result<Prologue, String> {
        if self.on_host.get() != Some(&false) && !cuda::cpu_stream_syncs_through_gpu() {
            let host = Stream::cpu().map_err(|e| format!("MLX's CPU stream: {e}"))?;
            let prologue = self.lower_prologue_on(plan, Some(host), stream, constants, inputs)?;
            let on_host = *self
                .on_host
                .get_or_init(|| prologue.frontier.iter().all(is_host_value));
            if on_host {
                return Ok(prologue);
            }
        }
        self.lower_prologue_on(plan, None, stream, constants, inputs)
    }

    /// Lowers the prologue on `host` when given, else on `stream`.
    fn lower_prologue_on(
        &self,
        plan: &Plan,
        host: Option<Stream>,
        stream: &Stream,
        constants: &Constants,
        inputs: &[Array],
    ) -> Result<Prologue, String> {
        let part = Part {
            nodes: &mut self.prologue.iter().copied(),
            seeds: plan
                .inputs
                .iter()
                .zip(inputs)
                .map(|(&slot, a)| (slot, Some(a.clone())))
                .collect(),
            host_values: &HashMap::new(),
        };
        let lowered = plan.lower_part(host.as_ref().unwrap_or(stream), constants, part, None)?;
        let frontier = self
            .frontier
            .iter()
            .map(|&slot| {
                lowered.env[slot]
                    .clone()
                    .ok_or_else(|| "a prologue result was never computed".to_owned())
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Prologue {
            frontier,
            lowered,
            host,
        })
    }

    /// The body's inputs: the plan's unchanged inputs, then the prologue's results.
    pub fn body_inputs(&self, inputs: &[Array], prologue: &Prologue) -> Vec<Array> {
        self.kept_inputs
            .iter()
            .map(|&i| inputs[i].clone())
            .chain(prologue.frontier.iter().cloned())
            .collect()
    }

    /// Lowers the body over its inputs (a trace's tracers), with the host values of the
    /// prologue's small integer results; returns the lowering of the plan's outputs and the
    /// host keys its nodes recorded.
    pub fn lower_body(
        &self,
        plan: &Plan,
        stream: &Stream,
        constants: &Constants,
        body_inputs: &[Array],
        host_values: &HashMap<usize, Vec<i64>>,
    ) -> Result<(Lowering, Vec<SlotKey>), String> {
        let slots = self
            .kept_inputs
            .iter()
            .map(|&i| plan.inputs[i])
            .chain(self.frontier.iter().copied());
        let part = Part {
            nodes: &mut self.body.iter().copied(),
            seeds: slots.zip(body_inputs.iter().cloned().map(Some)).collect(),
            host_values,
        };
        let mut lowered = plan.lower_part(stream, constants, part, None)?;
        let keys = std::mem::take(&mut lowered.host_keys);
        Ok((plan.finish(lowered, stream)?, keys))
    }

    /// The whole run's lowering: the body's (compiled) outputs with the prologue's checks, the
    /// rows its in-place outputs write, and its arrays kept alive.
    pub fn join(&self, plan: &Plan, prologue: Prologue, mut body: Lowering) -> Lowering {
        let PartLowering {
            env,
            checks,
            mut rows_of_slot,
            ..
        } = prologue.lowered;
        body.checks.extend(checks);
        for (rows, output) in body.written_rows.iter_mut().zip(&plan.outputs) {
            if rows.is_none() {
                *rows = rows_of_slot.remove(&output.slot);
            }
        }
        body.keep_alive.extend(env);
        body
    }
}

impl Prologue {
    /// The prologue's results that the body reads on the host (small integers), by slot,
    /// widened to int64 (lazily, on the prologue's stream).
    pub fn host_value_arrays(
        &self,
        split: &Split,
        stream: &Stream,
    ) -> Result<Vec<(usize, Array)>, String> {
        let stream = self.host.as_ref().unwrap_or(stream);
        split
            .frontier
            .iter()
            .zip(&self.frontier)
            .filter(|(_, array)| is_host_value(array))
            .map(|(&slot, array)| {
                let wide = mlx_kernels::ops::astype(array, Dtype::I64, stream)
                    .map_err(|e| format!("reading a prologue result: {e}"))?;
                Ok((slot, wide))
            })
            .collect()
    }

    /// Evaluates the prologue's results and reads the small integer ones on the host, by slot.
    pub fn host_values(
        &self,
        split: &Split,
        stream: &Stream,
    ) -> Result<HashMap<usize, Vec<i64>>, String> {
        // The host values are evaluated with the results, in one evaluation: each further one
        // is a device round trip on a GPU.
        let wide = self.host_value_arrays(split, stream)?;
        let mut all = self.frontier.clone();
        all.extend(wide.iter().map(|(_, array)| array.clone()));
        Array::eval_all(&all).map_err(|e| format!("evaluating a prologue: {e}"))?;
        let stream = self.host.as_ref().unwrap_or(stream);
        wide.into_iter()
            .map(|(slot, array)| {
                let values = array
                    .to_vec::<i64>(stream)
                    .map_err(|e| format!("reading a prologue result: {e}"))?;
                Ok((slot, values))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use op_specs::{AttrValue, ElemType, Node, ValueInfo};

    use super::*;
    use crate::plan::HostConstant;

    fn value(name: &str, elem: ElemType) -> Option<ValueInfo> {
        Some(ValueInfo {
            name: name.into(),
            elem: Some(elem),
            ..ValueInfo::default()
        })
    }

    fn node(
        op: &str,
        since: i64,
        inputs: &[(&str, ElemType)],
        outputs: &[(&str, ElemType)],
        attributes: Vec<(String, AttrValue)>,
    ) -> Node {
        Node {
            name: format!("{op}_node"),
            op_type: op.into(),
            since_version: since,
            inputs: inputs.iter().map(|(n, e)| value(n, *e)).collect(),
            outputs: outputs.iter().map(|(n, e)| value(n, *e)).collect(),
            attributes,
            ..Node::default()
        }
    }

    /// The constant `axes = [1]` the plans below reduce over.
    fn axis_one() -> HostConstant {
        HostConstant {
            name: "axes".into(),
            elem: ElemType::Int64,
            shape: vec![1],
            bytes: 1i64.to_ne_bytes().to_vec(),
        }
    }

    /// x [2, 3] scaled by the sum of a mask m [1, T]; Shape(m) is an output too.
    fn masked_scale() -> Plan {
        use ElemType::{Float, Int64};
        let nodes = vec![
            node("Shape", 15, &[("m", Int64)], &[("shape", Int64)], vec![]),
            node(
                "ReduceSum",
                13,
                &[("m", Int64), ("axes", Int64)],
                &[("total", Int64)],
                vec![("keepdims".into(), AttrValue::Int(1))],
            ),
            node(
                "Cast",
                13,
                &[("total", Int64)],
                &[("scale", Float)],
                vec![("to".into(), AttrValue::Int(1))],
            ),
            node(
                "Mul",
                14,
                &[("x", Float), ("scale", Float)],
                &[("z", Float)],
                vec![],
            ),
        ];
        let axes = axis_one();
        let outputs = [
            ("z".to_string(), Some(Float)),
            ("shape".to_string(), Some(Int64)),
        ];
        Plan::build(
            "masked_scale".into(),
            nodes,
            &["x".into(), "m".into()],
            &outputs,
            vec![axes],
        )
        .expect("every node is claimed")
    }

    #[test]
    fn the_nodes_reading_only_the_changed_input_form_the_prologue() {
        let plan = masked_scale();
        let split = Split::of(&plan, &[false, true], false).expect("m reaches only the prologue");
        let ops = |nodes: &[usize]| -> Vec<String> {
            nodes
                .iter()
                .map(|&i| plan.nodes[i].op().to_string())
                .collect()
        };
        assert_eq!(ops(&split.prologue), ["Shape", "ReduceSum", "Cast"]);
        assert_eq!(ops(&split.body), ["Mul"]);
        assert_eq!(split.kept_inputs, [0]);
        // The body reads `scale`; `shape` is a plan output the prologue computes.
        assert_eq!(split.frontier.len(), 2);
        assert_eq!(split.prologue_inputs, [false, true]);
        // x is read by the body itself: changing it leaves nothing to split off.
        assert!(Split::of(&plan, &[true, false], false).is_none());
    }

    #[test]
    fn prologue_and_body_compute_what_the_whole_plan_does() {
        let plan = masked_scale();
        let runtime = plan.start(crate::device::Device::default()).unwrap();
        let (stream, constants) = (&runtime.stream, &runtime.constants);
        let split = Split::of(&plan, &[false, true], false).unwrap();
        let x = Array::from_slice(&[1f32, -2.0, 3.0, 0.5, 0.0, 4.0], &[2, 3]).unwrap();
        let m = Array::from_slice(&[1i64, 1, 0, 1], &[1, 4]).unwrap();
        let inputs = [x, m];
        let prologue = split
            .lower_prologue(&plan, stream, constants, &inputs)
            .unwrap();
        // `scale` is a float: the prologue stays on the plan's stream.
        assert_eq!(split.on_host.get(), Some(&false));
        assert!(prologue.host.is_none());
        let host = prologue.host_values(&split, stream).unwrap();
        // Of the prologue's results only `shape` is an integer array: it alone is read on the host.
        assert_eq!(host.values().collect::<Vec<_>>(), [&vec![1, 4]]);
        let body_inputs = split.body_inputs(&inputs, &prologue);
        let (body, keys) = split
            .lower_body(&plan, stream, constants, &body_inputs, &host)
            .unwrap();
        assert!(keys.is_empty(), "no body node reads a host value");
        let joined = split.join(&plan, prologue, body);
        let whole = plan
            .lower(
                stream,
                constants,
                inputs.iter().cloned().map(Some).collect(),
            )
            .unwrap();
        for (got, want) in joined.outputs.iter().zip(&whole.outputs) {
            assert_eq!(got.shape(), want.shape());
            let (got, want) = (
                got.to_bytes(stream).unwrap(),
                want.to_bytes(stream).unwrap(),
            );
            assert_eq!(got, want);
        }
        let z = joined.outputs[0].to_vec::<f32>(stream).unwrap();
        assert_eq!(z, [3.0, -6.0, 9.0, 1.5, 0.0, 12.0]);
    }

    #[test]
    fn a_prologue_of_host_values_runs_on_the_cpu() {
        use ElemType::Int64;
        // n [2] plus the sum of a mask m [1, T]: the prologue's one result is a host value.
        let nodes = vec![
            node(
                "ReduceSum",
                13,
                &[("m", Int64), ("axes", Int64)],
                &[("total", Int64)],
                vec![("keepdims".into(), AttrValue::Int(0))],
            ),
            node(
                "Add",
                14,
                &[("n", Int64), ("total", Int64)],
                &[("z", Int64)],
                vec![],
            ),
        ];
        let axes = axis_one();
        let plan = Plan::build(
            "counted".into(),
            nodes,
            &["n".into(), "m".into()],
            &[("z".to_string(), Some(Int64))],
            vec![axes],
        )
        .unwrap();
        let runtime = plan.start(crate::device::Device::default()).unwrap();
        let (stream, constants) = (&runtime.stream, &runtime.constants);
        let split = Split::of(&plan, &[false, true], false).unwrap();
        for width in [3, 4] {
            let n = Array::from_slice(&[10i64, 20], &[2]).unwrap();
            let m = Array::from_slice(&vec![1i64; width], &[1, width as i64]).unwrap();
            let inputs = [n, m];
            let prologue = split
                .lower_prologue(&plan, stream, constants, &inputs)
                .unwrap();
            assert_eq!(split.on_host.get(), Some(&true));
            assert!(prologue.host.is_some(), "lowered on MLX's CPU stream");
            let host = prologue.host_values(&split, stream).unwrap();
            assert_eq!(host.values().collect::<Vec<_>>(), [&vec![width as i64]]);
            let body_inputs = split.body_inputs(&inputs, &prologue);
            let (body, _) = split
                .lower_body(&plan, stream, constants, &body_inputs, &host)
                .unwrap();
            let z = split.join(&plan, prologue, body).outputs[0]
                .to_vec::<i64>(stream)
                .unwrap();
            assert_eq!(z, [10 + width as i64, 20 + width as i64]);
        }
    }
}
