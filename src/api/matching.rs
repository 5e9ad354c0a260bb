//! The native helpers of `tributary_match` and `tributary_dedup` (sql/match.sql moves them into
//! schema `tributary`): string similarity, the match probability fitted by EM, the cut for a
//! precision, dedup clusters, logistic regression, the last call's explanation.
//! The algorithms are in `service/matching.rs`.

use pgrx::prelude::*;

use crate::pg::error::{OrRaise, TributaryError};
use crate::service::{match_em, matching};

/// `tributary._string_similarity(a text, b text) → float8`: similarity of two short values in
/// `[0, 1]` (1: equal after lower-casing and folding punctuation to spaces; else normalised
/// Damerau-Levenshtein, of the values or of their sorted words, whichever is higher). NULL when
/// either is NULL or has no letter or digit: missing evidence, not a mismatch. At most 128
/// characters of each are compared.
#[pg_extern(immutable, parallel_safe, strict)]
fn _string_similarity(a: &str, b: &str) -> Option<f64> {
    matching::string_similarity(a, b)
}

/// 0.9.0's `tributary._match_threshold(scores float8[], method text) → float8` (a cut read off a
/// histogram of scores: `'minimum_error'`, Kittler and Illingworth 1986, or `'otsu'`), kept as a C
/// entry point so that a database still at 0.9.0 works with this library; no SQL is generated
/// for it (0.10.0 drops it: the cut is on a probability). Errors: 22023 unknown method.
#[pg_extern(sql = false, immutable, parallel_safe, strict)]
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

/// 0.6.0-0.9.0's `tributary._logistic_fit(x float8[], y bool[], alpha float8) → float8[]`: a
/// logistic regression (`linfa-logistic`, L-BFGS with an L2 penalty `alpha`) of `y` on `x`, `x`
/// being `[cardinality(y), d]` f64 flattened row by row; returns `[intercept, w_1 .. w_d]`, the
/// weights of `P(y = true)`. Kept as a C entry point for databases still at those versions (and
/// the update scripts that create it); no SQL is generated for it (0.10.0 drops it: labels count
/// in the EM). Errors: 22023 when the shapes do not add up, `y` holds one class only, an element
/// is NULL, or the solver fails.
#[pg_extern(sql = false, immutable, parallel_safe, strict)]
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

/// `tributary._match_em(a int[], b int[], x float8[], ux float8[], lx float8[], ly bool[],
/// rows_left float8, rows_right float8, same_table bool, one_to_one bool)`: the two-class model
/// of `tributary_match` (`service/match_em.rs`: Fellegi-Sunter with `m`, `u` and the prior
/// estimated by EM over the candidates, the prior either each row's chance of a partner, one to
/// one, or the chance that two candidates match). Pair `k` joins rows `a[k]` and `b[k]`
/// (0-based: left rows `0..rows_left`, right rows after them; one table: one numbering,
/// `same_table`); `x` is `[pairs, cols]` f64 similarities in `[0, 1]` row by row (NULL:
/// missing), `ux` the same for unrelated pairs (`[upairs, cols]`, the prior of `u`), `lx` for
/// labelled pairs (`[lpairs, cols]`, empty without labels) and `ly` their classes (true: a
/// match), which count in `m` or `u` with their class. Returns one row: `p` (each pair's match
/// probability, in the order of `a`), `prior` (two candidates' chance of matching), `partnered`
/// (the share of left and right rows with a partner), `m` and `u` (`[cols, levels]`
/// flattened), `bounds` (the levels' lower bounds: `width_bucket(x, bounds)` is a similarity's
/// level), `iterations`, `converged`. Errors: 22023 when the shapes do not add up or an index
/// or a class is negative or NULL.
#[allow(clippy::too_many_arguments, clippy::type_complexity)] // a SQL signature, one row out
#[pg_extern(immutable, parallel_safe, strict)]
fn _match_em(
    a: Vec<Option<i32>>,
    b: Vec<Option<i32>>,
    x: Vec<Option<f64>>,
    ux: Vec<Option<f64>>,
    lx: Vec<Option<f64>>,
    ly: Vec<Option<bool>>,
    rows_left: f64,
    rows_right: f64,
    same_table: bool,
    one_to_one: bool,
) -> TableIterator<
    'static,
    (
        name!(p, Vec<f64>),
        name!(prior, f64),
        name!(partnered, Vec<f64>),
        name!(m, Vec<f64>),
        name!(u, Vec<f64>),
        name!(bounds, Vec<f64>),
        name!(iterations, i32),
        name!(converged, bool),
    ),
