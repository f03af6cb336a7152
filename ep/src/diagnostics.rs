//! What the EP tells its user: declined nodes (`ONNXRUNTIME_EP_MLX_CLAIM_DEBUG=1`), a
//! machine-readable claim report (`ONNXRUNTIME_EP_MLX_EXPLAIN=<file>`, JSON lines, used by
//! `python -m onnxruntime_ep_mlx explain`), and a session summary at teardown
//! (`ONNXRUNTIME_EP_MLX_VERBOSE=1`).

use std::fmt::Write as _;
use std::io::Write as _;
use std::time::Duration;

use op_specs::Node;

use crate::capability::Capability;
use crate::op_profile::OpProfile;
use crate::options::Options;
use crate::plan::ConstantsReport;

#[derive(Debug, Clone, Default)]
pub struct Flags {
    pub claim_debug: bool,
    pub verbose: bool,
    pub explain: Option<std::path::PathBuf>,
}

impl Flags {
    pub fn of(options: &Options) -> Flags {
        Flags {
            claim_debug: options.flag("claim_debug"),
            verbose: options.flag("verbose"),
            explain: options.text("explain").map(Into::into),
        }
    }
}

/// How one plan ran: its path, compiled traces and cache hits, and why it fell back, if it did.
#[derive(Debug, Default, Clone)]
pub struct PlanReport {
    pub path: &'static str,
    pub traces: u64,
    pub hits: u64,
    pub fallback: Option<String>,
    /// Compiled runs that lowered a prologue eagerly (`split`), and why splitting stopped.
    pub split_runs: u64,
    pub split_fallback: Option<String>,
    /// Outputs sharing an input's buffer (a KV cache): rows written back of rows held, and
    /// runs that fed an input from its device mirror (ep/src/resident.rs).
    pub shared_rows_written: u64,
    pub shared_rows: u64,
    pub mirror_hits: u64,
    pub mirrors_in_place: u64,
    pub constants: ConstantsReport,
    /// Under the `precision` option: nodes computing in the half type, of the plan's nodes.
    pub half_nodes: Option<(&'static str, usize, usize)>,
    /// Elementwise node lowerings over channels-last forms, between convolutions.
    pub channels_last_lowered: usize,
    /// Node lowerings that answered for several nodes at once, by what they made.
    pub rewrites: Vec<(&'static str, usize)>,
}

/// MLX's memory after the latest run: held by live arrays (the plans' constants, what was
/// prepared from them, device mirrors) and the most ever held.
#[derive(Debug, Default, Clone, Copy)]
pub struct MemoryReport {
    pub active: usize,
    pub peak: usize,
}

impl MemoryReport {
    pub fn now() -> MemoryReport {
        MemoryReport {
            active: mlx_kernels::memory::active_memory().unwrap_or(0),
            peak: mlx_kernels::memory::peak_memory().unwrap_or(0),
        }
    }
}

/// Tensor bytes that crossed between ORT's memory and MLX's, and tensors that did not have
/// to: inputs and outputs a user placed in the EP's own memory (ep/src/abi/memory.rs).
#[derive(Debug, Default, Clone, Copy)]
pub struct Traffic {
    pub copied_in: usize,
    pub copied_out: usize,
    pub bound_in: u64,
    pub bound_out: u64,
    /// Of `bound_out`: stored by the run's own evaluation (on a GPU), not copied after it.
    pub stored_out: u64,
    /// Of `stored_out`: by a copy on MLX's CUDA stream, not by a store kernel.
    pub stored_on_stream: u64,
    /// Outputs in ORT's memory (part of `copied_out`) copied there on MLX's CUDA stream by the
    /// run's own evaluation.
    pub read_on_stream: u64,
}

impl Traffic {
    pub fn add(&mut self, other: Traffic) {
        self.copied_in += other.copied_in;
        self.copied_out += other.copied_out;
        self.bound_in += other.bound_in;
        self.bound_out += other.bound_out;
        self.stored_out += other.stored_out;
        self.stored_on_stream += other.stored_on_stream;
        self.read_on_stream += other.read_on_stream;
    }
}

/// Counters of one EP instance (one session).
#[derive(Debug, Default, Clone)]
pub struct Stats {
    pub plan_reports: std::collections::BTreeMap<String, PlanReport>,
    pub nodes_total: usize,
    pub nodes_claimed: usize,
    pub clusters: usize,
    pub plans: usize,
    pub runs: u64,
    pub translate: Duration,
    pub eval: Duration,
    pub copies: Duration,
    pub prepare: Duration,
    /// Parts of the above: eager prologues and closure replays (translation and eval), and
    /// writing shared buffers back (copies).
    pub prologue: Duration,
    pub replay: Duration,
    pub write_back: Duration,
    pub traffic: Traffic,
    pub memory: MemoryReport,
    pub device: &'static str,
    pub op_profile: OpProfile,
    /// How the process's hand-written CUDA kernels were had (process-wide, read at the end).
    pub kernel_builds: mlx_kernels::custom::CudaBuilds,
}

impl Stats {
    pub fn summary(&self) -> String {
        let mut out = String::new();
        let _ = write!(
            out,
            "[MLX EP] session summary: {}/{} nodes claimed in {} subgraph(s) ({} compiled), device {}; {} run(s): \
             translation {:.3} ms, MLX eval {:.3} ms, copies {:.3} ms, preparing constants {:.3} ms; \
             MLX memory {:.2} MiB active, {:.2} MiB peak",
            self.nodes_claimed,
            self.nodes_total,
            self.clusters,
            self.plans,
            self.device,
            self.runs,
            self.translate.as_secs_f64() * 1e3,
            self.eval.as_secs_f64() * 1e3,
            self.copies.as_secs_f64() * 1e3,
            self.prepare.as_secs_f64() * 1e3,
            mib(self.memory.active),
            mib(self.memory.peak),
        );
        if !(self.prologue.is_zero() && self.replay.is_zero() && self.write_back.is_zero()) {
            let _ = write!(
                out,
                "; of these: eager prologues {:.3} ms, compiled replays {:.3} ms, shared-buffer write-back {:.3} ms",
                self.prologue.as_secs_f64() * 1e3,
                self.replay.as_secs_f64() * 1e3,
                self.write_back.as_secs_f64() * 1e3,
            );
        }
        let t = &self.traffic;
        let _ = write!(
            out,
            "; host copies {:.2} MiB in, {:.2} MiB out ({} output(s) by a copy on MLX's stream); in MLX memory (no \
             host copy): {} input(s), {} output(s), {} of them stored by MLX's evaluation ({} by a copy on its stream)",
            mib(t.copied_in),
            mib(t.copied_out),
            t.read_on_stream,
            t.bound_in,
            t.bound_out,
            t.stored_out,
            t.stored_on_stream,
        );
        let k = &self.kernel_builds;
        if k.built + k.from_disk + k.through_mlx > 0 {
            let _ = write!(
                out,
                "; hand-written CUDA kernels in this process: {} compiled ({:.2} s), {} read from the kernel cache, \
                 {} compiled by MLX",
                k.built, k.build_seconds, k.from_disk, k.through_mlx
            );
            if let Some(why) = &k.through_mlx_because {
                let _ = write!(out, " ({why})");
            }
        }
        for (name, report) in &self.plan_reports {
            let _ = write!(
                out,
                "\n[MLX EP]   {name}: {} path, {} trace(s), {} cache hit(s)",
                report.path, report.traces, report.hits
            );
            if report.split_runs > 0 {
                let _ = write!(out, " ({} with an eager prologue)", report.split_runs);
            }
            if let Some(reason) = &report.split_fallback {
                let _ = write!(out, "; prologue split stopped: {reason}");
            }
            if report.shared_rows > 0 {
                let _ = write!(
                    out,
                    "; shared buffers: {} of {} row(s) written back, {} input(s) fed from the device mirror, {} mirror(s) updated in place",
                    report.shared_rows_written, report.shared_rows, report.mirror_hits, report.mirrors_in_place
                );
            }
            if let Some((half, computing, nodes)) = report.half_nodes {
                let _ = write!(
                    out,
                    "; precision {half}: {computing} of {nodes} node(s) in {half}, {} constant(s) rounded",
                    report.constants.rounded
                );
            }
            if report.channels_last_lowered > 0 {
                let _ = write!(
                    out,
                    "; {} elementwise node lowering(s) between convolutions kept channels-last",
                    report.channels_last_lowered
                );
            }
            for (what, count) in &report.rewrites {
                let _ = write!(out, "; {count} {what}");
            }
            let c = &report.constants;
            if c.bytes > 0 || c.prepared > 0 {
                let _ = write!(
                    out,
                    "; constants {:.2} MiB ({} twin(s) shared), {} prepared from them in {} \
                     computation(s), {:.3} ms, +{:.2} MiB",
                    mib(c.bytes),
                    c.twins,
                    c.prepared,
                    c.prepare_runs,
                    c.prepare_time.as_secs_f64() * 1e3,
                    mib(c.prepared_bytes)
                );
            }
            let b = &c.bodies;
            if b.bodies > 0 {
                let _ = write!(
                    out,
                    "; {} body(ies) compiled for their steps: {} trace(s), {} step(s) replayed, \
                     {} lowered node by node",
                    b.bodies, b.traces, b.replayed, b.lowered
                );
            }
            if let Some(reason) = &report.fallback {
                let _ = write!(out, "; fell back to eager: {reason}");
            }
        }
        if !self.op_profile.is_empty() {
            let _ = write!(out, "\n{}", self.op_profile.summary());
        }
        out
    }
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / f64::from(1 << 20)
}

/// Reports one GetCapability pass as the flags ask.
pub fn report_capability(flags: &Flags, nodes: &[Node], capability: &Capability) {
    if flags.claim_debug {
        for (node, decision) in nodes.iter().zip(&capability.decisions) {
            if let Some(reason) = &decision.reason {
                eprintln!(
                    "[MLX EP] declined '{}' ({}): {reason}",
                    node.name(),
                    qualified_op(node)
                );
            }
        }
    }
    if let Some(path) = &flags.explain {
        let mut lines = String::new();
        for (node, decision) in nodes.iter().zip(&capability.decisions) {
            let _ = writeln!(
                lines,
                "{{\"node\": {}, \"op\": {}, \"domain\": {}, \"opset\": {}, \"claimed\": {}, \"reason\": {}, \"cluster\": {}}}",
                json_string(node.name()),
                json_string(node.op_type()),
                json_string(node.domain()),
                node.since_version(),
                decision.claimed,
                decision.reason.as_deref().map_or("null".into(), json_string),
                decision.cluster.map_or("null".into(), |c| c.to_string()),
            );
        }
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| f.write_all(lines.as_bytes()));
        if let Err(e) = written {
            eprintln!(
                "[MLX EP] cannot write the explain report to {}: {e}",
                path.display()
            );
        }
    }
}

pub fn qualified_op(node: &Node) -> String {
    if node.domain().is_empty() {
        node.op_type().to_owned()
    } else {
        format!("{}.{}", node.domain(), node.op_type())
    }
}

/// A JSON string literal.
pub fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::Stats;
    use mlx_kernels::custom::CudaBuilds;

    #[test]
    fn the_summary_says_how_the_cuda_kernels_were_had_when_there_were_any() {
        let mut stats = Stats::default();
        assert!(!stats.summary().contains("CUDA kernels"));
        stats.kernel_builds = CudaBuilds {
            built: 2,
            build_seconds: 0.25,
            from_disk: 3,
            through_mlx: 1,
            through_mlx_because: Some("rms_norm: NVRTC rejects it".into()),
        };
        assert!(stats.summary().contains(
            "hand-written CUDA kernels in this process: 2 compiled (0.25 s), 3 read from the kernel \
             cache, 1 compiled by MLX (rms_norm: NVRTC rejects it)"
        ));
    }
}
