//! Affine group-wise quantisation and the matmul that consumes it.

use std::ffi::CString;

use super::{optional, optional_int};
use crate::error::Error;
use crate::{sys, Array, Result, Stream, VectorArray};

/// A weight quantised by [`quantize`]: packed values plus one scale and bias per group.
#[derive(Debug, Clone)]
pub struct Quantized {
    pub weight: Array,
    pub scales: Array,
    pub biases: Array,
    pub group_size: i32,
    pub bits: i32,
}

fn affine() -> CString {
    CString::new("affine").expect("no NUL")
}

/// Quantises `w` (last axis grouped by `group_size`) to `bits` bits, affine mode.
pub fn quantize(w: &Array, group_size: i32, bits: i32, stream: &Stream) -> Result<Quantized> {
    let mode = affine();
    // SAFETY: an owned empty vector, filled in place by mlx_quantize and owned by `parts`.
    let mut raw = unsafe { sys::mlx_vector_array_new() };
    // SAFETY: all handles are live; no global scale (empty handle) in affine mode.
    let status = unsafe {
        sys::mlx_quantize(
            &mut raw,
            w.raw(),
            optional_int(Some(group_size)),
            optional_int(Some(bits)),
            mode.as_ptr(),
            optional(None),
            stream.raw(),
        )
    };
    let parts = VectorArray::from_raw(raw);
    crate::error::check(status)?;
    let mut parts = parts.to_vec()?.into_iter();
    match (parts.next(), parts.next(), parts.next()) {
        (Some(weight), Some(scales), Some(biases)) => Ok(Quantized {
            weight,
            scales,
            biases,
            group_size,
            bits,
        }),
        _ => Err(Error::Mlx(
            "affine quantize returned fewer than three arrays".into(),
        )),
    }
}

/// `x · wᵀ` (or `x · w` when `transpose` is false) with `w` quantised.
pub fn quantized_matmul(
    x: &Array,
    w: &Quantized,
    transpose: bool,
    stream: &Stream,
) -> Result<Array> {
    let mode = affine();
    Array::from_op(|out| {
        // SAFETY: all handles are live; `mode` outlives the call.
        unsafe {
            sys::mlx_quantized_matmul(
                out,
                x.raw(),
                w.weight.raw(),
                w.scales.raw(),
                w.biases.raw(),
                transpose,
                optional_int(Some(w.group_size)),
                optional_int(Some(w.bits)),
                mode.as_ptr(),
                stream.raw(),
            )
        }
    })
}

/// Reconstructs the float weight from its quantised form.
pub fn dequantize(w: &Quantized, stream: &Stream) -> Result<Array> {
    let mode = affine();
    let no_dtype = sys::mlx_optional_dtype {
        value: sys::mlx_dtype::MLX_FLOAT32,
        has_value: false,
    };
    Array::from_op(|out| {
        // SAFETY: all handles are live; `mode` outlives the call.
        unsafe {
            sys::mlx_dequantize(
                out,
                w.weight.raw(),
                w.scales.raw(),
                w.biases.raw(),
                optional_int(Some(w.group_size)),
                optional_int(Some(w.bits)),
                mode.as_ptr(),
                optional(None),
                no_dtype,
                stream.raw(),
            )
        }
    })
}

/// `x[lhs] · w[rhs]ᵀ` (or `· w[rhs]` when `transpose` is false) with `w` quantised and stacked
/// along its leading dims: [`gather_mm`](super::gather_mm) for quantised weights, so each row
/// reads only the matrices its indices pick.
pub fn gather_qmm(
    x: &Array,
    w: &Quantized,
    lhs_indices: Option<&Array>,
    rhs_indices: Option<&Array>,
    transpose: bool,
    stream: &Stream,
) -> Result<Array> {
    let mode = affine();
    Array::from_op(|out| {
        // SAFETY: all handles are live (an absent index set is MLX's empty handle, read as
        // "not given"); `mode` outlives the call; MLX validates shapes and index dtypes.
        unsafe {
            sys::mlx_gather_qmm(
                out,
                x.raw(),
                w.weight.raw(),
                w.scales.raw(),
                w.biases.raw(),
                optional(lhs_indices),
                optional(rhs_indices),
                transpose,
                optional_int(Some(w.group_size)),
                optional_int(Some(w.bits)),
                mode.as_ptr(),
                false,
                stream.raw(),
            )
        }
    })
}
