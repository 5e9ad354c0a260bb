//! Cluster-wide GPU admission: at most `tributary.max_gpu_sessions` backends hold a GPU session
//! at once, since each costs a CUDA context (hundreds of MB) and a copy of the model in GPU memory.
//!
//! A slot is a session-level lock in PostgreSQL's shared lock table: an advisory lock tag with
//! database 0 (so it is cluster-wide and cannot collide with `pg_advisory_lock`, whose tags carry
//! the current database's oid), class [`LOCK_CLASS`] and the slot number. The lock manager does
//! the rest: a backend that exits or crashes releases its slot, waiting is interruptible and obeys
//! lock_timeout, and `pg_locks` (the `tributary.gpu_sessions` view) shows who holds which slot.
//! This needs no `shared_preload_libraries`.
//!
//! A backend keeps its slot until it exits: the CUDA context that ONNX Runtime creates lives as
//! long as the process, whether or not a session still uses it. `pg_advisory_unlock_all()` and
//! `DISCARD ALL` release every session-level user lock, the slot included; [`ensure_held`] takes
//! it back before the next GPU run.

use std::cell::Cell;

use pgrx::pg_sys;

use super::error::{Result, TributaryError};
use super::gucs::{self, GpuOverflow};

/// `'trib'` as a big-endian u32 (1953655138): the `classid` of tributary's slots in `pg_locks`.
pub const LOCK_CLASS: u32 = u32::from_be_bytes(*b"trib");

thread_local! {
    static SLOT: Cell<Option<u32>> = const { Cell::new(None) };
}

/// The slot this backend holds, if any.
pub fn held_slot() -> Option<u32> {
    SLOT.with(Cell::get)
}

/// `pg_locks.objsubid` of GPU slots (CPU run slots, src/pg/admission.rs, use 3).
const GPU_SLOTS: u16 = 2;

/// The lock tag of slot `slot` of kind `kind` (`pg_locks.objsubid`): an advisory tag with
/// database 0 and class [`LOCK_CLASS`].
pub(super) fn slot_tag(kind: u16, slot: u32) -> pg_sys::LOCKTAG {
    pg_sys::LOCKTAG {
        locktag_field1: 0,
        locktag_field2: LOCK_CLASS,
        locktag_field3: slot,
        locktag_field4: kind,
        locktag_type: pg_sys::LockTagType::LOCKTAG_ADVISORY as u8,
        locktag_lockmethodid: pg_sys::USER_LOCKMETHOD as u8,
    }
}

/// Takes slot `tag` as an exclusive session lock: at once or not at all, or (`wait`) waiting for
/// it, interruptibly. False when not taken.
pub(super) fn lock_slot(tag: &pg_sys::LOCKTAG, wait: bool) -> bool {
    // SAFETY: a well-formed advisory tag; a session lock outlives transactions and is released by
    // its holder or by the lock manager at backend exit.
    let r =
        unsafe { pg_sys::LockAcquire(tag, pg_sys::ExclusiveLock as pg_sys::LOCKMODE, true, !wait) };
    r != pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL
}

/// Releases slot `tag`, taken by [`lock_slot`].
pub(super) fn unlock_slot(tag: &pg_sys::LOCKTAG) {
    // SAFETY: the caller holds this session lock.
    unsafe { pg_sys::LockRelease(tag, pg_sys::ExclusiveLock as pg_sys::LOCKMODE, true) };
}

fn tag(slot: u32) -> pg_sys::LOCKTAG {
    slot_tag(GPU_SLOTS, slot)
}

fn try_lock(slot: u32, wait: bool) -> bool {
    lock_slot(&tag(slot), wait)
}

/// Asks for a GPU slot before a session is created on a GPU. `Ok(true)`: admitted (or no cap);
/// `Ok(false)`: every slot is taken and `tributary.gpu_overflow = cpu`, so run on the CPU.
///
/// Errors: 53400 when every slot is taken and `tributary.gpu_overflow = error`. With `wait`, a
/// cancel, statement_timeout or lock_timeout ends the wait with their usual errors.
pub fn admit() -> Result<bool> {
    if held_slot().is_some() {
        return Ok(true);
    }
    let Some(cap) = gucs::max_gpu_sessions() else {
        return Ok(true);
    };
    for slot in 0..cap as u32 {
        if try_lock(slot, false) {
            SLOT.with(|s| s.set(Some(slot)));
            return Ok(true);
        }
    }
    match gucs::gpu_overflow() {
        GpuOverflow::Cpu => Ok(false),
        GpuOverflow::Error => Err(TributaryError::GpuSlots { cap }),
        GpuOverflow::Wait if cap > 0 => {
            // Wait on one slot, picked by pid so that waiters spread over the slots.
            let slot = (unsafe { pg_sys::MyProcPid } as u32) % cap as u32;
            try_lock(slot, true);
            SLOT.with(|s| s.set(Some(slot)));
            Ok(true)
        }
        GpuOverflow::Wait => Err(TributaryError::GpuSlots { cap }),
    }
}

/// Before a run on a GPU session: takes the slot back if it was released under us
/// (`pg_advisory_unlock_all()`, `DISCARD ALL`). If another backend took it meanwhile, any free
/// slot will do; if none is free this backend keeps running over the cap (its CUDA context
/// exists and cannot be given back): the returned WARNING text says so, for the caller to raise
/// once it holds no lock of its own (a WARNING can raise a pending cancel).
pub fn ensure_held() -> Option<String> {
    let slot = held_slot()?;
    // SAFETY: a well-formed tag; LockHeldByMe only reads this backend's local lock table.
    let mode = pg_sys::ExclusiveLock as pg_sys::LOCKMODE;
    #[cfg(any(feature = "pg15", feature = "pg16"))]
    let held = unsafe { pg_sys::LockHeldByMe(&tag(slot), mode) };
    // PostgreSQL 17 added `orstronger`; false: exactly this mode, as before.
    #[cfg(any(feature = "pg17", feature = "pg18"))]
    let held = unsafe { pg_sys::LockHeldByMe(&tag(slot), mode, false) };
    if held {
        return None;
    }
    let cap = gucs::max_gpu_sessions().unwrap_or(0) as u32;
    let taken = std::iter::once(slot)
        .chain((0..cap).filter(|&s| s != slot))
        .find(|&s| try_lock(s, false));
    match taken {
        Some(s) => {
            SLOT.with(|c| c.set(Some(s)));
            None
        }
        None => {
            SLOT.with(|c| c.set(None));
            Some(format!(
                "tributary: this backend's GPU slot was released (pg_advisory_unlock_all or DISCARD ALL) and all {cap} slots are now taken; it keeps its GPU session over tributary.max_gpu_sessions"
            ))
        }
    }
}

/// Gives the slot back: only when no GPU session was created after all (e.g. `auto` found no GPU),
/// since a CUDA context, once made, stays until the backend exits.
pub fn release() {
    if let Some(slot) = SLOT.with(|s| s.take()) {
        unlock_slot(&tag(slot));
    }
}
