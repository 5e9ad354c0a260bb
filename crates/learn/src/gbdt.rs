//! Gradient-boosted trees, histogram-based (the LightGBM/XGBoost `hist` method: Ke et al. 2017,
//! Chen & Guestrin 2016): features cut into at most 255 quantile bins (bin 0 = missing, which
//! always goes left), depth-wise trees with second-order gain and L2 on leaves, softmax
//! (one tree per class per round) for categories, squared error for numbers.
//!
//! Why our own and not `perpetual` (=3.0.0-rc.2, a release candidate) or `forust-ml` 0.8
//! (multiclass only one-vs-rest): the extension must stop a fit within a second of a cancel,
//! bound its threads to a number it is given and its memory to a limit it can estimate, and keep
//! the model in its own bytes; both crates fit in one call with their own thread pools. Here a
//! fit is rounds we drive: the stop flag is read between trees.

use crate::par::{par_map, Shared};
use serde::{Deserialize, Serialize};

/// Hyper-parameters (defaults from LightGBM's usual starting point, depth-limited).
#[derive(Clone, Copy)]
pub(crate) struct Params {
    pub rounds: usize,
    pub lr: f32,
    pub depth: usize,
    pub min_leaf: usize,
    pub lambda: f64,
    /// Rounds without improvement on the validation rows before stopping.
    pub patience: usize,
}

impl Default for Params {
    fn default() -> Params {
        Params {
            rounds: 400,
            lr: 0.08,
            depth: 5,
            min_leaf: 20,
            lambda: 1.0,
            patience: 30,
        }
    }
}

#[derive(Serialize, Deserialize, Clone)]
struct Node {
    /// Feature, or u32::MAX for a leaf.
    feat: u32,
    /// Left iff bin <= bin_thr (raw value: NaN, or x <= thr).
    bin_thr: u8,
    thr: f32,
    left: u32,
    right: u32,
    value: f32,
}

#[derive(Serialize, Deserialize, Clone)]
pub(crate) struct Tree {
    nodes: Vec<Node>,
}

/// A fitted ensemble: `trees[round * k + class]`; raw score = base + sum of leaves.
#[derive(Serialize, Deserialize, Clone)]
pub(crate) struct Gbdt {
    pub k: usize,
    pub base: Vec<f32>,
    pub cuts: Vec<Vec<f32>>,
    trees: Vec<Tree>,
    /// Total split gain per feature.
    pub importance: Vec<f64>,
    pub rounds: usize,
}

/// Bin edges per feature from the values of `rows` (NaN = missing).
pub(crate) fn cuts(x: &[f32], nf: usize, rows: &[usize]) -> Vec<Vec<f32>> {
    (0..nf)
        .map(|f| {
            let mut v: Vec<f32> = rows
                .iter()
                .map(|&r| x[r * nf + f])
                .filter(|v| !v.is_nan())
                .collect();
            v.sort_unstable_by(|a, b| a.total_cmp(b));
            let mut u = v.clone();
            u.dedup();
            if u.len() <= 254 {
                u.pop();
                u
            } else {
                let mut c: Vec<f32> = (1..254).map(|i| v[i * v.len() / 254]).collect();
                c.dedup();
                if c.last() == v.last() {
                    c.pop();
                }
                c
            }
        })
        .collect()
}

fn bin_of(cuts: &[f32], x: f32) -> u8 {
    if x.is_nan() {
        0
    } else {
        1 + cuts.partition_point(|&c| c < x) as u8
    }
}

/// Bytes of a fit over `n` rows, `nf` features, `k` outputs (a bound: histograms of 256 bins
/// a feature, at most depth + 1 of them alive in a tree's growth).
pub(crate) fn memory(n: usize, nf: usize, k: usize, threads: usize) -> usize {
    n * nf + n * k * 4 * 4 + threads * (nf * 256 * 24 * 12 + n * 4)
}

/// Histogram of a node: (sum of gradients, sum of hessians, rows) per bin, the bins of feature
/// `f` at `off[f]..off[f + 1]` (compact: a feature of 2 distinct values takes 3 bins, not 256,
/// so that a histogram stays in cache and a new one costs little to zero).
type Hist = Vec<[f64; 3]>;

/// Offsets of each feature's bins in a [`Hist`]: feature `f` has `cuts[f].len() + 2` bins
/// (missing, then one more than its cuts); the last entry is the histogram's length.
fn offsets(cuts: &[Vec<f32>]) -> Vec<usize> {
    let mut off = Vec::with_capacity(cuts.len() + 1);
    let mut o = 0;
    off.push(0);
    for c in cuts {
        o += c.len() + 2;
        off.push(o);
    }
    off
}

