//! The normalisations ORT's transformer fusions emit: SimplifiedLayerNormalization (ORT's, in
//! the default domain), and com.microsoft SkipLayerNormalization,
//! SkipSimplifiedLayerNormalization, EmbedLayerNormalization and SkipGroupNorm.
//!
//! As ORT's CPU kernels do, the residual sum is formed in float32, normalised from those float32
//! values, and rounded to the element type only where it leaves the node.

use mlx_kernels::{custom, ops, Array, Dtype, Stream};

use crate::activation::silu_of;
use crate::normalization::{
    cast, float32_constant, group_standardise, layer_norm_claim, layer_norm_rounded, rms_norm_over,
    rms_norm_rounded, standardise,
};
use crate::table::consts::{scalar_like, zeros};
use crate::{onnx_op, Lower, OpError, Result};

/// `X / sqrt(mean(X²) + epsilon) * scale` over the axes from `axis` on (statistics in
/// float32), and the inverse RMS when asked for.
#[onnx_op(
    op = "SimplifiedLayerNormalization", precision = Float32, since = 1, types(T = FLOAT, V = FLOAT, U = F32),
    ignores(stash_type: i64), inputs(X: T, scale: V), outputs(Y: V, inv_std_var?: U), shape = ShapeKeyed,
    claim = layer_norm_claim, declines = "stash_type other than 1 (float32)"
)]
fn simplified_layer_normalization(
    cx: &mut Lower,
    x: Array,
    scale: Array,
    #[attr(default = -1)] axis: i64,
    #[attr(default = 1e-5)] epsilon: f32,
) -> Result<Vec<Array>> {
    let only_y = !cx.node().output_present(1);
    rms_norm_over(cx, &x, &scale, axis, epsilon, only_y)
}

/// `input + skip + bias` in float32 (skip broadcasts from `[S, H]` or `[1, S, H]`).
fn residual_sum(input: &Array, skip: &Array, bias: Option<&Array>, s: &Stream) -> Result<Array> {
    let wide = |a: &Array| cast(a, Dtype::F32, s);
    let sum = ops::add(&wide(input)?, &wide(skip)?, s)?;
    Ok(match bias {
        Some(b) => ops::add(&sum, &wide(b)?, s)?,
        None => sum,
    })
}

/// Layer normalisation of `input + skip + bias` over the last axis, with `gamma` and `beta`;
/// the optional outputs are the mean, the inverse standard deviation and the sum itself.
#[onnx_op(
    domain = "com.microsoft", op = "SkipLayerNormalization", precision = Float32, since = 1, types(T = FLOAT, U = F32),
    inputs(input: T, skip: T, gamma: T, beta: T, bias: T),
    outputs(output: T, mean?: U, inv_std_var?: U, input_skip_bias_sum?: T), shape = ShapeKeyed,
    claim = skip_layer_norm_claim,
    declines = "a negative epsilon (ORT's kernel refuses it); declared ranks ORT's kernel refuses (skip not 2-3, gamma/beta/bias not 1)"
)]
fn skip_layer_normalization(
    cx: &mut Lower,
    input: Array,
    skip: Array,
    gamma: Array,
    beta: Option<Array>,
    bias: Option<Array>,
    #[attr(default = 1e-12)] epsilon: f32,
) -> Result<Vec<Array>> {
    skip_norm(
        cx,
        &input,
        &skip,
        &gamma,
        beta.as_ref(),
        bias.as_ref(),
        epsilon,
        true,
    )
}

