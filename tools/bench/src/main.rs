//! Engine-only measurements of tributary's inference engine, outside PostgreSQL: the same code as
//! the extension (`src/engine`, included by path), driven from a command line.
//!
//! ```text
//! tributary-bench check --ort LIB --model-dir DIR --texts FILE [--rows N] [--provider cuda]
//!     Embeds N texts with the fp32 graph on the CPU provider (the reference) and with the
//!     requested provider (fp16 graph when the model directory has one, as the extension does on
//!     a GPU), and prints the per-row cosine between them: min, mean, and how many are < 0.999.
//! tributary-bench sweep --ort LIB --model-dir DIR --texts FILE --provider P [--graph fp32|fp16]
//!     [--batches 1,8,32,128,512,1024] [--rows N] [--budget TOKENS] [--io-binding on|off]
//!     [--fixed-tokens K] [--threads N] [--label TEXT]
//!     For each batch size (texts per embed() call, as one SQL call passes them): one warm-up call,
//!     then calls over at least `--rows` texts; prints a Markdown row per batch size with rows/s,
//!     tokens/s (real tokens) and the padding fraction. `--fixed-tokens K` replaces the texts
//!     with synthetic ones of K tokens each (special tokens included), to sweep input length.
//! ```
//! Times are wall-clock over the whole calls (tokenization, padding, host/device copies, the model
//! run and copying results out), measured with `Instant`, after a warm-up call of the same size.

#[path = "../../../src/engine/mod.rs"]
#[allow(dead_code, unused_imports)]
mod engine;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use engine::{Embedder, EmbedderConfig, ProviderChoice};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = args.first().cloned() else {
        eprintln!("usage: tributary-bench check|sweep --ort LIB --model-dir DIR --texts FILE ...");
        std::process::exit(2);
    };
    let mut opts: HashMap<String, String> = HashMap::new();
    let mut it = args[1..].iter();
    while let Some(k) = it.next() {
        let v = it.next().unwrap_or_else(|| die(&format!("{k} needs a value")));
        opts.insert(k.trim_start_matches("--").to_owned(), v.clone());
    }
    let get = |k: &str| opts.get(k).cloned().unwrap_or_else(|| die(&format!("--{k} is required")));
    let num = |k: &str, d: usize| opts.get(k).map(|v| v.parse().unwrap_or_else(|_| die(&format!("--{k}: not a number")))).unwrap_or(d);
    let rt = engine::model::runtime(Path::new(&get("ort"))).unwrap_or_else(|e| die(&format!("{e}: {e:?}")));
    let dirs: Vec<PathBuf> = opts.get("cuda-library-path").map(|s| s.split(':').map(PathBuf::from).collect()).unwrap_or_default();
    let failed = engine::model::preload_libraries(&dirs);
    if !failed.is_empty() {
        eprintln!("preload: {failed}");
    }
    let dir = PathBuf::from(get("model-dir"));
    let meta = std::fs::read_to_string(dir.join("tributary.json")).unwrap_or_else(|e| die(&format!("tributary.json: {e}")));
    let field = |name: &str| -> usize {
        let i = meta.find(&format!("\"{name}\"")).unwrap_or_else(|| die(&format!("tributary.json has no {name}")));
        meta[i..].split(':').nth(1).unwrap().trim().trim_end_matches([',', '\n']).split([',', '\n']).next().unwrap().trim().parse().unwrap()
    };
    let (dim, max_length) = (field("dimension"), field("max_length"));
    let provider = match opts.get("provider").map(String::as_str).unwrap_or("cpu") {
        "cpu" => ProviderChoice::Cpu,
        "cuda" => ProviderChoice::Cuda,
        "tensorrt" => ProviderChoice::TensorRt,
        "auto" => ProviderChoice::Auto,
        p => die(&format!("unknown provider {p}")),
    };
    let mut config = EmbedderConfig::new(dir.join("model.onnx"), dir.join("tokenizer.json"), max_length, dim);
    config.provider = provider;
    config.intra_op_threads = num("threads", 0);
    config.io_binding = opts.get("io-binding").map(|v| v != "off").unwrap_or(true);
    config.tensorrt_cache_dir = Some(std::env::temp_dir().join("tributary_tensorrt"));
    let graph = opts.get("graph").cloned().unwrap_or_else(|| if provider == ProviderChoice::Cpu { "fp32".into() } else { "fp16".into() });
    if graph == "fp16" {
        config.gpu_model_file = Some(dir.join("model_fp16.onnx"));
        if provider == ProviderChoice::Cpu {
            config.model_file = dir.join("model_fp16.onnx");
        }
    }
    let texts = load_texts(&opts, &get("texts"));
    match cmd.as_str() {
        "check" => check(rt, config, &texts[..num("rows", 2000).min(texts.len())]),
        "sweep" => sweep(rt, config, &texts, &opts, num("rows", 4096), num("budget", 16384)),
        c => die(&format!("unknown command {c}")),
    }
}

