//! Settings, all under `tributary.*`. Settings that name a file (and so load code or data into
//! the server) are superuser-only (`PGC_SUSET`).

use std::ffi::CString;
use std::path::PathBuf;

use pgrx::prelude::*;
use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting, PostgresGucEnum};

use crate::engine::ProviderChoice;

/// `tributary.execution_provider`.
#[derive(PostgresGucEnum, Clone, Copy, PartialEq, Eq, Debug)]
pub enum ExecutionProvider {
    #[name = c"auto"]
    Auto,
    #[name = c"cpu"]
    Cpu,
    #[name = c"cuda"]
    Cuda,
}

/// Default model name; must be in `tributary.models`.
static MODEL: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(Some(c"all-MiniLM-L6-v2"));
/// Empty means `$pkglibdir/tributary/libonnxruntime.so`, where `scripts/setup.sh` puts it.
static ORT_LIBRARY: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
/// Empty means `$sharedir/tributary/models`, where `scripts/setup.sh` puts prepared models.
static MODEL_PATH: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
/// `auto`: CUDA when the ORT library has it and a GPU answers, else CPU (the reason is logged).
static EXECUTION_PROVIDER: GucSetting<ExecutionProvider> = GucSetting::<ExecutionProvider>::new(ExecutionProvider::Auto);
/// Padded tokens per ONNX Runtime run. On the 2-vCPU CPU machine, tributary_embed over 2,000
/// Debian descriptions ran at 97-103 rows/s with budgets of 512 to 2048 tokens and slowed past
/// that (90 at 4096, 85 at 16384, 75 at 32768; benches/embed_column.sh, BENCHMARKS.md): larger
/// batches only add padding and attention memory on a CPU.
static MAX_BATCH_TOKENS: GucSetting<i32> = GucSetting::<i32>::new(2048);
/// 0 lets ONNX Runtime use one thread per physical core.
static INTRA_OP_THREADS: GucSetting<i32> = GucSetting::<i32>::new(0);
/// CUDA device ordinal used when the CUDA execution provider runs.
static GPU_DEVICE: GucSetting<i32> = GucSetting::<i32>::new(0);
/// How often long work reports progress as a NOTICE, in ms; 0 turns it off.
static PROGRESS_INTERVAL: GucSetting<i32> = GucSetting::<i32>::new(10_000);

pub fn init() {
    GucRegistry::define_string_guc(
        c"tributary.model",
        c"Default embedding model (a name in tributary.models).",
        c"Used when a tributary function is called without a model argument.",
        &MODEL,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_string_guc(
        c"tributary.ort_library",
        c"Path of the ONNX Runtime shared library (libonnxruntime.so).",
        c"Empty means $libdir/tributary/libonnxruntime.so. Loaded once per backend, on first use.",
        &ORT_LIBRARY,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_string_guc(
        c"tributary.model_path",
        c"Directory that relative model paths in tributary.models are resolved against.",
        c"Empty means $sharedir/tributary/models.",
        &MODEL_PATH,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_enum_guc(
        c"tributary.execution_provider",
        c"ONNX Runtime execution provider: auto, cpu or cuda.",
        c"auto uses CUDA when it loads and otherwise the CPU, and logs which one runs.",
        &EXECUTION_PROVIDER,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"tributary.max_batch_tokens",
        c"Most padded tokens in one ONNX Runtime run.",
        c"Inputs are sorted by length and cut into batches of at most this many tokens (rows times the longest row).",
        &MAX_BATCH_TOKENS,
        256,
        1 << 22,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"tributary.intra_op_threads",
        c"ONNX Runtime intra-op threads per session; 0 means one per physical core.",
        c"",
        &INTRA_OP_THREADS,
        0,
        1024,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"tributary.gpu_device",
        c"CUDA device ordinal for the CUDA execution provider.",
        c"",
        &GPU_DEVICE,
        0,
        64,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"tributary.progress_interval",
        c"Milliseconds between progress NOTICEs of long work such as tributary_embed_column; 0 turns them off.",
        c"",
        &PROGRESS_INTERVAL,
        0,
        i32::MAX,
        GucContext::Userset,
        GucFlags::UNIT_MS,
    );
    unsafe { pg_sys::MarkGUCPrefixReserved(c"tributary".as_ptr()) };
}

fn string(setting: &GucSetting<Option<CString>>) -> Option<String> {
    setting.get().map(|s| s.to_string_lossy().into_owned()).filter(|s| !s.is_empty())
}

pub fn model() -> Option<String> {
    string(&MODEL)
}

/// The ONNX Runtime library to load: the setting, else `$libdir/tributary/libonnxruntime.so`.
pub fn ort_library() -> PathBuf {
    string(&ORT_LIBRARY).map(PathBuf::from).unwrap_or_else(|| pkglib_dir().join("tributary/libonnxruntime.so"))
}

/// Base directory for relative model paths: the setting, else `$sharedir/tributary/models`.
pub fn model_path() -> PathBuf {
    string(&MODEL_PATH).map(PathBuf::from).unwrap_or_else(|| share_dir().join("tributary/models"))
}

pub fn execution_provider() -> ProviderChoice {
    match EXECUTION_PROVIDER.get() {
        ExecutionProvider::Auto => ProviderChoice::Auto,
        ExecutionProvider::Cpu => ProviderChoice::Cpu,
        ExecutionProvider::Cuda => ProviderChoice::Cuda,
    }
}

pub fn max_batch_tokens() -> usize {
    MAX_BATCH_TOKENS.get() as usize
}

pub fn intra_op_threads() -> usize {
    INTRA_OP_THREADS.get() as usize
}

pub fn gpu_device() -> i32 {
    GPU_DEVICE.get()
}

pub fn progress_interval_ms() -> u64 {
    PROGRESS_INTERVAL.get() as u64
}

fn pkglib_dir() -> PathBuf {
    // SAFETY: pkglib_path is a NUL-terminated MAXPGPATH buffer set at backend start.
    let p = unsafe { std::ffi::CStr::from_ptr(std::ptr::addr_of!(pg_sys::pkglib_path).cast()) };
    PathBuf::from(p.to_string_lossy().into_owned())
}

fn share_dir() -> PathBuf {
    let mut buf = [0 as std::ffi::c_char; pg_sys::MAXPGPATH as usize];
    // SAFETY: get_share_path writes at most MAXPGPATH bytes, NUL-terminated.
    unsafe {
        pg_sys::get_share_path(std::ptr::addr_of!(pg_sys::my_exec_path).cast(), buf.as_mut_ptr());
        PathBuf::from(std::ffi::CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned())
    }
}
