//! Predict jobs (sql/learn_jobs.sql): a predictor's column kept as `tributary_predict_column`
//! would fill it now. Statement-level triggers queue a row in `tributary._predict_dirty`; a
//! worker refreshes a job with queued rows at most once per `tributary.job_poll_interval`.
//!
//! One refresh is one transaction: lock the job (`FOR NO KEY UPDATE SKIP LOCKED`: writers that
//! queue rows meanwhile only take a key-share lock on it, for the queue's foreign key), take
//! (delete) the queued rows it sees, run `tributary_predict_column(predictor, target)` as the
//! table's owner (read from pg_class now, through [`as_user`]) — or, when every queued row
//! carries the changed rows of the job's table (`tributary._predict_trigger_rows`: a table with
//! a one-column primary key, statements of at most `tributary.predict_job_rows` rows), predict
//! only the rows those reach (`tributary._predict_rows_job`) —, record the refresh, commit. Rows
//! queued by transactions that commit after the delete's snapshot stay, and cause the next
//! refresh. A crash or an error before the commit leaves the queued rows where they were.
//!
//! A job is bound to its predictor as it was when the job was made (its table and its owner,
//! `tbl` and `predictor_owner`): a refresh that finds the predictor trained again on another
//! table, or a predictor of that name owned by another role, writes nothing and fails the job at
//! once, `last_error` saying which (the predictor's row is read `FOR SHARE`, so that a retrain
//! cannot slip in between the check and the refresh, which checks it again). The refresh calls
//! `tributary._predict_column_job` by its schema with arguments of its exact types: an overload
//! made by a role in the extension's schema neither runs in its place nor makes it ambiguous.
//!
//! A failed refresh is recorded (`last_error`, `attempts`; `last_run_at` too, so it is retried
//! after the poll interval); after `tributary.job_max_attempts` failures in a row the job is
//! `failed` and its triggers queue nothing more. Passing failures (deadlock, serialization, lock
//! not available) count nothing and are retried after the poll interval; a cancel
//! (`pg_cancel_backend`) ends the worker, as for embedding jobs.

use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

use crate::pg::error::{spi_error, OrRaise};
use crate::pg::gucs;
use crate::pg::roles::as_user;
use crate::pg::xact::{describe, error_parts, in_transaction, is_transient, log_error};
use crate::worker::batch::After;
use crate::worker::process::{exit_if_postmaster_died, report_activity};

/// What one refresh came to.
enum Refresh {
    /// Refreshed: rows written.
    Done(i64),
    /// Nothing to do: another worker holds the job, it is not due or not active any more, or
    /// its queue is empty.
    Skipped,
    /// The predictor is not the one the job was made with: the job failed, nothing written.
    Unbound(String),
}

/// Refreshes predict job `id` (see the module's comment).
pub(super) fn run(id: i64) -> After {
    exit_if_postmaster_died();
    report_activity(
        pg_sys::BackendState::STATE_RUNNING,
        &format!("tributary predict job {id}: refreshing the predictions"),
    );
    match in_transaction(|| refresh(id)) {
        Ok(Refresh::Done(n)) => {
            pgrx::debug1!("tributary predict job {id}: refreshed, {n} rows written");
            After::Plan
        }
        // Another worker runs it (its queue looks full from here until it commits): wait
        // rather than plan it again at once.
        Ok(Refresh::Skipped) => After::Wait,
        Ok(Refresh::Unbound(why)) => {
            pgrx::warning!("tributary predict job {id} failed: {why}");
            After::Plan
        }
        Err(e) => {
            let (code, _, _) = error_parts(&e);
            if code == PgSqlErrorCode::ERRCODE_QUERY_CANCELED {
                log_error(
                    &format!("tributary predict job {id}: refresh cancelled, nothing written"),
                    &e,
                );
                return After::Exit;
            }
            if is_transient(code) {
                log_error(
                    &format!("tributary predict job {id}: refresh rolled back, retried later"),
                    &e,
                );
                return After::Wait;
            }
            log_error(&format!("tributary predict job {id}: refresh failed"), &e);
            record_failure(id, &describe(&e));
            After::Plan
        }
    }
}

