//! [`predict`]: the targets' features from the stored model's layout, then its head.

use super::*;

/// Predicts the `targets` (row indices of `ds`, which must have the columns the model was
/// trained with): features from every labelled row of `ds` (the target itself excluded; with
/// as_of only strictly earlier rows). Results in the order of `targets`.
pub fn predict(
    model: &Model,
    ds: &Dataset,
    targets: &[u32],
    ctl: &dyn Control,
) -> Result<Vec<Prediction>, Error> {
    let n = check_shapes(ds)?;
    if let Some(&t) = targets.iter().find(|&&t| t as usize >= n) {
        return Err(Error::Invalid(format!(
            "target row {t} is out of range (n = {n})"
        )));
    }
    let names_num: Vec<String> = ds.numbers.iter().map(|p| p.0.clone()).collect();
    let names_cat: Vec<String> = ds.categories.iter().map(|p| p.0.clone()).collect();
    let names_path: Vec<String> = ds.paths.iter().map(|p| p.name.clone()).collect();
    if names_num != model.numbers
        || names_cat
            != model
                .categories
                .iter()
                .map(|c| c.0.clone())
                .collect::<Vec<_>>()
        || names_path != model.paths
        || (model.has_knn && ds.embedding.is_none())
        || ds.text.is_some() != model.text.is_some()
        || matches!(ds.label, Labels::Category(_)) != model.classes.is_some()
    {
        return Err(Error::Model(
            "the dataset does not have the columns the model was trained with".into(),
        ));
    }
    let known = known_labels(ds, model.classes.as_deref(), |_| true);
    let lay = model.layout();
    let crossed = crossed_paths(ds, &model.cross);
    let paths: Vec<&GroupPath> = ds.paths.iter().chain(&crossed).collect();
    let nf = lay.nf();
    let threads = model.threads.max(1);
    let mut uq: Vec<u32> = targets.to_vec();
    uq.sort_unstable();
    uq.dedup();
    let nq = uq.len();
    let tw = lay.text_w();
    let mut tf = vec![f32::NAN; nq * tw];
    if let (Some(tm), Some(texts)) = (&model.text, &ds.text) {
        let mut csr = Csr::new(tm.tfidf.terms.len());
        let mut buf = vec![0f32; tw];
        for (qi, &q) in uq.iter().enumerate() {
            if qi % 4096 == 0 {
                ctl.check()?;
            }
            tm.tfidf.row(&texts[q as usize], &mut csr);
            let (i, v) = csr.row(qi);
            tm.lin.predict(i, v, &mut buf);
            tf[qi * tw..(qi + 1) * tw].copy_from_slice(&buf);
        }
    }
    let (x, neigh, hist) = polled(ctl, "features", nq as u64, |sh| {
        let nb = Neighbours::Search(None);
        features(ds, &lay, &paths, &known, &uq, &tf, None, nb, threads, sh)
            .map(|f| f.0)
            .ok_or(Error::Cancelled("stopped".into()))
    })?;
    let kout = model.classes.as_ref().map_or(1, |c| c.len());
    let mut top: Vec<usize> = (0..nf).collect();
    top.sort_by(|&a, &b| model.importance[b].total_cmp(&model.importance[a]));
    top.truncate(5);
    let mut out = Vec::with_capacity(targets.len());
    let mut p = vec![0f32; kout];
    // The head runs on this thread: `ctl` is checked whenever about a million steps (tree nodes
    // or weights) were taken since the last check, and before the first row.
    let cost = head_cost(&model.head).max(1);
    let mut since = usize::MAX;
    for &t in targets {
        since = since.saturating_add(cost);
        if since >= 1 << 20 {
            ctl.check()?;
            since = 0;
        }
        let qi = uq.binary_search(&t).expect("target is in uq");
        let row = &x[qi * nf..(qi + 1) * nf];
        head_predict(&model.head, row, &mut p);
        let mut pr = Prediction {
            label: None,
            value: None,
            confidence: None,
            neighbours: neigh[qi]
                .iter()
                .take(model.k)
                .map(|&(j, s)| (j, s as f64))
                .collect(),
            history: lay
                .paths
                .iter()
                .cloned()
                .zip(hist[qi].iter().copied())
                .collect(),
            top_features: top
                .iter()
                .map(|&f| (model.feature_names[f].clone(), row[f] as f64))
                .collect(),
        };
        match &model.classes {
            Some(c) => {
                let b = argmax(&p);
                pr.label = Some(c[b].clone());
                pr.confidence = Some(p[b] as f64);
            }
            None => {
                pr.value = Some(p[0] as f64);
                pr.label = Some(format!("{}", p[0]));
            }
        }
        out.push(pr);
    }
    Ok(out)
}
