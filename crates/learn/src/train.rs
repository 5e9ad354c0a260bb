//! [`train`]: features, the validation slice, the heads, the report.

use super::*;

/// Forward time blocks of the training rows' history (the blocked scheme); as many as the text
/// model's forward-chained folds.
const HISTORY_BLOCKS: usize = 6;
/// Paths (of at most one group a row) whose pairs are crossed: at most 10 crossed paths.
const MAX_CROSSED_FROM: usize = 5;

/// Trains a predictor of `ds.label` from the rows marked [`Role::Train`] (`roles` has length n)
/// and scores it on the [`Role::Test`] rows. Errors: Invalid (no training rows, fewer than 2
/// classes, shapes), Memory, Cancelled (from `ctl`).
pub fn train(
    ds: &Dataset,
    roles: &[Role],
    opts: &TrainOptions,
    ctl: &dyn Control,
) -> Result<Trained, Error> {
    let n = check_shapes(ds)?;
    if roles.len() != n {
        return Err(Error::Invalid(format!(
            "roles has {} rows, the label has {n}",
            roles.len()
        )));
    }
    let threads = opts.threads.max(1);
    let k = opts.k.max(1);
    let has_label = |i: usize| match &ds.label {
        Labels::Category(v) => v[i].is_some(),
        Labels::Number(v) => v[i].is_some_and(|x| x.is_finite()),
    };
    let train_rows: Vec<usize> = (0..n)
        .filter(|&i| roles[i] == Role::Train && has_label(i))
        .collect();
    if train_rows.is_empty() {
        return Err(Error::Invalid(
            "no training rows: no row has role train and a label".into(),
        ));
    }
    let classes: Option<Vec<String>> = match &ds.label {
        Labels::Category(v) => {
            let mut c: Vec<String> = train_rows.iter().filter_map(|&i| v[i].clone()).collect();
            c.sort_unstable();
            c.dedup();
            if c.len() < 2 {
                return Err(Error::Invalid(format!(
                    "the label has {} class among the training rows, at least 2 are needed",
                    c.len()
                )));
            }
            Some(c)
        }
        Labels::Number(_) => None,
    };
    let known = known_labels(ds, classes.as_deref(), |i| roles[i] == Role::Train);
    let test_rows: Vec<usize> = (0..n)
        .filter(|&i| roles[i] == Role::Test && has_label(i))
        .collect();
    // Category vocabularies from the training rows (values only, no labels).
    let cats: Vec<(String, Vec<String>)> = ds
        .categories
        .iter()
        .map(|(name, v)| {
            let mut cnt: HashMap<&str, usize> = HashMap::new();
            for &r in &train_rows {
                if let Some(s) = &v[r] {
                    *cnt.entry(s.as_str()).or_insert(0) += 1;
                }
            }
            let mut e: Vec<(&str, usize)> = cnt.into_iter().collect();
            e.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
            e.truncate(1000);
            (
                name.clone(),
                e.into_iter().map(|p| p.0.to_string()).collect(),
            )
        })
        .collect();
    let (cross, crossed) = history::crossings(&ds.paths, n, MAX_CROSSED_FROM);
    let paths: Vec<&GroupPath> = ds.paths.iter().chain(&crossed).collect();
    let mut lay = Layout {
        classes: classes.as_deref(),
        k,
        has_knn: ds.embedding.is_some(),
        has_text: ds.text.is_some(),
        paths: paths.iter().map(|p| p.name.clone()).collect(),
        path_stats: true,
        numbers: ds.numbers.iter().map(|p| p.0.clone()).collect(),
        cats,
    };
    let nf = lay.nf();
    let nc = lay.nc();
    let kout = classes.as_ref().map_or(1, |c| c.len());
    // Queries: training then test rows.
    let queries: Vec<u32> = train_rows
        .iter()
        .chain(&test_rows)
        .map(|&r| r as u32)
        .collect();
    let nq = queries.len();
    let ntr = train_rows.len();
    let test_pos: Vec<usize> = (ntr..nq).collect();
    // Validation slices (slices.rs): the latest training rows by as_of (else by row order),
    // then the rows just before them; ties stay together.
    let mut order: Vec<usize> = (0..ntr).collect();
    let t_of = |p: usize| {
        ds.as_of
            .as_ref()
            .map_or(p as f64, |a| a[queries[p] as usize])
    };
    order.sort_by(|&a, &b| t_of(a).total_cmp(&t_of(b)).then(a.cmp(&b)));
    let slices = forward_slices(
        &order,
        t_of,
        opts.validation_fraction,
        opts.validation_slices,
        opts.validation_fit_rows,
        MIN_EARLIER_ROWS,
    );
    let all_train: Vec<usize> = (0..ntr).collect();
    // The latest slice's rows and the rows before it (every training row without a slice).
    let (early, valid): (&[usize], &[usize]) = match slices.first() {
        Some(s) => (&s.early, &s.valid),
        None => (&all_train, &[]),
    };
    // Stale validation (with as_of): the validation rows' features are computed as the test
    // rows' are, without any validation row's label (history, k-NN votes, and a text model fitted
    // on the early rows alone), so that the pick sees history as old as the test period will.
    let stale = ds.as_of.is_some() && !valid.is_empty();

    // Memory: the big allocations, estimated before any is made.
    // (the features: x, and at once at most one more of its size, the fresh history's matrix
    // or the copy without the k-NN votes, and the validation slices' stale features: disjoint
    // rows, so at most one more; an earlier slice's k-NN search runs after the search below,
    // with fewer queries and candidates)
    let mut needed =
        nq * nf * 4 * 3 + n * 72 + paths.iter().map(|p| p.pairs.len() * 24).sum::<usize>() * 2;
    if let Some(e) = &ds.embedding {
        needed += knn::memory(train_rows.len(), nq, e.dim, 5 * k, threads);
    }
    if let Some(t) = &ds.text {
        let bytes: usize = train_rows
            .iter()
            .chain(&test_rows)
            .map(|&r| t[r].len())
            .sum();
        // nnz ~ 2 terms per 5 bytes, 8 bytes each; the df table ~ 64 bytes per distinct term.
        let terms_est = (bytes / 3).min(text::MAX_VOCAB * 4);
        needed += bytes / 5 * 2 * 8
            + terms_est * 64
            + Linear::memory(terms_est.min(text::MAX_VOCAB), kout) * (threads + 1);
    }
    needed += gbdt::memory(nq, nf, kout, threads);
    mem_check(needed, opts.max_memory_bytes)?;

    // Text features: forward-chained out-of-fold for training rows, full model for test rows.
    let tw = lay.text_w();
    let mut text_feats = vec![f32::NAN; nq * tw];
    let mut text_model = None;
    // Each slice's rows' stale text features, latest first (none without stale validation).
    let mut text_valid: Vec<Vec<f32>> = Vec::new();
    if let Some(texts) = &ds.text {
        let rows = TextRows {
            train: &train_rows,
            queries: &queries,
            early,
            valid,
            earlier: slices
                .iter()
                .skip(1)
                .map(|s| (&s.early[..], &s.valid[..]))
                .collect(),
        };
        let target = (classes.is_some(), nc);
        (text_model, text_feats, text_valid) = text_features(
            texts,
            ds.as_of.as_deref(),
            &known,
            rows,
            stale,
            target,
            tw,
            threads,
            ctl,
        )?;
    }

    // Horizon: the training rows' history in forward time blocks, as a held-out period sees it.
    // The training rows in as_of order make HISTORY_BLOCKS blocks of equal size; a row of block b
    // counts the labels of rows earlier than the block's first row (block 0: none), so the age
    // of its newest label runs from the row's distance to its block's start up, as a predicted
    // row's grows with its distance from the last label known. (The other scheme, "fresh": every
    // label strictly earlier than the row, as an online prediction sees.) The test rows and
    // every predicted row read every known label strictly earlier than themselves either way.
    let blocked_cut: Option<Vec<f64>> = ds.as_of.as_ref().map(|t| {
        let rows: Vec<usize> = order.iter().map(|&p| queries[p] as usize).collect();
        history::blocked_cuts(t, &rows, HISTORY_BLOCKS)
    });
    // With stale validation, the validation rows' neighbours among the early rows come from
    // the same k-NN search (a snapshot at the first validation row's time).
    let snap = stale.then(|| t_of(valid[0]));
    let ((mut x, _neigh, _hist), mut snaps) = polled(ctl, "features", nq as u64, |sh| {
        features(
            ds,
            &lay,
            &paths,
            &known,
            &queries,
            &text_feats,
            blocked_cut.as_deref(),
            Neighbours::Search(snap),
            threads,
            sh,
        )
        .ok_or(Error::Cancelled("stopped".into()))
    })?;
    // The training rows' history columns as the fresh scheme builds them (hist_c columns each).
    let hist_at = history_col(&lay);
    let hist_c = lay.paths.len() * lay.path_w();
    let mut fresh_hist: Option<Vec<f32>> = if blocked_cut.is_some() && !paths.is_empty() {
        let tq = &queries[..ntr];
        polled(ctl, "fresh history", 1, |sh| {
            let mut xt = vec![f32::NAN; ntr * nf];
            history_columns(ds, &lay, &paths, &known, tq, None, &mut xt, hist_at, sh)
                .ok_or(Error::Cancelled("stopped".into()))?;
            Ok(xt
                .chunks_exact(nf)
                .flat_map(|r| r[hist_at..hist_at + hist_c].iter().copied())
                .collect())
        })
        .map(Some)?
    } else {
        None
    };
    drop(text_feats);
    // Each slice's stale features ([its rows, nf]), swapped into their rows of x while the
    // candidates are compared on that slice (the rows before a slice read only earlier rows,
    // all of them before it: the same either way). The latest slice's k-NN lists come from the
    // snapshot of the search above; an earlier slice's from a search of its rows among the rows
    // before it (smaller than the search above: fewer queries and candidates).
    let mut x_stale: Vec<Vec<f32>> = Vec::new();
    if stale {
        for (j, sl) in slices.iter().enumerate() {
            let nb = if lay.has_knn && j == 0 {
                Neighbours::Given(
                    sl.valid
                        .iter()
                        .map(|&p| std::mem::take(&mut snaps[p]))
                        .collect(),
                )
            } else {
                Neighbours::Search(None)
            };
            let stage = if j == 0 {
                "validation features".to_string()
            } else {
                format!("validation features {}", j + 1)
            };
            let tv = text_valid.get(j).map_or(&[][..], |v| &v[..]);
            x_stale.push(stale_features(
                ds, &lay, &paths, &known, &queries, &order, sl, tv, nb, &stage, threads, ctl,
            )?);
        }
    }
    drop(snaps);
    drop(text_valid);
    // Swaps slice j's rows of x with their stale features (twice: back as they were).
    let swap_stale = |x: &mut [f32], xs: &mut [Vec<f32>], j: usize| {
        if let Some(xv) = xs.get_mut(j) {
            swap_rows(x, nf, &slices[j].valid, xv);
        }
    };
    // Swaps the early rows' history columns of x with the fresh scheme's (twice: back).
    let swap_fresh = |x: &mut [f32], h: &mut Option<Vec<f32>>| {
        if let Some(h) = h {
            for &p in early {
                x[p * nf + hist_at..p * nf + hist_at + hist_c]
                    .swap_with_slice(&mut h[p * hist_c..(p + 1) * hist_c]);
            }
        }
    };

    // Head labels by position.
    let hy = match &ds.label {
        Labels::Category(_) => {
            let map: HashMap<&str, u32> = lay
                .classes
                .unwrap()
                .iter()
                .enumerate()
                .map(|(i, c)| (c.as_str(), i as u32))
                .collect();
            let Labels::Category(v) = &ds.label else {
                unreachable!()
            };
            HeadY::Class(
                queries
                    .iter()
                    .map(|&q| {
                        v[q as usize]
                            .as_deref()
                            .and_then(|s| map.get(s))
                            .copied()
                            // A test row's class unseen in training: never predicted, so wrong.
                            .unwrap_or(u32::MAX)
                    })
                    .collect(),
                nc,
            )
        }
        Labels::Number(v) => HeadY::Value(
            queries
                .iter()
                .map(|&q| v[q as usize].unwrap_or(f64::NAN))
                .collect(),
        ),
    };
    fn gy(hy: &HeadY) -> gbdt::Labels<'_> {
        match hy {
            HeadY::Class(c, k) => gbdt::Labels::Class(c, *k),
            HeadY::Value(v) => gbdt::Labels::Value(v),
        }
    }
    let params = gbdt::Params::default();
    let want_gbdt = opts.algorithm != Algorithm::Logistic;
    let want_lin = opts.algorithm != Algorithm::Gbdt;
    // The same features without the k-NN votes (the first knn_w columns): a candidate too, for an
    // embedding whose neighbours do not share the label only adds noise (chinook's invoice lines,
    // whose embedded text is mostly the customer's: their k-NN alone scores below the majority).
    let knn_w = lay.knn_w();
    let plain = |x: &[f32]| -> Vec<f32> {
        x.chunks_exact(nf)
            .flat_map(|r| r[knn_w..].iter().copied())
            .collect()
    };
    // The history schemes compared (with as_of and a validation slice: the blocked, then the
    // fresh one, each its early rows' history; the validation rows' is stale in both). x holds
    // one scheme's features at a time, the validation rows' stale features and the early rows'
    // fresh history swapped in and back out (no copy of x per scheme).
    let default_scheme = if blocked_cut.is_some() {
        "blocked"
    } else {
        "leave-one-out"
    };
    let mut schemes: Vec<&str> = vec![default_scheme];
    if fresh_hist.is_some() && !valid.is_empty() {
        schemes.push("fresh");
    }
    let has_plain = knn_w > 0 && !valid.is_empty();
    // Fits candidate `c` (its head, on the features `xv`, `nfv` a row: x with slice j's stale
    // features in, with the k-NN votes or not) on slice j's fit rows and scores it on the slice.
    let fit_score = |xv: &[f32], nfv: usize, j: usize, c: &mut Candidate| -> Result<(), Error> {
        let sl = &slices[j];
        let mut p = vec![0f32; sl.valid.len() * kout];
        let mut rounds = 0;
        if c.head == "gbdt" {
            let g = polled(ctl, "gbdt validation", params.rounds as u64, |sh| {
                gbdt::Gbdt::fit(
                    xv,
                    nfv,
                    &gy(&hy),
                    &sl.fit_rows,
                    &sl.valid,
                    params,
                    threads,
                    sh,
                )
                .ok_or(Error::Cancelled("stopped".into()))
            })?;
            for (i, &r) in sl.valid.iter().enumerate() {
                g.predict(
                    &xv[r * nfv..(r + 1) * nfv],
                    &mut p[i * kout..(i + 1) * kout],
                );
            }
            rounds = g.rounds.max(1);
        } else {
            let h = polled(ctl, "logistic validation", 15, |sh| {
                fit_lin_head(xv, nfv, &lay.cats, &hy, &sl.fit_rows, sh)
                    .ok_or(Error::Cancelled("stopped".into()))
            })?;
            let head = Head::Logistic(h);
            for (i, &r) in sl.valid.iter().enumerate() {
                head_predict(
                    &head,
                    &xv[r * nfv..(r + 1) * nfv],
                    &mut p[i * kout..(i + 1) * kout],
                );
            }
        }
        let split = split_name(j);
        c.metrics.push(metric(
            "predictor",
            c.head,
            &split,
            &hy,
            &sl.valid,
            &p,
            kout,
        ));
        if j == 0 {
            (c.latest, c.rounds) = (p, rounds);
        }
        Ok(())
    };
    let new_candidate = |gbdt_head: bool, knn: bool, scheme: usize| Candidate {
        head: if gbdt_head { "gbdt" } else { "logistic" },
        knn,
        scheme,
        metrics: Vec::new(),
        latest: Vec::new(),
        rounds: 0,
    };
    // The scheme: both heads (as the algorithm allows) with every feature on each scheme's
    // features; the scheme of the best of them is kept (ties: blocked); then the candidates
    // without the k-NN votes on the chosen scheme's features only. Each candidate is fitted and
    // scored on every slice (its score: the mean of the slices', slices.rs).
    let heads: Vec<bool> = [true, false]
        .into_iter()
        .filter(|&g| if g { want_gbdt } else { want_lin })
        .collect();
    // The k-NN alone for the report: the test rows' votes, or the latest slice's stale ones.
    swap_stale(&mut x, &mut x_stale, 0);
    let knn_rows: &[usize] = if test_pos.is_empty() {
        valid
    } else {
        &test_pos
    };
    let knn_scores: Option<Vec<f32>> = lay.has_knn.then(|| {
        let mut p = vec![0f32; knn_rows.len() * kout];
        for (i, &r) in knn_rows.iter().enumerate() {
            let v = &x[r * nf..r * nf + kout];
            for (j, &vv) in v.iter().enumerate() {
                p[i * kout + j] = if vv.is_nan() { -1.0 } else { vv };
            }
        }
        p
    });
    swap_stale(&mut x, &mut x_stale, 0);
    let mut cands: Vec<Candidate> = Vec::new();
    let mut chosen = 0;
    if !slices.is_empty() {
        let mut best_sc = f64::NEG_INFINITY;
        for si in 0..schemes.len() {
            if si == 1 {
                swap_fresh(&mut x, &mut fresh_hist);
            }
            let mut cs: Vec<Candidate> =
                heads.iter().map(|&g| new_candidate(g, true, si)).collect();
            for j in 0..slices.len() {
                swap_stale(&mut x, &mut x_stale, j);
                for c in &mut cs {
                    fit_score(&x, nf, j, c)?;
                }
                swap_stale(&mut x, &mut x_stale, j);
            }
            for c in &cs {
                if c.score() > best_sc {
                    best_sc = c.score();
                    chosen = si;
                }
            }
            cands.extend(cs);
        }
        // x as the chosen scheme has it, for the candidates without the k-NN votes.
        let fresh_in = schemes.len() > 1;
        if fresh_in && chosen == 0 {
            swap_fresh(&mut x, &mut fresh_hist);
        }
        if has_plain {
            let mut cs: Vec<Candidate> = heads
                .iter()
                .map(|&g| new_candidate(g, false, chosen))
                .collect();
            for j in 0..slices.len() {
                swap_stale(&mut x, &mut x_stale, j);
                let xp = plain(&x);
                swap_stale(&mut x, &mut x_stale, j);
                for c in &mut cs {
                    fit_score(&xp, nf - knn_w, j, c)?;
                }
            }
            cands.extend(cs);
        }
        if fresh_in && chosen == 1 {
            swap_fresh(&mut x, &mut fresh_hist);
        }
        // The chosen scheme's candidates only, in the order of the ties: without the k-NN
        // votes first, the GBDT first.
        cands.retain(|c| c.scheme == chosen);
        cands.sort_by_key(|c| (c.knn, c.head != "gbdt"));
    }
    // x as it was: every training row's own features.
    drop(x_stale);
    // The pick: the best score (accuracy, or -MAE; the mean over the slices) among the
    // candidates the algorithm allows; ties go to the earlier one: without the k-NN votes (fewer
    // features), the GBDT first.
    let mut best: Option<usize> = None;
    for (i, c) in cands.iter().enumerate() {
        if best.is_none_or(|b| c.score() > cands[b].score()) {
            best = Some(i);
        }
    }
    let (pick, use_knn, rounds, scheme) = match best {
        Some(b) => {
            let (algo, knn, si) = (cands[b].head, cands[b].knn, cands[b].scheme);
            (
                algo,
                knn,
                cands
                    .iter()
                    .find(|c| c.head == "gbdt" && c.knn == knn && c.scheme == si)
                    .map_or(params.rounds.min(150), |c| c.rounds),
                schemes[si],
            )
        }
        None => (
            if want_gbdt { "gbdt" } else { "logistic" },
            true,
            params.rounds.min(150),
            default_scheme,
        ),
    };
    // The report's validation rows: the candidates with the picked features and history.
    cands.retain(|c| c.knn == use_knn && schemes[c.scheme] == scheme);
    let leave_out_knn = has_plain && !use_knn;
    drop(schemes);
    if scheme == "fresh" {
        // Every training row gets the fresh history columns.
        if let Some(h) = &fresh_hist {
            for p in 0..ntr {
                x[p * nf + hist_at..p * nf + hist_at + hist_c]
                    .copy_from_slice(&h[p * hist_c..(p + 1) * hist_c]);
            }
        }
    }
    drop(fresh_hist);
    let (x, nf) = if leave_out_knn {
        lay.has_knn = false;
        (plain(&x), nf - knn_w)
    } else {
        (x, nf)
    };
    let (head, importance) = if pick == "gbdt" {
        let p = gbdt::Params { rounds, ..params };
        let g = polled(ctl, "gbdt", rounds as u64, |sh| {
            gbdt::Gbdt::fit(&x, nf, &gy(&hy), &all_train, &[], p, threads, sh)
                .ok_or(Error::Cancelled("stopped".into()))
        })?;
        let imp = g.importance.clone();
        (Head::Gbdt(g), imp)
    } else {
        let h = polled(ctl, "logistic", 15, |sh| {
            fit_lin_head(&x, nf, &lay.cats, &hy, &all_train, sh)
                .ok_or(Error::Cancelled("stopped".into()))
        })?;
        let imp = lin_importance(&h, nf);
        (Head::Logistic(h), imp)
    };

    // Report.
    let mut report = Vec::new();
    let (split, rows, predictor_scores) = if !test_pos.is_empty() {
        let mut p = vec![0f32; test_pos.len() * kout];
        for (i, &r) in test_pos.iter().enumerate() {
            head_predict(
                &head,
                &x[r * nf..(r + 1) * nf],
                &mut p[i * kout..(i + 1) * kout],
            );
        }
        ("test", test_pos.clone(), Some(p))
    } else {
        (
            "validation",
            valid.to_vec(),
            cands
                .iter()
                .find(|c| c.head == pick)
                .map(|c| c.latest.clone()),
        )
    };
    let base_rows: &[usize] = if split == "test" { &all_train } else { early };
    if !rows.is_empty() {
        if let Some(p) = predictor_scores {
            report.push(metric("predictor", pick, split, &hy, &rows, &p, kout));
        }
        if let Some(p) = &knn_scores {
            report.push(metric("knn", "knn", split, &hy, &rows, p, kout));
        }
        let (algo, p) = baseline(&hy, base_rows, rows.len(), kout);
        report.push(metric("baseline", algo, split, &hy, &rows, &p, kout));
    }
    // With test rows, the candidates' scores on each slice (split "validation" for the latest,
    // "validation 2" for the one before it, ...), then with more than one slice their means
    // ("validation mean": what the pick compared).
    if split == "test" {
        for j in 0..slices.len() {
            report.extend(cands.iter().filter_map(|c| c.metrics.get(j).cloned()));
        }
        if slices.len() > 1 {
            report.extend(cands.iter().map(Candidate::mean_row));
        }
    }
    let feature_names = lay.names();
    let model = Model {
        classes: classes.clone(),
        algorithm: pick.into(),
        feature_names: feature_names.clone(),
        k,
        has_knn: lay.has_knn,
        paths: ds.paths.iter().map(|p| p.name.clone()).collect(),
        numbers: lay.numbers.clone(),
        categories: lay.cats.clone(),
        text: text_model,
        head,
        importance,
        threads,
        path_stats: lay.path_stats,
        cross,
        history: scheme.into(),
    };
    Ok(Trained {
        model,
        report,
        feature_names,
    })
}
