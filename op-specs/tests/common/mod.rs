//! Test harness: build nodes and MLX arrays, run a node through the table, read results back,
//! and plain reference semantics to compare with.
//! The family files' own tests use `table::testing`, which is `cfg(test)` and so not in the
//! library these suites link.
#![allow(dead_code)]

use mlx_kernels::{ops, Array, Dtype, Stream};
use op_specs::{decide, AttrValue, Decision, ElemType, Node, Value};

pub fn stream() -> Stream {
    Stream::best().expect("MLX has a default device")
}

/// A host value of any element type, wide enough to hold every claimed type exactly.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum V {
    F(f64),
    I(i128),
    B(bool),
}

pub fn node(op: &str, since: i64, inputs: &[ElemType], output: ElemType) -> Node {
    let mut n = Node::new(op, since);
    for t in inputs {
        n = n.input(*t);
    }
    n.output(output)
}

pub fn with_attr(n: Node, name: &str, value: AttrValue) -> Node {
    n.attr(name, value)
}

/// Claims `node` through the table (failing the test on a decline) and lowers it; a run-time
/// check that does not hold is an error, as in the EP.
pub fn run(node: &Node, inputs: &[Option<Array>]) -> Result<Vec<Array>, String> {
    let lowered = match decide(node) {
        Decision::Claim { spec, .. } => {
            let inputs: Vec<Option<Value>> = inputs
                .iter()
                .map(|a| a.clone().map(Value::Tensor))
                .collect();
            spec.lower_node(&stream(), node, &inputs)
                .map_err(|e| e.to_string())?
        }
        Decision::Decline { reason } => panic!("{} declined: {reason}", node.op_type),
    };
    for check in &lowered.checks {
        let holds = check
            .holds
            .to_vec::<bool>(&stream())
            .map_err(|e| e.to_string())?;
        if holds != [true] {
            return Err(check.message.clone());
        }
    }
    lowered
        .outputs
        .into_iter()
        .map(|v| v.into_tensor("an output").map_err(|e| e.to_string()))
        .collect()
}

pub fn decline_reason(node: &Node) -> Option<String> {
    match decide(node) {
        Decision::Claim { .. } => None,
        Decision::Decline { reason } => Some(reason),
    }
}

pub fn dtype(t: ElemType) -> Dtype {
    t.to_mlx().expect("claimed types have an MLX dtype")
}

pub fn is_float(t: ElemType) -> bool {
    op_specs::dtypes::FLOAT.contains(t)
}

pub fn is_signed(t: ElemType) -> bool {
    op_specs::dtypes::INT.contains(t)
}

pub fn bits(t: ElemType) -> u32 {
    dtype(t).size_in_bytes() as u32 * 8
}

/// Wraps an integer to `t`'s width, as two's complement hardware does.
pub fn wrap(v: i128, t: ElemType) -> i128 {
    let b = bits(t);
    let modulus = 1i128 << b;
    let low = v.rem_euclid(modulus);
    if is_signed(t) && low >= modulus / 2 {
        low - modulus
    } else {
        low
    }
}

pub fn int_range(t: ElemType) -> (i128, i128) {
    let b = bits(t);
    if is_signed(t) {
        (-(1i128 << (b - 1)), (1i128 << (b - 1)) - 1)
    } else {
        // u64 values stay below 2^63 so they travel through i64 host arrays.
        (0, (1i128 << b.min(63)) - 1)
    }
}

