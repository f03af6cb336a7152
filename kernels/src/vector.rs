//! An owned `mlx_vector_array`, the list type of mlx-c's multi-array APIs.

use std::fmt;

use crate::array::Array;
use crate::error::{check, Result};
use crate::sys;

pub struct VectorArray {
    raw: sys::mlx_vector_array,
}

impl VectorArray {
    pub fn new() -> VectorArray {
        crate::init();
        // SAFETY: returns an owned empty vector, freed by Drop.
        let raw = unsafe { sys::mlx_vector_array_new() };
        VectorArray { raw }
    }

    pub fn from_arrays(arrays: &[Array]) -> Result<VectorArray> {
        crate::init();
        let handles: Vec<sys::mlx_array> = arrays.iter().map(Array::raw).collect();
        // SAFETY: `handles` are live arrays; the new vector takes its own references to them.
        let raw = unsafe { sys::mlx_vector_array_new_data(handles.as_ptr(), handles.len()) };
        Ok(VectorArray { raw })
    }

    /// Appends a shared reference to `array`.
    pub fn push(&mut self, array: &Array) -> Result<()> {
        // mlx-c's "new" vector has no storage yet and refuses appends until it is set once.
        let status = if self.raw.ctx.is_null() {
            // SAFETY: `raw` is our handle; set_value allocates its storage in place.
            unsafe { sys::mlx_vector_array_set_value(&mut self.raw, array.raw()) }
        } else {
            // SAFETY: both handles are live; the vector takes its own reference.
            unsafe { sys::mlx_vector_array_append_value(self.raw, array.raw()) }
        };
        check(status)
    }

    pub fn len(&self) -> usize {
        // SAFETY: `raw` is a live vector handle.
        unsafe { sys::mlx_vector_array_size(self.raw) }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn get(&self, index: usize) -> Result<Array> {
        Array::from_op(|out| {
            // SAFETY: `out` is a live array handle; an out-of-range index is reported as an error.
            unsafe { sys::mlx_vector_array_get(out, self.raw, index) }
        })
    }

    pub fn to_vec(&self) -> Result<Vec<Array>> {
        (0..self.len()).map(|i| self.get(i)).collect()
    }

    pub(crate) fn from_raw(raw: sys::mlx_vector_array) -> VectorArray {
        VectorArray { raw }
    }

    pub(crate) fn raw(&self) -> sys::mlx_vector_array {
        self.raw
    }
}

impl Default for VectorArray {
    fn default() -> Self {
        VectorArray::new()
    }
}

impl Drop for VectorArray {
    fn drop(&mut self) {
        // SAFETY: each VectorArray owns one handle, freed exactly once.
        unsafe { sys::mlx_vector_array_free(self.raw) };
    }
}

impl fmt::Debug for VectorArray {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VectorArray")
            .field("len", &self.len())
            .finish()
    }
}
