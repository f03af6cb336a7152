//! Block-quantised weights, as onnxruntime-genai's model builder emits them: com.microsoft
//! MatMulNBits (every projection of an int4 LLM) and GatherBlockQuantized (quantised or tied
//! embeddings).
//!
//! Both dequantise exactly, `w = (q - zero_point) * scale` in float32, as ORT's CPU kernels do
//! (16-bit activations and scales are widened to float32, the result rounded once), with one
//! exception for speed: a float16/bfloat16 MatMulNBits with more rows than a decode step (a
//! prefill) multiplies in its own type (see `half_prefill`).
//!
//! MatMulNBits packs `bits`-wide values low bits first into the bytes of `B [N, K/block,
//! block*bits/8]`. On a little-endian host those bytes, read as `uint32`, are exactly MLX's
//! affine packing (lowest bits first in each `uint32`), so `B` reaches MLX's
//! `quantized_matmul` through a view; only the `[N, K/block]` scales become MLX's scales and
//! biases (`-scale * zero_point`), O(N·K/block) work once per plan for constant weights. MLX
//! groups 32, 64 or 128 values: larger blocks repeat their scale per group of 64 (see
//! `MLX_MAX_GROUP`). Blocks of 16 and `g_idx` dequantise in the graph (O(N·K) per run) and
//! multiply in float32.
//!
//! GatherBlockQuantized reads a uint8 table in whole blocks of 32 or more the same way: the
//! gathered rows go through MLX's `dequantize` with unit scales and `-zero_point` biases, which
//! gives `q - zero_point` exactly, then the scale (see `gather_affine`). Other tables unpack
//! in the graph.

use mlx_kernels::ops::{self, Quantized};
use mlx_kernels::{custom, Array, DeviceKind, Dtype, Stream};

use crate::normalization::cast;
use crate::packing::{expect_one_of, expect_shape, repeat_last, take_first, unpack, unpack_lanes};
use crate::table::consts::{scalar, scalar_like, zeros};
use crate::table::dtypes::ElemType;
use crate::{onnx_op, Lower, Node, OpError, Result, Verdict};

/// The largest affine group handed to MLX. MLX takes 128 too, but its CUDA `quantized_matmul`
/// at group 128 (0.32.4, H200) spreads a NaN or inf in one row of `x` to every row of the
/// product (a NaN in row 0 of an 8-row `x` made all 8 rows NaN; groups 32 and 64 are exact).
/// A block of 128 is two groups of 64 with the same scale and bias, so nothing is lost.
const MLX_MAX_GROUP: i64 = 64;

/// The smallest K handed to MLX's `quantized_matmul` (see `Layout::affine`).
const MIN_AFFINE_K: i64 = 128;

fn power_of_two_block(block: i64) -> bool {
    block >= 16 && block & (block - 1) == 0
}

/// The attributes of a MatMulNBits node, checked against its inputs.
struct Layout {
    k: i64,
    n: i64,
    block: i64,
    bits: i64,
    /// Blocks along K (the last one padded when K is not a multiple of the block).
    k_blocks: i64,
}

impl Layout {
    fn padded_k(&self) -> i64 {
        self.k_blocks * self.block
    }

    /// Whether MLX's affine form holds `B` (groups of 32 and up, no g_idx). MLX's CUDA
    /// quantized_matmul returned uninitialised values for K = 64 (H200, op suite b4_bs64 and
    /// fuzz s1-MatMulNBits-1-39); K from 128 up matched the CPU backend. Smaller K dequantises,
    /// whose O(N·K) cost is small there.
    fn affine(&self, g_idx: bool) -> bool {
        self.block >= 32 && !g_idx && self.k >= MIN_AFFINE_K
    }
}

/// Zero points must be `[N, k_blocks]` (or flat): packed bytes when uint8, else floats.
fn check_zero_points(zp: &Array, layout: &Layout) -> Result<()> {
    let Layout { n, k_blocks, .. } = *layout;
    if zp.dtype() == Dtype::U8 {
        let bytes = zero_point_bytes(layout);
        return expect_one_of(
            zp,
            &[vec![n * bytes], vec![n, bytes]],
            "zero_points (uint8)",
        );
    }
    expect_one_of(zp, &[vec![n * k_blocks], vec![n, k_blocks]], "zero_points")
}

/// Bytes per row of packed uint8 zero points.
fn zero_point_bytes(layout: &Layout) -> i64 {
    (layout.k_blocks * layout.bits + 7) / 8
}

/// `[N, k_blocks]` float32 zero points (shape checked), or the midpoint `2^(bits-1)` as a
/// scalar.
fn zero_points_f32(zero_points: Option<&Array>, layout: &Layout, s: &Stream) -> Result<Array> {
    let Layout {
        n, bits, k_blocks, ..
    } = *layout;
    let Some(zp) = zero_points else {
        return scalar((1 << (bits - 1)) as f64, Dtype::F32, s);
    };
    if zp.dtype() == Dtype::U8 {
        let packed = ops::reshape(zp, &[n, zero_point_bytes(layout)], s)?;
        let values = take_first(&unpack(&packed, bits, s)?, k_blocks, s)?;
        return Ok(ops::astype(&values, Dtype::F32, s)?);
    }
    Ok(ops::astype(
        &ops::reshape(zp, &[n, k_blocks], s)?,
        Dtype::F32,
        s,
    )?)
}

/// `[N, k_blocks]` float32 scales.
fn scales_f32(scales: &Array, layout: &Layout, s: &Stream) -> Result<Array> {
    Ok(ops::astype(
        &ops::reshape(scales, &[layout.n, layout.k_blocks], s)?,
        Dtype::F32,
        s,
    )?)
}