/// `[output, mean, inv_std_var, input_skip_bias_sum]` of a skip norm over the last axis:
/// standardised (`centred`) or RMS-scaled `input + skip + bias`, times `gamma`, plus `beta`;
/// only `[output]` when the node asks for nothing else. `gamma` is input 2, then `beta` (3)
/// and `bias` (4) when `centred`, else `bias` (3).
#[allow(clippy::too_many_arguments)] // the inputs of the skip norms, and how to normalise
fn skip_norm(
    cx: &mut Lower,
    input: &Array,
    skip: &Array,
    gamma: &Array,
    beta: Option<&Array>,
    bias: Option<&Array>,
    epsilon: f32,
    centred: bool,
) -> Result<Vec<Array>> {
    let s = cx.stream();
    if !(2..=3).contains(&input.ndim()) {
        return Err(OpError::new(format!(
            "input has rank {}: ORT's kernel takes [batch, sequence, hidden] or [tokens, hidden]",
            input.ndim()
        )));
    }
    if input.shape().last().is_none_or(|&hidden| hidden == 0) {
        return Err(OpError::new(format!(
            "input has shape {:?}: its last axis (hidden_size) must be positive",
            input.shape()
        )));
    }
    skip_norm_shapes(
        input,
        skip,
        [("gamma", Some(gamma)), ("beta", beta), ("bias", bias)],
    )?;
    let bias_input = if centred { 4 } else { 3 };
    let bias = bias
        .map(|b| float32_constant(cx, "bias", bias_input, b))
        .transpose()?;
    let gamma = float32_constant(cx, "gamma", 2, gamma)?;
    let beta = beta
        .map(|b| float32_constant(cx, "beta", 3, b))
        .transpose()?;
    let with_sum = cx.node().output_present(3);
    let only_output_and_sum = !cx.node().output_present(1) && !cx.node().output_present(2);
    let norm = match centred {
        true => custom::SkipNorm::Layer {
            bias: beta.as_ref(),
        },
        false => custom::SkipNorm::Rms,
    };
    let width = input.shape().last().copied().unwrap_or(0);
    if only_output_and_sum
        && input.size() > 0
        && custom::skip_norm_runs_on(s)
        && custom::skip_norm_takes(norm, width, input.dtype(), input.dtype())
    {
        // One kernel forms the float32 sum (skip rows taken modulo, as ORT reads them) and
        // normalises it: the same values as the composed path below.
        let (y, sum) = custom::norm_of_skip_sum(
            norm,
            (input, skip, bias.as_ref()),
            &gamma,
            epsilon,
            input.dtype(),
            with_sum,
            s,
        )?;
        let Some(sum) = sum else {
            return Ok(vec![y]);
        };
        // Slots 1 and 2 are not connected: nothing reads what fills them.
        return Ok(vec![y, sum.clone(), sum.clone(), sum]);
    }
    let skip = batch_of_skip(input, skip, s)?;
    let sum = residual_sum(input, &skip, bias.as_ref(), s)?;
    if only_output_and_sum {
        // MLX's fused kernels (gamma and beta are 1-D, checked above): the same float32
        // statistics over the last axis, one pass.
        let y = if centred {
            layer_norm_rounded(&sum, &gamma, beta.as_ref(), epsilon, input.dtype(), s)?
        } else {
            rms_norm_rounded(&sum, &gamma, epsilon, input.dtype(), s)?
        };
        if !with_sum {
            return Ok(vec![y]);
        }
        // Slots 1 and 2 are not connected: nothing reads what fills them.
        let sum_out = cast(&sum, input.dtype(), s)?;
        return Ok(vec![y, sum.clone(), sum, sum_out]);
    }
    let last = input.ndim() as i32 - 1;
    let stats = standardise(&sum, &[last], epsilon, centred, s)?;
    let mut y = ops::multiply(&stats.normalised, &gamma, s)?;
    if let Some(beta) = beta {
        y = ops::add(&y, &beta, s)?;
    }
    Ok(vec![
        cast(&y, input.dtype(), s)?,
        stats.mean,
        stats.inv_std,
        cast(&sum, input.dtype(), s)?,
    ])
}

/// The shape contract ORT's SkipLayerNorm kernels check before they run, with their words:
/// skip `[B, S, H]`, `[1, S, H]` or `[S, H]` (the input's shape when the input is 2-D),
/// gamma, beta and bias `[H]`.
fn skip_norm_shapes<const N: usize>(
    input: &Array,
    skip: &Array,
    parameters: [(&str, Option<&Array>); N],
) -> Result<()> {
    let (x, k) = (input.shape(), skip.shape());
    if !(2..=3).contains(&k.len()) {
        return Err(OpError::new(format!(
            "skip is expected to have 3 or 2 dimensions, got {} (ORT's kernel refuses it too)",
            k.len()
        )));
    }
    if x.len() == 2 && k.len() == 3 {
        return Err(OpError::new(
            "skip is expected to have same shape as input or, a batch size of 1 or no batch size \
             when input has 3 dimensions (ORT's kernel refuses it too)",
        ));
    }
    if k[k.len() - 2..] != x[x.len() - 2..] {
        return Err(OpError::new(format!(
            "last two dimensions of skip needs to be same as input: skip {k:?}, input {x:?} \
             (ORT's kernel refuses it too)"
        )));
    }
    let hidden = x[x.len() - 1];
    for (name, p) in parameters {
        let Some(p) = p else { continue };
        if p.ndim() != 1 {
            return Err(OpError::new(format!(
                "{name} is expected to have 1 dimension, got {} (ORT's kernel refuses it too)",
                p.ndim()
            )));
        }
        if p.shape()[0] != hidden {
            return Err(OpError::new(format!(
                "Last dimension of {name} and input does not match: {name} {:?}, input {x:?} \
                 (ORT's kernel refuses it too)",
                p.shape()
            )));
        }
    }
    Ok(())
}

