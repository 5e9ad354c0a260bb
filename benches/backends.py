#!/usr/bin/env python3
"""Many backends, before and after shared weights, in one run (benches/backends.sh runs it on a
throwaway cluster with the release build): a benchmark, it asserts nothing.

"before" is tributary as it was: `tributary.shared_weights = off` (each backend loads the model
file and holds its own copy of the weights) and `tributary.shrink_arena = off` (ONNX Runtime's CPU
arena keeps what a large call grew). "after" is the default: the prepared graph mapped from one
file ($PGDATA/tributary_graphs) and the arena shrunk after each call's last run. For each:

- cold start: the first `tributary_embed` of each new backend, as the client sees it (ms); the
  first backend of "after" also prepares the graph (once per machine), reported apart;
- private memory of each of BACKENDS backends holding a session (smaps_rollup Private_Clean +
  Private_Dirty, MB), after 20 short queries and again after one large call (64 texts of about
  128 tokens) and 20 more short queries;
- short-query latency (ms, median of 200 distinct texts in one warm backend);
- throughput: `tributary_embed(text[])` over 1,000 Debian package descriptions in one warm
  backend, rows/s, median of REPEATS runs, before and after alternating.

Usage: backends.py --dsn DSN [--backends 8] [--repeats 3]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import time

import psycopg

PHASES = {
    "before": {"tributary.shared_weights": "off", "tributary.shrink_arena": "off", "tributary.intra_op_spinning": "on"},
    "after": {"tributary.shared_weights": "on", "tributary.shrink_arena": "on", "tributary.intra_op_spinning": "off"},
}


def private_mb(pid: int) -> float:
    kb = 0
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                kb += int(line.split()[1])
    return kb / 1024


def connect(dsn: str, phase: str) -> psycopg.Connection:
    c = psycopg.connect(dsn, autocommit=True)
    for k, v in PHASES[phase].items():
        c.execute(f"SET {k} = {v}")
    c.execute("SET tributary.progress_interval = 0")
    return c


def timed(c: psycopg.Connection, sql: str, args=None) -> float:
    t = time.perf_counter()
    c.execute(sql, args).fetchall()
    return (time.perf_counter() - t) * 1e3


def short_queries(c: psycopg.Connection, tag: str, n: int = 20) -> list[float]:
    return [timed(c, "SELECT tributary_embed(%s)", (f"short query {tag} number {i} about packages",)) for i in range(n)]


LARGE = "SELECT tributary_embed(ARRAY(SELECT repeat('token ', 124) || g FROM generate_series(1, 64) g))"


def memory_phase(dsn: str, phase: str, backends: int) -> dict:
    out: dict = {"phase": phase}
    if phase == "after":
        with psycopg.connect(dsn, autocommit=True) as c:
            cache = os.path.join(c.execute("SHOW data_directory").fetchone()[0], "tributary_graphs")
        shutil.rmtree(cache, ignore_errors=True)
        with connect(dsn, phase) as c:
            out["first_ever_ms"] = round(timed(c, "SELECT tributary_embed('prepares the graph')"), 1)
    conns = [connect(dsn, phase) for _ in range(backends)]
    pids = [c.execute("SELECT pg_backend_pid()").fetchone()[0] for c in conns]
    cold = [timed(c, "SELECT tributary_embed('first call of this backend')") for c in conns]
    for i, c in enumerate(conns):
        short_queries(c, f"{phase}-{i}")
    time.sleep(0.5)
    small = [private_mb(p) for p in pids]
    for i, c in enumerate(conns):
        c.execute(LARGE).fetchall()
        short_queries(c, f"{phase}-after-large-{i}")
    time.sleep(0.5)
    large = [private_mb(p) for p in pids]
    notes = conns[0].execute("SELECT model_file, provider_note FROM tributary.sessions").fetchone()
    for c in conns:
        c.close()
    out.update(
        backends=backends,
        cold_start_ms={"median": round(statistics.median(cold), 1), "max": round(max(cold), 1)},
        private_mb_small={"median": round(statistics.median(small), 1), "max": round(max(small), 1)},
        private_mb_after_large={"median": round(statistics.median(large), 1), "max": round(max(large), 1)},
        model_file=notes[0],
        note=notes[1],
    )
    return out


def throughput(dsn: str, repeats: int) -> dict:
    runs: dict = {p: [] for p in PHASES}
    latency: dict = {}
    with psycopg.connect(dsn, autocommit=True) as c:
        texts = [r[0] for r in c.execute("SELECT description FROM debian_packages ORDER BY package LIMIT 1000")]
    for phase in PHASES:
        with connect(dsn, phase) as c:
            c.execute("SELECT tributary_embed('warm up')")
            lat = [timed(c, "SELECT tributary_embed(%s)", (f"{t[:60]} {i}",)) for i, t in enumerate(texts[:200])]
            latency[phase] = round(statistics.median(lat), 2)
    for _ in range(repeats):
        for phase in PHASES:
            with connect(dsn, phase) as c:
                c.execute("SELECT tributary_embed('warm up')")
                ms = timed(c, "SELECT tributary_embed(%s::text[])", (texts,))
                runs[phase].append(len(texts) / (ms / 1e3))
    return {
        "rows_per_s": {p: round(statistics.median(v), 1) for p, v in runs.items()},
        "runs": {p: [round(x, 1) for x in v] for p, v in runs.items()},
        "short_query_ms_median": latency,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsn", required=True)
    ap.add_argument("--backends", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    result = {p: memory_phase(a.dsn, p, a.backends) for p in PHASES}
    result["throughput"] = throughput(a.dsn, a.repeats)
    print(json.dumps(result, indent=1))
    b, f, t = result["before"], result["after"], result["throughput"]
    print()
    print("| | before (weights copied, arena kept, threads spin) | after (shared weights, arena shrunk, no spinning) |")
    print("|---|---|---|")
    print(f"| private memory per backend, after short queries (MB, median / max of {a.backends}) | "
          f"{b['private_mb_small']['median']} / {b['private_mb_small']['max']} | {f['private_mb_small']['median']} / {f['private_mb_small']['max']} |")
    print(f"| ... after one large call (64 x 128 tokens) | {b['private_mb_after_large']['median']} / {b['private_mb_after_large']['max']} | "
          f"{f['private_mb_after_large']['median']} / {f['private_mb_after_large']['max']} |")
    print(f"| first call in a new backend (ms, median / max) | {b['cold_start_ms']['median']} / {b['cold_start_ms']['max']} | "
          f"{f['cold_start_ms']['median']} / {f['cold_start_ms']['max']} |")
    print(f"| first call on the machine, graph prepared (ms, once) | - | {f['first_ever_ms']} |")
    print(f"| short query, warm (ms, median of 200) | {t['short_query_ms_median']['before']} | {t['short_query_ms_median']['after']} |")
    print(f"| throughput, 1,000 descriptions (rows/s, median of {a.repeats}) | {t['rows_per_s']['before']} | {t['rows_per_s']['after']} |")
    ratio = t["rows_per_s"]["after"] / t["rows_per_s"]["before"]
    print(f"\nthroughput after/before: {ratio:.3f}")


if __name__ == "__main__":
    main()
