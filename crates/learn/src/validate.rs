//! A model read from bytes is checked before anything applies it (issue 46): stored bytes are
//! data, and a tree whose child points back to an ancestor would loop forever in a prediction,
//! an index past a vector's end would panic. [`Model::from_bytes`] calls [`Model::validate`]; a
//! model that fails it is `Error::Model` with a message starting [`INVALID_MODEL`].
//!
//! What is checked (every index a prediction follows, every length it relies on):
//! - classes: at least one; the head's and the text model's outputs are one per class (one
//!   output for a number label), softmax for classes and not for numbers;
//! - `feature_names` and `importance` have one entry per feature of the layout (`k`, k-NN,
//!   text, paths, numbers, categories); `k` in `1..=`[`MAX_K`], `threads` at most [`MAX_THREADS`];
//! - GBDT trees: every node a leaf or a split of a feature in range whose two children come
//!   after it in the node vector (so a traversal ends within as many steps as the tree has
//!   nodes), `base` one value per output, `cuts` one list per feature, `rounds x outputs` trees;
//! - linear models: `w` is `dim x k`, `b` is `k`; the logistic head's per-feature vectors and
//!   one-hot ranges lie within its `dim`; the TF-IDF idf has one value per term.
//!
//! The checks are linear in the model's size (as its deserialisation is); they poll the
//! interrupt hook ([`set_interrupt_check`]) every [`POLL_EVERY`] items and return
//! `Error::Cancelled` when it says stop.

use super::*;
use std::sync::RwLock;

/// The prefix of every validation error's message (`Error::Model`).
pub const INVALID_MODEL: &str = "invalid predictor model";

/// The largest `k` (neighbours of the k-NN vote) a stored model may have.
pub const MAX_K: usize = 100_000;

/// The most threads a stored model may ask for.
pub const MAX_THREADS: usize = 1024;

/// Items (tree nodes, weights) checked between two polls of the interrupt hook.
pub(crate) const POLL_EVERY: usize = 1 << 16;

static INTERRUPT_CHECK: RwLock<Option<fn() -> bool>> = RwLock::new(None);

/// Sets (or with `None` clears) the hook that long loops over model data outside a
/// [`Control`] poll (the checks of [`Model::from_bytes`]): `f()` returns true when the caller
/// should stop (a cancel, statement_timeout or terminate is pending); the loop then returns
/// `Error::Cancelled`. It is called on the thread that reads the model, so it must only read
/// flags (no `longjmp`). Process-wide; without a hook nothing is polled.
pub fn set_interrupt_check(f: Option<fn() -> bool>) {
    *INTERRUPT_CHECK.write().unwrap_or_else(|e| e.into_inner()) = f;
}

/// Whether the hook says stop (false without a hook).
pub(crate) fn interrupted() -> bool {
    let f = *INTERRUPT_CHECK.read().unwrap_or_else(|e| e.into_inner());
    f.is_some_and(|f| f())
}

/// `Error::Model("invalid predictor model: {why}")`.
pub(crate) fn invalid(why: impl fmt::Display) -> Error {
    Error::Model(format!("{INVALID_MODEL}: {why}"))
}

impl Model {
    /// Checks that the model can be applied: every index in range, every tree acyclic, the
    /// outputs consistent with the classes (this module's header). Called by
    /// [`Model::from_bytes`]; `Error::Model` (message [`INVALID_MODEL`]: ...) when it fails,
    /// `Error::Cancelled` when the interrupt hook says stop.
    pub fn validate(&self) -> Result<(), Error> {
        if self.classes.as_ref().is_some_and(|c| c.is_empty()) {
            return Err(invalid("a category label without classes"));
        }
        let kout = self.classes.as_ref().map_or(1, |c| c.len());
        let softmax = self.classes.is_some();
        if !(1..=MAX_K).contains(&self.k) {
            return Err(invalid(format!("k = {} is outside 1..={MAX_K}", self.k)));
        }
        if self.threads > MAX_THREADS {
            return Err(invalid(format!(
                "{} threads, more than {MAX_THREADS}",
                self.threads
            )));
        }
        if let Some(&(a, b)) = self
            .cross
            .iter()
            .find(|&&(a, b)| a >= self.paths.len() || b >= self.paths.len() || a == b)
        {
            return Err(invalid(format!(
                "crossed path ({a}, {b}) of {} paths",
                self.paths.len()
            )));
        }
        let lay = self.layout();
        let nf = lay.nf();
        if self.feature_names.len() != nf || self.importance.len() != nf {
            return Err(invalid(format!(
                "{} feature names and {} importances for {nf} features",
                self.feature_names.len(),
                self.importance.len()
            )));
        }
        if let Some(tm) = &self.text {
            if tm.tfidf.idf.len() != tm.tfidf.terms.len() {
                return Err(invalid(format!(
                    "{} idf values for {} terms",
                    tm.tfidf.idf.len(),
                    tm.tfidf.terms.len()
                )));
            }
            tm.lin
                .check(lay.text_w(), softmax)
                .map_err(|e| invalid(format!("text model: {e}")))?;
        }
        match &self.head {
            Head::Gbdt(g) => {
                if self.algorithm != "gbdt" {
                    return Err(invalid(format!(
                        "algorithm \"{}\" with a gbdt head",
                        self.algorithm
                    )));
                }
                g.check(nf, kout, &mut || interrupted())
                    .map_err(|e| match e {
                        None => Error::Cancelled("interrupt pending".into()),
                        Some(e) => invalid(format!("gbdt: {e}")),
                    })?;
            }
            Head::Logistic(h) => {
                if self.algorithm != "logistic" {
                    return Err(invalid(format!(
                        "algorithm \"{}\" with a logistic head",
                        self.algorithm
                    )));
                }
                check_lin_head(h, nf, kout, softmax)
                    .map_err(|e| invalid(format!("logistic: {e}")))?;
            }
        }
        Ok(())
    }
}

fn check_lin_head(h: &LinHead, nf: usize, kout: usize, softmax: bool) -> Result<(), String> {
    if h.onehot.len() != nf || h.mean.len() != nf || h.std.len() != nf {
        return Err(format!(
            "{} one-hot entries, {} means, {} deviations for {nf} features",
            h.onehot.len(),
            h.mean.len(),
            h.std.len()
        ));
    }
    if h.lin.dim != h.dim {
        return Err(format!(
            "a linear model of dimension {} for {} inputs",
            h.lin.dim, h.dim
        ));
    }
    for (f, o) in h.onehot.iter().enumerate() {
        if let Some((off, size)) = *o {
            if off.checked_add(size).is_none_or(|end| end > h.dim) {
                return Err(format!(
                    "feature {f}'s one-hot range {off}+{size} is past dimension {}",
                    h.dim
                ));
            }
        } else if f >= h.dim {
            return Err(format!("feature {f} is past dimension {}", h.dim));
        }
    }
    h.lin.check(kout, softmax)
}
