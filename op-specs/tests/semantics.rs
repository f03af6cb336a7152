//! ONNX semantics that random values rarely hit: rounding ties, integer edge cases, optional
//! inputs, legacy axis flattening, ties in Hardmax, over-wide shifts, casts.

mod common;

use common::*;
use mlx_kernels::Array;
use op_specs::{AttrValue, ElemType};

fn f32s(values: &[f32], shape: &[i64]) -> Array {
    Array::from_slice(values, shape).unwrap()
}

fn run1(n: &op_specs::Node, inputs: &[Option<Array>]) -> Array {
    run(n, inputs).unwrap().remove(0)
}

fn values_f32(a: &Array) -> Vec<f32> {
    a.to_vec::<f32>(&stream()).unwrap()
}

#[test]
fn round_takes_halves_to_even() {
    let x = f32s(&[0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4999, 3.5000002], &[8]);
    let y = run1(
        &node("Round", 11, &[ElemType::Float], ElemType::Float),
        &[Some(x)],
    );
    assert_eq!(
        values_f32(&y),
        vec![0.0, 2.0, 2.0, -0.0, -2.0, -2.0, 2.0, 4.0]
    );
}

#[test]
fn integer_division_truncates_and_never_traps() {
    let n = node(
        "Div",
        14,
        &[ElemType::Int32, ElemType::Int32],
        ElemType::Int32,
    );
    let a = Array::from_slice(&[7i32, -7, 7, -7, i32::MIN, i32::MIN, 9], &[7]).unwrap();
    let b = Array::from_slice(&[2i32, 2, -2, -2, -1, 1, 3], &[7]).unwrap();
    let q = run1(&n, &[Some(a), Some(b)])
        .to_vec::<i32>(&stream())
        .unwrap();
    assert_eq!(q, vec![3, -3, -3, 3, i32::MIN, i32::MIN, 3]);
}

#[test]
fn an_integer_zero_divisor_fails_the_run_even_for_an_empty_result() {
    for (op, fmod) in [("Div", 0), ("Mod", 0), ("Mod", 1)] {
        let n = node(op, 13, &[ElemType::Int64, ElemType::Int64], ElemType::Int64)
            .attr("fmod", AttrValue::Int(fmod));
        let n = if op == "Div" {
            node(op, 14, &[ElemType::Int64, ElemType::Int64], ElemType::Int64)
        } else {
            n
        };
        let a = Array::from_slice(&[7i64, 5], &[2]).unwrap();
        let b = Array::from_slice(&[3i64, 0], &[2]).unwrap();
        let error = run(&n, &[Some(a), Some(b)]).unwrap_err();
        assert!(error.contains("by zero"), "{op}: {error}");
        let empty = Array::from_slice::<i64>(&[], &[0]).unwrap();
        let zero = Array::from_slice(&[0i64], &[]).unwrap();
        let error = run(&n, &[Some(empty), Some(zero)]).unwrap_err();
        assert!(
            error.contains("by zero"),
            "{op} of an empty tensor: {error}"
        );
    }
}

#[test]
fn modulo_follows_fmod_attribute_and_never_traps() {
    let a = Array::from_slice(&[7i64, -7, 7, -7, 5, i64::MIN], &[6]).unwrap();
    let b = Array::from_slice(&[3i64, 3, -3, -3, 1, -1], &[6]).unwrap();
    let python = node(
        "Mod",
        13,
        &[ElemType::Int64, ElemType::Int64],
        ElemType::Int64,
    );
    let c = python.clone().attr("fmod", AttrValue::Int(1));
    let s = stream();
    let py = run1(&python, &[Some(a.clone()), Some(b.clone())])
        .to_vec::<i64>(&s)
        .unwrap();
    assert_eq!(py, vec![1, 2, -2, -1, 0, 0]);
    let cm = run1(&c, &[Some(a), Some(b)]).to_vec::<i64>(&s).unwrap();
    assert_eq!(cm, vec![1, -1, 1, -1, 0, 0]);
    // Float fmod keeps tiny remainders exactly (no round trip through a shifted remainder).
    let fa = f32s(&[-1e-8, 5.5, -5.5, 1.0], &[4]);
    let fb = f32s(&[1.0, 2.0, 2.0, 0.0], &[4]);
    let nf = node(
        "Mod",
        13,
        &[ElemType::Float, ElemType::Float],
        ElemType::Float,
    )
    .attr("fmod", AttrValue::Int(1));
    let r = values_f32(&run1(&nf, &[Some(fa), Some(fb)]));
    assert_eq!(&r[..3], &[-1e-8, 1.5, -1.5]);
    assert!(r[3].is_nan());
}

