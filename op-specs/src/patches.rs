//! Images taken apart into sliding blocks and put back together: Col2Im, and DeformConv, whose
//! blocks are sampled at learned offsets.
//!
//! Which pixel each block element lands on depends on shapes alone, so the host works the
//! positions out once per shape and MLX adds every column into the image with one scatter-add.
//! DeformConv's positions depend on its offset input, so MLX gathers them: the four bilinear
//! corners of every tap, weighted and summed into columns that one matmul per group contracts.

use mlx_kernels::ops::{self, ScatterMode};
use mlx_kernels::{Array, Dtype};

use crate::table::consts::zeros;
use crate::{onnx_op, Lower, OpError, Result};

/// Sums sliding blocks back into an image: `input [N, C·∏block, L]` holds, for each of the L
/// block positions (row-major over the grid of blocks), every block element of every channel
/// (channel-major); each is added at `position·stride - pad_begin + offset·dilation`, and
/// elements landing in the padding are dropped. Output `[N, C, image_shape..]`.
#[onnx_op(
    op = "Col2Im", since = 18, types(T = FLOAT, I = I64),
    inputs(input: T, image_shape: I, block_shape: I), outputs(output: T),
    shape = ShapeKeyed,
    numerics = "float32 sums (16-bit inputs widened, the result rounded once); overlapping blocks add in MLX's scatter order, so sums of more than two overlapping elements may differ from ORT's in the last bit"
)]
fn col2im(
    cx: &mut Lower,
    input: Array,
    #[host] image_shape: Vec<i64>,
    #[host] block_shape: Vec<i64>,
    #[attr] dilations: Option<Vec<i64>>,
    #[attr] pads: Option<Vec<i64>>,
    #[attr] strides: Option<Vec<i64>>,
) -> Result<Array> {
    let s = cx.stream();
    let geometry = Geometry::new(
        &input.shape(),
        image_shape,
        block_shape,
        dilations,
        pads,
        strides,
    )?;
    let dtype = input.dtype();
    let (n, c) = (geometry.batch, geometry.channels);
    let pixels: i64 = geometry.image.iter().product();
    let mut out_shape = vec![n, c];
    out_shape.extend_from_slice(&geometry.image);
    if out_shape.contains(&0) || geometry.blocks == 0 {
        return zeros(&out_shape, dtype, s);
    }
    let k: i64 = geometry.block.iter().product();
    // Rows to add into: one per image pixel, and a last one that collects the padding.
    let targets = geometry.targets(pixels);
    let index = Array::from_slice(&targets, &[targets.len() as i64])?;
    // [N, C, K, L] -> [K, L, N, C] -> [K·L, 1, N·C]: one update row per block element.
    let values = ops::reshape(
        &ops::astype(&input, Dtype::F32, s)?,
        &[n, c, k, geometry.blocks],
        s,
    )?;
    let rows = ops::reshape(
        &ops::transpose(&values, &[2, 3, 0, 1], s)?,
        &[k * geometry.blocks, 1, n * c],
        s,
    )?;
    let image = zeros(&[pixels + 1, n * c], Dtype::F32, s)?;
    let summed = ops::scatter_rows(&image, &index, &rows, ScatterMode::Add, s)?;
    let kept = ops::slice(
        &summed,
        &[0, 0],
        &[pixels as i32, (n * c) as i32],
        &[1, 1],
        s,
    )?;
    let mut channels_first = vec![n, c];
    channels_first.extend_from_slice(&geometry.image);
    let image = ops::reshape(&ops::transpose(&kept, &[1, 0], s)?, &channels_first, s)?;
    Ok(ops::astype(&image, dtype, s)?)
}

