//! Running a job: batches, each one transaction (claim, read as the owner, embed, write as the
//! owner, progress); a failed batch split in halves until the failing rows are alone; rows that
//! fail alone recorded in `tributary.job_errors`; errors every row would hit fail the job.

use std::cell::RefCell;
use std::time::Instant;

use pgrx::pg_sys::panic::CaughtError;
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;
use serde_json::Value;

use crate::pg::catalog;
use crate::pg::error::{spi_error, OrRaise};
use crate::pg::gucs;
use crate::pg::roles::as_user;
use crate::pg::vector::VectorType;
use crate::pg::xact::{describe, error_parts, in_transaction, is_transient, log_error, sqlstate};
use crate::service::vectors::RowsToVectors;
use crate::worker::catalog::Job;
use crate::worker::process::{exit_if_postmaster_died, report_activity};

/// What a worker does after running a job.
pub(super) enum After {
    /// Plan again at once.
    Plan,
    /// Wait `tributary.job_poll_interval`, then plan.
    Wait,
    Exit,
}

/// What one batch (or one bisection of a failed batch) came to.
enum Outcome {
    /// Rows embedded and committed.
    Done(i64),
    /// Nothing was queued.
    Empty,
    /// The job is no longer running (paused, cancelled, dropped): the batch was rolled back.
    Stopped,
    /// A failure that is the job's, not a row's (model, library, table, privileges): the job
    /// is marked failed.
    JobFailed,
    /// pg_cancel_backend: the batch was rolled back; the worker exits.
    Cancelled,
    /// A passing failure (deadlock, serialization, lock not available): the batch was rolled
    /// back, its rows stay queued, nothing is counted against them.
    Retry,
}

/// Runs batches of `job` until its queue is empty or it stops.
pub(super) fn run_job(job: &Job) -> After {
    // A job whose model cannot run fails once, here, rather than row by row.
    let preflight = in_transaction(|| {
        crate::service::embed::embed(&["tributary"], Some(&job.model)).or_raise();
        ((), true)
    });
    if let Err(e) = preflight {
        fail_job(job, &e);
        return After::Plan;
    }
    let mut batches = 0u64;
    loop {
        pgrx::check_for_interrupts!();
        exit_if_postmaster_died();
        report_activity(
            pg_sys::BackendState::STATE_RUNNING,
            &format!("tributary job {} ({}): embedding a batch", job.id, job.name),
        );
        match process(job, None) {
            Outcome::Done(_) => {}
            Outcome::Empty => {
                return if batches == 0 {
                    After::Wait
                } else {
                    After::Plan
                }
            }
            Outcome::Retry => return After::Wait,
            Outcome::Stopped | Outcome::JobFailed => return After::Plan,
            Outcome::Cancelled => return After::Exit,
        }
        batches += 1;
        if batches.is_multiple_of(100) {
            let pruned = in_transaction(|| {
                Spi::run_with_args(
                    "DELETE FROM tributary._job_batches WHERE job_id = $1 AND finished_at < now() - interval '1 hour'",
                    &[job.id.into()],
                )
                .map_err(spi_error)
                .or_raise();
                ((), true)
            });
            if let Err(e) = pruned {
                log_error(
                    &format!(
                        "tributary job {}: could not prune tributary._job_batches",
                        job.id
                    ),
                    &e,
                );
            }
        }
        // Let the planner see a waiting job of this database with more workers wanted.
        if batches.is_multiple_of(20) {
            return After::Plan;
        }
    }
}

/// One batch of `job` (`keys`: these queued keys, as a jsonb array; `None`: the next
/// `batch_size` keys). A failed batch is split in halves until the failing rows are alone.
fn process(job: &Job, keys: Option<String>) -> Outcome {
    let claimed: RefCell<Option<String>> = RefCell::new(None);
    match in_transaction(|| batch(job, keys.as_deref(), &claimed)) {
        Ok(o) => o,
        Err(e) => {
            let (code, _, _) = error_parts(&e);
            if code == PgSqlErrorCode::ERRCODE_QUERY_CANCELED {
                log_error(
                    &format!("tributary job {}: batch cancelled, nothing written", job.id),
                    &e,
                );
                return Outcome::Cancelled;
            }
            if is_transient(code) {
                log_error(
                    &format!("tributary job {}: batch rolled back, retried later", job.id),
                    &e,
                );
                return Outcome::Retry;
            }
            let claimed = claimed.take();
            if is_job_error(code) || claimed.is_none() {
                fail_job(job, &e);
                return Outcome::JobFailed;
            }
            let keys: Vec<Value> =
                serde_json::from_str(claimed.as_deref().unwrap_or("[]")).unwrap_or_default();
            if keys.len() <= 1 {
                row_failed(job, claimed.as_deref().unwrap_or("[]"), &e);
                return Outcome::Done(0);
            }
            let (left, right) = keys.split_at(keys.len() / 2);
            let mut done = 0;
            for half in [left, right] {
                match process(job, Some(Value::Array(half.to_vec()).to_string())) {
                    Outcome::Done(n) => done += n,
                    Outcome::Empty | Outcome::Retry => {}
                    stop => return stop,
                }
            }
            Outcome::Done(done)
        }
    }
}

