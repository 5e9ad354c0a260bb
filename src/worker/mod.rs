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
//! Signals: SIGTERM (shutdown, `pg_terminate_backend`) ends a worker at the next interrupt
//! check, that is between two ONNX Runtime runs, aborting the batch; SIGINT
//! (`pg_cancel_backend`) aborts the batch and the worker exits; the launcher starts another if
//! the work is still there. A batch never commits half: its claim, vectors and progress go
//! together or not at all. SIGTERM ends the launcher too, with exit status 1, so that the
//! postmaster starts it again after 5 s (and after a crash restart); the new launcher asks every
//! database for a worker again, as at start, which is how workers terminated with it are
//! replaced. When the postmaster dies, the launcher and the workers exit at their next wait or
//! batch: a worker checks that the postmaster lives before each batch and again before the
//! batch commits.
//!
//! An idle worker (continuous jobs, nothing queued) stays, with its model sessions: it looks at
//! the queues every `tributary.job_poll_interval`, and at once when a continuous job's trigger
//! queued rows (the trigger's transaction sets the database's workers' latches at commit).
//!
//! Modules, split by concern as pg_cron splits its launcher from its job metadata:
//!
//! - `registry`: the shared memory (databases asking for workers, running workers' slots).
//! - `launcher`: the launcher's main loop, the list of databases, starting workers.
//! - `process`: what every worker does as a process (signals, latch waits, reloads, the
//!   postmaster's death, `pg_stat_activity`).
//! - `runner`: a worker's main loop (slot, plan / run / wait).
//! - `catalog`: the job catalog as a worker reads it (`tributary._jobs`): planning, loading a job.
//! - `batch`: running a job's batches, bisecting failures, recording failed rows and jobs.
//! - `predict`: refreshing predict jobs (sql/learn_jobs.sql): a predictor's column kept as
//!   `tributary_predict_column` would fill it, after the statements that may change it.
//! - `jobs_sql`: what runs in users' sessions: the bodies of `tributary._job_call` and
//!   `tributary._run_as`, and the continuous jobs' trigger (C). Apart from `catalog`, since
//!   they are called by sql/jobs.sql, not by workers.
//!
//! This file holds the SQL functions (`#[pg_extern]`, thin) and `init`. Transactions, caught
//! errors and role switches are in `pg/` (src/pg/xact.rs, src/pg/roles.rs); rows become vectors
//! through `service/` (src/service/vectors.rs), as for `tributary_embed_column`.

use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

use crate::pg::gucs;

mod batch;
mod catalog;
mod jobs_sql;
mod launcher;
mod predict;
mod process;
mod registry;
mod runner;

pub use jobs_sql::{pg_finfo_tributary_job_trigger, tributary_job_trigger};
pub use launcher::tributary_launcher_main;
pub use runner::tributary_worker_main;

/// From `_PG_init`: shared memory and the launcher, when loaded by `shared_preload_libraries`.
pub fn init() {
    // SAFETY: read-only global of the postmaster, set while it loads preload libraries.
    if !unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        return;
    }
    registry::init_shmem();
    launcher::register();
}