#[test]
fn bit_shift_past_the_width_is_zero() {
    let x = Array::from_slice(&[1u8, 128, 255, 16], &[4]).unwrap();
    let y = Array::from_slice(&[3u8, 1, 8, 9], &[4]).unwrap();
    let s = stream();
    let left = node(
        "BitShift",
        11,
        &[ElemType::Uint8, ElemType::Uint8],
        ElemType::Uint8,
    )
    .attr("direction", AttrValue::String("LEFT".into()));
    assert_eq!(
        run1(&left, &[Some(x.clone()), Some(y.clone())])
            .to_vec::<u8>(&s)
            .unwrap(),
        vec![8, 0, 0, 0]
    );
    let right = node(
        "BitShift",
        11,
        &[ElemType::Uint8, ElemType::Uint8],
        ElemType::Uint8,
    )
    .attr("direction", AttrValue::String("RIGHT".into()));
    assert_eq!(
        run1(&right, &[Some(x), Some(y)]).to_vec::<u8>(&s).unwrap(),
        vec![0, 64, 0, 0]
    );
}

#[test]
fn cast_truncates_floats_and_rounds_to_half_types() {
    let s = stream();
    let x = f32s(&[2.7, -2.7, 0.0, 1e-3, 65519.0], &[5]);
    let to_i32 =
        node("Cast", 13, &[ElemType::Float], ElemType::Int32).attr("to", AttrValue::Int(6));
    assert_eq!(
        run1(&to_i32, &[Some(x.clone())]).to_vec::<i32>(&s).unwrap(),
        vec![2, -2, 0, 0, 65519]
    );
    let to_bool =
        node("Cast", 13, &[ElemType::Float], ElemType::Bool).attr("to", AttrValue::Int(9));
    assert_eq!(
        run1(&to_bool, &[Some(x.clone())])
            .to_vec::<bool>(&s)
            .unwrap(),
        vec![true, true, false, true, true]
    );
    let to_f16 =
        node("Cast", 19, &[ElemType::Float], ElemType::Float16).attr("to", AttrValue::Int(10));
    let half = run1(&to_f16, &[Some(x)]);
    assert_eq!(half.dtype(), mlx_kernels::Dtype::F16);
    // 65519 rounds to the largest half (65504); 1e-3 to the nearest half.
    assert_eq!(read(&half)[4], V::F(65504.0));
    assert_eq!(read(&half)[3], V::F(0.0010004043579101562));
    let like = node(
        "CastLike",
        15,
        &[ElemType::Int64, ElemType::Float],
        ElemType::Float,
    );
    let ints = Array::from_slice(&[3i64, -4], &[2]).unwrap();
    let target = f32s(&[0.0], &[1]);
    assert_eq!(
        values_f32(&run1(&like, &[Some(ints), Some(target)])),
        vec![3.0, -4.0]
    );
}

#[test]
fn clip_bounds_are_optional_and_attribute_forms_default_to_the_float_range() {
    let x = f32s(&[-5.0, 0.5, 5.0], &[3]);
    let lo = f32s(&[-1.0], &[]);
    let hi = f32s(&[1.0], &[]);
    let n = clip_node(3);
    assert_eq!(
        values_f32(&run1(
            &n,
            &[Some(x.clone()), Some(lo.clone()), Some(hi.clone())]
        )),
        vec![-1.0, 0.5, 1.0]
    );
    let min_only = clip_node(2);
    assert_eq!(
        values_f32(&run1(&min_only, &[Some(x.clone()), Some(lo)])),
        vec![-1.0, 0.5, 5.0]
    );
    let max_only = node("Clip", 13, &[ElemType::Float], ElemType::Float)
        .absent_input()
        .input(ElemType::Float);
    assert_eq!(
        values_f32(&run1(&max_only, &[Some(x.clone()), None, Some(hi)])),
        vec![-5.0, 0.5, 1.0]
    );
    let legacy =
        node("Clip", 6, &[ElemType::Float], ElemType::Float).attr("max", AttrValue::Float(2.0));
    assert_eq!(values_f32(&run1(&legacy, &[Some(x)])), vec![-5.0, 0.5, 2.0]);
}

fn clip_node(inputs: usize) -> op_specs::Node {
    node("Clip", 13, &vec![ElemType::Float; inputs], ElemType::Float)
}

