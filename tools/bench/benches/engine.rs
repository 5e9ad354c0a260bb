//! Criterion benchmark of tributary's inference engine (the `tributary-engine` crate, no
//! PostgreSQL): rows/s and tokens/s of `Embedder::embed` over real, mixed-length Debian package
//! descriptions, swept over the engine's chunk size, the input length and the texts per call.
//!
//! ```text
//! cargo bench -p tributary-bench --bench engine                  # all groups
//! cargo bench -p tributary-bench --bench engine -- chunk_size    # one group
//! ```
//!
//! # Inputs
//!
//! * `TRIBUTARY_ORT`: the ONNX Runtime shared library (default `ort/lib/libonnxruntime.so.1.31.1`
//!   in the repository).
//! * `TRIBUTARY_MODEL_DIR`: a model directory with `tributary.json` (its `files.fp32`,
//!   `files.tokenizer` or `tokenizer.json`, `dimension` and `max_length` are used, read as the
//!   extension reads them; default `ort/models/all-MiniLM-L6-v2`).
//! * `TRIBUTARY_TEXTS`: real texts, one per line, a newline inside a text written as the two
//!   characters `\n` (default `target/debian_texts.txt`). Made once, in about 5 s,
//!   from the apt lists `scripts/debian_data.py` caches (see /work/shared/DATA.md), by this step,
//!   run from the repository root (1024 descriptions, a deterministic sample by name hash, in
//!   package-name order; 424 characters on average, median 357, longest 5109):
//!
//!   ```text
//!   mkdir -p target && python3 -c '
//!   import sys; sys.path.insert(0, "scripts"); import debian_data as d
//!   p, _ = d.load_index(d.CACHE)
//!   with open(sys.argv[1], "w") as f:
//!       for n in sorted(d.sample(p, 1024)): f.write(p[n][5].replace("\n", "\\n") + "\n")
//!   ' target/debian_texts.txt
//!   ```
//! * `TRIBUTARY_BENCH_ROWS`: rows embedded per timed iteration (default 128: the first 128 texts
//!   of the file), see "Run time" below.
//! * `TRIBUTARY_PROVIDER`: `cpu` (default), `cuda`, `tensorrt` or `auto`, as `tributary.provider`.
//!
//! # Engine settings
//!
//! `EmbedderConfig::new` defaults, except the provider (CPU unless `TRIBUTARY_PROVIDER` says
//! otherwise): fp32 graph, IoBinding on, `intra_op_threads = 0`, which leaves ONNX Runtime's
//! intra-op pool at its own default of one thread per physical core (2 on the 2-vCPU machine
//! these numbers were first taken on, 1 thread per core there), inter-op threads 1. Tokenization
//! runs inside `embed()` on a second thread, pipelined with the model, spreading over the HF
//! tokenizers rayon pool (one thread per logical CPU unless `RAYON_NUM_THREADS` says otherwise).
//!
//! # Groups (criterion ids `<group>/<function>/<parameter>`)
//!
//! Each timed iteration is whole `embed()` call(s): tokenization, length sorting, batching,
//! padding, the ONNX Runtime runs and scattering `[rows, dimension]` f32 results back into input
//! order. Loading the texts and creating the session are not timed. Criterion's throughput is
//! `Throughput::Elements(rows per iteration)`, so its reports are in rows/s ("elem/s").
//!
//! 1. `chunk_size/chunk/<max_batch_tokens>`: one `embed()` of the same `ROWS` mixed-length texts
//!    with a chunk size (most padded tokens per ORT run, `tributary.max_batch_tokens`) of 512,
//!    1024, 2048, 4096, 8192 and 16384.
//! 2. `input_length/len/<mixed|16|64|128|256>`: one `embed()` of `ROWS` texts at chunk size 2048
//!    (the default): the real mixed-length texts, or synthetic texts of exactly K tokens each
//!    (`[CLS]`, K-2 single-token English words, `[SEP]`; checked with the model's tokenizer).
//! 3. `batch_rows/rows/<texts per call>`: the same real texts passed in `embed()` calls of 1, 8,
//!    32, 128 and 512 texts (as one SQL call passes them), chunk size 2048. An iteration embeds
//!    `max(ROWS, texts per call)` rows (the first texts of the file, in file order), so the
//!    512 point covers more, and longer-tailed, text than the others.
//!
//! Tokens per iteration do not change between iterations (same inputs, same plan); they are
//! taken from the `Embeddings` the iterations return and written next to criterion's results
//! in `<criterion dir>/tributary_tokens.json` as `{"<group>/<function>/<parameter>": {"rows",
//! "tokens", "padded_tokens", "batches"}}` (`tokens`: real tokens after truncation to
//! `max_length`, `[CLS]`/`[SEP]` included; `padded_tokens`: rows x padded width summed over ORT
//! runs). tokens/s = tokens / (criterion's mean time per iteration). At the end a table of rows/s
//! and tokens/s per point is printed from criterion's `new/estimates.json` (mean).
//! `<criterion dir>` is criterion's: `$CRITERION_HOME`, else `$CARGO_TARGET_DIR/criterion`, else
//! `target/criterion` in the repository (the workspace's target directory).
//!
//! # Run time
//!
//! Criterion needs at least 10 samples; iterations here take seconds, so every point runs in flat
//! sampling mode with 10 samples of one iteration each, after a warm-up of at least one iteration
//! (criterion's warm-up: new shapes grow ORT's arena there): 16 points x at least 11 iterations,
//! about 2.7 million real tokens with the default 128 rows. At the 5,500 to 10,000 tokens/s that
//! 2 CPU cores give, that is 5 to 9 minutes, longer than the 4 minutes aimed at (not measured on
//! a quiet machine: the one full run so far, sharing its 2 cores with other jobs, took 16.7
//! minutes). `batch_rows/rows/512` (always 512 rows) and `input_length/len/256` are the longest
//! points. 128 rows (about 12,700 tokens) is kept as the default because it is the least that
//! keeps the chunk sweep meaningful (at 64 rows every chunk from 8192 up covers the whole call);
//! `TRIBUTARY_BENCH_ROWS=64` roughly halves the first two groups, 512 (the size the issue had in
//! mind) makes them about 4x longer.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, SamplingMode, Throughput};
use tributary_engine::{self as engine, Embedder, EmbedderConfig, Manifest, ProviderChoice};

