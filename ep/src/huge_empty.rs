//! Runs whose inputs are empty but have a dimension beyond MLX's 32 bits (`[0, 2^31 + 7]`):
//! MLX cannot even hold such an input, yet ORT's CPU EP answers, and an empty result has no
//! values, only a shape. The shapes come from lowering the plan (lazily: shapes, never values)
//! with each huge dimension replaced by a small stand-in ("proxy"), several times with
//! different stand-ins; each output dimension must then be an integer affine function of the
//! huge dimensions, and that function, checked at one more set of stand-ins, gives the real
//! dimension. Every output must come out empty; anything else fails the run, naming why.

use mlx_kernels::Array;

use crate::ort::kernel::HostTensor;
use crate::plan::{Plan, Runtime};

const I32_MAX: i64 = i32::MAX as i64;
/// The stand-ins start here: above every other dimension of the inputs and constants (checked),
/// so that comparisons with them (clamps, broadcasts of 1) go as with the real dimensions.
const BASE: i64 = 1 << 22;
/// Between consecutive huge dimensions' stand-ins, which keep their order.
const SPACING: i64 = 3 << 16;
/// The step that measures each slope; a prime, so that floors of divisions show as fractions.
const DELTA: i64 = 104_729;
/// Where the fit is checked: off the measured points by an amount sharing no factor with DELTA.
const CHECK: i64 = 50_021;
const MAX_HUGE: usize = 16;

/// Whether some input has a dimension MLX's shapes cannot hold.
pub fn needed(inputs: &[Option<HostTensor>]) -> bool {
    inputs
        .iter()
        .flatten()
        .any(|t| t.shape.iter().any(|&d| d > I32_MAX))
}

/// The shapes of the plan's outputs for these inputs, all empty; an error when an input with a
/// huge dimension is not empty, when an output would hold values, or when the outputs' shapes
/// do not follow the huge dimensions in a way the stand-ins can measure.
pub fn output_shapes(
    plan: &Plan,
    runtime: &Runtime,
    inputs: &[Option<HostTensor>],
) -> Result<Vec<Vec<i64>>, String> {
    let mut huge: Vec<i64> = Vec::new();
    for (index, tensor) in inputs.iter().enumerate() {
        let Some(t) = tensor else { continue };
        if !t.shape.iter().any(|&d| d > I32_MAX) {
            continue;
        }
        if !t.shape.contains(&0) {
            return Err(format!(
                "input {index} has shape {:?}: MLX's dimensions are 32-bit and the tensor is \
                 not empty; run the model on ORT's CPU EP (ONNXRUNTIME_EP_MLX_DISABLE=1)",
                t.shape
            ));
        }
        huge.extend(t.shape.iter().filter(|&&d| d > I32_MAX));
    }
    huge.sort_unstable();
    huge.dedup();
    if huge.len() > MAX_HUGE {
        return Err(refusal(&format!(
            "{} distinct dimensions beyond 32 bits",
            huge.len()
        )));
    }
    check_stand_ins_are_apart(plan, runtime, inputs)?;

    let base: Vec<i64> = (0..huge.len())
        .map(|i| BASE + 7 + SPACING * i as i64)
        .collect();
    let mut points = vec![base.clone()];
    for j in 0..huge.len() {
        let mut moved = base.clone();
        moved[j] += DELTA;
        points.push(moved);
    }
    let check: Vec<i64> = base
        .iter()
        .enumerate()
        .map(|(i, p)| p + CHECK + 11 * i as i64)
        .collect();
    points.push(check.clone());

    let mut measured: Vec<Vec<Vec<i64>>> = Vec::with_capacity(points.len());
    for (k, point) in points.iter().enumerate() {
        measured.push(lowered_shapes(plan, runtime, inputs, &huge, point, k == 0)?);
    }

    let mut shapes = Vec::with_capacity(plan.outputs.len());
    for (output, at_base) in measured[0].iter().enumerate() {
        let mut dims = Vec::with_capacity(at_base.len());
        for (axis, &v0) in at_base.iter().enumerate() {
            let at = |k: usize| -> Result<i64, String> {
                measured[k][output].get(axis).copied().ok_or_else(|| {
                    refusal(&format!(
                        "output {output}'s rank depends on the huge dimensions"
                    ))
                })
            };
            let mut slopes = Vec::with_capacity(huge.len());
            for j in 0..huge.len() {
                let change = at(j + 1)? - v0;
                if change % DELTA != 0 {
                    return Err(refusal(&format!(
                        "dimension {axis} of output {output} is not an integer multiple of the \
                         huge dimensions plus a constant (a division or a stride)"
                    )));
                }
                slopes.push(i128::from(change / DELTA));
            }
            let offset = i128::from(v0)
                - slopes
                    .iter()
                    .zip(&base)
                    .map(|(a, &p)| a * i128::from(p))
                    .sum::<i128>();
            let predicted = offset
                + slopes
                    .iter()
                    .zip(&check)
                    .map(|(a, &q)| a * i128::from(q))
                    .sum::<i128>();
            if predicted != i128::from(at(points.len() - 1)?) {
                return Err(refusal(&format!(
                    "dimension {axis} of output {output} does not follow the huge dimensions \
                     linearly"
                )));
            }
            let real = offset
                + slopes
                    .iter()
                    .zip(&huge)
                    .map(|(a, &d)| a * i128::from(d))
                    .sum::<i128>();
            dims.push(
                i64::try_from(real)
                    .ok()
                    .filter(|&d| d >= 0)
                    .ok_or_else(|| {
                        refusal(&format!(
                            "dimension {axis} of output {output} comes out as {real}"
                        ))
                    })?,
            );
        }
        if !dims.contains(&0) {
            return Err(refusal(&format!(
                "output {output} would have shape {dims:?}, which holds values"
            )));
        }
        shapes.push(dims);
    }
    Ok(shapes)
}