#[test]
fn legacy_softmax_flattens_at_axis_and_new_softmax_uses_one_axis() {
    let data: Vec<f32> = (0..12).map(|i| i as f32 * 0.25).collect();
    let x = f32s(&data, &[2, 3, 2]);
    let legacy = node("Softmax", 11, &[ElemType::Float], ElemType::Float); // axis = 1: rows of 6
    let y = values_f32(&run1(&legacy, &[Some(x.clone())]));
    for row in 0..2 {
        let chunk = &data[row * 6..row * 6 + 6];
        let total: f32 = chunk.iter().map(|v| v.exp()).sum();
        for (i, v) in chunk.iter().enumerate() {
            assert!((y[row * 6 + i] - v.exp() / total).abs() < 1e-6);
        }
    }
    let modern =
        node("Softmax", 13, &[ElemType::Float], ElemType::Float).attr("axis", AttrValue::Int(1));
    let y = values_f32(&run1(&modern, &[Some(x.clone())]));
    // Along axis 1 (3 elements, stride 2).
    let total: f32 = [0, 2, 4].iter().map(|&i| data[i].exp()).sum();
    assert!((y[2] - data[2].exp() / total).abs() < 1e-6);
    let log = node("LogSoftmax", 13, &[ElemType::Float], ElemType::Float);
    let y = values_f32(&run1(&log, &[Some(x)]));
    let pair_total = (data[0].exp() + data[1].exp()).ln();
    assert!((y[0] - (data[0] - pair_total)).abs() < 1e-6);
}

#[test]
fn hardmax_marks_the_first_maximum() {
    let x = f32s(&[1.0, 3.0, 3.0, 0.0, -1.0, -1.0], &[2, 3]);
    let y = run1(
        &node("Hardmax", 13, &[ElemType::Float], ElemType::Float),
        &[Some(x.clone())],
    );
    assert_eq!(values_f32(&y), vec![0.0, 1.0, 0.0, 1.0, 0.0, 0.0]);
    let flat = run1(
        &node("Hardmax", 11, &[ElemType::Float], ElemType::Float).attr("axis", AttrValue::Int(0)),
        &[Some(x)],
    );
    assert_eq!(values_f32(&flat), vec![0.0, 1.0, 0.0, 0.0, 0.0, 0.0]);
}

#[test]
fn is_inf_honours_its_sign_flags() {
    let x = f32s(&[f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 1.0], &[4]);
    let s = stream();
    let check = |neg: i64, pos: i64, expected: [bool; 4]| {
        let n = node("IsInf", 20, &[ElemType::Float], ElemType::Bool)
            .attr("detect_negative", AttrValue::Int(neg))
            .attr("detect_positive", AttrValue::Int(pos));
        assert_eq!(
            run1(&n, &[Some(x.clone())]).to_vec::<bool>(&s).unwrap(),
            expected.to_vec(),
            "{neg} {pos}"
        );
    };
    check(1, 1, [true, true, false, false]);
    check(1, 0, [false, true, false, false]);
    check(0, 1, [true, false, false, false]);
    check(0, 0, [false, false, false, false]);
    let nan = run1(
        &node("IsNaN", 20, &[ElemType::Float], ElemType::Bool),
        &[Some(x)],
    );
    assert_eq!(
        nan.to_vec::<bool>(&s).unwrap(),
        vec![false, false, true, false]
    );
}

#[test]
fn variadic_and_three_way_ops_broadcast_across_all_inputs() {
    let a = f32s(&[1.0, 2.0], &[2, 1]);
    let b = f32s(&[10.0, 20.0, 30.0], &[3]);
    let c = f32s(&[100.0], &[1]);
    let sum = node("Sum", 13, &[ElemType::Float; 3], ElemType::Float);
    let out = run1(&sum, &[Some(a.clone()), Some(b.clone()), Some(c.clone())]);
    assert_eq!(out.shape(), vec![2, 3]);
    assert_eq!(
        values_f32(&out),
        vec![111.0, 121.0, 131.0, 112.0, 122.0, 132.0]
    );
    let mean = node("Mean", 13, &[ElemType::Float; 3], ElemType::Float);
    assert_eq!(
        values_f32(&run1(&mean, &[Some(a.clone()), Some(b.clone()), Some(c)]))[0],
        37.0
    );
    let max = node("Max", 13, &[ElemType::Float], ElemType::Float);
    assert_eq!(
        values_f32(&run1(&max, &[Some(b.clone())])),
        vec![10.0, 20.0, 30.0]
    );
    let cond = Array::from_slice(&[true, false, true], &[3]).unwrap();
    let pick = node(
        "Where",
        16,
        &[ElemType::Bool, ElemType::Float, ElemType::Float],
        ElemType::Float,
    );
    let out = run1(&pick, &[Some(cond), Some(a), Some(b)]);
    assert_eq!(values_f32(&out), vec![1.0, 20.0, 1.0, 2.0, 20.0, 2.0]);
}

