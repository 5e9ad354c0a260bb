use super::*;
use std::cell::Cell;

struct NoCtl;
impl Control for NoCtl {
    fn check(&self) -> Result<(), Error> {
        Ok(())
    }
    fn progress(&self, _: &str, _: u64, _: u64) {}
}

/// Fails every check after the first `after` ones.
struct CancelAfter {
    after: usize,
    calls: Cell<usize>,
}
impl Control for CancelAfter {
    fn check(&self) -> Result<(), Error> {
        self.calls.set(self.calls.get() + 1);
        if self.calls.get() > self.after {
            Err(Error::Cancelled(
                "canceling statement due to user request".into(),
            ))
        } else {
            Ok(())
        }
    }
    fn progress(&self, _: &str, _: u64, _: u64) {}
}

fn rng(seed: &mut u64) -> f64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    (*seed >> 11) as f64 / (1u64 << 53) as f64
}

/// n rows, 3 classes; the class shows in the embedding, the text, a person path and a number.
fn synth(n: usize, with_time: bool) -> Dataset {
    let mut s = 0x1234_5678u64;
    let classes = ["red", "green", "blue"];
    let dim = 8;
    let mut label = Vec::new();
    let mut text = Vec::new();
    let mut data = Vec::new();
    let mut pairs = Vec::new();
    let mut num = Vec::new();
    let mut cat = Vec::new();
    for i in 0..n {
        let c = (rng(&mut s) * 3.0) as usize % 3;
        label.push(Some(classes[c].to_string()));
        let w = ["apple", "leaf", "sky"][c];
        let noise = ["foo", "bar", "baz", "qux"][(rng(&mut s) * 4.0) as usize % 4];
        text.push(if rng(&mut s) < 0.7 {
            format!("{w} {noise} thing")
        } else {
            format!("{noise} thing")
        });
        for d in 0..dim {
            data.push(if d == c { 1.0 } else { 0.0 } + rng(&mut s) as f32);
        }
        pairs.push((i as u32, (c * 10 + (rng(&mut s) * 10.0) as usize) as u64));
        pairs.push((i as u32, 100 + (rng(&mut s) * 30.0) as u64));
        num.push(if i % 7 == 0 {
            None
        } else {
            Some(c as f64 + rng(&mut s))
        });
        cat.push(Some(["x", "y"][i % 2].to_string()));
    }
    Dataset {
        as_of: if with_time {
            Some((0..n).map(|i| (i / 3) as f64).collect())
        } else {
            None
        },
        label: Labels::Category(label),
        text: Some(text),
        embedding: Some(Embeddings {
            dim,
            data,
            present: vec![true; n],
        }),
        paths: vec![GroupPath {
            name: "person".into(),
            pairs,
        }],
        numbers: vec![("runtime".into(), num)],
        categories: vec![("kind".into(), cat)],
    }
}

fn roles(n: usize) -> Vec<Role> {
    (0..n)
        .map(|i| {
            if i < n * 3 / 4 {
                Role::Train
            } else {
                Role::Test
            }
        })
        .collect()
}

fn opts(a: Algorithm) -> TrainOptions {
    TrainOptions {
        algorithm: a,
        threads: 2,
        ..Default::default()
    }
}

/// Features of the training + test rows as train computes them (via the internal pieces).
fn feats(ds: &Dataset, roles: &[Role]) -> (Vec<u32>, Vec<f32>, usize) {
    // Train with a GBDT and read the features back by predicting nothing: instead rebuild the
    // feature matrix through the same function train uses.
    let n = roles.len();
    let classes: Vec<String> = vec!["blue".into(), "green".into(), "red".into()];
    let known = known_labels(ds, Some(&classes), |i| roles[i] == Role::Train);
    let lay = Layout {
        classes: Some(&classes),
        k: 3,
        has_knn: true,
        has_text: false,
        paths: vec!["person".into()],
        path_stats: true,
        numbers: vec!["runtime".into()],
        cats: vec![("kind".into(), vec!["x".into(), "y".into()])],
    };
    let q: Vec<u32> = (0..n as u32)
        .filter(|&i| roles[i as usize] != Role::Ignore)
        .collect();
    let sh = par::Shared {
        stop: Default::default(),
        done: Default::default(),
    };
    let paths: Vec<&GroupPath> = ds.paths.iter().collect();
    let nb = Neighbours::Search(None);
    let ((x, _, _), _) = features(ds, &lay, &paths, &known, &q, &[], None, nb, 2, &sh).unwrap();
    (q, x, lay.nf())
}

fn same(a: f32, b: f32) -> bool {
    (a.is_nan() && b.is_nan()) || a == b
}

#[test]
fn test_label_never_reaches_features() {
    let n = 300;
    let ds = synth(n, false);
    let r = roles(n);
    let (_, x0, _) = feats(&ds, &r);
    let mut ds2 = synth(n, false);
    if let Labels::Category(v) = &mut ds2.label {
        for (i, l) in v.iter_mut().enumerate() {
            if r[i] == Role::Test {
                *l = Some("red".into());
            }
        }
    }
    let (_, x1, _) = feats(&ds2, &r);
    assert!(
        x0.iter().zip(&x1).all(|(a, b)| same(*a, *b)),
        "a test label changed some feature"
    );
    // And through train(): the text OOF features and the test rows' predictions stay the same.
    let a = train(&ds, &r, &opts(Algorithm::Gbdt), &NoCtl).unwrap();
    let b = train(&ds2, &r, &opts(Algorithm::Gbdt), &NoCtl).unwrap();
    assert_eq!(a.model.to_bytes(), b.model.to_bytes());
}

