//! The model catalog `tributary.models` and the per-backend session cache.

use std::cell::RefCell;
use std::path::{Path, PathBuf};

use pgrx::prelude::*;

use super::error::{Result, TributaryError};
use super::{gpu, gucs};
use crate::engine::{self, Embedder, EmbedderConfig, Manifest, ProviderChoice};

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
}

impl ModelRow {
    pub fn dir(&self) -> PathBuf {
        let p = Path::new(&self.path);
        if p.is_absolute() {
            p.to_owned()
        } else {
            gucs::model_path().join(p)
        }
    }

    /// The session configuration this row asks for under the current settings.
    pub fn embedder_config(&self) -> EmbedderConfig {
        let dir = self.dir();
        EmbedderConfig {
            model_file: dir.join(&self.onnx_file),
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
        }
    }

    /// The model's fp16 graph (`files.fp16` of its tributary.json) when this row is an fp32 graph
    /// and that file exists; the GPU runs it instead when `tributary.gpu_fp16` is on. `None` too
    /// when tributary.json cannot be read now (the row was registered from a readable one).
    pub fn fp16_file(&self) -> Option<PathBuf> {
        if self.precision != "fp32" {
            return None;
        }
        let dir = self.dir();
        let file = dir.join(Manifest::from_dir(&dir).ok()?.graph("fp16")?);
        file.is_file().then_some(file)
    }
}

/// Looks `name` up in `tributary.models`; `None` means the `tributary.model` setting.
///
/// Errors: 42704 for an unknown model (or no model named at all).
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
    let row = Spi::connect(|client| {
        let table = client.select(
            "SELECT path, onnx_file, tokenizer_file, dimension, max_length, pooling, precision \
             FROM tributary.models WHERE name = $1",
            Some(1),
            &[name.as_str().into()],
        )?;
        if table.is_empty() {
            return Ok::<_, pgrx::spi::Error>(None);
        }
        let r = table.first();
        Ok(Some(ModelRow {
            name: name.clone(),
            path: r.get::<String>(1)?.unwrap_or_default(),
            onnx_file: r.get::<String>(2)?.unwrap_or_default(),
            tokenizer_file: r.get::<String>(3)?.unwrap_or_default(),
            dimension: r.get::<i32>(4)?.unwrap_or(0) as usize,
            max_length: r.get::<i32>(5)?.unwrap_or(0) as usize,
            pooling: r.get::<String>(6)?.unwrap_or_default(),
            precision: r.get::<String>(7)?.unwrap_or_default(),
        }))
    })
    .unwrap_or_else(|e| pgrx::error!("reading tributary.models failed: {e}"));
    row.ok_or(TributaryError::UnknownModel(name))
}

/// Sessions kept per backend. Each holds a copy of the model's weights (all-MiniLM-L6-v2: 90 MB
/// fp32), so the cache is small; the least recently used session is dropped first.
const MAX_SESSIONS: usize = 3;

/// (model name, session settings, tributary.gpu_fp16)
type Key = (String, EmbedderConfig, bool);

struct Entry {
    key: Key,
    embedder: Embedder,
    /// Why the session is not on the GPU though a GPU provider was asked for (admission), or empty.
    note: String,
}

