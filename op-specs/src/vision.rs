//! Sampling images at computed positions: GridSample and AffineGrid, the two halves of a
//! spatial transformer.
//!
//! Both follow ORT's CPU kernels step by step (`grid_sample.cc`, `affine_grid.cc`), in float32:
//! where ONNX's text leaves an order or an edge open, ORT's arithmetic decides.

use mlx_kernels::{ops, Array, Dtype, Stream};

use crate::table::consts::{scalar, zeros};
use crate::{onnx_op, Lower, Node, OpError, Result, Verdict};

/// How GridSample reads between pixels.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Interpolation {
    Nearest,
    Linear,
    Cubic,
}

/// What GridSample reads outside the image.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Padding {
    Zeros,
    Border,
    Reflection,
}

/// The mode names changed at opset 20 (`bilinear`/`bicubic` became `linear`/`cubic`).
fn interpolation(mode: Option<&str>, opset: i64) -> std::result::Result<Interpolation, String> {
    let newer = opset >= 20;
    match (mode, newer) {
        (None, _) => Ok(Interpolation::Linear),
        (Some("nearest"), _) => Ok(Interpolation::Nearest),
        (Some("bilinear"), false) | (Some("linear"), true) => Ok(Interpolation::Linear),
        (Some("bicubic"), false) | (Some("cubic"), true) => Ok(Interpolation::Cubic),
        (Some(other), _) => Err(format!("mode {other:?} is not a GridSample-{opset} mode")),
    }
}

fn padding(mode: &str) -> std::result::Result<Padding, String> {
    match mode {
        "zeros" => Ok(Padding::Zeros),
        "border" => Ok(Padding::Border),
        "reflection" => Ok(Padding::Reflection),
        other => Err(format!(
            "padding_mode {other:?} is not a GridSample padding mode"
        )),
    }
}

