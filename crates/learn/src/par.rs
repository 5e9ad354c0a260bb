//! Threads that never touch the [`Control`]: work runs on scoped worker threads while the calling
//! thread only polls `Control::check` / `Control::progress` (which call into PostgreSQL).

use crate::{Control, Error};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// State shared between the polling (calling) thread and the workers.
pub(crate) struct Shared {
    /// Set by the calling thread when `check` fails: workers return early (their result is dropped).
    pub stop: AtomicBool,
    /// Units of work done, for `progress`.
    pub done: AtomicU64,
}

impl Shared {
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
    pub fn tick(&self, n: u64) {
        self.done.fetch_add(n, Ordering::Relaxed);
    }
}

/// Runs `f` on a worker thread; the calling thread checks `ctl` every 20 ms (and wakes when `f`
/// returns) and reports progress
/// (`stage`, done, `total`) every 0.5 s. On a failed check the stop flag is set, `f` is waited
/// for (it must poll `Shared::stopped` at least every ~0.2 s) and the check's error returned.
/// A panic in `f` becomes `Error::Model`.
pub(crate) fn polled<R: Send>(
    ctl: &dyn Control,
    stage: &str,
    total: u64,
    f: impl FnOnce(&Shared) -> Result<R, Error> + Send,
) -> Result<R, Error> {
    ctl.check()?;
    let shared = Shared {
        stop: AtomicBool::new(false),
        done: AtomicU64::new(0),
    };
    let finished = AtomicBool::new(false);
    let caller = std::thread::current();
    std::thread::scope(|s| {
        let sh = &shared;
        let fin = &finished;
        // The worker wakes the caller when it is done: a call of a millisecond takes one, not
        // the 20 ms of a polling interval (one row's prediction).
        let h = s.spawn(move || {
            let r = f(sh);
            fin.store(true, Ordering::Release);
            caller.unpark();
            r
        });
        let mut err = None;
        let mut last = Instant::now();
        ctl.progress(stage, 0, total);
        while !finished.load(Ordering::Acquire) && !h.is_finished() {
            std::thread::park_timeout(Duration::from_millis(20));
            if err.is_none() {
                if let Err(e) = ctl.check() {
                    shared.stop.store(true, Ordering::Relaxed);
                    err = Some(e);
                }
                if last.elapsed() > Duration::from_millis(500) {
                    ctl.progress(stage, shared.done.load(Ordering::Relaxed), total);
                    last = Instant::now();
                }
            }
        }
        let r = h.join();
        if let Some(e) = err {
            return Err(e);
        }
        match r {
            Ok(r) => {
                ctl.progress(stage, total, total);
                r
            }
            Err(p) => {
                let msg = p
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                Err(Error::Model(format!("worker panicked in {stage}: {msg}")))
            }
        }
    })
}

/// `f(0..n)` on `threads` scoped threads (work stealing by an atomic counter); results in order,
/// `None` for items skipped after `stop` was set.
pub(crate) fn par_map<R: Send>(
    threads: usize,
    n: usize,
    stop: &AtomicBool,
    f: impl Fn(usize) -> R + Sync,
) -> Vec<Option<R>> {
    let next = AtomicUsize::new(0);
    let threads = threads.max(1).min(n.max(1));
    let mut out: Vec<Option<R>> = (0..n).map(|_| None).collect();
    let parts: Vec<Vec<(usize, R)>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut v = Vec::new();
                    loop {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= n {
                            break;
                        }
                        v.push((i, f(i)));
                    }
                    v
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    for part in parts {
        for (i, r) in part {
            out[i] = Some(r);
        }
    }
    out
}

/// [`par_map`], the items started in decreasing `cost` (longest first: the last item to start is
/// a short one, so no thread idles through a long tail; Graham's LPT rule); results in order.
pub(crate) fn par_map_longest_first<R: Send>(
    threads: usize,
    n: usize,
    stop: &AtomicBool,
    cost: impl Fn(usize) -> u64,
    f: impl Fn(usize) -> R + Sync,
) -> Vec<Option<R>> {
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(cost(i)));
    let mut out: Vec<Option<R>> = (0..n).map(|_| None).collect();
    for (r, i) in par_map(threads, n, stop, |p| f(order[p]))
        .into_iter()
        .zip(&order)
    {
        out[*i] = r;
    }
    out
}