/// `A · dequant(B)ᵀ (+ bias)` with `B` quantised block-wise along K to 2, 4 or 8 bits: `w = (q
/// - zero_point) * scale`, zero points absent (`2^(bits-1)`), packed uint8, or floats of the
/// scales' type; `g_idx` maps each row of K to its block. Computed in float32 and rounded once
/// to A's type, as ORT's CPU kernel does (it has no bfloat16 kernel: bfloat16 is computed the
/// same way), except a 16-bit prefill off Metal (`half_prefill`): weights dequantised in A's
/// type, products accumulated in float32. `accuracy_level` is read and does not change the
/// answer: at level 4 ORT's CPU kernel quantises A to int8 per block (an error of about 0.5% of
/// the output's range); ours is the exact float32 product of the dequantised weights at every
/// level. Scales of ±inf give
/// NaN where ORT may give ±inf (MLX's affine form `scale·q + bias`).
#[allow(clippy::too_many_arguments)] // six inputs and six attributes, as ORT has them
#[onnx_op(
    domain = "com.microsoft", op = "MatMulNBits", since = 1,
    types(T1 = FLOAT, T2 = U8, T3 = U8 | FLOAT, T4 = I32),
    inputs(A: T1, B: T2, scales: T1, zero_points: T3, g_idx: T4, bias: T1), outputs(Y: T1),
    // The answer is exact at every accuracy level; weight_prepacked is checked by the claim.
    ignores(accuracy_level: i64, weight_prepacked: i64),
    shape = ShapeKeyed, claim = matmul_n_bits_claim,
    declines = "bits other than 2, 4, 8 and block sizes that are not a power of two >= 16 (the op's rule; the EP runs the sizes past 256 that ORT's CPU kernel refuses); weight_prepacked != 0 (another EP's layout); K or N < 1; float zero points of a type other than the scales', or with 8 bits (ORT's kernel fails); g_idx unless bits = 4 with no or float zero points (ORT's kernel gives another answer there, or fails)",
    numerics = "the exact float32 product of A and the dequantised weights, rounded once to A's type, at every accuracy_level; except float16/bfloat16 A with more than 8 rows (a prefill; not on Metal), whose weights MLX dequantises in A's type (scale·q + bias, up to three roundings: within 3/256 of a quantisation step of the exact weight in float16, 3/32 in bfloat16) before a product accumulated in float32. ORT's CPU kernel computes the same at levels 0-3; at level 4 (what onnxruntime-genai's builder emits) it quantises each block of A to int8 first, so ORT is the less accurate side there: against a float64 reference ORT's error there is 0.3-0.5% of the output's largest magnitude (K = 512, bits 2/4/8, blocks 16-256), ours below 1e-5 in float32 (tests/ep/test_quantized.py)"
)]
fn matmul_n_bits(
    cx: &mut Lower,
    a: Array,
    b: Array,
    scales: Array,
    zero_points: Option<Array>,
    g_idx: Option<Array>,
    bias: Option<Array>,
    #[attr(name = "K")] k: i64,
    #[attr(name = "N")] n: i64,
    #[attr] block_size: i64,
    #[attr(default = 4)] bits: i64,
) -> Result<Array> {
    let s = cx.stream();
    let k_blocks = (k + block_size - 1) / block_size;
    let layout = Layout {
        k,
        n,
        block: block_size,
        bits,
        k_blocks,
    };
    let blob = block_size * bits / 8;
    expect_shape(&b, &[n, k_blocks, blob], "B")?;
    expect_one_of(&scales, &[vec![n * k_blocks], vec![n, k_blocks]], "scales")?;
    if let Some(bias) = &bias {
        expect_shape(bias, &[n], "bias")?;
    }
    let a_shape = a.shape();
    if a_shape.last() != Some(&k) {
        return Err(OpError::new(format!(
            "A has shape {a_shape:?}: its last axis must be K = {k}"
        )));
    }
    if let Some(zp) = &zero_points {
        check_zero_points(zp, &layout)?;
    }
    let out_dtype = a.dtype();
    let mut out_shape = a_shape[..a_shape.len() - 1].to_vec();
    out_shape.push(n);
    let g_idx = match g_idx {
        Some(g) => {
            expect_one_of(&g, &[vec![k], vec![layout.padded_k()]], "g_idx")?;
            cx.require_in_range(
                &g,
                0,
                k_blocks - 1,
                format!("a g_idx value is out of its range [0, {k_blocks})"),
            )?;
            Some(crate::indexing::in_bounds(&g, k_blocks, s)?)
        }
        None => None,
    };
    if out_shape.contains(&0) {
        return zeros(&out_shape, out_dtype, s);
    }
    let plain = zero_points.is_none() && g_idx.is_none() && bias.is_none();
    if let Some(y) = cuda_matvec(&a, &b, &scales, &layout, plain, s)? {
        return Ok(ops::reshape(&y, &out_shape, s)?);
    }
    let rows: i64 = out_shape.iter().rev().skip(1).product();
    // Both products take `[.., K]`, A's leading axes kept; a vector as one row.
    let a = if a.ndim() < 2 {
        ops::reshape(&a, &[1, k], s)?
    } else {
        a
    };
    let mut y = if layout.affine(g_idx.is_some()) && half_prefill(out_dtype, rows, s) {
        // Inputs 1-3: with constant weights, repacked once per plan (a key of its own: on
        // the CPU backend the same node also runs decode rows in float32).
        let weights = cx.prepared("affine in A's type", &[1, 2, 3], || {
            affine_weights(&b, &scales, zero_points.as_ref(), &layout, out_dtype, s)
        })?;
        // `[N, padded K]`: the last block's padding dropped.
        let w = take_first(&ops::dequantize(&quantized(weights, &layout)?, s)?, k, s)?;
        let y = ops::matmul(&a, &ops::transpose(&w, &[1, 0], s)?, s)?;
        match bias {
            Some(bias) => ops::add(&y, &bias, s)?,
            None => y,
        }
    } else {
        let y = float32_product(cx, &a, &b, &scales, zero_points, g_idx.as_ref(), &layout)?;
        match bias {
            Some(bias) => {
                // Input 5: a constant bias is widened once per plan.
                let wide = cx.prepared("bias", &[5], || Ok(vec![cast(&bias, Dtype::F32, s)?]))?;
                ops::add(&y, &wide[0], s)?
            }
            None => y,
        }
    };
    if y.shape() != out_shape {
        y = ops::reshape(&y, &out_shape, s)?;
    }
    cast(&y, out_dtype, s)
}

