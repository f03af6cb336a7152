//! Object detection: NonMaxSuppression, and the ROI pooling ops RoiAlign and MaxRoiPool.
//!
//! The greedy selection is sequential and its output's length depends on the data, so the node
//! runs eagerly (`shape = Eager`: a subgraph holding it is never traced) and selects on the host
//! over the evaluated boxes and scores, in float32 with ORT's arithmetic (`SuppressByIOU`), so
//! ties at the IoU threshold fall the same way. What it saves is the partition: the boxes and
//! scores come from MLX and the indices go back to MLX without the graph being cut in two.
//!
//! ROI pooling reads only the boxes on the host (they are few): where each bin's samples fall,
//! and with what weights, is worked out there with ORT's float arithmetic. MLX then gathers the
//! feature map's pixels (all channels at once) and reduces them per bin. How many pixels a bin
//! reads depends on the boxes, so these entries run eagerly too.

use std::ops::Range;

use mlx_kernels::{ops, Array, Dtype, Stream};

use crate::table::consts::{scalar, zeros};
use crate::{onnx_op, Lower, OpError, Result};

/// Greedy non-maximum suppression per batch and class: boxes scoring above `score_threshold`
/// (when given), highest score first, each kept unless its IoU with a box already kept for the
/// class exceeds `iou_threshold`, at most `max_output_boxes_per_class` a class (absent or 0:
/// none, as ORT reads it). Boxes are `[y1, x1, y2, x2]` corners in either order, or
/// `[x_center, y_center, width, height]` with `center_point_box = 1`.
#[onnx_op(
    op = "NonMaxSuppression", precision = Float32, since = 10,
    types(T = F32, I = I64),
    inputs(boxes: T, scores: T, max_output_boxes_per_class: I, iou_threshold: T, score_threshold: T),
    outputs(selected_indices: I),
    shape = Eager, claim = nms_claim,
    declines = "center_point_box other than 0 and 1 (ORT's kernel refuses them)",
    numerics = "exact: ORT's float32 IoU test. Among equal scores the lower box index goes first; ORT takes them in its std::priority_queue's order, which differs between C++ libraries (libstdc++ on Linux, libc++ on macOS). A NaN score is taken after every number"
)]
fn non_max_suppression(
    cx: &mut Lower,
    boxes: Array,
    scores: Array,
    #[host] max_output_boxes_per_class: Option<i64>,
    iou_threshold: Option<Array>,
    score_threshold: Option<Array>,
    #[attr(default = 0)] center_point_box: i64,
) -> Result<Array> {
    let s = cx.stream();
    let (b_shape, s_shape) = (boxes.shape(), scores.shape());
    let fits = b_shape.len() == 3
        && s_shape.len() == 3
        && b_shape[0] == s_shape[0]
        && b_shape[1] == s_shape[2]
        && b_shape[2] == 4;
    if !fits {
        return Err(OpError::new(format!(
            "boxes {b_shape:?} and scores {s_shape:?}: expected [batches, boxes, 4] and [batches, classes, boxes]"
        )));
    }
    let scalar = |value: Option<Array>, name: &str| -> Result<Option<f32>> {
        match value {
            None => Ok(None),
            Some(v) => match v.to_vec::<f32>(s)?.as_slice() {
                [one] => Ok(Some(*one)),
                other => Err(OpError::new(format!(
                    "{name} holds {} values; it must hold one",
                    other.len()
                ))),
            },
        }
    };
    let iou = scalar(iou_threshold, "iou_threshold")?.unwrap_or(0.0);
    if !(0.0..=1.0).contains(&iou) {
        return Err(OpError::new(format!(
            "iou_threshold {iou} must be in range [0, 1] (as ORT requires)"
        )));
    }
    let score_floor = scalar(score_threshold, "score_threshold")?;
    let limit = max_output_boxes_per_class.unwrap_or(0).max(0);
    let (batches, classes, count) = (s_shape[0], s_shape[1], s_shape[2]);
    let mut selected: Vec<i64> = Vec::new();
    if limit > 0 {
        let boxes = boxes.to_vec::<f32>(s)?;
        let scores = scores.to_vec::<f32>(s)?;
        let count = count as usize;
        for batch in 0..batches as usize {
            let corners: Vec<Corners> = boxes[batch * count * 4..(batch + 1) * count * 4]
                .chunks_exact(4)
                .map(|b| Corners::of(b, center_point_box == 1))
                .collect();
            for class in 0..classes as usize {
                let row = &scores[(batch * classes as usize + class) * count..][..count];
                for kept in select(row, &corners, score_floor, iou, limit) {
                    selected.extend([batch as i64, class as i64, kept as i64]);
                }
            }
        }
    }
    let rows = selected.len() as i64 / 3;
    Ok(Array::from_slice(&selected, &[rows, 3])?)
}

