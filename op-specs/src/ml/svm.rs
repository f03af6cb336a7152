//! Support vector machines: SVMRegressor and SVMClassifier over the kernel values between the
//! input rows and the support vectors, with ORT's pairwise votes and output layouts.

use mlx_kernels::{ops, Array, Dtype, Stream};

use super::linear::{feature_rows, first_max, known_post_transform, label_of, rank_1_or_2};
use super::transform::{logistic, PostTransform};
use crate::table::consts::scalar_like;
use crate::{onnx_op, Lower, Node, OpError, Result, Verdict};

const KERNELS: [&str; 4] = ["LINEAR", "POLY", "RBF", "SIGMOID"];

/// The kernel between every row of `rows` ([N, F]) and every support vector ([V, F]): [N, V].
/// `params` is `[gamma, coef0, degree]` (all 0 when absent).
fn kernel_values(
    rows: &Array,
    vectors: &Array,
    kernel: &str,
    params: &[f32],
    s: &Stream,
) -> Result<Array> {
    let (gamma, coef0, degree) = match params {
        [g, c, d] => (*g, *c, *d),
        _ => (0.0, 0.0, 0.0),
    };
    let c = |v: f32| scalar_like(f64::from(v), rows, s);
    let dot =
        || -> Result<Array> { Ok(ops::matmul(rows, &ops::transpose(vectors, &[1, 0], s)?, s)?) };
    let affine = || -> Result<Array> {
        Ok(ops::add(
            &ops::multiply(&dot()?, &c(gamma)?, s)?,
            &c(coef0)?,
            s,
        )?)
    };
    Ok(match kernel {
        "LINEAR" => dot()?,
        "POLY" => {
            let u = affine()?;
            match degree {
                2.0 => ops::multiply(&u, &u, s)?,
                3.0 => ops::multiply(&ops::multiply(&u, &u, s)?, &u, s)?,
                _ => ops::power(&u, &c(degree)?, s)?,
            }
        }
        "RBF" => {
            // Σ(x - s)² from the differences themselves: |x|² - 2x·s + |s|² cancels badly when
            // a row lies near a support vector, where the kernel is largest.
            let difference = ops::subtract(
                &ops::expand_dims(rows, &[1], s)?,
                &ops::expand_dims(vectors, &[0], s)?,
                s,
            )?;
            let squared = ops::sum(&ops::square(&difference, s)?, &[2], false, s)?;
            ops::exp(&ops::multiply(&squared, &c(-gamma)?, s)?, s)?
        }
        "SIGMOID" => ops::tanh(&affine()?, s)?,
        other => return Err(OpError::new(format!("kernel_type '{other}' is unknown"))),
    })
}

/// The kernel values ([N, V]) between the input rows, checked against the support vectors'
/// width, and the `count` support vectors `vectors` (row-major).
fn against_support_vectors(
    x: &Array,
    vectors: &[f32],
    count: usize,
    kernel: Option<&str>,
    params: &[f32],
    what: &str,
    s: &Stream,
) -> Result<Array> {
    let features = vectors.len() / count;
    let rows = rows_of_width(x, features, what, s)?;
    let vectors = Array::from_slice(vectors, &[count as i64, features as i64])?;
    kernel_values(&rows, &vectors, kernel.unwrap_or("LINEAR"), params, s)
}

/// Declines what ORT's SVM kernels refuse when the session starts: an unknown kernel or
/// transform, `kernel_params` of other than 0 or 3 values.
fn svm_attributes(node: &Node) -> Verdict {
    if let Verdict::Decline { reason } = known_post_transform(node) {
        return Verdict::Decline { reason };
    }
    let kernel = node.attr_or("kernel_type", "LINEAR".to_string());
    if !KERNELS.contains(&kernel.as_str()) {
        return Verdict::decline(format!("kernel_type '{kernel}' is none of {KERNELS:?}"));
    }
    let params = node.attr_as::<Vec<f32>>("kernel_params").map(|p| p.len());
    if !matches!(params, Some(0 | 3)) {
        return Verdict::decline("kernel_params is absent or has other than 0 or 3 values");
    }
    rank_1_or_2(node)
}

