#!/usr/bin/env python3
"""tributary_evaluate and tributary_predict on a wide, TOASTed table, before and after: the
functions of an earlier commit (default: the 0.1.0 sql/predict.sql, loaded into schema bench_v010)
against the installed ones, on Chinook's tracks with two vector(384) columns (a 3 kB row: the
first vector, `embedding`, is stored out of line, `context_embedding` stays in line).

Cases: evaluate on the TOASTed column, on the in-line column, and on the TOASTed column of a
copy without statistics (never analysed, as just after a load); predict for 35 tracks (exact
search, no index). Variants: the old functions as they run by default (jit = on), the old
functions with the session's jit = off (what JIT alone cost), the installed functions, the
working tree's functions without their SET jit = off (what the attribute saves), and the installed
functions with work_mem = 64MB (the training rows' tuplestore then stays in memory). Each
case runs --reps times, the variants interleaved; the table gives medians and ratios, and every
variant's results are checked to be identical (the script exits 1 if they differ). Reports
numbers; asserts nothing about speed.

Usage: predict_wide.py [--dsn DSN] [--reps 5] [--skip-load] [--old-ref COMMIT]
Connection: libpq environment variables or --dsn. Loads Chinook with scripts/chinook.py (schema
"chinook", dropped and recreated) and embeds both columns unless --skip-load.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

import psycopg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: The last commit whose sql/predict.sql is the 0.1.0 one (before wide tables were handled).
OLD_REF = "85d91eb"
HELPERS = ("label_kind", "embedding_type", "row_key", "knn_vote", "knn_mean")

EVALUATE = ("SELECT metric, model, baseline, test_rows, train_rows FROM {s}tributary_evaluate("
            "'{tbl}', 'genre_id', '{col}', group_by => 'album_id', seed => {seed}) ORDER BY metric")
PREDICT = ("SELECT t.track_id, p.prediction, p.confidence, p.neighbours, p.evidence FROM chinook.track t, "
           "{s}tributary_predict('chinook.track', 'genre_id', 'embedding', t.embedding) p "
           "WHERE t.track_id % 100 = 0 ORDER BY t.track_id")
CASES = [
    ("evaluate, TOASTed column (`embedding`)", EVALUATE, {"tbl": "chinook.track", "col": "embedding", "seed": 0}),
    ("evaluate, in-line column (`context_embedding`)", EVALUATE,
     {"tbl": "chinook.track", "col": "context_embedding", "seed": 0}),
    ("evaluate, TOASTed column, table never analysed", EVALUATE,
     {"tbl": "chinook.track_fresh", "col": "embedding", "seed": 1}),
    ("predict, 35 tracks, TOASTed column, exact search", PREDICT, {}),
]
#: (name, schema of the functions, session settings); "now" (index 2) is what the ratios compare with.
VARIANTS = [("0.1.0", "bench_v010.", {}), ("0.1.0, session jit = off", "bench_v010.", {"jit": "off"}),
            ("now", "", {}), ("now without SET jit = off", "bench_jit.", {}),
            ("now, session work_mem = 64MB", "", {"work_mem": "'64MB'"})]


def load(dsn: str) -> None:
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "chinook.py"), "--dsn", dsn],
                   check=True, stdout=subprocess.DEVNULL)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS tributary CASCADE")
        conn.execute("SET tributary.progress_interval = 0")
        conn.execute("ALTER TABLE chinook.track ADD COLUMN embedding vector(384), "
                     "ADD COLUMN context_embedding vector(384)")
        conn.execute("SELECT tributary_embed_column('chinook.track', '{*}', 'embedding', exclude => '{genre_id}')")
        conn.execute("SELECT tributary_embed_column('chinook.track', '{*}', 'context_embedding', "
                     "exclude => '{genre_id}', parents => 2)")
        conn.execute("VACUUM ANALYZE chinook.track")


def copy_functions(conn: psycopg.Connection, sql: str, schema: str) -> None:
    """The functions of a version of sql/predict.sql, renamed into `schema` (recreated)."""
    sql = re.sub(r"tributary\.(%s)\b" % "|".join(HELPERS), schema + r".\1", sql)
    sql = sql.replace("CREATE FUNCTION tributary_", f"CREATE FUNCTION {schema}.tributary_")
    conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    conn.execute(f"CREATE SCHEMA {schema}")
    conn.execute(sql)


def old_functions(conn: psycopg.Connection, ref: str) -> None:
    """sql/predict.sql of `ref` in schema bench_v010; the working tree's without its SET jit = off
    in schema bench_jit (what the attribute saves)."""
    copy_functions(conn, subprocess.run(["git", "-C", ROOT, "show", f"{ref}:sql/predict.sql"], check=True,
                                        capture_output=True, text=True).stdout, "bench_v010")
    with open(os.path.join(ROOT, "sql", "predict.sql")) as f:
        now = f.read()
    assert now.count(" SET jit = off AS $$") == 2, "sql/predict.sql: expected two functions with SET jit = off"
    copy_functions(conn, now.replace(" SET jit = off AS $$", " AS $$"), "bench_jit")


def run(conn: psycopg.Connection, sql: str, settings: dict[str, str]) -> tuple[float, list]:
    conn.execute("RESET ALL")
    for name, value in settings.items():
        conn.execute(f"SET {name} = {value}")
    t0 = time.monotonic()
    rows = conn.execute(sql).fetchall()
    return time.monotonic() - t0, rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", default="")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--skip-load", action="store_true")
    ap.add_argument("--old-ref", default=OLD_REF)
    args = ap.parse_args()
    if not args.skip_load:
        load(args.dsn)
    load_before = os.getloadavg()[0]
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        old_functions(conn, args.old_ref)
        conn.execute("DROP TABLE IF EXISTS chinook.track_fresh")
        conn.execute("CREATE TABLE chinook.track_fresh WITH (autovacuum_enabled = false) AS TABLE chinook.track")
        toast = conn.execute(
            "SELECT (SELECT array_agg(DISTINCT pg_column_size(embedding)) FROM chinook.track), "
            "(SELECT array_agg(DISTINCT pg_column_size(context_embedding)) FROM chinook.track), "
            "pg_size_pretty(pg_relation_size(c.reltoastrelid)), count(*) FROM pg_class c, chinook.track "
            "WHERE c.oid = 'chinook.track'::regclass GROUP BY c.reltoastrelid").fetchone()
        print(f"chinook.track: {toast[3]} rows; pg_column_size(embedding) {toast[0]} (1540: out of line), "
              f"pg_column_size(context_embedding) {toast[1]} (1544: in line); TOAST table {toast[2]}.\n")
        times: dict[tuple[int, int], list[float]] = {}
        differ = []
        for rep in range(args.reps):
            for ci, (_, sql, params) in enumerate(CASES):
                results = []
                order = list(range(len(VARIANTS)))
                if rep % 2:
                    order.reverse()
                for vi in order:
                    _, schema, settings = VARIANTS[vi]
                    secs, rows = run(conn, sql.format(s=schema, **params), settings)
                    times.setdefault((ci, vi), []).append(secs)
                    results.append(rows)
                if any(r != results[0] for r in results):
                    differ.append(CASES[ci][0])
        conn.execute("RESET ALL")
        print(f"| case | {' | '.join(v[0] + ' s' for v in VARIANTS)} | 0.1.0 / now | 0.1.0 jit off / now "
              "| without SET jit = off / now |")
        print("|---|" + "---:|" * (len(VARIANTS) + 3))
        for ci, (name, _, _) in enumerate(CASES):
            med = [statistics.median(times[(ci, vi)]) for vi in range(len(VARIANTS))]
            print(f"| {name} | {' | '.join(f'{m:.3f}' for m in med)} | {med[0] / med[2]:.2f}x | {med[1] / med[2]:.2f}x | "
                  f"{med[3] / med[2]:.2f}x |")
    print(f"\nMedians of {args.reps} runs each, variants interleaved; old functions from {args.old_ref}:sql/predict.sql. "
          f"Load average (1 min) before {load_before:.2f}, after {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs.")
    if differ:
        print(f"RESULTS DIFFER between variants in: {', '.join(differ)}")
        sys.exit(1)
    print("Results identical across variants in every case and run (metrics as float8; predictions, confidences, "
          "evidence).")


if __name__ == "__main__":
    main()
