//! The model catalog `tributary.models` and this backend's caches: sessions, tokenizers and
//! `tributary_embed(text)` results, each a bounded LRU cache ([`lru::LruCache`]).

use std::cell::RefCell;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Once};
use std::time::{Duration, Instant};

use lru::LruCache;
use parking_lot::Mutex;
use pgrx::prelude::*;

use super::error::{Result, TributaryError};
use super::{activity, gpu, gucs};
use crate::engine::tokenize::TextTokenizer;
use crate::engine::{
    self, Embedder, EmbedderConfig, Manifest, Pooling, ProviderChoice, RunThread, ShapeBuckets,
};

/// One row of `tributary.models`.
#[derive(Debug, Clone)]
pub struct ModelRow {
    pub name: String,
    /// Model directory: absolute, or relative to `tributary.model_path`.
    pub path: String,
    pub onnx_file: String,
    pub tokenizer_file: String,
    pub dimension: usize,
    pub max_length: usize,
    pub pooling: String,
    pub precision: String,
    /// `tributary` (pooling inside the graph) or `sentence-transformers` (pooled here).
    pub layout: String,
    /// L2-normalise after pooling (standard exports; tributary's graphs always normalise).
    pub normalize: bool,
    /// Prompt name -> text put before each input.
    pub prompts: std::collections::BTreeMap<String, String>,
    /// The prompt used when none is named, if any.
    pub default_prompt: Option<String>,
}

impl ModelRow {
    pub fn dir(&self) -> PathBuf {
        model_dir(&self.path)
    }

    /// The session configuration this row asks for under the current settings.
    pub fn embedder_config(&self) -> EmbedderConfig {
        let dir = self.dir();
        EmbedderConfig {
            model_file: model_file(&self.path, &self.onnx_file),
            tokenizer_file: dir.join(&self.tokenizer_file),
            max_length: self.max_length,
            dimension: self.dimension,
            provider: gucs::execution_provider(),
            intra_op_threads: gucs::intra_op_threads(),
            gpu_device: gucs::gpu_device(),
            // Filled in when a session is created (it reads tributary.json); see `with_embedder`.
            gpu_model_file: None,
            gpu_memory_limit_mb: gucs::gpu_memory_limit_mb(),
            tensorrt_cache_dir: Some(gucs::tensorrt_cache_path()),
            io_binding: gucs::io_binding(),
            prepared_cache: gucs::graph_cache_path(),
            shrink_arena: gucs::shrink_arena(),
            intra_op_spinning: gucs::intra_op_spinning(),
            shape_buckets: if gucs::gpu_shape_buckets() {
                ShapeBuckets::Gpu
            } else {
                ShapeBuckets::Off
            },
            warm_shapes: gucs::gpu_warm_shapes(),
            // A GPU session's runs on a thread of its own: the pipeline's model thread is new in
            // every call (engine::RunThread).
            run_thread: RunThread::OwnOnGpu,
            pooling: (self.layout != "tributary")
                .then(|| Pooling::parse(&self.pooling))
                .flatten(),
            normalize: self.normalize,
        }
    }

    /// The prompt to put before each text: `name`'s, else the model's default prompt's, else
    /// none. Returns (the prompt's name or None, its text).
    ///
    /// Errors: 42704 a name the model has no prompt for (HINT lists its prompts).
    pub fn prompt(&self, name: Option<&str>) -> Result<(Option<String>, String)> {
        let Some(name) = name
            .map(str::to_owned)
            .or_else(|| self.default_prompt.clone())
        else {
            return Ok((None, String::new()));
        };
        match self.prompts.get(&name) {
            Some(text) => Ok((Some(name), text.clone())),
            None => Err(TributaryError::UnknownPrompt {
                model: self.name.clone(),
                prompt: name,
                known: self.prompts.keys().cloned().collect(),
            }),
        }
    }

    /// The model's fp16 graph (`files.fp16` of its tributary.json) when this row is an fp32 graph
    /// and that file exists; the GPU runs it instead when `tributary.gpu_fp16` is on. `None` too
    /// when tributary.json cannot be read now (the row was registered from a readable one).
    pub fn fp16_file(&self) -> Option<PathBuf> {
        if self.precision != "fp32" || self.layout != "tributary" {
            return None;
        }
        let dir = self.dir();
        let file = dir.join(Manifest::from_dir(&dir).ok()?.graph("fp16")?);
        file.is_file().then_some(file)
    }
}