/// The kept boxes of one class, in the order kept.
fn select(
    scores: &[f32],
    boxes: &[Corners],
    floor: Option<f32>,
    iou: f32,
    limit: i64,
) -> Vec<usize> {
    let mut order: Vec<usize> = (0..scores.len())
        .filter(|&i| floor.is_none_or(|f| scores[i] > f))
        .collect();
    // Highest first, the lower index first among equals, NaN after every number.
    order.sort_by(|&a, &b| {
        let (x, y) = (scores[a], scores[b]);
        match (x.is_nan(), y.is_nan()) {
            (false, false) => y.partial_cmp(&x).unwrap_or(std::cmp::Ordering::Equal),
            (a_nan, b_nan) => a_nan.cmp(&b_nan),
        }
        .then(a.cmp(&b))
    });
    let mut kept: Vec<usize> = Vec::new();
    for candidate in order {
        if kept.len() as i64 >= limit {
            break;
        }
        if kept
            .iter()
            .all(|&k| !boxes[k].suppresses(&boxes[candidate], iou))
        {
            kept.push(candidate);
        }
    }
    kept
}

/// A box as ORT's `SuppressByIOU` reads it: each axis's (min, max).
#[derive(Debug, Clone, Copy)]
struct Corners {
    x: (f32, f32),
    y: (f32, f32),
}

impl Corners {
    fn of(b: &[f32], center: bool) -> Corners {
        if center {
            let (half_w, half_h) = (b[2] / 2.0, b[3] / 2.0);
            Corners {
                x: (b[0] - half_w, b[0] + half_w),
                y: (b[1] - half_h, b[1] + half_h),
            }
        } else {
            Corners {
                x: min_max(b[1], b[3]),
                y: min_max(b[0], b[2]),
            }
        }
    }

    /// ORT's test, in its order: no overlap on an axis, or an empty area, never suppresses.
    fn suppresses(&self, other: &Corners, iou: f32) -> bool {
        let overlap = |a: (f32, f32), b: (f32, f32)| (cpp_max(a.0, b.0), cpp_min(a.1, b.1));
        let (x_lo, x_hi) = overlap(self.x, other.x);
        if x_hi <= x_lo {
            return false;
        }
        let (y_lo, y_hi) = overlap(self.y, other.y);
        if y_hi <= y_lo {
            return false;
        }
        let intersection = (x_hi - x_lo) * (y_hi - y_lo);
        if intersection <= 0.0 {
            return false;
        }
        let area = |c: &Corners| (c.x.1 - c.x.0) * (c.y.1 - c.y.0);
        let (a1, a2) = (area(self), area(other));
        let union = a1 + a2 - intersection;
        if a1 <= 0.0 || a2 <= 0.0 || union <= 0.0 {
            return false;
        }
        intersection / union > iou
    }
}

/// Bilinear ROI pooling: each box (`rois [R, 4]`, `x1, y1, x2, y2` in input coordinates
/// scaled by `spatial_scale`, on image `batch_indices[r]`) is cut into `output_height ×
/// output_width` bins, each sampled on a `sampling_ratio²` grid (0: as many samples as the bin
/// is wide and high, rounded up), and the samples averaged or, in `max` mode, ORT's maximum
/// over each sample's weighted corners taken. Half-pixel coordinates (opset 16's default) shift
/// the box by half a pixel and let it be smaller than one.
#[allow(clippy::too_many_arguments)] // three inputs and six attributes, as ONNX has them
#[onnx_op(
    op = "RoiAlign", precision = Float32, since = 10, types(T = F32 | F16, I = I64),
    inputs(X: T, rois: T, batch_indices: I), outputs(Y: T),
    shape = Eager, claim = roi_align_claim,
    declines = "a mode other than avg and max; a negative sampling_ratio or output size (ORT's kernel refuses them)",
    numerics = "ORT's sample positions and bilinear weights, worked out on the host in float32 as ORT's kernel does; avg mode sums a bin's samples in MLX's order (ORT's running sum may differ in the last bit); max mode is ORT's maximum over each sample's weighted corners. float16 runs in float32, as ORT runs it (through casts it inserts)"
)]
fn roi_align(
    cx: &mut Lower,
    x: Array,
    rois: Array,
    batch_indices: Array,
    #[attr(default = "avg")] mode: String,
    #[attr(default = 1)] output_height: i64,
    #[attr(default = 1)] output_width: i64,
    #[attr(default = 0)] sampling_ratio: i64,
    #[attr(default = 1.0)] spatial_scale: f32,
    #[attr(default = "half_pixel", since = 16)] coordinate_transformation_mode: String,
) -> Result<Array> {
    let s = cx.stream();
    let [n, c, h, w] = feature_map_shape(&x)?;
    let (r_shape, b_shape) = (rois.shape(), batch_indices.shape());
    if r_shape.len() != 2 || r_shape[1] != 4 || b_shape.len() != 1 || b_shape[0] != r_shape[0] {
        return Err(OpError::new(format!(
            "rois {r_shape:?} and batch_indices {b_shape:?}: expected [num_rois, 4] and [num_rois]"
        )));
    }
    let pool = Pooling {
        bins: [output_height, output_width],
        image: [h, w],
    };
    let boxes = ops::astype(&rois, Dtype::F32, s)?.to_vec::<f32>(s)?;
    if boxes.iter().any(|v| !v.is_finite()) {
        return Err(OpError::new(
            "All 'rois' values must be finite (as ORT requires)",
        ));
    }
    let images = checked_images(&batch_indices.to_vec::<i64>(s)?, n)?;
    let out_shape = [r_shape[0], c, output_height, output_width];
    if out_shape.contains(&0) {
        return zeros(&out_shape, x.dtype(), s);
    }
    let geometry = AlignGeometry {
        spatial_scale,
        half_pixel: cx.node().since_version() >= 16
            && coordinate_transformation_mode == "half_pixel",
        sampling_ratio,
    };
    let boxes: Vec<AlignBox> = boxes
        .chunks_exact(4)
        .map(|b| geometry.place(b, &pool))
        .collect::<Result<_>>()?;
    if h == 0 || w == 0 {
        // Nothing to read: every sample is 0 (ORT's kernel reads outside the empty image for
        // samples within a pixel of it).
        return zeros(&out_shape, x.dtype(), s);
    }
    let max_mode = mode.eq_ignore_ascii_case("max");
    let pixels = pixel_rows(&x, s)?;
    let slots: Vec<i64> = boxes
        .iter()
        .map(|b| b.samples().saturating_mul(4))
        .collect();
    let mut pooled = Vec::new();
    for group in roi_groups(&slots, pool.bin_count() * c)? {
        let table = SampleTable::build(&boxes[group.clone()], &images[group], &pool, [h, w]);
        pooled.push(table.pool(&pixels, max_mode, s)?);
    }
    let pooled = ops::concatenate(&pooled, 0, s)?;
    channels_first(&pooled, &out_shape, x.dtype(), s)
}

