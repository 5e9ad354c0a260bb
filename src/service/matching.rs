//! The parts of matching rows (`tributary_match`, `tributary_dedup`: sql/match.sql) that are not
//! SQL: a string similarity for short, identifier-like values, logistic regression over per-column
//! similarities with labels, and 0.9.0's thresholds read off a score distribution (kept for
//! databases still at 0.9.0; the match probability without labels is `match_em.rs`'s).
//! No PostgreSQL here (the `#[pg_extern]` wrappers are in `api/matching.rs`).

use linfa::prelude::*;
use linfa_logistic::LogisticRegression;
use ndarray016::{Array1, Array2};

/// Characters of a normalised value compared by [`string_similarity`]; the rest is left out, so a
/// pair costs at most `MAX_CHARS²` steps (Damerau-Levenshtein is quadratic).
pub const MAX_CHARS: usize = 128;

/// Lower case, every run of characters that are not letters or digits as one space, trimmed, at
/// most [`MAX_CHARS`] characters: `"O'Brien,  J."` → `"o brien j"`.
fn normalise(s: &str) -> String {
    let mut out = String::with_capacity(s.len().min(MAX_CHARS * 4));
    let (mut gap, mut n) = (false, 0);
    for c in s.chars() {
        if n >= MAX_CHARS {
            break; // the rest of a huge value is never read
        }
        if c.is_alphanumeric() {
            if gap && !out.is_empty() {
                out.push(' ');
                n += 1;
            }
            gap = false;
            for l in c.to_lowercase() {
                out.push(l);
                n += 1;
            }
        } else {
            gap = true;
        }
    }
    out.chars().take(MAX_CHARS).collect()
}

/// Similarity of two short values in `[0, 1]`: 1 for values equal after [`normalise`], else the
/// larger of the normalised Damerau-Levenshtein similarity (`strsim`, 1 - edits / longer length)
/// of the two values and of their words sorted (so `"smith john"` matches `"john smith"`).
/// `None` when either value has no letter or digit (missing evidence, not a mismatch). Edit
/// distance over characters suits names, numbers, codes and phone-like values with typing errors
/// (Christen, "Data Matching", Springer 2012, ch. 5); long texts are compared by embeddings instead.
pub fn string_similarity(a: &str, b: &str) -> Option<f64> {
    let (a, b) = (normalise(a), normalise(b));
    if a.is_empty() || b.is_empty() {
        return None;
    }
    if a == b {
        return Some(1.0);
    }
    let direct = strsim::normalized_damerau_levenshtein(&a, &b);
    let sorted = |s: &str| {
        let mut w: Vec<&str> = s.split(' ').collect();
        w.sort_unstable();
        w.join(" ")
    };
    let (sa, sb) = (sorted(&a), sorted(&b));
    let by_words = if sa == sb {
        1.0
    } else {
        strsim::normalized_damerau_levenshtein(&sa, &sb)
    };
    Some(direct.max(by_words))
}

/// Bins of the histogram the thresholds are computed over.
const BINS: usize = 256;

/// The histogram of `scores` (finite values only) over `[min, max]`: counts per bin, the bins'
/// centres. `None` with fewer than 2 distinct finite values.
fn histogram(scores: &[f64]) -> Option<(Vec<f64>, Vec<f64>)> {
    let finite: Vec<f64> = scores.iter().copied().filter(|s| s.is_finite()).collect();
    let lo = finite.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = finite.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if finite.len() < 2 || hi <= lo {
        return None;
    }
    let width = (hi - lo) / BINS as f64;
    let mut counts = vec![0.0; BINS];
    for s in finite {
        let b = (((s - lo) / width) as usize).min(BINS - 1);
        counts[b] += 1.0;
    }
    let centres = (0..BINS).map(|b| lo + (b as f64 + 0.5) * width).collect();
    Some((counts, centres))
}