/// A model's directory from its `path` in `tributary.models`: absolute, or relative to
/// `tributary.model_path`.
fn model_dir(path: &str) -> PathBuf {
    let p = Path::new(path);
    if p.is_absolute() {
        p.to_owned()
    } else {
        gucs::model_path().join(p)
    }
}

/// The graph file that a CPU session of a model loads, from its `path` and `onnx_file` in
/// `tributary.models`: the file its prepared graphs (tributary.shared_weights) are prepared from.
pub fn model_file(path: &str, onnx_file: &str) -> PathBuf {
    model_dir(path).join(onnx_file)
}

/// The [`model_file`] of model `name` in `tributary.models` (none for an unknown name), or of
/// every model there when `name` is `None`.
///
/// Errors: XX000 when SPI fails.
pub fn model_files(name: Option<&str>) -> Result<Vec<PathBuf>> {
    super::spi::pinned(|| {
        Spi::connect(|client| {
            let rows = client.select(
                "SELECT path, onnx_file FROM tributary.models \
                  WHERE $1::pg_catalog.text IS NULL OR name OPERATOR(pg_catalog.=) $1",
                None,
                &[name.into()],
            )?;
            let mut files = Vec::new();
            for row in rows {
                if let (Some(path), Some(onnx_file)) =
                    (row.get::<String>(1)?, row.get::<String>(2)?)
                {
                    files.push(model_file(&path, &onnx_file));
                }
            }
            Ok::<_, pgrx::spi::Error>(files)
        })
    })
    .map_err(|e| TributaryError::Internal(format!("reading tributary.models failed: {e}")))
}

/// Looks `name` up in `tributary.models`; `None` means the `tributary.model` setting.
///
/// Errors: 22023 when no model is named at all; 42704 for an unknown model; XX000 when SPI fails.
pub fn model(name: Option<&str>) -> Result<ModelRow> {
    let name = match name.map(str::to_owned).or_else(gucs::model) {
        Some(n) => n,
        None => {
            return Err(TributaryError::InvalidArgument {
                message: "no model given and tributary.model is empty".into(),
                hint: Some("Pass a model name or SET tributary.model.".into()),
            })
        }
    };
    // As JSON, so that a catalog of an older version (without the columns added since, before
    // ALTER EXTENSION tributary UPDATE) reads with their defaults.
    let json = super::spi::select_one::<pgrx::JsonB>(
        "SELECT pg_catalog.to_jsonb(m) FROM tributary.models m \
          WHERE m.name OPERATOR(pg_catalog.=) $1::pg_catalog.text",
        &[name.as_str().into()],
    )
    .map_err(|e| TributaryError::Internal(format!("reading tributary.models failed: {e}")))?;
    let row = match json {
        Some(pgrx::JsonB(v)) => Some(
            serde_json::from_value::<CatalogRow>(v)
                .map_err(|e| {
                    TributaryError::Internal(format!("reading tributary.models failed: {e}"))
                })?
                .into_row(name.clone()),
        ),
        None => None,
    };
    row.ok_or(TributaryError::UnknownModel(name))
}

/// A `tributary.models` row as `to_jsonb` gives it; columns added after 0.2.0 have defaults.
#[derive(serde::Deserialize)]
struct CatalogRow {
    path: String,
    onnx_file: String,
    tokenizer_file: String,
    dimension: i32,
    max_length: i32,
    pooling: String,
    precision: String,
    #[serde(default = "tributary_layout")]
    layout: String,
    #[serde(default = "yes")]
    normalize: bool,
    #[serde(default)]
    prompts: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    default_prompt: Option<String>,
}

fn tributary_layout() -> String {
    "tributary".into()
}

fn yes() -> bool {
    true
}

impl CatalogRow {
    fn into_row(self, name: String) -> ModelRow {
        ModelRow {
            name,
            path: self.path,
            onnx_file: self.onnx_file,
            tokenizer_file: self.tokenizer_file,
            dimension: self.dimension.max(0) as usize,
            max_length: self.max_length.max(0) as usize,
            pooling: self.pooling,
            precision: self.precision,
            layout: self.layout,
            normalize: self.normalize,
            prompts: self.prompts,
            default_prompt: self.default_prompt,
        }
    }
}

/// Sessions kept per backend. With `tributary.shared_weights` a CPU session's weights are mapped
/// from a file shared by all backends (a few MB of its own); without it each holds a copy of the
/// model's weights (all-MiniLM-L6-v2: 90 MB fp32). The least recently used session is dropped first.
const MAX_SESSIONS: NonZeroUsize = NonZeroUsize::new(3).unwrap();

