#!/usr/bin/env python3
"""Predictions in time, the speed half (issue 47): one row's prediction, a predict job's refresh
of a new row, and training, at several table sizes, on a real table scaled by repetition. Prints
a markdown table; writes benches/results/predict_speed.json. Reports numbers; asserts nothing.

Data: the films of scripts/films.py (PyPI bokeh-sampledata: 17,029 films with a genre, their
directors, writers and cast through the link table film_person), each film's title embedded once
by tributary_embed_column (the default model, vector(384)). A size of N rows repeats the films
ceil(N / 17,029) times and keeps the first N: copy c of film f is film c * 100,000,000 + f with
f's columns, f's embedding and f's people (so a person's history grows with the copies). Label
film.genre, as_of film.year; the films of 2010 and later are unlabelled (the rows predicted).
Indexes: the primary keys, film_person (person_id), film (year), and HNSW (cosine) on the
embedding; tributary_train's NOTICE names no missing index.

Per size, on the same table, in one run:
- train: tributary_train('p', 'film', 'genre', 'e', as_of => 'year') wall seconds, and the
  backend's peak resident memory (VmHWM of /proc/<pid>/status, the same backend before and after;
  the peak of a fresh backend, so it is the training's);
- one row: tributary_predict('p', row) of 200 random unlabelled rows, one statement each, after
  20 warm-up calls: p50 and p99 of the client's wall time (a local socket). Baseline in the same
  run: the same rows predicted from a copy of the table without a one-column primary key (the
  whole-table path of 0.11.0: the table read for every statement), at most 5 rows;
- a new row: a predict job on the table; 20 times, INSERT one unlabelled film (with two people
  of an existing film) and commit, then poll its target column every 10 ms: p50 and max of commit
  -> prediction visible, and the rows each refresh wrote (rows_done's growth: the rows the change
  reached, not every unlabelled row).

Usage: predict_speed.py --dsn DSN [--sizes 10000,100000] [--rows 200]
"""
from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent


def connect(dsn):
    return psycopg.connect(dsn, autocommit=True, prepare_threshold=None)


def peak_kb(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def load_base(dsn: str) -> None:
    """The films (schema base), their title embeddings."""
    with connect(dsn) as c:
        c.execute("DROP SCHEMA IF EXISTS base CASCADE")
        c.execute("CREATE SCHEMA base")
    subprocess.run([sys.executable, str(ROOT / "scripts" / "films.py"), "--dsn", dsn + " options=-csearch_path=base"],
                   check=True)
    with connect(dsn) as c:
        c.execute("SET search_path = base, public")
        c.execute("ALTER TABLE film ADD COLUMN e vector(384)")
        c.execute("SET tributary.progress_interval = 0")
        t0 = time.monotonic()
        c.execute("SELECT tributary_embed_column('film', '{title}', 'e')")
        print(f"embedded {c.execute('SELECT count(*) FROM film').fetchone()[0]} titles in "
              f"{time.monotonic() - t0:.0f} s", file=sys.stderr)


def build(dsn: str, n: int, name: str, one_column_key: bool = True) -> None:
    """Table `name` (and name_person) of n films repeated from base.film."""
    with connect(dsn) as c:
        base = c.execute("SELECT count(*) FROM base.film WHERE genre IS NOT NULL").fetchone()[0]
        copies = math.ceil(n / base)
        c.execute(f"DROP TABLE IF EXISTS {name}_person, {name} CASCADE")
        key = "film_id bigint PRIMARY KEY" if one_column_key else "film_id bigint, copy int, PRIMARY KEY (film_id, copy)"
        c.execute(f"""CREATE TABLE {name} ({key}, title text, year int, rated text, runtime_min real,
                       language text, country text, genre text, guess text, e vector(384))""")
        c.execute(f"""INSERT INTO {name} SELECT * FROM (
                        SELECT c * 100000000 + f.film_id{', c' if not one_column_key else ''}, f.title, f.year, f.rated,
                               f.runtime_min, f.language, f.country, f.genre, NULL, f.e
                          FROM base.film f CROSS JOIN generate_series(0, {copies - 1}) c
                         WHERE f.genre IS NOT NULL ORDER BY c, f.film_id LIMIT {n}) s""")
        c.execute(f"UPDATE {name} SET genre = NULL WHERE year >= 2010")
        if one_column_key:
            c.execute(f"""CREATE TABLE {name}_person (film_id bigint REFERENCES {name}, person_id int REFERENCES base.person,
                           role text, PRIMARY KEY (film_id, person_id, role))""")
            c.execute(f"""INSERT INTO {name}_person SELECT x.film_id, p.person_id, p.role FROM {name} x
                           JOIN base.film_person p ON p.film_id = x.film_id % 100000000""")
            c.execute(f"CREATE INDEX ON {name}_person (person_id)")
        c.execute(f"CREATE INDEX ON {name} (year)")
        c.execute(f"CREATE INDEX ON {name} USING hnsw (e vector_cosine_ops)")
        # Steady state, as autovacuum leaves a table: the UPDATE's dead versions pruned and the
        # hint bits set, else the first reads of each page do it inside the timed calls (it
        # made one row at 10k rows slower than at 100k in the first runs).
        c.execute(f"VACUUM (ANALYZE) {name}")
        c.execute(f"VACUUM (ANALYZE) {name}_person" if one_column_key else "SELECT 1")


def percentile(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, max(0, math.ceil(q * len(v)) - 1))]