/// Whether a float16 or bfloat16 A of more than a decode's rows (a prefill) is multiplied in
/// its own type: `B` dequantised to it by MLX (`scale·q + bias` in that type, see
/// [`affine_weights`]), then MLX's matmul, which accumulates in float32 on tensor cores. Measured
/// on an H200 (MLX 0.32.4, one process) for the 1.1B int4 decoder's prefill of 144 tokens: 20.8
/// ms against 24.3 through MLX's float16 `quantized_matmul` and 34.9 with each weight rounded
/// once by a fused elementwise dequantisation (MLX's own dequantize kernel reads the packed bytes
/// faster); the float32 product took 47 in another run. Not on Metal, where MLX's quantized matmul
/// reads the packed weights in place and a per-run dequantisation would cost unified memory's
/// bandwidth (not measured: no Metal machine here).
fn half_prefill(a: Dtype, rows: i64, s: &Stream) -> bool {
    let metal = cfg!(target_os = "macos") && s.kind() == DeviceKind::Gpu;
    matches!(a, Dtype::F16 | Dtype::BF16) && rows > custom::QUANTIZED_MATVEC_MAX_ROWS && !metal
}

/// `a [.., K] · dequant(B)ᵀ` in float32: MLX's `quantized_matmul` over the affine form of `B`
/// where MLX takes it, else the dequantised weights.
fn float32_product(
    cx: &mut Lower,
    a: &Array,
    b: &Array,
    scales: &Array,
    zero_points: Option<Array>,
    g_idx: Option<&Array>,
    layout: &Layout,
) -> Result<Array> {
    let s = cx.stream();
    let x = cast(a, Dtype::F32, s)?;
    if layout.affine(g_idx.is_some()) {
        // Inputs 1-3 (B, scales, zero_points): with constant weights, repacked once per plan.
        let weights = cx.prepared("affine", &[1, 2, 3], || {
            affine_weights(b, scales, zero_points.as_ref(), layout, Dtype::F32, s)
        })?;
        return affine_product(&x, weights, layout, s);
    }
    // Lazy on purpose: the dequantised weights are float32, 8x a 4-bit B; a plan that kept
    // them would hold the float copy the packed weights exist to avoid.
    let zero_points = zero_points_f32(zero_points.as_ref(), layout, s)?;
    let w = dense_weights(b, scales, &zero_points, g_idx, layout, s)?;
    Ok(ops::matmul(&x, &ops::transpose(&w, &[1, 0], s)?, s)?)
}

/// A decode-sized product (a few rows of A) on MLX's CUDA backend: the hand-written kernel
/// reads ORT's packed bytes and A's own scales as they are and accumulates in float32, the same
/// answer as the float32 path below without its widening and repacking. 4 bits, zero points at
/// the midpoint, no g_idx, no bias; `None` elsewhere.
fn cuda_matvec(
    a: &Array,
    b: &Array,
    scales: &Array,
    layout: &Layout,
    plain: bool,
    s: &Stream,
) -> Result<Option<Array>> {
    let rows: i64 = a.shape().iter().rev().skip(1).product();
    let fits = plain
        && layout.bits == 4
        && layout.block >= 32
        && layout.k % layout.block == 0
        && (1..=custom::QUANTIZED_MATVEC_MAX_ROWS).contains(&rows)
        && a.dtype() != Dtype::BF16
        && custom::quantized_matvec_runs_on(s);
    if !fits {
        return Ok(None);
    }
    let x = ops::reshape(a, &[rows, layout.k], s)?;
    Ok(Some(custom::quantized_matvec(
        &x,
        b,
        scales,
        layout.n,
        layout.block,
        s,
    )?))
}

/// MLX's affine form of `B`: `[weight, scales, biases]`, the weight `B`'s bytes viewed as
/// MLX's `uint32` packing (no copy), scales and `-scale * zero_point` biases (computed in
/// float32, rounded once to `dtype`) repeated per MLX group. No larger than B's scales times
/// two (for groups of 32 and 64): what a plan keeps when B is constant.
fn affine_weights(
    b: &Array,
    scales: &Array,
    zero_points: Option<&Array>,
    layout: &Layout,
    dtype: Dtype,
    s: &Stream,
) -> Result<Vec<Array>> {
    let Layout { n, block, bits, .. } = *layout;
    let per_block = block / block.min(MLX_MAX_GROUP);
    let words = ops::view(&ops::contiguous(b, s)?, Dtype::U32, s)?;
    let weight = ops::reshape(&words, &[n, layout.padded_k() * bits / 32], s)?;
    let scales = scales_f32(scales, layout, s)?;
    let zero_points = zero_points_f32(zero_points, layout, s)?;
    let biases = ops::negative(&ops::multiply(&scales, &zero_points, s)?, s)?;
    // Row-contiguous scales and biases: MLX's CUDA kernels have no implementation for the
    // strides a repeat leaves (seen on an H200: "No implementation for problem shape").
    let per_group = |v: &Array| -> Result<Array> {
        Ok(ops::contiguous(
            &repeat_last(&cast(v, dtype, s)?, per_block, s)?,
            s,
        )?)
    };
    Ok(vec![weight, per_group(&scales)?, per_group(&biases)?])
}

/// [`affine_weights`] as MLX's quantised matrix.
fn quantized(weights: Vec<Array>, layout: &Layout) -> Result<Quantized> {
    let [weight, scales, biases]: [Array; 3] = weights
        .try_into()
        .map_err(|_| OpError::new("affine weights: three arrays expected (table bug)"))?;
    Ok(Quantized {
        weight,
        scales,
        biases,
        group_size: layout.block.min(MLX_MAX_GROUP) as i32,
        bits: layout.bits as i32,
    })
}