fn roi_align_claim(node: &crate::Node) -> crate::Verdict {
    let mode = node.attr_or("mode", "avg".to_string()).to_ascii_lowercase();
    if mode != "avg" && mode != "max" {
        return crate::Verdict::decline(format!("mode {mode:?} is neither avg nor max"));
    }
    let negative = ["sampling_ratio", "output_height", "output_width"]
        .into_iter()
        .find(|name| node.attr_or(name, 0i64) < 0);
    match negative {
        Some(name) => {
            crate::Verdict::decline(format!("{name} is negative (ORT's kernel refuses it)"))
        }
        None => crate::Verdict::Claim,
    }
}

/// Max pooling over each box's bins (Fast R-CNN): `rois [R, 5]` holds `batch, x1, y1, x2, y2`;
/// the corners are scaled by `spatial_scale` and rounded to pixels, the box is cut into
/// `pooled_shape` bins of whole pixels, and each bin's maximum taken (0 for an empty bin).
#[onnx_op(
    op = "MaxRoiPool", precision = Float32, since = 1, types(T = F32),
    inputs(X: T, rois: T), outputs(Y: T),
    shape = Eager, claim = max_roi_pool_claim,
    declines = "pooled_shape other than two positive sizes; spatial_scale not positive (ORT's kernel refuses both); more than 2^27 bins a box",
    numerics = "exact: ORT's bins (float32 scaling and rounding) and its running maximum, which starts at the lowest float (a bin of -inf gives -3.4e38) and lets a NaN through only as the bin's last pixel"
)]
fn max_roi_pool(
    cx: &mut Lower,
    x: Array,
    rois: Array,
    #[attr] pooled_shape: Vec<i64>,
    #[attr(default = 1.0)] spatial_scale: f32,
) -> Result<Array> {
    let s = cx.stream();
    let [n, c, h, w] = feature_map_shape(&x)?;
    let r_shape = rois.shape();
    if r_shape.len() != 2 || r_shape[1] != 5 {
        return Err(OpError::new(format!(
            "rois has shape {r_shape:?}: expected [num_rois, 5]"
        )));
    }
    let &[pooled_h, pooled_w] = pooled_shape.as_slice() else {
        return Err(OpError::new(format!(
            "pooled_shape {pooled_shape:?} must hold 2 sizes"
        )));
    };
    let pool = Pooling {
        bins: [pooled_h, pooled_w],
        image: [h, w],
    };
    // Each box keeps its bins' row and column ranges on the host, and its bins are gathered
    // at once: both must stay bounded whatever the sizes, or an allocation aborts the process.
    let edges = (pooled_h.saturating_add(pooled_w)).saturating_mul(r_shape[0]);
    let per_box = pool.bin_count().saturating_mul(c);
    if edges > GATHER_LIMIT || per_box > GATHER_LIMIT {
        return Err(OpError::new(format!(
            "pooled_shape {pooled_shape:?} over {} boxes of {c} channels pools {per_box} values a \
             box and places {edges} bin edges, beyond the EP's {GATHER_LIMIT} at once; run the \
             node on ORT's CPU EP",
            r_shape[0]
        )));
    }
    let boxes: Vec<PoolBox> = rois
        .to_vec::<f32>(s)?
        .chunks_exact(5)
        .map(|b| PoolBox::place(b, spatial_scale, n, &pool))
        .collect::<Result<_>>()?;
    let out_shape = [r_shape[0], c, pooled_h, pooled_w];
    if out_shape.contains(&0) {
        return zeros(&out_shape, x.dtype(), s);
    }
    let pixels = pixel_rows(&x, s)?;
    let slots: Vec<i64> = boxes.iter().map(|b| b.bin_area()).collect();
    let mut pooled = Vec::new();
    for group in roi_groups(&slots, pool.bin_count() * c)? {
        pooled.push(bin_maxima(&boxes[group], &pool, &pixels, s)?);
    }
    let pooled = ops::concatenate(&pooled, 0, s)?;
    channels_first(&pooled, &out_shape, x.dtype(), s)
}

