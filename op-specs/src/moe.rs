//! Mixture of experts: com.microsoft MoE (float experts) and QMoE (2/4/8-bit integer experts).
//!
//! Semantics of ORT 1.31.1's CPU kernels, found by running them:
//! - Weights are `[experts, N, K]` per projection (fc1 `[E, fusion·inter, hidden]`, fc2 `[E,
//!   hidden, inter]`), QMoE's packed `8 / bits` values per byte, low bits first, along K.
//! - Each row picks its `k` largest keys, an equal key going to the larger expert index: MoE's
//!   keys are `softmax(router_probs)` (probabilities that round equal tie), QMoE's the logits.
//! - MoE mixes with `softmax(router_probs)` at the picked experts, renormalised over them when
//!   `normalize_routing_weights` is 1. QMoE mixes with the softmax over the picked logits
//!   whatever `normalize_routing_weights` says; with `router_weights` it mixes with those
//!   values at the picked experts, renormalised only when the flag is 1 (a zero sum gives 0).
//! - An expert whose weight is not above 0 (MoE) or `1e-8` (QMoE) is dropped: it adds nothing,
//!   even where its output is NaN or inf. NaN weights never count, so a MoE row with a NaN or
//!   +inf logit, or only -inf ones, is 0, as is a QMoE row whose top pick is ±inf or that has a
//!   NaN among its first `k` logits (ORT's `partial_sort` keeps those, and never takes a later
//!   NaN). See `Mixing::route`.
//! - Activations: relu (`std::max(0.0f, x)`: NaN gives 0), gelu (the tanh approximation),
//!   silu, identity, and SwiGLU with fc1's
//!   rows interleaved (`swiglu_fusion` 1; the CPU kernels refuse 0 and 2):
//!   `min(g, limit)·sigmoid(alpha·min(g, limit))·(clip(l, ±limit) + beta)`.
//! - Everything is float32 (16-bit inputs widened, the output rounded once). At
//!   `accuracy_level` 4 with blocks, and for 8-bit blocks at every level, ORT's QMoE quantises
//!   the activations to int8; the EP's product is the exact one of the dequantised weights.
//!
//! Only the picked experts are computed: MLX's `gather_mm` multiplies each row by its own
//! experts' weights without copying them, so a NaN in an expert a row did not pick never
//! reaches that row. 16-bit MoE experts are widened per run, only the picked ones when the rows
//! route to fewer experts than there are (see `float32_experts`). QMoE's packed bytes are MLX's affine packing viewed as uint32 (as for
//! MatMulNBits), multiplied by `gather_qmm` with MLX's `scale·q - scale·zero_point` per group
//! of 32 or 64 (made once per plan when the weights are initializers); blocks of 16, and
//! widths or K that MLX's kernels do not take, dequantise in the graph (`(q - zero_point)·scale`
//! in float32, one rounding, as ORT; O(E·N·K) per run) before `gather_mm`.

use mlx_kernels::ops::{self, Quantized};
use mlx_kernels::{Array, Dtype, Stream};

use crate::packing::{expect_shape, repeat_last, take_first, unpack};
use crate::table::consts::scalar;
use crate::table::lower::float32;
use crate::{onnx_op, Lower, Node, OpError, Result, Verdict};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Activation {
    Relu,
    Gelu,
    Silu,
    Identity,
    SwiGlu,
}

impl Activation {
    fn parse(name: &str) -> Option<Activation> {
        Some(match name {
            "relu" => Activation::Relu,
            "gelu" => Activation::Gelu,
            "silu" => Activation::Silu,
            "identity" => Activation::Identity,
            "swiglu" => Activation::SwiGlu,
            _ => return None,
        })
    }
}

/// ORT's `std::max(0.0f, x)`: `x` only where it is above 0, so NaN gives 0 (MLX's `maximum`
/// keeps NaN).
fn relu(h: &Array, s: &Stream) -> Result<Array> {
    let zero = scalar(0.0, Dtype::F32, s)?;
    Ok(ops::where_(&ops::greater(h, &zero, s)?, h, &zero, s)?)
}

/// The expert MLP between fc1 and fc2.
struct Mlp {
    activation: Activation,
    alpha: f32,
    beta: f32,
    limit: Option<f32>,
}

impl Mlp {
    fn new(activation_type: &str, alpha: f32, beta: f32, limit: Option<f32>) -> Result<Mlp> {
        let activation = Activation::parse(activation_type).ok_or_else(|| {
            OpError::new(format!(
                "activation_type '{activation_type}' is not supported"
            ))
        })?;
        Ok(Mlp {
            activation,
            alpha,
            beta,
            // ORT's std::min(g, NaN) and std::clamp(l, NaN, NaN) return g and l: no limit.
            limit: limit.filter(|l| !l.is_nan()),
        })
    }

    /// fc1's rows per expert for `inter` hidden units: SwiGLU's gate and linear parts share fc1.
    fn fc1_rows(&self, inter: i64) -> i64 {
        if self.activation == Activation::SwiGlu {
            2 * inter
        } else {
            inter
        }
    }

    /// fc1's float32 output `[..., fc1_rows]` -> the hidden units `[..., inter]`.
    fn apply(&self, h: &Array, s: &Stream) -> Result<Array> {
        match self.activation {
            Activation::Relu => relu(h, s),
            Activation::Gelu => crate::activation::gelu_tanh(h, s),
            Activation::Silu => crate::activation::silu_of(h, s),
            Activation::Identity => Ok(h.clone()),
            Activation::SwiGlu => self.swiglu(h, s),
        }
    }

    fn swiglu(&self, h: &Array, s: &Stream) -> Result<Array> {
        let mut pairs = h.shape();
        let rows = pairs.pop().unwrap_or(0);
        pairs.extend([rows / 2, 2]);
        let pairs = ops::reshape(h, &pairs, s)?;
        let part = |i: i32| -> Result<Array> { Ok(ops::take(&pairs, &Array::scalar(i)?, -1, s)?) };
        let (mut gate, mut linear) = (part(0)?, part(1)?);
        if let Some(limit) = self.limit {
            let high = scalar(f64::from(limit), Dtype::F32, s)?;
            let low = scalar(-f64::from(limit), Dtype::F32, s)?;
            gate = ops::minimum(&gate, &high, s)?;
            linear = ops::maximum(&ops::minimum(&linear, &high, s)?, &low, s)?;
        }
        let alpha = scalar(f64::from(self.alpha), Dtype::F32, s)?;
        let beta = scalar(f64::from(self.beta), Dtype::F32, s)?;
        let swish = ops::multiply(
            &gate,
            &ops::sigmoid(&ops::multiply(&gate, &alpha, s)?, s)?,
            s,
        )?;
        Ok(ops::multiply(&swish, &ops::add(&linear, &beta, s)?, s)?)
    }
}

