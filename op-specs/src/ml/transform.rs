//! The score transforms ai.onnx.ml's models end with (`post_transform`), written with ORT's
//! formulas (`ml_common.h`): the same float32 steps, including its approximations, so that a
//! probability matches ORT's to float32 rounding and not only to the exact function's value.

use mlx_kernels::{ops, Array, Stream};

use crate::table::consts::scalar_like;
use crate::{OpError, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostTransform {
    None,
    Logistic,
    Softmax,
    SoftmaxZero,
    Probit,
}

impl PostTransform {
    /// The attribute's value.
    pub fn named(name: &str) -> Result<PostTransform> {
        Ok(match name {
            "NONE" => PostTransform::None,
            "LOGISTIC" => PostTransform::Logistic,
            "SOFTMAX" => PostTransform::Softmax,
            "SOFTMAX_ZERO" => PostTransform::SoftmaxZero,
            "PROBIT" => PostTransform::Probit,
            other => {
                return Err(OpError::new(format!(
                    "post_transform '{other}' is none of NONE, LOGISTIC, SOFTMAX, SOFTMAX_ZERO, \
                     PROBIT"
                )))
            }
        })
    }

    /// The transform of `scores` (`[N, C]` float32), row by row.
    pub fn apply(self, scores: &Array, s: &Stream) -> Result<Array> {
        match self {
            PostTransform::None => Ok(scores.clone()),
            PostTransform::Logistic => logistic(scores, s),
            PostTransform::Softmax => softmax(scores, false, s),
            PostTransform::SoftmaxZero => softmax(scores, true, s),
            PostTransform::Probit => probit(scores, s),
        }
    }
}

/// `1 / (1 + e^-|x|)`, mirrored for negative `x`: ORT's logistic.
pub fn logistic(x: &Array, s: &Stream) -> Result<Array> {
    let one = scalar_like(1.0, x, s)?;
    let e = ops::exp(&ops::negative(&ops::abs(x, s)?, s)?, s)?;
    let v = ops::divide(&one, &ops::add(&one, &e, s)?, s)?;
    let negative = ops::less(x, &scalar_like(0.0, x, s)?, s)?;
    Ok(ops::where_(&negative, &ops::subtract(&one, &v, s)?, &v, s)?)
}

/// Softmax over the last axis, from the row's maximum. With `keep_zeros` (SOFTMAX_ZERO) an
/// entry within 1e-7 of zero is not exponentiated: it becomes `x · e^-max`, its share of what
/// ORT divides by the sum of the other entries' exponentials.
fn softmax(x: &Array, keep_zeros: bool, s: &Stream) -> Result<Array> {
    let last = x.ndim() as i32 - 1;
    let max = ops::max(x, &[last], true, s)?;
    let exp = ops::exp(&ops::subtract(x, &max, s)?, s)?;
    if !keep_zeros {
        let sum = ops::sum(&exp, &[last], true, s)?;
        return Ok(ops::divide(&exp, &sum, s)?);
    }
    let tiny = scalar_like(1e-7, x, s)?;
    let zero_like = ops::less_equal(&ops::abs(x, s)?, &tiny, s)?;
    let scaled = ops::multiply(x, &ops::exp(&ops::negative(&max, s)?, s)?, s)?;
    let zero = scalar_like(0.0, x, s)?;
    let counted = ops::where_(&zero_like, &zero, &exp, s)?;
    let sum = ops::sum(&counted, &[last], true, s)?;
    let values = ops::where_(&zero_like, &scaled, &exp, s)?;
    Ok(ops::divide(&values, &sum, s)?)
}

/// `√2 · erfinv(2x - 1)` with ORT's erfinv: Winitzki's approximation (a = 0.147), in float32
/// with float32's π and √2.
fn probit(x: &Array, s: &Stream) -> Result<Array> {
    let c = |v: f64| scalar_like(v, x, s);
    let y = ops::subtract(&ops::multiply(x, &c(2.0)?, s)?, &c(1.0)?, s)?;
    let sign = ops::where_(&ops::less(&y, &c(0.0)?, s)?, &c(-1.0)?, &c(1.0)?, s)?;
    let one = c(1.0)?;
    let w = ops::multiply(&ops::subtract(&one, &y, s)?, &ops::add(&one, &y, s)?, s)?;
    let log = ops::log(&w, s)?;
    let a = ops::add(
        &c(f64::from(2.0f32 / (std::f32::consts::PI * 0.147f32)))?,
        &ops::multiply(&c(0.5)?, &log, s)?,
        s,
    )?;
    let b = ops::multiply(&c(f64::from(1.0f32 / 0.147f32))?, &log, s)?;
    let root = ops::sqrt(&ops::subtract(&ops::square(&a, s)?, &b, s)?, s)?;
    let inner = ops::sqrt(&ops::subtract(&root, &a, s)?, s)?;
    let erfinv = ops::multiply(&sign, &inner, s)?;
    Ok(ops::multiply(
        &c(f64::from(std::f32::consts::SQRT_2))?,
        &erfinv,
        s,
    )?)
}
