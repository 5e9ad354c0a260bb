"""Jobs against what DBAs do: pg_terminate_backend of the launcher or of every other backend,
kill -9 of the postmaster, long idle periods, and servers where no worker can run.

Needs the jobs cluster (tributary in shared_preload_libraries) as tests/integration/test_jobs.py
does: TRIBUTARY_JOBS_DSN, TRIBUTARY_JOBS_PGDATA and TRIBUTARY_PGBIN (scripts/test.sh sets them);
the server log is `server.log` next to the data directory (scripts/cluster.sh). One test kills
the postmaster with SIGKILL and starts the cluster again. The last one also uses
TRIBUTARY_TEST_DSN, the main test cluster, where tributary is not preloaded.

Every row's writes are counted by a BEFORE UPDATE trigger in the same transaction as the write
(as in test_jobs.py): `writes = 1` on every row proves that exactly one committed batch wrote it.
"""
import os
import re
import signal
import subprocess
import time

import psycopg
import pytest

from jobwait import connect, wait_setting, wait_until

COUNT_WRITES = """
CREATE OR REPLACE FUNCTION count_writes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.embedding IS NOT NULL AND NEW.embedding IS DISTINCT FROM OLD.embedding THEN
        NEW.writes := OLD.writes + 1;
    END IF;
    RETURN NEW;
END $$"""

MODEL_LOADED = re.compile(r"\[(\d+)\] LOG:  tributary: model \"[^\"]+\" runs on ")


@pytest.fixture(scope="module")
def cluster():
    dsn = os.environ.get("TRIBUTARY_JOBS_DSN")
    pgdata = os.environ.get("TRIBUTARY_JOBS_PGDATA")
    pgbin = os.environ.get("TRIBUTARY_PGBIN", "/usr/lib/postgresql/15/bin")
    if not dsn or not pgdata:
        pytest.fail("TRIBUTARY_JOBS_DSN and TRIBUTARY_JOBS_PGDATA are not set: run these through scripts/test.sh")
    log = os.path.join(os.path.dirname(pgdata), "server.log")
    if not os.access(log, os.R_OK):
        pytest.fail(f"cannot read the server log {log}")
    with connect(dsn) as c:
        c.execute("CREATE EXTENSION IF NOT EXISTS tributary CASCADE")
        c.execute(COUNT_WRITES)
        c.execute("ALTER SYSTEM SET tributary.job_poll_interval = 200")
        c.execute("ALTER SYSTEM RESET tributary.max_workers")
        c.execute("SELECT pg_reload_conf()")
    yield {"dsn": dsn, "pgdata": pgdata, "pgbin": pgbin, "log": log}
    with connect(dsn) as c:
        c.execute("ALTER SYSTEM RESET tributary.max_workers")
        c.execute("SELECT pg_reload_conf()")



def query(dsn, sql, args=None):
    """One statement on a fresh connection, retried through a restart."""
    for i in range(120):
        try:
            with connect(dsn) as c:
                cur = c.execute(sql, args)
                return cur.fetchall() if cur.description else None
        except psycopg.OperationalError:
            if i == 119:
                raise
            time.sleep(0.5)


COLUMNS = ["state", "rows_done", "rows_queued", "rows_failed", "rows_total", "last_error", "worker_pids", "waiting_for"]


def job(dsn, job_id):
    rows = query(dsn, f"SELECT {', '.join(COLUMNS)} FROM tributary.jobs WHERE id = %s", (job_id,))
    return dict(zip(COLUMNS, rows[0]))


def wait_for(dsn, job_id, predicate, timeout, what):
    return wait_until(lambda i: job(dsn, i), job_id, predicate, timeout, what)


def as_pg(cmd):
    return (["sudo", "-u", "postgres", "--"] if os.getuid() == 0 else []) + cmd


def launcher_pid(dsn):
    rows = query(dsn, "SELECT pid FROM pg_stat_activity WHERE backend_type = 'tributary launcher'")
    return rows[0][0] if rows else None


