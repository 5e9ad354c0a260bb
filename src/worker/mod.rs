//! Background workers for jobs (`tributary_job_create`, sql/jobs.sql).
//!
//! - The **launcher** (one, registered by `_PG_init` when tributary is in
//!   `shared_preload_libraries`) connects to no database. At start it asks for one worker in every
//!   database that accepts connections (each finds out whether it has jobs, which after a crash or
//!   restart is how unfinished jobs resume); afterwards it starts workers where databases ask for
//!   them, up to `tributary.max_workers` in all, and logs (does not fail) when
//!   `max_worker_processes` has no free slot.
//! - A **worker** serves one database, which it gets by name (`bgw_extra`). It picks a job that
//!   has rows queued and fewer workers than the job's `workers`, and runs batches of it until
//!   the queue is empty: each batch is one transaction that claims keys from the queue, reads the
//!   rows' text and writes their vectors as the job's owner, and adds them to the job's progress.
//!   A batch that fails is split in halves and retried until the failing rows are alone; those go
//!   to `tributary.job_errors` and are retried with back-off; the job goes on. One worker per
//!   database stays while continuous jobs may get new rows (polling every
//!   `tributary.job_poll_interval`); the others exit when there is nothing left.
//!
//! Signals: SIGTERM (shutdown, `pg_terminate_backend`) ends the worker at the next interrupt
//! check, that is between two ONNX Runtime runs, aborting the batch; SIGINT
//! (`pg_cancel_backend`) aborts the batch and the worker exits; the launcher starts another if
//! the work is still there. A batch never commits half: its claim, vectors and progress go
//! together or not at all.

use std::cell::RefCell;
use std::ffi::CString;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use pgrx::bgworkers::{BackgroundWorker, BackgroundWorkerBuilder, BackgroundWorkerStatus, BgWorkerStartTime, DynamicBackgroundWorker, SignalWakeFlags};
use pgrx::pg_sys::panic::CaughtError;
use pgrx::prelude::*;
use pgrx::{pg_shmem_init, PGRXSharedMemory, PgLwLock, PgSqlErrorCode};
use serde_json::Value;

use crate::api::rows::RowOptions;
use crate::pg::catalog;
use crate::pg::error::{spi_error, OrRaise};
use crate::pg::gucs;
use crate::pg::vector::{HalfVec, Vector};

/// Most job workers at once (the upper bound of `tributary.max_workers`), and most databases
/// asking for workers at once.
pub const MAX_SLOTS: usize = 32;

const NAME_LEN: usize = 64;

#[derive(Copy, Clone)]
struct DbWant {
    db: u32,
    name: [u8; NAME_LEN],
    /// Workers this database asks for (0: none).
    wanted: u32,
}

impl Default for DbWant {
    fn default() -> Self {
        DbWant { db: 0, name: [0; NAME_LEN], wanted: 0 }
    }
}

/// A running worker.
#[derive(Copy, Clone, Default)]
struct Slot {
    pid: i32,
    db: u32,
    /// The job it is running (0: none).
    job: i64,
    /// The owner of that job (0: none), for [`workers`]' visibility.
    owner: u32,
}

/// Shared state of the launcher and the workers (shared memory, one LWLock).
#[derive(Copy, Clone, Default)]
pub struct Registry {
    launcher_latch: usize,
    dbs: [DbWant; MAX_SLOTS],
    slots: [Slot; MAX_SLOTS],
}

// SAFETY: plain old data (no pointers into process-local memory; the latch lives in the
// launcher's PGPROC, which is in shared memory).
unsafe impl PGRXSharedMemory for Registry {}

static REGISTRY: PgLwLock<Registry> = unsafe { PgLwLock::new(c"tributary_jobs") };

/// tributary was loaded by `shared_preload_libraries` (so shared memory and the launcher exist).
static PRELOADED: AtomicBool = AtomicBool::new(false);

/// From `_PG_init`: shared memory and the launcher, when loaded by `shared_preload_libraries`.
pub fn init() {
    // SAFETY: read-only global of the postmaster, set while it loads preload libraries.
    if !unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        return;
    }
    pg_shmem_init!(REGISTRY);
    PRELOADED.store(true, Ordering::Relaxed);
    BackgroundWorkerBuilder::new("tributary launcher")
        .set_type("tributary launcher")
        .set_library("tributary")
        .set_function("tributary_launcher_main")
        .enable_spi_access()
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(Some(Duration::from_secs(5)))
        .load();
}

/// Records how many workers database `db` asks for (`at_least`: never lowers it). False when
/// all MAX_SLOTS entries are taken by other databases (the caller tries again later).
fn set_wanted(db: u32, name: &str, wanted: u32, at_least: bool) -> bool {
    let mut r = REGISTRY.exclusive();
    let idx = r.dbs.iter().position(|d| d.db == db).or_else(|| r.dbs.iter().position(|d| d.db == 0));
    let Some(i) = idx else {
        return wanted == 0;
    };
    let e = &mut r.dbs[i];
    if e.db != db {
        e.db = db;
        e.name = [0; NAME_LEN];
        let n = name.len().min(NAME_LEN - 1);
        e.name[..n].copy_from_slice(&name.as_bytes()[..n]);
        e.wanted = 0;
    }
    e.wanted = if at_least { e.wanted.max(wanted) } else { wanted };
    if e.wanted == 0 {
        e.db = 0;
    }
    true
}

fn wake_launcher_now() {
    let latch = REGISTRY.share().launcher_latch;
    if latch != 0 {
        // SAFETY: the launcher's latch is in its PGPROC, in shared memory; setting a latch of
        // a process that has exited is harmless.
        unsafe { pg_sys::SetLatch(latch as *mut pg_sys::Latch) };
    }
}

