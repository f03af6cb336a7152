//! Shape, data movement and indexing ops through the table, with host-known inputs.

mod common;

use common::*;
use mlx_kernels::Array;
use op_specs::{AttrValue, ElemType};

const F: ElemType = ElemType::Float;
const I: ElemType = ElemType::Int64;

fn f32s(n: usize, shape: &[i64]) -> Array {
    let values: Vec<f32> = (0..n).map(|v| v as f32).collect();
    Array::from_slice(&values, shape).unwrap()
}

fn ints(values: &[i64]) -> Array {
    Array::from_slice(values, &[values.len() as i64]).unwrap()
}

fn out(n: &op_specs::Node, inputs: &[Option<Array>]) -> Vec<Array> {
    run(n, inputs).unwrap()
}

fn values(a: &Array) -> Vec<f32> {
    a.to_vec::<f32>(&stream()).unwrap()
}

#[test]
fn shape_and_size_read_dims() {
    let x = f32s(24, &[2, 3, 4]);
    let s = stream();
    let all = out(&node("Shape", 13, &[F], I), &[Some(x.clone())]);
    assert_eq!(all[0].to_vec::<i64>(&s).unwrap(), vec![2, 3, 4]);
    let part = node("Shape", 15, &[F], I)
        .attr("start", AttrValue::Int(-2))
        .attr("end", AttrValue::Int(100));
    assert_eq!(
        out(&part, &[Some(x.clone())])[0].to_vec::<i64>(&s).unwrap(),
        vec![3, 4]
    );
    let size = out(&node("Size", 13, &[F], I), &[Some(x)]);
    assert_eq!(
        (size[0].shape(), size[0].to_vec::<i64>(&s).unwrap()),
        (vec![], vec![24])
    );
}

#[test]
fn reshape_squeeze_unsqueeze_flatten_transpose() {
    let x = f32s(24, &[2, 3, 4]);
    let r = out(
        &node("Reshape", 14, &[F, I], F),
        &[Some(x.clone()), Some(ints(&[0, -1]))],
    );
    assert_eq!(r[0].shape(), vec![2, 12]);
    let u = out(
        &node("Unsqueeze", 13, &[F, I], F),
        &[Some(x.clone()), Some(ints(&[0, -1]))],
    );
    assert_eq!(u[0].shape(), vec![1, 2, 3, 4, 1]);
    let sq = out(
        &node("Squeeze", 13, &[F, I], F),
        &[Some(u[0].clone()), Some(ints(&[-1]))],
    );
    assert_eq!(sq[0].shape(), vec![1, 2, 3, 4]);
    let all = out(&node("Squeeze", 13, &[F], F), &[Some(u[0].clone())]);
    assert_eq!(all[0].shape(), vec![2, 3, 4]);
    assert!(run(
        &node("Squeeze", 13, &[F, I], F),
        &[Some(x.clone()), Some(ints(&[0]))]
    )
    .is_err());
    let legacy = node("Unsqueeze", 11, &[F], F).attr("axes", AttrValue::Ints(vec![1]));
    assert_eq!(
        out(&legacy, &[Some(x.clone())])[0].shape(),
        vec![2, 1, 3, 4]
    );
    let flat = node("Flatten", 13, &[F], F).attr("axis", AttrValue::Int(-1));
    assert_eq!(out(&flat, &[Some(x.clone())])[0].shape(), vec![6, 4]);
    let flat0 = node("Flatten", 13, &[F], F).attr("axis", AttrValue::Int(0));
    assert_eq!(out(&flat0, &[Some(x.clone())])[0].shape(), vec![1, 24]);
    let t = out(&node("Transpose", 13, &[F], F), &[Some(f32s(6, &[2, 3]))]);
    assert_eq!(
        (t[0].shape(), values(&t[0])),
        (vec![3, 2], vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0])
    );
    let p = node("Transpose", 13, &[F], F).attr("perm", AttrValue::Ints(vec![1, 2, 0]));
    assert_eq!(out(&p, &[Some(x)])[0].shape(), vec![3, 4, 2]);
}

