//! Unique: the distinct elements (or slices along an axis) of a tensor.
//!
//! How many there are depends on the data, so the node runs eagerly (`shape = Eager`): the input
//! is read on the host, grouped there, and the outputs are gathered from the input on MLX by the
//! first occurrence of each group. Equality is ORT's: its kernel keys a `std::map` by `<`, so
//! `-0.0` and `0.0` are one value (the first seen is kept) and slices compare lexicographically.

use std::cmp::Ordering;

use mlx_kernels::{ops, Array, Dtype};

use crate::shape::normalise_axis;
use crate::{onnx_op, Lower, OpError, Result};

/// The distinct values of the flattened input (no `axis`) or the distinct slices along `axis`,
/// ascending (`sorted = 1`) or in order of first occurrence (any other value, as ORT reads it),
/// with each one's first index, every element's group, and each group's size.
#[onnx_op(
    op = "Unique", since = 11,
    types(T = F32 | I64 | I8, I = I64),
    inputs(X: T),
    outputs(Y: T, indices?: I, inverse_indices?: I, counts?: I),
    shape = Eager,
    numerics = "exact. -0.0 and 0.0 are one value, as in ORT's ordered map; NaN is one value above every number (ORT's map has no order for NaN, so its grouping of NaNs depends on the insertion order)"
)]
fn unique(
    cx: &mut Lower,
    x: Array,
    #[attr] axis: Option<i64>,
    #[attr(default = 1)] sorted: i64,
) -> Result<Vec<Array>> {
    let s = cx.stream();
    let (source, axis) = match axis {
        None => (ops::reshape(&x, &[x.size() as i64], s)?, 0),
        Some(axis) => {
            let axis = normalise_axis(axis, x.ndim())?;
            (x.clone(), axis)
        }
    };
    let groups = match x.dtype() {
        Dtype::F32 => group_slices(&slices_of::<f32>(&source, axis, cx)?, float_order),
        Dtype::I64 => group_slices(&slices_of::<i64>(&source, axis, cx)?, Ord::cmp),
        Dtype::I8 => group_slices(&slices_of::<i8>(&source, axis, cx)?, Ord::cmp),
        other => {
            return Err(OpError::new(format!(
                "Unique of {other:?} is not implemented"
            )))
        }
    };
    let groups = if sorted == 1 {
        groups
    } else {
        groups.in_first_occurrence_order()
    };
    let vector = |values: &[i64]| Array::from_slice(values, &[values.len() as i64]);
    let first = vector(&groups.first)?;
    Ok(vec![
        ops::take(&source, &first, axis as i32, s)?,
        first,
        vector(&groups.inverse)?,
        vector(&groups.counts)?,
    ])
}

/// ORT's `<` on floats made total: numbers by value with `-0.0 == 0.0`, NaN above them all.
fn float_order(a: &f32, b: &f32) -> Ordering {
    a.partial_cmp(b)
        .unwrap_or_else(|| a.is_nan().cmp(&b.is_nan()))
}

/// The input's slices along `axis`, each in row-major order (the layout ORT compares).
fn slices_of<T: mlx_kernels::Element>(x: &Array, axis: usize, cx: &Lower) -> Result<Vec<Vec<T>>> {
    let s = cx.stream();
    let count = x.shape()[axis] as usize;
    let mut axes: Vec<i32> = (0..x.ndim() as i32).collect();
    axes.remove(axis);
    axes.insert(0, axis as i32);
    let leading = ops::transpose(x, &axes, s)?;
    let values = leading.to_vec::<T>(s)?;
    let width = values.len().checked_div(count).unwrap_or(0);
    Ok((0..count)
        .map(|i| values[i * width..(i + 1) * width].to_vec())
        .collect())
}

/// The groups of equal slices, in ascending order.
#[derive(Debug, PartialEq)]
struct Groups {
    /// Each group's first index.
    first: Vec<i64>,
    /// Each slice's group.
    inverse: Vec<i64>,
    /// Each group's size.
    counts: Vec<i64>,
}