struct Grow<'a> {
    bins: &'a [u8],
    nf: usize,
    off: &'a [usize],
    g: &'a [f32],
    h: &'a [f32],
    p: Params,
    nodes: Vec<Node>,
    gain: Vec<f64>,
}

impl Grow<'_> {
    fn hist(&self, rows: &[u32]) -> Hist {
        let nf = self.nf;
        let off = &self.off[..nf];
        let mut h = vec![[0f64; 3]; self.off[nf]];
        for &r in rows {
            let r = r as usize;
            let (g, hh) = (self.g[r] as f64, self.h[r] as f64);
            let b = &self.bins[r * nf..(r + 1) * nf];
            for (&o, &bv) in off.iter().zip(b) {
                let e = &mut h[o + bv as usize];
                e[0] += g;
                e[1] += hh;
                e[2] += 1.0;
            }
        }
        h
    }

    fn leaf(&mut self, gs: f64, hs: f64) -> u32 {
        let v = (-gs / (hs + self.p.lambda)) as f32 * self.p.lr;
        self.nodes.push(Node {
            feat: u32::MAX,
            bin_thr: 0,
            thr: 0.0,
            left: 0,
            right: 0,
            value: v,
        });
        (self.nodes.len() - 1) as u32
    }

    /// Whether a node of `n` rows at `depth` may split (else it is a leaf, and needs no
    /// histogram: its sums are taken from its rows).
    fn may_split(&self, n: usize, depth: usize) -> bool {
        depth < self.p.depth && n >= 2 * self.p.min_leaf
    }

    /// Grows the node of `rows` (reordered: left rows first at every split); `hist` is their
    /// histogram, `None` for a node that may not split.
    fn grow(
        &mut self,
        rows: &mut [u32],
        hist: Option<Hist>,
        depth: usize,
        cuts: &[Vec<f32>],
    ) -> u32 {
        let n = rows.len();
        let Some(hist) = hist.filter(|_| self.may_split(n, depth)) else {
            let (mut gs, mut hs) = (0.0, 0.0);
            for &r in rows.iter() {
                gs += self.g[r as usize] as f64;
                hs += self.h[r as usize] as f64;
            }
            return self.leaf(gs, hs);
        };
        let (mut gs, mut hs) = (0.0, 0.0);
        // Every row is in exactly one bin of feature 0.
        for e in &hist[..self.off.get(1).copied().unwrap_or(0)] {
            gs += e[0];
            hs += e[1];
        }
        let lam = self.p.lambda;
        let parent = gs * gs / (hs + lam);
        let mut best = (0.0f64, usize::MAX, 0usize);
        for f in 0..self.nf {
            let hf = &hist[self.off[f]..self.off[f + 1]];
            let (mut gl, mut hl, mut cl) = (0.0, 0.0, 0.0);
            // Split after bin t (left: bin <= t); the last bin is never one.
            let nb = cuts[f].len() + 1;
            for (t, e) in hf.iter().enumerate().take(nb) {
                gl += e[0];
                hl += e[1];
                cl += e[2];
                if cl < self.p.min_leaf as f64 {
                    continue;
                }
                if (n as f64 - cl) < self.p.min_leaf as f64 {
                    break;
                }
                let (gr, hr) = (gs - gl, hs - hl);
                let gain = gl * gl / (hl + lam) + gr * gr / (hr + lam) - parent;
                if gain > best.0 + 1e-9 {
                    best = (gain, f, t);
                }
            }
        }
        if best.1 == usize::MAX {
            return self.leaf(gs, hs);
        }
        let (gain, f, t) = best;
        self.gain[f] += gain;
        let nf = self.nf;
        // Partition rows: left (bin <= t) first.
        let mut i = 0;
        for j in 0..n {
            if self.bins[rows[j] as usize * nf + f] as usize <= t {
                rows.swap(i, j);
                i += 1;
            }
        }
        let (l, r) = rows.split_at_mut(i);
        let (small_is_left, small) = if l.len() <= r.len() {
            (true, &*l)
        } else {
            (false, &*r)
        };
        // The smaller child's histogram is built, the larger's is the parent's minus it; none
        // for children that will be leaves (the last level: a sixth of the work of a tree).
        let big_len = n - small.len();
        let (hs_small, hs_big) = if self.may_split(big_len, depth + 1) {
            let hs_small = self.hist(small);
            let mut hs_big = hist;
            for (a, b) in hs_big.iter_mut().zip(&hs_small) {
                a[0] -= b[0];
                a[1] -= b[1];
                a[2] -= b[2];
            }
            (Some(hs_small), Some(hs_big))
        } else if self.may_split(small.len(), depth + 1) {
            (Some(self.hist(small)), None)
        } else {
            (None, None)
        };
        let (hl_, hr_) = if small_is_left {
            (hs_small, hs_big)
        } else {
            (hs_big, hs_small)
        };
        let me = self.nodes.len();
        let thr = if t == 0 {
            f32::NEG_INFINITY
        } else {
            cuts[f][t - 1]
        };
        self.nodes.push(Node {
            feat: f as u32,
            bin_thr: t as u8,
            thr,
            left: 0,
            right: 0,
            value: 0.0,
        });
        let li = self.grow(l, hl_, depth + 1, cuts);
        let ri = self.grow(r, hr_, depth + 1, cuts);
        self.nodes[me].left = li;
        self.nodes[me].right = ri;
        me as u32
    }
}