/// Each row's `k` experts by `key [T, E]` (float32), best first: `[T, k]` int32. A larger key
/// wins and an equal one (`-0 == 0`) goes to the larger expert index, as ORT's `partial_sort`
/// of `(key, index)` pairs orders them; NaN ranks below every number. Each round takes the
/// largest open key and the largest index holding it: exact reductions with one answer on every
/// backend, whatever its reduction order; O(T·E) memory, O(T·E·k) work.
fn top_k(key: &Array, k: i64, s: &Stream) -> Result<Array> {
    let experts = key.shape()[1];
    let index = ops::reshape(
        &ops::arange(0.0, experts as f64, 1.0, Dtype::I32, s)?,
        &[1, experts],
        s,
    )?;
    let lowest = scalar(f64::NEG_INFINITY, Dtype::F32, s)?;
    let none = scalar(-1.0, Dtype::I32, s)?;
    let largest_index = |among: &Array| -> Result<Array> {
        Ok(ops::max(
            &ops::where_(among, &index, &none, s)?,
            &[1],
            true,
            s,
        )?)
    };
    let number = ops::logical_not(&ops::isnan(key, s)?, s)?;
    let mut open = ops::broadcast_to(&scalar(1.0, Dtype::Bool, s)?, &key.shape(), s)?;
    let mut picks = Vec::with_capacity(k as usize);
    for _ in 0..k {
        let open_number = ops::logical_and(&open, &number, s)?;
        let best = ops::max(&ops::where_(&open_number, key, &lowest, s)?, &[1], true, s)?;
        let at_best = ops::logical_and(&open_number, &ops::equal(key, &best, s)?, s)?;
        let by_value = largest_index(&at_best)?;
        // No number left open: a NaN's expert.
        let pick = ops::where_(
            &ops::greater_equal(&by_value, &scalar(0.0, Dtype::I32, s)?, s)?,
            &by_value,
            &largest_index(&open)?,
            s,
        )?;
        open = ops::logical_and(&open, &ops::not_equal(&index, &pick, s)?, s)?;
        picks.push(pick);
    }
    Ok(ops::concatenate(&picks, 1, s)?)
}

/// `values [T, n]` divided by their row sums.
fn renormalise(values: &Array, s: &Stream) -> Result<Array> {
    Ok(ops::divide(values, &ops::sum(values, &[1], true, s)?, s)?)
}

/// Per row of `mask [T, n]`: whether any is set, `[T, 1]`.
fn any_in_row(mask: &Array, s: &Stream) -> Result<Array> {
    let count = ops::sum(&ops::astype(mask, Dtype::I32, s)?, &[1], true, s)?;
    Ok(ops::greater(&count, &scalar(0.0, Dtype::I32, s)?, s)?)
}

/// The first `len` columns of `x [T, n]`.
fn first_columns(x: &Array, len: i64, s: &Stream) -> Result<Array> {
    let rows = x.shape()[0] as i32;
    Ok(ops::slice(x, &[0, 0], &[rows, len as i32], &[1, 1], s)?)
}

/// ORT's QMoE drops an expert whose mixing weight is not above this (`1e-8f`).
const QMOE_MIN_WEIGHT: f64 = 1e-8;

/// Each row's experts, how much each counts, and which ORT's kernel keeps (`[T, k]` each): an
/// expert whose weight is not above the kernel's threshold (0 for MoE, `1e-8` for QMoE; NaN
/// never is) is dropped, so its output, even NaN or inf, never reaches the row.
struct Route {
    picked: Array,
    weights: Array,
    keep: Array,
}

/// How a node picks and mixes each row's experts.
enum Mixing {
    /// MoE: `softmax(logits)` ranks the experts and mixes them at the picked ones,
    /// renormalised or not.
    Softmax { normalise: bool },
    /// QMoE without router_weights: the logits rank, the softmax over the picked logits mixes.
    SoftmaxOfPicked,
    /// QMoE with router_weights: the logits rank, their values at the picked experts mix,
    /// renormalised or not.
    Given { weights: Array, normalise: bool },
}

impl Mixing {
    /// `logits [T, E]` float32 -> each row's `k` experts and weights, as ORT's CPU kernels
    /// route them, NaN and infinities included (found by running ORT 1.31.1).
    fn route(&self, logits: &Array, k: i64, s: &Stream) -> Result<Route> {
        match self {
            Mixing::Softmax { normalise } => softmax_route(logits, k, *normalise, s),
            Mixing::SoftmaxOfPicked => picked_softmax_route(logits, k, s),
            Mixing::Given { weights, normalise } => given_route(logits, weights, k, *normalise, s),
        }
    }
}

/// MoE: ORT ranks the probabilities `exp(l - max) / sum` (so logits whose probabilities round
/// equal tie, the larger index first). A NaN or +inf logit, or a row of -inf, makes every
/// probability NaN, and the row's output 0.
fn softmax_route(logits: &Array, k: i64, normalise: bool, s: &Stream) -> Result<Route> {
    let nan = ops::isnan(logits, s)?;
    let lowest = scalar(f64::NEG_INFINITY, Dtype::F32, s)?;
    let max = ops::max(&ops::where_(&nan, &lowest, logits, s)?, &[1], true, s)?;
    let poisoned = ops::logical_or(&any_in_row(&nan, s)?, &ops::isinf(&max, s)?, s)?;
    let e = ops::exp(&ops::subtract(logits, &max, s)?, s)?;
    let p = ops::divide(&e, &ops::sum(&e, &[1], true, s)?, s)?;
    let picked = top_k(&p, k, s)?;
    let mut weights = ops::take_along_axis(&p, &picked, 1, s)?;
    if normalise {
        weights = renormalise(&weights, s)?;
    }
    let above = ops::greater(&weights, &scalar(0.0, Dtype::F32, s)?, s)?;
    let keep = ops::logical_and(&above, &ops::logical_not(&poisoned, s)?, s)?;
    Ok(Route {
        picked,
        weights,
        keep,
    })
}

/// QMoE without router_weights: the softmax over the picked logits, `exp(l - top)·(1 / sum)`.
/// ORT's `partial_sort` (a heap over the first `k` entries) never lets a NaN in a later column
/// in, nor one in the first `k` columns out: such a row mixes NaN weights and gives 0, as does
/// one whose top logit is ±inf.
fn picked_softmax_route(logits: &Array, k: i64, s: &Stream) -> Result<Route> {
    let picked = top_k(logits, k, s)?;
    let at_picked = ops::take_along_axis(logits, &picked, 1, s)?;
    let top = first_columns(&at_picked, 1, s)?;
    let nan_in_heap = any_in_row(&ops::isnan(&first_columns(logits, k, s)?, s)?, s)?;
    let poisoned = ops::logical_or(&nan_in_heap, &ops::isinf(&top, s)?, s)?;
    let e = ops::exp(&ops::subtract(&at_picked, &top, s)?, s)?;
    let weights = ops::multiply(&e, &ops::reciprocal(&ops::sum(&e, &[1], true, s)?, s)?, s)?;
    let above = ops::greater(&weights, &scalar(QMOE_MIN_WEIGHT, Dtype::F32, s)?, s)?;
    let keep = ops::logical_and(&above, &ops::logical_not(&poisoned, s)?, s)?;
    Ok(Route {
        picked,
        weights,
        keep,
    })
}

