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
//!
//! Each prepared directory holds a manifest ([`MANIFEST_FILE`]) with the size and CRC-32 of every
//! file in it, written before the directory is renamed into place. A directory is used only when
//! its files match it: one truncated or damaged on disk (or left without a manifest by an older
//! build) is set aside and prepared again, instead of failing every new backend with ONNX
//! Runtime's error (38000) until someone removes it.
//!
//! A backend that has mapped a prepared file (ONNX Runtime maps the external data) would die of
//! SIGBUS if that file were truncated in place under it. tributary never writes a prepared file
//! after its directory is renamed into place: ONNX Runtime writes the files into a new temporary
//! directory, a bad directory is renamed aside and its files unlinked, never truncated or
//! rewritten, and a re-prepared directory has new files (new inodes). A backend that mapped the
//! old files keeps them, complete, until it drops its session. Only a file truncated by someone
//! else (a person, a failing disk) can still hurt a backend that has it mapped.
//!
//! The manifest also names the model file a directory was prepared from (its canonical path,
//! size and modification time), so that directories outlived by their model can be found:
//! [`sweep`] removes those whose model file is gone or changed, [`remove_prepared`] those of
//! one model file (a dropped model's).

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
/// Sizes and checksums of the files of a prepared directory ([`FileManifest`], JSON).
pub const MANIFEST_FILE: &str = "manifest.json";
/// Initializers smaller than this stay inside the graph (biases, scales, shapes): 1 kB.
const EXTERNAL_MIN_BYTES: usize = 1024;
/// Bumped when what is saved changes, so that older prepared directories are not used.
/// 2: the manifest names the model file ([`Source`]).
const FORMAT: u32 = 2;

/// The directory (under `cache_dir`) that holds, or will hold, the prepared graph of
/// `model_file` for this machine and ONNX Runtime: `<stem>-<16 hex digits>`.
///
/// Errors: [`Error::ModelFile`] when the model file cannot be read.
pub fn prepared_dir(runtime: &Runtime, model_file: &Path, cache_dir: &Path) -> Result<PathBuf> {
    Ok(dir_for(
        runtime,
        model_file,
        &Source::of(model_file)?,
        cache_dir,
    ))
}

fn dir_for(runtime: &Runtime, model_file: &Path, source: &Source, cache_dir: &Path) -> PathBuf {
    // SipHash with fixed keys: the same for every process running this build.
    #[allow(deprecated)]
    let mut h = std::hash::SipHasher::new();
    (
        FORMAT,
        &source.path,
        source.bytes,
        source.mtime_ns,
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
    cache_dir.join(format!("{stem}-{:016x}", h.finish()))
}

/// The model file a prepared directory was prepared from, as its [`MANIFEST_FILE`] records it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct Source {
    /// The canonical path (as UTF-8, lossily: a path that is not UTF-8 is not found again, so
    /// [`sweep`] takes its directory for stale and it is prepared again when next used).
    path: String,
    /// Size in bytes.
    bytes: u64,
    /// Modification time in nanoseconds since the Unix epoch; 0 when the file system has none.
    mtime_ns: u64,
}

impl Source {
    /// `model_file` as it is now.
    ///
    /// Errors: [`Error::ModelFile`] when it cannot be read.
    fn of(model_file: &Path) -> Result<Source> {
        let meta = std::fs::metadata(model_file).map_err(|e| Error::ModelFile {
            path: model_file.to_owned(),
            reason: e.to_string(),
        })?;
        let mtime_ns = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        Ok(Source {
            path: canonical(model_file),
            bytes: meta.len(),
            mtime_ns,
        })
    }
}

