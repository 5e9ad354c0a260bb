//! The ONNX Runtime environment and sessions: library loading, execution providers, running a
//! model over length-sorted token-budget batches.
//!
//! One [`Embedder`] is an ORT session plus its tokenizer. The PostgreSQL side keeps one per
//! backend and model (created on first use, never in the postmaster) and reuses it.
//!
//! Over 600 lines only by its tests (the code is about 580): the tests on the real model use the
//! module's private items (window planning, run overhead), so they stay here.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use half::f16;
use ort::ep::ExecutionProvider;
use ort::session::builder::GraphOptimizationLevel;
use ort::session::{RunOptions, Session};
use ort::value::{Tensor, TensorRef};

use super::batch;
use super::binding::{Bound, HostMemory};
use super::error::{Error, Result};
use super::interface::{pool, InputRole, IntType, Interface, Pooling, F16};
use super::tokenize::{TextTokenizer, Tokens};

pub use super::embeddings::{Embeddings, Values};
pub use super::runtime::{preload_libraries, runtime, Runtime};

/// Which execution provider to ask for (`tributary.execution_provider`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProviderChoice {
    /// CUDA when it loads, else CPU; the reason for falling back is kept in [`Embedder::provider_note`].
    Auto,
    Cpu,
    Cuda,
    /// TensorRT, with CUDA for the nodes TensorRT does not take.
    TensorRt,
}

/// The execution provider a session actually runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Provider {
    Cpu,
    Cuda,
    TensorRt,
}

impl Provider {
    /// `cpu`, `cuda` or `tensorrt`, as in `tributary.execution_provider`.
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Cpu => "cpu",
            Provider::Cuda => "cuda",
            Provider::TensorRt => "tensorrt",
        }
    }

    pub fn is_gpu(self) -> bool {
        self != Provider::Cpu
    }
}

/// What a session needs: files, shapes, provider and threads.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EmbedderConfig {
    pub model_file: PathBuf,
    pub tokenizer_file: PathBuf,
    /// Truncation length in tokens.
    pub max_length: usize,
    /// Embedding dimension the model must produce.
    pub dimension: usize,
    pub provider: ProviderChoice,
    /// ORT intra-op threads; 0 lets ORT use one per physical core.
    pub intra_op_threads: usize,
    pub gpu_device: i32,
    /// The graph to load instead of `model_file` when the session runs on a GPU (the model's
    /// fp16 graph); `None` loads `model_file` everywhere.
    pub gpu_model_file: Option<PathBuf>,
    /// CUDA memory arena limit in MiB (CUDA provider option `gpu_mem_limit`); 0 = no limit.
    pub gpu_memory_limit_mb: usize,
    /// Where TensorRT keeps its engine and timing caches.
    pub tensorrt_cache_dir: Option<PathBuf>,
    /// Run through an IoBinding with reused host buffers (falls back to plain runs if binding fails).
    pub io_binding: bool,
    /// `None`: the graph pools (tributary's exports, `[batch, dim]` output). `Some`: the graph
    /// returns token embeddings (a standard export) and they are pooled here.
    pub pooling: Option<Pooling>,
    /// L2-normalise after pooling here (sentence-transformers' `Normalize` module).
    pub normalize: bool,
    /// Where prepared CPU graphs are kept ([`crate::prepared`]): a CPU session loads the model's
    /// prepared graph from there (preparing it first if this machine has none), so its weights
    /// are mapped from one file shared by every process. `None` loads `model_file` as it is,
    /// with its weights copied into this process.
    pub prepared_cache: Option<PathBuf>,
    /// Give the CPU arena's memory back after the last ONNX Runtime run of each call (run option
    /// `memory.enable_memory_arena_shrinkage`), so that one large call does not leave the process
    /// holding its peak for good.
    pub shrink_arena: bool,
    /// Let ONNX Runtime's intra-op threads spin while waiting for work (its default). Spinning
    /// threads of one process take the cores from the others: with 4 backends busy on 2 vCPUs,
    /// turning it off gave 1.65x the rows/s (BENCHMARKS.md, "Many backends").
    pub intra_op_spinning: bool,
}

