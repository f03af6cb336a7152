//! Safe Rust over MLX, through mlx-c.
//!
//! Everything that touches MLX's C API lives here: the generated bindings ([`sys`]), RAII
//! owners ([`Array`], [`Stream`], [`VectorArray`], [`Closure`]), the op builders ([`ops`]) and
//! the BLAS check ([`blas`]), and the hand-written GPU kernels ([`custom`]). Every MLX failure comes back as an [`Error`] carrying MLX's own
//! message; nothing here panics on bad input or exits the process.
//!
//! MLX objects are thread-affine (`!Send`): a graph is built, evaluated and read on one thread.

mod array;
pub mod blas;
pub mod bound_memory;
mod closure;
pub mod cuda;
pub mod custom;
mod dtype;
mod error;
pub mod memory;
pub mod ops;
mod runtime;
mod shape;
mod stream;
pub mod stream_copy;
pub mod sys;
mod vector;

pub use array::{arrays_created, Array};
pub use closure::{set_kernel_fusion, Closure};
pub use dtype::{Dtype, Element};
pub use error::{Error, Result, EVAL_WHILE_TRACING};
pub use runtime::{init, mlx_version};
pub use shape::to_mlx_shape;
pub use stream::{DeviceKind, KernelChoice, Stream};
pub use vector::VectorArray;