impl Tree {
    fn by_bins(&self, b: &[u8]) -> f32 {
        let mut i = 0;
        loop {
            let n = &self.nodes[i];
            if n.feat == u32::MAX {
                return n.value;
            }
            i = if b[n.feat as usize] <= n.bin_thr {
                n.left
            } else {
                n.right
            } as usize;
        }
    }
    fn by_values(&self, x: &[f32]) -> f32 {
        let mut i = 0;
        loop {
            let n = &self.nodes[i];
            if n.feat == u32::MAX {
                return n.value;
            }
            let v = x[n.feat as usize];
            let left = v.is_nan() || (n.bin_thr > 0 && v <= n.thr);
            i = if left { n.left } else { n.right } as usize;
        }
    }
}

/// Label for a fit: class per row (softmax over k) or number.
pub(crate) enum Labels<'a> {
    Class(&'a [u32], usize),
    Value(&'a [f64]),
}

fn loss(k: usize, score: &[f32], y: &Labels, i: usize) -> f64 {
    match y {
        Labels::Class(c, _) => {
            let z = &score[i * k..(i + 1) * k];
            let m = z.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
            let lse = m + z.iter().map(|&v| (v as f64 - m).exp()).sum::<f64>().ln();
            lse - z[c[i] as usize] as f64
        }
        Labels::Value(v) => (score[i] as f64 - v[i]).abs(),
    }
}

impl Gbdt {
    /// Fits on rows `fit` of the dense matrix `x` (n x nf, NaN = missing); labels indexed by row.
    /// With `valid` rows, stops after `patience` rounds without a better validation loss
    /// (log loss / absolute error) and keeps the best round. `None` when stopped.
    #[allow(clippy::too_many_arguments)]
    pub fn fit(
        x: &[f32],
        nf: usize,
        y: &Labels,
        fit: &[usize],
        valid: &[usize],
        p: Params,
        threads: usize,
        sh: &Shared,
    ) -> Option<Gbdt> {
        let n = x.len() / nf.max(1);
        let k = match y {
            Labels::Class(_, k) => *k,
            Labels::Value(_) => 1,
        };
        let cuts = cuts(x, nf, fit);
        let mut bins = vec![0u8; n * nf];
        for &r in fit.iter().chain(valid) {
            for f in 0..nf {
                bins[r * nf + f] = bin_of(&cuts[f], x[r * nf + f]);
            }
        }
        let base: Vec<f32> = match y {
            Labels::Class(c, _) => {
                let mut cnt = vec![1.0f64; k];
                for &r in fit {
                    cnt[c[r] as usize] += 1.0;
                }
                let t: f64 = cnt.iter().sum();
                cnt.iter().map(|v| (v / t).ln() as f32).collect()
            }
            Labels::Value(v) => {
                vec![(fit.iter().map(|&r| v[r]).sum::<f64>() / fit.len().max(1) as f64) as f32]
            }
        };
        let mut score = vec![0f32; n * k];
        for &r in fit.iter().chain(valid) {
            score[r * k..(r + 1) * k].copy_from_slice(&base);
        }
        let off = offsets(&cuts);
        let mut m = Gbdt {
            k,
            base,
            cuts,
            trees: Vec::new(),
            importance: vec![0.0; nf],
            rounds: 0,
        };
        let mut g = vec![vec![0f32; n]; k];
        let mut h = vec![vec![0f32; n]; k];
        let (mut best_loss, mut best_round) = (f64::INFINITY, 0usize);
        let mut prob = vec![0f32; k];
        for round in 0..p.rounds {
            if sh.stopped() {
                return None;
            }
            for &r in fit {
                match y {
                    Labels::Class(c, _) => {
                        prob.copy_from_slice(&score[r * k..(r + 1) * k]);
                        crate::linear::softmax(&mut prob);
                        for cl in 0..k {
                            let t = if c[r] as usize == cl { 1.0 } else { 0.0 };
                            g[cl][r] = prob[cl] - t;
                            h[cl][r] = (prob[cl] * (1.0 - prob[cl])).max(1e-6);
                        }
                    }
                    Labels::Value(v) => {
                        g[0][r] = score[r] - v[r] as f32;
                        h[0][r] = 1.0;
                    }
                }
            }
            let trees = par_map(threads, k, &sh.stop, |cl| {
                let mut gr = Grow {
                    bins: &bins,
                    nf,
                    off: &off,
                    g: &g[cl],
                    h: &h[cl],
                    p,
                    nodes: Vec::new(),
                    gain: vec![0.0; nf],
                };
                let mut rows: Vec<u32> = fit.iter().map(|&r| r as u32).collect();
                let hist = gr.hist(&rows);
                gr.grow(&mut rows, Some(hist), 0, &m.cuts);
                (Tree { nodes: gr.nodes }, gr.gain)
            });
            if sh.stopped() {
                return None;
            }
            for (cl, t) in trees.into_iter().enumerate() {
                let (t, gain) = t?;
                for (a, b) in m.importance.iter_mut().zip(&gain) {
                    *a += b;
                }
                for &r in fit.iter().chain(valid) {
                    score[r * k + cl] += t.by_bins(&bins[r * nf..(r + 1) * nf]);
                }
                m.trees.push(t);
            }
            sh.tick(1);
            if !valid.is_empty() {
                let l: f64 =
                    valid.iter().map(|&r| loss(k, &score, y, r)).sum::<f64>() / valid.len() as f64;
                if l < best_loss - 1e-7 {
                    best_loss = l;
                    best_round = round + 1;
                } else if round + 1 - best_round >= p.patience {
                    break;
                }
            } else {
                best_round = round + 1;
            }
        }
        m.trees.truncate(best_round * k);
        m.rounds = best_round;
        Some(m)
    }

    /// Whether the ensemble can be applied to rows of `nf` features with `kout` outputs (a
    /// stored model's check, `validate.rs`): `k = kout`, `base` and `cuts` of those lengths,
    /// `rounds x k` trees, and in every tree each node a leaf or a split of a feature below `nf`
    /// whose two children come after it, so that [`Tree::by_values`] ends within as many steps
    /// as the tree has nodes. `stop()` is asked every `POLL_EVERY` nodes; `Err(None)` when it
    /// said stop, `Err(Some(why))` when the model is not valid.
    pub fn check(
        &self,
        nf: usize,
        kout: usize,
        stop: &mut dyn FnMut() -> bool,
    ) -> Result<(), Option<String>> {
        if self.k != kout || self.base.len() != kout {
            return Err(Some(format!(
                "{} outputs and {} base scores where {kout} are expected",
                self.k,
                self.base.len()
            )));
        }
        if self.cuts.len() != nf || self.importance.len() != nf {
            return Err(Some(format!(
                "{} bin lists and {} importances for {nf} features",
                self.cuts.len(),
                self.importance.len()
            )));
        }
        if self.rounds.checked_mul(self.k) != Some(self.trees.len()) {
            return Err(Some(format!(
                "{} trees for {} rounds of {} outputs",
                self.trees.len(),
                self.rounds,
                self.k
            )));
        }
        let mut seen = 0usize;
        for (ti, t) in self.trees.iter().enumerate() {
            let len = t.nodes.len();
            if len == 0 {
                return Err(Some(format!("tree {ti} has no nodes")));
            }
            for (i, n) in t.nodes.iter().enumerate() {
                seen += 1;
                if seen.is_multiple_of(crate::validate::POLL_EVERY) && stop() {
                    return Err(None);
                }
                if n.feat == u32::MAX {
                    continue;
                }
                if n.feat as usize >= nf {
                    return Err(Some(format!(
                        "tree {ti}, node {i} splits feature {} of {nf}",
                        n.feat
                    )));
                }
                for c in [n.left, n.right] {
                    if c as usize <= i || c as usize >= len {
                        return Err(Some(format!(
                            "tree {ti}, node {i} has child {c}: children must come after their node and within the tree's {len} nodes"
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    /// Nodes in all trees: a bound on the steps of one row's [`Gbdt::predict`].
    pub fn size(&self) -> usize {
        self.trees.iter().map(|t| t.nodes.len()).sum()
    }

    /// Raw scores (k) of one row of feature values; probabilities after softmax for classes.
    pub fn predict(&self, x: &[f32], out: &mut [f32]) {
        out.copy_from_slice(&self.base);
        for (i, t) in self.trees.iter().enumerate() {
            out[i % self.k] += t.by_values(x);
        }
        if self.k > 1 {
            crate::linear::softmax(out);
        }
    }
}