impl EmbedderConfig {
    /// A configuration with the defaults of the settings: auto provider, ORT's thread count,
    /// device 0, no GPU graph, no memory limit, IoBinding on.
    pub fn new(
        model_file: PathBuf,
        tokenizer_file: PathBuf,
        max_length: usize,
        dimension: usize,
    ) -> Self {
        EmbedderConfig {
            model_file,
            tokenizer_file,
            max_length,
            dimension,
            provider: ProviderChoice::Auto,
            intra_op_threads: 0,
            gpu_device: 0,
            gpu_model_file: None,
            gpu_memory_limit_mb: 0,
            tensorrt_cache_dir: None,
            io_binding: true,
            pooling: None,
            normalize: false,
            prepared_cache: None,
            shrink_arena: false,
            intra_op_spinning: true,
        }
    }
}

/// What a session has done since it was created (shown by `tributary_sessions()`).
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// ORT runs (batches).
    pub runs: u64,
    pub rows: u64,
    /// Real tokens, and tokens including padding.
    pub tokens: u64,
    pub padded_tokens: u64,
    /// Time inside ORT runs (binding, host/device copies and the model).
    pub run_time: Duration,
    /// Time the calling thread waited for tokenization (the part not hidden behind ORT runs).
    pub tokenize_wait: Duration,
    /// Texts longer than the window (`max_length` tokens), cut to it.
    pub truncated: u64,
    /// Time to create the session (ms), preparing its graph included when it was prepared then.
    pub create_time: Duration,
}

/// An ONNX Runtime session for one embedding model with its tokenizer.
///
/// The graph's inputs and output are read from the session ([`Interface`]): tributary's exports
/// take `input_ids`, `attention_mask` as `[batch, seq] int32` and return `[batch, dimension]` f32
/// or f16 (pooling and L2 normalisation inside the graph; see `ort/scripts/export_model.py`);
/// standard exports take int64 inputs (and `token_type_ids`) and return `[batch, seq, dimension]`
/// token embeddings, pooled here.
pub struct Embedder {
    session: Session,
    tokenizer: TextTokenizer,
    config: EmbedderConfig,
    provider: Provider,
    provider_note: String,
    /// The graph file the session loaded (`model_file`, its prepared graph on the CPU, or
    /// `gpu_model_file` on a GPU).
    loaded_file: PathBuf,
    /// Why a CPU session loads `model_file` rather than its prepared graph, or empty.
    graph_note: String,
    interface: Interface,
    binding: Option<Bound>,
    binding_note: String,
    /// Options of a call's last run: shrink the CPU arena afterwards (`shrink_arena`).
    last_run: Option<RunOptions>,
    stats: Stats,
    // Reused across batches by plain (unbound) runs.
    ids: Vec<i32>,
    mask: Vec<i32>,
}

/// Tokens per pipelining window, as a multiple of the batch budget: the next window is tokenized
/// on other threads while this one runs. Four batches per window keep the length sort within a
/// window fine-grained enough while tokenization stays ahead.
const WINDOW_BATCHES: usize = 4;

/// The fixed cost of one ONNX Runtime run on the CPU provider, in tokens of model work, for
/// [`batch::plan`]'s cut. From tools/bench sweeps on 2 AMD EPYC vCPUs (all-MiniLM-L6-v2): a run of
/// one 16-token row costs about 1.6 ms more per row than runs of 128 such rows, and a run of one
/// 64-token row about 3 ms more than runs of 32, at about 0.16 ms per token: 10 to 20 tokens;
/// small runs also use the cores less well, hence 32.
const CPU_RUN_OVERHEAD_TOKENS: usize = 32;

/// Most rows in one ORT run, whatever the token budget: bounds batch planning (O(texts x rows
/// per run)) and a run's `[rows, seq]` buffers when texts are very short. At the default budget
/// (2,048 tokens, at least 2 tokens a row) no run reaches it.
const MAX_ROWS_PER_RUN: usize = 4096;