/// (model name, session settings, tributary.gpu_fp16)
type Key = (String, EmbedderConfig, bool);

struct Entry {
    embedder: Embedder,
}

/// This backend's sessions and when one was last used.
struct Sessions {
    cache: LruCache<Key, Entry>,
    last_used: Instant,
    /// Sessions the idle release dropped and not yet reported to tributary.stat_activity.
    released: u32,
    /// Freed heap pages were handed back since the last use (see [`trim_heap`]).
    trimmed: bool,
}

/// Sessions by key, at most [`MAX_SESSIONS`]: a use ([`with_embedder`]) makes a session the most
/// recently used; a new one past the cap drops the least recently used. Behind a mutex (not a
/// thread-local) only so that the idle release ([`start_idle_release`]) can drop them from its
/// own thread while the backend waits for its client: the backend's main thread is the only
/// other user, and nothing here calls into PostgreSQL while the lock is held by that thread.
static SESSIONS: LazyLock<Mutex<Sessions>> = LazyLock::new(|| {
    Mutex::new(Sessions {
        cache: LruCache::new(MAX_SESSIONS),
        last_used: Instant::now(),
        released: 0,
        trimmed: true,
    })
});

/// `tributary.shrink_arena`, copied for the idle-release thread like [`IDLE_TIMEOUT_MS`].
static SHRINK: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// How often a busy backend hands freed heap pages back to the system, at most.
const TRIM_EVERY: Duration = Duration::from_secs(5);
/// How long a backend idles before its thread hands freed heap pages back.
const TRIM_WHEN_IDLE: Duration = Duration::from_secs(1);

thread_local! {
    static LAST_TRIM: std::cell::Cell<Option<Instant>> = const { std::cell::Cell::new(None) };
}

/// `malloc_trim(0)`: gives the pages of glibc's heaps that are free back to the system. ONNX
/// Runtime's threads and the tokenizer allocate from glibc's per-thread arenas, and a shrunk ONNX
/// Runtime arena is freed into them: without this a busy backend's private memory crept up by
/// about a third over a minute of mixed calls (benches/load.py). Thread-safe.
fn trim_heap() {
    // SAFETY: malloc_trim only returns free pages of glibc's arenas; it is thread-safe.
    unsafe { libc::malloc_trim(0) };
}

/// `tributary.session_idle_timeout` as the idle-release thread reads it (ms; 0 = never), copied
/// by the main thread at every call (settings are not to be read from other threads).
static IDLE_TIMEOUT_MS: AtomicU64 = AtomicU64::new(0);
static IDLE_RELEASE_STARTED: Once = Once::new();

/// Starts, once per backend, the thread that drops this backend's sessions when none was used
/// for `tributary.session_idle_timeout`, and hands freed heap pages back ([`trim_heap`]) once the
/// backend has idled for a second: an idle backend waits in a read from its client, so its own
/// thread cannot do it. The thread takes the sessions' lock only when free (never while a call
/// runs); ONNX Runtime sessions may be released from any thread. It calls nothing of
/// PostgreSQL's, and it runs with every signal blocked, as ORT's threads do.
fn start_idle_release() {
    IDLE_RELEASE_STARTED.call_once(|| {
        let spawned = crate::engine::signals::with_signals_blocked(|| {
            std::thread::Builder::new()
                .name("tributary-idle".into())
                .spawn(idle_release_loop)
        });
        if let Err(e) = spawned {
            pgrx::log!("tributary: could not start the idle session release thread: {e}");
        }
    });
}

fn idle_release_loop() {
    loop {
        let timeout = IDLE_TIMEOUT_MS.load(Ordering::Relaxed);
        let tick = if timeout == 0 {
            Duration::from_millis(500)
        } else {
            Duration::from_millis((timeout / 4).clamp(10, 500))
        };
        std::thread::sleep(tick);
        let Some(mut s) = SESSIONS.try_lock() else {
            continue;
        };
        let idle = s.last_used.elapsed();
        if timeout > 0 && !s.cache.is_empty() && idle >= Duration::from_millis(timeout) {
            let n = s.cache.len() as u32;
            s.cache.clear();
            s.released += n;
            s.trimmed = false;
        }
        if !s.trimmed && idle >= TRIM_WHEN_IDLE && SHRINK.load(Ordering::Relaxed) {
            s.trimmed = true;
            drop(s);
            trim_heap();
        }
    }
}