#[test]
fn later_label_never_reaches_earlier_features() {
    let n = 300;
    let ds = synth(n, true);
    let r = vec![Role::Train; n];
    let (q, x0, nf) = feats(&ds, &r);
    // Change the labels of the latest rows (as_of >= 80, rows 240..).
    let mut ds2 = synth(n, true);
    if let Labels::Category(v) = &mut ds2.label {
        for l in v.iter_mut().skip(240) {
            *l = Some("blue".into());
        }
    }
    let (_, x1, _) = feats(&ds2, &r);
    for (qi, &row) in q.iter().enumerate() {
        if row < 240 {
            for f in 0..nf {
                assert!(
                    same(x0[qi * nf + f], x1[qi * nf + f]),
                    "row {row} feature {f} saw a later label"
                );
            }
        }
    }
    // Ties: rows 240..242 share as_of 80: changing row 241 must not change row 240 or 242.
    let mut ds3 = synth(n, true);
    if let Labels::Category(v) = &mut ds3.label {
        v[241] = Some(
            if v[241].as_deref() == Some("blue") {
                "red"
            } else {
                "blue"
            }
            .into(),
        );
    }
    let (_, x3, _) = feats(&ds3, &r);
    for row in [240usize, 242] {
        for f in 0..nf {
            assert!(
                same(x0[row * nf + f], x3[row * nf + f]),
                "tie row {row} feature {f} saw row 241"
            );
        }
    }
    // And the text view: a model trained with the later labels changed has the same OOF text
    // features for the earlier rows -> compare via training with only early rows known.
}

fn counts(
    p: &GroupPath,
    n: usize,
    as_of: Option<&[f64]>,
    known: &[Option<Y>],
    w: usize,
) -> Vec<f64> {
    let q: Vec<u32> = (0..n as u32).collect();
    history::stats(p, n, as_of, known, w, &q, None).counts
}

#[test]
fn history_counts_are_strictly_earlier() {
    // Rows 0,1 at t=0, row 2 at t=1, all in group 7.
    let p = GroupPath {
        name: "g".into(),
        pairs: vec![(0, 7), (1, 7), (2, 7)],
    };
    let known = vec![Some(Y::Class(0)), Some(Y::Class(1)), Some(Y::Class(1))];
    let c = counts(&p, 3, Some(&[0.0, 0.0, 1.0]), &known, 2);
    assert_eq!(&c[0..2], &[0.0, 0.0]);
    assert_eq!(&c[2..4], &[0.0, 0.0]);
    assert_eq!(&c[4..6], &[1.0, 1.0]);
    // Leave-one-out without time.
    let c = counts(&p, 3, None, &known, 2);
    assert_eq!(&c[0..2], &[0.0, 2.0]);
    assert_eq!(&c[4..6], &[1.0, 1.0]);
}

/// A horizon's cut is obeyed: with cuts, no counted label is at or after the row's cut, the
/// newest counted label's time is below it, the rows of any label count every strictly earlier
/// row (the cut does not apply to them), and the counts equal a brute-force count.
#[test]
fn history_is_never_newer_than_the_cut() {
    let n = 400usize;
    let mut state = 11u64;
    let mut next = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) as usize
    };
    let pairs: Vec<(u32, u64)> = (0..n as u32).map(|r| (r, (next() % 12) as u64)).collect();
    let t: Vec<f64> = (0..n).map(|_| (next() % 80) as f64).collect();
    let cut: Vec<f64> = t.iter().map(|&x| x - (next() % 30) as f64).collect();
    let known: Vec<Option<Y>> = (0..n)
        .map(|_| match next() % 3 {
            0 => None,
            c => Some(Y::Class(c as u32 - 1)),
        })
        .collect();
    let p = GroupPath {
        name: "g".into(),
        pairs: pairs.clone(),
    };
    let q: Vec<u32> = (0..n as u32).collect();
    for st in [
        history::stats(&p, n, Some(&t), &known, 2, &q, Some(&cut)),
        history::stats_for(&p, n, Some(&t), &known, 2, &q, Some(&cut)),
    ] {
        for r in 0..n {
            let g = pairs[r].1;
            let mut want = [0f64; 2];
            let mut rows = 0f64;
            let mut newest = f64::NAN;
            for j in 0..n {
                if j == r || pairs[j].1 != g {
                    continue;
                }
                if t[j] < t[r] {
                    rows += 1.0;
                }
                if let (Some(Y::Class(c)), true) = (known[j], t[j] < cut[r]) {
                    want[c as usize] += 1.0;
                    newest = if newest.is_nan() {
                        t[j]
                    } else {
                        newest.max(t[j])
                    };
                }
            }
            assert_eq!(&st.counts[r * 2..r * 2 + 2], &want, "row {r}");
            assert_eq!(st.rows[r], rows, "row {r}");
            assert!(
                (st.newest[r].is_nan() && newest.is_nan()) || st.newest[r] == newest,
                "row {r}: {} vs {newest}",
                st.newest[r]
            );
            assert!(st.newest[r].is_nan() || st.newest[r] < cut[r]);
        }
    }
}

