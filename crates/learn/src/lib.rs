//! Models that learn in the database (issue 35), without PostgreSQL: a predictor of a row's label
//! (a category or a number) from features computed here with strict AS-OF semantics.
//!
//! # Which labels a row's features may see
//! - In [`train`] only rows with [`Role::Train`] and a non-NULL label are *known*; Test rows are
//!   only scored, Predict/Ignore rows contribute nothing. In [`predict`] every row with a non-NULL
//!   label is known (a category the model was not trained on is not).
//! - With `as_of`, a row's features use known rows with a strictly smaller as_of (ties excluded);
//!   without it, all known rows but itself (leave-one-out).
//!
//! # Features (names in [`Model::feature_names`], `C` = classes)
//! 1. `knn@{k}:{class}` / `knn@{5k}:{class}` (weighted class shares of the k / 5k most cosine-
//!    similar known rows by `embedding`, weight = similarity floored at 1e-6), `knn:top_sim`,
//!    `knn:count`; for numbers `knn@{k}:mean`, `knn@{k}:std` and the same at 5k.
//! 2. `text:{class}` (or `text:value`): a sparse logistic (ridge) regression over word 1-2-gram
//!    TF-IDF of `text`. Training rows get forward-chained out-of-fold values (with as_of: 6 time
//!    blocks, block b scored by a model fit on known rows strictly earlier than the block, the
//!    first block missing; without as_of: 5 folds); other rows the model fit on all training rows
//!    (kept in the Model). The vocabulary and idf come from the training rows' text (no labels).
//! 3. `{path}:{class}` (share) and `{path}:count` (or `{path}:mean`, `{path}:count`): labels of
//!    the known rows sharing a group with the row through each [`GroupPath`], summed over its groups.
//! 4. the `numbers` as they are (NaN = NULL), each `categories` column as an integer code (vocabulary
//!    of the training rows, most frequent first; unknown or NULL = missing).
//!
//! The head is [`Algorithm::Gbdt`] (gradient-boosted trees, `gbdt.rs`) or [`Algorithm::Logistic`]
//! (multinomial logistic / ridge regression on standardised features and one-hot categories);
//! [`Algorithm::Auto`] fits both on the earlier training rows, scores them on the latest
//! `validation_fraction` of training rows by as_of, and refits the better one on all of them.

mod gbdt;
mod history;
mod knn;
mod linear;
mod par;
mod text;

use history::Y;
use linear::{Csr, Fit, Linear, Target};
use par::{polled, Shared};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt;

/// The label of every row (length n): a category or a number; `None` = NULL (unknown).
pub enum Labels {
    Category(Vec<Option<String>>),
    Number(Vec<Option<f64>>),
}

/// One embedding per row: `data` is n x `dim` f32 row-major; `present[i]` false = no embedding.
pub struct Embeddings {
    pub dim: usize,
    pub data: Vec<f32>,
    pub present: Vec<bool>,
}

/// A history path: rows sharing a group id are related through it. `pairs` = (row index, group
/// id); a row may be in many groups.
pub struct GroupPath {
    pub name: String,
    pub pairs: Vec<(u32, u64)>,
}

/// The rows of a table as loaded by the extension; every per-row vector has length n (the
/// label's length).
pub struct Dataset {
    /// Time of each row (dates as days since the epoch, integers as they are); `None` = no time,
    /// features are leave-one-out.
    pub as_of: Option<Vec<f64>>,
    pub label: Labels,
    /// Lexical text of each row ("" when none).
    pub text: Option<Vec<String>>,
    pub embedding: Option<Embeddings>,
    pub paths: Vec<GroupPath>,
    /// Typed numeric columns (own and parents'), NULL = None.
    pub numbers: Vec<(String, Vec<Option<f64>>)>,
    /// Low-cardinality category columns.
    pub categories: Vec<(String, Vec<Option<String>>)>,
}

/// What a row is for in [`train`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Role {
    Train,
    Test,
    Predict,
    Ignore,
}

/// The head fitted on the features.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Algorithm {
    Auto,
    Gbdt,
    Logistic,
}

/// Settings of [`train`].
#[derive(Clone, Debug)]
pub struct TrainOptions {
    pub algorithm: Algorithm,
    /// Neighbours of the k-NN vote (also 5k); default 10.
    pub k: usize,
    /// Worker threads at most (0 = 1); the calling thread only polls the [`Control`].
    pub threads: usize,
    /// Bytes the big allocations may take (estimated before allocating); 0 = no limit.
    pub max_memory_bytes: usize,
    /// Latest share of training rows (by as_of, else by row order) used to pick the head and the
    /// number of boosting rounds; default 0.2.
    pub validation_fraction: f64,
}

impl Default for TrainOptions {
    fn default() -> Self {
        TrainOptions {
            algorithm: Algorithm::Auto,
            k: 10,
            threads: 1,
            max_memory_bytes: 0,
            validation_fraction: 0.2,
        }
    }
}

/// The caller's hooks, called from the calling thread only: `check` at least every 0.2 s (an
/// error there, e.g. a query cancel, ends the call with that error within about a second).
pub trait Control {
    fn check(&self) -> Result<(), Error>;
    fn progress(&self, stage: &str, done: u64, total: u64);
}

/// One line of the training report.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricRow {
    /// "predictor" | "knn" | "baseline".
    pub method: String,
    /// "gbdt", "logistic", "knn", "majority", "mean".
    pub algorithm: String,
    /// "test" (Test rows) or "validation" (latest training rows, when there are no Test rows).
    pub split: String,
    pub rows: u64,
    pub accuracy: Option<f64>,
    /// Mean F1 over the classes present in the truth or the predictions of the split.
    pub macro_f1: Option<f64>,
    /// Mean absolute error (numbers).
    pub mae: Option<f64>,
}

/// What [`train`] returns.
pub struct Trained {
    pub model: Model,
    pub report: Vec<MetricRow>,
    pub feature_names: Vec<String>,
}

