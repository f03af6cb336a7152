//! A Chrome / Perfetto trace of a session (the `trace` setting names the file, written when the
//! session ends; open it in ui.perfetto.dev or chrome://tracing).
//!
//! Spans ("X" events) nest by time on their thread: a fused subgraph's run holds its input
//! copies, its execution (lowering, MLX evaluation, a trace's compile and replay, each op's
//! graph building with its shapes) and its output copies; counters ("C" events) follow MLX's
//! memory after each run. The tracer of the running session is installed per thread for the
//! length of a compute call (`scoped`), so code below it opens spans without being handed
//! anything; with no trace, opening a span is one thread-local read.

use std::cell::RefCell;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::Serialize;

/// Events a trace holds at most (about 100 MB of JSON): it lives in memory until the session
/// ends, so a long session keeps its first million events and counts the rest.
const MAX_EVENTS: usize = 1_000_000;

/// A session's trace: where it goes and what was recorded.
#[derive(Debug)]
pub struct Trace {
    path: PathBuf,
    started: Instant,
    events: Mutex<Vec<Event>>,
    dropped: std::sync::atomic::AtomicU64,
}

/// One trace event in Chrome's format (times in microseconds since the session began).
#[derive(Debug, Clone, Serialize)]
struct Event {
    name: String,
    cat: &'static str,
    ph: &'static str,
    ts: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    dur: Option<f64>,
    pid: u32,
    tid: u64,
    #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
    args: serde_json::Map<String, serde_json::Value>,
}

#[derive(Serialize)]
struct File<'a> {
    #[serde(rename = "traceEvents")]
    trace_events: &'a [Event],
    #[serde(rename = "displayTimeUnit")]
    display_time_unit: &'static str,
}

impl Trace {
    pub fn to(path: PathBuf) -> Arc<Trace> {
        Arc::new(Trace {
            path,
            started: Instant::now(),
            events: Mutex::new(Vec::new()),
            dropped: std::sync::atomic::AtomicU64::new(0),
        })
    }

    fn micros(&self, at: Instant) -> f64 {
        at.duration_since(self.started).as_secs_f64() * 1e6
    }

    fn push(&self, event: Event) {
        if let Ok(mut events) = self.events.lock() {
            if events.len() < MAX_EVENTS {
                events.push(event);
            } else {
                self.dropped
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }

    /// Writes the events recorded so far, in time order.
    pub fn write(&self) -> Result<(), String> {
        let mut events = self.events.lock().map_err(|e| e.to_string())?.clone();
        events.sort_by(|a, b| a.ts.total_cmp(&b.ts));
        let dropped = self.dropped.load(std::sync::atomic::Ordering::Relaxed);
        if dropped > 0 {
            // A metadata event Perfetto shows with the process: the trace is cut short.
            events.push(Event {
                name: "process_labels".into(),
                cat: "__metadata",
                ph: "M",
                ts: 0.0,
                dur: None,
                pid: std::process::id(),
                tid: 0,
                args: [(
                    "labels".to_owned(),
                    serde_json::json!(format!("trace truncated: {dropped} later events dropped")),
                )]
                .into_iter()
                .collect(),
            });
        }
        let text = serde_json::to_string(&File {
            trace_events: &events,
            display_time_unit: "ms",
        })
        .map_err(|e| e.to_string())?;
        std::fs::write(&self.path, text)
            .map_err(|e| format!("cannot write the trace to {}: {e}", self.path.display()))
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Arc<Trace>>> = const { RefCell::new(None) };
    static THREAD: u64 = thread_number();
}

fn thread_number() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Runs `f` with `trace` as this thread's trace (none: spans in `f` record nothing).
pub fn scoped<R>(trace: Option<&Arc<Trace>>, f: impl FnOnce() -> R) -> R {
    let previous = CURRENT.with(|c| c.replace(trace.cloned()));
    let result = f();
    CURRENT.with(|c| *c.borrow_mut() = previous);
    result
}

fn current() -> Option<Arc<Trace>> {
    CURRENT.with(|c| c.borrow().clone())
}

/// A span open until dropped.
#[must_use = "a span records when it is dropped"]
pub struct Span {
    open: Option<OpenSpan>,
}

struct OpenSpan {
    trace: Arc<Trace>,
    name: String,
    cat: &'static str,
    started: Instant,
    args: serde_json::Map<String, serde_json::Value>,
}

/// Opens a span named `name` in category `cat`.
pub fn span(name: &str, cat: &'static str) -> Span {
    span_with(name, cat, Vec::new)
}

/// [`span`] with arguments, built only when a trace is being recorded.
pub fn span_with(
    name: &str,
    cat: &'static str,
    args: impl FnOnce() -> Vec<(&'static str, serde_json::Value)>,
) -> Span {
    let open = current().map(|trace| OpenSpan {
        trace,
        name: name.to_owned(),
        cat,
        started: Instant::now(),
        args: args().into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
    });
    Span { open }
}

impl Drop for Span {
    fn drop(&mut self) {
        let Some(open) = self.open.take() else {
            return;
        };
        let ended = Instant::now();
        let event = Event {
            name: open.name,
            cat: open.cat,
            ph: "X",
            ts: open.trace.micros(open.started),
            dur: Some(ended.duration_since(open.started).as_secs_f64() * 1e6),
            pid: std::process::id(),
            tid: THREAD.with(|t| *t),
            args: open.args,
        };
        open.trace.push(event);
    }
}

/// Records counter `name` with `values` now.
pub fn counter(name: &str, values: &[(&'static str, f64)]) {
    let Some(trace) = current() else {
        return;
    };
    let event = Event {
        name: name.to_owned(),
        cat: "memory",
        ph: "C",
        ts: trace.micros(Instant::now()),
        dur: None,
        pid: std::process::id(),
        tid: THREAD.with(|t| *t),
        args: values
            .iter()
            .map(|(k, v)| ((*k).to_owned(), serde_json::json!(v)))
            .collect(),
    };
    trace.push(event);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_nest_in_time_and_record_only_inside_a_scope() {
        let path = std::env::temp_dir().join(format!("mlx-ep-trace-{}.json", std::process::id()));
        let trace = Trace::to(path.clone());
        drop(span("outside", "run"));
        scoped(Some(&trace), || {
            let _outer = span("run", "run");
            {
                let _inner = span_with("build", "op", || vec![("op", "Relu".into())]);
            }
            counter("mlx memory", &[("active_mib", 1.5)]);
        });
        trace.write().unwrap();
        let written: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let events = written["traceEvents"].as_array().unwrap();
        let names: Vec<&str> = events.iter().map(|e| e["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["run", "build", "mlx memory"]);
        let (outer, inner) = (&events[0], &events[1]);
        let end = |e: &serde_json::Value| e["ts"].as_f64().unwrap() + e["dur"].as_f64().unwrap();
        assert!(inner["ts"].as_f64() >= outer["ts"].as_f64() && end(inner) <= end(outer));
        assert_eq!(inner["args"]["op"], "Relu");
        assert_eq!(events[2]["ph"], "C");
        std::fs::remove_file(path).unwrap();
    }
}