/// The body of one refresh's transaction. Returns (what it came to, commit).
fn refresh(id: i64) -> (Refresh, bool) {
    // The job, locked against another worker (and a drop), if active and due; its table's owner.
    let job = Spi::connect_mut(|c| {
        let mut rows = c.update(
            "SELECT j.predictor, CAST(j.target AS pg_catalog.text), \
                    (SELECT k.relowner FROM pg_catalog.pg_class k WHERE k.oid = j.tbl::pg_catalog.oid), \
                    CAST(j.tbl AS pg_catalog.text), CAST(j.tbl AS pg_catalog.oid), CAST(j.predictor_owner AS pg_catalog.oid) \
               FROM tributary._predict_jobs j \
              WHERE j.id = $1 AND j.state = 'active' \
                AND (j.last_run_at IS NULL OR j.last_run_at <= pg_catalog.now() - $2 * interval '1 millisecond') \
                FOR NO KEY UPDATE SKIP LOCKED",
            None,
            &[id.into(), (gucs::job_poll_interval_ms() as f64).into()],
        )?;
        match rows.next() {
            Some(r) => Ok::<_, pgrx::spi::Error>(Some((
                r.get::<String>(1)?.unwrap_or_default(),
                r.get::<String>(2)?.unwrap_or_default(),
                r.get::<pg_sys::Oid>(3)?,
                r.get::<String>(4)?.unwrap_or_default(),
                r.get::<pg_sys::Oid>(5)?.unwrap_or_default(),
                r.get::<pg_sys::Oid>(6)?,
            ))),
            None => Ok(None),
        }
    })
    .map_err(spi_error)
    .or_raise();
    let Some((predictor, target, owner, tbl, tbl_oid, predictor_owner)) = job else {
        return (Refresh::Skipped, true);
    };
    // The queued rows this refresh covers: those its snapshot sees; whether one asks for every
    // row; the changed rows the others carry.
    // (A database still at 0.11.0's SQL, before ALTER EXTENSION UPDATE, queues no changed rows.)
    let has_changed = Spi::get_one::<bool>(
        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute \
          WHERE attrelid = CAST('tributary._predict_dirty' AS pg_catalog.regclass) \
            AND attname = 'changed' AND NOT attisdropped)",
    )
    .map_err(spi_error)
    .or_raise()
    .unwrap_or(false);
    let changed_col = if has_changed {
        "changed"
    } else {
        "CAST(NULL AS pg_catalog.jsonb) AS changed"
    };
    let (taken, every, changed) = Spi::connect_mut(|c| {
        let mut rows = c.update(
            &format!("WITH d AS (DELETE FROM tributary._predict_dirty WHERE job = $1 RETURNING {changed_col}) \
             SELECT (SELECT pg_catalog.count(*) FROM d), \
                    (SELECT pg_catalog.bool_or(d.changed IS NULL) FROM d), \
                    (SELECT pg_catalog.jsonb_agg(e) FROM d CROSS JOIN LATERAL pg_catalog.jsonb_array_elements(d.changed) e \
                      WHERE d.changed IS NOT NULL)"),
            None,
            &[id.into()],
        )?;
        match rows.next() {
            Some(r) => Ok::<_, pgrx::spi::Error>((
                r.get::<i64>(1)?.unwrap_or(0),
                r.get::<bool>(2)?.unwrap_or(false),
                r.get::<pgrx::JsonB>(3)?,
            )),
            None => Ok((0, false, None)),
        }
    })
    .map_err(spi_error)
    .or_raise();
    if taken == 0 {
        return (Refresh::Skipped, true);
    }
    // The changed rows alone when they are few enough (every row otherwise).
    let changed = match changed {
        Some(j)
            if !every
                && j.0.as_array().map_or(0, Vec::len) <= 2 * gucs::predict_job_rows() as usize =>
        {
            Some(j)
        }
        _ => None,
    };
    let Some(owner) = owner else {
        pgrx::pg_sys::panic::ErrorReport::new(
            PgSqlErrorCode::ERRCODE_UNDEFINED_TABLE,
            format!("the table of predict job {id} ({tbl}) was dropped"),
            "tributary",
        )
        .set_hint("Drop the job: tributary_predict_job_drop.")
        .report(PgLogLevel::ERROR);
        unreachable!()
    };
    // The predictor the job was made with (locked against a retrain until the commit)?
    if let Some(why) = unbound(&predictor, tbl_oid, predictor_owner) {
        Spi::run_with_args(
            "UPDATE tributary._predict_jobs SET state = 'failed', attempts = attempts + 1, last_error = $2, \
                    last_error_at = pg_catalog.now(), last_run_at = pg_catalog.now() WHERE id = $1",
            &[id.into(), why.as_str().into()],
        )
        .map_err(spi_error)
        .or_raise();
        return (Refresh::Unbound(why), true);
    }
    // By its schema and exact argument types (text, name, oid, oid): nothing in the extension's
    // schema or on the owner's search_path can take its place.
    let written = as_user(owner, || {
        let args = vec![
            predictor.as_str().into(),
            target.as_str().into(),
            tbl_oid.into(),
            predictor_owner.unwrap_or_default().into(),
        ];
        match changed {
            Some(rows) => {
                let mut args = args;
                args.push(rows.into());
                Spi::get_one_with_args::<i64>(
                    "SELECT tributary._predict_rows_job(CAST($1 AS pg_catalog.text), CAST($2 AS pg_catalog.name), $3, $4, $5)",
                    &args,
                )
            }
            None => Spi::get_one_with_args::<i64>(
                "SELECT tributary._predict_column_job(CAST($1 AS pg_catalog.text), CAST($2 AS pg_catalog.name), $3, $4)",
                &args,
            ),
        }
        .map_err(spi_error)
        .or_raise()
    })
    .unwrap_or(0);
    Spi::run_with_args(
        "UPDATE tributary._predict_jobs SET rows_done = rows_done + $2, runs = runs + 1, \
                last_run_at = pg_catalog.now(), attempts = 0, owner = CAST($3 AS pg_catalog.regrole) \
          WHERE id = $1",
        &[id.into(), written.into(), owner.into()],
    )
    .map_err(spi_error)
    .or_raise();
    // The postmaster died meanwhile: exit, rolled back, rather than commit to a server that is down.
    exit_if_postmaster_died();
    (Refresh::Done(written), true)
}

