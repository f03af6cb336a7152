//! Linear models: LinearRegressor and LinearClassifier, `X·Wᵀ + b` in float32 with ORT's rules
//! for the transform and the labels (`docs/DESIGN.md`, "ai.onnx.ml").

use mlx_kernels::{ops, Array, Dtype, Stream};

use super::transform::{logistic, PostTransform};
use crate::table::consts::scalar_like;
use crate::table::lower::float32;
use crate::{onnx_op, Lower, Node, OpError, Result, Verdict};

/// The input as `[N, F]` float32 rows: a 1-d input is one row. ORT's kernels take rank 1 or 2.
pub fn feature_rows(x: &Array, s: &Stream) -> Result<Array> {
    let x = float32(x, s)?;
    match x.ndim() {
        1 => Ok(ops::expand_dims(&x, &[0], s)?),
        2 => Ok(x),
        rank => Err(OpError::new(format!(
            "a {rank}-d input: ORT's kernel takes 1-d or 2-d feature rows"
        ))),
    }
}

/// Declines an input whose known rank is neither 1 nor 2 (ORT's kernel then refuses it).
pub fn rank_1_or_2(node: &Node) -> Verdict {
    match node.input_shape(0) {
        Some(shape) if !(1..=2).contains(&shape.len()) => {
            Verdict::decline(format!("a {}-d input (ORT takes 1-d or 2-d)", shape.len()))
        }
        _ => Verdict::Claim,
    }
}

/// `rows · weightsᵀ` for `weights` given row-major with `count` rows of the input's width
/// (only the first `count · width` values are read, as in ORT; fewer is an error).
pub fn times_weights(rows: &Array, weights: &[f32], count: usize, s: &Stream) -> Result<Array> {
    let width = rows.shape()[1] as usize;
    let needed = count * width;
    if weights.len() < needed {
        return Err(OpError::new(format!(
            "coefficients has {} values, fewer than {count} × {width} features",
            weights.len()
        )));
    }
    let weights = Array::from_slice(&weights[..needed], &[count as i64, width as i64])?;
    Ok(ops::matmul(
        rows,
        &ops::transpose(&weights, &[1, 0], s)?,
        s,
    )?)
}

/// The index of each row's largest score, as ORT scans for it: the first of equal maxima, a
/// NaN after the first score never wins, and a NaN first score wins outright.
pub fn first_max(scores: &Array, s: &Stream) -> Result<Array> {
    let columns = scores.shape()[1];
    let nan = ops::isnan(scores, s)?;
    let first = ops::less(
        &ops::arange(0.0, columns as f64, 1.0, Dtype::I32, s)?,
        &Array::scalar(1i32)?,
        s,
    )?;
    let infinity = scalar_like(f64::INFINITY, scores, s)?;
    let winner = ops::where_(
        &nan,
        &ops::where_(&first, &infinity, &ops::negative(&infinity, s)?, s)?,
        scores,
        s,
    )?;
    Ok(ops::argmax(&winner, 1, false, s)?)
}

/// `labels[index]`, int64.
pub fn label_of(labels: &[i64], index: &Array, s: &Stream) -> Result<Array> {
    let labels = Array::from_slice(labels, &[labels.len() as i64])?;
    Ok(ops::take(&labels, index, 0, s)?)
}

/// The two probability columns ORT writes for one raw score `score` ([N, 1]) of a binary
/// model: `[1 - p, p]` with `p` the score itself or, under LOGISTIC, its logistic.
pub fn binary_columns(score: &Array, transform: PostTransform, s: &Stream) -> Result<Array> {
    let p = match transform {
        PostTransform::Logistic => logistic(score, s)?,
        _ => score.clone(),
    };
    let one = scalar_like(1.0, &p, s)?;
    Ok(ops::concatenate(&[ops::subtract(&one, &p, s)?, p], 1, s)?)
}

/// `X·Wᵀ + intercepts` for `targets` outputs; the intercepts apply only when there is one per
/// target (ORT ignores any other count). A single target takes only PROBIT: ORT's kernel skips
/// the other transforms on a one-score row.
#[onnx_op(
    domain = "ai.onnx.ml", op = "LinearRegressor", precision = Float32, since = 1, types(T = F32), inputs(X: T), outputs(Y: T),
    shape = ShapeKeyed, claim = linear_regressor_claim,
    declines = "an input of rank other than 1 or 2; targets below 1"
)]
fn linear_regressor(
    cx: &mut Lower,
    x: Array,
    #[attr] coefficients: Option<Vec<f32>>,
    #[attr] intercepts: Option<Vec<f32>>,
    #[attr] targets: Option<i64>,
    #[attr] post_transform: Option<String>,
) -> Result<Array> {
    let s = cx.stream();
    let targets = targets.unwrap_or(1).max(1) as usize;
    let transform = PostTransform::named(post_transform.as_deref().unwrap_or("NONE"))?;
    let rows = feature_rows(&x, s)?;
    let mut y = times_weights(&rows, &coefficients.unwrap_or_default(), targets, s)?;
    if let Some(intercepts) = intercepts.filter(|b| b.len() == targets) {
        y = ops::add(&y, &Array::from_slice(&intercepts, &[targets as i64])?, s)?;
    }
    match transform {
        PostTransform::Probit => transform.apply(&y, s),
        _ if targets == 1 => Ok(y),
        _ => transform.apply(&y, s),
    }
}

