//! What every backend and job worker does with tributary, in shared memory, for the cluster-wide
//! views `tributary.stat_activity` and `tributary.progress_embed_column` (sql in
//! src/api/activity.rs). Needs `shared_preload_libraries`, like the jobs' shared memory; without
//! it nothing is recorded and the views raise 55000.
//!
//! Each process writes only its own entry (taken on its first model call, freed when it exits),
//! under one LWLock held for a few field copies; readers copy the whole array under the same
//! lock. Counters are cumulative for the process's life (sessions dropped and created again
//! included).

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use pgrx::prelude::*;
use pgrx::{pg_shmem_init, PGRXSharedMemory, PgLwLock};

/// Entries: backends and workers that have used tributary at once. Past that, a process is not
/// shown (and counted in [`overflowed`]).
pub const MAX_ENTRIES: usize = 512;
const NAME_LEN: usize = 64;

/// One process's entry.
#[derive(Copy, Clone)]
pub struct Entry {
    pub pid: i32,
    pub db: u32,
    pub role: u32,
    /// The model of its last call, NUL-padded.
    pub model: [u8; NAME_LEN],
    /// `cpu`, `cuda` or `tensorrt`, of its last call's session.
    pub provider: [u8; 16],
    /// Sessions it holds now.
    pub sessions: u32,
    pub calls: u64,
    pub rows: u64,
    pub tokens: u64,
    /// µs inside ONNX Runtime runs.
    pub run_us: u64,
    /// Runs that waited for a CPU slot, and µs waited.
    pub cpu_waits: u64,
    pub cpu_wait_us: u64,
    /// The priority of its current or last call on the CPU (`interactive`, `bulk`,
    /// `background`; empty: none yet), NUL-padded.
    pub priority: [u8; 16],
    /// Since when it waits for a CPU run slot (TimestampTz; 0: not waiting).
    pub wait_start: i64,
    /// Sessions dropped by `tributary.session_idle_timeout`.
    pub idle_releases: u32,
    /// Private and shared resident memory (kB, /proc/self/smaps_rollup), read at most once a
    /// second after a call.
    pub private_kb: u64,
    pub shared_kb: u64,
    /// Its last call's end (TimestampTz).
    pub last_call: i64,
    /// A running `tributary_embed_column`: table (0: none), target column, rows counted at the
    /// start, rows written so far, start time (TimestampTz).
    pub progress_rel: u32,
    pub progress_column: [u8; NAME_LEN],
    pub progress_total: i64,
    pub progress_done: i64,
    pub progress_start: i64,
}

impl Entry {
    const EMPTY: Entry = Entry {
        pid: 0,
        db: 0,
        role: 0,
        model: [0; NAME_LEN],
        provider: [0; 16],
        sessions: 0,
        calls: 0,
        rows: 0,
        tokens: 0,
        run_us: 0,
        cpu_waits: 0,
        cpu_wait_us: 0,
        priority: [0; 16],
        wait_start: 0,
        idle_releases: 0,
        private_kb: 0,
        shared_kb: 0,
        last_call: 0,
        progress_rel: 0,
        progress_column: [0; NAME_LEN],
        progress_total: 0,
        progress_done: 0,
        progress_start: 0,
    };
}

/// Every entry (shared memory, one LWLock).
#[derive(Copy, Clone)]
pub struct Activity {
    entries: [Entry; MAX_ENTRIES],
    /// Processes that found no free entry.
    overflowed: u64,
}

impl Default for Activity {
    fn default() -> Self {
        Activity {
            entries: [Entry::EMPTY; MAX_ENTRIES],
            overflowed: 0,
        }
    }
}

// SAFETY: plain old data, no pointers.
unsafe impl PGRXSharedMemory for Activity {}

static ACTIVITY: PgLwLock<Activity> = unsafe { PgLwLock::new(c"tributary_activity") };
static PRELOADED: AtomicBool = AtomicBool::new(false);
/// This process's entry (`usize::MAX`: none yet; `usize::MAX - 1`: none free).
static MINE: AtomicUsize = AtomicUsize::new(usize::MAX);

thread_local! {
    static LAST_MEMORY_READ: Cell<Option<Instant>> = const { Cell::new(None) };
    /// Runs that had to wait for a CPU run slot, and the time waited (µs), of this backend
    /// (src/pg/admission.rs reports them through [`note_waited`]).
    static WAITS: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
    /// The priority of this backend's current or last call on the CPU ([`note_priority`]).
    static LAST_PRIORITY: Cell<Option<&'static str>> = const { Cell::new(None) };
}

/// From `_PG_init` while preload libraries load.
pub fn init_shmem() {
    pg_shmem_init!(ACTIVITY);
    PRELOADED.store(true, Ordering::Relaxed);
}

/// Whether the shared memory exists.
pub fn preloaded() -> bool {
    PRELOADED.load(Ordering::Relaxed)
}

#[pg_guard]
unsafe extern "C-unwind" fn free_entry(_code: i32, _arg: pg_sys::Datum) {
    let i = MINE.load(Ordering::Relaxed);
    if i < MAX_ENTRIES {
        ACTIVITY.exclusive().entries[i] = Entry::EMPTY;
    }
}

fn copy_name(dst: &mut [u8], src: &str) {
    dst.fill(0);
    let mut n = src.len().min(dst.len() - 1);
    while !src.is_char_boundary(n) {
        n -= 1;
    }
    dst[..n].copy_from_slice(&src.as_bytes()[..n]);
}