thread_local! {
    /// This database's name, read in the transaction: nothing may fail after the commit.
    static WAKE_AT_COMMIT: RefCell<Option<String>> = const { RefCell::new(None) };
    static CALLBACK_REGISTERED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

#[pg_guard]
unsafe extern "C-unwind" fn at_xact_end(event: pg_sys::XactEvent::Type, _arg: *mut std::ffi::c_void) {
    match event {
        pg_sys::XactEvent::XACT_EVENT_COMMIT => {
            if let Some(name) = WAKE_AT_COMMIT.take() {
                // SAFETY: plain read of a process global.
                let db = unsafe { pg_sys::MyDatabaseId };
                if !set_wanted(db.to_u32(), &name, 1, true) {
                    pgrx::log!("tributary: more than {MAX_SLOTS} databases ask for job workers; database \"{name}\" waits for the next job call or restart");
                }
                wake_launcher_now();
            }
        }
        pg_sys::XactEvent::XACT_EVENT_ABORT | pg_sys::XactEvent::XACT_EVENT_PARALLEL_ABORT => {
            WAKE_AT_COMMIT.take();
        }
        _ => {}
    }
}

fn database_name(db: pg_sys::Oid) -> String {
    // SAFETY: get_database_name reads the syscache (we are in a transaction or just committed
    // one with the catalog still attached) and returns a palloc'd string or NULL.
    unsafe {
        let p = pg_sys::get_database_name(db);
        if p.is_null() {
            String::new()
        } else {
            std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    }
}

/// `tributary._wake_launcher() → boolean`: asks the launcher for a worker in this database when
/// the current transaction commits (so the worker sees the job). False, with a WARNING, when
/// tributary is not in `shared_preload_libraries` (jobs then wait until it is).
#[pg_extern(volatile, parallel_unsafe)]
fn _wake_launcher() -> bool {
    if !PRELOADED.load(Ordering::Relaxed) {
        pgrx::pg_sys::panic::ErrorReport::new(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "tributary is not in shared_preload_libraries: jobs wait until it is",
            "tributary",
        )
        .set_hint("Add tributary to shared_preload_libraries in postgresql.conf and restart PostgreSQL; the job starts then.")
        .report(PgLogLevel::WARNING);
        return false;
    }
    if !CALLBACK_REGISTERED.replace(true) {
        // SAFETY: registers a process-lifetime callback with a static function.
        unsafe { pg_sys::RegisterXactCallback(Some(at_xact_end), std::ptr::null_mut()) };
    }
    // SAFETY: plain read of a process global.
    WAKE_AT_COMMIT.set(Some(database_name(unsafe { pg_sys::MyDatabaseId })));
    true
}

/// `tributary._job_call(op text, args jsonb) → bigint`: the one way into the job functions
/// of sql/jobs.sql (`tributary._job_<op>(caller oid, args jsonb)`, op one of create, pause,
/// resume, cancel, drop), called by the public SECURITY INVOKER wrappers `tributary_job_*`.
///
/// The caller is `GetUserId()`, the role the wrapper runs as: inside another role's SECURITY
/// DEFINER function that is the function's owner, as for PostgreSQL's own privilege checks (the
/// session's outer role would let any definer function act on its caller's jobs). The job
/// function then runs as the extension's owner, for tributary's bookkeeping only; whatever
/// touches the owner's tables or values it hands to [`_run_as`].
///
/// Errors: 22023 unknown op; 42501 inside a security-restricted operation (an index expression
/// or maintenance command running another role's code); the job function's own errors.
#[pg_extern(volatile, parallel_unsafe)]
fn _job_call(op: &str, args: pgrx::JsonB) -> Option<i64> {
    let func = match op {
        "create" => "_job_create",
        "pause" => "_job_pause",
        "resume" => "_job_resume",
        "cancel" => "_job_cancel",
        "drop" => "_job_drop",
        _ => crate::pg::error::raise(crate::pg::error::TributaryError::InvalidArgument {
            message: format!("unknown job operation \"{op}\""),
            hint: Some("Call tributary_job_create, _pause, _resume, _cancel or _drop.".into()),
        }),
    };
    // SAFETY: plain reads of the session's user state.
    let caller = unsafe {
        if pg_sys::InSecurityRestrictedOperation() {
            pgrx::pg_sys::panic::ErrorReport::new(
                PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
                "tributary jobs cannot be managed within a security-restricted operation",
                "tributary",
            )
            .report(PgLogLevel::ERROR);
        }
        pg_sys::GetUserId()
    };
    as_role(extension_owner(), || {
        Spi::get_one_with_args::<i64>(&format!("SELECT tributary.{func}($1, $2)"), &[caller.into(), args.into()])
            .map_err(spi_error)
            .or_raise()
    })
}

/// The role that owns the tributary extension (a superuser: the extension is not trusted).
fn extension_owner() -> pg_sys::Oid {
    Spi::get_one::<pg_sys::Oid>("SELECT extowner FROM pg_catalog.pg_extension WHERE extname = 'tributary'")
        .map_err(spi_error)
        .or_raise()
        .unwrap_or(pg_sys::Oid::from(pg_sys::BOOTSTRAP_SUPERUSERID))
}

/// Runs `f` as `role` for tributary's own bookkeeping (its tables, its statements, nothing of a
/// user's): a local user-id change, as a SECURITY DEFINER function makes. An error inside aborts
/// the (sub)transaction, which restores the user.
fn as_role<R>(role: pg_sys::Oid, f: impl FnOnce() -> R) -> R {
    let mut old = pg_sys::InvalidOid;
    let mut ctx = 0;
    // SAFETY: save, switch, restore, as fmgr_security_definer does.
    unsafe {
        pg_sys::GetUserIdAndSecContext(&mut old, &mut ctx);
        pg_sys::SetUserIdAndSecContext(role, ctx | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32);
    }
    let r = f();
    // SAFETY: as above.
    unsafe { pg_sys::SetUserIdAndSecContext(old, ctx) };
    r
}

/// `tributary._run_as(role oid, sql text, arg jsonb DEFAULT NULL)`: runs `sql` (no result; `arg`
/// as `$1` when given) as `role`, as [`as_user`] does: security-restricted, with the default
/// search_path. Used by the job functions (as the extension's owner) for every statement over a
/// job owner's tables and key values. Not granted to PUBLIC.
#[pg_extern(volatile, parallel_unsafe)]
fn _run_as(role: pg_sys::Oid, sql: &str, arg: default!(Option<pgrx::JsonB>, "NULL")) {
    as_user(role, || match arg {
        Some(a) => Spi::run_with_args(sql, &[a.into()]),
        None => Spi::run(sql),
    }
    .map_err(spi_error)
    .or_raise());
}

pgrx::extension_sql!(
    r#"
-- The statement-level trigger of continuous jobs (src/worker/mod.rs, tributary_job_trigger).
CREATE FUNCTION _job_trigger() RETURNS trigger LANGUAGE c AS 'MODULE_PATHNAME', 'tributary_job_trigger';
"#,
    name = "job_trigger",
    requires = ["bootstrap"]
);

#[doc(hidden)]
#[unsafe(no_mangle)]
pub extern "C" fn pg_finfo_tributary_job_trigger() -> &'static pg_sys::Pg_finfo_record {
    static V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1
}

/// `tributary._job_trigger(job id)`: the AFTER ... FOR EACH STATEMENT trigger of a continuous
/// job (INSERT, UPDATE, DELETE, TRUNCATE on the source). Reads the job's statement for the
/// event (`tributary._jobs.enqueue_sql`) as the extension's owner and runs it as the job's owner
/// ([`as_user`]) over the transition tables `new_rows`/`old_rows`: whoever writes the source
/// needs no right on the queue, and the owner's types and casts run with the owner's rights only.
/// A job that is gone or cancelled does nothing.
///
/// Errors: 39P01 when not called as a trigger or without the job id argument.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn tributary_job_trigger(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    let protocol = |msg: &'static str| -> ! {
        pgrx::pg_sys::panic::ErrorReport::new(PgSqlErrorCode::ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED, msg, "tributary_job_trigger")
            .report(PgLogLevel::ERROR);
        unreachable!()
    };
    // SAFETY: fcinfo is the call's; its context is a TriggerData when the trigger manager calls.
    let td = unsafe {
        let context = (*fcinfo).context;
        if context.is_null() || (*context).type_ != pg_sys::NodeTag::T_TriggerData {
            protocol("tributary._job_trigger() must be called as a trigger");
        }
        context.cast::<pg_sys::TriggerData>()
    };
    // SAFETY: tg_trigger and its tgargs (tgnargs C strings) belong to the trigger manager.
    let (job, event) = unsafe {
        let trigger = (*td).tg_trigger;
        if (*trigger).tgnargs < 1 {
            protocol("tributary._job_trigger() needs the job id as its argument");
        }
        let arg = std::ffi::CStr::from_ptr(*(*trigger).tgargs).to_string_lossy().into_owned();
        let Ok(job) = arg.parse::<i64>() else { protocol("tributary._job_trigger(): the argument must be a job id") };
        (job, (*td).tg_event & pg_sys::TRIGGER_EVENT_OPMASK)
    };
    let op = match event {
        pg_sys::TRIGGER_EVENT_INSERT => "INSERT",
        pg_sys::TRIGGER_EVENT_UPDATE => "UPDATE",
        pg_sys::TRIGGER_EVENT_DELETE => "DELETE",
        _ => "TRUNCATE",
    };
    let found = as_role(extension_owner(), || {
        Spi::connect(|c| {
            let mut rows = c.select(
                "SELECT owner::oid, enqueue_sql ->> $2 FROM tributary._jobs WHERE id = $1 AND state <> 'cancelled'",
                None,
                &[job.into(), op.into()],
            )?;
            match rows.next() {
                Some(r) => Ok::<_, pgrx::spi::Error>(Some((r.get::<pg_sys::Oid>(1)?, r.get::<String>(2)?))),
                None => Ok(None),
            }
        })
        .map_err(spi_error)
        .or_raise()
    });
    if let Some((Some(owner), Some(sql))) = found {
        as_user(owner, || {
            Spi::connect_mut(|c| {
                // SAFETY: td is this call's TriggerData; registering its transition tables on the
                // current SPI connection is what PL/pgSQL does for its statements.
                unsafe { pg_sys::SPI_register_trigger_data(td) };
                c.update(&sql, None, &[]).map(|_| ())
            })
            .map_err(spi_error)
            .or_raise()
        });
    }
    pg_sys::Datum::from(0usize)
}

