//! Settings, all under `tributary.*`. Settings that name a file (and so load code or data into
//! the server) are superuser-only (`PGC_SUSET`). Settings that size a backend's threads or
//! memory (`intra_op_threads`, `max_batch_tokens`, `max_texts_per_call`), and those that rank a
//! session's work (`priority`, `interactive_tokens`), are user-settable downwards only: a role
//! that is not a superuser may set them at most to their reset value (the server
//! configuration's, or what a superuser set with ALTER ROLE / ALTER DATABASE); above that a SET
//! fails with 42501 (`no_raise` in src/pg/gucs/limits.rs).
//!
//! Those check hooks and settings are in src/pg/gucs/limits.rs, the GPU settings in
//! src/pg/gucs/gpu.rs; the rest of the code calls every accessor as `gucs::name`.

mod gpu;
mod limits;

use std::ffi::CString;
use std::path::PathBuf;

use pgrx::prelude::*;
use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting, PostgresGucEnum};

use crate::engine::ProviderChoice;

pub use gpu::*;
pub use limits::*;

/// `tributary.execution_provider`.
#[derive(PostgresGucEnum, Clone, Copy, PartialEq, Eq, Debug)]
pub enum ExecutionProvider {
    #[name = c"auto"]
    Auto,
    #[name = c"cpu"]
    Cpu,
    #[name = c"cuda"]
    Cuda,
    #[name = c"tensorrt"]
    TensorRt,
}

/// `tributary.truncation`: what happens to a text longer than the model's window (its tokens,
/// prompt and special tokens included, past `max_length`).
#[derive(PostgresGucEnum, Clone, Copy, PartialEq, Eq, Debug)]
pub enum Truncation {
    /// Embed its first window, say nothing (the counts still show in jobs and sessions).
    #[name = c"truncate"]
    Truncate,
    /// Embed its first window and raise a WARNING with the count (one per call).
    #[name = c"warning"]
    Warning,
    /// Raise 22001 string_data_right_truncation; nothing is written.
    #[name = c"error"]
    Error,
}

/// `tributary.cpu_overflow`: what a call does when every CPU run slot is taken.
#[derive(PostgresGucEnum, Clone, Copy, PartialEq, Eq, Debug)]
pub enum CpuOverflow {
    /// Wait for a slot (interruptible; lock_timeout and statement_timeout apply).
    #[name = c"wait"]
    Wait,
    /// Raise 53400 configuration_limit_exceeded (before the call's first run only).
    #[name = c"error"]
    Error,
}

/// CPU run slots beyond `tributary.max_cpu_runs` that only interactive runs may take.
static INTERACTIVE_CPU_RUNS: GucSetting<i32> = GucSetting::<i32>::new(1);

/// ONNX Runtime runs on the CPU at once, cluster-wide: -1 no cap, 0 one per CPU core.
static MAX_CPU_RUNS: GucSetting<i32> = GucSetting::<i32>::new(0);

static CPU_OVERFLOW: GucSetting<CpuOverflow> = GucSetting::<CpuOverflow>::new(CpuOverflow::Wait);

/// CPU sessions load the model's prepared graph (src/engine prepared.rs), weights mapped from a
/// file every backend shares.
static SHARED_WEIGHTS: GucSetting<bool> = GucSetting::<bool>::new(true);

/// ONNX Runtime's intra-op threads spin while waiting for work.
static INTRA_OP_SPINNING: GucSetting<bool> = GucSetting::<bool>::new(false);

/// Give the CPU arena's growth back after each call's last run.
static SHRINK_ARENA: GucSetting<bool> = GucSetting::<bool>::new(true);

/// Empty means `$PGDATA/tributary_graphs`.
static GRAPH_CACHE_PATH: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);

/// ms a backend's sessions may stay unused before they are dropped; 0 = never.
static SESSION_IDLE_TIMEOUT: GucSetting<i32> = GucSetting::<i32>::new(0);

static TRUNCATION: GucSetting<Truncation> = GucSetting::<Truncation>::new(Truncation::Warning);

/// Default model name; must be in `tributary.models`.
static MODEL: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(c"all-MiniLM-L6-v2"));

/// Empty means `$pkglibdir/tributary/libonnxruntime.so`, where `scripts/setup.sh` puts it.
static ORT_LIBRARY: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);

/// Empty means `$sharedir/tributary/models`, where `scripts/setup.sh` puts prepared models.
static MODEL_PATH: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);

/// `auto`: CUDA when the ORT library has it and a GPU answers, else CPU (the reason is logged).
static EXECUTION_PROVIDER: GucSetting<ExecutionProvider> =
    GucSetting::<ExecutionProvider>::new(ExecutionProvider::Auto);

