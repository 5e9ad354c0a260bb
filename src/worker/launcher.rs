//! The launcher: one background worker, connected to no database, that starts job workers
//! where databases ask for them (src/worker/registry.rs), up to `tributary.max_workers`.

use std::time::{Duration, Instant};

use pgrx::bgworkers::{
    BackgroundWorker, BackgroundWorkerBuilder, BackgroundWorkerStatus, BgWorkerStartTime,
    DynamicBackgroundWorker,
};
use pgrx::prelude::*;

use crate::pg::gucs;
use crate::worker::process::{
    attach_signal_handlers, exit_if_postmaster_died, pqsignal, reload_config_if_asked, wait,
};
use crate::worker::registry::{self, Shortage, Want};

/// How often the launcher looks for databases created since it started.
const DB_RESCAN: Duration = Duration::from_secs(10);

/// Registers the launcher with the postmaster (from `_PG_init`, while preload libraries load).
pub(super) fn register() {
    BackgroundWorkerBuilder::new("tributary launcher")
        .set_type("tributary launcher")
        .set_library("tributary")
        .set_function("tributary_launcher_main")
        .enable_spi_access()
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(Some(Duration::from_secs(5)))
        .load();
}

/// Entry point of the launcher (see src/worker/mod.rs).
///
/// SIGTERM (a shutdown, or `pg_terminate_backend`) ends it with a FATAL error, exit status 1:
/// the postmaster starts it again after its restart time (5 s), also after a crash restart, but
/// not during a shutdown. (A background worker that exits with status 0 is never restarted.) It
/// exits at once when the postmaster dies.
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn tributary_launcher_main(_arg: pg_sys::Datum) {
    attach_signal_handlers();
    // The launcher runs no statement a cancel could stop: pg_cancel_backend does nothing to it
    // (rather than an error outside any transaction, which would end it).
    // SAFETY: a handler that does nothing, replacing StatementCancelHandler.
    unsafe { pqsignal(pg_sys::SIGINT as i32, Some(ignore_signal)) };
    BackgroundWorker::connect_worker_to_spi(None, None);
    // SAFETY: plain read of this process's pid; MyLatch points into this process's PGPROC
    // (shared memory) once it is set up.
    registry::set_launcher(unsafe { pg_sys::MyProcPid }, unsafe { pg_sys::MyLatch });
    // Every database is asked once (also after a restart of the launcher: that is how a worker
    // killed with it is replaced); beyond MAX_SLOTS at a time, the rest as entries free up.
    let mut to_probe = databases();
    to_probe.reverse();
    // Databases created later (CREATE DATABASE, or pg_restore into a new one with running jobs)
    // are asked too, once, when a look at pg_database every DB_RESCAN finds them.
    let mut known: Vec<pg_sys::Oid> = to_probe.iter().map(|(o, _)| *o).collect();
    let mut last_rescan = Instant::now();
    // Workers this launcher started that have no slot in the registry yet (starting).
    let mut started: Vec<(u32, DynamicBackgroundWorker)> = Vec::new();
    let mut last_full_log: Option<Instant> = None;
    loop {
        pgrx::check_for_interrupts!();
        exit_if_postmaster_died();
        reload_config_if_asked();
        if last_rescan.elapsed() >= DB_RESCAN {
            last_rescan = Instant::now();
            for (db, name) in databases() {
                if !known.contains(&db) {
                    known.push(db);
                    to_probe.insert(0, (db, name));
                }
            }
        }
        // Running workers: those with a slot (also those an earlier launcher started), and
        // those this one started that have not taken theirs yet.
        let with_slot = registry::worker_pids();
        started.retain(|(_, h)| match h.pid() {
            Ok(pid) => !with_slot.iter().any(|(_, p)| *p == pid),
            Err(BackgroundWorkerStatus::Stopped) => false,
            Err(_) => true,
        });
        let mut running: Vec<u32> = with_slot.iter().map(|(d, _)| *d).collect();
        running.extend(started.iter().map(|(d, _)| *d));
        while let Some((db, name)) = to_probe.last() {
            if !registry::set_wanted(db.to_u32(), name, 1, true) {
                break;
            }
            to_probe.pop();
        }
        let wants = registry::wanted();
        // Databases dropped (or closed to connections) since they asked are forgotten, or a
        // worker would fail to connect at every round.
        let short = wants
            .iter()
            .any(|w| running.iter().filter(|d| **d == w.db).count() < w.workers as usize);
        let live: Vec<u32> = if short {
            databases().iter().map(|(o, _)| o.to_u32()).collect()
        } else {
            Vec::new()
        };
        let mut shortage = Shortage::None;
        'dbs: for Want {
            db,
            name,
            workers: wanted,
        } in wants
        {
            let mut have = running.iter().filter(|d| **d == db).count() as u32;
            if have < wanted && !live.contains(&db) {
                registry::set_wanted(db, &name, 0, false);
                continue;
            }
            while have < wanted {
                if running.len() >= gucs::max_workers() {
                    shortage = Shortage::MaxWorkers;
                    break 'dbs;
                }
                match start_worker(&name) {
                    Some(h) => {
                        started.push((db, h));
                        running.push(db);
                        have += 1;
                    }
                    None => {
                        shortage = Shortage::NoSlot;
                        if last_full_log.is_none_or(|t| t.elapsed() > Duration::from_secs(60)) {
                            pgrx::log!(
                                "tributary launcher: no background worker slot free for a job worker in database \"{name}\"; retrying (raise max_worker_processes)"
                            );
                            last_full_log = Some(Instant::now());
                        }
                        break 'dbs;
                    }
                }
            }
        }
        registry::set_shortage(shortage);
        wait(gucs::job_poll_interval_ms() as i64);
    }
}