/// Runs `f` with this backend's session for `model`, creating it on first use (and loading
/// ONNX Runtime on the first use of all). A changed catalog row or setting gives a new session.
/// Records the call in `tributary.stat_activity` afterwards, and with `tributary.shrink_arena`
/// hands freed heap pages back at most every 5 s.
pub fn with_embedder<R>(model: &ModelRow, f: impl FnOnce(&mut Embedder) -> R) -> Result<R> {
    run_with_embedder(model, false, true, f)
}

/// [`with_embedder`] for a caller that only reads or annotates the session (its provider, the
/// time the caller spent around it), running no model: no call is recorded in
/// `tributary.stat_activity`.
pub fn with_embedder_unrecorded<R>(
    model: &ModelRow,
    f: impl FnOnce(&mut Embedder) -> R,
) -> Result<R> {
    run_with_embedder(model, false, false, f)
}

/// [`with_embedder`] for a caller that calls into PostgreSQL (SPI) while `f` runs and may hand
/// the session to another thread meanwhile (src/service/pipeline.rs): the session is taken out
/// of this backend's sessions and the lock released for the duration of `f`, then put back (also
/// when `f` unwinds). A tributary call made meanwhile by the same backend (a trigger that embeds,
/// say) finds no session for the key and creates its own.
pub fn with_embedder_detached<R>(
    model: &ModelRow,
    f: impl FnOnce(&mut Embedder) -> R,
) -> Result<R> {
    run_with_embedder(model, true, true, f)
}

/// Puts a detached session back into this backend's sessions when dropped (most recently used).
struct PutBack {
    key: Option<Key>,
    embedder: Option<Embedder>,
}

impl Drop for PutBack {
    fn drop(&mut self) {
        if let (Some(key), Some(embedder)) = (self.key.take(), self.embedder.take()) {
            let mut sessions = SESSIONS.lock();
            sessions.cache.put(key, Entry { embedder });
            sessions.last_used = Instant::now();
        }
    }
}

fn run_with_embedder<R>(
    model: &ModelRow,
    detached: bool,
    recorded: bool,
    f: impl FnOnce(&mut Embedder) -> R,
) -> Result<R> {
    let key: Key = (
        model.name.clone(),
        model.embedder_config(),
        gucs::gpu_fp16(),
    );
    // Checked on every call, not only when a session is created: a changed
    // tributary.ort_library is an error rather than silently ignored.
    let runtime = engine::model::runtime(&gucs::ort_library())?;
    IDLE_TIMEOUT_MS.store(gucs::session_idle_timeout_ms(), Ordering::Relaxed);
    SHRINK.store(gucs::shrink_arena(), Ordering::Relaxed);
    start_idle_release();
    // Nothing that can raise an ERROR runs while SESSIONS is locked: an ERROR that leaves
    // through a longjmp skips the guard's drop, and every later call of this backend would wait
    // for the lock forever, past cancel and pg_terminate_backend (a statement_timeout that fired
    // inside the LOG line below did). The LOG line is written after the lock is released.
    let mut created: Option<String> = None;
    let mut sessions = SESSIONS.lock();
    if sessions.released > 0 {
        activity::note_idle_releases(std::mem::take(&mut sessions.released), sessions.cache.len());
    }
    if !sessions.cache.contains(&key) {
        let others_on_gpu = sessions
            .cache
            .iter()
            .any(|(_, e)| e.embedder.provider().is_gpu());
        let embedder = create(runtime, model, &key, others_on_gpu)?;
        let provider = embedder.provider().as_str();
        let why = [embedder.provider_note(), embedder.graph_note()]
            .into_iter()
            .filter(|n| !n.is_empty())
            .collect::<Vec<_>>()
            .join("; ");
        let ms = embedder.stats().create_time.as_secs_f64() * 1e3;
        created = Some(if why.is_empty() {
            format!(
                "tributary: model \"{}\" runs on {provider} (session created in {ms:.0} ms)",
                model.name
            )
        } else {
            format!(
                "tributary: model \"{}\" runs on {provider} (session created in {ms:.0} ms): {why}",
                model.name
            )
        });
        // Drops the least recently used session when all MAX_SESSIONS are taken.
        sessions.cache.put(key.clone(), Entry { embedder });
    }
    let count = sessions.cache.len();
    let entry = sessions
        .cache
        .get_mut(&key)
        .expect("present or just created");
    let gpu_warning = if entry.embedder.provider().is_gpu() {
        gpu::ensure_held()
    } else {
        None
    };
    let before = entry.embedder.stats().clone();
    let record = |e: &Embedder| {
        if !recorded {
            return;
        }
        let after = e.stats();
        activity::record_call(&activity::Call {
            model: &model.name,
            provider: e.provider().as_str(),
            sessions: count,
            rows: after.rows - before.rows,
            tokens: after.tokens - before.tokens,
            run_time: after.run_time.saturating_sub(before.run_time),
        });
    };
    let out = if detached {
        let embedder = sessions.cache.pop(&key).expect("present").embedder;
        sessions.last_used = Instant::now();
        drop(sessions);
        let mut back = PutBack {
            key: Some(key),
            embedder: Some(embedder),
        };
        let out = f(back.embedder.as_mut().expect("taken"));
        record(back.embedder.as_ref().expect("taken"));
        drop(back);
        sessions = SESSIONS.lock();
        out
    } else {
        let out = f(&mut entry.embedder);
        record(&entry.embedder);
        out
    };
    sessions.last_used = Instant::now();
    sessions.trimmed = false;
    drop(sessions);
    if let Some(line) = created {
        pgrx::log!("{line}");
    }
    if let Some(w) = gpu_warning {
        pgrx::warning!("{w}");
    }
    if gucs::shrink_arena() && LAST_TRIM.with(|t| t.get().is_none_or(|t| t.elapsed() >= TRIM_EVERY))
    {
        LAST_TRIM.with(|t| t.set(Some(Instant::now())));
        trim_heap();
    }
    Ok(out)
}