/// `path` made absolute with symbolic links resolved, as a string (`path` itself where it
/// cannot be resolved, e.g. when it no longer exists).
fn canonical(path: &Path) -> String {
    path.canonicalize()
        .unwrap_or_else(|_| path.to_owned())
        .to_string_lossy()
        .into_owned()
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
/// directory beside the final one, with a manifest of the files' sizes and checksums, which is
/// then renamed into place. Readers only ever see complete directories; what a process killed
/// while preparing left behind is removed by the next one. A directory whose files no longer
/// match its manifest (truncated, damaged) is set aside and prepared again.
///
/// Errors: [`Error::ModelFile`] for an unreadable model file; [`Error::Ort`] when ONNX Runtime
/// cannot optimise it, or `cache_dir` cannot be written (its reason in the message).
pub fn prepared_graph(runtime: &Runtime, model_file: &Path, cache_dir: &Path) -> Result<PathBuf> {
    // Read once: the key and the manifest name the same state of the file. Should it change
    // while ONNX Runtime reads it, the manifest records the state before, and [`sweep`] finds
    // the directory stale.
    let source = Source::of(model_file)?;
    let dir = dir_for(runtime, model_file, &source, cache_dir);
    let graph = dir.join(GRAPH_FILE);
    if check(&dir).is_ok() {
        return Ok(graph);
    }
    std::fs::create_dir_all(cache_dir).map_err(|e| io_error("create", cache_dir, e))?;
    // One process prepares at a time (each takes about 0.5 s and a few hundred MB): the others
    // wait on the lock, then find the graph prepared.
    let lock = lock(cache_dir)?;
    if check(&dir).is_ok() {
        return Ok(graph);
    }
    // A directory whose files do not match its manifest (or that has none) is set aside, then
    // removed: renamed first, so that no process finds it half removed; unlinked, never
    // truncated, so that a process that maps its files keeps them whole.
    if dir.exists() {
        let stale = cache_dir.join(format!(".stale-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&stale);
        std::fs::rename(&dir, &stale).map_err(|e| io_error("rename aside", &dir, e))?;
    }
    remove_leftovers(cache_dir);
    let tmp = cache_dir.join(format!(".prepare-{}", std::process::id()));
    std::fs::create_dir(&tmp).map_err(|e| io_error("create", &tmp, e))?;
    let written =
        super::signals::with_signals_blocked(|| write_prepared(runtime, model_file, &source, &tmp));
    if let Err(e) = written {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    if let Err(e) = std::fs::rename(&tmp, &dir) {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(io_error("rename into", &dir, e));
    }
    drop(lock);
    Ok(graph)
}

fn io_error(what: &str, path: &Path, e: std::io::Error) -> Error {
    Error::Ort(format!("cannot {what} {}: {e}", path.display()))
}

/// Takes the exclusive lock on `cache_dir/.lock` (an existing directory), waiting for it: held
/// by one process at a time while it prepares a graph or removes prepared directories, and
/// released when the returned file is closed.
fn lock(cache_dir: &Path) -> Result<std::fs::File> {
    let lock_path = cache_dir.join(".lock");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| io_error("open", &lock_path, e))?;
    // SAFETY: flock on a file descriptor we own; released when `lock` is closed.
    if unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) } != 0 {
        return Err(io_error(
            "lock",
            &lock_path,
            std::io::Error::last_os_error(),
        ));
    }
    Ok(lock)
}

/// Under the lock nobody else is preparing: what is left of a process that died while
/// preparing (`.prepare-<pid>`), and directories set aside (`.stale-...`), go.
fn remove_leftovers(cache_dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(cache_dir) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with(".prepare-") || name.starts_with(".stale-") {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
}

fn write_prepared(runtime: &Runtime, model_file: &Path, source: &Source, dir: &Path) -> Result<()> {
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
    write_manifest(dir, source)
}

/// What [`MANIFEST_FILE`] says of a prepared directory: the model file it was prepared from,
/// and every other file in it, by name.
#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct FileManifest {
    /// `None` in directories prepared before [`FORMAT`] 2.
    #[serde(default)]
    source: Option<Source>,
    files: Vec<FileSum>,
}

/// One file of a prepared directory: its size in bytes and the CRC-32 (IEEE) of its bytes.
#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct FileSum {
    name: String,
    bytes: u64,
    crc32: u32,
}

/// The size and CRC-32 of the file at `path`, read in 1 MB pieces.
fn file_sum(path: &Path) -> std::io::Result<(u64, u32)> {
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let mut hasher = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut bytes = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        bytes += n as u64;
    }
    Ok((bytes, hasher.finalize()))
}

