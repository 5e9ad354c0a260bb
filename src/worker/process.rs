//! What every background worker of tributary's (the launcher and the job workers) does as a
//! process: signal handlers, waiting on its latch, configuration reloads, the postmaster's
//! death, and what `pg_stat_activity` shows. Apart from the loops that use it (runner,
//! launcher, batch), so that none of them imports another.

use std::ffi::CString;

use pgrx::prelude::*;

/// Shows `what` in `pg_stat_activity.query` (and `state`).
pub(super) fn report_activity(state: pg_sys::BackendState::Type, what: &str) {
    let c = CString::new(what).unwrap_or_default();
    // SAFETY: pgstat copies the string.
    unsafe { pg_sys::pgstat_report_activity(state, c.as_ptr()) };
}

// PostgreSQL 18's backend headers make pqsignal a macro for pqsignal_be.
#[cfg(not(feature = "pg18"))]
pub(super) use pg_sys::pqsignal;
#[cfg(feature = "pg18")]
pub(super) use pg_sys::pqsignal_be as pqsignal;

/// PostgreSQL's own signal handlers, by their C symbols (pg_sys wraps functions in Rust ones,
/// which cannot be handed to pqsignal), and what pgrx does not bind of storage/pmsignal.h.
pub(super) mod signals {
    unsafe extern "C-unwind" {
        pub fn die(signal: std::ffi::c_int);
        pub fn StatementCancelHandler(signal: std::ffi::c_int);
        pub fn SignalHandlerForConfigReload(signal: std::ffi::c_int);
        pub fn PostmasterIsAliveInternal() -> bool;
    }
    unsafe extern "C" {
        /// Set by the parent-death signal (PR_SET_PDEATHSIG) when the postmaster may be gone.
        pub static postmaster_possibly_dead: std::ffi::c_int;
    }
}

/// PostgreSQL's `PostmasterIsAlive()` (a static inline in storage/pmsignal.h): a flag set by
/// the parent-death signal, and only when it is set, the check of the postmaster's pipe.
pub(super) fn postmaster_alive() -> bool {
    // SAFETY: a sig_atomic_t written by a signal handler, read volatile as the C inline does;
    // PostmasterIsAliveInternal reads the postmaster's pipe.
    unsafe {
        std::ptr::read_volatile(&raw const signals::postmaster_possibly_dead) == 0
            || signals::PostmasterIsAliveInternal()
    }
}

/// Ends this process (exit status 1, as `WL_EXIT_ON_PM_DEATH` does; the open transaction is
/// rolled back by the exit callbacks) when the postmaster is gone: a worker must not go on
/// committing batches to a cluster that is down, and PostgreSQL does not start again while
/// processes of the old server hold its shared memory.
pub(super) fn exit_if_postmaster_died() {
    if !postmaster_alive() {
        // SAFETY: proc_exit runs the exit callbacks (transaction abort, slot release) and exits.
        unsafe { pg_sys::proc_exit(1) };
    }
}

/// PostgreSQL's signal handlers for a background worker: SIGTERM (shutdown,
/// `pg_terminate_backend`) ends the process at the next interrupt check with a FATAL error, exit
/// status 1 (so a registered worker with a restart time is started again; during a shutdown the
/// postmaster starts nothing); SIGINT cancels the current statement; SIGHUP asks for a reload.
pub(super) fn attach_signal_handlers() {
    // SAFETY: installing PostgreSQL's own handlers, then unblocking signals, as bgworkers do.
    unsafe {
        pqsignal(pg_sys::SIGTERM as i32, Some(signals::die));
        pqsignal(pg_sys::SIGINT as i32, Some(signals::StatementCancelHandler));
        pqsignal(
            pg_sys::SIGHUP as i32,
            Some(signals::SignalHandlerForConfigReload),
        );
        pg_sys::BackgroundWorkerUnblockSignals();
    }
}

/// Reloads the configuration if a SIGHUP asked for it (in a main loop, between transactions).
pub(super) fn reload_config_if_asked() {
    // SAFETY: the flag is set by the SIGHUP handler; reloading is done in the main loop.
    unsafe {
        if pg_sys::ConfigReloadPending != 0 {
            pg_sys::ConfigReloadPending = 0;
            pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP);
        }
    }
}

/// Waits until this process's latch is set or `ms` pass; exits if the postmaster dies
/// (`WL_EXIT_ON_PM_DEATH`). Interrupts (SIGTERM) are handled by the caller's next check.
pub(super) fn wait(ms: i64) {
    // SAFETY: standard latch wait on this process's latch.
    unsafe {
        pg_sys::WaitLatch(
            pg_sys::MyLatch,
            (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH) as i32,
            ms as std::ffi::c_long,
            pg_sys::PG_WAIT_EXTENSION,
        );
        pg_sys::ResetLatch(pg_sys::MyLatch);
    }
}
