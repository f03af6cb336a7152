//! Nodes the EP hands to ORT: the EPContext nodes of a compiled model, made with ORT's model
//! editor API (ORT takes ownership of each node; it copies names and attributes).

use std::ffi::{c_void, CString};
use std::ptr;

use super::api::{call, check};
use super::sys;

/// An attribute of a node the EP makes.
#[derive(Debug)]
pub enum NewAttr<'a> {
    Int(i64),
    Str(&'a str),
}

/// One attribute made by ORT, released when dropped unless CreateNode took it.
struct OwnedAttr(*mut sys::OrtOpAttr);

impl Drop for OwnedAttr {
    fn drop(&mut self) {
        // SAFETY: made by CreateOpAttr below and released once, here.
        unsafe { call!(api.ReleaseOpAttr(self.0)) };
    }
}

fn c_string(text: &str) -> Result<CString, String> {
    CString::new(text).map_err(|_| format!("'{text}' holds a NUL character"))
}

fn attribute(name: &str, value: &NewAttr) -> Result<OwnedAttr, String> {
    let name = c_string(name)?;
    let mut attr = ptr::null_mut();
    // ORT reads a string attribute up to its NUL (whatever length it is given).
    let text = match value {
        NewAttr::Str(s) => Some(c_string(s)?),
        NewAttr::Int(_) => None,
    };
    let (data, len, kind): (*const c_void, usize, _) = match (value, &text) {
        (NewAttr::Int(v), _) => (
            ptr::from_ref(v).cast(),
            1,
            sys::OrtOpAttrType::ORT_OP_ATTR_INT,
        ),
        (NewAttr::Str(_), Some(text)) => (
            text.as_ptr().cast(),
            text.as_bytes().len(),
            sys::OrtOpAttrType::ORT_OP_ATTR_STRING,
        ),
        (NewAttr::Str(_), None) => unreachable!("made above"),
    };
    let len = i32::try_from(len).map_err(|_| "an attribute over 2 GiB".to_string())?;
    // SAFETY: `data` points at one i64, or at a NUL-terminated string of `len` bytes, alive for
    // the call; ORT copies it into the attribute it returns.
    check(unsafe { call!(api.CreateOpAttr(name.as_ptr(), data, len, kind, &mut attr)) })?;
    Ok(OwnedAttr(attr))
}

/// A new node (ORT owns it once it is handed back through `Compile`'s EPContext slots).
pub fn create_node(
    op_type: &str,
    domain: &str,
    name: &str,
    inputs: &[String],
    outputs: &[String],
    attributes: &[(&str, NewAttr)],
) -> Result<*mut sys::OrtNode, String> {
    let owned = |names: &[String]| {
        names
            .iter()
            .map(|n| c_string(n))
            .collect::<Result<Vec<_>, _>>()
    };
    let (inputs, outputs) = (owned(inputs)?, owned(outputs)?);
    let pointers = |names: &[CString]| names.iter().map(|n| n.as_ptr()).collect::<Vec<_>>();
    let (input_ptrs, output_ptrs) = (pointers(&inputs), pointers(&outputs));
    let attrs = attributes
        .iter()
        .map(|(name, value)| attribute(name, value))
        .collect::<Result<Vec<_>, _>>()?;
    let mut attr_ptrs: Vec<*mut sys::OrtOpAttr> = attrs.iter().map(|a| a.0).collect();
    let (op_type, domain, name) = (c_string(op_type)?, c_string(domain)?, c_string(name)?);
    // SAFETY: the editor table is ORT's static table for our API version.
    let editor = unsafe { call!(api.GetModelEditorApi()).as_ref() }
        .ok_or("this ONNX Runtime has no model editor API (needed to write EPContext nodes)")?;
    let create = editor
        .CreateNode
        .ok_or("ORT's model editor API lacks CreateNode")?;
    let mut node = ptr::null_mut();
    // SAFETY: every pointer array holds live NUL-terminated strings or attributes for the call;
    // ORT copies the strings and returns a node we hand back to ORT.
    let status = unsafe {
        create(
            op_type.as_ptr(),
            domain.as_ptr(),
            name.as_ptr(),
            input_ptrs.as_ptr(),
            input_ptrs.len(),
            output_ptrs.as_ptr(),
            output_ptrs.len(),
            attr_ptrs.as_mut_ptr(),
            attr_ptrs.len(),
            &mut node,
        )
    };
    // ORT 1.31 takes each attribute it copied (releasing it and nulling its entry); an entry
    // left in place is still ours to release.
    for (owned, entry) in attrs.into_iter().zip(&attr_ptrs) {
        if entry.is_null() {
            std::mem::forget(owned);
        }
    }
    check(status)?;
    Ok(node)
}

/// Releases a node `create_node` made that is not handed to ORT after all.
pub fn release_node(node: *mut sys::OrtNode) {
    // SAFETY: `node` came from CreateNode and was not given to ORT, so it is ours to release.
    unsafe { call!(api.ReleaseNode(node)) };
}
