//! MLX failures as values.
//!
//! mlx-c reports an error by calling the installed handler with a message and then returning a
//! non-zero status. Its default handler calls `exit()`, so [`crate::init`] replaces it with
//! [`record_mlx_error`], which stores the message for the calling thread; the wrapper that saw
//! the status then takes it with [`check`].

use std::cell::RefCell;
use std::ffi::{c_char, c_void, CStr};
use std::fmt;

/// Everything that can go wrong below the EP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// MLX itself refused or failed; the message is MLX's own.
    Mlx(String),
    /// A shape that MLX cannot represent (its dimensions are `i32`) or that does not match data.
    Shape(String),
    /// A dtype that has no MLX counterpart, or a host buffer of the wrong element type.
    Dtype(String),
    /// A Rust callback (a closure body) failed or panicked.
    Callback(String),
}

pub type Result<T> = std::result::Result<T, Error>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Mlx(m) => write!(f, "MLX error: {m}"),
            Error::Shape(m) => write!(f, "shape error: {m}"),
            Error::Dtype(m) => write!(f, "dtype error: {m}"),
            Error::Callback(m) => write!(f, "callback error: {m}"),
        }
    }
}

impl std::error::Error for Error {}

/// MLX's words when something evaluates an array (or reads it on the host) while a closure is
/// being traced for compilation: the traced function needs that value on the host.
pub const EVAL_WHILE_TRACING: &str = "during function transformations";

thread_local! {
    static LAST_MLX_ERROR: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// The error handler given to mlx-c: remember the message for this thread, never exit.
pub(crate) extern "C" fn record_mlx_error(message: *const c_char, _data: *mut c_void) {
    let text = if message.is_null() {
        "unknown MLX error".to_owned()
    } else {
        // SAFETY: mlx-c passes a NUL-terminated string valid for the duration of the call.
        unsafe { CStr::from_ptr(message) }
            .to_string_lossy()
            .into_owned()
    };
    // try_with: the handler may run during thread teardown, when the slot is gone.
    let _ = LAST_MLX_ERROR.try_with(|slot| *slot.borrow_mut() = Some(text));
}

/// Turns an mlx-c status into a `Result`, taking the message the handler recorded.
pub(crate) fn check(status: i32) -> Result<()> {
    if status == 0 {
        // A stale message from a failure nobody checked must not leak into a later error.
        return Ok(());
    }
    let message = LAST_MLX_ERROR
        .try_with(|slot| slot.borrow_mut().take())
        .ok()
        .flatten()
        .unwrap_or_else(|| format!("mlx-c returned status {status} without a message"));
    Err(Error::Mlx(message))
}

/// For the few mlx-c constructors that signal failure only through the handler (they return an
/// object either way): forget any stale message, run `make`, and report what the handler saw.
pub(crate) fn capture<T>(make: impl FnOnce() -> T) -> Result<T> {
    let _ = LAST_MLX_ERROR.try_with(|slot| slot.borrow_mut().take());
    let value = make();
    match LAST_MLX_ERROR
        .try_with(|slot| slot.borrow_mut().take())
        .ok()
        .flatten()
    {
        Some(message) => Err(Error::Mlx(message)),
        None => Ok(value),
    }
}
