//! The ONNX Runtime environment and sessions: library loading, execution providers, running a
//! model over length-sorted token-budget batches.
//!
//! One [`Embedder`] is an ORT session plus its tokenizer. The PostgreSQL side keeps one per
//! backend and model (created on first use, never in the postmaster) and reuses it.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use ort::ep::ExecutionProvider;
use ort::session::builder::GraphOptimizationLevel;
use ort::session::Session;
use ort::value::TensorRef;
use parking_lot::Mutex;

use super::batch;
use super::error::{Error, Result};
use super::tokenize::TextTokenizer;

/// The ONNX Runtime library this process loaded: where from and its version.
#[derive(Debug, Clone)]
pub struct Runtime {
    pub library: PathBuf,
    /// e.g. `1.31.1`, read from the library's build info.
    pub version: String,
    environment: ort::environment::Environment,
}

static RUNTIME: OnceLock<Runtime> = OnceLock::new();
static RUNTIME_INIT: Mutex<()> = Mutex::new(());

/// Loads the ONNX Runtime shared library at `library` once per process and returns it.
///
/// A process can hold only one ONNX Runtime: a later call naming another path is an
/// [`Error::OrtLibraryChanged`]. A missing or wrong library is an [`Error::OrtLibrary`] and
/// leaves nothing loaded, so a corrected path can be tried again.
pub fn runtime(library: &Path) -> Result<&'static Runtime> {
    if let Some(rt) = RUNTIME.get() {
        return check_same(rt, library);
    }
    let _guard = RUNTIME_INIT.lock();
    if let Some(rt) = RUNTIME.get() {
        return check_same(rt, library);
    }
    if !library.is_file() {
        return Err(Error::OrtLibrary { path: library.to_owned(), reason: "no such file".into() });
    }
    let builder = ort::init_from(library)
        .map_err(|e| Error::OrtLibrary { path: library.to_owned(), reason: e.to_string() })?;
    let environment = builder.with_name("tributary").build()?;
    let version = library_version(library).unwrap_or_else(|| ort_version(ort::info()));
    Ok(RUNTIME.get_or_init(|| Runtime { library: library.to_owned(), version, environment }))
}

fn check_same(rt: &'static Runtime, library: &Path) -> Result<&'static Runtime> {
    if rt.library == library {
        Ok(rt)
    } else {
        Err(Error::OrtLibraryChanged { loaded: rt.library.clone(), requested: library.to_owned() })
    }
}

/// The library's own version string (`OrtGetApiBase()->GetVersionString()`, e.g. `1.31.1`).
/// Opening the already-loaded library again only bumps its reference count.
fn library_version(library: &Path) -> Option<String> {
    // SAFETY: OrtGetApiBase has this signature in every ONNX Runtime release (onnxruntime_c_api.h)
    // and returns a static struct; GetVersionString returns a static NUL-terminated string.
    unsafe {
        let lib = libloading::Library::new(library).ok()?;
        let get: libloading::Symbol<unsafe extern "C" fn() -> *const ort::sys::OrtApiBase> = lib.get(b"OrtGetApiBase").ok()?;
        let base = get();
        if base.is_null() {
            return None;
        }
        let v = ((*base).GetVersionString)();
        (!v.is_null()).then(|| std::ffi::CStr::from_ptr(v).to_string_lossy().into_owned())
    }
}

/// Fallback: pulls `1.31.1` out of ORT's build info (`... git-branch=rel-1.31.1, ...`).
fn ort_version(info: &str) -> String {
    info.split([',', ' '])
        .find_map(|part| part.strip_prefix("git-branch=rel-"))
        .map(str::to_owned)
        .unwrap_or_else(|| info.to_owned())
}

/// Which execution provider to ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProviderChoice {
    /// CUDA when it loads, else CPU; the reason for falling back is kept in [`Embedder::provider_note`].
    Auto,
    Cpu,
    Cuda,
}

/// What a session needs: files, shapes and threads.
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
}

/// `[rows, dimension]` f32 embeddings in input order, row-major, plus what it cost.
#[derive(Debug, Clone, Default)]
pub struct Embeddings {
    pub dimension: usize,
    pub data: Vec<f32>,
    /// Real (non-padding) tokens fed to the model.
    pub tokens: usize,
    /// Tokens including padding (rows * padded width, summed over batches).
    pub padded_tokens: usize,
    pub batches: usize,
}

impl Embeddings {
    /// Row `i` as a `[dimension]` slice.
    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.dimension..(i + 1) * self.dimension]
    }

    pub fn rows(&self) -> usize {
        self.data.len().checked_div(self.dimension).unwrap_or(0)
    }
}

