"""Many backends on one server: shared weights, CPU run admission, idle release, GPU slots on a
machine without a GPU, and the cluster-wide views, seen from other sessions.

- Prepared graphs: every backend's CPU session loads the same prepared graph from
  $PGDATA/tributary_graphs, and its weights file is mapped shared (its pages are not private to
  any one backend); `tributary.shared_weights = off` loads the model file as before.
- `tributary.max_cpu_runs` (SIGHUP) with `tributary.cpu_overflow` (superuser): a call that finds
  every slot taken waits (counted in tributary.stat_activity) or fails with 53400; the holder is
  listed in tributary.cpu_runs. What a non-superuser may and may not change.
- `tributary.session_idle_timeout`: an idle connection's sessions are dropped by themselves.
- A CPU-only ONNX Runtime never takes, waits for or fails on a GPU slot.
- tributary.stat_activity and tributary.progress_embed_column, read from a second session (a
  pg_monitor member) while a long tributary_embed_column and a job run; a plain role may not.

Runs on the jobs cluster (TRIBUTARY_JOBS_DSN: tributary in shared_preload_libraries).
"""
import os
import threading
import time

import psycopg
import pytest

from jobwait import connect, wait_until

ROLE, MONITOR = "tributary_mb_user", "tributary_mb_monitor"


@pytest.fixture(scope="module")
def dsn():
    dsn = os.environ.get("TRIBUTARY_JOBS_DSN")
    if not dsn:
        pytest.fail("TRIBUTARY_JOBS_DSN is not set: run these through scripts/test.sh")
    with connect(dsn) as c:
        c.execute("CREATE EXTENSION IF NOT EXISTS tributary CASCADE")
        for r in (ROLE, MONITOR):
            if c.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (r,)).fetchone():
                c.execute(f"DROP OWNED BY {r}")
                c.execute(f"DROP ROLE {r}")
            c.execute(f"CREATE ROLE {r} LOGIN")
        c.execute(f"GRANT pg_monitor TO {MONITOR}")
        c.execute(f"GRANT CREATE ON SCHEMA public TO {ROLE}")
    yield dsn
    with connect(dsn) as c:
        for name in ("max_cpu_runs", "interactive_cpu_runs", "session_idle_timeout", "job_poll_interval"):
            c.execute(f"ALTER SYSTEM RESET tributary.{name}")
        c.execute("SELECT pg_reload_conf()")
        for r in (ROLE, MONITOR):
            c.execute(f"DROP OWNED BY {r}")
            c.execute(f"DROP ROLE {r}")


def as_role(dsn, role):
    return connect(f"{dsn} user={role}")


def set_server(dsn, **settings):
    """ALTER SYSTEM SET (None: RESET) and reload; waits until a new connection sees the values."""
    with connect(dsn) as c:
        for k, v in settings.items():
            if v is None:
                c.execute(f"ALTER SYSTEM RESET tributary.{k}")
            else:
                c.execute(f"ALTER SYSTEM SET tributary.{k} = '{v}'")
        c.execute("SELECT pg_reload_conf()")
    deadline = time.monotonic() + 60
    while True:
        with connect(dsn) as c:
            seen = {k: c.execute(f"SELECT current_setting('tributary.{k}')").fetchone()[0] for k in settings}
            want = {k: c.execute("SELECT boot_val FROM pg_settings WHERE name = %s", (f"tributary.{k}",)).fetchone()[0]
                    if v is None else str(v) for k, v in settings.items()}
        if all(seen[k] == want[k] or seen[k].rstrip("ms") == want[k].rstrip("ms") for k in settings):
            return
        assert time.monotonic() < deadline, f"settings not applied: {seen} vs {want}"
        time.sleep(0.1)


def smaps(pid):
    """{mapping path: (private kB, shared kB)} of process `pid`."""
    out, name = {}, None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            parts = line.split()
            if "-" in parts[0] and not parts[0].endswith(":"):
                name = parts[5] if len(parts) > 5 else "[anon]"
                out.setdefault(name, [0, 0])
            elif parts[0] in ("Private_Clean:", "Private_Dirty:"):
                out[name][0] += int(parts[1])
            elif parts[0] in ("Shared_Clean:", "Shared_Dirty:"):
                out[name][1] += int(parts[1])
    return out