/// `tributary._wake_launcher() → boolean`: asks the launcher for a worker in this database when
/// the current transaction commits (so the worker sees the job). False, with a WARNING, when
/// tributary is not in `shared_preload_libraries` (jobs then wait until it is).
#[pg_extern(volatile, parallel_unsafe)]
fn _wake_launcher() -> bool {
    if !registry::preloaded() {
        pgrx::pg_sys::panic::ErrorReport::new(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "tributary is not in shared_preload_libraries: jobs wait until it is",
            "tributary",
        )
        .set_hint("Add tributary to shared_preload_libraries in postgresql.conf and restart PostgreSQL; the job starts then.")
        .report(PgLogLevel::WARNING);
        return false;
    }
    registry::wake_at_commit();
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
/// touches the owner's tables or values it hands to `tributary._run_as`.
///
/// Errors: 22023 unknown op; 42501 inside a security-restricted operation (an index expression
/// or maintenance command running another role's code); the job function's own errors.
#[pg_extern(volatile, parallel_unsafe)]
fn _job_call(op: &str, args: pgrx::JsonB) -> Option<i64> {
    jobs_sql::job_call(op, args)
}

/// `tributary._run_as(role oid, sql text, arg jsonb DEFAULT NULL)`: runs `sql` (no result; `arg`
/// as `$1` when given) as `role`, as [`as_user`](crate::pg::roles::as_user) does: security-restricted, with the default
/// search_path. Used by the job functions (as the extension's owner) for every statement over a
/// job owner's tables and key values. Not granted to PUBLIC.
#[pg_extern(volatile, parallel_unsafe)]
fn _run_as(role: pg_sys::Oid, sql: &str, arg: default!(Option<pgrx::JsonB>, "NULL")) {
    jobs_sql::run_as(role, sql, arg);
}

/// `tributary._run_as_value(role oid, sql text, arg jsonb DEFAULT NULL) → jsonb`: as
/// `tributary._run_as`, for a statement that returns one jsonb value (its first column of its
/// first row; NULL when it returns no row). Used by the sharded jobs' functions (sql/shards.sql)
/// to reach a shard through dblink with the job owner's user mapping, with libpq's connect
/// timeout at 10 s unless the foreign server's own `connect_timeout` says otherwise (see
/// `jobs_sql::run_as_value`). Not granted to PUBLIC.
#[pg_extern(volatile, parallel_unsafe)]
fn _run_as_value(
    role: pg_sys::Oid,
    sql: &str,
    arg: default!(Option<pgrx::JsonB>, "NULL"),
) -> Option<pgrx::JsonB> {
    jobs_sql::run_as_value(role, sql, arg)
}

/// `tributary._job_parts_status(job bigint) → jsonb`: the parts of a sharded job (sql/shards.sql)
/// with each shard's own view of its part (state, rows done, queued and failed, last error), read
/// now through the foreign servers as the job's owner: a JSON array, one object per part; a shard
/// that cannot be reached or has not answered in 10 s gives `"state": "unreachable"` and the
/// error, an answer that is not a part's state `"state": "invalid"` and why. The caller's
/// `statement_timeout` and `pg_cancel_backend` end it (57014). NULL when the calling
/// role (`GetUserId()`) is not a member of the job's owner, or the job is not a sharded one. For
/// the views `tributary.jobs` and `tributary.job_parts`.
#[pg_extern(volatile, parallel_unsafe)]
fn _job_parts_status(job: i64) -> Option<pgrx::JsonB> {
    jobs_sql::job_parts_status(job)
}

/// `tributary._job_service() → (workers_in_database integer, waiting_for text)`: what can serve
/// this database's jobs now, for the `tributary.jobs` view (which turns a `running` job that no
/// worker serves into `waiting`). `workers_in_database`: job workers running in this database
/// (embedding, or watching continuous jobs); `waiting_for`: NULL, or what jobs without a worker
/// wait for: `tributary in shared_preload_libraries` (not loaded), `tributary.max_workers above
/// 0`, `the tributary launcher` (not running; after an exit it is restarted within 5 s), `a
/// free background worker slot (max_worker_processes)`, `a free job worker
/// (tributary.max_workers)`. Counts and reasons only, no pids or jobs: granted to PUBLIC.
#[pg_extern(volatile, parallel_restricted)]
fn _job_service() -> TableIterator<
    'static,
    (
        name!(workers_in_database, i32),
        name!(waiting_for, Option<String>),
    ),
> {
    // SAFETY: plain read of the session's database.
    let db = unsafe { pg_sys::MyDatabaseId }.to_u32();
    let s = registry::service(db);
    let waiting_for = if !s.preloaded {
        Some("tributary in shared_preload_libraries")
    } else if gucs::max_workers() == 0 {
        Some("tributary.max_workers above 0")
    } else if s.launcher_pid == 0 {
        Some("the tributary launcher")
    } else {
        match s.shortage {
            registry::Shortage::NoSlot => {
                Some("a free background worker slot (max_worker_processes)")
            }
            registry::Shortage::MaxWorkers => Some("a free job worker (tributary.max_workers)"),
            registry::Shortage::None => None,
        }
    };
    TableIterator::once((s.workers_in_db, waiting_for.map(str::to_owned)))
}

/// `tributary.workers() → (pid, database oid, job)`: the running job workers. Superusers and
/// members of pg_read_all_stats see every worker of every database; other roles see the
/// workers of this database that run jobs of roles they are members of (others' jobs, their ids
/// and their workers are not visible).
#[pg_extern(stable, parallel_safe)]
fn workers() -> TableIterator<
    'static,
    (
        name!(pid, i32),
        name!(datid, pg_sys::Oid),
        name!(job, Option<i64>),
    ),
> {
    // SAFETY: plain reads of the session's user and database.
    let (caller, db) = unsafe { (pg_sys::GetUserId(), pg_sys::MyDatabaseId) };
    // pg_read_all_stats (pg_authid_d.h: ROLE_PG_READ_ALL_STATS).
    const READ_ALL_STATS: u32 = 3375;
    // SAFETY: catalog lookups in a transaction.
    let all = unsafe {
        pg_sys::superuser_arg(caller)
            || pg_sys::has_privs_of_role(caller, pg_sys::Oid::from(READ_ALL_STATS))
    };
    let rows: Vec<_> = registry::visible_workers(caller, db, all)
        .into_iter()
        .map(|w| (w.pid, w.db, w.job))
        .collect();
    TableIterator::new(rows)
}
