//! The launcher: one background worker, connected to no database, that starts job workers
//! where databases ask for them (src/worker/registry.rs), up to `tributary.max_workers`.

use std::time::{Duration, Instant};

use pgrx::bgworkers::{
    BackgroundWorker, BackgroundWorkerBuilder, BackgroundWorkerStatus, BgWorkerStartTime,
    DynamicBackgroundWorker, SignalWakeFlags,
};
use pgrx::prelude::*;

use crate::pg::gucs;
use crate::worker::registry::{self, Want};

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
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn tributary_launcher_main(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    BackgroundWorker::connect_worker_to_spi(None, None);
    // SAFETY: MyLatch points into this process's PGPROC (shared memory) once it is set up.
    registry::set_launcher_latch(unsafe { pg_sys::MyLatch });
    // Every database is asked once; beyond MAX_SLOTS at a time, the rest as entries free up.
    let mut to_probe = databases();
    to_probe.reverse();
    // Databases created later (CREATE DATABASE, or pg_restore into a new one with running jobs)
    // are asked too, once, when a look at pg_database every DB_RESCAN finds them.
    let mut known: Vec<pg_sys::Oid> = to_probe.iter().map(|(o, _)| *o).collect();
    let mut last_rescan = Instant::now();
    let mut running: Vec<(u32, DynamicBackgroundWorker)> = Vec::new();
    let mut last_full_log: Option<Instant> = None;
    loop {
        if BackgroundWorker::sighup_received() {
            // SAFETY: the standard reload, in the main loop.
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
        }
        running.retain(|(_, h)| !matches!(h.pid(), Err(BackgroundWorkerStatus::Stopped)));
        if last_rescan.elapsed() >= DB_RESCAN {
            last_rescan = Instant::now();
            for (db, name) in databases() {
                if !known.contains(&db) {
                    known.push(db);
                    to_probe.insert(0, (db, name));
                }
            }
        }
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
            .any(|w| running.iter().filter(|(d, _)| *d == w.db).count() < w.workers as usize);
        let live: Vec<u32> = if short {
            databases().iter().map(|(o, _)| o.to_u32()).collect()
        } else {
            Vec::new()
        };
        'dbs: for Want {
            db,
            name,
            workers: wanted,
        } in wants
        {
            let mut have = running.iter().filter(|(d, _)| *d == db).count() as u32;
            if have < wanted && !live.contains(&db) {
                registry::set_wanted(db, &name, 0, false);
                continue;
            }
            while have < wanted {
                if running.len() >= gucs::max_workers() {
                    break 'dbs;
                }
                match start_worker(&name) {
                    Some(h) => {
                        running.push((db, h));
                        have += 1;
                    }
                    None => {
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
        if !BackgroundWorker::wait_latch(Some(Duration::from_millis(gucs::job_poll_interval_ms())))
        {
            break;
        }
    }
}

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