thread_local! {
    // Backends are single-threaded and this is touched only from the backend's main thread
    // (never from ORT's or the tokenizer's worker threads), so a RefCell is enough.
    static SESSIONS: RefCell<Vec<Entry>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` with this backend's session for `model`, creating it on first use (and loading
/// ONNX Runtime on the first use of all). A changed catalog row or setting gives a new session.
pub fn with_embedder<R>(model: &ModelRow, f: impl FnOnce(&mut Embedder) -> R) -> Result<R> {
    let key: Key = (model.name.clone(), model.embedder_config(), gucs::gpu_fp16());
    // Checked on every call, not only when a session is created: a changed
    // tributary.ort_library is an error rather than silently ignored.
    let runtime = engine::model::runtime(&gucs::ort_library())?;
    SESSIONS.with(|cell| {
        let mut sessions = cell.borrow_mut();
        let pos = match sessions.iter().position(|e| e.key == key) {
            Some(p) => p,
            None => {
                let (embedder, note) = create(runtime, model, &key, &sessions)?;
                let provider = embedder.provider().as_str();
                let why = [embedder.provider_note(), note.as_str()].into_iter().filter(|n| !n.is_empty()).collect::<Vec<_>>().join("; ");
                if why.is_empty() {
                    pgrx::log!("tributary: model \"{}\" runs on {provider}", model.name);
                } else {
                    pgrx::log!("tributary: model \"{}\" runs on {provider}: {why}", model.name);
                }
                if sessions.len() >= MAX_SESSIONS {
                    sessions.remove(0);
                }
                sessions.push(Entry { key, embedder, note });
                sessions.len() - 1
            }
        };
        // Most recently used last.
        let entry = sessions.remove(pos);
        sessions.push(entry);
        let last = sessions.len() - 1;
        if sessions[last].embedder.provider().is_gpu() {
            gpu::ensure_held();
        }
        Ok(f(&mut sessions[last].embedder))
    })
}

/// Creates a session: GPU admission first when a GPU provider is asked for, the fp16 graph on the
/// GPU, and the slot given back if the session ended up on the CPU after all.
fn create(runtime: &engine::Runtime, model: &ModelRow, key: &Key, others: &[Entry]) -> Result<(Embedder, String)> {
    let mut config = key.1.clone();
    let mut note = String::new();
    if config.provider != ProviderChoice::Cpu {
        let failed = engine::model::preload_libraries(&gucs::cuda_library_path());
        if !failed.is_empty() {
            pgrx::log!("tributary: could not load from tributary.cuda_library_path: {failed}");
        }
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
    let on_gpu = created.as_ref().is_ok_and(|e| e.provider().is_gpu()) || others.iter().any(|e| e.embedder.provider().is_gpu());
    if !on_gpu {
        gpu::release();
    }
    Ok((created?, note))
}

/// Tokenizers loaded without a session (`tributary_tokenize`, row text), keyed by model name and
/// tokenizer settings; small, like the session cache.
type TokenizerKey = (String, PathBuf, usize);

thread_local! {
    static TOKENIZERS: RefCell<Vec<(TokenizerKey, std::rc::Rc<engine::tokenize::TextTokenizer>)>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` with `model`'s tokenizer (truncation at its max length): the one of an open session
/// when there is one, else one loaded from the model's `tokenizer.json` and kept for this backend.
/// Loads no ONNX Runtime session.
///
/// Errors: 58P01 when the tokenizer file is missing; 38000 when it does not parse.
pub fn with_tokenizer<R>(model: &ModelRow, f: impl FnOnce(&engine::tokenize::TextTokenizer) -> R) -> Result<R> {
    let config = model.embedder_config();
    let key: TokenizerKey = (model.name.clone(), config.tokenizer_file.clone(), config.max_length);
    let from_session = SESSIONS.with(|cell| {
        cell.borrow()
            .iter()
            .rev()
            .find(|e| e.key.0 == key.0 && e.key.1.tokenizer_file == key.1 && e.key.1.max_length == key.2)
            .map(|e| e as *const Entry)
            .is_some()
    });
    if from_session {
        return SESSIONS.with(|cell| {
            let sessions = cell.borrow();
            let e = sessions
                .iter()
                .rev()
                .find(|e| e.key.0 == key.0 && e.key.1.tokenizer_file == key.1 && e.key.1.max_length == key.2)
                .expect("found above");
            Ok(f(e.embedder.tokenizer()))
        });
    }
    let tokenizer = TOKENIZERS.with(|cell| -> Result<_> {
        let mut cache = cell.borrow_mut();
        if let Some((_, t)) = cache.iter().find(|(k, _)| *k == key) {
            return Ok(t.clone());
        }
        let t = std::rc::Rc::new(engine::tokenize::TextTokenizer::from_file(&key.1, key.2)?);
        if cache.len() >= MAX_SESSIONS {
            cache.remove(0);
        }
        cache.push((key.clone(), t.clone()));
        Ok(t)
    })?;
    Ok(f(&tokenizer))
}

/// Calls `f` for every session this backend holds, least recently used first, with the note
/// that says why a session asked for a GPU runs on the CPU (empty otherwise).
pub fn for_each_session(mut f: impl FnMut(&str, &Embedder, &str)) {
    SESSIONS.with(|cell| {
        for e in cell.borrow().iter() {
            f(&e.key.0, &e.embedder, &e.note);
        }
    })
}

/// Drops every cached session (e.g. after a model is re-registered or dropped).
pub fn clear_sessions() {
    SESSIONS.with(|cell| cell.borrow_mut().clear());
    MEMO.with(|cell| cell.borrow_mut().clear());
}

/// Results of `tributary_embed(text)` this backend keeps, most recent last. PostgreSQL evaluates a
/// stable function again wherever the executor needs its value: `ORDER BY embedding <=>
/// tributary_embed('query')` called it once per table row under a sequential scan and once per
/// returned row under an HNSW index scan, each time running the model on the same text.
const MEMO_ENTRIES: usize = 32;
/// Longer texts are not kept (bytes; 32 entries stay under about 300 kB with 384 dimensions).
const MEMO_MAX_TEXT: usize = 8192;

thread_local! {
    static MEMO: RefCell<std::collections::VecDeque<(String, Key, std::rc::Rc<Vec<f32>>)>> =
        const { RefCell::new(std::collections::VecDeque::new()) };
}

/// The embedding `[dim] f32` of `text` with `model`'s current session settings, from this
/// backend's memo, or computed by `compute` and kept. The key is the session's key (model name,
/// files, provider and settings), so a changed setting or a re-registered model never returns an
/// old vector; registering or dropping a model clears the memo with the sessions.
pub fn memoized_embedding(model: &ModelRow, text: &str, compute: impl FnOnce() -> Result<Vec<f32>>) -> Result<std::rc::Rc<Vec<f32>>> {
    if text.len() > MEMO_MAX_TEXT {
        return Ok(std::rc::Rc::new(compute()?));
    }
    let key: Key = (model.name.clone(), model.embedder_config(), gucs::gpu_fp16());
    let hit = MEMO.with(|cell| cell.borrow().iter().rev().find(|(t, k, _)| t == text && *k == key).map(|(_, _, v)| v.clone()));
    if let Some(v) = hit {
        return Ok(v);
    }
    let v = std::rc::Rc::new(compute()?);
    MEMO.with(|cell| {
        let mut memo = cell.borrow_mut();
        if memo.len() >= MEMO_ENTRIES {
            memo.pop_front();
        }
        memo.push_back((text.to_owned(), key, v.clone()));
    });
    Ok(v)
}

/// Number of sessions this backend holds (for tests and tributary_info).
pub fn session_count() -> usize {
    SESSIONS.with(|cell| cell.borrow().len())
}