/// QMoE with router_weights: the logits only rank. Renormalising divides by the picked
/// weights' sum, a zero sum giving zero weights. With a NaN logit in the first `k` columns
/// ORT's pick is undefined (a NaN breaks `partial_sort`'s strict weak order: which other
/// experts join it depends on the heap's internals); the EP ranks NaN last.
fn given_route(
    logits: &Array,
    router_weights: &Array,
    k: i64,
    normalise: bool,
    s: &Stream,
) -> Result<Route> {
    let picked = top_k(logits, k, s)?;
    let mut weights = ops::take_along_axis(&float32(router_weights, s)?, &picked, 1, s)?;
    if normalise {
        let sum = ops::sum(&weights, &[1], true, s)?;
        let zero = scalar(0.0, Dtype::F32, s)?;
        let scale = ops::where_(
            &ops::equal(&sum, &zero, s)?,
            &zero,
            &ops::reciprocal(&sum, s)?,
            s,
        )?;
        weights = ops::multiply(&weights, &scale, s)?;
    }
    let keep = ops::greater(&weights, &scalar(QMOE_MIN_WEIGHT, Dtype::F32, s)?, s)?;
    Ok(Route {
        picked,
        weights,
        keep,
    })
}

/// One projection's weights, stacked over the experts.
enum Weights {
    /// `[E, N, K]` of a float type (see `float32_experts`).
    Float(Array),
    /// MLX's affine packing of the `[E, N, K]` integers (float32 scales and biases).
    Affine(Quantized),
}

/// One projection of every expert: its weights and its `[E, N]` bias.
struct Projection {
    weights: Weights,
    bias: Option<Array>,
}

impl Projection {
    /// `x [T, k|1, 1, K]` float32 through each row's picked experts (`picked [T, k]`):
    /// `[T, k, 1, N]` float32.
    fn apply(&self, x: &Array, picked: &Array, s: &Stream) -> Result<Array> {
        let y = match &self.weights {
            Weights::Float(w) => {
                let (w, indices) = float32_experts(w, picked, s)?;
                let transposed = ops::transpose(&w, &[0, 2, 1], s)?;
                ops::gather_mm(x, &transposed, None, Some(&indices), s)?
            }
            Weights::Affine(q) => ops::gather_qmm(x, q, None, Some(picked), true, s)?,
        };
        match &self.bias {
            None => Ok(y),
            Some(bias) => {
                let b = ops::expand_dims(&ops::take(bias, picked, 0, s)?, &[2], s)?;
                Ok(ops::add(&y, &float32(&b, s)?, s)?)
            }
        }
    }
}

/// Float32 expert weights for `w [E, N, K]` and the indices that pick each row's experts from
/// them. 16-bit weights are widened per run, but only as many experts as the rows route to:
/// with fewer routes (`T·k`) than experts (decoding) only the picked experts' weights are
/// gathered and widened, so a run widens `min(T·k, E)` experts, never more weights than its
/// products read. No float32 copy is kept (it would double the experts' memory), and MLX's CPU
/// `gather_mm` multiplies float32 only.
fn float32_experts(w: &Array, picked: &Array, s: &Stream) -> Result<(Array, Array)> {
    let experts = w.shape()[0];
    let routes: i64 = picked.shape().iter().product();
    if w.dtype() == Dtype::F32 {
        return Ok((w.clone(), picked.clone()));
    }
    if routes >= experts {
        return Ok((float32(w, s)?, picked.clone()));
    }
    let gathered = ops::take(w, &ops::reshape(picked, &[routes], s)?, 0, s)?;
    let own = ops::arange(0.0, routes as f64, 1.0, Dtype::I32, s)?;
    Ok((
        float32(&gathered, s)?,
        ops::reshape(&own, &picked.shape(), s)?,
    ))
}

/// The shape of `input`'s rows: `[T, H]` or `[B, S, H]` -> (T, H).
fn rows_of(input: &Array) -> Result<(i64, i64)> {
    let shape = input.shape();
    match shape.as_slice() {
        [t, h] => Ok((*t, *h)),
        [b, t, h] => Ok((b * t, *h)),
        _ => Err(OpError::new(format!(
            "input has shape {shape:?}; ORT's kernel takes [tokens, hidden] or [batch, sequence, hidden]"
        ))),
    }
}

/// The dims a node's weights agree on.
struct Dims {
    tokens: i64,
    hidden: i64,
    experts: i64,
    inter: i64,
}

/// A node's experts, float32: fc1, the activation, fc2.
struct Experts {
    fc1: Projection,
    mlp: Mlp,
    fc2: Projection,
}

impl Experts {
    /// `x [T, 1, 1, H]` through each row's picked experts (`picked [T, k]`): `[T, k, 1, H]`.
    fn apply(&self, x: &Array, picked: &Array, s: &Stream) -> Result<Array> {
        let h = self.mlp.apply(&self.fc1.apply(x, picked, s)?, s)?;
        self.fc2.apply(&h, picked, s)
    }
}

/// How many experts each row takes, and how they mix.
struct Routing {
    k: i64,
    mixing: Mixing,
}

/// Routes `input` through its experts: the shared body of MoE and QMoE once the weights are
/// float32 `[E, N, K]`.
fn mixture(
    input: &Array,
    router: &Array,
    experts: &Experts,
    routing: &Routing,
    dims: &Dims,
    s: &Stream,
) -> Result<Array> {
    let k = routing.k;
    let out_dtype = input.dtype();
    let Dims {
        tokens,
        hidden,
        experts: count,
        ..
    } = *dims;
    if k > count {
        return Err(OpError::new(format!(
            "k = {k} is more than the {count} experts (ORT's kernel fails too)"
        )));
    }
    if tokens == 0 {
        return Ok(ops::astype(
            &ops::broadcast_to(&scalar(0.0, Dtype::F32, s)?, &input.shape(), s)?,
            out_dtype,
            s,
        )?);
    }
    let logits = float32(router, s)?;
    let route = routing.mixing.route(&logits, k, s)?;
    let x = ops::reshape(&float32(input, s)?, &[tokens, 1, 1, hidden], s)?;
    let y = experts.apply(&x, &route.picked, s)?;
    let per_expert = |v: &Array| ops::reshape(v, &[tokens, k, 1, 1], s);
    let weighted = ops::multiply(&y, &per_expert(&route.weights)?, s)?;
    // A dropped expert adds nothing, not `0·y` (NaN where its output is NaN or inf).
    let kept = ops::where_(
        &per_expert(&route.keep)?,
        &weighted,
        &scalar(0.0, Dtype::F32, s)?,
        s,
    )?;
    let mixed = ops::sum(&kept, &[1], false, s)?;
    Ok(ops::astype(
        &ops::reshape(&mixed, &input.shape(), s)?,
        out_dtype,
        s,
    )?)
}