/// A 3-D skip whose batch is neither 1 nor the input's: ORT's kernel reads skip element
/// `i % skip.size()` for input element `i`, so sample `b` takes skip sample `b % skip_batch`.
fn batch_of_skip(input: &Array, skip: &Array, s: &Stream) -> Result<Array> {
    let (batch, skip_batch) = (input.shape()[0], skip.shape()[0]);
    if skip.ndim() != 3 || skip_batch == 1 || skip_batch == batch {
        return Ok(skip.clone());
    }
    if skip_batch == 0 {
        return Err(OpError::new(format!(
            "skip has shape {:?}: an empty skip for a non-empty input",
            skip.shape()
        )));
    }
    let picks: Vec<i32> = (0..batch).map(|b| (b % skip_batch) as i32).collect();
    let picks = Array::from_slice(&picks, &[batch])?;
    Ok(ops::take(skip, &picks, 0, s)?)
}

/// Declared ranks ORT's kernel refuses (see [`skip_norm_shapes`]), declined so that ORT's CPU
/// EP reports them. Rank 0 is also how ORT's API describes a value of unknown shape, so a
/// scalar is left to the run-time check.
fn skip_norm_ranks_claim(node: &crate::Node, parameters: &[(usize, &str)]) -> crate::Verdict {
    if let Some(rank) = node.input_rank(1).filter(|&r| r > 3 || r == 1) {
        return crate::Verdict::decline(format!(
            "skip of rank {rank} (ORT's kernel takes 2 or 3 dimensions)"
        ));
    }
    for &(index, name) in parameters {
        if let Some(rank) = node.input_rank(index).filter(|&r| r > 1) {
            return crate::Verdict::decline(format!(
                "{name} of rank {rank} (ORT's kernel takes 1 dimension)"
            ));
        }
    }
    crate::Verdict::Claim
}

fn skip_layer_norm_claim(node: &crate::Node) -> crate::Verdict {
    match skip_norm_ranks_claim(node, &[(2, "gamma"), (3, "beta"), (4, "bias")]) {
        crate::Verdict::Claim => non_negative_epsilon(node),
        declined => declined,
    }
}

/// RMS normalisation of `input + skip + bias` over the last axis, scaled by `gamma`; the
/// optional outputs are the inverse RMS and the sum. The `mean` output is declined: a
/// simplified norm has none (ORT's CPU kernel leaves it unspecified).
#[onnx_op(
    domain = "com.microsoft", op = "SkipSimplifiedLayerNormalization", precision = Float32, since = 1, types(T = FLOAT, U = F32),
    inputs(input: T, skip: T, gamma: T, bias: T),
    outputs(output: T, mean?: U, inv_std_var?: U, input_skip_bias_sum?: T), shape = ShapeKeyed,
    claim = simplified_skip_claim,
    declines = "the mean output (a simplified norm has no mean); a negative epsilon (ORT's kernel refuses it); declared ranks ORT's kernel refuses (skip not 2-3, gamma/bias not 1)"
)]
fn skip_simplified_layer_normalization(
    cx: &mut Lower,
    input: Array,
    skip: Array,
    gamma: Array,
    bias: Option<Array>,
    #[attr(default = 1e-12)] epsilon: f32,
) -> Result<Vec<Array>> {
    skip_norm(
        cx,
        &input,
        &skip,
        &gamma,
        None,
        bias.as_ref(),
        epsilon,
        false,
    )
}

fn simplified_skip_claim(node: &crate::Node) -> crate::Verdict {
    if node.output_present(1) {
        return crate::Verdict::decline(
            "the mean output of a simplified norm (ORT leaves it unspecified)",
        );
    }
    match skip_norm_ranks_claim(node, &[(2, "gamma"), (3, "bias")]) {
        crate::Verdict::Claim => non_negative_epsilon(node),
        declined => declined,
    }
}

/// ORT's SkipLayerNorm and EmbedLayerNorm kernels refuse a negative epsilon when the session
/// is created; declined, ORT's CPU EP fails the same way.
fn non_negative_epsilon(node: &crate::Node) -> crate::Verdict {
    match node.attr_as::<f32>("epsilon") {
        Some(e) if e.is_nan() || e < 0.0 => {
            crate::Verdict::decline(format!("epsilon {e}: ORT's kernel requires epsilon >= 0"))
        }
        _ => crate::Verdict::Claim,
    }
}