/// The rows, checked against the model's feature count.
fn rows_of_width(x: &Array, features: usize, what: &str, s: &Stream) -> Result<Array> {
    let rows = feature_rows(x, s)?;
    let width = rows.shape()[1] as usize;
    if width != features {
        return Err(OpError::new(format!(
            "Invalid input for {what}: expected feature_count={features}, actual \
             num_features={width}"
        )));
    }
    Ok(rows)
}

/// `Σ coefficients[v] · K(x, sv_v) + rho[0]` over the `n_supports` support vectors, or
/// `x · coefficients + rho[0]` without them; `one_class` maps it to 1 above 0, else -1. ORT
/// ignores `post_transform` here.
#[onnx_op(
    domain = "ai.onnx.ml", op = "SVMRegressor", precision = Float32, since = 1, types(T = F32), inputs(X: T), outputs(Y: T),
    ignores(post_transform: String), shape = ShapeKeyed, claim = svm_regressor_claim,
    declines = "attributes ORT's kernel refuses (kernel, kernel_params, support vector and coefficient counts)"
)]
#[allow(clippy::too_many_arguments)] // ONNX's attribute list
fn svm_regressor(
    cx: &mut Lower,
    x: Array,
    #[attr] coefficients: Option<Vec<f32>>,
    #[attr] kernel_params: Option<Vec<f32>>,
    #[attr] kernel_type: Option<String>,
    #[attr] n_supports: Option<i64>,
    #[attr] one_class: Option<i64>,
    #[attr] rho: Option<Vec<f32>>,
    #[attr] support_vectors: Option<Vec<f32>>,
) -> Result<Array> {
    let s = cx.stream();
    let coefficients = coefficients.unwrap_or_default();
    let rho = rho.unwrap_or_default();
    let count = n_supports.unwrap_or(0);
    let y = if count > 0 {
        let count = count as usize;
        let vectors = support_vectors.unwrap_or_default();
        let params = kernel_params.unwrap_or_default();
        let kernel = kernel_type.as_deref();
        let k = against_support_vectors(&x, &vectors, count, kernel, &params, "SVMRegressor", s)?;
        let weights = Array::from_slice(&coefficients[..count], &[count as i64, 1])?;
        ops::matmul(&k, &weights, s)?
    } else {
        let rows = rows_of_width(&x, coefficients.len(), "SVMRegressor", s)?;
        let weights = Array::from_slice(&coefficients, &[coefficients.len() as i64, 1])?;
        ops::matmul(&rows, &weights, s)?
    };
    let y = ops::add(&y, &scalar_like(f64::from(rho[0]), &y, s)?, s)?;
    if one_class.unwrap_or(0) == 0 {
        return Ok(y);
    }
    let above = ops::greater(&y, &scalar_like(0.0, &y, s)?, s)?;
    Ok(ops::where_(
        &above,
        &scalar_like(1.0, &y, s)?,
        &scalar_like(-1.0, &y, s)?,
        s,
    )?)
}

fn svm_regressor_claim(node: &Node) -> Verdict {
    if let Verdict::Decline { reason } = svm_attributes(node) {
        return Verdict::Decline { reason };
    }
    let count = node.attr_or("n_supports", 0i64).max(0) as usize;
    let coefficients = node
        .attr_as::<Vec<f32>>("coefficients")
        .map_or(0, |c| c.len());
    let vectors = node
        .attr_as::<Vec<f32>>("support_vectors")
        .map_or(0, |v| v.len());
    let rho = node.attr_as::<Vec<f32>>("rho").map_or(0, |r| r.len());
    let fits = rho > 0
        && coefficients > 0
        && (count == 0 || (coefficients >= count && vectors > 0 && vectors.is_multiple_of(count)));
    if !fits {
        return Verdict::decline(format!(
            "{count} support vectors with {vectors} values, {coefficients} coefficients and \
             {rho} rho: counts ORT's kernel refuses"
        ));
    }
    Verdict::Claim
}