/// `x [.., K] · wᵀ` through MLX's `quantized_matmul` over [`affine_weights`].
fn affine_product(x: &Array, weights: Vec<Array>, layout: &Layout, s: &Stream) -> Result<Array> {
    let (k, padded) = (layout.k, layout.padded_k());
    // The padding of the last block meets zeros.
    let x = if padded > k {
        let zero = scalar(0.0, x.dtype(), s)?;
        let last = x.ndim() as i32 - 1;
        ops::pad(x, &[last], &[0], &[(padded - k) as i32], &zero, false, s)?
    } else {
        x.clone()
    };
    Ok(ops::quantized_matmul(
        &x,
        &quantized(weights, layout)?,
        true,
        s,
    )?)
}

/// `B` dequantised to float32 `w [N, K]`: `(q - zero_point) * scale`, exact (an integer of at
/// most 8 bits times a scale of at most 24). Without `g_idx` every step is elementwise over
/// `[N, blocks, bytes, values per byte]` with the block's scale and zero point broadcast, so a
/// compiled plan runs it as one kernel that reads the packed bytes once.
fn dense_weights(
    b: &Array,
    scales: &Array,
    zero_points: &Array,
    g_idx: Option<&Array>,
    layout: &Layout,
    s: &Stream,
) -> Result<Array> {
    let Layout {
        k,
        n,
        block,
        bits,
        k_blocks,
    } = *layout;
    let scales = ops::reshape(scales, &[n, k_blocks], s)?;
    let w = match g_idx {
        None => {
            let bytes = ops::reshape(b, &[n, k_blocks, block * bits / 8], s)?;
            let q = ops::astype(&unpack_lanes(&bytes, bits, s)?, Dtype::F32, s)?;
            // Per block: `[N, blocks, 1, 1]` against q's `[N, blocks, bytes, values]`.
            let per_block = |v: &Array| -> Result<Array> {
                if v.ndim() == 0 {
                    return Ok(v.clone());
                }
                Ok(ops::reshape(v, &[n, k_blocks, 1, 1], s)?)
            };
            let scales = ops::astype(&per_block(&scales)?, Dtype::F32, s)?;
            let w = ops::multiply(&ops::subtract(&q, &per_block(zero_points)?, s)?, &scales, s)?;
            ops::reshape(&w, &[n, k_blocks * block], s)?
        }
        Some(g) => {
            let bytes = ops::reshape(b, &[n, k_blocks * block * bits / 8], s)?;
            let q = ops::astype(&take_first(&unpack(&bytes, bits, s)?, k, s)?, Dtype::F32, s)?;
            // Per row of K: its block's scale and zero point, as g_idx maps them.
            let g = take_first(&ops::reshape(g, &[-1], s)?, k, s)?;
            let per_k = |v: &Array| -> Result<Array> {
                if v.ndim() == 0 {
                    return Ok(v.clone());
                }
                Ok(ops::take(v, &g, 1, s)?)
            };
            let scales = ops::astype(&per_k(&scales)?, Dtype::F32, s)?;
            ops::multiply(&ops::subtract(&q, &per_k(zero_points)?, s)?, &scales, s)?
        }
    };
    take_first(&w, k, s)
}

fn matmul_n_bits_claim(node: &Node) -> Verdict {
    let bits = node.attr_or("bits", 4i64);
    if !matches!(bits, 2 | 4 | 8) {
        return Verdict::decline(format!("bits {bits}: ORT's CPU kernel takes 2, 4 or 8"));
    }
    match node.attr_as::<i64>("block_size") {
        Some(block) if power_of_two_block(block) => {}
        other => {
            return Verdict::decline(format!(
                "block_size {other:?}: MatMulNBits takes a power of two >= 16"
            ))
        }
    }
    if node.attr_or("weight_prepacked", 0i64) != 0 {
        return Verdict::decline("weight_prepacked: B is in another EP's prepacked layout");
    }
    for dim in ["K", "N"] {
        if node.attr_as::<i64>(dim).is_none_or(|d| d < 1) {
            return Verdict::decline(format!("{dim} < 1"));
        }
    }
    let zp = node.input_type(3);
    let float_zp = zp.is_some_and(|t| t != ElemType::Uint8);
    if float_zp && zp != node.input_type(0) {
        return Verdict::decline(
            "float zero_points of a type other than the scales' (ORT's kernel fails)",
        );
    }
    if float_zp && bits == 8 {
        return Verdict::decline("float zero_points with 8 bits (ORT's CPU kernel fails)");
    }
    if node.input_present(4) && (bits != 4 || zp == Some(ElemType::Uint8)) {
        return Verdict::decline(
            "g_idx with 2 or 8 bits or uint8 zero_points: ORT's CPU kernel fails or gives \
             another answer than the dequantised product there",
        );
    }
    Verdict::Claim
}

