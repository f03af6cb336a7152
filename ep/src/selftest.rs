//! C entry points for checking the MLX layer of a built library without ORT: which BLAS it
//! bound and how fast MLX's matmul runs through it (`make bench-matmul`, `tests/foundation`).

use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;
use std::time::Instant;

use mlx_kernels::{ops, Array, Stream};

/// A NUL-terminated description of the BLAS serving MLX's CPU matmuls, owned by the library.
#[no_mangle]
pub extern "C" fn OrtMlxEp_BlasDescription() -> *const c_char {
    static TEXT: OnceLock<CString> = OnceLock::new();
    TEXT.get_or_init(|| {
        let text = catch_unwind(|| mlx_kernels::blas::description().to_owned())
            .unwrap_or_else(|_| "unknown".into());
        CString::new(text).unwrap_or_default()
    })
    .as_ptr()
}

/// Times `runs` evaluations of an f32 `[m, k] x [k, n]` matmul on MLX's best device (after one
/// warm-up) and writes the median in milliseconds. Returns 0, or -1 with a message in `error`.
///
/// # Safety
/// `median_ms` must be valid for a write; `error` valid for `error_len` bytes (or null).
#[no_mangle]
pub unsafe extern "C" fn OrtMlxEp_BenchMatmul(
    m: i64,
    k: i64,
    n: i64,
    runs: i32,
    median_ms: *mut f64,
    error: *mut c_char,
    error_len: usize,
) -> i32 {
    let outcome = catch_unwind(AssertUnwindSafe(|| bench_matmul(m, k, n, runs.max(1))))
        .unwrap_or_else(|_| Err("panic while benchmarking".into()));
    match outcome {
        Ok(ms) => {
            // SAFETY: the caller passes a valid pointer for the result.
            unsafe { *median_ms = ms };
            0
        }
        Err(message) => {
            if !error.is_null() && error_len > 0 {
                let bytes = message.as_bytes();
                let len = bytes.len().min(error_len - 1);
                // SAFETY: the caller guarantees `error_len` writable bytes; we write len + 1.
                unsafe {
                    std::ptr::copy_nonoverlapping(bytes.as_ptr(), error.cast::<u8>(), len);
                    *error.add(len) = 0;
                }
            }
            -1
        }
    }
}

fn bench_matmul(m: i64, k: i64, n: i64, runs: i32) -> Result<f64, String> {
    let run = || -> mlx_kernels::Result<f64> {
        let stream = Stream::best()?;
        let count = |a: i64, b: i64| usize::try_from(a * b).unwrap_or(0);
        let lhs = Array::from_slice(&vec![0.5f32; count(m, k)], &[m, k])?;
        let rhs = Array::from_slice(&vec![0.25f32; count(k, n)], &[k, n])?;
        let mut times = Vec::new();
        for i in 0..=runs {
            let start = Instant::now();
            ops::matmul(&lhs, &rhs, &stream)?.eval()?;
            if i > 0 {
                times.push(start.elapsed().as_secs_f64() * 1e3);
            }
        }
        times.sort_by(f64::total_cmp);
        Ok(times[times.len() / 2])
    };
    run().map_err(|e| e.to_string())
}
