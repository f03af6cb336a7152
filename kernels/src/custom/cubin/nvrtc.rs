//! NVRTC, as MLX's CUDA build loaded it: what a compile targets (the device's architecture, the
//! CUDA headers beside MLX or NVRTC) and the compile itself.

use std::ffi::{c_char, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::sys;

/// A compiler for this process's GPU.
#[derive(Debug)]
pub(super) struct Nvrtc {
    options: Vec<CString>,
    /// What a binary depends on besides its source: NVRTC's version and the options.
    pub identity: String,
}

/// The process's compiler, found once; why there is none otherwise.
pub(super) fn nvrtc() -> Result<&'static Nvrtc, &'static str> {
    static FOUND: OnceLock<Result<Nvrtc, String>> = OnceLock::new();
    FOUND.get_or_init(find).as_ref().map_err(String::as_str)
}

fn find() -> Result<Nvrtc, String> {
    let capability = crate::cuda::compute_capability()
        .ok_or("MLX reports no CUDA compute capability for its GPU")?;
    for_capability(capability)
}

/// A compiler for GPUs of compute capability `(cc_major, cc_minor)`.
fn for_capability((cc_major, cc_minor): (usize, usize)) -> Result<Nvrtc, String> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: two valid out-parameters.
    if unsafe { sys::mlx_ep_nvrtc_version(&mut major, &mut minor) } != 0 {
        return Err("NVRTC is not loaded (not MLX's CUDA backend)".into());
    }
    // A cubin for this very device, as MLX's JIT builds its own ("a": the architecture's
    // specific features, from compute capability 9 on).
    let arch = format!(
        "--gpu-architecture=sm_{cc_major}{cc_minor}{}",
        if cc_major >= 9 { "a" } else { "" }
    );
    let headers = header_folder().ok_or(
        "CUDA's headers (cuda_fp16.h) were found neither beside NVRTC or MLX nor under \
         CUDA_HOME, CUDA_PATH or /usr/local/cuda",
    )?;
    let identity = format!("NVRTC {major}.{minor} {arch}");
    let options = [arch, format!("--include-path={}", headers.display())]
        .into_iter()
        .map(|o| CString::new(o).map_err(|_| "a header path holds a NUL".to_string()))
        .collect::<Result<_, _>>()?;
    Ok(Nvrtc { options, identity })
}

/// For tests on any machine: the NVRTC library named by `ONNXRUNTIME_EP_MLX_TEST_NVRTC` (CUDA's
/// `nvidia-cuda-nvrtc` wheel; `make test` installs it and sets the variable), loaded into the
/// process so the shim finds it as it finds MLX's, targeting an H100's architecture (sm_90a).
/// `None` when the variable is unset; a variable naming no usable NVRTC panics.
#[cfg(test)]
pub(super) fn for_tests() -> Option<&'static Nvrtc> {
    static FOUND: OnceLock<Option<Nvrtc>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            let path = std::env::var("ONNXRUNTIME_EP_MLX_TEST_NVRTC")
                .ok()
                .filter(|p| !p.is_empty())?;
            let c_path = CString::new(path.clone()).expect("a path without NUL");
            // SAFETY: a NUL-terminated path; the library stays loaded for the process.
            let handle =
                unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
            assert!(
                !handle.is_null(),
                "ONNXRUNTIME_EP_MLX_TEST_NVRTC={path} does not load"
            );
            Some(for_capability((9, 0)).unwrap_or_else(|e| panic!("NVRTC from {path}: {e}")))
        })
        .as_ref()
}

impl Nvrtc {
    /// `source` compiled to a cubin, or NVRTC's message.
    pub(super) fn compile(&self, source: &str, name: &str) -> Result<Vec<u8>, String> {
        let source = CString::new(source).map_err(|_| "the source holds a NUL".to_string())?;
        let file = CString::new(format!("{name}.cu")).map_err(|_| "a NUL in the name")?;
        let options: Vec<*const c_char> = self.options.iter().map(|o| o.as_ptr()).collect();
        let (mut binary, mut size, mut message) =
            (std::ptr::null_mut(), 0usize, std::ptr::null_mut());
        // SAFETY: the strings and the option array outlive the call; the out-parameters are
        // valid, and whatever the shim allocates in them is freed below.
        let status = unsafe {
            sys::mlx_ep_nvrtc_compile(
                source.as_ptr(),
                file.as_ptr(),
                options.as_ptr(),
                options.len() as i32,
                &mut binary,
                &mut size,
                &mut message,
            )
        };
        // SAFETY: on success `binary` holds `size` bytes; the shim's allocations are freed
        // once each.
        unsafe {
            let result = if status == 0 && !binary.is_null() {
                Ok(std::slice::from_raw_parts(binary.cast::<u8>(), size).to_vec())
            } else {
                Err(taken_text(message).unwrap_or_else(|| "NVRTC failed".into()))
            };
            sys::mlx_ep_free_text(binary);
            result
        }
    }
}

/// The first folder holding CUDA's half-type headers: beside the NVRTC MLX loaded (CUDA's
/// Python wheels put the headers and the libraries of one CUDA release under one
/// `nvidia/<release>`), the CUDA runtime wheels beside the `mlx` package, as MLX's JIT looks,
/// then a toolkit.
fn header_folder() -> Option<PathBuf> {
    let library_folder =
        |path: Option<String>| path.map(PathBuf::from)?.parent().map(Path::to_path_buf);
    // SAFETY: each call returns an owned string or null, taken over by `taken_text`.
    let nvrtc = library_folder(unsafe { taken_text(sys::mlx_ep_nvrtc_library_path()) });
    // SAFETY: as above.
    let mlx = library_folder(unsafe { taken_text(sys::mlx_ep_mlx_library_path()) });
    let mut candidates = Vec::new();
    candidates.extend(nvrtc.map(|lib| lib.join("../include")));
    if let Some(site) = mlx.as_deref().and_then(Path::parent).and_then(Path::parent) {
        candidates
            .extend(["cu13", "cuda_runtime"].map(|r| site.join("nvidia").join(r).join("include")));
    }
    for variable in ["CUDA_HOME", "CUDA_PATH"] {
        candidates
            .extend(std::env::var_os(variable).map(|home| PathBuf::from(home).join("include")));
    }
    candidates.push(PathBuf::from("/usr/local/cuda/include"));
    candidates.into_iter().find(|folder| {
        ["cuda_fp16.h", "cuda_bf16.h"]
            .iter()
            .all(|h| folder.join(h).is_file())
    })
}

/// The text of a string the shim allocated, which this frees; `None` for null.
///
/// # Safety
/// `text` is null or a NUL-terminated string from the shim, not used again.
unsafe fn taken_text(text: *mut c_char) -> Option<String> {
    if text.is_null() {
        return None;
    }
    // SAFETY: per the contract, a live NUL-terminated string, freed once here.
    unsafe {
        let owned = CStr::from_ptr(text).to_string_lossy().into_owned();
        sys::mlx_ep_free_text(text);
        Some(owned)
    }
}
