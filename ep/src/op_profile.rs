//! Where a run's time goes, per op (`ONNXRUNTIME_EP_MLX_PROFILE_OPS=1`): the eager path then
//! evaluates each node's outputs right after lowering it, so the time MLX spends on that node
//! is its own. One synchronisation per node makes runs slower than they are without it: the
//! profile shows proportions (which ops to work on next), not totals to quote. Each plan's
//! first run is left out (constant uploads, kernel compilation).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

/// Time spent on one op type: building its lazy graph, and evaluating it.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct OpTime {
    pub nodes: u64,
    pub lower: Duration,
    pub eval: Duration,
    /// MLX arrays the lowerings built: on the GPU each primitive costs a launch, so this is
    /// what makes a small op slow.
    pub arrays: u64,
}

impl OpTime {
    fn total(&self) -> Duration {
        self.lower + self.eval
    }
}

/// Per-op times, keyed by the qualified op (`com.microsoft.MatMulNBits`).
#[derive(Debug, Default, Clone)]
pub struct OpProfile {
    by_op: HashMap<String, OpTime>,
}

impl OpProfile {
    pub fn record(&mut self, op: &str, lower: Duration, eval: Duration, arrays: u64) {
        let time = self.by_op.entry(op.to_string()).or_default();
        time.nodes += 1;
        time.lower += lower;
        time.eval += eval;
        time.arrays += arrays;
    }

    pub fn merge(&mut self, other: &OpProfile) {
        for (op, t) in &other.by_op {
            let time = self.by_op.entry(op.clone()).or_default();
            time.nodes += t.nodes;
            time.lower += t.lower;
            time.eval += t.eval;
            time.arrays += t.arrays;
        }
    }

    pub fn is_empty(&self) -> bool {
        self.by_op.is_empty()
    }

    /// Ops by total time, most first (ties by name, so the order is stable).
    pub fn ranked(&self) -> Vec<(&str, OpTime)> {
        let mut ranked: Vec<(&str, OpTime)> =
            self.by_op.iter().map(|(op, t)| (op.as_str(), *t)).collect();
        ranked.sort_by(|a, b| b.1.total().cmp(&a.1.total()).then(a.0.cmp(b.0)));
        ranked
    }

    /// One line per op for the session summary: node evaluations, lowering and MLX time, and
    /// the op's share of the profiled total.
    pub fn summary(&self) -> String {
        let total: Duration = self.by_op.values().map(OpTime::total).sum();
        let mut out = String::from("[MLX EP] per-op profile (each node evaluated on its own):");
        for (op, t) in self.ranked() {
            let share = if total.is_zero() {
                0.0
            } else {
                100.0 * t.total().as_secs_f64() / total.as_secs_f64()
            };
            let _ = write!(
                out,
                "\n[MLX EP]   {op}: {} node run(s), lowering {:.3} ms, MLX {:.3} ms ({share:.1}%), {:.1} arrays a node",
                t.nodes,
                t.lower.as_secs_f64() * 1e3,
                t.eval.as_secs_f64() * 1e3,
                t.arrays as f64 / t.nodes.max(1) as f64,
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn ops_rank_by_total_time_and_merge_adds_up() {
        let mut a = OpProfile::default();
        a.record("Add", ms(1), ms(1), 1);
        a.record("MatMul", ms(1), ms(9), 4);
        let mut b = OpProfile::default();
        b.record("Add", ms(1), ms(2), 3);
        a.merge(&b);
        let ranked = a.ranked();
        assert_eq!(ranked[0].0, "MatMul");
        assert_eq!(
            ranked[1],
            (
                "Add",
                OpTime {
                    nodes: 2,
                    lower: ms(2),
                    eval: ms(3),
                    arrays: 4
                }
            )
        );
        let summary = a.summary();
        assert!(summary.contains(
            "MatMul: 1 node run(s), lowering 1.000 ms, MLX 9.000 ms (66.7%), 4.0 arrays a node"
        ));
    }
}
