//! PostgreSQL glue: settings, errors, the model catalog and session cache, vector datums, table
//! descriptions, roles, background workers' transactions.

pub mod activity;
pub mod admission;
pub mod catalog;
pub mod error;
pub mod gpu;
pub mod graph_cache;
pub mod gucs;
pub mod name;
pub mod record;
pub mod regclass;
pub mod relation;
pub mod roles;
pub mod spi;
pub mod values;
pub mod vector;
pub mod xact;

/// Whether a cancel, statement_timeout or terminate is pending for this backend: the flags the
/// signal handlers set, only read (no `longjmp`), so any thread may call it; the backend's own
/// thread then raises the error with `CHECK_FOR_INTERRUPTS`.
pub fn interrupt_pending() -> bool {
    // SAFETY: sig_atomic_t flags set by signal handlers; read only, volatile.
    unsafe {
        std::ptr::read_volatile(std::ptr::addr_of!(pgrx::pg_sys::InterruptPending)) != 0
            && (std::ptr::read_volatile(std::ptr::addr_of!(pgrx::pg_sys::QueryCancelPending)) != 0
                || std::ptr::read_volatile(std::ptr::addr_of!(pgrx::pg_sys::ProcDiePending)) != 0)
    }
}