/// Training history in forward blocks: a training row's history features change only when a
/// label of an EARLIER block changes; relabelling rows of its own block (which are earlier than
/// it in time, and counted by the fresh scheme) leaves them alone.
#[test]
fn blocked_history_sees_only_earlier_blocks() {
    let n = 600usize;
    let t: Vec<f64> = (0..n).map(|i| i as f64).collect();
    // One group for all: every row's history is every earlier row's label.
    let pairs: Vec<(u32, u64)> = (0..n as u32).map(|r| (r, 1)).collect();
    let mk = |flip: Option<usize>| {
        let mut labels: Vec<Option<String>> = (0..n)
            .map(|i| Some(if i % 3 == 0 { "a" } else { "b" }.to_string()))
            .collect();
        if let Some(f) = flip {
            labels[f] = Some("a".into());
            labels[f + 1] = Some("a".into());
        }
        Dataset {
            as_of: Some(t.clone()),
            label: Labels::Category(labels),
            text: None,
            embedding: None,
            paths: vec![GroupPath {
                name: "g".into(),
                pairs: pairs.clone(),
            }],
            numbers: vec![],
            categories: vec![],
        }
    };
    let roles = vec![Role::Train; n];
    // 600 rows, 6 blocks of 100: rows 301 and 302 (block 3, not its first row) relabelled.
    let classes: Vec<String> = vec!["a".into(), "b".into()];
    let lay = Layout {
        classes: Some(&classes),
        k: 3,
        has_knn: false,
        has_text: false,
        paths: vec!["g".into()],
        path_stats: true,
        numbers: vec![],
        cats: vec![],
    };
    let sh = par::Shared {
        stop: Default::default(),
        done: Default::default(),
    };
    let cut: Vec<f64> = (0..n).map(|i| (i / 100 * 100) as f64).collect();
    let q: Vec<u32> = (0..n as u32).collect();
    let feats_of = |ds: &Dataset| {
        let known = known_labels(ds, Some(&classes), |i| roles[i] == Role::Train);
        let paths: Vec<&GroupPath> = ds.paths.iter().collect();
        features(
            ds,
            &lay,
            &paths,
            &known,
            &q,
            &[],
            Some(&cut),
            Neighbours::Search(None),
            1,
            &sh,
        )
        .unwrap()
        .0
         .0
    };
    let (x0, x1) = (feats_of(&mk(None)), feats_of(&mk(Some(301))));
    let nf = lay.nf();
    for r in 0..n {
        let row = |x: &[f32]| x[r * nf..(r + 1) * nf].to_vec();
        let same_row = row(&x0).iter().zip(row(&x1)).all(|(a, b)| same(*a, b));
        assert_eq!(same_row, r < 400, "row {r}");
    }
    // Block 0 sees no label; a row's age is its distance to the newest label before its block.
    assert!(x0[5 * nf].is_nan() && x0[5 * nf + 2] == 0.0);
    assert_eq!(x0[250 * nf + 2], 200.0, "count");
    assert_eq!(x0[250 * nf + 3], 51f64.ln_1p() as f32, "age: 250 - 199");
    assert_eq!(
        x0[250 * nf + 4],
        250f64.ln_1p() as f32,
        "rows: every earlier row"
    );
    // And train() builds exactly these for the blocked scheme, and says which it chose.
    let m = train(&mk(None), &roles, &opts(Algorithm::Gbdt), &NoCtl).unwrap();
    assert!(["blocked", "fresh"].contains(&m.model.history()));
}

/// Crossed paths: rows sharing both parents; none for a path of several groups a row, or when
/// one parent determines the other.
#[test]
fn crossed_paths_share_both_parents() {
    let a = GroupPath {
        name: "customer".into(),
        pairs: (0..40u32).map(|r| (r, (r % 4) as u64)).collect(),
    };
    let b = GroupPath {
        name: "category".into(),
        pairs: (0..40u32).map(|r| (r, (r % 5) as u64)).collect(),
    };
    let c = history::cross(&a, &b, 40, true).expect("20 pairs of 40 rows");
    assert_eq!(c.name, "customer&category");
    for &(r, g) in &c.pairs {
        for &(s, h) in &c.pairs {
            assert_eq!(g == h, r % 4 == s % 4 && r % 5 == s % 5);
        }
    }
    // One determines the other: nothing to add.
    let fine = GroupPath {
        name: "team".into(),
        pairs: (0..40u32).map(|r| (r, (r % 8) as u64)).collect(),
    };
    assert!(history::cross(&fine, &a, 40, true).is_none());
    // A link table (two groups a row): not crossed at training.
    let mut link = b.pairs.clone();
    link.push((0, 99));
    let l = GroupPath {
        name: "tag".into(),
        pairs: link,
    };
    assert!(history::cross(&a, &l, 40, true).is_none());
    assert!(history::cross(&a, &l, 40, false).is_some());
}

/// A search's snapshot lists (the stale validation rows' neighbours) equal a second search in
/// which only the rows before the snapshot's time are known, for every query at or after it;
/// the snapshot falls inside a candidate tile (tiles of knn::CB) and at time 0 (no candidates).
#[test]
fn knn_snapshot_equals_a_search_of_the_earlier_rows() {
    let n = 5000;
    let ds = synth(n, true);
    let emb = ds.embedding.as_ref().unwrap();
    let t = ds.as_of.as_deref().unwrap();
    let sh = par::Shared {
        stop: Default::default(),
        done: Default::default(),
    };
    let qs: Vec<u32> = (0..n as u32).collect();
    let known: Vec<bool> = (0..n).map(|i| i % 7 != 3).collect();
    let mut sorted = t.to_vec();
    sorted.sort_by(f64::total_cmp);
    for tc in [sorted[n * 3 / 4], sorted[n / 3], f64::NEG_INFINITY] {
        let (main, snaps) = knn::search(emb, Some(t), &known, &qs, 10, 2, &sh, Some(tc)).unwrap();
        let before: Vec<bool> = (0..n).map(|i| known[i] && t[i] < tc).collect();
        let (alone, _) = knn::search(emb, Some(t), &before, &qs, 10, 2, &sh, None).unwrap();
        let mut later = 0;
        for q in 0..n {
            if t[q] >= tc {
                later += 1;
                assert_eq!(snaps[q], alone[q], "query {q}, snapshot at {tc}");
                assert!(snaps[q].iter().all(|&(j, _)| t[j as usize] < tc));
            } else {
                assert!(snaps[q].is_empty());
                assert_eq!(main[q], alone[q], "query {q} is before the snapshot");
            }
        }
        assert!(later > 0);
    }
}

#[test]
fn knn_is_strictly_earlier_and_exact() {
    let ds = synth(200, true);
    let emb = ds.embedding.as_ref().unwrap();
    let known = vec![true; 200];
    let sh = par::Shared {
        stop: Default::default(),
        done: Default::default(),
    };
    let t = ds.as_of.as_deref().unwrap();
    let qs: Vec<u32> = (0..200).collect();
    let res = knn::search(emb, Some(t), &known, &qs, 5, 2, &sh, None)
        .unwrap()
        .0;
    for (q, lst) in res.iter().enumerate() {
        assert!(lst.iter().all(|&(j, _)| t[j as usize] < t[q]));
        // Brute force.
        let d = emb.dim;
        let norm = |i: usize| {
            let v = &emb.data[i * d..(i + 1) * d];
            let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            v.iter().map(|x| x / n).collect::<Vec<_>>()
        };
        let a = norm(q);
        let mut all: Vec<(f32, usize)> = (0..200)
            .filter(|&j| t[j] < t[q])
            .map(|j| (norm(j).iter().zip(&a).map(|(x, y)| x * y).sum::<f32>(), j))
            .collect();
        all.sort_by(|x, y| y.0.total_cmp(&x.0));
        assert_eq!(lst.len(), all.len().min(5));
        for (i, &(_, s)) in lst.iter().enumerate() {
            assert!((s - all[i].0).abs() < 1e-4);
        }
    }
}