impl Embedder {
    /// Creates the session and tokenizer in the loaded [`runtime`].
    ///
    /// Errors: [`Error::ModelFile`] for a missing ONNX or tokenizer file, [`Error::Provider`]
    /// (with ONNX Runtime's reason) when `Cuda` or `TensorRt` was asked for and cannot be used,
    /// [`Error::Ort`] when ORT rejects the model.
    pub fn new(runtime: &Runtime, config: EmbedderConfig) -> Result<Self> {
        // The session's thread pools and the tokenizer's pool start here, with every signal
        // blocked (they inherit the mask; see signals.rs).
        super::signals::start_tokenizer_pool();
        super::signals::with_signals_blocked(|| Self::create(runtime, config))
    }

    fn create(runtime: &Runtime, config: EmbedderConfig) -> Result<Self> {
        let started = Instant::now();
        // The graph first: a model directory that does not exist is reported by its model file.
        if !config.model_file.is_file() {
            return Err(Error::ModelFile {
                path: config.model_file.clone(),
                reason: "no such file".into(),
            });
        }
        let tokenizer = TextTokenizer::from_file(&config.tokenizer_file, config.max_length)?;
        let explicit = |p: Provider| match Self::session(runtime, &config, p) {
            Err(Error::Ort(reason)) => Err(Error::Provider {
                provider: p.as_str(),
                reason,
            }),
            other => other.map(|(s, f, g)| (s, f, g, p, String::new())),
        };
        let (session, loaded_file, graph_note, provider, provider_note) = match config.provider {
            ProviderChoice::Cpu => explicit(Provider::Cpu)?,
            ProviderChoice::Cuda => explicit(Provider::Cuda)?,
            ProviderChoice::TensorRt => explicit(Provider::TensorRt)?,
            ProviderChoice::Auto => match Self::session(runtime, &config, Provider::Cuda) {
                Ok((s, f, g)) => (s, f, g, Provider::Cuda, String::new()),
                Err(e) => {
                    let (s, f, g) = Self::session(runtime, &config, Provider::Cpu)?;
                    (s, f, g, Provider::Cpu, format!("cuda unavailable: {e}"))
                }
            },
        };
        let interface = Interface::read(&session, config.pooling, config.normalize)?;
        let (binding, binding_note) = if !interface.is_native() {
            (
                None,
                "io binding is for tributary's exports; plain runs for this graph".to_owned(),
            )
        } else if config.io_binding {
            let memory = if provider.is_gpu() {
                HostMemory::Pinned {
                    device: config.gpu_device,
                }
            } else {
                HostMemory::Cpu
            };
            match Bound::new(&session, memory, &interface.output, 4096) {
                Ok(b) => (Some(b), String::new()),
                Err(e) => (None, format!("io binding unavailable, plain runs: {e}")),
            }
        } else {
            (None, "io binding off (tributary.io_binding)".to_owned())
        };
        let last_run = if config.shrink_arena && provider == Provider::Cpu {
            let mut o = RunOptions::new()?;
            o.set("memory.enable_memory_arena_shrinkage", "cpu:0")?;
            Some(o)
        } else {
            None
        };
        Ok(Embedder {
            session,
            tokenizer,
            config,
            provider,
            provider_note,
            loaded_file,
            interface,
            binding,
            binding_note,
            graph_note,
            last_run,
            stats: Stats {
                create_time: started.elapsed(),
                ..Stats::default()
            },
            ids: Vec::new(),
            mask: Vec::new(),
        })
    }

    /// Whether `config`'s CUDA (or TensorRT) execution provider can be tried at all: the ONNX
    /// Runtime library has it and the machine has an NVIDIA GPU (`/proc/driver/nvidia/gpus` lists
    /// one). `Err` says why not. Checked before a GPU slot is asked for, so that a CPU-only
    /// library or machine never takes, waits for or fails on a slot; a GPU that is present but
    /// fails to start is still found only by creating the session.
    pub fn gpu_possible(
        runtime: &Runtime,
        provider: ProviderChoice,
    ) -> std::result::Result<(), String> {
        let in_library = match provider {
            ProviderChoice::Cpu => return Err("the cpu execution provider was asked for".into()),
            ProviderChoice::TensorRt => ort::ep::TensorRT::is_available(),
            ProviderChoice::Auto | ProviderChoice::Cuda => ort::ep::CUDA::is_available(),
        }
        .unwrap_or(false);
        if !in_library {
            let ep = if provider == ProviderChoice::TensorRt {
                "TensorRT"
            } else {
                "CUDA"
            };
            return Err(format!(
                "{} was built without the {ep} execution provider",
                runtime.library.display()
            ));
        }
        let gpus = std::fs::read_dir("/proc/driver/nvidia/gpus")
            .map(|d| d.count())
            .unwrap_or(0);
        if gpus == 0 {
            return Err(
                "no NVIDIA GPU on this machine (/proc/driver/nvidia/gpus lists none)".into(),
            );
        }
        Ok(())
    }

