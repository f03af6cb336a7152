//! Matrix products: MatMul, Gemm, Einsum, and com.microsoft FusedMatMul; Det. (`biased`: a
//! MatMul and the Add of its bias answered as one product.)

pub(crate) mod biased;

use mlx_kernels::{ops, Array, Dtype};

use crate::attention::formed;
use crate::table::consts::scalar_like;
use crate::{onnx_op, Lower, OpError, Result};

/// numpy's matmul: batched, broadcasting batch dims, 1-D operands promoted and squeezed back.
#[onnx_op(op = "MatMul", since = 1, types(T = FLOAT), inputs(A: T, B: T), outputs(Y: T), shape = Shapeless)]
fn matmul(cx: &mut Lower, a: Array, b: Array) -> Result<Array> {
    ort_batch_check(&a.shape(), &b.shape(), Transposes::default())?;
    if let Some(attention) = formed::fused_product(cx, &a, &b) {
        return Ok(attention);
    }
    let y = numpy_matmul(&a, &b, cx.stream())?;
    formed::note_product(cx, &a, &b, &y);
    biased::note_product(cx, &a, &b, &y);
    Ok(y)
}

/// FusedMatMul's transposition flags (all false for MatMul).
#[derive(Clone, Copy, Default)]
struct Transposes {
    a: bool,
    batch_a: bool,
    batch_b: bool,
}

/// The shapes ORT's MatMul helper refuses that numpy's rule accepts: it broadcasts batch dims
/// by `max` alone, so a zero-size batch dim only meets its equal (`[1, 3, 4] x [0, 4, 5]`
/// fails there, and so does `[0, 3] x [3]`, whose row count it lines up with the 1-D side's
/// padding). Its flattening shortcut (no transposition of A, B's batch dims all 1) checks no
/// batch dims at all.
fn ort_batch_check(a: &[i64], b: &[i64], t: Transposes) -> Result<()> {
    let (ln, rn) = (a.len(), b.len());
    if ln == 0 || rn == 0 {
        return Err(OpError::new("MatMul operands must have rank >= 1"));
    }
    let shortcut = !t.a && !t.batch_a && !t.batch_b && rn >= 2 && ln >= rn;
    if shortcut && b[..rn - 2].iter().product::<i64>() == 1 {
        return Ok(());
    }
    if (t.batch_a || t.batch_b) && !(ln > 2 && ln == rn) {
        return Err(OpError::new(format!(
            "shapes {a:?} and {b:?}: transBatchA/transBatchB need operands of one rank >= 3"
        )));
    }
    // transBatch moves the leading axis behind the other batch axes.
    let batch_moved = |dims: &[i64], moved: bool| -> Vec<i64> {
        let mut dims = dims.to_vec();
        if moved {
            let lead = dims.remove(0);
            dims.insert(dims.len() - 1, lead);
        }
        dims
    };
    let (left, right) = (batch_moved(a, t.batch_a), batch_moved(b, t.batch_b));
    let padded_rank = ln.max(rn) + usize::from(rn == 1);
    let mut lp = vec![1i64; padded_rank];
    let mut rp = vec![1i64; padded_rank];
    if rn == 1 {
        // B becomes [.., K, 1]; A's rows sit where B's K does, its K last.
        rp[padded_rank - 2] = right[0];
        if ln >= 2 {
            lp[..ln - 2].copy_from_slice(&left[..ln - 2]);
            let (rows, depth) = if t.a {
                (ln - 1, ln - 2)
            } else {
                (ln - 2, ln - 1)
            };
            lp[padded_rank - 3] = left[rows];
            lp[padded_rank - 1] = left[depth];
        } else {
            lp[padded_rank - ln..].copy_from_slice(&left);
        }
    } else {
        lp[padded_rank - ln..].copy_from_slice(&left);
        rp[padded_rank - rn..].copy_from_slice(&right);
    }
    for i in 0..padded_rank - 2 {
        let out = lp[i].max(rp[i]);
        for (side, dim) in [("left", lp[i]), ("right", rp[i])] {
            if dim != out && dim != 1 {
                return Err(OpError::new(format!(
                    "shapes {a:?} and {b:?}: the {side} operand cannot broadcast on dim {i} \
                     (ORT's CPU EP refuses this too)"
                )));
            }
        }
    }
    Ok(())
}

