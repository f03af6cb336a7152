//! Where tensors of the narrow element types (int4, uint4, float8, float4) cross the EP's
//! boundary: ORT's packed bytes become their MLX carrier on the way in (inputs each run,
//! constant initializers once, at compile time) and carriers become packed bytes on the way out.
//! The element-type knowledge is `op_specs::table::narrow`'s; this module only moves bytes.

use std::borrow::Cow;

use mlx_kernels::{Array, Dtype, Stream};
use op_specs::table::narrow;
use op_specs::ElemType;

/// The carrier dtype of `elem` and `bytes` (ORT's layout of `count` values) in the carrier's
/// layout: borrowed as they are for the types MLX holds, decoded for the narrow ones.
pub fn carried<'a>(
    elem: ElemType,
    count: usize,
    bytes: &'a [u8],
) -> Result<(Dtype, Cow<'a, [u8]>), String> {
    let dtype = elem
        .carrier()
        .ok_or_else(|| format!("a {} tensor, which MLX cannot hold", elem.short_name()))?;
    if !elem.is_narrow() {
        return Ok((dtype, Cow::Borrowed(bytes)));
    }
    let decoded = narrow::decode(elem, bytes, count)
        .map_err(|e| format!("reading a {} tensor: {e}", elem.onnx_name()))?;
    Ok((dtype, Cow::Owned(decoded)))
}

/// A constant initializer of a narrow type as its carrier: the element type the plan keeps it
/// as (int8, uint8 or float16) and its bytes in that type.
pub fn constant_in_carrier(
    elem: ElemType,
    shape: &[i64],
    bytes: &[u8],
) -> Result<(ElemType, Vec<u8>), String> {
    let (dtype, carried) = carried(elem, element_count(shape)?, bytes)?;
    Ok((ElemType::from_mlx(dtype), carried.into_owned()))
}

/// An input of a narrow type, decoded into an MLX array the run owns.
pub fn input_array(elem: ElemType, shape: &[i64], bytes: &[u8]) -> Result<Array, String> {
    let (dtype, carried) = carried(elem, element_count(shape)?, bytes)?;
    Array::from_bytes(&carried, shape, dtype).map_err(|e| e.to_string())
}

/// Writes `array` (the carrier of narrow `elem`) into `dst` in ORT's layout. A value the type
/// cannot hold is a lowering's bug: the error says which element, and nothing is written.
pub fn write_output(
    array: &Array,
    elem: ElemType,
    dst: &mut [u8],
    stream: &Stream,
) -> Result<(), String> {
    let carrier = array.to_bytes(stream).map_err(|e| e.to_string())?;
    let packed = narrow::encode(elem, &carrier, array.size()).map_err(|unheld| {
        format!(
            "element {} of the {} output is {}, which {} cannot hold (a lowering bug)",
            unheld.index,
            elem.onnx_name(),
            unheld.value,
            elem.onnx_name()
        )
    })?;
    if packed.len() != dst.len() {
        return Err(format!(
            "a {} output of {} values takes {} bytes; ORT's buffer has {}",
            elem.onnx_name(),
            array.size(),
            packed.len(),
            dst.len()
        ));
    }
    dst.copy_from_slice(&packed);
    Ok(())
}

fn element_count(shape: &[i64]) -> Result<usize, String> {
    shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(usize::try_from(d).ok()?))
        .ok_or_else(|| format!("a tensor of shape {shape:?} has no element count"))
}
