//! EPContext: what a compiled model records of each partition the EP claimed, so that a session
//! over it skips claiming and partitioning (ORT's compile API, or `ep.context_enable=1`).
//!
//! A partition's record is JSON: the library and format that wrote it, the fused node's inputs
//! and outputs, and the claimed nodes as the table sees them. Weights are not in it: they stay
//! ONNX initializers, read by the EPContext node as inputs, so ORT writes them with the model
//! (inline, or to the external-data file the user chose) and a later session hands them to
//! `Compile` as it hands any initializer. The record is therefore small, and always embedded
//! (`embed_mode=1`): a side file would add a way to fail and save nothing.
//!
//! MLX traces are not recorded: a plan traces at its first run, for the shapes that run brings
//! (`capture`), which a compiled model does not know.

use op_specs::{AttrValue, ElemType, Graph, Node};
use serde::{Deserialize, Serialize};

use crate::plan::HostConstant;

pub const OP_TYPE: &str = "EPContext";
pub const DOMAIN: &str = "com.microsoft";
/// Bumped whenever the record's meaning changes; a record of another format is refused.
pub const FORMAT: u32 = 1;
/// The library version, also written as the node's `ep_sdk_version`.
pub const LIBRARY_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The session config entries that ask for a compiled model (ORT's compile API sets them).
#[derive(Debug, Clone, Copy, Default)]
pub struct ContextSettings {
    /// Write an EPContext node for each fused partition (`ep.context_enable`).
    pub enable: bool,
}

impl ContextSettings {
    pub fn from_entries(entries: &[(String, String)]) -> ContextSettings {
        let value = |key: &str| {
            entries
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        };
        ContextSettings {
            enable: value("ep.context_enable") == Some("1"),
        }
    }
}

/// Whether `node` is an EPContext node that the EP named `ep_name` wrote.
pub fn is_own(node: &Node, ep_name: &str) -> bool {
    node.op_type == OP_TYPE
        && node.domain == DOMAIN
        && node.attr_as::<String>("source").as_deref() == Some(ep_name)
}

/// The record an own EPContext node carries.
pub fn record_of(node: &Node) -> Result<Record, String> {
    let fail = |e: String| format!("EPContext node '{}': {e}", node.name);
    if let Some(mode) = node.attr_as::<i64>("embed_mode") {
        if mode != 1 {
            return Err(fail(format!(
                "embed_mode {mode}: this EP writes its records into the node (embed_mode 1); \
                 recompile the model from its source"
            )));
        }
    }
    // Borrowed: a record can be megabytes (control-flow bodies hold their constants).
    let text = node
        .attributes
        .iter()
        .find_map(|(name, value)| match value {
            AttrValue::String(text) if name == "ep_cache_context" => Some(text),
            _ => None,
        });
    match text {
        Some(text) => Record::decode(text).map_err(fail),
        None => Err(fail("it has no ep_cache_context string".into())),
    }
}

/// One partition as a compiled model holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub format: u32,
    pub library: String,
    /// The EPContext node's inputs as the model named them when it was compiled: what ORT
    /// feeds at run time, and the partition's constants.
    pub inputs: Vec<String>,
    pub outputs: Vec<(String, Option<ElemType>)>,
    pub nodes: Vec<Node>,
}

impl Record {
    pub fn new(
        inputs: Vec<String>,
        outputs: Vec<(String, Option<ElemType>)>,
        nodes: &[Node],
    ) -> Record {
        Record {
            format: FORMAT,
            library: LIBRARY_VERSION.to_string(),
            inputs,
            outputs,
            nodes: nodes.iter().map(without_opaque_attributes).collect(),
        }
    }

    pub fn encode(&self) -> Result<String, String> {
        serde_json::to_string(self).map_err(|e| format!("cannot record the partition: {e}"))
    }

    /// Reads a record, refusing one this library did not write or cannot read.
    pub fn decode(text: &str) -> Result<Record, String> {
        let stale = |format: u32, library: &str| {
            format!(
                "it was compiled by onnxruntime-ep-mlx {library} (context format {format}), and \
                 this is {LIBRARY_VERSION} (format {FORMAT}): recompile the model from its source \
                 with this library"
            )
        };
        match serde_json::from_str::<Record>(text) {
            Ok(record) if record.format == FORMAT && record.library == LIBRARY_VERSION => {
                Ok(record)
            }
            Ok(record) => Err(stale(record.format, &record.library)),
            Err(e) => {
                // Another library's record may not read as this one's: say whose it is.
                #[derive(Deserialize)]
                struct Header {
                    format: u32,
                    library: String,
                }
                match serde_json::from_str::<Header>(text) {
                    Ok(h) if h.format != FORMAT || h.library != LIBRARY_VERSION => {
                        Err(stale(h.format, &h.library))
                    }
                    _ => Err(format!(
                        "its ep_cache_context is not a record of this EP ({e}); recompile the \
                         model from its source"
                    )),
                }
            }
        }
    }
}

