//! The forward validation slices on which [`Algorithm::Auto`] compares the candidate heads
//! (issue 47, "sound choices"): rolling-origin evaluation (Tashman 2000, "Out-of-sample tests of
//! forecasting accuracy: an analysis and review", Int. J. Forecasting 16(4); scikit-learn's
//! `TimeSeriesSplit`). Slice 1 is the latest `validation_fraction` of training rows by as_of
//! (else by row order), slice 2 the rows of the same count just before it, and so on; each
//! slice's candidates are fitted on the rows strictly before it and scored on it with its
//! features as stale as a test period's ([`stale_features`]). A candidate's score is the plain
//! mean of its slices' scores, as scikit-learn's `GridSearchCV` ranks a `TimeSeriesSplit` by
//! `mean_test_score` (the slices have the same count of rows but for ties, so the mean weighted
//! by rows is nearly the same).

use super::*;

/// Training rows before an earlier slice (slice 2 on), at least: below it only the latest slice
/// is used. An earlier slice's candidates are fitted on fewer rows than the latest's (60% of
/// the training rows against 80% at the default fraction), and on small tables that favours
/// the head that needs fewer rows over the one the final fit (on every row) makes better: on
/// chinook (1,071 rows before slice 2) two slices moved `auto` from 0.986 / 0.872 test accuracy /
/// macro-F1 to 0.953 / 0.786 (0.980 / 0.841 to 0.982 / 0.778 with `--embed 384`), the slice 2
/// scores 0.79-0.87 against 0.92-0.94 on the latest; on cold-pynews (about 4,800 rows before
/// slice 2) they moved it from 0.668 / 0.532 to 0.688 / 0.547 (0.671 / 0.548 to 0.691 / 0.558);
/// films (7,500) and lahman (33,000) chose the same either way (crates/learn/examples/dataset.rs,
/// 2026-11-28). 2,000 lies between the two sets that changed; no other size was tried.
pub(crate) const MIN_EARLIER_ROWS: usize = 2_000;

/// One forward validation slice; positions are indices into the training rows.
pub(crate) struct Slice {
    /// The slice's rows, in time order.
    pub(crate) valid: Vec<usize>,
    /// Every training row before the slice, sorted.
    pub(crate) early: Vec<usize>,
    /// The rows the candidates are fitted on: `early`, or past the slice's cap that many of
    /// them evenly spaced in time.
    pub(crate) fit_rows: Vec<usize>,
    /// Where the slice begins in the time order: the rows at and after it are its own and the
    /// later slices'.
    pub(crate) cut: usize,
}

/// The forward slices, latest first (empty when no slice fits): `order` the training rows'
/// positions in time order, `t_of` a position's time. Each slice has `floor(ntr * fraction)`
/// rows (`fraction` clamped to 0..0.9) ending where the later one begins, its start moved later
/// past rows of the same time (ties stay together); at most `count` (at least 1) slices, a slice
/// only when at least 2 rows are before it, and before the latest one only when the rows before
/// it are at least as many as its own and at least `min_earlier` ([`MIN_EARLIER_ROWS`] in
/// [`train`]). The latest slice's candidates are fitted on at most
/// `fit_cap` rows (0 = no cap), the others' on at most half as many: at 1M rows the six
/// candidate fits of the latest slice took 353 s on 250,000 rows each (BENCHMARKS.md, "The
/// k-NN votes at scale"); a second slice's fits on 125,000 rows (scoring as many slice rows
/// each round), its k-NN search and its text fit are estimated at +180 to +250 s (not measured
/// at 1M).
pub(crate) fn forward_slices(
    order: &[usize],
    t_of: impl Fn(usize) -> f64,
    fraction: f64,
    count: usize,
    fit_cap: usize,
    min_earlier: usize,
) -> Vec<Slice> {
    let ntr = order.len();
    let nv = (ntr as f64 * fraction.clamp(0.0, 0.9)).floor() as usize;
    let mut out: Vec<Slice> = Vec::new();
    let mut end = ntr;
    while nv > 0 && out.len() < count.max(1) && end > nv {
        let mut cut = end - nv;
        while cut < end && cut > 0 && t_of(order[cut - 1]) == t_of(order[cut]) {
            cut += 1;
        }
        if cut >= end || cut < 2 || (!out.is_empty() && cut < (end - cut).max(min_earlier)) {
            break;
        }
        let mut early = order[..cut].to_vec();
        early.sort_unstable();
        let cap = if out.is_empty() {
            fit_cap
        } else {
            (fit_cap / 2).max(usize::from(fit_cap > 0))
        };
        let fit_rows = if cap > 0 && early.len() > cap {
            let by_time = &order[..cut];
            let mut s: Vec<usize> = (0..cap).map(|i| by_time[i * cut / cap]).collect();
            s.sort_unstable();
            s
        } else {
            early.clone()
        };
        out.push(Slice {
            valid: order[cut..end].to_vec(),
            early,
            fit_rows,
            cut,
        });
        end = cut;
    }
    out
}