/// Creates a session: GPU admission first when a GPU provider is asked for and can be tried at
/// all (the library has it and the machine has a GPU: [`Embedder::gpu_possible`]; otherwise
/// straight to the CPU, or the reason as an error for an explicit `cuda`/`tensorrt`, and no slot
/// is taken), the fp16 graph on the GPU, and the slot given back if the session ended up on the
/// CPU after all and no other session of this backend (`others_on_gpu`) runs on the GPU.
fn create(
    runtime: &engine::Runtime,
    model: &ModelRow,
    key: &Key,
    others_on_gpu: bool,
) -> Result<Embedder> {
    let mut config = key.1.clone();
    let mut note = String::new();
    if config.provider != ProviderChoice::Cpu {
        let failed = engine::model::preload_libraries(&gucs::cuda_library_path());
        if !failed.is_empty() {
            pgrx::log!("tributary: could not load from tributary.cuda_library_path: {failed}");
        }
        if let Err(why) = Embedder::gpu_possible(runtime, config.provider) {
            if config.provider != ProviderChoice::Auto {
                let provider = if config.provider == ProviderChoice::TensorRt {
                    "tensorrt"
                } else {
                    "cuda"
                };
                return Err(engine::Error::Provider {
                    provider,
                    reason: why,
                }
                .into());
            }
            note = format!("cuda unavailable: {why}");
            config.provider = ProviderChoice::Cpu;
        }
    }
    if config.provider != ProviderChoice::Cpu {
        if key.2 {
            config.gpu_model_file = model.fp16_file();
        }
        if !gpu::admit()? {
            note = format!(
                "all {} GPU slots are taken (tributary.max_gpu_sessions), running on cpu (tributary.gpu_overflow)",
                gucs::max_gpu_sessions().unwrap_or(0)
            );
            config.provider = ProviderChoice::Cpu;
        }
    }
    let created = Embedder::new(runtime, config);
    let on_gpu = created.as_ref().is_ok_and(|e| e.provider().is_gpu()) || others_on_gpu;
    if !on_gpu {
        gpu::release();
    }
    let mut embedder = created?;
    embedder.add_provider_note(&note);
    Ok(embedder)
}

/// Tokenizers loaded without a session (`tributary_tokenize`, row text), keyed by model name and
/// tokenizer settings; small, like the session cache.
type TokenizerKey = (String, PathBuf, usize);

/// Tokenizers kept per backend: as many as sessions.
const MAX_TOKENIZERS: NonZeroUsize = MAX_SESSIONS;

thread_local! {
    /// At most [`MAX_TOKENIZERS`], least recently used dropped first. Not cleared with the
    /// sessions: the key holds the tokenizer file and max length.
    static TOKENIZERS: RefCell<LruCache<TokenizerKey, Rc<TextTokenizer>>> = RefCell::new(LruCache::new(MAX_TOKENIZERS));
}

