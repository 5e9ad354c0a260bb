//! Settings, all under `tributary.*`. Settings that name a file (and so load code or data into
//! the server) are superuser-only (`PGC_SUSET`). Settings that size a backend's threads or
//! memory (`intra_op_threads`, `max_batch_tokens`, `max_texts_per_call`), and those that rank a
//! session's work (`priority`, `interactive_tokens`), are user-settable downwards only: a role
//! that is not a superuser may set them at most to their reset value (the server
//! configuration's, or what a superuser set with ALTER ROLE / ALTER DATABASE); above that a SET
//! fails with 42501 ([`no_raise`]).

use std::ffi::{c_int, c_void, CStr, CString};
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
    #[name = c"tensorrt"]
    TensorRt,
}

/// `tributary.gpu_overflow`: what a backend does when every GPU slot is taken.
#[derive(PostgresGucEnum, Clone, Copy, PartialEq, Eq, Debug)]
pub enum GpuOverflow {
    /// Run this backend's session on the CPU provider (the stats say so).
    #[name = c"cpu"]
    Cpu,
    /// Wait for a slot (interruptible; lock_timeout and statement_timeout apply).
    #[name = c"wait"]
    Wait,
    /// Raise 53400 configuration_limit_exceeded.
    #[name = c"error"]
    Error,
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

/// `tributary.priority`: the queue a call's CPU runs wait in when every run slot is taken
/// (src/pg/admission.rs). Ordered: a role that is not a superuser may set it at most to its
/// reset value (`auto` unless a superuser set otherwise), so it can lower its own work, never
/// raise it.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub enum Priority {
    /// Runs after interactive and bulk work; what jobs' background workers run at under `auto`.
    Background = 0,
    /// Waits behind interactive work.
    Bulk = 1,
    /// Interactive for a call of at most `tributary.interactive_tokens` estimated tokens, bulk
    /// for a bigger one, background in a job's worker.
    Auto = 2,
    /// Every call first, and may use the run slots kept for interactive work
    /// (`tributary.interactive_cpu_runs`).
    Interactive = 3,
}

impl Priority {
    const ALL: [Priority; 4] = [
        Priority::Background,
        Priority::Bulk,
        Priority::Auto,
        Priority::Interactive,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Priority::Background => "background",
            Priority::Bulk => "bulk",
            Priority::Auto => "auto",
            Priority::Interactive => "interactive",
        }
    }

    fn from_name(name: &str) -> Option<Priority> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }
}

/// `tributary.priority` as the enum's value (see [`Priority`]).
static mut PRIORITY: c_int = Priority::Auto as c_int;
/// Estimated tokens (bytes / 4 + 2 per text) up to which an `auto` call is interactive.
static mut INTERACTIVE_TOKENS: c_int = 256;
/// CPU run slots beyond `tributary.max_cpu_runs` that only interactive runs may take.
static INTERACTIVE_CPU_RUNS: GucSetting<i32> = GucSetting::<i32>::new(1);