/// Otsu's threshold (N. Otsu, "A threshold selection method from gray-level histograms", IEEE
/// Trans. SMC 9(1), 1979): the cut of a 256-bin histogram of `scores` that maximises the variance
/// between the two classes. Values above it are the upper class. `None` with fewer than two
/// distinct values.
pub fn otsu_threshold(scores: &[f64]) -> Option<f64> {
    let (counts, centres) = histogram(scores)?;
    let total: f64 = counts.iter().sum();
    let sum_all: f64 = counts.iter().zip(&centres).map(|(c, x)| c * x).sum();
    let (mut w0, mut sum0, mut best, mut cut) = (0.0, 0.0, -1.0, None);
    for b in 0..BINS - 1 {
        w0 += counts[b];
        sum0 += counts[b] * centres[b];
        let w1 = total - w0;
        if w0 == 0.0 || w1 == 0.0 {
            continue;
        }
        let (m0, m1) = (sum0 / w0, (sum_all - sum0) / w1);
        let between = w0 * w1 * (m0 - m1) * (m0 - m1);
        if between > best {
            best = between;
            cut = Some((centres[b] + centres[b + 1]) / 2.0);
        }
    }
    cut
}

/// The threshold between two classes of `scores` without labels: Kittler and Illingworth's
/// minimum-error threshold (J. Kittler, J. Illingworth, "Minimum error thresholding", Pattern
/// Recognition 19(1), 1986), which fits a Gaussian to each side of every cut of a 256-bin
/// histogram, with its own weight and spread, and keeps the cut with the smallest classification
/// error, so classes of very unequal sizes (few true pairs among many candidates) are cut at
/// their valley, where Otsu's threshold moves into the smaller class. Cuts that leave either side
/// with under 1% of the scores, or that fall outside the two sides' means, are not taken; when
/// none is left, Otsu's threshold. `None` with fewer than two distinct values.
pub fn auto_threshold(scores: &[f64]) -> Option<f64> {
    let (counts, centres) = histogram(scores)?;
    let total: f64 = counts.iter().sum();
    let width = centres[1] - centres[0];
    // A spread of at least half a bin: a side of equal scores would otherwise have ln 0.
    let floor = width / 2.0;
    let (mut best, mut cut) = (f64::INFINITY, None);
    for b in 0..BINS - 1 {
        let side = |range: std::ops::Range<usize>| {
            let n: f64 = counts[range.clone()].iter().sum();
            if n == 0.0 {
                return None;
            }
            let mean = range.clone().map(|i| counts[i] * centres[i]).sum::<f64>() / n;
            let var = range
                .map(|i| counts[i] * (centres[i] - mean).powi(2))
                .sum::<f64>()
                / n;
            Some((n / total, mean, var.sqrt().max(floor)))
        };
        let (Some((p0, m0, s0)), Some((p1, m1, s1))) = (side(0..b + 1), side(b + 1..BINS)) else {
            continue;
        };
        if p0 < 0.01 || p1 < 0.01 {
            continue;
        }
        let t = (centres[b] + centres[b + 1]) / 2.0;
        if t <= m0 || t >= m1 {
            continue;
        }
        let j = p0 * s0.ln() + p1 * s1.ln() - p0 * p0.ln() - p1 * p1.ln();
        if j < best {
            best = j;
            cut = Some(t);
        }
    }
    cut.or_else(|| otsu_threshold(scores))
}

/// A logistic regression fitted by [`fit_logistic`]: `P(match | x) = 1 / (1 + exp(-(intercept +
/// weights · x)))`.
#[derive(Debug, Clone, PartialEq)]
pub struct Logistic {
    pub intercept: f64,
    pub weights: Vec<f64>,
}