/// A 2-D convolution whose kernel taps are moved by `offset` (`[N, offset_group·2·kH·kW, oH, oW]`:
/// for tap `k = i·kW + j` of an offset group, channel `2k` moves it down and `2k + 1` right) and,
/// with `mask`, scaled per tap. Each tap reads its image bilinearly: a tap outside
/// `(-1, H) × (-1, W)` reads 0, and so does each of its four corners outside the image.
#[allow(clippy::too_many_arguments)] // five inputs and six attributes, as ONNX has them
#[onnx_op(
    op = "DeformConv", since = 19, types(T = F32),
    inputs(X: T, W: T, offset: T, B: T, mask: T), outputs(Y: T),
    shape = ShapeKeyed,
    declines = "float16 and bfloat16 (ORT's CPU EP has float and double kernels only)",
    numerics = "the taps are ORT's: its float positions, weights and corner sum, in its order; the matmul over channels and taps sums in MLX's order, so results may differ from ORT's GEMM in the last bits"
)]
fn deform_conv(
    cx: &mut Lower,
    x: Array,
    w: Array,
    offset: Array,
    b: Option<Array>,
    mask: Option<Array>,
    #[attr] dilations: Option<Vec<i64>>,
    #[attr(default = 1)] group: i64,
    #[attr] kernel_shape: Option<Vec<i64>>,
    #[attr(default = 1)] offset_group: i64,
    #[attr] pads: Option<Vec<i64>>,
    #[attr] strides: Option<Vec<i64>>,
) -> Result<Array> {
    let s = cx.stream();
    let g = DeformGeometry::new(
        &x.shape(),
        &w.shape(),
        DeformAttributes {
            dilations,
            group,
            kernel_shape,
            offset_group,
            pads,
            strides,
        },
    )?;
    g.check_inputs(&offset, b.as_ref(), mask.as_ref())?;
    let out_shape = [g.batch, g.filters, g.out[0], g.out[1]];
    if out_shape.contains(&0) {
        return zeros(&out_shape, Dtype::F32, s);
    }
    let (n, og, taps, spots) = (g.batch, g.offset_groups, g.taps(), g.out[0] * g.out[1]);
    let at = |v: f64| crate::table::consts::scalar(v, Dtype::F32, s);
    // [N, og, K, 2, P]: each tap's down and right shift at every output pixel.
    let shifts = ops::reshape(&offset, &[n, og, taps, 2, spots], s)?;
    // A 0-d index takes one direction and drops that axis: [N, og, K, P].
    let shift =
        |axis: i32| -> Result<Array> { Ok(ops::take(&shifts, &Array::scalar(axis)?, 3, s)?) };
    let (base_y, base_x) = g.tap_origins();
    let base = |v: &[f32]| Array::from_slice(v, &[taps, spots]);
    let y = ops::add(&base(&base_y)?, &shift(0)?, s)?;
    let x_at = ops::add(&base(&base_x)?, &shift(1)?, s)?;
    let [height, width] = g.image;
    let between = |v: &Array, hi: i64| -> Result<Array> {
        Ok(ops::logical_and(
            &ops::greater(v, &at(-1.0)?, s)?,
            &ops::less(v, &at(hi as f64)?, s)?,
            s,
        )?)
    };
    let inside = ops::logical_and(&between(&y, height)?, &between(&x_at, width)?, s)?;
    let (y0, x0) = (ops::floor(&y, s)?, ops::floor(&x_at, s)?);
    let (ly, lx) = (ops::subtract(&y, &y0, s)?, ops::subtract(&x_at, &x0, s)?);
    let one = at(1.0)?;
    let (hy, hx) = (ops::subtract(&one, &ly, s)?, ops::subtract(&one, &lx, s)?);
    // The image's channels of each offset group, pixels flattened: [N, og, C/og, H·W].
    let image = ops::reshape(&x, &[n, og, g.channels / og, height * width], s)?;
    let flat_taps = [n, og, 1, taps * spots];
    let corner = |dy: f64, dx: f64, weight: Array| -> Result<Array> {
        let (row, col) = (ops::add(&y0, &at(dy)?, s)?, ops::add(&x0, &at(dx)?, s)?);
        let within = |v: &Array, size: i64| -> Result<Array> {
            Ok(ops::logical_and(
                &ops::greater_equal(v, &at(0.0)?, s)?,
                &ops::less(v, &at(size as f64)?, s)?,
                s,
            )?)
        };
        let valid = ops::logical_and(
            &inside,
            &ops::logical_and(&within(&row, height)?, &within(&col, width)?, s)?,
            s,
        )?;
        // ORT reads a corner outside the image at pixel 0 with weight 0 (so 0·X[0] joins the sum).
        let zero = at(0.0)?;
        let as_index = |v: &Array| -> Result<Array> {
            Ok(ops::astype(
                &ops::where_(&valid, v, &zero, s)?,
                Dtype::I32,
                s,
            )?)
        };
        let pixel = ops::add(
            &ops::multiply(&as_index(&row)?, &Array::scalar(width as i32)?, s)?,
            &as_index(&col)?,
            s,
        )?;
        let values = ops::take_along_axis(&image, &ops::reshape(&pixel, &flat_taps, s)?, 3, s)?;
        let weight = ops::reshape(&ops::where_(&valid, &weight, &zero, s)?, &flat_taps, s)?;
        Ok(ops::multiply(&values, &weight, s)?)
    };
    let mut sampled = corner(0.0, 0.0, ops::multiply(&hy, &hx, s)?)?;
    for (dy, dx, weight) in [
        (0.0, 1.0, ops::multiply(&hy, &lx, s)?),
        (1.0, 0.0, ops::multiply(&ly, &hx, s)?),
        (1.0, 1.0, ops::multiply(&ly, &lx, s)?),
    ] {
        sampled = ops::add(&sampled, &corner(dy, dx, weight)?, s)?;
    }
    if let Some(mask) = &mask {
        sampled = ops::multiply(&sampled, &ops::reshape(mask, &flat_taps, s)?, s)?;
    }
    // Columns [N, group, (C/group)·K, P], rows channel-major then tap, as W's rows are laid out.
    let per_group = g.channels / g.groups * taps;
    let columns = ops::reshape(&sampled, &[n, g.groups, per_group, spots], s)?;
    let kernels = ops::reshape(&w, &[g.groups, g.filters / g.groups, per_group], s)?;
    let mut out = ops::reshape(&ops::matmul(&kernels, &columns, s)?, &out_shape, s)?;
    if let Some(bias) = &b {
        out = ops::add(&out, &ops::reshape(bias, &[1, g.filters, 1, 1], s)?, s)?;
    }
    Ok(out)
}