#[test]
fn one_class_is_invalid() {
    let mut ds = synth(50, false);
    ds.label = Labels::Category(vec![Some("a".into()); 50]);
    match train(&ds, &roles(50), &opts(Algorithm::Auto), &NoCtl) {
        Err(Error::Invalid(m)) => assert!(m.contains("1 class"), "{m}"),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("trained on one class"),
    }
    let r = vec![Role::Test; 50];
    assert!(matches!(
        train(&synth(50, false), &r, &opts(Algorithm::Auto), &NoCtl),
        Err(Error::Invalid(_))
    ));
}

#[test]
fn cancel_returns_cancelled() {
    let ds = synth(3000, true);
    let r = roles(3000);
    for after in [0, 3, 20] {
        let ctl = CancelAfter {
            after,
            calls: Cell::new(0),
        };
        let t0 = std::time::Instant::now();
        match train(&ds, &r, &opts(Algorithm::Auto), &ctl) {
            Err(Error::Cancelled(_)) => {}
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("not cancelled after {after} checks"),
        }
        assert!(t0.elapsed().as_secs_f64() < 20.0);
    }
}

#[test]
fn memory_limit() {
    let ds = synth(500, true);
    let o = TrainOptions {
        max_memory_bytes: 10_000,
        ..opts(Algorithm::Auto)
    };
    match train(&ds, &roles(500), &o, &NoCtl) {
        Err(Error::Memory { needed, limit }) => assert!(needed > limit && limit == 10_000),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("no memory error"),
    }
}

#[test]
fn bytes_round_trip_and_quality() {
    let n = 900;
    let ds = synth(n, true);
    let r = roles(n);
    for a in [Algorithm::Gbdt, Algorithm::Logistic, Algorithm::Auto] {
        let t = train(&ds, &r, &opts(a), &NoCtl).unwrap();
        let pred = t
            .report
            .iter()
            .find(|m| m.method == "predictor" && m.split == "test")
            .unwrap();
        let base = t.report.iter().find(|m| m.method == "baseline").unwrap();
        assert!(pred.accuracy.unwrap() > 0.8, "{a:?}: {:?}", t.report);
        assert!(base.accuracy.unwrap() < 0.5);
        let targets: Vec<u32> = (n as u32 * 3 / 4..n as u32).collect();
        let p1 = predict(&t.model, &ds, &targets, &NoCtl).unwrap();
        let m2 = Model::from_bytes(&t.model.to_bytes()).unwrap();
        let p2 = predict(&m2, &ds, &targets, &NoCtl).unwrap();
        // Debug text: NaN feature values compare unequal with ==.
        assert!(
            format!("{p1:?}") == format!("{p2:?}"),
            "predictions differ after the round trip"
        );
        // The nearest rows are evidence when the k-NN votes are features (on these separable
        // rows the heads tie without them, and the tie leaves them out).
        let uses_knn = t.feature_names.iter().any(|f| f.starts_with("knn"));
        assert_eq!(p1[0].neighbours.len(), if uses_knn { 10 } else { 0 });
        assert_eq!(p1[0].history.len(), 1);
        assert!(!p1[0].top_features.is_empty());
        assert!(
            m2.classes().unwrap().len() == 3 && m2.feature_names().len() == t.feature_names.len()
        );
    }
    assert!(Model::from_bytes(b"nonsense").is_err());
}

#[test]
fn number_labels() {
    let n = 600;
    let mut ds = synth(n, true);
    let Labels::Category(v) = &ds.label else {
        panic!()
    };
    let nums: Vec<Option<f64>> = v
        .iter()
        .enumerate()
        .map(|(i, l)| {
            if i % 11 == 0 {
                None
            } else {
                Some(match l.as_deref() {
                    Some("red") => 10.0,
                    Some("green") => 20.0,
                    _ => 30.0,
                })
            }
        })
        .collect();
    ds.label = Labels::Number(nums);
    for a in [Algorithm::Gbdt, Algorithm::Logistic, Algorithm::Auto] {
        let t = train(&ds, &roles(n), &opts(a), &NoCtl).unwrap();
        let pred = t.report.iter().find(|m| m.method == "predictor").unwrap();
        let base = t.report.iter().find(|m| m.method == "baseline").unwrap();
        assert!(
            pred.mae.unwrap() < base.mae.unwrap() / 2.0,
            "{a:?} {:?}",
            t.report
        );
        assert!(t.model.classes().is_none());
        let p = predict(&t.model, &ds, &[599, 598], &NoCtl).unwrap();
        assert!(p[0].value.is_some() && p[0].label.is_some());
    }
}

/// An embedding whose neighbours do not share the label: `auto` leaves the k-NN votes out (the
/// validation slice scores the heads without them better) and the predictor still predicts from
/// a dataset that has the embedding; an embedding that alone carries the label keeps them.
#[test]
fn knn_votes_left_out_when_the_embedding_carries_no_label() {
    let n = 900;
    let knn_features = |t: &Trained| {
        t.model
            .feature_names()
            .iter()
            .filter(|f| f.starts_with("knn"))
            .count()
    };
    // Noise embedding: the label shows in the text, the path and the number only.
    let mut ds = synth(n, true);
    let mut s = 0xDEAD_BEEFu64;
    if let Some(e) = ds.embedding.as_mut() {
        e.data.iter_mut().for_each(|v| *v = rng(&mut s) as f32);
    }
    let t = train(&ds, &roles(n), &opts(Algorithm::Auto), &NoCtl).unwrap();
    assert_eq!(knn_features(&t), 0, "{:?}", t.report);
    let p = predict(&t.model, &ds, &[899, 898], &NoCtl).unwrap();
    assert!(p[0].label.is_some() && p[0].neighbours.is_empty());
    let knn_row = t.report.iter().find(|m| m.method == "knn").unwrap();
    assert!(knn_row.accuracy.unwrap() < 0.5, "{:?}", t.report);
    // Only the embedding carries the label: the votes stay.
    let mut ds = synth(n, true);
    ds.text = Some(vec!["thing".to_string(); n]);
    ds.paths.clear();
    ds.numbers.clear();
    ds.categories.clear();
    let t = train(&ds, &roles(n), &opts(Algorithm::Auto), &NoCtl).unwrap();
    assert!(knn_features(&t) > 0, "{:?}", t.report);
    let pred = t.report.iter().find(|m| m.method == "predictor").unwrap();
    assert!(pred.accuracy.unwrap() > 0.8, "{:?}", t.report);
    let p = predict(&t.model, &ds, &[899], &NoCtl).unwrap();
    assert!(!p[0].neighbours.is_empty());
}

