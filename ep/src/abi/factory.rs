//! The `OrtEpFactory` vtable: our name, version and devices, and EP instances on demand.

use std::ffi::{c_char, CString};
use std::ptr;

use super::ep::MlxEp;
use super::memory::{self, Memory, Transfer};
use crate::context::ContextSettings;
use crate::device::Device;
use crate::options::{config_prefix, Options};
use crate::ort::api::{call, check, guard, guard_void};
use crate::ort::sys;

pub const EP_NAME: &str = "MLXExecutionProvider";
const VENDOR: &str = "onnxruntime-ep-mlx";
/// Single-sourced from the workspace version (`0.29.<patch>`: API 29, strict semver for ORT).
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// `base` first, so ORT's `OrtEpFactory*` is also a pointer to the whole struct.
#[repr(C)]
pub struct Factory {
    base: sys::OrtEpFactory,
    name: CString,
    vendor: CString,
    version: CString,
    memory: Memory,
}

impl Factory {
    pub fn create() -> Result<*mut sys::OrtEpFactory, String> {
        let memory = Memory::create()?;
        let factory = Box::new(Factory {
            base: sys::OrtEpFactory {
                ort_version_supported: sys::ORT_API_VERSION,
                GetName: Some(get_name),
                GetVendor: Some(get_vendor),
                GetSupportedDevices: Some(get_supported_devices),
                CreateEp: Some(create_ep),
                ReleaseEp: Some(release_ep),
                GetVendorId: Some(get_vendor_id),
                GetVersion: Some(get_version),
                CreateAllocator: Some(create_allocator),
                ReleaseAllocator: Some(release_allocator),
                CreateDataTransfer: Some(create_data_transfer),
                IsStreamAware: Some(is_stream_aware),
                CreateSyncStreamForDevice: Some(create_sync_stream),
                ..Default::default()
            },
            name: CString::new(EP_NAME).expect("no NUL"),
            vendor: CString::new(VENDOR).expect("no NUL"),
            version: CString::new(VERSION).expect("no NUL"),
            memory,
        });
        Ok(Box::into_raw(factory).cast())
    }

    /// # Safety
    /// `factory` must come from `create`, released once.
    pub unsafe fn destroy(factory: *mut sys::OrtEpFactory) {
        if !factory.is_null() {
            // SAFETY: per the contract, this is the Box made in `create`.
            drop(unsafe { Box::from_raw(factory.cast::<Factory>()) });
        }
    }

    /// # Safety
    /// `this` must be a factory made by `create`.
    unsafe fn from<'a>(this: *const sys::OrtEpFactory) -> &'a Factory {
        // SAFETY: `base` is the first field of the repr(C) Factory.
        unsafe { &*this.cast::<Factory>() }
    }
}

unsafe extern "C" fn get_name(this: *const sys::OrtEpFactory) -> *const c_char {
    // SAFETY: ORT passes our factory.
    unsafe { Factory::from(this) }.name.as_ptr()
}

unsafe extern "C" fn get_vendor(this: *const sys::OrtEpFactory) -> *const c_char {
    // SAFETY: ORT passes our factory.
    unsafe { Factory::from(this) }.vendor.as_ptr()
}

unsafe extern "C" fn get_version(this: *const sys::OrtEpFactory) -> *const c_char {
    // SAFETY: ORT passes our factory.
    unsafe { Factory::from(this) }.version.as_ptr()
}

unsafe extern "C" fn get_vendor_id(_this: *const sys::OrtEpFactory) -> u32 {
    0
}

/// One `OrtEpDevice`, on the CPU hardware device: ORT hands us host memory, and MLX runs the
/// work on its GPU when the loaded libmlx has one (device metadata says which).
unsafe extern "C" fn get_supported_devices(
    this: *mut sys::OrtEpFactory,
    devices: *const *const sys::OrtHardwareDevice,
    num_devices: usize,
    ep_devices: *mut *mut sys::OrtEpDevice,
    max_ep_devices: usize,
    num_ep_devices: *mut usize,
) -> sys::OrtStatusPtr {
    guard("GetSupportedDevices", || {
        // SAFETY: ORT passes `num_devices` device pointers and room for `max_ep_devices`.
        let devices = unsafe { std::slice::from_raw_parts(devices, num_devices) };
        let mut found = 0usize;
        for &device in devices {
            // SAFETY: `device` is a live hardware device.
            let kind = unsafe { call!(api.HardwareDevice_Type(device)) };
            if kind != sys::OrtHardwareDeviceType::OrtHardwareDeviceType_CPU
                || found >= max_ep_devices
            {
                continue;
            }
            let mlx_device = Device::of(&Options::from_env()).describe();
            let metadata = metadata(&[("mlx_device", mlx_device)])?;
            let mut ep_device = ptr::null_mut();
            // SAFETY: all pointers are live; ORT copies the metadata, which we release after.
            let status = unsafe {
                call!(ep.CreateEpDevice(this, device, metadata, ptr::null(), &mut ep_device))
            };
            // SAFETY: releasing the pairs we created.
            unsafe { call!(api.ReleaseKeyValuePairs(metadata)) };
            check(status)?;
            // SAFETY: ORT passes our factory.
            unsafe { Factory::from(this) }.memory.register(ep_device)?;
            // SAFETY: `found < max_ep_devices`.
            unsafe { *ep_devices.add(found) = ep_device };
            found += 1;
            break;
        }
        // SAFETY: ORT passes a valid count pointer.
        unsafe { *num_ep_devices = found };
        Ok(())
    })
}

