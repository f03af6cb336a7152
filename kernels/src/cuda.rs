//! Facts about MLX's CUDA backend that decide how work is placed (the hand-written kernels
//! themselves are in [`crate::custom`]).

use std::ffi::CString;
use std::sync::OnceLock;

use crate::{sys, Stream};

/// Whether handing work between MLX's CPU stream and the GPU costs a GPU round trip of its
/// own. On MLX's CUDA backend every event of the CPU stream is signalled by a kernel on the GPU
/// that writes unified memory the host is waiting on: 130-330 us each on an H200 (measured
/// with ncu, three a decode step when its prologue ran on the CPU). Small per-run work then
/// belongs on the GPU stream.
pub fn cpu_stream_syncs_through_gpu() -> bool {
    compute_capability().is_some()
}

/// The CUDA compute capability (major, minor) of MLX's GPU device, read once; `None` off
/// MLX's CUDA backend or when MLX does not report it.
pub fn compute_capability() -> Option<(usize, usize)> {
    static CAPABILITY: OnceLock<Option<(usize, usize)>> = OnceLock::new();
    *CAPABILITY.get_or_init(|| {
        if cfg!(target_os = "macos") || !Stream::gpu_available() {
            return None;
        }
        let read = |info: sys::mlx_device_info, key: &str| -> Option<usize> {
            let key = CString::new(key).ok()?;
            let mut value = 0usize;
            // SAFETY: `info` is live; `key` outlives the call; `value` is a valid out-parameter.
            let status = unsafe { sys::mlx_device_info_get_size(&mut value, info, key.as_ptr()) };
            (status == 0).then_some(value)
        };
        // SAFETY: the device and info handles are created and freed here; a failed query
        // leaves the info empty, and its keys are then simply missing.
        unsafe {
            let device = sys::mlx_device_new_type(sys::mlx_device_type::MLX_GPU, 0);
            let mut info = sys::mlx_device_info_new();
            let found = sys::mlx_device_info_get(&mut info, device) == 0;
            let capability = if found {
                read(info, "compute_capability_major").zip(read(info, "compute_capability_minor"))
            } else {
                None
            };
            sys::mlx_device_info_free(info);
            sys::mlx_device_free(device);
            capability
        }
    })
}