/// Samples `X [N, C, D1.., Dr]` at `grid [N, O1.., Or, r]` (coordinates in [-1, 1], the last
/// spatial axis first) into `Y [N, C, O1.., Or]`. Each coordinate is denormalised (and rounded
/// half to even for `nearest`); each tap of the interpolation then reads its pixel under the
/// padding mode: zero outside the image, the nearest edge pixel, or the pixel reflected back
/// into it. The coordinate itself is not moved first: ORT 1.31's kernel pads per tap, which
/// for cubic taps near an edge gives another answer than clamping the coordinate would. Linear
/// taps are weighted `(x1 + 1) - x` and `x - x1`, cubic ones by Keys' kernel with a = -0.75,
/// combined innermost axis first, as ORT's general path does.
#[onnx_op(
    op = "GridSample", precision = Float32, since = 16,
    types(T1 = F32 | F16 | since(22, BF16), T2 = F32 | F16 | since(22, BF16)),
    inputs(X: T1, grid: T2), outputs(Y: T1),
    shape = ShapeKeyed, claim = grid_sample_claim,
    declines = "X of a rank other than 4 (and 5 from opset 20), as ORT's kernel; cubic interpolation of a 5-D X (ONNX defines it for 4-D only); unknown mode or padding_mode strings",
    numerics = "float32 arithmetic in ORT's order (float16/bfloat16 widened, the result rounded once). Where ORT's kernel reads outside the image (reflection with align_corners = 1 over a spatial axis of size 1: its reflection divides by a zero range), the EP reads the axis's only pixel"
)]
fn grid_sample(
    cx: &mut Lower,
    x: Array,
    grid: Array,
    #[attr(default = 0)] align_corners: i64,
    #[attr] mode: Option<String>,
    #[attr(default = "zeros")] padding_mode: String,
) -> Result<Array> {
    let s = cx.stream();
    let interpolation =
        interpolation(mode.as_deref(), cx.node().since_version()).map_err(OpError::new)?;
    let padding = padding(&padding_mode).map_err(OpError::new)?;
    let x_shape = x.shape();
    let g_shape = grid.shape();
    let rank = x_shape.len();
    let r = rank.saturating_sub(2);
    if !(4..=5).contains(&rank) || g_shape.len() != rank {
        return Err(OpError::new(format!(
            "X has shape {x_shape:?} and grid {g_shape:?}: expected a 4-D or 5-D X and a grid of the same rank"
        )));
    }
    if g_shape[0] != x_shape[0] || g_shape[rank - 1] != r as i64 {
        return Err(OpError::new(format!(
            "grid has shape {g_shape:?}: expected [{}, ..., {r}] for X of shape {x_shape:?}",
            x_shape[0]
        )));
    }
    if interpolation == Interpolation::Cubic && r != 2 {
        return Err(OpError::new("cubic GridSample is defined for 4-D X only"));
    }
    let (n, c) = (x_shape[0], x_shape[1]);
    let sizes = &x_shape[2..];
    let out_spatial = &g_shape[1..rank - 1];
    let mut out_shape = vec![n, c];
    out_shape.extend_from_slice(out_spatial);
    let dtype = x.dtype();
    if sizes.contains(&0) {
        return Err(OpError::new(format!(
            "X has shape {x_shape:?}: its spatial dimensions must be non-empty for sampling (as ORT requires)"
        )));
    }
    if out_shape.contains(&0) {
        return zeros(&out_shape, dtype, s);
    }
    let points: i64 = out_spatial.iter().product();
    let grid = ops::reshape(
        &ops::astype(&grid, Dtype::F32, s)?,
        &[n, points, r as i64],
        s,
    )?;
    let pixels: i64 = sizes.iter().product();
    let image = ops::reshape(&ops::astype(&x, Dtype::F32, s)?, &[n, c, pixels], s)?;
    let sampler = Sampler {
        image,
        sizes: sizes.to_vec(),
        align: align_corners != 0,
        padding,
        s,
    };
    // Per spatial axis of X (outermost first): the grid's channels run innermost first.
    let axes = (0..r)
        .map(|axis| {
            let channel = (r - 1 - axis) as i32;
            let g = ops::squeeze(
                &ops::slice(
                    &grid,
                    &[0, 0, channel],
                    &[n as i32, points as i32, channel + 1],
                    &[1, 1, 1],
                    s,
                )?,
                &[2],
                s,
            )?;
            sampler.taps(axis, &g, interpolation)
        })
        .collect::<Result<Vec<_>>>()?;
    let y = sampler.combine(&axes, &mut Vec::with_capacity(r))?;
    Ok(ops::astype(&ops::reshape(&y, &out_shape, s)?, dtype, s)?)
}

fn grid_sample_claim(node: &Node) -> Verdict {
    let opset = node.since_version();
    if let Err(reason) = interpolation(node.attr_as::<String>("mode").as_deref(), opset) {
        return Verdict::decline(reason);
    }
    if let Err(reason) = padding(&node.attr_or("padding_mode", "zeros".to_string())) {
        return Verdict::decline(reason);
    }
    match node.input_rank(0) {
        Some(4) | None => Verdict::Claim,
        Some(5) if opset < 20 => Verdict::decline("a 5-D X needs GridSample-20 or later"),
        Some(5) => {
            let mode = node.attr_as::<String>("mode");
            if mode.as_deref() == Some("cubic") {
                Verdict::decline("cubic interpolation of a 5-D X (ONNX defines cubic for 4-D only)")
            } else {
                Verdict::Claim
            }
        }
        Some(rank) => Verdict::decline(format!(
            "X has rank {rank}; ORT's kernel takes 4-D (and from opset 20 5-D) X"
        )),
    }
}

/// One tap of one axis: the pixel index along the axis (float32 integers, inside the axis),
/// whether the tap lies inside the image (zeros padding only), and its weight (`None`: 1).
struct Tap {
    index: Array,
    inside: Option<Array>,
    weight: Option<Array>,
}

/// What every tap reads: the image as `[N, C, pixels]` and the rules of its edges.
struct Sampler<'s> {
    image: Array,
    sizes: Vec<i64>,
    align: bool,
    padding: Padding,
    s: &'s Stream,
}