/// `tributary.workers() → (pid, database oid, job)`: the running job workers. Superusers and
/// members of pg_read_all_stats see every worker of every database; other roles see the
/// workers of this database that run jobs of roles they are members of (others' jobs, their ids
/// and their workers are not visible).
#[pg_extern(stable, parallel_safe)]
fn workers() -> TableIterator<'static, (name!(pid, i32), name!(datid, pg_sys::Oid), name!(job, Option<i64>))> {
    // SAFETY: plain reads of the session's user and database.
    let (caller, db) = unsafe { (pg_sys::GetUserId(), pg_sys::MyDatabaseId) };
    // pg_read_all_stats (pg_authid_d.h: ROLE_PG_READ_ALL_STATS).
    const READ_ALL_STATS: u32 = 3375;
    // SAFETY: catalog lookups in a transaction.
    let all = unsafe { pg_sys::superuser_arg(caller) || pg_sys::has_privs_of_role(caller, pg_sys::Oid::from(READ_ALL_STATS)) };
    let rows: Vec<_> = if PRELOADED.load(Ordering::Relaxed) {
        let slots: Vec<Slot> = REGISTRY.share().slots.iter().filter(|s| s.pid != 0).copied().collect();
        slots
            .into_iter()
            // SAFETY: as above.
            .filter(|s| all || (s.db == u32::from(db) && s.owner != 0 && unsafe { pg_sys::has_privs_of_role(caller, pg_sys::Oid::from(s.owner)) }))
            .map(|s| (s.pid, pg_sys::Oid::from(s.db), (s.job != 0).then_some(s.job)))
            .collect()
    } else {
        Vec::new()
    };
    TableIterator::new(rows)
}

// ---------------------------------------------------------------------------------------------
// The launcher