/// DeformConv's attributes as the node gives them.
struct DeformAttributes {
    dilations: Option<Vec<i64>>,
    group: i64,
    kernel_shape: Option<Vec<i64>>,
    offset_group: i64,
    pads: Option<Vec<i64>>,
    strides: Option<Vec<i64>>,
}

/// DeformConv's shapes and attributes, checked against each other as ORT checks them.
#[derive(Debug)]
struct DeformGeometry {
    batch: i64,
    channels: i64,
    image: [i64; 2],
    filters: i64,
    kernel: [i64; 2],
    strides: [i64; 2],
    pads_begin: [i64; 2],
    dilations: [i64; 2],
    groups: i64,
    offset_groups: i64,
    out: [i64; 2],
}

impl DeformGeometry {
    fn new(x: &[i64], w: &[i64], a: DeformAttributes) -> Result<DeformGeometry> {
        let fail = |what: String| Err(OpError::new(what));
        let ([n, c, h, wd], [m, cg, kh, kw]) = (x, w) else {
            return fail(format!(
                "X {x:?} and W {w:?} must be 4-D (ORT's DeformConv is 2-D only)"
            ));
        };
        let pair = |name: &str, v: Option<Vec<i64>>, default: i64| -> Result<[i64; 2]> {
            match v {
                None => Ok([default; 2]),
                Some(v) => <[i64; 2]>::try_from(v.as_slice())
                    .map_err(|_| OpError::new(format!("{name} {v:?} must hold 2 values"))),
            }
        };
        if *c <= 0 || *m <= 0 || *kh <= 0 || *kw <= 0 {
            return fail(format!(
                "X's channels ({c}), W's filters ({m}) and its kernel ({kh}x{kw}) must be positive, as ORT requires"
            ));
        }
        let strides = pair("strides", a.strides, 1)?;
        let dilations = pair("dilations", a.dilations, 1)?;
        if strides.iter().chain(&dilations).any(|&v| v <= 0) {
            return fail(format!(
                "strides {strides:?} and dilations {dilations:?} must be positive"
            ));
        }
        let pads = a.pads.unwrap_or_else(|| vec![0; 4]);
        let &[top, left, bottom, right] = pads.as_slice() else {
            return fail(format!("pads {pads:?} must hold 4 values"));
        };
        if pads.iter().any(|&p| p < 0) {
            return fail(format!("pads {pads:?} must not be negative"));
        }
        if let Some(k) = &a.kernel_shape {
            if k.as_slice() != [*kh, *kw] {
                return fail(format!(
                    "kernel_shape {k:?} differs from W's kernel [{kh}, {kw}]"
                ));
            }
        }
        if a.group <= 0 || a.offset_group <= 0 {
            return fail(format!(
                "group {} and offset_group {} must be positive",
                a.group, a.offset_group
            ));
        }
        if c % a.offset_group != 0 || *c != cg * a.group || m % a.group != 0 {
            return fail(format!(
                "X's {c} channels, W's {m} filters of {cg} channels, group {} and offset_group {} do not fit (C = group·W[1], C and M divisible by their groups)",
                a.group, a.offset_group
            ));
        }
        if (h + 1).saturating_mul(*wd) > i64::from(i32::MAX) {
            return fail(format!("an image of {h}x{wd} is too large to index"));
        }
        let out = |size: i64, before: i64, after: i64, k: i64, axis: usize| -> Result<i64> {
            let o = (size + before + after - dilations[axis] * (k - 1) - 1) / strides[axis] + 1;
            if o < 0 {
                return Err(OpError::new(format!(
                    "axis {axis}: a kernel of {k} taps does not fit the padded image"
                )));
            }
            Ok(o)
        };
        Ok(DeformGeometry {
            batch: *n,
            channels: *c,
            image: [*h, *wd],
            filters: *m,
            kernel: [*kh, *kw],
            strides,
            pads_begin: [top, left],
            dilations,
            groups: a.group,
            offset_groups: a.offset_group,
            out: [
                out(*h, top, bottom, *kh, 0)?,
                out(*wd, left, right, *kw, 1)?,
            ],
        })
    }