impl Sampler<'_> {
    fn f(&self, value: f64) -> Result<Array> {
        scalar(value, Dtype::F32, self.s)
    }

    /// The range a coordinate of `axis` may take before it counts as outside the image.
    fn bounds(&self, axis: usize) -> (f64, f64) {
        let size = self.sizes[axis] as f64;
        if self.align {
            (0.0, size - 1.0)
        } else {
            (-0.5, size - 0.5)
        }
    }

    /// The taps of `axis` for normalised coordinates `g [N, P]`.
    fn taps(&self, axis: usize, g: &Array, interpolation: Interpolation) -> Result<Vec<Tap>> {
        let s = self.s;
        let size = self.sizes[axis] as f64;
        let one = self.f(1.0)?;
        // ORT's GsDenormalize, in its order of operations.
        let mut x = if self.align {
            let half = ops::divide(&ops::add(g, &one, s)?, &self.f(2.0)?, s)?;
            ops::multiply(&half, &self.f(size - 1.0)?, s)?
        } else {
            let scaled = ops::multiply(&ops::add(g, &one, s)?, &self.f(size)?, s)?;
            ops::divide(&ops::subtract(&scaled, &one, s)?, &self.f(2.0)?, s)?
        };
        if interpolation == Interpolation::Nearest {
            x = ops::round(&x, 0, s)?;
        }
        match interpolation {
            Interpolation::Nearest => Ok(vec![self.tap(axis, &truncate(&x, s)?, None)?]),
            Interpolation::Linear => {
                let x1 = ops::floor(&x, s)?;
                let x2 = ops::add(&x1, &one, s)?;
                let w1 = ops::subtract(&x2, &x, s)?;
                let w2 = ops::subtract(&x, &x1, s)?;
                Ok(vec![
                    self.tap(axis, &x1, Some(w1))?,
                    self.tap(axis, &x2, Some(w2))?,
                ])
            }
            Interpolation::Cubic => {
                let floor = ops::floor(&x, s)?;
                let t = ops::abs(&ops::subtract(&x, &floor, s)?, s)?;
                let coefficients = self.cubic_coefficients(&t)?;
                coefficients
                    .into_iter()
                    .enumerate()
                    .map(|(k, weight)| {
                        let at = ops::add(&floor, &self.f(k as f64 - 1.0)?, s)?;
                        self.tap(axis, &at, Some(weight))
                    })
                    .collect()
            }
        }
    }

    /// Keys' cubic convolution weights (a = -0.75) of the four taps around a point `t` past
    /// the second one, written as ORT's GsGetCubicCoeffs writes them.
    fn cubic_coefficients(&self, t: &Array) -> Result<[Array; 4]> {
        let s = self.s;
        let a = -0.75;
        let mul = |x: &Array, y: &Array| ops::multiply(x, y, s);
        let add_f = |x: &Array, v: f64| -> Result<Array> { Ok(ops::add(x, &self.f(v)?, s)?) };
        let scale = |x: &Array, v: f64| -> Result<Array> { Ok(ops::multiply(x, &self.f(v)?, s)?) };
        // The outer taps: ((a·u - 5a)·u + 8a)·u - 4a at u = t + 1 and u = 2 - t.
        let outer = |u: &Array| -> Result<Array> {
            let p = add_f(&scale(u, a)?, -5.0 * a)?;
            let p = add_f(&mul(&p, u)?, 8.0 * a)?;
            add_f(&mul(&p, u)?, -4.0 * a)
        };
        // The inner taps: ((a + 2)·u - (a + 3))·u·u + 1 at u = t and u = 1 - t.
        let inner = |u: &Array| -> Result<Array> {
            let p = add_f(&scale(u, a + 2.0)?, -(a + 3.0))?;
            add_f(&mul(&mul(&p, u)?, u)?, 1.0)
        };
        let one_minus = ops::subtract(&self.f(1.0)?, t, s)?;
        let two_minus = ops::subtract(&self.f(2.0)?, t, s)?;
        Ok([
            outer(&add_f(t, 1.0)?)?,
            inner(t)?,
            inner(&one_minus)?,
            outer(&two_minus)?,
        ])
    }

    /// ORT's GsReflect: `x` folded back into `[lo, hi]` (for coordinates outside it), in
    /// float32 with the fold count truncated. A zero range (align_corners over one pixel) has
    /// one place to go: `lo`.
    fn reflect(&self, x: &Array, lo: f64, hi: f64) -> Result<Array> {
        let s = self.s;
        let range = hi - lo;
        if range <= 0.0 {
            return Ok(ops::broadcast_to(&self.f(lo)?, &x.shape(), s)?);
        }
        let below = ops::less(x, &self.f(lo)?, s)?;
        let above = ops::greater(x, &self.f(hi)?, s)?;
        let dx = ops::where_(
            &below,
            &ops::subtract(&self.f(lo)?, x, s)?,
            &ops::subtract(x, &self.f(hi)?, s)?,
            s,
        )?;
        let folds = ops::floor(&ops::divide(&dx, &self.f(range)?, s)?, s)?;
        let rest = ops::subtract(&dx, &ops::multiply(&folds, &self.f(range)?, s)?, s)?;
        let half = ops::floor(&ops::divide(&folds, &self.f(2.0)?, s)?, s)?;
        let even = ops::equal(&folds, &ops::multiply(&half, &self.f(2.0)?, s)?, s)?;
        let from_lo = ops::add(&self.f(lo)?, &rest, s)?;
        let from_hi = ops::subtract(&self.f(hi)?, &rest, s)?;
        // Below: an even fold count lands from lo, an odd one from hi; above, the other way.
        let lands_from_lo = ops::equal(&even, &below, s)?;
        let folded = ops::where_(&lands_from_lo, &from_lo, &from_hi, s)?;
        Ok(ops::where_(
            &ops::logical_or(&below, &above, s)?,
            &folded,
            x,
            s,
        )?)
    }

    /// The pixel a tap at integer position `at` reads under the padding mode (ORT's
    /// PixelAtGrid).
    fn tap(&self, axis: usize, at: &Array, weight: Option<Array>) -> Result<Tap> {
        let s = self.s;
        let last = self.f(self.sizes[axis] as f64 - 1.0)?;
        let zero = self.f(0.0)?;
        let (index, inside) = match self.padding {
            Padding::Zeros => {
                let inside = ops::logical_and(
                    &ops::greater_equal(at, &zero, s)?,
                    &ops::less_equal(at, &last, s)?,
                    s,
                )?;
                (clamp(at, &zero, &last, s)?, Some(inside))
            }
            Padding::Border => (clamp(at, &zero, &last, s)?, None),
            Padding::Reflection => {
                let (lo, hi) = self.bounds(axis);
                let folded = truncate(&self.reflect(at, lo, hi)?, s)?;
                (clamp(&folded, &zero, &last, s)?, None)
            }
        };
        Ok(Tap {
            index,
            inside,
            weight,
        })
    }

    /// The weighted sum over every tap combination, the innermost axis summed first (ORT's
    /// nesting): `picked` holds the taps chosen on the outer axes.
    fn combine<'t>(&self, axes: &'t [Vec<Tap>], picked: &mut Vec<&'t Tap>) -> Result<Array> {
        let s = self.s;
        let depth = picked.len();
        if depth == axes.len() {
            return self.read(picked);
        }
        let mut total: Option<Array> = None;
        for tap in &axes[depth] {
            picked.push(tap);
            let inner = self.combine(axes, picked)?;
            picked.pop();
            let term = match &tap.weight {
                Some(w) => ops::multiply(&ops::expand_dims(w, &[1], s)?, &inner, s)?,
                None => inner,
            };
            total = Some(match total {
                Some(sum) => ops::add(&sum, &term, s)?,
                None => term,
            });
        }
        total.ok_or_else(|| OpError::new("GridSample: an axis without taps (lowering bug)"))
    }

    /// The pixels `[N, C, P]` at one tap of every axis.
    fn read(&self, taps: &[&Tap]) -> Result<Array> {
        let s = self.s;
        // Pixel numbers in int32: an image of 2^31 pixels is far past what MLX holds at once.
        let mut index: Option<Array> = None;
        let mut inside: Option<Array> = None;
        let mut stride = 1i64;
        for (axis, tap) in taps.iter().enumerate().rev() {
            let term = ops::multiply(
                &ops::astype(&tap.index, Dtype::I32, s)?,
                &scalar(stride as f64, Dtype::I32, s)?,
                s,
            )?;
            index = Some(match index {
                Some(i) => ops::add(&i, &term, s)?,
                None => term,
            });
            if let Some(i) = &tap.inside {
                inside = Some(match inside {
                    Some(all) => ops::logical_and(&all, i, s)?,
                    None => i.clone(),
                });
            }
            stride *= self.sizes[axis];
        }
        let index = index.ok_or_else(|| OpError::new("GridSample: no spatial axis"))?;
        let shape = self.image.shape();
        let points = index.shape()[1];
        let index = ops::broadcast_to(
            &ops::expand_dims(&index, &[1], s)?,
            &[shape[0], shape[1], points],
            s,
        )?;
        let values = ops::take_along_axis(&self.image, &index, 2, s)?;
        Ok(match inside {
            Some(inside) => ops::where_(
                &ops::expand_dims(&inside, &[1], s)?,
                &values,
                &self.f(0.0)?,
                s,
            )?,
            None => values,
        })
    }
}

