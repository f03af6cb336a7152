//! What the table may know about a node: an ORT-free view, so claims and lowerings can be
//! tested without ORT, and the EP copies ORT's graph into it.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::dtypes::ElemType;
use super::lower::FromAttr;

/// A tensor-valued attribute (Constant's and ConstantOfShape's `value`), copied to the host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TensorValue {
    pub elem: ElemType,
    pub shape: Vec<i64>,
    /// Row-major, native-endian element bytes (serialized as one hex string: a JSON array of
    /// numbers would be several times larger and slower to read).
    #[serde(with = "hex_bytes")]
    pub bytes: Vec<u8>,
}

mod hex_bytes {
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    const DIGITS: &[u8; 16] = b"0123456789abcdef";

    pub fn serialize<S: Serializer>(bytes: &[u8], out: S) -> Result<S::Ok, S::Error> {
        let mut text = String::with_capacity(bytes.len() * 2);
        for b in bytes {
            text.push(char::from(DIGITS[usize::from(b >> 4)]));
            text.push(char::from(DIGITS[usize::from(b & 15)]));
        }
        out.serialize_str(&text)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(input: D) -> Result<Vec<u8>, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(input)?;
        let text = text.as_bytes();
        if text.len() % 2 != 0 {
            return Err(D::Error::custom("hex bytes of odd length"));
        }
        // Records can hold megabytes of constants: one table lookup a digit, errors checked once.
        const INVALID: u8 = 0xff;
        const VALUE: [u8; 256] = {
            let mut table = [INVALID; 256];
            let mut i = 0;
            while i < 16 {
                table[DIGITS[i] as usize] = i as u8;
                i += 1;
            }
            table
        };
        let mut invalid = false;
        let bytes: Vec<u8> = text
            .chunks_exact(2)
            .map(|pair| {
                let (high, low) = (VALUE[usize::from(pair[0])], VALUE[usize::from(pair[1])]);
                invalid |= high == INVALID || low == INVALID;
                high << 4 | (low & 15)
            })
            .collect();
        if invalid {
            return Err(D::Error::custom(
                "a byte string holds a character that is not a hex digit",
            ));
        }
        Ok(bytes)
    }
}

/// An attribute value, by ONNX attribute kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum AttrValue {
    Int(i64),
    Float(f32),
    String(String),
    Ints(Vec<i64>),
    Floats(Vec<f32>),
    Strings(Vec<String>),
    Tensor(TensorValue),
    /// A control-flow body (If's branches, Loop's and Scan's bodies).
    Graph(Arc<Graph>),
    /// A kind the table has no use for (sparse tensor, type proto...). No lowering reads it,
    /// so a recorded node leaves it out (`ep/src/context.rs`); its description has no
    /// serialized form.
    Other(#[serde(skip)] &'static str),
}

impl AttrValue {
    pub fn kind_name(&self) -> &'static str {
        match self {
            AttrValue::Int(_) => "int",
            AttrValue::Float(_) => "float",
            AttrValue::String(_) => "string",
            AttrValue::Ints(_) => "ints",
            AttrValue::Floats(_) => "floats",
            AttrValue::Strings(_) => "strings",
            AttrValue::Tensor(_) => "tensor",
            AttrValue::Graph(_) => "graph",
            AttrValue::Other(kind) => kind,
        }
    }
}

/// A graph value a node reads or writes: its name and, when it is a tensor (or a sequence of
/// tensors), its element type and (possibly symbolic) shape.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ValueInfo {
    pub name: String,
    /// `None` for other values (maps, optionals) and unknown element types.
    pub elem: Option<ElemType>,
    /// `None` for an unknown rank (and for a sequence); `None` dimensions are symbolic.
    pub shape: Option<Vec<Option<i64>>>,
    /// A sequence of tensors of type `elem` (`seq(tensor)`), not a tensor.
    pub sequence: bool,
    /// An optional (`optional(tensor)` or `optional(seq(tensor))`), which may hold nothing.
    pub optional: bool,
}