/// The default chunk size (`tributary.max_batch_tokens`), in padded tokens per ORT run.
const DEFAULT_CHUNK: usize = 2048;
const CHUNKS: [usize; 6] = [512, 1024, 2048, 4096, 8192, 16384];
const LENGTHS: [usize; 4] = [16, 64, 128, 256];
const CALL_ROWS: [usize; 5] = [1, 8, 32, 128, 512];

fn repo() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

fn env_path(var: &str, default: &str) -> PathBuf {
    std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(default))
}

fn die(msg: &str) -> ! {
    eprintln!("benches/engine: {msg}");
    std::process::exit(1)
}

/// What one point embeds per iteration, from the `Embeddings` of its `embed()` calls.
#[derive(Clone, Copy, Debug)]
struct Cost {
    rows: usize,
    tokens: usize,
    padded_tokens: usize,
    batches: usize,
}

struct Bench {
    embedder: Embedder,
    /// Real texts, in file order.
    texts: Vec<String>,
    /// Rows per timed iteration.
    rows: usize,
    /// `"<group>/<function>/<parameter>"` -> cost per iteration, in run order.
    costs: Vec<(String, Cost)>,
}

impl Bench {
    fn load() -> Bench {
        let ort_lib = env_path("TRIBUTARY_ORT", "ort/lib/libonnxruntime.so.1.31.1");
        let model_dir = env_path("TRIBUTARY_MODEL_DIR", "ort/models/all-MiniLM-L6-v2");
        let texts_file = env_path("TRIBUTARY_TEXTS", "target/debian_texts.txt");
        let rows: usize = std::env::var("TRIBUTARY_BENCH_ROWS")
            .map(|v| {
                v.parse()
                    .unwrap_or_else(|_| die("TRIBUTARY_BENCH_ROWS: not a number"))
            })
            .unwrap_or(128);
        if rows == 0 {
            die("TRIBUTARY_BENCH_ROWS must be at least 1");
        }

        let raw = std::fs::read_to_string(&texts_file).unwrap_or_else(|e| {
            die(&format!(
                "cannot read the texts file {} ({e}).\nSet TRIBUTARY_TEXTS to a file of texts, one per line (newlines as \\n), or make the \
                 default one from the Debian descriptions with the step in the doc comment at the top of tools/bench/benches/engine.rs.",
                texts_file.display()
            ))
        });
        let texts: Vec<String> = raw
            .lines()
            .filter(|l| !l.is_empty())
            .map(|l| l.replace("\\n", "\n"))
            .collect();
        let need = rows.max(CALL_ROWS[CALL_ROWS.len() - 1]);
        if texts.len() < need {
            die(&format!(
                "{} has {} texts; the benchmark needs at least {need}",
                texts_file.display(),
                texts.len()
            ));
        }

        let meta = Manifest::from_dir(&model_dir).unwrap_or_else(|e| {
            die(&format!(
                "{e} (set TRIBUTARY_MODEL_DIR to a model directory)"
            ))
        });
        let fp32 = meta.graph("fp32").unwrap_or_else(|| {
            die(&format!(
                "{}: no fp32 graph in tributary.json",
                model_dir.display()
            ))
        });
        let mut config = EmbedderConfig::new(
            model_dir.join(fp32),
            model_dir.join(meta.tokenizer()),
            meta.max_length,
            meta.dimension,
        );
        config.provider = match std::env::var("TRIBUTARY_PROVIDER")
            .as_deref()
            .unwrap_or("cpu")
        {
            "cpu" => ProviderChoice::Cpu,
            "cuda" => ProviderChoice::Cuda,
            "tensorrt" => ProviderChoice::TensorRt,
            "auto" => ProviderChoice::Auto,
            p => die(&format!(
                "TRIBUTARY_PROVIDER: unknown provider {p} (cpu, cuda, tensorrt, auto)"
            )),
        };

        let rt = engine::model::runtime(&ort_lib)
            .unwrap_or_else(|e| die(&format!("{e} (set TRIBUTARY_ORT to libonnxruntime.so; scripts/setup.sh installs one into ort/lib)")));
        let embedder = Embedder::new(rt, config).unwrap_or_else(|e| die(&format!("session: {e}")));
        println!(
            "engine bench: ONNX Runtime {} ({}), model {} on {}, intra-op threads {} (0 = ORT default, one per physical core), \
             {} texts from {}, {rows} rows per iteration",
            rt.version,
            ort_lib.display(),
            embedder.loaded_file().display(),
            embedder.provider().as_str(),
            embedder.config().intra_op_threads,
            texts.len(),
            texts_file.display(),
        );
        Bench {
            embedder,
            texts,
            rows,
            costs: Vec::new(),
        }
    }

