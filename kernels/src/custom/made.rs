//! MLX's kernel objects, made once per body on each thread. Making one
//! (`mlx_fast_cuda_kernel_new`, `mlx_fast_metal_kernel_new`) copies the body and scans it for
//! the shape and stride names it reads, which a kernel applied on every run paid every run:
//! on the H200 a store made each run took 40.6 µs with MLX's evaluation, made once 35.1
//! (the store of an output bound in the EP's memory, `store_bytes`, is applied outside the
//! compiled replay, once a run). Per thread because MLX's state is (the EP runs a session on
//! one thread); a body generated at run time (`pack_bytes`, `decode_attention`) is one entry per
//! distinct text, of which there are a handful.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::thread::LocalKey;

use crate::error::Result;

/// Kernels of one kind, by name: each made one with the argument names and body it was made of.
pub(super) type Made<K> = RefCell<HashMap<String, Vec<Entry<K>>>>;

pub(super) struct Entry<K> {
    inputs: Vec<String>,
    outputs: Vec<String>,
    source: String,
    kernel: Rc<K>,
}

/// The kernel `name` over `inputs`, `outputs` and `source` from `cache`, made by `make` the
/// first time.
pub(super) fn made<K>(
    cache: &'static LocalKey<Made<K>>,
    (name, inputs, outputs): (&str, &[&str], &[&str]),
    source: &str,
    make: impl FnOnce() -> Result<K>,
) -> Result<Rc<K>> {
    let same = |e: &Entry<K>| {
        e.source == source
            && e.inputs.iter().eq(inputs.iter().copied())
            && e.outputs.iter().eq(outputs.iter().copied())
    };
    let owned = |names: &[&str]| names.iter().map(|&n| n.to_owned()).collect();
    let found = cache.with(|c| {
        c.borrow()
            .get(name)
            .and_then(|entries| entries.iter().find(|e| same(e)).map(|e| e.kernel.clone()))
    });
    if let Some(kernel) = found {
        return Ok(kernel);
    }
    let kernel = Rc::new(make()?);
    cache.with(|c| {
        c.borrow_mut()
            .entry(name.to_owned())
            .or_default()
            .push(Entry {
                inputs: owned(inputs),
                outputs: owned(outputs),
                source: source.to_owned(),
                kernel: kernel.clone(),
            })
    });
    Ok(kernel)
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        static NUMBERS: Made<u32> = RefCell::default();
    }

    #[test]
    fn a_kernel_is_made_once_per_name_arguments_and_body() {
        let made_count = std::cell::Cell::new(0);
        let get_with = |name: &str, inputs: &[&str], outputs: &[&str], source: &str| {
            made(&NUMBERS, (name, inputs, outputs), source, || {
                made_count.set(made_count.get() + 1);
                Ok(made_count.get())
            })
            .map(|k| *k)
            .unwrap()
        };
        let get =
            |name: &str, inputs: &[&str], source: &str| get_with(name, inputs, &["out"], source);
        assert_eq!(get("k", &["a"], "body"), 1);
        assert_eq!(get("k", &["a"], "body"), 1, "the same kernel again");
        assert_eq!(get("k", &["a"], "another body"), 2);
        assert_eq!(get("k", &["b"], "body"), 3, "other argument names");
        assert_eq!(get("j", &["a"], "body"), 4, "another name");
        assert_eq!(
            get_with("k", &["a"], &["out", "sum"], "body"),
            5,
            "other outputs"
        );
        assert_eq!(
            get_with("k", &["a", "out"], &[], "body"),
            6,
            "names in other places"
        );
        assert_eq!(get("k", &["a"], "another body"), 2);
        assert_eq!(made_count.get(), 6);
    }
}