fn max_roi_pool_claim(node: &crate::Node) -> crate::Verdict {
    let shape = node.attr_as::<Vec<i64>>("pooled_shape").unwrap_or_default();
    if shape.len() != 2 || shape.iter().any(|&d| d <= 0) {
        return crate::Verdict::decline(format!(
            "pooled_shape {shape:?} is not two positive sizes (ORT's kernel refuses it)"
        ));
    }
    if shape[0].saturating_mul(shape[1]) > GATHER_LIMIT {
        return crate::Verdict::decline(format!(
            "pooled_shape {shape:?} has more than {GATHER_LIMIT} bins a box"
        ));
    }
    let scale = node.attr_or("spatial_scale", 1.0f32);
    if scale.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
        return crate::Verdict::decline(format!(
            "spatial_scale {scale} is not positive (ORT's kernel refuses it)"
        ));
    }
    crate::Verdict::Claim
}

/// The values gathered at once, at most: boxes are pooled in groups that stay under it.
const GATHER_LIMIT: i64 = 1 << 27;

/// X's `[N, C, H, W]`, which both ROI pooling ops require.
fn feature_map_shape(x: &Array) -> Result<[i64; 4]> {
    <[i64; 4]>::try_from(x.shape().as_slice()).map_err(|_| {
        OpError::new(format!(
            "X has shape {:?}: expected [N, C, H, W]",
            x.shape()
        ))
    })
}

/// Each box's image, checked as ORT checks it.
fn checked_images(indices: &[i64], images: i64) -> Result<Vec<i64>> {
    match indices.iter().position(|&b| !(0..images).contains(&b)) {
        Some(at) => Err(OpError::new(format!(
            "batch_indices value {} at index {at} is out of range [0, {images})",
            indices[at]
        ))),
        None => Ok(indices.to_vec()),
    }
}

/// X `[N, C, H, W]` as float32 rows of channels, one per pixel (`[N·H·W, C]`): a gather of
/// rows then reads every channel of a pixel at once.
fn pixel_rows(x: &Array, s: &Stream) -> Result<Array> {
    let [n, c, h, w] = feature_map_shape(x)?;
    let last = ops::transpose(&ops::astype(x, Dtype::F32, s)?, &[0, 2, 3, 1], s)?;
    Ok(ops::reshape(&last, &[n * h * w, c], s)?)
}

/// `[R, bins, C]` float32 back to `[R, C, bins_h, bins_w]` in the output's dtype.
fn channels_first(pooled: &Array, shape: &[i64; 4], dtype: Dtype, s: &Stream) -> Result<Array> {
    let [r, c, bh, bw] = *shape;
    let grid = ops::reshape(pooled, &[r, bh, bw, c], s)?;
    Ok(ops::astype(
        &ops::transpose(&grid, &[0, 3, 1, 2], s)?,
        dtype,
        s,
    )?)
}

/// Consecutive boxes grouped so that each group's gather (its boxes times the most pixel slots
/// one of them needs, times `per_slot` values) stays under [`GATHER_LIMIT`].
fn roi_groups(slots: &[i64], per_slot: i64) -> Result<Vec<Range<usize>>> {
    let mut groups = Vec::new();
    let (mut start, mut widest) = (0usize, 0i64);
    for (i, &need) in slots.iter().enumerate() {
        let one = need.saturating_mul(per_slot);
        if one > GATHER_LIMIT {
            return Err(OpError::new(format!(
                "box {i} reads {need} pixels a bin; pooling it would gather {one} values at once \
                 (more than {GATHER_LIMIT}); give it a sampling_ratio or a smaller box"
            )));
        }
        let wider = widest.max(need);
        if (i - start + 1) as i64 * wider * per_slot > GATHER_LIMIT {
            groups.push(start..i);
            (start, widest) = (i, need);
        } else {
            widest = wider;
        }
    }
    if start < slots.len() {
        groups.push(start..slots.len());
    }
    Ok(groups)
}

/// A pooling's bins per box and the image they read.
struct Pooling {
    bins: [i64; 2],
    image: [i64; 2],
}

impl Pooling {
    fn bin_count(&self) -> i64 {
        self.bins[0] * self.bins[1]
    }
}

/// How RoiAlign places boxes on the feature map.
struct AlignGeometry {
    spatial_scale: f32,
    half_pixel: bool,
    sampling_ratio: i64,
}

/// One RoiAlign box on the feature map, as ORT's kernel works it out (float32).
#[derive(Debug, Clone, Copy)]
struct AlignBox {
    start: [f32; 2],
    bin: [f32; 2],
    grid: [i64; 2],
}