/// What a partition restored from its record runs: the recorded nodes, and the fused node's
/// inputs and constants under the names those nodes use.
#[derive(Debug)]
pub struct Restored {
    pub nodes: Vec<Node>,
    pub inputs: Vec<String>,
    pub constants: Vec<HostConstant>,
}

impl Record {
    /// The partition of `node` (this record's EPContext node, writing `outputs`), whose fused
    /// node ORT gave `inputs` and `constants` under today's names.
    ///
    /// The record names values as the model did when it was compiled. ORT may have renamed the
    /// EPContext node's inputs since (its constant sharing points equal initializers at one of
    /// them), so recorded and current names are matched by the node's input positions: each
    /// constant is known by every name it stood for, each fed input by its recorded name.
    pub fn restore(
        self,
        node: &Node,
        outputs: &[&str],
        inputs: &[String],
        constants: Vec<HostConstant>,
    ) -> Result<Restored, String> {
        let now: Vec<&str> = node
            .inputs
            .iter()
            .map(|v| v.as_ref().map_or("", |v| v.name.as_str()))
            .collect();
        let recorded_outputs: Vec<&str> = self.outputs.iter().map(|(n, _)| n.as_str()).collect();
        if now.len() != self.inputs.len() || outputs != recorded_outputs {
            return Err(format!(
                "EPContext node '{}' reads {} values and writes {:?} in the model, but its \
                 record was made for {} values and {:?}: the model was edited after it was \
                 compiled; recompile it from its source",
                node.name,
                now.len(),
                outputs,
                self.inputs.len(),
                recorded_outputs
            ));
        }
        let recorded_as = |name: &str| -> Vec<&String> {
            now.iter()
                .zip(&self.inputs)
                .filter(|(current, _)| **current == name)
                .map(|(_, recorded)| recorded)
                .collect()
        };
        let is_constant = |name: &str| constants.iter().any(|c| c.name == name);
        let mut renamed_inputs = Vec::with_capacity(inputs.len());
        for name in inputs {
            match recorded_as(name).as_slice() {
                [] if name.is_empty() => renamed_inputs.push(String::new()),
                [recorded] => renamed_inputs.push((*recorded).clone()),
                // A shared constant ORT feeds too: the plan holds it, under any of its names.
                [recorded, ..] if is_constant(name) => renamed_inputs.push((*recorded).clone()),
                other => {
                    return Err(format!(
                        "EPContext node '{}': its input '{name}' stands for {} recorded values; \
                         recompile the model from its source",
                        node.name,
                        other.len()
                    ))
                }
            }
        }
        let mut renamed_constants = Vec::with_capacity(constants.len());
        for constant in constants {
            let names = recorded_as(&constant.name);
            // The bytes are copied only for a constant that stands for several recorded ones.
            if let Some((last, others)) = names.split_last() {
                for &name in others {
                    renamed_constants.push(HostConstant {
                        name: name.clone(),
                        ..constant.clone()
                    });
                }
                renamed_constants.push(HostConstant {
                    name: (*last).clone(),
                    ..constant
                });
            }
        }
        Ok(Restored {
            nodes: self.nodes,
            inputs: renamed_inputs,
            constants: renamed_constants,
        })
    }
}

