//! Engine-only measurements of tributary's inference engine, outside PostgreSQL: the same code as
//! the extension (the `tributary-engine` crate, crates/engine), driven from a command line.
//!
//! ```text
//! tributary-bench check --ort LIB --model-dir DIR --texts FILE [--rows N] [--provider cuda]
//!     [--graph fp32|fp16] [--cuda-library-path DIR:DIR] [--label TEXT] [--csv FILE]
//!     Embeds N texts with the fp32 graph on the CPU provider (the reference) and with the
//!     requested provider (fp16 graph when the model directory has one and the provider is not
//!     cpu, as the extension does on a GPU), and prints the per-row cosine between them: min,
//!     mean, and how many are < 0.999 (exit status 3 if any). `--csv` appends one line:
//!     label,provider,graph,io_binding,rows,tokens,min_cosine,mean_cosine,rows_below_0.999
//! tributary-bench sweep --ort LIB --model-dir DIR --texts FILE --provider P [--graph fp32|fp16]
//!     [--batches 1,8,32,128,512,1024] [--rows N] [--budget TOKENS] [--io-binding on|off]
//!     [--buckets on|off|always]  (on: on a GPU only) [--warm on|off]  (warm every bucket shape first)
//!     [--fixed-tokens K] [--threads N] [--warmup CALLS] [--label TEXT] [--csv FILE]
//!     For each batch size (texts per embed() call, as one SQL call passes them): warm-up calls
//!     of that size, then calls over at least `--rows` texts (3 calls at least); prints a Markdown
//!     row per batch size with rows/s, tokens/s (real tokens, special tokens included), the
//!     padding fraction, and mean and median ms per call. `--fixed-tokens K` replaces the texts
//!     with 4096 synthetic ones of K tokens each (special tokens included), to sweep input length.
//!     `--csv` appends one line per batch size:
//!     label,provider,graph,io_binding,batch,fixed_tokens,rows,rows_per_s,tokens_per_s,padding_pct,ms_per_call,ms_median_call
//! tributary-bench embed --ort LIB --model-dir DIR --texts FILE [--chunk 1024] [--budget 2048]
//!     [--threads N] [--provider P] [--graph fp32|fp16|int8]
//!     Embeds every text of FILE once, `--chunk` texts per embed() call (as tributary_embed_column
//!     passes a fetched batch of rows), after one warm-up call; prints one JSON line: rows,
//!     tokens, padded_tokens, seconds, rows_per_s, tokens_per_s. The engine-only baseline for the
//!     same texts a SQL benchmark embeds.
//! ```
//! Times are wall-clock over the whole calls (tokenization, padding, host/device copies, the model
//! run and copying results out), measured with `Instant`, after warm-up calls of the same size.
//! Every call's first output row is checked to be a unit vector, so a run that silently returns
//! zeros is an error rather than a fast number.
//!
//! The model directory is what `ort/scripts/export_model.py` writes: `tributary.json` (read as the
//! extension reads it, [`tributary_engine::Manifest`]: `dimension`, `max_length`, the graphs
//! `files.fp32` / `files.fp16` / `files.int8` and `files.tokenizer`, `tokenizer.json` when absent)
//! and those files.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use tributary_engine::{
    self as engine, Embedder, EmbedderConfig, Embeddings, Layout, ModelSpec, Pooling,
    ProviderChoice, ShapeBuckets,
};

/// What the benchmark needs from a model directory's `tributary.json`, as paths.
struct ModelInfo {
    /// Embedding dimension (`[rows, dimension]` output).
    dimension: usize,
    /// Truncation length in tokens.
    max_length: usize,
    fp32: PathBuf,
    /// The fp16 graph, when the export wrote one.
    fp16: Option<PathBuf>,
    /// The dynamically quantized int8 graph, when the export wrote one.
    int8: Option<PathBuf>,
    tokenizer: PathBuf,
    /// Pooling done by the engine (standard exports); `None`: inside the graph.
    pooling: Option<Pooling>,
    normalize: bool,
}

