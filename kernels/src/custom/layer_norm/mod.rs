//! Layer normalisation over the last axis in float32, rounded once to the output type.
//!
//! A transformer's layer norms under the `precision` option (and in a float16 graph) take
//! half-type activations with float32 weights and give the half type. MLX's fused kernel
//! rounds the normalised x to x's type before the weight and bias, where ORT rounds once, so it
//! runs on float32 between a cast before and one after: three launches, and twice the bytes,
//! where this kernel reads the input type and writes the output type. A transformer block's
//! residual add and the norm of its sum are one kernel too ([`layer_norm_of_sum`]), which also
//! writes the sum where other nodes read it.

use super::{Backend, Kernel, TemplateArg};
use crate::error::{Error, Result};
use crate::{Array, Dtype, Stream};

/// Whether this kernel (and [`layer_norm_of_sum`]) runs on `stream`: MLX's CUDA backend, or
/// Metal through the twins when the stream's `KernelChoice::metal_twins` is on.
pub fn layer_norm_runs_on(stream: &Stream) -> bool {
    super::runs_on(stream, &[Backend::Cuda, Backend::Metal])
}

/// The widest row one launch takes (each thread keeps its share in registers).
const LAYER_NORM_MAX_WIDTH: i64 = 8192;
const THREADS: i32 = 256;

/// Whether [`layer_norm`] takes rows of `width` elements from `input` to `output` types (each
/// float32, float16 or bfloat16).
pub fn layer_norm_takes(width: i64, input: Dtype, output: Dtype) -> bool {
    let float = |t| matches!(t, Dtype::F32 | Dtype::F16 | Dtype::BF16);
    (1..=LAYER_NORM_MAX_WIDTH).contains(&width) && float(input) && float(output)
}

/// `(x - mean) / sqrt(var + epsilon) · weight + bias` over the last axis of `x` (at least one
/// row), the statistics and the affine step in float32 (`weight` and `bias` float32, the last
/// axis's length), rounded once to `output`.
pub fn layer_norm(
    x: &Array,
    weight: &Array,
    bias: Option<&Array>,
    epsilon: f32,
    output: Dtype,
    stream: &Stream,
) -> Result<Array> {
    check_operands("layer_norm", x, weight, bias, output)?;
    let kernel = Kernel {
        name: "layer_norm_rounded",
        inputs: &["x", "weight", "bias"],
        outputs: super::OUT,
        cuda: concat!(
            include_str!("../row_of_x.cu"),
            include_str!("../per_row.cu"),
            include_str!("layer_norm.cu")
        ),
        metal: Some(concat!(
            include_str!("../row_of_x.metal"),
            include_str!("../per_row.metal"),
            include_str!("layer_norm.metal")
        )),
    };
    // Without a bias the weight fills its operand (the body does not read it under HAS_BIAS 0).
    let operands = [x, weight, bias.unwrap_or(weight)];
    let constants = constants(bias.is_some(), epsilon, []);
    super::apply_per_row(&kernel, &operands, output, &[], THREADS, constants, stream)
        .map(|(out, _)| out)
}

/// [`layer_norm`] of `x + residual` (one type, one shape), that sum rounded to their type as
/// MLX's add rounds it, in one kernel: the normalised sum, and where `keep_sum` the sum itself
/// (a transformer's residual stream, which the next block adds to again).
pub fn layer_norm_of_sum(
    (x, residual): (&Array, &Array),
    weight: &Array,
    bias: Option<&Array>,
    epsilon: f32,
    output: Dtype,
    keep_sum: bool,
    stream: &Stream,
) -> Result<(Array, Option<Array>)> {
    check_operands("layer_norm_of_sum", x, weight, bias, output)?;
    if residual.dtype() != x.dtype() || residual.shape() != x.shape() {
        return Err(Error::Shape(format!(
            "layer_norm_of_sum: the residual ({:?} {:?}) is not x's shape and type ({:?} {:?})",
            residual.shape(),
            residual.dtype(),
            x.shape(),
            x.dtype()
        )));
    }
    let kernel = Kernel {
        name: "layer_norm_of_sum",
        inputs: &["x", "residual", "weight", "bias"],
        outputs: &["out", "sum"],
        cuda: concat!(
            include_str!("row_of_sum.cu"),
            include_str!("../per_row.cu"),
            include_str!("layer_norm.cu")
        ),
        metal: Some(concat!(
            include_str!("row_of_sum.metal"),
            include_str!("../per_row.metal"),
            include_str!("layer_norm.metal")
        )),
    };
    let operands = [x, residual, weight, bias.unwrap_or(weight)];
    let sum_shape = match keep_sum {
        true => super::sizes("layer_norm_of_sum", &x.shape())?,
        // Not written: one element MLX allocates and the caller never sees.
        false => vec![1],
    };
    let constants = constants(
        bias.is_some(),
        epsilon,
        [("KEEP_SUM", TemplateArg::Int(i32::from(keep_sum)))],
    );
    let more = [(sum_shape.as_slice(), x.dtype())];
    let (out, mut sums) = super::apply_per_row(
        &kernel, &operands, output, &more, THREADS, constants, stream,
    )?;
    Ok((out, sums.pop().filter(|_| keep_sum)))
}

/// Refuses operands the body cannot take: no rows, a width or a type it does not take, or
/// parameters that are not float32 of the width.
fn check_operands(
    kernel: &str,
    x: &Array,
    weight: &Array,
    bias: Option<&Array>,
    output: Dtype,
) -> Result<()> {
    let (rows, width) = super::rows_of(x);
    let parameter = |p: &Array| p.dtype() == Dtype::F32 && p.shape() == [width];
    let fits = rows > 0
        && layer_norm_takes(width, x.dtype(), output)
        && parameter(weight)
        && bias.is_none_or(parameter);
    if fits {
        return Ok(());
    }
    Err(Error::Shape(format!(
        "{kernel}: operands do not fit (x {:?} {:?}, weight {:?} {:?}, bias {:?}, output \
         {output:?})",
        x.shape(),
        x.dtype(),
        weight.shape(),
        weight.dtype(),
        bias.map(|b| (b.shape(), b.dtype()))
    )))
}

/// The body's template constants beyond per_row's: whether there is a bias, the epsilon, and
/// `more`.
fn constants(
    has_bias: bool,
    epsilon: f32,
    more: impl IntoIterator<Item = (&'static str, TemplateArg)>,
) -> Vec<(&'static str, TemplateArg)> {
    let mut constants = vec![("HAS_BIAS", TemplateArg::Int(i32::from(has_bias)))];
    constants.extend(super::float_constant(
        "EPSILON_MAGNITUDE",
        "EPSILON_NEGATIVE",
        epsilon,
    ));
    constants.extend(more);
    constants
}

#[cfg(test)]
mod emulated_tests;
