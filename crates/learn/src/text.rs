//! Lexical view: word unigram + bigram TF-IDF as in scikit-learn's `TfidfVectorizer(ngram_range=
//! (1, 2), min_df=2, sublinear_tf=True, smooth_idf=True, norm="l2")` with tokens = maximal runs
//! of alphanumeric characters, lowercased.

use crate::linear::Csr;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Most terms kept (highest document frequency first).
pub(crate) const MAX_VOCAB: usize = 200_000;

pub(crate) fn terms(s: &str) -> Vec<String> {
    let lower = s.to_lowercase();
    let toks: Vec<&str> = lower
        .split(|c: char| !c.is_alphanumeric())
        .filter(|t| !t.is_empty())
        .collect();
    let mut out: Vec<String> = toks.iter().map(|t| t.to_string()).collect();
    for w in toks.windows(2) {
        out.push(format!("{} {}", w[0], w[1]));
    }
    out
}

/// A fitted vocabulary: term -> column, and each column's idf.
#[derive(Serialize, Deserialize, Clone, Default)]
pub(crate) struct Tfidf {
    pub terms: Vec<String>,
    pub idf: Vec<f32>,
    #[serde(skip)]
    pub map: HashMap<String, u32>,
}

impl Tfidf {
    /// Fits on the texts of `rows`: terms in at least 2 of them, at most [`MAX_VOCAB`];
    /// idf = ln((1 + n) / (1 + df)) + 1.
    pub fn fit(texts: &[String], rows: &[usize]) -> Tfidf {
        let mut df: HashMap<String, u32> = HashMap::new();
        for &r in rows {
            let mut t = terms(&texts[r]);
            t.sort_unstable();
            t.dedup();
            for w in t {
                *df.entry(w).or_insert(0) += 1;
            }
        }
        let mut v: Vec<(String, u32)> = df.into_iter().filter(|(_, d)| *d >= 2).collect();
        v.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        v.truncate(MAX_VOCAB);
        let n = rows.len() as f32;
        let idf = v
            .iter()
            .map(|(_, d)| ((1.0 + n) / (1.0 + *d as f32)).ln() + 1.0)
            .collect();
        let mut t = Tfidf {
            terms: v.into_iter().map(|(w, _)| w).collect(),
            idf,
            map: HashMap::new(),
        };
        t.index();
        t
    }

    /// Rebuilds the term map (after deserialising).
    pub fn index(&mut self) {
        self.map = self
            .terms
            .iter()
            .enumerate()
            .map(|(i, w)| (w.clone(), i as u32))
            .collect();
    }

    /// Appends the L2-normalised TF-IDF row of `s` (sublinear tf = 1 + ln tf) to `out`.
    pub fn row(&self, s: &str, out: &mut Csr) {
        let mut tf: HashMap<u32, f32> = HashMap::new();
        for w in terms(s) {
            if let Some(&j) = self.map.get(&w) {
                *tf.entry(j).or_insert(0.0) += 1.0;
            }
        }
        let mut v: Vec<(u32, f32)> = tf
            .into_iter()
            .map(|(j, c)| (j, (1.0 + c.ln()) * self.idf[j as usize]))
            .collect();
        v.sort_unstable_by_key(|p| p.0);
        let n = v.iter().map(|p| p.1 * p.1).sum::<f32>().sqrt();
        let idx: Vec<u32> = v.iter().map(|p| p.0).collect();
        let val: Vec<f32> = v
            .iter()
            .map(|p| if n > 0.0 { p.1 / n } else { 0.0 })
            .collect();
        out.push(&idx, &val);
    }
}
