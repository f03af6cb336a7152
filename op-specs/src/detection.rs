//! Object detection post-processing: NonMaxSuppression.
//!
//! The greedy selection is sequential and its output's length depends on the data, so the node
//! runs eagerly (`shape = Eager`: a subgraph holding it is never traced) and selects on the host
//! over the evaluated boxes and scores, in float32 with ORT's arithmetic (`SuppressByIOU`), so
//! ties at the IoU threshold fall the same way. What it saves is the partition: the boxes and
//! scores come from MLX and the indices go back to MLX without the graph being cut in two.

use mlx_kernels::Array;

use crate::{onnx_op, Lower, OpError, Result};

/// Greedy non-maximum suppression per batch and class: boxes scoring above `score_threshold`
/// (when given), highest score first, each kept unless its IoU with a box already kept for the
/// class exceeds `iou_threshold`, at most `max_output_boxes_per_class` a class (absent or 0:
/// none, as ORT reads it). Boxes are `[y1, x1, y2, x2]` corners in either order, or
/// `[x_center, y_center, width, height]` with `center_point_box = 1`.
#[onnx_op(
    op = "NonMaxSuppression", since = 10,
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