fn numpy_matmul(a: &Array, b: &Array, s: &mlx_kernels::Stream) -> Result<Array> {
    if a.ndim() == 0 || b.ndim() == 0 {
        return Err(OpError::new("MatMul operands must have rank >= 1"));
    }
    let product = ops::matmul(a, b, s)?;
    if a.shape().last() == Some(&0) && product.size() > 0 {
        // A sum over nothing: zeros, without a kernel over zero-size operands.
        return Ok(ops::broadcast_to(
            &scalar_like(0.0, &product, s)?,
            &product.shape(),
            s,
        )?);
    }
    Ok(product)
}

/// `alpha * A' · B' + beta * C`, with `A' = Aᵀ` if `transA` and `B' = Bᵀ` if `transB`; `C`
/// broadcasts to the product (required up to opset 10, optional from 11).
#[allow(clippy::too_many_arguments)] // three inputs and four attributes, as ONNX has them
#[onnx_op(op = "Gemm", since = 7, types(T = FLOAT), inputs(A: T, B: T, C: T), outputs(Y: T), shape = Shapeless)]
fn gemm(
    cx: &mut Lower,
    a: Array,
    b: Array,
    #[input(required_until = 10)] c: Option<Array>,
    #[attr(default = 1.0)] alpha: f32,
    #[attr(default = 1.0)] beta: f32,
    #[attr(name = "transA", default = 0)] trans_a: i64,
    #[attr(name = "transB", default = 0)] trans_b: i64,
) -> Result<Array> {
    general_product(cx, a, b, c, alpha, beta, trans_a != 0, trans_b != 0)
}

#[allow(clippy::too_many_arguments)] // Gemm's inputs and attributes, passed through
fn general_product(
    cx: &Lower,
    a: Array,
    b: Array,
    c: Option<Array>,
    alpha: f32,
    beta: f32,
    trans_a: bool,
    trans_b: bool,
) -> Result<Array> {
    let s = cx.stream();
    if a.ndim() != 2 || b.ndim() != 2 {
        return Err(OpError::new("Gemm operands must be matrices"));
    }
    // 16-bit types in float32, rounded once: ORT's kernels accumulate and scale in float32,
    // so a product past float16's range that alpha (or C) brings back stays finite there.
    let dtype = a.dtype();
    if matches!(dtype, Dtype::F16 | Dtype::BF16) {
        let wide = |x: &Array| ops::astype(x, Dtype::F32, s);
        let c = c.as_ref().map(wide).transpose()?;
        let y = general_product(cx, wide(&a)?, wide(&b)?, c, alpha, beta, trans_a, trans_b)?;
        return Ok(ops::astype(&y, dtype, s)?);
    }
    let a = if trans_a {
        ops::transpose(&a, &[1, 0], s)?
    } else {
        a
    };
    let b = if trans_b {
        ops::transpose(&b, &[1, 0], s)?
    } else {
        b
    };
    let product = ops::matmul(&a, &b, s)?;
    if let Some(c) = &c {
        // C must broadcast to Y one way (ORT checks it even when beta is 0): MLX's add would
        // widen Y instead ([3, 1] + [5] gave [3, 5]).
        let (y, bias) = (product.shape(), c.shape());
        if crate::shape::broadcast_shapes(&bias, &y).ok().as_ref() != Some(&y) {
            return Err(OpError::new(format!(
                "C of shape {bias:?} does not broadcast to Y of shape {y:?} (ORT refuses it too)"
            )));
        }
    }
    let scaled = |k: f64| -> Result<Array> {
        let factor = f64::from(alpha) * k;
        if factor == 1.0 {
            return Ok(product.clone());
        }
        Ok(ops::multiply(
            &product,
            &scalar_like(factor, &product, s)?,
            s,
        )?)
    };
    // ORT's CPU EP keeps beta = 0 from reading C at all (a NaN or inf there does not show).
    let Some(c) = c.filter(|_| beta != 0.0) else {
        return scaled(1.0);
    };
    // beta * C comes first, on its own (ORT scales C into Y before the product): an overflow
    // there stays inf.
    let bias = if beta == 1.0 {
        c
    } else {
        ops::multiply(&c, &scalar_like(beta.into(), &c, s)?, s)?
    };
    // ORT adds the bias to `alpha * A·B` in one fused multiply-add, so `alpha * A·B` may pass
    // the float range on the way (alpha 2, A·B = 3e38, C = -3e38 gives 3e38; with C = -inf,
    // -inf, not NaN). Where the plain sum is not finite, the same sum at half scale, doubled,
    // gives the fused result (halving is exact), and stays inf where the result is.
    let y = ops::add(&scaled(1.0)?, &bias, s)?;
    if alpha.abs() <= 1.0 {
        // `alpha * A·B` is finite wherever `A·B` is, and the doubled half-scale sum is not
        // finite exactly where the plain one is not: the guard could change nothing, and it
        // costs a pass over Y (most Gemms are `A·B + C`).
        return Ok(y);
    }
    let half_bias = ops::multiply(&bias, &scalar_like(0.5, &bias, s)?, s)?;
    let halved = ops::add(&scaled(0.5)?, &half_bias, s)?;
    let doubled = ops::add(&halved, &halved, s)?;
    let not_finite = ops::logical_or(&ops::isnan(&y, s)?, &ops::isinf(&y, s)?, s)?;
    Ok(ops::where_(&not_finite, &doubled, &y, s)?)
}

