//! The text model's features at training: TF-IDF + a linear model (logistic, or least squares
//! for numbers), its setting chosen on the validation slice from `head::TEXT_GRID`, then
//! forward-chained out-of-fold probabilities for the training rows (each row scored by a model of
//! earlier rows only: the stacking of Wolpert 1992 in time order), the full model's for the test
//! rows, and with stale validation the early rows' model's for the validation rows (and for each
//! earlier validation slice, a model of the rows before it with the chosen setting).

use super::*;

/// Fits of the text model after its setting is chosen: 5 forward-chained (or 5 round-robin) folds
/// and the full model.
const TEXT_FOLDS: u64 = 6;

/// Rows of a training, as positions: `train` (dataset rows of the training rows), `queries`
/// (dataset rows: the training rows, then the test rows), `early` and `valid` (positions in
/// `train` of the rows before the validation slice and of the slice), and `earlier`: each
/// earlier validation slice's (rows before it, its rows), as positions.
pub(crate) struct TextRows<'a> {
    pub train: &'a [usize],
    pub queries: &'a [u32],
    pub early: &'a [usize],
    pub valid: &'a [usize],
    pub earlier: Vec<(&'a [usize], &'a [usize])>,
}

/// The text model, the queries' text features, each validation slice's rows' (latest first;
/// see [`text_features`]).
pub(crate) type TextFeatures = (Option<TextModel>, Vec<f32>, Vec<Vec<f32>>);

