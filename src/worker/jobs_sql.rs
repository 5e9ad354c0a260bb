//! The SQL side of jobs that runs in users' sessions, not in workers: the body of
//! `tributary._job_call` and `tributary._run_as` (their `#[pg_extern]`s are in src/worker/mod.rs)
//! and the continuous jobs' trigger `tributary._job_trigger` (C). The job functions themselves
//! are PL/pgSQL in sql/jobs.sql.
//!
//! Whose rights: README, "Security" (src/pg/roles.rs).

use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

use crate::pg::error::{raise, spi_error, OrRaise, TributaryError};
use crate::pg::roles::{as_role, as_user, extension_owner};

/// `tributary._job_call(op, args)`: runs the job function of `op` (`tributary._job_<op>`,
/// `_chunk_job_create`, `_chunk_job_drop`, `_forget_column`, `_predict_job_create`,
/// `_predict_job_drop`) with `(caller, args)` as the
/// extension's owner, `caller` being `GetUserId()`.
///
/// Errors: 22023 unknown op; 42501 inside a security-restricted operation; the job function's.
pub(super) fn job_call(op: &str, args: pgrx::JsonB) -> Option<i64> {
    // (the function it runs as the extension's owner, the public function it serves)
    let (func, public) = match op {
        "create" => ("_job_create", "tributary_job_create()"),
        "pause" => ("_job_pause", "tributary_job_pause()"),
        "resume" => ("_job_resume", "tributary_job_resume()"),
        "cancel" => ("_job_cancel", "tributary_job_cancel()"),
        "drop" => ("_job_drop", "tributary_job_drop()"),
        "chunk_create" => ("_chunk_job_create", "tributary_chunk_job_create()"),
        "chunk_drop" => ("_chunk_job_drop", "tributary_chunk_job_drop()"),
        "forget_column" => ("_forget_column", "tributary_forget_column()"),
        "predict_create" => ("_predict_job_create", "tributary_predict_job_create()"),
        "predict_drop" => ("_predict_job_drop", "tributary_predict_job_drop()"),
        _ => raise(TributaryError::InvalidArgument {
            message: format!("unknown job operation \"{op}\""),
            hint: Some("Call tributary_job_create, _pause, _resume, _cancel or _drop.".into()),
        }),
    };
    // Every operation writes: 25006 in a read-only transaction (a hot standby's), by name.
    let what = std::ffi::CString::new(public).unwrap_or_default();
    crate::pg::spi::require_writable(&what);
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
    // The job functions pin their own search_path; this statement too (issue 34).
    as_role(extension_owner(), || {
        crate::pg::spi::pinned(|| {
            Spi::get_one_with_args::<i64>(
                &format!("SELECT tributary.{func}($1::pg_catalog.oid, $2::pg_catalog.jsonb)"),
                &[caller.into(), args.into()],
            )
            .map_err(spi_error)
            .or_raise()
        })
    })
}

/// `tributary._run_as(role, sql, arg)`: `sql` (no result; `arg` as `$1` when given) as `role`,
/// through [`as_user`](crate::pg::roles::as_user).
pub(super) fn run_as(role: pg_sys::Oid, sql: &str, arg: Option<pgrx::JsonB>) {
    as_user(role, || {
        match arg {
            Some(a) => Spi::run_with_args(sql, &[a.into()]),
            None => Spi::run(sql),
        }
        .map_err(spi_error)
        .or_raise()
    });
}

/// `tributary._run_as_value(role, sql, arg)`: `sql`'s one jsonb value as `role`, through
/// [`as_user`](crate::pg::roles::as_user).
///
/// Its statements reach shards through dblink (sql/shards.sql), whose connect waits in libpq
/// without looking at interrupts (PostgreSQL 15): while they run, libpq's `PGCONNECT_TIMEOUT`
/// is 10 s, or the caller's `statement_timeout` when shorter (whole seconds, at least libpq's
/// 2). libpq reads it only for a connection whose options (the foreign server's and the user
/// mapping's) have no `connect_timeout`, so those win; one already in the environment
/// (the postmaster's) is left alone. The connection string stays dblink's: no password passes
/// through tributary.
pub(super) fn run_as_value(
    role: pg_sys::Oid,
    sql: &str,
    arg: Option<pgrx::JsonB>,
) -> Option<pgrx::JsonB> {
    /// Removes the variable it set when dropped, by an error's unwinding too.
    struct ConnectTimeout(bool);
    impl Drop for ConnectTimeout {
        fn drop(&mut self) {
            if self.0 {
                std::env::remove_var("PGCONNECT_TIMEOUT");
            }
        }
    }
    let _timeout = if std::env::var_os("PGCONNECT_TIMEOUT").is_some() {
        ConnectTimeout(false)
    } else {
        // SAFETY: a plain read of a GUC's variable (ms; 0: none).
        let secs = match u32::try_from(unsafe { pg_sys::StatementTimeout }) {
            Ok(ms) if ms > 0 => ms.div_ceil(1000).clamp(2, 10),
            _ => 10,
        };
        // The backend's own thread; tributary's model threads run only while it waits on a
        // model run, and none reads the environment.
        std::env::set_var("PGCONNECT_TIMEOUT", secs.to_string());
        ConnectTimeout(true)
    };
    as_user(role, || {
        match arg {
            Some(a) => Spi::get_one_with_args::<pgrx::JsonB>(sql, &[a.into()]),
            None => Spi::get_one::<pgrx::JsonB>(sql),
        }
        .map_err(spi_error)
        .or_raise()
    })
}

