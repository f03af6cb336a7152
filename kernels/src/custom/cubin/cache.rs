//! Where built kernels are kept: in the process, and on disk beside MLX's own compiled kernels,
//! so that a later process on the machine loads them instead of compiling them again.
//!
//! On disk a kernel is two files named by its name and a hash of what it was built from: the
//! cubin, and that text (the compiler's identity and the whole source), which a reader compares
//! in full before using the cubin, so that neither a hash collision nor another compiler's file
//! is ever loaded. Each file is written under a name of its own and renamed into place, cubin
//! first: processes building the same kernel at once agree, and a reader sees whole files.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// How a kernel's binary was had.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Origin {
    /// Had already in this process.
    Process,
    /// Read from the disk cache.
    Disk,
    /// Built now (or failed to build).
    Built,
}

/// A binary, or why none could be built.
pub(super) type Kept = Result<Arc<[u8]>, String>;

/// The binary built from `identity` (the compiler and the source, `name` the kernel's), and
/// where it came from: the process's cache, the disk's, or `build` (whose result both keep; a
/// failure is kept in the process too, so a source that does not compile is tried once).
pub(super) fn binary(
    name: &str,
    identity: &str,
    build: impl FnOnce() -> Result<Vec<u8>, String>,
) -> (Kept, Origin) {
    binary_in(folder(), name, identity, build)
}

/// [`binary`] with the disk cache in `folder` (none when `None`).
pub(super) fn binary_in(
    folder: Option<&Path>,
    name: &str,
    identity: &str,
    build: impl FnOnce() -> Result<Vec<u8>, String>,
) -> (Kept, Origin) {
    static BUILT: OnceLock<Mutex<HashMap<String, Kept>>> = OnceLock::new();
    let built = BUILT.get_or_init(Mutex::default);
    let known = built.lock().ok().and_then(|b| b.get(identity).cloned());
    if let Some(known) = known {
        return (known, Origin::Process);
    }
    let from_disk = folder.and_then(|folder| read(&stem(folder, name, identity), identity));
    let (result, origin) = match from_disk {
        Some(binary) => (Ok(binary), Origin::Disk),
        None => {
            let result = build();
            if let (Ok(binary), Some(folder)) = (&result, folder) {
                // The cache is an optimisation: a folder that cannot be written is left alone.
                let _ = write(&stem(folder, name, identity), identity, binary);
            }
            (result, Origin::Built)
        }
    };
    let result = result.map(Arc::<[u8]>::from);
    if let Ok(mut built) = built.lock() {
        built.insert(identity.to_owned(), result.clone());
    }
    (result, origin)
}

/// The folder kept kernels go in: `onnxruntime-ep-mlx` inside MLX's own cache of compiled
/// kernels (`MLX_PTX_CACHE_DIR`, else `<temporary folder>/mlx/<MLX version>/ptx`, as MLX
/// chooses it), so one setting keeps both; `None` when it cannot be made.
fn folder() -> Option<&'static Path> {
    static FOLDER: OnceLock<Option<PathBuf>> = OnceLock::new();
    FOLDER
        .get_or_init(|| {
            let mlx = match std::env::var_os("MLX_PTX_CACHE_DIR") {
                Some(folder) => PathBuf::from(folder),
                None => std::env::temp_dir()
                    .join("mlx")
                    .join(crate::mlx_version().ok()?)
                    .join("ptx"),
            };
            let ours = mlx.join("onnxruntime-ep-mlx");
            std::fs::create_dir_all(&ours).ok()?;
            Some(ours)
        })
        .as_deref()
}

/// The path, less its extension, of kernel `name` built from `identity` in `folder`: named by
/// a hash that is the same in every process (std's SipHash with fixed keys; a collision is
/// harmless, as the reader compares the whole text).
pub(super) fn stem(folder: &Path, name: &str, identity: &str) -> PathBuf {
    let mut hasher = DefaultHasher::new();
    identity.hash(&mut hasher);
    folder.join(format!("{name}-{:016x}", hasher.finish()))
}

/// The binary at `stem`, if it was built from `identity`.
pub(super) fn read(stem: &Path, identity: &str) -> Option<Vec<u8>> {
    let text = std::fs::read(stem.with_extension("cu")).ok()?;
    if text != identity.as_bytes() {
        return None;
    }
    std::fs::read(stem.with_extension("cubin"))
        .ok()
        .filter(|binary| !binary.is_empty())
}

fn write(stem: &Path, identity: &str, binary: &[u8]) -> std::io::Result<()> {
    let mine = format!(
        "{}-{:?}.tmp",
        std::process::id(),
        std::thread::current().id()
    );
    for (extension, bytes) in [("cubin", binary), ("cu", identity.as_bytes())] {
        let target = stem.with_extension(extension);
        let temporary = stem.with_extension(format!("{extension}.{mine}"));
        std::fs::write(&temporary, bytes)?;
        std::fs::rename(&temporary, &target)?;
    }
    Ok(())
}
