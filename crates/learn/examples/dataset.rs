//! Train and score a tributary-learn predictor on a dataset exported as JSON, outside PostgreSQL:
//! for trying the learner's changes quickly on the benchmarks' data (no k-NN features: the
//! export has no embeddings).
//!
//!     .venv/bin/python benches/learn.py chinook --export /tmp/chinook.json
//!     cargo run -p tributary-learn --release --example dataset -- /tmp/chinook.json [auto|gbdt|logistic]
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
    let args: Vec<String> = std::env::args().collect();
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
    let algorithm = match args.get(2).map(String::as_str) {
        Some("gbdt") => Algorithm::Gbdt,
        Some("logistic") => Algorithm::Logistic,
        _ => Algorithm::Auto,
    };
    let opts = TrainOptions {
        algorithm,
        threads: 2,
        ..Default::default()
    };
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