/// Rows of `table` at `ids`. ORT's kernel fails the run on an id outside `[0, rows)` (no
/// negative ids from the end), so does a run-time check; the ids are clamped as well, since
/// MLX evaluates the gather before the check is read.
fn embed(cx: &mut Lower, table: &Array, ids: &Array, what: &str) -> Result<Array> {
    let s = cx.stream();
    let rows = table.shape().first().copied().unwrap_or(0);
    if rows == 0 {
        return Err(OpError::new(format!(
            "the {what} embedding table has no rows"
        )));
    }
    cx.require_in_range(
        ids,
        0,
        rows - 1,
        format!(
            "input index out of range: {what} ids must lie in [0, {}]",
            rows - 1
        ),
    )?;
    let safe = crate::indexing::in_bounds(ids, rows, s)?;
    Ok(ops::take(table, &safe, 0, s)?)
}

/// What is known of one input's shape: `None` when absent or unknown, `None` dims symbolic.
type Dims = Option<Vec<Option<i64>>>;

/// Why ORT's EmbedLayerNormalization kernel refuses its inputs; `aborts` where it does not
/// refuse but reads a dimension that is not there (ORT 1.31.1 terminates the process).
#[derive(Debug, PartialEq)]
struct EmbedRefusal {
    message: String,
    aborts: bool,
}

/// `[2, ?]` for a shape with a symbolic second dim, `?` for an unknown one.
fn shown(dims: &Dims) -> String {
    match dims {
        None => "?".into(),
        Some(dims) => {
            let each: Vec<String> = dims
                .iter()
                .map(|d| d.map_or("?".into(), |d| d.to_string()))
                .collect();
            format!("[{}]", each.join(", "))
        }
    }
}

/// ORT's shape checks of EmbedLayerNormalization (`CheckInputs` in
/// contrib_ops/cpu/bert/embed_layer_norm_helper.cc), in its order and words, over what is known
/// of the nine inputs' shapes: the first check that certainly fails.
fn embed_shape_refusal(shapes: &[Dims; 9]) -> Option<EmbedRefusal> {
    let refuse = |message: String| {
        Some(EmbedRefusal {
            message,
            aborts: false,
        })
    };
    let rank = |i: usize| shapes[i].as_ref().map(Vec::len);
    let dim = |i: usize, d: usize| shapes[i].as_ref().and_then(|s| s.get(d).copied().flatten());
    let differ = |a: Option<i64>, b: Option<i64>| matches!((a, b), (Some(a), Some(b)) if a != b);
    let unlike = |i: usize, j: usize| match (&shapes[i], &shapes[j]) {
        (Some(a), Some(b)) => a.len() != b.len() || a.iter().zip(b).any(|(x, y)| differ(*x, *y)),
        _ => false,
    };
    let (ids, segment_ids, word, position, segment, gamma, beta, mask, position_ids) =
        (0, 1, 2, 3, 4, 5, 6, 7, 8);
    if shapes[position_ids].is_some() {
        if rank(ids).is_some_and(|r| r < 2) || rank(position_ids).is_some_and(|r| r < 2) {
            return Some(EmbedRefusal {
                message: format!(
                    "position_ids of shape {} with input_ids {}: both need a sequence axis (ORT's \
                     CPU EP aborts the process reading it)",
                    shown(&shapes[position_ids]),
                    shown(&shapes[ids])
                ),
                aborts: true,
            });
        }
        if differ(dim(ids, 1), dim(position_ids, 1)) {
            return refuse("input_ids and position_ids shall have same sequence_length".into());
        }
        let first = dim(position_ids, 0);
        if first.is_some_and(|p| p != 1) && differ(first, dim(ids, 0)) {
            return refuse("position_ids's first dimension shall be 1 or batch_size".into());
        }
    }
    if unlike(ids, segment_ids) {
        return refuse("Input 0 and 1 shall have same shape".into());
    }
    if unlike(ids, mask) {
        return refuse("Input 0 and 7 (mask) shall have same shape".into());
    }
    for (i, name) in [
        (ids, "input_ids"),
        (word, "word_embedding"),
        (position, "position_embedding"),
    ] {
        if let Some(r) = rank(i).filter(|&r| r != 2) {
            return refuse(format!("{name} is expected to have 2 dimensions, got {r}"));
        }
    }
    let hidden = dim(word, 1);
    if let Some(r) = rank(segment).filter(|&r| r != 2) {
        return refuse(format!(
            "segment_embedding is expected to have 2 dimensions, got {r}"
        ));
    }
    if differ(dim(segment, 1), hidden) {
        return refuse("word_embedding and segment_embedding shall have same dimension 1".into());
    }
    if differ(dim(position, 1), hidden) {
        return refuse("word_embedding and position_embedding shall have same dimension 1".into());
    }
    for (i, name) in [(gamma, "gamma"), (beta, "beta")] {
        if let Some(r) = rank(i).filter(|&r| r != 1) {
            return refuse(format!("{name} is expected to have 1 dimensions, got {r}"));
        }
        if differ(dim(i, 0), hidden) {
            return refuse(format!(
                "{name} is expected to have size of {}, got {}",
                hidden.unwrap_or_default(),
                dim(i, 0).unwrap_or_default()
            ));
        }
    }
    None
}

