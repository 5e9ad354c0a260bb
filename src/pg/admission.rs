//! Cluster-wide admission of model runs on the CPU: at most `tributary.max_cpu_runs` ONNX Runtime
//! runs on the CPU execution provider at once, across every backend and job worker, so that many
//! busy connections share the cores instead of each starting one thread per core on them; plus
//! `tributary.interactive_cpu_runs` slots that only interactive runs may take.
//!
//! As for GPU slots (src/pg/gpu.rs), a slot is a session-level lock in PostgreSQL's lock table
//! (an advisory tag with database 0, class `'trib'`, field 4 = 3, the slot number), so it needs no
//! `shared_preload_libraries`: a backend that exits or crashes frees its slot, and `pg_locks` (the
//! `tributary.cpu_runs` view) shows holders and waiters.
//!
//! A slot is held for one run (one batch of at most `tributary.max_batch_tokens` tokens), not for
//! a whole call: before each run the caller gives its slot back and takes one again, so a long
//! `tributary_embed_column` or a job lets waiting short queries in between its batches. Outside
//! runs (reading rows, writing vectors) nothing is held.
//!
//! **Priority.** Each call runs at one of three priorities ([`Class`]: interactive, bulk,
//! background; `tributary.priority`, where `auto` picks by the call's size). Waiters of one
//! priority queue in arrival order on that priority's queue lock (field 4 = 6, the priority's
//! number): the lock manager keeps the order, and only the head of each queue looks for a free
//! slot, every millisecond (interactive) or two. A head takes a free slot only when no queue of a
//! higher priority has a waiter, so a free slot goes to interactive work first, then bulk, then
//! background. Interactive runs first try the slots kept for them, which bulk never takes: with
//! one kept slot, a short query runs beside bulk runs instead of waiting for one to end (measured
//! in benches/priority.sh, BENCHMARKS.md "Priorities"), and costs them only the CPU time it uses.
//!
//! **No starvation.** The head of the bulk or background queue that has spent [`PROMOTE_AFTER`]
//! giving way (waiting while work of a higher priority waited too) joins the interactive queue,
//! in arrival order behind the interactive waiters already there, and takes the next free shared
//! slot from there: each run of bulk or background work gives way for at most that long plus the
//! interactive waiters ahead of it then, however many short queries arrive.
//!
//! Waiting checks for interrupts (cancel, statement_timeout) and obeys lock_timeout (55P03);
//! `tributary.stat_activity` shows each backend's priority and since when it waits.

use std::cell::Cell;
use std::time::{Duration, Instant};

use pgrx::pg_sys;

use super::error::TributaryError;
use super::gpu::{lock_slot, slot_tag, unlock_slot};
use super::gucs::{self, CpuOverflow, Priority};

thread_local! {
    /// The slot this backend holds, if any.
    static HELD: Cell<Option<u32>> = const { Cell::new(None) };
}

/// `pg_locks.objsubid` of CPU run slots (GPU slots use 2).
const CPU_RUN_SLOTS: u16 = 3;
/// `pg_locks.objsubid` of the priorities' queues; `objid` is the [`Class`]'s number.
const QUEUES: u16 = 6;
/// How long the head of the bulk or background queue waits while work of a higher priority
/// waits too before it joins the interactive queue (the bound that keeps a stream of short
/// queries from starving bulk work).
pub const PROMOTE_AFTER: Duration = Duration::from_secs(1);

/// The priority a call's runs wait at, highest first (`objid` of its queue in `pg_locks`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Class {
    Interactive = 0,
    Bulk = 1,
    Background = 2,
}

impl Class {
    pub fn name(self) -> &'static str {
        match self {
            Class::Interactive => "interactive",
            Class::Bulk => "bulk",
            Class::Background => "background",
        }
    }

    /// The priorities above this one.
    fn higher(self) -> &'static [Class] {
        match self {
            Class::Interactive => &[],
            Class::Bulk => &[Class::Interactive],
            Class::Background => &[Class::Interactive, Class::Bulk],
        }
    }
}

/// Whether `texts` fit in `limit` estimated tokens, for `tributary.priority = auto`: each text's
/// bytes / 4 (English averages about 4 bytes per WordPiece token), at most the model's window of
/// `max_length` tokens, plus 2 special tokens ([CLS], [SEP]) per text. Stops reading at the
/// first text past the limit.
fn fits(texts: &[&str], max_length: usize, limit: usize) -> bool {
    let mut total = 0usize;
    texts.iter().all(|t| {
        total += (t.len() / 4).min(max_length) + 2;
        total <= limit
    })
}

