//! Reductions in both opset forms, against plain references; ArgMax/ArgMin ties.

mod common;

use common::*;
use mlx_kernels::Array;
use op_specs::{AttrValue, ElemType};

const F: ElemType = ElemType::Float;
const I: ElemType = ElemType::Int64;

/// x[i][j][k] = i*12 + j*4 + k - 10, shape [2, 3, 4].
fn x() -> (Array, Vec<f32>) {
    let v: Vec<f32> = (0..24).map(|i| i as f32 - 10.0).collect();
    (Array::from_slice(&v, &[2, 3, 4]).unwrap(), v)
}

/// Reference over axis 1 of [2, 3, 4], keepdims = 0.
fn over_axis1(v: &[f32], f: impl Fn(&[f32]) -> f32) -> Vec<f32> {
    let mut out = Vec::new();
    for i in 0..2 {
        for k in 0..4 {
            let column: Vec<f32> = (0..3).map(|j| v[i * 12 + j * 4 + k]).collect();
            out.push(f(&column));
        }
    }
    out
}

fn reduced(op: &str, opset: i64, attr_form: bool) -> Vec<f32> {
    let (x, _) = x();
    let n = if attr_form {
        node(op, opset, &[F], F)
            .attr("axes", AttrValue::Ints(vec![-2]))
            .attr("keepdims", AttrValue::Int(0))
    } else {
        node(op, opset, &[F, I], F).attr("keepdims", AttrValue::Int(0))
    };
    let axes = Array::from_slice(&[1i64], &[1]).unwrap();
    let inputs = if attr_form {
        vec![Some(x)]
    } else {
        vec![Some(x), Some(axes)]
    };
    let out = run(&n, &inputs).unwrap().remove(0);
    assert_eq!(out.shape(), vec![2, 4], "{op}-{opset}");
    out.to_vec::<f32>(&stream()).unwrap()
}

#[test]
fn every_reduction_matches_its_reference_in_both_forms() {
    let (_, v) = x();
    type Reference = fn(&[f32]) -> f32;
    let cases: [(&str, i64, Reference); 10] = [
        ("ReduceSum", 13, |c| c.iter().sum()),
        ("ReduceMean", 18, |c| c.iter().sum::<f32>() / c.len() as f32),
        ("ReduceMax", 18, |c| {
            c.iter().cloned().fold(f32::MIN, f32::max)
        }),
        ("ReduceMin", 18, |c| {
            c.iter().cloned().fold(f32::MAX, f32::min)
        }),
        ("ReduceProd", 18, |c| c.iter().product()),
        ("ReduceSumSquare", 18, |c| c.iter().map(|x| x * x).sum()),
        ("ReduceL1", 18, |c| c.iter().map(|x| x.abs()).sum()),
        ("ReduceL2", 18, |c| {
            c.iter().map(|x| x * x).sum::<f32>().sqrt()
        }),
        ("ReduceLogSum", 18, |c| c.iter().sum::<f32>().ln()),
        ("ReduceLogSumExp", 18, |c| {
            c.iter().map(|x| x.exp()).sum::<f32>().ln()
        }),
    ];
    for (op, modern, reference) in cases {
        let want = over_axis1(&v, reference);
        let legacy = if op == "ReduceSum" { 11 } else { 13 };
        for got in [reduced(op, modern, false), reduced(op, legacy, true)] {
            for (g, w) in got.iter().zip(&want) {
                assert!(
                    (g - w).abs() <= 1e-5 * w.abs().max(1.0) || (g.is_nan() && w.is_nan()),
                    "{op}: {got:?} vs {want:?}"
                );
            }
        }
    }
}

#[test]
fn empty_axes_reduce_everything_or_nothing() {
    let (x, v) = x();
    let s = stream();
    let all = run(&node("ReduceSum", 13, &[F], F), &[Some(x.clone())])
        .unwrap()
        .remove(0);
    assert_eq!(all.shape(), vec![1, 1, 1]);
    assert_eq!(all.to_vec::<f32>(&s).unwrap(), vec![v.iter().sum::<f32>()]);
    let noop = node("ReduceSum", 13, &[F, I], F).attr("noop_with_empty_axes", AttrValue::Int(1));
    let empty = Array::from_slice::<i64>(&[], &[0]).unwrap();
    let same = run(&noop, &[Some(x), Some(empty)]).unwrap().remove(0);
    assert_eq!(
        (same.shape(), same.to_vec::<f32>(&s).unwrap()),
        (vec![2, 3, 4], v)
    );
}

#[test]
fn integer_sums_keep_their_type() {
    let x = Array::from_slice(&[1i32, 2, 3, 4], &[2, 2]).unwrap();
    let n = node("ReduceSum", 13, &[ElemType::Int32], ElemType::Int32);
    let out = run(&n, &[Some(x)]).unwrap().remove(0);
    assert_eq!(out.to_vec::<i32>(&stream()).unwrap(), vec![10]);
}

#[test]
fn arg_extremes_break_ties_first_or_last() {
    let x = Array::from_slice(&[1.0f32, 5.0, 5.0, 0.0, 0.0, 2.0], &[2, 3]).unwrap();
    let s = stream();
    let argmax = |last: i64| {
        let n = node("ArgMax", 13, &[F], I)
            .attr("axis", AttrValue::Int(1))
            .attr("select_last_index", AttrValue::Int(last));
        run(&n, &[Some(x.clone())]).unwrap().remove(0)
    };
    let first = argmax(0);
    assert_eq!(
        (first.shape(), first.to_vec::<i64>(&s).unwrap()),
        (vec![2, 1], vec![1, 2])
    );
    assert_eq!(argmax(1).to_vec::<i64>(&s).unwrap(), vec![2, 2]);
    let argmin = node("ArgMin", 13, &[F], I)
        .attr("axis", AttrValue::Int(-1))
        .attr("keepdims", AttrValue::Int(0))
        .attr("select_last_index", AttrValue::Int(1));
    let out = run(&argmin, &[Some(x)]).unwrap().remove(0);
    assert_eq!(
        (out.shape(), out.to_vec::<i64>(&s).unwrap()),
        (vec![2], vec![0, 1])
    );
}

#[test]
fn max_and_min_over_an_empty_set_give_the_identity() {
    let empty = Array::from_slice::<f32>(&[], &[2, 0, 3]).unwrap();
    let s = stream();
    let max = node("ReduceMax", 18, &[F, I], F).attr("keepdims", AttrValue::Int(1));
    let axes = Array::from_slice(&[1i64], &[1]).unwrap();
    let out = run(&max, &[Some(empty.clone()), Some(axes.clone())])
        .unwrap()
        .remove(0);
    assert_eq!(out.shape(), vec![2, 1, 3]);
    assert!(out
        .to_vec::<f32>(&s)
        .unwrap()
        .iter()
        .all(|v| *v == f32::NEG_INFINITY));
    let ints = Array::from_slice::<i32>(&[], &[0, 2]).unwrap();
    let min = node("ReduceMin", 13, &[ElemType::Int32], ElemType::Int32)
        .attr("axes", AttrValue::Ints(vec![0]))
        .attr("keepdims", AttrValue::Int(0));
    let out = run(&min, &[Some(ints)]).unwrap().remove(0);
    assert_eq!(out.to_vec::<i32>(&s).unwrap(), vec![i32::MAX, i32::MAX]);
}