impl AlignGeometry {
    fn place(&self, corners: &[f32], pool: &Pooling) -> Result<AlignBox> {
        let shift = if self.half_pixel { 0.5 } else { 0.0 };
        let at = |i: usize| corners[i] * self.spatial_scale - shift;
        let (start, end) = ([at(1), at(0)], [at(3), at(2)]);
        let mut bin = [0.0f32; 2];
        let mut grid = [0i64; 2];
        for axis in 0..2 {
            let mut extent = end[axis] - start[axis];
            if !self.half_pixel {
                extent = cpp_max(extent, 1.0);
            }
            let bins = pool.bins[axis] as f32;
            bin[axis] = extent / bins;
            grid[axis] = if self.sampling_ratio > 0 {
                self.sampling_ratio
            } else {
                // C++ truncates the ceiling to int64; past its range that is undefined there.
                (extent / bins).ceil() as i64
            };
        }
        if grid[0].checked_mul(grid[1]).is_none_or(|count| count < 0) {
            return Err(OpError::new(format!(
                "a box of {grid:?} samples a bin (negative or past int64): ORT's kernel fails with an integer overflow"
            )));
        }
        Ok(AlignBox { start, bin, grid })
    }
}

impl AlignBox {
    /// Samples a bin takes (none when either grid side is not positive).
    fn samples(&self) -> i64 {
        if self.grid[0] > 0 && self.grid[1] > 0 {
            self.grid[0] * self.grid[1]
        } else {
            0
        }
    }

    /// What ORT divides an average by.
    fn divisor(&self) -> f32 {
        (self.grid[0] * self.grid[1]).max(1) as f32
    }

    /// Sample `(iy, ix)` of bin `(ph, pw)`, as ORT places it.
    fn sample(&self, bin: [i64; 2], at: [i64; 2]) -> [f32; 2] {
        std::array::from_fn(|axis| {
            let within = (at[axis] as f32 + 0.5) * self.bin[axis] / self.grid[axis] as f32;
            self.start[axis] + bin[axis] as f32 * self.bin[axis] + within
        })
    }
}

/// ORT's bilinear read of `point` (y, x) on an `image` (H, W): four pixel offsets and weights,
/// all zero outside `[-1, H] × [-1, W]`.
fn bilinear_taps(point: [f32; 2], image: [i64; 2]) -> ([i64; 4], [f32; 4]) {
    let outside = (0..2).any(|a| point[a] < -1.0 || point[a] > image[a] as f32);
    if outside {
        return ([0; 4], [0.0; 4]);
    }
    let mut low = [0i64; 2];
    let mut high = [0i64; 2];
    let mut frac = [0.0f32; 2];
    for axis in 0..2 {
        let mut v = if point[axis] <= 0.0 { 0.0 } else { point[axis] };
        // `as` saturates where C++'s conversion is undefined (NaN, past int64).
        low[axis] = (v as i64).clamp(0, image[axis] - 1);
        if low[axis] >= image[axis] - 1 {
            high[axis] = low[axis];
            v = low[axis] as f32;
        } else {
            high[axis] = low[axis] + 1;
        }
        frac[axis] = v - low[axis] as f32;
    }
    let [ly, lx] = frac;
    let (hy, hx) = (1.0 - ly, 1.0 - lx);
    let width = image[1];
    (
        [
            low[0] * width + low[1],
            low[0] * width + high[1],
            high[0] * width + low[1],
            high[0] * width + high[1],
        ],
        [hy * hx, hy * lx, ly * hx, ly * lx],
    )
}

/// A group of boxes' samples laid out for one gather: `[boxes, bins, slots, 4 corners]`, where
/// a box with fewer samples than the widest pads with dead slots.
struct SampleTable {
    boxes: i64,
    bins: i64,
    slots: i64,
    pixels: Vec<i32>,
    weights: Vec<f32>,
    live: Vec<bool>,
    divisors: Vec<f32>,
    /// Whether each box takes any sample (a box that takes none pools to 0).
    sampled: Vec<bool>,
}

impl SampleTable {
    fn build(boxes: &[AlignBox], images: &[i64], pool: &Pooling, image: [i64; 2]) -> SampleTable {
        let slots = boxes.iter().map(AlignBox::samples).max().unwrap_or(0);
        let bins = pool.bin_count();
        let size = (boxes.len() as i64 * bins * slots) as usize;
        let mut table = SampleTable {
            boxes: boxes.len() as i64,
            bins,
            slots,
            pixels: Vec::with_capacity(size * 4),
            weights: Vec::with_capacity(size * 4),
            live: Vec::with_capacity(size),
            divisors: boxes.iter().map(AlignBox::divisor).collect(),
            sampled: boxes.iter().map(|b| b.samples() > 0).collect(),
        };
        let plane = image[0] * image[1];
        for (b, &img) in boxes.iter().zip(images) {
            let first_pixel = img * plane;
            for ph in 0..pool.bins[0] {
                for pw in 0..pool.bins[1] {
                    let mut taken = 0;
                    for iy in 0..b.grid[0].max(0) {
                        for ix in 0..b.grid[1].max(0) {
                            let (at, weights) = bilinear_taps(b.sample([ph, pw], [iy, ix]), image);
                            table.pixels.extend(at.map(|p| (first_pixel + p) as i32));
                            table.weights.extend(weights);
                            table.live.push(true);
                            taken += 1;
                        }
                    }
                    for _ in taken..slots {
                        table.pixels.extend([first_pixel as i32; 4]);
                        table.weights.extend([0.0; 4]);
                        table.live.push(false);
                    }
                }
            }
        }
        table
    }

