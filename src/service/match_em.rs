//! The match probability of `tributary_match` without labels: a two-class model of the candidate
//! pairs' per-column evidence fitted by expectation-maximisation, and the clusters of
//! `tributary_dedup`. No PostgreSQL here (the `#[pg_extern]` wrappers are in `api/matching.rs`).
//!
//! The model is Fellegi and Sunter's ("A theory for record linkage", JASA 64(328), 1969): each
//! column's evidence (a similarity in `[0, 1]`, or missing) falls into one of [`LEVELS`]
//! agreement levels, and given the class (match or not) the columns are independent, so
//! `P(match | levels) = λ Π m_j[l_j] / (λ Π m_j[l_j] + (1 - λ) Π u_j[l_j])`, with `m_j[l]` the
//! share of matches and `u_j[l]` the share of non-matches whose column `j` is at level `l`, and
//! `λ` the share of candidate pairs that match. All of `m`, `u` (among the candidates, with the
//! levels of random pairs as its prior) and `λ` are estimated by EM
//! (Winkler, "Using the EM algorithm for weight computation in the Fellegi-Sunter model of record
//! linkage", 1988; Splink does the same at scale). A missing value leaves its column out of the
//! product (missing evidence, not a mismatch).
//!
//! One to one inside the fit: a row has at most one partner, so the match responsibilities of
//! one row's candidates may add up to at most 1. After each E-step every pair's responsibility is
//! divided by the largest of 1 and the sums over its two rows (a soft assignment constraint, as in
//! Jaro's 1989 one-to-one linkage, taken inside EM): two candidates of one row that both look
//! like matches share one match, and the M-step learns `m` from pairs that are matches rather
//! than from every near duplicate.

/// Lower bounds of the agreement levels 1..=4 of a similarity in `[0, 1]` (level 0 below the
/// first): `< 0.4` disagrees, `0.4..0.75` partly agrees, `0.75..0.92` nearly agrees (a typing
/// error in a short value), `0.92..1` agrees but for a detail, `1` equal. The similarities are
/// rescaled first so that unrelated pairs typically score 0 (sql/match.sql, step 3).
pub const BOUNDS: [f64; 4] = [0.4, 0.75, 0.92, 0.9999];

/// Number of agreement levels.
pub const LEVELS: usize = BOUNDS.len() + 1;

/// The level of marker of missing evidence in [`Evidence::levels`].
pub const MISSING: u8 = u8::MAX;

/// Labels of the levels, in order, as the explanation shows them.
pub const LEVEL_NAMES: [&str; LEVELS] = ["< 0.4", "0.4-0.75", "0.75-0.92", "0.92-1", "1"];

/// The agreement level of a similarity (`None`: missing).
pub fn level(s: Option<f64>) -> u8 {
    match s {
        Some(s) if s.is_finite() => BOUNDS.iter().filter(|&&b| s >= b).count() as u8,
        _ => MISSING,
    }
}

/// The candidate pairs' evidence: pair `k` joins rows `a[k]` and `b[k]` (indices into one space
/// of rows: two tables' rows get distinct indices), and has `levels[k * cols + j]` for column
/// `j` ([`MISSING`] when a value is missing).
#[derive(Debug, Clone)]
pub struct Evidence {
    pub a: Vec<usize>,
    pub b: Vec<usize>,
    pub cols: usize,
    pub levels: Vec<u8>,
}

impl Evidence {
    /// From similarities `x`, `[pairs, cols]` row-major, `None` missing. Errors (as text) when
    /// the shapes do not add up.
    pub fn new(
        a: Vec<usize>,
        b: Vec<usize>,
        cols: usize,
        x: &[Option<f64>],
    ) -> Result<Self, String> {
        if a.len() != b.len() || cols == 0 || x.len() != a.len() * cols {
            return Err(format!(
                "{} similarities are not {} pairs of {} columns",
                x.len(),
                a.len(),
                cols
            ));
        }
        Ok(Evidence {
            a,
            b,
            cols,
            levels: x.iter().map(|&s| level(s)).collect(),
        })
    }

    pub fn pairs(&self) -> usize {
        self.a.len()
    }

    fn rows(&self) -> usize {
        self.a
            .iter()
            .chain(&self.b)
            .map(|&i| i + 1)
            .max()
            .unwrap_or(0)
    }
}

/// Whether a pair's levels are all the top one: its values are equal on every compared column
/// (after the comparison's own normalisation: case, punctuation, word order), none missing. Two
/// missing values are no evidence, so never identical.
pub fn identical(levels: &[u8]) -> bool {
    levels.iter().all(|&l| usize::from(l) == LEVELS - 1)
}

/// The level counts of the unrelated pairs `ux` (`[pairs, cols]` similarities row by row, `None`
/// missing), the prior of `u` in [`fit`]; a trailing incomplete pair is left out. A pair
/// identical on every column ([`identical`]) is left out too: `u` read off random pairs
/// assumes they are non-matches (Splink's `estimate_u_using_random_sampling`, Linacre et al.,
/// IJPDS 7(3), 2022), true where a table has thousands of rows, but of a small table's pairs
/// its duplicates are a large share (two exact pairs among five rows: 2 of 10, which made `u`
/// of equality 0.2 and identical values score 0). Two different things identical on every
/// compared column are rare among random pairs; where they are common (one column of a few
/// frequent values) in a large table, the candidates, which outweigh the prior, still teach
/// `u`; in a small one, rows identical on every compared column are taken for one thing.
pub fn unrelated_counts(ux: &[Option<f64>], cols: usize) -> Vec<[f64; LEVELS]> {
    let mut counts = vec![[0.0; LEVELS]; cols];
    if cols == 0 {
        return counts;
    }
    for pair in ux.chunks_exact(cols) {
        let levels: Vec<u8> = pair.iter().map(|&s| level(s)).collect();
        if identical(&levels) {
            continue;
        }
        for (c, &l) in counts.iter_mut().zip(&levels) {
            if l != MISSING {
                c[usize::from(l)] += 1.0;
            }
        }
    }
    counts
}

