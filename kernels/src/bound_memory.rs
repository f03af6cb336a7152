//! Memory the EP's allocator hands ORT (tensors a user places in the EP's memory, for IO
//! binding): buffers of MLX's own allocator, host-visible on every backend. A tensor ORT passes
//! in that memory becomes an MLX array with no copy ([`array_over`]); anything else is not ours
//! and is copied as before.
//!
//! ORT gives back a bare data pointer (to `free`, and inside its tensors), so the live
//! allocations are kept here by address, with the MLX buffer each one is.
//!
//! On MLX's CUDA backend these buffers are unified memory: their pages move to whichever side
//! touched them last. An array over one sends its pages toward the GPU first, but only when the
//! host may have touched them since the last time ([`touched_by_host`]): the driver call costs
//! 5-30 us a buffer on an H200, every run, while a loop that keeps its tensors in this memory
//! leaves them on the GPU. What touches them from the host goes through the EP (ORT's copies
//! into and out of this memory are ours, and so are the writes of outputs the evaluation did
//! not store). A host access the EP cannot see (a raw pointer) costs page faults in the next
//! run, never a wrong value: the pages are coherent wherever they are.

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::Mutex;

use crate::{sys, Array, Dtype, Result};

/// A live allocation: the MLX buffer's handle, its usable length, and whether its pages were
/// sent toward the GPU with no host access since.
#[derive(Clone, Copy)]
struct Allocation {
    buffer: usize,
    len: usize,
    on_gpu: bool,
}

/// Live allocations by host-visible start address.
static LIVE: Mutex<BTreeMap<usize, Allocation>> = Mutex::new(BTreeMap::new());

fn live() -> std::sync::MutexGuard<'static, BTreeMap<usize, Allocation>> {
    // A panic elsewhere while holding the lock leaves the map itself consistent.
    LIVE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Allocates `bytes` bytes from MLX's allocator; `None` when MLX cannot.
pub fn allocate(bytes: usize) -> Option<*mut c_void> {
    crate::init();
    let mut data = std::ptr::null_mut();
    // SAFETY: `data` is a valid out-parameter; the shim catches every MLX exception.
    let buffer = unsafe { sys::mlx_ep_buffer_malloc(bytes, &mut data) };
    if buffer.is_null() || data.is_null() {
        return None;
    }
    live().insert(
        data as usize,
        Allocation {
            buffer: buffer as usize,
            len: bytes,
            on_gpu: false,
        },
    );
    Some(data)
}

/// Frees an allocation made by [`allocate`]; false (and nothing freed) for any other pointer.
pub fn free(data: *mut c_void) -> bool {
    let Some(allocation) = live().remove(&(data as usize)) else {
        return false;
    };
    // SAFETY: the handle came from `mlx_ep_buffer_malloc` and was just removed from the live
    // map, so it is freed once.
    unsafe { sys::mlx_ep_buffer_free(allocation.buffer as *mut c_void) };
    true
}

/// The allocation that `bytes` starts and lies within, if `bytes` is in our memory.
fn allocation_of(bytes: &[u8]) -> Option<Allocation> {
    let start = bytes.as_ptr() as usize;
    let allocation = *live().get(&start)?;
    (bytes.len() <= allocation.len).then_some(allocation)
}

/// Whether `bytes` are the start of one of our allocations (so an output written there is
/// written into MLX's memory, not across to ORT's).
pub fn is_ours(bytes: &[u8]) -> bool {
    !bytes.is_empty() && allocation_of(bytes).is_some()
}

/// Notes that the host read or wrote `bytes` (a no-op unless they lie within one of our
/// allocations): the next array over that allocation sends its pages toward the GPU again.
pub fn touched_by_host(bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    let start = bytes.as_ptr() as usize;
    let mut live = live();
    if let Some((&at, allocation)) = live.range_mut(..=start).next_back() {
        if start - at < allocation.len {
            allocation.on_gpu = false;
        }
    }
}

/// An array over `bytes` with no copy when they start one of our allocations; `None` for
/// memory that is not ours (or at an offset within it), which the caller copies. The
/// allocation's pages are sent toward the GPU when the host may have touched them (see the
/// module's comment).
///
/// # Safety
/// As [`Array::from_borrowed_bytes`]: the bytes outlive every use of the array and of what is
/// computed from it, and the caller holds the array until then.
pub unsafe fn array_over(bytes: &[u8], shape: &[i64], dtype: Dtype) -> Option<Result<Array>> {
    if bytes.is_empty() {
        return None;
    }
    let allocation = allocation_of(bytes)?;
    // SAFETY: the allocation is live (ORT frees it only through `free`, after the tensor), it
    // starts at `bytes` and holds them; the lifetime contract is the caller's.
    let made =
        unsafe { Array::over_mlx_buffer(allocation.buffer as *mut c_void, bytes, shape, dtype) };
    if let (Ok(array), false) = (&made, allocation.on_gpu) {
        sent_toward_gpu(bytes, array);
    }
    Some(made)
}