/// Slices of a block-quantised table at `indices`, dequantised: `(q - zero_point) * scale` in
/// float32, rounded once to the scales' type. uint8 tables: rows (gather_axis 0), blocks along
/// the last axis (quantize_axis), `bits` of 2 or 4 packed low bits first, zero points packed
/// the same way and `2^(bits-1)` when absent. int4 and uint4 tables (`bits` 4): any rank,
/// gather_axis and quantize_axis, zero points of the table's type, 0 when absent. An index
/// outside `[-n, n)` gives a slice of zeros, as ORT's CPU kernel does (it does not fail).
#[onnx_op(
    domain = "com.microsoft", op = "GatherBlockQuantized", since = 1,
    types(T1 = U8 | I4 | U4, T2 = F32 | F16, Tind = I32 | I64),
    inputs(data: T1, indices: Tind, scales: T2, zero_points: T1), outputs(output: T2),
    shape = ShapeKeyed, claim = gather_block_quantized_claim,
    declines = "bits other than 2, 4, 8 (uint8 data) or 4 (int4, uint4 data) and block sizes that are not a power of two >= 16 (ORT's kernel refuses them)"
)]
#[allow(clippy::too_many_arguments)] // four inputs and four attributes, as ORT has them
fn gather_block_quantized(
    cx: &mut Lower,
    data: Array,
    indices: Array,
    scales: Array,
    zero_points: Option<Array>,
    #[attr(default = 4)] bits: i64,
    #[attr(default = 128)] block_size: i64,
    #[attr(default = 1)] quantize_axis: i64,
    #[attr(default = 0)] gather_axis: i64,
) -> Result<Array> {
    let s = cx.stream();
    if matches!(
        cx.node().input_type(0),
        Some(ElemType::Int4 | ElemType::Uint4)
    ) {
        let axes = GatherAxes {
            gather: gather_axis,
            quantize: quantize_axis,
            block: block_size,
        };
        return gather_four_bit(&data, &indices, &scales, zero_points.as_ref(), &axes, s);
    }
    let shape = data.shape();
    let rank = shape.len();
    let normal = |axis: i64| if axis < 0 { axis + rank as i64 } else { axis };
    if rank < 2 || normal(gather_axis) != 0 || normal(quantize_axis) != rank as i64 - 1 {
        return Err(OpError::new(format!(
            "uint8 data of rank {rank} with gather_axis {gather_axis}, quantize_axis \
             {quantize_axis}: ORT takes gather_axis 0 and quantize_axis last (rank >= 2)"
        )));
    }
    let per = 8 / bits;
    let rows = shape[0];
    let width = shape[rank - 1] * per;
    let blocks = (width + block_size - 1) / block_size;
    let lead = &shape[..rank - 1];
    let with_last = |last: i64| {
        let mut v = lead.to_vec();
        v.push(last);
        v
    };
    expect_shape(&scales, &with_last(blocks), "scales")?;
    if let Some(zp) = &zero_points {
        expect_shape(zp, &with_last((blocks + per - 1) / per), "zero_points")?;
    }
    let out_dtype = scales.dtype();
    let mut out_shape = indices.shape();
    out_shape.extend_from_slice(&shape[1..rank - 1]);
    out_shape.push(width);
    if out_shape.contains(&0) || rows == 0 {
        return zeros(&out_shape, out_dtype, s);
    }
    let table = PackedTable {
        data: &data,
        scales: &scales,
        zero_points: zero_points.as_ref(),
        bits,
        block: block_size,
        width,
        blocks,
    };
    if let Some(group) = table.affine_group() {
        return gather_affine(cx, &table, &indices, group, &out_shape);
    }
    let flat = ops::reshape(&indices, &[-1], s)?;
    let (inside, safe) = wrap_indices(&flat, rows, s)?;
    let q = ops::astype(
        &unpack(&ops::take(&data, &safe, 0, s)?, bits, s)?,
        Dtype::F32,
        s,
    )?;
    let per_value = |v: &Array| take_first(&repeat_last(v, block_size, s)?, width, s);
    let scale = per_value(&ops::astype(
        &ops::take(&scales, &safe, 0, s)?,
        Dtype::F32,
        s,
    )?)?;
    let zero = match zero_points {
        Some(zp) => {
            let unpacked = unpack(&ops::take(&zp, &safe, 0, s)?, bits, s)?;
            per_value(&ops::astype(
                &take_first(&unpacked, blocks, s)?,
                Dtype::F32,
                s,
            )?)?
        }
        None => scalar((1 << (bits - 1)) as f64, Dtype::F32, s)?,
    };
    let values = ops::multiply(&ops::subtract(&q, &zero, s)?, &scale, s)?;
    gathered_output(&values, &inside, 0, rank, &out_shape, out_dtype, s)
}

/// An index into `n` slices: whether it lies in `[-n, n)` (an index outside gives a slice of
/// zeros in ORT), and where to gather from, `index mod n` in `[0, n)`: the index's slice when it
/// is inside, an in-bounds one (masked later) when not.
fn wrap_indices(indices: &Array, n: i64, s: &Stream) -> Result<(Array, Array)> {
    let [low, count] = index_bounds(n, indices.dtype(), s)?;
    wrap_within(indices, &low, &count, s)
}

/// `-n` and `n` as scalars of the indices' type.
fn index_bounds(n: i64, dtype: Dtype, s: &Stream) -> Result<[Array; 2]> {
    Ok([scalar(-n as f64, dtype, s)?, scalar(n as f64, dtype, s)?])
}

/// [`wrap_indices`] with the bounds `-n` (`low`) and `n` (`count`) given.
fn wrap_within(indices: &Array, low: &Array, count: &Array, s: &Stream) -> Result<(Array, Array)> {
    let inside = ops::logical_and(
        &ops::greater_equal(indices, low, s)?,
        &ops::less(indices, count, s)?,
        s,
    )?;
    Ok((inside, ops::remainder(indices, count, s)?))
}

/// A uint8 GatherBlockQuantized table (gather_axis 0, quantize_axis last): `data [n, ..,
/// width·bits/8]`, scales `[n, .., blocks]`, packed zero points.
struct PackedTable<'a> {
    data: &'a Array,
    scales: &'a Array,
    zero_points: Option<&'a Array>,
    bits: i64,
    block: i64,
    /// Values per row along the quantised axis.
    width: i64,
    blocks: i64,
}

impl PackedTable<'_> {
    /// The MLX group [`gather_affine`] reads rows in, when it can: whole blocks of 32 values or
    /// more, rows of whole uint32 words.
    fn affine_group(&self) -> Option<i64> {
        let row_bytes = self.width * self.bits / 8;
        (self.block >= 32 && self.width % self.block == 0 && row_bytes % 4 == 0)
            .then(|| self.block.min(MLX_MAX_GROUP))
    }

    /// `-zero_point` of each group of `zero_points` rows (`[.., ceil(blocks·bits/8)]`) in the
    /// scales' type: `[.., width / group]`.
    fn negated_zero_points(&self, zero_points: &Array, group: i64, s: &Stream) -> Result<Array> {
        let z = take_first(&unpack(zero_points, self.bits, s)?, self.blocks, s)?;
        let z = ops::negative(&cast(&z, self.scales.dtype(), s)?, s)?;
        repeat_last(&z, self.block / group, s)
    }
}

