//! The feature matrix of [`train`] and [`predict`]: its layout (names and widths) and the
//! features of the query rows, each as of its own time; the labels a row may see.

use super::*;

pub(crate) struct Layout<'a> {
    pub(crate) classes: Option<&'a [String]>,
    pub(crate) k: usize,
    pub(crate) has_knn: bool,
    pub(crate) has_text: bool,
    /// Every history path's name: the dataset's, then the crossed ones.
    pub(crate) paths: Vec<String>,
    /// Each path also has `{path}:age` and `{path}:rows` (models trained since 0.12.0).
    pub(crate) path_stats: bool,
    pub(crate) numbers: Vec<String>,
    /// Vocabularies of the category columns.
    pub(crate) cats: Vec<(String, Vec<String>)>,
}

impl Layout<'_> {
    pub(crate) fn nc(&self) -> usize {
        self.classes.map_or(0, |c| c.len())
    }
    pub(crate) fn knn_w(&self) -> usize {
        if !self.has_knn {
            0
        } else if self.classes.is_some() {
            2 * self.nc() + 2
        } else {
            6
        }
    }
    pub(crate) fn text_w(&self) -> usize {
        if !self.has_text {
            0
        } else {
            self.classes.map_or(1, |c| c.len())
        }
    }
    pub(crate) fn hist_w(&self) -> usize {
        self.classes.map_or(2, |c| c.len()) // counts per class, or [sum, count]
    }
    /// Columns per path: the shares and the count (numbers: the mean and the count), then the
    /// age and the rows with `path_stats`.
    pub(crate) fn path_w(&self) -> usize {
        self.hist_w() + usize::from(self.classes.is_some()) + if self.path_stats { 2 } else { 0 }
    }
    pub(crate) fn nf(&self) -> usize {
        self.knn_w()
            + self.text_w()
            + self.paths.len() * self.path_w()
            + self.numbers.len()
            + self.cats.len()
    }
    pub(crate) fn names(&self) -> Vec<String> {
        let mut v = Vec::new();
        let k5 = 5 * self.k;
        if self.has_knn {
            match self.classes {
                Some(c) => {
                    for kk in [self.k, k5] {
                        for cl in c {
                            v.push(format!("knn@{kk}:{cl}"));
                        }
                    }
                }
                None => {
                    for kk in [self.k, k5] {
                        v.push(format!("knn@{kk}:mean"));
                        v.push(format!("knn@{kk}:std"));
                    }
                }
            }
            v.push("knn:top_sim".into());
            v.push("knn:count".into());
        }
        if self.has_text {
            match self.classes {
                Some(c) => v.extend(c.iter().map(|cl| format!("text:{cl}"))),
                None => v.push("text:value".into()),
            }
        }
        for p in &self.paths {
            match self.classes {
                Some(c) => v.extend(c.iter().map(|cl| format!("{p}:{cl}"))),
                None => v.push(format!("{p}:mean")),
            }
            v.push(format!("{p}:count"));
            if self.path_stats {
                v.push(format!("{p}:log_age"));
                v.push(format!("{p}:log_rows"));
            }
        }
        v.extend(self.numbers.iter().cloned());
        v.extend(self.cats.iter().map(|c| c.0.clone()));
        v
    }
}

/// Features of the `queries` (n_q x nf row-major, NaN = missing), given the text features
/// (n_q x text_w) and the known labels; plus each query's neighbours and per-path counts.
pub(crate) type Feats = (Vec<f32>, Vec<Vec<(u32, f32)>>, Vec<Vec<f64>>);

/// Where the k-NN votes' neighbours come from.
pub(crate) enum Neighbours {
    /// A search among the known rows; with a time, each query at or after it also gets its
    /// neighbours among the known rows strictly before it (the second result of
    /// [`features`]; `knn::search`'s `snap`).
    Search(Option<f64>),
    /// Lists given, one per query (from such a snapshot).
    Given(knn::Lists),
}