/// The text of a NUL-padded name.
pub fn name(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// Runs `f` on this process's entry, taking one first if it has none. Nothing when tributary
/// is not preloaded or every entry is taken.
fn with_mine(f: impl FnOnce(&mut Entry)) {
    if !preloaded() {
        return;
    }
    let mut i = MINE.load(Ordering::Relaxed);
    if i == usize::MAX - 1 {
        return;
    }
    let mut a = ACTIVITY.exclusive();
    if i == usize::MAX {
        match a.entries.iter().position(|e| e.pid == 0) {
            Some(free) => {
                // SAFETY: plain reads of this backend's globals.
                let (pid, db, role) = unsafe {
                    (
                        pg_sys::MyProcPid,
                        pg_sys::MyDatabaseId.to_u32(),
                        pg_sys::GetSessionUserId().to_u32(),
                    )
                };
                a.entries[free] = Entry {
                    pid,
                    db,
                    role,
                    ..Entry::EMPTY
                };
                i = free;
                MINE.store(i, Ordering::Relaxed);
                // SAFETY: a static callback, run before shared memory is detached.
                unsafe { pg_sys::before_shmem_exit(Some(free_entry), pg_sys::Datum::from(0)) };
            }
            None => {
                a.overflowed += 1;
                MINE.store(usize::MAX - 1, Ordering::Relaxed);
                return;
            }
        }
    }
    f(&mut a.entries[i]);
}

/// What one call did, for [`record_call`].
pub struct Call<'a> {
    pub model: &'a str,
    pub provider: &'a str,
    pub sessions: usize,
    pub rows: u64,
    pub tokens: u64,
    pub run_time: Duration,
}

/// Adds one call to this process's entry (after the call), and its memory once a second.
pub fn record_call(call: &Call<'_>) {
    if !preloaded() {
        return;
    }
    let memory = LAST_MEMORY_READ.with(|last| {
        if last
            .get()
            .is_some_and(|t| t.elapsed() < Duration::from_secs(1))
        {
            return None;
        }
        last.set(Some(Instant::now()));
        memory_kb()
    });
    let (waits, wait_us) = WAITS.with(Cell::get);
    // SAFETY: plain call; returns the current transaction's or the statement's time.
    let now = unsafe { pg_sys::GetCurrentTimestamp() };
    with_mine(|e| {
        copy_name(&mut e.model, call.model);
        copy_name(&mut e.provider, call.provider);
        e.sessions = call.sessions as u32;
        e.calls += 1;
        e.rows += call.rows;
        e.tokens += call.tokens;
        e.run_us += call.run_time.as_micros() as u64;
        e.cpu_waits = waits;
        e.cpu_wait_us = wait_us;
        if let Some(priority) = LAST_PRIORITY.with(Cell::get) {
            copy_name(&mut e.priority, priority);
        }
        e.last_call = now;
        if let Some((private, shared)) = memory {
            e.private_kb = private;
            e.shared_kb = shared;
        }
    });
}

/// A call on the CPU runs at `priority` (src/pg/admission.rs reports it; shown as `priority`).
pub fn note_priority(priority: &'static str) {
    LAST_PRIORITY.with(|c| c.set(Some(priority)));
}

/// A run waited `waited` for a CPU run slot (counted as `cpu_waits`, `cpu_wait_us`).
pub fn note_waited(waited: Duration) {
    WAITS.with(|w| {
        let (n, us) = w.get();
        w.set((n + 1, us + waited.as_micros() as u64));
    });
}

/// A wait for a CPU run slot at `priority` begins (`waiting`) or ends (src/pg/admission.rs).
pub fn note_wait(priority: &str, waiting: bool) {
    // SAFETY: plain call; the current time.
    let now = if waiting {
        unsafe { pg_sys::GetCurrentTimestamp() }
    } else {
        0
    };
    with_mine(|e| {
        if waiting {
            copy_name(&mut e.priority, priority);
        }
        e.wait_start = now;
    });
}

/// Sessions dropped while idle (`released` of them) and the memory after that: written by the
/// backend's own main thread on its next call ([`note_idle_releases`]).
pub fn note_idle_releases(released: u32, sessions: usize) {
    with_mine(|e| {
        e.idle_releases += released;
        e.sessions = sessions as u32;
    });
}

/// (private, shared) resident kB of this process from /proc/self/smaps_rollup.
fn memory_kb() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/self/smaps_rollup").ok()?;
    let field = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    Some((
        field("Private_Clean:") + field("Private_Dirty:"),
        field("Shared_Clean:") + field("Shared_Dirty:"),
    ))
}

/// Progress of one `tributary_embed_column` call, cleared when dropped (also on error).
pub struct Progress(bool);

impl Progress {
    /// Starts reporting: `total` rows to embed into `column` of table `rel`.
    pub fn start(rel: pg_sys::Oid, column: &str, total: i64) -> Progress {
        // SAFETY: plain call.
        let now = unsafe { pg_sys::GetCurrentTimestamp() };
        let mut on = false;
        with_mine(|e| {
            e.progress_rel = rel.to_u32();
            copy_name(&mut e.progress_column, column);
            e.progress_total = total;
            e.progress_done = 0;
            e.progress_start = now;
            on = true;
        });
        Progress(on)
    }

    /// `done` rows written so far.
    pub fn update(&self, done: i64) {
        if self.0 {
            with_mine(|e| e.progress_done = done);
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if self.0 {
            with_mine(|e| {
                e.progress_rel = 0;
                e.progress_total = 0;
                e.progress_done = 0;
            });
        }
    }
}

/// A copy of every entry in use, and how many processes found none free.
///
/// Errors: 55000 when tributary is not in `shared_preload_libraries`.
pub fn snapshot(view: &'static str) -> super::error::Result<(Vec<Entry>, u64)> {
    if !preloaded() {
        return Err(super::error::TributaryError::NotPreloaded(view));
    }
    let a = ACTIVITY.share();
    Ok((
        a.entries.iter().filter(|e| e.pid != 0).copied().collect(),
        a.overflowed,
    ))
}