/// Declared shapes ORT's kernel refuses are declined, so that ORT's CPU EP reports them in its
/// words. Rank 0 is also how ORT's API describes a value of unknown shape, so it counts as
/// unknown here; the run-time check sees the real shapes. A shape on which ORT's kernel aborts
/// the process is kept, to fail at run time instead.
fn embed_layer_norm_claim(node: &crate::Node) -> crate::Verdict {
    let shapes: [Dims; 9] = std::array::from_fn(|i| {
        node.input_shape(i)
            .filter(|dims| !dims.is_empty() && node.input_present(i))
    });
    match embed_shape_refusal(&shapes) {
        Some(refusal) if !refusal.aborts => crate::Verdict::decline(format!(
            "{} (declared shapes; ORT's kernel refuses them)",
            refusal.message
        )),
        _ => non_negative_epsilon(node),
    }
}

/// position_ids `[1 or B, S, ..]` as ORT's kernel reads them: its first `P·S` values, row by
/// row (`P` its first dimension), whatever the axes after the second.
fn position_rows(ids: &Array, sequence: i64, s: &Stream) -> Result<Array> {
    let rows = ids.shape()[0];
    let (needed, held) = (rows * sequence, ids.size() as i64);
    if held < needed {
        return Err(OpError::new(format!(
            "position_ids of shape {:?} holds fewer than the {needed} ids ORT's kernel reads",
            ids.shape()
        )));
    }
    let flat = ops::reshape(ids, &[held], s)?;
    let head = ops::slice(&flat, &[0], &[needed as i32], &[1], s)?;
    Ok(ops::reshape(&head, &[rows, sequence], s)?)
}

/// BERT's embedding layer: `LayerNorm(word[input_ids] + position[position_ids or 0..S] +
/// segment[segment_ids])` with `gamma`/`beta`; `mask_index` counts each row's mask entries
/// equal to 1 (zeros without a mask), and `embedding_sum` is the sum before normalising.
#[allow(clippy::too_many_arguments)] // nine inputs, as ORT has them
#[onnx_op(
    domain = "com.microsoft", op = "EmbedLayerNormalization", precision = Float32, since = 1, types(T1 = I32, T = F32 | F16),
    inputs(input_ids: T1, segment_ids: T1, word_embedding: T, position_embedding: T, segment_embedding: T,
           gamma: T, beta: T, mask: T1, position_ids: T1),
    outputs(output: T, mask_index?: T1, embedding_sum?: T), shape = ShapeKeyed,
    ignores(mask_index_type: i64), claim = embed_layer_norm_claim,
    declines = "a negative epsilon (ORT's kernel refuses it); declared shapes ORT's kernel refuses (its CheckInputs: ids, mask and position_ids against input_ids, embedding tables 2-D of one hidden size, gamma/beta [hidden])"
)]
fn embed_layer_normalization(
    cx: &mut Lower,
    input_ids: Array,
    segment_ids: Option<Array>,
    word_embedding: Array,
    position_embedding: Array,
    segment_embedding: Option<Array>,
    gamma: Array,
    beta: Array,
    mask: Option<Array>,
    position_ids: Option<Array>,
    #[attr(default = 1e-12)] epsilon: f32,
) -> Result<Vec<Array>> {
    let s = cx.stream();
    let known =
        |a: Option<&Array>| -> Dims { a.map(|a| a.shape().into_iter().map(Some).collect()) };
    let shapes = [
        known(Some(&input_ids)),
        known(segment_ids.as_ref()),
        known(Some(&word_embedding)),
        known(Some(&position_embedding)),
        known(segment_embedding.as_ref()),
        known(Some(&gamma)),
        known(Some(&beta)),
        known(mask.as_ref()),
        known(position_ids.as_ref()),
    ];
    if let Some(refusal) = embed_shape_refusal(&shapes) {
        let also = if refusal.aborts {
            ""
        } else {
            " (ORT's kernel refuses them too)"
        };
        return Err(OpError::new(format!("{}{also}", refusal.message)));
    }
    let shape = input_ids.shape();
    let (batch, sequence) = (shape[0], shape[1]);
    let wide = |a: Array| ops::astype(&a, Dtype::F32, s);
    let mut sum = wide(embed(cx, &word_embedding, &input_ids, "word")?)?;
    let positions = match position_ids {
        // No tokens: ORT's kernel reads no position id, so none is checked (found by the
        // fuzzer: out-of-range ids beside an empty batch).
        Some(_) if input_ids.size() == 0 => {
            let hidden = position_embedding.shape().get(1).copied().unwrap_or(0);
            zeros(&[batch, sequence, hidden], position_embedding.dtype(), s)?
        }
        Some(ids) => {
            let ids = position_rows(&ids, sequence, s)?;
            embed(cx, &position_embedding, &ids, "position")?
        }
        None if position_embedding
            .shape()
            .first()
            .is_some_and(|&p| p >= sequence) =>
        {
            let hidden = position_embedding.shape()[1..].to_vec();
            let mut stop: Vec<i32> = vec![sequence as i32];
            stop.extend(hidden.iter().map(|&d| d as i32));
            let start = vec![0; stop.len()];
            let step = vec![1; stop.len()];
            ops::slice(&position_embedding, &start, &stop, &step, s)?
        }
        None => {
            return Err(OpError::new(format!(
                "a sequence of {sequence} is longer than the position embedding"
            )))
        }
    };
    sum = ops::add(&sum, &wide(positions)?, s)?;
    // Without segment_ids ORT's kernel adds the segment table's row 0 to every token.
    match (segment_ids, segment_embedding) {
        (Some(ids), Some(table)) => {
            sum = ops::add(&sum, &wide(embed(cx, &table, &ids, "segment")?)?, s)?;
        }
        (None, Some(table)) => {
            let zero = Array::from_slice(&[0i32], &[1])?;
            sum = ops::add(&sum, &wide(embed(cx, &table, &zero, "segment")?)?, s)?;
        }
        (Some(_), None) => {
            return Err(OpError::new(
                "input index out of range: segment_ids without a segment embedding (ORT's kernel \
                 fails the same way)",
            ))
        }
        (None, None) => {}
    }
    // MLX's fused layer norm: float32 statistics over the hidden axis, as ORT's kernel.
    let y = ops::layer_norm(&sum, Some(&wide(gamma)?), Some(&wide(beta)?), epsilon, s)?;
    let mask_index = match mask {
        Some(mask) => {
            let ones = ops::equal(&mask, &scalar_like(1.0, &mask, s)?, s)?;
            ops::astype(&ops::sum(&ones, &[1], false, s)?, Dtype::I32, s)?
        }
        None => ops::broadcast_to(
            &crate::table::consts::scalar(0.0, Dtype::I32, s)?,
            &[batch],
            s,
        )?,
    };
    let dtype = word_embedding.dtype();
    Ok(vec![
        ops::astype(&y, dtype, s)?,
        mask_index,
        ops::astype(&sum, dtype, s)?,
    ])
}

