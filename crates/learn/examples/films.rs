//! Quality check on the films of bokeh-sampledata (see export_films.py): genre from text and
//! people's history, trained on films before 2010, scored on 2010 and later.
//!
//!     python3 crates/learn/examples/export_films.py /tmp/films.json
//!     cargo run -p tributary-learn --release --example films -- /tmp/films.json [auto|gbdt|logistic]

use std::time::Instant;
use tributary_learn::*;

struct Ctl(Instant);
impl Control for Ctl {
    fn check(&self) -> Result<(), Error> {
        Ok(())
    }
    fn progress(&self, stage: &str, done: u64, total: u64) {
        eprintln!(
            "[{:6.1}s] {stage} {done}/{total}",
            self.0.elapsed().as_secs_f64()
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&args[1]).expect("read")).expect("json");
    let f64s = |x: &serde_json::Value| -> Vec<Option<f64>> {
        x.as_array().unwrap().iter().map(|v| v.as_f64()).collect()
    };
    let labels: Vec<Option<String>> = v["label"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().map(String::from))
        .collect();
    let n = labels.len();
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
    let paths = ["director", "writer", "cast"]
        .iter()
        .map(|p| GroupPath {
            name: p.to_string(),
            pairs: v["paths"][p]
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
            v["text"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_str().unwrap().to_string())
                .collect(),
        ),
        embedding: None,
        paths,
        numbers: ["runtime", "metacritic", "year"]
            .iter()
            .map(|c| (c.to_string(), f64s(&v["numbers"][c])))
            .collect(),
        categories: vec![],
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
    let t = train(&ds, &roles, &opts, &Ctl(t0)).expect("train");
    eprintln!(
        "trained in {:.1}s: {} features, head {}",
        t0.elapsed().as_secs_f64(),
        t.feature_names.len(),
        t.model.algorithm()
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
    let bytes = t.model.to_bytes();
    let m2 = Model::from_bytes(&bytes).expect("from_bytes");
    let targets: Vec<u32> = (0..n as u32)
        .filter(|&i| roles[i as usize] == Role::Test)
        .take(3)
        .collect();
    for p in predict(&m2, &ds, &targets, &Ctl(t0)).expect("predict") {
        println!(
            "{:?} {:?} history={:?} top={:?}",
            p.label, p.confidence, p.history, p.top_features
        );
    }
    println!("model bytes: {}", bytes.len());
}