/// A prediction with its evidence.
#[derive(Clone, Debug, PartialEq)]
pub struct Prediction {
    /// The class, or the number as text.
    pub label: Option<String>,
    /// The number (number labels).
    pub value: Option<f64>,
    /// Probability of the class.
    pub confidence: Option<f64>,
    /// The k nearest known rows: (row index, cosine similarity), best first.
    pub neighbours: Vec<(u32, f64)>,
    /// Per path: the related known rows counted.
    pub history: Vec<(String, f64)>,
    /// The head's most important features (by total split gain / |weight|) with this row's value.
    pub top_features: Vec<(String, f64)>,
}

/// Errors of [`train`] / [`predict`].
#[derive(Debug, Clone, PartialEq)]
pub enum Error {
    /// The [`Control`] said stop.
    Cancelled(String),
    /// The estimated allocations (bytes) would pass the limit.
    Memory { needed: usize, limit: usize },
    /// Bad input: no training rows, fewer than 2 classes, lengths that differ.
    Invalid(String),
    /// A model that cannot be read or applied, or a worker that failed.
    Model(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Cancelled(s) => write!(f, "cancelled: {s}"),
            Error::Memory { needed, limit } => {
                write!(
                    f,
                    "training needs about {needed} bytes, more than the limit of {limit} bytes"
                )
            }
            Error::Invalid(s) => write!(f, "{s}"),
            Error::Model(s) => write!(f, "model: {s}"),
        }
    }
}

impl std::error::Error for Error {}

#[derive(Serialize, Deserialize, Clone)]
struct TextModel {
    tfidf: text::Tfidf,
    lin: Linear,
}

#[derive(Serialize, Deserialize, Clone)]
struct LinHead {
    lin: Linear,
    mean: Vec<f32>,
    std: Vec<f32>,
    /// Per feature: Some((offset, size)) for a category column (one-hot), None for a number.
    onehot: Vec<Option<(usize, usize)>>,
    dim: usize,
}

#[derive(Serialize, Deserialize, Clone)]
enum Head {
    Gbdt(gbdt::Gbdt),
    Logistic(LinHead),
}

/// A trained predictor; bytes from [`Model::to_bytes`].
#[derive(Serialize, Deserialize, Clone)]
pub struct Model {
    /// Classes (sorted), or None for a number label.
    classes: Option<Vec<String>>,
    algorithm: String,
    feature_names: Vec<String>,
    k: usize,
    has_knn: bool,
    paths: Vec<String>,
    numbers: Vec<String>,
    categories: Vec<(String, Vec<String>)>,
    text: Option<TextModel>,
    head: Head,
    importance: Vec<f64>,
    threads: usize,
}

const MAGIC: &[u8; 8] = b"TRLEARN1";

impl Model {
    /// Serialised model: 8 magic bytes, then CBOR.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = MAGIC.to_vec();
        ciborium::into_writer(self, &mut v).expect("writing to a Vec does not fail");
        v
    }
    /// Reads [`Model::to_bytes`]; Error::Model when the bytes are not a model of this version.
    pub fn from_bytes(b: &[u8]) -> Result<Model, Error> {
        if b.len() < 8 || &b[..8] != MAGIC {
            return Err(Error::Model(
                "not a tributary-learn model (bad magic)".into(),
            ));
        }
        let mut m: Model = ciborium::from_reader(&b[8..])
            .map_err(|e| Error::Model(format!("cannot read model: {e}")))?;
        if let Some(t) = &mut m.text {
            t.tfidf.index();
        }
        Ok(m)
    }
    /// The classes (sorted) of a category label; None for numbers.
    pub fn classes(&self) -> Option<&[String]> {
        self.classes.as_deref()
    }
    /// "gbdt" or "logistic".
    pub fn algorithm(&self) -> &str {
        &self.algorithm
    }
    /// Names of the features in order.
    pub fn feature_names(&self) -> &[String] {
        &self.feature_names
    }
}

// ---------------------------------------------------------------------------------------------
// Feature layout

struct Layout<'a> {
    classes: Option<&'a [String]>,
    k: usize,
    has_knn: bool,
    has_text: bool,
    paths: Vec<String>,
    numbers: Vec<String>,
    /// Vocabularies of the category columns.
    cats: Vec<(String, Vec<String>)>,
}

impl Layout<'_> {
    fn nc(&self) -> usize {
        self.classes.map_or(0, |c| c.len())
    }
    fn knn_w(&self) -> usize {
        if !self.has_knn {
            0
        } else if self.classes.is_some() {
            2 * self.nc() + 2
        } else {
            6
        }
    }
    fn text_w(&self) -> usize {
        if !self.has_text {
            0
        } else {
            self.classes.map_or(1, |c| c.len())
        }
    }
    fn hist_w(&self) -> usize {
        self.classes.map_or(2, |c| c.len()) // counts per class, or [sum, count]
    }
    fn nf(&self) -> usize {
        self.knn_w()
            + self.text_w()
            + self.paths.len() * (self.hist_w() + if self.classes.is_some() { 1 } else { 0 })
            + self.numbers.len()
            + self.cats.len()
    }
    fn names(&self) -> Vec<String> {
        let mut v = Vec::new();
        let k5 = 5 * self.k;
        if self.has_knn {
            match self.classes {
                Some(c) => {
                    for kk in [self.k, k5] {
                        for cl in c {
                            v.push(format!("knn@{kk}:{cl}"));
                        }
                    }
                }
                None => {
                    for kk in [self.k, k5] {
                        v.push(format!("knn@{kk}:mean"));
                        v.push(format!("knn@{kk}:std"));
                    }
                }
            }
            v.push("knn:top_sim".into());
            v.push("knn:count".into());
        }
        if self.has_text {
            match self.classes {
                Some(c) => v.extend(c.iter().map(|cl| format!("text:{cl}"))),
                None => v.push("text:value".into()),
            }
        }
        for p in &self.paths {
            match self.classes {
                Some(c) => v.extend(c.iter().map(|cl| format!("{p}:{cl}"))),
                None => v.push(format!("{p}:mean")),
            }
            v.push(format!("{p}:count"));
        }
        v.extend(self.numbers.iter().cloned());
        v.extend(self.cats.iter().map(|c| c.0.clone()));
        v
    }
}

