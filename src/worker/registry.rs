//! The jobs' shared memory: which databases ask for workers, and which workers run (one
//! LWLock). Only this module touches it; the launcher, the workers and the SQL functions call
//! the functions below.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use pgrx::prelude::*;
use pgrx::{pg_shmem_init, PGRXSharedMemory, PgLwLock};

use crate::pg::gucs::MAX_SLOTS;

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
        DbWant {
            db: 0,
            name: [0; NAME_LEN],
            wanted: 0,
        }
    }
}

/// A running worker.
#[derive(Copy, Clone, Default)]
struct Slot {
    pid: i32,
    db: u32,
    /// The job it is running (0: none).
    job: i64,
    /// The owner of that job (0: none), for [`visible_workers`].
    owner: u32,
    /// The worker's latch (in its PGPROC, shared memory), set when rows are queued for a
    /// continuous job of its database ([`wake_at_commit`]).
    latch: usize,
}

/// Shared state of the launcher and the workers (shared memory, one LWLock).
#[derive(Copy, Clone, Default)]
pub struct Registry {
    launcher_latch: usize,
    /// The launcher's pid while it runs (0: not running; cleared when it exits).
    launcher_pid: i32,
    /// Why the launcher could not start every worker asked for, at its last round.
    shortage: Shortage,
    dbs: [DbWant; MAX_SLOTS],
    slots: [Slot; MAX_SLOTS],
}

/// Why the launcher could not start every worker that databases asked for (its last round).
#[derive(Copy, Clone, Default, PartialEq, Eq, Debug)]
pub enum Shortage {
    #[default]
    None,
    /// `tributary.max_workers` workers run already.
    MaxWorkers,
    /// `max_worker_processes` has no free slot.
    NoSlot,
}

// SAFETY: plain old data (no pointers into process-local memory; the latch lives in the
// launcher's PGPROC, which is in shared memory).
unsafe impl PGRXSharedMemory for Registry {}

static REGISTRY: PgLwLock<Registry> = unsafe { PgLwLock::new(c"tributary_jobs") };

/// tributary was loaded by `shared_preload_libraries` (so shared memory and the launcher exist).
static PRELOADED: AtomicBool = AtomicBool::new(false);

/// This worker's slot in [`Registry::slots`] (`usize::MAX`: none, or not a worker).
static SLOT: AtomicUsize = AtomicUsize::new(usize::MAX);

/// From `_PG_init` while preload libraries load: asks for the shared memory.
pub(super) fn init_shmem() {
    pg_shmem_init!(REGISTRY);
    PRELOADED.store(true, Ordering::Relaxed);
}

/// Shared memory exists (tributary is in `shared_preload_libraries`).
pub(super) fn preloaded() -> bool {
    PRELOADED.load(Ordering::Relaxed)
}

/// A database that asks for workers, as the launcher reads it.
pub(super) struct Want {
    pub db: u32,
    pub name: String,
    pub workers: u32,
}

/// Records how many workers database `db` asks for (`at_least`: never lowers it). False when
/// all MAX_SLOTS entries are taken by other databases (the caller tries again later).
pub(super) fn set_wanted(db: u32, name: &str, wanted: u32, at_least: bool) -> bool {
    let mut r = REGISTRY.exclusive();
    let idx = r
        .dbs
        .iter()
        .position(|d| d.db == db)
        .or_else(|| r.dbs.iter().position(|d| d.db == 0));
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
    e.wanted = if at_least {
        e.wanted.max(wanted)
    } else {
        wanted
    };
    if e.wanted == 0 {
        e.db = 0;
    }
    true
}

/// The databases that ask for workers now.
pub(super) fn wanted() -> Vec<Want> {
    REGISTRY
        .share()
        .dbs
        .iter()
        .filter(|d| d.db != 0 && d.wanted > 0)
        .map(|d| {
            let end = d.name.iter().position(|&b| b == 0).unwrap_or(NAME_LEN);
            Want {
                db: d.db,
                name: String::from_utf8_lossy(&d.name[..end]).into_owned(),
                workers: d.wanted,
            }
        })
        .collect()
}

