#!/usr/bin/env python3
"""Priority benchmark (benches/priority.sh): do one-sentence searches stay fast while bulk callers
and a job keep the CPU busy? A benchmark: it asserts nothing; it prints each phase's figures and
whether the goal was met.

Classes of clients, on one cluster, every phase SECONDS long:
- interactive: one client, a one-sentence query every 100 ms (10 a second, the next one at the
  next tick; a query that takes longer delays the next),
      SELECT vector_dims(tributary_embed('query number <n> about databases and embeddings'))
  with a new <n> each time (a repeated text would come from the backend's memo);
- bulk: BULK clients (8) each looping
      SELECT cardinality(tributary_embed(array_agg('bulk text ' || g || ' of call <n> about ...')))
      FROM generate_series(1, 64) g
- job: a continuous job on a table into which a writer inserts 4 rows a second.

Phases:
- bulk-alone: the bulk clients only (the reference for bulk texts/s);
- no-priority: every class, with every call at one priority and no kept slot
  (`tributary.priority = bulk` for all, `tributary.interactive_cpu_runs = 0`): one queue in arrival
  order, which is how 0.6.0 admitted runs (its waiters queued per slot);
- priority-no-kept-slot: every class, `tributary.priority = auto`, `interactive_cpu_runs = 0`:
  interactive runs take the next free slot first but wait for a bulk run to end;
- priority: every class, the defaults (`auto`, one slot kept for interactive runs).

Reported per phase and class: p50/p95/p99 latency (ms), requests/s, texts/s; bulk texts/s as a
ratio to bulk-alone; the job's rows. Goal (the issue): interactive p99 <= 50 ms and bulk texts/s
>= 0.9x bulk-alone, in the same run.

Usage: priority.py --dsn DSN [--seconds 120] [--bulk 8] [--phases ...] [--out FILE.json]
       priority.py --plot FILE.json --png FILE.png
"""
from __future__ import annotations

import argparse
import json
import threading
import time

import psycopg

PHASES = {
    "bulk-alone": {"classes": ("bulk",), "settings": {}},
    "no-priority": {"classes": ("interactive", "bulk", "job"),
                    "settings": {"tributary.priority": "bulk", "tributary.interactive_cpu_runs": "0"}},
    "priority-no-kept-slot": {"classes": ("interactive", "bulk", "job"),
                              "settings": {"tributary.interactive_cpu_runs": "0"}},
    "priority": {"classes": ("interactive", "bulk", "job"), "settings": {}},
}
RESET = ["tributary.priority", "tributary.interactive_cpu_runs"]
INTERVAL_S = 0.1


