//! The pipelined loop of `tributary_embed_column` (`tributary.pipeline`): while the model runs
//! one batch on another thread, this backend's thread reads the next batch's rows and writes the
//! last batch's vectors, so that reading (SPI), tokenizing and the model's runs, and writing
//! overlap instead of taking turns. On a GPU the model's runs are only about half of the time
//! the sequential loop takes (45-68% on an H200, BENCHMARKS.md "GPU: fp32 by default"), the rest
//! being PostgreSQL's reads and writes and tokenization; overlapped, 16,384 rows took 0.92 s
//! instead of 1.23 s (1.35x, same run: BENCHMARKS.md "GPU: pipelined, bucketed, ...").
//!
//! On a GPU the engine runs every ONNX Runtime run of a session on the session's own long-lived
//! thread (engine::RunThread), not on this call's model thread: the fp16 graph paid each input
//! shape again on every new thread (benches/results/gpu-h200-2026-11-28b).
//!
//! Only the backend's thread calls into PostgreSQL. The model thread runs the engine alone
//! (tokenizing on its own threads as always), with every signal blocked; it stops at its next
//! run when the backend's thread stops (an error, a cancel: [`Stop`]). The backend's thread checks
//! for interrupts at least every [`WAIT_TICK`] while it waits for the model thread.

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, RecvTimeoutError};
use std::time::{Duration, Instant};

use crate::engine::{self, Embedder, Embeddings};
use crate::pg::admission::{self, CpuRuns};
use crate::pg::error::{Result, TributaryError};
use crate::service::embed::batch_tokens;

/// How long the backend's thread waits for the model thread between interrupt checks.
pub(crate) const WAIT_TICK: Duration = Duration::from_millis(50);

/// One batch read: the caller's keys of its rows (`K`, kept on this thread) and their texts
/// (NULL stays NULL: embedded are the others).
pub(crate) struct Read<K> {
    pub keys: K,
    pub texts: Vec<Option<String>>,
}

/// Time spent by the backend's thread on reading and on writing (the split shown in
/// `tributary.sessions`).
#[derive(Default, Clone, Copy)]
pub(crate) struct IoTime {
    pub read: Duration,
    pub write: Duration,
}

/// The payload the model thread stops with when told to ([`Stop`]).
struct Stopped;

/// Tells the model thread to stop at its next run when dropped: at the end of [`run`], also when
/// an error or a cancel unwinds it.
struct Stop<'a>(&'a AtomicBool);

impl Drop for Stop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Embeds batch after batch with `e` (`prefix` before each text, the run budget of `e`'s
/// provider): `read` gives the next batch (`None` at the end), `write` takes a batch with its
/// embeddings (`[present texts, dim]`, `None` when every text is NULL). While the model runs batch
/// k, `read` gives batch k + 1 and `write` takes batch k - 1; batches are written in the order
/// they were read. `cpu_slots`: the session runs on the CPU (`tributary.pipeline = on`), and each
/// batch first takes one CPU run slot (`tributary.max_cpu_runs`) for all its runs.
///
/// Errors: those of `read` and `write`; the engine's (as [`TributaryError::Engine`]); 57014 and
/// the other interrupts of a cancel or statement_timeout (raised by the interrupt checks).
pub(crate) fn run<K>(
    e: &mut Embedder,
    prefix: &str,
    cpu_slots: bool,
    read: &mut dyn FnMut() -> Result<Option<Read<K>>>,
    write: &mut dyn FnMut(Read<K>, Option<Embeddings>) -> Result<()>,
) -> Result<IoTime> {
    let budget = batch_tokens(e);
    let max_length = e.config().max_length;
    let mut io = IoTime::default();
    let stop = AtomicBool::new(false);
    // The model thread's borrow of the session, for the scope only.
    let lent: &mut Embedder = &mut *e;
    let io = std::thread::scope(|scope| -> Result<IoTime> {
        let _stop = Stop(&stop);
        let stop = &stop;
        let (to_model, model_in) = sync_channel::<Vec<String>>(1);
        let (model_out, from_model) = sync_channel::<engine::Result<Embeddings>>(1);
        let model = move || {
            for texts in model_in {
                let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
                let out = catch_unwind(AssertUnwindSafe(|| {
                    lent.embed_prompted(&refs, prefix, budget, &mut |_| {
                        if stop.load(Ordering::Relaxed) {
                            // No panic message: the backend's thread stopped on purpose.
                            resume_unwind(Box::new(Stopped));
                        }
                    })
                }));
                let Ok(out) = out else { break };
                if model_out.send(out).is_err() {
                    break;
                }
            }
        };
        crate::engine::signals::with_signals_blocked(|| scope.spawn(model));
        let mut runs: Option<CpuRuns> = None;
        // Sends a batch's present texts to the model thread; false when it has none.
        let mut send = |batch: &Read<K>| -> Result<bool> {
            let present: Vec<String> = batch.texts.iter().flatten().cloned().collect();
            if present.is_empty() {
                return Ok(false);
            }
            if cpu_slots {
                let refs: Vec<&str> = present.iter().map(String::as_str).collect();
                let class = admission::class_of(&refs, max_length);
                runs.get_or_insert_with(|| CpuRuns::new(true, class))
                    .before_run();
            }
            to_model
                .send(present)
                .map_err(|_| model_stopped())
                .map(|_| true)
        };
        let mut timed_read = |io: &mut IoTime| {
            let t = Instant::now();
            let r = read();
            io.read += t.elapsed();
            r
        };
        let Some(mut current) = timed_read(&mut io)? else {
            return Ok(io);
        };
        let mut sent = send(&current)?;
        loop {
            pgrx::check_for_interrupts!();
            let next = timed_read(&mut io)?;
            let emb = if sent {
                Some(receive(&from_model)?)
            } else {
                None
            };
            let next_sent = match &next {
                Some(b) => send(b)?,
                None => false,
            };
            let t = Instant::now();
            write(current, emb)?;
            io.write += t.elapsed();
            match next {
                Some(b) => {
                    current = b;
                    sent = next_sent;
                }
                None => return Ok(io),
            }
        }
    })?;
    e.add_io_time(io.read, io.write);
    Ok(io)
}

/// The model thread's next result, checking for interrupts every [`WAIT_TICK`] meanwhile.
fn receive(
    from_model: &std::sync::mpsc::Receiver<engine::Result<Embeddings>>,
) -> Result<Embeddings> {
    loop {
        match from_model.recv_timeout(WAIT_TICK) {
            Ok(out) => return Ok(out?),
            Err(RecvTimeoutError::Timeout) => {
                pgrx::check_for_interrupts!();
            }
            Err(RecvTimeoutError::Disconnected) => return Err(model_stopped()),
        }
    }
}

fn model_stopped() -> TributaryError {
    TributaryError::Engine(engine::Error::Ort(
        "the model thread of tributary_embed_column stopped".into(),
    ))
}
