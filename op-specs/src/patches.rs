//! Images taken apart into sliding blocks and put back together: Col2Im.
//!
//! Which pixel each block element lands on depends on shapes alone, so the host works the
//! positions out once per shape and MLX adds every column into the image with one scatter-add.

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
        let k: i64 = block.iter().product();
        if rows % k != 0 {
            return fail(format!(
                "input has {rows} rows: not a multiple of the block's {k} elements"
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

    #[test]
    fn a_block_count_that_does_not_fit_fails() {
        assert!(Geometry::new(&[1, 4, 5], vec![3, 3], vec![2, 2], None, None, None).is_err());
        assert!(Geometry::new(&[1, 5, 4], vec![3, 3], vec![2, 2], None, None, None).is_err());
    }
}