/// Declines a `post_transform` ORT's kernels do not know (they refuse the session).
pub fn known_post_transform(node: &Node) -> Verdict {
    let name = node.attr_or("post_transform", "NONE".to_string());
    match PostTransform::named(&name) {
        Ok(_) => Verdict::Claim,
        Err(e) => Verdict::decline(e.message),
    }
}

fn linear_regressor_claim(node: &Node) -> Verdict {
    if let Verdict::Decline { reason } = known_post_transform(node) {
        return Verdict::Decline { reason };
    }
    if node.attr_or("targets", 1i64) < 1 {
        return Verdict::decline("targets below 1 (ORT's kernel refuses it)");
    }
    rank_1_or_2(node)
}

/// Scores `X·Wᵀ + intercepts`, one class per intercept. Two or more classes: the label is the
/// first largest raw score's, the scores are transformed. One class with two labels (a binary
/// model): the second label when the score is above 0, and the columns `[1 - p, p]`
/// ([`binary_columns`]). One class without labels: 1 or 0, and the raw score.
#[onnx_op(
    domain = "ai.onnx.ml", op = "LinearClassifier", precision = Float32, since = 1, types(T = F32 | I64 | I32, L = I64, F = F32),
    inputs(X: T), outputs(Y: L, Z: F), ignores(multi_class: i64), shape = ShapeKeyed,
    claim = linear_classifier_claim,
    declines = "string labels (MLX holds no strings); class and label counts ORT's kernel refuses; PROBIT on a binary model (ORT leaves half its output unwritten)"
)]
fn linear_classifier(
    cx: &mut Lower,
    x: Array,
    #[attr] coefficients: Option<Vec<f32>>,
    #[attr] intercepts: Option<Vec<f32>>,
    #[attr] classlabels_ints: Option<Vec<i64>>,
    #[attr] classlabels_strings: Option<Vec<String>>,
    #[attr] post_transform: Option<String>,
) -> Result<Vec<Array>> {
    let s = cx.stream();
    let _ = classlabels_strings;
    let transform = PostTransform::named(post_transform.as_deref().unwrap_or("NONE"))?;
    let intercepts = intercepts.unwrap_or_default();
    let classes = intercepts.len();
    let rows = feature_rows(&x, s)?;
    let scores = ops::add(
        &times_weights(&rows, &coefficients.unwrap_or_default(), classes, s)?,
        &Array::from_slice(&intercepts, &[classes as i64])?,
        s,
    )?;
    let labels = classlabels_ints.unwrap_or_default();
    if classes >= 2 {
        let label = label_of(&labels, &first_max(&scores, s)?, s)?;
        return Ok(vec![label, transform.apply(&scores, s)?]);
    }
    let score = scores;
    let positive = ops::reshape(
        &ops::greater(&score, &scalar_like(0.0, &score, s)?, s)?,
        &[-1],
        s,
    )?;
    let positive = ops::astype(&positive, Dtype::I32, s)?;
    if labels.is_empty() {
        let transformed = match transform {
            PostTransform::Probit => transform.apply(&score, s)?,
            _ => score,
        };
        return Ok(vec![ops::astype(&positive, Dtype::I64, s)?, transformed]);
    }
    let label = label_of(&labels, &positive, s)?;
    Ok(vec![label, binary_columns(&score, transform, s)?])
}

fn linear_classifier_claim(node: &Node) -> Verdict {
    if let Verdict::Decline { reason } = known_post_transform(node) {
        return Verdict::Decline { reason };
    }
    let classes = node
        .attr_as::<Vec<f32>>("intercepts")
        .map_or(0, |b| b.len());
    let coefficients = node
        .attr_as::<Vec<f32>>("coefficients")
        .map_or(0, |w| w.len());
    let labels = node
        .attr_as::<Vec<i64>>("classlabels_ints")
        .map_or(0, |l| l.len());
    if node.attr_as::<Vec<String>>("classlabels_strings").is_some() {
        return Verdict::decline("string labels (MLX holds no strings)");
    }
    if classes == 0 || !coefficients.is_multiple_of(classes) {
        return Verdict::decline(format!(
            "{classes} intercepts for {coefficients} coefficients (ORT's kernel refuses these)"
        ));
    }
    let post = node.attr_or("post_transform", "NONE".to_string());
    let fits = match classes {
        1 => labels == 0 || (labels == 2 && post != "PROBIT"),
        _ => labels >= classes,
    };
    if !fits {
        return Verdict::decline(format!(
            "{labels} labels for {classes} class(es) under {post}: ORT's kernel refuses them or \
             leaves its output unwritten"
        ));
    }
    rank_1_or_2(node)
}
