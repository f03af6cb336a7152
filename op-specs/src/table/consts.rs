//! Small constant arrays that lowerings mix into their graphs.

use mlx_kernels::{ops, Array, Dtype, Stream};

use super::lower::{OpError, Result};
use super::node::TensorValue;

/// A 0-d array holding `value` converted to `dtype` (integers truncate toward zero, bool is
/// `value != 0`), so that mixing it in never promotes the other operand's type.
pub fn scalar(value: f64, dtype: Dtype, stream: &Stream) -> Result<Array> {
    let array = match dtype {
        Dtype::Bool => Array::scalar(value != 0.0)?,
        Dtype::U8 => Array::scalar(value as u8)?,
        Dtype::U16 => Array::scalar(value as u16)?,
        Dtype::U32 => Array::scalar(value as u32)?,
        Dtype::U64 => Array::scalar(value as u64)?,
        Dtype::I8 => Array::scalar(value as i8)?,
        Dtype::I16 => Array::scalar(value as i16)?,
        Dtype::I32 => Array::scalar(value as i32)?,
        Dtype::I64 => Array::scalar(value as i64)?,
        Dtype::F64 | Dtype::F32 | Dtype::F16 | Dtype::BF16 | Dtype::Complex64
            if negative_zero(value) =>
        {
            // mx.compile writes one-element constants into its fused kernels as literals, which
            // loses the sign of -0.0 (a lone one too); negating +0.0 is an op, which keeps it.
            let zero = ops::astype(&Array::scalar(0.0f32)?, dtype, stream)?;
            ops::negative(&zero, stream)?
        }
        Dtype::F64 => Array::scalar(value)?,
        Dtype::F32 => Array::scalar(value as f32)?,
        Dtype::F16 | Dtype::BF16 | Dtype::Complex64 => {
            ops::astype(&Array::scalar(value as f32)?, dtype, stream)?
        }
    };
    Ok(array)
}

fn negative_zero(value: f64) -> bool {
    value == 0.0 && value.is_sign_negative()
}

/// `scalar(value, like.dtype())`.
pub fn scalar_like(value: f64, like: &Array, stream: &Stream) -> Result<Array> {
    scalar(value, like.dtype(), stream)
}

/// Zeros of `shape` in `dtype` (a broadcast scalar: nothing is allocated until it is used).
pub fn zeros(shape: &[i64], dtype: Dtype, stream: &Stream) -> Result<Array> {
    Ok(ops::broadcast_to(
        &scalar(0.0, dtype, stream)?,
        shape,
        stream,
    )?)
}

/// The host copy of a tensor (an attribute's, a body's initializer) as an MLX array.
pub fn tensor_array(value: &TensorValue) -> Result<Array> {
    let dtype = value
        .elem
        .to_mlx()
        .ok_or_else(|| OpError::new("a tensor of a type MLX cannot hold"))?;
    Ok(Array::from_bytes(&value.bytes, &value.shape, dtype)?)
}