/// The stale features (`[slice rows, nf]` f32) of a slice's rows: computed as a test period's
/// are, without the label of any row of the slice or after it (history; the k-NN votes from the
/// lists `nb`, or a search among the rows before the slice; the text features `text_v`, from a
/// text model of the rows before the slice). `order` and `queries` as in [`train`]. Errors:
/// Cancelled (from `ctl`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn stale_features(
    ds: &Dataset,
    lay: &Layout,
    paths: &[&GroupPath],
    known: &[Option<Y>],
    queries: &[u32],
    order: &[usize],
    sl: &Slice,
    text_v: &[f32],
    nb: Neighbours,
    stage: &str,
    threads: usize,
    ctl: &dyn Control,
) -> Result<Vec<f32>, Error> {
    let mut known_v = known.to_vec();
    for &p in &order[sl.cut..] {
        known_v[queries[p] as usize] = None;
    }
    let vq: Vec<u32> = sl.valid.iter().map(|&p| queries[p]).collect();
    let ((xv, _, _), _) = polled(ctl, stage, vq.len() as u64, |sh| {
        features(ds, lay, paths, &known_v, &vq, text_v, None, nb, threads, sh)
            .ok_or(Error::Cancelled("stopped".into()))
    })?;
    Ok(xv)
}

/// Swaps the rows `rows` of `x` (`nf` a row) with the rows of `xs` (one per entry of `rows`);
/// twice puts both back.
pub(crate) fn swap_rows(x: &mut [f32], nf: usize, rows: &[usize], xs: &mut [f32]) {
    for (i, &p) in rows.iter().enumerate() {
        x[p * nf..(p + 1) * nf].swap_with_slice(&mut xs[i * nf..(i + 1) * nf]);
    }
}

/// A candidate head compared on the slices.
pub(crate) struct Candidate {
    /// "gbdt" or "logistic".
    pub(crate) head: &'static str,
    /// With the k-NN votes.
    pub(crate) knn: bool,
    /// The history scheme's index.
    pub(crate) scheme: usize,
    /// Its scores on each slice, latest first (split "validation", "validation 2", ...).
    pub(crate) metrics: Vec<MetricRow>,
    /// Its scores (`[rows, outputs]`) of the latest slice's rows.
    pub(crate) latest: Vec<f32>,
    /// The GBDT's rounds on the latest slice (0 for the logistic head).
    pub(crate) rounds: usize,
}

/// What a slice's score is compared by: accuracy, or -MAE.
pub(crate) fn better(m: &MetricRow) -> f64 {
    m.accuracy.unwrap_or(0.0) - m.mae.unwrap_or(0.0)
}

impl Candidate {
    /// The score the candidates are compared by: the mean of [`better`] over the slices.
    pub(crate) fn score(&self) -> f64 {
        self.metrics.iter().map(better).sum::<f64>() / self.metrics.len().max(1) as f64
    }
    /// The report's row of the candidate's mean over the slices (split "validation mean"; rows:
    /// all the slices' rows; accuracy, macro-F1 and MAE each the mean of the slices').
    pub(crate) fn mean_row(&self) -> MetricRow {
        let n = self.metrics.len().max(1) as f64;
        let mean = |f: fn(&MetricRow) -> Option<f64>| -> Option<f64> {
            let v: Vec<f64> = self.metrics.iter().filter_map(f).collect();
            (v.len() == self.metrics.len() && !v.is_empty()).then(|| v.iter().sum::<f64>() / n)
        };
        MetricRow {
            method: "predictor".into(),
            algorithm: self.head.into(),
            split: "validation mean".into(),
            rows: self.metrics.iter().map(|m| m.rows).sum(),
            accuracy: mean(|m| m.accuracy),
            macro_f1: mean(|m| m.macro_f1),
            mae: mean(|m| m.mae),
        }
    }
}

/// The split name of slice `j` (0 = the latest) in the report.
pub(crate) fn split_name(j: usize) -> String {
    if j == 0 {
        "validation".into()
    } else {
        format!("validation {}", j + 1)
    }
}
