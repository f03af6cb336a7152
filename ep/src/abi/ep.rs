//! The `OrtEp` vtable: claim nodes (GetCapability), build plans (Compile), release them.

use std::ffi::{c_char, CStr, CString};
use std::sync::{Arc, Mutex};

use super::compute::ComputeInfo;
use crate::capability::{analyse, with_restored};
use crate::context::{self, ContextSettings, Record};
use crate::device::Device;
use crate::diagnostics::{report_capability, Flags, Stats};
use crate::narrow;
use crate::options::Options;
use crate::ort::api::{call, check, guard};
use crate::ort::editor::{self, NewAttr};
use crate::ort::graph;
use crate::ort::kernel;
use crate::ort::sys;
use crate::plan::{HostConstant, Plan};
use crate::trace::Trace;
use op_specs::Node;

/// `base` first, so ORT's `OrtEp*` is also a pointer to the whole struct.
#[repr(C)]
pub struct MlxEp {
    base: sys::OrtEp,
    name: CString,
    flags: Flags,
    stats: Arc<Mutex<Stats>>,
    /// The session's settings (options over the environment), checked at creation.
    options: Arc<Options>,
    /// The session's trace, written when the EP is released (the `trace` setting).
    trace: Option<Arc<Trace>>,
    /// Whether ORT asked for a compiled model (EPContext nodes out of `Compile`).
    context: ContextSettings,
}

impl MlxEp {
    pub fn create(name: &CStr, options: Options, context: ContextSettings) -> *mut sys::OrtEp {
        let ep = Box::new(MlxEp {
            base: sys::OrtEp {
                ort_version_supported: sys::ORT_API_VERSION,
                GetName: Some(get_name),
                GetCapability: Some(get_capability),
                Compile: Some(compile),
                ReleaseNodeComputeInfos: Some(release_node_compute_infos),
                ..Default::default()
            },
            name: name.to_owned(),
            flags: Flags::of(&options),
            stats: Arc::new(Mutex::new(Stats {
                device: Device::of(&options).describe(),
                ..Stats::default()
            })),
            trace: options.text("trace").map(|path| Trace::to(path.into())),
            options: Arc::new(options),
            context,
        });
        Box::into_raw(ep).cast()
    }

    /// # Safety
    /// `ep` must come from `create`, released once.
    pub unsafe fn destroy(ep: *mut sys::OrtEp) {
        if ep.is_null() {
            return;
        }
        // SAFETY: per the contract, this is the Box made in `create`.
        let ep = unsafe { Box::from_raw(ep.cast::<MlxEp>()) };
        if let Some(trace) = &ep.trace {
            if let Err(e) = trace.write() {
                eprintln!("MLXExecutionProvider: {e}");
            }
        }
        if ep.flags.verbose {
            if let Ok(mut stats) = ep.stats.lock() {
                stats.kernel_builds = mlx_kernels::custom::cuda_builds();
                eprintln!("{}", stats.summary());
            }
        }
    }

    /// # Safety
    /// `this` must be an EP made by `create`.
    unsafe fn from<'a>(this: *const sys::OrtEp) -> &'a MlxEp {
        // SAFETY: `base` is the first field of the repr(C) MlxEp.
        unsafe { &*this.cast::<MlxEp>() }
    }
}

unsafe extern "C" fn get_name(this: *const sys::OrtEp) -> *const c_char {
    // SAFETY: ORT passes our EP.
    unsafe { MlxEp::from(this) }.name.as_ptr()
}

unsafe extern "C" fn get_capability(
    this: *mut sys::OrtEp,
    graph: *const sys::OrtGraph,
    support: *mut sys::OrtEpGraphSupportInfo,
) -> sys::OrtStatusPtr {
    guard("GetCapability", || {
        // SAFETY: ORT passes our EP.
        let ep = unsafe { MlxEp::from(this) };
        if graph::is_subgraph(graph)? {
            // ORT cannot host a plugin EP's fused nodes inside a control-flow body (the body's
            // opset imports do not know the EP's domain). A body runs on MLX as part of its
            // If/Loop/Scan, which the table claims whole in the enclosing graph; whether it
            // does, and why not, is that node's record.
            return Ok(());
        }
        let (nodes, handles): (Vec<Node>, Vec<*const sys::OrtNode>) =
            graph::nodes(graph)?.into_iter().unzip();
        // A compiled model's own EPContext nodes were claimed when it was compiled.
        let restored: Vec<usize> = if ep.options.flag("disable") {
            Vec::new()
        } else {
            let name = ep.name.to_str().map_err(|e| e.to_string())?;
            (0..nodes.len())
                .filter(|&i| context::is_own(&nodes[i], name))
                .collect()
        };
        let capability = with_restored(
            analyse(&nodes, &graph::output_names(graph)?, &ep.options),
            &restored,
        );
        report_capability(&ep.flags, &nodes, &capability);
        if let Ok(mut stats) = ep.stats.lock() {
            // ORT may ask about the same graph more than once; the last answer is the one used.
            stats.nodes_total = nodes.len();
            stats.nodes_claimed = capability.decisions.iter().filter(|d| d.claimed).count();
            stats.clusters = capability.clusters.len();
        }
        // We keep our own copy of constant initializers, so ORT need not feed them each run.
        // A compiled model is the exception: ORT writes only the initializers a fused node
        // reads, so there the fused nodes (and their EPContext nodes) read them.
        let options = sys::OrtNodeFusionOptions {
            ort_version_supported: sys::ORT_API_VERSION,
            drop_constant_initializers: !ep.context.enable,
        };
        for cluster in &capability.clusters {
            let members: Vec<*const sys::OrtNode> = cluster.iter().map(|&i| handles[i]).collect();
            // SAFETY: the node handles belong to `graph`, live for this call.
            check(unsafe {
                call!(ep.EpGraphSupportInfo_AddNodesToFuse(
                    support,
                    members.as_ptr(),
                    members.len(),
                    &options
                ))
            })?;
        }
        Ok(())
    })
}