/// An ONNX Runtime session for one embedding model with its tokenizer.
///
/// The model takes `input_ids`, `attention_mask` as `[batch, seq] int32` and returns
/// `[batch, dimension] f32` (pooling and L2 normalisation are inside the graph; see
/// `ort/scripts/export_model.py`).
pub struct Embedder {
    session: Session,
    tokenizer: TextTokenizer,
    config: EmbedderConfig,
    provider: &'static str,
    provider_note: String,
    // Reused across batches so that steady-state runs allocate nothing for inputs.
    ids: Vec<i32>,
    mask: Vec<i32>,
}

impl Embedder {
    /// Creates the session and tokenizer in the loaded [`runtime`].
    ///
    /// Errors: [`Error::ModelFile`] for a missing ONNX or tokenizer file, [`Error::Provider`]
    /// when `Cuda` was asked for and cannot be used, [`Error::Ort`] when ORT rejects the model.
    pub fn new(runtime: &Runtime, config: EmbedderConfig) -> Result<Self> {
        if !config.model_file.is_file() {
            return Err(Error::ModelFile { path: config.model_file.clone(), reason: "no such file".into() });
        }
        let tokenizer = TextTokenizer::from_file(&config.tokenizer_file, config.max_length)?;
        let (session, provider, provider_note) = match config.provider {
            ProviderChoice::Cpu => (Self::session(runtime, &config, false)?, "cpu", String::new()),
            ProviderChoice::Cuda => match Self::session(runtime, &config, true) {
                Ok(s) => (s, "cuda", String::new()),
                Err(e) => return Err(Error::Provider { provider: "cuda", reason: e.to_string() }),
            },
            ProviderChoice::Auto => match Self::session(runtime, &config, true) {
                Ok(s) => (s, "cuda", String::new()),
                Err(e) => (Self::session(runtime, &config, false)?, "cpu", format!("cuda unavailable: {e}")),
            },
        };
        Ok(Embedder { session, tokenizer, config, provider, provider_note, ids: Vec::new(), mask: Vec::new() })
    }

    fn session(runtime: &Runtime, config: &EmbedderConfig, cuda: bool) -> Result<Session> {
        let mut builder = Session::builder(&runtime.environment)?
            .with_optimization_level(GraphOptimizationLevel::Level3)?
            .with_inter_threads(1)?;
        if config.intra_op_threads > 0 {
            builder = builder.with_intra_threads(config.intra_op_threads)?;
        }
        if cuda {
            if !ort::ep::CUDA::is_available()? {
                return Err(Error::Ort("this ONNX Runtime library was built without the CUDA execution provider".into()));
            }
            ort::ep::CUDA::default().with_device_id(config.gpu_device).register(&mut builder)?;
        }
        Ok(builder.commit_from_file(&config.model_file)?)
    }

    /// Embeds `texts`: tokenize (truncating to `max_length`), sort by length, cut batches of at
    /// most `max_batch_tokens` padded tokens, run each, and return `[texts.len(), dimension]`
    /// in input order.
    ///
    /// `between_batches` runs on the calling thread before every ORT run; the PostgreSQL side
    /// checks for interrupts there, so a cancel stops the work within one batch.
    pub fn embed(
        &mut self,
        texts: &[&str],
        max_batch_tokens: usize,
        between_batches: &mut dyn FnMut(),
    ) -> Result<Embeddings> {
        let dim = self.config.dimension;
        let tokens = self.tokenizer.encode(texts)?;
        let lengths: Vec<usize> = tokens.iter().map(|t| t.ids.len()).collect();
        let (order, batches) = batch::plan(&lengths, max_batch_tokens, 0);
        let mut out = Embeddings { dimension: dim, data: vec![0.0; texts.len() * dim], ..Default::default() };
        let pad = self.tokenizer.pad_id();
        for b in &batches {
            between_batches();
            let rows = &order[b.range.clone()];
            let (n, seq) = (rows.len(), b.seq_len);
            self.ids.clear();
            self.mask.clear();
            for &i in rows {
                let ids = &tokens[i].ids;
                self.ids.extend_from_slice(ids);
                self.ids.extend(std::iter::repeat_n(pad, seq - ids.len()));
                self.mask.extend(std::iter::repeat_n(1, ids.len()));
                self.mask.extend(std::iter::repeat_n(0, seq - ids.len()));
                out.tokens += ids.len();
            }
            out.padded_tokens += n * seq;
            out.batches += 1;
            let shape = [n as i64, seq as i64];
            let ids = TensorRef::from_array_view((shape, &self.ids[..]))?;
            let mask = TensorRef::from_array_view((shape, &self.mask[..]))?;
            let outputs = self.session.run(ort::inputs![ids, mask])?;
            let (out_shape, values) = outputs[0].try_extract_tensor::<f32>()?;
            if values.len() != n * dim {
                return Err(Error::ModelMismatch(format!(
                    "expected [{n}, {dim}] from the model, got {:?}",
                    &**out_shape
                )));
            }
            for (k, &i) in rows.iter().enumerate() {
                out.data[i * dim..(i + 1) * dim].copy_from_slice(&values[k * dim..(k + 1) * dim]);
            }
        }
        Ok(out)
    }

