//! Random generators: RandomNormal, RandomUniform, their *Like forms, Bernoulli and Multinomial.
//!
//! MLX's generator is counter-based (a key per draw) and cannot reproduce ORT's stream, so the
//! numbers differ from ORT's; what holds is the distribution and ORT's seed contract: a node
//! with a `seed` gives the same sequence of draws, run after run, in every session (its k-th run
//! draws from the key of (seed, k)); without one, each session draws differently. A traced
//! closure would replay one draw forever, so these run eagerly.

use std::cell::Cell;
use std::hash::{BuildHasher, Hasher};

use mlx_kernels::{ops, Array, Dtype};

use crate::table::consts::scalar;
use crate::{onnx_op, Lower, OpError, Result};

/// A node's sequence of draws: where it starts, and how many runs drew from it.
struct Draws {
    start: u64,
    runs: Cell<u64>,
}

/// The key of this run's draw, from the node's seed (or, without one, a start of its own per
/// session), kept across the plan's runs.
fn next_key(cx: &mut Lower, seed: Option<f32>) -> Result<Array> {
    let draws = cx.kept("draws", || {
        let start = match seed {
            Some(seed) => u64::from(seed.to_bits()),
            None => std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish(),
        };
        Ok(Draws {
            start,
            runs: Cell::new(0),
        })
    })?;
    let run = draws.runs.get();
    draws.runs.set(run + 1);
    // A splitmix64 step, so neighbouring (seed, run) pairs give unrelated keys.
    let mut z = draws
        .start
        .wrapping_add(run.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    Ok(ops::random_key(z ^ (z >> 31))?)
}

/// Normal draws of `shape` with `mean` and standard deviation `scale`, in the output's type.
fn normal(
    cx: &mut Lower,
    shape: &[i64],
    mean: f32,
    scale: f32,
    seed: Option<f32>,
) -> Result<Array> {
    let key = next_key(cx, seed)?;
    let dtype = cx.output_dtype(0)?;
    // Drawn in float32 and rounded once: MLX's float16 draws would round mean and scale first.
    let draws = ops::random_normal(shape, Dtype::F32, mean, scale, &key, cx.stream())?;
    Ok(ops::astype(&draws, dtype, cx.stream())?)
}

/// Uniform draws of `shape` in `[low, high)`, in the output's type.
fn uniform(cx: &mut Lower, shape: &[i64], low: f32, high: f32, seed: Option<f32>) -> Result<Array> {
    let key = next_key(cx, seed)?;
    let s = cx.stream();
    let dtype = cx.output_dtype(0)?;
    let (low, high) = (
        scalar(f64::from(low), Dtype::F32, s)?,
        scalar(f64::from(high), Dtype::F32, s)?,
    );
    let draws = ops::random_uniform(&low, &high, shape, Dtype::F32, &key, s)?;
    Ok(ops::astype(&draws, dtype, s)?)
}

/// Normal draws of the shape `shape`.
#[onnx_op(
    op = "RandomNormal", since = 1, types(T = FLOAT), inputs(), outputs(output: T), ignores(dtype: i64),
    shape = Eager
)]
fn random_normal(
    cx: &mut Lower,
    #[attr] shape: Vec<i64>,
    #[attr(default = 0.0)] mean: f32,
    #[attr(default = 1.0)] scale: f32,
    #[attr] seed: Option<f32>,
) -> Result<Array> {
    normal(cx, &shape, mean, scale, seed)
}

/// Uniform draws in `[low, high)` of the shape `shape`.
#[onnx_op(
    op = "RandomUniform", since = 1, types(T = FLOAT), inputs(), outputs(output: T), ignores(dtype: i64),
    shape = Eager
)]
fn random_uniform(
    cx: &mut Lower,
    #[attr] shape: Vec<i64>,
    #[attr(default = 0.0)] low: f32,
    #[attr(default = 1.0)] high: f32,
    #[attr] seed: Option<f32>,
) -> Result<Array> {
    uniform(cx, &shape, low, high, seed)
}

/// Normal draws of the input's shape.
#[onnx_op(
    op = "RandomNormalLike", since = 1, types(T1 = ANY, T2 = FLOAT), inputs(input: T1), outputs(output: T2),
    ignores(dtype: i64), shape = Eager
)]
fn random_normal_like(
    cx: &mut Lower,
    x: Array,
    #[attr(default = 0.0)] mean: f32,
    #[attr(default = 1.0)] scale: f32,
    #[attr] seed: Option<f32>,
) -> Result<Array> {
    normal(cx, &x.shape(), mean, scale, seed)
}

/// Uniform draws in `[low, high)` of the input's shape.
#[onnx_op(
    op = "RandomUniformLike", since = 1, types(T1 = ANY, T2 = FLOAT), inputs(input: T1), outputs(output: T2),
    ignores(dtype: i64), shape = Eager
)]
fn random_uniform_like(
    cx: &mut Lower,
    x: Array,
    #[attr(default = 0.0)] low: f32,
    #[attr(default = 1.0)] high: f32,
    #[attr] seed: Option<f32>,
) -> Result<Array> {
    uniform(cx, &x.shape(), low, high, seed)
}

/// 1 with probability `input` (each element its own), else 0, in the output's type.
#[onnx_op(
    op = "Bernoulli", since = 15, types(T1 = FLOAT, T2 = ANY), inputs(input: T1), outputs(output: T2),
    ignores(dtype: i64), shape = Eager
)]
fn bernoulli(cx: &mut Lower, p: Array, #[attr] seed: Option<f32>) -> Result<Array> {
    let key = next_key(cx, seed)?;
    let s = cx.stream();
    let dtype = cx.output_dtype(0)?;
    let (low, high) = (scalar(0.0, Dtype::F32, s)?, scalar(1.0, Dtype::F32, s)?);
    let u = ops::random_uniform(&low, &high, &p.shape(), Dtype::F32, &key, s)?;
    let hits = ops::less(&u, &ops::astype(&p, Dtype::F32, s)?, s)?;
    Ok(ops::astype(&hits, dtype, s)?)
}

/// `sample_size` class indices per row of `input` (`[batch, classes]` unnormalised
/// log-probabilities), drawn independently.
#[onnx_op(
    op = "Multinomial", precision = Float32, since = 7, types(T1 = FLOAT, T2 = I32 | I64), inputs(input: T1), outputs(output: T2),
    ignores(dtype: i64), shape = Eager
)]
fn multinomial(
    cx: &mut Lower,
    logits: Array,
    #[attr(default = 1)] sample_size: i64,
    #[attr] seed: Option<f32>,
) -> Result<Array> {
    if logits.ndim() != 2 || sample_size < 1 {
        return Err(OpError::new(format!(
            "input of shape {:?} with sample_size {sample_size}: a [batch, classes] input and at \
             least one sample are needed",
            logits.shape()
        )));
    }
    let key = next_key(cx, seed)?;
    let s = cx.stream();
    let dtype = cx.output_dtype(0)?;
    let samples = i32::try_from(sample_size).map_err(|_| OpError::new("sample_size past int32"))?;
    let logits = ops::astype(&logits, Dtype::F32, s)?;
    let drawn = ops::random_categorical(&logits, 1, samples, &key, s)?;
    Ok(ops::astype(&drawn, dtype, s)?)
}