/// ORT's MatMul fusion: `alpha * A' · B'` with numpy's batching, where `A'` is `A` with its
/// first axis moved behind the other batch axes (`transBatchA`), then its last two axes swapped
/// (`transA`); likewise `B'`.
#[allow(clippy::too_many_arguments)] // two inputs and five attributes, as ORT has them
#[onnx_op(
    domain = "com.microsoft", op = "FusedMatMul", since = 1, types(T = FLOAT), inputs(A: T, B: T), outputs(Y: T),
    shape = Shapeless, claim = fused_matmul_claim, declines = "transA with a 1-D (or unknown-rank) B"
)]
fn fused_matmul(
    cx: &mut Lower,
    a: Array,
    b: Array,
    #[attr(default = 1.0)] alpha: f32,
    #[attr(name = "transA", default = 0)] trans_a: i64,
    #[attr(name = "transB", default = 0)] trans_b: i64,
    #[attr(name = "transBatchA", default = 0)] trans_batch_a: i64,
    #[attr(name = "transBatchB", default = 0)] trans_batch_b: i64,
) -> Result<Array> {
    let s = cx.stream();
    let flags = Transposes {
        a: trans_a != 0,
        batch_a: trans_batch_a != 0,
        batch_b: trans_batch_b != 0,
    };
    ort_batch_check(&a.shape(), &b.shape(), flags)?;
    let dtype = a.dtype();
    let a = fused_operand(a, trans_batch_a != 0, trans_a != 0, s)?;
    let b = fused_operand(b, trans_batch_b != 0, trans_b != 0, s)?;
    if alpha == 1.0 {
        return numpy_matmul(&a, &b, s);
    }
    // ORT scales inside the product, before rounding to a 16-bit type: a product past
    // float16's range can come back into it (alpha 0.5 of -67264 is -33632, not -inf).
    let wide = |x: &Array| crate::reduce::widened(x, s);
    let product = numpy_matmul(&wide(&a)?, &wide(&b)?, s)?;
    let scaled = ops::multiply(&product, &scalar_like(alpha.into(), &product, s)?, s)?;
    Ok(ops::astype(&scaled, dtype, s)?)
}

/// ORT's CPU kernel departs from numpy's rule when `transA` meets a 1-D B (it does not
/// promote B to a column the way MatMul does), so that configuration stays on ORT.
fn fused_matmul_claim(node: &crate::Node) -> crate::Verdict {
    let trans_a = node.attr_or("transA", 0i64) != 0;
    if trans_a && node.input_rank(1).is_none_or(|rank| rank < 2) {
        return crate::Verdict::decline(
            "transA with a 1-D (or unknown-rank) B: ORT's CPU kernel departs from numpy's \
             matmul rule there",
        );
    }
    crate::Verdict::Claim
}

