//! Properties: unary float ops and activations equal their defining formula (in f64) for
//! every float dtype their entry claims, within the type's precision.
//! A suite of its own, not a family file's test: one property over math, activation and cast.

mod common;

use common::*;
use op_specs::{lookup, AttrValue, ElemType};
use proptest::prelude::*;

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

fn softplus(x: f64) -> f64 {
    if x > 0.0 {
        x + (-x).exp().ln_1p()
    } else {
        x.exp().ln_1p()
    }
}

fn round_half_even(x: f64) -> f64 {
    let r = x.round();
    if (x - x.trunc()).abs() == 0.5 && r % 2.0 != 0.0 {
        r - x.signum()
    } else {
        r
    }
}

type Formula = fn(f64) -> f64;
/// (op, opset, attributes, formula, input domain as (low, high)).
type Case = (
    &'static str,
    i64,
    Vec<(&'static str, AttrValue)>,
    Formula,
    (f64, f64),
);

fn cases() -> Vec<Case> {
    let wide = (-6.0, 6.0);
    let positive = (0.01, 8.0);
    let unit = (-0.99, 0.99);
    let no = Vec::new;
    vec![
        ("Abs", 13, no(), f64::abs, wide),
        ("Neg", 13, no(), |x| -x, wide),
        (
            "Sign",
            13,
            no(),
            |x| if x == 0.0 { 0.0 } else { x.signum() },
            wide,
        ),
        ("Reciprocal", 13, no(), |x| 1.0 / x, positive),
        ("Sqrt", 13, no(), f64::sqrt, positive),
        ("Exp", 13, no(), f64::exp, wide),
        ("Log", 13, no(), f64::ln, positive),
        ("Ceil", 13, no(), f64::ceil, wide),
        ("Floor", 13, no(), f64::floor, wide),
        ("Round", 11, no(), round_half_even, wide),
        ("Sin", 7, no(), f64::sin, wide),
        ("Cos", 7, no(), f64::cos, wide),
        ("Tan", 7, no(), f64::tan, (-1.2, 1.2)),
        ("Asin", 7, no(), f64::asin, unit),
        ("Acos", 7, no(), f64::acos, unit),
        ("Atan", 7, no(), f64::atan, wide),
        ("Sinh", 9, no(), f64::sinh, wide),
        ("Cosh", 9, no(), f64::cosh, wide),
        ("Asinh", 9, no(), f64::asinh, wide),
        ("Acosh", 9, no(), f64::acosh, (1.01, 8.0)),
        ("Atanh", 9, no(), f64::atanh, unit),
        ("Sigmoid", 13, no(), sigmoid, wide),
        ("Tanh", 13, no(), f64::tanh, wide),
        ("Relu", 14, no(), |x| x.max(0.0), wide),
        (
            "LeakyRelu",
            16,
            vec![("alpha", AttrValue::Float(0.25))],
            |x| if x >= 0.0 { x } else { 0.25 * x },
            wide,
        ),
        (
            "Elu",
            6,
            no(),
            |x| if x < 0.0 { x.exp_m1() } else { x },
            wide,
        ),
        (
            "Selu",
            6,
            no(),
            |x| {
                1.050_701
                    * if x <= 0.0 {
                        1.673_263_2 * x.exp_m1()
                    } else {
                        x
                    }
            },
            wide,
        ),
        (
            "Celu",
            12,
            vec![("alpha", AttrValue::Float(2.0))],
            |x| x.max(0.0) + (2.0 * (x / 2.0).exp_m1()).min(0.0),
            wide,
        ),
        (
            "HardSigmoid",
            6,
            no(),
            |x| (0.2 * x + 0.5).clamp(0.0, 1.0),
            wide,
        ),
        (
            "HardSwish",
            14,
            no(),
            |x| x * (x / 6.0 + 0.5).clamp(0.0, 1.0),
            wide,
        ),
        ("Mish", 18, no(), |x| x * softplus(x).tanh(), wide),
        ("Softplus", 1, no(), softplus, wide),
        ("Softsign", 1, no(), |x| x / (1.0 + x.abs()), wide),
        (
            "ThresholdedRelu",
            10,
            vec![("alpha", AttrValue::Float(0.5))],
            |x| if x > 0.5 { x } else { 0.0 },
            wide,
        ),
        (
            "Shrink",
            9,
            vec![
                ("bias", AttrValue::Float(0.5)),
                ("lambd", AttrValue::Float(1.0)),
            ],
            |x| {
                if x < -1.0 {
                    x + 0.5
                } else if x > 1.0 {
                    x - 0.5
                } else {
                    0.0
                }
            },
            wide,
        ),
        (
            "Gelu",
            20,
            vec![("approximate", AttrValue::String("tanh".into()))],
            |x| {
                0.5 * x
                    * (1.0
                        + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())
            },
            wide,
        ),
        ("Identity", 21, no(), |x| x, wide),
    ]
}

/// One rounding of the input and of the output, and the op's own few-ulp error.
fn tolerance(t: ElemType) -> (f64, f64) {
    match t {
        ElemType::Float => (2e-6, 2e-6),
        ElemType::Float16 => (2e-3, 2e-3),
        _ => (1.6e-2, 1.6e-2),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn unary_ops_follow_their_formula(units in prop::collection::vec(0.0f64..1.0, 1..40)) {
        for (op, opset, attrs, formula, (low, high)) in cases() {
            let spec = lookup("", op, opset).unwrap_or_else(|| panic!("{op} {opset} not in the table"));
            let allowed = spec.type_var(spec.inputs[0].type_var).unwrap().allowed;
            for t in allowed.iter().filter(|t| is_float(*t)) {
                let values: Vec<V> = units.iter().map(|u| V::F(low + u * (high - low))).collect();
                let (x, held) = make(&values, &[values.len() as i64], t);
                let mut n = node(op, opset, &[t], t);
                for (name, value) in &attrs {
                    n = with_attr(n, name, value.clone());
                }
                let out = run(&n, &[Some(x)]).map_err(TestCaseError::fail)?;
                let expected: Vec<V> = held.iter().map(|v| match v { V::F(x) => V::F(formula(*x)), _ => unreachable!() }).collect();
                // Step functions (Ceil, Floor, Round, Sign, thresholds) are exact on exact inputs.
                assert_matches(&read(&out[0]), &expected, tolerance(t), &format!("{op} {t:?}"));
            }
        }
    }
}
