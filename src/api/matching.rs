//! The native helpers of `tributary_match` and `tributary_dedup` (sql/match.sql moves them into
//! schema `tributary`): string similarity, thresholds without labels, logistic regression.
//! The algorithms are in `service/matching.rs`.

use pgrx::prelude::*;

use crate::pg::error::{OrRaise, TributaryError};
use crate::service::matching;

/// `tributary._string_similarity(a text, b text) → float8`: similarity of two short values in
/// `[0, 1]` (1: equal after lower-casing and folding punctuation to spaces; else normalised
/// Damerau-Levenshtein, of the values or of their sorted words, whichever is higher). NULL when
/// either is NULL or has no letter or digit: missing evidence, not a mismatch. At most 128
/// characters of each are compared.
#[pg_extern(immutable, parallel_safe, strict)]
fn _string_similarity(a: &str, b: &str) -> Option<f64> {
    matching::string_similarity(a, b)
}

/// `tributary._match_threshold(scores float8[], method text) → float8`: a cut between the low and
/// the high scores, read off their distribution without labels: `'minimum_error'` (Kittler and
/// Illingworth, 1986; falls back to Otsu) or `'otsu'` (Otsu, 1979), over a 256-bin histogram.
/// NULL with fewer than two distinct scores. Errors: 22023 unknown method.
#[pg_extern(immutable, parallel_safe, strict)]
fn _match_threshold(scores: Vec<Option<f64>>, method: &str) -> Option<f64> {
    let scores: Vec<f64> = scores.into_iter().flatten().collect();
    match method {
        "minimum_error" => matching::auto_threshold(&scores),
        "otsu" => matching::otsu_threshold(&scores),
        _ => Err::<Option<f64>, _>(TributaryError::InvalidArgument {
            message: format!("unknown threshold method {method:?}"),
            hint: Some("Use 'minimum_error' or 'otsu'.".into()),
        })
        .or_raise(),
    }
}

/// `tributary._logistic_fit(x float8[], y bool[], alpha float8) → float8[]`: a logistic regression
/// (`linfa-logistic`, L-BFGS with an L2 penalty `alpha`) of `y` on `x`, `x` being
/// `[cardinality(y), d]` f64 flattened row by row; returns `[intercept, w_1 .. w_d]`, the
/// weights of `P(y = true)`. Errors: 22023 when the shapes do not add up, `y` holds one class
/// only, an element is NULL, or the solver fails.
#[pg_extern(immutable, parallel_safe, strict)]
fn _logistic_fit(x: Vec<Option<f64>>, y: Vec<Option<bool>>, alpha: f64) -> Vec<f64> {
    let bad = |message: String| TributaryError::InvalidArgument {
        message,
        hint: Some(
            "tributary_match's labels need matches and non-matches among the candidate pairs."
                .into(),
        ),
    };
    let fit = (|| {
        let x: Vec<f64> = x
            .into_iter()
            .collect::<Option<_>>()
            .ok_or_else(|| bad("a feature value is NULL".into()))?;
        let y: Vec<bool> = y
            .into_iter()
            .collect::<Option<_>>()
            .ok_or_else(|| bad("a label is NULL".into()))?;
        if y.is_empty() || !x.len().is_multiple_of(y.len()) {
            return Err(bad(format!(
                "{} feature values for {} labels",
                x.len(),
                y.len()
            )));
        }
        matching::fit_logistic(&x, x.len() / y.len(), &y, alpha).map_err(bad)
    })()
    .or_raise();
    std::iter::once(fit.intercept).chain(fit.weights).collect()
}
