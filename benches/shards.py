"""Past one server (benches/shards.sh): a coordinator and 1 or 2 shard clusters, all on this machine.

For each shard count: rows/s of embedding the coordinator's table (a) with tributary_embed_column
on the coordinator (the model runs there, rows travel through postgres_fdw both ways) and (b) with
a job made on the coordinator, which runs on every shard (time from tributary_job_create until
tributary.jobs says done); then search latency through the coordinator (the query embedded on the
coordinator, `ORDER BY e <=> (SELECT tributary_embed(q)) LIMIT 10` pushed to each shard) against
the same query on one server holding every row in a local table (the foreign servers' fetch_size
1000, as for bulk reads, and 20, just above the LIMIT). All in one run, same machine,
same rows. A benchmark: it asserts nothing. On one machine the shards share its cores, so rows/s
is also given per core, with a model of N shards on N machines in BENCHMARKS.md.

Usage: shards.py --coord DSN --shards DSN1,DSN2 --sockets SOCK1:PORT1,SOCK2:PORT2 --rows N --out FILE.json
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import psycopg
from psycopg.conninfo import make_conninfo

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUERIES = ["a text editor for programmers", "tools to read and write spreadsheets", "a game with space ships",
           "compress files quickly", "a library for parsing XML", "monitor network traffic", "draw charts from data",
           "a web browser", "music player for the desktop", "backup files to a remote server"]


def conn(dsn):
    return psycopg.connect(dsn, autocommit=True)


def run(dsn, *sql):
    with conn(dsn) as c:
        for s in sql:
            c.execute(s)


def one(dsn, sql, args=None):
    with conn(dsn) as c:
        return c.execute(sql, args).fetchone()


def setup(coord, shards, sockets, rows):
    """The coordinator's app.docs over len(shards) shards (hash partitions), and app.local with the
    same rows on the coordinator. Rows from scripts/debian_data.py."""
    n = len(shards)
    for dsn in shards:
        run(dsn, "CREATE EXTENSION IF NOT EXISTS tributary CASCADE", "DROP TABLE IF EXISTS docs",
            "CREATE TABLE docs (package text PRIMARY KEY, body text, e vector(384))")
    run(coord, "CREATE EXTENSION IF NOT EXISTS tributary CASCADE", "CREATE EXTENSION IF NOT EXISTS postgres_fdw",
        "CREATE EXTENSION IF NOT EXISTS dblink", "DROP TABLE IF EXISTS docs, local",
        "CREATE TABLE docs (package text, body text, e vector(384)) PARTITION BY HASH (package)")
    for i, sock in enumerate(sockets[:n]):
        host, port = sock.split(":")
        run(coord, f"DROP SERVER IF EXISTS b{i} CASCADE",
            f"CREATE SERVER b{i} FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '{host}', port '{port}', "
            f"dbname 'postgres', extensions 'vector', fetch_size '1000', batch_size '500')",
            f"CREATE USER MAPPING FOR postgres SERVER b{i} OPTIONS (user 'postgres')",
            f"CREATE FOREIGN TABLE docs_{i} PARTITION OF docs FOR VALUES WITH (MODULUS {n}, REMAINDER {i}) "
            f"SERVER b{i} OPTIONS (table_name 'docs')")
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "debian_data.py"), "--dsn", coord,
                    "--table", "bench_src", "--limit", str(rows)], check=True, stdout=subprocess.DEVNULL)
    run(coord, f"INSERT INTO docs SELECT package, description, NULL FROM bench_src ORDER BY package LIMIT {rows}",
        "CREATE TABLE local (package text PRIMARY KEY, body text, e vector(384))",
        "INSERT INTO local SELECT package, body, NULL FROM docs")


def clear(shards):
    for dsn in shards:
        run(dsn, "UPDATE docs SET e = NULL", "VACUUM docs")


def embed_column(coord, rows):
    t0 = time.monotonic()
    n = one(coord, "SELECT tributary_embed_column('docs', '{body}', 'e', batch_size => 256)")[0]
    return {"rows": n, "seconds": time.monotonic() - t0, "rows_per_s": n / (time.monotonic() - t0)}


def job(coord, rows):
    t0 = time.monotonic()
    job_id = one(coord, "SELECT tributary_job_create('docs', '{body}', 'e', batch_size => 256)")[0]
    while True:
        state, done = one(coord, "SELECT state, rows_done FROM tributary.jobs WHERE id = %s", (job_id,))
        if state in ("done", "failed", "unreachable"):
            break
        time.sleep(0.2)
    seconds = time.monotonic() - t0
    run(coord, f"SELECT tributary_job_drop({job_id})")
    return {"rows": done, "state": state, "seconds": seconds, "rows_per_s": done / seconds}


def search(dsn, table, reps):
    """ms per query (query embedding included), over reps rounds of QUERIES, after one warm round."""
    sql = f"SELECT package FROM {table} ORDER BY e <=> (SELECT tributary_embed(%s)) LIMIT 10"
    times = []
    with conn(dsn) as c:
        for q in QUERIES:
            c.execute(sql, (q,)).fetchall()
        for _ in range(reps):
            for q in QUERIES:
                t0 = time.perf_counter()
                c.execute(sql, (q,)).fetchall()
                times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return {"p50_ms": statistics.median(times), "p95_ms": times[int(len(times) * 0.95)], "queries": len(times)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--coord", required=True)
    ap.add_argument("--shards", required=True)
    ap.add_argument("--sockets", required=True)
    ap.add_argument("--rows", type=int, default=8000)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    shards, sockets = a.shards.split(","), a.sockets.split(",")
    cores = os.cpu_count()
    results = {"rows": a.rows, "cores": cores, "runs": []}
    for n in range(1, len(shards) + 1):
        setup(a.coord, shards[:n], sockets, a.rows)
        r = {"shards": n}
        r["embed_column_on_coordinator"] = embed_column(a.coord, a.rows)
        clear(shards[:n])
        r["job_on_shards"] = job(a.coord, a.rows)
        run(a.coord, "UPDATE local l SET e = d.e FROM docs d WHERE d.package = l.package")
        r["search_through_coordinator"] = search(a.coord, "docs", a.reps)
        # postgres_fdw sends no LIMIT through Merge Append: each shard returns fetch_size rows (with
        # their vectors) at the first fetch. A fetch_size just above the LIMIT sends less.
        for i in range(n):
            run(a.coord, f"ALTER SERVER b{i} OPTIONS (SET fetch_size '20')")
        r["search_through_coordinator_fetch_20"] = search(a.coord, "docs", a.reps)
        for i in range(n):
            run(a.coord, f"ALTER SERVER b{i} OPTIONS (SET fetch_size '1000')")
        r["search_one_server"] = search(a.coord, "local", a.reps)
        plan = [x[0] for x in conn(a.coord).execute(
            "EXPLAIN (VERBOSE, COSTS OFF) SELECT package FROM docs ORDER BY e <=> (SELECT tributary_embed('a text editor')) LIMIT 10")]
        r["plan"] = plan
        results["runs"].append(r)
        ec, jb = r["embed_column_on_coordinator"], r["job_on_shards"]
        sc, so = r["search_through_coordinator"], r["search_one_server"]
        print(f"{n} shard(s), {a.rows} rows, {cores} cores shared by every cluster:")
        print(f"  tributary_embed_column on the coordinator: {ec['rows_per_s']:.1f} rows/s ({ec['rows_per_s'] / cores:.1f} per core)")
        print(f"  job on the shards (made on the coordinator): {jb['rows_per_s']:.1f} rows/s ({jb['rows_per_s'] / cores:.1f} per core), "
              f"{jb['rows']} rows, {jb['state']}; {jb['rows_per_s'] / ec['rows_per_s']:.2f}x")
        s20 = r["search_through_coordinator_fetch_20"]
        print(f"  search p50/p95: through the coordinator {sc['p50_ms']:.1f} / {sc['p95_ms']:.1f} ms (fetch_size 1000), "
              f"{s20['p50_ms']:.1f} / {s20['p95_ms']:.1f} ms (fetch_size 20); "
              f"one server {so['p50_ms']:.1f} / {so['p95_ms']:.1f} ms ({s20['p50_ms'] / so['p50_ms']:.2f}x with fetch_size 20)")
        sys.stdout.flush()
    print("\nEXPLAIN (VERBOSE, COSTS OFF) through the coordinator, last run:")
    print("\n".join(results["runs"][-1]["plan"]))
    with open(a.out, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
