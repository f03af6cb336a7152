//! Owned copies of ORT's graph objects. ORT's `OrtGraph`/`OrtNode` live only during
//! `GetCapability` and `Compile`; everything the EP keeps is copied into these types.

use std::ptr;
use std::sync::Arc;

use op_specs::{AttrValue, ElemType, Graph, Node, ValueInfo};

use super::api::{call, check, owned_str};
use super::sys;

/// For each node, the indices of the nodes whose outputs it reads (each once).
pub fn predecessors(nodes: &[Node]) -> Vec<Vec<usize>> {
    let producer: std::collections::HashMap<&str, usize> = nodes
        .iter()
        .enumerate()
        .flat_map(|(i, n)| {
            n.outputs
                .iter()
                .flatten()
                .map(move |v| (v.name.as_str(), i))
        })
        .collect();
    nodes
        .iter()
        .map(|n| {
            let mut preds: Vec<usize> = n
                .reads()
                .filter_map(|v| producer.get(v.name.as_str()).copied())
                .collect();
            preds.sort_unstable();
            preds.dedup();
            preds
        })
        .collect()
}

/// The nodes of `graph`, in ORT's order, each paired with its ORT handle (valid only for the
/// duration of the current `GetCapability`/`Compile` call).
pub fn nodes(graph: *const sys::OrtGraph) -> Result<Vec<(Node, *const sys::OrtNode)>, String> {
    let mut count = 0usize;
    // SAFETY: `graph` is the live graph ORT passed to the current call.
    check(unsafe { call!(api.Graph_GetNumNodes(graph, &mut count)) })?;
    let mut handles = vec![ptr::null(); count];
    // SAFETY: `handles` has room for `count` node pointers.
    check(unsafe { call!(api.Graph_GetNodes(graph, handles.as_mut_ptr(), count)) })?;
    handles
        .into_iter()
        .map(|h| read_node(h).map(|n| (n, h)))
        .collect()
}

/// Whether `graph` is the body of a control-flow node (If, Loop, Scan).
pub fn is_subgraph(graph: *const sys::OrtGraph) -> Result<bool, String> {
    let mut parent = ptr::null();
    // SAFETY: `graph` is live for the current call; `parent` may come back null.
    check(unsafe { call!(api.Graph_GetParentNode(graph, &mut parent)) })?;
    Ok(!parent.is_null())
}

/// The value infos of `graph`'s initializers, by name, with the tensors ORT holds for them.
pub fn initializers(
    graph: *const sys::OrtGraph,
) -> Result<Vec<(String, *const sys::OrtValue)>, String> {
    let mut count = 0usize;
    // SAFETY: `graph` is live for the current call.
    check(unsafe { call!(api.Graph_GetNumInitializers(graph, &mut count)) })?;
    let mut infos = vec![ptr::null(); count];
    // SAFETY: `infos` has room for `count` entries.
    check(unsafe { call!(api.Graph_GetInitializers(graph, infos.as_mut_ptr(), count)) })?;
    infos
        .into_iter()
        .map(|info| {
            let name = value_name(info)?;
            let mut value = ptr::null();
            // SAFETY: `info` is a live initializer value info; ORT keeps the value alive for
            // the current call.
            check(unsafe { call!(api.ValueInfo_GetInitializerValue(info, &mut value)) })?;
            Ok((name, value))
        })
        .collect()
}

/// Copies one node (also used for the fused node ORT hands to `Compile`).
pub fn read_node(node: *const sys::OrtNode) -> Result<Node, String> {
    let mut name = ptr::null();
    let mut op_type = ptr::null();
    let mut domain = ptr::null();
    let mut since = 0i32;
    // SAFETY: `node` is live for the current call; out-parameters are valid.
    unsafe {
        check(call!(api.Node_GetName(node, &mut name)))?;
        check(call!(api.Node_GetOperatorType(node, &mut op_type)))?;
        check(call!(api.Node_GetDomain(node, &mut domain)))?;
        check(call!(api.Node_GetSinceVersion(node, &mut since)))?;
    }
    // SAFETY: ORT's strings are valid for the current call; we copy them.
    let (name, op_type, domain) =
        unsafe { (owned_str(name), owned_str(op_type), owned_str(domain)) };
    let implicit_inputs = values(node, Direction::ImplicitInputs)?
        .into_iter()
        .flatten()
        .collect();
    let mut attributes = attributes(node)?;
    for (attribute, body) in subgraphs(node)? {
        match attributes.iter_mut().find(|(n, _)| *n == attribute) {
            Some((_, value)) => *value = body,
            None => attributes.push((attribute, body)),
        }
    }
    Ok(Node {
        name,
        op_type,
        domain,
        since_version: i64::from(since),
        inputs: values(node, Direction::Inputs)?,
        implicit_inputs,
        outputs: values(node, Direction::Outputs)?,
        attributes,
    })
}

