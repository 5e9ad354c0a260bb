#!/usr/bin/env python3
"""Films (PyPI bokeh-sampledata's movies.db, loaded by scripts/films.py into film, person and the
link table film_person): predict a film's main genre (film.genre, the first genre of its own list)
FORWARD IN TIME: train on the films released before --split-at (default 2010), test on the films
of that year and later (23% of the films with a genre). Reports accuracy and macro-F1 next to the
majority-class baseline, as a markdown table, a JSON file and (matplotlib) a bar chart. Reports
numbers; asserts nothing.

Methods, all in one command:
    tributary, title only        tributary_embed_column('film', ARRAY['title'], 'e_title')
    tributary, whole row         tributary_embed_column('film', '{*}', 'e_row', exclude => '{genre}',
                                 children => 5): the film's columns and the people linked to it
                                 through film_person (row template 2)
    tributary, template 1        the same with template => 1 (only when the argument exists)
    each scored by tributary_evaluate('film', 'genre', <column>, k => K, split_column => 'year',
    split_at => '2010'); where tributary_evaluate has no split_column argument (or errors), by
    tributary_predict over the test films against a table of the training films instead (the
    "how" column says which)
    TF-IDF + logistic regression scikit-learn TfidfVectorizer(ngram_range=(1, 2)) (words) and
                                 LogisticRegression(max_iter=1000), same forward split; min_df=2 (terms of a
                                 single training film dropped: without it, a fit on the people's
                                 names takes minutes); on the title;
                                 on the title and the names of all the people linked to the film;
                                 on the title, the film's other columns and the people's names
    majority class               the most frequent genre of the training films, for every test film

The genre is never in the embedded or vectorised text: exclude => '{genre}', and the loader does
not create any genre table (see scripts/films.py). Macro-F1 is scikit-learn's (unweighted mean over
the genres that occur in the test labels or the predictions) for the Python-side numbers;
tributary_evaluate's own macro-F1 where it is used.

--limit N works on a seeded random sample of N films (development: embedding the 17,472 films takes
minutes per variant on 2 vCPUs).

Usage: films.py [--dsn DSN] [--limit N] [--seed 0] [--k 10] [--split-at 2010] [--json PATH]
                [--png PATH] [--skip-load] [--no-tributary]
Connection: libpq environment variables (PGHOST, PGPORT, ...) or --dsn.
"""
from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse
import collections
import json
import sys
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import films as loader  # noqa: E402  (scripts/films.py)

#: name: (embedding column, tributary_embed_column arguments after the target, argument it needs)
VARIANTS = {
    "tributary, title only": ("e_title", "ARRAY['title']", ""),
    "tributary, whole row + linked people (children => 5)": ("e_row", "'{*}'", ", exclude => '{genre}', children => 5"),
    "tributary, whole row + linked people, template => 1": (
        "e_row1", "'{*}'", ", exclude => '{genre}', children => 5, template => 1"),
}


def metrics(y_true: list[str], y_pred: list[str]) -> tuple[float, float]:
    from sklearn.metrics import accuracy_score, f1_score
    return accuracy_score(y_true, y_pred), f1_score(y_true, y_pred, average="macro", zero_division=0)


def arg_names(conn, fn: str) -> set[str]:
    rows = conn.execute("SELECT proargnames FROM pg_proc WHERE proname = %s", (fn,)).fetchall()
    return {n for (names,) in rows for n in (names or [])}


