//! Transactions of a background worker and the errors caught in them.
//!
//! A worker has no client to report to: each unit of work runs in [`in_transaction`], which
//! catches the PostgreSQL error (or Rust panic) that aborts it, so the worker can record it and
//! go on. [`error_parts`], [`sqlstate`] and [`describe`] turn a caught error into what the
//! worker logs and stores (`tributary._jobs.last_error`, `tributary._job_errors`).

use std::panic::AssertUnwindSafe;

use pgrx::pg_sys::panic::CaughtError;
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

/// Runs `f` in its own transaction, committed if `f` says so, else rolled back. A PostgreSQL
/// error (or a Rust panic) inside rolls the transaction back and comes back as `Err`; FATAL
/// (SIGTERM) ends the process as in any backend. Only for background workers, outside any
/// transaction.
// CaughtError is pgrx's, and this runs once per transaction: not worth a Box.
#[allow(clippy::result_large_err)]
pub fn in_transaction<R>(f: impl FnOnce() -> (R, bool)) -> Result<R, CaughtError> {
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

/// A caught error's SQLSTATE, message and DETAIL.
pub fn error_parts(e: &CaughtError) -> (PgSqlErrorCode, String, Option<String>) {
    match e {
        CaughtError::PostgresError(r)
        | CaughtError::ErrorReport(r)
        | CaughtError::RustPanic { ereport: r, .. } => (
            r.sql_error_code(),
            r.message().to_owned(),
            r.detail().map(str::to_owned),
        ),
    }
}

/// The five characters of `code` (`22000`).
pub fn sqlstate(code: PgSqlErrorCode) -> String {
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

/// `message (SQLSTATE xxxxx)`, then `: detail` when there is one.
pub fn describe(e: &CaughtError) -> String {
    let (code, message, detail) = error_parts(e);
    format!(
        "{message} (SQLSTATE {}){}",
        sqlstate(code),
        detail.map(|d| format!(": {d}")).unwrap_or_default()
    )
}

/// Logs `e` (LOG level: the server log only) after `context`.
pub fn log_error(context: &str, e: &CaughtError) {
    pgrx::log!("{context}: {}", describe(e));
}

/// Failures that say nothing about the work: try it again later (deadlock, serialization
/// failure, lock not available).
pub fn is_transient(code: PgSqlErrorCode) -> bool {
    use PgSqlErrorCode::*;
    matches!(
        code,
        ERRCODE_T_R_DEADLOCK_DETECTED
            | ERRCODE_T_R_SERIALIZATION_FAILURE
            | ERRCODE_LOCK_NOT_AVAILABLE
    )
}