/// Entry point of the launcher (see the module's doc).
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn tributary_launcher_main(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    BackgroundWorker::connect_worker_to_spi(None, None);
    // SAFETY: MyLatch points into this process's PGPROC (shared memory) once it is set up.
    REGISTRY.exclusive().launcher_latch = unsafe { pg_sys::MyLatch } as usize;
    // Every database is asked once; beyond MAX_SLOTS at a time, the rest as entries free up.
    let mut to_probe = databases();
    to_probe.reverse();
    let mut running: Vec<(u32, DynamicBackgroundWorker)> = Vec::new();
    let mut last_full_log: Option<Instant> = None;
    loop {
        if BackgroundWorker::sighup_received() {
            // SAFETY: the standard reload, in the main loop.
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
        }
        running.retain(|(_, h)| !matches!(h.pid(), Err(BackgroundWorkerStatus::Stopped)));
        while let Some((db, name)) = to_probe.last() {
            if !set_wanted(db.to_u32(), name, 1, true) {
                break;
            }
            to_probe.pop();
        }
        let wants: Vec<(u32, String, u32)> = REGISTRY
            .share()
            .dbs
            .iter()
            .filter(|d| d.db != 0 && d.wanted > 0)
            .map(|d| {
                let end = d.name.iter().position(|&b| b == 0).unwrap_or(NAME_LEN);
                (d.db, String::from_utf8_lossy(&d.name[..end]).into_owned(), d.wanted)
            })
            .collect();
        // Databases dropped (or closed to connections) since they asked are forgotten, or a
        // worker would fail to connect at every round.
        let short = wants.iter().any(|(db, _, w)| running.iter().filter(|(d, _)| d == db).count() < *w as usize);
        let live: Vec<u32> = if short { databases().iter().map(|(o, _)| o.to_u32()).collect() } else { Vec::new() };
        'dbs: for (db, name, wanted) in wants {
            let mut have = running.iter().filter(|(d, _)| *d == db).count() as u32;
            if have < wanted && !live.contains(&db) {
                set_wanted(db, &name, 0, false);
                continue;
            }
            while have < wanted {
                if running.len() >= gucs::max_workers() {
                    break 'dbs;
                }
                match start_worker(&name) {
                    Some(h) => {
                        running.push((db, h));
                        have += 1;
                    }
                    None => {
                        if last_full_log.is_none_or(|t| t.elapsed() > Duration::from_secs(60)) {
                            pgrx::log!(
                                "tributary launcher: no background worker slot free for a job worker in database \"{name}\"; retrying (raise max_worker_processes)"
                            );
                            last_full_log = Some(Instant::now());
                        }
                        break 'dbs;
                    }
                }
            }
        }
        if !BackgroundWorker::wait_latch(Some(Duration::from_millis(gucs::job_poll_interval_ms()))) {
            break;
        }
    }
}

fn start_worker(dbname: &str) -> Option<DynamicBackgroundWorker> {
    BackgroundWorkerBuilder::new(&format!("tributary worker {dbname}"))
        .set_type("tributary worker")
        .set_library("tributary")
        .set_function("tributary_worker_main")
        .enable_spi_access()
        .set_extra(dbname)
        .set_restart_time(None)
        // SAFETY: plain read of this process's pid.
        .set_notify_pid(unsafe { pg_sys::MyProcPid })
        .load_dynamic()
        .ok()
}