unsafe extern "C" fn compile(
    this: *mut sys::OrtEp,
    graphs: *mut *const sys::OrtGraph,
    fused_nodes: *mut *const sys::OrtNode,
    count: usize,
    compute_infos: *mut *mut sys::OrtNodeComputeInfo,
    ep_context_nodes: *mut *mut sys::OrtNode,
) -> sys::OrtStatusPtr {
    guard("Compile", || {
        // SAFETY: ORT passes our EP and `count` graphs, fused nodes and output slots.
        let (ep, graphs, fused, infos) = unsafe {
            (
                MlxEp::from(this),
                std::slice::from_raw_parts(graphs, count),
                std::slice::from_raw_parts(fused_nodes, count),
                std::slice::from_raw_parts_mut(compute_infos, count),
            )
        };
        let mut built = Vec::with_capacity(count);
        let mut records = Vec::new();
        for (&graph, &node) in graphs.iter().zip(fused) {
            let partition = read_partition(graph, node, &ep.name)
                .map_err(|e| format!("cannot compile a fused subgraph: {e}"))?;
            if ep.context.enable {
                if partition.restored {
                    return Err(format!(
                        "'{}' is an EPContext node of a compiled model: compile the model's \
                         source instead (a compiled model cannot be compiled again)",
                        partition.name
                    ));
                }
                records.push(Record::new(
                    partition.inputs.clone(),
                    partition.outputs.clone(),
                    &partition.nodes,
                ));
            }
            built.push(
                Plan::build(
                    partition.name,
                    partition.nodes,
                    &partition.inputs,
                    &partition.outputs,
                    partition.constants,
                )
                .map_err(|e| format!("cannot compile a fused subgraph: {e}"))?
                .in_precision(ep.options.half_precision()),
            );
        }
        if ep.context.enable {
            if ep_context_nodes.is_null() {
                return Err("ORT asked for a compiled model but gave no EPContext slots".into());
            }
            let nodes = context_nodes(ep, fused, &records)?;
            // SAFETY: with EPContext generation on, ORT passes `count` slots for our nodes.
            let slots = unsafe { std::slice::from_raw_parts_mut(ep_context_nodes, count) };
            slots.copy_from_slice(&nodes);
        }
        if let Ok(mut stats) = ep.stats.lock() {
            stats.plans += built.len();
        }
        for (slot, plan) in infos.iter_mut().zip(built) {
            *slot = ComputeInfo::create(
                plan,
                Arc::clone(&ep.stats),
                Arc::clone(&ep.options),
                ep.trace.clone(),
            );
        }
        Ok(())
    })
}

/// What one fused node holds: its claimed nodes, the values ORT feeds it, the values it
/// produces, and the constants it reads (copied from ORT's initializers).
struct Partition {
    name: String,
    nodes: Vec<Node>,
    inputs: Vec<String>,
    outputs: Vec<(String, Option<op_specs::ElemType>)>,
    constants: Vec<HostConstant>,
    /// Read from an EPContext node's record rather than from ORT's graph.
    restored: bool,
}