    /// `[boxes, bins, C]`: each bin's average or ORT's maximum of its samples.
    fn pool(&self, pixel_rows: &Array, max_mode: bool, s: &Stream) -> Result<Array> {
        let (r, bins, slots) = (self.boxes, self.bins, self.slots);
        let c = pixel_rows.shape()[1];
        if slots == 0 {
            return zeros(&[r, bins, c], Dtype::F32, s);
        }
        let index = Array::from_slice(&self.pixels, &[self.pixels.len() as i64])?;
        let values = ops::reshape(
            &ops::take(pixel_rows, &index, 0, s)?,
            &[r, bins, slots, 4, c],
            s,
        )?;
        let weights = Array::from_slice(&self.weights, &[r, bins, slots, 4, 1])?;
        let weighted = ops::multiply(&values, &weights, s)?;
        // A 0-d index takes corner k and drops the corner axis.
        let corner =
            |k: i32| -> Result<Array> { Ok(ops::take(&weighted, &Array::scalar(k)?, 3, s)?) };
        let live = Array::from_slice(&self.live, &[r, bins, slots, 1])?;
        // Each sample folds its corners left to right, as ORT's expression does.
        let fold = |step: &dyn Fn(&Array, &Array) -> Result<Array>| -> Result<Array> {
            (1..4).try_fold(corner(0)?, |acc, k| step(&acc, &corner(k)?))
        };
        if !max_mode {
            let sample = fold(&|a, b| Ok(ops::add(a, b, s)?))?;
            let zero = scalar(0.0, Dtype::F32, s)?;
            let total = ops::sum(&ops::where_(&live, &sample, &zero, s)?, &[2], false, s)?;
            let divisors = Array::from_slice(&self.divisors, &[r, 1, 1])?;
            return Ok(ops::divide(&total, &divisors, s)?);
        }
        // ORT folds with std::max (`a < b ? b : a`) over the corners, then over the samples:
        // a NaN first corner makes a sample NaN, a NaN sample is passed over, and only a NaN
        // first sample survives to the output.
        let sample = fold(&|a, b| cpp_maximum(a, b, s))?;
        let is_nan = ops::isnan(&sample, s)?;
        let counted = ops::logical_and(&live, &ops::logical_not(&is_nan, s)?, s)?;
        let lowest = scalar(f64::NEG_INFINITY, Dtype::F32, s)?;
        let best = ops::max(&ops::where_(&counted, &sample, &lowest, s)?, &[2], false, s)?;
        let first = ops::take(&sample, &Array::scalar(0i32)?, 2, s)?;
        let nan = scalar(f64::NAN, Dtype::F32, s)?;
        let best = ops::where_(&ops::isnan(&first, s)?, &nan, &best, s)?;
        // A box whose grid is empty pools to 0.
        let sampled = Array::from_slice(&self.sampled, &[r, 1, 1])?;
        Ok(ops::where_(
            &sampled,
            &best,
            &scalar(0.0, Dtype::F32, s)?,
            s,
        )?)
    }
}

/// `std::max(a, b)` elementwise: `b` only where `a < b`.
fn cpp_maximum(a: &Array, b: &Array, s: &Stream) -> Result<Array> {
    Ok(ops::where_(&ops::less(a, b, s)?, b, a, s)?)
}

/// One MaxRoiPool box on the feature map, as ORT's kernel works it out: each bin row's and
/// column's pixel range `[start, end)`, clamped to the image.
#[derive(Debug, Clone)]
struct PoolBox {
    image: i64,
    rows: Vec<(i64, i64)>,
    cols: Vec<(i64, i64)>,
}

impl PoolBox {
    fn place(corners: &[f32], spatial_scale: f32, images: i64, pool: &Pooling) -> Result<PoolBox> {
        // C++'s int conversions, which saturate here (as on ARM64) where they are undefined.
        let image = i64::from(corners[0] as i32);
        if !corners[0].is_finite() || !(0..images).contains(&image) {
            return Err(OpError::new(format!(
                "a box's batch index {} is outside [0, {images})",
                corners[0]
            )));
        }
        let pixel = |v: f32| i64::from((v * spatial_scale).round() as i32);
        let ranges = |axis: usize, first: f32, last: f32| -> Vec<(i64, i64)> {
            let start = pixel(first);
            let size = (pixel(last) - start + 1).max(1);
            let bins = pool.bins[axis];
            let bin = size as f32 / bins as f32;
            let clamp = |v: i64| (v + start).clamp(0, pool.image[axis]);
            (0..bins)
                .map(|i| {
                    let from = (i as f32 * bin).floor() as i64;
                    let to = ((i + 1) as f32 * bin).ceil() as i64;
                    (clamp(from), clamp(to))
                })
                .collect()
        };
        Ok(PoolBox {
            image,
            rows: ranges(0, corners[2], corners[4]),
            cols: ranges(1, corners[1], corners[3]),
        })
    }