/// Fits a logistic regression (`linfa-logistic`: L-BFGS, L2 penalty `alpha`) to `x`, row-major
/// `[rows, dims]` f64, and `y`, one bool per row. Errors (as text): a shape that does not add up,
/// a single class (nothing to learn), or the solver's own error.
pub fn fit_logistic(x: &[f64], dims: usize, y: &[bool], alpha: f64) -> Result<Logistic, String> {
    if dims == 0 || x.len() != dims * y.len() || y.is_empty() {
        return Err(format!(
            "{} feature values are not {} rows of {} features",
            x.len(),
            y.len(),
            dims
        ));
    }
    if y.iter().all(|&v| v) || y.iter().all(|&v| !v) {
        return Err(format!(
            "all {} labelled pairs are {}: logistic regression needs both matches and non-matches",
            y.len(),
            if y[0] { "matches" } else { "non-matches" }
        ));
    }
    let records = Array2::from_shape_vec((y.len(), dims), x.to_vec()).map_err(|e| e.to_string())?;
    let targets = Array1::from_iter(y.iter().copied());
    let data = Dataset::new(records, targets);
    let model = LogisticRegression::default()
        .alpha(alpha)
        .max_iterations(200)
        .fit(&data)
        .map_err(|e| e.to_string())?;
    // linfa orders the two labels itself: make the weights those of P(true).
    let sign = if model.labels().pos.class { 1.0 } else { -1.0 };
    Ok(Logistic {
        intercept: sign * model.intercept(),
        weights: model.params().iter().map(|w| sign * w).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_similarity_of_names_numbers_and_missing_values() {
        assert_eq!(string_similarity("O'Brien,  J.", "o brien j"), Some(1.0));
        assert_eq!(string_similarity("john smith", "Smith John"), Some(1.0));
        let typo = string_similarity("jonathan", "jonathon").unwrap();
        assert!((typo - 0.875).abs() < 1e-9, "{typo}");
        let swap = string_similarity("4712", "4721").unwrap();
        assert!((swap - 0.75).abs() < 1e-9, "{swap}");
        assert!(string_similarity("jonathan", "mcdonald").unwrap() < 0.3);
        assert_eq!(string_similarity("---", "x"), None);
        let long = "a".repeat(10_000);
        assert_eq!(string_similarity(&long, &long[..5_000]), Some(1.0));
    }

    #[test]
    fn thresholds_cut_between_two_classes() {
        // 900 low scores around 0.3, 100 high ones around 0.9 (bell-shaped: the sum of two
        // low-discrepancy sequences): both cut between them.
        let bell = |i: usize, centre: f64| {
            let u = |a: f64| (i as f64 * a).fract();
            centre + 0.1 * (u(0.618_033_988) + u(0.414_213_562) - 1.0)
        };
        let mut s: Vec<f64> = (0..900).map(|i| bell(i, 0.3)).collect();
        s.extend((0..100).map(|i| bell(i, 0.9)));
        for t in [otsu_threshold(&s).unwrap(), auto_threshold(&s).unwrap()] {
            assert!(t > 0.35 && t < 0.85, "{t}");
        }
        assert_eq!(auto_threshold(&[0.5, 0.5]), None);
        assert_eq!(otsu_threshold(&[0.5]), None);
    }

    #[test]
    fn logistic_regression_learns_which_feature_matters() {
        // Feature 0 decides the label, feature 1 is noise.
        let (mut x, mut y) = (Vec::new(), Vec::new());
        for i in 0..200 {
            let m = i % 2 == 0;
            x.push(if m { 0.8 } else { 0.2 } + (i % 7) as f64 / 100.0);
            x.push((i % 5) as f64 / 5.0);
            y.push(m);
        }
        let fit = fit_logistic(&x, 2, &y, 0.1).unwrap();
        assert!(fit.weights[0] > 1.0 && fit.weights[0].abs() > 3.0 * fit.weights[1].abs());
        let p = |a: f64, b: f64| {
            1.0 / (1.0 + (-(fit.intercept + fit.weights[0] * a + fit.weights[1] * b)).exp())
        };
        assert!(p(0.85, 0.5) > 0.5 && p(0.15, 0.5) < 0.5);
        assert!(fit_logistic(&x, 3, &y, 0.1).is_err());
        assert!(fit_logistic(&x[..4], 2, &[true, true], 0.1).is_err());
    }
}