/// Timing of the exact as-of k-NN: `KNN_ROWS=100000 cargo test -p tributary-learn --release
/// knn_timing -- --ignored --nocapture` (384 dims, 2 threads, k = 50).
#[test]
#[ignore]
fn knn_timing() {
    let n: usize = std::env::var("KNN_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let dim = 384;
    let mut s = 99u64;
    let data: Vec<f32> = (0..n * dim).map(|_| rng(&mut s) as f32 - 0.5).collect();
    let emb = Embeddings {
        dim,
        data,
        present: vec![true; n],
    };
    let t: Vec<f64> = (0..n).map(|i| i as f64).collect();
    let sh = par::Shared {
        stop: Default::default(),
        done: Default::default(),
    };
    let qs: Vec<u32> = (0..n as u32).collect();
    let t0 = std::time::Instant::now();
    let r = knn::search(&emb, Some(&t), &vec![true; n], &qs, 50, 2, &sh, None)
        .unwrap()
        .0;
    eprintln!(
        "knn {n} x {dim}, k=50, 2 threads: {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    assert_eq!(r[n - 1].len(), 50);
}

/// The direct counts of a few rows (one row's prediction) equal the sweep's, with and without
/// as_of, with duplicate pairs, rows in several groups, unknown labels and ties in time.
#[test]
fn history_counts_for_a_few_rows_equal_the_sweep() {
    let n = 500usize;
    let mut state = 7u64;
    let mut next = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) as usize
    };
    let mut pairs = Vec::new();
    for r in 0..n as u32 {
        for _ in 0..1 + next() % 3 {
            pairs.push((r, (next() % 40) as u64));
        }
    }
    pairs.push(pairs[10]);
    let p = GroupPath {
        name: "g".into(),
        pairs,
    };
    let t: Vec<f64> = (0..n).map(|_| (next() % 50) as f64).collect();
    let known: Vec<Option<Y>> = (0..n)
        .map(|_| match next() % 4 {
            0 => None,
            c => Some(Y::Class(c as u32 - 1)),
        })
        .collect();
    let queries: Vec<u32> = vec![0, 10, 137, 499, 250];
    for as_of in [Some(&t[..]), None] {
        let all = history::stats(&p, n, as_of, &known, 3, &queries, None);
        let few = history::stats_for(&p, n, as_of, &known, 3, &queries, None);
        for (qi, &q) in queries.iter().enumerate() {
            assert_eq!(
                &few.counts[qi * 3..qi * 3 + 3],
                &all.counts[qi * 3..qi * 3 + 3],
                "row {q}"
            );
            assert_eq!(few.rows[qi], all.rows[qi], "row {q}");
            assert!(
                (few.newest[qi].is_nan() && all.newest[qi].is_nan())
                    || few.newest[qi] == all.newest[qi],
                "row {q}"
            );
        }
    }
}

/// `n` rows in time order, in blocks of 10 consecutive rows that share a group ("block") and a
/// label (one of three, drawn per block): a row's earlier group-mates give its label away.
fn blocks_of_ten(n: usize) -> Dataset {
    let mut s = 0x0BAD_F00Du64;
    let block_class: Vec<usize> = (0..n / 10)
        .map(|_| (rng(&mut s) * 3.0) as usize % 3)
        .collect();
    let classes = ["a", "b", "c"];
    Dataset {
        as_of: Some((0..n).map(|i| i as f64).collect()),
        label: Labels::Category(
            (0..n)
                .map(|i| Some(classes[block_class[i / 10]].to_string()))
                .collect(),
        ),
        text: None,
        embedding: None,
        paths: vec![GroupPath {
            name: "block".into(),
            pairs: (0..n).map(|i| (i as u32, (i / 10) as u64)).collect(),
        }],
        numbers: vec![],
        categories: vec![],
    }
}

#[test]
fn validation_rows_see_no_validation_label() {
    // Blocks of 10 consecutive rows share a group and a label: a row's earlier group-mates give
    // its label away. The validation slice (the latest 20%: rows 800-999, whole blocks) must be
    // scored as a test period would be, with no validation row's label in any feature: its
    // groups then have no labelled row at all, and the history can tell it nothing. (With the
    // validation labels in the features it scored 0.93: every row but each block's first.)
    let n = 1000;
    let ds = blocks_of_ten(n);
    let roles = vec![Role::Train; n];
    let t = train(&ds, &roles, &opts(Algorithm::Logistic), &NoCtl).unwrap();
    let v = t
        .report
        .iter()
        .find(|m| m.method == "predictor" && m.split == "validation")
        .unwrap();
    assert_eq!(v.rows, 200, "{:?}", t.report);
    assert!(v.accuracy.unwrap() < 0.6, "{:?}", t.report);
    // The model itself still learns the history: a row of a labelled block is predicted.
    let p = predict(&t.model, &ds, &[995], &NoCtl).unwrap();
    let Labels::Category(labels) = &ds.label else {
        unreachable!("blocks_of_ten has categories")
    };
    assert_eq!(p[0].label, labels[995], "row 995's block's label");
}