/// The classes' support vectors: where each class's start among them, and how many it has.
struct Classes {
    starts: Vec<usize>,
    counts: Vec<usize>,
    total: usize,
}

impl Classes {
    fn of(per_class: &[i64]) -> Classes {
        let counts: Vec<usize> = per_class.iter().map(|&c| c.max(0) as usize).collect();
        let starts = counts
            .iter()
            .scan(0, |at, &c| {
                let start = *at;
                *at += c;
                Some(start)
            })
            .collect();
        Classes {
            total: counts.iter().sum(),
            starts,
            counts,
        }
    }

    /// The class pairs `(i, j)`, `i < j`, in ORT's (and libsvm's) order.
    fn pairs(&self) -> Vec<(usize, usize)> {
        let n = self.counts.len();
        (0..n)
            .flat_map(|i| (i + 1..n).map(move |j| (i, j)))
            .collect()
    }

    /// The `[V, pairs]` weights whose product with the kernel values gives each pair's
    /// decision value (before rho): class `i`'s vectors weighted by coefficient row `j - 1`,
    /// class `j`'s by row `i` (libsvm's layout of its dual coefficients).
    fn pair_weights(&self, coefficients: &[f32]) -> Vec<f32> {
        let pairs = self.pairs();
        let v = self.total;
        let mut weights = vec![0.0f32; v * pairs.len()];
        for (column, &(i, j)) in pairs.iter().enumerate() {
            for (class, row) in [(i, j - 1), (j, i)] {
                for m in 0..self.counts[class] {
                    let vector = self.starts[class] + m;
                    weights[vector * pairs.len() + column] = coefficients[row * v + vector];
                }
            }
        }
        weights
    }
}

