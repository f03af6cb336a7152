//! Signal processing: the cosine-sum windows, the discrete Fourier transforms (DFT, STFT) and
//! the mel filter bank.
//!
//! ORT's CPU EP (the oracle) registers its Fourier kernels for float32 (and float64, which MLX's
//! GPU backends do not hold), so these claim float32. Its kernels compute in float32 with twiddle
//! angles that lose precision as lengths grow (`i · 2π/N` for radix-2 lengths, Bluestein's
//! `π n² / N` otherwise); the lowerings here take each twiddle from a float64 table at
//! `k·n mod N`, so they sit closer to the exact transform than ORT does, and differ from it by
//! ORT's own error.

mod dft;
mod mel;
mod spectrum;
mod window;