#[pg_guard]
unsafe extern "C-unwind" fn clear_launcher(_code: i32, _arg: pg_sys::Datum) {
    let mut r = REGISTRY.exclusive();
    r.launcher_latch = 0;
    r.launcher_pid = 0;
    r.shortage = Shortage::None;
}

/// From the launcher: its pid and latch (set when a database asks for workers), cleared when it
/// exits.
pub(super) fn set_launcher(pid: i32, latch: *mut pg_sys::Latch) {
    {
        let mut r = REGISTRY.exclusive();
        r.launcher_latch = latch as usize;
        r.launcher_pid = pid;
    }
    // SAFETY: a static callback, run before shared memory is detached.
    unsafe { pg_sys::before_shmem_exit(Some(clear_launcher), pg_sys::Datum::from(0)) };
}

/// From the launcher, after each round: why some database got fewer workers than it asked for.
pub(super) fn set_shortage(s: Shortage) {
    let mut r = REGISTRY.exclusive();
    if r.shortage != s {
        r.shortage = s;
    }
}

/// What serves the jobs of database `db` now, for the `tributary.jobs` view
/// ([`super::_job_service`]).
pub(super) struct Service {
    pub preloaded: bool,
    /// The launcher's pid (0: not running).
    pub launcher_pid: i32,
    pub shortage: Shortage,
    /// Job workers running in `db` (busy or watching continuous jobs).
    pub workers_in_db: i32,
}

pub(super) fn service(db: u32) -> Service {
    if !preloaded() {
        return Service {
            preloaded: false,
            launcher_pid: 0,
            shortage: Shortage::None,
            workers_in_db: 0,
        };
    }
    let r = REGISTRY.share();
    Service {
        preloaded: true,
        launcher_pid: r.launcher_pid,
        shortage: r.shortage,
        workers_in_db: r.slots.iter().filter(|s| s.pid != 0 && s.db == db).count() as i32,
    }
}

/// The pids of the job workers running in each database (with a slot), for the launcher.
pub(super) fn worker_pids() -> Vec<(u32, i32)> {
    REGISTRY
        .share()
        .slots
        .iter()
        .filter(|s| s.pid != 0)
        .map(|s| (s.db, s.pid))
        .collect()
}

/// Sets the latches of the job workers of database `db`: an idle one plans at once.
fn wake_workers(db: u32) {
    let latches: Vec<usize> = REGISTRY
        .share()
        .slots
        .iter()
        .filter(|s| s.pid != 0 && s.db == db && s.latch != 0)
        .map(|s| s.latch)
        .collect();
    for latch in latches {
        // SAFETY: a worker's latch is in its PGPROC, in shared memory; setting the latch of a
        // process that has exited meanwhile is harmless.
        unsafe { pg_sys::SetLatch(latch as *mut pg_sys::Latch) };
    }
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
    static CALLBACK_REGISTERED: Cell<bool> = const { Cell::new(false) };
}