/// Sends the pages of the allocation `bytes` start toward the GPU when the host may have
/// touched them since the last time (see the module's comment): before the GPU writes them
/// without an array over them (`stream_copy`). Nothing for memory that is not ours.
pub fn toward_gpu(bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    let Some(allocation) = allocation_of(bytes).filter(|a| !a.on_gpu) else {
        return;
    };
    let len = [bytes.len() as i64];
    // SAFETY: the allocation is live and holds `bytes`; the array is dropped here, before ORT
    // can free it.
    let over =
        unsafe { Array::over_mlx_buffer(allocation.buffer as *mut c_void, bytes, &len, Dtype::U8) };
    if let Ok(array) = over {
        sent_toward_gpu(bytes, &array);
    }
}

/// Moves `array`'s pages (those of the allocation `bytes` start) toward the GPU, and notes it.
fn sent_toward_gpu(bytes: &[u8], array: &Array) {
    array.move_toward_gpu();
    if let Some(live) = live().get_mut(&(bytes.as_ptr() as usize)) {
        live.on_gpu = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Stream;

    #[test]
    fn an_array_over_our_memory_reads_what_was_written_there() {
        let data = allocate(16).expect("MLX allocates");
        // SAFETY: 16 fresh bytes, ours until `free`.
        let bytes = unsafe { std::slice::from_raw_parts_mut(data.cast::<u8>(), 16) };
        for (i, chunk) in bytes.chunks_mut(4).enumerate() {
            chunk.copy_from_slice(&(i as f32 + 0.5).to_ne_bytes());
        }
        assert!(is_ours(bytes));
        assert!(!is_ours(&bytes[4..]), "an offset inside is not a start");
        // SAFETY: `bytes` stays allocated until after the array is read and dropped.
        let array = unsafe { array_over(bytes, &[2, 2], Dtype::F32) }
            .expect("ours")
            .expect("wrapped");
        let stream = Stream::cpu().unwrap();
        assert_eq!(array.to_vec::<f32>(&stream).unwrap(), [0.5, 1.5, 2.5, 3.5]);
        drop(array);
        assert!(free(data));
        assert!(!free(data), "freed once");
    }

    /// Whether the allocation starting at `data` counts as sent toward the GPU.
    fn on_gpu(data: *mut c_void) -> bool {
        live().get(&(data as usize)).expect("live").on_gpu
    }

    #[test]
    fn pages_are_sent_toward_the_gpu_once_after_each_host_access() {
        let data = allocate(64).expect("MLX allocates");
        // SAFETY: 64 fresh bytes, ours until `free`.
        let bytes = unsafe { std::slice::from_raw_parts(data.cast::<u8>(), 64) };
        assert!(!on_gpu(data), "a new allocation is sent on its first use");
        for _ in 0..2 {
            // SAFETY: `bytes` stays allocated until after the array is dropped.
            let array = unsafe { array_over(bytes, &[16], Dtype::F32) };
            assert!(matches!(array, Some(Ok(_))));
            assert!(on_gpu(data), "sent, and not again while nothing touched it");
        }
        touched_by_host(&bytes[8..16]);
        assert!(!on_gpu(data), "a host access within the allocation counts");
        // SAFETY: as above.
        drop(unsafe { array_over(bytes, &[16], Dtype::F32) });
        assert!(on_gpu(data));
        let host = vec![0u8; 64];
        touched_by_host(&host);
        touched_by_host(&bytes[..0]);
        assert!(on_gpu(data), "host memory and empty ranges are not ours");
        assert!(free(data));
    }

    #[test]
    fn an_allocation_written_without_an_array_is_sent_the_same_way() {
        let data = allocate(32).expect("MLX allocates");
        // SAFETY: 32 fresh bytes, ours until `free`.
        let bytes = unsafe { std::slice::from_raw_parts(data.cast::<u8>(), 32) };
        toward_gpu(bytes);
        assert!(on_gpu(data), "sent on its first use");
        touched_by_host(&bytes[..4]);
        assert!(!on_gpu(data));
        toward_gpu(bytes);
        assert!(on_gpu(data), "sent again after a host access");
        toward_gpu(&[0u8; 32]);
        toward_gpu(&bytes[..0]);
        assert!(free(data));
    }

    #[test]
    fn memory_that_is_not_ours_is_left_to_copy() {
        let host = vec![0u8; 8];
        // SAFETY: nothing is wrapped: the bytes are not ours.
        assert!(unsafe { array_over(&host, &[2], Dtype::F32) }.is_none());
        assert!(!free(host.as_ptr().cast_mut().cast()));
    }
}
