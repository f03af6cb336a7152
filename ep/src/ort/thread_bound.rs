//! State that ORT may reach from any thread but that MLX needs on one.
//!
//! ORT calls a fused node's compute function from whichever thread runs the session, and may
//! do so from several threads at once. MLX arrays and streams are thread-affine, so a plan's
//! MLX state belongs to the first thread that runs it; any other thread gets an error instead of
//! touching it.

use std::cell::RefCell;
use std::sync::OnceLock;
use std::thread::{self, ThreadId};

pub struct ThreadBound<T> {
    owner: OnceLock<ThreadId>,
    value: RefCell<T>,
}

// SAFETY: `value` is only reached through `with`, which first checks that the calling thread
// is the owner (set once, atomically); no other thread can ever borrow it.
unsafe impl<T> Sync for ThreadBound<T> {}
// SAFETY: moving the container between threads moves no access with it: the owner check
// still guards every borrow. Dropping `T` elsewhere is what ORT's release path needs and the
// MLX types it holds only decrement reference counts when dropped.
unsafe impl<T> Send for ThreadBound<T> {}

impl<T> ThreadBound<T> {
    pub fn new(value: T) -> Self {
        ThreadBound {
            owner: OnceLock::new(),
            value: RefCell::new(value),
        }
    }

    /// Runs `f` on the value if the calling thread owns it (the first caller becomes the owner).
    pub fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> Result<R, String> {
        let me = thread::current().id();
        let owner = *self.owner.get_or_init(|| me);
        if owner != me {
            return Err(format!(
                "this session's MLX state belongs to thread {owner:?} but Run was called from thread {me:?}; \
                 MLX work is thread-affine: use one InferenceSession per thread"
            ));
        }
        let mut value = self
            .value
            .try_borrow_mut()
            .map_err(|_| "re-entrant compute call on the same thread".to_owned())?;
        Ok(f(&mut value))
    }
}
