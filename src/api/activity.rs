//! Cluster-wide views of what tributary does (src/pg/activity.rs): every backend and job worker
//! that has used a model, and the progress of running `tributary_embed_column` calls. Readable
//! by superusers and members of pg_monitor only (and any role a superuser grants them to).

use pgrx::prelude::*;

use crate::pg::activity::{self, name};
use crate::pg::error::OrRaise;

/// `tributary_stat_activity() → table`: one row per backend or job worker that has run a model
/// since it started (needs `shared_preload_libraries`; 55000 otherwise): pid, database and login
/// role (oids), the model and execution provider of its last call, sessions held now, calls,
/// rows, tokens, ms inside ONNX Runtime runs, CPU run slot waits and ms waited
/// (`tributary.max_cpu_runs`), the priority of its current or last call (`interactive`, `bulk`,
/// `background`: `tributary.priority`) and since when it waits for a slot (NULL: not
/// waiting), sessions dropped while idle (`tributary.session_idle_timeout`),
/// private and shared resident memory in MB (from /proc/PID/smaps_rollup, read at most once a
/// second after a call), and its last call's end. Members of pg_monitor only.
#[pg_extern(name = "tributary_stat_activity", volatile, parallel_restricted)]
#[allow(clippy::type_complexity)]
pub(crate) fn tributary_stat_activity_0_7() -> TableIterator<
    'static,
    (
        name!(pid, i32),
        name!(datid, pg_sys::Oid),
        name!(usesysid, pg_sys::Oid),
        name!(model, String),
        name!(execution_provider, String),
        name!(sessions, i32),
        name!(calls, i64),
        name!(rows, i64),
        name!(tokens, i64),
        name!(run_ms, f64),
        name!(cpu_waits, i64),
        name!(cpu_wait_ms, f64),
        name!(priority, Option<String>),
        name!(cpu_wait_start, Option<pgrx::datum::TimestampWithTimeZone>),
        name!(idle_releases, i32),
        name!(private_mb, f64),
        name!(shared_mb, f64),
        name!(last_call, Option<pgrx::datum::TimestampWithTimeZone>),
    ),
> {
    let (entries, _) = activity::snapshot("tributary.stat_activity").or_raise();
    TableIterator::new(entries.into_iter().map(|e| {
        (
            e.pid,
            pg_sys::Oid::from(e.db),
            pg_sys::Oid::from(e.role),
            name(&e.model),
            name(&e.provider),
            e.sessions as i32,
            e.calls as i64,
            e.rows as i64,
            e.tokens as i64,
            e.run_us as f64 / 1e3,
            e.cpu_waits as i64,
            e.cpu_wait_us as f64 / 1e3,
            Some(name(&e.priority)).filter(|p| !p.is_empty()),
            timestamp(e.wait_start),
            e.idle_releases as i32,
            e.private_kb as f64 / 1024.0,
            e.shared_kb as f64 / 1024.0,
            timestamp(e.last_call),
        )
    }))
}

/// `tributary_progress_embed_column() → table`: one row per running `tributary_embed_column`,
/// cluster-wide, as `pg_stat_progress_*` views show theirs: pid, database, table, target column,
/// rows to embed (counted at the start), rows written so far, start time. Updated after every
/// batch. Members of pg_monitor only; 55000 without `shared_preload_libraries`.
#[pg_extern(volatile, parallel_restricted)]
#[allow(clippy::type_complexity)]
fn tributary_progress_embed_column() -> TableIterator<
    'static,
    (
        name!(pid, i32),
        name!(datid, pg_sys::Oid),
        name!(relid, pg_sys::Oid),
        name!(target, String),
        name!(rows_total, i64),
        name!(rows_done, i64),
        name!(started, Option<pgrx::datum::TimestampWithTimeZone>),
    ),
> {
    let (entries, _) = activity::snapshot("tributary.progress_embed_column").or_raise();
    TableIterator::new(
        entries
            .into_iter()
            .filter(|e| e.progress_rel != 0)
            .map(|e| {
                (
                    e.pid,
                    pg_sys::Oid::from(e.db),
                    pg_sys::Oid::from(e.progress_rel),
                    name(&e.progress_column),
                    e.progress_total,
                    e.progress_done,
                    timestamp(e.progress_start),
                )
            }),
    )
}

fn timestamp(t: i64) -> Option<pgrx::datum::TimestampWithTimeZone> {
    // SAFETY: a TimestampTz is an i64 Datum; 0 means never set here.
    (t != 0).then(|| unsafe {
        pgrx::datum::TimestampWithTimeZone::from_datum(pg_sys::Datum::from(t), false)
            .expect("not null")
    })
}

extension_sql!(
    r#"
-- Every backend and job worker using tributary, cluster-wide (needs shared_preload_libraries).
CREATE VIEW tributary.stat_activity AS
SELECT s.pid, d.datname, r.rolname AS usename, a.backend_type, a.application_name, s.model,
       s.execution_provider, s.sessions, s.calls, s.rows, s.tokens, s.run_ms, s.cpu_waits,
       s.cpu_wait_ms, s.priority, s.cpu_wait_start, s.idle_releases, s.private_mb, s.shared_mb,
       s.last_call, a.state
FROM tributary_stat_activity() s
LEFT JOIN pg_catalog.pg_database d ON d.oid = s.datid
LEFT JOIN pg_catalog.pg_roles r ON r.oid = s.usesysid
LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = s.pid;

-- Running tributary_embed_column calls, cluster-wide, like pg_stat_progress_*.
CREATE VIEW tributary.progress_embed_column AS
SELECT p.pid, p.datid, d.datname, p.relid, p.target, p.rows_total, p.rows_done,
       round(100.0 * p.rows_done / nullif(p.rows_total, 0), 1) AS percent, p.started
FROM tributary_progress_embed_column() p
LEFT JOIN pg_catalog.pg_database d ON d.oid = p.datid;

-- Backends holding a CPU run slot (tributary.max_cpu_runs; slots from max_cpu_runs on are kept
-- for interactive runs, tributary.interactive_cpu_runs) or waiting in a priority's queue for one:
-- session-level locks in PostgreSQL's lock table, class 'trib' (1953655138), database 0, objsubid
-- 3 (slots) and 6 (queues: the granted entry is the queue's head, which looks for a free slot).
CREATE VIEW tributary.cpu_runs AS
SELECT CASE WHEN l.objsubid = 3 THEN l.objid::integer END AS slot,
       CASE WHEN l.objsubid = 6 THEN (ARRAY['interactive', 'bulk', 'background'])[l.objid::integer + 1] END AS queue,
       l.pid, l.granted, l.waitstart, a.datname, a.usename, a.backend_type, a.wait_event_type,
       a.wait_event
FROM pg_catalog.pg_locks l
LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.database = 0 AND l.classid = 1953655138 AND l.objsubid IN (3, 6);
GRANT SELECT ON tributary.cpu_runs TO PUBLIC;

-- What other roles do is for monitoring roles only.
REVOKE ALL ON FUNCTION tributary_stat_activity() FROM PUBLIC;
REVOKE ALL ON FUNCTION tributary_progress_embed_column() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tributary_stat_activity() TO pg_monitor;
GRANT EXECUTE ON FUNCTION tributary_progress_embed_column() TO pg_monitor;
REVOKE ALL ON tributary.stat_activity, tributary.progress_embed_column FROM PUBLIC;
GRANT SELECT ON tributary.stat_activity, tributary.progress_embed_column TO pg_monitor;
"#,
    name = "activity_views",
    requires = [tributary_stat_activity_0_7, tributary_progress_embed_column]
);