    /// The widest bin's rows and columns (bins of one box differ by a pixel at most).
    fn span(&self) -> [i64; 2] {
        let widest = |r: &[(i64, i64)]| r.iter().map(|(a, b)| (b - a).max(0)).max().unwrap_or(0);
        [widest(&self.rows), widest(&self.cols)]
    }

    fn bin_area(&self) -> i64 {
        let [h, w] = self.span();
        h * w
    }
}

/// `[boxes, bins, C]`: ORT's running maximum over each bin of a group of boxes. The bins'
/// pixels are gathered into `[boxes, bins, slots, C]` (slots row-major over the widest bin,
/// the order ORT scans in), dead slots masked out.
fn bin_maxima(boxes: &[PoolBox], pool: &Pooling, pixel_rows: &Array, s: &Stream) -> Result<Array> {
    let (r, bins, c) = (boxes.len() as i64, pool.bin_count(), pixel_rows.shape()[1]);
    let [span_h, span_w] = boxes
        .iter()
        .map(PoolBox::span)
        .fold([0, 0], |a, b| [a[0].max(b[0]), a[1].max(b[1])]);
    let slots = span_h * span_w;
    if slots == 0 {
        return zeros(&[r, bins, c], Dtype::F32, s);
    }
    let [h, w] = pool.image;
    let size = (r * bins * slots) as usize;
    let (mut pixels, mut live) = (Vec::with_capacity(size), Vec::with_capacity(size));
    let mut last_slot = Vec::with_capacity((r * bins) as usize);
    for b in boxes {
        let first_pixel = b.image * h * w;
        for &(row0, row1) in &b.rows {
            for &(col0, col1) in &b.cols {
                let (rows, cols) = ((row1 - row0).max(0), (col1 - col0).max(0));
                // Where the scan ends; an empty bin has none.
                last_slot.push(if rows * cols == 0 {
                    -1
                } else {
                    ((rows - 1) * span_w + cols - 1) as i32
                });
                for dy in 0..span_h {
                    for dx in 0..span_w {
                        let inside = dy < rows && dx < cols;
                        live.push(inside);
                        let at = if inside {
                            (row0 + dy) * w + col0 + dx
                        } else {
                            0
                        };
                        pixels.push((first_pixel + at) as i32);
                    }
                }
            }
        }
    }
    let index = Array::from_slice(&pixels, &[pixels.len() as i64])?;
    let values = ops::reshape(
        &ops::take(pixel_rows, &index, 0, s)?,
        &[r, bins, slots, c],
        s,
    )?;
    let live = Array::from_slice(&live, &[r, bins, slots, 1])?;
    // ORT's update is `y = x < y ? y : x` from the lowest float: a NaN pixel replaces y and the
    // next pixel replaces the NaN, so only the pixels after the last NaN count (and the lowest
    // float only when there was none); a NaN last pixel is the answer.
    let slot_ids = ops::reshape(
        &ops::arange(0.0, slots as f64, 1.0, Dtype::I32, s)?,
        &[1, 1, slots, 1],
        s,
    )?;
    let nan_at = ops::logical_and(&live, &ops::isnan(&values, s)?, s)?;
    let none = Array::scalar(-1i32)?;
    let last_nan = ops::max(&ops::where_(&nan_at, &slot_ids, &none, s)?, &[2], true, s)?;
    let counted = ops::logical_and(&live, &ops::greater(&slot_ids, &last_nan, s)?, s)?;
    let float = |v: f64| scalar(v, Dtype::F32, s);
    let most = ops::max(
        &ops::where_(&counted, &values, &float(f64::NEG_INFINITY)?, s)?,
        &[2],
        false,
        s,
    )?;
    let last_nan = ops::squeeze(&last_nan, &[2], s)?;
    let no_nan = ops::less(&last_nan, &Array::scalar(0i32)?, s)?;
    let start = ops::where_(
        &no_nan,
        &float(f64::from(f32::MIN))?,
        &float(f64::NEG_INFINITY)?,
        s,
    )?;
    let most = ops::maximum(&most, &start, s)?;
    let last_slot = Array::from_slice(&last_slot, &[r, bins, 1])?;
    let filled = ops::greater_equal(&last_slot, &Array::scalar(0i32)?, s)?;
    let nan_last = ops::logical_and(&ops::equal(&last_nan, &last_slot, s)?, &filled, s)?;
    let most = ops::where_(&nan_last, &float(f64::NAN)?, &most, s)?;
    Ok(ops::where_(&filled, &most, &float(0.0)?, s)?)
}

/// ORT's MaxMin: `(rhs, lhs)` when `lhs >= rhs`, else `(lhs, rhs)` (NaN compares false).
fn min_max(lhs: f32, rhs: f32) -> (f32, f32) {
    if lhs >= rhs {
        (rhs, lhs)
    } else {
        (lhs, rhs)
    }
}

/// `std::max(a, b)`: `b` only when `a < b`.
fn cpp_max(a: f32, b: f32) -> f32 {
    if a < b {
        b
    } else {
        a
    }
}

/// `std::min(a, b)`: `b` only when `b < a`.
fn cpp_min(a: f32, b: f32) -> f32 {
    if b < a {
        b
    } else {
        a
    }
}

