//! Properties: Gather and Pad (the index arithmetic of the shape family, with Slice and Split's
//! in the crate's unit tests) against plain references over random shapes and indices.
//! A suite of its own, not a family file's test: Gather (indexing) and Pad (layout) share the
//! strided-index reference.

mod common;

use common::*;
use mlx_kernels::Array;
use op_specs::{AttrValue, ElemType};
use proptest::prelude::*;

const F: ElemType = ElemType::Float;
const I: ElemType = ElemType::Int64;

fn strides(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1];
    }
    s
}

/// numpy.take(data, indices, axis) with negative indices wrapped.
fn gather_ref(
    data: &[f32],
    dims: &[usize],
    idx: &[i64],
    idx_dims: &[usize],
    axis: usize,
) -> (Vec<f32>, Vec<usize>) {
    let out_dims: Vec<usize> = [&dims[..axis], idx_dims, &dims[axis + 1..]].concat();
    let total: usize = out_dims.iter().product();
    let (ds, os) = (strides(dims), strides(&out_dims));
    let out = (0..total)
        .map(|flat| {
            let coords: Vec<usize> = os
                .iter()
                .zip(&out_dims)
                .map(|(s, d)| flat / s % d)
                .collect();
            let idx_pos = coords[axis..axis + idx_dims.len()]
                .iter()
                .zip(strides(idx_dims))
                .map(|(c, s)| c * s)
                .sum::<usize>();
            let i = idx[idx_pos];
            let i = if i < 0 { i + dims[axis] as i64 } else { i } as usize;
            let mut src = coords[..axis].to_vec();
            src.push(i);
            src.extend(&coords[axis + idx_dims.len()..]);
            data[src.iter().zip(&ds).map(|(c, s)| c * s).sum::<usize>()]
        })
        .collect();
    (out, out_dims)
}

/// One axis of ONNX Pad on a 1-D row: crop for negative pads, then the mode's fill.
fn pad_ref(row: &[f32], lo: i64, hi: i64, mode: &str, value: f32) -> Vec<f32> {
    let n = row.len() as i64;
    let cropped: Vec<f32> =
        row[lo.min(0).unsigned_abs() as usize..(n - hi.min(0).abs()) as usize].to_vec();
    let m = cropped.len() as i64;
    let (lo, hi) = (lo.max(0), hi.max(0));
    (-lo..m + hi)
        .map(|i| {
            if (0..m).contains(&i) {
                return cropped[i as usize];
            }
            match mode {
                "edge" => cropped[i.clamp(0, m - 1) as usize],
                "reflect" => cropped[if i < 0 { -i } else { 2 * (m - 1) - i } as usize],
                "wrap" => cropped[i.rem_euclid(m) as usize],
                _ => value,
            }
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn gather_matches_numpy_take(
        dims in prop::collection::vec(1usize..4, 1..4),
        idx_dims in prop::collection::vec(1usize..3, 0..3),
        axis_pick in any::<prop::sample::Index>(),
        seeds in prop::collection::vec(any::<prop::sample::Index>(), 8),
    ) {
        let axis = axis_pick.index(dims.len());
        let size: usize = dims.iter().product();
        let data: Vec<f32> = (0..size).map(|v| v as f32).collect();
        let count: usize = idx_dims.iter().product();
        let dim = dims[axis] as i64;
        let idx: Vec<i64> = (0..count).map(|i| seeds[i % seeds.len()].index(2 * dim as usize) as i64 - dim).collect();
        let (want, want_dims) = gather_ref(&data, &dims, &idx, &idx_dims, axis);
        let to_i64 = |d: &[usize]| d.iter().map(|&v| v as i64).collect::<Vec<_>>();
        let n = node("Gather", 13, &[F, I], F).attr("axis", AttrValue::Int(axis as i64 - dims.len() as i64));
        let inputs = [
            Some(Array::from_slice(&data, &to_i64(&dims)).unwrap()),
            Some(Array::from_slice(&idx, &to_i64(&idx_dims)).unwrap()),
        ];
        let out = run(&n, &inputs).map_err(TestCaseError::fail)?.remove(0);
        prop_assert_eq!(out.shape(), to_i64(&want_dims));
        prop_assert_eq!(out.to_vec::<f32>(&stream()).unwrap(), want);
    }

    #[test]
    fn pad_matches_the_onnx_definition(
        len in 1usize..7,
        lo in -3i64..4,
        hi in -3i64..4,
        mode in prop::sample::select(vec!["constant", "edge", "reflect", "wrap"]),
    ) {
        let row: Vec<f32> = (0..len).map(|v| v as f32 + 1.0).collect();
        let kept = len as i64 - lo.min(0).abs() - hi.min(0).abs();
        let (plo, phi) = (lo.max(0), hi.max(0));
        let valid = kept >= 1
            && match mode {
                "reflect" => plo < kept && phi < kept,
                "wrap" => plo <= kept && phi <= kept,
                _ => true,
            };
        prop_assume!(valid);
        let n = node("Pad", 19, &[F, I, F], F).attr("mode", AttrValue::String(mode.into()));
        let inputs = [
            Some(Array::from_slice(&row, &[len as i64]).unwrap()),
            Some(Array::from_slice(&[lo, hi], &[2]).unwrap()),
            Some(Array::scalar(-9.0f32).unwrap()),
        ];
        let out = run(&n, &inputs).map_err(TestCaseError::fail)?.remove(0);
        prop_assert_eq!(out.to_vec::<f32>(&stream()).unwrap(), pad_ref(&row, lo, hi, mode, -9.0));
    }
}