    /// `n` synthetic texts of exactly `k` tokens each with this model's tokenizer (special
    /// tokens included), rows differing in their words; checked by tokenizing them.
    fn uniform(&self, n: usize, k: usize) -> Vec<String> {
        const WORDS: [&str; 12] = [
            "data", "table", "index", "query", "vector", "row", "model", "text", "search",
            "server", "file", "system",
        ];
        let tok = self.embedder.tokenizer();
        let words = k
            .checked_sub(tok.count_special())
            .unwrap_or_else(|| die(&format!("{k} tokens is fewer than the special tokens")));
        let texts: Vec<String> = (0..n)
            .map(|i| {
                (0..words)
                    .map(|j| WORDS[(i * 7 + j) % WORDS.len()])
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let encoded = tok
            .encode(&refs)
            .unwrap_or_else(|e| die(&format!("tokenizer: {e}")));
        if let Some(bad) = encoded.iter().find(|t| t.ids.len() != k) {
            die(&format!(
                "synthetic text tokenizes to {} tokens, not {k}",
                bad.ids.len()
            ));
        }
        texts
    }

    /// Embeds `texts` in calls of `per_call` texts at chunk size `chunk`; the timed unit.
    fn run(embedder: &mut Embedder, texts: &[&str], per_call: usize, chunk: usize) -> Cost {
        let mut cost = Cost {
            rows: 0,
            tokens: 0,
            padded_tokens: 0,
            batches: 0,
        };
        for call in texts.chunks(per_call) {
            let out = embedder
                .embed(call, chunk, &mut |_| {})
                .unwrap_or_else(|e| die(&format!("embed: {e}")));
            cost.rows += out.rows();
            cost.tokens += out.tokens;
            cost.padded_tokens += out.padded_tokens;
            cost.batches += out.batches;
            black_box(&out);
        }
        cost
    }

    /// One point, `<group>/<function>/<parameter>`: criterion's warm-up and measurement of
    /// [`Bench::run`], throughput in rows. The cost per iteration is taken from the iterations
    /// themselves (the same every time), so a point that criterion's filter skips costs nothing.
    #[allow(clippy::too_many_arguments)]
    fn point(
        &mut self,
        group: &mut BenchmarkGroup<'_, WallTime>,
        group_name: &str,
        function: &str,
        parameter: &str,
        texts: &[&str],
        per_call: usize,
        chunk: usize,
    ) {
        // Criterion wants the throughput before it runs; the rows are known without running.
        group.throughput(Throughput::Elements(texts.len() as u64));
        let embedder = &mut self.embedder;
        let mut seen: Option<Cost> = None;
        group.bench_function(BenchmarkId::new(function, parameter), |b| {
            b.iter(|| {
                let cost = Self::run(embedder, texts, per_call, chunk);
                seen = Some(cost);
                cost
            })
        });
        if let Some(cost) = seen {
            let key = format!("{group_name}/{function}/{parameter}");
            println!(
                "{key}: per iteration {} rows, {} tokens ({} padded, {:.1}% padding), {} ORT runs in {} embed() calls",
                cost.rows,
                cost.tokens,
                cost.padded_tokens,
                100.0 * (cost.padded_tokens - cost.tokens) as f64 / cost.padded_tokens.max(1) as f64,
                cost.batches,
                texts.len().div_ceil(per_call)
            );
            self.costs.push((key, cost));
        }
    }
}

fn new_group<'a>(c: &'a mut Criterion, name: &str) -> BenchmarkGroup<'a, WallTime> {
    let mut g = c.benchmark_group(name);
    g.sampling_mode(SamplingMode::Flat);
    g
}