/// The body of one batch's transaction: claim, read as the owner, embed, write as the owner,
/// clear the rows' old errors, add the progress. Returns (outcome, commit).
fn batch(job: &Job, keys: Option<&str>, claimed_out: &RefCell<Option<String>>) -> (Outcome, bool) {
    let started = Instant::now();
    // As the owner: the claim orders and turns keys into values of the owner's types.
    let claimed = as_user(job.owner, || {
        match keys {
            None => {
                Spi::get_one_with_args::<String>(&job.claim_sql, &[(job.batch_size as i64).into()])
            }
            Some(k) => Spi::get_one_with_args::<String>(&job.claim_keys_sql, &[k.into()]),
        }
        .map_err(spi_error)
        .or_raise()
    });
    let Some(claimed) = claimed else {
        return (Outcome::Empty, true);
    };
    *claimed_out.borrow_mut() = Some(claimed.clone());

    let model = catalog::model(Some(&job.model)).or_raise();
    let rows_to_vectors = RowsToVectors {
        table: job.source,
        row_options: job.row_options.as_ref(),
        model: &model,
        target: if job.halfvec {
            VectorType::HalfVec
        } else {
            VectorType::Vector
        },
        prompt: job.prompt.as_deref(),
    };
    // (key, text, guard): the guard is what the text is made of; the write checks it did not
    // change meanwhile (continuous jobs: a change queued the row again). Rows and their context
    // are read as the owner.
    let (keys, texts, guards) = as_user(job.owner, || {
        let rows: Vec<(String, Option<String>, Option<String>)> = Spi::connect(|c| {
            c.select(&job.select_sql, None, &[claimed.as_str().into()])?
                .map(|r| {
                    Ok((
                        r.get::<String>(1)?.unwrap_or_default(),
                        r.get::<String>(2)?,
                        r.get::<String>(3)?,
                    ))
                })
                .collect::<Result<Vec<_>, pgrx::spi::Error>>()
        })
        .map_err(spi_error)
        .or_raise();
        let mut keys = Vec::with_capacity(rows.len());
        let mut raw = Vec::with_capacity(rows.len());
        let mut guards = Vec::with_capacity(rows.len());
        for (key, text, guard) in rows {
            keys.push(key);
            raw.push(text);
            guards.push(guard);
        }
        (keys, rows_to_vectors.texts(raw).or_raise(), guards)
    });

    let embed_started = Instant::now();
    let vectors = rows_to_vectors.vectors(&texts).or_raise();
    let embed_ms = embed_started.elapsed().as_secs_f64() * 1e3;
    let n = vectors.embedded as i64;
    as_user(job.owner, || {
        Spi::run_with_args(&job.write_sql, &[keys.into(), vectors.datum, guards.into()])
            .map_err(spi_error)
            .or_raise();
    });
    // Every claimed key's old error goes (also of rows deleted meanwhile, which have no text).
    Spi::run_with_args(
        "DELETE FROM tributary._job_errors WHERE job_id = $1 AND status = 'queued' \
            AND key IN (SELECT pg_catalog.jsonb_array_elements($2::jsonb))",
        &[job.id.into(), claimed.as_str().into()],
    )
    .map_err(spi_error)
    .or_raise();
    // Paused, cancelled or dropped meanwhile: the UPDATE finds no row and the batch is undone.
    let still_running = Spi::connect_mut(|c| {
        c.update(
            "UPDATE tributary._jobs SET rows_done = rows_done + $2, last_batch_at = now() \
              WHERE id = $1 AND state = 'running' RETURNING id",
            None,
            &[job.id.into(), n.into()],
        )
        .map(|t| t.len())
    })
    .map_err(spi_error)
    .or_raise();
    if still_running == 0 {
        return (Outcome::Stopped, false);
    }
    if vectors.truncated > 0 {
        // rows_truncated is 0.3.0's: a database not updated yet has no such column.
        Spi::run_with_args(
            "UPDATE tributary._jobs SET rows_truncated = rows_truncated + $2 WHERE id = $1 \
               AND EXISTS (SELECT 1 FROM pg_catalog.pg_attribute WHERE attrelid = 'tributary._jobs'::pg_catalog.regclass \
                            AND attname = 'rows_truncated' AND NOT attisdropped)",
            &[job.id.into(), (vectors.truncated as i64).into()],
        )
        .map_err(spi_error)
        .or_raise();
    }
    Spi::run_with_args(
        "INSERT INTO tributary._job_batches (job_id, rows, ms, embed_ms, pid) VALUES ($1, $2, $3, $4, pg_backend_pid())",
        &[job.id.into(), (n as i32).into(), (started.elapsed().as_secs_f64() * 1e3).into(), embed_ms.into()],
    )
    .map_err(spi_error)
    .or_raise();
    // The postmaster died while the batch embedded: exit, the batch rolled back, rather than
    // commit to a server that is down (and that cannot start again while we run).
    exit_if_postmaster_died();
    (Outcome::Done(n), true)
}