/// Writes [`MANIFEST_FILE`] for the files ONNX Runtime wrote into `dir` (not yet renamed into
/// place) from the model file `source`.
fn write_manifest(dir: &Path, source: &Source) -> Result<()> {
    let io = |p: &Path, e: std::io::Error| Error::Ort(format!("cannot read {}: {e}", p.display()));
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| io(dir, e))?
        .flatten()
        .filter(|e| e.path().is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut files = Vec::new();
    for name in names {
        let path = dir.join(&name);
        let (bytes, crc32) = file_sum(&path).map_err(|e| io(&path, e))?;
        files.push(FileSum { name, bytes, crc32 });
    }
    let manifest = FileManifest {
        source: Some(source.clone()),
        files,
    };
    let json = serde_json::to_vec(&manifest).expect("a manifest serialises");
    let path = dir.join(MANIFEST_FILE);
    std::fs::write(&path, json)
        .map_err(|e| Error::Ort(format!("cannot write {}: {e}", path.display())))
}

/// Whether the prepared directory `dir` is whole: its manifest lists [`GRAPH_FILE`] and
/// [`DATA_FILE`], and every file it lists has the size and CRC-32 it records (sizes first, so
/// a truncated file is found without reading it). `Err` says what is wrong.
///
/// Reading and summing every file would cost each new session about 21 ms per 132 MB (a
/// 132 MB prepared data file from the page cache, crc32fast over 1 MB reads, on the 2-vCPU
/// machine) against a 52 ms first call: so once a full check has passed, its result is kept in
/// [`VERIFIED_FILE`] (each file's size, inode and modification time), and later checks compare
/// those only. Any write to a file changes its modification time, so a file changed since is
/// read in full again. As git does for its index ("racily clean" entries), the result is kept
/// only when every file was last modified at least a second before the check, so that a write
/// in the same clock tick as the check cannot leave the time unchanged.
fn check(dir: &Path) -> std::result::Result<(), String> {
    let manifest = read_manifest(dir)?;
    if verified(dir, &manifest) {
        return Ok(());
    }
    full_check(dir, &manifest)?;
    keep_verified(dir, &manifest);
    Ok(())
}

/// The file in a prepared directory that records the files a full check found whole.
const VERIFIED_FILE: &str = "verified.json";

/// What [`VERIFIED_FILE`] records of one file: enough to see that it was not written since.
#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct FileStamp {
    name: String,
    bytes: u64,
    inode: u64,
    mtime_ns: i128,
}

/// The stamp of the file `name` in `dir` as it is now.
fn stamp(dir: &Path, name: &str) -> Option<FileStamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(dir.join(name)).ok()?;
    Some(FileStamp {
        name: name.to_owned(),
        bytes: m.len(),
        inode: m.ino(),
        mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
    })
}

/// Whether [`VERIFIED_FILE`] in `dir` records every file of `manifest` as it is now.
fn verified(dir: &Path, manifest: &FileManifest) -> bool {
    let Ok(text) = std::fs::read(dir.join(VERIFIED_FILE)) else {
        return false;
    };
    let Ok(kept) = serde_json::from_slice::<Vec<FileStamp>>(&text) else {
        return false;
    };
    manifest.files.len() == kept.len()
        && manifest.files.iter().zip(&kept).all(|(f, k)| {
            f.name == k.name && f.bytes == k.bytes && stamp(dir, &f.name).as_ref() == Some(k)
        })
}

/// Records in [`VERIFIED_FILE`] that the files of `manifest` in `dir` passed a full check, when
/// each was last modified a second or more ago (see [`check`]). Written beside and renamed; a
/// failure to write is no error (the next session checks in full again).
fn keep_verified(dir: &Path, manifest: &FileManifest) {
    let now = std::time::SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128);
    let stamps: Option<Vec<FileStamp>> =
        manifest.files.iter().map(|f| stamp(dir, &f.name)).collect();
    let Some(stamps) = stamps else { return };
    if stamps.iter().any(|s| s.mtime_ns > now - 1_000_000_000) {
        return;
    }
    let tmp = dir.join(format!(".{VERIFIED_FILE}.{}", std::process::id()));
    let json = serde_json::to_vec(&stamps).expect("stamps serialise");
    if std::fs::write(&tmp, json).is_ok() && std::fs::rename(&tmp, dir.join(VERIFIED_FILE)).is_err()
    {
        let _ = std::fs::remove_file(&tmp);
    }
}

