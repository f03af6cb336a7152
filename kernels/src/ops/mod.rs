//! Op builders over MLX: each returns a lazy [`Array`](crate::Array) or MLX's error. Grouped by
//! family; the names follow MLX's, so MLX's documentation describes them.

mod elementwise;
mod fast;
mod fft;
mod linalg;
mod quant;
mod random;
mod reduce;
mod shape;

pub use elementwise::*;
pub use fast::*;
pub use fft::*;
pub use linalg::*;
pub use quant::*;
pub use random::*;
pub use reduce::*;
pub use shape::*;

/// `fn name(a, stream)` for each `mlx_*(res, a, stream)` function.
macro_rules! unary_ops {
    ($($(#[$doc:meta])* $name:ident => $ffi:ident),* $(,)?) => {$(
        $(#[$doc])*
        pub fn $name(a: &$crate::Array, stream: &$crate::Stream) -> $crate::Result<$crate::Array> {
            $crate::Array::from_op(|out| {
                // SAFETY: all handles are live; mlx-c writes the result into `out`.
                unsafe { $crate::sys::$ffi(out, a.raw(), stream.raw()) }
            })
        }
    )*};
}

/// `fn name(a, b, stream)` for each `mlx_*(res, a, b, stream)` function (numpy broadcasting).
macro_rules! binary_ops {
    ($($(#[$doc:meta])* $name:ident => $ffi:ident),* $(,)?) => {$(
        $(#[$doc])*
        pub fn $name(a: &$crate::Array, b: &$crate::Array, stream: &$crate::Stream) -> $crate::Result<$crate::Array> {
            $crate::Array::from_op(|out| {
                // SAFETY: all handles are live; mlx-c writes the result into `out`.
                unsafe { $crate::sys::$ffi(out, a.raw(), b.raw(), stream.raw()) }
            })
        }
    )*};
}

pub(crate) use {binary_ops, unary_ops};

/// An optional array argument as mlx-c takes it: an empty handle means "absent".
pub(crate) fn optional(array: Option<&crate::Array>) -> crate::sys::mlx_array {
    array.map_or(
        crate::sys::mlx_array {
            ctx: std::ptr::null_mut(),
        },
        |a| a.raw(),
    )
}

pub(crate) fn optional_int(value: Option<i32>) -> crate::sys::mlx_optional_int {
    crate::sys::mlx_optional_int {
        value: value.unwrap_or(0),
        has_value: value.is_some(),
    }
}