#[test]
fn test_labels_never_change_the_model() {
    // Everything train fits or chooses (the text model's folds, the lexical setting picked on the
    // validation slice, the head and its features) reads training labels only: relabelling every
    // test row gives the same model, byte for byte.
    let n = 900;
    let ds = synth(n, true);
    let r = roles(n);
    let mut ds2 = synth(n, true);
    if let Labels::Category(v) = &mut ds2.label {
        for (i, l) in v.iter_mut().enumerate() {
            if r[i] == Role::Test {
                *l = Some(if i % 2 == 0 { "red" } else { "blue" }.to_string());
            }
        }
    }
    for a in [Algorithm::Gbdt, Algorithm::Logistic, Algorithm::Auto] {
        let t1 = train(&ds, &r, &opts(a), &NoCtl).unwrap();
        let t2 = train(&ds2, &r, &opts(a), &NoCtl).unwrap();
        assert!(
            t1.model.to_bytes() == t2.model.to_bytes(),
            "{a:?}: the test rows' labels changed the model"
        );
    }
}

/// The bytes after the `nth` (0-based) occurrence of CBOR text key `key` followed by an unsigned
/// integer: (offset of the integer, its encoded length, its value).
fn cbor_uint_after(b: &[u8], key: &str, nth: usize) -> Option<(usize, usize, u64)> {
    let mut pat = vec![0x60 | key.len() as u8];
    pat.extend_from_slice(key.as_bytes());
    let mut found = 0;
    for i in 0..b.len().saturating_sub(pat.len()) {
        if b[i..i + pat.len()] != pat[..] {
            continue;
        }
        let at = i + pat.len();
        let (len, v) = match b[at] {
            x @ 0..=23 => (1, x as u64),
            24 => (2, b[at + 1] as u64),
            25 => (3, u16::from_be_bytes([b[at + 1], b[at + 2]]) as u64),
            26 => (
                5,
                u32::from_be_bytes(b[at + 1..at + 5].try_into().unwrap()) as u64,
            ),
            _ => continue,
        };
        if found == nth {
            return Some((at, len, v));
        }
        found += 1;
    }
    None
}

/// `b` with the integer of `cbor_uint_after(b, key, nth)` replaced by `v` (CBOR containers
/// count items, not bytes: an integer may change its encoded length).
fn cbor_set_uint(b: &[u8], key: &str, nth: usize, v: u32) -> Vec<u8> {
    let (at, len, _) = cbor_uint_after(b, key, nth).expect("key in the model bytes");
    let enc: Vec<u8> = match v {
        0..=23 => vec![v as u8],
        24..=255 => vec![24, v as u8],
        256..=65535 => [vec![25], (v as u16).to_be_bytes().to_vec()].concat(),
        _ => [vec![26], v.to_be_bytes().to_vec()].concat(),
    };
    [&b[..at], &enc[..], &b[at + len..]].concat()
}

fn gbdt_bytes() -> Vec<u8> {
    let n = 600;
    let ds = synth(n, true);
    let t = train(&ds, &roles(n), &opts(Algorithm::Gbdt), &NoCtl).unwrap();
    assert_eq!(t.model.algorithm(), "gbdt");
    t.model.to_bytes()
}

fn invalid_model(r: Result<Model, Error>) -> String {
    match r {
        Err(Error::Model(m)) if m.starts_with(INVALID_MODEL) => m,
        Err(e) => panic!("expected an invalid model error, got {e}"),
        Ok(_) => panic!("expected an invalid model error, the model was accepted"),
    }
}

#[test]
fn a_valid_model_is_accepted_after_its_bytes_are_reread() {
    let b = gbdt_bytes();
    let m = Model::from_bytes(&b).unwrap();
    m.validate().unwrap();
    // The patch helpers change nothing when they write the value that is there.
    let (_, _, v) = cbor_uint_after(&b, "left", 0).unwrap();
    assert!(Model::from_bytes(&cbor_set_uint(&b, "left", 0, v as u32)).is_ok());
}

#[test]
fn a_tree_that_loops_is_rejected() {
    let b = gbdt_bytes();
    // A split node's left child is the node after it: `left` = 1 is a root's (node 0). Pointing
    // it (and the right child) back at the root makes a loop every row would follow.
    let nth = (0..)
        .find(|&i| cbor_uint_after(&b, "left", i).is_none_or(|(_, _, v)| v == 1))
        .unwrap();
    assert!(
        cbor_uint_after(&b, "left", nth).is_some(),
        "no split in the model"
    );
    let looped = cbor_set_uint(&cbor_set_uint(&b, "left", nth, 0), "right", nth, 0);
    let msg = invalid_model(Model::from_bytes(&looped));
    assert!(msg.contains("children must come after their node"), "{msg}");
    // A child pointing back to an ancestor further up, not only to itself.
    let (_, _, right) = cbor_uint_after(&b, "right", nth).unwrap();
    assert!(right > 1);
    let back = cbor_set_uint(&b, "right", nth + 1, 0);
    if cbor_uint_after(&b, "feat", nth + 1).is_some_and(|(_, _, f)| f != u32::MAX as u64) {
        invalid_model(Model::from_bytes(&back));
    }
}

#[test]
fn an_index_out_of_range_is_rejected() {
    let b = gbdt_bytes();
    let nth = (0..)
        .find(|&i| cbor_uint_after(&b, "left", i).is_none_or(|(_, _, v)| v == 1))
        .unwrap();
    // A split of a feature the rows do not have.
    let feat = cbor_set_uint(&b, "feat", nth, 60_000);
    let msg = invalid_model(Model::from_bytes(&feat));
    assert!(msg.contains("splits feature 60000"), "{msg}");
    // A child past the tree's end.
    let child = cbor_set_uint(&b, "right", nth, 60_000);
    let msg = invalid_model(Model::from_bytes(&child));
    assert!(msg.contains("child 60000"), "{msg}");
    // k outside its range, and the bytes of something else.
    let k0 = cbor_set_uint(&b, "k", 0, 0);
    assert!(Model::from_bytes(&k0).is_err());
    invalid_model(Model::from_bytes(b"TRLEARN1\xa0"));
    invalid_model(Model::from_bytes(b"nonsense"));
}