    fn taps(&self) -> i64 {
        self.kernel[0] * self.kernel[1]
    }

    /// offset, B and mask must have the shapes the geometry implies.
    fn check_inputs(&self, offset: &Array, b: Option<&Array>, mask: Option<&Array>) -> Result<()> {
        let [oh, ow] = self.out;
        let expect = |name: &str, got: Vec<i64>, want: Vec<i64>| -> Result<()> {
            if got != want {
                return Err(OpError::new(format!(
                    "{name} has shape {got:?}; X, W and the attributes give {want:?}"
                )));
            }
            Ok(())
        };
        let per_group = self.offset_groups * self.taps();
        expect(
            "offset",
            offset.shape(),
            vec![self.batch, 2 * per_group, oh, ow],
        )?;
        if let Some(b) = b {
            expect("B", b.shape(), vec![self.filters])?;
        }
        if let Some(mask) = mask {
            expect("mask", mask.shape(), vec![self.batch, per_group, oh, ow])?;
        }
        Ok(())
    }

    /// Where each tap (row-major over the kernel) sits at each output pixel (row-major) before
    /// its offset, in float as ORT adds the two parts: `(o·stride) + (i·dilation − pad)`.
    fn tap_origins(&self) -> (Vec<f32>, Vec<f32>) {
        let [oh, ow] = self.out;
        let [kh, kw] = self.kernel;
        let capacity = (self.taps() * oh * ow) as usize;
        let (mut ys, mut xs) = (Vec::with_capacity(capacity), Vec::with_capacity(capacity));
        for i in 0..kh {
            for j in 0..kw {
                let tap_y = (i * self.dilations[0] - self.pads_begin[0]) as f32;
                let tap_x = (j * self.dilations[1] - self.pads_begin[1]) as f32;
                for oy in 0..oh {
                    for ox in 0..ow {
                        ys.push((oy * self.strides[0]) as f32 + tap_y);
                        xs.push((ox * self.strides[1]) as f32 + tap_x);
                    }
                }
            }
        }
        (ys, xs)
    }
}

