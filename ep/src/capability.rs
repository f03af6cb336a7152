//! What the EP takes from a graph: the table's decision for each node, then the clusters.

use op_specs::{decide, Decision};

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

pub const DISABLE_ENV: &str = "ONNXRUNTIME_EP_MLX_DISABLE";
/// Comma-separated op types the EP leaves to ORT (for bisecting a numeric difference).
pub const EXCLUDE_ENV: &str = "ONNXRUNTIME_EP_MLX_EXCLUDE_OPS";

/// The decisions and clusters for a graph's nodes (never a control-flow body's: see
/// `abi::ep::get_capability`).
pub fn analyse(nodes: &[Node]) -> Capability {
    let disabled = std::env::var(DISABLE_ENV).is_ok_and(|v| v == "1");
    let excluded: Vec<String> = std::env::var(EXCLUDE_ENV)
        .unwrap_or_default()
        .split(',')
        .map(|op| op.trim().to_owned())
        .collect();
    let mut decisions: Vec<NodeDecision> = nodes
        .iter()
        .map(|node| {
            let reason = if disabled {
                Some(format!("{DISABLE_ENV}=1"))
            } else if excluded.iter().any(|op| op == &node.op_type) {
                Some(format!("excluded by {EXCLUDE_ENV}"))
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
    let claimed: Vec<bool> = decisions.iter().map(|d| d.claimed).collect();
    let clusters = partition::clusters(&predecessors, &claimed);
    for (c, cluster) in clusters.iter().enumerate() {
        for &v in cluster {
            decisions[v].cluster = Some(c);
        }
    }
    Capability {
        decisions,
        clusters,
    }
}