def test_backends_map_one_prepared_graph(dsn):
    conns = [connect(dsn) for _ in range(3)]
    try:
        pids, files = [], set()
        for c in conns:
            c.execute("SELECT tributary_embed(ARRAY['one', 'two', 'three'])")
            pids.append(c.execute("SELECT pg_backend_pid()").fetchone()[0])
            f, note = c.execute("SELECT model_file, provider_note FROM tributary.sessions").fetchone()
            assert "weights copied" not in note, note
            files.add(f)
        assert len(files) == 1, files
        graph = files.pop()
        datadir = connect(dsn).execute("SHOW data_directory").fetchone()[0]
        assert graph.startswith(os.path.join(datadir, "tributary_graphs") + "/") and graph.endswith("/graph.onnx")
        data = graph + ".data"
        assert os.path.getsize(data) > 80e6, "the weights (and their prepacked copies) are in the data file"
        for pid in pids:
            private, shared = smaps(pid)[data]
            # Mapped from the file by all three: its pages are shared, not copied into each.
            assert shared > 40_000 and private < 5_000, (pid, private, shared)
        # The same texts give the same vectors with the weights copied into the backend (off).
        with connect(dsn) as c:
            c.execute("SET tributary.shared_weights = off")
            worst = c.execute("""
                SELECT max(a <=> b) FROM unnest(tributary_embed(ARRAY['one', 'two', 'three'])) WITH ORDINALITY x(a, i)
                JOIN (SELECT b, i FROM unnest(%s::vector[]) WITH ORDINALITY y(b, i)) y USING (i)""",
                (conns[0].execute("SELECT tributary_embed(ARRAY['one', 'two', 'three'])::text[]").fetchone()[0],)).fetchone()[0]
            assert worst < 1e-5
            f, note = c.execute("SELECT model_file, provider_note FROM tributary.sessions").fetchone()
            assert f.endswith("all-MiniLM-L6-v2/model.onnx") and "shared_weights is off" in note, (f, note)
    finally:
        for c in conns:
            c.close()