/// Claim checks MoE and QMoE share: k, the activation, SwiGLU's layout, the sparse mixer and
/// fc3.
fn common_claim(node: &Node, fc3_slot: usize) -> Option<Verdict> {
    let k = node.attr_or("k", 1i64);
    if k < 1 {
        return Some(Verdict::decline(format!(
            "k = {k}: ORT's kernel takes k >= 1"
        )));
    }
    let name = node.attr_or("activation_type", String::from("relu"));
    let Some(activation) = Activation::parse(&name) else {
        return Some(Verdict::decline(format!(
            "activation_type '{name}': ORT takes relu, gelu, silu, identity or swiglu"
        )));
    };
    let fusion = node.attr_or("swiglu_fusion", 0i64);
    match (activation, fusion) {
        (Activation::SwiGlu, 1)
        | (Activation::Relu | Activation::Gelu | Activation::Silu | Activation::Identity, 0) => {}
        (Activation::SwiGlu, _) => {
            return Some(Verdict::decline(format!(
                "swiglu_fusion {fusion}: ORT's CPU kernel takes only interleaved SwiGLU (1)"
            )))
        }
        _ => {
            return Some(Verdict::decline(format!(
                "swiglu_fusion {fusion} with activation_type '{name}' (it applies only to swiglu)"
            )))
        }
    }
    if activation == Activation::SwiGlu {
        if let Some(limit) = node.attr_as::<f32>("swiglu_limit").filter(|&l| l < 0.0) {
            return Some(Verdict::decline(format!(
                "swiglu_limit {limit} < 0: ORT's CPU kernel clamps with std::clamp(l, -limit, \
                 limit), undefined when -limit > limit (its build aborts)"
            )));
        }
    }
    if node.attr_or("use_sparse_mixer", 0i64) != 0 {
        return Some(Verdict::decline(
            "use_sparse_mixer: ORT's CPU kernel ignores it (plain top-k) while its CUDA kernel \
             applies Phi-3.5's sparse mixer; the two disagree",
        ));
    }
    if (fc3_slot..fc3_slot + 3).any(|i| node.input_present(i)) {
        return Some(Verdict::decline(
            "fc3 (a separate SwiGLU linear projection): ORT's CPU kernel does not implement it",
        ));
    }
    None
}

/// Mixture of experts with float weights: each row runs through its `k` experts (largest
/// `softmax(router_probs)`, ties to the larger index), mixed by those probabilities
/// (renormalised when `normalize_routing_weights`), in float32. Float16 follows the float32
/// definition: ORT 1.31.1's CPU kernel drops `x · fc1` for float16 (only fc1's bias reaches
/// the activation), so float16 is tested against a float64 reference (tests/ep/test_moe.py).
#[allow(clippy::too_many_arguments)] // eight inputs and eight attributes, as ORT has them
#[onnx_op(
    domain = "com.microsoft", op = "MoE", precision = Float32, since = 1,
    types(T = FLOAT),
    inputs(
        input: T, router_probs: T, fc1_experts_weights: T, fc1_experts_bias: T,
        fc2_experts_weights: T, fc2_experts_bias: T, fc3_experts_weights: T, fc3_experts_bias: T
    ),
    outputs(output: T),
    // Checked by the claim (declined when set, or when SwiGLU is not interleaved).
    ignores(use_sparse_mixer: i64, swiglu_fusion: i64),
    shape = ShapeKeyed, claim = moe_claim,
    declines = "use_sparse_mixer (ORT's CPU and CUDA kernels disagree); fc3 and SwiGLU other than interleaved (swiglu_fusion 1), which ORT's CPU kernel does not implement; k < 1; unknown activation types; swiglu_limit < 0 (ORT's std::clamp is undefined there and its build aborts)",
    numerics = "float32 throughout, rounded once to the input's type, as ORT's float32 kernel. ORT 1.31.1's float16 kernel answers as if the input were zeros when normalize_routing_weights is 0 (it agrees with the EP when it is 1): float16 is held to a float64 reference there, within 2e-3 of the output's largest magnitude (tests/ep/test_moe.py)"
)]
fn moe(
    cx: &mut Lower,
    input: Array,
    router_probs: Array,
    fc1_experts_weights: Array,
    fc1_experts_bias: Option<Array>,
    fc2_experts_weights: Array,
    fc2_experts_bias: Option<Array>,
    _fc3_experts_weights: Option<Array>,
    _fc3_experts_bias: Option<Array>,
    #[attr(default = 1)] k: i64,
    #[attr(default = "relu")] activation_type: String,
    #[attr(default = 0)] normalize_routing_weights: i64,
    #[attr(default = 1.0)] activation_alpha: f32,
    #[attr(default = 0.0)] activation_beta: f32,
    #[attr] swiglu_limit: Option<f32>,
) -> Result<Array> {
    let s = cx.stream();
    let mlp = Mlp::new(
        &activation_type,
        activation_alpha,
        activation_beta,
        swiglu_limit,
    )?;
    let dims = float_dims(&input, &router_probs, &fc2_experts_weights)?;
    let (e, h, i) = (dims.experts, dims.hidden, dims.inter);
    expect_shape(
        &fc1_experts_weights,
        &[e, mlp.fc1_rows(i), h],
        "fc1_experts_weights",
    )?;
    let fc1 = float_projection(fc1_experts_weights, fc1_experts_bias, mlp.fc1_rows(i))?;
    let fc2 = float_projection(fc2_experts_weights, fc2_experts_bias, h)?;
    let mixing = Mixing::Softmax {
        // ORT renormalises only at 1 (2 and -1 do not).
        normalise: normalize_routing_weights == 1,
    };
    let experts = Experts { fc1, mlp, fc2 };
    let routing = Routing { k, mixing };
    mixture(&input, &router_probs, &experts, &routing, &dims, s)
}

/// Tokens, hidden, experts and inter from `input`, `router_probs [T, E]` and fc2 `[E, H, I]`.
fn float_dims(input: &Array, router: &Array, fc2: &Array) -> Result<Dims> {
    let (tokens, hidden) = rows_of(input)?;
    let experts = experts_of(router, tokens)?;
    let inter = fc2.shape().get(2).copied().unwrap_or(0);
    expect_shape(fc2, &[experts, hidden, inter], "fc2_experts_weights")?;
    Ok(Dims {
        tokens,
        hidden,
        experts,
        inter,
    })
}

/// The expert count `router_probs [T, E]` gives, checked against the tokens.
fn experts_of(router: &Array, tokens: i64) -> Result<i64> {
    let experts = router.shape().get(1).copied().unwrap_or(0);
    expect_shape(router, &[tokens, experts], "router_probs")?;
    Ok(experts)
}

