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
//!    The fit's settings (Adagrad step, epochs, L2: `head::TEXT_GRID`) are chosen by the text
//!    model's own score on the validation slice (fitted on the earlier training rows), as
//!    scikit-learn's C is chosen for TF-IDF + logistic regression; the first without a slice.
//! 3. `{path}:{class}` (share) and `{path}:count` (or `{path}:mean`, `{path}:count`): labels of
//!    the known rows sharing a group with the row through each [`GroupPath`], summed over its
//!    groups; then `{path}:log_age` (ln(1 + the row's as_of minus the newest of those labels'))
//!    and `{path}:log_rows` (ln(1 + the rows of any label, or none, sharing a group and strictly
//!    earlier than the row): what carries over to a row whose entity is new. The paths are the
//!    dataset's, then *crossed* paths: for two paths of at most one group a row, the rows sharing
//!    both groups (a customer's purchases in this product's category), where that says more than
//!    either (`history::cross`; at most the first five such paths are crossed).
//! 4. the `numbers` as they are (NaN = NULL), each `categories` column as an integer code (vocabulary
//!    of the training rows, most frequent first; unknown or NULL = missing).
//!
//! The head is [`Algorithm::Gbdt`] (gradient-boosted trees, `gbdt.rs`) or [`Algorithm::Logistic`]
//! (multinomial logistic / ridge regression on standardised features and one-hot categories);
//! [`Algorithm::Auto`] fits both on the earlier training rows, scores them on forward validation
//! slices (the latest `validation_fraction` of training rows by as_of, and the slice of the same
//! size before it: [`TrainOptions::validation_slices`], `slices.rs`), and refits the one with the
//! better mean score on all of them. With as_of, a slice's features are computed as a test
//! period's are: no label of the slice (or after it) enters them (history, k-NN votes, and text
//! probabilities from a text model of the rows before the slice alone), so the scores (and the
//! report's validation rows) expect history as old as a held-out period will have.
//!
//! # The training rows' history (issue 47)
//! A predicted row's history stops at the last label known when it is predicted; a training
//! row's, built from every earlier label, would be fresher than any predicted row's. With as_of
//! the training rows' history is built in forward time blocks ("blocked"): the training rows in
//! as_of order make 6 blocks of equal size, and a row of block b counts only the labels of rows
//! earlier than its block's first row (block 0: none), as a held-out period sees the labels
//! before it; the age feature tells the head how stale that is. The other scheme ("fresh":
//! every strictly earlier label, as a row predicted when it arrives sees) is a candidate too:
//! the candidate heads with the k-NN votes (both, or what the algorithm allows) are fitted with
//! both on the rows before each validation slice and scored on the stale slices; the scheme of
//! the best mean score (ties: blocked) then serves the candidates without the k-NN votes, and
//! the best (k-NN votes or not, head) is refitted on all training rows ([`Model::history`] says
//! which scheme). The k-NN votes and the text probabilities are the same in
//! both schemes (the text model's are forward-chained over the same 6 blocks already). Predicted
//! rows (and test rows) count every known label strictly earlier than themselves.

mod gbdt;
mod history;
mod knn;
mod knn_ivf;
mod linear;
mod par;
mod slices;
mod text;
mod text_fit;
mod topk;
mod validate;

mod features;
mod head;
mod predict;
mod train;

use history::Y;
use linear::{Csr, Fit, Linear, Target};
use par::{polled, Shared};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt;

