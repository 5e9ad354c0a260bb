//! Train and score a tributary-learn predictor on a dataset exported as JSON, outside PostgreSQL:
//! for trying the learner's changes quickly on the benchmarks' data (the export has no
//! embeddings: k-NN features only with `--embed`).
//!
//!     .venv/bin/python benches/learn.py chinook --export /tmp/chinook.json
//!     cargo run -p tributary-learn --release --example dataset -- /tmp/chinook.json [auto|gbdt|logistic]
//!         [--repeat N] [--embed DIM] [--slices N]
//!
//! `--repeat N` makes N copies of every row (same time, label, text, numbers, categories and
//! path groups, so an entity's history grows with the copies, as `benches/predict_speed.py`
//! scales films), for the training time and memory at scale. `--embed DIM` gives each row an
//! embedding: the normalised sum of a fixed pseudo-random DIM-vector per word of its text (rows
//! sharing words are near; copies are identical), for the k-NN search's time and recall.
//! `--slices N` sets `TrainOptions::validation_slices` (the forward slices `auto` compares on).
//!
//! JSON: `as_of` [n] f64, `label` [n] string|null, `role` [n] "train"|"test", `text` [n] string,
//! `paths` {name: [[row, group], ...]}, `numbers` {name: [n] f64|null},
//! `categories` {name: [n] string|null}. Prints the report rows train returns, and to stderr the
//! seconds spent in each stage of the training (from its progress reports).

use std::sync::Mutex;
use std::time::Instant;
use tributary_learn::*;

/// The stage being reported and when it began; each stage's seconds go to stderr as it ends.
struct Ctl(Mutex<Option<(String, Instant)>>);
impl Ctl {
    fn end(&self) {
        if let Some((stage, t)) = self.0.lock().unwrap().take() {
            eprintln!("{:>8.2} s  {stage}", t.elapsed().as_secs_f64());
        }
    }
}
impl Control for Ctl {
    fn check(&self) -> Result<(), Error> {
        Ok(())
    }
    fn progress(&self, stage: &str, _done: u64, _total: u64) {
        if self
            .0
            .lock()
            .unwrap()
            .as_ref()
            .is_some_and(|s| s.0 == stage)
        {
            return;
        }
        self.end();
        *self.0.lock().unwrap() = Some((stage.to_string(), Instant::now()));
    }
}

fn main() {
    let mut args: Vec<String> = std::env::args().collect();
    let mut flag = |name: &str| -> Option<usize> {
        let i = args.iter().position(|a| a == name)?;
        let v = args.get(i + 1)?.parse().ok();
        args.drain(i..(i + 2).min(args.len()));
        v
    };
    let repeat = flag("--repeat").unwrap_or(1).max(1);
    let embed_dim = flag("--embed").unwrap_or(0);
    let slices = flag("--slices");
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&args[1]).expect("read the JSON")).expect("JSON");
    let f64s = |x: &serde_json::Value| -> Vec<Option<f64>> {
        x.as_array().unwrap().iter().map(|v| v.as_f64()).collect()
    };
    let strs = |x: &serde_json::Value| -> Vec<Option<String>> {
        x.as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().map(String::from))
            .collect()
    };
    let labels = strs(&v["label"]);
    let roles: Vec<Role> = v["role"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            if r == "train" {
                Role::Train
            } else {
                Role::Test
            }
        })
        .collect();
    let obj = |k: &str| v[k].as_object().cloned().unwrap_or_default();
    let paths = obj("paths")
        .iter()
        .map(|(name, pairs)| GroupPath {
            name: name.clone(),
            pairs: pairs
                .as_array()
                .unwrap()
                .iter()
                .map(|e| (e[0].as_u64().unwrap() as u32, e[1].as_u64().unwrap()))
                .collect(),
        })
        .collect();
    let ds = Dataset {
        as_of: Some(f64s(&v["as_of"]).into_iter().map(|x| x.unwrap()).collect()),
        label: Labels::Category(labels),
        text: Some(
            strs(&v["text"])
                .into_iter()
                .map(|s| s.unwrap_or_default())
                .collect(),
        ),
        embedding: None,
        paths,
        numbers: obj("numbers")
            .iter()
            .map(|(k, x)| (k.clone(), f64s(x)))
            .collect(),
        categories: obj("categories")
            .iter()
            .map(|(k, x)| (k.clone(), strs(x)))
            .collect(),
    };
    let (ds, roles) = scale(ds, roles, repeat, embed_dim);
    let algorithm = match args.get(2).map(String::as_str) {
        Some("gbdt") => Algorithm::Gbdt,
        Some("logistic") => Algorithm::Logistic,
        _ => Algorithm::Auto,
    };
    let mut opts = TrainOptions {
        algorithm,
        threads: 2,
        ..Default::default()
    };
    if let Some(s) = slices {
        opts.validation_slices = s;
    }
    let t0 = Instant::now();
    let ctl = Ctl(Mutex::new(None));
    let t = train(&ds, &roles, &opts, &ctl).expect("train");
    ctl.end();
    println!(
        "trained in {:.1} s: {} features, head {}, history {}",
        t0.elapsed().as_secs_f64(),
        t.feature_names.len(),
        t.model.algorithm(),
        t.model.history()
    );
    for m in &t.report {
        println!(
            "{:10} {:9} {:10} rows={:6} accuracy={:.4} macro_f1={:.4}",
            m.method,
            m.algorithm,
            m.split,
            m.rows,
            m.accuracy.unwrap_or(f64::NAN),
            m.macro_f1.unwrap_or(f64::NAN)
        );
    }
}