/// Stable Diffusion's fused residual group norm, channels last: `S = X + skip + bias`, `Y =
/// activation(GroupNorm(S) * gamma + beta)` with SiLU or no activation.
#[onnx_op(
    domain = "com.microsoft", op = "SkipGroupNorm", precision = Float32, since = 1, types(T = F32 | F16, M = F32 | F16),
    inputs(X: T, gamma: M, beta: M, skip: T, bias: T), outputs(Y: T, S?: T), shape = ShapeKeyed,
    ignores(channels_last: i64), claim = skip_group_norm_claim, declines = "channels_last 0 (ORT's kernel is NHWC only); activations other than 0 (none) and 1 (SiLU)"
)]
#[allow(clippy::too_many_arguments)] // five inputs and three attributes, as ORT has them
fn skip_group_norm(
    cx: &mut Lower,
    x: Array,
    gamma: Array,
    beta: Array,
    skip: Array,
    bias: Option<Array>,
    #[attr] activation: i64,
    #[attr(default = 1e-5)] epsilon: f32,
    #[attr] groups: i64,
) -> Result<Vec<Array>> {
    let s = cx.stream();
    if x.ndim() != 4 {
        return Err(OpError::new("X must be [N, H, W, C]"));
    }
    // skip is [N, H, W, C], [N, 1, 1, C] or [N, C].
    let skip = if skip.ndim() == 2 {
        let shape = skip.shape();
        ops::reshape(&skip, &[shape[0], 1, 1, shape[1]], s)?
    } else {
        skip
    };
    let sum = residual_sum(&x, &skip, bias.as_ref(), s)?;
    let normalised = group_standardise(&sum, groups, epsilon, true, s)?;
    let wide = |a: &Array| ops::astype(a, Dtype::F32, s);
    let mut y = ops::add(
        &ops::multiply(&normalised, &wide(&gamma)?, s)?,
        &wide(&beta)?,
        s,
    )?;
    if activation == 1 {
        y = silu_of(&y, s)?;
    }
    Ok(vec![
        ops::astype(&y, x.dtype(), s)?,
        ops::astype(&sum, x.dtype(), s)?,
    ])
}