use features::*;
use head::*;
pub use predict::predict;
use slices::*;
use text_fit::{text_features, TextRows};
pub use train::train;
pub use validate::{set_interrupt_check, INVALID_MODEL, MAX_K, MAX_THREADS};

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
    /// Rows the candidate heads are fitted on to be compared on the validation slice, at most
    /// (0 = no limit); past it, that many of the earlier training rows evenly spaced in time. The
    /// chosen head's final fit takes every training row. Default 250,000: below it nothing is
    /// sampled; above, each candidate is fitted on 250,000 rows (at 1M rows they still took 95-117
    /// s each on 2 cores, BENCHMARKS.md "The k-NN votes at scale").
    pub validation_fit_rows: usize,
    /// Forward validation slices that [`Algorithm::Auto`] compares the candidates on (0 = 1):
    /// the latest `validation_fraction` of training rows, then the slice of the same size just
    /// before it, and so on (rolling-origin evaluation); a candidate's score is the mean of its
    /// slices' scores (`slices.rs`). A slice before the latest is used only when the rows before
    /// it are at least as many as its own and at least 2,000 (`slices::MIN_EARLIER_ROWS`: on a
    /// small table the earlier slice's fits, on 60% of the rows, misled the choice); its
    /// candidates are fitted on at most half of `validation_fit_rows` rows. Default 2.
    pub validation_slices: usize,
}

impl Default for TrainOptions {
    fn default() -> Self {
        TrainOptions {
            algorithm: Algorithm::Auto,
            k: 10,
            threads: 1,
            max_memory_bytes: 0,
            validation_fraction: 0.2,
            validation_fit_rows: 250_000,
            validation_slices: 2,
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
    /// "test" (Test rows) or "validation" (the latest validation slice: the predictor, k-NN and
    /// baseline rows when there are no Test rows, else each candidate head's). With Test rows and
    /// more than one slice compared, also each candidate's "validation 2" (the slice before the
    /// latest), "validation 3", ..., and "validation mean" (the mean of its slices' scores, rows
    /// summed: what `auto` compared).
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
    /// A model that cannot be read or applied (the message starts with [`INVALID_MODEL`] when
    /// [`Model::from_bytes`] rejected the bytes), or a worker that failed.
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
    /// Every path also has `:age` and `:rows` columns (models trained since 0.12.0; false in
    /// the bytes of an older model, whose layout has neither).
    #[serde(default)]
    path_stats: bool,
    /// The crossed paths, after `paths` in the layout: pairs of indices into `paths`
    /// (`history::cross`).
    #[serde(default)]
    cross: Vec<(usize, usize)>,
    /// How the training rows' history was built: "blocked" (forward time blocks), "fresh"
    /// (every earlier label), "leave-one-out" (no as_of); "" in an older model (fresh).
    #[serde(default)]
    history: String,
}

const MAGIC: &[u8; 8] = b"TRLEARN1";

impl Model {
    /// Serialised model: 8 magic bytes, then CBOR.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = MAGIC.to_vec();
        ciborium::into_writer(self, &mut v).expect("writing to a Vec does not fail");
        v
    }
    /// Reads [`Model::to_bytes`] and checks the model ([`Model::validate`]: every index in
    /// range, every tree acyclic). `Error::Model` when the bytes are not a valid model of this
    /// version, its message starting [`INVALID_MODEL`]; `Error::Cancelled` when the interrupt
    /// hook ([`set_interrupt_check`]) said stop during the checks.
    pub fn from_bytes(b: &[u8]) -> Result<Model, Error> {
        if b.len() < 8 || &b[..8] != MAGIC {
            return Err(validate::invalid("not a tributary-learn model (bad magic)"));
        }
        let mut m: Model = ciborium::from_reader(&b[8..])
            .map_err(|e| validate::invalid(format!("cannot read model: {e}")))?;
        m.validate()?;
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
    /// How the training rows' label history was built ("blocked", "fresh", "leave-one-out";
    /// "fresh" for a model trained before 0.12.0): [`train`]'s module header.
    pub fn history(&self) -> &str {
        if self.history.is_empty() {
            "fresh"
        } else {
            &self.history
        }
    }
    /// The layout of the features (crossed paths' names after the dataset's).
    fn layout(&self) -> Layout<'_> {
        let mut paths = self.paths.clone();
        for &(a, b) in &self.cross {
            paths.push(format!("{}&{}", self.paths[a], self.paths[b]));
        }
        Layout {
            classes: self.classes.as_deref(),
            k: self.k,
            has_knn: self.has_knn,
            has_text: self.text.is_some(),
            paths,
            path_stats: self.path_stats,
            numbers: self.numbers.clone(),
            cats: self.categories.clone(),
        }
    }
}

#[cfg(test)]
mod tests;
