//! Embedding texts with an [`Embedder`]: tokenize, sort by length, cut batches by a token
//! budget, run each (through the IoBinding, or plainly for any graph), and put the vectors back
//! in input order; the next window of texts is tokenized while this one runs.

use std::time::Instant;

use half::f16;
use ort::session::{RunOptions, Session};
use ort::value::{Tensor, TensorRef};

use super::{Embedder, ShapeBuckets};
use crate::batch;
use crate::binding::Bound;
use crate::embeddings::{Embeddings, Values};
use crate::error::{Error, Result};
use crate::interface::{pool, InputRole, IntType, Interface, F16};
use crate::tokenize::{TextTokenizer, Tokens};

/// Tokens per pipelining window, as a multiple of the batch budget: the next window is tokenized
/// on other threads while this one runs. Four batches per window keep the length sort within a
/// window fine-grained enough while tokenization stays ahead.
pub(super) const WINDOW_BATCHES: usize = 4;

/// The fixed cost of one ONNX Runtime run on the CPU provider, in tokens of model work, for
/// [`batch::plan`]'s cut. From tools/bench sweeps on 2 AMD EPYC vCPUs (all-MiniLM-L6-v2): a run of
/// one 16-token row costs about 1.6 ms more per row than runs of 128 such rows, and a run of one
/// 64-token row about 3 ms more than runs of 32, at about 0.16 ms per token: 10 to 20 tokens;
/// small runs also use the cores less well, hence 32.
pub(super) const CPU_RUN_OVERHEAD_TOKENS: usize = 32;

/// Most rows in one ORT run, whatever the token budget: bounds batch planning (O(texts x rows
/// per run)) and a run's `[rows, seq]` buffers when texts are very short. At the default budget
/// (2,048 tokens, at least 2 tokens a row) no run reaches it.
pub(super) const MAX_ROWS_PER_RUN: usize = 4096;

/// Where [`Embedder::embed`]'s callback is called from.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Step {
    /// While a window's batches are planned (once per 1,024 texts of it).
    Planning,
    /// Right before an ONNX Runtime run.
    Run,
}

impl Embedder {
    /// Embeds `texts`: tokenize (truncating to `max_length`), sort by length, cut batches of at
    /// most `max_batch_tokens` padded tokens, run each, and return `[texts.len(), dimension]`
    /// in input order.
    ///
    /// Pipelined: texts are ordered by byte length and cut into windows of about
    /// `4 * max_batch_tokens` tokens; while ORT runs the batches of one window on the calling
    /// thread, the next window is tokenized on another thread (itself spreading the work over
    /// HF tokenizers' thread pool). Within a window, batches are planned on exact token lengths.
    ///
    /// Texts longer than [`TextTokenizer::max_bytes`] are cut to it (on a character boundary)
    /// before they are tokenized: tokens past the window would be dropped anyway, and
    /// tokenizing a whole 50 MB text took 5.9 GB.
    ///
    /// `between_batches` runs on the calling thread before every ORT run ([`Step::Run`]) and
    /// while batches are planned ([`Step::Planning`]); the PostgreSQL side checks for interrupts
    /// there, so a cancel stops the work within one batch, and takes a CPU run slot before each
    /// run only. No other thread calls back into the caller.
    ///
    /// Errors: [`Error::OutOfMemory`] when the `[texts, dimension]` output cannot be allocated;
    /// [`Error::Tokenizer`], [`Error::Ort`] from the run.
    pub fn embed(
        &mut self,
        texts: &[&str],
        max_batch_tokens: usize,
        between_batches: &mut dyn FnMut(Step),
    ) -> Result<Embeddings> {
        self.embed_prompted(texts, "", max_batch_tokens, between_batches)
    }

