//! The EP's own memory as ORT sees it: a HOST_ACCESSIBLE memory info on our device, the
//! allocator behind it, and the data transfer between it and CPU memory.
//!
//! Its allocations are MLX buffers (`mlx_kernels::bound_memory`): a tensor a user places there
//! (`OrtValue.ortvalue_from_shape_and_type(..., memory_info)` with our device's memory info, then
//! IO binding) reaches a compiled node as memory MLX already owns, so the input becomes an array
//! without a copy, and an output bound there is written by MLX into its own memory.
//!
//! HOST_ACCESSIBLE, not DEFAULT: memory of the DEFAULT type would make it the EP's device, and ORT
//! would then copy every input and output of our nodes through it, the KV cache of a generation
//! loop included. HOST_ACCESSIBLE memory is visible to the host on every MLX backend (the CPU
//! backend's heap, CUDA's unified memory, Metal's shared storage), so the EP stays a CPU-memory
//! EP and bound tensors are simply read where they are.

use std::ffi::{c_void, CString};
use std::panic::catch_unwind;
use std::ptr;

use mlx_kernels::bound_memory;

use crate::ort::api::{call, check, guard, guard_void};
use crate::ort::sys;

/// The name ORT and users see on our memory info (`OrtMemoryInfo.name`).
pub const MEMORY_NAME: &str = "MLX";

/// Our memory info, made once per factory and registered on each of its EP devices.
pub struct Memory {
    info: *mut sys::OrtMemoryInfo,
}

impl Memory {
    pub fn create() -> Result<Memory, String> {
        let name = CString::new(MEMORY_NAME).map_err(|e| e.to_string())?;
        let mut info = ptr::null_mut();
        // SAFETY: ORT copies the name; `info` receives a memory info we release in Drop.
        check(unsafe {
            call!(api.CreateMemoryInfo_V2(
                name.as_ptr(),
                sys::OrtMemoryInfoDeviceType::OrtMemoryInfoDeviceType_GPU,
                0,
                0,
                sys::OrtDeviceMemoryType::OrtDeviceMemoryType_HOST_ACCESSIBLE,
                0,
                sys::OrtAllocatorType::OrtDeviceAllocator,
                &mut info,
            ))
        })?;
        Ok(Memory { info })
    }

    /// Registers the memory on an EP device we just created.
    pub fn register(&self, ep_device: *mut sys::OrtEpDevice) -> Result<(), String> {
        // SAFETY: a live EP device and memory info; ORT copies the info.
        check(unsafe { call!(ep.EpDevice_AddAllocatorInfo(ep_device, self.info)) })
    }

    /// Whether ORT asks for an allocator of this memory (else it uses its own CPU allocator).
    fn is(&self, info: *const sys::OrtMemoryInfo) -> Result<bool, String> {
        if info.is_null() {
            return Ok(false);
        }
        let mut different = 1;
        // SAFETY: both memory infos are live for the call.
        check(unsafe { call!(api.CompareMemoryInfo(self.info, info, &mut different)) })?;
        Ok(different == 0)
    }

    /// An allocator of this memory for `info`, or null for memory that is not ours.
    pub fn allocator_for(
        &self,
        info: *const sys::OrtMemoryInfo,
    ) -> Result<*mut sys::OrtAllocator, String> {
        Ok(if self.is(info)? {
            Allocator::create(self.info)
        } else {
            ptr::null_mut()
        })
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        // SAFETY: made by CreateMemoryInfo_V2 in `create`, released once here.
        unsafe { call!(api.ReleaseMemoryInfo(self.info)) };
    }
}

/// `base` first, so ORT's `OrtAllocator*` is also a pointer to the whole struct.
#[repr(C)]
struct Allocator {
    base: sys::OrtAllocator,
    info: *const sys::OrtMemoryInfo,
}

impl Allocator {
    fn create(info: *const sys::OrtMemoryInfo) -> *mut sys::OrtAllocator {
        let allocator = Box::new(Allocator {
            base: sys::OrtAllocator {
                version: sys::ORT_API_VERSION,
                Alloc: Some(alloc),
                Free: Some(free),
                Info: Some(info_of),
                Reserve: Some(alloc),
                ..Default::default()
            },
            info,
        });
        Box::into_raw(allocator).cast()
    }
}

/// Frees an allocator made by `allocator_for` (the factory's `ReleaseAllocator`).
///
/// # Safety
/// `allocator` is null or came from `allocator_for`, released once.
pub unsafe fn release_allocator(allocator: *mut sys::OrtAllocator) {
    if !allocator.is_null() {
        // SAFETY: per the contract, the Box made in `Allocator::create`.
        drop(unsafe { Box::from_raw(allocator.cast::<Allocator>()) });
    }
}

unsafe extern "C" fn alloc(_this: *mut sys::OrtAllocator, size: usize) -> *mut c_void {
    // No status to return: a failure (or a panic) is a null pointer, which ORT reports.
    catch_unwind(|| bound_memory::allocate(size))
        .ok()
        .flatten()
        .unwrap_or(ptr::null_mut())
}

unsafe extern "C" fn free(_this: *mut sys::OrtAllocator, p: *mut c_void) {
    guard_void("OrtAllocator::Free", || {
        if !p.is_null() && !bound_memory::free(p) {
            eprintln!("MLXExecutionProvider: asked to free memory it did not allocate ({p:p})");
        }
    })
}

