//! The ORT binding layer: raw bindings, the API table, and safe readers over ORT's graph and
//! kernel-context objects. All `unsafe` of the EP lives in this folder and the ABI entry points.

pub mod api;
pub mod editor;
pub mod graph;
pub mod kernel;
pub mod sys;
pub mod thread_bound;