    /// [`Embedder::embed`] with `prefix` (a prompt such as `query: `) put before every text:
    /// its tokens count in the window and in the batch budget, as sentence-transformers'
    /// `prompt` does. Texts whose tokens (prefix included) pass `max_length` are truncated and
    /// listed in [`Embeddings::truncated`].
    pub fn embed_prompted(
        &mut self,
        texts: &[&str],
        prefix: &str,
        max_batch_tokens: usize,
        between_batches: &mut dyn FnMut(Step),
    ) -> Result<Embeddings> {
        let dim = self.config.dimension;
        let mut out = Embeddings::zeroed(dim, texts.len(), self.f16_output())?;
        if texts.is_empty() {
            return Ok(out);
        }
        let gpu = self.provider.is_gpu();
        let f16_out = self.f16_output();
        let max_bytes = self.tokenizer.max_bytes();
        let bytes: Vec<usize> = texts
            .iter()
            .map(|t| t.len().min(max_bytes) + prefix.len())
            .collect();
        let windows = batch::windows(
            &bytes,
            self.config.max_length,
            max_batch_tokens.max(1) * WINDOW_BATCHES,
        );
        let Embedder {
            session,
            tokenizer,
            binding,
            binding_note,
            stats,
            ids,
            mask,
            interface,
            last_run,
            config,
            shapes,
            warmed,
            run_thread,
            threads,
            ..
        } = self;
        let run_thread: Option<&rayon::ThreadPool> = run_thread.as_ref();
        // On a GPU, few input shapes (EmbedderConfig::shape_buckets): rows padded up to a
        // bucket length, batches up to a bucket row count.
        let bucketed = match config.shape_buckets {
            ShapeBuckets::Off => false,
            ShapeBuckets::Gpu => gpu,
            ShapeBuckets::Always => true,
        };
        let max_length = config.max_length;
        if bucketed && config.warm_shapes && warmed.insert(max_batch_tokens) {
            let started = Instant::now();
            let pad = tokenizer.pad_id();
            for (n, seq) in batch::bucket_shapes(max_length, max_batch_tokens, MAX_ROWS_PER_RUN) {
                between_batches(Step::Planning);
                if shapes.insert((n, seq)) {
                    let w = Warm {
                        shape: [n, seq, dim],
                        pad,
                        f16_out,
                    };
                    let (done, thread) = on_run_thread(run_thread, || {
                        w.run(session, interface, binding, binding_note)
                    });
                    done?;
                    threads.insert(thread);
                }
            }
            stats.shapes = shapes.len() as u64;
            stats.warm_up_time += started.elapsed();
        }
        let last_run: Option<&RunOptions> = last_run.as_ref();
        let last_window = windows.len().saturating_sub(1);
        let interface: &Interface = interface;
        let tokenizer: &TextTokenizer = tokenizer;
        let pad = tokenizer.pad_id();
        let encode = |w: &[usize]| {
            tokenizer.encode_prompted(&w.iter().map(|&i| texts[i]).collect::<Vec<_>>(), prefix)
        };
        let mut truncated = Vec::new();
        std::thread::scope(|scope| -> Result<()> {
            let (tx, rx) = std::sync::mpsc::sync_channel::<Result<Vec<Tokens>>>(1);
            if windows.len() > 1 {
                let rest = &windows[1..];
                let _ = crate::signals::with_signals_blocked(|| {
                    scope.spawn(move || {
                        for w in rest {
                            // A closed channel means the caller stopped (error or cancel): stop too.
                            if tx.send(encode(w)).is_err() {
                                break;
                            }
                        }
                    })
                });
            } else {
                drop(tx);
            }
            for (k, window) in windows.iter().enumerate() {
                let waited = Instant::now();
                let tokens = if k == 0 {
                    encode(window)?
                } else {
                    rx.recv()
                        .map_err(|_| Error::Tokenizer("the tokenizer thread stopped".into()))??
                };
                stats.tokenize_wait += waited.elapsed();
                truncated.extend(
                    tokens
                        .iter()
                        .zip(window)
                        .filter(|(t, _)| t.truncated)
                        .map(|(_, &i)| i),
                );
                let lengths: Vec<usize> = tokens
                    .iter()
                    .map(|t| {
                        let len = t.ids.len();
                        if bucketed {
                            batch::bucket_len(len, max_length)
                        } else {
                            len
                        }
                    })
                    .collect();
                // On a GPU a run's fixed cost (kernel launches, copies) dwarfs a padded token's, so
                // batches are filled to the budget there (not measured yet: no GPU so far).
                let overhead = if gpu {
                    max_batch_tokens
                } else {
                    CPU_RUN_OVERHEAD_TOKENS
                };
                let (order, batches) = batch::plan(
                    &lengths,
                    max_batch_tokens,
                    MAX_ROWS_PER_RUN,
                    overhead,
                    &mut || between_batches(Step::Planning),
                );
                for (j, b) in batches.iter().enumerate() {
                    between_batches(Step::Run);
                    let options = last_run.filter(|_| k == last_window && j + 1 == batches.len());
                    let mut rows: Vec<usize> = order[b.range.clone()].to_vec();
                    let real_rows = rows.len();
                    let seq = b.seq_len;
                    if bucketed {
                        // Extra rows repeat the last real one; their outputs are not scattered.
                        let full = (max_batch_tokens / seq).clamp(1, MAX_ROWS_PER_RUN);
                        let last = rows[real_rows - 1];
                        rows.resize(batch::bucket_rows(real_rows, full), last);
                    }
                    let n = rows.len();
                    shapes.insert((n, seq));
                    stats.shapes = shapes.len() as u64;
                    let fill = |ids: &mut [i32], mask: &mut [i32]| {
                        fill_batch(&tokens, &rows, seq, pad, ids, mask)
                    };
                    // Input position -> where its vector goes in `out`.
                    let dest: Vec<usize> = rows[..real_rows].iter().map(|&i| window[i]).collect();
                    let started = Instant::now();
                    let (done, thread) = on_run_thread(run_thread, || -> Result<()> {
                        let bound = binding.as_mut().map(|bound| {
                            bound
                                .run(session, interface.ids_and_mask(), n, seq, fill, options)
                                .and_then(|o| scatter(&o[0], n, dim, &dest, &mut out))
                        });
                        match bound {
                            Some(Ok(())) => Ok(()),
                            other => {
                                if let Some(Err(e)) = other {
                                    // Binding failed: plain runs from now on, and say so.
                                    *binding = None;
                                    *binding_note =
                                        format!("io binding failed, plain runs since: {e}");
                                }
                                ids.resize(n * seq, 0);
                                mask.resize(n * seq, 0);
                                fill_batch(&tokens, &rows, seq, pad, ids, mask);
                                run_plain(
                                    session,
                                    interface,
                                    [n, seq, dim],
                                    (ids, mask),
                                    &dest,
                                    &mut out,
                                    options,
                                )
                            }
                        }
                    });
                    done?;
                    threads.insert(thread);
                    stats.run_threads = threads.len() as u64;
                    stats.run_time += started.elapsed();
                    let real: usize = rows[..real_rows].iter().map(|&i| tokens[i].ids.len()).sum();
                    stats.runs += 1;
                    stats.rows += real_rows as u64;
                    stats.tokens += real as u64;
                    stats.padded_tokens += (n * seq) as u64;
                    out.tokens += real;
                    out.padded_tokens += n * seq;
                    out.batches += 1;
                }
            }
            Ok(())
        })?;
        truncated.sort_unstable();
        stats.truncated += truncated.len() as u64;
        out.truncated = truncated;
        Ok(out)
    }
}

