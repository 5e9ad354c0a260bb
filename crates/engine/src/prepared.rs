//! Prepared CPU graphs: a model's graph optimised once per machine and saved with its weights,
//! and the weights ONNX Runtime prepacks for the CPU's kernels, in an external data file, so
//! that every process maps the same file instead of holding its own copy.
//!
//! Why (measured with Python and ONNX Runtime 1.31 on the 2-vCPU machine, all-MiniLM-L6-v2 fp32,
//! three processes each holding a session after a few small runs; BENCHMARKS.md "Many backends"
//! has the backend figures): the graph with inline weights costs 107 MB of private memory per
//! process and 430 ms to create; the same weights as external data 44 MB and 42 ms (ONNX Runtime
//! maps external initializers from the file); the optimised graph saved with
//! `session.save_external_prepacked_constant_initializers` (ONNX Runtime 1.22 and later) 4 MB and
//! 25 ms, since the prepacked weights, which are otherwise built in every process, are mapped too.
//!
//! The saved graph holds kernels and layouts chosen for this CPU (ONNX Runtime warns that it "may
//! contain hardware specific optimizations"), so the cache key has the CPU's model and flags
//! besides the model file and the ONNX Runtime version: a data directory copied to another
//! machine (a base backup for a standby) prepares its own.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use ort::ep::ExecutionProvider;
use ort::session::builder::GraphOptimizationLevel;
use ort::session::Session;

use super::error::{Error, Result};
use super::runtime::Runtime;

/// The graph file inside a prepared directory; its external data is [`DATA_FILE`] beside it.
pub const GRAPH_FILE: &str = "graph.onnx";
/// Weights (at least [`EXTERNAL_MIN_BYTES`] each) and prepacked weights of [`GRAPH_FILE`].
pub const DATA_FILE: &str = "graph.onnx.data";
/// Initializers smaller than this stay inside the graph (biases, scales, shapes): 1 kB.
const EXTERNAL_MIN_BYTES: usize = 1024;
/// Bumped when what is saved changes, so that older prepared directories are not used.
const FORMAT: u32 = 1;

/// The directory (under `cache_dir`) that holds, or will hold, the prepared graph of
/// `model_file` for this machine and ONNX Runtime: `<stem>-<16 hex digits>`.
///
/// Errors: [`Error::ModelFile`] when the model file cannot be read.
pub fn prepared_dir(runtime: &Runtime, model_file: &Path, cache_dir: &Path) -> Result<PathBuf> {
    let meta = std::fs::metadata(model_file).map_err(|e| Error::ModelFile {
        path: model_file.to_owned(),
        reason: e.to_string(),
    })?;
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    // SipHash with fixed keys: the same for every process running this build.
    #[allow(deprecated)]
    let mut h = std::hash::SipHasher::new();
    (
        FORMAT,
        model_file.canonicalize().unwrap_or(model_file.to_owned()),
        meta.len(),
        mtime,
        &runtime.version,
        cpu_signature(),
    )
        .hash(&mut h);
    let stem = model_file
        .parent()
        .and_then(Path::file_name)
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    Ok(cache_dir.join(format!("{stem}-{:016x}", h.finish())))
}

/// This CPU's model name and feature flags (the first processor's, from /proc/cpuinfo), or
/// empty where that file does not exist.
fn cpu_signature() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    info.lines()
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| {
            let key = l.split(':').next().unwrap_or("").trim();
            matches!(
                key,
                "vendor_id" | "model name" | "flags" | "Features" | "CPU part"
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The prepared graph of `model_file` for the CPU execution provider: the path of its
/// [`GRAPH_FILE`], prepared now if this machine has none yet (about 0.5 s for
/// all-MiniLM-L6-v2; the caller loads it with graph optimisation off).
///
/// Preparing, under an exclusive lock on `cache_dir/.lock` (one process at a time; the others
/// wait, then find it prepared): a session with every graph optimisation and prepacking writes
/// the optimised graph, its initializers of 1 kB or more and its prepacked weights into a new
/// directory beside the final one, which is then renamed into place. Readers only ever see
/// complete directories; what a process killed while preparing left behind is removed by the
/// next one.
///
/// Errors: [`Error::ModelFile`] for an unreadable model file; [`Error::Ort`] when ONNX Runtime
/// cannot optimise it, or `cache_dir` cannot be written (its reason in the message).
pub fn prepared_graph(runtime: &Runtime, model_file: &Path, cache_dir: &Path) -> Result<PathBuf> {
    let dir = prepared_dir(runtime, model_file, cache_dir)?;
    let graph = dir.join(GRAPH_FILE);
    if graph.is_file() && dir.join(DATA_FILE).is_file() {
        return Ok(graph);
    }
    let io = |what: &str, p: &Path, e: std::io::Error| {
        Error::Ort(format!("cannot {what} {}: {e}", p.display()))
    };
    std::fs::create_dir_all(cache_dir).map_err(|e| io("create", cache_dir, e))?;
    // One process prepares at a time (each takes about 0.5 s and a few hundred MB): the others
    // wait on the lock, then find the graph prepared.
    let lock_path = cache_dir.join(".lock");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| io("open", &lock_path, e))?;
    // SAFETY: flock on a file descriptor we own; released when `lock` is closed.
    if unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) } != 0 {
        return Err(io("lock", &lock_path, std::io::Error::last_os_error()));
    }
    if graph.is_file() && dir.join(DATA_FILE).is_file() {
        return Ok(graph);
    }
    // Under the lock nobody else is preparing: what is left of a process that died while
    // preparing goes.
    if let Ok(entries) = std::fs::read_dir(cache_dir) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with(".prepare-") {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
    let tmp = cache_dir.join(format!(".prepare-{}", std::process::id()));
    std::fs::create_dir(&tmp).map_err(|e| io("create", &tmp, e))?;
    let written =
        super::signals::with_signals_blocked(|| write_prepared(runtime, model_file, &tmp));
    if let Err(e) = written {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    if let Err(e) = std::fs::rename(&tmp, &dir) {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(io("rename into", &dir, e));
    }
    drop(lock);
    Ok(graph)
}

fn write_prepared(runtime: &Runtime, model_file: &Path, dir: &Path) -> Result<()> {
    let mut builder = Session::builder(&runtime.environment)?
        .with_optimization_level(GraphOptimizationLevel::Level3)?
        .with_intra_threads(1)?
        .with_inter_threads(1)?
        .with_optimized_model_path(dir.join(GRAPH_FILE))?
        .with_config_entry(
            "session.optimized_model_external_initializers_file_name",
            DATA_FILE,
        )?
        .with_config_entry(
            "session.optimized_model_external_initializers_min_size_in_bytes",
            EXTERNAL_MIN_BYTES.to_string(),
        )?
        .with_config_entry("session.save_external_prepacked_constant_initializers", "1")?;
    ort::ep::CPU::default().register(&mut builder)?;
    drop(builder.commit_from_file(model_file)?);
    if !dir.join(GRAPH_FILE).is_file() || !dir.join(DATA_FILE).is_file() {
        return Err(Error::Ort(format!(
            "ONNX Runtime did not write the prepared graph of {} into {}",
            model_file.display(),
            dir.display()
        )));
    }
    Ok(())
}