#[pg_guard]
unsafe extern "C-unwind" fn at_xact_end(
    event: pg_sys::XactEvent::Type,
    _arg: *mut std::ffi::c_void,
) {
    match event {
        pg_sys::XactEvent::XACT_EVENT_COMMIT => {
            if let Some(name) = WAKE_AT_COMMIT.take() {
                // SAFETY: plain read of a process global.
                let db = unsafe { pg_sys::MyDatabaseId };
                if !set_wanted(db.to_u32(), &name, 1, true) {
                    pgrx::log!("tributary: more than {MAX_SLOTS} databases ask for job workers; database \"{name}\" waits for the next job call or restart");
                }
                wake_workers(db.to_u32());
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

/// Asks the launcher for a worker in this database when the current transaction commits (so
/// the worker sees the job), and wakes the database's idle workers then (so a continuous job's
/// new rows are embedded without waiting for the next poll). Only when [`preloaded`].
pub(super) fn wake_at_commit() {
    if !CALLBACK_REGISTERED.replace(true) {
        // SAFETY: registers a process-lifetime callback with a static function.
        unsafe { pg_sys::RegisterXactCallback(Some(at_xact_end), std::ptr::null_mut()) };
    }
    // SAFETY: plain read of a process global.
    WAKE_AT_COMMIT.set(Some(database_name(unsafe { pg_sys::MyDatabaseId })));
}

/// A running worker as `tributary.workers()` shows it.
pub(super) struct WorkerRow {
    pub pid: i32,
    pub db: pg_sys::Oid,
    pub job: Option<i64>,
}

/// The running workers `caller` may see: with `all`, every worker; else the workers of database
/// `db` that run jobs of roles `caller` is a member of. None when not [`preloaded`].
pub(super) fn visible_workers(caller: pg_sys::Oid, db: pg_sys::Oid, all: bool) -> Vec<WorkerRow> {
    if !preloaded() {
        return Vec::new();
    }
    let slots: Vec<Slot> = REGISTRY
        .share()
        .slots
        .iter()
        .filter(|s| s.pid != 0)
        .copied()
        .collect();
    slots
        .into_iter()
        // SAFETY: a catalog lookup in a transaction (the lock is not held here).
        .filter(|s| {
            all || (s.db == u32::from(db)
                && s.owner != 0
                && unsafe { pg_sys::has_privs_of_role(caller, pg_sys::Oid::from(s.owner)) })
        })
        .map(|s| WorkerRow {
            pid: s.pid,
            db: pg_sys::Oid::from(s.db),
            // Predict jobs run under negative ids (src/worker/predict.rs): not embedding jobs.
            job: (s.job > 0).then_some(s.job),
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// A worker's own slot

#[pg_guard]
unsafe extern "C-unwind" fn release_slot(_code: i32, _arg: pg_sys::Datum) {
    let i = SLOT.load(Ordering::Relaxed);
    if i < MAX_SLOTS {
        REGISTRY.exclusive().slots[i] = Slot::default();
    }
}

/// Takes a free slot for this worker (`pid` in database `db`, woken through `latch`), released
/// when the process exits. False when every slot is taken.
pub(super) fn take_slot(pid: i32, db: u32, latch: *mut pg_sys::Latch) -> bool {
    {
        let mut r = REGISTRY.exclusive();
        match r.slots.iter().position(|s| s.pid == 0) {
            Some(i) => {
                r.slots[i] = Slot {
                    pid,
                    db,
                    job: 0,
                    owner: 0,
                    latch: latch as usize,
                };
                SLOT.store(i, Ordering::Relaxed);
            }
            None => return false,
        }
    }
    // SAFETY: a static callback, run before shared memory is detached.
    unsafe { pg_sys::before_shmem_exit(Some(release_slot), pg_sys::Datum::from(0)) };
    true
}

/// A job a worker may take: `id`, and how many workers may run it at once.
pub(super) struct Candidate {
    pub id: i64,
    pub workers: usize,
}

/// The first of `candidates` that fewer than its `workers` workers run, recorded in this
/// worker's slot under the same lock, so that two workers never exceed a job's `workers`.
pub(super) fn take_job(candidates: impl IntoIterator<Item = Candidate>) -> Option<i64> {
    let me = SLOT.load(Ordering::Relaxed);
    let mut r = REGISTRY.exclusive();
    let id = candidates
        .into_iter()
        .find(|j| {
            r.slots
                .iter()
                .filter(|s| s.pid != 0 && s.job == j.id)
                .count()
                < j.workers
        })
        .map(|j| j.id);
    if let Some(id) = id {
        r.slots[me].job = id;
    }
    id
}

/// Records the owner of the job this worker runs (for [`visible_workers`]).
pub(super) fn set_job_owner(owner: pg_sys::Oid) {
    REGISTRY.exclusive().slots[SLOT.load(Ordering::Relaxed)].owner = u32::from(owner);
}

/// This worker runs no job.
pub(super) fn clear_job() {
    let mut r = REGISTRY.exclusive();
    let slot = &mut r.slots[SLOT.load(Ordering::Relaxed)];
    slot.job = 0;
    slot.owner = 0;
}

/// This worker is the one that stays in database `db` to watch continuous jobs: the one in the
/// lowest slot of `db`.
pub(super) fn is_keeper(db: u32) -> bool {
    let r = REGISTRY.share();
    r.slots.iter().position(|s| s.pid != 0 && s.db == db) == Some(SLOT.load(Ordering::Relaxed))
}