/// The exact pairs among the candidates: identical on every column ([`identical`]), each of
/// their two rows identical to no other candidate. A value combination that only two rows hold
/// is the deterministic rule of exact matching; one that three or more share (a town, when it is
/// the only column) is left out, as agreement on a frequent value is weak evidence (Winkler's
/// frequency-based weights; Splink's term-frequency adjustments).
pub fn exact_pairs(e: &Evidence) -> usize {
    let mut per_row = vec![0usize; e.rows()];
    let same: Vec<bool> = (0..e.pairs())
        .map(|k| identical(&e.levels[k * e.cols..(k + 1) * e.cols]))
        .collect();
    for k in (0..e.pairs()).filter(|&k| same[k]) {
        per_row[e.a[k]] += 1;
        per_row[e.b[k]] += 1;
    }
    (0..e.pairs())
        .filter(|&k| same[k] && per_row[e.a[k]] == 1 && per_row[e.b[k]] == 1)
        .count()
}

/// A fitted model: `prior` = λ, `m[j][l]`, `u[j][l]` (each column's levels sum to 1).
#[derive(Debug, Clone, PartialEq)]
pub struct FsModel {
    pub prior: f64,
    /// With one to one: the estimated share of the left and of the right rows that have a
    /// partner (one table: both the same).
    pub partnered: [f64; 2],
    pub m: Vec<[f64; LEVELS]>,
    pub u: Vec<[f64; LEVELS]>,
    pub iterations: usize,
    pub converged: bool,
}

impl FsModel {
    /// The log Bayes factor (natural log) of level `l` of column `j`: ln(m / u), the column's
    /// Fellegi-Sunter weight; 0 for a missing value.
    pub fn weight(&self, j: usize, l: u8) -> f64 {
        if l == MISSING {
            0.0
        } else {
            (self.m[j][l as usize] / self.u[j][l as usize]).ln()
        }
    }

    /// The log likelihood ratio of a pair with these levels: the sum of the columns' weights.
    pub fn log_lr(&self, levels: &[u8]) -> f64 {
        levels
            .iter()
            .enumerate()
            .map(|(j, &l)| self.weight(j, l))
            .sum()
    }

    /// The posterior probability of a match of a pair with these levels under prior `λ`.
    pub fn posterior(&self, levels: &[u8]) -> f64 {
        let odds = (self.prior / (1.0 - self.prior)).ln() + self.log_lr(levels);
        1.0 / (1.0 + (-odds).exp())
    }
}

/// Pseudo-pairs of the Dirichlet prior added to `m` in each M-step, spread over the levels as
/// `m`'s start is: no level gets probability 0, so one unseen level never decides a pair by
/// itself, and a few pairs cannot pull `m` far from its start, while thousands decide it.
const PSEUDO: f64 = 4.0;

/// Pseudo-count added to every level's count among the unrelated pairs when `u` is read off
/// them (Laplace's rule, halved): a level no unrelated pair has gets `u` = 0.5 / (pairs + 2.5),
/// which caps the weight of agreeing on an identifier at about ln(2 x pairs).
const U_PSEUDO: f64 = 0.5;

/// Pseudo-pairs of the prior of `u` among the candidates, spread as among unrelated pairs.
const U_PRIOR_PAIRS: f64 = 100.0;

/// The two tables' sizes, which the priors are shares of: `left` and `right` rows (one table:
/// `same_table`, both its row count). Rows are numbered `0..left` and then (two tables)
/// `left..left + right` in [`Evidence`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sides {
    pub left: f64,
    pub right: f64,
    pub same_table: bool,
}