/// Features of the `queries`, with the k-NN neighbours searched or given (`nb`); also the
/// snapshot's lists of a search with a time (else empty).
#[allow(clippy::too_many_arguments)]
pub(crate) fn features(
    ds: &Dataset,
    lay: &Layout,
    paths: &[&GroupPath],
    known: &[Option<Y>],
    queries: &[u32],
    text_feats: &[f32],
    cut: Option<&[f64]>,
    nb: Neighbours,
    threads: usize,
    sh: &Shared,
) -> Option<(Feats, knn::Lists)> {
    let nf = lay.nf();
    let nq = queries.len();
    let mut x = vec![f32::NAN; nq * nf];
    let as_of = ds.as_of.as_deref();
    let mut col = 0;
    let mut neigh = vec![Vec::new(); nq];
    let mut snaps = Vec::new();
    if lay.has_knn {
        let emb = ds.embedding.as_ref()?;
        let k5 = 5 * lay.k;
        let res = match nb {
            Neighbours::Search(snap) => {
                let kmask: Vec<bool> = known.iter().map(|y| y.is_some()).collect();
                let (res, s) = knn::search(emb, as_of, &kmask, queries, k5, threads, sh, snap)?;
                snaps = s;
                res
            }
            Neighbours::Given(v) => v,
        };
        let w = lay.knn_w();
        for (qi, lst) in res.into_iter().enumerate() {
            let row = &mut x[qi * nf + col..qi * nf + col + w];
            if emb.present[queries[qi] as usize] {
                for (part, kk) in [lay.k, k5].into_iter().enumerate() {
                    let top = &lst[..kk.min(lst.len())];
                    let ws: f64 = top.iter().map(|p| (p.1 as f64).max(1e-6)).sum();
                    match lay.classes {
                        Some(c) => {
                            let nc = c.len();
                            let mut s = vec![0f64; nc];
                            for &(j, sim) in top {
                                if let Some(Y::Class(cl)) = known[j as usize] {
                                    s[cl as usize] += (sim as f64).max(1e-6);
                                }
                            }
                            for (ci, v) in s.iter().enumerate() {
                                row[part * nc + ci] =
                                    if ws > 0.0 { (v / ws) as f32 } else { f32::NAN };
                            }
                        }
                        None => {
                            let (mut m, mut m2) = (0f64, 0f64);
                            for &(j, sim) in top {
                                if let Some(Y::Num(v)) = known[j as usize] {
                                    let wt = (sim as f64).max(1e-6);
                                    m += wt * v;
                                    m2 += wt * v * v;
                                }
                            }
                            if ws > 0.0 {
                                m /= ws;
                                row[part * 2] = m as f32;
                                row[part * 2 + 1] = (m2 / ws - m * m).max(0.0).sqrt() as f32;
                            }
                        }
                    }
                }
                row[w - 2] = lst.first().map_or(f32::NAN, |p| p.1);
                row[w - 1] = lst.len() as f32;
            }
            neigh[qi] = lst;
        }
        col += w;
    }
    if sh.stopped() {
        return None;
    }
    let tw = lay.text_w();
    for qi in 0..nq {
        x[qi * nf + col..qi * nf + col + tw].copy_from_slice(&text_feats[qi * tw..(qi + 1) * tw]);
    }
    col += tw;
    let hist_counts = history_columns(ds, lay, paths, known, queries, cut, &mut x, col, sh)?;
    col += paths.len() * lay.path_w();
    for (_, v) in &ds.numbers {
        for (qi, &q) in queries.iter().enumerate() {
            x[qi * nf + col] = v[q as usize].map_or(f32::NAN, |v| v as f32);
        }
        col += 1;
    }
    for (ci, (_, v)) in ds.categories.iter().enumerate() {
        let vocab: HashMap<&str, usize> = lay.cats[ci]
            .1
            .iter()
            .enumerate()
            .map(|(i, s)| (s.as_str(), i))
            .collect();
        for (qi, &q) in queries.iter().enumerate() {
            x[qi * nf + col] = v[q as usize]
                .as_deref()
                .and_then(|s| vocab.get(s))
                .map_or(f32::NAN, |&i| i as f32);
        }
        col += 1;
    }
    debug_assert_eq!(col, nf);
    Some(((x, neigh, hist_counts), snaps))
}

/// The first column of the history paths' columns.
pub(crate) fn history_col(lay: &Layout) -> usize {
    lay.knn_w() + lay.text_w()
}

