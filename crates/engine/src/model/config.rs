//! What a session is asked for ([`EmbedderConfig`], [`ProviderChoice`]) and what it reports
//! about itself ([`Provider`], [`Stats`]).

use std::path::PathBuf;
use std::time::Duration;

use crate::interface::Pooling;

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

/// Whether a batch is padded to one of a few shapes ([`crate::batch::bucket_len`] tokens,
/// [`crate::batch::bucket_rows`] rows) instead of its own `[rows, longest row]`. Every new input
/// shape has a one-time cost in the CUDA execution provider (kernel choice and loading; with the
/// fp16 graph 100-600 ms a shape on an H200, BENCHMARKS.md "GPU: fp32 by default"), and real
/// texts give a new shape almost every batch; on the CPU a shape costs nothing extra and padding
/// costs its tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ShapeBuckets {
    Off,
    /// On a GPU execution provider only (the default).
    Gpu,
    /// On every provider (to test and measure bucketing on the CPU).
    Always,
}

/// The thread a session's ONNX Runtime runs happen on. On an H200 the fp16 graph's runs were slow
/// (about 118 ms each instead of 1.9 ms) on a thread that had not run their input shapes
/// before, whatever another thread had run: `tributary_embed_column`'s pipeline, which runs the
/// model on a thread of its own per call, paid every shape again in every call
/// (benches/results/gpu-h200-2026-11-28b). A session's own long-lived thread keeps them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunThread {
    /// The calling thread.
    Caller,
    /// One thread of the session's own on a GPU execution provider, the caller's on the CPU (the
    /// default).
    OwnOnGpu,
    /// One thread of the session's own on every provider (to test it on the CPU).
    Own,
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
    /// When batches are padded to a few shapes ([`ShapeBuckets`]).
    pub shape_buckets: ShapeBuckets,
    /// With shape buckets in use: before the first run of a call at a token budget this session
    /// has not warmed yet, run every shape of that budget once
    /// ([`crate::batch::bucket_shapes`], dummy tokens), so that each shape's one-time cost is
    /// paid there, once per session and budget, rather than inside the batches of the calls.
    pub warm_shapes: bool,
    /// Which thread runs the session's ONNX Runtime runs ([`RunThread`]).
    pub run_thread: RunThread,
}

impl EmbedderConfig {
    /// A configuration with the defaults of the settings: auto provider, ORT's thread count,
    /// device 0, no GPU graph, no memory limit, IoBinding on, shape buckets on (GPU only).
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
            shape_buckets: ShapeBuckets::Gpu,
            warm_shapes: true,
            run_thread: RunThread::OwnOnGpu,
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
    /// Distinct `[rows, tokens]` input shapes run so far (each has a one-time cost on a GPU).
    pub shapes: u64,
    /// Time spent warming shapes (`warm_shapes`), not counted in `run_time`.
    pub warm_up_time: Duration,
    /// Distinct OS threads the session's runs happened on (1 with a run thread of its own).
    pub run_threads: u64,
    /// Time the caller spent reading the rows it embedded with this session and writing their
    /// vectors back, as it reported them ([`crate::Embedder::add_io_time`]); zero for callers
    /// that report none.
    pub read_time: Duration,
    pub write_time: Duration,
}