/// Databases that accept connections, from pg_database (a shared catalog, readable without
/// being connected to a database), as the autovacuum launcher reads it.
fn databases() -> Vec<(pg_sys::Oid, String)> {
    let mut out = Vec::new();
    // SAFETY: a catalog heap scan in its own transaction, as get_database_list() in
    // autovacuum.c does; tuples are only read while the scan is open.
    unsafe {
        pg_sys::StartTransactionCommand();
        pg_sys::GetTransactionSnapshot();
        let rel = pg_sys::table_open(pg_sys::DatabaseRelationId, pg_sys::AccessShareLock as i32);
        let scan = pg_sys::table_beginscan_catalog(rel, 0, std::ptr::null_mut());
        loop {
            let tup = pg_sys::heap_getnext(scan, pg_sys::ScanDirection::ForwardScanDirection);
            if tup.is_null() {
                break;
            }
            let form = pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_database>(tup);
            if (*form).datallowconn && !(*form).datistemplate {
                let name = std::ffi::CStr::from_ptr((*form).datname.data.as_ptr()).to_string_lossy().into_owned();
                out.push(((*form).oid, name));
            }
        }
        pg_sys::heap_endscan(scan);
        pg_sys::table_close(rel, pg_sys::AccessShareLock as i32);
        pg_sys::CommitTransactionCommand();
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The worker

/// A job as a worker runs it (a row of tributary._jobs).
struct Job {
    id: i64,
    name: String,
    source: pg_sys::Oid,
    owner: pg_sys::Oid,
    model: String,
    batch_size: i32,
    halfvec: bool,
    row_options: Option<RowOptions>,
    claim_sql: String,
    claim_keys_sql: String,
    select_sql: String,
    write_sql: String,
}

enum Next {
    Run(Job),
    Idle,
    Exit,
}

/// What one batch (or one bisection of a failed batch) came to.
enum Outcome {
    /// Rows embedded and committed.
    Done(i64),
    /// Nothing was queued.
    Empty,
    /// The job is no longer running (paused, cancelled, dropped): the batch was rolled back.
    Stopped,
    /// A failure that is the job's, not a row's (model, library, table, privileges): the job
    /// is marked failed.
    JobFailed,
    /// pg_cancel_backend: the batch was rolled back; the worker exits.
    Cancelled,
    /// A passing failure (deadlock, serialization, lock not available): the batch was rolled
    /// back, its rows stay queued, nothing is counted against them.
    Retry,
}

static SLOT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(usize::MAX);

#[pg_guard]
unsafe extern "C-unwind" fn release_slot(_code: i32, _arg: pg_sys::Datum) {
    let i = SLOT.load(Ordering::Relaxed);
    if i < MAX_SLOTS {
        REGISTRY.exclusive().slots[i] = Slot::default();
    }
}

fn report_activity(state: pg_sys::BackendState::Type, what: &str) {
    let c = CString::new(what).unwrap_or_default();
    // SAFETY: pgstat copies the string.
    unsafe { pg_sys::pgstat_report_activity(state, c.as_ptr()) };
}

/// PostgreSQL's own signal handlers, by their C symbols (pg_sys wraps functions in Rust ones,
/// which cannot be handed to pqsignal).
mod signals {
    unsafe extern "C-unwind" {
        pub fn die(signal: std::ffi::c_int);
        pub fn StatementCancelHandler(signal: std::ffi::c_int);
        pub fn SignalHandlerForConfigReload(signal: std::ffi::c_int);
    }
}

/// Entry point of a job worker (see the module's doc). `bgw_extra` is the database's name.
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn tributary_worker_main(_arg: pg_sys::Datum) {
    // SAFETY: the standard backend handlers: SIGTERM ends the process at the next interrupt
    // check, SIGINT cancels the current statement (our batch), SIGHUP reloads the config.
    unsafe {
        pg_sys::pqsignal(pg_sys::SIGTERM as i32, Some(signals::die));
        pg_sys::pqsignal(pg_sys::SIGINT as i32, Some(signals::StatementCancelHandler));
        pg_sys::pqsignal(pg_sys::SIGHUP as i32, Some(signals::SignalHandlerForConfigReload));
        pg_sys::BackgroundWorkerUnblockSignals();
    }
    let dbname = BackgroundWorker::get_extra().to_owned();
    BackgroundWorker::connect_worker_to_spi(Some(&dbname), None);
    // SAFETY: plain reads of process globals set by InitPostgres.
    let (db, pid) = unsafe { (pg_sys::MyDatabaseId.to_u32(), pg_sys::MyProcPid) };
    {
        let mut r = REGISTRY.exclusive();
        match r.slots.iter().position(|s| s.pid == 0) {
            Some(i) => {
                r.slots[i] = Slot { pid, db, job: 0, owner: 0 };
                SLOT.store(i, Ordering::Relaxed);
            }
            None => return,
        }
    }
    // SAFETY: a static callback, run before shared memory is detached.
    unsafe { pg_sys::before_shmem_exit(Some(release_slot), pg_sys::Datum::from(0)) };
    // The worker's own statements (as superuser) never resolve names through a path others can
    // write to; the owner's statements get the default path back (as_user).
    // SAFETY: sets a GUC of this session, outside any transaction.
    unsafe {
        pg_sys::SetConfigOption(
            c"search_path".as_ptr(),
            c"pg_catalog, pg_temp".as_ptr(),
            pg_sys::GucContext::PGC_SUSET,
            pg_sys::GucSource::PGC_S_OVERRIDE,
        );
    }
    let appname = CString::new("tributary worker").unwrap();
    // SAFETY: pgstat copies the string.
    unsafe { pg_sys::pgstat_report_appname(appname.as_ptr()) };

    loop {
        pgrx::check_for_interrupts!();
        // SAFETY: the flag is set by the SIGHUP handler; reloading is done in the main loop.
        unsafe {
            if pg_sys::ConfigReloadPending != 0 {
                pg_sys::ConfigReloadPending = 0;
                pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP);
            }
        }
        let next = match in_transaction(|| (plan(db, &dbname), true)) {
            Ok(n) => n,
            Err(e) => {
                log_error("tributary worker: looking for work failed", &e);
                set_wanted(db, &dbname, 0, false);
                Next::Exit
            }
        };
        match next {
            Next::Run(job) => {
                let after = run_job(&job);
                {
                    let mut r = REGISTRY.exclusive();
                    let slot = &mut r.slots[SLOT.load(Ordering::Relaxed)];
                    slot.job = 0;
                    slot.owner = 0;
                }
                match after {
                    After::Exit => break,
                    After::Plan => {}
                    // Rows are queued but all claimed by other workers (or just failed):
                    // wait before planning again rather than spin.
                    After::Wait => wait_poll_interval(),
                }
            }
            Next::Idle => {
                report_activity(pg_sys::BackendState::STATE_IDLE, "");
                wait_poll_interval();
            }
            Next::Exit => break,
        }
    }
}

/// What a worker does after running a job.
enum After {
    Plan,
    Wait,
    Exit,
}

fn wait_poll_interval() {
    // SAFETY: standard latch wait; postmaster death ends the process.
    unsafe {
        pg_sys::WaitLatch(
            pg_sys::MyLatch,
            (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH) as i32,
            gucs::job_poll_interval_ms() as std::ffi::c_long,
            pg_sys::PG_WAIT_EXTENSION,
        );
        pg_sys::ResetLatch(pg_sys::MyLatch);
        // A cancel while waiting has no batch to stop.
        pg_sys::QueryCancelPending = 0;
    }
}

/// Runs `f` in its own transaction, committed if `f` says so, else rolled back. A PostgreSQL
/// error (or a Rust panic) inside rolls the transaction back and comes back as `Err`; FATAL
/// (SIGTERM) ends the process as in any backend.
fn in_transaction<R>(f: impl FnOnce() -> (R, bool)) -> Result<R, CaughtError> {
    // SAFETY: the sequence of a background worker's transaction (see worker_spi.c).
    unsafe {
        pg_sys::SetCurrentStatementStartTimestamp();
        pg_sys::StartTransactionCommand();
        pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
    }
    let result = PgTryBuilder::new(AssertUnwindSafe(|| {
        let (value, commit) = f();
        // SAFETY: closes what was opened above; a failing commit raises and is caught below.
        unsafe {
            pg_sys::PopActiveSnapshot();
            if commit {
                pg_sys::CommitTransactionCommand();
            } else {
                pg_sys::AbortCurrentTransaction();
            }
        }
        Ok(value)
    }))
    .catch_others(|e| Err(e))
    .execute();
    if result.is_err() {
        // SAFETY: error recovery as a backend's main loop does it (the error data is already
        // copied and flushed by pgrx).
        unsafe {
            pg_sys::AbortOutOfAnyTransaction();
            pg_sys::MemoryContextSwitchTo(pg_sys::TopMemoryContext);
        }
    }
    result
}

fn error_parts(e: &CaughtError) -> (PgSqlErrorCode, String, Option<String>) {
    match e {
        CaughtError::PostgresError(r) | CaughtError::ErrorReport(r) | CaughtError::RustPanic { ereport: r, .. } => {
            (r.sql_error_code(), r.message().to_owned(), r.detail().map(str::to_owned))
        }
    }
}

fn sqlstate(code: PgSqlErrorCode) -> String {
    // SQLSTATE from PostgreSQL's packed form (MAKE_SQLSTATE: 6 bits per character).
    let mut v = code as i32;
    (0..5)
        .map(|_| {
            let c = ((v & 0x3F) as u8 + b'0') as char;
            v >>= 6;
            c
        })
        .collect()
}

fn log_error(context: &str, e: &CaughtError) {
    let (code, message, detail) = error_parts(e);
    pgrx::log!("{context}: {message} (SQLSTATE {}){}", sqlstate(code), detail.map(|d| format!(": {d}")).unwrap_or_default());
}

/// Errors that every row of the job would hit: the job is marked failed instead of filling
/// tributary.job_errors with every row.
fn is_job_error(code: PgSqlErrorCode) -> bool {
    use PgSqlErrorCode::*;
    matches!(
        code,
        ERRCODE_UNDEFINED_FILE
            | ERRCODE_UNDEFINED_OBJECT
            | ERRCODE_UNDEFINED_TABLE
            | ERRCODE_UNDEFINED_COLUMN
            | ERRCODE_UNDEFINED_FUNCTION
            | ERRCODE_INSUFFICIENT_PRIVILEGE
            | ERRCODE_DATATYPE_MISMATCH
            | ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE
            | ERRCODE_CONFIGURATION_LIMIT_EXCEEDED
            | ERRCODE_OUT_OF_MEMORY
            | ERRCODE_DISK_FULL
            | ERRCODE_READ_ONLY_SQL_TRANSACTION
            | ERRCODE_INTERNAL_ERROR
    )
}

/// Failures that say nothing about the rows: try the batch again later.
fn is_transient(code: PgSqlErrorCode) -> bool {
    use PgSqlErrorCode::*;
    matches!(code, ERRCODE_T_R_DEADLOCK_DETECTED | ERRCODE_T_R_SERIALIZATION_FAILURE | ERRCODE_LOCK_NOT_AVAILABLE)
}

/// Inside a transaction: which job to run next in this database, and how many workers the
/// database needs (told to the launcher).
fn plan(db: u32, dbname: &str) -> Next {
    let installed = Spi::get_one::<bool>("SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'tributary')")
        .ok()
        .flatten()
        .unwrap_or(false);
    if !installed {
        set_wanted(db, dbname, 0, false);
        return Next::Exit;
    }
    // (id, mode, workers, queued > 0, retries pending)
    let jobs: Vec<(i64, String, i32, bool, bool)> = Spi::connect_mut(|c| {
        let mut out = Vec::new();
        let ids: Vec<i64> = c
            .select("SELECT id FROM tributary._jobs WHERE state IN ('pending', 'running') ORDER BY id", None, &[])?
            .filter_map(|r| r.get::<i64>(1).ok().flatten())
            .collect();
        for id in ids {
            c.update("SELECT tributary._requeue_due($1)", None, &[id.into()])?;
            let row = c.select(
                "SELECT mode, workers, coalesce(tributary._queued(queue) > 0, false), \
                        EXISTS (SELECT 1 FROM tributary._job_errors e WHERE e.job_id = j.id AND e.status = 'waiting') \
                   FROM tributary._jobs j WHERE id = $1",
                None,
                &[id.into()],
            )?;
            for r in row {
                out.push((id, r.get(1)?.unwrap_or_default(), r.get(2)?.unwrap_or(1), r.get(3)?.unwrap_or(false), r.get(4)?.unwrap_or(false)));
            }
        }
        Ok::<_, pgrx::spi::Error>(out)
    })
    .unwrap_or_default();

    let demand: u32 = jobs.iter().filter(|j| j.3).map(|j| j.2 as u32).sum::<u32>().min(MAX_SLOTS as u32);
    let polling = jobs.iter().any(|j| j.1 == "continuous" || j.4);
    set_wanted(db, dbname, demand.max(polling as u32), false);

    let me = SLOT.load(Ordering::Relaxed);
    // Picked and taken under one lock, so that two workers never exceed a job's `workers`.
    let pick = {
        let mut r = REGISTRY.exclusive();
        let id = jobs
            .iter()
            .filter(|j| j.3)
            .find(|j| r.slots.iter().filter(|s| s.pid != 0 && s.job == j.0).count() < j.2 as usize)
            .map(|j| j.0);
        if let Some(id) = id {
            r.slots[me].job = id;
        }
        id
    };
    if let Some(id) = pick {
        if let Some(job) = load_job(id) {
            REGISTRY.exclusive().slots[me].owner = u32::from(job.owner);
            return Next::Run(job);
        }
        REGISTRY.exclusive().slots[me].job = 0;
    }
    for j in jobs.iter().filter(|j| !j.3 && j.1 == "once") {
        let _ = Spi::get_one_with_args::<bool>("SELECT tributary._finish_if_done($1)", &[j.0.into()]);
    }
    if polling {
        // One worker per database stays to watch continuous jobs: the one in the lowest slot.
        let r = REGISTRY.share();
        let keeper = r.slots.iter().position(|s| s.pid != 0 && s.db == db);
        if keeper == Some(me) {
            return Next::Idle;
        }
    }
    Next::Exit
}

/// Marks job `id` running and reads what a worker needs of it.
fn load_job(id: i64) -> Option<Job> {
    Spi::connect_mut(|c| {
        c.update(
            "UPDATE tributary._jobs SET state = 'running', started_at = coalesce(started_at, now()) \
              WHERE id = $1 AND state IN ('pending', 'running')",
            None,
            &[id.into()],
        )?;
        let rows = c.select(
            "SELECT name, source::oid, owner::oid, model, batch_size, target_type = 'halfvec', row_options::text, \
                    claim_sql, claim_keys_sql, select_sql, write_sql \
               FROM tributary._jobs WHERE id = $1 AND state = 'running'",
            None,
            &[id.into()],
        )?;
        let mut job = None;
        for r in rows {
            let row_options = r.get::<String>(7)?.map(|s| {
                let v: Value = serde_json::from_str(&s).unwrap_or(Value::Null);
                let strings = |k: &str| -> Vec<String> {
                    v[k].as_array().map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_owned)).collect()).unwrap_or_default()
                };
                RowOptions {
                    exclude: strings("exclude"),
                    parents: v["parents"].as_i64().unwrap_or(0) as i32,
                    children: v["children"].as_i64().unwrap_or(0) as i32,
                    time_columns: strings("time_columns"),
                    template: crate::engine::rowtext::TEMPLATE_VERSION,
                    ..Default::default()
                }
            });
            job = Some(Job {
                id,
                name: r.get(1)?.unwrap_or_default(),
                source: r.get(2)?.unwrap_or(pg_sys::InvalidOid),
                owner: r.get(3)?.unwrap_or(pg_sys::InvalidOid),
                model: r.get(4)?.unwrap_or_default(),
                batch_size: r.get(5)?.unwrap_or(256),
                halfvec: r.get(6)?.unwrap_or(false),
                row_options,
                claim_sql: r.get(8)?.unwrap_or_default(),
                claim_keys_sql: r.get(9)?.unwrap_or_default(),
                select_sql: r.get(10)?.unwrap_or_default(),
                write_sql: r.get(11)?.unwrap_or_default(),
            });
        }
        Ok::<_, pgrx::spi::Error>(job)
    })
    .ok()
    .flatten()
}

