//! ORT's API tables, statuses, and the guard every `extern "C"` entry point runs inside.

use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

use super::sys;

/// The tables ORT hands us at registration; valid for the life of the process.
pub struct Ort {
    pub api: &'static sys::OrtApi,
    pub ep: &'static sys::OrtEpApi,
}

static ORT: OnceLock<Ort> = OnceLock::new();

/// Takes ORT's API tables from the base ORT passes to `CreateEpFactories`.
///
/// # Safety
/// `base` must be the `OrtApiBase` pointer ORT passed in.
pub unsafe fn init(base: *const sys::OrtApiBase) -> Result<&'static Ort, String> {
    if let Some(ort) = ORT.get() {
        return Ok(ort);
    }
    // SAFETY: ORT passes a valid base; GetApi returns a static table or null for versions it
    // does not support.
    let api = unsafe {
        let get_api = (*base).GetApi.ok_or("OrtApiBase has no GetApi")?;
        get_api(sys::ORT_API_VERSION).as_ref()
    }
    .ok_or_else(|| {
        format!(
            "this ONNX Runtime does not offer API version {} (the EP needs ORT >= 1.{})",
            sys::ORT_API_VERSION,
            sys::ORT_API_VERSION
        )
    })?;
    // SAFETY: GetEpApi returns a static table.
    let ep = unsafe { api.GetEpApi.ok_or("OrtApi has no GetEpApi")?().as_ref() }
        .ok_or("GetEpApi returned null")?;
    Ok(ORT.get_or_init(|| Ort { api, ep }))
}

/// The tables, once `init` ran (every entry point after `CreateEpFactories`).
pub fn ort() -> &'static Ort {
    ORT.get().expect("ORT API used before CreateEpFactories")
}

/// Calls an ORT API function pointer, turning a missing entry into a panic that the entry
/// guard reports (it cannot happen with a table of the version we asked for).
macro_rules! call {
    ($table:ident . $f:ident ( $($arg:expr),* $(,)? )) => {
        ($crate::ort::api::ort().$table.$f.expect(concat!("ORT API table lacks ", stringify!($f))))($($arg),*)
    };
}
pub(crate) use call;

/// Turns an ORT status into a `Result`, releasing it.
pub fn check(status: sys::OrtStatusPtr) -> Result<(), String> {
    if status.is_null() {
        return Ok(());
    }
    // SAFETY: a non-null status from ORT stays valid until we release it below.
    let message = unsafe { CStr::from_ptr(call!(api.GetErrorMessage(status))) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: releasing the status we own, once.
    unsafe { call!(api.ReleaseStatus(status)) };
    Err(message)
}

/// A new ORT error status carrying `message` (ORT takes ownership of the status).
pub fn error_status(code: sys::OrtErrorCode, message: &str) -> sys::OrtStatusPtr {
    let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
    // SAFETY: CreateStatus copies the message.
    unsafe { call!(api.CreateStatus(code, text.as_ptr())) }
}

/// Runs an entry point's body: no panic crosses into ORT, every failure becomes a status.
pub fn guard(entry: &str, body: impl FnOnce() -> Result<(), String>) -> sys::OrtStatusPtr {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => std::ptr::null_mut(),
        Ok(Err(message)) => error_status(
            sys::OrtErrorCode::ORT_EP_FAIL,
            &format!("MLXExecutionProvider: {message}"),
        ),
        Err(panic) => error_status(
            sys::OrtErrorCode::ORT_EP_FAIL,
            &format!(
                "MLXExecutionProvider: internal error in {entry}: {}",
                panic_text(&panic)
            ),
        ),
    }
}

/// For entry points that return no status: run the body, swallowing (and reporting) panics.
pub fn guard_void(entry: &str, body: impl FnOnce()) {
    if let Err(panic) = catch_unwind(AssertUnwindSafe(body)) {
        eprintln!(
            "MLXExecutionProvider: internal error in {entry}: {}",
            panic_text(&panic)
        );
    }
}

pub fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic".into())
}

/// A borrowed C string from ORT as an owned Rust string ("" for null).
///
/// # Safety
/// `text` is null or a NUL-terminated string valid for the call.
pub unsafe fn owned_str(text: *const c_char) -> String {
    if text.is_null() {
        return String::new();
    }
    // SAFETY: per the contract above.
    unsafe { CStr::from_ptr(text) }
        .to_string_lossy()
        .into_owned()
}