/// Errors that every row of the job would hit: the job is marked failed instead of filling
/// tributary.job_errors with every row.
fn is_job_error(code: PgSqlErrorCode) -> bool {
    use PgSqlErrorCode::*;
    matches!(
        code,
        ERRCODE_UNDEFINED_FILE
            | ERRCODE_UNDEFINED_OBJECT
            | ERRCODE_UNDEFINED_TABLE
            | ERRCODE_UNDEFINED_COLUMN
            | ERRCODE_UNDEFINED_FUNCTION
            | ERRCODE_INSUFFICIENT_PRIVILEGE
            | ERRCODE_DATATYPE_MISMATCH
            | ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE
            | ERRCODE_CONFIGURATION_LIMIT_EXCEEDED
            | ERRCODE_OUT_OF_MEMORY
            | ERRCODE_DISK_FULL
            | ERRCODE_READ_ONLY_SQL_TRANSACTION
            | ERRCODE_INTERNAL_ERROR
    )
}

/// Job-level failure: the job is marked failed with the error; its queue stays for a resume.
/// Not when the job's statements changed since the worker loaded them (see below).
fn fail_job(job: &Job, e: &CaughtError) {
    log_error(
        &format!("tributary job {} ({}) failed", job.id, job.name),
        e,
    );
    let text = describe(e);
    let recorded = in_transaction(|| {
        // Only if the job's statements are those the worker ran: DDL that renamed what they name
        // (tributary._job_ddl rebuilt them) fails the batch once; the worker plans again and
        // runs the new ones.
        Spi::run_with_args(
            "UPDATE tributary._jobs SET state = 'failed', last_error = $2, last_error_at = now() \
              WHERE id = $1 AND state IN ('pending', 'running') \
                AND claim_sql = $3 AND select_sql = $4 AND write_sql = $5",
            &[
                job.id.into(),
                text.as_str().into(),
                job.claim_sql.as_str().into(),
                job.select_sql.as_str().into(),
                job.write_sql.as_str().into(),
            ],
        )
        .map_err(spi_error)
        .or_raise();
        ((), true)
    });
    if let Err(e) = recorded {
        log_error(
            &format!("tributary job {}: could not mark it failed", job.id),
            &e,
        );
    }
}

/// One row failed alone: it leaves the queue for tributary.job_errors, to be retried after
/// 10 s, 20 s, 40 s, ... (at most 1 h) until `tributary.job_max_attempts`.
fn row_failed(job: &Job, key: &str, e: &CaughtError) {
    log_error(&format!("tributary job {}: row {key} failed", job.id), e);
    let (code, message, detail) = error_parts(e);
    let result = in_transaction(|| {
        as_user(job.owner, || {
            Spi::get_one_with_args::<String>(&job.claim_keys_sql, &[key.into()])
                .map_err(spi_error)
                .or_raise()
        });
        Spi::run_with_args(
            "INSERT INTO tributary._job_errors AS x (job_id, key, sqlstate, message, detail, attempts, status, next_attempt_at) \
             VALUES ($1, ($2::jsonb) -> 0, $3, $4, $5, 1, \
                     CASE WHEN $6 <= 1 THEN 'gave_up' ELSE 'waiting' END, \
                     CASE WHEN $6 <= 1 THEN NULL ELSE now() + interval '10 s' END) \
             ON CONFLICT (job_id, key) DO UPDATE SET \
                 attempts = x.attempts + 1, sqlstate = EXCLUDED.sqlstate, message = EXCLUDED.message, \
                 detail = EXCLUDED.detail, last_failed_at = now(), \
                 status = CASE WHEN x.attempts + 1 >= $6 THEN 'gave_up' ELSE 'waiting' END, \
                 next_attempt_at = CASE WHEN x.attempts + 1 >= $6 THEN NULL \
                     ELSE now() + least(interval '10 s' * 2 ^ x.attempts, interval '1 hour') END",
            &[
                job.id.into(),
                key.into(),
                sqlstate(code).as_str().into(),
                message.as_str().into(),
                detail.as_deref().into(),
                gucs::job_max_attempts().into(),
            ],
        )
        .map_err(spi_error)
        .or_raise();
        Spi::run_with_args(
            "UPDATE tributary._jobs SET last_error = format('row %s: %s', ($2::jsonb) -> 0, $3), last_error_at = now() WHERE id = $1",
            &[job.id.into(), key.into(), message.as_str().into()],
        )
        .map_err(spi_error)
        .or_raise();
        ((), true)
    });
    if let Err(e) = result {
        log_error(
            &format!(
                "tributary job {}: could not record the failed row {key}",
                job.id
            ),
            &e,
        );
    }
}