/// GatherBlockQuantized of a [`PackedTable`] through MLX's `dequantize`: the gathered rows'
/// bytes, viewed as MLX's uint32 packing (as for MatMulNBits), dequantise with scale 1 and
/// bias `-zero_point` to `q - zero_point`, small integers that the scales' type holds exactly;
/// each is then multiplied by its block's scale in that type. That is one rounding of the exact
/// product, as ORT's float32 `(q - zero_point) * scale` is: for float16 scales the float32
/// product of two float16 values is exact, and ORT rounds it to float16 once.
fn gather_affine(
    cx: &mut Lower,
    table: &PackedTable,
    indices: &Array,
    group: i64,
    out_shape: &[i64],
) -> Result<Array> {
    let s = cx.stream();
    let indices = if indices.ndim() == 0 {
        ops::reshape(indices, &[1], s)?
    } else {
        indices.clone()
    };
    let [words, scales, ones, midpoint, zero, low, count] =
        table_views(cx, table, &indices, group)?;
    let (inside, safe) = wrap_within(&indices, &low, &count, s)?;
    let words = ops::take(&words, &safe, 0, s)?;
    let mut per_group = words.shape();
    per_group.pop();
    let lead = per_group.clone();
    per_group.push(table.width / group);
    let biases = match table.zero_points {
        None => each_row(&midpoint, &per_group, s)?,
        // Input 3: a constant table's negated zero points are made once per plan, whole.
        Some(zp) if cx.input_is_constant(3) => {
            let all = cx.prepared("negated zero points", &[3], || {
                Ok(vec![table.negated_zero_points(zp, group, s)?])
            })?;
            ops::take(&all[0], &safe, 0, s)?
        }
        Some(zp) => table.negated_zero_points(&ops::take(zp, &safe, 0, s)?, group, s)?,
    };
    let centred = ops::dequantize(
        &Quantized {
            weight: words,
            scales: each_row(&ones, &per_group, s)?,
            biases,
            group_size: group as i32,
            bits: table.bits as i32,
        },
        s,
    )?;
    let mut blocked = lead;
    blocked.extend([table.blocks, table.block]);
    let scale = ops::take(&scales, &safe, 0, s)?;
    let values = ops::multiply(&ops::reshape(&centred, &blocked, s)?, &scale, s)?;
    let mut keep_shape = indices.shape();
    keep_shape.resize(blocked.len(), 1);
    let keep = ops::reshape(&inside, &keep_shape, s)?;
    let values = ops::where_(&keep, &values, &zero, s)?;
    Ok(ops::reshape(&values, out_shape, s)?)
}

/// What [`gather_affine`] reads besides the indices, made from the table's inputs (0 and 2,
/// data and scales) and the node's types only, so once per plan when they are constants:
/// the data as MLX's uint32 words and the scales with a trailing axis (views of the same
/// buffers), a group of ones and one of the midpoint `-2^(bits-1)` in the scales' type (unit
/// scales and the biases without zero points), a zero of that type, and `-n`, `n` in the
/// indices' type.
fn table_views(
    cx: &mut Lower,
    table: &PackedTable,
    indices: &Array,
    group: i64,
) -> Result<[Array; 7]> {
    let s = cx.stream();
    let (dtype, index_dtype) = (table.scales.dtype(), indices.dtype());
    let groups = table.width / group;
    let n = table.data.shape()[0];
    let views = cx.prepared("table views", &[0, 2], || {
        // Row-contiguous: MLX's GPU dequantize copies its parameters into that layout.
        let row = |v: f64| -> Result<Array> {
            let spread = ops::broadcast_to(&scalar(v, dtype, s)?, &[groups], s)?;
            Ok(ops::contiguous(&spread, s)?)
        };
        let [low, count] = index_bounds(n, index_dtype, s)?;
        Ok(vec![
            ops::view(&ops::contiguous(table.data, s)?, Dtype::U32, s)?,
            ops::expand_dims(table.scales, &[-1], s)?,
            row(1.0)?,
            row(-((1i64 << (table.bits - 1)) as f64))?,
            scalar(0.0, dtype, s)?,
            low,
            count,
        ])
    })?;
    views
        .try_into()
        .map_err(|_| OpError::new("table views: seven arrays expected (table bug)"))
}

/// `row` (`[groups]`) for every gathered row, `shape` `[.., groups]`: a reshape, which keeps it
/// row-contiguous, when there is one row (decoding one token), else a broadcast.
fn each_row(row: &Array, shape: &[i64], s: &Stream) -> Result<Array> {
    if shape.iter().product::<i64>() == row.size() as i64 {
        return Ok(ops::reshape(row, shape, s)?);
    }
    Ok(ops::broadcast_to(row, shape, s)?)
}

/// The dequantised slices `values` (float32, the gathered axis at `axis` of `rank`), zero
/// where `inside` (one flag per index) says the index was out of range, as ORT gives them;
/// shaped and typed as the output.
fn gathered_output(
    values: &Array,
    inside: &Array,
    axis: usize,
    rank: usize,
    out_shape: &[i64],
    out_dtype: Dtype,
    s: &Stream,
) -> Result<Array> {
    let mut keep_shape = vec![1; rank];
    keep_shape[axis] = inside.size() as i64;
    let keep = ops::reshape(inside, &keep_shape, s)?;
    let values = ops::where_(&keep, values, &scalar(0.0, Dtype::F32, s)?, s)?;
    Ok(ops::astype(
        &ops::reshape(&values, out_shape, s)?,
        out_dtype,
        s,
    )?)
}

/// The axes of an int4/uint4 GatherBlockQuantized, as the node gives them.
struct GatherAxes {
    gather: i64,
    quantize: i64,
    block: i64,
}

