//! Fast Fourier transforms along one axis, over complex64 arrays (real input for `rfft`). MLX's
//! CUDA backend has no FFT kernel: callers run these on the CPU stream there.

use crate::dtype::Dtype;
use crate::ops::{add, astype, multiply};
use crate::{sys, Array, Result, Stream};

macro_rules! fft_ops {
    ($($(#[$doc:meta])* $name:ident => $ffi:ident),* $(,)?) => {$(
        $(#[$doc])*
        pub fn $name(a: &Array, n: i32, axis: i32, stream: &Stream) -> Result<Array> {
            Array::from_op(|out| {
                // SAFETY: all handles are live; MLX validates `n` and `axis`.
                unsafe {
                    sys::$ffi(out, a.raw(), n, axis, sys::mlx_fft_norm::MLX_FFT_NORM_BACKWARD, stream.raw())
                }
            })
        }
    )*};
}

fft_ops! {
    /// The transform of length `n` (zero-padded or truncated to it), unscaled.
    fft => mlx_fft_fft,
    /// The inverse transform of length `n`, scaled by `1/n`.
    ifft => mlx_fft_ifft,
    /// The first `n/2 + 1` bins of a real signal's transform of length `n`.
    rfft => mlx_fft_rfft,
    /// The real signal of length `n` whose transform's first `n/2 + 1` bins are `a`'s, scaled by
    /// `1/n`.
    irfft => mlx_fft_irfft,
}

super::unary_ops! {
    /// The real part of a complex array.
    real => mlx_real,
    /// The imaginary part of a complex array.
    imag => mlx_imag,
}

/// `re + i·im` as complex64.
pub fn complex(re: &Array, im: &Array, stream: &Stream) -> Result<Array> {
    let i_bytes: Vec<u8> = [0f32, 1f32].iter().flat_map(|v| v.to_ne_bytes()).collect();
    let i = Array::from_bytes(&i_bytes, &[], Dtype::Complex64)?;
    add(
        &astype(re, Dtype::Complex64, stream)?,
        &multiply(&astype(im, Dtype::Complex64, stream)?, &i, stream)?,
        stream,
    )
}