/// How often long work reports progress as a NOTICE, in ms; 0 turns it off.
static PROGRESS_INTERVAL: GucSetting<i32> = GucSetting::<i32>::new(10_000);

/// Most job workers at once (the upper bound of `tributary.max_workers`), and most databases
/// asking for workers at once: the jobs' shared memory (src/worker/registry.rs) has this many
/// entries of each. sql/jobs.sql bounds a job's `workers` by the same 32.
pub const MAX_SLOTS: usize = 32;

/// Job workers (not counting the launcher) across the cluster; each takes a
/// `max_worker_processes` slot while it runs.
static MAX_WORKERS: GucSetting<i32> = GucSetting::<i32>::new(2);

/// ms between the launcher's checks, and between an idle worker's looks at continuous jobs' queues.
static JOB_POLL_INTERVAL: GucSetting<i32> = GucSetting::<i32>::new(1000);

/// Attempts at one row before a job gives up on it (the row stays in tributary.job_errors).
static JOB_MAX_ATTEMPTS: GucSetting<i32> = GucSetting::<i32>::new(5);
static PREDICT_JOB_ROWS: GucSetting<i32> = GucSetting::<i32>::new(10_000);

pub fn init() {
    GucRegistry::define_int_guc(
        c"tributary.max_workers",
        c"Most background workers running tributary jobs at once, across all databases.",
        c"Each takes one of max_worker_processes; the launcher takes one more. 0 stops starting workers.",
        &MAX_WORKERS,
        0,
        MAX_SLOTS as i32,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"tributary.job_poll_interval",
        c"Milliseconds between the launcher's checks for work, and between an idle worker's looks at continuous jobs' queues.",
        c"",
        &JOB_POLL_INTERVAL,
        10,
        3_600_000,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"tributary.job_max_attempts",
        c"Attempts at embedding one row of a job before giving up on it.",
        c"A failed row is retried after 10 s, 20 s, 40 s, ... (at most 1 h); after this many attempts it stays in tributary.job_errors as gave_up.",
        &JOB_MAX_ATTEMPTS,
        1,
        1000,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"tributary.predict_job_rows",
        c"Rows one statement may change for a predict job to refresh only the predictions they reach.",
        c"A statement that changes more rows of a predict job's table queues a refresh of every row (sql/learn_jobs.sql).",
        &PREDICT_JOB_ROWS,
        0,
        10_000_000,
        GucContext::Sighup,
        GucFlags::default(),
    );
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
        c"ONNX Runtime execution provider: auto, cpu, cuda or tensorrt.",
        c"auto uses CUDA when it loads and otherwise the CPU, and logs which one runs; an explicit cuda or tensorrt that cannot load is an error.",
        &EXECUTION_PROVIDER,
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
    GucRegistry::define_enum_guc(
        c"tributary.truncation",
        c"A text longer than the model's window: truncate, warning (truncate and warn), or error (22001).",
        c"Jobs read the server's value. tributary_chunk() splits long texts into chunks that fit.",
        &TRUNCATION,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"tributary.max_cpu_runs",
        c"Most ONNX Runtime runs on the CPU at once, cluster-wide; 0 means one per CPU core, -1 no cap.",
        c"A run (one batch) holds a slot; other calls wait for one or fail with 53400 (tributary.cpu_overflow). Holders and waiters are listed in tributary.cpu_runs.",
        &MAX_CPU_RUNS,
        -1,
        1024,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"tributary.interactive_cpu_runs",
        c"CPU run slots beyond tributary.max_cpu_runs that only interactive runs may take.",
        c"So that a short query does not wait for bulk runs to end: it runs beside them and costs them only the CPU time it uses. 0 keeps none (interactive runs still take the next free slot first).",
        &INTERACTIVE_CPU_RUNS,
        0,
        1024,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_enum_guc(
        c"tributary.cpu_overflow",
        c"When every CPU run slot is taken: wait, or error (53400).",
        c"Set by a superuser (server, database or role level).",
        &CPU_OVERFLOW,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"tributary.shared_weights",
        c"CPU sessions map the model's prepared graph and weights from one file shared by all backends.",
        c"The graph is optimised, and its weights prepacked, once per machine into tributary.graph_cache_path. Off: each backend loads the model file and holds its own copy of the weights.",
        &SHARED_WEIGHTS,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"tributary.shrink_arena",
        c"Give ONNX Runtime's CPU memory arena back after the last run of each call.",
        c"Off: memory grown by one large call stays with the backend until it exits.",
        &SHRINK_ARENA,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"tributary.intra_op_spinning",
        c"Let ONNX Runtime's intra-op threads spin while they wait for work.",
        c"Spinning threads take the cores from other backends' runs; on (ONNX Runtime's own default) suits a server with one busy connection.",
        &INTRA_OP_SPINNING,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_string_guc(
        c"tributary.graph_cache_path",
        c"Directory of prepared CPU graphs (tributary.shared_weights).",
        c"Empty means tributary_graphs in the data directory.",
        &GRAPH_CACHE_PATH,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"tributary.session_idle_timeout",
        c"Drop a backend's model sessions after this long unused; 0 keeps them until the backend exits.",
        c"So that idle pooled connections stop holding models; the next call creates the session again.",
        &SESSION_IDLE_TIMEOUT,
        0,
        i32::MAX,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    limits::init();
    gpu::init();
    unsafe { pg_sys::MarkGUCPrefixReserved(c"tributary".as_ptr()) };
}

/// `tributary.max_cpu_runs` as a number of slots: `None` = no cap; 0 means the CPU cores this
/// server sees.
pub fn max_cpu_runs() -> Option<usize> {
    match MAX_CPU_RUNS.get() {
        v if v < 0 => None,
        0 => Some(std::thread::available_parallelism().map_or(1, |n| n.get())),
        v => Some(v as usize),
    }
}

/// `tributary.interactive_cpu_runs`: slots.
pub fn interactive_cpu_runs() -> usize {
    INTERACTIVE_CPU_RUNS.get().max(0) as usize
}

pub fn cpu_overflow() -> CpuOverflow {
    CPU_OVERFLOW.get()
}

/// Where prepared CPU graphs go: `None` when `tributary.shared_weights` is off; else the
/// setting (relative paths are in the data directory), or `$PGDATA/tributary_graphs`.
pub fn graph_cache_path() -> Option<PathBuf> {
    if !SHARED_WEIGHTS.get() {
        return None;
    }
    let p = PathBuf::from(string(&GRAPH_CACHE_PATH).unwrap_or_else(|| "tributary_graphs".into()));
    Some(if p.is_absolute() {
        p
    } else {
        data_dir().join(p)
    })
}

pub fn intra_op_spinning() -> bool {
    INTRA_OP_SPINNING.get()
}

pub fn shrink_arena() -> bool {
    SHRINK_ARENA.get()
}

/// `tributary.session_idle_timeout` in ms (0: never).
pub fn session_idle_timeout_ms() -> u64 {
    SESSION_IDLE_TIMEOUT.get().max(0) as u64
}

fn data_dir() -> PathBuf {
    // SAFETY: DataDir is set at backend start to the absolute data directory.
    let data = unsafe { std::ffi::CStr::from_ptr(pg_sys::DataDir) };
    PathBuf::from(data.to_string_lossy().into_owned())
}

fn string(setting: &GucSetting<Option<CString>>) -> Option<String> {
    setting
        .get()
        .map(|s| s.to_string_lossy().into_owned())
        .filter(|s| !s.is_empty())
}

pub fn model() -> Option<String> {
    string(&MODEL)
}

/// The ONNX Runtime library to load: the setting, else `$libdir/tributary/libonnxruntime.so`.
pub fn ort_library() -> PathBuf {
    string(&ORT_LIBRARY)
        .map(PathBuf::from)
        .unwrap_or_else(|| pkglib_dir().join("tributary/libonnxruntime.so"))
}

/// Base directory for relative model paths: the setting, else `$sharedir/tributary/models`.
pub fn model_path() -> PathBuf {
    string(&MODEL_PATH)
        .map(PathBuf::from)
        .unwrap_or_else(|| share_dir().join("tributary/models"))
}

pub fn execution_provider() -> ProviderChoice {
    match EXECUTION_PROVIDER.get() {
        ExecutionProvider::Auto => ProviderChoice::Auto,
        ExecutionProvider::Cpu => ProviderChoice::Cpu,
        ExecutionProvider::Cuda => ProviderChoice::Cuda,
        ExecutionProvider::TensorRt => ProviderChoice::TensorRt,
    }
}

/// `tributary.truncation`.
pub fn truncation() -> Truncation {
    TRUNCATION.get()
}

pub fn max_workers() -> usize {
    MAX_WORKERS.get() as usize
}

pub fn job_poll_interval_ms() -> u64 {
    JOB_POLL_INTERVAL.get() as u64
}

pub fn job_max_attempts() -> i32 {
    JOB_MAX_ATTEMPTS.get()
}

/// `tributary.predict_job_rows`: rows one statement may change for a predict job to refresh
/// only what they reach.
pub fn predict_job_rows() -> i32 {
    PREDICT_JOB_ROWS.get()
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
        pg_sys::get_share_path(
            std::ptr::addr_of!(pg_sys::my_exec_path).cast(),
            buf.as_mut_ptr(),
        );
        PathBuf::from(
            std::ffi::CStr::from_ptr(buf.as_ptr())
                .to_string_lossy()
                .into_owned(),
        )
    }
}