/// Fits the model by EM over the candidate pairs (Winkler 1988: `m`, `u` and the prior all
/// estimated). `u` is the non-matches' level shares *among the candidates*, not among random
/// pairs as in Splink (Linacre et al., IJPDS 7(3), 2022): the candidates are chosen because they
/// look alike, so agreeing on a value that whole families of rows share (a maintainer team, a
/// section, a half-similar title) is common among candidate non-matches and weighs little, which
/// random pairs hide. `u_counts[j]`: column `j`'s level counts among random pairs of the two
/// sides ([`unrelated_counts`]), the prior of `u` ([`U_PRIOR_PAIRS`] pseudo-pairs; `u` starts
/// at every candidate's levels). `m` starts at mostly equal values (level shares 0.02, 0.03, 0.1, 0.25, 0.6).
/// `labelled`: pairs whose class is known (`true` a match), with their levels; each counts in
/// every M-step with its known class (in `m` or in `u`), as one pair, not in the prior (Winkler's
/// EM with some pairs' classes fixed). Their own probabilities the caller sets.
/// Measured (`bash benches/match_em.sh all`, BENCHMARKS.md): on the real set where 10% of the
/// rows have a partner F1 0.620 -> 0.858 against `u` from random pairs, FEBRL and the set where
/// every row has one within 0.004.
///
/// The prior, two ways:
/// - `one_to_one`: each row has a partner on the other side with probability `π` (one per
///   side, estimated), equally likely any of the row's candidates, so a pair's probability is
///   its row's share of the evidence: `P_v(k) = (π / c) LR_k / ((1 - π) + (π / c) Σ_j LR_j)`
///   over row `v`'s `c` candidates `j` (`LR` the product of the columns' `m / u`; a partner
///   outside the candidates is not found), and the pair's probability is
///   the smaller of its two rows' views. Two candidates of one row share one match, and a row
///   whose best candidate is far ahead of the rest gets it when most rows have a partner.
/// - otherwise (duplicates within a table: a row may have several): `λ`, the share of the
///   candidate pairs that match; matches outside the candidates are taken to be none.
///
/// A floor under the prior: the [`exact_pairs`] are matches, so the share of candidates that
/// match is at least theirs (`λ`), and so is the share of rows with a partner (`π`, one to
/// one). Splink sets `λ` the same way, from the pairs a strict deterministic rule accepts over
/// the rule's recall (`estimate_probability_two_random_records_match`); here the rule's recall
/// is taken as 1, so the count is a lower bound the EM may rise above, never sink under. Without
/// it, a few pairs whose likelihood ratio starts below 1 / (their share of the candidates) drive
/// the EM to `λ` near 0 (five rows, two exact pairs: `λ` 1.6e-7), and identical rows score 0.
/// Without exact pairs the floor is 0 and the fit is as before.
///
/// Stops when no parameter moves by more than 1e-6 (priors relatively) or after `max_iter`
/// rounds; `each_round` runs before every round (the caller checks for a cancel there). Returns
/// the model and every pair's match probability.
pub fn fit(
    e: &Evidence,
    u_counts: &[[f64; LEVELS]],
    labelled: Option<(&Evidence, &[bool])>,
    sides: Sides,
    one_to_one: bool,
    max_iter: usize,
    each_round: &mut dyn FnMut(),
) -> (FsModel, Vec<f64>) {
    let (n, cols) = (e.pairs(), e.cols);
    let m0 = [0.02, 0.03, 0.1, 0.25, 0.6];
    // The unrelated pairs' level shares: the Dirichlet prior of `u` among the candidates.
    let u_random: Vec<[f64; LEVELS]> = (0..cols)
        .map(|j| {
            let c = u_counts.get(j).copied().unwrap_or([0.0; LEVELS]);
            let total: f64 = c.iter().map(|x| x.max(0.0)).sum::<f64>() + U_PSEUDO * LEVELS as f64;
            c.map(|x| (x.max(0.0) + U_PSEUDO) / total)
        })
        .collect();
    // `u` starts as every candidate's levels (matches are a small share of them).
    let u = mstep_u(e, &vec![0.0; n], &u_random, labelled);
    let start_m = vec![m0; cols];
    let sides = Sides {
        left: sides.left.max(1.0),
        right: sides.right.max(1.0),
        ..sides
    };
    // The prior λ is the share of the candidate pairs that match: `u` is estimated among them.
    let candidates = (n as f64).max(1.0);
    // Floors under λ and π: the exact pairs' share of the candidates and of each side's rows.
    let exact = exact_pairs(e) as f64;
    let prior_floor = exact / candidates;
    let partnered_floor = if sides.same_table {
        [2.0 * exact / sides.left; 2]
    } else {
        [exact / sides.left, exact / sides.right]
    };
    let partner_share = |x: f64, side: usize| x.max(partnered_floor[side]).clamp(1e-6, 1.0 - 1e-6);
    let mut model = FsModel {
        prior: 0.0,
        partnered: [0.5, 0.5],
        m: start_m.clone(),
        u,
        iterations: 0,
        converged: false,
    };
    if n == 0 {
        return (model, Vec::new());
    }
    model.prior = (0.5 * sides.left.min(sides.right) / candidates)
        .max(prior_floor)
        .clamp(1e-12, 0.5);
    model.partnered = [partner_share(0.5, 0), partner_share(0.5, 1)];
    let mut p = vec![0.0; n];
    for it in 1..=max_iter {
        each_round();
        estep(e, &model, sides, one_to_one, &mut p);
        let m = mstep(e, &p, &start_m, labelled);
        let u = mstep_u(e, &p, &u_random, labelled);
        let matches: f64 = p.iter().sum();
        let prior = (matches / candidates).max(prior_floor).clamp(1e-12, 0.5);
        let partnered = if sides.same_table {
            let s = partner_share(2.0 * matches / sides.left, 0);
            [s, s]
        } else {
            [
                partner_share(matches / sides.left, 0),
                partner_share(matches / sides.right, 1),
            ]
        };
        let relative = |x: f64, y: f64| (x - y).abs() / x.max(1e-12);
        let moved = model
            .m
            .iter()
            .chain(&model.u)
            .zip(m.iter().chain(&u))
            .flat_map(|(x, y)| x.iter().zip(y).map(|(a, b)| (a - b).abs()))
            .fold(
                relative(model.prior, prior)
                    .max(relative(model.partnered[0], partnered[0]))
                    .max(relative(model.partnered[1], partnered[1])),
                f64::max,
            );
        model.m = m;
        model.u = u;
        model.prior = prior;
        model.partnered = partnered;
        model.iterations = it;
        if moved < 1e-6 {
            model.converged = true;
            break;
        }
    }
    estep(e, &model, sides, one_to_one, &mut p);
    (model, p)
}