/// Runs `f` with `role`'s privileges (and row-level security), as SECURITY DEFINER functions
/// do. An error inside aborts the transaction, which restores the user.
///
/// As a maintenance command runs a table owner's code (security-restricted, settings the code
/// changes undone afterwards), with the default `search_path` ("$user", public) while the
/// worker's own statements run with `pg_catalog, pg_temp`.
fn as_user<R>(role: pg_sys::Oid, f: impl FnOnce() -> R) -> R {
    let mut old = pg_sys::InvalidOid;
    let mut ctx = 0;
    // SAFETY: save, switch, restore, as fmgr_security_definer and ExecRefreshMatView do.
    let nest = unsafe {
        pg_sys::GetUserIdAndSecContext(&mut old, &mut ctx);
        pg_sys::SetUserIdAndSecContext(
            role,
            ctx | (pg_sys::SECURITY_LOCAL_USERID_CHANGE | pg_sys::SECURITY_RESTRICTED_OPERATION) as i32,
        );
        let nest = pg_sys::NewGUCNestLevel();
        pg_sys::set_config_option(
            c"search_path".as_ptr(),
            c"\"$user\", public".as_ptr(),
            pg_sys::GucContext::PGC_USERSET,
            pg_sys::GucSource::PGC_S_SESSION,
            pg_sys::GucAction::GUC_ACTION_SAVE,
            true,
            0,
            false,
        );
        nest
    };
    let r = f();
    // SAFETY: as above (an error inside aborts the transaction, which restores both).
    unsafe {
        pg_sys::AtEOXact_GUC(true, nest);
        pg_sys::SetUserIdAndSecContext(old, ctx);
    }
    r
}

