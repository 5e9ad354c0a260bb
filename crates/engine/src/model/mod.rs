//! The ONNX Runtime sessions that embed texts: one [`Embedder`] is an ORT session plus its
//! tokenizer. The PostgreSQL side keeps one per backend and model (created on first use, never
//! in the postmaster) and reuses it.
//!
//! By concern:
//! - `config`: what a session is asked for ([`EmbedderConfig`], [`ProviderChoice`]) and what it
//!   reports ([`Provider`], [`Stats`]);
//! - `create`: creating a session (execution providers, prepared CPU graphs, IoBinding);
//! - `run`: embedding texts over length-sorted, token-budget batches, pipelined with
//!   tokenization;
//! - here: the [`Embedder`] itself and what it tells about itself.
//!
//! The tests on the real model stay here: they use the private items of `run` (window planning,
//! run overhead).

use std::path::{Path, PathBuf};

use ort::session::{RunOptions, Session};

use super::binding::Bound;
use super::interface::Interface;
use super::tokenize::TextTokenizer;

mod config;
mod create;
mod run;
pub use run::Step;

pub use super::embeddings::{Embeddings, Values};
pub use super::runtime::{preload_libraries, runtime, Runtime};
pub use config::{EmbedderConfig, Provider, ProviderChoice, RunThread, ShapeBuckets, Stats};

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
    /// The `[rows, tokens]` input shapes run so far (their count is [`Stats::shapes`]).
    shapes: std::collections::HashSet<(usize, usize)>,
    /// The token budgets whose shapes were warmed (`warm_shapes`).
    warmed: std::collections::HashSet<usize>,
    /// The one thread every ONNX Runtime run of this session runs on (`run_thread`), or `None`:
    /// the calling thread's.
    run_thread: Option<rayon::ThreadPool>,
    /// The OS threads the runs happened on (their count is [`Stats::run_threads`]).
    threads: std::collections::HashSet<std::thread::ThreadId>,
}

impl Embedder {
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

    /// Adds the time a caller spent reading the rows it embedded with this session (`read`)
    /// and writing their vectors (`write`) to [`Stats::read_time`] and [`Stats::write_time`],
    /// so that `tributary.sessions` shows a call's whole split.
    pub fn add_io_time(&mut self, read: std::time::Duration, write: std::time::Duration) {
        self.stats.read_time += read;
        self.stats.write_time += write;
    }

    pub fn config(&self) -> &EmbedderConfig {
        &self.config
    }