/// An MLX array of type `t` holding `values`, and the values it really holds (floats rounded
/// to `t` by MLX itself).
pub fn make(values: &[V], shape: &[i64], t: ElemType) -> (Array, Vec<V>) {
    let s = stream();
    let array = if t == ElemType::Bool {
        let host: Vec<bool> = values.iter().map(|v| matches!(v, V::B(true))).collect();
        Array::from_slice(&host, shape).unwrap()
    } else if is_float(t) {
        let host: Vec<f32> = values
            .iter()
            .map(|v| if let V::F(x) = v { *x as f32 } else { 0.0 })
            .collect();
        ops::astype(&Array::from_slice(&host, shape).unwrap(), dtype(t), &s).unwrap()
    } else {
        let host: Vec<i64> = values
            .iter()
            .map(|v| if let V::I(x) = v { *x as i64 } else { 0 })
            .collect();
        ops::astype(&Array::from_slice(&host, shape).unwrap(), dtype(t), &s).unwrap()
    };
    let held = read(&array);
    (array, held)
}

pub fn read(a: &Array) -> Vec<V> {
    let s = stream();
    match a.dtype() {
        Dtype::Bool => a
            .to_vec::<bool>(&s)
            .unwrap()
            .into_iter()
            .map(V::B)
            .collect(),
        Dtype::U64 => a
            .to_vec::<u64>(&s)
            .unwrap()
            .into_iter()
            .map(|x| V::I(x.into()))
            .collect(),
        d if d.is_float() => {
            let wide = ops::astype(a, Dtype::F32, &s).unwrap();
            wide.to_vec::<f32>(&s)
                .unwrap()
                .into_iter()
                .map(|x| V::F(x.into()))
                .collect()
        }
        _ => {
            let wide = ops::astype(a, Dtype::I64, &s).unwrap();
            wide.to_vec::<i64>(&s)
                .unwrap()
                .into_iter()
                .map(|x| V::I(x.into()))
                .collect()
        }
    }
}

/// numpy's broadcast of several shapes, or None.
pub fn broadcast_shape(shapes: &[&[i64]]) -> Option<Vec<i64>> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    (0..rank)
        .map(|i| {
            let dims = shapes
                .iter()
                .filter_map(|s| (i + s.len()).checked_sub(rank).map(|j| s[j]));
            dims.into_iter().try_fold(1i64, |acc, d| match (acc, d) {
                (1, d) => Some(d),
                (a, 1) => Some(a),
                (a, d) if a == d => Some(a),
                _ => None,
            })
        })
        .collect()
}

/// For each element of `out`, the flat index of the element of `input` broadcast to it.
pub fn source_indices(out: &[i64], input: &[i64]) -> Vec<usize> {
    let total: i64 = out.iter().product();
    let offset = out.len() - input.len();
    (0..total)
        .map(|mut flat| {
            let mut index = 0usize;
            let mut stride = 1usize;
            for axis in (0..out.len()).rev() {
                let coordinate = flat % out[axis];
                flat /= out[axis];
                if axis >= offset {
                    let dim = input[axis - offset];
                    if dim != 1 {
                        index += coordinate as usize * stride;
                    }
                    stride *= dim as usize;
                }
            }
            index
        })
        .collect()
}

/// Compares results: exact for integers and booleans, NaN-aware and within `rel` for floats.
pub fn assert_matches(actual: &[V], expected: &[V], (rel, abs): (f64, f64), context: &str) {
    assert_eq!(actual.len(), expected.len(), "{context}: length");
    for (i, (a, e)) in actual.iter().zip(expected).enumerate() {
        let ok = match (a, e) {
            (V::F(a), V::F(e)) if e.is_nan() => a.is_nan(),
            (V::F(a), V::F(e)) if e.is_infinite() => a == e,
            (V::F(a), V::F(e)) => (a - e).abs() <= rel * e.abs() + abs,
            (a, e) => a == e,
        };
        assert!(ok, "{context}: element {i}: got {a:?}, expected {e:?}");
    }
}

/// How far a float result may be from the f64 reference, (relative, absolute): one rounding
/// to the type (the absolute part covers subnormal results).
pub fn float_tolerance(t: ElemType) -> (f64, f64) {
    match t {
        ElemType::Float => (1e-6, 1e-37),
        ElemType::Float16 => (1e-3, 1e-7),
        _ => (8e-3, 1e-37),
    }
}