/// Runs batches of `job` until its queue is empty or it stops.
fn run_job(job: &Job) -> After {
    // A job whose model cannot run fails once, here, rather than row by row.
    let preflight = in_transaction(|| {
        crate::api::embed::embed(&["tributary"], Some(&job.model)).or_raise();
        ((), true)
    });
    if let Err(e) = preflight {
        fail_job(job, &e);
        return After::Plan;
    }
    let mut batches = 0u64;
    loop {
        pgrx::check_for_interrupts!();
        report_activity(pg_sys::BackendState::STATE_RUNNING, &format!("tributary job {} ({}): embedding a batch", job.id, job.name));
        match process(job, None) {
            Outcome::Done(_) => {}
            Outcome::Empty => return if batches == 0 { After::Wait } else { After::Plan },
            Outcome::Retry => return After::Wait,
            Outcome::Stopped | Outcome::JobFailed => return After::Plan,
            Outcome::Cancelled => return After::Exit,
        }
        batches += 1;
        if batches % 100 == 0 {
            let _ = in_transaction(|| {
                Spi::run_with_args(
                    "DELETE FROM tributary._job_batches WHERE job_id = $1 AND finished_at < now() - interval '1 hour'",
                    &[job.id.into()],
                )
                .ok();
                ((), true)
            });
        }
        // Let the planner see a waiting job of this database with more workers wanted.
        if batches % 20 == 0 {
            return After::Plan;
        }
    }
}

/// One batch of `job` (`keys`: these queued keys, as a jsonb array; `None`: the next
/// `batch_size` keys). A failed batch is split in halves until the failing rows are alone.
fn process(job: &Job, keys: Option<String>) -> Outcome {
    let claimed: RefCell<Option<String>> = RefCell::new(None);
    match in_transaction(|| batch(job, keys.as_deref(), &claimed)) {
        Ok(o) => o,
        Err(e) => {
            let (code, _, _) = error_parts(&e);
            if code == PgSqlErrorCode::ERRCODE_QUERY_CANCELED {
                log_error(&format!("tributary job {}: batch cancelled, nothing written", job.id), &e);
                return Outcome::Cancelled;
            }
            if is_transient(code) {
                log_error(&format!("tributary job {}: batch rolled back, retried later", job.id), &e);
                return Outcome::Retry;
            }
            let claimed = claimed.take();
            if is_job_error(code) || claimed.is_none() {
                fail_job(job, &e);
                return Outcome::JobFailed;
            }
            let keys: Vec<Value> = serde_json::from_str(claimed.as_deref().unwrap_or("[]")).unwrap_or_default();
            if keys.len() <= 1 {
                row_failed(job, claimed.as_deref().unwrap_or("[]"), &e);
                return Outcome::Done(0);
            }
            let (left, right) = keys.split_at(keys.len() / 2);
            let mut done = 0;
            for half in [left, right] {
                match process(job, Some(Value::Array(half.to_vec()).to_string())) {
                    Outcome::Done(n) => done += n,
                    Outcome::Empty | Outcome::Retry => {}
                    stop => return stop,
                }
            }
            Outcome::Done(done)
        }
    }
}

