//! DFT and STFT: Fourier transforms of ONNX's `[..., samples, 1 or 2]` signals
//! ([`super::spectrum`] computes them).
//!
//! Float16 and bfloat16 signals are transformed in float32 and rounded once (ORT's CPU EP has
//! float32 and float64 kernels only).
//!
//! ORT's CPU EP settles what ONNX leaves open (each probed on ORT 1.31):
//! - A one-sided forward transform of a complex signal returns the first `N/2 + 1` bins of the
//!   full transform (ONNX calls it real-only).
//! - `dft_length` below 1, a frame step below 1, a frame longer than the signal, and a window
//!   whose length is not `frame_length` fail the run.

use mlx_kernels::{ops, Array};

use crate::table::lower::float32;

use super::spectrum::{transform, Bins, KeptMatrices, Transform};
use crate::table::consts::zeros;
use crate::{onnx_op, Lower, Node, OpError, Result, Verdict};

/// A DFT whose form ORT answers as ONNX defines it.
fn dft_claim(node: &Node) -> Verdict {
    let inverse = node.attr_or("inverse", 0i64);
    let onesided = node.attr_or("onesided", 0i64);
    if !matches!(inverse, 0 | 1) || !matches!(onesided, 0 | 1) {
        return Verdict::decline("inverse and onesided must be 0 or 1");
    }
    if let Some(rank @ 0..=2) = node.input_rank(0) {
        // ORT reads a rank-2 input as [batch, samples] (real) and then refuses every axis of it.
        return Verdict::decline(format!(
            "an input of rank {rank} (ORT's CPU EP refuses every axis of one below rank 3)"
        ));
    }
    if inverse == 1 && onesided == 1 && node.input_present(1) {
        // Probed: when the input's bins are not dft_length/2 + 1, ORT rebuilds the Hermitian
        // spectrum in a way that depends on the length's parity and on how many bins it got.
        return Verdict::decline(
            "an IRFFT (inverse and onesided) with dft_length: ORT's CPU EP rebuilds the \
             spectrum its own way when the input's bins are not dft_length/2 + 1",
        );
    }
    Verdict::Claim
}

/// The discrete Fourier transform along `axis`: zero-padded or truncated to `dft_length`,
/// inverse (scaled by 1/N), one-sided (the first N/2 + 1 bins), or both (an IRFFT: a real
/// signal of `dft_length`, by default `2·(bins - 1)`, samples).
#[onnx_op(
    op = "DFT", precision = Float32, since = 17, types(T1 = FLOAT, T2 = I32 | I64, I = I64),
    inputs(input: T1, dft_length: T2, axis: I), outputs(output: T1), shape = ShapeKeyed,
    claim = dft_claim,
    declines = "inverse or onesided other than 0/1; an input below rank 3; an IRFFT (inverse and onesided) with an explicit dft_length",
    numerics = "twiddles cos/sin(2π·(k·n mod N)/N) from a float64 table rounded once; ORT's float32 angles drift with the length, so the two differ by ORT's error (about 1e-5 of the signal's scale at N = 40)"
)]
fn dft(
    cx: &mut Lower,
    x: Array,
    #[host] dft_length: Option<i64>,
    #[host(attr_until = 19)] axis: Option<i64>,
    #[attr(default = 0)] inverse: i64,
    #[attr(default = 0)] onesided: i64,
) -> Result<Array> {
    let s = cx.stream();
    let rank = x.ndim() as i64;
    if rank < 3 {
        return Err(OpError::new(format!(
            "the input must be [..., samples, 1 or 2] of rank 3 or more, not of rank {rank}"
        )));
    }
    // The axis was an attribute defaulting to 1 and became an input defaulting to -2.
    let default_axis = if cx.node().since_version() >= 20 {
        -2
    } else {
        1
    };
    let axis = axis.unwrap_or(default_axis);
    let resolved = if axis < 0 { axis + rank } else { axis };
    if !(0..rank - 1).contains(&resolved) {
        return Err(OpError::new(format!(
            "axis {axis} must name a signal axis of the rank-{rank} input (not its last, which \
             holds the components)"
        )));
    }
    let samples = x.shape()[resolved as usize];
    let bins = match (inverse, onesided) {
        (1, 1) => Bins::RealSignal,
        (_, 1) => Bins::OneSided,
        _ => Bins::All,
    };
    if bins == Bins::RealSignal && x.shape()[rank as usize - 1] != 2 {
        return Err(OpError::new(
            "an inverse one-sided DFT (IRFFT) needs a complex input (last axis of 2)",
        ));
    }
    let length = match dft_length {
        Some(length) if length < 1 => {
            return Err(OpError::new(format!(
                "dft_length must be at least 1, not {length}"
            )))
        }
        Some(length) => length,
        None if bins == Bins::RealSignal => 2 * (samples - 1),
        None => samples,
    };
    let other_axes_hold_values = x
        .shape()
        .iter()
        .enumerate()
        .all(|(i, &d)| i as i64 == resolved || i as i64 == rank - 1 || d > 0);
    if samples == 0 && length > 0 && other_axes_hold_values {
        // Zero padding would make an all-zero spectrum; ORT's kernel refuses the input instead.
        return Err(OpError::new(format!(
            "the signal axis {resolved} is empty while the output has {length} bins a signal \
             (ORT's CPU EP refuses this input too)"
        )));
    }
    if length == 0 && bins != Bins::OneSided {
        // An empty signal axis (an IRFFT of one bin) transforms to an empty one, as in ORT.
        let mut dims = x.shape();
        dims[resolved as usize] = 0;
        dims[rank as usize - 1] = if bins == Bins::RealSignal { 1 } else { 2 };
        return zeros(&dims, x.dtype(), s);
    }
    let t = Transform {
        length,
        inverse: inverse == 1,
        bins,
    };
    // The transform runs over axis -2: move the signal axis there and back.
    let mut order: Vec<i32> = (0..rank as i32).collect();
    order.swap(resolved as usize, rank as usize - 2);
    let moved = ops::transpose(&float32(&x, s)?, &order, s)?;
    let kept = cx.kept("dense matrices", || Ok(KeptMatrices::default()))?;
    let y = transform(&moved, &t, None, &kept, s)?;
    Ok(ops::astype(&ops::transpose(&y, &order, s)?, x.dtype(), s)?)
}