fn fused_operand(
    x: Array,
    trans_batch: bool,
    trans: bool,
    s: &mlx_kernels::Stream,
) -> Result<Array> {
    let rank = x.ndim() as i32;
    let mut order: Vec<i32> = (0..rank).collect();
    if trans_batch && rank >= 3 {
        order = (1..rank - 1).chain([0, rank - 1]).collect();
    }
    if trans && rank >= 2 {
        order.swap(rank as usize - 2, rank as usize - 1);
    }
    if order.iter().enumerate().all(|(i, &o)| i as i32 == o) {
        return Ok(x);
    }
    Ok(ops::transpose(&x, &order, s)?)
}

/// numpy's einsum (implicit and explicit outputs, ellipses, repeated indices), through MLX's.
#[onnx_op(
    op = "Einsum", since = 12, types(T = FLOAT), inputs(Inputs...: T), outputs(Output: T), shape = ShapeKeyed,
    claim = einsum_claim, declines = "integer operands (MLX's products are floating-point); equations that do not parse"
)]
fn einsum(cx: &mut Lower, inputs: Vec<Array>, #[attr] equation: String) -> Result<Array> {
    let s = cx.stream();
    let equation = without_spaces(&equation);
    let shapes: Vec<Vec<i64>> = inputs.iter().map(Array::shape).collect();
    let shape = einsum_shape(&equation, &shapes)?;
    if inputs.iter().any(|x| x.size() == 0) {
        // Sums over nothing are zeros, and no kernel runs over a zero-size operand. The shape is
        // ours: MLX's einsum sizes a letter of sizes 0 and 1 as 1 and then cannot broadcast
        // the empty operand (found by the fuzzer); ORT broadcasts the 1 to 0.
        return crate::table::consts::zeros(&shape, inputs[0].dtype(), s);
    }
    Ok(ops::einsum(&equation, &inputs, s)?)
}

/// The output shape of `equation` (no spaces) over operands of `shapes`: each letter's size is
/// the one its operands agree on, a size of 1 giving way to any other (0 included), and the
/// ellipses' axes broadcast alike; an implicit output is the ellipsis, then the letters that
/// appear once, in alphabetical order. ORT refuses an explicit output without `...` when an
/// input's `...` stands for at least one axis (numpy would sum those axes away), and so does
/// this.
fn einsum_shape(equation: &str, shapes: &[Vec<i64>]) -> Result<Vec<i64>> {
    let meet = |a: i64, b: i64| match (a, b) {
        _ if a == b || b == 1 => Ok(a),
        (1, _) => Ok(b),
        _ => Err(OpError::new(format!(
            "equation {equation:?} over shapes {shapes:?}: sizes {a} and {b} of one index do not \
             broadcast"
        ))),
    };
    let (terms, output) = match equation.split_once("->") {
        Some((terms, output)) => (terms, Some(output)),
        None => (equation, None),
    };
    let mut sizes = std::collections::BTreeMap::<char, (i64, usize)>::new();
    let mut ellipsis: Vec<i64> = Vec::new();
    for (term, shape) in terms.split(',').zip(shapes) {
        let (before, after) = term.split_once("...").unwrap_or((term, ""));
        let letters = before.chars().count() + after.chars().count();
        let spanned = shape
            .len()
            .checked_sub(letters)
            .filter(|&n| n == 0 || term.contains("..."));
        let Some(spanned) = spanned else {
            return Err(OpError::new(format!(
                "equation {equation:?}: term {term:?} does not fit an operand of shape {shape:?}"
            )));
        };
        let (head, rest) = shape.split_at(before.chars().count());
        let (middle, tail) = rest.split_at(spanned);
        for (letter, &dim) in before.chars().zip(head).chain(after.chars().zip(tail)) {
            let entry = sizes.entry(letter).or_insert((1, 0));
            *entry = (meet(entry.0, dim)?, entry.1 + 1);
        }
        // Right-aligned, as numpy broadcasts.
        let width = ellipsis.len().max(middle.len());
        let padded = |dims: &[i64]| {
            let mut all = vec![1; width - dims.len()];
            all.extend_from_slice(dims);
            all
        };
        ellipsis = padded(&ellipsis)
            .into_iter()
            .zip(padded(middle))
            .map(|(a, b)| meet(a, b))
            .collect::<Result<_>>()?;
    }
    let size = |letter: char| sizes.get(&letter).map_or(1, |&(size, _)| size);
    Ok(match output {
        Some(output) if !output.contains("...") && !ellipsis.is_empty() => {
            return Err(OpError::new(format!(
                "equation {equation:?}: the inputs' ellipses stand for axes, so the output must \
                 contain an ellipsis too"
            )))
        }
        Some(output) => {
            let (before, after) = output.split_once("...").unwrap_or((output, ""));
            let mut shape: Vec<i64> = before.chars().map(size).collect();
            if output.contains("...") {
                shape.extend(&ellipsis);
            }
            shape.extend(after.chars().map(size));
            shape
        }
        None => ellipsis
            .iter()
            .copied()
            .chain(
                sizes
                    .iter()
                    .filter(|(_, &(_, uses))| uses == 1)
                    .map(|(_, &(size, _))| size),
            )
            .collect(),
    })
}

