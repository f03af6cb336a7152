//! MLX dimensions are `i32`; ONNX's are `i64`. Conversions never truncate.

use crate::error::{Error, Result};

/// Converts an ONNX-style shape to MLX's, refusing negative or oversized dimensions.
pub fn to_mlx_shape(dims: &[i64]) -> Result<Vec<i32>> {
    if dims.len() > i32::MAX as usize {
        return Err(Error::Shape(format!(
            "{} dimensions is more than MLX supports",
            dims.len()
        )));
    }
    dims.iter()
        .map(|&d| {
            i32::try_from(d).ok().filter(|d| *d >= 0).ok_or_else(|| {
                Error::Shape(format!(
                    "dimension {d} in shape {dims:?} does not fit MLX's non-negative i32 dimensions"
                ))
            })
        })
        .collect()
}

/// Number of elements of a shape, refusing overflow.
pub(crate) fn element_count(dims: &[i64]) -> Result<usize> {
    dims.iter().try_fold(1usize, |acc, &d| {
        usize::try_from(d)
            .ok()
            .and_then(|d| acc.checked_mul(d))
            .ok_or_else(|| Error::Shape(format!("shape {dims:?} has no valid element count")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fits_i32() {
        assert_eq!(to_mlx_shape(&[2, 3, 0]).unwrap(), vec![2, 3, 0]);
        assert_eq!(to_mlx_shape(&[]).unwrap(), Vec::<i32>::new());
    }

    #[test]
    fn never_truncates() {
        let err = to_mlx_shape(&[1, 1 << 31]).unwrap_err();
        assert!(matches!(err, Error::Shape(m) if m.contains("2147483648")));
        assert!(to_mlx_shape(&[-1]).is_err());
    }

    #[test]
    fn counts_elements_without_overflow() {
        assert_eq!(element_count(&[2, 3, 4]).unwrap(), 24);
        assert_eq!(element_count(&[]).unwrap(), 1);
        assert!(element_count(&[i64::MAX, 4]).is_err());
    }
}