/// One-vs-one SVM classification: each class pair's decision value `d` (kernel values against
/// both classes' support vectors, weighted, plus that pair's rho) votes for the first class
/// when above 0, else the second; the label is the first class with the most votes. The
/// scores are the decision values, transformed, or for two classes `[-d, d]` (`[σ(-d), σ(d)]`
/// under LOGISTIC, `[1 - d, d]` under the softmaxes), as ORT lays them out. Without support
/// vectors the model is linear: `X·Wᵀ + rho[0]`, transformed, with ORT's two-class label rule.
#[onnx_op(
    domain = "ai.onnx.ml", op = "SVMClassifier", precision = Float32, since = 1, types(T = F32 | I64 | I32, L = I64, F = F32),
    inputs(X: T), outputs(Y: L, Z: F), shape = ShapeKeyed, claim = svm_classifier_claim,
    declines = "string labels; probabilities (prob_a/prob_b) with support vectors (libsvm's pairwise coupling is not built); PROBIT on two classes with support vectors (ORT leaves half its output unwritten); counts ORT's kernel refuses; one-vs-one tables past 2^28 entries"
)]
#[allow(clippy::too_many_arguments)] // ONNX's attribute list
fn svm_classifier(
    cx: &mut Lower,
    x: Array,
    #[attr] classlabels_ints: Option<Vec<i64>>,
    #[attr] classlabels_strings: Option<Vec<String>>,
    #[attr] coefficients: Option<Vec<f32>>,
    #[attr] kernel_params: Option<Vec<f32>>,
    #[attr] kernel_type: Option<String>,
    #[attr] post_transform: Option<String>,
    #[attr] prob_a: Option<Vec<f32>>,
    #[attr] prob_b: Option<Vec<f32>>,
    #[attr] rho: Option<Vec<f32>>,
    #[attr] support_vectors: Option<Vec<f32>>,
    #[attr] vectors_per_class: Option<Vec<i64>>,
) -> Result<Vec<Array>> {
    let s = cx.stream();
    let _ = (classlabels_strings, prob_b);
    let transform = PostTransform::named(post_transform.as_deref().unwrap_or("NONE"))?;
    let labels = classlabels_ints.unwrap_or_default();
    let classes = Classes::of(&vectors_per_class.unwrap_or_default());
    let coefficients = coefficients.unwrap_or_default();
    let rho = rho.unwrap_or_default();
    if classes.total == 0 {
        let count = labels.len();
        let features = coefficients.len() / count;
        let rows = rows_of_width(&x, features, "SVMClassifier", s)?;
        let weights = Array::from_slice(
            &coefficients[..count * features],
            &[count as i64, features as i64],
        )?;
        let scores = ops::add(
            &ops::matmul(&rows, &ops::transpose(&weights, &[1, 0], s)?, s)?,
            &Array::scalar(rho[0])?,
            s,
        )?;
        let with_probabilities = prob_a.is_some_and(|a| !a.is_empty());
        let index = if count == 2 && !with_probabilities {
            linear_two_class_choice(&scores, &coefficients, s)?
        } else {
            first_max(&scores, s)?
        };
        return Ok(vec![
            label_of(&labels, &index, s)?,
            transform.apply(&scores, s)?,
        ]);
    }
    let vectors = support_vectors.unwrap_or_default();
    let params = kernel_params.unwrap_or_default();
    let kernel = kernel_type.as_deref();
    let k = against_support_vectors(
        &x,
        &vectors,
        classes.total,
        kernel,
        &params,
        "SVMClassifier",
        s,
    )?;
    let pairs = classes.pairs();
    let weights = Array::from_slice(
        &classes.pair_weights(&coefficients),
        &[classes.total as i64, pairs.len() as i64],
    )?;
    let rho = Array::from_slice(&rho[..pairs.len()], &[pairs.len() as i64])?;
    let decisions = ops::add(&ops::matmul(&k, &weights, s)?, &rho, s)?;
    let votes = pair_votes(&decisions, &pairs, labels.len(), s)?;
    let label = label_of(&labels, &ops::argmax(&votes, 1, false, s)?, s)?;
    let scores = if labels.len() == 2 {
        let d = decisions;
        let minus = match transform {
            PostTransform::Logistic => {
                let negated = ops::negative(&d, s)?;
                return Ok(vec![
                    label,
                    ops::concatenate(&[logistic(&negated, s)?, logistic(&d, s)?], 1, s)?,
                ]);
            }
            PostTransform::None => ops::negative(&d, s)?,
            _ => ops::subtract(&scalar_like(1.0, &d, s)?, &d, s)?,
        };
        ops::concatenate(&[minus, d], 1, s)?
    } else {
        transform.apply(&decisions, s)?
    };
    Ok(vec![label, scores])
}

/// Votes per class ([N, classes], float32): each pair's decision value above 0 votes for its
/// first class, else for its second.
fn pair_votes(
    decisions: &Array,
    pairs: &[(usize, usize)],
    classes: usize,
    s: &Stream,
) -> Result<Array> {
    let mut first = vec![0.0f32; pairs.len() * classes];
    let mut second = vec![0.0f32; pairs.len() * classes];
    for (p, &(i, j)) in pairs.iter().enumerate() {
        first[p * classes + i] = 1.0;
        second[p * classes + j] = 1.0;
    }
    let shape = [pairs.len() as i64, classes as i64];
    let above = ops::astype(
        &ops::greater(decisions, &scalar_like(0.0, decisions, s)?, s)?,
        Dtype::F32,
        s,
    )?;
    let below = ops::subtract(&scalar_like(1.0, &above, s)?, &above, s)?;
    Ok(ops::add(
        &ops::matmul(&above, &Array::from_slice(&first, &shape)?, s)?,
        &ops::matmul(&below, &Array::from_slice(&second, &shape)?, s)?,
        s,
    )?)
}

