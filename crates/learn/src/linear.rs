//! Sparse linear models trained here: multinomial logistic regression (softmax, categories) and
//! ridge regression (numbers), L2-regularised, by Adagrad SGD over a deterministic shuffle.
//! No maintained Rust crate fits a sparse multinomial logistic regression (linfa-logistic takes
//! dense ndarray matrices: a 17k x 200k TF-IDF matrix would not fit), so this is our own.

use crate::par::Shared;
use serde::{Deserialize, Serialize};

/// Compressed sparse rows: row `i` is `idx[ptr[i]..ptr[i+1]]` / `val[..]`.
#[derive(Default, Clone)]
pub(crate) struct Csr {
    pub ptr: Vec<usize>,
    pub idx: Vec<u32>,
    pub val: Vec<f32>,
    pub dim: usize,
}

impl Csr {
    pub fn new(dim: usize) -> Csr {
        Csr {
            ptr: vec![0],
            idx: Vec::new(),
            val: Vec::new(),
            dim,
        }
    }
    pub fn push(&mut self, idx: &[u32], val: &[f32]) {
        self.idx.extend_from_slice(idx);
        self.val.extend_from_slice(val);
        self.ptr.push(self.idx.len());
    }
    pub fn row(&self, i: usize) -> (&[u32], &[f32]) {
        let (a, b) = (self.ptr[i], self.ptr[i + 1]);
        (&self.idx[a..b], &self.val[a..b])
    }
}

/// Target of a fit: class index per row (softmax over `k` classes) or a number (ridge).
pub(crate) enum Target<'a> {
    Class(&'a [u32], usize),
    Value(&'a [f64]),
}

/// A fitted linear model: `k` outputs (`k` = classes, or 1 for ridge), weights `dim x k`
/// row-major, biases `k`; ridge outputs are de-standardised by `y_mean`/`y_std`.
#[derive(Serialize, Deserialize, Clone)]
pub(crate) struct Linear {
    pub dim: usize,
    pub k: usize,
    pub w: Vec<f32>,
    pub b: Vec<f32>,
    pub softmax: bool,
    pub y_mean: f64,
    pub y_std: f64,
}

/// Settings: epochs over the rows, Adagrad step, L2 per update of a touched weight.
#[derive(Clone, Copy)]
pub(crate) struct Fit {
    pub epochs: usize,
    pub lr: f32,
    pub l2: f32,
}

pub(crate) fn softmax(z: &mut [f32]) {
    let m = z.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut s = 0.0;
    for v in z.iter_mut() {
        *v = (*v - m).exp();
        s += *v;
    }
    for v in z.iter_mut() {
        *v /= s;
    }
}

impl Linear {
    /// Bytes of a `dim x k` model while fitting (weights + Adagrad accumulators).
    pub fn memory(dim: usize, k: usize) -> usize {
        dim * k * 8 + k * 16
    }

    /// Fits on `rows` of `x` (targets indexed like `rows`). `None` when stopped.
    pub fn fit(x: &Csr, rows: &[usize], y: &Target, fit: Fit, sh: &Shared) -> Option<Linear> {
        let (k, softmax_on) = match y {
            Target::Class(_, k) => (*k, true),
            Target::Value(_) => (1, false),
        };
        let (y_mean, y_std) = match y {
            Target::Value(v) if !v.is_empty() => {
                let m = v.iter().sum::<f64>() / v.len() as f64;
                let s = (v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / v.len() as f64).sqrt();
                (m, if s > 0.0 { s } else { 1.0 })
            }
            _ => (0.0, 1.0),
        };
        let dim = x.dim;
        let mut m = Linear {
            dim,
            k,
            w: vec![0.0; dim * k],
            b: vec![0.0; k],
            softmax: softmax_on,
            y_mean,
            y_std,
        };
        // Class priors as the starting biases.
        if let Target::Class(c, _) = y {
            let mut cnt = vec![1.0f32; k];
            for &ci in c.iter() {
                cnt[ci as usize] += 1.0;
            }
            let tot: f32 = cnt.iter().sum();
            for (b, c) in m.b.iter_mut().zip(&cnt) {
                *b = (c / tot).ln();
            }
        }
        let mut gw = vec![1e-6f32; dim * k];
        let mut gb = vec![1e-6f32; k];
        let mut order: Vec<usize> = (0..rows.len()).collect();
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        let mut z = vec![0f32; k];
        for _ in 0..fit.epochs {
            for i in (1..order.len()).rev() {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                order.swap(i, (rng % (i as u64 + 1)) as usize);
            }
            for (step, &o) in order.iter().enumerate() {
                if step % 4096 == 0 && sh.stopped() {
                    return None;
                }
                let (idx, val) = x.row(rows[o]);
                m.raw(idx, val, &mut z);
                // z becomes the gradient of the loss in the outputs.
                match y {
                    Target::Class(c, _) => {
                        softmax(&mut z);
                        z[c[o] as usize] -= 1.0;
                    }
                    Target::Value(v) => z[0] -= ((v[o] - y_mean) / y_std) as f32,
                }
                for (c, &g) in z.iter().enumerate() {
                    gb[c] += g * g;
                    m.b[c] -= fit.lr * g / gb[c].sqrt();
                }
                for (&j, &xv) in idx.iter().zip(val) {
                    let base = j as usize * k;
                    for (c, &g0) in z.iter().enumerate() {
                        let wi = base + c;
                        let g = g0 * xv + fit.l2 * m.w[wi];
                        gw[wi] += g * g;
                        m.w[wi] -= fit.lr * g / gw[wi].sqrt();
                    }
                }
            }
            sh.tick(1);
        }
        Some(m)
    }

    /// Whether the model can be applied as one of `k` outputs (softmax or not): `w` is
    /// `dim x k`, `b` is `k` (a stored model's check, `validate.rs`).
    pub fn check(&self, k: usize, softmax: bool) -> Result<(), String> {
        if self.k != k || self.b.len() != k {
            return Err(format!(
                "{} outputs and {} biases where {k} are expected",
                self.k,
                self.b.len()
            ));
        }
        if self.dim.checked_mul(k) != Some(self.w.len()) {
            return Err(format!(
                "{} weights for {} inputs x {k} outputs",
                self.w.len(),
                self.dim
            ));
        }
        if self.softmax != softmax {
            return Err(if softmax {
                "a regression for a category label".into()
            } else {
                "a softmax for a number label".into()
            });
        }
        Ok(())
    }

    fn raw(&self, idx: &[u32], val: &[f32], z: &mut [f32]) {
        z.copy_from_slice(&self.b);
        for (&j, &xv) in idx.iter().zip(val) {
            let j = j as usize;
            if j >= self.dim {
                continue;
            }
            let w = &self.w[j * self.k..(j + 1) * self.k];
            for (zc, wc) in z.iter_mut().zip(w) {
                *zc += wc * xv;
            }
        }
    }

    /// Class probabilities (softmax) or the predicted number (in `out[0]`).
    pub fn predict(&self, idx: &[u32], val: &[f32], out: &mut [f32]) {
        self.raw(idx, val, out);
        if self.softmax {
            softmax(out);
        } else {
            out[0] = (out[0] as f64 * self.y_std + self.y_mean) as f32;
        }
    }
}
