//! Small constant arrays that lowerings mix into their graphs.

use mlx_kernels::{ops, Array, Dtype, Stream};

use super::dtypes::ElemType;
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

/// A one-element tensor of `shape` holding -0.0, made as [`scalar`] makes it so that it keeps
/// its sign in compiled runs (see [`holds_negative_zero`]).
pub fn one_negative_zero(shape: &[i64], dtype: Dtype, stream: &Stream) -> Result<Array> {
    Ok(ops::reshape(&scalar(-0.0, dtype, stream)?, shape, stream)?)
}

/// The host copy of a tensor (an attribute's, a body's initializer) as an MLX array; one
/// element of -0.0 as [`scalar`] makes it, so that it keeps its sign in compiled runs.
pub fn tensor_array(value: &TensorValue, stream: &Stream) -> Result<Array> {
    let dtype = value
        .elem
        .to_mlx()
        .ok_or_else(|| OpError::new("a tensor of a type MLX cannot hold"))?;
    if holds_negative_zero(value.elem, &value.bytes) {
        return one_negative_zero(&value.shape, dtype, stream);
    }
    Ok(Array::from_bytes(&value.bytes, &value.shape, dtype)?)
}

/// Whether `bytes` (little-endian, as ORT holds tensors) are one float element of type `elem`
/// holding -0.0: a constant that mx.compile would write into a kernel as a literal without its
/// sign (see [`scalar`]).
pub fn holds_negative_zero(elem: ElemType, bytes: &[u8]) -> bool {
    let sign_only = |width: usize| {
        bytes.len() == width
            && bytes[..width - 1].iter().all(|&b| b == 0)
            && bytes[width - 1] == 0x80
    };
    match elem {
        ElemType::Float16 | ElemType::BFloat16 => sign_only(2),
        ElemType::Float => sign_only(4),
        ElemType::Double => sign_only(8),
        _ => false,
    }
}