/// A node without attributes of kinds the table never reads (they have no serialized form).
fn without_opaque_attributes(node: &Node) -> Node {
    let attributes = node
        .attributes
        .iter()
        .filter(|(_, v)| !matches!(v, AttrValue::Other(_)))
        .map(|(name, value)| {
            let value = match value {
                AttrValue::Graph(body) => AttrValue::Graph(
                    Graph {
                        nodes: body.nodes.iter().map(without_opaque_attributes).collect(),
                        ..Graph::clone(body)
                    }
                    .into(),
                ),
                other => other.clone(),
            };
            (name.clone(), value)
        })
        .collect();
    Node {
        attributes,
        ..node.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use op_specs::ValueInfo;

    fn sample() -> Record {
        let value = |name: &str| ValueInfo {
            name: name.into(),
            elem: Some(ElemType::Float),
            shape: Some(vec![Some(2), None]),
            ..ValueInfo::default()
        };
        let body = Graph {
            inputs: vec![value("b_in")],
            outputs: vec![value("b_out")],
            nodes: vec![Node {
                name: "inner".into(),
                op_type: "Relu".into(),
                since_version: 14,
                inputs: vec![Some(value("b_in"))],
                outputs: vec![Some(value("b_out"))],
                attributes: vec![("opaque".into(), AttrValue::Other("sparse_tensor"))],
                ..Node::default()
            }],
            initializers: vec![],
        };
        let node = Node {
            name: "n".into(),
            op_type: "Loop".into(),
            since_version: 21,
            inputs: vec![Some(value("x")), None],
            outputs: vec![Some(value("y"))],
            attributes: vec![
                ("body".into(), AttrValue::Graph(body.into())),
                ("alpha".into(), AttrValue::Float(0.5)),
                ("opaque".into(), AttrValue::Other("type_proto")),
            ],
            ..Node::default()
        };
        Record::new(
            vec!["x".into()],
            vec![("y".into(), Some(ElemType::Float))],
            &[node],
        )
    }

    #[test]
    fn a_record_reads_back_as_written_without_opaque_attributes() {
        let record = sample();
        let back = Record::decode(&record.encode().unwrap()).unwrap();
        assert_eq!(back, record);
        let node = &back.nodes[0];
        assert_eq!(node.attributes.len(), 2, "the opaque attribute is left out");
        let AttrValue::Graph(body) = &node.attributes[0].1 else {
            panic!("body lost")
        };
        assert!(body.nodes[0].attributes.is_empty());
    }

    fn constant(name: &str, value: f32) -> HostConstant {
        HostConstant {
            name: name.into(),
            elem: ElemType::Float,
            shape: vec![1],
            bytes: value.to_ne_bytes().to_vec(),
        }
    }

    fn context_node(inputs: &[&str]) -> Node {
        Node {
            name: "ctx".into(),
            inputs: inputs
                .iter()
                .map(|n| {
                    Some(ValueInfo {
                        name: (*n).into(),
                        ..ValueInfo::default()
                    })
                })
                .collect(),
            ..Node::default()
        }
    }

    #[test]
    fn a_shared_constant_is_restored_under_every_name_it_stood_for() {
        let mut record = sample();
        record.inputs = vec!["x".into(), "w0".into(), "w1".into()];
        // ORT's constant sharing pointed both weights at "w1" since the model was compiled.
        let node = context_node(&["x", "w1", "w1"]);
        let restored = record
            .restore(&node, &["y"], &["x".into()], vec![constant("w1", 2.0)])
            .unwrap();
        assert_eq!(restored.inputs, ["x"]);
        let names: Vec<&str> = restored.constants.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["w0", "w1"]);
        assert!(restored
            .constants
            .iter()
            .all(|c| c.bytes == 2f32.to_ne_bytes()));
    }

    #[test]
    fn a_renamed_fed_input_is_fed_under_its_recorded_name() {
        let mut record = sample();
        record.inputs = vec!["x".into(), "w".into()];
        let node = context_node(&["x_renamed", "w"]);
        let restored = record
            .restore(
                &node,
                &["y"],
                &["x_renamed".into()],
                vec![constant("w", 1.0)],
            )
            .unwrap();
        assert_eq!(restored.inputs, ["x"]);
    }

    #[test]
    fn an_edited_context_node_is_refused() {
        let node = context_node(&["x", "extra"]);
        let e = sample()
            .restore(&node, &["y"], &["x".into(), "extra".into()], vec![])
            .unwrap_err();
        assert!(e.contains("edited after it was compiled"), "{e}");
        let e = sample()
            .restore(&context_node(&["x"]), &["z"], &["x".into()], vec![])
            .unwrap_err();
        assert!(e.contains("edited after it was compiled"), "{e}");
    }

    #[test]
    fn a_record_of_another_library_or_format_is_refused_by_name() {
        let mut record = sample();
        record.library = "0.0.1".into();
        let e = Record::decode(&record.encode().unwrap()).unwrap_err();
        assert!(e.contains("compiled by onnxruntime-ep-mlx 0.0.1"), "{e}");
        assert!(e.contains("recompile"), "{e}");
        let mut record = sample();
        record.format = FORMAT + 1;
        assert!(Record::decode(&record.encode().unwrap()).is_err());
        let e = Record::decode("binary_data").unwrap_err();
        assert!(e.contains("not a record of this EP"), "{e}");
    }
}
