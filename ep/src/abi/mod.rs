//! The C ABI ORT loads: `CreateEpFactories`/`ReleaseEpFactory`, and the vtables behind them.
//! Every entry point runs inside `ort::api::guard`: no panic reaches ORT.

mod compute;
mod ep;
mod factory;
mod memory;

use std::ffi::{c_char, CString};
use std::sync::OnceLock;

use crate::ort::api::{self, guard};
use crate::ort::sys;

/// ORT's entry point: creates our one factory.
///
/// # Safety
/// Called by ORT with valid pointers, `factories` having room for `max_factories` entries.
#[no_mangle]
pub unsafe extern "C" fn CreateEpFactories(
    _registered_name: *const c_char,
    ort_api_base: *const sys::OrtApiBase,
    _default_logger: *const sys::OrtLogger,
    factories: *mut *mut sys::OrtEpFactory,
    max_factories: usize,
    num_factories: *mut usize,
) -> sys::OrtStatusPtr {
    // SAFETY: ORT passes its API base.
    if let Err(message) = unsafe { api::init(ort_api_base) } {
        // Without our API version there is no table to build a status from; ORT's version-1
        // table always exists and has CreateStatus.
        // SAFETY: as above; CreateStatus copies the message.
        return unsafe { fallback_status(ort_api_base, &message) };
    }
    guard("CreateEpFactories", || {
        if max_factories < 1 {
            return Err("ORT offered no room for a factory".into());
        }
        let factory = factory::Factory::create()?;
        // SAFETY: ORT gave room for at least one factory pointer and a count.
        unsafe {
            *factories = factory;
            *num_factories = 1;
        }
        Ok(())
    })
}

/// ORT's exit point for a factory made by `CreateEpFactories`.
///
/// # Safety
/// `factory` must come from `CreateEpFactories` and be released once.
#[no_mangle]
pub unsafe extern "C" fn ReleaseEpFactory(factory: *mut sys::OrtEpFactory) -> sys::OrtStatusPtr {
    guard("ReleaseEpFactory", || {
        // SAFETY: per the contract.
        unsafe { factory::Factory::destroy(factory) };
        Ok(())
    })
}

/// The op table compiled into this library, as JSON (owned by the library).
#[no_mangle]
pub extern "C" fn OrtMlxEp_OpTableJson() -> *const c_char {
    static TEXT: OnceLock<CString> = OnceLock::new();
    TEXT.get_or_init(|| {
        let json =
            std::panic::catch_unwind(crate::table_json::table_json).unwrap_or_else(|_| "[]".into());
        CString::new(json).unwrap_or_default()
    })
    .as_ptr()
}

/// # Safety
/// `base` is ORT's API base.
unsafe fn fallback_status(base: *const sys::OrtApiBase, message: &str) -> sys::OrtStatusPtr {
    let text = CString::new(format!("MLXExecutionProvider: {message}")).unwrap_or_default();
    // SAFETY: version 1 of the API exists in every ORT; its CreateStatus copies the text.
    unsafe {
        let Some(get_api) = base.as_ref().and_then(|b| b.GetApi) else {
            return std::ptr::null_mut();
        };
        match get_api(1).as_ref().and_then(|api| api.CreateStatus) {
            Some(create) => create(sys::OrtErrorCode::ORT_FAIL, text.as_ptr()),
            None => std::ptr::null_mut(),
        }
    }
}