/// Writes the history columns of every path (`lay.path_w()` each, from column `col` of the
/// `nq x nf` matrix `x`) of the `queries`: label shares (numbers: the mean) and count of the
/// known rows strictly earlier than the query's cut (`cut`, default its own as_of; without as_of
/// every other row), then with `lay.path_stats` ln(1 + the age of the newest of them: the
/// query's as_of minus its as_of; NaN when none) and ln(1 + the rows of any label, or none,
/// strictly earlier than the query). Returns each query's count per path (the prediction's evidence).
#[allow(clippy::too_many_arguments)]
pub(crate) fn history_columns(
    ds: &Dataset,
    lay: &Layout,
    paths: &[&GroupPath],
    known: &[Option<Y>],
    queries: &[u32],
    cut: Option<&[f64]>,
    x: &mut [f32],
    mut col: usize,
    sh: &Shared,
) -> Option<Vec<Vec<f64>>> {
    let n = known.len();
    let nf = lay.nf();
    let nq = queries.len();
    let as_of = ds.as_of.as_deref();
    let hw = lay.hist_w();
    let outw = lay.path_w();
    let mut hist_counts = vec![Vec::new(); nq];
    // A few queries (one row's prediction): each one's related rows directly; else the sweep.
    let direct = nq * 64 <= n;
    for p in paths {
        let st = if direct {
            history::stats_for(p, n, as_of, known, hw, queries, cut)
        } else {
            history::stats(p, n, as_of, known, hw, queries, cut)
        };
        for (qi, &q) in queries.iter().enumerate() {
            let r = &st.counts[qi * hw..(qi + 1) * hw];
            let dst = &mut x[qi * nf + col..qi * nf + col + outw];
            let total = if lay.classes.is_some() {
                r.iter().sum::<f64>()
            } else {
                r[1]
            };
            let share = |v: f64| {
                if total > 0.0 {
                    (v / total) as f32
                } else {
                    f32::NAN
                }
            };
            let mut c = if lay.classes.is_some() {
                for ci in 0..hw {
                    dst[ci] = share(r[ci]);
                }
                hw
            } else {
                dst[0] = share(r[0]);
                1
            };
            dst[c] = total as f32;
            c += 1;
            if lay.path_stats {
                // log1p: the GBDT's splits are the same, the logistic head's scale is not.
                dst[c] = match as_of {
                    Some(t) => (t[q as usize] - st.newest[qi]).max(0.0).ln_1p() as f32,
                    None => f32::NAN,
                };
                dst[c + 1] = st.rows[qi].ln_1p() as f32;
            }
            hist_counts[qi].push(total);
        }
        col += outw;
        if sh.stopped() {
            return None;
        }
    }
    Some(hist_counts)
}

/// The history paths of a model or a training run: the dataset's, then for each `(a, b)` of
/// `cross` the path crossing paths a and b ([`history::cross`], unchecked: as at training).
pub(crate) fn crossed_paths(ds: &Dataset, cross: &[(usize, usize)]) -> Vec<GroupPath> {
    let n = check_shapes(ds).unwrap_or(0);
    cross
        .iter()
        .filter_map(|&(a, b)| history::cross(&ds.paths[a], &ds.paths[b], n, false))
        .collect()
}

pub(crate) fn check_shapes(ds: &Dataset) -> Result<usize, Error> {
    let n = match &ds.label {
        Labels::Category(v) => v.len(),
        Labels::Number(v) => v.len(),
    };
    let bad = |what: &str, len: usize| {
        Error::Invalid(format!("{what} has {len} rows, the label has {n}"))
    };
    if let Some(a) = &ds.as_of {
        if a.len() != n {
            return Err(bad("as_of", a.len()));
        }
        if a.iter().any(|v| v.is_nan()) {
            return Err(Error::Invalid("as_of has NaN".into()));
        }
    }
    if let Some(t) = &ds.text {
        if t.len() != n {
            return Err(bad("text", t.len()));
        }
    }
    if let Some(e) = &ds.embedding {
        if e.present.len() != n || e.data.len() != n * e.dim {
            return Err(bad("embedding", e.present.len()));
        }
    }
    for (name, v) in &ds.numbers {
        if v.len() != n {
            return Err(bad(name, v.len()));
        }
    }
    for (name, v) in &ds.categories {
        if v.len() != n {
            return Err(bad(name, v.len()));
        }
    }
    Ok(n)
}

/// Known labels: rows with `keep(i)` and a label (classes mapped by `classes`).
pub(crate) fn known_labels(
    ds: &Dataset,
    classes: Option<&[String]>,
    keep: impl Fn(usize) -> bool,
) -> Vec<Option<Y>> {
    match &ds.label {
        Labels::Category(v) => {
            let map: fnv::FnvHashMap<&str, u32> = classes
                .unwrap_or(&[])
                .iter()
                .enumerate()
                .map(|(i, c)| (c.as_str(), i as u32))
                .collect();
            v.iter()
                .enumerate()
                .map(|(i, l)| {
                    if keep(i) {
                        l.as_deref().and_then(|s| map.get(s)).map(|&c| Y::Class(c))
                    } else {
                        None
                    }
                })
                .collect()
        }
        Labels::Number(v) => v
            .iter()
            .enumerate()
            .map(|(i, l)| {
                if keep(i) {
                    l.filter(|x| x.is_finite()).map(Y::Num)
                } else {
                    None
                }
            })
            .collect(),
    }
}
