//! Elementwise comparisons with numpy broadcasting; the outputs are booleans.

use mlx_kernels::{ops, Array};

use crate::{onnx_op, Lower, Result};

/// Elementwise `A == B`.
#[onnx_op(op = "Equal", since = 7, types(T = ANY, T1 = BOOL), inputs(A: T, B: T), outputs(C: T1), shape = Shapeless)]
fn equal(cx: &mut Lower, a: Array, b: Array) -> Result<Array> {
    Ok(ops::equal(&a, &b, cx.stream())?)
}

/// Elementwise `A > B`.
#[onnx_op(op = "Greater", since = 7, types(T = NUMERIC, T1 = BOOL), inputs(A: T, B: T), outputs(C: T1), shape = Shapeless)]
fn greater(cx: &mut Lower, a: Array, b: Array) -> Result<Array> {
    Ok(ops::greater(&a, &b, cx.stream())?)
}

/// Elementwise `A < B`.
#[onnx_op(op = "Less", since = 7, types(T = NUMERIC, T1 = BOOL), inputs(A: T, B: T), outputs(C: T1), shape = Shapeless)]
fn less(cx: &mut Lower, a: Array, b: Array) -> Result<Array> {
    Ok(ops::less(&a, &b, cx.stream())?)
}

/// Elementwise `A >= B`.
#[onnx_op(op = "GreaterOrEqual", since = 12, types(T = NUMERIC, T1 = BOOL), inputs(A: T, B: T), outputs(C: T1), shape = Shapeless)]
fn greater_or_equal(cx: &mut Lower, a: Array, b: Array) -> Result<Array> {
    Ok(ops::greater_equal(&a, &b, cx.stream())?)
}

/// Elementwise `A <= B`.
#[onnx_op(op = "LessOrEqual", since = 12, types(T = NUMERIC, T1 = BOOL), inputs(A: T, B: T), outputs(C: T1), shape = Shapeless)]
fn less_or_equal(cx: &mut Lower, a: Array, b: Array) -> Result<Array> {
    Ok(ops::less_equal(&a, &b, cx.stream())?)
}