> {
    let bad = |message: String| TributaryError::InvalidArgument {
        message,
        hint: None,
    };
    let fit = (|| {
        let idx = |v| row_indices(v).ok_or_else(|| bad("a row index is NULL or negative".into()));
        let (a, b) = (idx(a)?, idx(b)?);
        if a.is_empty() || !x.len().is_multiple_of(a.len()) {
            return Err(bad(format!(
                "{} similarities for {} pairs",
                x.len(),
                a.len()
            )));
        }
        let cols = x.len() / a.len();
        let e = match_em::Evidence::new(a, b, cols, &x).map_err(bad)?;
        if !ux.len().is_multiple_of(cols) {
            return Err(bad(format!(
                "{} unrelated similarities for {cols} columns",
                ux.len()
            )));
        }
        // (pairs identical on every column left out: likely duplicates, not unrelated rows)
        let u0 = match_em::unrelated_counts(&ux, cols);
        let ly: Vec<bool> = ly
            .into_iter()
            .collect::<Option<_>>()
            .ok_or_else(|| bad("a labelled pair's class is NULL".into()))?;
        if lx.len() != ly.len() * cols {
            return Err(bad(format!(
                "{} labelled similarities for {} labelled pairs of {cols} columns",
                lx.len(),
                ly.len()
            )));
        }
        let n_lab = ly.len();
        let labelled = if n_lab == 0 {
            None
        } else {
            Some(match_em::Evidence::new(vec![0; n_lab], vec![0; n_lab], cols, &lx).map_err(bad)?)
        };
        let sides = match_em::Sides {
            left: rows_left,
            right: rows_right,
            same_table,
        };
        // Ctrl-C and statement_timeout between two EM rounds.
        let mut cancel = || {
            pgrx::check_for_interrupts!();
        };
        let labelled = labelled.as_ref().map(|l| (l, ly.as_slice()));
        Ok(match_em::fit(
            &e,
            &u0,
            labelled,
            sides,
            one_to_one,
            500,
            &mut cancel,
        ))
    })()
    .or_raise();
    let (model, p) = fit;
    let flat = |v: &[[f64; match_em::LEVELS]]| v.iter().flatten().copied().collect::<Vec<f64>>();
    TableIterator::once((
        p,
        model.prior,
        model.partnered.to_vec(),
        flat(&model.m),
        flat(&model.u),
        match_em::BOUNDS.to_vec(),
        model.iterations as i32,
        model.converged,
    ))
}

/// Row indices from SQL (`int[]`, 0-based) as `usize`; `None` when one is NULL or negative.
fn row_indices(v: Vec<Option<i32>>) -> Option<Vec<usize>> {
    v.into_iter()
        .map(|i| i.and_then(|i| usize::try_from(i).ok()))
        .collect()
}

/// `tributary._match_cut(p float8[], min_precision float8) → float8`: the lowest cut whose
/// pairs (`p >= cut`) have a mean probability (the model's expected precision) of at least
/// `min_precision`; NULL when none has. NULL elements are left out.
#[pg_extern(immutable, parallel_safe, strict)]
fn _match_cut(p: Vec<Option<f64>>, min_precision: f64) -> Option<f64> {
    let p: Vec<f64> = p.into_iter().flatten().collect();
    match_em::cut_for_precision(&p, &vec![true; p.len()], min_precision)
}