unsafe extern "C" fn info_of(this: *const sys::OrtAllocator) -> *const sys::OrtMemoryInfo {
    // SAFETY: ORT passes one of our allocators, whose `base` is its first field.
    unsafe { (*this.cast::<Allocator>()).info }
}

/// Copies between CPU memory and ours, both host-visible: ORT's copies into and out of a
/// tensor in our memory (`ort.copy_tensors`, `OrtValue.update_inplace`, and any copy ORT
/// plans across the two).
#[repr(C)]
pub struct Transfer {
    base: sys::OrtDataTransferImpl,
}

impl Transfer {
    pub fn create() -> *mut sys::OrtDataTransferImpl {
        let transfer = Box::new(Transfer {
            base: sys::OrtDataTransferImpl {
                ort_version_supported: sys::ORT_API_VERSION,
                Release: Some(release_transfer),
                CanCopy: Some(can_copy),
                CopyTensors: Some(copy_tensors),
            },
        });
        Box::into_raw(transfer).cast()
    }
}

unsafe extern "C" fn release_transfer(this: *mut sys::OrtDataTransferImpl) {
    if !this.is_null() {
        // SAFETY: ORT releases the transfer made in `Transfer::create` once.
        drop(unsafe { Box::from_raw(this.cast::<Transfer>()) });
    }
}

/// Where a memory device's bytes are, as far as copying goes.
#[derive(PartialEq, Eq)]
enum Place {
    Cpu,
    Ours,
    Elsewhere,
}

fn place(device: *const sys::OrtMemoryDevice) -> Place {
    if device.is_null() {
        return Place::Elsewhere;
    }
    // SAFETY: ORT passes live memory devices.
    let (kind, memory, vendor) = unsafe {
        (
            call!(ep.MemoryDevice_GetDeviceType(device)),
            call!(ep.MemoryDevice_GetMemoryType(device)),
            call!(ep.MemoryDevice_GetVendorId(device)),
        )
    };
    use sys::OrtDeviceMemoryType::OrtDeviceMemoryType_HOST_ACCESSIBLE as HOST_ACCESSIBLE;
    use sys::OrtMemoryInfoDeviceType::{OrtMemoryInfoDeviceType_CPU, OrtMemoryInfoDeviceType_GPU};
    match (kind, memory, vendor) {
        (OrtMemoryInfoDeviceType_CPU, ..) => Place::Cpu,
        (OrtMemoryInfoDeviceType_GPU, HOST_ACCESSIBLE, 0) => Place::Ours,
        _ => Place::Elsewhere,
    }
}

unsafe extern "C" fn can_copy(
    _this: *const sys::OrtDataTransferImpl,
    src: *const sys::OrtMemoryDevice,
    dst: *const sys::OrtMemoryDevice,
) -> bool {
    catch_unwind(|| {
        let (from, to) = (place(src), place(dst));
        from != Place::Elsewhere
            && to != Place::Elsewhere
            && (from == Place::Ours || to == Place::Ours)
    })
    .unwrap_or(false)
}

unsafe extern "C" fn copy_tensors(
    _this: *mut sys::OrtDataTransferImpl,
    src: *mut *const sys::OrtValue,
    dst: *mut *mut sys::OrtValue,
    _streams: *mut *mut sys::OrtSyncStream,
    count: usize,
) -> sys::OrtStatusPtr {
    guard("CopyTensors", || {
        for index in 0..count {
            // SAFETY: ORT passes `count` source and destination tensors.
            let (from, to) = unsafe { (*src.add(index), *dst.add(index)) };
            copy_one(from, to).map_err(|e| format!("copying tensor {index} of {count}: {e}"))?;
        }
        Ok(())
    })
}

fn copy_one(src: *const sys::OrtValue, dst: *mut sys::OrtValue) -> Result<(), String> {
    let (mut from, mut to) = (ptr::null(), ptr::null_mut());
    let (mut from_len, mut to_len) = (0usize, 0usize);
    // SAFETY: live tensors from ORT; the out-pointers are valid.
    unsafe {
        check(call!(api.GetTensorData(src, &mut from)))?;
        check(call!(api.GetTensorMutableData(dst, &mut to)))?;
        check(call!(api.GetTensorSizeInBytes(src, &mut from_len)))?;
        check(call!(api.GetTensorSizeInBytes(dst, &mut to_len)))?;
    }
    if from_len != to_len {
        return Err(format!(
            "{from_len} bytes cannot be copied into a tensor of {to_len}"
        ));
    }
    if from_len > 0 && from.cast::<u8>() != to.cast_const().cast::<u8>() {
        // SAFETY: both tensors hold `from_len` host-visible bytes (CPU or MLX memory; see
        // `can_copy`), and two distinct tensors do not overlap.
        let (from, to) = unsafe {
            (
                std::slice::from_raw_parts(from.cast::<u8>(), from_len),
                std::slice::from_raw_parts_mut(to.cast::<u8>(), from_len),
            )
        };
        // The host reads one side and writes the other: pages of ours move to the host.
        bound_memory::touched_by_host(from);
        bound_memory::touched_by_host(to);
        to.copy_from_slice(from);
    }
    Ok(())
}