#[test]
fn prelu_slope_broadcasts_per_channel() {
    let x = f32s(&[-1.0, -2.0, 3.0, -4.0], &[2, 2]);
    let slope = f32s(&[0.5, 0.25], &[2]);
    let out = run1(
        &node("PRelu", 16, &[ElemType::Float; 2], ElemType::Float),
        &[Some(x), Some(slope)],
    );
    assert_eq!(values_f32(&out), vec![-0.5, -0.5, 3.0, -1.0]);
}

#[test]
fn integer_pow_and_logic() {
    let s = stream();
    // int32: an int64 base is declined (ORT raises int64 through double).
    let base = Array::from_slice(&[2i32, -3, 5, 0], &[4]).unwrap();
    let exponent = Array::from_slice(&[10i32, 3, 0, 2], &[4]).unwrap();
    let pow = node("Pow", 15, &[ElemType::Int32; 2], ElemType::Int32);
    assert_eq!(
        run1(&pow, &[Some(base), Some(exponent)])
            .to_vec::<i32>(&s)
            .unwrap(),
        vec![1024, -27, 1, 0]
    );
    let not = run1(
        &node("Not", 1, &[ElemType::Bool], ElemType::Bool),
        &[Some(Array::from_slice(&[true, false], &[2]).unwrap())],
    );
    assert_eq!(not.to_vec::<bool>(&s).unwrap(), vec![false, true]);
    let inv = run1(
        &node("BitwiseNot", 18, &[ElemType::Int8], ElemType::Int8),
        &[Some(Array::from_slice(&[0i8, -1, 5], &[3]).unwrap())],
    );
    assert_eq!(inv.to_vec::<i8>(&s).unwrap(), vec![-1, 0, -6]);
}

#[test]
fn microsoft_fusions_match_their_definitions() {
    let x = f32s(&[-1.0, 0.0, 1.5], &[3]);
    let bias = f32s(&[0.5, 0.5, 0.5], &[3]);
    let ms = |op: &str, inputs: usize| {
        node(op, 1, &vec![ElemType::Float; inputs], ElemType::Float).in_domain("com.microsoft")
    };
    let bias_gelu = values_f32(&run1(
        &ms("BiasGelu", 2),
        &[Some(x.clone()), Some(bias.clone())],
    ));
    let plain = values_f32(&run1(
        &ms("Gelu", 1),
        &[Some(f32s(&[-0.5, 0.5, 2.0], &[3]))],
    ));
    assert_eq!(bias_gelu, plain);
    // Reference values of the exact GELU: x·Φ(x).
    for (got, want) in plain.iter().zip([-0.154_268_5f32, 0.345_731_5, 1.954_5]) {
        assert!((got - want).abs() < 1e-4, "{got} vs {want}");
    }
    let quick = values_f32(&run1(&ms("QuickGelu", 1), &[Some(x.clone())]));
    let expected: Vec<f32> = [-1.0f32, 0.0, 1.5]
        .iter()
        .map(|v| v / (1.0 + (-1.702 * v).exp()))
        .collect();
    for (g, e) in quick.iter().zip(&expected) {
        assert!((g - e).abs() < 1e-6);
    }
    let skip = f32s(&[1.0, 1.0, 1.0], &[3]);
    let added = values_f32(&run1(
        &ms("BiasAdd", 3),
        &[Some(x.clone()), Some(bias.clone()), Some(skip)],
    ));
    assert_eq!(added, vec![0.5, 1.5, 3.0]);
    let fast_with_bias = values_f32(&run1(&ms("FastGelu", 2), &[Some(x.clone()), Some(bias)]));
    let fast_plain = values_f32(&run1(
        &ms("FastGelu", 1),
        &[Some(f32s(&[-0.5, 0.5, 2.0], &[3]))],
    ));
    assert_eq!(fast_with_bias, fast_plain);
}

#[test]
fn zero_size_inputs_flow_through() {
    let empty = Array::from_slice::<f32>(&[], &[0, 4]).unwrap();
    let row = f32s(&[1.0, 2.0, 3.0, 4.0], &[4]);
    let out = run1(
        &node("Add", 14, &[ElemType::Float; 2], ElemType::Float),
        &[Some(empty.clone()), Some(row)],
    );
    assert_eq!(out.shape(), vec![0, 4]);
    let out = run1(
        &node("Softmax", 13, &[ElemType::Float], ElemType::Float),
        &[Some(empty)],
    );
    assert_eq!(out.shape(), vec![0, 4]);
}