fn group_slices<T>(slices: &[Vec<T>], order: impl Fn(&T, &T) -> Ordering) -> Groups {
    let compare = |a: &Vec<T>, b: &Vec<T>| {
        a.iter()
            .zip(b)
            .map(|(x, y)| order(x, y))
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
    };
    // Stable, so each group starts at its lowest index.
    let mut by_value: Vec<usize> = (0..slices.len()).collect();
    by_value.sort_by(|&a, &b| compare(&slices[a], &slices[b]));
    let mut groups = Groups {
        first: Vec::new(),
        inverse: vec![0; slices.len()],
        counts: Vec::new(),
    };
    for (rank, &i) in by_value.iter().enumerate() {
        let starts_group = rank == 0 || compare(&slices[by_value[rank - 1]], &slices[i]).is_ne();
        if starts_group {
            groups.first.push(i as i64);
            groups.counts.push(0);
        }
        groups.inverse[i] = groups.first.len() as i64 - 1;
        *groups.counts.last_mut().expect("a group was started") += 1;
    }
    groups
}

impl Groups {
    /// The same groups renumbered by where each first occurs.
    fn in_first_occurrence_order(self) -> Groups {
        let mut order: Vec<usize> = (0..self.first.len()).collect();
        order.sort_by_key(|&g| self.first[g]);
        let mut renumbered = vec![0i64; order.len()];
        for (new, &old) in order.iter().enumerate() {
            renumbered[old] = new as i64;
        }
        Groups {
            first: order.iter().map(|&g| self.first[g]).collect(),
            inverse: self
                .inverse
                .iter()
                .map(|&g| renumbered[g as usize])
                .collect(),
            counts: order.iter().map(|&g| self.counts[g]).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scalars(values: &[f32]) -> Vec<Vec<f32>> {
        values.iter().map(|&v| vec![v]).collect()
    }

    #[test]
    fn sorted_groups_keep_first_indices_and_sizes() {
        let groups = group_slices(&scalars(&[2.0, 1.0, 1.0, 3.0, 0.0, 3.0]), float_order);
        assert_eq!(groups.first, [4, 1, 0, 3]);
        assert_eq!(groups.inverse, [2, 1, 1, 3, 0, 3]);
        assert_eq!(groups.counts, [1, 2, 1, 2]);
    }

    #[test]
    fn unsorted_groups_follow_first_occurrence() {
        let groups = group_slices(&scalars(&[2.0, 1.0, 1.0, 3.0, 0.0, 3.0]), float_order)
            .in_first_occurrence_order();
        assert_eq!(groups.first, [0, 1, 3, 4]);
        assert_eq!(groups.inverse, [0, 1, 1, 2, 3, 2]);
        assert_eq!(groups.counts, [1, 2, 2, 1]);
    }

    #[test]
    fn signed_zeros_are_one_value_and_nan_sorts_last() {
        let groups = group_slices(&scalars(&[f32::NAN, -0.0, 0.0, 1.0, f32::NAN]), float_order);
        assert_eq!(groups.first, [1, 3, 0]);
        assert_eq!(groups.counts, [2, 1, 2]);
    }

    #[test]
    fn slices_compare_lexicographically() {
        let slices = vec![vec![1, 2], vec![1, 1], vec![1, 2], vec![0, 9]];
        let groups = group_slices(&slices, Ord::cmp);
        assert_eq!(groups.first, [3, 1, 0]);
        assert_eq!(groups.inverse, [2, 1, 2, 0]);
    }

    #[test]
    fn empty_slices_are_all_equal() {
        let groups = group_slices(&[Vec::<i8>::new(), Vec::new(), Vec::new()], Ord::cmp);
        assert_eq!(groups.counts, [3]);
    }
}
