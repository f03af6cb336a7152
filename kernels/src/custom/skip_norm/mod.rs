//! ORT's skip norms in one kernel: `SkipSimplifiedLayerNormalization` and
//! `SkipLayerNormalization`, the two norms of each decoder layer in the LLMs genai's builder
//! emits, and of BERT-style encoders ORT's transformer fusions leave.
//!
//! Such a node normalises `x + skip (+ bias)` formed in float32, from those float32 values, and
//! gives the sum rounded to x's type as a second output (the residual stream the next layer
//! adds to). Composed, that is one kernel for the casts and the sum and one for the norm; here
//! the norm's row loader forms the sum (`row_of_skip_sum.cu`) before the RMS or layer-norm
//! body, bit for bit the composed values.

use super::{Backend, Kernel, TemplateArg};
use crate::error::{Error, Result};
use crate::{ops, Array, Dtype, Stream};

/// Which norm of the sum: RMS (`SkipSimplifiedLayerNormalization`), or standardised with an
/// optional float32 bias (`SkipLayerNormalization`'s beta).
#[derive(Clone, Copy, Debug)]
pub enum SkipNorm<'a> {
    Rms,
    Layer { bias: Option<&'a Array> },
}

/// Whether these kernels run on `stream`: MLX's CUDA backend, or Metal through the twins once
/// the stream's `KernelChoice::metal_twins` is on.
pub fn skip_norm_runs_on(stream: &Stream) -> bool {
    super::runs_on(stream, &[Backend::Cuda, Backend::Metal])
}

/// Whether [`norm_of_skip_sum`] takes rows of `width` elements from `input` to `output` types,
/// as the norm's own kernel does.
pub fn skip_norm_takes(norm: SkipNorm<'_>, width: i64, input: Dtype, output: Dtype) -> bool {
    match norm {
        SkipNorm::Rms => super::rms_norm_takes(width, input, output),
        SkipNorm::Layer { .. } => super::layer_norm_takes(width, input, output),
    }
}

const THREADS: i32 = 256;

/// `norm` of `x + skip + skip_bias` over the last axis, the sum formed in float32 and normalised
/// from it, weighted by `weight` (float32, the width), rounded once to `output`; and where
/// `keep_sum` the sum rounded to x's type, x's shape. `skip` is x's type with rows of the same
/// width, row `r` of x adding row `r % skip's rows` (ORT's skip of `[S, H]`, `[1, S, H]` or
/// x's shape); `skip_bias` float32 of the width.
pub fn norm_of_skip_sum(
    norm: SkipNorm<'_>,
    (x, skip, skip_bias): (&Array, &Array, Option<&Array>),
    weight: &Array,
    epsilon: f32,
    output: Dtype,
    keep_sum: bool,
    stream: &Stream,
) -> Result<(Array, Option<Array>)> {
    let (rows, width) = super::rows_of(x);
    let skip_rows = if width > 0 {
        skip.size() as i64 / width
    } else {
        0
    };
    let parameter = |p: &Array| p.dtype() == Dtype::F32 && p.shape() == [width];
    // The kernel's name and arguments, body, and layer norm's bias (read only under HAS_BIAS).
    let (name, inputs, cuda, metal, bias): (_, &[&str], _, _, _) = match norm {
        SkipNorm::Rms => (
            "rms_norm_of_skip_sum",
            &["x", "skip", "skip_bias", "weight"],
            concat!(
                include_str!("row_of_skip_sum.cu"),
                include_str!("../per_row.cu"),
                include_str!("../rms_norm/rms_norm.cu")
            ),
            concat!(
                include_str!("row_of_skip_sum.metal"),
                include_str!("../per_row.metal"),
                include_str!("../rms_norm/rms_norm.metal")
            ),
            None,
        ),
        SkipNorm::Layer { bias } => (
            "layer_norm_of_skip_sum",
            &["x", "skip", "skip_bias", "weight", "bias"],
            concat!(
                include_str!("row_of_skip_sum.cu"),
                include_str!("../per_row.cu"),
                include_str!("../layer_norm/layer_norm.cu")
            ),
            concat!(
                include_str!("row_of_skip_sum.metal"),
                include_str!("../per_row.metal"),
                include_str!("../layer_norm/layer_norm.metal")
            ),
            Some(bias),
        ),
    };
    let fits = rows > 0
        && skip_norm_takes(norm, width, x.dtype(), output)
        && skip.dtype() == x.dtype()
        && skip.shape().last() == Some(&width)
        && skip_rows > 0
        && parameter(weight)
        && skip_bias.is_none_or(parameter)
        && bias.flatten().is_none_or(parameter);
    if !fits {
        return Err(Error::Shape(format!(
            "{name}: operands do not fit (x {:?} {:?}, skip {:?} {:?}, weight {:?} {:?}, output \
             {output:?})",
            x.shape(),
            x.dtype(),
            skip.shape(),
            skip.dtype(),
            weight.shape(),
            weight.dtype()
        )));
    }
    // Two dimensions, so that the body reads skip's rows as `skip_shape[0]`.
    let skip = ops::reshape(skip, &[skip_rows, width], stream)?;
    let mut constants = vec![
        ("KEEP_SUM", TemplateArg::Int(i32::from(keep_sum))),
        (
            "HAS_SKIP_BIAS",
            TemplateArg::Int(i32::from(skip_bias.is_some())),
        ),
    ];
    // Operands a body does not read (no skip bias, no bias) are filled by the weight.
    let skip_bias = skip_bias.unwrap_or(weight);
    constants.extend(super::float_constant(
        "EPSILON_MAGNITUDE",
        "EPSILON_NEGATIVE",
        epsilon,
    ));
    let mut operands = vec![x, &skip, skip_bias, weight];
    if let Some(bias) = bias {
        constants.push(("HAS_BIAS", TemplateArg::Int(i32::from(bias.is_some()))));
        operands.push(bias.unwrap_or(weight));
    }
    let kernel = Kernel {
        name,
        inputs,
        outputs: &["out", "sum"],
        cuda,
        metal: Some(metal),
    };
    let sum_shape = match keep_sum {
        true => super::sizes(name, &x.shape())?,
        // Not written: one element MLX allocates and the caller never sees.
        false => vec![1],
    };
    let more = [(sum_shape.as_slice(), x.dtype())];
    let (out, mut sums) = super::apply_per_row(
        &kernel, &operands, output, &more, THREADS, constants, stream,
    )?;
    Ok((out, sums.pop().filter(|_| keep_sum)))
}

#[cfg(test)]
mod emulated_tests;
