//! ai.onnx.ml's numeric operators: the preprocessing steps and the models scikit-learn pipelines
//! export through skl2onnx (scalers, encoders, linear models, SVMs, tree ensembles), computed as
//! ORT's CPU kernels compute them, in float32 over `[N, C]` feature rows.
//!
//! The string forms (string labels, string keys and categories) stay on ORT's CPU EP: MLX has
//! no string type. ZipMap, CastMap and DictVectorizer read or write maps, which ORT never passes
//! across a fused node.

mod linear;
mod preprocess;
mod svm;
mod transform;
mod tree;