fn refusal(why: &str) -> String {
    format!(
        "an input is empty with a dimension beyond MLX's 32 bits, and the EP computes such a \
         run's empty outputs without MLX only when their shapes follow from the inputs': here \
         {why}; run the model on ORT's CPU EP (ONNXRUNTIME_EP_MLX_DISABLE=1)"
    )
}

/// The stand-ins must compare with every other number that could meet them as the real
/// dimensions do: every other input or constant dimension, and every integer value (a Slice
/// end, a Reshape target, a Pad), must lie below them, or far beyond any dimension.
fn check_stand_ins_are_apart(
    plan: &Plan,
    runtime: &Runtime,
    inputs: &[Option<HostTensor>],
) -> Result<(), String> {
    let near = |v: i64| (BASE.unsigned_abs()..1 << 62).contains(&v.unsigned_abs());
    let constants = plan.integer_constants(runtime)?;
    let tensors = inputs
        .iter()
        .flatten()
        .map(|t| (t.elem, t.shape.as_slice(), t.bytes))
        .chain(
            constants
                .iter()
                .map(|(elem, shape, bytes)| (*elem, shape.as_slice(), bytes.as_slice())),
        );
    for (elem, shape, bytes) in tensors {
        if shape.iter().any(|&d| (BASE..=I32_MAX).contains(&d)) {
            return Err(refusal(&format!(
                "another tensor has shape {shape:?}, a dimension the stand-ins would not \
                 compare with as the real one does"
            )));
        }
        let values: Vec<i64> = match elem {
            op_specs::ElemType::Int64 => bytes
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                .collect(),
            op_specs::ElemType::Int32 => bytes
                .chunks_exact(4)
                .map(|c| i64::from(i32::from_le_bytes(c.try_into().unwrap_or([0; 4]))))
                .collect(),
            _ => continue,
        };
        if let Some(v) = values.into_iter().find(|&v| near(v)) {
            return Err(refusal(&format!(
                "an integer input or constant holds {v}, which the stand-ins would not compare \
                 with as the real dimensions do"
            )));
        }
    }
    Ok(())
}

/// The plan lowered with `point`'s stand-ins for `huge`: each output's shape. On the first
/// point, the node's run-time checks are evaluated too (on the non-huge inputs' values: an
/// out-of-range index fails the run as on any path).
fn lowered_shapes(
    plan: &Plan,
    runtime: &Runtime,
    inputs: &[Option<HostTensor>],
    huge: &[i64],
    point: &[i64],
    run_checks: bool,
) -> Result<Vec<Vec<i64>>, String> {
    let stand_in = |d: i64| match huge.iter().position(|&h| h == d) {
        Some(i) => point[i],
        None => d,
    };
    let arrays = inputs
        .iter()
        .map(|tensor| {
            let Some(t) = tensor else { return Ok(None) };
            let shape: Vec<i64> = t.shape.iter().map(|&d| stand_in(d)).collect();
            let count = shape.iter().product::<i64>() as usize;
            let (dtype, bytes) = crate::narrow::carried(t.elem, count, t.bytes)?;
            Array::from_bytes(&bytes, &shape, dtype)
                .map(Some)
                .map_err(|e| e.to_string())
        })
        .collect::<Result<Vec<_>, String>>()?;
    let lowering = plan.lower(&runtime.stream, &runtime.constants, arrays)?;
    if run_checks && !lowering.checks.is_empty() {
        let holds: Vec<Array> = lowering.checks.iter().map(|c| c.holds.clone()).collect();
        Array::eval_all(&holds).map_err(|e| e.to_string())?;
        for check in &lowering.checks {
            let held = check
                .holds
                .to_vec::<bool>(&runtime.stream)
                .map_err(|e| e.to_string())?;
            if held != [true] {
                return Err(check.message.to_string());
            }
        }
    }
    Ok(lowering.outputs.iter().map(Array::shape).collect())
}