def percentile(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def configure(dsn: str, settings: dict) -> None:
    with psycopg.connect(dsn, autocommit=True) as c:
        for k in RESET:
            c.execute(f"ALTER SYSTEM RESET {k}")
        for k, v in settings.items():
            c.execute(f"ALTER SYSTEM SET {k} = '{v}'")
        c.execute("SELECT pg_reload_conf()")
        # The job's worker reads the server's settings when it starts: restart it.
        c.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type = 'tributary worker'")
    time.sleep(3)


def run_phase(dsn: str, name: str, seconds: float, bulk: int) -> dict:
    spec = PHASES[name]
    configure(dsn, spec["settings"])
    stop = threading.Event()
    lock = threading.Lock()
    events: list[tuple[str, float, float, int]] = []  # (class, t, ms, texts)
    errors: list[str] = []
    ready = threading.Barrier(1 + bulk * ("bulk" in spec["classes"]) + ("interactive" in spec["classes"]))
    t0 = [0.0]

    def call(c, cls: str, sql: str, texts: int) -> None:
        t = time.monotonic()
        try:
            c.execute(sql).fetchall()
        except psycopg.Error as e:
            with lock:
                errors.append(f"{cls}: {e.sqlstate} {str(e).splitlines()[0]}")
            return
        ms = (time.monotonic() - t) * 1e3
        if t >= t0[0]:
            with lock:
                events.append((cls, t - t0[0], ms, texts))

    def interactive() -> None:
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("SELECT vector_dims(tributary_embed('warm up'))")  # session created
            ready.wait()
            n, tick = 0, time.monotonic()
            while not stop.is_set():
                n += 1
                call(c, "interactive", f"SELECT vector_dims(tributary_embed('query number {n} about databases and embeddings'))", 1)
                tick += INTERVAL_S
                time.sleep(max(0.0, tick - time.monotonic()))
                tick = max(tick, time.monotonic() - INTERVAL_S)

    def bulk_client(k: int) -> None:
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("SELECT vector_dims(tributary_embed('warm up'))")
            ready.wait()
            n = 0
            while not stop.is_set():
                n += 1
                call(c, "bulk", "SELECT cardinality(tributary_embed(array_agg("
                     f"'bulk text ' || g || ' of call {n} from client {k} about databases and embeddings'))) "
                     "FROM generate_series(1, 64) g", 64)

    def writer() -> None:
        with psycopg.connect(dsn, autocommit=True) as c:
            i = 0
            while not stop.is_set():
                c.execute("INSERT INTO priority_feed (body) SELECT 'feed row ' || %s || ' number ' || g "
                          "|| ' about databases and embeddings' FROM generate_series(1, 4) g", (i,))
                i += 1
                stop.wait(1.0)

    threads = []
    if "interactive" in spec["classes"]:
        threads.append(threading.Thread(target=interactive))
    if "bulk" in spec["classes"]:
        threads += [threading.Thread(target=bulk_client, args=(k,)) for k in range(bulk)]
    if "job" in spec["classes"]:
        threads.append(threading.Thread(target=writer))
    with psycopg.connect(dsn, autocommit=True) as m:
        job0 = m.execute("SELECT rows_done FROM tributary.jobs WHERE name = 'priority_job'").fetchone()[0]
        for t in threads:
            t.start()
        ready.wait()
        # 5 s to fill the slots, then measure.
        time.sleep(5)
        t0[0] = time.monotonic()
        waits = []
        while time.monotonic() - t0[0] < seconds:
            waits += m.execute("SELECT priority, extract(epoch FROM now() - cpu_wait_start) * 1000 "
                               "FROM tributary.stat_activity WHERE cpu_wait_start IS NOT NULL").fetchall()
            time.sleep(1)
        job = m.execute("SELECT rows_done, rows_queued FROM tributary.jobs WHERE name = 'priority_job'").fetchone()
        stop.set()
        for t in threads:
            t.join()
    out: dict = {"phase": name, "seconds": seconds, "bulk_clients": bulk, "settings": spec["settings"] or "defaults"}
    for cls in ("interactive", "bulk"):
        lat = [e[2] for e in events if e[0] == cls]
        if not lat:
            continue
        out[cls] = {
            "requests": len(lat),
            "requests_per_s": round(len(lat) / seconds, 2),
            "texts_per_s": round(sum(e[3] for e in events if e[0] == cls) / seconds, 1),
            "p50_ms": round(percentile(lat, 50), 1),
            "p95_ms": round(percentile(lat, 95), 1),
            "p99_ms": round(percentile(lat, 99), 1),
            "max_ms": round(max(lat), 1),
        }
    if "job" in spec["classes"]:
        out["job"] = {"rows_done": job[0] - job0, "rows_queued_at_end": job[1]}
    # Waiters seen once a second in tributary.stat_activity: how many, per priority.
    out["waiting_seen"] = {p: sum(1 for w in waits if w[0] == p) for p in {w[0] for w in waits}}
    out["errors"] = len(errors)
    out["error_samples"] = sorted(set(errors))[:5]
    out["series"] = [{"cls": e[0], "t": round(e[1], 3), "ms": round(e[2], 2)} for e in events]
    return out


def prepare(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS priority_feed")
        c.execute("CREATE TABLE priority_feed (id bigserial PRIMARY KEY, body text, embedding vector(384))")
        c.execute("SELECT tributary_job_create('priority_feed', '{body}', 'embedding', mode => 'continuous', name => 'priority_job')")


def plot(data: dict, png: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    phases = [p for p in data["phases"]]
    fig, (a, b) = plt.subplots(1, 2, figsize=(13, 4.5))
    names = [p["phase"] for p in phases if "interactive" in p]
    x = range(len(names))
    for i, q in enumerate(("p50_ms", "p95_ms", "p99_ms")):
        vals = [p["interactive"][q] for p in phases if "interactive" in p]
        a.bar([v + (i - 1) * 0.27 for v in x], vals, width=0.27, label=q.replace("_ms", ""))
    a.axhline(50, color="red", linestyle="--", linewidth=1, label="goal: p99 50 ms")
    a.set(title="one-sentence query latency (ms, log)", yscale="log", xticks=list(x), xticklabels=names)
    a.legend()
    alone = next((p["bulk"]["texts_per_s"] for p in phases if p["phase"] == "bulk-alone"), None)
    names_b = [p["phase"] for p in phases if "bulk" in p]
    vals_b = [p["bulk"]["texts_per_s"] for p in phases if "bulk" in p]
    b.bar(names_b, vals_b)
    if alone:
        b.axhline(0.9 * alone, color="red", linestyle="--", linewidth=1, label="goal: 0.9x bulk alone")
        b.legend()
    b.set(title="bulk clients' texts per second")
    for ax in (a, b):
        ax.tick_params(axis="x", labelrotation=15)
    fig.suptitle(f"{phases[0]['bulk_clients']} bulk clients (64 texts a call), 1 interactive client (10 queries/s), "
                 f"a continuous job; {phases[0]['seconds']:.0f} s per phase; all-MiniLM-L6-v2, CPU")
    fig.tight_layout()
    fig.savefig(png, dpi=100)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsn")
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--bulk", type=int, default=8)
    ap.add_argument("--phases", default=",".join(PHASES))
    ap.add_argument("--out")
    ap.add_argument("--plot")
    ap.add_argument("--png")
    a = ap.parse_args()
    if a.plot:
        with open(a.plot) as f:
            plot(json.load(f), a.png)
        return
    prepare(a.dsn)
    phases = []
    try:
        for p in a.phases.split(","):
            phases.append(run_phase(a.dsn, p, a.seconds, a.bulk))
            print(json.dumps({k: v for k, v in phases[-1].items() if k != "series"}), flush=True)
    finally:
        configure(a.dsn, {})
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"phases": phases}, f)
    alone = next((p["bulk"]["texts_per_s"] for p in phases if p["phase"] == "bulk-alone"), None)
    print("\n| phase | interactive p50 / p95 / p99 / max (ms) | interactive queries/s | bulk texts/s (x alone) "
          "| bulk call p50 / p99 (ms) | job rows (queued at end) | errors |")
    print("|---|---|---|---|---|---|---|")
    for p in phases:
        i = p.get("interactive")
        b = p["bulk"]
        ratio = f" ({b['texts_per_s'] / alone:.2f}x)" if alone else ""
        print(f"| {p['phase']} | " + (f"{i['p50_ms']} / {i['p95_ms']} / {i['p99_ms']} / {i['max_ms']} | {i['requests_per_s']}"
                                       if i else "- | -")
              + f" | {b['texts_per_s']}{ratio} | {b['p50_ms']} / {b['p99_ms']} | "
              + (f"{p['job']['rows_done']} ({p['job']['rows_queued_at_end']})" if "job" in p else "-")
              + f" | {p['errors']} |")
    last = next((p for p in phases if p["phase"] == "priority"), None)
    if last and alone:
        ok_p99 = last["interactive"]["p99_ms"] <= 50
        ok_bulk = last["bulk"]["texts_per_s"] >= 0.9 * alone
        print(f"\ngoal (priority phase): interactive p99 {last['interactive']['p99_ms']} ms <= 50: {'met' if ok_p99 else 'NOT met'}; "
              f"bulk {last['bulk']['texts_per_s'] / alone:.2f}x alone >= 0.9: {'met' if ok_bulk else 'NOT met'}")


if __name__ == "__main__":
    main()