/// Runs `f` with `model`'s tokenizer (truncation at its max length): the one of an open session
/// when there is one (looking it up does not count as a use of the session), else one loaded
/// from the model's `tokenizer.json` and kept for this backend. Loads no ONNX Runtime session.
///
/// Errors: 58P01 when the tokenizer file is missing; 38000 when it does not parse.
pub fn with_tokenizer<R>(model: &ModelRow, f: impl FnOnce(&TextTokenizer) -> R) -> Result<R> {
    let config = model.embedder_config();
    let key: TokenizerKey = (
        model.name.clone(),
        config.tokenizer_file.clone(),
        config.max_length,
    );
    let mut f = Some(f);
    let from_session = {
        let sessions = SESSIONS.lock();
        // Most recently used first.
        sessions
            .cache
            .iter()
            .find(|(k, _)| k.0 == key.0 && k.1.tokenizer_file == key.1 && k.1.max_length == key.2)
            .map(|(_, e)| f.take().expect("not called yet")(e.embedder.tokenizer()))
    };
    if let Some(r) = from_session {
        return Ok(r);
    }
    let tokenizer = TOKENIZERS.with(|cell| -> Result<_> {
        let mut cache = cell.borrow_mut();
        if let Some(t) = cache.get(&key) {
            return Ok(t.clone());
        }
        let t = Rc::new(TextTokenizer::from_file(&key.1, key.2)?);
        cache.put(key.clone(), t.clone());
        Ok(t)
    })?;
    Ok(f.expect("not called above")(&tokenizer))
}

/// Calls `f` for every session this backend holds, least recently used first.
pub fn for_each_session(mut f: impl FnMut(&str, &Embedder)) {
    for (key, e) in SESSIONS.lock().cache.iter().rev() {
        f(&key.0, &e.embedder);
    }
}

/// Drops every cached session (e.g. after a model is re-registered or dropped).
pub fn clear_sessions() {
    SESSIONS.lock().cache.clear();
    MEMO.with(|cell| cell.borrow_mut().clear());
}

/// Results of `tributary_embed(text)` this backend keeps. PostgreSQL evaluates a stable function
/// again wherever the executor needs its value: `ORDER BY embedding <=> tributary_embed('query')`
/// called it once per table row under a sequential scan and once per returned row under an HNSW
/// index scan, each time running the model on the same text.
const MEMO_ENTRIES: NonZeroUsize = NonZeroUsize::new(32).unwrap();
/// Longer texts are not kept (bytes; 32 entries stay under about 300 kB with 384 dimensions).
const MEMO_MAX_TEXT: usize = 8192;

/// (text, session key)
type MemoKey = (String, Key);

/// A memoized embedding: `[dim] f32`, and whether the text was truncated to the window (so
/// that `tributary.truncation` applies to a memoized text as to a new one).
pub type Memo = (Vec<f32>, bool);

thread_local! {
    /// `[dim] f32` and whether the text was truncated, by text and session key, at most
    /// [`MEMO_ENTRIES`], least recently used dropped first; cleared with the sessions.
    static MEMO: RefCell<LruCache<MemoKey, Rc<Memo>>> = RefCell::new(LruCache::new(MEMO_ENTRIES));
}

/// The embedding `[dim] f32` of `text` after the prompt text `prefix` with `model`'s current
/// session settings, from this backend's memo, or computed by `compute` and kept. The key is the
/// prompt's text, NUL, the text (unambiguous: a PostgreSQL text never holds NUL) and the session's
/// key (model name, files, provider and settings), so a changed setting or a re-registered model
/// never returns an old vector; registering or dropping a model clears the memo with the
/// sessions. Texts over [`MEMO_MAX_TEXT`] bytes are computed and not kept (nor copied).
pub fn memoized_embedding(
    model: &ModelRow,
    prefix: &str,
    text: &str,
    compute: impl FnOnce() -> Result<Memo>,
) -> Result<Rc<Memo>> {
    if text.len() + prefix.len() > MEMO_MAX_TEXT {
        return Ok(Rc::new(compute()?));
    }
    let key: MemoKey = (
        format!("{prefix}\0{text}"),
        (
            model.name.clone(),
            model.embedder_config(),
            gucs::gpu_fp16(),
        ),
    );
    if let Some(v) = MEMO.with(|cell| cell.borrow_mut().get(&key).cloned()) {
        return Ok(v);
    }
    let v = Rc::new(compute()?);
    MEMO.with(|cell| cell.borrow_mut().put(key, v.clone()));
    Ok(v)
}

/// Number of sessions this backend holds (for tests and tributary_info).
pub fn session_count() -> usize {
    SESSIONS.lock().cache.len()
}