/// Features of the `queries` (n_q x nf row-major, NaN = missing), given the text features
/// (n_q x text_w) and the known labels; plus each query's neighbours and per-path counts.
type Feats = (Vec<f32>, Vec<Vec<(u32, f32)>>, Vec<Vec<f64>>);

#[allow(clippy::too_many_arguments)]
fn features(
    ds: &Dataset,
    lay: &Layout,
    known: &[Option<Y>],
    queries: &[u32],
    text_feats: &[f32],
    threads: usize,
    sh: &Shared,
) -> Option<Feats> {
    let n = known.len();
    let nf = lay.nf();
    let nq = queries.len();
    let mut x = vec![f32::NAN; nq * nf];
    let as_of = ds.as_of.as_deref();
    let mut col = 0;
    let mut neigh = vec![Vec::new(); nq];
    if lay.has_knn {
        let emb = ds.embedding.as_ref()?;
        let kmask: Vec<bool> = known.iter().map(|y| y.is_some()).collect();
        let k5 = 5 * lay.k;
        let res = knn::search(emb, as_of, &kmask, queries, k5, threads, sh)?;
        let w = lay.knn_w();
        for (qi, lst) in res.into_iter().enumerate() {
            let row = &mut x[qi * nf + col..qi * nf + col + w];
            if emb.present[queries[qi] as usize] {
                for (part, kk) in [lay.k, k5].into_iter().enumerate() {
                    let top = &lst[..kk.min(lst.len())];
                    let ws: f64 = top.iter().map(|p| (p.1 as f64).max(1e-6)).sum();
                    match lay.classes {
                        Some(c) => {
                            let nc = c.len();
                            let mut s = vec![0f64; nc];
                            for &(j, sim) in top {
                                if let Some(Y::Class(cl)) = known[j as usize] {
                                    s[cl as usize] += (sim as f64).max(1e-6);
                                }
                            }
                            for (ci, v) in s.iter().enumerate() {
                                row[part * nc + ci] =
                                    if ws > 0.0 { (v / ws) as f32 } else { f32::NAN };
                            }
                        }
                        None => {
                            let (mut m, mut m2) = (0f64, 0f64);
                            for &(j, sim) in top {
                                if let Some(Y::Num(v)) = known[j as usize] {
                                    let wt = (sim as f64).max(1e-6);
                                    m += wt * v;
                                    m2 += wt * v * v;
                                }
                            }
                            if ws > 0.0 {
                                m /= ws;
                                row[part * 2] = m as f32;
                                row[part * 2 + 1] = (m2 / ws - m * m).max(0.0).sqrt() as f32;
                            }
                        }
                    }
                }
                row[w - 2] = lst.first().map_or(f32::NAN, |p| p.1);
                row[w - 1] = lst.len() as f32;
            }
            neigh[qi] = lst;
        }
        col += w;
    }
    if sh.stopped() {
        return None;
    }
    let tw = lay.text_w();
    for qi in 0..nq {
        x[qi * nf + col..qi * nf + col + tw].copy_from_slice(&text_feats[qi * tw..(qi + 1) * tw]);
    }
    col += tw;
    let hw = lay.hist_w();
    let mut hist_counts = vec![Vec::new(); nq];
    for p in &ds.paths {
        let c = history::counts(p, n, as_of, known, hw);
        let outw = if lay.classes.is_some() { hw + 1 } else { hw };
        for (qi, &q) in queries.iter().enumerate() {
            let r = &c[q as usize * hw..(q as usize + 1) * hw];
            let dst = &mut x[qi * nf + col..qi * nf + col + outw];
            let total = if lay.classes.is_some() {
                r.iter().sum::<f64>()
            } else {
                r[1]
            };
            if lay.classes.is_some() {
                for ci in 0..hw {
                    dst[ci] = if total > 0.0 {
                        (r[ci] / total) as f32
                    } else {
                        f32::NAN
                    };
                }
            } else {
                dst[0] = if total > 0.0 {
                    (r[0] / total) as f32
                } else {
                    f32::NAN
                };
            }
            dst[outw - 1] = total as f32;
            hist_counts[qi].push(total);
        }
        col += outw;
        if sh.stopped() {
            return None;
        }
    }
    for (_, v) in &ds.numbers {
        for (qi, &q) in queries.iter().enumerate() {
            x[qi * nf + col] = v[q as usize].map_or(f32::NAN, |v| v as f32);
        }
        col += 1;
    }
    for (ci, (_, v)) in ds.categories.iter().enumerate() {
        let vocab: HashMap<&str, usize> = lay.cats[ci]
            .1
            .iter()
            .enumerate()
            .map(|(i, s)| (s.as_str(), i))
            .collect();
        for (qi, &q) in queries.iter().enumerate() {
            x[qi * nf + col] = v[q as usize]
                .as_deref()
                .and_then(|s| vocab.get(s))
                .map_or(f32::NAN, |&i| i as f32);
        }
        col += 1;
    }
    debug_assert_eq!(col, nf);
    Some((x, neigh, hist_counts))
}