/// The priority of a call of `texts` for a model with a window of `max_length` tokens under
/// `tributary.priority`: `auto` is background in a background worker (jobs), interactive up to
/// `tributary.interactive_tokens` estimated tokens ([`fits`]), bulk above.
pub fn class_of(texts: &[&str], max_length: usize) -> Class {
    match gucs::priority() {
        Priority::Interactive => Class::Interactive,
        Priority::Bulk => Class::Bulk,
        Priority::Background => Class::Background,
        Priority::Auto => {
            // SAFETY: a plain read of a backend global. (MyBackendType, not IsBackgroundWorker:
            // PostgreSQL 17 replaced that variable with a macro over MyBackendType.)
            if unsafe { pg_sys::MyBackendType } == pg_sys::BackendType::B_BG_WORKER {
                Class::Background
            } else if fits(texts, max_length, gucs::interactive_tokens()) {
                Class::Interactive
            } else {
                Class::Bulk
            }
        }
    }
}

fn acquire(slot: u32, wait: bool) -> bool {
    lock_slot(&slot_tag(CPU_RUN_SLOTS, slot), wait)
}

fn release() {
    if let Some(slot) = HELD.with(Cell::take) {
        // Held: taken in `CpuRuns::before_run`.
        unlock_slot(&slot_tag(CPU_RUN_SLOTS, slot));
    }
}

/// Takes the first free slot of `slots`, without waiting.
fn take_free(slots: std::ops::Range<u32>) -> Option<u32> {
    let slot = slots.into_iter().find(|&s| acquire(s, false))?;
    HELD.with(|h| h.set(Some(slot)));
    Some(slot)
}

/// Whether this backend holds `tag` (its local lock table: granted, and not yet released).
fn held_by_me(tag: &pg_sys::LOCKTAG) -> bool {
    let mode = pg_sys::ExclusiveLock as pg_sys::LOCKMODE;
    // SAFETY: a well-formed tag; LockHeldByMe only reads this backend's local lock table.
    #[cfg(any(feature = "pg15", feature = "pg16"))]
    let held = unsafe { pg_sys::LockHeldByMe(tag, mode) };
    // PostgreSQL 17 added `orstronger`; false: exactly this mode.
    #[cfg(any(feature = "pg17", feature = "pg18"))]
    let held = unsafe { pg_sys::LockHeldByMe(tag, mode, false) };
    held
}

/// A place in a priority's queue: held by the queue's head, waited for by the others in order;
/// dropping it (also when an error unwinds) leaves the queue. Made only once its lock is granted
/// (each value releases it once): never build one to find out whether a queue is free.
struct InQueue(Class);

impl InQueue {
    fn tag(class: Class) -> pg_sys::LOCKTAG {
        slot_tag(QUEUES, class as u32)
    }

    /// The head of `class`'s queue if nobody is in it, else `None`.
    fn try_head(class: Class) -> Option<InQueue> {
        // `then`, not `then_some`: an `InQueue` made when the lock was not granted would release
        // it on drop ("you don't own a lock of type ExclusiveLock").
        lock_slot(&Self::tag(class), false).then(|| InQueue(class))
    }

    /// Waits in `class`'s queue, in arrival order, until this backend is its head.
    ///
    /// A cancel, statement_timeout or lock_timeout that ends the wait raises an error; when the
    /// lock was granted just before it, PostgreSQL records it as held (LockErrorCleanup) although
    /// no `InQueue` owns it: then it is given back here as the error unwinds, or the queue would
    /// stay blocked until this backend exits.
    fn wait_head(class: Class) -> InQueue {
        struct Waiting(pg_sys::LOCKTAG);
        impl Drop for Waiting {
            fn drop(&mut self) {
                if held_by_me(&self.0) {
                    unlock_slot(&self.0);
                }
            }
        }
        let waiting = Waiting(Self::tag(class));
        // Else the guard could give back a hold that is not this wait's.
        debug_assert!(
            !held_by_me(&waiting.0),
            "already in the {} queue",
            class.name()
        );
        lock_slot(&waiting.0, true);
        // Granted: from here the `InQueue` releases it.
        std::mem::forget(waiting);
        InQueue(class)
    }

    /// Whether another backend is in `class`'s queue.
    fn occupied(class: Class) -> bool {
        // Taken (and given back at once) when it was empty.
        Self::try_head(class).is_none()
    }
}

impl Drop for InQueue {
    fn drop(&mut self) {
        unlock_slot(&Self::tag(self.0));
    }
}

/// Whether a backend waits at a priority above `class`.
fn higher_waiting(class: Class) -> bool {
    class.higher().iter().any(|&c| InQueue::occupied(c))
}

