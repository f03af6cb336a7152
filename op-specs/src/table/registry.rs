//! The table itself: every `#[onnx_op]` entry, collected by `inventory`.

use super::claim;
use super::node::Node;
use super::spec::{OpSpec, ShapeSafety, Verdict};

inventory::collect!(OpSpec);

/// `""` and `"ai.onnx"` name the same domain.
fn same_domain(a: &str, b: &str) -> bool {
    fn canonical(d: &str) -> &str {
        if d == "ai.onnx" {
            ""
        } else {
            d
        }
    }
    canonical(a) == canonical(b)
}

/// Every entry, ordered by (domain, op, first opset).
pub fn all() -> Vec<&'static OpSpec> {
    let mut specs: Vec<&'static OpSpec> = inventory::iter::<OpSpec>.into_iter().collect();
    specs.sort_by_key(|s| (s.domain, s.op, s.since));
    specs
}

/// The entry covering `op` at schema version `since_version`, if any.
pub fn lookup(domain: &str, op: &str, since_version: i64) -> Option<&'static OpSpec> {
    inventory::iter::<OpSpec>
        .into_iter()
        .find(|s| s.op == op && same_domain(s.domain, domain) && s.covers(since_version))
}

/// The table's answer for one node.
#[derive(Debug, Clone)]
pub enum Decision {
    Claim {
        spec: &'static OpSpec,
        shape: ShapeSafety,
    },
    Decline {
        reason: String,
    },
}

pub fn decide(node: &Node) -> Decision {
    let Some(spec) = lookup(node.domain(), node.op_type(), node.since_version()) else {
        let known: Vec<String> = all()
            .into_iter()
            .filter(|s| s.op == node.op_type() && same_domain(s.domain, node.domain()))
            .map(|s| s.opsets())
            .collect();
        let reason = if known.is_empty() {
            "no MLX lowering for this op".to_owned()
        } else {
            format!(
                "opset {} is not covered (covered: {})",
                node.since_version(),
                known.join(", ")
            )
        };
        return Decision::Decline { reason };
    };
    match claim::check(spec, node) {
        Verdict::Claim => Decision::Claim {
            spec,
            shape: spec.shape_safety(node),
        },
        Verdict::Decline { reason } => Decision::Decline { reason },
    }
}

/// Pairs of entries whose (domain, op, opset range) overlap: a table error.
pub fn overlaps() -> Vec<(&'static OpSpec, &'static OpSpec)> {
    let specs = all();
    let mut found = Vec::new();
    for (i, a) in specs.iter().enumerate() {
        for b in &specs[i + 1..] {
            let a_end = a.until.unwrap_or(i64::MAX);
            let b_end = b.until.unwrap_or(i64::MAX);
            if a.op == b.op
                && same_domain(a.domain, b.domain)
                && a.since <= b_end
                && b.since <= a_end
            {
                found.push((*a, *b));
            }
        }
    }
    found
}