def wait_new_launcher(dsn, old, timeout=120):
    """pid of a launcher other than `old`, waited for up to `timeout` s (restart time: 5 s)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid = launcher_pid(dsn)
        if pid and pid != old:
            return pid
        time.sleep(0.2)
    raise AssertionError(f"no new launcher {timeout} s after launcher {old} was terminated")


def make_table(dsn, table, n, words=20):
    """`n` rows (id PRIMARY KEY, body, embedding vector(384), writes), with the write counter."""
    with connect(dsn) as c:
        c.execute(f"DROP TABLE IF EXISTS {table}")
        c.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, body text, embedding vector(384), writes int NOT NULL DEFAULT 0)")
        c.execute(f"INSERT INTO {table} SELECT g, repeat('text number ' || g || ' of {table} ', %s) "
                  "FROM generate_series(1, %s) g", (words, n))
        c.execute(f"CREATE TRIGGER count_writes BEFORE UPDATE ON {table} FOR EACH ROW EXECUTE FUNCTION count_writes()")


def assert_embedded_once(dsn, table, n):
    """Every row embedded by exactly one committed batch, with its own text's vector."""
    nulls, rows, lo, hi = query(dsn, f"SELECT count(*) FILTER (WHERE embedding IS NULL), count(*), "
                                     f"min(writes), max(writes) FROM {table}")[0]
    assert (nulls, rows, lo, hi) == (0, n, 1, 1)
    # Every row against its own text's vector, embedded here in one call (tributary_embed(text[])).
    worst = query(dsn, f"""
        WITH t AS (SELECT array_agg(id ORDER BY id) AS ids, array_agg(body ORDER BY id) AS bodies FROM {table}),
             e AS (SELECT unnest(t.ids) AS id, unnest(tributary_embed(t.bodies)) AS v FROM t)
        SELECT max(x.embedding <=> e.v), count(*) FROM {table} x JOIN e USING (id)""")[0]
    assert worst[1] == n and worst[0] < 1e-4