def measure(dsn: str, n: int, rows: int) -> dict:
    out = {"rows": n}
    build(dsn, n, "film")
    with connect(dsn) as c:
        c.execute("SET tributary.progress_interval = 0")
        pid = c.execute("SELECT pg_backend_pid()").fetchone()[0]
        notices = []
        c.add_notice_handler(lambda d: notices.append(d.message_primary))
        t0 = time.monotonic()
        r = c.execute("SELECT method, algorithm, rows, accuracy FROM tributary_train('p', 'film', 'genre', 'e', "
                      "as_of => 'year')").fetchall()
        out["train_s"] = round(time.monotonic() - t0, 1)
        out["train_peak_mb"] = round((peak_kb(pid) or 0) / 1024)
        out["train_report"] = [list(x) for x in r]
        out["missing_indexes"] = [m for m in notices if "missing" in (m or "")]
        ids = [x[0] for x in c.execute("SELECT film_id FROM film WHERE genre IS NULL").fetchall()]
    rng = random.Random(0)
    sample = rng.sample(ids, min(rows, len(ids)))
    q = "SELECT p.prediction FROM tributary_predict('p', (SELECT f FROM film f WHERE f.film_id = %s)) p"
    with connect(dsn) as c:
        for i in sample[:20]:
            c.execute(q, (i,)).fetchone()
        times = []
        for i in sample:
            t0 = time.perf_counter()
            c.execute(q, (i,)).fetchone()
            times.append((time.perf_counter() - t0) * 1000)
    out["one_row_ms_p50"] = round(statistics.median(times), 2)
    out["one_row_ms_p99"] = round(percentile(times, 0.99), 2)
    # Baseline: the whole-table path (a table without a one-column primary key), a few rows.
    build(dsn, n, "film_nk", one_column_key=False)
    with connect(dsn) as c:
        c.execute("SET tributary.progress_interval = 0")
        c.execute("SELECT count(*) FROM tributary_train('p_nk', 'film_nk', 'genre', 'e', as_of => 'year', "
                  "history => '{}')").fetchall()
        bq = ("SELECT p.prediction FROM tributary_predict('p_nk', (SELECT f FROM film_nk f "
              "WHERE f.film_id = %s AND f.copy = 0)) p")
        base_ids = [i for i in sample if i < 100000000][:5]
        bt = []
        for i in base_ids:
            t0 = time.perf_counter()
            c.execute(bq, (i,)).fetchone()
            bt.append((time.perf_counter() - t0) * 1000)
        c.execute("DROP TABLE film_nk")
        c.execute("SELECT tributary_drop_predictor('p_nk')")
    out["whole_table_ms_p50"] = round(statistics.median(bt), 1) if bt else None
    # A new row, through a predict job.
    with connect(dsn) as c:
        c.execute("SET tributary.progress_interval = 0")
        job = c.execute("SELECT tributary_predict_job_create('p', 'guess')").fetchone()[0]
        deadline = time.monotonic() + 1800
        while c.execute("SELECT runs FROM tributary.predict_jobs WHERE id = %s", (job,)).fetchone()[0] < 1:
            if time.monotonic() > deadline:
                raise SystemExit("the predict job's first refresh did not finish in 30 min")
            time.sleep(0.5)
        while c.execute("SELECT pending FROM tributary.predict_jobs WHERE id = %s", (job,)).fetchone()[0] > 0:
            time.sleep(0.2)
        lat, wrote = [], []
        people = c.execute("SELECT person_id FROM film_person WHERE film_id = %s LIMIT 2", (sample[0],)).fetchall()
        for k in range(20):
            time.sleep(1.2)   # the refresh of the previous insert is over; one poll interval passed
            before = c.execute("SELECT rows_done FROM tributary.predict_jobs WHERE id = %s", (job,)).fetchone()[0]
            fid = 9_000_000_000_000 + k
            with c.transaction():
                c.execute("INSERT INTO film (film_id, title, year, rated, language, country, e) "
                          "SELECT %s, 'A new film ' || %s, 2014, rated, language, country, e FROM film WHERE film_id = %s",
                          (fid, k, sample[k]))
                for (p,) in people:
                    c.execute("INSERT INTO film_person VALUES (%s, %s, 'cast')", (fid, p))
            t0 = time.perf_counter()
            while c.execute("SELECT guess FROM film WHERE film_id = %s", (fid,)).fetchone()[0] is None:
                if time.perf_counter() - t0 > 120:
                    break
                time.sleep(0.01)
            lat.append((time.perf_counter() - t0) * 1000)
            while c.execute("SELECT pending FROM tributary.predict_jobs WHERE id = %s", (job,)).fetchone()[0] > 0:
                time.sleep(0.05)
            wrote.append(c.execute("SELECT rows_done FROM tributary.predict_jobs WHERE id = %s",
                                   (job,)).fetchone()[0] - before)
        c.execute("SELECT tributary_predict_job_drop(%s)", (job,))
    out["new_row_ms_p50"] = round(statistics.median(lat))
    out["new_row_ms_max"] = round(max(lat))
    out["rows_written_per_insert"] = [min(wrote), max(wrote)]
    out["unlabelled_rows"] = len(ids)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dsn", required=True)
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--rows", type=int, default=200)
    ap.add_argument("--json", type=Path, default=ROOT / "benches" / "results" / "predict_speed.json")
    a = ap.parse_args(argv)
    load_base(a.dsn)
    dsn = a.dsn + " options=-csearch_path=public"
    results = [measure(dsn, int(s), a.rows) for s in a.sizes.split(",")]
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps(results, indent=1))
    print("| rows | train s | train peak MB | one row p50 ms | p99 ms | whole-table path ms | new row p50 ms | max ms | rows written per insert | unlabelled rows |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['rows']:,} | {r['train_s']} | {r['train_peak_mb']} | {r['one_row_ms_p50']} | {r['one_row_ms_p99']} | "
              f"{r['whole_table_ms_p50']} | {r['new_row_ms_p50']} | {r['new_row_ms_max']} | "
              f"{r['rows_written_per_insert'][0]}-{r['rows_written_per_insert'][1]} | {r['unlabelled_rows']:,} |")
        if r["missing_indexes"]:
            print(f"  missing indexes at {r['rows']}: {r['missing_indexes']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