/// The partition ORT fused, read from its graph, or from the record of an EPContext node this
/// EP wrote into a compiled model.
fn read_partition(
    graph: *const sys::OrtGraph,
    fused_node: *const sys::OrtNode,
    ep_name: &CStr,
) -> Result<Partition, String> {
    let fused = graph::read_node(fused_node)?;
    let mut nodes: Vec<Node> = graph::nodes(graph)?.into_iter().map(|(n, _)| n).collect();
    let constants = host_constants(graph)?;
    if let Some(value) = fused.implicit_inputs.first() {
        return Err(format!(
            "ORT gave the fused node an implicit input ('{}'), which its kernel cannot read",
            value.name
        ));
    }
    let inputs: Vec<String> = fused
        .inputs
        .iter()
        .map(|v| v.as_ref().map_or(String::new(), |v| v.name.clone()))
        .collect();
    let outputs: Vec<(String, Option<op_specs::ElemType>)> = fused
        .outputs
        .iter()
        .flatten()
        .map(|v| (v.name.clone(), v.elem))
        .collect();
    let ep_name = ep_name.to_str().map_err(|e| e.to_string())?;
    let mut partition = Partition {
        name: fused.name,
        nodes: Vec::new(),
        inputs,
        outputs,
        constants,
        restored: false,
    };
    match nodes.as_slice() {
        [node] if context::is_own(node, ep_name) => restore(&mut partition, node)?,
        _ => partition.nodes = std::mem::take(&mut nodes),
    }
    Ok(partition)
}

/// Fills `partition` from the record of `node`, an EPContext node this EP wrote.
fn restore(partition: &mut Partition, node: &Node) -> Result<(), String> {
    let outputs: Vec<&str> = partition.outputs.iter().map(|(n, _)| n.as_str()).collect();
    let restored = context::record_of(node)?.restore(
        node,
        &outputs,
        &partition.inputs,
        std::mem::take(&mut partition.constants),
    )?;
    partition.nodes = restored.nodes;
    partition.inputs = restored.inputs;
    partition.constants = restored.constants;
    partition.restored = true;
    Ok(())
}

/// The fused graph's initializers, copied to the host (narrow types decoded into carriers).
fn host_constants(graph: *const sys::OrtGraph) -> Result<Vec<HostConstant>, String> {
    graph::initializers(graph)?
        .into_iter()
        .map(|(name, value)| {
            if value.is_null() {
                return Err(format!("initializer '{name}' has no data in memory"));
            }
            // SAFETY: ORT keeps initializer values alive during Compile; we copy the bytes now.
            let tensor = unsafe { kernel::tensor(value) }
                .map_err(|e| format!("initializer '{name}': {e}"))?;
            if tensor.elem.is_narrow() {
                // Decoded once, here: the plan keeps the carrier (int4 weights as int8).
                let (elem, bytes) =
                    narrow::constant_in_carrier(tensor.elem, &tensor.shape, tensor.bytes)
                        .map_err(|e| format!("initializer '{name}': {e}"))?;
                return Ok(HostConstant {
                    name,
                    elem,
                    shape: tensor.shape,
                    bytes,
                });
            }
            Ok(HostConstant {
                name,
                elem: tensor.elem,
                shape: tensor.shape,
                bytes: tensor.bytes.to_vec(),
            })
        })
        .collect()
}

/// The EPContext nodes that stand for `fused_nodes` in a compiled model, each reading what its
/// fused node reads (constants among them, see `get_capability`). All or none: the nodes made
/// before a failure are released, since ORT takes only what `Compile` returns on success.
fn context_nodes(
    ep: &MlxEp,
    fused_nodes: &[*const sys::OrtNode],
    records: &[Record],
) -> Result<Vec<*mut sys::OrtNode>, String> {
    let source = ep.name.to_str().map_err(|e| e.to_string())?;
    let mut made = Vec::with_capacity(records.len());
    for (&fused_node, record) in fused_nodes.iter().zip(records) {
        let node = graph::read_node(fused_node).and_then(|fused| {
            let outputs: Vec<String> = record.outputs.iter().map(|(n, _)| n.clone()).collect();
            editor::create_node(
                context::OP_TYPE,
                context::DOMAIN,
                &fused.name,
                &record.inputs,
                &outputs,
                &[
                    ("main_context", NewAttr::Int(1)),
                    ("embed_mode", NewAttr::Int(1)),
                    ("ep_cache_context", NewAttr::Str(&record.encode()?)),
                    ("ep_sdk_version", NewAttr::Str(context::LIBRARY_VERSION)),
                    ("partition_name", NewAttr::Str(&fused.name)),
                    ("source", NewAttr::Str(source)),
                ],
            )
        });
        match node {
            Ok(node) => made.push(node),
            Err(e) => {
                made.into_iter().for_each(editor::release_node);
                return Err(format!("cannot write an EPContext node: {e}"));
            }
        }
    }
    Ok(made)
}

unsafe extern "C" fn release_node_compute_infos(
    _this: *mut sys::OrtEp,
    infos: *mut *mut sys::OrtNodeComputeInfo,
    count: usize,
) {
    crate::ort::api::guard_void("ReleaseNodeComputeInfos", || {
        // SAFETY: ORT passes the `count` infos our Compile made.
        let infos = unsafe { std::slice::from_raw_parts(infos, count) };
        for &info in infos {
            // SAFETY: each was made by ComputeInfo::create and is released once.
            unsafe { ComputeInfo::destroy(info) };
        }
    })
}