/// ORT's label for a linear two-class SVM without probabilities: the second class when every
/// weight is at least 0 and the best score reaches 0.5, or when some weight is negative and
/// the best score is above 0; otherwise the best score's class.
fn linear_two_class_choice(scores: &Array, coefficients: &[f32], s: &Stream) -> Result<Array> {
    let all_positive = coefficients.iter().all(|&w| w >= 0.0);
    let best = ops::max(scores, &[1], false, s)?;
    let second = if all_positive {
        ops::greater_equal(&best, &scalar_like(0.5, &best, s)?, s)?
    } else {
        ops::greater(&best, &scalar_like(0.0, &best, s)?, s)?
    };
    let index = ops::astype(&first_max(scores, s)?, Dtype::I32, s)?;
    Ok(ops::where_(&second, &Array::scalar(1i32)?, &index, s)?)
}

/// The most entries a one-vs-one table may hold (2^28: 1 GiB of float32), so that a host
/// allocation for a model with thousands of classes cannot abort the process.
const MAX_PAIR_TABLE_ENTRIES: usize = 1 << 28;

fn svm_classifier_claim(node: &Node) -> Verdict {
    if let Verdict::Decline { reason } = svm_attributes(node) {
        return Verdict::Decline { reason };
    }
    if node.attr_as::<Vec<String>>("classlabels_strings").is_some() {
        return Verdict::decline("string labels (MLX holds no strings)");
    }
    let len = |name: &str| node.attr_as::<Vec<f32>>(name).map_or(0, |v| v.len());
    let labels = node
        .attr_as::<Vec<i64>>("classlabels_ints")
        .map_or(0, |l| l.len());
    let per_class = node
        .attr_as::<Vec<i64>>("vectors_per_class")
        .unwrap_or_default();
    let total: i64 = per_class.iter().sum();
    let pairs = labels * labels.saturating_sub(1) / 2;
    let probabilities = len("prob_a");
    let post = node.attr_or("post_transform", "NONE".to_string());
    if labels < 2 || probabilities != len("prob_b") || len("rho") == 0 {
        return Verdict::decline(format!(
            "{labels} labels, {probabilities} prob_a for {} prob_b, {} rho: ORT's kernel \
             refuses these (or, for one label, writes an odd layout)",
            len("prob_b"),
            len("rho")
        ));
    }
    if total == 0 {
        let coefficients = len("coefficients");
        return if coefficients >= labels && coefficients % labels == 0 {
            Verdict::Claim
        } else {
            Verdict::decline(format!(
                "{coefficients} coefficients for {labels} linear classes"
            ))
        };
    }
    let total = total as usize;
    let fits = per_class.len() == labels
        && per_class.iter().all(|&c| c >= 0)
        && len("support_vectors") % total == 0
        && len("support_vectors") > 0
        && len("coefficients") >= (labels - 1) * total
        && len("rho") >= pairs;
    if !fits {
        return Verdict::decline("support vector, coefficient or rho counts ORT's kernel refuses");
    }
    // The one-vs-one tables: support vectors by class pairs, and class pairs by classes.
    let entries = pairs.saturating_mul(total.max(labels));
    if entries > MAX_PAIR_TABLE_ENTRIES {
        return Verdict::decline(format!(
            "{labels} classes and {total} support vectors: one-vs-one tables of {entries} \
             entries, past the EP's {MAX_PAIR_TABLE_ENTRIES}"
        ));
    }
    if probabilities > 0 {
        return Verdict::decline(
            "probabilities (prob_a/prob_b): libsvm's pairwise coupling is not built here",
        );
    }
    if labels == 2 && post == "PROBIT" {
        return Verdict::decline("PROBIT on two classes: ORT leaves half its output unwritten");
    }
    Verdict::Claim
}
