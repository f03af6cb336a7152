//! MLX's own accounting of the memory it holds: what arrays use now, the most they used, and
//! what its allocator keeps cached for reuse. The EP reports these so that a session's weight
//! memory can be compared with the size of its initializers.

use crate::error::{check, Result};
use crate::sys;

/// Bytes held by live arrays (buffers MLX allocated, or was handed to own).
pub fn active_memory() -> Result<usize> {
    read(sys::mlx_get_active_memory)
}

/// The largest [`active_memory`] since the process started or [`reset_peak_memory`].
pub fn peak_memory() -> Result<usize> {
    read(sys::mlx_get_peak_memory)
}

/// Bytes of freed buffers MLX keeps for reuse (not counted as active).
pub fn cache_memory() -> Result<usize> {
    read(sys::mlx_get_cache_memory)
}

pub fn reset_peak_memory() -> Result<()> {
    crate::init();
    // SAFETY: takes no arguments; MLX's allocator is process-wide and internally locked.
    check(unsafe { sys::mlx_reset_peak_memory() })
}

fn read(getter: unsafe extern "C" fn(*mut usize) -> i32) -> Result<usize> {
    crate::init();
    let mut bytes = 0usize;
    // SAFETY: `bytes` is a valid out-parameter for the duration of the call; the getters only
    // read MLX's (internally locked) allocator counters.
    check(unsafe { getter(&mut bytes) })?;
    Ok(bytes)
}