impl ValueInfo {
    /// Whether the value is a plain tensor: the only kind that crosses a fused node's edge.
    pub fn is_tensor(&self) -> bool {
        !self.sequence && !self.optional
    }
}

/// A graph held by a node's attribute: its inputs and outputs, its nodes (ORT's order), and
/// its initializers copied to the host. What its nodes read from enclosing scopes is not among
/// its inputs: the node holding it lists those values as its implicit inputs.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Graph {
    pub inputs: Vec<ValueInfo>,
    pub outputs: Vec<ValueInfo>,
    pub nodes: Vec<Node>,
    pub initializers: Vec<(String, TensorValue)>,
}

/// A node as the op table sees it: an owned, ORT-free copy. The EP fills it from ORT's graph
/// (`ep/src/ort/graph.rs`); tests build it by hand with the builder methods below. One type for
/// both, so every claim branch a graph can reach is reachable from a Rust test too.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Node {
    pub name: String,
    pub op_type: String,
    /// `""` for the default ONNX domain.
    pub domain: String,
    /// The opset version of the schema the node was resolved against.
    pub since_version: i64,
    /// Input slots in order; `None` for an absent optional input (empty name).
    pub inputs: Vec<Option<ValueInfo>>,
    /// What the node's bodies (If, Loop, Scan) read from the enclosing scopes (ORT's implicit
    /// inputs): data dependencies like inputs, but no ports. A plan feeds them after the
    /// inputs, and the lowering finds them by name in [`crate::Lower::enclosing`].
    pub implicit_inputs: Vec<ValueInfo>,
    /// Output slots in order; `None` for an absent optional output.
    pub outputs: Vec<Option<ValueInfo>>,
    pub attributes: Vec<(String, AttrValue)>,
}

impl Node {
    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn op_type(&self) -> &str {
        &self.op_type
    }
    /// `""` for the default ONNX domain.
    pub fn domain(&self) -> &str {
        &self.domain
    }
    pub fn since_version(&self) -> i64 {
        self.since_version
    }
    /// Number of input slots, absent optional ones included.
    pub fn input_count(&self) -> usize {
        self.inputs.len()
    }
    /// The element type of input `index`; `None` when the slot is absent or holds something that
    /// is not a tensor of a known element type.
    pub fn input_type(&self, index: usize) -> Option<ElemType> {
        self.inputs.get(index)?.as_ref()?.elem
    }
    /// The kind of input `index`: (a sequence, an optional); (false, false) for a tensor.
    pub fn input_kind(&self, index: usize) -> (bool, bool) {
        self.inputs
            .get(index)
            .and_then(Option::as_ref)
            .map_or((false, false), |v| (v.sequence, v.optional))
    }
    /// The kind of output `index`, as [`Node::input_kind`].
    pub fn output_kind(&self, index: usize) -> (bool, bool) {
        self.outputs
            .get(index)
            .and_then(Option::as_ref)
            .map_or((false, false), |v| (v.sequence, v.optional))
    }
    /// Whether input slot `index` is connected (whatever its type).
    pub fn input_present(&self, index: usize) -> bool {
        self.inputs.get(index).is_some_and(Option::is_some)
    }
    /// The rank of input `index` when the graph declares it.
    pub fn input_rank(&self, index: usize) -> Option<usize> {
        Some(self.inputs.get(index)?.as_ref()?.shape.as_ref()?.len())
    }
    /// The dims of input `index` when the graph declares its shape; `None` dims are symbolic.
    pub fn input_shape(&self, index: usize) -> Option<Vec<Option<i64>>> {
        self.inputs.get(index)?.as_ref()?.shape.clone()
    }
    /// Number of output slots, absent optional ones included.
    pub fn output_count(&self) -> usize {
        self.outputs.len()
    }
    /// The element type of output `index`; `None` when the slot is absent or not a known tensor.
    pub fn output_type(&self, index: usize) -> Option<ElemType> {
        self.outputs.get(index)?.as_ref()?.elem
    }
    /// Whether the ONNX type `code` (a `to`, `dtype` or `output_datatype` attribute) names an
    /// element type, and the one the graph gives output 0. ORT's kernels refuse the others.
    pub fn names_output_type(&self, code: i64) -> bool {
        let named = ElemType::from_code(code);
        named.is_some() && named == self.output_type(0)
    }
    /// Whether output slot `index` is connected (whatever its type).
    pub fn output_present(&self, index: usize) -> bool {
        self.outputs.get(index).is_some_and(Option::is_some)
    }
    /// The dims of output `index` when the graph declares (or ORT inferred) its shape.
    pub fn output_shape(&self, index: usize) -> Option<Vec<Option<i64>>> {
        self.outputs.get(index)?.as_ref()?.shape.clone()
    }
    /// Every value the node reads: its connected inputs, then its implicit inputs.
    pub fn reads(&self) -> impl Iterator<Item = &ValueInfo> {
        self.inputs
            .iter()
            .flatten()
            .chain(&self.implicit_inputs)
            .filter(|v| !v.name.is_empty())
    }
    /// Whether an attribute holds a body (If, Loop, Scan).
    pub fn has_subgraphs(&self) -> bool {
        self.attributes
            .iter()
            .any(|(_, v)| matches!(v, AttrValue::Graph(_)))
    }
    /// The body attribute `name` holds.
    pub fn graph(&self, name: &str) -> Option<&Graph> {
        self.attributes.iter().find_map(|(n, v)| match v {
            AttrValue::Graph(graph) if n == name => Some(graph.as_ref()),
            _ => None,
        })
    }
    pub fn attribute_names(&self) -> Vec<String> {
        self.attributes.iter().map(|(n, _)| n.clone()).collect()
    }
    pub fn attribute(&self, name: &str) -> Option<AttrValue> {
        self.attributes
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    }
    /// Attribute `name` as the Rust type its declaration reads (`i64`, `Vec<i64>`, `f32`,
    /// `String`...); `None` when absent or of another kind. Custom claims run after the generic
    /// claim checked every attribute's kind, so for them `None` means absent.
    pub fn attr_as<T: FromAttr>(&self, name: &str) -> Option<T> {
        self.attributes
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| T::from_attr(v))
    }
    /// Attribute `name`, or `default` when the node does not carry it.
    pub fn attr_or<T: FromAttr>(&self, name: &str, default: T) -> T {
        self.attr_as(name).unwrap_or(default)
    }
}

