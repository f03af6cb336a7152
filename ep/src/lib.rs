//! onnxruntime-ep-mlx: an ONNX Runtime plugin execution provider that runs ONNX graphs on MLX.
//!
//! `abi/` is what ORT loads (factory, EP and compute vtables); `ort/` reads ORT's objects into
//! owned Rust values. The core never names an op: `capability` asks the op table which nodes
//! to take, `partition` groups them, `plan` lowers each group through the table and runs it, and `capture` compiles
//! plans into MLX closures and replays them.

mod abi;
mod capability;
mod capture;
mod channels_last;
mod context;
mod device;
mod diagnostics;
mod huge_empty;
mod narrow;
mod op_profile;
mod options;
mod ort;
mod partition;
mod plan;
mod resident;
mod selftest;
mod split;
mod table_json;
mod trace;

pub use abi::{CreateEpFactories, OrtMlxEp_OpTableJson, ReleaseEpFactory};
pub use selftest::{OrtMlxEp_BenchMatmul, OrtMlxEp_BlasDescription};