    pub fn tokenizer(&self) -> &TextTokenizer {
        &self.tokenizer
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
    use ort::ep::ExecutionProvider;

    use super::run::{MAX_ROWS_PER_RUN, WINDOW_BATCHES};
    use super::*;
    use crate::batch;
    use crate::error::Error;

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
        let a = bound.embed(&refs, 2048, &mut |_| {}).unwrap();
        let b = plain.embed(&refs, 2048, &mut |_| {}).unwrap();
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

    /// Shape buckets (forced on the CPU here; on by default on a GPU only) pad rows and batches
    /// to few shapes and give the same vectors, in input order, bound or not.
    #[test]
    fn shape_buckets_give_the_same_vectors_in_fewer_shapes() {
        let texts = corpus();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let mut exact = embedder(256);
        assert_eq!(exact.config().shape_buckets, ShapeBuckets::Gpu);
        let a = exact.embed(&refs, 2048, &mut |_| {}).unwrap();
        for io_binding in [true, false] {
            let mut cfg = config(256);
            cfg.shape_buckets = ShapeBuckets::Always;
            cfg.warm_shapes = false;
            cfg.io_binding = io_binding;
            let mut bucketed = Embedder::new(rt(), cfg).unwrap();
            let b = bucketed.embed(&refs, 2048, &mut |_| {}).unwrap();
            let cos = min_cosine(&a, &b);
            assert!(cos > 0.99999, "bucketed vs exact min cosine {cos}");
            assert_eq!(a.tokens, b.tokens, "the same real tokens");
            assert!(b.padded_tokens > a.padded_tokens, "buckets pad more");
            assert_eq!(bucketed.stats().rows, 120, "extra rows are not counted");
            assert!(
                bucketed.stats().shapes < exact.stats().shapes,
                "{} shapes bucketed, {} exact",
                bucketed.stats().shapes,
                exact.stats().shapes
            );
        }
    }

    /// Warming runs every shape of a budget once, before the first batch at that budget: the
    /// batches then meet no new shape, and a second call warms nothing.
    #[test]
    fn warmed_shapes_cover_every_batch_of_the_budget() {
        let texts = corpus();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let mut cfg = config(32);
        cfg.shape_buckets = ShapeBuckets::Always;
        assert!(cfg.warm_shapes, "on by default");
        let mut e = Embedder::new(rt(), cfg).unwrap();
        let a = e.embed(&refs, 256, &mut |_| {}).unwrap();
        let all = batch::bucket_shapes(32, 256, MAX_ROWS_PER_RUN).len() as u64;
        assert_eq!(e.stats().shapes, all, "warmed every shape, met no other");
        let warm = e.stats().warm_up_time;
        assert!(warm > std::time::Duration::ZERO);
        e.embed(&refs, 256, &mut |_| {}).unwrap();
        assert_eq!(e.stats().shapes, all);
        assert_eq!(e.stats().warm_up_time, warm, "warmed once per budget");
        e.embed(&refs[..4], 512, &mut |_| {}).unwrap();
        assert!(e.stats().warm_up_time > warm, "a new budget is warmed");
        // The dummy runs leave the vectors as they were.
        let b = embedder(32).embed(&refs, 256, &mut |_| {}).unwrap();
        let cos = min_cosine(&a, &b);
        assert!(cos > 0.99999, "warmed + bucketed vs exact min cosine {cos}");
    }

    /// A session with a run thread of its own runs every ONNX Runtime run there, whichever
    /// thread calls it (as tributary_embed_column's pipeline does, one thread per call); with the
    /// caller's thread, runs follow the callers. Same vectors either way.
    #[test]
    fn a_run_thread_of_its_own_runs_every_call_whatever_the_caller() {
        let texts = corpus();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let mut results = Vec::new();
        for mode in [RunThread::Own, RunThread::Caller] {
            let mut cfg = config(256);
            cfg.run_thread = mode;
            let mut e = Embedder::new(rt(), cfg).unwrap();
            let a = e.embed(&refs, 2048, &mut |_| {}).unwrap();
            let b = std::thread::scope(|s| {
                s.spawn(|| e.embed(&refs, 2048, &mut |_| {}).unwrap())
                    .join()
                    .unwrap()
            });
            assert!(min_cosine(&a, &b) > 0.99999);
            results.push((e.stats().run_threads, a));
        }
        assert_eq!(results[0].0, 1, "own thread: one thread for both callers");
        assert_eq!(results[1].0, 2, "caller's thread: one per caller");
        assert!(min_cosine(&results[0].1, &results[1].1) > 0.99999);
        assert_eq!(
            config(256).run_thread,
            RunThread::OwnOnGpu,
            "the default: own thread on a GPU"
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
        let piped = e.embed(&refs, 256, &mut |_| calls += 1).unwrap();
        // The callback runs before every ORT run, and once while each window (under 1,024 texts)
        // is planned.
        assert_eq!(calls, piped.batches + windows.len());
        // One window, cut by padding against run cost only: another batching of the same texts.
        let whole = e.embed(&refs, 1 << 22, &mut |_| {}).unwrap();
        assert!(
            whole.batches < piped.batches,
            "{} vs {}",
            whole.batches,
            piped.batches
        );
        let cos = min_cosine(&piped, &whole);
        assert!(cos > 0.99999, "pipelined vs one batch min cosine {cos}");
        for i in [0, 17, 119] {
            let one = e.embed(&refs[i..=i], 1 << 20, &mut |_| {}).unwrap();
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
        let h = half.embed(&refs, 2048, &mut |_| {}).unwrap();
        assert!(h.is_f16());
        let f = embedder(256).embed(&refs, 2048, &mut |_| {}).unwrap();
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
        let whole = e.embed(&texts, 1 << 20, &mut |_| calls += 1).unwrap();
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
        let small = e.embed(&texts, 1, &mut |_| {}).unwrap();
        assert_eq!(
            small.batches, 5,
            "a budget below every row runs each row alone"
        );
        assert_eq!(
            small.padded_tokens, small.tokens,
            "no padding when rows run alone"
        );
        for i in 0..texts.len() {
            let one = e.embed(&texts[i..=i], 1 << 20, &mut |_| {}).unwrap();
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
        let a = plain.embed(&refs, 512, &mut |_| {}).unwrap();
        let b = shared.embed(&refs, 512, &mut |_| {}).unwrap();
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