#[test]
fn a_logistic_head_with_too_few_weights_is_rejected() {
    let n = 600;
    let ds = synth(n, true);
    let t = train(&ds, &roles(n), &opts(Algorithm::Logistic), &NoCtl).unwrap();
    let b = t.model.to_bytes();
    assert!(Model::from_bytes(&b).is_ok());
    // The head's `dim` (the last "dim" key: the LinHead's own, after its linear model's) one
    // larger than its weights cover.
    let last = (0..)
        .take_while(|&i| cbor_uint_after(&b, "dim", i).is_some())
        .last()
        .unwrap();
    let (_, _, dim) = cbor_uint_after(&b, "dim", last).unwrap();
    let msg = invalid_model(Model::from_bytes(&cbor_set_uint(
        &b,
        "dim",
        last,
        dim as u32 + 1,
    )));
    assert!(msg.contains("logistic"), "{msg}");
}

/// Fails every check once the features are done (their `progress` at total): only the head's
/// checks come after that.
struct CancelAfterFeatures {
    done: Cell<bool>,
    checks_after: Cell<usize>,
}
impl Control for CancelAfterFeatures {
    fn check(&self) -> Result<(), Error> {
        if self.done.get() {
            self.checks_after.set(self.checks_after.get() + 1);
            Err(Error::Cancelled(
                "canceling statement due to user request".into(),
            ))
        } else {
            Ok(())
        }
    }
    fn progress(&self, stage: &str, done: u64, total: u64) {
        if stage == "features" && done == total {
            self.done.set(true);
        }
    }
}

#[test]
fn the_head_checks_the_control_while_it_predicts() {
    let n = 600;
    let ds = synth(n, true);
    let t = train(&ds, &roles(n), &opts(Algorithm::Gbdt), &NoCtl).unwrap();
    let targets: Vec<u32> = (0..n as u32).collect();
    let ctl = CancelAfterFeatures {
        done: Cell::new(false),
        checks_after: Cell::new(0),
    };
    let r = predict(&t.model, &ds, &targets, &ctl);
    assert!(
        matches!(r, Err(Error::Cancelled(_))),
        "the head never checked"
    );
    assert_eq!(ctl.checks_after.get(), 1);
}

/// A model with crossed paths reads back and predicts: the stored paths are the dataset's, the
/// layout adds the crossed ones once (a model whose layout counted them twice was rejected as
/// invalid on chinook).
#[test]
fn a_model_with_crossed_paths_reads_back_and_predicts() {
    let n = 600;
    let mut ds = synth(n, true);
    // Two parents of one group a row: a customer (the label's colour decides half of them) and
    // a category; their pairs are shared by several rows.
    ds.paths = vec![
        GroupPath {
            name: "customer".into(),
            pairs: (0..n as u32).map(|r| (r, (r % 12) as u64)).collect(),
        },
        GroupPath {
            name: "category".into(),
            pairs: (0..n as u32).map(|r| (r, (r % 5) as u64)).collect(),
        },
    ];
    let roles = vec![Role::Train; n];
    let t = train(&ds, &roles, &opts(Algorithm::Gbdt), &NoCtl).unwrap();
    assert!(
        t.feature_names
            .iter()
            .any(|f| f.starts_with("customer&category:")),
        "{:?}",
        t.feature_names
    );
    let m = Model::from_bytes(&t.model.to_bytes()).unwrap();
    assert_eq!(m.feature_names(), &t.feature_names[..]);
    let p = predict(&m, &ds, &[5, 300, 599], &NoCtl).unwrap();
    assert_eq!(p.len(), 3);
    assert!(p.iter().all(|x| x.label.is_some()));
    assert!(p[0]
        .history
        .iter()
        .any(|(name, _)| name == "customer&category"));
}

/// Past `validation_fit_rows` early rows the candidate heads are fitted on a sample of them: the
/// validation scores change (the option is used), the predictor still beats the majority; no
/// limit (0) and a limit above the rows give the same report.
#[test]
fn candidate_fits_on_a_sample_past_validation_fit_rows() {
    let ds = synth(600, true);
    let r = roles(600);
    let with = |m: usize| {
        let o = TrainOptions {
            validation_fit_rows: m,
            ..opts(Algorithm::Auto)
        };
        train(&ds, &r, &o, &NoCtl).unwrap().report
    };
    let full = with(250_000);
    assert_eq!(full, with(0));
    let sampled = with(40);
    let val = |rep: &[MetricRow]| -> Vec<MetricRow> {
        rep.iter()
            .filter(|m| m.split == "validation")
            .cloned()
            .collect()
    };
    assert!(!val(&full).is_empty());
    assert_ne!(val(&full), val(&sampled), "{full:?} {sampled:?}");
    let acc = |m: &str| {
        sampled
            .iter()
            .find(|x| x.method == m && x.split == "test")
            .and_then(|x| x.accuracy)
            .unwrap()
    };
    assert!(acc("predictor") > acc("baseline") + 0.2, "{sampled:?}");
}

/// The forward slices: the latest `validation_fraction` of rows, then the same count just
/// before it; a slice's start moves past rows of its first row's time; an earlier slice only
/// with at least as many rows before it as its own; the earlier slices' fits capped at half.
#[test]
fn forward_slices_are_consecutive_and_keep_ties_together() {
    // 100 rows by time; rows 58-61 share a time.
    let t: Vec<f64> = (0..100)
        .map(|i| {
            if (58..62).contains(&i) {
                58.0
            } else {
                i as f64
            }
        })
        .collect();
    let order: Vec<usize> = (0..100).collect();
    let s = forward_slices(&order, |p| t[p], 0.2, 3, 50, 0);
    assert_eq!(s.len(), 3);
    assert_eq!(s[0].valid, (80..100).collect::<Vec<_>>());
    assert_eq!(s[0].cut, 80);
    // 50 of the 80 rows before it, evenly spaced in time.
    let want: Vec<usize> = (0..50).map(|i| i * 80 / 50).collect();
    assert_eq!(s[0].fit_rows, want);
    // Slice 2 would begin at 60, inside the tie 58-61: it begins at 62.
    assert_eq!(s[1].valid, (62..80).collect::<Vec<_>>());
    assert_eq!(s[1].early, (0..62).collect::<Vec<_>>());
    assert_eq!(s[1].fit_rows.len(), 25);
    assert!(s[1].fit_rows.iter().all(|&p| p < 62));
    assert_eq!(s[2].valid, (42..62).collect::<Vec<_>>());
    // One slice asked for: the latest alone.
    assert_eq!(forward_slices(&order, |p| t[p], 0.2, 1, 0, 0).len(), 1);
    // Fewer than `min_earlier` rows before slice 2 (62 rows): the latest slice alone.
    assert_eq!(forward_slices(&order, |p| t[p], 0.2, 3, 0, 63).len(), 1);
    assert_eq!(forward_slices(&order, |p| t[p], 0.2, 3, 0, 62).len(), 2);
    // 0.4 of the rows a slice: the second has 20 rows before it and its 40 rows: left out.
    let s = forward_slices(&order, |p| p as f64, 0.4, 2, 0, 0);
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].fit_rows, (0..60).collect::<Vec<_>>());
}