/// `x` held within `[lo, hi]`, NaN at `lo`: every tap index becomes a pixel of the image (MLX's
/// gather reads whatever address it is given, so an index outside the image must never reach it).
fn clamp(x: &Array, lo: &Array, hi: &Array, s: &Stream) -> Result<Array> {
    let above_lo = ops::where_(&ops::greater_equal(x, lo, s)?, x, lo, s)?;
    Ok(ops::where_(
        &ops::less_equal(&above_lo, hi, s)?,
        &above_lo,
        hi,
        s,
    )?)
}

/// float32 `x` rounded toward zero (C's cast to an integer), kept in float32.
fn truncate(x: &Array, s: &Stream) -> Result<Array> {
    let zero = scalar(0.0, Dtype::F32, s)?;
    Ok(ops::where_(
        &ops::less(x, &zero, s)?,
        &ops::ceil(x, s)?,
        &ops::floor(x, s)?,
        s,
    )?)
}

/// The sampling grid of an affine transform: `theta [N, 2, 3]` over `size = [N, C, H, W]`
/// gives `grid [N, H, W, 2]`, `theta [N, 3, 4]` over `[N, C, D, H, W]` gives `[N, D, H, W, 3]`;
/// each point is `theta · (x, y[, z], 1)` over the base grid of each axis in [-1, 1].
#[onnx_op(
    op = "AffineGrid", precision = Float32, since = 20, types(T1 = F32, T2 = I64),
    inputs(theta: T1, size: T2), outputs(grid: T1),
    shape = ShapeKeyed,
    declines = "float16 and bfloat16 (ORT runs ONNX's function body for them, whose base grid differs from its float kernel's on axes of one element)",
    numerics = "float32, ORT's base grid: Eigen's LinSpaced(L, -1, 1), scaled by (L - 1) / L without align_corners; an axis of one element sits at 1 with align_corners (Eigen's rule), 0 without"
)]
fn affine_grid(
    cx: &mut Lower,
    theta: Array,
    #[host] size: Vec<i64>,
    #[attr(default = 0)] align_corners: i64,
) -> Result<Array> {
    let s = cx.stream();
    let r = match size.len() {
        4 => 2,
        5 => 3,
        len => {
            return Err(OpError::new(format!(
                "size {size:?} has {len} elements: expected [N, C, H, W] or [N, C, D, H, W]"
            )))
        }
    };
    let n = size[0];
    if theta.shape() != [n, r as i64, r as i64 + 1] {
        return Err(OpError::new(format!(
            "theta has shape {:?}: expected [{n}, {r}, {}] for size {size:?}",
            theta.shape(),
            r + 1
        )));
    }
    if n < 0 || size[2..].iter().any(|&d| d <= 0) {
        return Err(OpError::new(format!(
            "size {size:?}: its spatial dimensions must be positive (as ORT requires)"
        )));
    }
    // Spatial axes outermost first (D, H, W); the grid's channels run innermost first (x = W).
    let spatial = &size[2..];
    let mut out_shape = vec![n];
    out_shape.extend_from_slice(spatial);
    out_shape.push(r as i64);
    if out_shape.contains(&0) {
        return zeros(&out_shape, Dtype::F32, s);
    }
    if spatial.iter().any(|&d| d > i64::from(i32::MAX)) {
        // Only a size computed at run time gets here: ORT's shape inference checks a constant.
        return Err(OpError::new(format!(
            "size {size:?}: a spatial dimension past MLX's 32-bit dimensions"
        )));
    }
    let theta = ops::astype(&theta, Dtype::F32, s)?;
    // The base coordinate of each axis, shaped to broadcast over [N, D.., W].
    let base = spatial
        .iter()
        .enumerate()
        .map(|(axis, &len)| {
            let mut shape = vec![1i64; r + 1];
            shape[axis + 1] = len;
            Array::from_slice(&linspace(len, align_corners != 0), &shape).map_err(OpError::from)
        })
        .collect::<Result<Vec<_>>>()?;
    let coefficient = |row: usize, col: usize| -> Result<Array> {
        let picked = ops::slice(
            &theta,
            &[0, row as i32, col as i32],
            &[n as i32, row as i32 + 1, col as i32 + 1],
            &[1, 1, 1],
            s,
        )?;
        let mut shape = vec![n];
        shape.extend(std::iter::repeat_n(1, r));
        Ok(ops::reshape(&picked, &shape, s)?)
    };
    let channels = (0..r)
        .map(|row| {
            // x·θ[row, 0] + y·θ[row, 1] (+ z·θ[row, 2]) + θ[row, r], x being the last axis.
            let mut sum: Option<Array> = None;
            for col in 0..r {
                let coordinate = &base[r - 1 - col];
                let term = ops::multiply(coordinate, &coefficient(row, col)?, s)?;
                sum = Some(match sum {
                    Some(acc) => ops::add(&acc, &term, s)?,
                    None => term,
                });
            }
            let sum = sum.ok_or_else(|| OpError::new("AffineGrid: no axis"))?;
            let shifted = ops::add(&sum, &coefficient(row, r)?, s)?;
            Ok(ops::broadcast_to(&shifted, &out_shape[..r + 1], s)?)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(ops::stack(&channels, -1, s)?)
}

/// ORT's base grid of one axis of `len` points: Eigen's `LinSpaced(len, -1, 1)` (`-1 + i·step`,
/// the last point exactly 1; one point is 1), times `(len - 1) / len` without align_corners.
fn linspace(len: i64, align_corners: bool) -> Vec<f32> {
    let points: Vec<f32> = if len == 1 {
        vec![1.0]
    } else {
        let step = 2.0f32 / (len - 1) as f32;
        (0..len)
            .map(|i| {
                if i == len - 1 {
                    1.0
                } else {
                    -1.0 + i as f32 * step
                }
            })
            .collect()
    };
    if align_corners {
        return points;
    }
    points
        .into_iter()
        .map(|v| v * (len - 1) as f32 / len as f32)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_grids_follow_eigen_and_ort() {
        assert_eq!(linspace(3, true), vec![-1.0, 0.0, 1.0]);
        assert_eq!(linspace(1, true), vec![1.0]);
        assert_eq!(linspace(1, false), vec![0.0]);
        let shrunk = linspace(3, false);
        assert!((shrunk[0] + 2.0 / 3.0).abs() < 1e-7 && shrunk[1] == 0.0);
    }

    #[test]
    fn mode_names_follow_the_opset() {
        assert_eq!(
            interpolation(Some("bilinear"), 16),
            Ok(Interpolation::Linear)
        );
        assert!(interpolation(Some("bilinear"), 20).is_err());
        assert_eq!(interpolation(Some("cubic"), 22), Ok(Interpolation::Cubic));
        assert!(interpolation(Some("cubic"), 16).is_err());
        assert_eq!(interpolation(None, 16), Ok(Interpolation::Linear));
    }
}