/// The node's bodies by attribute name, each copied whole (a body with an initializer MLX
/// cannot hold reads as an attribute of another kind, so no claim accepts it).
fn subgraphs(node: *const sys::OrtNode) -> Result<Vec<(String, AttrValue)>, String> {
    let mut count = 0usize;
    // SAFETY: `node` is live; `count` is a valid out-parameter.
    check(unsafe { call!(api.Node_GetNumSubgraphs(node, &mut count)) })?;
    if count == 0 {
        return Ok(Vec::new());
    }
    let mut graphs = vec![ptr::null(); count];
    let mut names = vec![ptr::null(); count];
    // SAFETY: both buffers have room for `count` entries.
    check(unsafe {
        call!(api.Node_GetSubgraphs(node, graphs.as_mut_ptr(), count, names.as_mut_ptr()))
    })?;
    graphs
        .into_iter()
        .zip(names)
        .map(|(graph, name)| {
            // SAFETY: ORT's attribute names are valid for the current call; copied.
            let name = unsafe { owned_str(name) };
            let body = match read_graph(graph)? {
                Some(body) => AttrValue::Graph(Arc::new(body)),
                None => AttrValue::Other("graph with an initializer MLX cannot hold"),
            };
            Ok((name, body))
        })
        .collect()
}

/// Copies a body: its inputs, outputs, nodes (with their own bodies) and initializers; `None`
/// when an initializer is of a type MLX cannot hold.
fn read_graph(graph: *const sys::OrtGraph) -> Result<Option<Graph>, String> {
    let nodes = nodes(graph)?.into_iter().map(|(node, _)| node).collect();
    let mut copied = Vec::new();
    for (name, value) in initializers(graph)? {
        // SAFETY: ORT keeps the initializer's value alive for the current call.
        match unsafe { super::kernel::tensor(value) } {
            Ok(t) => copied.push((
                name,
                op_specs::TensorValue {
                    elem: t.elem,
                    shape: t.shape,
                    bytes: t.bytes.to_vec(),
                },
            )),
            Err(_) => return Ok(None),
        }
    }
    Ok(Some(Graph {
        inputs: graph_values(graph, Direction::Inputs)?,
        outputs: graph_values(graph, Direction::Outputs)?,
        nodes,
        initializers: copied,
    }))
}

/// The names of a graph's outputs.
pub fn output_names(graph: *const sys::OrtGraph) -> Result<Vec<String>, String> {
    Ok(graph_values(graph, Direction::Outputs)?
        .into_iter()
        .map(|v| v.name)
        .collect())
}

/// A graph's inputs or outputs.
fn graph_values(
    graph: *const sys::OrtGraph,
    direction: Direction,
) -> Result<Vec<ValueInfo>, String> {
    let mut count = 0usize;
    // SAFETY: `graph` is live; `count` is a valid out-parameter.
    check(unsafe {
        match direction {
            Direction::Outputs => call!(api.Graph_GetNumOutputs(graph, &mut count)),
            _ => call!(api.Graph_GetNumInputs(graph, &mut count)),
        }
    })?;
    let mut infos = vec![ptr::null(); count];
    // SAFETY: `infos` has room for `count` entries.
    check(unsafe {
        match direction {
            Direction::Outputs => call!(api.Graph_GetOutputs(graph, infos.as_mut_ptr(), count)),
            _ => call!(api.Graph_GetInputs(graph, infos.as_mut_ptr(), count)),
        }
    })?;
    infos.into_iter().map(value_ref).collect()
}

enum Direction {
    Inputs,
    ImplicitInputs,
    Outputs,
}