/// A period whose own history is a fluke: `x` decides the label everywhere (class a inside the
/// band 0.3..0.7, b outside) but in the latest validation slice (rows 3,200-3,999), where the
/// band's rows are a only 45% of the time. The GBDT learns the band (test accuracy ~1.0), the logistic head cannot
/// (a linear function of x: b everywhere, 0.6). On the latest slice alone the logistic head
/// scores better (0.82 against ~0.78: the GBDT's rounds, chosen by log loss on the slice, put the
/// band's rows past p(a) = 0.5); the mean with the slice before it (GBDT ~1.0, logistic 0.6)
/// picks the GBDT. One slice picks the logistic head and loses the test period.
#[test]
fn auto_compares_the_heads_on_the_mean_of_two_forward_slices() {
    let (ntr, n) = (4000, 4800);
    let mut in_band = 0usize;
    let mut x = Vec::new();
    let mut label = Vec::new();
    for i in 0..n {
        let v = (i as f64 * 0.618_033_988_749_895).fract();
        let band = (0.3..0.7).contains(&v);
        let a = if band && (3200..ntr).contains(&i) {
            in_band += 1;
            (in_band * 9) % 20 < 9
        } else {
            band
        };
        x.push(Some(v));
        label.push(Some(if a { "a" } else { "b" }.to_string()));
    }
    let ds = Dataset {
        as_of: Some((0..n).map(|i| i as f64).collect()),
        label: Labels::Category(label),
        text: None,
        embedding: None,
        paths: vec![],
        numbers: vec![("x".into(), x)],
        categories: vec![],
    };
    let roles: Vec<Role> = (0..n)
        .map(|i| if i < ntr { Role::Train } else { Role::Test })
        .collect();
    let run = |slices: usize| {
        let o = TrainOptions {
            validation_slices: slices,
            ..opts(Algorithm::Auto)
        };
        train(&ds, &roles, &o, &NoCtl).unwrap()
    };
    let row = |t: &Trained, algo: &str, split: &str| -> MetricRow {
        t.report
            .iter()
            .find(|m| m.method == "predictor" && m.algorithm == algo && m.split == split)
            .cloned()
            .unwrap_or_else(|| panic!("no {algo} {split} row: {:?}", t.report))
    };
    let test_acc = |t: &Trained| {
        t.report
            .iter()
            .find(|m| m.method == "predictor" && m.split == "test")
            .and_then(|m| m.accuracy)
            .unwrap()
    };
    let one = run(1);
    assert_eq!(one.model.algorithm(), "logistic", "{:?}", one.report);
    assert!(one
        .report
        .iter()
        .all(|m| !m.split.starts_with("validation ")));
    let two = run(2);
    assert_eq!(two.model.algorithm(), "gbdt", "{:?}", two.report);
    // The latest slice's rows are the same with one slice or two.
    for algo in ["gbdt", "logistic"] {
        assert_eq!(row(&one, algo, "validation"), row(&two, algo, "validation"));
        let (v1, v2, mean) = (
            row(&two, algo, "validation"),
            row(&two, algo, "validation 2"),
            row(&two, algo, "validation mean"),
        );
        assert_eq!((v1.rows, v2.rows, mean.rows), (800, 800, 1600));
        let m = (v1.accuracy.unwrap() + v2.accuracy.unwrap()) / 2.0;
        assert!(
            (mean.accuracy.unwrap() - m).abs() < 1e-12,
            "{:?}",
            two.report
        );
    }
    // The latest slice favours the logistic head, the mean the GBDT, and so does the test.
    let acc = |algo: &str, split: &str| row(&two, algo, split).accuracy.unwrap();
    assert!(acc("logistic", "validation") > acc("gbdt", "validation"));
    assert!(acc("gbdt", "validation mean") > acc("logistic", "validation mean"));
    assert!(
        test_acc(&two) > test_acc(&one) + 0.2,
        "{:?} {:?}",
        two.report,
        one.report
    );
    // Same input, same report.
    assert_eq!(run(2).report, two.report);
}

/// An earlier slice is scored as a test period would be too: the validation_rows_see_no_\
/// validation_label blocks (each block of 10 rows one label and one group), with test rows
/// after them so that the report shows every slice; slice 2 (rows 2,400-3,199, whole blocks) gets
/// no help from its own blocks' labels through the history. (With its own labels in its
/// features it scored 0.93.)
#[test]
fn an_earlier_slice_sees_no_label_of_its_own() {
    let n = 4400;
    let ds = blocks_of_ten(n);
    let roles: Vec<Role> = (0..n)
        .map(|i| if i < 4000 { Role::Train } else { Role::Test })
        .collect();
    let t = train(&ds, &roles, &opts(Algorithm::Logistic), &NoCtl).unwrap();
    let v = |split: &str| {
        t.report
            .iter()
            .find(|m| m.method == "predictor" && m.split == split)
            .cloned()
            .unwrap_or_else(|| panic!("no {split} row: {:?}", t.report))
    };
    for split in ["validation", "validation 2"] {
        assert_eq!(v(split).rows, 800, "{:?}", t.report);
        assert!(v(split).accuracy.unwrap() < 0.6, "{:?}", t.report);
    }
}