/// Building nodes by hand (tests, and anything that makes nodes outside a graph).
impl Node {
    pub fn new(op_type: &str, since_version: i64) -> Node {
        Node {
            name: format!("{op_type}_0"),
            op_type: op_type.into(),
            since_version,
            ..Node::default()
        }
    }

    pub fn in_domain(mut self, domain: &str) -> Self {
        self.domain = domain.into();
        self
    }

    pub fn input(mut self, t: ElemType) -> Self {
        let name = format!("input_{}", self.inputs.len());
        self.inputs.push(Some(ValueInfo {
            name,
            elem: Some(t),
            ..ValueInfo::default()
        }));
        self
    }

    pub fn absent_input(mut self) -> Self {
        self.inputs.push(None);
        self
    }

    pub fn output(mut self, t: ElemType) -> Self {
        let name = format!("output_{}", self.outputs.len());
        self.outputs.push(Some(ValueInfo {
            name,
            elem: Some(t),
            ..ValueInfo::default()
        }));
        self
    }

    pub fn attr(mut self, name: &str, value: AttrValue) -> Self {
        self.attributes.push((name.into(), value));
        self
    }

    /// Declares the shape of input `index` (`None` for a symbolic dim); the slot must exist.
    pub fn input_dims(mut self, index: usize, dims: &[Option<i64>]) -> Self {
        if let Some(Some(value)) = self.inputs.get_mut(index) {
            value.shape = Some(dims.to_vec());
        }
        self
    }

    /// Declares the shape of output `index` (`None` for a symbolic dim); the slot must exist.
    pub fn output_dims(mut self, index: usize, dims: &[Option<i64>]) -> Self {
        if let Some(Some(value)) = self.outputs.get_mut(index) {
            value.shape = Some(dims.to_vec());
        }
        self
    }
}