fn skip_group_norm_claim(node: &crate::Node) -> crate::Verdict {
    if node.attr_or("channels_last", 1i64) != 1 {
        return crate::Verdict::decline("channels_last 0: ORT defines SkipGroupNorm for NHWC only");
    }
    // A required attribute: the generic claim has declined a node without it.
    match node.attr_or("activation", -1i64) {
        0 | 1 => crate::Verdict::Claim,
        other => crate::Verdict::decline(format!("activation {other}: only 0 (none) and 1 (SiLU)")),
    }
}

#[cfg(test)]
mod cost_tests {
    use mlx_kernels::{arrays_created, ops, Array, Dtype};

    use crate::normalization::float32_constant;
    use crate::table::registry::{decide, Decision};
    use crate::table::testing::{stream, tensors};
    use crate::{ElemType as E, Lower, Node};

    /// The arrays lowering `node` builds for float16 `x` `[1, 1, 64]` (and a skip like it when
    /// `skip`), less the float32 gamma a plan prepares once from the constant weight.
    fn per_run(node: &Node, skip: bool) -> u64 {
        let s = stream();
        let x = Array::from_slice(&[0.5f32; 64], &[1, 1, 64]).unwrap();
        let x = ops::astype(&x, Dtype::F16, &s).unwrap();
        let gamma = ops::astype(
            &Array::from_slice(&[1.5f32; 64], &[64]).unwrap(),
            Dtype::F16,
            &s,
        )
        .unwrap();
        let before = arrays_created();
        float32_constant(&mut Lower::new(&s, node), "gamma", 1, &gamma).unwrap();
        let preparing = arrays_created() - before;
        let mut inputs = vec![Some(x.clone())];
        if skip {
            inputs.push(Some(x));
        }
        inputs.push(Some(gamma));
        let Decision::Claim { spec, .. } = decide(node) else {
            panic!("declined")
        };
        let inputs = tensors(&inputs);
        let before = arrays_created();
        spec.lower_node(&s, node, &inputs).unwrap();
        arrays_created() - before - preparing
    }

