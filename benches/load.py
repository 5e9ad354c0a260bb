#!/usr/bin/env python3
"""Load benchmark (benches/load.sh): CLIENTS connections for MINUTES minutes on the default model,
mixing single-text searches, `tributary_embed(text[])` batches and a running continuous job, once
as tributary was ("before": weights copied into each backend, arena kept, no CPU run cap) and once
as it is ("after": the defaults: shared weights, arena shrunk, `tributary.max_cpu_runs` = one per
core). A benchmark: it asserts nothing.

Each client loops: with probability 0.8 a search
    SELECT id FROM load_docs ORDER BY embedding <=> tributary_embed(<query>) LIMIT 5
(a distinct query text each time), else a batch `tributary_embed(<32 descriptions>)`. A writer
inserts 4 rows a second into load_feed, which a continuous job embeds. Reported per phase:
requests and rows per second, p50/p99 latency per kind, errors, each client backend's (and the job
worker's) private memory at minute 2 and at the end (smaps_rollup, MB), and a 10-second time
series for the plot.

Usage: load.py --dsn DSN [--clients 16] [--minutes 10] [--phases before,after] [--out FILE.json]
       load.py --plot FILE.json --png FILE.png
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import threading
import time

import psycopg

SETTINGS = {
    "before": {"tributary.shared_weights": "off", "tributary.shrink_arena": "off", "tributary.max_cpu_runs": "-1",
               "tributary.intra_op_spinning": "on"},
    "after": {},  # the defaults
    # Parts of "after" alone, to see what each costs or gives (--phases).
    "after-no-cap": {"tributary.max_cpu_runs": "-1"},
    "after-arena-kept": {"tributary.shrink_arena": "off"},
    "after-spinning": {"tributary.intra_op_spinning": "on"},
}
RESET = ["tributary.shared_weights", "tributary.shrink_arena", "tributary.max_cpu_runs", "tributary.intra_op_spinning"]


def private_mb(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return sum(int(l.split()[1]) for l in f if l.startswith(("Private_Clean:", "Private_Dirty:"))) / 1024
    except OSError:
        return None


def configure(dsn: str, phase: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as c:
        for k in RESET:
            c.execute(f"ALTER SYSTEM RESET {k}")
        for k, v in SETTINGS[phase].items():
            c.execute(f"ALTER SYSTEM SET {k} = '{v}'")
        c.execute("SELECT pg_reload_conf()")
        # Job workers started before the reload keep their sessions: restart them.
        c.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type = 'tributary worker'")
    time.sleep(2)


def percentile(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def run_phase(dsn: str, phase: str, clients: int, seconds: float, texts: list[str]) -> dict:
    configure(dsn, phase)
    stop = threading.Event()
    events: list[tuple[float, str, float, bool, int]] = []  # (t, kind, ms, ok, rows)
    errors: list[str] = []
    lock = threading.Lock()
    pids: list[int] = []
    t0 = time.monotonic()

    def client(k: int) -> None:
        rng = random.Random(k)
        with psycopg.connect(dsn, autocommit=True) as c:
            with lock:
                pids.append(c.execute("SELECT pg_backend_pid()").fetchone()[0])
            n = 0
            while not stop.is_set():
                n += 1
                if rng.random() < 0.8:
                    kind, rows = "search", 1
                    q = f"{rng.choice(texts)[:80]} (client {k} query {n})"
                    sql, args = "SELECT id FROM load_docs ORDER BY embedding <=> tributary_embed(%s) LIMIT 5", (q,)
                else:
                    kind, rows = "batch", 32
                    start = rng.randrange(0, len(texts) - 32)
                    sql, args = "SELECT tributary_embed(%s::text[])", ([f"{t} ({n})" for t in texts[start:start + 32]],)
                t = time.monotonic()
                ok = True
                try:
                    c.execute(sql, args).fetchall()
                except psycopg.Error as e:
                    ok = False
                    with lock:
                        errors.append(f"{kind}: {e.sqlstate} {str(e).splitlines()[0]}")
                ms = (time.monotonic() - t) * 1e3
                with lock:
                    events.append((t - t0, kind, ms, ok, rows))

    def writer() -> None:
        with psycopg.connect(dsn, autocommit=True) as c:
            i = 0
            while not stop.is_set():
                c.execute("INSERT INTO load_feed (body) SELECT %s FROM generate_series(1, 4)", (f"{texts[i % len(texts)]} feed {i}",))
                i += 1
                stop.wait(1.0)

    with psycopg.connect(dsn, autocommit=True) as c:
        job_start = c.execute("SELECT rows_done FROM tributary.jobs WHERE name = 'load_feed_job'").fetchone()[0]
    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)] + [threading.Thread(target=writer)]
    for t in threads:
        t.start()
    # Every backend's private memory every 5 s: a sample taken while a call is in flight holds
    # that call's buffers, so each mark (minute 2, the end) is reported both as one snapshot and
    # as each backend's minimum over the 30 s before it (what it keeps between calls).
    samples: list[tuple[float, dict[int, float | None], list[float | None]]] = []
    mark = min(120.0, seconds / 2)
    with psycopg.connect(dsn, autocommit=True) as m:
        while time.monotonic() - t0 < seconds - 0.5:
            workers = [r[0] for r in m.execute("SELECT pid FROM pg_stat_activity WHERE backend_type = 'tributary worker'")]
            samples.append((time.monotonic() - t0, {p: private_mb(p) for p in list(pids)}, [private_mb(p) for p in workers]))
            time.sleep(min(5.0, max(0.0, seconds - 0.5 - (time.monotonic() - t0))))
        stop.set()
        for t in threads:
            t.join()
        job = m.execute("SELECT rows_done, rows_queued, rows_failed FROM tributary.jobs WHERE name = 'load_feed_job'").fetchone()

    def at(when: float) -> dict:
        window = [s for s in samples if when - 30 <= s[0] <= when] or samples[-1:]
        snap = min(samples, key=lambda s: abs(s[0] - when))
        kept = {p: min((s[1].get(p) for s in window if s[1].get(p) is not None), default=None) for p in pids}
        return {"clients": [snap[1].get(p) for p in pids], "clients_kept": [kept[p] for p in pids], "workers": snap[2]}

    memory = {"minute_2": at(mark), "end": at(samples[-1][0])}
    elapsed = seconds
    out: dict = {"phase": phase, "clients": clients, "seconds": elapsed, "settings": SETTINGS[phase] or "defaults"}
    for kind in ("search", "batch"):
        lat = [e[2] for e in events if e[1] == kind and e[3]]
        out[kind] = {
            "requests_per_s": round(len(lat) / elapsed, 2),
            "p50_ms": round(percentile(lat, 50), 1),
            "p99_ms": round(percentile(lat, 99), 1),
        }
    out["rows_per_s"] = round(sum(e[4] for e in events if e[3]) / elapsed, 1)
    out["errors"] = len(errors)
    out["error_samples"] = sorted(set(errors))[:5]
    out["job"] = {"rows_done": job[0] - job_start, "rows_queued": job[1], "rows_failed": job[2]} if job else None

    def summary(xs: list) -> dict:
        xs = [x for x in xs if x is not None]
        return {"median": round(statistics.median(xs), 1), "max": round(max(xs), 1), "sum": round(sum(xs), 1)} if xs else {}

    out["memory_mb"] = {label: {k: summary(v) for k, v in d.items()} for label, d in memory.items()}

    def growth(key: str) -> dict:
        g = [(e - s) / s * 100 for s, e in zip(memory["minute_2"][key], memory["end"][key]) if s and e]
        return {"median": round(statistics.median(g), 1), "max": round(max(g), 1)} if g else {}

    out["memory_growth_pct"] = growth("clients")
    out["memory_kept_growth_pct"] = growth("clients_kept")
    out["memory_series"] = [{"t": t, "clients_median": statistics.median([v for v in c.values() if v is not None] or [0])}
                            for t, c, _ in samples]
    series = []
    for w in range(0, int(elapsed), 10):
        win = [e for e in events if w <= e[0] < w + 10 and e[3]]
        series.append({"t": w, "rows_per_s": sum(e[4] for e in win) / 10,
                       "search_p99_ms": percentile([e[2] for e in win if e[1] == "search"], 99)})
    out["series"] = series
    return out


def prepare(dsn: str) -> list[str]:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS load_docs, load_feed")
        c.execute("CREATE TABLE load_docs AS SELECT row_number() OVER (ORDER BY package)::int AS id, description AS body, "
                  "NULL::vector(384) AS embedding FROM debian_packages")
        c.execute("ALTER TABLE load_docs ADD PRIMARY KEY (id)")
        c.execute("SELECT tributary_embed_column('load_docs', ARRAY['body'], 'embedding')")
        c.execute("CREATE TABLE load_feed (id bigserial PRIMARY KEY, body text, embedding vector(384))")
        c.execute("SELECT tributary_job_create('load_feed', '{body}', 'embedding', mode => 'continuous', name => 'load_feed_job')")
        c.execute("VACUUM ANALYZE load_docs")
        return [r[0] for r in c.execute("SELECT body FROM load_docs ORDER BY id")]


def plot(data: dict, png: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a, b, m) = plt.subplots(1, 3, figsize=(15, 4.2))
    for phase in data["phases"]:
        s = phase["series"]
        a.plot([x["t"] / 60 for x in s], [x["rows_per_s"] for x in s], label=phase["phase"])
        b.plot([x["t"] / 60 for x in s], [x["search_p99_ms"] for x in s], label=phase["phase"])
    a.set(title="rows embedded per second (10 s windows)", xlabel="minute")
    b.set(title="search p99 latency (ms, 10 s windows)", xlabel="minute", yscale="log")
    for phase in data["phases"]:
        s = phase.get("memory_series", [])
        m.plot([x["t"] / 60 for x in s], [x["clients_median"] for x in s], label=phase["phase"])
    m.set(title="private MB per client backend\n(median, sampled every 5 s)", xlabel="minute", ylim=(0, None))
    for ax in (a, b, m):
        ax.legend()
    fig.suptitle(f"{data['phases'][0]['clients']} clients, {data['phases'][0]['seconds'] / 60:.0f} min per phase, all-MiniLM-L6-v2 on the CPU")
    fig.tight_layout()
    fig.savefig(png, dpi=100)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsn")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--phases", default="before,after")
    ap.add_argument("--out")
    ap.add_argument("--plot")
    ap.add_argument("--png")
    a = ap.parse_args()
    if a.plot:
        with open(a.plot) as f:
            plot(json.load(f), a.png)
        return
    texts = prepare(a.dsn)
    phases = []
    try:
        for p in a.phases.split(","):
            phases.append(run_phase(a.dsn, p, a.clients, a.minutes * 60, texts))
            print(json.dumps({k: v for k, v in phases[-1].items() if k != "series"}), flush=True)
    finally:
        with psycopg.connect(a.dsn, autocommit=True) as c:
            for k in RESET:
                c.execute(f"ALTER SYSTEM RESET {k}")
            c.execute("SELECT pg_reload_conf()")
    data = {"phases": phases}
    if a.out:
        with open(a.out, "w") as f:
            json.dump(data, f, indent=1)
    print("\n| | " + " | ".join(p["phase"] for p in phases) + " |")
    print("|---|" + "---|" * len(phases))
    rows = [
        ("rows embedded per second (searches + batches)", lambda p: p["rows_per_s"]),
        ("searches per second", lambda p: p["search"]["requests_per_s"]),
        ("search p50 / p99 (ms)", lambda p: f"{p['search']['p50_ms']} / {p['search']['p99_ms']}"),
        ("batches (32 texts) per second", lambda p: p["batch"]["requests_per_s"]),
        ("batch p50 / p99 (ms)", lambda p: f"{p['batch']['p50_ms']} / {p['batch']['p99_ms']}"),
        ("errors", lambda p: p["errors"]),
        ("job rows embedded (queued at the end)", lambda p: f"{p['job']['rows_done']} ({p['job']['rows_queued']})" if p["job"] else "-"),
        ("private MB per client backend at minute 2, median / max", lambda p: f"{p['memory_mb']['minute_2']['clients'].get('median')} / {p['memory_mb']['minute_2']['clients'].get('max')}"),
        ("... at the end, median / max", lambda p: f"{p['memory_mb']['end']['clients'].get('median')} / {p['memory_mb']['end']['clients'].get('max')}"),
        ("... all client backends together at the end", lambda p: p["memory_mb"]["end"]["clients"].get("sum")),
        ("growth minute 2 -> end per backend (%), median / max", lambda p: f"{p['memory_growth_pct'].get('median')} / {p['memory_growth_pct'].get('max')}"),
        ("kept between calls (min over 30 s) per client backend at minute 2, median / max", lambda p: f"{p['memory_mb']['minute_2']['clients_kept'].get('median')} / {p['memory_mb']['minute_2']['clients_kept'].get('max')}"),
        ("... at the end, median / max", lambda p: f"{p['memory_mb']['end']['clients_kept'].get('median')} / {p['memory_mb']['end']['clients_kept'].get('max')}"),
        ("growth of what is kept, minute 2 -> end (%), median / max", lambda p: f"{p['memory_kept_growth_pct'].get('median')} / {p['memory_kept_growth_pct'].get('max')}"),
        ("job worker private MB at the end", lambda p: p["memory_mb"]["end"]["workers"].get("max", "-")),
    ]
    for label, f in rows:
        print(f"| {label} | " + " | ".join(str(f(p)) for p in phases) + " |")


if __name__ == "__main__":
    main()