fn die(msg: &str) -> ! {
    eprintln!("tributary-bench: {msg}");
    std::process::exit(1)
}

/// One text per line (newlines inside a text written as `\n`), or `--fixed-tokens K` synthetic
/// texts of exactly K tokens with this tokenizer (`[CLS]`, K-2 words, `[SEP]`).
fn load_texts(opts: &HashMap<String, String>, file: &str) -> Vec<String> {
    if let Some(k) = opts.get("fixed-tokens") {
        let k: usize = k.parse().unwrap();
        return (0..4096).map(|i| (0..k.saturating_sub(2)).map(|j| ["data", "table", "index", "query", "vector", "row"][(i + j) % 6]).collect::<Vec<_>>().join(" ")).collect();
    }
    std::fs::read_to_string(file)
        .unwrap_or_else(|e| die(&format!("{file}: {e}")))
        .lines()
        .map(|l| l.replace("\\n", "\n"))
        .collect()
}

fn check(rt: &'static engine::Runtime, config: EmbedderConfig, texts: &[String]) {
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let mut cpu_cfg = config.clone();
    cpu_cfg.provider = ProviderChoice::Cpu;
    cpu_cfg.gpu_model_file = None;
    cpu_cfg.model_file = config.model_file.with_file_name("model.onnx");
    let mut cpu = Embedder::new(rt, cpu_cfg).unwrap_or_else(|e| die(&format!("cpu session: {e}: {e:?}")));
    let mut dev = Embedder::new(rt, config).unwrap_or_else(|e| die(&format!("session: {e}: {e:?}")));
    println!(
        "device session: provider {}, graph {}, output {}, io binding {} {}",
        dev.provider().as_str(),
        dev.loaded_file().display(),
        if dev.f16_output() { "float16" } else { "float32" },
        dev.io_binding(),
        dev.io_binding_note()
    );
    let a = cpu.embed(&refs, 2048, &mut || {}).unwrap();
    let b = dev.embed(&refs, 16384, &mut || {}).unwrap();
    let cos: Vec<f32> = (0..a.rows())
        .map(|i| {
            let (x, y) = (a.row_f32(i), b.row_f32(i));
            let dot: f32 = x.iter().zip(y.iter()).map(|(p, q)| p * q).sum();
            let nx: f32 = x.iter().map(|p| p * p).sum::<f32>().sqrt();
            let ny: f32 = y.iter().map(|p| p * p).sum::<f32>().sqrt();
            dot / (nx * ny)
        })
        .collect();
    let min = cos.iter().copied().fold(f32::MAX, f32::min);
    let mean = cos.iter().sum::<f32>() / cos.len() as f32;
    let below = cos.iter().filter(|&&c| c < 0.999).count();
    println!("check: {} rows, {} tokens; cosine vs CPU fp32: min {min:.6}, mean {mean:.6}, rows below 0.999: {below}", a.rows(), a.tokens);
    if below > 0 {
        std::process::exit(3);
    }
}

fn sweep(rt: &'static engine::Runtime, config: EmbedderConfig, texts: &[String], opts: &HashMap<String, String>, rows: usize, budget: usize) {
    let label = opts.get("label").cloned().unwrap_or_default();
    let batches: Vec<usize> = opts
        .get("batches")
        .map(|s| s.split(',').map(|b| b.parse().unwrap()).collect())
        .unwrap_or_else(|| vec![1, 8, 32, 128, 512, 1024]);
    let mut e = Embedder::new(rt, config).unwrap_or_else(|e| die(&format!("session: {e}: {e:?}")));
    let desc = format!(
        "{} {} io_binding={}",
        e.provider().as_str(),
        e.loaded_file().file_name().unwrap().to_string_lossy(),
        e.io_binding()
    );
    for &b in &batches {
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let calls = rows.div_ceil(b).max(3);
        // Warm-up: one call of this size (kernel selection, arena growth for these shapes).
        e.embed(&refs[..b.min(refs.len())], budget, &mut || {}).unwrap();
        let (mut n, mut tokens, mut padded) = (0usize, 0usize, 0usize);
        let started = Instant::now();
        for c in 0..calls {
            let start = (c * b) % refs.len().saturating_sub(b).max(1);
            let chunk = &refs[start..(start + b).min(refs.len())];
            let out = e.embed(chunk, budget, &mut || {}).unwrap();
            n += out.rows();
            tokens += out.tokens;
            padded += out.padded_tokens;
        }
        let secs = started.elapsed().as_secs_f64();
        println!(
            "| {label} | {desc} | {b} | {n} | {:.0} | {:.0} | {:.1}% | {:.2} |",
            n as f64 / secs,
            tokens as f64 / secs,
            100.0 * (padded - tokens) as f64 / padded.max(1) as f64,
            1e3 * secs / calls as f64
        );
    }
}