/// Every pair's match probability under `model`: with `one_to_one` each row's share of the
/// evidence, the smaller of the pair's two rows' (see [`fit`]); else the Fellegi-Sunter
/// posterior with prior `λ`.
fn estep(e: &Evidence, model: &FsModel, sides: Sides, one_to_one: bool, p: &mut [f64]) {
    if !one_to_one {
        for (k, pk) in p.iter_mut().enumerate() {
            *pk = model.posterior(&e.levels[k * e.cols..(k + 1) * e.cols]);
        }
        return;
    }
    let lr: Vec<f64> = (0..e.pairs())
        .map(|k| model.log_lr(&e.levels[k * e.cols..(k + 1) * e.cols]))
        .collect();
    // ln Σ LR over each row's candidates (log-sum-exp: LR reaches e^100).
    let rows = e.rows();
    let mut top = vec![f64::NEG_INFINITY; rows];
    for (k, &l) in lr.iter().enumerate() {
        top[e.a[k]] = top[e.a[k]].max(l);
        top[e.b[k]] = top[e.b[k]].max(l);
    }
    let (mut sum, mut count) = (vec![0.0; rows], vec![0usize; rows]);
    for (k, &l) in lr.iter().enumerate() {
        sum[e.a[k]] += (l - top[e.a[k]]).exp();
        sum[e.b[k]] += (l - top[e.b[k]]).exp();
        count[e.a[k]] += 1;
        count[e.b[k]] += 1;
    }
    let view = |v: usize, l: f64| {
        let pi = if sides.same_table || (v as f64) < sides.left {
            model.partnered[0]
        } else {
            model.partnered[1]
        };
        // A partner is one of the row's candidates, any of them a priori.
        let others = count[v].max(1) as f64;
        let lp = (pi / others).ln();
        let lse = top[v] + sum[v].ln();
        let (x, y) = ((1.0 - pi).ln(), lp + lse);
        let den = x.max(y) + (1.0 + (-(x - y).abs()).exp()).ln();
        (lp + l - den).exp().min(1.0)
    };
    for (k, pk) in p.iter_mut().enumerate() {
        *pk = view(e.a[k], lr[k]).min(view(e.b[k], lr[k]));
    }
}

/// Adds each pair's levels to `counts`, pair `k` weighted by `w(k)`.
fn count_levels(counts: &mut [[f64; LEVELS]], e: &Evidence, w: impl Fn(usize) -> f64) {
    let cols = e.cols;
    for k in 0..e.pairs() {
        let wk = w(k);
        if wk == 0.0 {
            continue;
        }
        for (c, &l) in counts.iter_mut().zip(&e.levels[k * cols..(k + 1) * cols]) {
            if l != MISSING {
                c[l as usize] += wk;
            }
        }
    }
}

/// The M-step: `m` from the levels weighted by `p`, plus the labelled matches and the prior's
/// pseudo-pairs.
fn mstep(
    e: &Evidence,
    p: &[f64],
    start_m: &[[f64; LEVELS]],
    labelled: Option<(&Evidence, &[bool])>,
) -> Vec<[f64; LEVELS]> {
    let mut cm: Vec<[f64; LEVELS]> = start_m.iter().map(|d| d.map(|x| PSEUDO * x)).collect();
    count_levels(&mut cm, e, |k| p[k]);
    if let Some((le, y)) = labelled {
        count_levels(&mut cm, le, |k| f64::from(u8::from(y[k])));
    }
    cm.into_iter()
        .map(|c| {
            let s: f64 = c.iter().sum();
            c.map(|x| x / s)
        })
        .collect()
}

/// `u` among the candidates: the levels weighted by `1 - p`, plus the labelled non-matches and
/// [`U_PRIOR_PAIRS`] pseudo-pairs spread as among the unrelated pairs `u_random`.
fn mstep_u(
    e: &Evidence,
    p: &[f64],
    u_random: &[[f64; LEVELS]],
    labelled: Option<(&Evidence, &[bool])>,
) -> Vec<[f64; LEVELS]> {
    let mut cu: Vec<[f64; LEVELS]> = u_random
        .iter()
        .map(|d| d.map(|x| U_PRIOR_PAIRS * x))
        .collect();
    count_levels(&mut cu, e, |k| 1.0 - p[k]);
    if let Some((le, y)) = labelled {
        count_levels(&mut cu, le, |k| f64::from(u8::from(!y[k])));
    }
    cu.into_iter()
        .map(|c| {
            let s: f64 = c.iter().sum();
            c.map(|x| x / s)
        })
        .collect()
}

/// Expected precision and recall of accepting the pairs with `accepted[k]`, if `p` are the
/// pairs' match probabilities: precision = mean `p` of the accepted pairs (1 when none is),
/// recall = their sum over the sum of all `p` (the expected number of matches among the
/// candidates; 1 when it is 0).
pub fn expected_quality(p: &[f64], accepted: &[bool]) -> (f64, f64) {
    let (mut sa, mut na, mut total) = (0.0, 0usize, 0.0);
    for (&pk, &acc) in p.iter().zip(accepted) {
        total += pk;
        if acc {
            sa += pk;
            na += 1;
        }
    }
    let precision = if na == 0 { 1.0 } else { sa / na as f64 };
    let recall = if total <= 0.0 { 1.0 } else { sa / total };
    (precision, recall)
}