fn einsum_claim(node: &crate::Node) -> crate::Verdict {
    let Some(equation) = node.attr_as::<String>("equation") else {
        return crate::Verdict::decline("no equation");
    };
    match einsum_terms(&equation) {
        Some(terms) if terms == node.input_count() => crate::Verdict::Claim,
        Some(terms) => crate::Verdict::decline(format!(
            "equation {equation:?} names {terms} operands for {} inputs",
            node.input_count()
        )),
        None => crate::Verdict::decline(format!("equation {equation:?} does not parse")),
    }
}

/// The number of operand terms of a well-formed equation: letters and at most one `...` per
/// term, terms separated by `,`, then optionally `->` and an output term of distinct letters
/// that all appear in the inputs.
fn einsum_terms(equation: &str) -> Option<usize> {
    let equation = without_spaces(equation);
    let (inputs, output) = match equation.split_once("->") {
        Some((i, o)) => (i, Some(o)),
        None => (equation.as_str(), None),
    };
    let term_ok = |term: &str| {
        let letters = term.replacen("...", "", 1);
        letters.chars().all(|c| c.is_ascii_alphabetic())
    };
    let terms: Vec<&str> = inputs.split(',').collect();
    if !terms.iter().all(|t| term_ok(t)) {
        return None;
    }
    if let Some(output) = output {
        let letters: Vec<char> = output.replacen("...", "", 1).chars().collect();
        let distinct = letters
            .iter()
            .collect::<std::collections::HashSet<_>>()
            .len()
            == letters.len();
        if !term_ok(output) || !distinct || !letters.iter().all(|c| inputs.contains(*c)) {
            return None;
        }
    }
    Some(terms.len())
}

/// ONNX allows spaces in an equation; MLX's parser does not.
fn without_spaces(equation: &str) -> String {
    equation.chars().filter(|c| !c.is_whitespace()).collect()
}