def tributary_rows(a, films, split_at: int) -> list[dict]:
    out = []
    with psycopg.connect(a.dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.execute("CREATE EXTENSION IF NOT EXISTS tributary")
        if conn.execute("SELECT count(*) FROM pg_settings WHERE name = 'tributary.progress_interval'").fetchone()[0]:
            conn.execute("SET tributary.progress_interval = 0")
        embed_args = arg_names(conn, "tributary_embed_column")
        eval_args = arg_names(conn, "tributary_evaluate")
        print(f"tributary_embed_column arguments: {sorted(embed_args)}", file=sys.stderr)
        print(f"tributary_evaluate arguments: {sorted(eval_args)}", file=sys.stderr)
        train_table = False
        for name, (col, cols, extra) in VARIANTS.items():
            r = {"method": name, "embedding": col, "options": extra.lstrip(", ")}
            if "template" in extra and "template" not in embed_args:
                r["note"] = "tributary_embed_column has no template argument: not run"
                out.append(r)
                continue
            if "children" in extra and "children" not in embed_args:
                r["note"] = "tributary_embed_column has no children argument: not run"
                out.append(r)
                continue
            conn.execute(f"ALTER TABLE film ADD COLUMN IF NOT EXISTS {col} vector(384)")
            t0 = time.perf_counter()
            try:
                r["rows_embedded"] = conn.execute(
                    f"SELECT tributary_embed_column('film', {cols}, '{col}'{extra})").fetchone()[0]
            except psycopg.Error as e:
                r["note"] = f"embed error: {str(e).splitlines()[0]}"
                out.append(r)
                continue
            r["embed_s"] = time.perf_counter() - t0
            try:
                r["example_text"] = conn.execute(
                    f"SELECT tributary_row_text(f{extra}) FROM film f ORDER BY film_id LIMIT 1").fetchone()[0] \
                    if extra else None
            except psycopg.Error:
                r["example_text"] = None
            t0 = time.perf_counter()
            done = False
            if {"split_column", "split_at"} <= eval_args:
                try:
                    rows = conn.execute(
                        "SELECT metric, model, baseline, test_rows, train_rows FROM tributary_evaluate("
                        "'film', 'genre', %s, k => %s, split_column => 'year', split_at => %s)",
                        (col, a.k, str(split_at))).fetchall()
                    m = {x[0]: x[1:] for x in rows}
                    r.update(how="tributary_evaluate(split_column => 'year')", accuracy=m["accuracy"][0],
                             macro_f1=m["macro_f1"][0], baseline_accuracy=m["accuracy"][1],
                             baseline_macro_f1=m["macro_f1"][1], test_rows=m["accuracy"][2],
                             train_rows=m["accuracy"][3])
                    done = True
                except (psycopg.Error, KeyError) as e:
                    print(f"tributary_evaluate with split_column failed ({e}); falling back", file=sys.stderr)
            if not done:
                # Fallback: the training films as their own table, tributary_predict for each test film.
                if not train_table:
                    conn.execute("DROP TABLE IF EXISTS film_train")
                    conn.execute("CREATE TABLE film_train (LIKE film INCLUDING ALL)")
                    train_table = True
                conn.execute("TRUNCATE film_train")
                conn.execute("INSERT INTO film_train SELECT * FROM film WHERE year < %s AND genre IS NOT NULL",
                             (split_at,))
                res = conn.execute(
                    f"SELECT f.genre, p.prediction FROM film f, LATERAL tributary_predict('film_train', 'genre', "
                    f"'{col}', f.{col}, %s) p WHERE f.year >= %s AND f.genre IS NOT NULL", (a.k, split_at)).fetchall()
                acc, f1 = metrics([x[0] for x in res], [x[1] or "" for x in res])
                r.update(how="tributary_predict against the training films (fallback)", accuracy=acc, macro_f1=f1,
                         test_rows=len(res), train_rows=conn.execute("SELECT count(*) FROM film_train").fetchone()[0])
            r["evaluate_s"] = time.perf_counter() - t0
            out.append(r)
            print(f"  {name}: accuracy {r['accuracy']:.3f}, macro-F1 {r['macro_f1']:.3f} "
                  f"(embed {r['embed_s']:.0f} s)", file=sys.stderr, flush=True)
    return out


def python_rows(films, people_of, split_at: int) -> list[dict]:
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    labelled = [f for f in films if f["genre"]]
    train = [f for f in labelled if f["year"] < split_at]
    test = [f for f in labelled if f["year"] >= split_at]
    y_train, y_test = [f["genre"] for f in train], [f["genre"] for f in test]
    out = []
    majority = collections.Counter(y_train).most_common(1)[0][0]
    acc, f1 = metrics(y_test, [majority] * len(y_test))
    out.append({"method": f"majority class ({majority})", "how": "python", "accuracy": acc, "macro_f1": f1,
                "test_rows": len(test), "train_rows": len(train)})
    other = ["released", "rated", "runtime_min", "language", "country", "production", "awards", "metacritic"]
    texts = {
        "TF-IDF words 1-2 + logistic regression, title": lambda f: f["title"],
        "TF-IDF words 1-2 + logistic regression, title + people": lambda f: " ; ".join(
            [f["title"]] + people_of.get(f["film_id"], [])),
        "TF-IDF words 1-2 + logistic regression, title + columns + people": lambda f: " ; ".join(
            [f["title"]] + [f"{c}: {f[c]}" for c in other if f[c] is not None] + people_of.get(f["film_id"], [])),
    }
    for name, text in texts.items():
        t0 = time.perf_counter()
        vec = TfidfVectorizer(ngram_range=(1, 2), min_df=2)
        x_train = vec.fit_transform([text(f) for f in train])
        clf = LogisticRegression(max_iter=1000)
        clf.fit(x_train, y_train)
        pred = clf.predict(vec.transform([text(f) for f in test]))
        acc, f1 = metrics(y_test, list(pred))
        out.append({"method": name, "how": "python", "accuracy": acc, "macro_f1": f1, "test_rows": len(test),
                    "train_rows": len(train), "fit_predict_s": time.perf_counter() - t0})
        print(f"  {name}: accuracy {acc:.3f}, macro-F1 {f1:.3f}", file=sys.stderr, flush=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dsn", default="")
    ap.add_argument("--limit", type=int)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--split-at", type=int, default=2010)
    ap.add_argument("--json", type=Path, default=ROOT / "benches/results/films.json")
    ap.add_argument("--png", type=Path, default=ROOT / "benches/films.png")
    ap.add_argument("--skip-load", action="store_true")
    ap.add_argument("--no-tributary", action="store_true", help="the Python baselines only (no database)")
    a = ap.parse_args(argv)

    films, people, links = loader.read(a.limit, a.seed)
    name_of = {pid: n for n, pid in people.items()}
    people_of: dict[int, list[str]] = {}
    for fid, pid, _role in links:
        people_of.setdefault(fid, []).append(name_of[pid])
    labelled = [f for f in films if f["genre"]]
    n_test = sum(f["year"] >= a.split_at for f in labelled)
    print(f"{len(films)} films ({len(labelled)} with a genre), {len(people)} people, {len(links)} links; "
          f"test = year >= {a.split_at}: {n_test} films ({100 * n_test / len(labelled):.1f}%)", file=sys.stderr)

    results = []
    if not a.no_tributary:
        if not a.skip_load:
            loader.load(a.dsn, a.limit, a.seed)
        results += tributary_rows(a, films, a.split_at)
    else:
        results += [{"method": n, "note": "not run (--no-tributary)"} for n in VARIANTS]
    results += python_rows(films, people_of, a.split_at)

    def fmt(x, spec=".3f"):
        return "—" if x is None else format(x, spec)
    print(f"| method | accuracy | macro-F1 | test films | train films | seconds | how / note |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        secs = r.get("embed_s", 0) + r.get("evaluate_s", 0) if "embed_s" in r else r.get("fit_predict_s")
        print(f"| {r['method']} | {fmt(r.get('accuracy'))} | {fmt(r.get('macro_f1'))} | "
              f"{fmt(r.get('test_rows'), 'd')} | {fmt(r.get('train_rows'), 'd')} | {fmt(secs, '.1f')} | "
              f"{r.get('how', '')} {r.get('note', '')}".rstrip() + " |")
    genres = collections.Counter(f["genre"] for f in labelled)
    print(f"\n{len(films)} films{' (seeded sample, --limit)' if a.limit else ''}, {len(labelled)} with a genre "
          f"({len(genres)} genres; label = the first genre of the film's list). Forward split: train on "
          f"year < {a.split_at}, test on year >= {a.split_at} ({n_test} films, {100 * n_test / len(labelled):.1f}%). "
          f"k = {a.k}. Seconds: tributary = embedding + evaluation, Python = vectorise + fit + predict "
          "(one thread).")
    for r in results:
        if r.get("example_text"):
            print(f"\nText of the first film, {r['method']}:\n```\n{r['example_text']}\n```")
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps({"films": len(films), "labelled": len(labelled), "split_at": a.split_at,
                                  "test_films": n_test, "k": a.k, "limit": a.limit, "seed": a.seed,
                                  "results": results}, indent=1) + "\n")
    print(f"\nJSON: {a.json}")
    plot(results, a.png, a.split_at)
    return 0


def plot(results, png: Path, split_at: int) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not importable: no plot", file=sys.stderr)
        return
    rs = [r for r in results if r.get("accuracy") is not None]
    fig, ax = plt.subplots(figsize=(10, 0.55 * len(rs) + 1.5))
    ys = range(len(rs))
    ax.barh([y - 0.2 for y in ys], [r["accuracy"] for r in rs], 0.4, label="accuracy")
    ax.barh([y + 0.2 for y in ys], [r["macro_f1"] for r in rs], 0.4, label="macro-F1")
    ax.set_yticks(list(ys))
    ax.set_yticklabels([r["method"] for r in rs], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_title(f"Film genre, forward in time (train < {split_at}, test >= {split_at})")
    ax.legend(loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    print(f"plot: {png}")


if __name__ == "__main__":
    raise SystemExit(main())
