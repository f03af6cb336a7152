//! What the EP takes from a graph: the table's decision for each node, then the clusters.

use op_specs::{decide, Decision};

use crate::options::Options;
use crate::ort::graph;
use crate::partition;
use op_specs::Node;

/// The EP's answer for one node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeDecision {
    pub claimed: bool,
    /// Why a node is declined (`None` when claimed).
    pub reason: Option<String>,
    pub cluster: Option<usize>,
}

#[derive(Debug, Clone)]
pub struct Capability {
    pub decisions: Vec<NodeDecision>,
    /// Node indices of each cluster to fuse, each in dependency order.
    pub clusters: Vec<Vec<usize>>,
}

/// The decisions and clusters for a graph's nodes (never a control-flow body's: see
/// `abi::ep::get_capability`), whose outputs are `graph_outputs`.
pub fn analyse(nodes: &[Node], graph_outputs: &[String], options: &Options) -> Capability {
    let disabled = options.flag("disable");
    let excluded = options.ops("exclude_ops");
    let mut decisions: Vec<NodeDecision> = nodes
        .iter()
        .map(|node| {
            let reason = if disabled {
                Some("the EP is disabled (option disable, ONNXRUNTIME_EP_MLX_DISABLE)".to_owned())
            } else if excluded.iter().any(|op| op == &node.op_type) {
                Some(
                    "excluded by the option exclude_ops (ONNXRUNTIME_EP_MLX_EXCLUDE_OPS)"
                        .to_owned(),
                )
            } else {
                match decide(node) {
                    Decision::Claim { .. } => None,
                    Decision::Decline { reason } => Some(reason),
                }
            };
            NodeDecision {
                claimed: reason.is_none(),
                reason,
                cluster: None,
            }
        })
        .collect();
    let predecessors = graph::predecessors(nodes);
    let clusters = loop {
        let claimed: Vec<bool> = decisions.iter().map(|d| d.claimed).collect();
        let clusters = partition::clusters(&predecessors, &claimed);
        let mut cluster_of = vec![None; nodes.len()];
        for (c, cluster) in clusters.iter().enumerate() {
            for &v in cluster {
                cluster_of[v] = Some(c);
            }
        }
        let crossing = non_tensors_crossing(nodes, graph_outputs, &cluster_of);
        if crossing.is_empty() {
            for (decision, cluster) in decisions.iter_mut().zip(cluster_of) {
                decision.cluster = cluster;
            }
            break clusters;
        }
        // Each round declines at least one claimed node, so this ends.
        for (node, value) in crossing {
            decisions[node] = NodeDecision {
                claimed: false,
                reason: Some(format!(
                    "its value '{value}' (not a tensor) would cross the edge of the MLX \
                     subgraph (ORT passes only tensors into and out of a fused node)"
                )),
                cluster: None,
            };
        }
    };
    Capability {
        decisions,
        clusters,
    }
}

/// Claimed nodes that read a sequence or an optional from outside their cluster, or write one
/// that something outside it reads or that the graph outputs, with that value.
fn non_tensors_crossing(
    nodes: &[Node],
    graph_outputs: &[String],
    cluster_of: &[Option<usize>],
) -> Vec<(usize, String)> {
    let mut producer = std::collections::HashMap::new();
    let mut consumers: std::collections::HashMap<&str, Vec<usize>> = Default::default();
    for (i, node) in nodes.iter().enumerate() {
        for value in node.outputs.iter().flatten() {
            producer.insert(value.name.as_str(), i);
        }
        for value in node.reads() {
            consumers.entry(value.name.as_str()).or_default().push(i);
        }
    }
    let mut crossing = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        let Some(cluster) = cluster_of[i] else {
            continue;
        };
        let outside = |j: &usize| cluster_of[*j] != Some(cluster);
        let read = node
            .reads()
            .filter(|v| !v.is_tensor())
            .find(|v| producer.get(v.name.as_str()).is_none_or(outside));
        let written = node
            .outputs
            .iter()
            .flatten()
            .filter(|v| !v.is_tensor())
            .find(|v| {
                graph_outputs.contains(&v.name)
                    || consumers
                        .get(v.name.as_str())
                        .is_none_or(|readers| readers.iter().any(outside))
            });
        if let Some(value) = read.or(written) {
            crossing.push((i, value.name.clone()));
        }
    }
    crossing
}

/// Adds the EPContext nodes this EP wrote into a compiled model (`restored`, node indices),
/// each a partition of its own: their nodes were claimed when the model was compiled. The
/// table declined them as nodes it has no entry for, so no cluster holds them yet.
pub fn with_restored(mut capability: Capability, restored: &[usize]) -> Capability {
    for &node in restored {
        capability.decisions[node] = NodeDecision {
            claimed: true,
            reason: None,
            cluster: Some(capability.clusters.len()),
        };
        capability.clusters.push(vec![node]);
    }
    capability
}