def busy_worker(dsn, job_id, timeout=120):
    """pid of a worker running a batch of the job, looked for every 50 ms for up to `timeout` s;
    None if none."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = query(dsn, "SELECT pid FROM pg_stat_activity WHERE backend_type = 'tributary worker' "
                          "AND state = 'active' AND query LIKE %s", (f"tributary job {job_id} %",))
        if rows:
            return rows[0][0]
        time.sleep(0.05)
    return None


def alive(pid):
    """The process exists and is not a zombie (an exited child not yet reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def model_loads(log, pid):
    """Times process `pid` created a model session, from the server log's LOG lines."""
    with open(log, errors="replace") as f:
        return sum(1 for m in MODEL_LOADED.finditer(f.read()) if int(m.group(1)) == pid)


def test_terminated_launcher_comes_back(cluster):
    """pg_terminate_backend of the launcher: it exits with status 1 and the postmaster starts it
    again; a job created afterwards completes, a continuous job's new rows get embedded."""
    dsn = cluster["dsn"]
    with connect(dsn) as c:
        c.execute("DROP TABLE IF EXISTS dba_feed")
        c.execute("CREATE TABLE dba_feed (id int PRIMARY KEY, body text, embedding vector(384))")
        c.execute("INSERT INTO dba_feed SELECT g, 'feed item ' || g FROM generate_series(1, 20) g")
        feed = c.execute("SELECT tributary_job_create('dba_feed', '{body}', mode => 'continuous', "
                         "batch_size => 16)").fetchone()[0]
    wait_for(dsn, feed, lambda j: j["rows_done"] == 20, 120, "20 rows")

    old = launcher_pid(dsn)
    assert old
    assert query(dsn, "SELECT pg_terminate_backend(%s)", (old,))[0][0]
    new = wait_new_launcher(dsn, old)
    assert new != old
    log = open(cluster["log"], errors="replace").read()
    assert f'background worker "tributary launcher" (PID {old}) exited with exit code 1' in log

    make_table(dsn, "dba_after", 300, words=3)
    job_id = query(dsn, "SELECT tributary_job_create('dba_after', '{body}', batch_size => 64)")[0][0]
    j = wait_for(dsn, job_id, lambda j: j["state"] in ("done", "failed"), 120, "done")
    assert j["state"] == "done" and j["rows_done"] == 300
    assert_embedded_once(dsn, "dba_after", 300)

    query(dsn, "INSERT INTO dba_feed SELECT g, 'later feed item ' || g FROM generate_series(21, 30) g")
    wait_for(dsn, feed, lambda j: j["rows_done"] == 30 and j["rows_queued"] == 0, 120, "30 rows")
    assert query(dsn, "SELECT count(*) FILTER (WHERE embedding IS NULL), "
                      "max(embedding <=> tributary_embed(body)) FROM dba_feed")[0] == (0, pytest.approx(0, abs=1e-4))
    assert job(dsn, feed)["state"] == "running"
    query(dsn, "SELECT tributary_job_drop(%s)", (feed,))


def test_terminate_every_other_backend_and_the_job_resumes(cluster):
    """The routine before maintenance: pg_terminate_backend of every other backend while a job
    runs (its workers and the launcher included). Batches in flight roll back; the launcher
    comes back, new workers pick the job up and finish it; no row is written twice."""
    dsn = cluster["dsn"]
    n = 1200
    make_table(dsn, "dba_routine", n, words=8)
    job_id = query(dsn, "SELECT tributary_job_create('dba_routine', '{body}', batch_size => 32, workers => 2)")[0][0]
    wait_for(dsn, job_id, lambda j: j["rows_done"] >= 64, 300, "64 rows")
    assert busy_worker(dsn, job_id), "no batch in flight before the terminations"
    with connect(dsn) as c:
        before = {r[0] for r in c.execute("SELECT pid FROM pg_stat_activity WHERE backend_type LIKE 'tributary %'")}
        c.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid()")
    assert len(before) >= 2   # the launcher and at least one worker
    # The job is picked up again by new processes (the launcher restarts after 5 s).
    wait_for(dsn, job_id, lambda j: j["worker_pids"] and not set(j["worker_pids"]) & before, 120, "a new worker")
    j = wait_for(dsn, job_id, lambda j: j["state"] in ("done", "failed"), 600, "done")
    assert j["state"] == "done", j
    assert (j["rows_done"], j["rows_queued"], j["rows_failed"], j["rows_total"]) == (n, 0, 0, n)
    assert_embedded_once(dsn, "dba_routine", n)
    log = open(cluster["log"], errors="replace").read()
    assert "terminating background worker \"tributary worker\" due to administrator command" in log


def test_postmaster_killed_workers_exit_and_the_job_resumes(cluster):
    """kill -9 of the postmaster while a job runs: the launcher and the workers exit within a
    few seconds, no batch commits after the kill, PostgreSQL starts again, and the job resumes by
    itself and finishes with every row written once."""
    dsn, pgdata = cluster["dsn"], cluster["pgdata"]
    n = 1200
    make_table(dsn, "dba_pmkill", n, words=8)
    job_id = query(dsn, "SELECT tributary_job_create('dba_pmkill', '{body}', batch_size => 32, workers => 2)")[0][0]
    wait_for(dsn, job_id, lambda j: j["rows_done"] >= 64, 300, "64 rows")
    assert busy_worker(dsn, job_id), "no batch in flight before the kill"
    pids = {r[0] for r in query(dsn, "SELECT pid FROM pg_stat_activity WHERE backend_type LIKE 'tributary %'")}
    assert len(pids) >= 2
    with open(os.path.join(pgdata, "postmaster.pid")) as f:
        postmaster = int(f.readline())
    os.kill(postmaster, signal.SIGKILL)
    killed_at = time.time()

    deadline = time.monotonic() + 15
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [p for p in pids if alive(p)]
    assert not left, f"tributary processes still running {time.time() - killed_at:.1f} s after the postmaster died: {left}"

    pg_ctl = os.path.join(cluster["pgbin"], "pg_ctl")
    # Other processes of the dead server (checkpointer, client backends) leave by themselves.
    for attempt in range(20):
        r = subprocess.run(as_pg([pg_ctl, "-D", pgdata, "-l", cluster["log"], "-w", "-t", "60", "start"]),
                           capture_output=True, text=True)
        if r.returncode == 0:
            break
        time.sleep(1.0)
    assert r.returncode == 0, r.stdout + r.stderr

    # Nothing committed after the postmaster died (batches record their end, clock_timestamp(),
    # just before a worker's last look at the postmaster and its commit).
    late = query(dsn, "SELECT count(*) FROM tributary._job_batches WHERE job_id = %s "
                      "AND finished_at > to_timestamp(%s)", (job_id, killed_at + 0.5))[0][0]
    assert late == 0
    j = wait_for(dsn, job_id, lambda j: j["state"] in ("done", "failed"), 600, "done")
    assert j["state"] == "done", j
    assert (j["rows_done"], j["rows_queued"], j["rows_failed"], j["rows_total"]) == (n, 0, 0, n)
    assert query(dsn, "SELECT sum(rows) FROM tributary._job_batches WHERE job_id = %s", (job_id,))[0][0] == n
    assert_embedded_once(dsn, "dba_pmkill", n)


def test_idle_continuous_worker_keeps_its_session_and_wakes_on_new_rows(cluster):
    """An idle continuous job keeps one worker, the same process, with its model session loaded
    once, across idle seconds; a new row wakes it through the trigger (the poll interval is set
    to a minute, so a poll could not be what embeds it) and it embeds it without a reload."""
    dsn, log = cluster["dsn"], cluster["log"]
    with connect(dsn) as c:
        c.execute("DROP TABLE IF EXISTS dba_idle")
        c.execute("CREATE TABLE dba_idle (id int PRIMARY KEY, body text, embedding vector(384))")
        c.execute("INSERT INTO dba_idle SELECT g, 'idle row ' || g FROM generate_series(1, 40) g")
        job_id = c.execute("SELECT tributary_job_create('dba_idle', '{body}', mode => 'continuous', "
                           "batch_size => 16)").fetchone()[0]
    wait_for(dsn, job_id, lambda j: j["rows_done"] == 40 and j["rows_queued"] == 0, 120, "40 rows")
    db_workers = "SELECT array_agg(pid ORDER BY pid) FROM tributary.workers() WHERE datid = " \
                 "(SELECT oid FROM pg_database WHERE datname = current_database())"
    # Workers of other jobs may still be leaving: wait for the one that stays.
    deadline = time.monotonic() + 120
    while len(query(dsn, db_workers)[0][0] or []) != 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    keeper = query(dsn, db_workers)[0][0]
    assert keeper and len(keeper) == 1, keeper
    keeper = keeper[0]
    batch_pids = {r[0] for r in query(dsn, "SELECT DISTINCT pid FROM tributary._job_batches WHERE job_id = %s", (job_id,))}
    assert batch_pids == {keeper}
    assert model_loads(log, keeper) == 1

    for _ in range(6):   # 6 s idle at a 200 ms poll interval: 30 looks at the queue
        time.sleep(1.0)
        assert query(dsn, db_workers)[0][0] == [keeper]
        j = job(dsn, job_id)
        assert j["state"] == "running" and j["waiting_for"] is None
    assert alive(keeper)
    assert model_loads(log, keeper) == 1

    with connect(dsn) as c:
        c.execute("ALTER SYSTEM SET tributary.job_poll_interval = '60s'")
        c.execute("SELECT pg_reload_conf()")
    try:
        wait_setting(dsn, "tributary.job_poll_interval", "60000")
        time.sleep(1.5)   # the keeper's current wait (200 ms) ends; it now waits up to 60 s
        query(dsn, "INSERT INTO dba_idle VALUES (41, 'a row after the quiet')")
        wait_for(dsn, job_id, lambda j: j["rows_done"] == 41, 30, "the new row (woken by the trigger)")
    finally:
        with connect(dsn) as c:
            c.execute("ALTER SYSTEM SET tributary.job_poll_interval = 200")
            c.execute("SELECT pg_reload_conf()")
    assert query(dsn, "SELECT embedding <=> tributary_embed(body) FROM dba_idle WHERE id = 41")[0][0] < 1e-4
    assert query(dsn, "SELECT pid FROM tributary._job_batches WHERE job_id = %s ORDER BY finished_at DESC LIMIT 1",
                 (job_id,))[0][0] == keeper
    assert model_loads(log, keeper) == 1
    query(dsn, "SELECT tributary_job_drop(%s)", (job_id,))


def test_jobs_view_says_waiting_when_no_worker_can_serve(cluster):
    """tributary.max_workers = 0 and the job's workers terminated: the running job shows as
    `waiting` (worker_pids empty, waiting_for saying why), not `running`; with workers allowed
    again it runs and finishes. On the main cluster, where tributary is not preloaded, a job that
    ran before shows as `waiting` for shared_preload_libraries."""
    dsn = cluster["dsn"]
    n = 600
    make_table(dsn, "dba_nowork", n, words=8)
    job_id = query(dsn, "SELECT tributary_job_create('dba_nowork', '{body}', batch_size => 32)")[0][0]
    j = wait_for(dsn, job_id, lambda j: j["rows_done"] >= 32, 300, "32 rows")
    assert j["state"] == "running" and j["waiting_for"] is None
    with connect(dsn) as c:
        c.execute("ALTER SYSTEM SET tributary.max_workers = 0")
        c.execute("SELECT pg_reload_conf()")
        wait_setting(dsn, "tributary.max_workers", "0")
        time.sleep(0.5)   # the launcher, woken by the reload's signal, reads it at its next loop
        c.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                  "WHERE backend_type = 'tributary worker' AND datname = current_database()")
    try:
        j = wait_for(dsn, job_id, lambda j: j["state"] != "running", 120, "not running")
        assert j["state"] == "waiting", j
        assert j["worker_pids"] == [] and j["waiting_for"] == "tributary.max_workers above 0"
        time.sleep(2.0)   # and it stays so: no worker comes
        j2 = job(dsn, job_id)
        assert (j2["state"], j2["rows_done"]) == ("waiting", j["rows_done"])
        assert j2["rows_done"] < n
    finally:
        with connect(dsn) as c:
            c.execute("ALTER SYSTEM RESET tributary.max_workers")
            c.execute("SELECT pg_reload_conf()")
    wait_for(dsn, job_id, lambda j: j["state"] == "running" and j["worker_pids"], 120, "running again")
    j = wait_for(dsn, job_id, lambda j: j["state"] in ("done", "failed"), 600, "done")
    assert j["state"] == "done" and j["rows_done"] == n
    assert_embedded_once(dsn, "dba_nowork", n)

    main = os.environ.get("TRIBUTARY_TEST_DSN")
    if not main:
        pytest.fail("TRIBUTARY_TEST_DSN is not set: run these through scripts/test.sh")
    with connect(main) as c:
        c.execute("CREATE EXTENSION IF NOT EXISTS tributary CASCADE")
        c.execute("DROP TABLE IF EXISTS dba_unloaded")
        c.execute("CREATE TABLE dba_unloaded (id int PRIMARY KEY, body text, embedding vector(384))")
        c.execute("INSERT INTO dba_unloaded SELECT g, 'row ' || g FROM generate_series(1, 10) g")
        c.execute("SET client_min_messages = error")   # the warning that jobs wait for preloading
        pending = c.execute("SELECT tributary_job_create('dba_unloaded', '{body}')").fetchone()[0]
        assert c.execute("SELECT state, worker_pids, waiting_for FROM tributary.jobs WHERE id = %s", (pending,)).fetchone() \
            == ("pending", [], "tributary in shared_preload_libraries")
        # A job that ran while tributary was preloaded, on a server restarted without it.
        c.execute("UPDATE tributary._jobs SET state = 'running', started_at = now() WHERE id = %s", (pending,))
        assert c.execute("SELECT state, worker_pids, waiting_for FROM tributary.jobs WHERE id = %s", (pending,)).fetchone() \
            == ("waiting", [], "tributary in shared_preload_libraries")
        c.execute("SELECT tributary_job_drop(%s)", (pending,))
        c.execute("DROP TABLE dba_unloaded")