fn check_shapes(ds: &Dataset) -> Result<usize, Error> {
    let n = match &ds.label {
        Labels::Category(v) => v.len(),
        Labels::Number(v) => v.len(),
    };
    let bad = |what: &str, len: usize| {
        Error::Invalid(format!("{what} has {len} rows, the label has {n}"))
    };
    if let Some(a) = &ds.as_of {
        if a.len() != n {
            return Err(bad("as_of", a.len()));
        }
        if a.iter().any(|v| v.is_nan()) {
            return Err(Error::Invalid("as_of has NaN".into()));
        }
    }
    if let Some(t) = &ds.text {
        if t.len() != n {
            return Err(bad("text", t.len()));
        }
    }
    if let Some(e) = &ds.embedding {
        if e.present.len() != n || e.data.len() != n * e.dim {
            return Err(bad("embedding", e.present.len()));
        }
    }
    for (name, v) in &ds.numbers {
        if v.len() != n {
            return Err(bad(name, v.len()));
        }
    }
    for (name, v) in &ds.categories {
        if v.len() != n {
            return Err(bad(name, v.len()));
        }
    }
    Ok(n)
}

/// Known labels: rows with `keep(i)` and a label (classes mapped by `classes`).
fn known_labels(
    ds: &Dataset,
    classes: Option<&[String]>,
    keep: impl Fn(usize) -> bool,
) -> Vec<Option<Y>> {
    match &ds.label {
        Labels::Category(v) => {
            let map: HashMap<&str, u32> = classes
                .unwrap_or(&[])
                .iter()
                .enumerate()
                .map(|(i, c)| (c.as_str(), i as u32))
                .collect();
            v.iter()
                .enumerate()
                .map(|(i, l)| {
                    if keep(i) {
                        l.as_deref().and_then(|s| map.get(s)).map(|&c| Y::Class(c))
                    } else {
                        None
                    }
                })
                .collect()
        }
        Labels::Number(v) => v
            .iter()
            .enumerate()
            .map(|(i, l)| {
                if keep(i) {
                    l.filter(|x| x.is_finite()).map(Y::Num)
                } else {
                    None
                }
            })
            .collect(),
    }
}

/// Text model settings: 10 epochs, Adagrad step 0.3, L2 1e-5 (chosen on the films check,
/// the examples/films.rs of 0.9.0 (now examples/dataset.rs): test accuracy 0.437 vs 0.425 with
/// 6 epochs and L2 1e-4).
fn text_fit() -> Fit {
    Fit {
        epochs: 10,
        lr: 0.3,
        l2: 1e-5,
    }
}

fn mem_check(needed: usize, limit: usize) -> Result<(), Error> {
    if limit > 0 && needed > limit {
        Err(Error::Memory { needed, limit })
    } else {
        Ok(())
    }
}

/// Head input row for the logistic head.
fn lin_row(h: &LinHead, x: &[f32], idx: &mut Vec<u32>, val: &mut Vec<f32>) {
    idx.clear();
    val.clear();
    for (f, &v) in x.iter().enumerate() {
        match h.onehot[f] {
            Some((off, size)) => {
                if !v.is_nan() && (v as usize) < size {
                    idx.push((off + v as usize) as u32);
                    val.push(1.0);
                }
            }
            None => {
                let z = if v.is_nan() {
                    0.0
                } else {
                    (v - h.mean[f]) / h.std[f]
                };
                if z != 0.0 {
                    idx.push(f as u32);
                    val.push(z.clamp(-10.0, 10.0));
                }
            }
        }
    }
}

fn fit_lin_head(
    x: &[f32],
    nf: usize,
    cats: &[(String, Vec<String>)],
    y: &HeadY,
    rows: &[usize],
    sh: &Shared,
) -> Option<LinHead> {
    let ncat = cats.len();
    let first_cat = nf - ncat;
    let mut onehot = vec![None; nf];
    let mut dim = nf;
    for (ci, (_, voc)) in cats.iter().enumerate() {
        onehot[first_cat + ci] = Some((dim, voc.len()));
        dim += voc.len();
    }
    let (mut mean, mut std) = (vec![0f32; nf], vec![1f32; nf]);
    for f in 0..nf {
        let v: Vec<f64> = rows
            .iter()
            .map(|&r| x[r * nf + f] as f64)
            .filter(|v| !v.is_nan())
            .collect();
        if !v.is_empty() {
            let m = v.iter().sum::<f64>() / v.len() as f64;
            let s = (v.iter().map(|a| (a - m) * (a - m)).sum::<f64>() / v.len() as f64).sqrt();
            mean[f] = m as f32;
            std[f] = if s > 1e-12 { s as f32 } else { 1.0 };
        }
    }
    let mut h = LinHead {
        lin: Linear {
            dim: 0,
            k: 0,
            w: vec![],
            b: vec![],
            softmax: true,
            y_mean: 0.0,
            y_std: 1.0,
        },
        mean,
        std,
        onehot,
        dim,
    };
    let mut csr = Csr::new(dim);
    let (mut idx, mut val) = (Vec::new(), Vec::new());
    for &r in rows {
        lin_row(&h, &x[r * nf..(r + 1) * nf], &mut idx, &mut val);
        csr.push(&idx, &val);
    }
    let local: Vec<usize> = (0..rows.len()).collect();
    let fit = Fit {
        epochs: 15,
        lr: 0.05,
        l2: 1e-4,
    };
    h.lin = match y {
        HeadY::Class(c, k) => {
            let c: Vec<u32> = rows.iter().map(|&r| c[r]).collect();
            Linear::fit(&csr, &local, &Target::Class(&c, *k), fit, sh)?
        }
        HeadY::Value(v) => {
            let v: Vec<f64> = rows.iter().map(|&r| v[r]).collect();
            Linear::fit(&csr, &local, &Target::Value(&v), fit, sh)?
        }
    };
    Some(h)
}

/// Labels of the head's rows (indexed by position in the feature matrix).
enum HeadY {
    Class(Vec<u32>, usize),
    Value(Vec<f64>),
}

fn head_predict(head: &Head, x: &[f32], out: &mut [f32]) {
    match head {
        Head::Gbdt(g) => g.predict(x, out),
        Head::Logistic(h) => {
            let (mut idx, mut val) = (Vec::new(), Vec::new());
            lin_row(h, x, &mut idx, &mut val);
            h.lin.predict(&idx, &val, out);
        }
    }
}