fn float_projection(weight: Array, bias: Option<Array>, rows: i64) -> Result<Projection> {
    let experts = weight.shape()[0];
    if let Some(b) = &bias {
        expect_shape(b, &[experts, rows], "an experts_bias")?;
    }
    Ok(Projection {
        weights: Weights::Float(weight),
        bias,
    })
}

fn moe_claim(node: &Node) -> Verdict {
    common_claim(node, 6).unwrap_or(Verdict::Claim)
}

/// Mixture of experts with 2/4/8-bit integer expert weights, `(q - zero_point)·scale` per
/// column (`block_size` absent) or per block of `block_size` along K; zero points packed like
/// the weights, `2^(bits-1)` when absent. Routing as MoE, except that without
/// `router_weights` the picked experts are always mixed by the softmax over their logits (ORT's
/// CPU kernel ignores `normalize_routing_weights` there); with `router_weights` their values at
/// the picked experts mix, renormalised when the flag is 1. The answer is the exact float32
/// product of the dequantised weights at every `accuracy_level`: where ORT quantises the
/// activations to int8 (blocks at level 4, 8-bit blocks always) ORT is the less accurate side.
#[allow(clippy::too_many_arguments)] // 21 inputs and 16 attributes, as ORT has them
#[onnx_op(
    domain = "com.microsoft", op = "QMoE", precision = Float32, since = 1,
    types(T = FLOAT, T1 = U8, T4 = F32),
    inputs(
        input: T, router_probs: T, fc1_experts_weights: T1, fc1_scales: T, fc1_experts_bias: T,
        fc2_experts_weights: T1, fc2_scales: T, fc2_experts_bias: T,
        fc3_experts_weights: T1, fc3_scales: T, fc3_experts_bias: T,
        fc1_zero_points: T1, fc2_zero_points: T1, fc3_zero_points: T1, router_weights: T,
        fc1_global_scale: T4, fc2_global_scale: T4, fc1_act_scale: T4, fc2_act_scale: T4,
        fc1_act_block_scale: T, fc2_act_block_scale: T
    ),
    outputs(output: T),
    // The answer is exact at every accuracy level; the rest are checked by the claim.
    ignores(
        accuracy_level: i64, use_sparse_mixer: i64, weights_prepacked: i64,
        fc1_expert_weight_bits: i64, fc2_expert_weight_bits: i64, fc3_expert_weight_bits: i64,
        swiglu_fusion: i64, quant_type: String
    ),
    shape = ShapeKeyed, claim = qmoe_claim,
    declines = "quant_type other than 'int' (the FP4/FP8 modes and their global and activation scales); expert_weight_bits other than 2, 4, 8 and per-projection widths that differ (ORT's CPU kernel does not mix them); block sizes that are not a power of two >= 16; weights_prepacked = 1 (another EP's layout); fc1_scales missing; column-wise [E, rows, 1] scales with zero points and no block_size (ORT reads those zero points in another layout than it checks); and as MoE: use_sparse_mixer, fc3, SwiGLU other than interleaved, k < 1, unknown activation types, swiglu_limit < 0",
    numerics = "the exact float32 mixture of the dequantised experts, rounded once to the input's type, at every accuracy_level. ORT's CPU kernel computes the same column-wise and for 2/4-bit blocks at levels 0-3; for blocks at level 4, and 8-bit blocks at every level, it quantises the activations to int8 per block, so ORT is the less accurate side there: against a float64 reference ORT's error is 0.3-2% of the output's largest magnitude, ours below 1e-6 in float32 (tests/ep/test_moe.py). With router_weights and a NaN among a row's first k logits ORT's pick is undefined (NaN breaks std::partial_sort's ordering, and which experts join the NaN's depends on the heap's internals): the EP ranks NaN last there"
)]
fn qmoe(
    cx: &mut Lower,
    input: Array,
    router_probs: Array,
    fc1_experts_weights: Array,
    fc1_scales: Option<Array>,
    fc1_experts_bias: Option<Array>,
    fc2_experts_weights: Array,
    fc2_scales: Option<Array>,
    fc2_experts_bias: Option<Array>,
    _fc3_experts_weights: Option<Array>,
    _fc3_scales: Option<Array>,
    _fc3_experts_bias: Option<Array>,
    fc1_zero_points: Option<Array>,
    fc2_zero_points: Option<Array>,
    _fc3_zero_points: Option<Array>,
    router_weights: Option<Array>,
    _fc1_global_scale: Option<Array>,
    _fc2_global_scale: Option<Array>,
    _fc1_act_scale: Option<Array>,
    _fc2_act_scale: Option<Array>,
    _fc1_act_block_scale: Option<Array>,
    _fc2_act_block_scale: Option<Array>,
    #[attr(default = 1)] k: i64,
    #[attr(default = "relu")] activation_type: String,
    #[attr(default = 0)] normalize_routing_weights: i64,
    #[attr(default = 1.0)] activation_alpha: f32,
    #[attr(default = 0.0)] activation_beta: f32,
    #[attr] swiglu_limit: Option<f32>,
    #[attr(default = 4)] expert_weight_bits: i64,
    #[attr] block_size: Option<i64>,
) -> Result<Array> {
    let s = cx.stream();
    let mlp = Mlp::new(
        &activation_type,
        activation_alpha,
        activation_beta,
        swiglu_limit,
    )?;
    let bits = expert_weight_bits;
    let (tokens, hidden) = rows_of(&input)?;
    let experts = experts_of(&router_probs, tokens)?;
    let inter = fc2_experts_weights.shape().get(2).copied().unwrap_or(0) * 8 / bits;
    let dims = Dims {
        tokens,
        hidden,
        experts,
        inter,
    };
    let layout = |rows: i64, cols: i64| QuantLayout {
        experts,
        rows,
        cols,
        bits,
        block: block_size,
    };
    let required = |scales: Option<Array>, name: &str| {
        scales.ok_or_else(|| OpError::new(format!("{name} is missing (ORT's kernel needs it)")))
    };
    // Input slots of each projection's weights, scales and zero points.
    let fc1 = QuantInputs {
        name: "fc1",
        weight: &fc1_experts_weights,
        scales: &required(fc1_scales, "fc1_scales")?,
        zero_points: fc1_zero_points.as_ref(),
        slots: [2, 3, 11],
    };
    let fc1 = quantized_projection(
        cx,
        &fc1,
        fc1_experts_bias,
        &layout(mlp.fc1_rows(inter), hidden),
    )?;
    let fc2 = QuantInputs {
        name: "fc2",
        weight: &fc2_experts_weights,
        scales: &required(fc2_scales, "fc2_scales")?,
        zero_points: fc2_zero_points.as_ref(),
        slots: [5, 6, 12],
    };
    let fc2 = quantized_projection(cx, &fc2, fc2_experts_bias, &layout(hidden, inter))?;
    let mixing = match router_weights {
        Some(weights) => {
            expect_shape(&weights, &[tokens, experts], "router_weights")?;
            Mixing::Given {
                weights,
                // ORT renormalises only at 1 (2 and -1 do not).
                normalise: normalize_routing_weights == 1,
            }
        }
        None => Mixing::SoftmaxOfPicked,
    };
    let experts = Experts { fc1, mlp, fc2 };
    let routing = Routing { k, mixing };
    mixture(&input, &router_probs, &experts, &routing, &dims, s)
}