/// GatherBlockQuantized of an int4 or uint4 table (in its int8/uint8 carrier, one value per
/// element): slices along `gather` at `indices`, each value dequantised with the scale and zero
/// point of its block along `quantize`.
fn gather_four_bit(
    data: &Array,
    indices: &Array,
    scales: &Array,
    zero_points: Option<&Array>,
    axes: &GatherAxes,
    s: &Stream,
) -> Result<Array> {
    let shape = data.shape();
    let rank = shape.len();
    let axis = |a: i64, what: &str| {
        crate::shape::normalise_axis(a, rank)
            .map_err(|e| OpError::new(format!("{what}: {}", e.message)))
    };
    let (g, qa) = (
        axis(axes.gather, "gather_axis")?,
        axis(axes.quantize, "quantize_axis")?,
    );
    let dim = shape[qa];
    let mut blocked = shape.clone();
    blocked[qa] = (dim + axes.block - 1) / axes.block;
    expect_shape(scales, &blocked, "scales")?;
    if let Some(zp) = zero_points {
        expect_shape(zp, &blocked, "zero_points")?;
    }
    let out_dtype = scales.dtype();
    let mut out_shape = shape[..g].to_vec();
    out_shape.extend(indices.shape());
    out_shape.extend_from_slice(&shape[g + 1..]);
    let n = shape[g];
    if out_shape.contains(&0) || n == 0 {
        return zeros(&out_shape, out_dtype, s);
    }
    let flat = ops::reshape(indices, &[-1], s)?;
    let (inside, safe) = wrap_indices(&flat, n, s)?;
    // Each block parameter of the gathered values, laid out like them.
    let per_value = |params: &Array| -> Result<Array> {
        let params = cast(params, Dtype::F32, s)?;
        if g == qa {
            let block = ops::floor_divide(&safe, &scalar_like(axes.block as f64, &safe, s)?, s)?;
            return Ok(ops::take(&params, &block, g as i32, s)?);
        }
        let picked = ops::take(&params, &safe, g as i32, s)?;
        crate::qdq::expand_blocks(&picked, qa, dim, axes.block, s)
    };
    let q = ops::astype(&ops::take(data, &safe, g as i32, s)?, Dtype::F32, s)?;
    let centred = match zero_points {
        Some(zp) => ops::subtract(&q, &per_value(zp)?, s)?,
        None => q,
    };
    let values = ops::multiply(&centred, &per_value(scales)?, s)?;
    gathered_output(&values, &inside, g, rank, &out_shape, out_dtype, s)
}

fn gather_block_quantized_claim(node: &Node) -> Verdict {
    let bits = node.attr_or("bits", 4i64);
    if matches!(node.input_type(0), Some(ElemType::Int4 | ElemType::Uint4)) && bits != 4 {
        return Verdict::decline(format!(
            "bits {bits}: ORT's CPU kernel takes 4 for int4 and uint4 data"
        ));
    }
    if !matches!(bits, 2 | 4 | 8) {
        return Verdict::decline(format!(
            "bits {bits}: ORT's CPU kernel takes 2, 4 or 8 for uint8 data"
        ));
    }
    let block = node.attr_or("block_size", 128i64);
    if !power_of_two_block(block) {
        return Verdict::decline(format!(
            "block_size {block}: ORT's kernel takes a power of two >= 16"
        ));
    }
    Verdict::Claim
}

#[cfg(test)]
mod gather_tests {
    use crate::table::testing::{claimed, decline_reason};
    use crate::{AttrValue, ElemType as E, Node};

    fn gather(data: E, bits: i64) -> Node {
        Node::new("GatherBlockQuantized", 1)
            .in_domain("com.microsoft")
            .input(data)
            .input(E::Int64)
            .input(E::Float)
            .output(E::Float)
            .attr("bits", AttrValue::Int(bits))
            .attr("block_size", AttrValue::Int(16))
    }

    #[test]
    fn four_bit_tables_take_bits_4_only() {
        assert!(claimed(&gather(E::Int4, 4)));
        assert!(claimed(&gather(E::Uint4, 4)));
        assert!(claimed(&gather(E::Uint8, 8)));
        assert!(decline_reason(&gather(E::Int4, 8)).contains("takes 4 for int4"));
    }
}

#[cfg(test)]
mod nbits_tests {
    use mlx_kernels::{arrays_created, ops, Array, Dtype};

    use super::{affine_weights, Layout};
    use crate::table::registry::{decide, Decision};
    use crate::table::testing::{stream, tensors};
    use crate::{AttrValue, ElemType as E, Node};

    /// MatMulNBits as genai's builder writes it for int4 weights: bits 4, block 32, no zero
    /// points, activations of type `t`.
    fn node(t: E, k: i64, n: i64) -> Node {
        Node::new("MatMulNBits", 1)
            .in_domain("com.microsoft")
            .input(t)
            .input(E::Uint8)
            .input(t)
            .output(t)
            .attr("K", AttrValue::Int(k))
            .attr("N", AttrValue::Int(n))
            .attr("block_size", AttrValue::Int(32))
            .attr("bits", AttrValue::Int(4))
            .attr("accuracy_level", AttrValue::Int(4))
    }

    /// How many arrays lowering `node` builds (its outputs' values are checked elsewhere: the
    /// op suite).
    fn arrays_built(node: &Node, inputs: &[Option<Array>]) -> u64 {
        let Decision::Claim { spec, .. } = decide(node) else {
            panic!("declined")
        };
        let inputs = tensors(inputs);
        let before = arrays_created();
        spec.lower_node(&stream(), node, &inputs).unwrap();
        arrays_created() - before
    }

    #[test]
    fn a_decode_row_costs_a_quantized_matmul_and_its_casts() {
        let s = stream();
        let (k, n) = (128i64, 8i64);
        let b = Array::from_slice(&vec![0x9au8; (n * k / 2) as usize], &[n, k / 32, 16]).unwrap();
        for (t, dtype, per_run) in [(E::Float16, Dtype::F16, 3), (E::Float, Dtype::F32, 1)] {
            let a = ops::astype(
                &Array::from_slice(&[0.5f32; 128], &[1, 1, k]).unwrap(),
                dtype,
                &s,
            );
            let scales = ops::astype(
                &Array::from_slice(&[0.1f32; 32], &[n, k / 32]).unwrap(),
                dtype,
                &s,
            );
            let (a, scales) = (a.unwrap(), scales.unwrap());
            let layout = Layout {
                k,
                n,
                block: 32,
                bits: 4,
                k_blocks: k / 32,
            };
            // In a plan the weights are prepared once from the constant B and scales; outside
            // one (here) every lowering prepares them, counted apart.
            let before = arrays_created();
            affine_weights(&b, &scales, None, &layout, Dtype::F32, &s).unwrap();
            let preparing = arrays_created() - before;
            let inputs = [Some(a), Some(b.clone()), Some(scales)];
            // float16: A to float32, quantized_matmul, back to float16; float32: the product.
            let built = arrays_built(&node(t, k, n), &inputs) - preparing;
            assert!(built <= per_run, "{t:?}: {built} arrays");
        }
    }
}