#[test]
fn concat_split_expand() {
    let a = f32s(4, &[2, 2]);
    let b = f32s(2, &[2, 1]);
    let c = out(
        &node("Concat", 13, &[F, F], F).attr("axis", AttrValue::Int(-1)),
        &[Some(a.clone()), Some(b)],
    );
    assert_eq!(
        (c[0].shape(), values(&c[0])),
        (vec![2, 3], vec![0.0, 1.0, 0.0, 2.0, 3.0, 1.0])
    );

    let x = f32s(10, &[10]);
    let mut n = node("Split", 18, &[F, I], F);
    n = n.output(F).output(F); // three outputs
    let parts = out(&n, &[Some(x.clone()), Some(ints(&[2, 0, 8]))]);
    let shapes: Vec<Vec<i64>> = parts.iter().map(|p| p.shape()).collect();
    assert_eq!(shapes, vec![vec![2], vec![0], vec![8]]);
    assert_eq!(values(&parts[2])[0], 2.0);
    let mut uneven = node("Split", 18, &[F], F).attr("num_outputs", AttrValue::Int(3));
    uneven = uneven.output(F).output(F);
    let parts = out(&uneven, &[Some(x.clone())]);
    let shapes: Vec<Vec<i64>> = parts.iter().map(|p| p.shape()).collect();
    assert_eq!(shapes, vec![vec![4], vec![4], vec![2]]);
    let mut legacy = node("Split", 11, &[F], F);
    legacy = legacy.output(F);
    let halves = out(&legacy, &[Some(x.clone())]);
    assert_eq!((halves[0].shape(), halves[1].shape()), (vec![5], vec![5]));
    assert!(run(&node("Split", 11, &[F], F).output(F).output(F), &[Some(x)]).is_err()); // 10 / 3

    let e = out(
        &node("Expand", 13, &[F, I], F),
        &[Some(f32s(3, &[3, 1])), Some(ints(&[2, 1, 4]))],
    );
    assert_eq!(e[0].shape(), vec![2, 3, 4]);
}

#[test]
fn gather_takes_negative_indices_and_fails_on_out_of_range_ones() {
    let data = f32s(12, &[3, 4]);
    let idx = Array::from_slice(&[-1i64, 0], &[2]).unwrap();
    let rows = out(
        &node("Gather", 13, &[F, I], F),
        &[Some(data.clone()), Some(idx)],
    );
    assert_eq!(
        (rows[0].shape(), values(&rows[0])[..4].to_vec()),
        (vec![2, 4], vec![8.0, 9.0, 10.0, 11.0])
    );
    let cols = node("Gather", 13, &[F, ElemType::Int32], F).attr("axis", AttrValue::Int(1));
    let idx = Array::from_slice(&[[3i32, 1], [0, -4]].concat(), &[2, 2]).unwrap();
    let picked = out(&cols, &[Some(data.clone()), Some(idx)]);
    assert_eq!(picked[0].shape(), vec![3, 2, 2]);
    assert_eq!(values(&picked[0])[..4].to_vec(), vec![3.0, 1.0, 0.0, 0.0]);
    for wild in [7i64, -4, 3] {
        let wild = Array::from_slice(&[0, wild], &[2]).unwrap();
        let error = run(
            &node("Gather", 13, &[F, I], F),
            &[Some(data.clone()), Some(wild)],
        );
        assert!(error.unwrap_err().contains("out of range"));
    }
}

#[test]
fn slice_clamps_and_walks_backwards() {
    let x = f32s(20, &[4, 5]);
    let s = stream();
    // Rows 3, 1 (step -2 from the end); columns 1..end (INT64_MAX end), every other.
    let n = node("Slice", 13, &[F, I, I, I, I], F);
    let inputs = [
        Some(x.clone()),
        Some(ints(&[-1, 1])),
        Some(ints(&[-10, i64::MAX])),
        Some(ints(&[0, 1])),
        Some(ints(&[-2, 2])),
    ];
    let out = run(&n, &inputs).unwrap().remove(0);
    assert_eq!(out.shape(), vec![2, 2]);
    assert_eq!(out.to_vec::<f32>(&s).unwrap(), vec![16.0, 18.0, 6.0, 8.0]);
    // Attribute form, axes omitted; an empty range gives a zero-size result.
    let legacy = node("Slice", 9, &[F], F)
        .attr("starts", AttrValue::Ints(vec![2, 3]))
        .attr("ends", AttrValue::Ints(vec![2, 5]));
    assert_eq!(out_shape(&legacy, x.clone()), vec![0, 2]);
    let zero_step = [
        Some(x),
        Some(ints(&[0])),
        Some(ints(&[1])),
        Some(ints(&[0])),
        Some(ints(&[0])),
    ];
    assert!(run(&n, &zero_step).is_err());
}

fn out_shape(n: &op_specs::Node, x: Array) -> Vec<i64> {
    out(n, &[Some(x)])[0].shape()
}