fn lin_importance(h: &LinHead, nf: usize) -> Vec<f64> {
    let k = h.lin.k;
    let mut imp = vec![0f64; nf];
    for (f, o) in h.onehot.iter().enumerate() {
        let range = match o {
            Some((off, size)) => *off..off + size,
            None => f..f + 1,
        };
        for j in range {
            imp[f] += h.lin.w[j * k..(j + 1) * k]
                .iter()
                .map(|w| w.abs() as f64)
                .sum::<f64>();
        }
    }
    imp
}

/// Scores of predictions: (accuracy, macro F1) for classes, MAE for numbers.
fn score_classes(truth: &[u32], pred: &[u32]) -> (f64, f64) {
    let n = truth.len().max(1) as f64;
    let acc = truth.iter().zip(pred).filter(|(a, b)| a == b).count() as f64 / n;
    let mut cls: Vec<u32> = truth.iter().chain(pred).copied().collect();
    cls.sort_unstable();
    cls.dedup();
    let mut f1 = 0.0;
    for &c in &cls {
        let tp = truth
            .iter()
            .zip(pred)
            .filter(|(a, b)| **a == c && **b == c)
            .count() as f64;
        let fp = pred.iter().filter(|&&b| b == c).count() as f64 - tp;
        let fnn = truth.iter().filter(|&&a| a == c).count() as f64 - tp;
        if tp > 0.0 {
            f1 += 2.0 * tp / (2.0 * tp + fp + fnn);
        }
    }
    (acc, f1 / cls.len().max(1) as f64)
}

fn argmax(v: &[f32]) -> usize {
    let mut b = 0;
    for i in 1..v.len() {
        if v[i] > v[b] {
            b = i;
        }
    }
    b
}

fn metric(
    method: &str,
    algo: &str,
    split: &str,
    y: &HeadY,
    rows: &[usize],
    pred: &[f32],
    k: usize,
) -> MetricRow {
    let mut m = MetricRow {
        method: method.into(),
        algorithm: algo.into(),
        split: split.into(),
        rows: rows.len() as u64,
        accuracy: None,
        macro_f1: None,
        mae: None,
    };
    match y {
        HeadY::Class(c, _) => {
            let truth: Vec<u32> = rows.iter().map(|&r| c[r]).collect();
            let p: Vec<u32> = (0..rows.len())
                .map(|i| argmax(&pred[i * k..(i + 1) * k]) as u32)
                .collect();
            let (a, f) = score_classes(&truth, &p);
            m.accuracy = Some(a);
            m.macro_f1 = Some(f);
        }
        HeadY::Value(v) => {
            m.mae = Some(
                rows.iter()
                    .enumerate()
                    .map(|(i, &r)| (pred[i] as f64 - v[r]).abs())
                    .sum::<f64>()
                    / rows.len().max(1) as f64,
            );
        }
    }
    m
}