/// The choices of `tributary.priority`, NULL-terminated, as `DefineCustomEnumVariable` wants.
struct EnumOptions([pg_sys::config_enum_entry; 5]);
// SAFETY: pointers to static C strings only, never written.
unsafe impl Sync for EnumOptions {}
static PRIORITY_OPTIONS: EnumOptions = EnumOptions([
    pg_sys::config_enum_entry {
        name: c"background".as_ptr(),
        val: Priority::Background as c_int,
        hidden: false,
    },
    pg_sys::config_enum_entry {
        name: c"bulk".as_ptr(),
        val: Priority::Bulk as c_int,
        hidden: false,
    },
    pg_sys::config_enum_entry {
        name: c"auto".as_ptr(),
        val: Priority::Auto as c_int,
        hidden: false,
    },
    pg_sys::config_enum_entry {
        name: c"interactive".as_ptr(),
        val: Priority::Interactive as c_int,
        hidden: false,
    },
    pg_sys::config_enum_entry {
        name: std::ptr::null(),
        val: 0,
        hidden: false,
    },
]);

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
/// Padded tokens per ONNX Runtime run. On the 2-vCPU CPU machine, tributary_embed over 2,000
/// Debian descriptions ran at 97-103 rows/s with budgets of 512 to 2048 tokens and slowed past
/// that (90 at 4096, 85 at 16384, 75 at 32768; benches/embed_column.sh, BENCHMARKS.md): larger
/// batches only add padding and attention memory on a CPU. Raised only by a superuser.
static mut MAX_BATCH_TOKENS: c_int = 2048;
/// 0 lets ONNX Runtime use one thread per physical core. Raised only by a superuser.
static mut INTRA_OP_THREADS: c_int = 0;
/// Threads one `tributary_train` / prediction call may use (the calling backend's thread
/// included; the others never call into PostgreSQL). Anyone lower, a superuser higher.
static mut LEARN_THREADS: c_int = 2;
/// Memory one `tributary_train` / prediction call may hold for its data and model, in kB
/// (shown and set in MB, GB, ...); past it the call fails with 54000 before allocating.
/// Anyone lower, a superuser higher.
static mut LEARN_MEMORY: c_int = 1024 * 1024;
/// Texts one call may embed (`tributary_embed(text[])`, a job's or a column's batch). The
/// output alone is `texts x dimension x 4` bytes (1.5 kB per text at 384 dimensions), and a
/// `vector[]` result cannot exceed 1 GB anyway (about 690,000 vectors of 384 dimensions).
/// Raised only by a superuser.
static mut MAX_TEXTS_PER_CALL: c_int = 100_000;
/// CUDA device ordinal used when the CUDA execution provider runs.
static GPU_DEVICE: GucSetting<i32> = GucSetting::<i32>::new(0);
/// How often long work reports progress as a NOTICE, in ms; 0 turns it off.
static PROGRESS_INTERVAL: GucSetting<i32> = GucSetting::<i32>::new(10_000);
/// CUDA memory arena limit per session, MiB; 0 = no limit.
static GPU_MEMORY_LIMIT: GucSetting<i32> = GucSetting::<i32>::new(0);
/// Empty means `$PGDATA/tributary_tensorrt`.
static TENSORRT_CACHE_PATH: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
/// Colon-separated directories whose CUDA/cuDNN libraries are loaded before the CUDA provider.
static CUDA_LIBRARY_PATH: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
static IO_BINDING: GucSetting<bool> = GucSetting::<bool>::new(true);
static GPU_FP16: GucSetting<bool> = GucSetting::<bool>::new(true);
/// Backends that may hold a GPU session at once, cluster-wide; -1 = no cap.
static MAX_GPU_SESSIONS: GucSetting<i32> = GucSetting::<i32>::new(4);
static GPU_OVERFLOW: GucSetting<GpuOverflow> = GucSetting::<GpuOverflow>::new(GpuOverflow::Cpu);

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
    // SAFETY: the statics live for the process; PostgreSQL writes them only through the GUC
    // machinery, on this backend's one thread.
    unsafe {
        pg_sys::DefineCustomIntVariable(
            c"tributary.max_batch_tokens".as_ptr(),
            c"Most padded tokens in one ONNX Runtime run.".as_ptr(),
            c"Inputs are sorted by length and cut into batches of at most this many tokens (rows times the longest row). Only a superuser may raise it above its reset value.".as_ptr(),
            std::ptr::addr_of_mut!(MAX_BATCH_TOKENS),
            2048,
            256,
            1 << 22,
            pg_sys::GucContext::PGC_USERSET,
            0,
            Some(check_max_batch_tokens),
            None,
            None,
        );
        pg_sys::DefineCustomIntVariable(
            c"tributary.intra_op_threads".as_ptr(),
            c"ONNX Runtime intra-op threads per session; 0 means one per physical core.".as_ptr(),
            c"Only a superuser may raise it above its reset value.".as_ptr(),
            std::ptr::addr_of_mut!(INTRA_OP_THREADS),
            0,
            0,
            1024,
            pg_sys::GucContext::PGC_USERSET,
            0,
            Some(check_intra_op_threads),
            None,
            None,
        );
        pg_sys::DefineCustomIntVariable(
            c"tributary.learn_threads".as_ptr(),
            c"Threads one tributary_train or prediction call may use.".as_ptr(),
            c"Only the calling backend's own thread calls into PostgreSQL. Only a superuser may raise it above its reset value.".as_ptr(),
            std::ptr::addr_of_mut!(LEARN_THREADS),
            2,
            1,
            64,
            pg_sys::GucContext::PGC_USERSET,
            0,
            Some(check_learn_threads),
            None,
            None,
        );
        pg_sys::DefineCustomIntVariable(
            c"tributary.learn_memory".as_ptr(),
            c"Memory one tributary_train or prediction call may hold for its rows, features and model.".as_ptr(),
            c"Past it the call fails (54000) before it allocates more. Only a superuser may raise it above its reset value.".as_ptr(),
            std::ptr::addr_of_mut!(LEARN_MEMORY),
            1024 * 1024,
            64 * 1024,
            i32::MAX,
            pg_sys::GucContext::PGC_USERSET,
            pg_sys::GUC_UNIT_KB as c_int,
            Some(check_learn_memory),
            None,
            None,
        );
        pg_sys::DefineCustomEnumVariable(
            c"tributary.priority".as_ptr(),
            c"Priority of this session's model runs on the CPU: interactive, auto, bulk or background.".as_ptr(),
            c"When every CPU run slot is taken, interactive runs get the next free slot before bulk runs, and bulk before background. auto: interactive for a call of at most tributary.interactive_tokens estimated tokens, else bulk (background in a job's worker). Only a superuser may raise it above its reset value.".as_ptr(),
            std::ptr::addr_of_mut!(PRIORITY),
            Priority::Auto as c_int,
            PRIORITY_OPTIONS.0.as_ptr(),
            pg_sys::GucContext::PGC_USERSET,
            0,
            Some(check_priority),
            None,
            None,
        );
        pg_sys::DefineCustomIntVariable(
            c"tributary.interactive_tokens".as_ptr(),
            c"Most estimated tokens of a call that tributary.priority = auto runs as interactive.".as_ptr(),
            c"Estimated as the text's bytes / 4 (at most the model's window) plus 2 per text. Only a superuser may raise it above its reset value.".as_ptr(),
            std::ptr::addr_of_mut!(INTERACTIVE_TOKENS),
            256,
            0,
            1 << 22,
            pg_sys::GucContext::PGC_USERSET,
            0,
            Some(check_interactive_tokens),
            None,
            None,
        );
        pg_sys::DefineCustomIntVariable(
            c"tributary.max_texts_per_call".as_ptr(),
            c"Most texts one call embeds; more is an error (54000).".as_ptr(),
            c"Bounds the memory of one call (its output alone is texts x dimension x 4 bytes). Only a superuser may raise it above its reset value.".as_ptr(),
            std::ptr::addr_of_mut!(MAX_TEXTS_PER_CALL),
            100_000,
            1,
            i32::MAX,
            pg_sys::GucContext::PGC_USERSET,
            0,
            Some(check_max_texts_per_call),
            None,
            None,
        );
    }
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
    GucRegistry::define_int_guc(
        c"tributary.gpu_memory_limit",
        c"CUDA memory arena limit of one session, in MB; 0 means no limit.",
        c"The CUDA execution provider's gpu_mem_limit. The CUDA context and cuDNN/cuBLAS workspaces come on top.",
        &GPU_MEMORY_LIMIT,
        0,
        i32::MAX,
        GucContext::Suset,
        GucFlags::UNIT_MB,
    );
    GucRegistry::define_string_guc(
        c"tributary.tensorrt_cache_path",
        c"Directory for TensorRT's engine and timing caches.",
        c"Empty means tributary_tensorrt in the data directory. Building an engine takes minutes; the cache makes later sessions start fast.",
        &TENSORRT_CACHE_PATH,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_string_guc(
        c"tributary.cuda_library_path",
        c"Colon-separated directories of the CUDA and cuDNN libraries the CUDA execution provider needs.",
        c"Their libraries are loaded once per backend before the CUDA provider. Empty leaves it to the system's library path. scripts/setup.sh with TRIBUTARY_GPU=1 finds them.",
        &CUDA_LIBRARY_PATH,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"tributary.io_binding",
        c"Run models through an ONNX Runtime IoBinding with reused (on a GPU: pinned) buffers.",
        c"If binding fails, sessions fall back to plain runs and tributary_sessions() says why.",
        &IO_BINDING,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"tributary.gpu_fp16",
        c"On a GPU, run a model's fp16 graph when its directory has one.",
        c"The fp16 graph returns f16 embeddings, written to halfvec columns without conversion.",
        &GPU_FP16,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"tributary.max_gpu_sessions",
        c"Most backends that may hold a GPU session at once, cluster-wide; -1 means no cap.",
        c"Each costs a CUDA context and a copy of the model in GPU memory. A backend keeps its slot until it exits. See tributary.gpu_overflow.",
        &MAX_GPU_SESSIONS,
        -1,
        1024,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_enum_guc(
        c"tributary.gpu_overflow",
        c"When every GPU slot is taken: cpu (run on the CPU), wait, or error.",
        c"",
        &GPU_OVERFLOW,
        GucContext::Userset,
        GucFlags::default(),
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

/// `tributary.priority` as set (see [`Priority`]).
pub fn priority() -> Priority {
    // SAFETY: plain read of a setting of this backend.
    let v = unsafe { PRIORITY };
    Priority::ALL
        .into_iter()
        .find(|p| *p as c_int == v)
        .unwrap_or(Priority::Auto)
}

/// `tributary.interactive_tokens`: estimated tokens.
pub fn interactive_tokens() -> usize {
    // SAFETY: plain read of a setting of this backend.
    unsafe { INTERACTIVE_TOKENS.max(0) as usize }
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

/// CUDA arena limit per session in MiB (0 = none).
pub fn gpu_memory_limit_mb() -> usize {
    GPU_MEMORY_LIMIT.get() as usize
}

/// TensorRT cache directory: the setting (relative paths are in the data directory), else
/// `$PGDATA/tributary_tensorrt`.
pub fn tensorrt_cache_path() -> PathBuf {
    let p =
        PathBuf::from(string(&TENSORRT_CACHE_PATH).unwrap_or_else(|| "tributary_tensorrt".into()));
    if p.is_absolute() {
        p
    } else {
        data_dir().join(p)
    }
}

/// Directories to load CUDA/cuDNN libraries from before the CUDA provider (may be empty).
pub fn cuda_library_path() -> Vec<PathBuf> {
    string(&CUDA_LIBRARY_PATH)
        .map(|s| {
            s.split(':')
                .filter(|d| !d.is_empty())
                .map(PathBuf::from)
                .collect()
        })
        .unwrap_or_default()
}

pub fn io_binding() -> bool {
    IO_BINDING.get()
}

pub fn gpu_fp16() -> bool {
    GPU_FP16.get()
}

/// `None` = no cap.
pub fn max_gpu_sessions() -> Option<usize> {
    let v = MAX_GPU_SESSIONS.get();
    (v >= 0).then_some(v as usize)
}

/// `tributary.truncation`.
pub fn truncation() -> Truncation {
    TRUNCATION.get()
}

pub fn gpu_overflow() -> GpuOverflow {
    GPU_OVERFLOW.get()
}

/// `tributary.max_batch_tokens` (tokens).
pub fn max_batch_tokens() -> usize {
    // SAFETY: plain read of a setting of this backend.
    unsafe { MAX_BATCH_TOKENS as usize }
}

/// `tributary.intra_op_threads` (0: one per physical core).
pub fn intra_op_threads() -> usize {
    // SAFETY: as above.
    unsafe { INTRA_OP_THREADS as usize }
}

/// `tributary.max_texts_per_call` (texts).
pub fn max_texts_per_call() -> usize {
    // SAFETY: as above.
    unsafe { MAX_TEXTS_PER_CALL as usize }
}

/// Threads a value of `tributary.intra_op_threads` means (0: every core).
fn effective_threads(v: i64) -> i64 {
    if v == 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get() as i64)
    } else {
        v
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn check_max_batch_tokens(
    newval: *mut c_int,
    _extra: *mut *mut c_void,
    source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: newval points at the proposed value.
    no_raise(
        c"tributary.max_batch_tokens",
        unsafe { *newval } as i64,
        source,
        |v| v,
    )
}

#[pg_guard]
unsafe extern "C-unwind" fn check_intra_op_threads(
    newval: *mut c_int,
    _extra: *mut *mut c_void,
    source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: as above.
    no_raise(
        c"tributary.intra_op_threads",
        unsafe { *newval } as i64,
        source,
        effective_threads,
    )
}

#[pg_guard]
unsafe extern "C-unwind" fn check_learn_threads(
    newval: *mut c_int,
    _extra: *mut *mut c_void,
    source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: as above.
    no_raise(
        c"tributary.learn_threads",
        unsafe { *newval } as i64,
        source,
        |v| v,
    )
}

#[pg_guard]
unsafe extern "C-unwind" fn check_learn_memory(
    newval: *mut c_int,
    _extra: *mut *mut c_void,
    source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: as above.
    no_raise(
        c"tributary.learn_memory",
        unsafe { *newval } as i64,
        source,
        |v| v,
    )
}

#[pg_guard]
unsafe extern "C-unwind" fn check_max_texts_per_call(
    newval: *mut c_int,
    _extra: *mut *mut c_void,
    source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: as above.
    no_raise(
        c"tributary.max_texts_per_call",
        unsafe { *newval } as i64,
        source,
        |v| v,
    )
}

unsafe extern "C-unwind" fn check_priority(
    newval: *mut c_int,
    _extra: *mut *mut c_void,
    source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: newval points at the proposed value.
    no_raise_with(
        c"tributary.priority",
        unsafe { *newval } as i64,
        source,
        |v| v,
        |s| Priority::from_name(s).map(|p| p as i64),
        c"Only a superuser may give a role's work a higher priority than its reset value.",
    )
}

unsafe extern "C-unwind" fn check_interactive_tokens(
    newval: *mut c_int,
    _extra: *mut *mut c_void,
    source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: newval points at the proposed value.
    no_raise_with(
        c"tributary.interactive_tokens",
        unsafe { *newval } as i64,
        source,
        |v| v,
        |s| s.parse::<i64>().ok(),
        c"Raising it lets bigger calls run as interactive work; only a superuser may raise it above its reset value.",
    )
}

/// Check hook of the resource settings: values from the server configuration, ALTER DATABASE
/// and ALTER ROLE (checked when those were set, with source PGC_S_TEST) pass; a value from a
/// client or a SET passes when it is at most the reset value (as `measure` compares them) or
/// the current role is a superuser. Otherwise the SET fails with 42501.
fn no_raise(
    name: &'static CStr,
    value: i64,
    source: pg_sys::GucSource::Type,
    measure: fn(i64) -> i64,
) -> bool {
    no_raise_with(
        name,
        value,
        source,
        measure,
        |s| s.parse::<i64>().ok(),
        c"This setting sizes the threads or memory of a backend; only a superuser may raise it above its reset value.",
    )
}

/// [`no_raise`] for any setting: `parse` reads the reset value's text as the number that
/// `measure` compares, `detail` says why raising is restricted.
fn no_raise_with(
    name: &'static CStr,
    value: i64,
    source: pg_sys::GucSource::Type,
    measure: fn(i64) -> i64,
    parse: fn(&str) -> Option<i64>,
    detail: &'static CStr,
) -> bool {
    if source <= pg_sys::GucSource::PGC_S_DATABASE_USER {
        return true;
    }
    // SAFETY: GetConfigOptionResetString returns the variable's reset value (it exists: this
    // hook is its own); superuser() reads the catalog, so only inside a transaction.
    let (reset, is_superuser) = unsafe {
        let r = pg_sys::GetConfigOptionResetString(name.as_ptr());
        let reset = if r.is_null() {
            None
        } else {
            CStr::from_ptr(r).to_str().ok().and_then(parse)
        };
        (reset, pg_sys::IsTransactionState() && pg_sys::superuser())
    };
    let Some(reset) = reset else { return true };
    if is_superuser || measure(value) <= measure(reset) {
        return true;
    }
    // SAFETY: the GUC_check_* strings are palloc'd here and read by the caller's ereport.
    unsafe {
        pg_sys::GUC_check_errcode(PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE as i32);
        let shown = CStr::from_ptr(pg_sys::GetConfigOptionResetString(name.as_ptr()))
            .to_string_lossy()
            .into_owned();
        let msg = CString::new(format!(
            "permission denied to raise \"{}\" above {shown}",
            name.to_string_lossy()
        ))
        .unwrap_or_default();
        pg_sys::GUC_check_errmsg_string = pg_sys::pstrdup(msg.as_ptr());
        pg_sys::GUC_check_errdetail_string = pg_sys::pstrdup(detail.as_ptr());
        pg_sys::GUC_check_errhint_string =
            pg_sys::pstrdup(c"Lower values are allowed. A superuser can raise it in postgresql.conf, or per role with ALTER ROLE ... SET.".as_ptr());
    }
    false
}

pub fn gpu_device() -> i32 {
    GPU_DEVICE.get()
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

/// `tributary.learn_threads`.
pub fn learn_threads() -> usize {
    // SAFETY: plain read of a setting of this backend.
    unsafe { LEARN_THREADS.max(1) as usize }
}

/// `tributary.learn_memory`, in bytes.
pub fn learn_memory_bytes() -> usize {
    // SAFETY: as above.
    unsafe { LEARN_MEMORY.max(0) as usize * 1024 }
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
