//! Elementwise arithmetic, comparisons, logic and math functions.

use super::{binary_ops, unary_ops};

binary_ops! {
    add => mlx_add,
    subtract => mlx_subtract,
    multiply => mlx_multiply,
    divide => mlx_divide,
    floor_divide => mlx_floor_divide,
    remainder => mlx_remainder,
    power => mlx_power,
    maximum => mlx_maximum,
    minimum => mlx_minimum,
    arctan2 => mlx_arctan2,
    logaddexp => mlx_logaddexp,
    equal => mlx_equal,
    not_equal => mlx_not_equal,
    greater => mlx_greater,
    greater_equal => mlx_greater_equal,
    less => mlx_less,
    less_equal => mlx_less_equal,
    logical_and => mlx_logical_and,
    logical_or => mlx_logical_or,
    bitwise_and => mlx_bitwise_and,
    bitwise_or => mlx_bitwise_or,
    bitwise_xor => mlx_bitwise_xor,
    left_shift => mlx_left_shift,
    right_shift => mlx_right_shift,
}

unary_ops! {
    abs => mlx_abs,
    negative => mlx_negative,
    sign => mlx_sign,
    reciprocal => mlx_reciprocal,
    sqrt => mlx_sqrt,
    rsqrt => mlx_rsqrt,
    square => mlx_square,
    exp => mlx_exp,
    expm1 => mlx_expm1,
    log => mlx_log,
    log1p => mlx_log1p,
    ceil => mlx_ceil,
    floor => mlx_floor,
    trunc => mlx_trunc,
    erf => mlx_erf,
    erfinv => mlx_erfinv,
    sin => mlx_sin,
    cos => mlx_cos,
    tan => mlx_tan,
    arcsin => mlx_arcsin,
    arccos => mlx_arccos,
    arctan => mlx_arctan,
    sinh => mlx_sinh,
    cosh => mlx_cosh,
    tanh => mlx_tanh,
    arcsinh => mlx_arcsinh,
    arccosh => mlx_arccosh,
    arctanh => mlx_arctanh,
    sigmoid => mlx_sigmoid,
    isinf => mlx_isinf,
    isnan => mlx_isnan,
    isposinf => mlx_isposinf,
    isneginf => mlx_isneginf,
    logical_not => mlx_logical_not,
    bitwise_invert => mlx_bitwise_invert,
}

/// Elementwise choice: `x` where `condition`, else `y` (broadcasting).
pub fn where_(
    condition: &crate::Array,
    x: &crate::Array,
    y: &crate::Array,
    stream: &crate::Stream,
) -> crate::Result<crate::Array> {
    crate::Array::from_op(|out| {
        // SAFETY: all handles are live; mlx-c writes the result into `out`.
        unsafe { crate::sys::mlx_where(out, condition.raw(), x.raw(), y.raw(), stream.raw()) }
    })
}

/// Round half to even, to `decimals` places.
pub fn round(
    a: &crate::Array,
    decimals: i32,
    stream: &crate::Stream,
) -> crate::Result<crate::Array> {
    crate::Array::from_op(|out| {
        // SAFETY: all handles are live; mlx-c writes the result into `out`.
        unsafe { crate::sys::mlx_round(out, a.raw(), decimals, stream.raw()) }
    })
}