fn values(
    node: *const sys::OrtNode,
    direction: Direction,
) -> Result<Vec<Option<ValueInfo>>, String> {
    let mut count = 0usize;
    // SAFETY: `node` is live; `count` is a valid out-parameter.
    check(unsafe {
        match direction {
            Direction::Inputs => call!(api.Node_GetNumInputs(node, &mut count)),
            Direction::ImplicitInputs => call!(api.Node_GetNumImplicitInputs(node, &mut count)),
            Direction::Outputs => call!(api.Node_GetNumOutputs(node, &mut count)),
        }
    })?;
    let mut infos = vec![ptr::null(); count];
    // SAFETY: `infos` has room for `count` entries; absent optional slots come back null.
    check(unsafe {
        match direction {
            Direction::Inputs => call!(api.Node_GetInputs(node, infos.as_mut_ptr(), count)),
            Direction::ImplicitInputs => {
                call!(api.Node_GetImplicitInputs(node, infos.as_mut_ptr(), count))
            }
            Direction::Outputs => call!(api.Node_GetOutputs(node, infos.as_mut_ptr(), count)),
        }
    })?;
    infos
        .into_iter()
        .map(|info| {
            if info.is_null() {
                Ok(None)
            } else {
                value_ref(info).map(Some)
            }
        })
        .collect()
}

pub fn value_name(info: *const sys::OrtValueInfo) -> Result<String, String> {
    let mut name = ptr::null();
    // SAFETY: `info` is live for the current call.
    check(unsafe { call!(api.GetValueInfoName(info, &mut name)) })?;
    // SAFETY: valid for the current call; copied.
    Ok(unsafe { owned_str(name) })
}

pub fn value_ref(info: *const sys::OrtValueInfo) -> Result<ValueInfo, String> {
    let name = value_name(info)?;
    let mut type_info = ptr::null();
    // SAFETY: `info` is live; the type info it returns is owned by `info`.
    check(unsafe { call!(api.GetValueInfoTypeInfo(info, &mut type_info)) })?;
    let mut onnx_type = sys::ONNXType::ONNX_TYPE_UNKNOWN;
    // SAFETY: `type_info` is live.
    check(unsafe { call!(api.GetOnnxTypeFromTypeInfo(type_info, &mut onnx_type)) })?;
    if onnx_type == sys::ONNXType::ONNX_TYPE_SEQUENCE {
        return sequence_ref(name, type_info);
    }
    if onnx_type == sys::ONNXType::ONNX_TYPE_OPTIONAL {
        return optional_ref(name, type_info);
    }
    if onnx_type != sys::ONNXType::ONNX_TYPE_TENSOR {
        return Ok(ValueInfo {
            name,
            ..ValueInfo::default()
        });
    }
    let mut tensor = ptr::null();
    // SAFETY: a tensor type info casts to its tensor info (owned by the type info).
    check(unsafe { call!(api.CastTypeInfoToTensorInfo(type_info, &mut tensor)) })?;
    let (elem, shape) = tensor_type_and_shape(tensor)?;
    // A value of unknown rank reads as rank 0: only `HasShape` tells it from a scalar.
    // SAFETY: `tensor` is live for the current call.
    let has_shape = unsafe { call!(api.TensorTypeAndShape_HasShape(tensor)) };
    Ok(ValueInfo {
        name,
        elem,
        shape: has_shape.then_some(shape),
        ..ValueInfo::default()
    })
}

/// An optional value: of a tensor or of a sequence of tensors (else of no known type).
fn optional_ref(name: String, type_info: *const sys::OrtTypeInfo) -> Result<ValueInfo, String> {
    let mut optional = ptr::null();
    // SAFETY: an optional type info casts to its optional info (owned by the type info).
    check(unsafe { call!(api.CastTypeInfoToOptionalTypeInfo(type_info, &mut optional)) })?;
    let mut contained = ptr::null_mut();
    // SAFETY: `optional` is live; on success `contained` is a new type info we release below.
    check(unsafe { call!(api.GetOptionalContainedTypeInfo(optional, &mut contained)) })?;
    let inner = (|| {
        let mut onnx_type = sys::ONNXType::ONNX_TYPE_UNKNOWN;
        // SAFETY: `contained` is live until released below.
        check(unsafe { call!(api.GetOnnxTypeFromTypeInfo(contained, &mut onnx_type)) })?;
        match onnx_type {
            sys::ONNXType::ONNX_TYPE_SEQUENCE => sequence_ref(name.clone(), contained),
            sys::ONNXType::ONNX_TYPE_TENSOR => {
                let mut tensor = ptr::null();
                // SAFETY: a tensor type info casts to its tensor info (owned by `contained`).
                check(unsafe { call!(api.CastTypeInfoToTensorInfo(contained, &mut tensor)) })?;
                Ok(ValueInfo {
                    name: name.clone(),
                    elem: tensor_type_and_shape(tensor)?.0,
                    ..ValueInfo::default()
                })
            }
            _ => Ok(ValueInfo {
                name: name.clone(),
                ..ValueInfo::default()
            }),
        }
    })();
    // SAFETY: releasing the contained type info we own, once.
    unsafe { call!(api.ReleaseTypeInfo(contained)) };
    Ok(ValueInfo {
        optional: true,
        ..inner?
    })
}

