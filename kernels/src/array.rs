//! The owned MLX array handle.

use std::fmt;

use crate::dtype::{Dtype, Element};
use crate::error::{capture, check, Error, Result};
use crate::shape::{element_count, to_mlx_shape};
use crate::stream::Stream;
use crate::sys;

/// An owned reference to an MLX array (MLX arrays are reference-counted and immutable; `clone`
/// shares the same data). Lazy until evaluated.
pub struct Array {
    raw: sys::mlx_array,
}

thread_local! {
    /// Arrays this thread has created: what a lowering costs MLX is mostly how many arrays
    /// (primitives) it builds, so the per-op profile reports it.
    static CREATED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many arrays this thread has created so far (differences of it count a lowering's).
pub fn arrays_created() -> u64 {
    CREATED.with(|c| c.get())
}

fn count_created() {
    CREATED.with(|c| c.set(c.get() + 1));
}

impl Array {
    /// Runs an mlx-c op that writes a new array into its out-parameter.
    pub(crate) fn from_op(op: impl FnOnce(&mut sys::mlx_array) -> i32) -> Result<Array> {
        crate::init();
        // SAFETY: mlx_array_new returns an empty handle that `Array` owns from here on, so it is
        // freed on both the success and the error path.
        let raw = unsafe { sys::mlx_array_new() };
        count_created();
        let mut out = Array { raw };
        check(op(&mut out.raw))?;
        Ok(out)
    }

    /// Takes ownership of a handle returned by mlx-c.
    pub(crate) fn from_raw(raw: sys::mlx_array) -> Array {
        count_created();
        Array { raw }
    }

    pub(crate) fn raw(&self) -> sys::mlx_array {
        self.raw
    }

    /// Copies host bytes (row-major, native endian) into a new array. 16-bit floats are given
    /// as their raw bits; `bytes.len()` must be exactly `prod(shape) * dtype.size_in_bytes()`.
    pub fn from_bytes(bytes: &[u8], shape: &[i64], dtype: Dtype) -> Result<Array> {
        let (dims, ndim) = host_layout(bytes, shape, dtype)?;
        if let Some(array) = Array::copied_by_driver(bytes, &dims, dtype) {
            return Ok(array);
        }
        let array = capture(|| {
            // SAFETY: `bytes` holds exactly prod(shape) elements of `dtype` (checked above) and
            // mlx_array_new_data copies them before returning. On failure the handle is empty and
            // freeing it is a no-op.
            Array::from_raw(unsafe {
                sys::mlx_array_new_data(bytes.as_ptr().cast(), dims.as_ptr(), ndim, dtype.to_sys())
            })
        })?;
        Ok(array.moved_toward_gpu())
    }

    /// On MLX's CUDA backend, an array of at least [`DRIVER_COPY_MIN`] bytes copied in by the
    /// CUDA driver into memory already on the GPU (`shim/device_copy.cpp`), instead of written
    /// by the host into unified memory page by page; `None` elsewhere, for smaller arrays, or
    /// when the driver cannot, and the caller makes it through MLX.
    fn copied_by_driver(bytes: &[u8], dims: &[i32], dtype: Dtype) -> Option<Array> {
        if bytes.len() < DRIVER_COPY_MIN || crate::cuda::compute_capability().is_none() {
            return None;
        }
        let ndim = i32::try_from(dims.len()).ok()?;
        // SAFETY: a new empty handle, owned by the `Array` made from it below.
        let mut raw = unsafe { sys::mlx_array_new() };
        // SAFETY: `raw` is a live handle; `bytes` holds exactly the elements `dims` describe
        // (the caller checked) and is read before the call returns.
        let made = unsafe {
            sys::mlx_ep_array_from_host_by_driver(
                &mut raw,
                bytes.as_ptr().cast(),
                bytes.len(),
                dims.as_ptr(),
                ndim,
                dtype.to_sys(),
                0,
            )
        };
        let array = Array::from_raw(raw);
        (made == 0).then_some(array)
    }

    /// On MLX's CUDA backend an array made from host bytes lives in unified memory, its pages
    /// where the host wrote them: starts moving them to the GPU, so that the first kernel to
    /// read them does not stall on page faults (~170 us a kernel on an H200, measured). Arrays
    /// of 8 bytes or less are left alone: MLX keeps them in a pool mapped for the GPU already.
    fn moved_toward_gpu(self) -> Array {
        self.move_toward_gpu();
        self
    }

    /// Starts moving the pages of this array's buffer to the GPU when they are in unified
    /// memory on MLX's CUDA backend (a hint: nothing waits for it; an array not evaluated yet,
    /// and any array elsewhere, is left alone). Arrays of 8 bytes or less too, as above.
    pub(crate) fn move_toward_gpu(&self) {
        if self.nbytes() > 8 && crate::cuda::compute_capability().is_some() {
            // SAFETY: a live array handle; the shim skips an array without data and checks
            // the buffer, ignoring anything but unified memory.
            unsafe { sys::mlx_ep_prefetch_to_device(self.raw, 0) };
        }
    }

    /// Wraps host bytes as an array without copying them.
    ///
    /// # Safety
    /// `bytes` must stay valid and unchanged until every array computed from the result has
    /// been evaluated, and the caller must hold the returned array until then: MLX reads the
    /// bytes lazily, and would reuse (write into) the buffer of an array it solely owns.
    pub unsafe fn from_borrowed_bytes(bytes: &[u8], shape: &[i64], dtype: Dtype) -> Result<Array> {
        let (dims, ndim) = host_layout(bytes, shape, dtype)?;
        if bytes.is_empty() {
            // Nothing to borrow (and MLX wants a real pointer).
            return Array::from_bytes(bytes, shape, dtype);
        }
        // MLX's CUDA backend copies borrowed bytes anyway: the driver copies large ones faster.
        if let Some(array) = Array::copied_by_driver(bytes, &dims, dtype) {
            return Ok(array);
        }
        extern "C" fn keep(_: *mut std::ffi::c_void) {}
        let array = capture(|| {
            // SAFETY: the buffer holds exactly the described elements and, per this function's
            // contract, outlives every use; the no-op deleter leaves ownership with the caller.
            Array::from_raw(unsafe {
                sys::mlx_array_new_data_managed_payload(
                    bytes.as_ptr().cast_mut().cast(),
                    dims.as_ptr(),
                    ndim,
                    dtype.to_sys(),
                    std::ptr::null_mut(),
                    Some(keep),
                )
            })
        })?;
        Ok(array.moved_toward_gpu())
    }

    /// An array over the start of an MLX buffer that ORT owns (`crate::bound_memory`), without
    /// a copy. Its pages stay where they are: `bound_memory` knows when to move them.
    ///
    /// # Safety
    /// `buffer` must be the live handle whose host-visible data `bytes` starts, and the same
    /// contract as [`Array::from_borrowed_bytes`] holds: the buffer outlives every use.
    pub(crate) unsafe fn over_mlx_buffer(
        buffer: *mut std::ffi::c_void,
        bytes: &[u8],
        shape: &[i64],
        dtype: Dtype,
    ) -> Result<Array> {
        let (dims, ndim) = host_layout(bytes, shape, dtype)?;
        Array::from_op(|out| {
            // SAFETY: per the contract `buffer` is live and holds `bytes.len()` bytes, the
            // elements `dims` describe (checked above); the array does not own it.
            unsafe {
                sys::mlx_ep_array_over_buffer(out, buffer, dims.as_ptr(), ndim, dtype.to_sys())
            }
        })
    }

    /// Hands host bytes to MLX: the array owns them from here on and frees them with itself.
    /// Where MLX's allocator can adopt the buffer (the CPU backend) nothing is copied; where it
    /// cannot (CUDA), MLX copies into its own memory and frees the bytes at once. Either way
    /// the bytes exist once. A buffer not aligned for the element type is copied instead.
    pub fn from_owned_bytes(bytes: Vec<u8>, shape: &[i64], dtype: Dtype) -> Result<Array> {
        let (dims, ndim) = host_layout(&bytes, shape, dtype)?;
        let align = dtype.size_in_bytes().max(1);
        if bytes.is_empty() || !(bytes.as_ptr() as usize).is_multiple_of(align) {
            return Array::from_bytes(&bytes, shape, dtype);
        }
        extern "C" fn free_owned(payload: *mut std::ffi::c_void) {
            // SAFETY: `payload` is the Box made below, handed to MLX once and freed once here.
            drop(unsafe { Box::from_raw(payload.cast::<Vec<u8>>()) });
        }
        let owned = Box::new(bytes);
        let data = owned.as_ptr().cast_mut().cast();
        let payload = Box::into_raw(owned).cast();
        capture(|| {
            // SAFETY: `data` addresses exactly the described elements and stays valid until MLX
            // calls `free_owned(payload)`, which it does once, when the array's data is released
            // (or right after copying, where it cannot adopt the buffer). Should mlx-c fail
            // before the array exists the bytes leak, which is safe: they are never freed twice.
            Array::from_raw(unsafe {
                sys::mlx_array_new_data_managed_payload(
                    data,
                    dims.as_ptr(),
                    ndim,
                    dtype.to_sys(),
                    payload,
                    Some(free_owned),
                )
            })
        })
        .map(Array::moved_toward_gpu)
    }

    /// Evaluates several arrays in one pass over their shared graph.
    pub fn eval_all(arrays: &[Array]) -> Result<()> {
        let vector = crate::VectorArray::from_arrays(arrays)?;
        // SAFETY: `vector` holds live arrays.
        check(unsafe { sys::mlx_eval(vector.raw()) })
    }

    /// Copies a typed host slice into a new array of the given shape.
    pub fn from_slice<T: Element>(values: &[T], shape: &[i64]) -> Result<Array> {
        // SAFETY: `T: Element` types are plain-old-data; viewing them as bytes is sound.
        let bytes = unsafe {
            std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values))
        };
        Array::from_bytes(bytes, shape, T::DTYPE)
    }

    /// A 0-d array.
    pub fn scalar<T: Element>(value: T) -> Result<Array> {
        Array::from_slice(&[value], &[])
    }

    /// The identity of the array this handle refers to: equal for clones of one array, distinct
    /// for different arrays (even equal ones) alive at the same time.
    pub fn id(&self) -> usize {
        // SAFETY: `raw` is a live handle; the call only reads the array's address.
        unsafe { sys::mlx_ep_array_id(self.raw) }
    }

    /// The identity of the buffer this array's data lives in once evaluated (`None` before):
    /// equal for arrays that share a buffer, as a result MLX wrote into its input's buffer
    /// shares it with that input.
    pub fn buffer_id(&self) -> Option<usize> {
        // SAFETY: `raw` is a live handle; the call reads the buffer's address, not its data.
        let id = unsafe { sys::mlx_ep_buffer_id(self.raw) };
        (id != 0).then_some(id)
    }

    pub fn dtype(&self) -> Dtype {
        // SAFETY: `raw` is a live array handle.
        Dtype::from_sys(unsafe { sys::mlx_array_dtype(self.raw) })
    }

    pub fn ndim(&self) -> usize {
        // SAFETY: `raw` is a live array handle.
        unsafe { sys::mlx_array_ndim(self.raw) }
    }

    pub fn shape(&self) -> Vec<i64> {
        let ndim = self.ndim();
        if ndim == 0 {
            return Vec::new();
        }
        // SAFETY: mlx_array_shape points at `ndim` ints owned by the live array.
        let dims = unsafe { std::slice::from_raw_parts(sys::mlx_array_shape(self.raw), ndim) };
        dims.iter().map(|&d| i64::from(d)).collect()
    }

    pub fn size(&self) -> usize {
        // SAFETY: `raw` is a live array handle.
        unsafe { sys::mlx_array_size(self.raw) }
    }

    pub fn nbytes(&self) -> usize {
        // SAFETY: `raw` is a live array handle.
        unsafe { sys::mlx_array_nbytes(self.raw) }
    }

    /// Evaluates the lazy graph that produces this array.
    pub fn eval(&self) -> Result<()> {
        // SAFETY: `raw` is a live array handle.
        check(unsafe { sys::mlx_array_eval(self.raw) })
    }

    /// Evaluates and copies the elements, row-major, into `dst` (exactly `nbytes` long).
    pub fn copy_to(&self, dst: &mut [u8], stream: &Stream) -> Result<()> {
        if dst.len() != self.nbytes() {
            return Err(Error::Shape(format!(
                "destination of {} bytes for an array of {} bytes",
                dst.len(),
                self.nbytes()
            )));
        }
        if dst.is_empty() {
            return Ok(());
        }
        // An array a batched evaluation already finished is read as it is: another evaluation
        // would cost a device round trip (on MLX's CUDA backend a decode step reads ~100).
        let dense = if self.readable_in_place() {
            self.clone()
        } else {
            let dense = crate::ops::contiguous(self, stream)?;
            dense.eval()?;
            dense
        };
        if crate::cuda::compute_capability().is_some() {
            // An output bound in MLX's own memory is written on the device; anything else is
            // host memory.
            let into_mlx = crate::bound_memory::is_ours(dst);
            // SAFETY: `dense` is evaluated, finished and row-contiguous, and `dst` is valid for
            // its `nbytes` bytes (the start of an MLX buffer when `into_mlx`); the shim checks
            // that the source bytes lie within their buffer.
            let status = unsafe {
                if into_mlx {
                    sys::mlx_ep_copy_into_unified(dense.raw, dst.as_mut_ptr().cast(), dst.len(), 0)
                } else {
                    sys::mlx_ep_copy_from_device(dense.raw, dst.as_mut_ptr().cast(), dst.len())
                }
            };
            match status {
                0 => return Ok(()),
                1 => {} // the driver could not copy it: read through MLX below
                failed => {
                    return Err(Error::Mlx(format!(
                        "copying {} bytes from the GPU failed (CUDA error {})",
                        dst.len(),
                        failed - 2
                    )))
                }
            }
        }
        // SAFETY: `dense` is evaluated and row-contiguous, so its data pointer (offset already
        // applied) addresses `nbytes` valid bytes. The byte accessor works for every dtype.
        let src = unsafe { sys::mlx_array_data_uint8(dense.raw) };
        if src.is_null() {
            return Err(Error::Mlx("evaluated array has no data".into()));
        }
        // SAFETY: `src` is valid for `dst.len()` bytes (see above) and does not overlap `dst`.
        unsafe { std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// Whether the array is evaluated, its computation finished, and dense row-major.
    fn readable_in_place(&self) -> bool {
        let (mut available, mut row_major) = (false, false);
        // SAFETY: a live handle and valid out-pointers; the layout flags are only asked for
        // once the array is available (they are set when it is evaluated).
        unsafe {
            sys::_mlx_array_is_available(&mut available, self.raw) == 0
                && available
                && sys::_mlx_array_is_row_contiguous(&mut row_major, self.raw) == 0
                && row_major
        }
    }

    /// Evaluates and returns the elements as row-major host bytes.
    pub fn to_bytes(&self, stream: &Stream) -> Result<Vec<u8>> {
        let mut out = vec![0u8; self.nbytes()];
        self.copy_to(&mut out, stream)?;
        Ok(out)
    }

    /// Evaluates and returns the elements as a typed vector; the dtype must match `T`.
    pub fn to_vec<T: Element>(&self, stream: &Stream) -> Result<Vec<T>> {
        if self.dtype() != T::DTYPE {
            return Err(Error::Dtype(format!(
                "array is {:?}, asked for {:?}",
                self.dtype(),
                T::DTYPE
            )));
        }
        let mut out = vec![T::default(); self.size()];
        // SAFETY: `out` owns size * size_of::<T>() bytes of plain-old-data, all initialised.
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(
                out.as_mut_ptr().cast::<u8>(),
                std::mem::size_of_val(out.as_slice()),
            )
        };
        self.copy_to(bytes, stream)?;
        Ok(out)
    }
}

/// MLX's dims and rank for host bytes of `shape` and `dtype`, checking that the byte count fits.
/// The smallest array copied in by the CUDA driver: below it the driver's fixed cost (a call
/// and a stream synchronisation, ~10-20 us) outweighs the host's slower write.
const DRIVER_COPY_MIN: usize = 256 * 1024;

fn host_layout(bytes: &[u8], shape: &[i64], dtype: Dtype) -> Result<(Vec<i32>, i32)> {
    crate::init();
    let dims = to_mlx_shape(shape)?;
    let expected = element_count(shape)?
        .checked_mul(dtype.size_in_bytes())
        .ok_or_else(|| Error::Shape(format!("shape {shape:?} is too large")))?;
    if bytes.len() != expected {
        return Err(Error::Shape(format!(
            "{} bytes given for a {dtype:?} array of shape {shape:?} ({expected} needed)",
            bytes.len()
        )));
    }
    let ndim = i32::try_from(dims.len()).map_err(|_| Error::Shape("too many dims".into()))?;
    Ok((dims, ndim))
}

impl Clone for Array {
    fn clone(&self) -> Self {
        // SAFETY: mlx_array_set makes `copy` share `self`'s array (a reference-count bump).
        // It cannot fail for a live source; the copy is owned and freed by its own Drop.
        unsafe {
            let mut copy = sys::mlx_array_new();
            sys::mlx_array_set(&mut copy, self.raw);
            Array { raw: copy }
        }
    }
}

impl Drop for Array {
    fn drop(&mut self) {
        // SAFETY: each Array owns exactly one handle, freed exactly once here.
        unsafe { sys::mlx_array_free(self.raw) };
    }
}

impl fmt::Debug for Array {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Array")
            .field("dtype", &self.dtype())
            .field("shape", &self.shape())
            .finish()
    }
}