    /// The execution provider this session runs on: `cpu` or `cuda`.
    pub fn provider(&self) -> &'static str {
        self.provider
    }

    /// Why `auto` fell back to CPU, or empty.
    pub fn provider_note(&self) -> &str {
        &self.provider_note
    }

    pub fn config(&self) -> &EmbedderConfig {
        &self.config
    }

    pub fn tokenizer(&self) -> &TextTokenizer {
        &self.tokenizer
    }
}

#[cfg(test)]
mod tests {
    use super::ort_version;

    #[test]
    fn version_from_build_info() {
        let info = "ORT Build Info: git-branch=rel-1.31.1, git-commit-id=abc, build type=Release";
        assert_eq!(ort_version(info), "1.31.1");
        assert_eq!(ort_version("something else"), "something else");
    }
}

/// Engine tests on the real ONNX Runtime library and the real default model, as prepared by
/// scripts/setup.sh in this checkout (ort/lib, ort/models).
#[cfg(test)]
mod real_model_tests {
    use super::*;

    fn embedder(max_length: usize) -> Embedder {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let rt = runtime(&root.join("ort/lib/libonnxruntime.so.1.31.1")).expect("run scripts/setup.sh first");
        let dir = root.join("ort/models/all-MiniLM-L6-v2");
        Embedder::new(
            rt,
            EmbedderConfig {
                model_file: dir.join("model.onnx"),
                tokenizer_file: dir.join("tokenizer.json"),
                max_length,
                dimension: 384,
                provider: ProviderChoice::Cpu,
                intra_op_threads: 1,
                gpu_device: 0,
            },
        )
        .unwrap()
    }

    #[test]
    fn results_come_back_in_input_order_whatever_the_batching() {
        let mut e = embedder(256);
        let long = "tokens ".repeat(400);
        let texts = ["short", long.as_str(), "", "a medium length sentence about databases", "x y z"];
        let mut calls = 0;
        let whole = e.embed(&texts, 1 << 20, &mut || calls += 1).unwrap();
        assert_eq!(calls, 1, "one ORT run when everything fits the budget");
        assert_eq!((whole.rows(), whole.dimension), (5, 384));
        assert_eq!(whole.tokens, whole.padded_tokens.min(whole.tokens));
        let mut calls = 0;
        let small = e.embed(&texts, 1, &mut || calls += 1).unwrap();
        assert_eq!(calls, 5, "a budget below every row runs each row alone");
        assert_eq!(small.padded_tokens, small.tokens, "no padding when rows run alone");
        for i in 0..texts.len() {
            let one = e.embed(&texts[i..=i], 1 << 20, &mut || {}).unwrap();
            for (a, b) in [(whole.row(i), one.row(0)), (small.row(i), one.row(0))] {
                let cos: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
                assert!(cos > 0.99999, "text {i}: cosine {cos}");
            }
        }
    }

    #[test]
    fn truncates_to_max_length() {
        let e = embedder(16);
        let toks = e.tokenizer().encode(&["one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen"]).unwrap();
        assert_eq!(toks[0].ids.len(), 16);
        assert_eq!(e.tokenizer().encode(&[""]).unwrap()[0].ids.len(), 2, "[CLS] [SEP]");
    }

    #[test]
    fn missing_model_file_is_a_model_file_error() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let rt = runtime(&root.join("ort/lib/libonnxruntime.so.1.31.1")).unwrap();
        let cfg = EmbedderConfig {
            model_file: "/nonexistent/model.onnx".into(),
            tokenizer_file: "/nonexistent/tokenizer.json".into(),
            max_length: 8,
            dimension: 384,
            provider: ProviderChoice::Cpu,
            intra_op_threads: 1,
            gpu_device: 0,
        };
        assert!(matches!(Embedder::new(rt, cfg), Err(Error::ModelFile { .. })));
    }
}