/// Trains a predictor of `ds.label` from the rows marked [`Role::Train`] (`roles` has length n)
/// and scores it on the [`Role::Test`] rows. Errors: Invalid (no training rows, fewer than 2
/// classes, shapes), Memory, Cancelled (from `ctl`).
pub fn train(
    ds: &Dataset,
    roles: &[Role],
    opts: &TrainOptions,
    ctl: &dyn Control,
) -> Result<Trained, Error> {
    let n = check_shapes(ds)?;
    if roles.len() != n {
        return Err(Error::Invalid(format!(
            "roles has {} rows, the label has {n}",
            roles.len()
        )));
    }
    let threads = opts.threads.max(1);
    let k = opts.k.max(1);
    let has_label = |i: usize| match &ds.label {
        Labels::Category(v) => v[i].is_some(),
        Labels::Number(v) => v[i].is_some_and(|x| x.is_finite()),
    };
    let train_rows: Vec<usize> = (0..n)
        .filter(|&i| roles[i] == Role::Train && has_label(i))
        .collect();
    if train_rows.is_empty() {
        return Err(Error::Invalid(
            "no training rows: no row has role train and a label".into(),
        ));
    }
    let classes: Option<Vec<String>> = match &ds.label {
        Labels::Category(v) => {
            let mut c: Vec<String> = train_rows.iter().filter_map(|&i| v[i].clone()).collect();
            c.sort_unstable();
            c.dedup();
            if c.len() < 2 {
                return Err(Error::Invalid(format!(
                    "the label has {} class among the training rows, at least 2 are needed",
                    c.len()
                )));
            }
            Some(c)
        }
        Labels::Number(_) => None,
    };
    let known = known_labels(ds, classes.as_deref(), |i| roles[i] == Role::Train);
    let test_rows: Vec<usize> = (0..n)
        .filter(|&i| roles[i] == Role::Test && has_label(i))
        .collect();
    // Category vocabularies from the training rows (values only, no labels).
    let cats: Vec<(String, Vec<String>)> = ds
        .categories
        .iter()
        .map(|(name, v)| {
            let mut cnt: HashMap<&str, usize> = HashMap::new();
            for &r in &train_rows {
                if let Some(s) = &v[r] {
                    *cnt.entry(s.as_str()).or_insert(0) += 1;
                }
            }
            let mut e: Vec<(&str, usize)> = cnt.into_iter().collect();
            e.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
            e.truncate(1000);
            (
                name.clone(),
                e.into_iter().map(|p| p.0.to_string()).collect(),
            )
        })
        .collect();
    let lay = Layout {
        classes: classes.as_deref(),
        k,
        has_knn: ds.embedding.is_some(),
        has_text: ds.text.is_some(),
        paths: ds.paths.iter().map(|p| p.name.clone()).collect(),
        numbers: ds.numbers.iter().map(|p| p.0.clone()).collect(),
        cats,
    };
    let nf = lay.nf();
    let nc = lay.nc();
    let kout = classes.as_ref().map_or(1, |c| c.len());
    // Queries: training then test rows.
    let queries: Vec<u32> = train_rows
        .iter()
        .chain(&test_rows)
        .map(|&r| r as u32)
        .collect();
    let nq = queries.len();

    // Memory: the big allocations, estimated before any is made.
    let mut needed =
        nq * nf * 4 * 2 + n * 64 + ds.paths.iter().map(|p| p.pairs.len() * 24).sum::<usize>() * 2;
    if let Some(e) = &ds.embedding {
        needed += knn::memory(train_rows.len(), nq, e.dim, 5 * k, threads);
    }
    if let Some(t) = &ds.text {
        let bytes: usize = train_rows
            .iter()
            .chain(&test_rows)
            .map(|&r| t[r].len())
            .sum();
        // nnz ~ 2 terms per 5 bytes, 8 bytes each; the df table ~ 64 bytes per distinct term.
        let terms_est = (bytes / 3).min(text::MAX_VOCAB * 4);
        needed += bytes / 5 * 2 * 8
            + terms_est * 64
            + Linear::memory(terms_est.min(text::MAX_VOCAB), kout) * (threads + 1);
    }
    needed += gbdt::memory(nq, nf, kout, threads);
    mem_check(needed, opts.max_memory_bytes)?;

    // Text features: forward-chained out-of-fold for training rows, full model for test rows.
    let tw = lay.text_w();
    let mut text_feats = vec![f32::NAN; nq * tw];
    let mut text_model = None;
    if let Some(texts) = &ds.text {
        let as_of = ds.as_of.as_deref();
        let (tm, tf) = polled(ctl, "text", 7, |sh| {
            let tfidf = text::Tfidf::fit(texts, &train_rows);
            let mut csr = Csr::new(tfidf.terms.len());
            for &q in &queries {
                tfidf.row(&texts[q as usize], &mut csr);
            }
            let ntr = train_rows.len();
            // Positions (into queries) of the training rows in time order.
            let mut order: Vec<usize> = (0..ntr).collect();
            if let Some(t) = as_of {
                order.sort_by(|&a, &b| {
                    t[train_rows[a]]
                        .total_cmp(&t[train_rows[b]])
                        .then(a.cmp(&b))
                });
            }
            let target_of = |pos: &[usize]| -> (Vec<u32>, Vec<f64>) {
                let (mut c, mut v) = (Vec::new(), Vec::new());
                for &p in pos {
                    match known[train_rows[p]] {
                        Some(Y::Class(x)) => c.push(x),
                        Some(Y::Num(x)) => v.push(x),
                        None => {}
                    }
                }
                (c, v)
            };
            // folds: (rows scored, rows fitted)
            let mut folds: Vec<(Vec<usize>, Vec<usize>)> = Vec::new();
            match as_of {
                Some(t) => {
                    let nb = 6;
                    for b in 1..nb {
                        let block: Vec<usize> = order[b * ntr / nb..(b + 1) * ntr / nb].to_vec();
                        if block.is_empty() {
                            continue;
                        }
                        let t0 = t[train_rows[block[0]]];
                        let fitr: Vec<usize> = order
                            .iter()
                            .copied()
                            .filter(|&p| t[train_rows[p]] < t0)
                            .collect();
                        folds.push((block, fitr));
                    }
                }
                None => {
                    for f in 0..5 {
                        let block: Vec<usize> = (0..ntr).filter(|p| p % 5 == f).collect();
                        let fitr: Vec<usize> = (0..ntr).filter(|p| p % 5 != f).collect();
                        folds.push((block, fitr));
                    }
                }
            }
            let all: Vec<usize> = (0..ntr).collect();
            folds.push((Vec::new(), all));
            let fits = par::par_map(threads, folds.len(), &sh.stop, |fi| {
                let fitr = &folds[fi].1;
                if fitr.is_empty() {
                    return None;
                }
                let (c, v) = target_of(fitr);
                let y = if classes.is_some() {
                    Target::Class(&c, nc)
                } else {
                    Target::Value(&v)
                };
                let m = Linear::fit(&csr, fitr, &y, text_fit(), sh);
                sh.tick(1);
                m
            });
            if sh.stopped() {
                return Ok((None, Vec::new()));
            }
            let mut out = vec![f32::NAN; nq * tw];
            let mut buf = vec![0f32; tw];
            let nfold = folds.len();
            let mut full = None;
            for (fi, m) in fits.into_iter().enumerate() {
                let Some(Some(m)) = m else { continue };
                if fi + 1 == nfold {
                    for qi in ntr..nq {
                        let (i, v) = csr.row(qi);
                        m.predict(i, v, &mut buf);
                        out[qi * tw..(qi + 1) * tw].copy_from_slice(&buf);
                    }
                    full = Some(m);
                } else {
                    for &p in &folds[fi].0 {
                        let (i, v) = csr.row(p);
                        m.predict(i, v, &mut buf);
                        out[p * tw..(p + 1) * tw].copy_from_slice(&buf);
                    }
                }
            }
            Ok((full.map(|lin| TextModel { tfidf, lin }), out))
        })?;
        text_model = tm;
        text_feats = tf;
    }

    let (x, _neigh, _hist) = polled(ctl, "features", nq as u64, |sh| {
        features(ds, &lay, &known, &queries, &text_feats, threads, sh)
            .ok_or(Error::Cancelled("stopped".into()))
    })?;
    drop(text_feats);

    // Head labels by position.
    let hy = match &ds.label {
        Labels::Category(_) => {
            let map: HashMap<&str, u32> = lay
                .classes
                .unwrap()
                .iter()
                .enumerate()
                .map(|(i, c)| (c.as_str(), i as u32))
                .collect();
            let Labels::Category(v) = &ds.label else {
                unreachable!()
            };
            HeadY::Class(
                queries
                    .iter()
                    .map(|&q| {
                        v[q as usize]
                            .as_deref()
                            .and_then(|s| map.get(s))
                            .copied()
                            .unwrap_or(u32::MAX)
                    })
                    .collect(),
                nc,
            )
        }
        Labels::Number(v) => HeadY::Value(
            queries
                .iter()
                .map(|&q| v[q as usize].unwrap_or(f64::NAN))
                .collect(),
        ),
    };
    let ntr = train_rows.len();
    let test_pos: Vec<usize> = (ntr..nq).collect();
    // Test rows with a class unseen in training count as wrong: map them to class index nc.
    // Validation slice: the latest training rows by as_of (else by row order); ties stay together.
    let mut order: Vec<usize> = (0..ntr).collect();
    let t_of = |p: usize| {
        ds.as_of
            .as_ref()
            .map_or(p as f64, |a| a[queries[p] as usize])
    };
    order.sort_by(|&a, &b| t_of(a).total_cmp(&t_of(b)).then(a.cmp(&b)));
    let nv = (ntr as f64 * opts.validation_fraction.clamp(0.0, 0.9)).floor() as usize;
    let mut cut = ntr - nv;
    while cut < ntr && cut > 0 && t_of(order[cut - 1]) == t_of(order[cut]) {
        cut += 1;
    }
    let (mut early, valid) = if nv > 0 && cut < ntr && cut >= 2 {
        (order[..cut].to_vec(), order[cut..].to_vec())
    } else {
        (order.clone(), Vec::new())
    };
    early.sort_unstable();
    let all_train: Vec<usize> = (0..ntr).collect();
    fn gy(hy: &HeadY) -> gbdt::Labels<'_> {
        match hy {
            HeadY::Class(c, k) => gbdt::Labels::Class(c, *k),
            HeadY::Value(v) => gbdt::Labels::Value(v),
        }
    }
    let params = gbdt::Params::default();
    let want_gbdt = opts.algorithm != Algorithm::Logistic;
    let want_lin = opts.algorithm != Algorithm::Gbdt;
    // Fits on the early rows, scored on the validation rows.
    let mut val_scores: Vec<(String, Vec<f32>)> = Vec::new();
    let mut rounds = params.rounds.min(150);
    if !valid.is_empty() {
        if want_gbdt {
            let g = polled(ctl, "gbdt validation", params.rounds as u64, |sh| {
                gbdt::Gbdt::fit(&x, nf, &gy(&hy), &early, &valid, params, threads, sh)
                    .ok_or(Error::Cancelled("stopped".into()))
            })?;
            rounds = g.rounds.max(1);
            let mut p = vec![0f32; valid.len() * kout];
            for (i, &r) in valid.iter().enumerate() {
                g.predict(&x[r * nf..(r + 1) * nf], &mut p[i * kout..(i + 1) * kout]);
            }
            val_scores.push(("gbdt".into(), p));
        }
        if want_lin {
            let h = polled(ctl, "logistic validation", 15, |sh| {
                fit_lin_head(&x, nf, &lay.cats, &hy, &early, sh)
                    .ok_or(Error::Cancelled("stopped".into()))
            })?;
            let head = Head::Logistic(h);
            let mut p = vec![0f32; valid.len() * kout];
            for (i, &r) in valid.iter().enumerate() {
                head_predict(
                    &head,
                    &x[r * nf..(r + 1) * nf],
                    &mut p[i * kout..(i + 1) * kout],
                );
            }
            val_scores.push(("logistic".into(), p));
        }
    }
    let val_metrics: Vec<MetricRow> = val_scores
        .iter()
        .map(|(a, p)| metric("predictor", a, "validation", &hy, &valid, p, kout))
        .collect();
    let pick = match opts.algorithm {
        Algorithm::Gbdt => "gbdt",
        Algorithm::Logistic => "logistic",
        Algorithm::Auto => {
            if val_metrics.len() == 2 {
                let better = |m: &MetricRow| m.accuracy.unwrap_or(0.0) - m.mae.unwrap_or(0.0);
                if better(&val_metrics[1]) > better(&val_metrics[0]) {
                    "logistic"
                } else {
                    "gbdt"
                }
            } else {
                "gbdt"
            }
        }
    };
    let (head, importance) = if pick == "gbdt" {
        let p = gbdt::Params { rounds, ..params };
        let g = polled(ctl, "gbdt", rounds as u64, |sh| {
            gbdt::Gbdt::fit(&x, nf, &gy(&hy), &all_train, &[], p, threads, sh)
                .ok_or(Error::Cancelled("stopped".into()))
        })?;
        let imp = g.importance.clone();
        (Head::Gbdt(g), imp)
    } else {
        let h = polled(ctl, "logistic", 15, |sh| {
            fit_lin_head(&x, nf, &lay.cats, &hy, &all_train, sh)
                .ok_or(Error::Cancelled("stopped".into()))
        })?;
        let imp = lin_importance(&h, nf);
        (Head::Logistic(h), imp)
    };

    // Report.
    let mut report = Vec::new();
    let (split, rows, predictor_scores) = if !test_pos.is_empty() {
        let mut p = vec![0f32; test_pos.len() * kout];
        for (i, &r) in test_pos.iter().enumerate() {
            head_predict(
                &head,
                &x[r * nf..(r + 1) * nf],
                &mut p[i * kout..(i + 1) * kout],
            );
        }
        ("test", test_pos.clone(), Some(p))
    } else {
        (
            "validation",
            valid.clone(),
            val_scores.iter().find(|v| v.0 == pick).map(|v| v.1.clone()),
        )
    };
    let base_rows: &[usize] = if split == "test" { &all_train } else { &early };
    if !rows.is_empty() {
        if let Some(p) = predictor_scores {
            report.push(metric("predictor", pick, split, &hy, &rows, &p, kout));
        }
        if lay.has_knn {
            let mut p = vec![0f32; rows.len() * kout];
            for (i, &r) in rows.iter().enumerate() {
                let v = &x[r * nf..r * nf + kout];
                for (j, &vv) in v.iter().enumerate() {
                    p[i * kout + j] = if vv.is_nan() { -1.0 } else { vv };
                }
            }
            report.push(metric("knn", "knn", split, &hy, &rows, &p, kout));
        }
        let mut p = vec![0f32; rows.len() * kout];
        let algo = match &hy {
            HeadY::Class(c, _) => {
                let mut cnt = vec![0f32; kout];
                for &r in base_rows {
                    cnt[c[r] as usize] += 1.0;
                }
                for i in 0..rows.len() {
                    p[i * kout..(i + 1) * kout].copy_from_slice(&cnt);
                }
                "majority"
            }
            HeadY::Value(v) => {
                let m =
                    base_rows.iter().map(|&r| v[r]).sum::<f64>() / base_rows.len().max(1) as f64;
                p.iter_mut().for_each(|x| *x = m as f32);
                "mean"
            }
        };
        report.push(metric("baseline", algo, split, &hy, &rows, &p, kout));
    }
    if split == "test" {
        report.extend(val_metrics);
    }
    let feature_names = lay.names();
    let model = Model {
        classes: classes.clone(),
        algorithm: pick.into(),
        feature_names: feature_names.clone(),
        k,
        has_knn: lay.has_knn,
        paths: lay.paths.clone(),
        numbers: lay.numbers.clone(),
        categories: lay.cats.clone(),
        text: text_model,
        head,
        importance,
        threads,
    };
    Ok(Trained {
        model,
        report,
        feature_names,
    })
}