/// How one QMoE projection's `[E, rows, cols]` weight is quantised.
struct QuantLayout {
    experts: i64,
    rows: i64,
    cols: i64,
    bits: i64,
    /// `None`: one scale per row (column-wise quantisation).
    block: Option<i64>,
}

impl QuantLayout {
    /// Scales per row: one, or one per block along the columns.
    fn groups(&self) -> i64 {
        self.block.map_or(1, |b| (self.cols + b - 1) / b)
    }

    /// The width of a group along the columns.
    fn group_width(&self) -> i64 {
        self.block.unwrap_or(self.cols)
    }
}

/// A QMoE projection dequantised to float32 `[E, rows, cols]`, with its bias.
fn quantized_projection(
    cx: &mut Lower,
    inputs: &QuantInputs,
    bias: Option<Array>,
    layout: &QuantLayout,
) -> Result<Projection> {
    let s = cx.stream();
    let QuantInputs {
        name,
        weight,
        scales,
        zero_points,
        slots,
    } = *inputs;
    let layout = &effective_layout(layout, scales);
    let QuantLayout {
        experts,
        rows,
        cols,
        bits,
        block,
    } = *layout;
    if block.is_none() && scales.ndim() == 3 && zero_points.is_some() {
        return Err(OpError::new(format!(
            "{name}: {SCALES_3D_WITH_ZERO_POINTS}; give the scales as [E, rows]"
        )));
    }
    let what = |part: &str| format!("{name}_{part}");
    expect_shape(
        weight,
        &[experts, rows, cols * bits / 8],
        &what("experts_weights"),
    )?;
    let groups = layout.groups();
    let scale_shape: Vec<i64> = match block {
        Some(_) => vec![experts, rows, groups],
        None if scales.ndim() == 3 => vec![experts, rows, 1],
        None => vec![experts, rows],
    };
    expect_shape(scales, &scale_shape, &what("scales"))?;
    let scale = ops::reshape(&float32(scales, s)?, &[experts, rows, groups], s)?;
    let zero = match zero_points_f32(zero_points, layout, &what("zero_points"), s)? {
        Some(z) => ops::reshape(&z, &[experts, rows, groups], s)?,
        None => scalar((1 << (bits - 1)) as f64, Dtype::F32, s)?,
    };
    if let Some(b) = &bias {
        expect_shape(b, &[experts, rows], &what("experts_bias"))?;
    }
    let weights = match mlx_group(layout) {
        Some(group) => {
            // With constant weights, MLX's form is made once per plan (`scale` and `zero` stay
            // lazy and unused on later runs).
            let parts = cx.prepared(name, &slots, || {
                let q = affine(weight, &scale, &zero, layout, group, s)?;
                Ok(vec![q.weight, q.scales, q.biases])
            })?;
            let [weight, scales, biases] = <[Array; 3]>::try_from(parts)
                .map_err(|_| OpError::new("a prepared affine weight lost its parts"))?;
            Weights::Affine(Quantized {
                weight,
                scales,
                biases,
                group_size: group as i32,
                bits: bits as i32,
            })
        }
        // Lazy on purpose: float32 experts are 8x 4-bit ones; a plan that kept them would hold
        // the float copy the packed weights exist to avoid.
        None => Weights::Float(dequantised(weight, &scale, &zero, layout, s)?),
    };
    Ok(Projection { weights, bias })
}

/// The layout ORT's kernel reads: 2-D scales `[E, rows]` are column-wise whatever `block_size`
/// says (3-D ones `[E, rows, 1]` are too when it is absent).
fn effective_layout(layout: &QuantLayout, scales: &Array) -> QuantLayout {
    let block = if scales.ndim() == 2 {
        None
    } else {
        layout.block
    };
    QuantLayout { block, ..*layout }
}

/// One QMoE projection's quantised inputs and their input slots (for `Lower::prepared`).
#[derive(Clone, Copy)]
struct QuantInputs<'a> {
    name: &'static str,
    weight: &'a Array,
    scales: &'a Array,
    zero_points: Option<&'a Array>,
    slots: [usize; 3],
}

/// MLX's group size for `layout`'s quantisation groups, when `gather_qmm` can take them: 32 or
/// 64 values (a group of 128 or more repeats its scale per 64, as MatMulNBits does: MLX's CUDA
/// kernels at group 128 mix rows), K from 128 up (MLX's CUDA `quantized_matmul` gave wrong
/// values at K = 64). Blocks of 16 and other widths dequantise.
fn mlx_group(layout: &QuantLayout) -> Option<i64> {
    if layout.cols < MIN_AFFINE_K {
        return None;
    }
    let width = layout.group_width();
    [64, 32]
        .into_iter()
        .find(|g| width % g == 0 && layout.cols % g == 0)
}

/// The smallest K handed to MLX's quantized products (see `mlx_group`).
const MIN_AFFINE_K: i64 = 128;

/// ORT's packed bytes `[E, rows, cols·bits/8]` read as MLX's affine packing (low bits first in
/// each uint32 on a little-endian host: a view, no copy), with MLX's `scale·q + bias` form of
/// `(q - zero)·scale` per MLX group.
fn affine(
    weight: &Array,
    scale: &Array,
    zero: &Array,
    layout: &QuantLayout,
    group: i64,
    s: &Stream,
) -> Result<Quantized> {
    let QuantLayout {
        experts,
        rows,
        cols,
        bits,
        ..
    } = *layout;
    let words = ops::view(&ops::contiguous(weight, s)?, Dtype::U32, s)?;
    // A block wider than K (or a partial last one) repeats its scale only over the columns
    // there are.
    let per_mlx_group = |v: &Array| {
        take_first(
            &repeat_last(v, layout.group_width() / group, s)?,
            cols / group,
            s,
        )
    };
    let biases = ops::negative(&ops::multiply(scale, zero, s)?, s)?;
    // Row-contiguous scales and biases: MLX's CUDA kernels refuse the strides a repeat leaves.
    Ok(Quantized {
        weight: ops::reshape(&words, &[experts, rows, cols * bits / 32], s)?,
        scales: ops::contiguous(&per_mlx_group(scale)?, s)?,
        biases: ops::contiguous(&per_mlx_group(&biases)?, s)?,
        group_size: group as i32,
        bits: bits as i32,
    })
}