unsafe extern "C-unwind" fn ignore_signal(_signal: std::ffi::c_int) {}

/// A job worker for database `dbname` (by name, in `bgw_extra`); `None` when
/// `max_worker_processes` has no free slot.
fn start_worker(dbname: &str) -> Option<DynamicBackgroundWorker> {
    BackgroundWorkerBuilder::new(&format!("tributary worker {dbname}"))
        .set_type("tributary worker")
        .set_library("tributary")
        .set_function("tributary_worker_main")
        .enable_spi_access()
        .set_extra(dbname)
        .set_restart_time(None)
        // SAFETY: plain read of this process's pid.
        .set_notify_pid(unsafe { pg_sys::MyProcPid })
        .load_dynamic()
        .ok()
}

/// Databases that accept connections, from pg_database (a shared catalog, readable without
/// being connected to a database), as the autovacuum launcher reads it.
fn databases() -> Vec<(pg_sys::Oid, String)> {
    let mut out = Vec::new();
    // SAFETY: a catalog heap scan in its own transaction, as get_database_list() in
    // autovacuum.c does; tuples are only read while the scan is open.
    unsafe {
        pg_sys::StartTransactionCommand();
        pg_sys::GetTransactionSnapshot();
        let rel = pg_sys::table_open(pg_sys::DatabaseRelationId, pg_sys::AccessShareLock as i32);
        let scan = pg_sys::table_beginscan_catalog(rel, 0, std::ptr::null_mut());
        loop {
            let tup = pg_sys::heap_getnext(scan, pg_sys::ScanDirection::ForwardScanDirection);
            if tup.is_null() {
                break;
            }
            let form = pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_database>(tup);
            if (*form).datallowconn && !(*form).datistemplate {
                let name = std::ffi::CStr::from_ptr((*form).datname.data.as_ptr())
                    .to_string_lossy()
                    .into_owned();
                out.push(((*form).oid, name));
            }
        }
        pg_sys::heap_endscan(scan);
        pg_sys::table_close(rel, pg_sys::AccessShareLock as i32);
        pg_sys::CommitTransactionCommand();
    }
    out
}