def test_settings_a_non_superuser_may_not_change(dsn):
    with as_role(dsn, ROLE) as c:
        for name, value in [("cpu_overflow", "error"), ("shared_weights", "off"), ("shrink_arena", "off"),
                            ("graph_cache_path", "/tmp"), ("intra_op_spinning", "on")]:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                c.execute(f"SET tributary.{name} = '{value}'")
        for name, value in [("max_cpu_runs", "-1"), ("session_idle_timeout", "0")]:
            with pytest.raises(psycopg.errors.CantChangeRuntimeParam):
                c.execute(f"SET tributary.{name} = '{value}'")
        # ... nor read other backends' activity.
        for view in ("tributary.stat_activity", "tributary.progress_embed_column"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                c.execute(f"SELECT * FROM {view}")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("SELECT * FROM tributary_stat_activity()")
        # The slots view is public (like tributary.gpu_sessions and pg_locks).
        c.execute("SELECT * FROM tributary.cpu_runs")


def test_cpu_runs_wait_or_fail_with_53400(dsn):
    # One slot, none kept for interactive runs (test_priority.py tests those).
    set_server(dsn, max_cpu_runs=1, interactive_cpu_runs=0)
    try:
        # One run of about 50,000 tokens (seconds on a CPU): the slot is taken for that long.
        long_call = "SELECT tributary_embed(ARRAY(SELECT repeat('word ', 120) || g FROM generate_series(1, 400) g))"
        a, b, m = connect(dsn), connect(dsn), as_role(dsn, MONITOR)
        a.execute("SET tributary.max_batch_tokens = 65536")
        # The long call is several ONNX Runtime runs (the first window is small) and gives the
        # slot back between them: at the same priority the waiting b is next and takes it there,
        # so a runs at interactive and b at bulk, which never goes ahead of an interactive run.
        a.execute("SET tributary.priority = interactive")
        b.execute("SET tributary.priority = bulk")
        b.execute("SELECT tributary_embed('warm')")  # b's session exists: what follows is admission only
        a_pid, b_pid = (x.execute("SELECT pg_backend_pid()").fetchone()[0] for x in (a, b))
        errors = []
        t = threading.Thread(target=lambda: a.execute(long_call))
        t.start()
        try:
            deadline = time.monotonic() + 120
            while not m.execute("SELECT 1 FROM tributary.cpu_runs WHERE pid = %s AND granted", (a_pid,)).fetchone():
                assert time.monotonic() < deadline, "the long call never held the CPU slot"
                time.sleep(0.02)
            b.execute("SET tributary.cpu_overflow = error")
            try:
                b.execute("SELECT tributary_embed('a query that finds the slot taken')")
            except psycopg.errors.ConfigurationLimitExceeded as e:
                errors.append(e)
            assert t.is_alive(), "the long call ended before the check: make it longer"
            assert errors, "53400 while the only slot was taken"
            assert "tributary.max_cpu_runs = 1" in errors[0].diag.message_detail
            b.execute("SET tributary.cpu_overflow = wait")
            b.execute("SELECT tributary_embed('a query that waits for the slot')")
            waits = m.execute("SELECT cpu_waits, cpu_wait_ms FROM tributary.stat_activity WHERE pid = %s", (b_pid,)).fetchone()
            assert waits[0] >= 1 and waits[1] > 0, waits
        finally:
            t.join()
        assert t.is_alive() is False
        # Nothing is held between calls.
        assert m.execute("SELECT count(*) FROM tributary.cpu_runs WHERE pid IN (%s, %s)", (a_pid, b_pid)).fetchone()[0] == 0
        # A wait obeys statement_timeout (57014) and leaves nothing behind.
        t = threading.Thread(target=lambda: a.execute(long_call))
        t.start()
        try:
            deadline = time.monotonic() + 120
            while not m.execute("SELECT 1 FROM tributary.cpu_runs WHERE pid = %s AND granted", (a_pid,)).fetchone():
                assert time.monotonic() < deadline
                time.sleep(0.02)
            b.execute("SET statement_timeout = '300ms'")
            with pytest.raises(psycopg.errors.QueryCanceled):
                b.execute("SELECT tributary_embed('waits longer than statement_timeout')")
            b.execute("RESET statement_timeout")
            # And lock_timeout (55P03), as a wait in the lock manager would.
            b.execute("SET lock_timeout = '300ms'")
            with pytest.raises(psycopg.errors.LockNotAvailable) as e:
                b.execute("SELECT tributary_embed('waits longer than lock_timeout')")
            assert "CPU run slot" in e.value.diag.message_detail
            b.execute("RESET lock_timeout")
            assert t.is_alive(), "the long call ended before the check: make it longer"
        finally:
            t.join()
        assert m.execute("SELECT count(*) FROM tributary.cpu_runs WHERE pid = %s", (b_pid,)).fetchone()[0] == 0
        for x in (a, b, m):
            x.close()
    finally:
        set_server(dsn, max_cpu_runs=None, interactive_cpu_runs=None)


def test_idle_sessions_are_released(dsn):
    set_server(dsn, session_idle_timeout="1s")
    try:
        with connect(dsn) as c, as_role(dsn, MONITOR) as m:
            pid = c.execute("SELECT pg_backend_pid()").fetchone()[0]
            c.execute("SELECT tributary_embed(ARRAY(SELECT repeat('word ', 100) || g FROM generate_series(1, 200) g))")
            assert c.execute("SELECT count(*) FROM tributary.sessions").fetchone()[0] == 1
            held = sum(p for p, _ in smaps(pid).values())
            # Idle (no embedding; the backend waits for its client between these reads): its
            # thread drops the session after 1 s and hands the memory back.
            deadline = time.monotonic() + 60
            while True:
                left = c.execute("SELECT count(*) FROM tributary.sessions").fetchone()[0]
                after = sum(p for p, _ in smaps(pid).values())
                if (left, after < held) == (0, True) or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert left == 0
            assert after < held, (held, after)
            c.execute("SELECT tributary_embed('back again')")
            sessions, releases = m.execute(
                "SELECT sessions, idle_releases FROM tributary.stat_activity WHERE pid = %s", (pid,)).fetchone()
            assert (sessions, releases) == (1, 1)
    finally:
        set_server(dsn, session_idle_timeout=None)


def test_no_gpu_slot_without_a_gpu(dsn):
    with connect(dsn) as c:
        c.execute("SELECT tributary_embed('x')")
        provider, note = c.execute("SELECT execution_provider, provider_note FROM tributary.sessions").fetchone()
    if provider != "cpu" or "built without the CUDA" not in note:
        pytest.skip(f"this ONNX Runtime has a GPU provider ({provider}: {note})")
    errors = []

    def first_call():
        try:
            with connect(dsn) as c:
                c.execute("SET tributary.gpu_overflow = error")
                c.execute("SELECT tributary_embed('first call')")
                assert c.execute("SELECT count(*) FROM tributary.gpu_sessions WHERE pid = pg_backend_pid()").fetchone()[0] == 0
        except Exception as e:  # noqa: BLE001 - collected and asserted below
            errors.append(e)

    threads = [threading.Thread(target=first_call) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_views_from_a_second_session_while_embed_column_and_a_job_run(dsn):
    with connect(dsn) as c:
        c.execute("DROP TABLE IF EXISTS mb_docs, mb_job")
        c.execute("CREATE TABLE mb_docs (id int PRIMARY KEY, body text, e vector(384))")
        c.execute("INSERT INTO mb_docs SELECT g, repeat('document number ' || g || ' ', 12) FROM generate_series(1, 3000) g")
        c.execute("CREATE TABLE mb_job (id int PRIMARY KEY, body text, e vector(384))")
        c.execute("INSERT INTO mb_job SELECT g, repeat('job row ' || g || ' ', 12) FROM generate_series(1, 1500) g")
        c.execute("ALTER SYSTEM SET tributary.job_poll_interval = 200")
        c.execute("SELECT pg_reload_conf()")
        job_id = c.execute("SELECT tributary_job_create('mb_job', '{body}', 'e', batch_size => 64)").fetchone()[0]
    caller = connect(dsn)
    caller_pid = caller.execute("SELECT pg_backend_pid()").fetchone()[0]
    caller.execute("SET tributary.progress_interval = 0")
    t = threading.Thread(target=lambda: caller.execute("SELECT tributary_embed_column('mb_docs', ARRAY['body'], 'e', batch_size => 100)"))
    t.start()
    seen_progress, seen_worker = [], False
    try:
        with as_role(dsn, MONITOR) as m:
            deadline = time.monotonic() + 120
            while t.is_alive() and time.monotonic() < deadline:
                row = m.execute("SELECT relid::regclass::text, target, rows_total, rows_done, datname FROM tributary.progress_embed_column "
                                "WHERE pid = %s", (caller_pid,)).fetchone()
                if row:
                    seen_progress.append(row)
                w = m.execute("SELECT count(*) FROM tributary.stat_activity WHERE backend_type = 'tributary worker' "
                              "AND rows > 0 AND execution_provider = 'cpu'").fetchone()[0]
                seen_worker = seen_worker or w > 0
                time.sleep(0.2)
            t.join(timeout=180)
            assert not t.is_alive()
            assert m.execute("SELECT count(*) FROM tributary.progress_embed_column WHERE pid = %s", (caller_pid,)).fetchone()[0] == 0, \
                "progress is cleared when the call ends"
            me = m.execute("SELECT usename, backend_type, model, calls, rows, tokens, run_ms, private_mb, shared_mb, datname "
                           "FROM tributary.stat_activity WHERE pid = %s", (caller_pid,)).fetchone()
    finally:
        t.join()
        caller.close()
    assert len(seen_progress) >= 3, seen_progress
    rel, target, total, _, datname = seen_progress[0]
    assert (rel, target, total) == ("mb_docs", "e", 3000)
    done = [r[3] for r in seen_progress]
    assert done == sorted(done) and done[-1] > done[0] and done[-1] <= 3000, done
    assert me[0] == "postgres" and me[1] == "client backend" and me[2] == "all-MiniLM-L6-v2"
    assert me[4] >= 3000 and me[5] > me[4] and me[6] > 0 and me[7] > 0 and me[8] > 0, me
    with connect(dsn) as c:
        wait_until(lambda j: dict(zip(["state", "rows_done"], c.execute(
            "SELECT state, rows_done FROM tributary.jobs WHERE id = %s", (j,)).fetchone())),
            job_id, lambda j: j["rows_done"] == 1500, 180, "job done")
        with as_role(dsn, MONITOR) as m:
            seen_worker = seen_worker or m.execute(
                "SELECT count(*) FROM tributary.stat_activity WHERE backend_type = 'tributary worker' AND rows >= 1").fetchone()[0] > 0
        assert seen_worker, "the job's worker is listed with its rows"
        assert c.execute("SELECT count(*) FROM mb_docs WHERE e IS NULL").fetchone()[0] == 0
        c.execute("SELECT tributary_job_drop(%s)", (job_id,))
        c.execute("DROP TABLE mb_docs, mb_job")
