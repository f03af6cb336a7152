//! Tensors as ORT hands them to a fused node's compute call, borrowed as host bytes.

use std::ptr;

use op_specs::ElemType;

use super::api::{call, check};
use super::graph::tensor_type_and_shape;
use super::sys;

/// A tensor's element type, concrete shape and bytes, borrowed from ORT.
#[derive(Debug)]
pub struct HostTensor<'a> {
    pub elem: ElemType,
    pub shape: Vec<i64>,
    pub bytes: &'a [u8],
}

/// Borrows the bytes of a CPU tensor `OrtValue`.
///
/// # Safety
/// `value` must be a live tensor whose data outlives `'a` and is not written meanwhile.
pub unsafe fn tensor<'a>(value: *const sys::OrtValue) -> Result<HostTensor<'a>, String> {
    let mut info = ptr::null_mut();
    // SAFETY: `value` is live; we release `info` below.
    check(unsafe { call!(api.GetTensorTypeAndShape(value, &mut info)) })?;
    let described = tensor_type_and_shape(info);
    // SAFETY: releasing the info we own, once.
    unsafe { call!(api.ReleaseTensorTypeAndShapeInfo(info)) };
    let (elem, shape) = described?;
    let elem = elem.ok_or("a tensor of an element type unknown to this EP")?;
    let shape: Vec<i64> = shape
        .into_iter()
        .map(|d| d.ok_or("a tensor with a negative dimension"))
        .collect::<Result<_, _>>()?;
    let count = shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d as usize))
        .ok_or("tensor too large")?;
    // Narrow types are packed (two 4-bit values a byte): their length is not count × size.
    let len = elem
        .bytes_for(count)
        .ok_or_else(|| format!("a {} tensor, which MLX cannot hold", elem.short_name()))?;
    let bytes: &'a [u8] = if len == 0 {
        &[]
    } else {
        let mut data = ptr::null();
        // SAFETY: `value` is a live tensor; its data holds `len` bytes (element count × size).
        check(unsafe { call!(api.GetTensorData(value, &mut data)) })?;
        // SAFETY: per the function's contract, the data outlives 'a unchanged.
        unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) }
    };
    Ok(HostTensor { elem, shape, bytes })
}

pub fn input_count(context: *mut sys::OrtKernelContext) -> Result<usize, String> {
    let mut count = 0usize;
    // SAFETY: `context` is the live kernel context of the current compute call.
    check(unsafe { call!(api.KernelContext_GetInputCount(context, &mut count)) })?;
    Ok(count)
}

/// Input `index` of the current compute call (`None` for an absent optional input).
///
/// # Safety
/// `context` must be the live kernel context; the tensor is valid for the compute call.
pub unsafe fn input<'a>(
    context: *mut sys::OrtKernelContext,
    index: usize,
) -> Result<Option<HostTensor<'a>>, String> {
    let mut value = ptr::null();
    // SAFETY: per the contract.
    check(unsafe { call!(api.KernelContext_GetInput(context, index, &mut value)) })?;
    if value.is_null() {
        return Ok(None);
    }
    // SAFETY: ORT keeps inputs alive and unchanged for the compute call.
    unsafe { tensor(value) }.map(Some)
}

/// Allocates output `index` with `shape` and returns its bytes (ORT's layout of `elem`) to fill.
///
/// # Safety
/// `context` must be the live kernel context; the bytes are valid for the compute call.
pub unsafe fn output<'a>(
    context: *mut sys::OrtKernelContext,
    index: usize,
    shape: &[i64],
    elem: ElemType,
) -> Result<&'a mut [u8], String> {
    let mut value = ptr::null_mut();
    // SAFETY: per the contract; ORT allocates the output with the given shape.
    check(unsafe {
        call!(api.KernelContext_GetOutput(context, index, shape.as_ptr(), shape.len(), &mut value))
    })?;
    let count: i64 = shape.iter().product();
    let len = elem.bytes_for(count as usize).ok_or_else(|| {
        format!(
            "an output of type {}, which MLX cannot hold",
            elem.short_name()
        )
    })?;
    if len == 0 {
        return Ok(&mut []);
    }
    let mut data = ptr::null_mut();
    // SAFETY: `value` is the tensor ORT just allocated, `len` bytes long.
    check(unsafe { call!(api.GetTensorMutableData(value, &mut data)) })?;
    // SAFETY: exclusive access to the freshly allocated output for the compute call.
    Ok(unsafe { std::slice::from_raw_parts_mut(data.cast::<u8>(), len) })
}