/// Col2Im's shapes and attributes, checked against each other as ORT checks them.
struct Geometry {
    batch: i64,
    channels: i64,
    image: Vec<i64>,
    block: Vec<i64>,
    dilations: Vec<i64>,
    pads_begin: Vec<i64>,
    strides: Vec<i64>,
    /// Blocks along each spatial axis, and in all (L).
    grid: Vec<i64>,
    blocks: i64,
}

impl Geometry {
    fn new(
        input: &[i64],
        image: Vec<i64>,
        block: Vec<i64>,
        dilations: Option<Vec<i64>>,
        pads: Option<Vec<i64>>,
        strides: Option<Vec<i64>>,
    ) -> Result<Geometry> {
        let r = image.len();
        let fail = |what: String| Err(OpError::new(what));
        if r == 0 || block.len() != r {
            return fail(format!(
                "image_shape {image:?} and block_shape {block:?} must name the same spatial axes"
            ));
        }
        let dilations = dilations.unwrap_or_else(|| vec![1; r]);
        let strides = strides.unwrap_or_else(|| vec![1; r]);
        let pads = pads.unwrap_or_else(|| vec![0; 2 * r]);
        if dilations.len() != r || strides.len() != r || pads.len() != 2 * r {
            return fail(format!(
                "dilations {dilations:?}, strides {strides:?} and pads {pads:?} do not fit {r} spatial axes"
            ));
        }
        let positive = |v: &[i64]| v.iter().all(|&d| d > 0);
        if !positive(&block) || !positive(&dilations) || !positive(&strides) {
            return fail(format!(
                "block_shape {block:?}, dilations {dilations:?} and strides {strides:?} must be positive"
            ));
        }
        if image.iter().any(|&d| d < 0) || pads.iter().any(|&p| p < 0) {
            return fail(format!(
                "image_shape {image:?} and pads {pads:?} must not be negative"
            ));
        }
        let [batch, rows, blocks] = input else {
            return fail(format!(
                "input has shape {input:?}: expected [N, C·∏block_shape, L]"
            ));
        };
        let Some(k) = block.iter().try_fold(1i64, |k, &d| k.checked_mul(d)) else {
            return fail(format!(
                "block_shape {block:?} holds more than 2^63 elements"
            ));
        };
        if *rows <= 0 || rows % k != 0 {
            return fail(format!(
                "input has {rows} rows: not a positive multiple of the block's {k} elements (ORT \
                 requires one too)"
            ));
        }
        let grid = (0..r)
            .map(|d| {
                let span = dilations[d] * (block[d] - 1) + 1;
                let room = image[d] + pads[d] + pads[r + d] - span;
                if room < 0 {
                    return Err(OpError::new(format!(
                        "a block spans {span} pixels on axis {d}, more than the padded image's {}",
                        image[d] + pads[d] + pads[r + d]
                    )));
                }
                Ok(room / strides[d] + 1)
            })
            .collect::<Result<Vec<_>>>()?;
        let expected: i64 = grid.iter().product();
        if expected != *blocks {
            return fail(format!(
                "input has {blocks} block positions; image_shape {image:?}, block_shape {block:?} and the attributes give {expected}"
            ));
        }
        Ok(Geometry {
            batch: *batch,
            channels: rows / k,
            image,
            block,
            dilations,
            pads_begin: pads[..r].to_vec(),
            strides,
            grid,
            blocks: *blocks,
        })
    }