/// `tributary._job_parts_status(job)`: `tributary._job_parts_of(caller, job)` as the extension's
/// owner, the caller being `GetUserId()` (as for [`job_call`]).
pub(super) fn job_parts_status(job: i64) -> Option<pgrx::JsonB> {
    // SAFETY: a plain read of the session's user state.
    let caller = unsafe { pg_sys::GetUserId() };
    as_role(extension_owner(), || {
        Spi::get_one_with_args::<pgrx::JsonB>(
            "SELECT tributary._job_parts_of($1, $2)",
            &[caller.into(), job.into()],
        )
        .map_err(spi_error)
        .or_raise()
    })
}

/// Whether `tributary._job_sync_owner(bigint)` exists in this database (the extension's SQL is
/// 0.5.0 or later): a library newer than a database's extension serves it until `ALTER
/// EXTENSION tributary UPDATE`.
pub(super) fn job_sync_owner_exists() -> bool {
    crate::pg::spi::select_one::<bool>(
        "SELECT pg_catalog.to_regprocedure('tributary._job_sync_owner(bigint)') IS NOT NULL",
        &[],
    )
    .map_err(spi_error)
    .or_raise()
    .unwrap_or(false)
}

pgrx::extension_sql!(
    r#"
-- The statement-level trigger of continuous jobs (src/worker/jobs_sql.rs, tributary_job_trigger).
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

/// `tributary._job_trigger(job id [, 'via'])`: the AFTER ... FOR EACH STATEMENT trigger of a
/// continuous job (INSERT, UPDATE, DELETE, TRUNCATE on the source, and on every table of a
/// partitioned source's tree: a statement fires the triggers of the table it names only; with
/// `'via'`, on an ancestor of the source, whose statements use the job's `"<op> via"`
/// statements; see `tributary._job_sync_tables` in sql/jobs.sql). Reads the job's statement for the
/// event (`tributary._jobs.enqueue_sql`) as the extension's owner and runs it as the source
/// table's owner, read from the table now (`tributary._job_sync_owner`, which hands the queue to a
/// new owner first), through [`as_user`](crate::pg::roles::as_user), over the transition tables
/// `new_rows`/`old_rows`: whoever writes the source needs no right on the queue, and the owner's
/// types and casts run with the owner's rights only, whoever made the job.
/// A job that is gone or cancelled does nothing.
///
/// Errors: 39P01 when not called as a trigger or without the job id argument.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn tributary_job_trigger(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    let protocol = |msg: &'static str| -> ! {
        pgrx::pg_sys::panic::ErrorReport::new(
            PgSqlErrorCode::ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED,
            msg,
            "tributary_job_trigger",
        )
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
    let (job, via, event) = unsafe {
        let trigger = (*td).tg_trigger;
        if (*trigger).tgnargs < 1 {
            protocol("tributary._job_trigger() needs the job id as its argument");
        }
        let arg = std::ffi::CStr::from_ptr(*(*trigger).tgargs)
            .to_string_lossy()
            .into_owned();
        let Ok(job) = arg.parse::<i64>() else {
            protocol("tributary._job_trigger(): the argument must be a job id")
        };
        // A second argument 'via': the trigger sits on an ancestor of the job's source.
        let via = (*trigger).tgnargs >= 2
            && std::ffi::CStr::from_ptr(*(*trigger).tgargs.add(1)).to_bytes() == b"via";
        (job, via, (*td).tg_event & pg_sys::TRIGGER_EVENT_OPMASK)
    };
    let op = match (event, via) {
        (pg_sys::TRIGGER_EVENT_INSERT, false) => "INSERT",
        (pg_sys::TRIGGER_EVENT_UPDATE, false) => "UPDATE",
        (pg_sys::TRIGGER_EVENT_DELETE, false) => "DELETE",
        (pg_sys::TRIGGER_EVENT_INSERT, true) => "INSERT via",
        (pg_sys::TRIGGER_EVENT_UPDATE, true) => "UPDATE via",
        (pg_sys::TRIGGER_EVENT_DELETE, true) => "DELETE via",
        (_, false) => "TRUNCATE",
        (_, true) => "TRUNCATE via",
    };
    // The table's owner, read from the table (tributary._job_sync_owner, 0.5.0: it also hands
    // the queue to a new owner after ALTER TABLE ... OWNER TO or REASSIGN OWNED); before the
    // extension is updated to 0.5.0, the owner recorded in the job.
    let owner_sql = if job_sync_owner_exists() {
        "tributary._job_sync_owner(id)"
    } else {
        "owner::oid"
    };
    // As the extension's owner under the writer's session: a pinned search_path and qualified
    // operators, or an operator of the writer's would run as the extension's owner (issue 34).
    let found = as_role(extension_owner(), || {
        crate::pg::spi::pinned(|| Spi::connect_mut(|c| {
            let mut rows = c.update(
                &format!(
                    "SELECT {owner_sql}, enqueue_sql OPERATOR(pg_catalog.->>) $2::pg_catalog.text FROM tributary._jobs \
                     WHERE id OPERATOR(pg_catalog.=) $1::pg_catalog.int8 AND state OPERATOR(pg_catalog.<>) 'cancelled'"
                ),
                None,
                &[job.into(), op.into()],
            )?;
            match rows.next() {
                Some(r) => Ok::<_, pgrx::spi::Error>(Some((r.get::<pg_sys::Oid>(1)?, r.get::<String>(2)?))),
                None => Ok(None),
            }
        }))
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
        // The database's idle worker embeds the new rows at commit, not at its next poll.
        if super::registry::preloaded() {
            super::registry::wake_at_commit();
        }
    }
    pg_sys::Datum::from(0usize)
}