/// Runs `f` (one ONNX Runtime run) on the session's own thread when it has one, else on the
/// calling thread. See [`crate::EmbedderConfig::run_thread`].
/// Also returns the thread it ran on.
fn on_run_thread<R: Send>(
    pool: Option<&rayon::ThreadPool>,
    f: impl FnOnce() -> R + Send,
) -> (R, std::thread::ThreadId) {
    let g = || (f(), std::thread::current().id());
    match pool {
        Some(p) => p.install(g),
        None => g(),
    }
}

/// One warm-up run of a shape: `[n, seq]` tokens of `pad` (mask all 1), output dropped.
struct Warm {
    shape: [usize; 3],
    pad: i32,
    f16_out: bool,
}

impl Warm {
    /// Runs through the IoBinding when there is one (falling back to plain runs for good if it
    /// fails, as [`Embedder::embed`] does), else plainly.
    fn run(
        &self,
        session: &mut Session,
        interface: &Interface,
        binding: &mut Option<Bound>,
        binding_note: &mut String,
    ) -> Result<()> {
        let [n, seq, dim] = self.shape;
        let fill = |ids: &mut [i32], mask: &mut [i32]| {
            ids.fill(self.pad);
            mask.fill(1);
        };
        let bound = binding.as_mut().map(|bound| {
            bound
                .run(session, interface.ids_and_mask(), n, seq, fill, None)
                .map(|_| ())
        });
        match bound {
            Some(Ok(())) => return Ok(()),
            Some(Err(e)) => {
                *binding = None;
                *binding_note = format!("io binding failed, plain runs since: {e}");
            }
            None => {}
        }
        let ids = vec![self.pad; n * seq];
        let mask = vec![1; n * seq];
        let dest: Vec<usize> = (0..n).collect();
        let mut scratch = Embeddings::zeroed(dim, n, self.f16_out)?;
        run_plain(
            session,
            interface,
            self.shape,
            (&ids, &mask),
            &dest,
            &mut scratch,
            None,
        )
    }
}

/// Writes one `[rows.len(), seq]` batch, row-major, into `ids` and `mask` (`rows.len() * seq`
/// values each), the same for IoBinding's buffers and for plain runs: row `r` is the ids of
/// `tokens[rows[r]]` (at most `seq` of them) then `pad`, and its attention mask is 1 for each id
/// and 0 for the padding.
fn fill_batch(
    tokens: &[Tokens],
    rows: &[usize],
    seq: usize,
    pad: i32,
    ids: &mut [i32],
    mask: &mut [i32],
) {
    debug_assert!(ids.len() == rows.len() * seq && mask.len() == ids.len());
    for ((&i, row_ids), row_mask) in rows
        .iter()
        .zip(ids.chunks_exact_mut(seq))
        .zip(mask.chunks_exact_mut(seq))
    {
        let t = &tokens[i].ids;
        row_ids[..t.len()].copy_from_slice(t);
        row_ids[t.len()..].fill(pad);
        row_mask[..t.len()].fill(1);
        row_mask[t.len()..].fill(0);
    }
}