/// The determinant of each trailing `[n, n]` matrix, by LU decomposition with partial
/// pivoting (Eigen's `determinant()`, which ORT calls): at step k the row with the largest
/// |a[i, k]| (the first of equals) comes up, the rows below lose their multiple of it, and the
/// determinant is the product of the pivots, negated once per row swap. A zero column leaves
/// its pivot 0 (no division), so a singular matrix gives 0. Float32 (16-bit inputs widened),
/// unrolled over n steps of whole-batch array ops.
#[onnx_op(
    op = "Det", precision = Float32, since = 11, types(T = FLOAT), inputs(X: T), outputs(Y: T), shape = ShapeKeyed,
    numerics = "float32 LU with partial pivoting as Eigen's; the product of the pivots is taken in order (Eigen may reduce it pairwise), so results can differ from ORT's in the last bits"
)]
fn det(cx: &mut Lower, x: Array) -> Result<Array> {
    let s = cx.stream();
    let dims = x.shape();
    let rank = dims.len();
    if rank < 2 || dims[rank - 1] != dims[rank - 2] {
        return Err(OpError::new(format!(
            "X has shape {dims:?}: expected [.., n, n]"
        )));
    }
    let n = dims[rank - 1];
    let batch_shape = &dims[..rank - 2];
    let batch: i64 = batch_shape.iter().product();
    let dtype = x.dtype();
    if batch == 0 {
        return crate::table::consts::zeros(batch_shape, dtype, s);
    }
    let f = |v: f64| crate::table::consts::scalar(v, Dtype::F32, s);
    let mut a = ops::reshape(&ops::astype(&x, Dtype::F32, s)?, &[batch, n, n], s)?;
    let mut det = ops::broadcast_to(&f(1.0)?, &[batch], s)?;
    let rows = ops::arange(0.0, n as f64, 1.0, Dtype::I32, s)?;
    for k in 0..n {
        let ki = k as i32;
        let kk = crate::table::consts::scalar(k as f64, Dtype::I32, s)?;
        // Column k of every matrix, `[B, n, 1]`.
        let column_k = |a: &Array| {
            ops::slice(
                a,
                &[0, 0, ki],
                &[batch as i32, n as i32, ki + 1],
                &[1, 1, 1],
                s,
            )
        };
        // The pivot: the largest |a[i, k]| from row k down (rows above are masked out).
        let below = ops::greater_equal(&rows, &kk, s)?;
        let magnitudes = ops::abs(&ops::squeeze(&column_k(&a)?, &[2], s)?, s)?;
        let candidates = ops::where_(&below, &magnitudes, &f(-1.0)?, s)?;
        let pivot_row = ops::astype(&ops::argmax(&candidates, 1, true, s)?, Dtype::I32, s)?; // [B, 1]
                                                                                             // Rows k and pivot_row swap places.
        let order = ops::where_(
            &ops::equal(&rows, &kk, s)?,
            &pivot_row,
            &ops::where_(&ops::equal(&rows, &pivot_row, s)?, &kk, &rows, s)?,
            s,
        )?; // [B, n]
        let order = ops::broadcast_to(&ops::expand_dims(&order, &[2], s)?, &[batch, n, n], s)?;
        a = ops::take_along_axis(&a, &order, 1, s)?;
        let swapped = ops::not_equal(&ops::squeeze(&pivot_row, &[1], s)?, &kk, s)?;
        det = ops::where_(&swapped, &ops::negative(&det, s)?, &det, s)?;
        let pivot_line = ops::slice(
            &a,
            &[0, ki, 0],
            &[batch as i32, ki + 1, n as i32],
            &[1, 1, 1],
            s,
        )?; // [B, 1, n]
        let pivot = ops::slice(
            &pivot_line,
            &[0, 0, ki],
            &[batch as i32, 1, ki + 1],
            &[1, 1, 1],
            s,
        )?; // [B, 1, 1]
        det = ops::multiply(&det, &ops::reshape(&pivot, &[batch], s)?, s)?;
        // Rows below k lose factor · row k; a zero pivot divides nothing.
        let column = column_k(&a)?;
        let zero_pivot = ops::equal(&pivot, &f(0.0)?, s)?;
        let factor = ops::where_(&zero_pivot, &f(0.0)?, &ops::divide(&column, &pivot, s)?, s)?;
        let lower = ops::reshape(&ops::greater(&rows, &kk, s)?, &[1, n, 1], s)?;
        let factor = ops::where_(&lower, &factor, &f(0.0)?, s)?;
        a = ops::subtract(&a, &ops::multiply(&factor, &pivot_line, s)?, s)?;
    }
    Ok(ops::astype(&ops::reshape(&det, batch_shape, s)?, dtype, s)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AttrValue, ElemType, Node};

    #[test]
    fn fused_matmul_declines_trans_a_unless_b_is_known_to_be_a_matrix() {
        let node = |trans_a: i64| {
            Node::new("FusedMatMul", 1)
                .in_domain("com.microsoft")
                .input(ElemType::Float)
                .input(ElemType::Float)
                .output(ElemType::Float)
                .attr("transA", AttrValue::Int(trans_a))
        };
        assert!(fused_matmul_claim(&node(0)).is_claim());
        assert!(!fused_matmul_claim(&node(1)).is_claim());
    }

    #[test]
    fn gemm_c_is_required_up_to_opset_10() {
        use crate::table::testing::{declined, node};
        let f = ElemType::Float;
        assert_eq!(declined(&node("Gemm", 7, &[f, f, f], f)), None);
        assert_eq!(declined(&node("Gemm", 11, &[f, f], f)), None);
        let why = declined(&node("Gemm", 10, &[f, f], f)).expect("declined");
        assert!(why.contains("required input 'C' is missing"), "{why}");
    }
}