    /// For every (block element, block position), row-major in both: the pixel it lands on,
    /// or `pixels` (the padding row) outside the image.
    fn targets(&self, pixels: i64) -> Vec<i32> {
        let r = self.image.len();
        let k: i64 = self.block.iter().product();
        let mut out = Vec::with_capacity((k * self.blocks) as usize);
        let unravel = |mut flat: i64, dims: &[i64]| -> Vec<i64> {
            let mut at = vec![0; dims.len()];
            for d in (0..dims.len()).rev() {
                at[d] = flat % dims[d];
                flat /= dims[d];
            }
            at
        };
        for element in 0..k {
            let offset = unravel(element, &self.block);
            for block in 0..self.blocks {
                let origin = unravel(block, &self.grid);
                let mut flat = 0i64;
                let mut inside = true;
                for d in 0..r {
                    let pos = origin[d] * self.strides[d] - self.pads_begin[d]
                        + offset[d] * self.dilations[d];
                    inside &= (0..self.image[d]).contains(&pos);
                    flat = flat * self.image[d] + pos;
                }
                out.push(if inside { flat } else { pixels } as i32);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_land_where_their_stride_and_padding_put_them() {
        // A 3x3 image, 2x2 blocks, stride 1: 4 positions; element (1, 1) of block 0 is pixel 4.
        let g = Geometry::new(&[1, 4, 4], vec![3, 3], vec![2, 2], None, None, None).unwrap();
        let t = g.targets(9);
        assert_eq!(&t[..4], &[0, 1, 3, 4]);
        assert_eq!(&t[12..], &[4, 5, 7, 8]);
        // Padding 1 on every side: the first block's first element lies in the padding.
        let g = Geometry::new(
            &[1, 4, 16],
            vec![3, 3],
            vec![2, 2],
            None,
            Some(vec![1; 4]),
            None,
        )
        .unwrap();
        assert_eq!(g.targets(9)[0], 9);
    }

    fn deform(x: &[i64], w: &[i64], pads: Option<Vec<i64>>) -> Result<DeformGeometry> {
        DeformGeometry::new(
            x,
            w,
            DeformAttributes {
                dilations: None,
                group: 1,
                kernel_shape: None,
                offset_group: 1,
                pads,
                strides: None,
            },
        )
    }

    #[test]
    fn deform_taps_start_where_a_convolution_would_read() {
        let g = deform(&[1, 2, 4, 5], &[3, 2, 2, 3], Some(vec![1, 0, 0, 1])).unwrap();
        assert_eq!(g.out, [4, 4]);
        let (ys, xs) = g.tap_origins();
        // Tap (0, 0) at output (0, 0) reads row -1 (the padding); tap (1, 2) at (3, 3) reads (3, 5).
        assert_eq!((ys[0], xs[0]), (-1.0, 0.0));
        let last = ys.len() - 1;
        assert_eq!((ys[last], xs[last]), (3.0, 5.0));
    }

    #[test]
    fn deform_geometry_that_does_not_fit_fails() {
        assert!(deform(&[1, 2, 4, 5], &[3, 3, 2, 3], None).is_err()); // channels
        assert!(deform(&[1, 2, 4], &[3, 2, 2, 3], None).is_err()); // rank
        assert!(deform(&[1, 2, 4, 5], &[3, 2, 2, 3], Some(vec![1, 1])).is_err()); // pads
        assert!(deform(&[1, 2, 1, 5], &[3, 2, 4, 3], None).is_err()); // kernel past the image
    }

    #[test]
    fn a_block_count_that_does_not_fit_fails() {
        assert!(Geometry::new(&[1, 4, 5], vec![3, 3], vec![2, 2], None, None, None).is_err());
        assert!(Geometry::new(&[1, 5, 4], vec![3, 3], vec![2, 2], None, None, None).is_err());
    }
}