/// A sequence value: of tensors (their element type), or of anything else (no type).
fn sequence_ref(name: String, type_info: *const sys::OrtTypeInfo) -> Result<ValueInfo, String> {
    let mut sequence = ptr::null();
    // SAFETY: a sequence type info casts to its sequence info (owned by the type info).
    check(unsafe { call!(api.CastTypeInfoToSequenceTypeInfo(type_info, &mut sequence)) })?;
    let mut element = ptr::null_mut();
    // SAFETY: `sequence` is live; on success `element` is a new type info we release below.
    check(unsafe { call!(api.GetSequenceElementType(sequence, &mut element)) })?;
    let elem = (|| {
        let mut onnx_type = sys::ONNXType::ONNX_TYPE_UNKNOWN;
        // SAFETY: `element` is live until released below.
        check(unsafe { call!(api.GetOnnxTypeFromTypeInfo(element, &mut onnx_type)) })?;
        if onnx_type != sys::ONNXType::ONNX_TYPE_TENSOR {
            return Ok(None);
        }
        let mut tensor = ptr::null();
        // SAFETY: a tensor type info casts to its tensor info (owned by `element`).
        check(unsafe { call!(api.CastTypeInfoToTensorInfo(element, &mut tensor)) })?;
        Ok::<_, String>(tensor_type_and_shape(tensor)?.0)
    })();
    // SAFETY: releasing the element type info we own, once.
    unsafe { call!(api.ReleaseTypeInfo(element)) };
    Ok(ValueInfo {
        name,
        elem: elem?,
        sequence: true,
        ..ValueInfo::default()
    })
}

/// Element type and shape (symbolic dims as `None`) of a tensor type-and-shape info.
pub fn tensor_type_and_shape(
    info: *const sys::OrtTensorTypeAndShapeInfo,
) -> Result<(Option<ElemType>, Vec<Option<i64>>), String> {
    let mut elem = sys::ONNXTensorElementDataType::ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
    let mut rank = 0usize;
    // SAFETY: `info` is live; out-parameters are valid.
    unsafe {
        check(call!(api.GetTensorElementType(info, &mut elem)))?;
        check(call!(api.GetDimensionsCount(info, &mut rank)))?;
    }
    let mut dims = vec![0i64; rank];
    // SAFETY: `dims` has room for `rank` values.
    check(unsafe { call!(api.GetDimensions(info, dims.as_mut_ptr(), rank)) })?;
    let shape = dims.into_iter().map(|d| (d >= 0).then_some(d)).collect();
    Ok((ElemType::from_code(elem as i64), shape))
}

fn attributes(node: *const sys::OrtNode) -> Result<Vec<(String, AttrValue)>, String> {
    let mut count = 0usize;
    // SAFETY: `node` is live.
    check(unsafe { call!(api.Node_GetNumAttributes(node, &mut count)) })?;
    let mut handles = vec![ptr::null(); count];
    // SAFETY: `handles` has room for `count` attributes.
    check(unsafe { call!(api.Node_GetAttributes(node, handles.as_mut_ptr(), count)) })?;
    handles
        .into_iter()
        .map(|attr| {
            let mut name = ptr::null();
            let mut kind = sys::OrtOpAttrType::ORT_OP_ATTR_UNDEFINED;
            // SAFETY: `attr` is live for the current call.
            check(unsafe { call!(api.OpAttr_GetName(attr, &mut name)) })?;
            // SAFETY: copied while valid.
            let name = unsafe { owned_str(name) };
            // ORT cannot describe some kinds (type protos, sparse tensors): such an attribute
            // makes the node unclaimable, not the graph unreadable.
            // SAFETY: `attr` is live for the current call.
            let value = match check(unsafe { call!(api.OpAttr_GetType(attr, &mut kind)) }) {
                Ok(()) => read_attribute(attr, kind).unwrap_or(AttrValue::Other("unreadable")),
                Err(_) => AttrValue::Other("of a kind ORT cannot describe"),
            };
            Ok((name, value))
        })
        .collect()
}