/// The lowest cut on `p` whose accepted set (`p >= cut`, among the pairs with `eligible[k]`) has
/// a mean probability (the model's expected precision) of at least `min_precision`; `None` when
/// not even the most probable pair reaches it.
pub fn cut_for_precision(p: &[f64], eligible: &[bool], min_precision: f64) -> Option<f64> {
    let mut s: Vec<f64> = p
        .iter()
        .zip(eligible)
        .filter(|(_, &e)| e)
        .map(|(&x, _)| x)
        .collect();
    s.sort_unstable_by(|x, y| y.total_cmp(x));
    let (mut sum, mut cut) = (0.0, None);
    for (i, &x) in s.iter().enumerate() {
        sum += x;
        // A cut between equal probabilities would accept them all: decide at the last of a run.
        if s.get(i + 1) == Some(&x) {
            continue;
        }
        if sum / (i + 1) as f64 >= min_precision {
            cut = Some(x);
        }
    }
    cut
}

/// Clusters of duplicates from scored pairs (`tributary_dedup`): the pairs with `p >= thr`, most
/// probable first, join their rows' clusters, unless the candidate pairs between the two
/// clusters have a mean probability under `thr` (average linkage over the pairs that were
/// compared; pairs never compared count as neither): a cluster is not joined through one strong
/// link when the other pairs it would hold are unlikely. Returns each row's cluster, as the
/// smallest row index in it, for rows `0..rows`.
pub fn clusters(rows: usize, a: &[usize], b: &[usize], p: &[f64], thr: f64) -> Vec<usize> {
    use std::collections::HashMap;
    let mut parent: Vec<usize> = (0..rows).collect();
    // Per cluster root: the other clusters it has compared pairs with, (sum of p, count).
    let mut links: Vec<HashMap<usize, (f64, usize)>> = vec![HashMap::new(); rows];
    for k in 0..a.len() {
        if a[k] == b[k] || a[k] >= rows || b[k] >= rows {
            continue;
        }
        for (x, y) in [(a[k], b[k]), (b[k], a[k])] {
            let e = links[x].entry(y).or_insert((0.0, 0));
            e.0 += p[k];
            e.1 += 1;
        }
    }
    fn find(parent: &mut [usize], mut x: usize) -> usize {
        while parent[x] != x {
            parent[x] = parent[parent[x]];
            x = parent[x];
        }
        x
    }
    let mut order: Vec<usize> = (0..a.len()).filter(|&k| p[k] >= thr).collect();
    order.sort_by(|&x, &y| p[y].total_cmp(&p[x]).then(x.cmp(&y)));
    for k in order {
        if a[k] >= rows || b[k] >= rows {
            continue;
        }
        let (ra, rb) = (find(&mut parent, a[k]), find(&mut parent, b[k]));
        if ra == rb {
            continue;
        }
        let (sum, count) = links[ra].get(&rb).copied().unwrap_or((0.0, 0));
        if count > 0 && sum / (count as f64) < thr {
            continue;
        }
        // Merge the smaller map into the larger (its root becomes the root).
        let (big, small) = if links[ra].len() >= links[rb].len() {
            (ra, rb)
        } else {
            (rb, ra)
        };
        let moved = std::mem::take(&mut links[small]);
        for (other, (s, c)) in moved {
            if other == big {
                continue;
            }
            let e = links[big].entry(other).or_insert((0.0, 0));
            e.0 += s;
            e.1 += c;
            // The other cluster's view of the two, merged too.
            let back = links[other].remove(&small).unwrap_or((0.0, 0));
            let e = links[other].entry(big).or_insert((0.0, 0));
            e.0 += back.0;
            e.1 += back.1;
        }
        links[big].remove(&small);
        parent[small] = big;
    }
    let mut root_min: HashMap<usize, usize> = HashMap::new();
    let roots: Vec<usize> = (0..rows).map(|i| find(&mut parent, i)).collect();
    for (i, &r) in roots.iter().enumerate() {
        root_min.entry(r).or_insert(i);
    }
    roots.iter().map(|r| root_min[r]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic stream in [0, 1).
    fn lcg(state: &mut u64) -> f64 {
        *state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (*state >> 11) as f64 / (1u64 << 53) as f64
    }

    /// `rows` rows a side, each row i of the left the partner of row i of the right (when
    /// `i < partners`), every left row with `k` candidates: its partner and random others. The
    /// candidates are a random sample, not chosen by their values: the tests fit them as the
    /// whole population of pairs.
    /// Matches agree (similarity 1) on each of `cols` columns with probability 0.9; non-matches
    /// on column 0 with probability 0.3 (a state), on the others 0.005 (a name, a date).
    fn synthetic(rows: usize, partners: usize, k: usize, cols: usize) -> (Evidence, Vec<bool>) {
        let mut s = 7u64;
        let (mut a, mut b, mut x, mut truth) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for i in 0..rows {
            for c in 0..k {
                let j = if c == 0 && i < partners {
                    i
                } else {
                    (i + 1 + (lcg(&mut s) * (rows - 1) as f64) as usize) % rows
                };
                let is_match = i < partners && j == i;
                if c > 0 && j == i {
                    continue;
                }
                a.push(i);
                b.push(rows + j);
                truth.push(is_match);
                for col in 0..cols {
                    let agree_u = if col == 0 { 0.3 } else { 0.005 };
                    let r = lcg(&mut s);
                    let v = if is_match {
                        if r < 0.9 {
                            1.0
                        } else {
                            0.5 + 0.5 * lcg(&mut s)
                        }
                    } else if r < agree_u {
                        1.0
                    } else {
                        0.6 * lcg(&mut s)
                    };
                    x.push(if lcg(&mut s) < 0.05 { None } else { Some(v) });
                }
            }
        }
        (Evidence::new(a, b, cols, &x).unwrap(), truth)
    }

    /// Level counts of 2,000 unrelated pairs as [`synthetic`] draws them: column 0 agrees 30%
    /// of the time (a state), the others 0.5% (a name, a date); otherwise similarities uniform
    /// in [0, 0.6).
    fn unrelated(cols: usize) -> Vec<[f64; LEVELS]> {
        (0..cols)
            .map(|j| {
                let agree = if j == 0 { 600.0 } else { 10.0 };
                let rest = 2000.0 - agree;
                [rest * 2.0 / 3.0, rest / 3.0, 0.0, 0.0, agree]
            })
            .collect()
    }

    /// The synthetic tables' sides: right rows are numbered from 1000 (500 and 600 rows a side;
    /// the candidates of the one-to-one test reach row 1001).
    fn sides(e: &Evidence) -> Sides {
        let left = e.a.iter().max().unwrap() + 1;
        Sides {
            left: left as f64,
            right: left as f64,
            same_table: false,
        }
    }

    fn f1(p: &[f64], truth: &[bool]) -> f64 {
        let tp = p.iter().zip(truth).filter(|(&p, &t)| p >= 0.5 && t).count() as f64;
        let fp = p
            .iter()
            .zip(truth)
            .filter(|(&p, &t)| p >= 0.5 && !t)
            .count() as f64;
        let fn_ = p.iter().zip(truth).filter(|(&p, &t)| p < 0.5 && t).count() as f64;
        2.0 * tp / (2.0 * tp + fp + fn_)
    }

    #[test]
    fn levels_of_similarities() {
        assert_eq!(level(None), MISSING);
        assert_eq!(level(Some(f64::NAN)), MISSING);
        assert_eq!(level(Some(0.1)), 0);
        assert_eq!(level(Some(0.5)), 1);
        assert_eq!(level(Some(0.8)), 2);
        assert_eq!(level(Some(0.95)), 3);
        assert_eq!(level(Some(1.0)), 4);
        assert!(Evidence::new(vec![0], vec![1], 2, &[Some(1.0)]).is_err());
    }

    #[test]
    fn em_finds_the_matches_when_every_row_has_a_partner() {
        let (e, truth) = synthetic(500, 500, 10, 4);
        let (model, p) = fit(&e, &unrelated(4), None, sides(&e), true, 200, &mut || ());
        assert!(model.converged, "{model:?}");
        let f = f1(&p, &truth);
        assert!(f > 0.98, "f1 {f}");
        // About 500 matches among the candidates, and m of the equal level near 0.9.
        let est: f64 = p.iter().sum();
        assert!((est - 500.0).abs() < 25.0, "{est}");
        assert!(model.m[1][4] > 0.8 && model.u[1][4] < 0.05, "{model:?}");
        // The state-like column (non-matches agree 30% of the time) weighs less than the others.
        assert!(model.weight(0, 4) < model.weight(1, 4));
    }

    #[test]
    fn em_finds_the_matches_when_few_rows_have_one() {
        let (e, truth) = synthetic(600, 60, 10, 4);
        let (model, p) = fit(&e, &unrelated(4), None, sides(&e), true, 200, &mut || ());
        let f = f1(&p, &truth);
        assert!(f > 0.95, "f1 {f}, {model:?}");
        assert!(model.prior < 0.05, "{}", model.prior);
        let accepted: Vec<bool> = p.iter().map(|&x| x >= 0.5).collect();
        let (precision, recall) = expected_quality(&p, &accepted);
        assert!(precision > 0.9 && recall > 0.9, "{precision} {recall}");
    }

    #[test]
    fn labelled_pairs_count_with_their_class() {
        // 40 labelled matches that agree only nearly (level 3) on column 1: m of that level
        // rises; 40 labelled non-matches equal on column 2 raise u of equality there.
        let (e, _) = synthetic(300, 300, 5, 3);
        let lab = Evidence {
            a: vec![0; 80],
            b: vec![0; 80],
            cols: 3,
            levels: (0..80)
                .flat_map(|k| if k < 40 { [4u8, 3, 4] } else { [0u8, 0, 4] })
                .collect(),
        };
        let y: Vec<bool> = (0..80).map(|k| k < 40).collect();
        let (free, _) = fit(&e, &unrelated(3), None, sides(&e), true, 200, &mut || ());
        let (fixed, _) = fit(
            &e,
            &unrelated(3),
            Some((&lab, &y)),
            sides(&e),
            true,
            200,
            &mut || (),
        );
        assert!(
            fixed.m[1][3] > free.m[1][3] + 0.05,
            "{} {}",
            fixed.m[1][3],
            free.m[1][3]
        );
        assert!(
            fixed.u[2][4] > free.u[2][4] + 0.01,
            "{} {}",
            fixed.u[2][4],
            free.u[2][4]
        );
    }

    #[test]
    fn u_among_the_candidates_discounts_what_families_share() {
        // 400 rows a side, 40 with a partner; each left row's 10 candidates are its "family":
        // non-match candidates agree on column 0 (a maintainer team) 80% of the time, although
        // unrelated pairs do 5%; columns 1 and 2 (a name, a birth date) tell matches (90%) from
        // the rest (1%).
        let mut s = 3u64;
        let (mut a, mut b, mut x, mut truth) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for i in 0..400 {
            for c in 0..10 {
                let is_match = c == 0 && i < 40;
                let j = if is_match {
                    i
                } else {
                    (i * 7 + c * 13 + 1) % 400
                };
                if !is_match && j == i && i < 40 {
                    continue;
                }
                a.push(i);
                b.push(400 + j);
                truth.push(is_match);
                let agree = |p: f64, s: &mut u64| if lcg(s) < p { 1.0 } else { 0.3 * lcg(s) };
                x.push(Some(agree(if is_match { 0.9 } else { 0.8 }, &mut s)));
                x.push(Some(agree(if is_match { 0.9 } else { 0.01 }, &mut s)));
                x.push(Some(agree(if is_match { 0.9 } else { 0.01 }, &mut s)));
            }
        }
        let e = Evidence::new(a, b, 3, &x).unwrap();
        let u_random = vec![
            [1900.0, 0.0, 0.0, 0.0, 100.0],
            [1980.0, 0.0, 0.0, 0.0, 20.0],
            [1980.0, 0.0, 0.0, 0.0, 20.0],
        ];
        let sides = Sides {
            left: 400.0,
            right: 400.0,
            same_table: false,
        };
        let (model, p) = fit(&e, &u_random, None, sides, true, 300, &mut || ());
        // Agreeing on the family's value weighs little among its candidates (random pairs
        // would make it ln(0.9 / 0.05) = 2.9), and the matches are found.
        assert!(model.weight(0, 4) < 0.5, "{}", model.weight(0, 4));
        assert!(model.weight(1, 4) > 3.0, "{}", model.weight(1, 4));
        // The matches that agree on both telling columns (81%) are found; one that disagrees on
        // one of them, with one chance in ten of a partner among ten candidates, stays unsure.
        let f = f1(&p, &truth);
        assert!(f > 0.85, "f1 {f}");
    }

    #[test]
    fn one_to_one_shares_a_match_between_two_candidates() {
        // Left row 0 has two candidates with the same strong evidence: without the constraint
        // both look like matches, with it they share one.
        let (mut e, _) = synthetic(200, 200, 5, 3);
        let base = e.pairs();
        e.a.extend([0, 0]);
        e.b.extend([1000, 1001]);
        e.levels.extend([4u8; 6]);
        let (_, free) = fit(&e, &unrelated(3), None, sides(&e), false, 100, &mut || ());
        let (_, tied) = fit(&e, &unrelated(3), None, sides(&e), true, 100, &mut || ());
        assert!(free[base] > 0.9 && free[base + 1] > 0.9);
        assert!(tied[base] + tied[base + 1] + tied[0] <= 1.0 + 1e-9);
    }

    /// Every pair of a one-table set of `names.len()` rows (0-based, `a < b`): its similarity 1
    /// when the names are equal (`Some`), else 0 (missing when either is `None`); the unrelated
    /// pairs as sql/match.sql draws them from a small table, each ordered pair of distinct rows.
    fn one_column_table(names: &[Option<&str>]) -> (Evidence, Vec<Option<f64>>) {
        let sim = |i: usize, j: usize| match (names[i], names[j]) {
            (Some(x), Some(y)) => Some(if x == y { 1.0 } else { 0.0 }),
            _ => None,
        };
        let n = names.len();
        let (mut a, mut b, mut x, mut ux) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for i in 0..n {
            for j in 0..n {
                if i < j {
                    a.push(i);
                    b.push(j);
                    x.push(sim(i, j));
                }
                if i != j {
                    ux.push(sim(i, j));
                }
            }
        }
        (Evidence::new(a, b, 1, &x).unwrap(), ux)
    }

    fn one_table(n: usize) -> Sides {
        Sides {
            left: n as f64,
            right: n as f64,
            same_table: true,
        }
    }

    #[test]
    fn exact_duplicates_in_a_small_table_match() {
        // Issue 48: five rows, two exact pairs (rows 0-1 and 2-3, pairs 0 and 7 of the ten):
        // both are matches, one to one or not, and no other pair is.
        let names = [
            Some("anna"),
            Some("anna"),
            Some("bob"),
            Some("bob"),
            Some("carl"),
        ];
        let (e, ux) = one_column_table(&names);
        assert_eq!(exact_pairs(&e), 2);
        let u = unrelated_counts(&ux, 1);
        assert_eq!(u[0][LEVELS - 1], 0.0, "{u:?}");
        for one_to_one in [true, false] {
            let (model, p) = fit(&e, &u, None, one_table(5), one_to_one, 500, &mut || ());
            for (k, &pk) in p.iter().enumerate() {
                // (one to one, each exact pair holds its rows' only likely partner: 0.96; without,
                // the prior is the exact pairs' share, 2 of 10: 0.87)
                let exact = k == 0 || k == 7;
                let high = if one_to_one { 0.95 } else { 0.85 };
                assert!(
                    if exact { pk > high } else { pk < 0.1 },
                    "{one_to_one} {k} {p:?} {model:?}"
                );
            }
            assert!(model.prior >= 0.2, "{model:?}");
        }
    }

    #[test]
    fn a_small_table_without_duplicates_matches_nothing() {
        let names = [
            Some("anna"),
            Some("bob"),
            Some("carl"),
            Some("dora"),
            Some("emil"),
        ];
        let (e, ux) = one_column_table(&names);
        assert_eq!(exact_pairs(&e), 0);
        for one_to_one in [true, false] {
            let (_, p) = fit(
                &e,
                &unrelated_counts(&ux, 1),
                None,
                one_table(5),
                one_to_one,
                500,
                &mut || (),
            );
            assert!(p.iter().all(|&pk| pk < 0.1), "{p:?}");
        }
    }

    #[test]
    fn missing_values_are_not_identical() {
        // Two exact pairs (rows 0-2, 3-4) and two rows without a value (1, 6): a pair with a
        // missing value is missing evidence, neither exact nor left out of the unrelated pairs,
        // and not a match.
        let names = [
            Some("anna"),
            None,
            Some("anna"),
            Some("bob"),
            Some("bob"),
            Some("carl"),
            None,
        ];
        let (e, ux) = one_column_table(&names);
        assert_eq!(exact_pairs(&e), 2);
        assert!(!identical(&[MISSING]) && !identical(&[4, MISSING]) && identical(&[4, 4]));
        let u = unrelated_counts(&ux, 1);
        // (5 values, 20 ordered pairs of them, 4 of those identical)
        assert_eq!(u[0].iter().sum::<f64>(), 16.0, "{u:?}");
        for one_to_one in [true, false] {
            let (_, p) = fit(&e, &u, None, one_table(7), one_to_one, 500, &mut || ());
            for (k, &pk) in p.iter().enumerate() {
                let exact = [(0, 2), (3, 4)].contains(&(e.a[k], e.b[k]));
                assert!(
                    if exact { pk > 0.7 } else { pk < 0.5 },
                    "{one_to_one} {k} {p:?}"
                );
            }
        }
    }

    #[test]
    fn exact_pairs_are_value_combinations_of_two_rows_only() {
        // Rows 0-1 identical on both columns; 2, 3 and 4 all identical (a frequent value): one
        // exact pair. Rows 5-6 agree on one column only: not identical.
        let (a, b) = (vec![0, 2, 2, 3, 5], vec![1, 3, 4, 4, 6]);
        let x = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.5].map(Some);
        let e = Evidence::new(a, b, 2, &x).unwrap();
        assert_eq!(exact_pairs(&e), 1);
        // Unrelated pairs identical on both columns are left out; one equal on a single column
        // and one with a missing value count.
        let ux = [
            Some(1.0),
            Some(1.0),
            Some(1.0),
            Some(0.1),
            Some(1.0),
            None,
            Some(1.0),
        ];
        assert_eq!(
            unrelated_counts(&ux, 2),
            vec![[0.0, 0.0, 0.0, 0.0, 2.0], [1.0, 0.0, 0.0, 0.0, 0.0]]
        );
    }

    #[test]
    fn siblings_that_differ_on_one_column_are_not_exact() {
        // 300 rows a side, 30 with a partner; every left row's other candidates are siblings
        // equal on 3 columns of 4 and different on the last: not exact pairs, nor matches.
        let mut s = 5u64;
        let (mut a, mut b, mut x, mut truth) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for i in 0..300 {
            for c in 0..5 {
                let is_match = c == 0 && i < 30;
                if c == 0 && !is_match {
                    continue;
                }
                a.push(i);
                b.push(300 + if is_match { i } else { (i + 7 * c) % 300 });
                truth.push(is_match);
                for col in 0..4 {
                    x.push(Some(if is_match {
                        if lcg(&mut s) < 0.9 {
                            1.0
                        } else {
                            0.8
                        }
                    } else if col < 3 {
                        1.0
                    } else {
                        0.3 * lcg(&mut s)
                    }));
                }
            }
        }
        let e = Evidence::new(a, b, 4, &x).unwrap();
        let exact = exact_pairs(&e);
        assert!(exact <= 30, "{exact}");
        let sides = Sides {
            left: 300.0,
            right: 300.0,
            same_table: false,
        };
        for one_to_one in [true, false] {
            let (_, p) = fit(&e, &unrelated(4), None, sides, one_to_one, 300, &mut || ());
            let siblings_accepted = p
                .iter()
                .zip(&truth)
                .filter(|(&p, &t)| !t && p >= 0.5)
                .count();
            assert_eq!(siblings_accepted, 0, "{one_to_one} {p:?}");
        }
    }

    #[test]
    fn cut_for_precision_keeps_the_mean_probability() {
        let p = [0.99, 0.98, 0.9, 0.6, 0.3, 0.1];
        let all = [true; 6];
        // Mean of the first four: 0.8675; of five: 0.754.
        assert_eq!(cut_for_precision(&p, &all, 0.85), Some(0.6));
        assert_eq!(cut_for_precision(&p, &all, 0.95), Some(0.9));
        assert_eq!(cut_for_precision(&p, &all, 0.999), None);
        assert_eq!(
            cut_for_precision(&p, &[false, true, true, true, true, true], 0.99),
            None
        );
        let (precision, recall) = expected_quality(&p, &[true, true, true, false, false, false]);
        assert!((precision - 0.9566).abs() < 1e-3 && (recall - 2.87 / 3.87).abs() < 1e-9);
    }

    #[test]
    fn clusters_need_more_than_one_strong_link() {
        // 0-1 and 1-2 are strong, 0-2 was compared and is unlikely: 2 stays out of {0, 1}.
        // 3-4-5 all likely: one cluster.
        let (a, b) = ([0, 1, 0, 3, 4, 3], [1, 2, 2, 4, 5, 5]);
        let p = [0.99, 0.95, 0.01, 0.9, 0.9, 0.8];
        let c = clusters(6, &a, &b, &p, 0.5);
        assert_eq!(c, vec![0, 0, 2, 3, 3, 3]);
        // Without the compared pair 0-2, the chain joins them.
        let c = clusters(3, &a[..2], &b[..2], &p[..2], 0.5);
        assert_eq!(c, vec![0, 0, 0]);
    }
}
