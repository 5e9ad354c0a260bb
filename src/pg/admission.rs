//! Cluster-wide admission of model runs on the CPU: at most `tributary.max_cpu_runs` ONNX Runtime
//! runs on the CPU execution provider at once, across every backend and job worker, so that many
//! busy connections share the cores instead of each starting one thread per core on them.
//!
//! As for GPU slots (src/pg/gpu.rs), a slot is a session-level lock in PostgreSQL's lock table
//! (an advisory tag with database 0, class `'trib'`, field 4 = 3, the slot number), so it needs no
//! `shared_preload_libraries`: a backend that exits or crashes frees its slot, a wait is
//! interruptible (cancel, statement_timeout, lock_timeout), and `pg_locks` (the
//! `tributary.cpu_runs` view) shows holders and waiters.
//!
//! A slot is held for one run (one batch of at most `tributary.max_batch_tokens` tokens), not for
//! a whole call: before each run the caller gives its slot back and takes one again, so a long
//! `tributary_embed_column` or a job lets waiting short queries in between its batches (the lock
//! manager grants a released lock to the first waiter, in order). Outside runs (reading rows,
//! writing vectors) nothing is held.

use std::cell::Cell;

use pgrx::pg_sys;

use super::error::TributaryError;
use super::gpu::{lock_slot, slot_tag, unlock_slot};
use super::gucs::{self, CpuOverflow};

thread_local! {
    /// The slot this backend holds, if any.
    static HELD: Cell<Option<u32>> = const { Cell::new(None) };
    /// Runs that had to wait for a slot, and the time waited (µs), for tributary.stat_activity.
    static WAITS: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

/// `pg_locks.objsubid` of CPU run slots (GPU slots use 2).
const CPU_RUN_SLOTS: u16 = 3;

fn acquire(slot: u32, wait: bool) -> bool {
    lock_slot(&slot_tag(CPU_RUN_SLOTS, slot), wait)
}

fn release() {
    if let Some(slot) = HELD.with(Cell::take) {
        // Held: taken in `CpuRuns::before_run`.
        unlock_slot(&slot_tag(CPU_RUN_SLOTS, slot));
    }
}

/// Runs that waited for a slot in this backend, and the time they waited (µs).
pub fn waits() -> (u64, u64) {
    WAITS.with(Cell::get)
}

/// The CPU runs of one call: [`CpuRuns::before_run`] before each ONNX Runtime run; dropping it
/// (also when an error unwinds the call) gives the slot back.
pub struct CpuRuns {
    active: bool,
    admitted: bool,
}

impl CpuRuns {
    /// For a call on a session of the CPU execution provider (`on_cpu`); a GPU session's calls
    /// take no CPU slot.
    pub fn new(on_cpu: bool) -> Self {
        CpuRuns {
            active: on_cpu,
            admitted: false,
        }
    }

    /// Before one run: gives back the slot held since the previous run, then takes a free one.
    /// When none is free: waits on one (`tributary.cpu_overflow = wait`, or any run after the
    /// call's first), or raises 53400 (`error`, first run only: a call once admitted finishes).
    /// Waiting checks for interrupts; lock_timeout and statement_timeout end it with their errors.
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
        if let Some(slot) = (0..cap).find(|&s| acquire(s, false)) {
            HELD.with(|h| h.set(Some(slot)));
            self.admitted = true;
            return;
        }
        if !self.admitted && gucs::cpu_overflow() == CpuOverflow::Error {
            super::error::raise(TributaryError::CpuSlots { cap: cap as usize });
        }
        // Wait on one slot, picked by pid so that waiters spread over the slots; a slot is held
        // for one run, so the wait is about one run of its holder.
        let slot = (unsafe { pg_sys::MyProcPid } as u32) % cap;
        let started = std::time::Instant::now();
        acquire(slot, true);
        let waited = started.elapsed().as_micros() as u64;
        WAITS.with(|w| {
            let (n, us) = w.get();
            w.set((n + 1, us + waited));
        });
        HELD.with(|h| h.set(Some(slot)));
        self.admitted = true;
    }
}

impl Drop for CpuRuns {
    fn drop(&mut self) {
        if self.active {
            release();
        }
    }
}
