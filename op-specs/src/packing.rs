//! Helpers shared by the block-quantised families (quantized.rs: MatMulNBits,
//! GatherBlockQuantized; moe.rs: QMoE): ORT's packed sub-byte values and per-group parameters.

use mlx_kernels::ops;
use mlx_kernels::{Array, Dtype, Stream};

use crate::table::consts::scalar;
use crate::{OpError, Result};

/// uint8 `x [..., L]` holding `8 / bits` values per byte, low bits first -> `[..., L·8/bits]`.
pub(crate) fn unpack(x: &Array, bits: i64, s: &Stream) -> Result<Array> {
    if bits == 8 {
        return Ok(x.clone());
    }
    let mut shape = x.shape();
    if let Some(last) = shape.last_mut() {
        *last *= 8 / bits;
    }
    Ok(ops::reshape(&unpack_lanes(x, bits, s)?, &shape, s)?)
}

/// uint8 `x [..., L]` -> `[..., L, 8/bits]`: each byte's values, low bits first, on a new last
/// axis. One shift and one mask broadcast over that axis, both elementwise: a compiled plan
/// fuses them with what follows (a dequantisation) into one pass over the packed bytes.
pub(crate) fn unpack_lanes(x: &Array, bits: i64, s: &Stream) -> Result<Array> {
    let bytes = ops::expand_dims(x, &[-1], s)?;
    if bits == 8 {
        return Ok(bytes);
    }
    let shifts: Vec<u8> = (0..8 / bits).map(|j| (j * bits) as u8).collect();
    let shifts = Array::from_slice(&shifts, &[shifts.len() as i64])?;
    let mask = scalar(((1 << bits) - 1) as f64, Dtype::U8, s)?;
    Ok(ops::bitwise_and(
        &ops::right_shift(&bytes, &shifts, s)?,
        &mask,
        s,
    )?)
}

/// `x [..., L]` with each element repeated `times` along the last axis: `[..., L·times]`.
pub(crate) fn repeat_last(x: &Array, times: i64, s: &Stream) -> Result<Array> {
    if times == 1 {
        return Ok(x.clone());
    }
    let mut wide = x.shape();
    wide.push(times);
    let expanded = ops::broadcast_to(&ops::expand_dims(x, &[-1], s)?, &wide, s)?;
    wide.pop();
    if let Some(last) = wide.last_mut() {
        *last *= times;
    }
    Ok(ops::reshape(&expanded, &wide, s)?)
}

/// The first `len` elements of the last axis (the padding of a packed last byte or block
/// dropped).
pub(crate) fn take_first(x: &Array, len: i64, s: &Stream) -> Result<Array> {
    let shape = x.shape();
    if shape.last() == Some(&len) {
        return Ok(x.clone());
    }
    let start = vec![0; shape.len()];
    let mut stop: Vec<i32> = shape.iter().map(|&d| d as i32).collect();
    if let Some(last) = stop.last_mut() {
        *last = len as i32;
    }
    let step = vec![1; shape.len()];
    Ok(ops::slice(x, &start, &stop, &step, s)?)
}

/// `array` must have `shape`; `what` names it in the error.
pub(crate) fn expect_shape(array: &Array, shape: &[i64], what: &str) -> Result<()> {
    expect_one_of(array, &[shape.to_vec()], what)
}

/// `array` must have one of `shapes`; `what` names it in the error.
pub(crate) fn expect_one_of(array: &Array, shapes: &[Vec<i64>], what: &str) -> Result<()> {
    if shapes.contains(&array.shape()) {
        return Ok(());
    }
    let wanted: Vec<String> = shapes.iter().map(|s| format!("{s:?}")).collect();
    Err(OpError::new(format!(
        "{what} has shape {:?}; ORT's kernel takes {}",
        array.shape(),
        wanted.join(" or ")
    )))
}