    #[test]
    fn decoder_norms_cost_the_fused_kernel_and_their_casts() {
        let plain = Node::new("SimplifiedLayerNormalization", 1)
            .input(E::Float16)
            .input(E::Float16)
            .output(E::Float16);
        // x to float32, rms_norm, back to float16.
        assert!(per_run(&plain, false) <= 3);
        let rms = Node::new("RMSNormalization", 23)
            .input(E::Float16)
            .input(E::Float16)
            .output(E::Float16);
        assert!(per_run(&rms, false) <= 3);
        let skip = |with_sum: bool| {
            let mut n = Node::new("SkipSimplifiedLayerNormalization", 1)
                .in_domain("com.microsoft")
                .input(E::Float16)
                .input(E::Float16)
                .input(E::Float16)
                .output(E::Float16);
            if with_sum {
                // [y, "", "", sum], as genai's builder writes the layers' norms.
                n.outputs.extend([None, None]);
                n = n.output(E::Float16);
            }
            n
        };
        // input and skip to float32, their sum, rms_norm, y (and the sum) to float16.
        assert!(per_run(&skip(false), true) <= 5);
        assert!(per_run(&skip(true), true) <= 6);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::testing::{declined, run, values_f32};
    use crate::{ElemType, Node};

    const I: ElemType = ElemType::Int32;
    const F: ElemType = ElemType::Float;

    /// EmbedLayerNormalization with all nine inputs but those in `absent`, shapes declared
    /// where `dims` gives them.
    fn embed_node(absent: &[usize], dims: &[(usize, &[Option<i64>])]) -> Node {
        let types = [I, I, F, F, F, F, F, I, I];
        let mut n = Node::new("EmbedLayerNormalization", 1).in_domain("com.microsoft");
        for (i, t) in types.into_iter().enumerate() {
            n = if absent.contains(&i) {
                n.absent_input()
            } else {
                n.input(t)
            };
        }
        let mut n = n.output(F).output(I).output(F);
        for (i, d) in dims {
            n = n.input_dims(*i, d);
        }
        n
    }

    fn ints(values: &[i32], shape: &[i64]) -> Option<Array> {
        Some(Array::from_slice(values, shape).unwrap())
    }

    fn floats(shape: &[i64], seed: f32) -> Option<Array> {
        let n: i64 = shape.iter().product();
        let values: Vec<f32> = (0..n).map(|i| ((i as f32 + seed) * 0.37).sin()).collect();
        Some(Array::from_slice(&values, shape).unwrap())
    }

    #[test]
    fn embed_layer_norm_declines_declared_shapes_ort_refuses() {
        // s3-com.microsoft.EmbedLayerNormalization-1-5: segment_ids (1, 4) with input_ids (2, 4).
        let k = |d: &[i64]| d.iter().map(|&v| Some(v)).collect::<Vec<_>>();
        let trigger = embed_node(&[8], &[(0, &k(&[2, 4])), (1, &k(&[1, 4]))]);
        assert!(
            declined(&trigger).is_some_and(|r| r.contains("Input 0 and 1 shall have same shape"))
        );
        let mask = embed_node(&[8], &[(0, &k(&[2, 4])), (7, &k(&[2]))]);
        assert!(declined(&mask).is_some_and(|r| r.contains("Input 0 and 7 (mask)")));
        let gamma = embed_node(&[8], &[(2, &k(&[5, 8])), (5, &k(&[7]))]);
        assert!(declined(&gamma)
            .is_some_and(|r| r.contains("gamma is expected to have size of 8, got 7")));
        let position = embed_node(&[], &[(0, &k(&[2, 4])), (8, &k(&[3, 4]))]);
        assert!(declined(&position).is_some_and(|r| r.contains("1 or batch_size")));
        // What the declared shapes cannot settle is left to the run-time check: a symbolic
        // batch, rank 0 (ORT's word for an unknown shape), and a rank ORT aborts on.
        let symbolic = embed_node(&[8], &[(0, &[None, Some(4)]), (1, &k(&[1, 4]))]);
        assert_eq!(declined(&symbolic), None);
        let unknown = embed_node(&[8], &[(0, &k(&[2, 4])), (1, &[])]);
        assert_eq!(declined(&unknown), None);
        let aborts = embed_node(&[], &[(0, &k(&[2, 4])), (8, &k(&[4]))]);
        assert_eq!(declined(&aborts), None);
    }

    #[test]
    fn embed_layer_norm_checks_undeclared_shapes_at_run_time() {
        let node = embed_node(&[8], &[]);
        let inputs = |segment_ids: Option<Array>, mask: Option<Array>| {
            vec![
                ints(&[0, 1, 2, 3, 4, 0, 1, 2], &[2, 4]),
                segment_ids,
                floats(&[5, 8], 0.0),
                floats(&[6, 8], 1.0),
                floats(&[3, 8], 2.0),
                floats(&[8], 3.0),
                floats(&[8], 4.0),
                mask,
                None,
            ]
        };
        let ok = run(
            &node,
            &inputs(ints(&[0; 8], &[2, 4]), ints(&[1; 8], &[2, 4])),
        );
        assert_eq!(ok.unwrap()[0].shape(), vec![2, 4, 8]);
        let err = run(&node, &inputs(ints(&[0; 4], &[1, 4]), None)).unwrap_err();
        assert!(err.contains("Input 0 and 1 shall have same shape"), "{err}");
        let err = run(&node, &inputs(None, ints(&[1; 4], &[1, 4]))).unwrap_err();
        assert!(
            err.contains("Input 0 and 7 (mask) shall have same shape"),
            "{err}"
        );
    }

    #[test]
    fn embed_layer_norm_reads_position_ids_and_segments_as_ort() {
        let ids = ints(&[0, 1, 2, 3, 4, 0, 1, 2], &[2, 4]);
        let tables = [
            floats(&[5, 8], 0.0),
            floats(&[6, 8], 1.0),
            floats(&[3, 8], 2.0),
        ];
        let (gamma, beta) = (floats(&[8], 3.0), floats(&[8], 4.0));
        let with = |segment_ids: Option<Array>, position_ids: Option<Array>| {
            let absent: Vec<usize> = [(1, segment_ids.is_none()), (8, position_ids.is_none())]
                .into_iter()
                .filter_map(|(i, none)| none.then_some(i))
                .collect();
            let node = embed_node(&absent, &[]);
            let inputs = vec![
                ids.clone(),
                segment_ids,
                tables[0].clone(),
                tables[1].clone(),
                tables[2].clone(),
                gamma.clone(),
                beta.clone(),
                None,
                position_ids,
            ];
            values_f32(&run(&node, &inputs).unwrap()[0])
        };
        // No segment_ids: ORT's kernel adds the segment table's row 0 to every token.
        assert_eq!(with(None, None), with(ints(&[0; 8], &[2, 4]), None));
        // position_ids [1, S] serve every row; extra trailing axes are read flat.
        let positions = [3, 0, 5, 1];
        let both: Vec<i32> = positions.iter().chain(&positions).copied().collect();
        let shared = with(None, ints(&positions, &[1, 4]));
        assert_eq!(shared, with(None, ints(&both, &[2, 4])));
        assert_eq!(shared, with(None, ints(&both, &[2, 4, 1])));
    }
}