/// Reads the model directory in either layout (`tributary.json`, or a standard
/// sentence-transformers export pooled by the engine) as `tributary_register_model()` does; no
/// fp32 graph is an error.
fn read_model_info(dir: &Path) -> ModelInfo {
    let spec = ModelSpec::from_dir(dir, "fp32", None).unwrap_or_else(|e| die(&e.to_string()));
    let graph = |precision: &str| {
        ModelSpec::from_dir(dir, precision, None)
            .ok()
            .map(|s| dir.join(s.graph))
    };
    ModelInfo {
        dimension: spec.dimension,
        max_length: spec.max_length,
        fp32: dir.join(&spec.graph),
        fp16: graph("fp16"),
        int8: graph("int8"),
        tokenizer: dir.join(&spec.tokenizer),
        pooling: (spec.layout == Layout::SentenceTransformers)
            .then(|| Pooling::parse(&spec.pooling))
            .flatten(),
        normalize: spec.normalize,
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = args.first().cloned() else {
        eprintln!("usage: tributary-bench check|sweep --ort LIB --model-dir DIR --texts FILE ...");
        std::process::exit(2);
    };
    let mut opts: HashMap<String, String> = HashMap::new();
    let mut it = args[1..].iter();
    while let Some(k) = it.next() {
        let v = it
            .next()
            .unwrap_or_else(|| die(&format!("{k} needs a value")));
        opts.insert(k.trim_start_matches("--").to_owned(), v.clone());
    }
    let get = |k: &str| {
        opts.get(k)
            .cloned()
            .unwrap_or_else(|| die(&format!("--{k} is required")))
    };
    let num = |k: &str, d: usize| {
        opts.get(k)
            .map(|v| {
                v.parse()
                    .unwrap_or_else(|_| die(&format!("--{k}: not a number")))
            })
            .unwrap_or(d)
    };
    let dirs: Vec<PathBuf> = opts
        .get("cuda-library-path")
        .map(|s| {
            s.split(':')
                .filter(|d| !d.is_empty())
                .map(PathBuf::from)
                .collect()
        })
        .unwrap_or_default();
    // Before ONNX Runtime is loaded, as the extension does: the CUDA provider resolves its
    // dependencies by soname against what is already in the process.
    let failed = engine::model::preload_libraries(&dirs);
    if !failed.is_empty() {
        eprintln!("preload: {failed}");
    }
    let rt = engine::model::runtime(Path::new(&get("ort")))
        .unwrap_or_else(|e| die(&format!("{e}: {e:?}")));
    eprintln!("onnx runtime {} from {}", rt.version, rt.library.display());
    let dir = PathBuf::from(get("model-dir"));
    let info = read_model_info(&dir);
    let provider = match opts.get("provider").map(String::as_str).unwrap_or("cpu") {
        "cpu" => ProviderChoice::Cpu,
        "cuda" => ProviderChoice::Cuda,
        "tensorrt" => ProviderChoice::TensorRt,
        "auto" => ProviderChoice::Auto,
        p => die(&format!("unknown provider {p}")),
    };
    let mut config = EmbedderConfig::new(
        info.fp32.clone(),
        info.tokenizer.clone(),
        info.max_length,
        info.dimension,
    );
    config.provider = provider;
    config.pooling = info.pooling;
    config.normalize = info.normalize;
    config.intra_op_threads = num("threads", 0);
    config.shape_buckets = match opts.get("buckets").map(String::as_str).unwrap_or("on") {
        "on" => ShapeBuckets::Gpu,
        "off" => ShapeBuckets::Off,
        "always" => ShapeBuckets::Always,
        b => die(&format!("--buckets {b}: on (GPU only), off or always")),
    };
    config.warm_shapes = match opts.get("warm").map(String::as_str).unwrap_or("on") {
        "on" => true,
        "off" => false,
        w => die(&format!("--warm {w}: on or off")),
    };
    config.io_binding = match opts.get("io-binding").map(String::as_str).unwrap_or("on") {
        "on" => true,
        "off" => false,
        v => die(&format!("--io-binding {v}: on or off")),
    };
    config.tensorrt_cache_dir = Some(std::env::temp_dir().join("tributary_tensorrt"));
    let graph = opts.get("graph").cloned().unwrap_or_else(|| {
        if provider == ProviderChoice::Cpu || info.fp16.is_none() {
            "fp32".into()
        } else {
            "fp16".into()
        }
    });
    match graph.as_str() {
        "fp32" => {}
        "int8" => {
            config.model_file = info.int8.clone().unwrap_or_else(|| {
                die(&format!(
                    "{}: no int8 graph in tributary.json",
                    dir.display()
                ))
            });
        }
        "fp16" => {
            let fp16 = info.fp16.clone().unwrap_or_else(|| {
                die(&format!(
                    "{}: no fp16 graph in tributary.json",
                    dir.display()
                ))
            });
            config.gpu_model_file = Some(fp16.clone());
            if provider == ProviderChoice::Cpu {
                config.model_file = fp16;
            }
        }
        g => die(&format!("--graph {g}: fp32, fp16 or int8")),
    }
    let fixed_tokens = opts.get("fixed-tokens").map(|k| {
        k.parse::<usize>()
            .unwrap_or_else(|_| die("--fixed-tokens: not a number"))
    });
    let texts = match fixed_tokens {
        Some(k) => synthetic_texts(k),
        None => load_texts(&get("texts")),
    };
    let csv = opts.get("csv").map(PathBuf::from);
    let label = opts.get("label").cloned().unwrap_or_default();
    match cmd.as_str() {
        "check" => check(
            rt,
            config,
            &info,
            &texts[..num("rows", 2000).min(texts.len())],
            &label,
            csv.as_deref(),
        ),
        "sweep" => {
            let batches: Vec<usize> = opts
                .get("batches")
                .map(|s| {
                    s.split(',')
                        .map(|b| {
                            b.trim()
                                .parse()
                                .unwrap_or_else(|_| die(&format!("--batches {s}")))
                        })
                        .collect()
                })
                .unwrap_or_else(|| vec![1, 8, 32, 128, 512, 1024]);
            let plan = Sweep {
                label,
                batches,
                rows: num("rows", 4096),
                budget: num("budget", 16384),
                warmup: num("warmup", 1),
                fixed_tokens,
                csv,
            };
            sweep(rt, config, &texts, &plan)
        }
        "embed" => embed_all(rt, config, &texts, num("chunk", 1024), num("budget", 2048)),
        c => die(&format!("unknown command {c}")),
    }
}

fn die(msg: &str) -> ! {
    eprintln!("tributary-bench: {msg}");
    std::process::exit(1)
}

/// One text per line (newlines inside a text written as `\n`); empty lines are skipped.
fn load_texts(file: &str) -> Vec<String> {
    let texts: Vec<String> = std::fs::read_to_string(file)
        .unwrap_or_else(|e| die(&format!("{file}: {e}")))
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.replace("\\n", "\n"))
        .collect();
    if texts.is_empty() {
        die(&format!("{file}: no texts"));
    }
    texts
}