fn read_attribute(
    attr: *const sys::OrtOpAttr,
    kind: sys::OrtOpAttrType,
) -> Result<AttrValue, String> {
    use sys::OrtOpAttrType as K;
    Ok(match kind {
        K::ORT_OP_ATTR_INT => AttrValue::Int(read_scalar::<i64>(attr, kind)?),
        K::ORT_OP_ATTR_FLOAT => AttrValue::Float(read_scalar::<f32>(attr, kind)?),
        K::ORT_OP_ATTR_INTS => AttrValue::Ints(read_vec::<i64>(attr, kind)?),
        K::ORT_OP_ATTR_FLOATS => AttrValue::Floats(read_vec::<f32>(attr, kind)?),
        K::ORT_OP_ATTR_STRING => {
            AttrValue::String(String::from_utf8_lossy(&read_vec::<u8>(attr, kind)?).into_owned())
        }
        K::ORT_OP_ATTR_STRINGS => AttrValue::Strings(split_strings(&read_vec::<u8>(attr, kind)?)),
        K::ORT_OP_ATTR_GRAPH => AttrValue::Other("graph"),
        K::ORT_OP_ATTR_TENSOR => tensor_attribute(attr)?,
        K::ORT_OP_ATTR_UNDEFINED => AttrValue::Other("undefined"),
    })
}

/// ORT writes a strings attribute as one buffer, each string followed by a NUL.
fn split_strings(bytes: &[u8]) -> Vec<String> {
    if bytes.is_empty() {
        return Vec::new();
    }
    let body = bytes.strip_suffix(&[0]).unwrap_or(bytes);
    body.split(|&b| b == 0)
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

/// A tensor attribute, copied to the host (ORT hands over a new OrtValue we release).
fn tensor_attribute(attr: *const sys::OrtOpAttr) -> Result<AttrValue, String> {
    let mut value = ptr::null_mut();
    // SAFETY: `attr` is live; on success `value` is a new OrtValue we own.
    check(unsafe { call!(api.OpAttr_GetTensorAttributeAsOrtValue(attr, &mut value)) })?;
    if value.is_null() {
        return Ok(AttrValue::Other("empty tensor"));
    }
    // SAFETY: `value` is a live tensor, read before it is released below.
    let copied = unsafe { super::kernel::tensor(value) }.map(|t| op_specs::TensorValue {
        elem: t.elem,
        shape: t.shape,
        bytes: t.bytes.to_vec(),
    });
    // SAFETY: releasing the value we own, once.
    unsafe { call!(api.ReleaseValue(value)) };
    Ok(copied
        .map(AttrValue::Tensor)
        .unwrap_or(AttrValue::Other("tensor of a type MLX cannot hold")))
}

fn read_scalar<T: Copy + Default>(
    attr: *const sys::OrtOpAttr,
    kind: sys::OrtOpAttrType,
) -> Result<T, String> {
    let mut value = T::default();
    let mut written = 0usize;
    // SAFETY: `value` provides size_of::<T>() writable bytes.
    check(unsafe {
        call!(api.ReadOpAttr(
            attr,
            kind,
            (&mut value as *mut T).cast(),
            std::mem::size_of::<T>(),
            &mut written
        ))
    })?;
    Ok(value)
}

/// Reads a list attribute: ORT reports the byte size it needs when asked with no buffer.
fn read_vec<T: Copy + Default>(
    attr: *const sys::OrtOpAttr,
    kind: sys::OrtOpAttrType,
) -> Result<Vec<T>, String> {
    let mut needed = 0usize;
    // SAFETY: a zero-length query; ORT writes the size it needs (and reports "too small").
    let _ = check(unsafe { call!(api.ReadOpAttr(attr, kind, ptr::null_mut(), 0, &mut needed)) });
    let item = std::mem::size_of::<T>();
    let mut values = vec![T::default(); needed.div_ceil(item)];
    if needed == 0 {
        return Ok(values);
    }
    let mut written = 0usize;
    // SAFETY: `values` provides at least `needed` writable bytes.
    check(unsafe {
        call!(api.ReadOpAttr(
            attr,
            kind,
            values.as_mut_ptr().cast(),
            values.len() * item,
            &mut written
        ))
    })?;
    values.truncate(written / item);
    Ok(values)
}

#[cfg(test)]
mod tests {
    use super::split_strings;

    #[test]
    fn strings_attributes_split_at_their_terminators() {
        assert_eq!(split_strings(b""), Vec::<String>::new());
        assert_eq!(split_strings(b"Sigmoid\0Tanh\0"), ["Sigmoid", "Tanh"]);
        assert_eq!(split_strings(b"\0Tanh\0"), ["", "Tanh"]);
        assert_eq!(split_strings(b"\0"), [""]);
    }
}