/// The text model (`None` when stopped early or no fit was possible) and its features:
/// `[queries, tw]` f32 (out-of-fold for training rows, NaN for a row no fold scored) and,
/// with `stale`, `[valid, tw]` f32 of the early rows' model, then for each earlier slice
/// `[its rows, tw]` f32 of a model of the rows before it (the setting chosen on the latest
/// slice). `target` is (a category label, classes). Errors: Cancelled (from `ctl`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn text_features(
    texts: &[String],
    as_of: Option<&[f64]>,
    known: &[Option<Y>],
    rows: TextRows,
    stale: bool,
    target: (bool, usize),
    tw: usize,
    threads: usize,
    ctl: &dyn Control,
) -> Result<TextFeatures, Error> {
    let TextRows {
        train: train_rows,
        queries,
        early,
        valid,
        earlier,
    } = rows;
    // The earlier slices' models only with stale validation.
    let earlier = if stale { earlier } else { Vec::new() };
    let (is_class, nc) = target;
    let nq = queries.len();
    // Progress in epochs (Linear::fit ticks one an epoch, fit_on one a fit): the grid's
    // fits, then at most TEXT_FOLDS fits of the chosen setting, counted as the longest.
    let per_fit = |f: &Fit| f.epochs as u64 + 1;
    let grid_ticks: u64 = TEXT_GRID.iter().map(per_fit).sum();
    let fold_ticks =
        (TEXT_FOLDS + earlier.len() as u64) * TEXT_GRID.iter().map(per_fit).max().unwrap_or(1);
    polled(ctl, "text", grid_ticks + fold_ticks, |sh| {
        let tfidf = text::Tfidf::fit(texts, train_rows);
        let mut csr = Csr::new(tfidf.terms.len());
        for &q in queries {
            tfidf.row(&texts[q as usize], &mut csr);
        }
        let ntr = train_rows.len();
        // Positions (into queries) of the training rows in time order.
        let mut order: Vec<usize> = (0..ntr).collect();
        if let Some(t) = as_of {
            order.sort_by(|&a, &b| {
                t[train_rows[a]]
                    .total_cmp(&t[train_rows[b]])
                    .then(a.cmp(&b))
            });
        }
        let target_of = |pos: &[usize]| -> (Vec<u32>, Vec<f64>) {
            let (mut c, mut v) = (Vec::new(), Vec::new());
            for &p in pos {
                match known[train_rows[p]] {
                    Some(Y::Class(x)) => c.push(x),
                    Some(Y::Num(x)) => v.push(x),
                    None => {}
                }
            }
            (c, v)
        };
        // folds: (rows scored, rows fitted)
        let mut folds: Vec<(Vec<usize>, Vec<usize>)> = Vec::new();
        match as_of {
            Some(t) => {
                let nb = 6;
                for b in 1..nb {
                    let block: Vec<usize> = order[b * ntr / nb..(b + 1) * ntr / nb].to_vec();
                    if block.is_empty() {
                        continue;
                    }
                    let t0 = t[train_rows[block[0]]];
                    let fitr: Vec<usize> = order
                        .iter()
                        .copied()
                        .filter(|&p| t[train_rows[p]] < t0)
                        .collect();
                    folds.push((block, fitr));
                }
            }
            None => {
                for f in 0..5 {
                    let block: Vec<usize> = (0..ntr).filter(|p| p % 5 == f).collect();
                    let fitr: Vec<usize> = (0..ntr).filter(|p| p % 5 != f).collect();
                    folds.push((block, fitr));
                }
            }
        }
        let fit_on = |fitr: &[usize], set: Fit| -> Option<Linear> {
            let (c, v) = target_of(fitr);
            let y = if is_class {
                Target::Class(&c, nc)
            } else {
                Target::Value(&v)
            };
            let m = Linear::fit(&csr, fitr, &y, set, sh);
            sh.tick(1);
            m
        };
        let mut out_v = vec![f32::NAN; if stale { valid.len() * tw } else { 0 }];
        let mut buf = vec![0f32; tw];
        // The validation rows scored by models of the early rows alone, one per setting of
        // TEXT_GRID; the setting whose text alone scores best there (accuracy, or -MAE; ties
        // to the earlier) fits every other fold, as a data scientist picks TF-IDF + LR's C on
        // a time-ordered validation slice (benches/learn.py does). With as_of, that model's
        // probabilities are the validation rows' text features (stale validation).
        let mut set = TEXT_GRID[0];
        if !valid.is_empty() {
            // Each setting's (score, validation rows' probabilities); its model is dropped.
            let epochs = |gi: usize| TEXT_GRID[gi].epochs as u64;
            let scored =
                par::par_map_longest_first(threads, TEXT_GRID.len(), &sh.stop, epochs, |gi| {
                    let m = fit_on(early, TEXT_GRID[gi])?;
                    let mut pv = vec![f32::NAN; valid.len() * tw];
                    let mut score = 0f64;
                    let mut buf = vec![0f32; tw];
                    for (vi, &p) in valid.iter().enumerate() {
                        let (i, v) = csr.row(p);
                        m.predict(i, v, &mut buf);
                        pv[vi * tw..(vi + 1) * tw].copy_from_slice(&buf);
                        score += match known[train_rows[p]] {
                            Some(Y::Class(c)) => f64::from(u8::from(argmax(&buf) == c as usize)),
                            Some(Y::Num(x)) => -(f64::from(buf[0]) - x).abs(),
                            None => 0.0,
                        };
                    }
                    Some((score, pv))
                });
            if sh.stopped() {
                return Ok((None, Vec::new(), Vec::new()));
            }
            let mut best = f64::NEG_INFINITY;
            for (gi, r) in scored.into_iter().enumerate() {
                let Some(Some((score, pv))) = r else { continue };
                if score > best {
                    best = score;
                    set = TEXT_GRID[gi];
                    if stale {
                        out_v = pv;
                    }
                }
            }
        }
        if valid.is_empty() {
            sh.tick(grid_ticks);
        }
        let all: Vec<usize> = (0..ntr).collect();
        folds.push((Vec::new(), all));
        debug_assert!(folds.len() as u64 <= TEXT_FOLDS);
        let nfold = folds.len();
        // Then each earlier slice's model: its rows scored, the rows before it fitted.
        for &(e, v) in &earlier {
            folds.push((v.to_vec(), e.to_vec()));
        }
        sh.tick(fold_ticks.saturating_sub(folds.len() as u64 * per_fit(&set)));
        let rows = |fi: usize| folds[fi].1.len() as u64;
        let fits = par::par_map_longest_first(threads, folds.len(), &sh.stop, rows, |fi| {
            let fitr = &folds[fi].1;
            if fitr.is_empty() {
                return None;
            }
            fit_on(fitr, set)
        });
        if sh.stopped() {
            return Ok((None, Vec::new(), Vec::new()));
        }
        let mut out = vec![f32::NAN; nq * tw];
        let mut outs = vec![out_v];
        outs.extend(earlier.iter().map(|(_, v)| vec![f32::NAN; v.len() * tw]));
        let mut full = None;
        for (fi, m) in fits.into_iter().enumerate() {
            let Some(Some(m)) = m else { continue };
            if fi >= nfold {
                let o = &mut outs[fi - nfold + 1];
                for (vi, &p) in folds[fi].0.iter().enumerate() {
                    let (i, v) = csr.row(p);
                    m.predict(i, v, &mut buf);
                    o[vi * tw..(vi + 1) * tw].copy_from_slice(&buf);
                }
            } else if fi + 1 == nfold {
                for qi in ntr..nq {
                    let (i, v) = csr.row(qi);
                    m.predict(i, v, &mut buf);
                    out[qi * tw..(qi + 1) * tw].copy_from_slice(&buf);
                }
                full = Some(m);
            } else {
                for &p in &folds[fi].0 {
                    let (i, v) = csr.row(p);
                    m.predict(i, v, &mut buf);
                    out[p * tw..(p + 1) * tw].copy_from_slice(&buf);
                }
            }
        }
        Ok((full.map(|lin| TextModel { tfidf, lin }), out, outs))
    })
}