    fn session(
        runtime: &Runtime,
        config: &EmbedderConfig,
        provider: Provider,
    ) -> Result<(Session, PathBuf, String)> {
        let mut file = match (&config.gpu_model_file, provider.is_gpu()) {
            (Some(f), true) => f.clone(),
            _ => config.model_file.clone(),
        };
        let mut level = GraphOptimizationLevel::Level3;
        let mut graph_note = String::new();
        match (&config.prepared_cache, provider) {
            (Some(cache), Provider::Cpu) if file.is_file() => {
                match super::prepared::prepared_graph(runtime, &file, cache) {
                    Ok(prepared) => {
                        file = prepared;
                        // Optimised when it was prepared; its prepacked weights are in its file.
                        level = GraphOptimizationLevel::Disable;
                    }
                    Err(e) => {
                        graph_note = format!(
                            "prepared graph unavailable, weights copied into this process: {e}"
                        )
                    }
                }
            }
            (None, Provider::Cpu) => {
                graph_note =
                    "weights copied into this process (tributary.shared_weights is off)".into()
            }
            _ => {}
        }
        if !file.is_file() {
            return Err(Error::ModelFile {
                path: file,
                reason: "no such file".into(),
            });
        }
        let mut builder = Session::builder(&runtime.environment)?
            .with_optimization_level(level)?
            .with_inter_threads(1)?;
        if !config.intra_op_spinning {
            builder = builder.with_intra_op_spinning(false)?;
        }
        if config.intra_op_threads > 0 {
            builder = builder.with_intra_threads(config.intra_op_threads)?;
        }
        let cuda = || {
            let mut ep = ort::ep::CUDA::default().with_device_id(config.gpu_device);
            if config.gpu_memory_limit_mb > 0 {
                ep = ep.with_memory_limit(config.gpu_memory_limit_mb << 20);
            }
            ep
        };
        match provider {
            Provider::Cpu => {}
            Provider::Cuda => {
                if !ort::ep::CUDA::is_available()? {
                    return Err(Error::Ort(format!(
                        "{} was built without the CUDA execution provider",
                        runtime.library.display()
                    )));
                }
                cuda().register(&mut builder)?;
            }
            Provider::TensorRt => {
                if !ort::ep::TensorRT::is_available()? {
                    return Err(Error::Ort(format!(
                        "{} was built without the TensorRT execution provider",
                        runtime.library.display()
                    )));
                }
                let mut trt = ort::ep::TensorRT::default()
                    .with_device_id(config.gpu_device)
                    .with_fp16(true)
                    .with_engine_cache(true)
                    .with_timing_cache(true);
                if let Some(dir) = &config.tensorrt_cache_dir {
                    std::fs::create_dir_all(dir).map_err(|e| {
                        Error::Ort(format!(
                            "cannot create the TensorRT cache directory {}: {e}",
                            dir.display()
                        ))
                    })?;
                    trt = trt
                        .with_engine_cache_path(dir.display())
                        .with_timing_cache_path(dir.display());
                }
                trt.register(&mut builder)?;
                // Nodes TensorRT does not take run on CUDA rather than on the CPU.
                cuda().register(&mut builder)?;
            }
        }
        Ok((builder.commit_from_file(&file)?, file, graph_note))
    }

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
    /// `between_batches` runs on the calling thread before every ORT run and while batches are
    /// planned; the PostgreSQL side checks for interrupts there, so a cancel stops the work
    /// within one batch. No other thread calls back into the caller.
    ///
    /// Errors: [`Error::OutOfMemory`] when the `[texts, dimension]` output cannot be allocated;
    /// [`Error::Tokenizer`], [`Error::Ort`] from the run.
    pub fn embed(
        &mut self,
        texts: &[&str],
        max_batch_tokens: usize,
        between_batches: &mut dyn FnMut(),
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
        between_batches: &mut dyn FnMut(),
    ) -> Result<Embeddings> {
        let dim = self.config.dimension;
        let mut out = Embeddings::zeroed(dim, texts.len(), self.f16_output())?;
        if texts.is_empty() {
            return Ok(out);
        }
        let gpu = self.provider.is_gpu();
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
            ..
        } = self;
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
                let _ = super::signals::with_signals_blocked(|| {
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
                let lengths: Vec<usize> = tokens.iter().map(|t| t.ids.len()).collect();
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
                    &mut *between_batches,
                );
                for (j, b) in batches.iter().enumerate() {
                    between_batches();
                    let options = last_run.filter(|_| k == last_window && j + 1 == batches.len());
                    let rows: Vec<usize> = order[b.range.clone()].to_vec();
                    let (n, seq) = (rows.len(), b.seq_len);
                    let fill = |ids: &mut [i32], mask: &mut [i32]| {
                        fill_batch(&tokens, &rows, seq, pad, ids, mask)
                    };
                    // Input position -> where its vector goes in `out`.
                    let dest: Vec<usize> = rows.iter().map(|&i| window[i]).collect();
                    let started = Instant::now();
                    let bound = binding.as_mut().map(|bound| {
                        bound
                            .run(session, interface.ids_and_mask(), n, seq, fill, options)
                            .and_then(|o| scatter(&o[0], n, dim, &dest, &mut out))
                    });
                    match bound {
                        Some(Ok(())) => {}
                        other => {
                            if let Some(Err(e)) = other {
                                // Binding failed: plain runs from now on, and say so in the stats.
                                *binding = None;
                                *binding_note = format!("io binding failed, plain runs since: {e}");
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
                            )?;
                        }
                    }
                    stats.run_time += started.elapsed();
                    let real: usize = rows.iter().map(|&i| tokens[i].ids.len()).sum();
                    stats.runs += 1;
                    stats.rows += n as u64;
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

    /// The execution provider this session runs on.
    pub fn provider(&self) -> Provider {
        self.provider
    }

    /// Why the session runs on the CPU though a GPU provider was asked for (`auto`'s fallback,
    /// or a reason the caller added with [`Embedder::add_provider_note`]), or empty.
    pub fn provider_note(&self) -> &str {
        &self.provider_note
    }

    /// Adds `why` (e.g. GPU admission sent this session to the CPU) to [`Embedder::provider_note`].
    pub fn add_provider_note(&mut self, why: &str) {
        if why.is_empty() {
            return;
        }
        if !self.provider_note.is_empty() {
            self.provider_note.push_str("; ");
        }
        self.provider_note.push_str(why);
    }

    /// Whether runs go through an IoBinding now.
    pub fn io_binding(&self) -> bool {
        self.binding.is_some()
    }

    /// Why runs do not go through an IoBinding (off, unavailable, or failed and fell back), or empty.
    pub fn io_binding_note(&self) -> &str {
        &self.binding_note
    }

    /// The graph file the session loaded.
    pub fn loaded_file(&self) -> &Path {
        &self.loaded_file
    }

    /// Why a CPU session copied the model's weights instead of mapping its prepared graph
    /// (`prepared_cache` off, or preparing failed), or empty.
    pub fn graph_note(&self) -> &str {
        &self.graph_note
    }

    /// Whether the embeddings are f16 (an fp16 graph that pools inside; pooling done here is
    /// in f32).
    pub fn f16_output(&self) -> bool {
        self.interface.f16_output && self.interface.pooling.is_none()
    }

    /// The graph's inputs and output as read from the session.
    pub fn interface(&self) -> &Interface {
        &self.interface
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    pub fn config(&self) -> &EmbedderConfig {
        &self.config
    }

    pub fn tokenizer(&self) -> &TextTokenizer {
        &self.tokenizer
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

/// The checkout this crate is in (crates/engine/../..), where scripts/setup.sh puts the ONNX
/// Runtime library (ort/lib) and the default model (ort/models) that tests use.
#[cfg(test)]
pub(crate) fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Engine tests on the real ONNX Runtime library and the real default model, as prepared by
/// scripts/setup.sh in this checkout (ort/lib, ort/models).
#[cfg(test)]
mod real_model_tests {
    use super::*;

    fn model_dir() -> PathBuf {
        repo_root().join("ort/models/all-MiniLM-L6-v2")
    }

    fn library() -> PathBuf {
        repo_root().join("ort/lib/libonnxruntime.so.1.31.1")
    }

    fn config(max_length: usize) -> EmbedderConfig {
        let dir = model_dir();
        let mut c = EmbedderConfig::new(
            dir.join("model.onnx"),
            dir.join("tokenizer.json"),
            max_length,
            384,
        );
        c.provider = ProviderChoice::Cpu;
        c.intra_op_threads = 1;
        c
    }

    fn rt() -> &'static Runtime {
        runtime(&library()).expect("run scripts/setup.sh first")
    }

    fn embedder(max_length: usize) -> Embedder {
        Embedder::new(rt(), config(max_length)).unwrap()
    }

    fn min_cosine(a: &Embeddings, b: &Embeddings) -> f32 {
        assert_eq!(a.rows(), b.rows());
        (0..a.rows())
            .map(|i| {
                a.row_f32(i)
                    .iter()
                    .zip(b.row_f32(i).iter())
                    .map(|(x, y)| x * y)
                    .sum::<f32>()
            })
            .fold(f32::MAX, f32::min)
    }

    fn corpus() -> Vec<String> {
        // Mixed lengths, from empty to past max_length, in no particular order.
        (0..120)
            .map(|i| "word ".repeat((i * 37) % 300) + &format!("row {i}"))
            .collect()
    }

    #[test]
    fn io_binding_and_plain_runs_agree() {
        let texts = corpus();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let mut bound = embedder(256);
        assert_eq!(bound.provider(), Provider::Cpu, "the provider asked for");
        assert!(
            bound.io_binding(),
            "CPU IoBinding should work: {}",
            bound.io_binding_note()
        );
        let mut plain_cfg = config(256);
        plain_cfg.io_binding = false;
        let mut plain = Embedder::new(rt(), plain_cfg).unwrap();
        assert!(!plain.io_binding());
        assert!(plain.io_binding_note().contains("off"));
        let a = bound.embed(&refs, 2048, &mut || {}).unwrap();
        let b = plain.embed(&refs, 2048, &mut || {}).unwrap();
        assert_eq!(a.batches, b.batches);
        assert!(a.batches > 1);
        let cos = min_cosine(&a, &b);
        assert!(cos > 0.99999, "bound vs plain min cosine {cos}");
        assert_eq!(bound.stats().rows, 120);
        assert!(
            bound.io_binding(),
            "still bound after many batches of different shapes"
        );
    }

    #[test]
    fn pipelined_windows_give_the_same_vectors_in_input_order() {
        let texts = corpus();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let mut e = embedder(256);
        // A budget of 256 tokens makes windows of ~1024 tokens: dozens of windows, each
        // tokenized on the producer thread while the previous one runs.
        let windows = batch::windows(
            &refs.iter().map(|t| t.len()).collect::<Vec<_>>(),
            256,
            256 * WINDOW_BATCHES,
        );
        assert!(windows.len() > 10, "{} windows", windows.len());
        let mut calls = 0;
        let piped = e.embed(&refs, 256, &mut || calls += 1).unwrap();
        // The callback runs before every ORT run, and once while each window (under 1,024 texts)
        // is planned.
        assert_eq!(calls, piped.batches + windows.len());
        // One window, cut by padding against run cost only: another batching of the same texts.
        let whole = e.embed(&refs, 1 << 22, &mut || {}).unwrap();
        assert!(
            whole.batches < piped.batches,
            "{} vs {}",
            whole.batches,
            piped.batches
        );
        let cos = min_cosine(&piped, &whole);
        assert!(cos > 0.99999, "pipelined vs one batch min cosine {cos}");
        for i in [0, 17, 119] {
            let one = e.embed(&refs[i..=i], 1 << 20, &mut || {}).unwrap();
            let c: f32 = one
                .row_f32(0)
                .iter()
                .zip(piped.row_f32(i).iter())
                .map(|(x, y)| x * y)
                .sum();
            assert!(c > 0.99999, "row {i}: {c}");
        }
    }

    #[test]
    fn fp16_graph_returns_f16_close_to_fp32() {
        let dir = model_dir();
        let mut cfg = config(256);
        cfg.model_file = dir.join("model_fp16.onnx");
        let mut half = Embedder::new(rt(), cfg).unwrap();
        assert!(
            half.f16_output(),
            "export_model.py writes the fp16 graph with an fp16 output"
        );
        let texts = corpus();
        let refs: Vec<&str> = texts.iter().take(40).map(String::as_str).collect();
        let h = half.embed(&refs, 2048, &mut || {}).unwrap();
        assert!(h.is_f16());
        let f = embedder(256).embed(&refs, 2048, &mut || {}).unwrap();
        assert!(!f.is_f16());
        let cos = min_cosine(&h, &f);
        assert!(cos > 0.999, "fp16 vs fp32 min cosine {cos}");
        // f32 -> f16 for a halfvec: the same values as the model's own f16, value for value, to
        // within a few fp16 steps (values here are below 0.25, where a step is 1.2e-4; measured on
        // these 40 texts: at most 2.4e-4).
        for r in 0..h.rows() {
            let (ours, model) = (f.row_f16(r), h.row_f16(r));
            assert_eq!(ours.len(), 384);
            let diff = ours
                .iter()
                .zip(model.iter())
                .map(|(x, y)| (x.to_f32() - y.to_f32()).abs())
                .fold(0.0f32, f32::max);
            assert!(
                diff <= 1e-3,
                "row {r}: f32 rounded to f16 vs the fp16 graph, max abs diff {diff}"
            );
        }
    }

    #[test]
    fn gpu_providers_run_where_asked_or_fail_with_the_reason() {
        rt();
        let built_with = [
            (
                ProviderChoice::Cuda,
                Provider::Cuda,
                ort::ep::CUDA::is_available().unwrap(),
            ),
            (
                ProviderChoice::TensorRt,
                Provider::TensorRt,
                ort::ep::TensorRT::is_available().unwrap(),
            ),
        ];
        for (choice, asked, in_library) in built_with {
            let mut cfg = config(256);
            cfg.provider = choice;
            match Embedder::new(rt(), cfg) {
                // Any machine: on the provider asked for, or not at all.
                Ok(e) => assert_eq!(e.provider(), asked),
                Err(Error::Provider { provider, reason }) => {
                    assert_eq!(provider, asked.as_str());
                    // A CPU build of ONNX Runtime (scripts/setup.sh's) says so; a GPU build says
                    // what failed (no device, no CUDA libraries).
                    if !in_library {
                        assert!(reason.contains("built without"), "{reason}");
                    }
                    assert!(!reason.is_empty());
                }
                Err(e) => panic!("{e}"),
            }
        }
        let mut cfg = config(256);
        cfg.provider = ProviderChoice::Auto;
        let e = Embedder::new(rt(), cfg).unwrap();
        match e.provider() {
            Provider::Cpu => assert!(
                e.provider_note().starts_with("cuda unavailable"),
                "{}",
                e.provider_note()
            ),
            p => assert_eq!(
                (p, e.provider_note()),
                (Provider::Cuda, ""),
                "auto tries CUDA only"
            ),
        }
    }

    #[test]
    fn results_come_back_in_input_order_whatever_the_batching() {
        let mut e = embedder(256);
        let long = "tokens ".repeat(400);
        let texts = [
            "short",
            long.as_str(),
            "",
            "a medium length sentence about databases",
            "x y z",
        ];
        let mut calls = 0;
        let whole = e.embed(&texts, 1 << 20, &mut || calls += 1).unwrap();
        // The 256-token row runs alone; the four short ones share a run (padding them to 256
        // tokens would cost more than a second run).
        assert_eq!(whole.batches, 2, "runs when everything fits the budget");
        assert_eq!(
            calls, 3,
            "a callback before each run and one while planning the one window"
        );
        assert!(
            whole.padded_tokens > whole.tokens,
            "the short rows share a padded run"
        );
        assert_eq!((whole.rows(), whole.dimension), (5, 384));
        assert_eq!(whole.tokens, whole.padded_tokens.min(whole.tokens));
        let small = e.embed(&texts, 1, &mut || {}).unwrap();
        assert_eq!(
            small.batches, 5,
            "a budget below every row runs each row alone"
        );
        assert_eq!(
            small.padded_tokens, small.tokens,
            "no padding when rows run alone"
        );
        for i in 0..texts.len() {
            let one = e.embed(&texts[i..=i], 1 << 20, &mut || {}).unwrap();
            for (a, b) in [
                (whole.row_f32(i), one.row_f32(0)),
                (small.row_f32(i), one.row_f32(0)),
            ] {
                let cos: f32 = a.iter().zip(b.iter()).map(|(x, y)| x * y).sum();
                assert!(cos > 0.99999, "text {i}: cosine {cos}");
            }
        }
    }

    #[test]
    fn truncates_to_max_length() {
        let e = embedder(16);
        let toks = e.tokenizer().encode(&["one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen"]).unwrap();
        assert_eq!(toks[0].ids.len(), 16);
        assert_eq!(
            e.tokenizer().encode(&[""]).unwrap()[0].ids.len(),
            2,
            "[CLS] [SEP]"
        );
    }

    #[test]
    fn prepared_graph_is_shared_and_gives_the_same_vectors() {
        let cache =
            std::env::temp_dir().join(format!("tributary-prepared-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&cache);
        let texts = corpus();
        let refs: Vec<&str> = texts.iter().take(60).map(String::as_str).collect();
        let mut plain = embedder(256);
        assert!(
            plain.graph_note().contains("shared_weights is off"),
            "{}",
            plain.graph_note()
        );
        let mut cfg = config(256);
        cfg.prepared_cache = Some(cache.clone());
        cfg.shrink_arena = true;
        let mut shared = Embedder::new(rt(), cfg.clone()).unwrap();
        assert_eq!(shared.graph_note(), "");
        let loaded = shared.loaded_file().to_owned();
        assert!(loaded.starts_with(&cache), "{}", loaded.display());
        assert!(loaded.with_file_name(crate::prepared::DATA_FILE).is_file());
        // Every run (the last of each call shrinks the arena) gives what the original graph gives.
        let a = plain.embed(&refs, 512, &mut || {}).unwrap();
        let b = shared.embed(&refs, 512, &mut || {}).unwrap();
        assert!(b.batches > 1);
        let cos = min_cosine(&a, &b);
        assert!(cos > 0.99999, "prepared vs original min cosine {cos}");
        // A second session finds it prepared: the same file, nothing written again.
        let entries = || {
            std::fs::read_dir(&cache)
                .unwrap()
                .filter(|e| e.as_ref().unwrap().path().is_dir())
                .count()
        };
        assert_eq!(entries(), 1, "one prepared directory, no leftovers");
        let modified = std::fs::metadata(&loaded).unwrap().modified().unwrap();
        let again = Embedder::new(rt(), cfg).unwrap();
        assert_eq!(again.loaded_file(), loaded);
        assert_eq!(
            std::fs::metadata(&loaded).unwrap().modified().unwrap(),
            modified
        );
        assert_eq!(entries(), 1);
        // Another model file is another directory.
        let other =
            crate::prepared::prepared_dir(rt(), &model_dir().join("model_int8.onnx"), &cache)
                .unwrap();
        assert_ne!(other, loaded.parent().unwrap());
        let _ = std::fs::remove_dir_all(&cache);
    }

    #[test]
    fn gpu_is_possible_only_with_a_gpu_provider_in_the_library() {
        rt();
        assert!(Embedder::gpu_possible(rt(), ProviderChoice::Cpu).is_err());
        if !ort::ep::CUDA::is_available().unwrap() {
            let why = Embedder::gpu_possible(rt(), ProviderChoice::Auto).unwrap_err();
            assert!(why.contains("built without the CUDA"), "{why}");
        }
    }

    #[test]
    fn missing_model_file_is_a_model_file_error() {
        let mut cfg = EmbedderConfig::new(
            "/nonexistent/model.onnx".into(),
            model_dir().join("tokenizer.json"),
            8,
            384,
        );
        cfg.provider = ProviderChoice::Cpu;
        assert!(matches!(
            Embedder::new(rt(), cfg),
            Err(Error::ModelFile { .. })
        ));
    }
}
