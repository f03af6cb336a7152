//! Properties: every binary elementwise op, for every dtype its entry claims, equals a plain
//! reference under numpy broadcasting over random shapes (zero-size ones included) and values.
//! A suite of its own, not a family file's test: one property over arithmetic, compare and logic.

mod common;

use common::*;
use op_specs::{lookup, AttrValue, ElemType};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// (A's shape, B's shape): suffixes of one output shape with some dimensions set to 1.
fn broadcast_pair() -> impl Strategy<Value = (Vec<i64>, Vec<i64>)> {
    let out = prop::collection::vec(prop_oneof![4 => 1i64..=3, 1 => Just(0i64)], 0..=3);
    out.prop_flat_map(|out| {
        let rank = out.len();
        let operand = move |out: Vec<i64>| {
            (
                0..=rank,
                prop::collection::vec(prop::bool::weighted(0.3), rank),
            )
                .prop_map(move |(keep, ones)| {
                    let start = rank - keep;
                    (start..rank)
                        .map(|i| if ones[i] { 1 } else { out[i] })
                        .collect::<Vec<i64>>()
                })
        };
        (operand(out.clone()), operand(out))
    })
}

/// Raw material for values: each element picks from special values or a uniform draw.
fn raw_values() -> impl Strategy<Value = Vec<(u8, f64)>> {
    prop::collection::vec((0u8..8, -1.0f64..1.0), 81)
}

fn value_for(t: ElemType, (pick, unit): (u8, f64)) -> V {
    if t == ElemType::Bool {
        return V::B(unit > 0.0);
    }
    if is_float(t) {
        return V::F(match pick {
            0 => 0.0,
            1 => -1.0,
            _ => unit * 10.0,
        });
    }
    let (lo, hi) = int_range(t);
    V::I(
        match pick {
            0 => 0,
            1 if is_signed(t) => -1,
            2 => lo,
            3 => hi,
            4 | 5 => (unit * 7.0).round() as i128,
            _ => lo + ((unit + 1.0) / 2.0 * (hi - lo) as f64) as i128,
        }
        .clamp(lo, hi),
    )
}

type Reference = fn(ElemType, V, V) -> V;

fn float_or_int(t: ElemType, a: V, b: V, f: fn(f64, f64) -> f64, i: fn(i128, i128) -> i128) -> V {
    match (a, b) {
        (V::F(a), V::F(b)) => V::F(f(a, b)),
        (V::I(a), V::I(b)) => V::I(wrap(i(a, b), t)),
        _ => unreachable!("mixed operand kinds"),
    }
}

fn compare(a: V, b: V, f: fn(std::cmp::Ordering) -> bool) -> V {
    let ordering = match (a, b) {
        (V::F(a), V::F(b)) => a.partial_cmp(&b),
        (V::I(a), V::I(b)) => Some(a.cmp(&b)),
        (V::B(a), V::B(b)) => Some(a.cmp(&b)),
        _ => None,
    };
    V::B(ordering.is_some_and(f))
}

// Integer references never see a zero divisor: such a run must fail (see `check_case`).

/// C's truncating division.
fn trunc_div(a: i128, b: i128) -> i128 {
    a / b
}

fn python_mod(a: i128, b: i128) -> i128 {
    a.rem_euclid(b) + if b < 0 && a.rem_euclid(b) != 0 { b } else { 0 }
}

fn c_mod(a: i128, b: i128) -> i128 {
    a % b
}

fn bits_of(v: V) -> i128 {
    match v {
        V::I(x) => x,
        _ => unreachable!(),
    }
}