/// Predicts the `targets` (row indices of `ds`, which must have the columns the model was
/// trained with): features from every labelled row of `ds` (the target itself excluded; with
/// as_of only strictly earlier rows). Results in the order of `targets`.
pub fn predict(
    model: &Model,
    ds: &Dataset,
    targets: &[u32],
    ctl: &dyn Control,
) -> Result<Vec<Prediction>, Error> {
    let n = check_shapes(ds)?;
    if let Some(&t) = targets.iter().find(|&&t| t as usize >= n) {
        return Err(Error::Invalid(format!(
            "target row {t} is out of range (n = {n})"
        )));
    }
    let names_num: Vec<String> = ds.numbers.iter().map(|p| p.0.clone()).collect();
    let names_cat: Vec<String> = ds.categories.iter().map(|p| p.0.clone()).collect();
    let names_path: Vec<String> = ds.paths.iter().map(|p| p.name.clone()).collect();
    if names_num != model.numbers
        || names_cat
            != model
                .categories
                .iter()
                .map(|c| c.0.clone())
                .collect::<Vec<_>>()
        || names_path != model.paths
        || ds.embedding.is_some() != model.has_knn
        || ds.text.is_some() != model.text.is_some()
        || matches!(ds.label, Labels::Category(_)) != model.classes.is_some()
    {
        return Err(Error::Model(
            "the dataset does not have the columns the model was trained with".into(),
        ));
    }
    let known = known_labels(ds, model.classes.as_deref(), |_| true);
    let lay = Layout {
        classes: model.classes.as_deref(),
        k: model.k,
        has_knn: model.has_knn,
        has_text: model.text.is_some(),
        paths: model.paths.clone(),
        numbers: model.numbers.clone(),
        cats: model.categories.clone(),
    };
    let nf = lay.nf();
    let threads = model.threads.max(1);
    let mut uq: Vec<u32> = targets.to_vec();
    uq.sort_unstable();
    uq.dedup();
    let nq = uq.len();
    let tw = lay.text_w();
    let mut tf = vec![f32::NAN; nq * tw];
    if let (Some(tm), Some(texts)) = (&model.text, &ds.text) {
        let mut csr = Csr::new(tm.tfidf.terms.len());
        let mut buf = vec![0f32; tw];
        for (qi, &q) in uq.iter().enumerate() {
            if qi % 4096 == 0 {
                ctl.check()?;
            }
            tm.tfidf.row(&texts[q as usize], &mut csr);
            let (i, v) = csr.row(qi);
            tm.lin.predict(i, v, &mut buf);
            tf[qi * tw..(qi + 1) * tw].copy_from_slice(&buf);
        }
    }
    let (x, neigh, hist) = polled(ctl, "features", nq as u64, |sh| {
        features(ds, &lay, &known, &uq, &tf, threads, sh).ok_or(Error::Cancelled("stopped".into()))
    })?;
    let kout = model.classes.as_ref().map_or(1, |c| c.len());
    let mut top: Vec<usize> = (0..nf).collect();
    top.sort_by(|&a, &b| model.importance[b].total_cmp(&model.importance[a]));
    top.truncate(5);
    let mut out = Vec::with_capacity(targets.len());
    let mut p = vec![0f32; kout];
    for &t in targets {
        let qi = uq.binary_search(&t).expect("target is in uq");
        let row = &x[qi * nf..(qi + 1) * nf];
        head_predict(&model.head, row, &mut p);
        let mut pr = Prediction {
            label: None,
            value: None,
            confidence: None,
            neighbours: neigh[qi]
                .iter()
                .take(model.k)
                .map(|&(j, s)| (j, s as f64))
                .collect(),
            history: model
                .paths
                .iter()
                .cloned()
                .zip(hist[qi].iter().copied())
                .collect(),
            top_features: top
                .iter()
                .map(|&f| (model.feature_names[f].clone(), row[f] as f64))
                .collect(),
        };
        match &model.classes {
            Some(c) => {
                let b = argmax(&p);
                pr.label = Some(c[b].clone());
                pr.confidence = Some(p[b] as f64);
            }
            None => {
                pr.value = Some(p[0] as f64);
                pr.label = Some(format!("{}", p[0]));
            }
        }
        out.push(pr);
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