/// [`check`] without [`VERIFIED_FILE`]: sizes, then every file read for its CRC-32.
fn full_check(dir: &Path, manifest: &FileManifest) -> std::result::Result<(), String> {
    let path = dir.join(MANIFEST_FILE);
    for needed in [GRAPH_FILE, DATA_FILE] {
        if !manifest.files.iter().any(|f| f.name == needed) {
            return Err(format!("{} does not list {needed}", path.display()));
        }
    }
    for f in &manifest.files {
        let p = dir.join(&f.name);
        let len = std::fs::metadata(&p)
            .map_err(|e| format!("{}: {e}", p.display()))?
            .len();
        if len != f.bytes {
            return Err(format!("{}: {len} bytes, not {}", p.display(), f.bytes));
        }
    }
    for f in &manifest.files {
        let p = dir.join(&f.name);
        let (_, crc) = file_sum(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        if crc != f.crc32 {
            return Err(format!(
                "{}: checksum {crc:08x}, not {:08x}",
                p.display(),
                f.crc32
            ));
        }
    }
    Ok(())
}

/// The [`MANIFEST_FILE`] of `dir`; `Err` says why it cannot be read.
fn read_manifest(dir: &Path) -> std::result::Result<FileManifest, String> {
    let path = dir.join(MANIFEST_FILE);
    let text = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_slice(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// What [`sweep`] or [`remove_prepared`] did in a cache directory.
#[derive(Debug, Default)]
pub struct Removed {
    /// Prepared directories removed, each with why.
    pub removed: Vec<(PathBuf, String)>,
    /// Prepared directories that could not be removed, each with the error.
    pub failed: Vec<(PathBuf, String)>,
}

/// Removes, from `cache_dir`, the prepared directories that no process will use again: those
/// whose model file no longer exists or no longer has the size and modification time that
/// their manifest records (the model file was replaced: its new state has another key), and
/// those whose manifest does not name a model file (prepared before [`FORMAT`] 2, or
/// unreadable); also what processes killed while preparing left behind. Directories prepared
/// for another ONNX Runtime version or CPU from a model file that has not changed are kept
/// (another cluster sharing this directory may use them).
///
/// Runs under the lock that preparing takes (it waits while a process prepares), so a
/// directory being prepared is never touched; each directory is renamed aside before it is
/// removed, so no process finds one half removed. A backend that has mapped files of a
/// removed directory is not hurt: on Linux, unlinking a file removes its name only, and the
/// inode and its pages live on until the last mapping and descriptor are gone (unlink(2)). A
/// session being created from that directory at that very moment fails once with ONNX
/// Runtime's error, and the next one prepares the graph again.
///
/// A `cache_dir` that does not exist is left alone.
///
/// Errors: [`Error::Ort`] when the lock cannot be taken; a directory that cannot be removed
/// is in [`Removed::failed`].
pub fn sweep(cache_dir: &Path) -> Result<Removed> {
    remove_where(cache_dir, true, |manifest| {
        let Some(source) = manifest.as_ref().ok().and_then(|m| m.source.as_ref()) else {
            return Some(match manifest {
                Err(e) => format!("no readable manifest ({e})"),
                Ok(_) => "prepared by an older tributary".into(),
            });
        };
        match Source::of(Path::new(&source.path)) {
            Err(_) => Some(format!("model file {} is gone", source.path)),
            Ok(now) if (now.bytes, now.mtime_ns) != (source.bytes, source.mtime_ns) => {
                Some(format!("model file {} has changed", source.path))
            }
            Ok(_) => None,
        }
    })
}

/// Removes, from `cache_dir`, the prepared directories whose manifest says they were prepared
/// from `model_file` (compared by canonical path), whatever its state; for a model that is
/// dropped. Directories whose manifest names no model file are left to [`sweep`]. Same lock and
/// safety as [`sweep`].
///
/// Errors: as [`sweep`].
pub fn remove_prepared(cache_dir: &Path, model_file: &Path) -> Result<Removed> {
    let path = canonical(model_file);
    remove_where(cache_dir, false, |manifest| {
        let source = manifest.as_ref().ok()?.source.as_ref()?;
        (source.path == path).then(|| format!("prepared from {path}"))
    })
}

/// Under the cache's lock, removes each prepared directory of `cache_dir` for which `why`
/// (given its manifest) gives a reason, and with `leftovers` what killed preparers left.
fn remove_where(
    cache_dir: &Path,
    leftovers: bool,
    why: impl Fn(&std::result::Result<FileManifest, String>) -> Option<String>,
) -> Result<Removed> {
    let mut done = Removed::default();
    if !cache_dir.is_dir() {
        return Ok(done);
    }
    let _lock = lock(cache_dir)?;
    if leftovers {
        remove_leftovers(cache_dir);
    }
    let entries = std::fs::read_dir(cache_dir).map_err(|e| io_error("read", cache_dir, e))?;
    for dir in entries.flatten().filter(is_prepared_dir).map(|e| e.path()) {
        let Some(reason) = why(&read_manifest(&dir)) else {
            continue;
        };
        match discard(cache_dir, &dir) {
            Ok(()) => done.removed.push((dir, reason)),
            Err(e) => done.failed.push((dir, e)),
        }
    }
    Ok(done)
}

/// Whether `entry` is a prepared directory: a directory (not a link to one) named
/// `<stem>-<16 hex digits>` that holds a manifest or a graph, so that nothing else in a
/// directory that `tributary.graph_cache_path` names is ever taken for one.
fn is_prepared_dir(entry: &std::fs::DirEntry) -> bool {
    let name = entry.file_name().to_string_lossy().into_owned();
    let key = name.rsplit_once('-').map_or("", |(_, k)| k);
    !name.starts_with('.')
        && key.len() == 16
        && key.bytes().all(|b| b.is_ascii_hexdigit())
        && entry.file_type().is_ok_and(|t| t.is_dir())
        && (entry.path().join(MANIFEST_FILE).is_file() || entry.path().join(GRAPH_FILE).is_file())
}

/// Renames `dir` aside (`.stale-<pid>-<n>`), then removes it: unlinked, never truncated (see
/// [`sweep`] for why that is safe for processes that map its files). One set aside but not
/// removed is removed with the leftovers of the next preparing or sweep. Under the lock.
fn discard(cache_dir: &Path, dir: &Path) -> std::result::Result<(), String> {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let aside = cache_dir.join(format!(".stale-{}-{n}", std::process::id()));
    std::fs::rename(dir, &aside).map_err(|e| format!("cannot rename it aside: {e}"))?;
    std::fs::remove_dir_all(&aside)
        .map_err(|e| format!("set aside as {}, not removed: {e}", aside.display()))
}

/// On the real ONNX Runtime library and default model (scripts/setup.sh, ort/lib, ort/models).
#[cfg(test)]
mod tests {
    use std::os::unix::fs::FileExt;

    use super::*;
    use crate::model::{repo_root, Embedder, EmbedderConfig, ProviderChoice};

    fn rt() -> &'static Runtime {
        crate::runtime::runtime(&repo_root().join("ort/lib/libonnxruntime.so.1.31.1"))
            .expect("run scripts/setup.sh first")
    }

    fn model_dir() -> PathBuf {
        repo_root().join("ort/models/all-MiniLM-L6-v2")
    }

    fn cache(test: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("tributary-prepared-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    /// The embedding of one text by a session that loads the prepared graph from `cache`.
    fn embed(cache: &Path) -> Vec<f32> {
        let dir = model_dir();
        let mut c =
            EmbedderConfig::new(dir.join("model.onnx"), dir.join("tokenizer.json"), 256, 384);
        c.provider = ProviderChoice::Cpu;
        c.intra_op_threads = 1;
        c.prepared_cache = Some(cache.to_owned());
        let mut e = Embedder::new(rt(), c).unwrap();
        assert_eq!(e.graph_note(), "", "the prepared graph is loaded");
        assert!(e.loaded_file().starts_with(cache));
        let out = e.embed(&["a prepared graph"], 2048, &mut |_| {}).unwrap();
        out.row_f32(0).to_vec()
    }

    /// Prepared directories in `cache` (no leftovers set aside or half prepared).
    fn dirs(cache: &Path) -> Vec<String> {
        std::fs::read_dir(cache)
            .unwrap()
            .flatten()
            .filter(|e| e.path().is_dir())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect()
    }

    /// Damages the prepared data file with `damage`, then checks that the next session finds
    /// it bad, prepares the graph again (same place, new file of the recorded size) and gives
    /// the same vector as before.
    fn prepared_again_after(test: &str, damage: impl Fn(&Path, u64), why: &str) {
        let cache = cache(test);
        let graph = prepared_graph(rt(), &model_dir().join("model.onnx"), &cache).unwrap();
        let dir = graph.parent().unwrap().to_owned();
        let data = dir.join(DATA_FILE);
        let before = embed(&cache);
        let len = std::fs::metadata(&data).unwrap().len();
        damage(&data, len);
        let err = check(&dir).unwrap_err();
        assert!(err.contains(why), "{err}");
        assert_eq!(
            prepared_graph(rt(), &model_dir().join("model.onnx"), &cache).unwrap(),
            graph
        );
        check(&dir).unwrap();
        assert_eq!(std::fs::metadata(&data).unwrap().len(), len);
        let after = embed(&cache);
        let cos: f32 = before.iter().zip(&after).map(|(a, b)| a * b).sum();
        assert!(cos > 0.99999, "cosine {cos}");
        assert_eq!(dirs(&cache).len(), 1, "{:?}", dirs(&cache));
        let _ = std::fs::remove_dir_all(&cache);
    }

    /// A copy of the default model's graph in a new directory `<cache>-models/copy`, so that
    /// it can be changed or removed; and the original, which is left alone.
    fn copy_and_original(cache: &Path) -> (PathBuf, PathBuf) {
        let original = model_dir().join("model.onnx");
        let copies = cache.with_extension("models");
        let _ = std::fs::remove_dir_all(&copies);
        std::fs::create_dir_all(copies.join("copy")).unwrap();
        let copy = copies.join("copy/model.onnx");
        std::fs::copy(&original, &copy).unwrap();
        (copy, original)
    }

    fn names(dirs: &[(PathBuf, String)]) -> Vec<PathBuf> {
        dirs.iter().map(|(d, _)| d.clone()).collect()
    }

    #[test]
    fn sweep_removes_directories_whose_model_file_changed_or_is_gone() {
        let cache = cache("sweep");
        let (copy, original) = copy_and_original(&cache);
        let changed = prepared_graph(rt(), &copy, &cache).unwrap();
        let fresh = prepared_graph(rt(), &original, &cache).unwrap();
        let manifest = read_manifest(fresh.parent().unwrap()).unwrap();
        assert_eq!(manifest.source, Some(Source::of(&original).unwrap()));
        // Left behind by a killed preparer, by an older tributary (a manifest naming no model
        // file), and things in the directory that are not prepared directories.
        std::fs::create_dir(cache.join(".prepare-4000000")).unwrap();
        let old = cache.join("old-0123456789abcdef");
        std::fs::create_dir(&old).unwrap();
        std::fs::write(old.join(MANIFEST_FILE), r#"{"files": []}"#).unwrap();
        // Prepared from a model file that is gone.
        let gone = cache.join("gone-fedcba9876543210");
        std::fs::create_dir(&gone).unwrap();
        let source = r#"{"path": "/nonexistent/model.onnx", "bytes": 1, "mtime_ns": 1}"#;
        std::fs::write(
            gone.join(MANIFEST_FILE),
            format!(r#"{{"source": {source}, "files": []}}"#),
        )
        .unwrap();
        for other in ["notes", "other-0123456789abcdef"] {
            std::fs::create_dir(cache.join(other)).unwrap();
        }
        // Touched: same bytes, another modification time.
        let touched = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
        std::fs::File::options()
            .write(true)
            .open(&copy)
            .unwrap()
            .set_modified(touched)
            .unwrap();
        let swept = sweep(&cache).unwrap();
        assert!(swept.failed.is_empty(), "{:?}", swept.failed);
        let mut removed = names(&swept.removed);
        removed.sort();
        let mut want = vec![
            changed.parent().unwrap().to_owned(),
            gone.clone(),
            old.clone(),
        ];
        want.sort();
        assert_eq!(removed, want, "{:?}", swept.removed);
        let why = |d: &Path| &swept.removed.iter().find(|(r, _)| r == d).unwrap().1;
        assert!(why(changed.parent().unwrap()).contains("changed"));
        assert!(why(&gone).contains("is gone"), "{}", why(&gone));
        assert!(why(&old).contains("older"), "{}", why(&old));
        // The fresh directory is whole and still found; what is not a prepared directory stays.
        let mut left = dirs(&cache);
        left.sort();
        let fresh_dir = fresh.parent().unwrap();
        let fresh_name = fresh_dir
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let mut want = vec![fresh_name, "notes".into(), "other-0123456789abcdef".into()];
        want.sort();
        assert_eq!(left, want);
        check(fresh_dir).unwrap();
        assert_eq!(prepared_graph(rt(), &original, &cache).unwrap(), fresh);
        assert!(sweep(&cache).unwrap().removed.is_empty());
        let _ = std::fs::remove_dir_all(cache.with_extension("models"));
        let _ = std::fs::remove_dir_all(&cache);
    }

    #[test]
    fn remove_prepared_removes_exactly_that_model_files_directory() {
        let cache = cache("remove");
        let (copy, original) = copy_and_original(&cache);
        let removed_graph = prepared_graph(rt(), &copy, &cache).unwrap();
        let kept_graph = prepared_graph(rt(), &original, &cache).unwrap();
        assert_eq!(dirs(&cache).len(), 2);
        // Named by another path to the same file.
        let other_path = copy.parent().unwrap().join("../copy/model.onnx");
        let done = remove_prepared(&cache, &other_path).unwrap();
        assert!(done.failed.is_empty(), "{:?}", done.failed);
        assert_eq!(
            names(&done.removed),
            [removed_graph.parent().unwrap().to_owned()]
        );
        assert_eq!(
            dirs(&cache),
            [kept_graph
                .parent()
                .unwrap()
                .file_name()
                .unwrap()
                .to_string_lossy()]
        );
        check(kept_graph.parent().unwrap()).unwrap();
        // A model file with no prepared directory: nothing to remove.
        assert!(remove_prepared(&cache, &copy).unwrap().removed.is_empty());
        let _ = std::fs::remove_dir_all(cache.with_extension("models"));
        let _ = std::fs::remove_dir_all(&cache);
    }

    #[test]
    fn a_full_check_is_kept_until_a_file_is_written() {
        let cache = cache("verified");
        let graph = prepared_graph(rt(), &model_dir().join("model.onnx"), &cache).unwrap();
        let dir = graph.parent().unwrap();
        let manifest = read_manifest(dir).unwrap();
        let set_mtimes = |t: std::time::SystemTime| {
            for f in &manifest.files {
                let file = std::fs::File::options()
                    .write(true)
                    .open(dir.join(&f.name))
                    .unwrap();
                file.set_modified(t).unwrap();
            }
        };
        // Files modified within the second are not vouched for.
        let _ = std::fs::remove_file(dir.join(VERIFIED_FILE));
        set_mtimes(std::time::SystemTime::now());
        check(dir).unwrap();
        assert!(!dir.join(VERIFIED_FILE).exists());
        // Last written two seconds ago: a full check passes and is kept.
        set_mtimes(std::time::SystemTime::now() - std::time::Duration::from_secs(2));
        check(dir).unwrap();
        assert!(verified(dir, &manifest));
        // Damaged in place since: the stamp no longer holds, and the full check finds it.
        let data = dir.join(DATA_FILE);
        let f = std::fs::OpenOptions::new().write(true).open(&data).unwrap();
        f.write_all_at(&[0x5A; 4096], 8192).unwrap();
        drop(f);
        assert!(!verified(dir, &manifest));
        assert!(check(dir).unwrap_err().contains("checksum"));
        let _ = std::fs::remove_dir_all(&cache);
    }

    #[test]
    fn truncated_file_is_prepared_again() {
        prepared_again_after(
            "truncated",
            |data, len| {
                let f = std::fs::OpenOptions::new().write(true).open(data).unwrap();
                f.set_len(len / 2).unwrap();
            },
            "bytes, not",
        );
    }

    #[test]
    fn corrupt_bytes_are_prepared_again() {
        prepared_again_after(
            "corrupt",
            |data, len| {
                let f = std::fs::OpenOptions::new().write(true).open(data).unwrap();
                f.write_all_at(&[0xA5; 4096], len / 2).unwrap();
            },
            "checksum",
        );
    }

    #[test]
    fn directory_without_manifest_is_prepared_again() {
        prepared_again_after(
            "manifest",
            |data, _| std::fs::remove_file(data.with_file_name(MANIFEST_FILE)).unwrap(),
            MANIFEST_FILE,
        );
    }
}