/// One run without an IoBinding, for any [`Interface`]: each input built from the `[n, seq]`
/// `ids` and `mask` (`[n, seq, dim]` is `shape`) in the graph's integer type (`token_type_ids`
/// all 0), then the output copied (pooled in the graph) or pooled here into `out`, row `k` to
/// row `dest[k]`; `options` for the run when given.
fn run_plain(
    session: &mut Session,
    interface: &Interface,
    [n, seq, dim]: [usize; 3],
    (ids, mask): (&[i32], &[i32]),
    dest: &[usize],
    out: &mut Embeddings,
    options: Option<&RunOptions>,
) -> Result<()> {
    let shape = [n as i64, seq as i64];
    let zeros = vec![
        0i32;
        if interface.has(InputRole::TypeIds) {
            n * seq
        } else {
            0
        }
    ];
    let mut inputs: Vec<(&str, ort::session::SessionInputValue<'_>)> = Vec::new();
    for (name, role, ty) in &interface.inputs {
        let data: &[i32] = match role {
            InputRole::Ids => ids,
            InputRole::Mask => mask,
            InputRole::TypeIds => &zeros,
        };
        let value = match ty {
            IntType::I32 => TensorRef::from_array_view((shape, data))?.into(),
            IntType::I64 => {
                let wide: Vec<i64> = data.iter().map(|&v| i64::from(v)).collect();
                Tensor::from_array((shape, wide))?.into()
            }
        };
        inputs.push((name.as_str(), value));
    }
    let outputs = match options {
        Some(o) => session.run_with_options(inputs, o)?,
        None => session.run(inputs)?,
    };
    let value = &outputs[interface.output.as_str()];
    let Some(pooling) = interface.pooling else {
        return scatter(value, n, dim, dest, out);
    };
    let Values::F32(values) = &mut out.values else {
        return Err(Error::ModelMismatch("pooled embeddings are float32".into()));
    };
    let mut pooled = vec![0f32; n * dim];
    macro_rules! pool_as {
        ($t:ty, $wrap:expr) => {{
            let (got, src) = value.try_extract_tensor::<$t>()?;
            if got.len() != 3 || src.len() != n * seq * dim {
                return Err(Error::ModelMismatch(format!(
                    "expected token embeddings [{n}, {seq}, {dim}] from the model, got {:?}",
                    &**got
                )));
            }
            let widened: Vec<_> = src.iter().map($wrap).collect();
            pool(
                &widened,
                mask,
                [n, seq, dim],
                pooling,
                interface.normalize,
                &mut pooled,
            );
        }};
    }
    if interface.f16_output {
        pool_as!(f16, |&x| F16(x));
    } else {
        pool_as!(f32, |&x| x);
    }
    for (k, &d) in dest.iter().enumerate() {
        values[d * dim..(d + 1) * dim].copy_from_slice(&pooled[k * dim..(k + 1) * dim]);
    }
    Ok(())
}

/// Copies the `[n, dim]` output `value` of one run into `out`, row `k` to row `dest[k]`.
fn scatter(
    value: &ort::value::DynValue,
    n: usize,
    dim: usize,
    dest: &[usize],
    out: &mut Embeddings,
) -> Result<()> {
    macro_rules! copy {
        ($t:ty, $v:expr) => {{
            let (shape, src) = value.try_extract_tensor::<$t>()?;
            if src.len() != n * dim {
                return Err(Error::ModelMismatch(format!(
                    "expected [{n}, {dim}] from the model, got {:?}",
                    &**shape
                )));
            }
            for (k, &d) in dest.iter().enumerate() {
                $v[d * dim..(d + 1) * dim].copy_from_slice(&src[k * dim..(k + 1) * dim]);
            }
        }};
    }
    match &mut out.values {
        Values::F32(v) => copy!(f32, v),
        Values::F16(v) => copy!(f16, v),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{fill_batch, Tokens};

    #[test]
    fn batches_are_filled_row_major_with_padding_masked_out() {
        let tokens = [
            Tokens {
                ids: vec![101, 7, 102],
                truncated: false,
            },
            Tokens {
                ids: vec![101, 102],
                truncated: false,
            },
            Tokens {
                ids: vec![101, 5, 6, 102],
                truncated: false,
            },
        ];
        let (mut ids, mut mask) = (vec![-1; 8], vec![-1; 8]);
        fill_batch(&tokens, &[2, 1], 4, 0, &mut ids, &mut mask);
        assert_eq!(ids, [101, 5, 6, 102, 101, 102, 0, 0]);
        assert_eq!(mask, [1, 1, 1, 1, 1, 1, 0, 0]);
    }
}