#[cfg(test)]
mod gather_cost_tests {
    use mlx_kernels::{arrays_created, ops, Array, Dtype};

    use super::{table_views, PackedTable};
    use crate::table::registry::{decide, Decision};
    use crate::table::testing::{stream, tensors};
    use crate::{AttrValue, ElemType as E, Lower, Node};

    /// The embedding of genai's int4 decoders: a uint8 table of 4-bit values in blocks of 32,
    /// float16 scales, no zero points, int64 token ids.
    fn node() -> Node {
        Node::new("GatherBlockQuantized", 1)
            .in_domain("com.microsoft")
            .input(E::Uint8)
            .input(E::Int64)
            .input(E::Float16)
            .output(E::Float16)
            .attr("bits", AttrValue::Int(4))
            .attr("block_size", AttrValue::Int(32))
            .attr("quantize_axis", AttrValue::Int(1))
    }

    #[test]
    fn a_decode_token_costs_two_gathers_a_dequantize_and_the_mask() {
        let s = stream();
        let (rows, width) = (6i64, 128i64);
        let data =
            Array::from_slice(&vec![0x5cu8; (rows * width / 2) as usize], &[rows, 64]).unwrap();
        let scales =
            Array::from_slice(&vec![0.25f32; (rows * width / 32) as usize], &[rows, 4]).unwrap();
        let scales = ops::astype(&scales, Dtype::F16, &s).unwrap();
        let ids = Array::from_slice(&[3i64], &[1, 1]).unwrap();
        let node = node();
        // In a plan the table's views are made once from the constant data and scales;
        // outside one (here) every lowering makes them, counted apart.
        let table = PackedTable {
            data: &data,
            scales: &scales,
            zero_points: None,
            bits: 4,
            block: 32,
            width,
            blocks: width / 32,
        };
        let before = arrays_created();
        table_views(&mut Lower::new(&s, &node), &table, &ids, 32).unwrap();
        let preparing = arrays_created() - before;
        let Decision::Claim { spec, .. } = decide(&node) else {
            panic!("declined")
        };
        let inputs = tensors(&[Some(data.clone()), Some(ids), Some(scales.clone())]);
        let before = arrays_created();
        let out = spec.lower_node(&s, &node, &inputs).unwrap().outputs;
        let out: Vec<Array> = out
            .into_iter()
            .map(|v| v.into_tensor("out").unwrap())
            .collect();
        // The range test and wrap of the ids (4), the rows' words and scales (2), the unit
        // scales and midpoint biases shaped to the rows (2), dequantize, its blocks, the
        // scaling, the mask of out-of-range ids and its shape (2), the output's shape.
        let built = arrays_created() - before - preparing;
        assert!(built <= 14, "{built} arrays for one token");
        let values = ops::astype(&out[0], Dtype::F32, &s).unwrap();
        // 0x5c: values 12 and 5, less the midpoint 8, times 0.25.
        let expected: Vec<f32> = (0..width)
            .map(|i| if i % 2 == 0 { 1.0 } else { -0.75 })
            .collect();
        assert_eq!(values.to_vec::<f32>(&s).unwrap(), expected);
    }

    /// Zero points that are not a plan's constants are unpacked for the gathered rows only;
    /// ids outside `[-rows, rows)` give rows of zeros, negative ones count from the end.
    #[test]
    fn gathered_rows_take_their_own_zero_points_and_out_of_range_ids_give_zeros() {
        let s = stream();
        let (rows, width) = (6usize, 64usize);
        // Row r holds q = r + 2 in its first block and 15 - r in its second.
        let bytes: Vec<u8> = (0..rows)
            .flat_map(|r| {
                let (a, b) = (r as u8 + 2, 15 - r as u8);
                std::iter::repeat_n(a | a << 4, 16).chain(std::iter::repeat_n(b | b << 4, 16))
            })
            .collect();
        let data = Array::from_slice(&bytes, &[rows as i64, 32]).unwrap();
        // Zero points r (first block) and 1 (second), two 4-bit values in one byte.
        let zp: Vec<u8> = (0..rows).map(|r| r as u8 | 1 << 4).collect();
        let zp = Array::from_slice(&zp, &[rows as i64, 1]).unwrap();
        let scale: Vec<f32> = (0..rows).flat_map(|r| [0.5, r as f32 + 1.0]).collect();
        let scales = Array::from_slice(&scale, &[rows as i64, 2]).unwrap();
        let ids = Array::from_slice(&[-1i32, 7, 0, -7], &[2, 2]).unwrap();
        let node = Node::new("GatherBlockQuantized", 1)
            .in_domain("com.microsoft")
            .input(E::Uint8)
            .input(E::Int32)
            .input(E::Float)
            .input(E::Uint8)
            .output(E::Float)
            .attr("bits", AttrValue::Int(4))
            .attr("block_size", AttrValue::Int(32));
        let inputs = [Some(data), Some(ids), Some(scales), Some(zp)];
        let out = crate::table::testing::run1(&node, &inputs);
        assert_eq!(out.shape(), vec![2, 2, width as i64]);
        // (r + 2 - r) * 0.5 in the first block, (15 - r - 1) * (r + 1) in the second.
        let row = |r: Option<usize>| -> Vec<f32> {
            let Some(r) = r else {
                return vec![0.0; width];
            };
            let second = (14.0 - r as f32) * (r as f32 + 1.0);
            [vec![1.0; 32], vec![second; 32]].concat()
        };
        let expected = [row(Some(5)), row(None), row(Some(0)), row(None)].concat();
        assert_eq!(out.to_vec::<f32>(&s).unwrap(), expected);
    }
}
