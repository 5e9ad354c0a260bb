//! The heads over the features (the multinomial logistic / ridge head and its importance;
//! the GBDT is gbdt.rs), the text model's settings, and the metrics of the report.

use super::*;

/// The lexical view's settings (epochs, Adagrad step, L2), tried on the validation slice by
/// `train`; the first is the default, used when there is no validation slice. The first was
/// chosen on the films check of 0.9.0 (test accuracy 0.437 vs 0.425 with 6 epochs and L2 1e-4).
/// Larger steps and more epochs fit the words harder, as a larger C does in scikit-learn's
/// logistic regression: chinook's genres need it (benches/learn.py's TF-IDF + LR picks C = 20
/// there; the second setting takes chinook from 0.980 / 0.842 to 0.986 / 0.935), films' do not
/// (C = 5; a fixed 30 epochs cost films macro-F1, 0.211 -> 0.205). BENCHMARKS.md, "Models that
/// learn" (2026-11-27).
pub(crate) const TEXT_GRID: [Fit; 3] = [
    Fit {
        epochs: 10,
        lr: 0.3,
        l2: 1e-5,
    },
    Fit {
        epochs: 10,
        lr: 1.0,
        l2: 1e-5,
    },
    Fit {
        epochs: 20,
        lr: 1.0,
        l2: 1e-6,
    },
];

pub(crate) fn mem_check(needed: usize, limit: usize) -> Result<(), Error> {
    if limit > 0 && needed > limit {
        Err(Error::Memory { needed, limit })
    } else {
        Ok(())
    }
}

/// Head input row for the logistic head.
pub(crate) fn lin_row(h: &LinHead, x: &[f32], idx: &mut Vec<u32>, val: &mut Vec<f32>) {
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

pub(crate) fn fit_lin_head(
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
pub(crate) enum HeadY {
    Class(Vec<u32>, usize),
    Value(Vec<f64>),
}

pub(crate) fn head_predict(head: &Head, x: &[f32], out: &mut [f32]) {
    match head {
        Head::Gbdt(g) => g.predict(x, out),
        Head::Logistic(h) => {
            let (mut idx, mut val) = (Vec::new(), Vec::new());
            lin_row(h, x, &mut idx, &mut val);
            h.lin.predict(&idx, &val, out);
        }
    }
}

/// A bound on the steps of one row's [`head_predict`]: the trees' nodes, or the weights.
pub(crate) fn head_cost(head: &Head) -> usize {
    match head {
        Head::Gbdt(g) => g.size(),
        Head::Logistic(h) => h.lin.w.len() + h.onehot.len(),
    }
}

pub(crate) fn lin_importance(h: &LinHead, nf: usize) -> Vec<f64> {
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
pub(crate) fn score_classes(truth: &[u32], pred: &[u32]) -> (f64, f64) {
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

pub(crate) fn argmax(v: &[f32]) -> usize {
    let mut b = 0;
    for i in 1..v.len() {
        if v[i] > v[b] {
            b = i;
        }
    }
    b
}

pub(crate) fn metric(
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

/// The baseline's scores of `n` rows (n x `kout`): the class counts of the `base` rows
/// ("majority"), or their mean ("mean").
pub(crate) fn baseline(
    hy: &HeadY,
    base: &[usize],
    n: usize,
    kout: usize,
) -> (&'static str, Vec<f32>) {
    let mut p = vec![0f32; n * kout];
    let algo = match hy {
        HeadY::Class(c, _) => {
            let mut cnt = vec![0f32; kout];
            for &r in base {
                cnt[c[r] as usize] += 1.0;
            }
            for i in 0..n {
                p[i * kout..(i + 1) * kout].copy_from_slice(&cnt);
            }
            "majority"
        }
        HeadY::Value(v) => {
            let m = base.iter().map(|&r| v[r]).sum::<f64>() / base.len().max(1) as f64;
            p.iter_mut().for_each(|x| *x = m as f32);
            "mean"
        }
    };
    (algo, p)
}