/// The body of one batch's transaction: claim, read as the owner, embed, write as the owner,
/// clear the rows' old errors, add the progress. Returns (outcome, commit).
fn batch(job: &Job, keys: Option<&str>, claimed_out: &RefCell<Option<String>>) -> (Outcome, bool) {
    let started = Instant::now();
    // As the owner: the claim orders and turns keys into values of the owner's types.
    let claimed = as_user(job.owner, || {
        match keys {
            None => Spi::get_one_with_args::<String>(&job.claim_sql, &[(job.batch_size as i64).into()]),
            Some(k) => Spi::get_one_with_args::<String>(&job.claim_keys_sql, &[k.into()]),
        }
        .map_err(spi_error)
        .or_raise()
    });
    let Some(claimed) = claimed else {
        return (Outcome::Empty, true);
    };
    *claimed_out.borrow_mut() = Some(claimed.clone());

    let model = catalog::model(Some(&job.model)).or_raise();
    // (key, text, guard): the guard is what the text is made of; the write checks it did not
    // change meanwhile (continuous jobs: a change queued the row again).
    let (keys, texts, guards): (Vec<String>, Vec<Option<String>>, Vec<Option<String>>) = as_user(job.owner, || {
        let rows: Vec<(String, Option<String>, Option<String>)> = Spi::connect(|c| {
            c.select(&job.select_sql, None, &[claimed.as_str().into()])?
                .map(|r| Ok((r.get::<String>(1)?.unwrap_or_default(), r.get::<String>(2)?, r.get::<String>(3)?)))
                .collect::<Result<Vec<_>, pgrx::spi::Error>>()
        })
        .map_err(spi_error)
        .or_raise();
        let mut keys = Vec::with_capacity(rows.len());
        let mut texts = Vec::with_capacity(rows.len());
        let mut guards = Vec::with_capacity(rows.len());
        for (key, text, guard) in rows {
            let text = match (&job.row_options, text) {
                (Some(opts), Some(json)) => {
                    let values = crate::api::rows::row_values(&json).or_raise();
                    Some(crate::api::rows::row_text(Some(job.source), &values, opts, &model).or_raise())
                }
                (_, t) => t,
            };
            keys.push(key);
            texts.push(text);
            guards.push(guard);
        }
        (keys, texts, guards)
    });

    let present: Vec<&str> = texts.iter().flatten().map(String::as_str).collect();
    let n = present.len() as i64;
    let embed_started = Instant::now();
    let emb = if present.is_empty() { None } else { Some(crate::api::embed::embed(&present, Some(&job.model)).or_raise()) };
    let embed_ms = embed_started.elapsed().as_secs_f64() * 1e3;
    let mut next = 0;
    let mut take = |has: bool| {
        let i = next;
        next += has as usize;
        has.then_some(i)
    };
    let vectors: pgrx::datum::DatumWithOid = if job.halfvec {
        texts
            .iter()
            .map(|t| take(t.is_some()).map(|i| HalfVec(emb.as_ref().unwrap().row_f16(i).into_owned())))
            .collect::<Vec<_>>()
            .into()
    } else {
        texts
            .iter()
            .map(|t| take(t.is_some()).map(|i| Vector(emb.as_ref().unwrap().row_f32(i).into_owned())))
            .collect::<Vec<_>>()
            .into()
    };
    as_user(job.owner, || {
        Spi::run_with_args(&job.write_sql, &[keys.into(), vectors, guards.into()]).map_err(spi_error).or_raise();
    });
    // Every claimed key's old error goes (also of rows deleted meanwhile, which have no text).
    Spi::run_with_args(
        "DELETE FROM tributary._job_errors WHERE job_id = $1 AND status = 'queued' \
            AND key IN (SELECT pg_catalog.jsonb_array_elements($2::jsonb))",
        &[job.id.into(), claimed.as_str().into()],
    )
    .map_err(spi_error)
    .or_raise();
    // Paused, cancelled or dropped meanwhile: the UPDATE finds no row and the batch is undone.
    let still_running = Spi::connect_mut(|c| {
        c.update(
            "UPDATE tributary._jobs SET rows_done = rows_done + $2, last_batch_at = now() \
              WHERE id = $1 AND state = 'running' RETURNING id",
            None,
            &[job.id.into(), n.into()],
        )
        .map(|t| t.len())
    })
    .map_err(spi_error)
    .or_raise();
    if still_running == 0 {
        return (Outcome::Stopped, false);
    }
    Spi::run_with_args(
        "INSERT INTO tributary._job_batches (job_id, rows, ms, embed_ms, pid) VALUES ($1, $2, $3, $4, pg_backend_pid())",
        &[job.id.into(), (n as i32).into(), (started.elapsed().as_secs_f64() * 1e3).into(), embed_ms.into()],
    )
    .map_err(spi_error)
    .or_raise();
    (Outcome::Done(n), true)
}

/// Job-level failure: the job is marked failed with the error; its queue stays for a resume.
fn fail_job(job: &Job, e: &CaughtError) {
    log_error(&format!("tributary job {} ({}) failed", job.id, job.name), e);
    let (code, message, detail) = error_parts(e);
    let text = format!("{message} (SQLSTATE {}){}", sqlstate(code), detail.map(|d| format!(": {d}")).unwrap_or_default());
    let _ = in_transaction(|| {
        Spi::run_with_args(
            "UPDATE tributary._jobs SET state = 'failed', last_error = $2, last_error_at = now() \
              WHERE id = $1 AND state IN ('pending', 'running')",
            &[job.id.into(), text.as_str().into()],
        )
        .ok();
        ((), true)
    });
}

/// One row failed alone: it leaves the queue for tributary.job_errors, to be retried after
/// 10 s, 20 s, 40 s, ... (at most 1 h) until `tributary.job_max_attempts`.
fn row_failed(job: &Job, key: &str, e: &CaughtError) {
    log_error(&format!("tributary job {}: row {key} failed", job.id), e);
    let (code, message, detail) = error_parts(e);
    let result = in_transaction(|| {
        as_user(job.owner, || Spi::get_one_with_args::<String>(&job.claim_keys_sql, &[key.into()]).map_err(spi_error).or_raise());
        Spi::run_with_args(
            "INSERT INTO tributary._job_errors AS x (job_id, key, sqlstate, message, detail, attempts, status, next_attempt_at) \
             VALUES ($1, ($2::jsonb) -> 0, $3, $4, $5, 1, \
                     CASE WHEN $6 <= 1 THEN 'gave_up' ELSE 'waiting' END, \
                     CASE WHEN $6 <= 1 THEN NULL ELSE now() + interval '10 s' END) \
             ON CONFLICT (job_id, key) DO UPDATE SET \
                 attempts = x.attempts + 1, sqlstate = EXCLUDED.sqlstate, message = EXCLUDED.message, \
                 detail = EXCLUDED.detail, last_failed_at = now(), \
                 status = CASE WHEN x.attempts + 1 >= $6 THEN 'gave_up' ELSE 'waiting' END, \
                 next_attempt_at = CASE WHEN x.attempts + 1 >= $6 THEN NULL \
                     ELSE now() + least(interval '10 s' * 2 ^ x.attempts, interval '1 hour') END",
            &[
                job.id.into(),
                key.into(),
                sqlstate(code).as_str().into(),
                message.as_str().into(),
                detail.as_deref().into(),
                gucs::job_max_attempts().into(),
            ],
        )
        .map_err(spi_error)
        .or_raise();
        Spi::run_with_args(
            "UPDATE tributary._jobs SET last_error = format('row %s: %s', ($2::jsonb) -> 0, $3), last_error_at = now() WHERE id = $1",
            &[job.id.into(), key.into(), message.as_str().into()],
        )
        .map_err(spi_error)
        .or_raise();
        ((), true)
    });
    if let Err(e) = result {
        log_error(&format!("tributary job {}: could not record the failed row {key}", job.id), &e);
    }
}
