//! A job worker's main loop: connect to its database (by name, `bgw_extra`), take a slot in
//! shared memory, then plan ([`plan`]), run ([`run_job`]) or wait, until nothing is left.

use std::ffi::CString;

use pgrx::bgworkers::BackgroundWorker;
use pgrx::prelude::*;

use crate::pg::gucs;
use crate::pg::xact::{in_transaction, log_error};
use crate::worker::batch::{run_job, After};
use crate::worker::catalog::{plan, Next};
use crate::worker::process::{
    attach_signal_handlers, exit_if_postmaster_died, reload_config_if_asked, report_activity, wait,
};
use crate::worker::{predict, registry};

/// Entry point of a job worker (see src/worker/mod.rs). `bgw_extra` is the database's name.
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn tributary_worker_main(_arg: pg_sys::Datum) {
    // SIGTERM ends the worker at the next interrupt check, rolling its batch back; SIGINT
    // cancels the batch (our statement).
    attach_signal_handlers();
    let dbname = BackgroundWorker::get_extra().to_owned();
    BackgroundWorker::connect_worker_to_spi(Some(&dbname), None);
    // SAFETY: plain reads of process globals set by InitPostgres.
    let (db, pid) = unsafe { (pg_sys::MyDatabaseId.to_u32(), pg_sys::MyProcPid) };
    // SAFETY: MyLatch points into this process's PGPROC (shared memory) once it is set up.
    if !registry::take_slot(pid, db, unsafe { pg_sys::MyLatch }) {
        return;
    }
    // The worker's own statements (as superuser) never resolve names through a path others can
    // write to; the owner's statements get the default path back (as_user).
    // SAFETY: sets a GUC of this session, outside any transaction.
    unsafe {
        pg_sys::SetConfigOption(
            c"search_path".as_ptr(),
            c"pg_catalog, pg_temp".as_ptr(),
            pg_sys::GucContext::PGC_SUSET,
            pg_sys::GucSource::PGC_S_OVERRIDE,
        );
    }
    let appname = CString::new("tributary worker").unwrap();
    // SAFETY: pgstat copies the string.
    unsafe { pg_sys::pgstat_report_appname(appname.as_ptr()) };

    loop {
        pgrx::check_for_interrupts!();
        exit_if_postmaster_died();
        reload_config_if_asked();
        let next = match in_transaction(|| (plan(db, &dbname), true)) {
            Ok(n) => n,
            Err(e) => {
                log_error("tributary worker: looking for work failed", &e);
                registry::set_wanted(db, &dbname, 0, false);
                Next::Exit
            }
        };
        match next {
            Next::Run(job) => {
                let after = run_job(&job);
                registry::clear_job();
                match after {
                    After::Exit => break,
                    After::Plan => {}
                    // Rows are queued but all claimed by other workers (or just failed):
                    // wait before planning again rather than spin.
                    After::Wait => wait_poll_interval(),
                }
            }
            Next::Predict(id) => {
                let after = predict::run(id);
                registry::clear_job();
                match after {
                    After::Exit => break,
                    After::Plan => {}
                    After::Wait => wait_poll_interval(),
                }
            }
            Next::Idle => {
                report_activity(pg_sys::BackendState::STATE_IDLE, "");
                wait_poll_interval();
            }
            Next::Exit => break,
        }
    }
}

/// Waits `tributary.job_poll_interval`, or until rows are queued for a continuous job of this
/// database (the trigger sets this worker's latch at commit, src/worker/registry.rs). The
/// worker, and the model sessions it holds, stay: an idle worker is not restarted.
fn wait_poll_interval() {
    wait(gucs::job_poll_interval_ms() as i64);
    // SAFETY: a cancel while waiting has no batch to stop.
    unsafe { pg_sys::QueryCancelPending = 0 };
}