/// 4096 synthetic texts of exactly `k` tokens with a BERT uncased tokenizer: `[CLS]`, `k - 2`
/// words that are one token each, `[SEP]` (truncated to the model's max length like any text).
fn synthetic_texts(k: usize) -> Vec<String> {
    const WORDS: [&str; 6] = ["data", "table", "index", "query", "vector", "row"];
    (0..4096)
        .map(|i| {
            (0..k.saturating_sub(2))
                .map(|j| WORDS[(i + j) % WORDS.len()])
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// Appends `line` to a CSV file, writing `header` first when the file is new or empty.
fn append_csv(path: &Path, header: &str, line: &str) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap_or_else(|e| die(&format!("{}: {e}", path.display())));
    let empty = f.metadata().map(|m| m.len() == 0).unwrap_or(true);
    let text = if empty {
        format!("{header}\n{line}\n")
    } else {
        format!("{line}\n")
    };
    f.write_all(text.as_bytes())
        .unwrap_or_else(|e| die(&format!("{}: {e}", path.display())));
}

/// A CSV field: quoted when it holds a comma, quote or newline.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

/// `fp16` when the session loaded the model's fp16 graph, else `fp32`.
fn graph_name(e: &Embedder, info: &ModelInfo) -> &'static str {
    if info.fp16.as_deref() == Some(e.loaded_file()) {
        "fp16"
    } else {
        "fp32"
    }
}

/// Creates a session; a provider that cannot be used ends the program with ONNX Runtime's reason.
fn session(rt: &'static engine::Runtime, config: EmbedderConfig, what: &str) -> Embedder {
    Embedder::new(rt, config).unwrap_or_else(|e| match &e {
        engine::Error::Provider { reason, .. }
        | engine::Error::Ort(reason)
        | engine::Error::OrtLibrary { reason, .. } => {
            die(&format!("{what} session: {e}: {reason}"))
        }
        _ => die(&format!("{what} session: {e}: {e:?}")),
    })
}

fn describe(e: &Embedder, info: &ModelInfo) -> String {
    let mut s = format!(
        "provider {}, graph {} ({}), output {}, io binding {}",
        e.provider().as_str(),
        graph_name(e, info),
        e.loaded_file().display(),
        if e.f16_output() { "float16" } else { "float32" },
        e.io_binding()
    );
    for note in [e.provider_note(), e.io_binding_note()] {
        if !note.is_empty() {
            s.push_str("; ");
            s.push_str(note);
        }
    }
    s
}

fn check(
    rt: &'static engine::Runtime,
    config: EmbedderConfig,
    info: &ModelInfo,
    texts: &[String],
    label: &str,
    csv: Option<&Path>,
) {
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let mut cpu_cfg = config.clone();
    cpu_cfg.provider = ProviderChoice::Cpu;
    cpu_cfg.gpu_model_file = None;
    cpu_cfg.model_file = info.fp32.clone();
    let mut cpu = session(rt, cpu_cfg, "cpu reference");
    let mut dev = session(rt, config, "device");
    println!("reference session: {}", describe(&cpu, info));
    println!("device session: {}", describe(&dev, info));
    let a = cpu
        .embed(&refs, 2048, &mut |_| {})
        .unwrap_or_else(|e| die(&format!("cpu embed: {e}: {e:?}")));
    let b = dev
        .embed(&refs, 16384, &mut |_| {})
        .unwrap_or_else(|e| die(&format!("device embed: {e}: {e:?}")));
    let cos: Vec<f32> = (0..a.rows())
        .map(|i| {
            let (x, y) = (a.row_f32(i), b.row_f32(i));
            let dot: f32 = x.iter().zip(y.iter()).map(|(p, q)| p * q).sum();
            let nx: f32 = x.iter().map(|p| p * p).sum::<f32>().sqrt();
            let ny: f32 = y.iter().map(|p| p * p).sum::<f32>().sqrt();
            // A zero vector has no direction: count it as a failed row (cosine 0), not NaN.
            if nx == 0.0 || ny == 0.0 {
                0.0
            } else {
                dot / (nx * ny)
            }
        })
        .collect();
    let min = cos.iter().copied().fold(f32::MAX, f32::min);
    let mean = cos.iter().sum::<f32>() / cos.len().max(1) as f32;
    let below = cos.iter().filter(|&&c| c < 0.999 || c.is_nan()).count();
    println!(
        "check: {} rows, {} tokens; {} {} vs cpu fp32: min cosine {min:.6}, mean {mean:.6}, rows below 0.999: {below}",
        a.rows(),
        a.tokens,
        dev.provider().as_str(),
        graph_name(&dev, info)
    );
    if let Some(path) = csv {
        let line = format!(
            "{},{},{},{},{},{},{min:.6},{mean:.6},{below}",
            csv_field(label),
            dev.provider().as_str(),
            graph_name(&dev, info),
            dev.io_binding(),
            a.rows(),
            a.tokens
        );
        append_csv(
            path,
            "label,provider,graph,io_binding,rows,tokens,min_cosine,mean_cosine,rows_below_0.999",
            &line,
        );
    }
    if below > 0 {
        std::process::exit(3);
    }
}

/// What `sweep` measures.
struct Sweep {
    label: String,
    /// Texts per `embed()` call.
    batches: Vec<usize>,
    /// Texts per batch size to time (at least 3 calls).
    rows: usize,
    /// `max_batch_tokens` passed to `embed()`: padded tokens per ORT run.
    budget: usize,
    /// Untimed calls of each size before timing.
    warmup: usize,
    fixed_tokens: Option<usize>,
    csv: Option<PathBuf>,
}

/// One pass over all `texts`, `chunk` per call with `budget` padded tokens per ONNX Runtime run;
/// one warm-up call on the first chunk first. Prints a JSON line (rows, tokens, seconds, rates).
fn embed_all(
    rt: &'static engine::Runtime,
    config: EmbedderConfig,
    texts: &[String],
    chunk: usize,
    budget: usize,
) {
    let mut e = session(rt, config, "embed");
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let chunk = chunk.max(1);
    assert_unit(
        &e.embed(&refs[..chunk.min(refs.len())], budget, &mut |_| {})
            .unwrap_or_else(|err| die(&format!("warm-up: {err}"))),
    );
    let (mut rows, mut tokens, mut padded) = (0usize, 0usize, 0usize);
    let started = Instant::now();
    for part in refs.chunks(chunk) {
        let out = e
            .embed(part, budget, &mut |_| {})
            .unwrap_or_else(|err| die(&format!("embed: {err}")));
        assert_unit(&out);
        rows += out.rows();
        tokens += out.tokens;
        padded += out.padded_tokens;
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{}",
        serde_json::json!({
            "rows": rows, "tokens": tokens, "padded_tokens": padded, "seconds": secs,
            "rows_per_s": rows as f64 / secs, "tokens_per_s": tokens as f64 / secs,
            "chunk": chunk, "budget": budget, "provider": e.provider().as_str(),
        })
    );
}

/// Fails unless row 0 of `out` is a unit vector (the graph L2-normalises every row).
fn assert_unit(out: &Embeddings) {
    let norm: f32 = out.row_f32(0).iter().map(|x| x * x).sum::<f32>().sqrt();
    if !(0.98..=1.02).contains(&norm) {
        die(&format!(
            "row 0 has L2 norm {norm}, expected 1: the model returned garbage; not timing it"
        ));
    }
}

fn sweep(rt: &'static engine::Runtime, config: EmbedderConfig, texts: &[String], plan: &Sweep) {
    let model_dir = config
        .model_file
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let info = read_model_info(&model_dir);
    let mut e = session(rt, config, "sweep");
    eprintln!("session: {}", describe(&e, &info));
    let desc = format!(
        "{} {} io_binding={} buckets={}",
        e.provider().as_str(),
        graph_name(&e, &info),
        e.io_binding(),
        format!("{:?}", e.config().shape_buckets).to_lowercase()
    );
    let input = match plan.fixed_tokens {
        Some(k) => format!("{k} tokens"),
        None => "texts".to_owned(),
    };
    println!("| label | session | input | batch | rows | rows/s | tokens/s | tokens/row | padding | ms/call | median ms/call |");
    println!("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    for &b in &plan.batches {
        let b = b.clamp(1, refs.len());
        let calls = plan.rows.div_ceil(b).max(3);
        // Warm-up: calls of this size (kernel selection, arena growth for these shapes).
        for w in 0..plan.warmup.max(1) {
            let start = (w * b) % refs.len().saturating_sub(b).max(1);
            let out = e
                .embed(&refs[start..start + b], plan.budget, &mut |_| {})
                .unwrap_or_else(|err| die(&format!("embed: {err}: {err:?}")));
            assert_unit(&out);
        }
        let (mut n, mut tokens, mut padded) = (0usize, 0usize, 0usize);
        let mut per_call = Vec::with_capacity(calls);
        let started = Instant::now();
        for c in 0..calls {
            let start = (c * b) % refs.len().saturating_sub(b).max(1);
            let chunk = &refs[start..(start + b).min(refs.len())];
            let t = Instant::now();
            let out = e
                .embed(chunk, plan.budget, &mut |_| {})
                .unwrap_or_else(|err| die(&format!("embed: {err}: {err:?}")));
            per_call.push(t.elapsed().as_secs_f64());
            assert_unit(&out);
            n += out.rows();
            tokens += out.tokens;
            padded += out.padded_tokens;
        }
        let secs = started.elapsed().as_secs_f64();
        per_call.sort_by(f64::total_cmp);
        let median_ms = 1e3 * per_call[per_call.len() / 2];
        let (rows_s, tokens_s) = (n as f64 / secs, tokens as f64 / secs);
        let padding = 100.0 * padded.saturating_sub(tokens) as f64 / padded.max(1) as f64;
        let ms_call = 1e3 * secs / calls as f64;
        println!(
            "| {} | {desc} | {input} | {b} | {n} | {rows_s:.0} | {tokens_s:.0} | {:.1} | {padding:.1}% | {ms_call:.2} | {median_ms:.2} |",
            plan.label,
            tokens as f64 / n.max(1) as f64
        );
        // Distinct [rows, tokens] shapes the session has run (warm-ups included): on a GPU each
        // new one has a one-time cost.
        eprintln!(
            "{}: {} input shapes so far, {:.0} ms warming shapes",
            plan.label,
            e.stats().shapes,
            e.stats().warm_up_time.as_secs_f64() * 1e3
        );
        if let Some(path) = &plan.csv {
            let line = format!(
                "{},{},{},{},{b},{},{n},{rows_s:.1},{tokens_s:.1},{padding:.2},{ms_call:.3},{median_ms:.3}",
                csv_field(&plan.label),
                e.provider().as_str(),
                graph_name(&e, &info),
                e.io_binding(),
                plan.fixed_tokens.map(|k| k.to_string()).unwrap_or_default()
            );
            append_csv(
                path,
                "label,provider,graph,io_binding,batch,fixed_tokens,rows,rows_per_s,tokens_per_s,padding_pct,ms_per_call,ms_median_call",
                &line,
            );
        }
    }
}
