//! The ONNX Runtime library: loaded once per process (never in the postmaster), its version,
//! and the CUDA/cuDNN libraries preloaded before a GPU execution provider.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use parking_lot::Mutex;

use super::error::{Error, Result};

/// The ONNX Runtime library this process loaded: where from and its version.
#[derive(Debug, Clone)]
pub struct Runtime {
    pub library: PathBuf,
    /// e.g. `1.31.1`, read from the library's build info.
    pub version: String,
    pub(crate) environment: ort::environment::Environment,
}

static RUNTIME: OnceLock<Runtime> = OnceLock::new();
static RUNTIME_INIT: Mutex<()> = Mutex::new(());

/// Loads the ONNX Runtime shared library at `library` once per process and returns it.
///
/// A process can hold only one ONNX Runtime: a later call naming another path is an
/// [`Error::OrtLibraryChanged`]. A missing or wrong library is an [`Error::OrtLibrary`] and
/// leaves nothing loaded, so a corrected path can be tried again.
pub fn runtime(library: &Path) -> Result<&'static Runtime> {
    if let Some(rt) = RUNTIME.get() {
        return check_same(rt, library);
    }
    let _guard = RUNTIME_INIT.lock();
    if let Some(rt) = RUNTIME.get() {
        return check_same(rt, library);
    }
    if !library.is_file() {
        return Err(Error::OrtLibrary {
            path: library.to_owned(),
            reason: "no such file".into(),
        });
    }
    // ORT's environment may start threads: none of them may take PostgreSQL's signals.
    let environment = super::signals::with_signals_blocked(|| -> Result<_> {
        let builder = ort::init_from(library).map_err(|e| Error::OrtLibrary {
            path: library.to_owned(),
            reason: e.to_string(),
        })?;
        Ok(builder.with_name("tributary").build()?)
    })?;
    let version = library_version(library).unwrap_or_else(|| ort_version(ort::info()));
    Ok(RUNTIME.get_or_init(|| Runtime {
        library: library.to_owned(),
        version,
        environment,
    }))
}

fn check_same(rt: &'static Runtime, library: &Path) -> Result<&'static Runtime> {
    if rt.library == library {
        Ok(rt)
    } else {
        Err(Error::OrtLibraryChanged {
            loaded: rt.library.clone(),
            requested: library.to_owned(),
        })
    }
}

/// The library's own version string (`OrtGetApiBase()->GetVersionString()`, e.g. `1.31.1`).
/// Opening the already-loaded library again only bumps its reference count.
fn library_version(library: &Path) -> Option<String> {
    // SAFETY: OrtGetApiBase has this signature in every ONNX Runtime release (onnxruntime_c_api.h)
    // and returns a static struct; GetVersionString returns a static NUL-terminated string.
    unsafe {
        let lib = libloading::Library::new(library).ok()?;
        let get: libloading::Symbol<unsafe extern "C" fn() -> *const ort::sys::OrtApiBase> =
            lib.get(b"OrtGetApiBase").ok()?;
        let base = get();
        if base.is_null() {
            return None;
        }
        let v = ((*base).GetVersionString)();
        (!v.is_null()).then(|| std::ffi::CStr::from_ptr(v).to_string_lossy().into_owned())
    }
}

/// Fallback: pulls `1.31.1` out of ORT's build info (`... git-branch=rel-1.31.1, ...`).
fn ort_version(info: &str) -> String {
    info.split([',', ' '])
        .find_map(|part| part.strip_prefix("git-branch=rel-"))
        .map(str::to_owned)
        .unwrap_or_else(|| info.to_owned())
}

/// Library name prefixes the CUDA and TensorRT execution providers link against or open at run
/// time (CUDA 13 runtime, cuBLAS, cuFFT, cuRAND, NVRTC, nvJitLink, cuDNN 9 and its sub-libraries,
/// TensorRT 10).
const GPU_LIBRARY_PREFIXES: [&str; 10] = [
    "libcudart.",
    "libcublasLt.",
    "libcublas.",
    "libcufft.",
    "libcurand.",
    "libnvrtc",
    "libnvJitLink.",
    "libcudnn",
    "libnvinfer",
    "libnvonnxparser",
];

static PRELOADED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Loads the CUDA, cuDNN and TensorRT libraries found in `dirs` into this process (`RTLD_GLOBAL`),
/// so that when ONNX Runtime opens its CUDA provider, the provider's dependencies resolve to them
/// by soname without `LD_LIBRARY_PATH` in the server's environment. This is what
/// `onnxruntime.preload_dlls()` does for Python. Libraries that need others are retried until
/// nothing more loads, so the order in the directory does not matter. Each directory is loaded
/// once per process; returns what could not be loaded, `; `-separated (unreadable directories
/// and libraries that failed to load), or empty when all went well. An unreadable directory does
/// not stop the others from loading.
pub fn preload_libraries(dirs: &[PathBuf]) -> String {
    let mut done = PRELOADED.lock();
    let mut pending: Vec<PathBuf> = Vec::new();
    let mut bad_dirs = Vec::new();
    for dir in dirs {
        if done.contains(dir) {
            continue;
        }
        done.push(dir.clone());
        let Ok(entries) = std::fs::read_dir(dir) else {
            bad_dirs.push(format!("{}: not a readable directory", dir.display()));
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.contains(".so") && GPU_LIBRARY_PREFIXES.iter().any(|p| name.starts_with(p)) {
                pending.push(entry.path());
            }
        }
    }
    pending.sort();
    let mut last_errors = Vec::new();
    while !pending.is_empty() {
        let before = pending.len();
        last_errors.clear();
        pending.retain(|path| {
            // SAFETY: loading a shared library runs its initialisers; these are NVIDIA's libraries
            // from a directory a superuser named in tributary.cuda_library_path.
            match unsafe {
                libloading::os::unix::Library::open(
                    Some(path),
                    libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_GLOBAL,
                )
            } {
                Ok(lib) => {
                    // Kept for the life of the process, like the provider that uses it.
                    std::mem::forget(lib);
                    false
                }
                Err(e) => {
                    // libloading's Display is only "dlopen failed"; dlerror()'s text (which names
                    // the file) is its source.
                    last_errors.push(
                        std::error::Error::source(&e)
                            .map_or_else(|| e.to_string(), |s| s.to_string()),
                    );
                    true
                }
            }
        });
        if pending.len() == before {
            break;
        }
    }
    bad_dirs.extend(last_errors);
    bad_dirs.join("; ")
}

#[cfg(test)]
mod tests {
    use super::ort_version;

    #[test]
    fn version_from_build_info() {
        let info = "ORT Build Info: git-branch=rel-1.31.1, git-commit-id=abc, build type=Release";
        assert_eq!(ort_version(info), "1.31.1");
        assert_eq!(ort_version("something else"), "something else");
    }

    /// An unreadable directory is reported and does not stop the next one from being loaded;
    /// a library that fails to load is reported with dlerror's text, which names the file.
    #[test]
    fn preload_reports_every_failure() {
        let base = std::env::temp_dir().join(format!("tributary-preload-{}", std::process::id()));
        let good = base.join("lib");
        std::fs::create_dir_all(&good).unwrap();
        std::fs::write(good.join("libcudart.so.99"), b"not an ELF file").unwrap();
        let missing = base.join("missing");
        let out = super::preload_libraries(&[missing.clone(), good.clone()]);
        assert!(
            out.contains(&format!("{}: not a readable directory", missing.display())),
            "{out}"
        );
        assert!(
            out.contains("libcudart.so.99"),
            "the second directory was read too: {out}"
        );
        std::fs::remove_dir_all(&base).unwrap();
    }
}
