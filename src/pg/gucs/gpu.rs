//! The GPU settings: the CUDA execution provider's device, memory, IoBinding, FP16, TensorRT
//! cache, the CUDA libraries to load, and how many backends may hold a GPU session at once.

use std::ffi::CString;
use std::path::PathBuf;

use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting, PostgresGucEnum};

use super::{data_dir, string};

/// Registers the settings of this file (from [`super::init`]).
pub(super) fn init() {
    GucRegistry::define_int_guc(
        c"tributary.gpu_device",
        c"CUDA device ordinal for the CUDA execution provider.",
        c"",
        &GPU_DEVICE,
        0,
        64,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"tributary.gpu_memory_limit",
        c"CUDA memory arena limit of one session, in MB; 0 means no limit.",
        c"The CUDA execution provider's gpu_mem_limit. The CUDA context and cuDNN/cuBLAS workspaces come on top.",
        &GPU_MEMORY_LIMIT,
        0,
        i32::MAX,
        GucContext::Suset,
        GucFlags::UNIT_MB,
    );
    GucRegistry::define_string_guc(
        c"tributary.tensorrt_cache_path",
        c"Directory for TensorRT's engine and timing caches.",
        c"Empty means tributary_tensorrt in the data directory. Building an engine takes minutes; the cache makes later sessions start fast.",
        &TENSORRT_CACHE_PATH,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_string_guc(
        c"tributary.cuda_library_path",
        c"Colon-separated directories of the CUDA and cuDNN libraries the CUDA execution provider needs.",
        c"Their libraries are loaded once per backend before the CUDA provider. Empty leaves it to the system's library path. scripts/setup.sh with TRIBUTARY_GPU=1 finds them.",
        &CUDA_LIBRARY_PATH,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"tributary.io_binding",
        c"Run models through an ONNX Runtime IoBinding with reused (on a GPU: pinned) buffers.",
        c"If binding fails, sessions fall back to plain runs and tributary_sessions() says why.",
        &IO_BINDING,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"tributary.gpu_fp16",
        c"On a GPU, run a model's fp16 graph when its directory has one.",
        c"The fp16 graph returns f16 embeddings, written to halfvec columns without conversion. Off by default: with ONNX Runtime 1.31 each input shape costs it 100-600 ms the first time on CUDA (warming the 68 bucket shapes took 30-38 s through PostgreSQL on an H200), though warm runs took 1.9 ms against the fp32 graph's 4.4 ms.",
        &GPU_FP16,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"tributary.gpu_shape_buckets",
        c"On a GPU, pad batches to a few shapes (four token lengths per doubling, four or five row counts per length).",
        c"Each new input shape has a one-time cost in the CUDA execution provider; real texts give a new one almost every batch. Padding adds at most a quarter of a row's tokens past 32 tokens.",
        &GPU_SHAPE_BUCKETS,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"tributary.gpu_warm_shapes",
        c"With tributary.gpu_shape_buckets: run every bucket shape once before a GPU session's first run at a token budget.",
        c"Each shape's one-time cost is then paid once per session and budget (68 shapes for a 256-token model at 16384 tokens), not inside the batches of the calls.",
        &GPU_WARM_SHAPES,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_enum_guc(
        c"tributary.pipeline",
        c"tributary_embed_column reads the next rows and writes the last vectors while the model runs: auto (on a GPU), on, or off.",
        c"on: also on the CPU, where each batch then holds one CPU run slot for all its runs (tributary.max_cpu_runs).",
        &PIPELINE,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"tributary.max_gpu_sessions",
        c"Most backends that may hold a GPU session at once, cluster-wide; -1 means no cap.",
        c"Each costs a CUDA context and a copy of the model in GPU memory. A backend keeps its slot until it exits. See tributary.gpu_overflow.",
        &MAX_GPU_SESSIONS,
        -1,
        1024,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_enum_guc(
        c"tributary.gpu_overflow",
        c"When every GPU slot is taken: cpu (run on the CPU), wait, or error.",
        c"",
        &GPU_OVERFLOW,
        GucContext::Userset,
        GucFlags::default(),
    );
}

/// `tributary.gpu_overflow`: what a backend does when every GPU slot is taken.
#[derive(PostgresGucEnum, Clone, Copy, PartialEq, Eq, Debug)]
pub enum GpuOverflow {
    /// Run this backend's session on the CPU provider (the stats say so).
    #[name = c"cpu"]
    Cpu,
    /// Wait for a slot (interruptible; lock_timeout and statement_timeout apply).
    #[name = c"wait"]
    Wait,
    /// Raise 53400 configuration_limit_exceeded.
    #[name = c"error"]
    Error,
}

/// `tributary.pipeline`: whether `tributary_embed_column` overlaps its reads and writes with the
/// model's runs (src/service/pipeline.rs).
#[derive(PostgresGucEnum, Clone, Copy, PartialEq, Eq, Debug)]
pub enum Pipeline {
    /// On a GPU session only: the rows of the next batch are read and the vectors of the last
    /// one written while the GPU runs this one.
    #[name = c"auto"]
    Auto,
    /// On every session. On the CPU a batch holds one CPU run slot for all its runs, so an
    /// interactive call waits for a whole batch rather than one run.
    #[name = c"on"]
    On,
    /// Read, embed, write, one after the other.
    #[name = c"off"]
    Off,
}

/// CUDA device ordinal used when the CUDA execution provider runs.
static GPU_DEVICE: GucSetting<i32> = GucSetting::<i32>::new(0);

/// CUDA memory arena limit per session, MiB; 0 = no limit.
static GPU_MEMORY_LIMIT: GucSetting<i32> = GucSetting::<i32>::new(0);

/// Empty means `$PGDATA/tributary_tensorrt`.
static TENSORRT_CACHE_PATH: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);

/// Colon-separated directories whose CUDA/cuDNN libraries are loaded before the CUDA provider.
static CUDA_LIBRARY_PATH: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);

static IO_BINDING: GucSetting<bool> = GucSetting::<bool>::new(true);

/// Off by default: on one H200 (onnxruntime-gpu 1.31.1, CUDA 13) the fp16 graph of
/// all-MiniLM-L6-v2 ran 70 rows/s through `tributary_embed_column` on 16,384 real texts, where
/// the fp32 graph ran 10,778 rows/s (the CPU provider on its 16 cores: 356). Each ORT run of a
/// new input shape costs the fp16 graph 100-600 ms; fixed shapes run fast in both (BENCHMARKS.md,
/// "GPU: fp32 by default"; benches/results/gpu-h200-2026-11-27b/). With shape buckets and
/// without the pipeline (2026-11-28, benches/results/gpu-h200-2026-11-28b/) it ran 15,481 rows/s
/// once its 68 shapes were warm, but warming them took 30-38 s per backend: still off.
static GPU_FP16: GucSetting<bool> = GucSetting::<bool>::new(false);

/// On by default: fewer input shapes on a GPU for at most a quarter more tokens past 32 tokens
/// (engine::batch::bucket_len).
static GPU_SHAPE_BUCKETS: GucSetting<bool> = GucSetting::<bool>::new(true);

static GPU_WARM_SHAPES: GucSetting<bool> = GucSetting::<bool>::new(true);

static PIPELINE: GucSetting<Pipeline> = GucSetting::<Pipeline>::new(Pipeline::Auto);

/// Backends that may hold a GPU session at once, cluster-wide; -1 = no cap.
static MAX_GPU_SESSIONS: GucSetting<i32> = GucSetting::<i32>::new(4);

static GPU_OVERFLOW: GucSetting<GpuOverflow> = GucSetting::<GpuOverflow>::new(GpuOverflow::Cpu);

/// CUDA arena limit per session in MiB (0 = none).
pub fn gpu_memory_limit_mb() -> usize {
    GPU_MEMORY_LIMIT.get() as usize
}

/// TensorRT cache directory: the setting (relative paths are in the data directory), else
/// `$PGDATA/tributary_tensorrt`.
pub fn tensorrt_cache_path() -> PathBuf {
    let p =
        PathBuf::from(string(&TENSORRT_CACHE_PATH).unwrap_or_else(|| "tributary_tensorrt".into()));
    if p.is_absolute() {
        p
    } else {
        data_dir().join(p)
    }
}

/// Directories to load CUDA/cuDNN libraries from before the CUDA provider (may be empty).
pub fn cuda_library_path() -> Vec<PathBuf> {
    string(&CUDA_LIBRARY_PATH)
        .map(|s| {
            s.split(':')
                .filter(|d| !d.is_empty())
                .map(PathBuf::from)
                .collect()
        })
        .unwrap_or_default()
}

pub fn io_binding() -> bool {
    IO_BINDING.get()
}

pub fn gpu_fp16() -> bool {
    GPU_FP16.get()
}

pub fn gpu_shape_buckets() -> bool {
    GPU_SHAPE_BUCKETS.get()
}

pub fn gpu_warm_shapes() -> bool {
    GPU_WARM_SHAPES.get()
}

pub fn pipeline() -> Pipeline {
    PIPELINE.get()
}

/// `None` = no cap.
pub fn max_gpu_sessions() -> Option<usize> {
    let v = MAX_GPU_SESSIONS.get();
    (v >= 0).then_some(v as usize)
}

pub fn gpu_overflow() -> GpuOverflow {
    GPU_OVERFLOW.get()
}

pub fn gpu_device() -> i32 {
    GPU_DEVICE.get()
}