/// `(q - zero)·scale` in float32 `[E, rows, cols]`: one rounding per weight, as ORT.
fn dequantised(
    weight: &Array,
    scale: &Array,
    zero: &Array,
    layout: &QuantLayout,
    s: &Stream,
) -> Result<Array> {
    let QuantLayout {
        experts,
        rows,
        cols,
        bits,
        ..
    } = *layout;
    let q = ops::astype(&unpack(weight, bits, s)?, Dtype::F32, s)?;
    // Each column's group parameter (the last block may be partial).
    let per_column = |v: &Array| -> Result<Array> {
        if v.ndim() == 0 {
            return Ok(v.clone());
        }
        take_first(&repeat_last(v, layout.group_width(), s)?, cols, s)
    };
    let centred = ops::subtract(&q, &per_column(zero)?, s)?;
    let values = ops::multiply(&centred, &per_column(scale)?, s)?;
    Ok(ops::reshape(&values, &[experts, rows, cols], s)?)
}

/// Packed zero points -> float32 `[E, rows, groups]` (`[E, rows]` column-wise: packed along the
/// rows there), or `None` when absent.
fn zero_points_f32(
    zero_points: Option<&Array>,
    layout: &QuantLayout,
    what: &str,
    s: &Stream,
) -> Result<Option<Array>> {
    let Some(zp) = zero_points else {
        return Ok(None);
    };
    let QuantLayout {
        experts,
        rows,
        bits,
        block,
        ..
    } = *layout;
    let packed_len = |n: i64| (n * bits + 7) / 8;
    let values = match block {
        Some(_) => {
            let groups = layout.groups();
            expect_shape(zp, &[experts, rows, packed_len(groups)], what)?;
            take_first(&unpack(zp, bits, s)?, groups, s)?
        }
        None => {
            expect_shape(zp, &[experts, packed_len(rows)], what)?;
            take_first(&unpack(zp, bits, s)?, rows, s)?
        }
    };
    Ok(Some(ops::astype(&values, Dtype::F32, s)?))
}

/// Declined (by the claim where the scales' rank is known, else when the node runs).
const SCALES_3D_WITH_ZERO_POINTS: &str = "column-wise [E, rows, 1] scales with zero points and no \
     block_size: ORT's kernel reads those zero points in another layout than it checks them (its \
     answer differs from the same scales given as [E, rows])";

fn qmoe_claim(node: &Node) -> Verdict {
    if let Some(verdict) = common_claim(node, 8) {
        return verdict;
    }
    let quant_type = node.attr_or("quant_type", String::from("int"));
    if quant_type != "int" {
        return Verdict::decline(format!(
            "quant_type '{quant_type}': only integer experts ('int') are supported"
        ));
    }
    if (15..21).any(|i| node.input_present(i)) {
        return Verdict::decline(
            "global or activation scales (inputs 15-20) belong to the FP4/FP8 modes",
        );
    }
    let bits = node.attr_or("expert_weight_bits", 4i64);
    if !matches!(bits, 2 | 4 | 8) {
        return Verdict::decline(format!("expert_weight_bits {bits}: ORT takes 2, 4 or 8"));
    }
    for name in [
        "fc1_expert_weight_bits",
        "fc2_expert_weight_bits",
        "fc3_expert_weight_bits",
    ] {
        if let Some(own) = node.attr_as::<i64>(name).filter(|&own| own != bits) {
            return Verdict::decline(format!(
                "{name} {own} differs from expert_weight_bits {bits}: ORT's CPU kernel does not \
                 implement mixed widths"
            ));
        }
    }
    if let Some(block) = node.attr_as::<i64>("block_size") {
        if block < 16 || block & (block - 1) != 0 {
            return Verdict::decline(format!(
                "block_size {block}: ORT takes a power of two >= 16"
            ));
        }
    }
    if node.attr_as::<i64>("block_size").is_none() {
        let with_zero_points =
            |scales: usize, zp: usize| node.input_rank(scales) == Some(3) && node.input_present(zp);
        if with_zero_points(3, 11) || with_zero_points(6, 12) {
            return Verdict::decline(SCALES_3D_WITH_ZERO_POINTS);
        }
    }
    if node.attr_or("weights_prepacked", -1i64) == 1 {
        return Verdict::decline("weights_prepacked = 1: the weights are in another EP's layout");
    }
    if !node.input_present(3) || !node.input_present(6) {
        return Verdict::decline("fc1_scales or fc2_scales missing: integer experts need them");
    }
    Verdict::Claim
}

#[cfg(test)]
mod tests {
    use crate::table::testing::{claimed, decline_reason, f32s, run1, stream, values_f32};
    use crate::{AttrValue, ElemType, Node};

    const F: ElemType = ElemType::Float;
    const U8: ElemType = ElemType::Uint8;

    /// A MoE node: input, router_probs, fc1 weights, fc1 bias, fc2 weights, fc2 bias.
    fn moe() -> Node {
        [F, F, F, F, F, F]
            .iter()
            .fold(Node::new("MoE", 1).in_domain("com.microsoft"), |n, t| {
                n.input(*t)
            })
            .output(F)
    }

    /// A QMoE node: input, router_probs, fc1 weights and scales, no fc1 bias, fc2 weights and
    /// scales.
    fn qmoe() -> Node {
        Node::new("QMoE", 1)
            .in_domain("com.microsoft")
            .input(F)
            .input(F)
            .input(U8)
            .input(F)
            .absent_input()
            .input(U8)
            .input(F)
            .output(F)
    }

    fn int(name: &str, v: i64) -> (String, AttrValue) {
        (name.into(), AttrValue::Int(v))
    }

    fn with(node: Node, attrs: &[(String, AttrValue)]) -> Node {
        attrs
            .iter()
            .fold(node, |n, (name, v)| n.attr(name, v.clone()))
    }

    fn text(name: &str, v: &str) -> (String, AttrValue) {
        (name.into(), AttrValue::String(v.into()))
    }

    #[test]
    fn plain_forms_are_claimed() {
        assert!(claimed(&moe()));
        assert!(claimed(&with(
            moe(),
            &[int("k", 2), text("activation_type", "gelu")]
        )));
        let swiglu = [text("activation_type", "swiglu"), int("swiglu_fusion", 1)];
        assert!(claimed(&with(moe(), &swiglu)));
        assert!(claimed(&qmoe()));
        let qmoe_forms = [
            int("expert_weight_bits", 8),
            int("fc2_expert_weight_bits", 8),
            int("block_size", 32),
            int("weights_prepacked", 0),
            int("accuracy_level", 4),
            text("quant_type", "int"),
        ];
        assert!(claimed(&with(qmoe(), &qmoe_forms)));
    }

