//! onnxruntime-ep-mlx: an ONNX Runtime plugin execution provider that runs ONNX graphs on MLX.

pub mod ort;
pub mod selftest;