/// Sleeps `ms` on this backend's latch, then checks for interrupts.
fn nap(ms: i64) {
    // SAFETY: standard latch wait on this process's latch; interrupts are checked right after.
    unsafe {
        pg_sys::WaitLatch(
            pg_sys::MyLatch,
            (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH) as i32,
            ms as std::ffi::c_long,
            pg_sys::PG_WAIT_EXTENSION,
        );
        pg_sys::ResetLatch(pg_sys::MyLatch);
    }
    pgrx::check_for_interrupts!();
}

/// The CPU runs of one call: [`CpuRuns::before_run`] before each ONNX Runtime run; dropping it
/// (also when an error unwinds the call) gives the slot back.
pub struct CpuRuns {
    active: bool,
    admitted: bool,
    class: Class,
}

impl CpuRuns {
    /// For a call at priority `class` ([`class_of`]) on a session of the CPU execution provider
    /// (`on_cpu`); a GPU session's calls take no CPU slot.
    pub fn new(on_cpu: bool, class: Class) -> Self {
        if on_cpu {
            super::activity::note_priority(class.name());
        }
        CpuRuns {
            active: on_cpu,
            admitted: false,
            class,
        }
    }

    /// Before one run: gives back the slot held since the previous run, then takes a free one
    /// (interactive runs first among the `tributary.interactive_cpu_runs` kept slots). When none
    /// is free, or another backend of the same or a higher priority waits: waits in this
    /// priority's queue (`tributary.cpu_overflow = wait`, or any run after the call's first), or
    /// raises 53400 (`error`, first run only: a call once admitted finishes). Waiting checks for
    /// interrupts; lock_timeout (55P03) and statement_timeout end it.
    pub fn before_run(&mut self) {
        if !self.active {
            return;
        }
        release();
        let Some(cap) = gucs::max_cpu_runs() else {
            return;
        };
        let cap = cap as u32;
        if cap == 0 {
            // Cannot happen (the setting's minimum is 1 when capped); treat as no cap.
            return;
        }
        // Slots cap.. are kept for interactive runs; a free one is taken without queueing (no
        // other priority may take it, so nobody waits for it but interactive work).
        let kept = gucs::interactive_cpu_runs() as u32;
        if self.class == Class::Interactive && take_free(cap..cap + kept).is_some() {
            self.admitted = true;
            return;
        }
        // At once: nobody waits at this priority or above, and a shared slot is free.
        let head = InQueue::try_head(self.class);
        if head.is_some() && !higher_waiting(self.class) && take_free(0..cap).is_some() {
            self.admitted = true;
            return;
        }
        if !self.admitted && gucs::cpu_overflow() == CpuOverflow::Error {
            drop(head);
            super::error::raise(TributaryError::CpuSlots { cap: cap as usize });
        }
        self.wait(head, cap, kept);
        self.admitted = true;
    }

    /// Waits in the queue of this call's priority until its head finds a slot it may take.
    fn wait(&self, head: Option<InQueue>, cap: u32, kept: u32) {
        let started = Instant::now();
        super::activity::note_wait(self.class.name(), true);
        // Ends the visible wait also when an error or cancel unwinds out of it.
        struct Visible;
        impl Drop for Visible {
            fn drop(&mut self) {
                super::activity::note_wait("", false);
            }
        }
        let _visible = Visible;
        // SAFETY: a plain read of a setting of this backend.
        let lock_timeout = unsafe { pg_sys::LockTimeout };
        let mut queue = head.unwrap_or_else(|| InQueue::wait_head(self.class));
        let mut at = self.class;
        // Interactive runs may also take the kept slots; a promoted bulk run may not.
        let slots = if self.class == Class::Interactive {
            0..cap + kept
        } else {
            0..cap
        };
        // Time this head has spent while work of a higher priority waited too.
        let mut yielded = Duration::ZERO;
        let mut last = Instant::now();
        loop {
            let behind = at != Class::Interactive && higher_waiting(at);
            if behind {
                yielded += last.elapsed();
            }
            last = Instant::now();
            if !behind && take_free(slots.clone()).is_some() {
                break;
            }
            let waited = started.elapsed();
            if lock_timeout > 0 && waited.as_millis() >= lock_timeout as u128 {
                drop(queue);
                super::error::raise(TributaryError::SlotTimeout {
                    waited_ms: waited.as_millis() as u64,
                    priority: self.class.name(),
                });
            }
            if at != Class::Interactive && yielded >= PROMOTE_AFTER {
                // Waited long enough: next in line behind the interactive waiters.
                drop(queue);
                queue = InQueue::wait_head(Class::Interactive);
                at = Class::Interactive;
                continue;
            }
            nap(if at == Class::Interactive { 1 } else { 2 });
        }
        drop(queue);
        super::activity::note_waited(started.elapsed());
    }
}

impl Drop for CpuRuns {
    fn drop(&mut self) {
        if self.active {
            release();
        }
    }
}