/// An STFT whose frame length the node gives (as `frame_length` or the window's length).
fn stft_claim(node: &Node) -> Verdict {
    let onesided = node.attr_or("onesided", 1i64);
    if !matches!(onesided, 0 | 1) {
        return Verdict::decline("onesided must be 0 or 1");
    }
    if !node.input_present(2) && !node.input_present(3) {
        return Verdict::decline(
            "neither a window nor frame_length: ONNX then frames the whole signal, which ORT's \
             CPU EP fails on",
        );
    }
    Verdict::Claim
}

/// The short-time Fourier transform: frames of `frame_length` samples every `frame_step`, each
/// multiplied by `window` and transformed (`[batch, frames, bins, 2]`).
#[onnx_op(
    op = "STFT", precision = Float32, since = 17, types(T1 = FLOAT, T2 = I32 | I64),
    inputs(signal: T1, frame_step: T2, window: T1, frame_length: T2), outputs(output: T1),
    shape = ShapeKeyed, claim = stft_claim,
    declines = "onesided other than 0/1; neither a window nor frame_length",
    numerics = "twiddles cos/sin(2π·(k·n mod N)/N) from a float64 table rounded once; ORT's float32 angles drift with the frame length, so the two differ by ORT's error"
)]
fn stft(
    cx: &mut Lower,
    signal: Array,
    #[host] frame_step: i64,
    window: Option<Array>,
    #[host] frame_length: Option<i64>,
    #[attr(default = 1)] onesided: i64,
) -> Result<Array> {
    let s = cx.stream();
    // ORT reads a rank-2 signal as [batch, samples] of reals.
    let signal = match signal.ndim() {
        2 => ops::expand_dims(&signal, &[-1], s)?,
        3 => signal,
        rank => {
            return Err(OpError::new(format!(
                "the signal must be [batch, samples, 1 or 2], not of rank {rank}"
            )))
        }
    };
    let samples = signal.shape()[1];
    let window_length = window.as_ref().map(|w| w.shape());
    let length = match (frame_length, window_length.as_deref()) {
        (Some(length), Some([w])) if *w != length => {
            return Err(OpError::new(format!(
                "the window holds {w} samples but frame_length is {length}"
            )))
        }
        (Some(length), _) => length,
        (None, Some([w])) => *w,
        (None, _) => return Err(OpError::new("the window must be 1-D")),
    };
    if frame_step < 1 {
        return Err(OpError::new(format!(
            "frame_step must be at least 1, not {frame_step}"
        )));
    }
    if !(1..=samples).contains(&length) {
        return Err(OpError::new(format!(
            "the frame length {length} must be in 1..={samples} (the signal's samples)"
        )));
    }
    let frames = (samples - length) / frame_step + 1;
    let (batch, components) = (signal.shape()[0], signal.shape()[2]);
    // Sample `n` of frame `f` is the signal's sample `f·step + n`: a strided view of it (the
    // last frame ends within the signal), copied once where the product reads it. One frame
    // has no step (which may be any size).
    let frame_stride = if frames == 1 {
        0
    } else {
        frame_step * components
    };
    let framed = ops::as_strided(
        &signal,
        &[batch, frames, length, components],
        &[samples * components, frame_stride, components, 1],
        s,
    )?;
    let t = Transform {
        length,
        inverse: false,
        bins: if onesided == 1 {
            Bins::OneSided
        } else {
            Bins::All
        },
    };
    let window = window.map(|w| float32(&w, s)).transpose()?;
    let kept = cx.kept("dense matrices", || Ok(KeptMatrices::default()))?;
    let y = transform(&float32(&framed, s)?, &t, window.as_ref(), &kept, s)?;
    Ok(ops::astype(&y, signal.dtype(), s)?)
}