/// The dataset with `repeat` copies of every row (copy c of row i is row c * n + i) and, with
/// `dim` > 0, a bag-of-words embedding of each row's text (this file's header).
fn scale(ds: Dataset, roles: Vec<Role>, repeat: usize, dim: usize) -> (Dataset, Vec<Role>) {
    let n = roles.len();
    let rep = |v: &[Option<f64>]| -> Vec<Option<f64>> {
        (0..repeat).flat_map(|_| v.iter().copied()).collect()
    };
    let reps = |v: &[Option<String>]| -> Vec<Option<String>> {
        (0..repeat).flat_map(|_| v.iter().cloned()).collect()
    };
    let texts: Option<Vec<String>> = ds
        .text
        .as_ref()
        .map(|t| (0..repeat).flat_map(|_| t.iter().cloned()).collect());
    let embedding = (dim > 0).then(|| {
        let texts = texts.as_deref().unwrap_or(&[]);
        let mut data = vec![0f32; texts.len() * dim];
        for (r, t) in texts.iter().enumerate() {
            let row = &mut data[r * dim..(r + 1) * dim];
            for w in t
                .split(|c: char| !c.is_alphanumeric())
                .filter(|w| !w.is_empty())
            {
                // FNV-1a of the lower-cased word seeds a xorshift stream of the word's vector.
                let mut h: u64 = 0xcbf29ce484222325;
                for b in w.to_lowercase().bytes() {
                    h = (h ^ b as u64).wrapping_mul(0x100000001b3);
                }
                for x in row.iter_mut() {
                    h ^= h << 13;
                    h ^= h >> 7;
                    h ^= h << 17;
                    *x += (h >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
                }
            }
        }
        Embeddings {
            dim,
            present: texts.iter().map(|t| !t.is_empty()).collect(),
            data,
        }
    });
    let ds = Dataset {
        as_of: ds
            .as_of
            .map(|a| (0..repeat).flat_map(|_| a.iter().copied()).collect()),
        label: match ds.label {
            Labels::Category(v) => Labels::Category(reps(&v)),
            Labels::Number(v) => Labels::Number(rep(&v)),
        },
        text: texts,
        embedding,
        paths: ds
            .paths
            .into_iter()
            .map(|p| GroupPath {
                name: p.name,
                pairs: (0..repeat)
                    .flat_map(|c| p.pairs.iter().map(move |&(r, g)| ((c * n) as u32 + r, g)))
                    .collect(),
            })
            .collect(),
        numbers: ds.numbers.into_iter().map(|(k, v)| (k, rep(&v))).collect(),
        categories: ds
            .categories
            .into_iter()
            .map(|(k, v)| (k, reps(&v)))
            .collect(),
    };
    let roles = (0..repeat).flat_map(|_| roles.iter().copied()).collect();
    (ds, roles)
}
