//! The cosine-sum windows HannWindow, HammingWindow and BlackmanWindow.

use mlx_kernels::{ops, Array, Dtype};

use crate::table::consts::scalar;
use crate::{onnx_op, Lower, Node, OpError, Result, Verdict};

/// π as ORT's CPU window kernels write it (3.14159265, not the double nearest π): the phase
/// step is `2 * PI_AS_ORT / denominator`.
#[allow(clippy::approx_constant)] // deliberately ORT's truncated value, not f64::consts::PI
const PI_AS_ORT: f64 = 3.14159265;

/// `a0 - a1 cos(φ n) + a2 cos(2 φ n)` for `n` in `0..size`, `φ = 2π / size` (periodic) or
/// `2π / (size - 1)` (symmetric; a symmetric window of one sample is NaN there, as in ORT: 0/0
/// phase). Computed in float32 on the device and cast to the output's type: the coefficients
/// are float32 in ORT as well, and its float64 phase differs from this one by ~1e-7 at most.
fn cosine_sum(cx: &Lower, size: i64, periodic: i64, coefficients: [f32; 3]) -> Result<Array> {
    let s = cx.stream();
    // ORT's float32 kernel gives an empty window for a size of 0 and fails below 0; for other
    // types ORT runs the ONNX function body, whose Range gives an empty window below 0 too.
    let dtype = cx.output_dtype(0)?;
    let size = match size {
        s if s < 0 && dtype != Dtype::F32 => 0,
        s if (0..=i64::from(i32::MAX)).contains(&s) => s,
        s => {
            return Err(OpError::new(format!(
                "window size {s} is outside 0..=2^31-1"
            )))
        }
    };
    let denominator = if periodic != 0 { size } else { size - 1 };
    let step = 2.0 * PI_AS_ORT / denominator as f64;
    let n = ops::arange(0.0, size as f64, 1.0, Dtype::F32, s)?;
    let phase = ops::multiply(&n, &scalar(step, Dtype::F32, s)?, s)?;
    let [a0, a1, a2] = coefficients.map(f64::from);
    let term = |a: f64, harmonic: f64| -> Result<Array> {
        let angle = ops::multiply(&phase, &scalar(harmonic, Dtype::F32, s)?, s)?;
        Ok(ops::multiply(
            &ops::cos(&angle, s)?,
            &scalar(a, Dtype::F32, s)?,
            s,
        )?)
    };
    let mut window = ops::subtract(&scalar(a0, Dtype::F32, s)?, &term(a1, 1.0)?, s)?;
    if a2 != 0.0 {
        window = ops::add(&window, &term(a2, 2.0)?, s)?;
    }
    Ok(ops::astype(&window, dtype, s)?)
}

/// A window whose `periodic` is 0 or 1 and whose `output_datatype` is its output's type. ORT
/// reads any other `periodic` two ways: its float32 kernel as "periodic" when nonzero, the ONNX
/// function body it runs for float16/bfloat16 as a number in `size - 1 + periodic`.
fn window_claim(node: &Node) -> Verdict {
    let periodic = node.attr_or("periodic", 1i64);
    if periodic != 0 && periodic != 1 {
        return Verdict::decline(format!(
            "periodic = {periodic}: ORT's float32 kernel and the ONNX function body it runs for \
             other types read it differently"
        ));
    }
    output_datatype_claim(node)
}

/// A node whose `output_datatype` attribute (default float) names its output's type.
pub(super) fn output_datatype_claim(node: &Node) -> Verdict {
    if !node.names_output_type(node.attr_or("output_datatype", 1i64)) {
        return Verdict::decline("output_datatype is not the output's type");
    }
    Verdict::Claim
}

/// `0.5 - 0.5 cos(φ n)`.
#[onnx_op(
    op = "HannWindow", since = 17, types(T1 = I32 | I64, T2 = FLOAT), inputs(size: T1), outputs(output: T2),
    ignores(output_datatype: i64), shape = ShapeKeyed, claim = window_claim,
    declines = "integer output types (a window cast to integers hangs on the rounding of its float64 phase); periodic other than 0/1; an output_datatype that is not the output's type"
)]
fn hann_window(
    cx: &mut Lower,
    #[host] size: i64,
    #[attr(default = 1)] periodic: i64,
) -> Result<Array> {
    cosine_sum(cx, size, periodic, [0.5, 0.5, 0.0])
}

/// `25/46 - 21/46 cos(φ n)`.
#[onnx_op(
    op = "HammingWindow", since = 17, types(T1 = I32 | I64, T2 = FLOAT), inputs(size: T1), outputs(output: T2),
    ignores(output_datatype: i64), shape = ShapeKeyed, claim = window_claim,
    declines = "integer output types (a window cast to integers hangs on the rounding of its float64 phase); periodic other than 0/1; an output_datatype that is not the output's type"
)]
fn hamming_window(
    cx: &mut Lower,
    #[host] size: i64,
    #[attr(default = 1)] periodic: i64,
) -> Result<Array> {
    cosine_sum(cx, size, periodic, [25.0 / 46.0, 21.0 / 46.0, 0.0])
}

/// `0.42 - 0.5 cos(φ n) + 0.08 cos(2 φ n)`.
#[onnx_op(
    op = "BlackmanWindow", since = 17, types(T1 = I32 | I64, T2 = FLOAT), inputs(size: T1), outputs(output: T2),
    ignores(output_datatype: i64), shape = ShapeKeyed, claim = window_claim,
    declines = "integer output types (a window cast to integers hangs on the rounding of its float64 phase); periodic other than 0/1; an output_datatype that is not the output's type"
)]
fn blackman_window(
    cx: &mut Lower,
    #[host] size: i64,
    #[attr(default = 1)] periodic: i64,
) -> Result<Array> {
    cosine_sum(cx, size, periodic, [0.42, 0.5, 0.08])
}
