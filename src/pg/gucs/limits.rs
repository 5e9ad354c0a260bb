//! The settings that size a backend's threads or memory (`max_batch_tokens`,
//! `intra_op_threads`, `max_texts_per_call`, `learn_threads`, `learn_memory`) and those that rank
//! a session's work (`priority`, `interactive_tokens`): anyone may lower them, only a superuser
//! may set them above their reset value (check hooks, [`no_raise`]; 42501 otherwise).

use std::ffi::{c_int, c_void, CStr, CString};

use pgrx::prelude::*;

/// Registers the settings of this file (from [`super::init`]).
pub(super) fn init() {
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
            c"tributary.gpu_max_batch_tokens".as_ptr(),
            c"Most padded tokens in one ONNX Runtime run of a GPU session.".as_ptr(),
            c"tributary.max_batch_tokens is the CPU's budget. A GPU's run has a fixed cost that large batches hide: on an H200 16384 gave 6% more rows/s than 2048 through tributary_embed_column. Only a superuser may raise it above its reset value.".as_ptr(),
            std::ptr::addr_of_mut!(GPU_MAX_BATCH_TOKENS),
            16384,
            256,
            1 << 22,
            pg_sys::GucContext::PGC_USERSET,
            0,
            Some(check_gpu_max_batch_tokens),
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

/// Padded tokens per ONNX Runtime run. On the 2-vCPU CPU machine, tributary_embed over 2,000
/// Debian descriptions ran at 97-103 rows/s with budgets of 512 to 2048 tokens and slowed past
/// that (90 at 4096, 85 at 16384, 75 at 32768; benches/embed_column.sh, BENCHMARKS.md): larger
/// batches only add padding and attention memory on a CPU. Raised only by a superuser.
static mut MAX_BATCH_TOKENS: c_int = 2048;

/// Padded tokens per ONNX Runtime run of a GPU session; raised only by a superuser.
static mut GPU_MAX_BATCH_TOKENS: c_int = 16384;

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

/// `tributary.max_batch_tokens` (tokens).
pub fn max_batch_tokens() -> usize {
    // SAFETY: plain read of a setting of this backend.
    unsafe { MAX_BATCH_TOKENS as usize }
}

/// `tributary.gpu_max_batch_tokens` (tokens): the budget of a GPU session's runs.
pub fn gpu_max_batch_tokens() -> usize {
    // SAFETY: plain read of a setting of this backend.
    unsafe { GPU_MAX_BATCH_TOKENS as usize }
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
unsafe extern "C-unwind" fn check_gpu_max_batch_tokens(
    newval: *mut c_int,
    _extra: *mut *mut c_void,
    source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: newval points at the proposed value.
    no_raise(
        c"tributary.gpu_max_batch_tokens",
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