/// Why predictor `name` is not the one a job was made with (on table `tbl`, owned by `owner`;
/// `None` for a job made before 0.11.0), or `None` when it is, or when there is no predictor of
/// that name (the refresh fails with 42704 and is retried). Reads its row `FOR SHARE`.
fn unbound(name: &str, tbl: pg_sys::Oid, owner: Option<pg_sys::Oid>) -> Option<String> {
    let row = Spi::connect_mut(|c| {
        let mut rows = c.update(
            "SELECT CAST(p.tbl AS pg_catalog.oid), CAST(p.owner AS pg_catalog.oid), CAST(p.tbl AS pg_catalog.text), \
                    CAST(p.owner AS pg_catalog.text), CAST(CAST($2 AS pg_catalog.regclass) AS pg_catalog.text), \
                    CAST(CAST($3 AS pg_catalog.regrole) AS pg_catalog.text) \
               FROM tributary._predictors p WHERE p.name OPERATOR(pg_catalog.=) $1 FOR SHARE",
            None,
            &[name.into(), tbl.into(), owner.into()],
        )?;
        match rows.next() {
            Some(r) => Ok::<_, pgrx::spi::Error>(Some((
                r.get::<pg_sys::Oid>(1)?.unwrap_or_default(),
                r.get::<pg_sys::Oid>(2)?.unwrap_or_default(),
                r.get::<String>(3)?.unwrap_or_default(),
                r.get::<String>(4)?.unwrap_or_default(),
                r.get::<String>(5)?.unwrap_or_default(),
                r.get::<String>(6)?,
            ))),
            None => Ok(None),
        }
    })
    .map_err(spi_error)
    .or_raise();
    let (p_tbl, p_owner, p_tbl_name, p_owner_name, tbl_name, owner_name) = row?;
    let name = crate::service::learn::short(name);
    if p_tbl != tbl {
        Some(format!(
            "predictor \"{name}\" is trained on table {p_tbl_name} now, not on {tbl_name}, the table this job writes: nothing was written (drop the job)"
        ))
    } else if Some(p_owner) != owner {
        Some(format!(
            "predictor \"{name}\" belongs to role {p_owner_name} now, not to {}, whose predictor this job was made with: nothing was written (drop the job)",
            owner_name.unwrap_or_else(|| "the role of the predictor before tributary 0.11.0".into())
        ))
    } else {
        None
    }
}

/// A failed refresh: recorded, and the job failed after `tributary.job_max_attempts` in a row.
fn record_failure(id: i64, error: &str) {
    let recorded = in_transaction(|| {
        Spi::run_with_args(
            "UPDATE tributary._predict_jobs SET attempts = attempts + 1, last_error = $2, \
                    last_error_at = pg_catalog.now(), last_run_at = pg_catalog.now(), \
                    state = CASE WHEN attempts + 1 >= $3 THEN 'failed' ELSE state END \
              WHERE id = $1 AND state = 'active'",
            &[id.into(), error.into(), gucs::job_max_attempts().into()],
        )
        .map_err(spi_error)
        .or_raise();
        ((), true)
    });
    if let Err(e) = recorded {
        log_error(
            &format!("tributary predict job {id}: could not record its failure"),
            &e,
        );
    }
}