fn nms_claim(node: &crate::Node) -> crate::Verdict {
    match node.attr_or("center_point_box", 0i64) {
        0 | 1 => crate::Verdict::Claim,
        other => crate::Verdict::decline(format!(
            "center_point_box = {other}; ORT's kernel takes 0 or 1"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bilinear_taps_clamp_to_the_last_pixel_and_drop_points_outside() {
        let (at, weights) = bilinear_taps([0.5, 1.25], [4, 5]);
        assert_eq!(at, [1, 2, 6, 7]);
        assert_eq!(weights, [0.375, 0.125, 0.375, 0.125]);
        // Past the last row (but within a pixel of it): both rows are the last one.
        let (at, weights) = bilinear_taps([3.5, 0.0], [4, 5]);
        assert_eq!(at, [15, 16, 15, 16]);
        assert_eq!(weights, [1.0, 0.0, 0.0, 0.0]);
        assert_eq!(bilinear_taps([4.01, 0.0], [4, 5]), ([0; 4], [0.0; 4]));
        assert_eq!(bilinear_taps([0.0, -1.5], [4, 5]), ([0; 4], [0.0; 4]));
    }

    #[test]
    fn adaptive_sampling_takes_a_sample_per_pixel_of_bin() {
        let pool = Pooling {
            bins: [2, 2],
            image: [8, 8],
        };
        let geometry = AlignGeometry {
            spatial_scale: 1.0,
            half_pixel: true,
            sampling_ratio: 0,
        };
        let b = geometry.place(&[0.5, 0.5, 5.5, 3.5], &pool).unwrap();
        assert_eq!((b.start, b.bin, b.grid), ([0.0, 0.0], [1.5, 2.5], [2, 3]));
        assert_eq!(b.sample([1, 0], [1, 2]), [1.5 + 1.125, 2.5 * 2.5 / 3.0]);
        // Output half-pixel boxes are at least a pixel wide.
        let legacy = AlignGeometry {
            half_pixel: false,
            ..geometry
        };
        assert_eq!(
            legacy.place(&[2.0, 2.0, 2.0, 2.0], &pool).unwrap().bin,
            [0.5, 0.5]
        );
    }

    #[test]
    fn roi_groups_stay_under_the_gather_limit() {
        let per_slot = GATHER_LIMIT / 10;
        assert_eq!(roi_groups(&[2, 3, 3, 4], per_slot).unwrap(), [0..3, 3..4]);
        assert!(roi_groups(&[11], per_slot).is_err());
        assert!(roi_groups(&[], per_slot).unwrap().is_empty());
    }

    #[test]
    fn max_roi_pool_bins_are_whole_pixels_clamped_to_the_image() {
        let pool = Pooling {
            bins: [2, 3],
            image: [6, 7],
        };
        let b = PoolBox::place(&[1.0, 0.0, 1.0, 3.0, 4.0], 1.0, 2, &pool).unwrap();
        assert_eq!(b.image, 1);
        assert_eq!(b.rows, [(1, 3), (3, 5)]);
        assert_eq!(b.cols, [(0, 2), (1, 3), (2, 4)]);
        assert_eq!(b.span(), [2, 2]);
        let past = PoolBox::place(&[0.0, 5.6, -3.0, 9.0, -2.2], 1.0, 2, &pool).unwrap();
        assert_eq!(past.rows, [(0, 0), (0, 0)]);
        assert!(PoolBox::place(&[2.0, 0.0, 0.0, 1.0, 1.0], 1.0, 2, &pool).is_err());
        assert!(PoolBox::place(&[f32::NAN, 0.0, 0.0, 1.0, 1.0], 1.0, 2, &pool).is_err());
    }

    fn corners(b: [f32; 4]) -> Corners {
        Corners::of(&b, false)
    }

    #[test]
    fn overlapping_boxes_above_the_threshold_are_suppressed() {
        let a = corners([0.0, 0.0, 1.0, 1.0]);
        let b = corners([0.0, 0.1, 1.0, 1.1]); // IoU 0.9 / 1.1
        assert!(a.suppresses(&b, 0.5));
        assert!(!a.suppresses(&b, 0.9));
        // Corners in either order are the same box.
        assert!(corners([1.0, 1.0, 0.0, 0.0]).suppresses(&a, 0.99));
        // Touching edges do not overlap.
        assert!(!a.suppresses(&corners([0.0, 1.0, 1.0, 2.0]), 0.0));
    }

    #[test]
    fn selection_takes_the_best_first_and_stops_at_the_limit() {
        let boxes = [
            corners([0.0, 0.0, 1.0, 1.0]),
            corners([0.0, 0.1, 1.0, 1.1]),
            corners([0.0, 5.0, 1.0, 6.0]),
        ];
        assert_eq!(select(&[0.5, 0.9, 0.7], &boxes, None, 0.5, 3), vec![1, 2]);
        assert_eq!(select(&[0.5, 0.9, 0.7], &boxes, None, 0.5, 1), vec![1]);
        assert_eq!(select(&[0.5, 0.9, 0.7], &boxes, Some(0.8), 0.5, 3), vec![1]);
        assert_eq!(
            select(&[0.7, 0.7, f32::NAN], &boxes, None, 0.95, 3),
            vec![0, 1, 2]
        );
    }
}
