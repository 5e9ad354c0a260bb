//! Creating an [`Embedder`]: the tokenizer, the session on the execution provider asked for
//! (CUDA or TensorRT, with the CPU as `auto`'s fallback), the prepared CPU graph
//! ([`crate::prepared`]) when there is one, and the IoBinding.

use std::path::PathBuf;
use std::time::Instant;

use ort::ep::ExecutionProvider;
use ort::session::builder::GraphOptimizationLevel;
use ort::session::{RunOptions, Session};

use super::{Embedder, EmbedderConfig, Provider, ProviderChoice, RunThread, Runtime, Stats};
use crate::binding::{Bound, HostMemory};
use crate::error::{Error, Result};
use crate::interface::Interface;
use crate::tokenize::TextTokenizer;

impl Embedder {
    /// Creates the session and tokenizer in the loaded [`runtime`].
    ///
    /// Errors: [`Error::ModelFile`] for a missing ONNX or tokenizer file, [`Error::Provider`]
    /// (with ONNX Runtime's reason) when `Cuda` or `TensorRt` was asked for and cannot be used,
    /// [`Error::Ort`] when ORT rejects the model.
    pub fn new(runtime: &Runtime, config: EmbedderConfig) -> Result<Self> {
        // The session's thread pools and the tokenizer's pool start here, with every signal
        // blocked (they inherit the mask; see signals.rs).
        crate::signals::start_tokenizer_pool();
        crate::signals::with_signals_blocked(|| Self::create(runtime, config))
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
        // Started here, inside `new`'s blocked signal mask, so the thread inherits it.
        let run_thread = match config.run_thread {
            RunThread::Caller => None,
            RunThread::OwnOnGpu if !provider.is_gpu() => None,
            RunThread::OwnOnGpu | RunThread::Own => Some(
                rayon::ThreadPoolBuilder::new()
                    .num_threads(1)
                    .thread_name(|_| "tributary-run".into())
                    .build()
                    .map_err(|e| {
                        Error::Ort(format!("cannot start the session's run thread: {e}"))
                    })?,
            ),
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
            shapes: Default::default(),
            warmed: Default::default(),
            run_thread,
            threads: Default::default(),
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
                match crate::prepared::prepared_graph(runtime, &file, cache) {
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
}
