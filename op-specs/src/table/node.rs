//! What the table may know about a node: an ORT-free view, so claims and lowerings can be
//! tested without ORT, and the EP copies ORT's graph into it.

use super::dtypes::ElemType;

/// A tensor-valued attribute (Constant's and ConstantOfShape's `value`), copied to the host.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorValue {
    pub elem: ElemType,
    pub shape: Vec<i64>,
    /// Row-major, native-endian element bytes.
    pub bytes: Vec<u8>,
}

/// An attribute value, by ONNX attribute kind.
#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    Int(i64),
    Float(f32),
    String(String),
    Ints(Vec<i64>),
    Floats(Vec<f32>),
    Strings(Vec<String>),
    Tensor(TensorValue),
    /// A kind the table has no use for (graph, sparse tensor, type proto...).
    Other(&'static str),
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
            AttrValue::Other(kind) => kind,
        }
    }
}

/// A node as the op table sees it.
pub trait NodeView {
    fn name(&self) -> &str;
    fn op_type(&self) -> &str;
    /// `""` for the default ONNX domain.
    fn domain(&self) -> &str;
    /// The opset version of the schema the node was resolved against.
    fn since_version(&self) -> i64;
    /// Number of input slots, absent optional ones included.
    fn input_count(&self) -> usize;
    /// The element type of input `index`; `None` when the slot is absent (empty name) or holds
    /// something that is not a tensor of a known element type.
    fn input_type(&self, index: usize) -> Option<ElemType>;
    /// Whether input slot `index` is connected (whatever its type).
    fn input_present(&self, index: usize) -> bool {
        self.input_type(index).is_some()
    }
    /// The rank of input `index` when the graph declares it.
    fn input_rank(&self, index: usize) -> Option<usize> {
        self.input_shape(index).map(|dims| dims.len())
    }
    /// The dims of input `index` when the graph declares its shape; `None` dims are symbolic.
    fn input_shape(&self, _index: usize) -> Option<Vec<Option<i64>>> {
        None
    }
    /// The dims of output `index` when the graph declares (or ORT inferred) its shape.
    fn output_shape(&self, _index: usize) -> Option<Vec<Option<i64>>> {
        None
    }
    fn output_count(&self) -> usize;
    /// The element type of output `index`; `None` when the slot is absent or not a known tensor.
    fn output_type(&self, index: usize) -> Option<ElemType>;
    /// Whether output slot `index` is connected (whatever its type).
    fn output_present(&self, index: usize) -> bool {
        self.output_type(index).is_some()
    }
    fn attribute_names(&self) -> Vec<String>;
    fn attribute(&self, name: &str) -> Option<AttrValue>;
}

/// A plain in-memory node: for tests, and for anything that builds nodes by hand.
#[derive(Debug, Clone, Default)]
pub struct SimpleNode {
    pub name: String,
    pub op_type: String,
    pub domain: String,
    pub since_version: i64,
    pub inputs: Vec<Option<ElemType>>,
    pub outputs: Vec<Option<ElemType>>,
    pub attributes: Vec<(String, AttrValue)>,
    /// Declared shapes, by slot: `(input?, index, dims)`.
    pub shapes: Vec<(bool, usize, Vec<Option<i64>>)>,
}

impl SimpleNode {
    pub fn new(op_type: &str, since_version: i64) -> SimpleNode {
        SimpleNode {
            name: format!("{op_type}_0"),
            op_type: op_type.into(),
            since_version,
            ..SimpleNode::default()
        }
    }

    pub fn domain(mut self, domain: &str) -> Self {
        self.domain = domain.into();
        self
    }

    pub fn input(mut self, t: ElemType) -> Self {
        self.inputs.push(Some(t));
        self
    }

    pub fn absent_input(mut self) -> Self {
        self.inputs.push(None);
        self
    }

    pub fn output(mut self, t: ElemType) -> Self {
        self.outputs.push(Some(t));
        self
    }

    pub fn attr(mut self, name: &str, value: AttrValue) -> Self {
        self.attributes.push((name.into(), value));
        self
    }

    /// Declares the shape of input `index` (`None` for a symbolic dim).
    pub fn input_dims(mut self, index: usize, dims: &[Option<i64>]) -> Self {
        self.shapes.push((true, index, dims.to_vec()));
        self
    }

    /// Declares the shape of output `index` (`None` for a symbolic dim).
    pub fn output_dims(mut self, index: usize, dims: &[Option<i64>]) -> Self {
        self.shapes.push((false, index, dims.to_vec()));
        self
    }

    fn declared(&self, input: bool, index: usize) -> Option<Vec<Option<i64>>> {
        self.shapes
            .iter()
            .find(|(i, at, _)| *i == input && *at == index)
            .map(|(_, _, dims)| dims.clone())
    }
}

impl NodeView for SimpleNode {
    fn name(&self) -> &str {
        &self.name
    }
    fn op_type(&self) -> &str {
        &self.op_type
    }
    fn domain(&self) -> &str {
        &self.domain
    }
    fn since_version(&self) -> i64 {
        self.since_version
    }
    fn input_count(&self) -> usize {
        self.inputs.len()
    }
    fn input_type(&self, index: usize) -> Option<ElemType> {
        self.inputs.get(index).copied().flatten()
    }
    fn input_shape(&self, index: usize) -> Option<Vec<Option<i64>>> {
        self.declared(true, index)
    }
    fn output_shape(&self, index: usize) -> Option<Vec<Option<i64>>> {
        self.declared(false, index)
    }
    fn output_count(&self) -> usize {
        self.outputs.len()
    }
    fn output_type(&self, index: usize) -> Option<ElemType> {
        self.outputs.get(index).copied().flatten()
    }
    fn attribute_names(&self) -> Vec<String> {
        self.attributes.iter().map(|(n, _)| n.clone()).collect()
    }
    fn attribute(&self, name: &str) -> Option<AttrValue> {
        self.attributes
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    }
}