/// The session's config entries (provider options arrive as `ep.<name>.<key>` among them).
fn config_entries(
    session_options: *const sys::OrtSessionOptions,
) -> Result<Vec<(String, String)>, String> {
    if session_options.is_null() {
        return Ok(Vec::new());
    }
    let mut kvps = ptr::null_mut();
    // SAFETY: ORT passes live session options; `kvps` receives a container we release below.
    check(unsafe { call!(api.GetSessionOptionsConfigEntries(session_options, &mut kvps)) })?;
    let (mut keys, mut values, mut count) = (ptr::null(), ptr::null(), 0usize);
    // SAFETY: `kvps` is live; ORT points `keys`/`values` at `count` strings it owns.
    unsafe { call!(api.GetKeyValuePairs(kvps, &mut keys, &mut values, &mut count)) };
    let text = |p: *const c_char| {
        // SAFETY: each entry is a NUL-terminated string owned by `kvps`, still live here.
        unsafe { std::ffi::CStr::from_ptr(p) }
            .to_string_lossy()
            .into_owned()
    };
    let entries = (0..count)
        .map(|i| {
            // SAFETY: `i < count`, the length ORT gave for both arrays.
            let (k, v) = unsafe { (*keys.add(i), *values.add(i)) };
            (text(k), text(v))
        })
        .collect();
    // SAFETY: releasing the container ORT made for us, once, after the last read.
    unsafe { call!(api.ReleaseKeyValuePairs(kvps)) };
    Ok(entries)
}

fn metadata(pairs: &[(&str, &str)]) -> Result<*mut sys::OrtKeyValuePairs, String> {
    let mut kvps = ptr::null_mut();
    // SAFETY: `kvps` receives a new container we release later.
    unsafe { call!(api.CreateKeyValuePairs(&mut kvps)) };
    for (key, value) in pairs {
        let (k, v) = (
            CString::new(*key).map_err(|e| e.to_string())?,
            CString::new(*value).map_err(|e| e.to_string())?,
        );
        // SAFETY: ORT copies both strings.
        unsafe { call!(api.AddKeyValuePair(kvps, k.as_ptr(), v.as_ptr())) };
    }
    Ok(kvps)
}

unsafe extern "C" fn create_ep(
    this: *mut sys::OrtEpFactory,
    _devices: *const *const sys::OrtHardwareDevice,
    _metadata: *const *const sys::OrtKeyValuePairs,
    _num_devices: usize,
    session_options: *const sys::OrtSessionOptions,
    _logger: *const sys::OrtLogger,
    ep: *mut *mut sys::OrtEp,
) -> sys::OrtStatusPtr {
    guard("CreateEp", || {
        // SAFETY: ORT passes our factory.
        let factory = unsafe { Factory::from(this) };
        let entries = config_entries(session_options)?;
        let options = Options::resolve(&entries, &config_prefix(EP_NAME), |name| {
            std::env::var(name).ok()
        })?;
        let created = MlxEp::create(
            &factory.name,
            options,
            ContextSettings::from_entries(&entries),
        );
        // SAFETY: ORT passes a valid out-pointer.
        unsafe { *ep = created };
        Ok(())
    })
}

unsafe extern "C" fn release_ep(_this: *mut sys::OrtEpFactory, ep: *mut sys::OrtEp) {
    guard_void("ReleaseEp", || {
        // SAFETY: `ep` was made by `create_ep`, released once by ORT.
        unsafe { MlxEp::destroy(ep) }
    })
}

/// Our memory's allocator (MLX buffers, see memory.rs); ORT's own CPU allocator otherwise.
unsafe extern "C" fn create_allocator(
    this: *mut sys::OrtEpFactory,
    memory_info: *const sys::OrtMemoryInfo,
    _options: *const sys::OrtKeyValuePairs,
    allocator: *mut *mut sys::OrtAllocator,
) -> sys::OrtStatusPtr {
    guard("CreateAllocator", || {
        // SAFETY: ORT passes our factory.
        let made = unsafe { Factory::from(this) }
            .memory
            .allocator_for(memory_info)?;
        // SAFETY: a valid out-pointer from ORT.
        unsafe { *allocator = made };
        Ok(())
    })
}

unsafe extern "C" fn release_allocator(
    _this: *mut sys::OrtEpFactory,
    allocator: *mut sys::OrtAllocator,
) {
    guard_void("ReleaseAllocator", || {
        // SAFETY: ORT releases an allocator `create_allocator` made, once.
        unsafe { memory::release_allocator(allocator) }
    })
}

/// Copies between CPU memory and ours.
unsafe extern "C" fn create_data_transfer(
    _this: *mut sys::OrtEpFactory,
    data_transfer: *mut *mut sys::OrtDataTransferImpl,
) -> sys::OrtStatusPtr {
    guard("CreateDataTransfer", || {
        // SAFETY: a valid out-pointer from ORT.
        unsafe { *data_transfer = Transfer::create() };
        Ok(())
    })
}

unsafe extern "C" fn is_stream_aware(_this: *const sys::OrtEpFactory) -> bool {
    false
}

unsafe extern "C" fn create_sync_stream(
    _this: *mut sys::OrtEpFactory,
    _memory_device: *const sys::OrtMemoryDevice,
    _options: *const sys::OrtKeyValuePairs,
    stream: *mut *mut sys::OrtSyncStreamImpl,
) -> sys::OrtStatusPtr {
    guard("CreateSyncStreamForDevice", || {
        // SAFETY: a valid out-pointer from ORT.
        unsafe { *stream = ptr::null_mut() };
        Ok(())
    })
}