    #[test]
    fn what_ort_cpu_does_not_implement_is_declined() {
        let why = |node: Node, attrs: &[(String, AttrValue)]| decline_reason(&with(node, attrs));
        assert!(why(moe(), &[int("use_sparse_mixer", 1)]).contains("use_sparse_mixer"));
        for fusion in [0, 2] {
            let attrs = [
                text("activation_type", "swiglu"),
                int("swiglu_fusion", fusion),
            ];
            assert!(why(moe(), &attrs).contains("interleaved"));
        }
        assert!(why(moe(), &[int("swiglu_fusion", 1)]).contains("only to swiglu"));
        assert!(why(moe(), &[int("k", 0)]).contains("k >= 1"));
        let negative_limit = [
            text("activation_type", "swiglu"),
            int("swiglu_fusion", 1),
            ("swiglu_limit".into(), AttrValue::Float(-1.0)),
        ];
        assert!(why(qmoe(), &negative_limit).contains("std::clamp"));
        assert!(claimed(&with(
            moe(),
            &[("swiglu_limit".into(), AttrValue::Float(-1.0))]
        )));
        assert!(why(moe(), &[text("activation_type", "tanh")]).contains("tanh"));
        let with_fc3 = moe().input(F);
        assert!(decline_reason(&with_fc3).contains("fc3"));
        assert!(why(qmoe(), &[text("quant_type", "fp4")]).contains("fp4"));
        assert!(why(qmoe(), &[int("expert_weight_bits", 3)]).contains("2, 4 or 8"));
        assert!(why(qmoe(), &[int("fc1_expert_weight_bits", 8)]).contains("mixed widths"));
        assert!(why(qmoe(), &[int("block_size", 24)]).contains("power of two"));
        assert!(why(qmoe(), &[int("weights_prepacked", 1)]).contains("another EP"));
        let scales_3d = (0..4)
            .fold(qmoe(), |n, _| n.absent_input())
            .input(U8)
            .input_dims(3, &[Some(4), Some(8), Some(1)]);
        assert!(decline_reason(&scales_3d).contains("[E, rows, 1] scales"));
        assert!(claimed(&with(scales_3d, &[int("block_size", 32)])));
        assert!(why(qmoe(), &[int("use_sparse_mixer", 1)]).contains("use_sparse_mixer"));
    }

    #[test]
    fn qmoe_scale_and_fp_inputs_are_checked() {
        let no_fc2_scales = Node::new("QMoE", 1)
            .in_domain("com.microsoft")
            .input(F)
            .input(F)
            .input(U8)
            .input(F)
            .absent_input()
            .input(U8)
            .output(F);
        assert!(decline_reason(&no_fc2_scales).contains("fc2_scales"));
        // Inputs 7..=14 absent, then fc1_global_scale.
        let global = (7..15).fold(qmoe(), |n, _| n.absent_input()).input(F);
        assert!(decline_reason(&global).contains("FP4/FP8"));
    }

    #[test]
    fn mlx_groups_are_those_its_kernels_take() {
        let layout = |cols, block| super::QuantLayout {
            experts: 1,
            rows: 1,
            cols,
            bits: 4,
            block,
        };
        let group = |cols, block| super::mlx_group(&layout(cols, block));
        assert_eq!(group(128, Some(32)), Some(32));
        assert_eq!(group(256, Some(128)), Some(64)); // a block of 128 is two groups of 64
        assert_eq!(group(160, None), Some(32)); // a whole column of 160: five groups of 32
        assert_eq!(group(128, Some(16)), None);
        assert_eq!(group(136, None), None);
        assert_eq!(group(64, Some(32)), None); // K < 128
    }

    /// `top_k` against a sort of `(key, index)` pairs (larger key first, an equal key to the
    /// larger index, NaN last) on rows drawn from a few values, so that most keys tie: every
    /// `k`, signed zeros and infinities included.
    #[test]
    fn top_k_is_ort_order_with_ties_nan_and_signed_zeros() {
        const VALUES: [f32; 7] = [
            0.0,
            -0.0,
            1.0,
            -1.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
        ];
        let (rows, experts) = (40usize, 13usize);
        let mut state = 12345u32;
        let keys: Vec<f32> = (0..rows * experts)
            .map(|_| {
                state = state.wrapping_mul(1_103_515_245).wrapping_add(12345);
                VALUES[(state >> 16) as usize % VALUES.len()]
            })
            .collect();
        let expected = |row: &[f32]| -> Vec<i32> {
            let mut order: Vec<usize> = (0..row.len()).collect();
            order.sort_by(|&a, &b| {
                let rank =
                    |i: usize| (!row[i].is_nan(), if row[i].is_nan() { 0.0 } else { row[i] });
                let (ra, rb) = (rank(a), rank(b));
                rb.0.cmp(&ra.0)
                    .then(rb.1.partial_cmp(&ra.1).unwrap())
                    .then(b.cmp(&a))
            });
            order.iter().map(|&i| i as i32).collect()
        };
        let s = stream();
        let array = f32s(&keys, &[rows as i64, experts as i64]);
        for k in 1..=experts {
            let picked = super::top_k(&array, k as i64, &s)
                .unwrap()
                .to_vec::<i32>(&s)
                .unwrap();
            for (r, row) in keys.chunks(experts).enumerate() {
                let want = &expected(row)[..k];
                assert_eq!(&picked[r * k..(r + 1) * k], want, "row {row:?}, k {k}");
            }
        }
    }

    /// Router logits `[1, 0, 1, 0]` with k = 1: experts 0 and 2 tie, and ORT picks 2. With zero
    /// fc1 weights and fc2 biases of one-hot rows, the output is each expert's mixing weight.
    #[test]
    fn a_tie_goes_to_the_larger_expert_index() {
        let experts = 4;
        let x = f32s(&[0.5; 4], &[1, 4]);
        let logits = f32s(&[1.0, 0.0, 1.0, 0.0], &[1, 4]);
        let fc1 = f32s(&[0.0; 16], &[4, 1, 4]);
        let fc2 = f32s(&[0.0; 16], &[4, 4, 1]);
        let one_hot: Vec<f32> = (0..16)
            .map(|i| if i / experts == i % experts { 1.0 } else { 0.0 })
            .collect();
        let fc2_bias = f32s(&one_hot, &[4, 4]);
        let inputs = [
            Some(x),
            Some(logits),
            Some(fc1),
            None,
            Some(fc2),
            Some(fc2_bias),
        ];
        let node = Node::new("MoE", 1)
            .in_domain("com.microsoft")
            .input(F)
            .input(F)
            .input(F)
            .absent_input()
            .input(F)
            .input(F)
            .output(F);
        let y = values_f32(&run1(&node, &inputs));
        let e = std::f32::consts::E;
        let p = e / (2.0 * e + 2.0);
        assert_eq!(y[0], 0.0, "{y:?}");
        assert!((y[2] - p).abs() < 1e-6, "{y:?}");
        assert_eq!((y[1], y[3]), (0.0, 0.0), "{y:?}");
    }
}