/// One op under test: its table entry's first dtype variable decides the dtypes to try.
struct Case {
    op: &'static str,
    opset: i64,
    attrs: Vec<(&'static str, AttrValue)>,
    reference: Reference,
}

fn cases() -> Vec<Case> {
    let case = |op, opset, reference| Case {
        op,
        opset,
        attrs: vec![],
        reference,
    };
    vec![
        case("Add", 14, |t, a, b| {
            float_or_int(t, a, b, |a, b| a + b, |a, b| a + b)
        }),
        case("Sub", 14, |t, a, b| {
            float_or_int(t, a, b, |a, b| a - b, |a, b| a - b)
        }),
        case("Mul", 14, |t, a, b| {
            float_or_int(t, a, b, |a, b| a * b, |a, b| a * b)
        }),
        case("Div", 14, |t, a, b| {
            float_or_int(t, a, b, |a, b| a / b, trunc_div)
        }),
        case("Max", 13, |t, a, b| {
            float_or_int(t, a, b, f64::max, |a, b| a.max(b))
        }),
        case("Min", 13, |t, a, b| {
            float_or_int(t, a, b, f64::min, |a, b| a.min(b))
        }),
        Case {
            op: "Mod",
            opset: 13,
            attrs: vec![("fmod", AttrValue::Int(1))],
            reference: |t, a, b| float_or_int(t, a, b, |a, b| a % b, c_mod),
        },
        case("Mod", 13, |t, a, b| {
            float_or_int(t, a, b, |_, _| f64::NAN, python_mod)
        }),
        case("Pow", 15, |t, a, b| {
            float_or_int(t, a, b, f64::powf, |_, _| 0)
        }),
        case("Equal", 19, |_, a, b| compare(a, b, |o| o.is_eq())),
        case("Greater", 13, |_, a, b| compare(a, b, |o| o.is_gt())),
        case("Less", 13, |_, a, b| compare(a, b, |o| o.is_lt())),
        case("GreaterOrEqual", 16, |_, a, b| compare(a, b, |o| o.is_ge())),
        case("LessOrEqual", 16, |_, a, b| compare(a, b, |o| o.is_le())),
        case("And", 7, |_, a, b| V::B(a == V::B(true) && b == V::B(true))),
        case("Or", 7, |_, a, b| V::B(a == V::B(true) || b == V::B(true))),
        case("Xor", 7, |_, a, b| V::B(a != b)),
        case("BitwiseAnd", 18, |t, a, b| {
            V::I(wrap(bits_of(a) & bits_of(b), t))
        }),
        case("BitwiseOr", 18, |t, a, b| {
            V::I(wrap(bits_of(a) | bits_of(b), t))
        }),
        case("BitwiseXor", 18, |t, a, b| {
            V::I(wrap(bits_of(a) ^ bits_of(b), t))
        }),
    ]
}

/// Whether the reference is defined for this dtype (Python-style Mod is integer-only and is
/// declined for floats; integer Pow is left to its own test).
fn applies(case: &Case, t: ElemType) -> bool {
    let python_mod_on_floats = is_float(t) && case.op == "Mod" && case.attrs.is_empty();
    let integer_pow = case.op == "Pow" && !is_float(t);
    !python_mod_on_floats && !integer_pow
}

fn check_case(
    case: &Case,
    t: ElemType,
    shapes: &(Vec<i64>, Vec<i64>),
    raw: &[(u8, f64)],
) -> Result<(), TestCaseError> {
    let (sa, sb) = shapes;
    let out_shape = broadcast_shape(&[sa, sb]).expect("strategy builds compatible shapes");
    let count = |s: &[i64]| s.iter().product::<i64>() as usize;
    let va: Vec<V> = raw
        .iter()
        .take(count(sa))
        .map(|r| value_for(t, *r))
        .collect();
    let vb: Vec<V> = raw
        .iter()
        .rev()
        .take(count(sb))
        .map(|r| value_for(t, *r))
        .collect();
    let (a, va) = make(&va, sa, t);
    let (b, vb) = make(&vb, sb, t);

    let spec = lookup("", case.op, case.opset).expect("entry exists");
    let output_var = spec.type_var(spec.outputs[0].type_var).unwrap();
    let out_type = if output_var.allowed.contains(t) {
        t
    } else {
        ElemType::Bool
    };
    let mut n = node(case.op, case.opset, &[t, t], out_type);
    for (name, value) in &case.attrs {
        n = with_attr(n, name, value.clone());
    }
    let (ia, ib) = (
        source_indices(&out_shape, sa),
        source_indices(&out_shape, sb),
    );
    // An integer zero divisor fails the run, as in ORT's CPU EP (which checks every divisor,
    // even where the broadcast result is empty).
    let divides = matches!(case.op, "Div" | "Mod") && !is_float(t);
    if divides && vb.contains(&V::I(0)) {
        let outcome = run(&n, &[Some(a), Some(b)]);
        prop_assert!(
            outcome.as_ref().is_err_and(|e| e.contains("by zero")),
            "{} {t:?}: a zero divisor must fail the run",
            case.op
        );
        return Ok(());
    }
    // fmod over 64-bit integers past 2^53 fails the run (but by ±1, which gives 0 on both
    // sides): ORT's CPU EP computes it in doubles, which round such operands first.
    let wide = matches!(t, ElemType::Int64 | ElemType::Uint64);
    let past = |v: V| matches!(v, V::I(i) if i.unsigned_abs() > 1 << 53);
    let rounded =
        |(&i, &j): (&usize, &usize)| past(vb[j]) || (past(va[i]) && !matches!(vb[j], V::I(1 | -1)));
    let fmod = case.op == "Mod" && !case.attrs.is_empty();
    if fmod && wide && ia.iter().zip(&ib).any(rounded) {
        let outcome = run(&n, &[Some(a), Some(b)]);
        prop_assert!(
            outcome.as_ref().is_err_and(|e| e.contains("beyond ±2^53")),
            "fmod {t:?}: operands past 2^53 must fail the run"
        );
        return Ok(());
    }
    let result = run(&n, &[Some(a), Some(b)]).map_err(TestCaseError::fail)?;
    prop_assert_eq!(result[0].shape(), out_shape.clone());
    prop_assert_eq!(result[0].dtype(), dtype(out_type));

    let mut expected: Vec<V> = ia
        .iter()
        .zip(&ib)
        .map(|(&i, &j)| (case.reference)(t, va[i], vb[j]))
        .collect();
    if is_float(t) && out_type == t {
        // Round the exact reference through the type once, as the op does.
        let rounded = make(&expected, &[expected.len() as i64], t).1;
        expected = rounded;
    }
    let tolerance = if case.op == "Pow" {
        (1e-5, 1e-30)
    } else {
        float_tolerance(t)
    };
    assert_matches(
        &read(&result[0]),
        &expected,
        tolerance,
        &format!("{} {t:?} {sa:?} {sb:?}", case.op),
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn binary_ops_broadcast_like_the_reference(shapes in broadcast_pair(), raw in raw_values()) {
        for case in cases() {
            let spec = lookup("", case.op, case.opset).expect("entry exists");
            let input_var = spec.type_var(spec.inputs[0].type_var).unwrap();
            for t in input_var.allowed.iter().filter(|t| applies(&case, *t)) {
                check_case(&case, t, &shapes, &raw)?;
            }
        }
    }
}