fn chunk_size(c: &mut Criterion, b: &mut Bench) {
    let texts: Vec<String> = b.texts[..b.rows].to_vec();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let mut g = new_group(c, "chunk_size");
    for chunk in CHUNKS {
        b.point(
            &mut g,
            "chunk_size",
            "chunk",
            &chunk.to_string(),
            &refs,
            refs.len(),
            chunk,
        );
    }
    g.finish();
}

fn input_length(c: &mut Criterion, b: &mut Bench) {
    let mixed: Vec<String> = b.texts[..b.rows].to_vec();
    let mut sets = vec![("mixed".to_owned(), mixed)];
    for k in LENGTHS {
        sets.push((k.to_string(), b.uniform(b.rows, k)));
    }
    let mut g = new_group(c, "input_length");
    for (name, texts) in &sets {
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        b.point(
            &mut g,
            "input_length",
            "len",
            name,
            &refs,
            refs.len(),
            DEFAULT_CHUNK,
        );
    }
    g.finish();
}

fn batch_rows(c: &mut Criterion, b: &mut Bench) {
    let mut g = new_group(c, "batch_rows");
    for per_call in CALL_ROWS {
        let texts: Vec<String> = b.texts[..b.rows.max(per_call)].to_vec();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        b.point(
            &mut g,
            "batch_rows",
            "rows",
            &per_call.to_string(),
            &refs,
            per_call,
            DEFAULT_CHUNK,
        );
    }
    g.finish();
}

/// Criterion's output directory, found the way criterion finds it (without `cargo metadata`:
/// the workspace's target directory is the repository's `target/` unless `CARGO_TARGET_DIR`
/// moves it).
fn criterion_dir() -> PathBuf {
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        PathBuf::from(home)
    } else if let Some(target) = std::env::var_os("CARGO_TARGET_DIR") {
        PathBuf::from(target).join("criterion")
    } else {
        repo().join("target/criterion")
    }
}

/// Merges this run's token counts into `tributary_tokens.json` and prints rows/s and tokens/s per
/// point from criterion's mean time per iteration (points without results, e.g. under `--test`,
/// are left out of the table).
fn report(costs: &[(String, Cost)]) {
    let dir = criterion_dir();
    let file = dir.join("tributary_tokens.json");
    let mut all: BTreeMap<String, serde_json::Value> = std::fs::read_to_string(&file)
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or_default();
    for (key, c) in costs {
        all.insert(
            key.clone(),
            serde_json::json!({"rows": c.rows, "tokens": c.tokens, "padded_tokens": c.padded_tokens, "batches": c.batches}),
        );
    }
    if std::fs::create_dir_all(&dir)
        .and_then(|_| std::fs::write(&file, serde_json::to_string_pretty(&all).unwrap()))
        .is_err()
    {
        eprintln!("benches/engine: could not write {}", file.display());
    }
    // Under --test or --list criterion measured nothing: old estimates would be misleading.
    if std::env::args().any(|a| a == "--test" || a == "--list") {
        return;
    }
    let mut table = String::new();
    for (key, c) in costs {
        let est = dir.join(key).join("new/estimates.json");
        let Some(mean_ns) = std::fs::read_to_string(&est)
            .ok()
            .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
            .and_then(|v| v["mean"]["point_estimate"].as_f64())
        else {
            continue;
        };
        let secs = mean_ns * 1e-9;
        table += &format!(
            "| {key} | {} | {} | {:.1}% | {:.3} | {:.1} | {:.0} |\n",
            c.rows,
            c.tokens,
            100.0 * (c.padded_tokens - c.tokens) as f64 / c.padded_tokens.max(1) as f64,
            secs,
            c.rows as f64 / secs,
            c.tokens as f64 / secs
        );
    }
    if !table.is_empty() {
        println!("\n| point | rows/iter | tokens/iter | padding | mean s/iter | rows/s | tokens/s |\n|---|---|---|---|---|---|---|\n{table}");
    }
}

fn main() {
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(5))
        .nresamples(10_000)
        .without_plots()
        .configure_from_args();
    let mut b = Bench::load();
    chunk_size(&mut c, &mut b);
    input_length(&mut c, &mut b);
    batch_rows(&mut c, &mut b);
    c.final_summary();
    report(&b.costs);
}