/// `tributary._match_clusters(a int[], b int[], p float8[], threshold float8) → int[]`: the
/// clusters of `tributary_dedup` (`service/match_em.rs`, `clusters`: pairs at or above
/// `threshold`, most probable first, join clusters unless the compared pairs between the two
/// clusters average under it). Rows are `0..max(a, b)`; element `i` of the result (1-based
/// `i + 1`) is row `i`'s cluster, the smallest row index in it. Errors: 22023 when the lengths
/// differ or an element is NULL or negative.
#[pg_extern(immutable, parallel_safe, strict)]
fn _match_clusters(
    a: Vec<Option<i32>>,
    b: Vec<Option<i32>>,
    p: Vec<Option<f64>>,
    threshold: f64,
) -> Vec<i32> {
    let bad = |message: &str| TributaryError::InvalidArgument {
        message: message.into(),
        hint: None,
    };
    let parts = (|| {
        let idx = |v| row_indices(v).ok_or_else(|| bad("a row index is NULL or negative"));
        let (a, b) = (idx(a)?, idx(b)?);
        let p: Vec<f64> = p
            .into_iter()
            .collect::<Option<_>>()
            .ok_or_else(|| bad("a probability is NULL"))?;
        if a.len() != b.len() || a.len() != p.len() {
            return Err(bad("a, b and p must have the same length"));
        }
        Ok((a, b, p))
    })()
    .or_raise();
    let (a, b, p) = parts;
    let rows = a.iter().chain(&b).map(|&i| i + 1).max().unwrap_or(0);
    match_em::clusters(rows, &a, &b, &p, threshold)
        .into_iter()
        .map(|c| c as i32)
        .collect()
}

/// The last `tributary_match` call's explanation in this backend, with the roles that made it:
/// the current user (`GetUserId()`: a SECURITY DEFINER function's owner inside it) and the outer
/// user (`GetOuterUserId()`: the session's role after `SET ROLE`). It holds counts of rows that
/// role could read, which row-level security may hide from another role of the same session.
struct Remembered {
    user: pg_sys::Oid,
    outer: pg_sys::Oid,
    explanation: serde_json::Value,
}

/// (current user, outer user) now.
fn roles_now() -> (pg_sys::Oid, pg_sys::Oid) {
    // SAFETY: plain reads of the backend's user ids, on the backend's own thread.
    unsafe { (pg_sys::GetUserId(), pg_sys::GetOuterUserId()) }
}

thread_local! {
    // One value, replaced by each call (bounded: a few kilobytes per matched column).
    // Backend-local, no lock needed.
    static LAST_MATCH: std::cell::RefCell<Option<Remembered>> = const { std::cell::RefCell::new(None) };
}

/// `tributary._match_remember(explanation jsonb) → void`: keeps the explanation of this
/// session's last `tributary_match` call, for `tributary_match_explain()`, keyed by the roles
/// that made it (the current and the outer user).
#[pg_extern(volatile, parallel_unsafe, strict)]
fn _match_remember(explanation: pgrx::JsonB) {
    let (user, outer) = roles_now();
    LAST_MATCH.with(|c| {
        *c.borrow_mut() = Some(Remembered {
            user,
            outer,
            explanation: explanation.0,
        })
    });
}

/// `tributary_match_explain() → jsonb`: what this session's last `tributary_match` (or
/// `tributary_dedup`) call learned and decided: the tables and columns, candidate pairs, how
/// each column was compared, the model (per column `m` and `u` over the agreement levels, the
/// prior), the estimated number of matches, the threshold and how it was chosen, the accepted
/// pairs and their expected precision and recall. NULL before the first call, and for a role
/// other than the one that made it: the same current user and outer user (after `SET ROLE`, or
/// inside a SECURITY DEFINER function, another role's call is not shown). sql/match.sql also
/// binds this C function as `tributary._match_explain()`, which tributary_dedup calls (a name
/// no other role can overload).
#[pg_extern(volatile, parallel_unsafe)]
fn tributary_match_explain() -> Option<pgrx::JsonB> {
    let now = roles_now();
    LAST_MATCH.with(|c| {
        c.borrow()
            .as_ref()
            .filter(|r| (r.user, r.outer) == now)
            .map(|r| pgrx::JsonB(r.explanation.clone()))
    })
}
