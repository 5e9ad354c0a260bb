//! A standard export (sentence-transformers / Optimum layout: int64 inputs with
//! `token_type_ids`, token embeddings out, pooling and normalisation in the engine) against
//! tributary's own export of the same checkpoint, on the real ONNX Runtime library. Both
//! directories are prepared by scripts/setup.sh: `ort/models/all-MiniLM-L6-v2` and
//! `ort/models/all-MiniLM-L6-v2-st` (written by `export_model.py --layout sentence-transformers`).

use std::path::{Path, PathBuf};

use tributary_engine::interface::{InputRole, IntType};
use tributary_engine::model::runtime;
use tributary_engine::{
    Embedder, EmbedderConfig, Embeddings, Layout, ModelSpec, Pooling, ProviderChoice,
};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// An embedder for the model directory `dir` as `tributary_register_model()` reads it.
fn embedder(dir: &Path) -> Embedder {
    let spec = ModelSpec::from_dir(dir, "fp32", None)
        .unwrap_or_else(|e| panic!("{}: {e} (run scripts/setup.sh first)", dir.display()));
    let mut c = EmbedderConfig::new(
        dir.join(&spec.graph),
        dir.join(&spec.tokenizer),
        spec.max_length,
        spec.dimension,
    );
    c.provider = ProviderChoice::Cpu;
    c.intra_op_threads = 1;
    if spec.layout == Layout::SentenceTransformers {
        c.pooling = Pooling::parse(&spec.pooling);
        c.normalize = spec.normalize;
    }
    let rt = runtime(&root().join("ort/lib/libonnxruntime.so.1.31.1")).unwrap();
    Embedder::new(rt, c).unwrap()
}

fn texts() -> Vec<String> {
    // Mixed lengths, from empty to past the 256-token window.
    (0..60)
        .map(|i| {
            format!("sentence {i} about databases. ") + &"more words here ".repeat((i * 7) % 90)
        })
        .collect()
}

fn min_cosine(a: &Embeddings, b: &Embeddings) -> f32 {
    (0..a.rows())
        .map(|i| {
            let (x, y) = (a.row_f32(i), b.row_f32(i));
            let dot: f32 = x.iter().zip(y.iter()).map(|(p, q)| p * q).sum();
            let norm = |v: &[f32]| v.iter().map(|p| p * p).sum::<f32>().sqrt();
            dot / (norm(&x) * norm(&y))
        })
        .fold(f32::MAX, f32::min)
}

#[test]
fn standard_export_matches_tributarys_export() {
    let st_dir = root().join("ort/models/all-MiniLM-L6-v2-st");
    let spec = ModelSpec::from_dir(&st_dir, "fp32", None).unwrap();
    assert_eq!(spec.layout, Layout::SentenceTransformers);
    assert_eq!((spec.dimension, spec.max_length), (384, 256));
    assert_eq!(spec.pooling, "mean");
    assert!(spec.normalize);

    let mut st = embedder(&st_dir);
    let mut native = embedder(&root().join("ort/models/all-MiniLM-L6-v2"));
    // The interface is read from the graph: int64 inputs, token_type_ids, pooled here.
    let iface = st.interface().clone();
    assert!(iface.inputs.iter().all(|(_, _, ty)| *ty == IntType::I64));
    assert!(iface.has(InputRole::TypeIds));
    assert_eq!(iface.pooling, Some(Pooling::Mean));
    assert!(!st.io_binding(), "plain runs for standard exports");
    assert!(!st.f16_output());
    assert!(native.interface().is_native());

    let texts = texts();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let a = st.embed(&refs, 2048, &mut |_| {}).unwrap();
    let b = native.embed(&refs, 2048, &mut |_| {}).unwrap();
    assert!(a.batches > 1);
    let cos = min_cosine(&a, &b);
    assert!(
        cos >= 0.9999,
        "standard vs tributary export: min cosine {cos}"
    );
    // Unit norm, as the Normalize module asks.
    for i in 0..a.rows() {
        let n: f32 = a.row_f32(i).iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((n - 1.0).abs() < 1e-4, "row {i} norm {n}");
    }
    // The same texts are reported truncated by both.
    assert_eq!(a.truncated, b.truncated);
    assert!(!a.truncated.is_empty());
}

#[test]
fn truncation_is_reported_and_a_prompt_counts_in_the_window() {
    let mut e = embedder(&root().join("ort/models/all-MiniLM-L6-v2"));
    // 254 words + [CLS] [SEP] fill the window exactly.
    let full = "word ".repeat(254);
    let texts = ["short", full.as_str(), &"word ".repeat(400)];
    let plain = e.embed(&texts, 2048, &mut |_| {}).unwrap();
    assert_eq!(plain.truncated, vec![2]);
    // "query: " adds tokens: the full text no longer fits.
    let prompted = e
        .embed_prompted(&texts, "query: ", 2048, &mut |_| {})
        .unwrap();
    assert_eq!(prompted.truncated, vec![1, 2]);
    assert_eq!(e.stats().truncated, 3);
    // The prompt is put before the text: the same vector as writing it out.
    let written = e.embed(&["query: short"], 2048, &mut |_| {}).unwrap();
    let cos = min_cosine(
        &written,
        &e.embed_prompted(&["short"], "query: ", 2048, &mut |_| {})
            .unwrap(),
    );
    assert!(cos > 0.99999, "{cos}");
}
