"""Dump and restore with jobs (README, Dump and restore): pg_dump keeps the job tables and their id
sequence (pg_extension_config_dump), the queues and the continuous jobs' triggers are dumped as
ordinary objects, so in the restored database a continuous job goes on by itself, new rows get
embedded, and a new job gets an id that collides with nothing.

Runs on the jobs cluster (TRIBUTARY_JOBS_DSN, TRIBUTARY_PGBIN), in two databases of its own.
"""
import os
import subprocess
import time

from psycopg.conninfo import conninfo_to_dict, make_conninfo
import pytest

from jobwait import connect, wait_setting, wait_until

SRC, DST = "tributary_dump_src", "tributary_dump_dst"
WORDS = ["zebra", "apple", "car engine", "banana bread", "violin", "glacier", "tax return",
         "red wine", "oak tree", "jet engine", "python snake", "chess opening"]


@pytest.fixture(scope="module")
def env():
    dsn = os.environ.get("TRIBUTARY_JOBS_DSN")
    if not dsn:
        pytest.fail("TRIBUTARY_JOBS_DSN is not set: run these through scripts/test.sh")
    pgbin = os.environ.get("TRIBUTARY_PGBIN", "/usr/lib/postgresql/15/bin")
    with connect(dsn) as c:
        for db in (SRC, DST):
            c.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
        c.execute(f"CREATE DATABASE {SRC}")
    yield {"dsn": dsn, "pgbin": pgbin}
    with connect(dsn) as c:
        c.execute("ALTER SYSTEM RESET tributary.max_workers")
        c.execute("SELECT pg_reload_conf()")
        for db in (SRC, DST):
            c.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")


def db(env, name):
    return connect(make_conninfo(env["dsn"], dbname=name))


def job(c, job_id):
    cur = c.execute("SELECT * FROM tributary.jobs WHERE id = %s", (job_id,))
    row = cur.fetchone()
    return dict(zip([d.name for d in cur.description], row)) if row else None


def worst_cosine(c, table):
    """The lowest cosine between a row's stored embedding and its text's, and the rows without one."""
    return c.execute(f"""SELECT min(1 - (e <=> tributary_embed(body))), count(*) FILTER (WHERE e IS NULL)
                         FROM {table} WHERE body IS NOT NULL""").fetchone()


def test_dump_restore_keeps_jobs(env, tmp_path):
    with db(env, SRC) as c:
        c.execute("CREATE EXTENSION tributary CASCADE")
        c.execute("CREATE TABLE docs (id int PRIMARY KEY, body text, e vector(384))")
        c.execute("INSERT INTO docs SELECT i, (%s::text[])[1 + i %% 12] || ' ' || i FROM generate_series(1, 40) i", (WORDS,))
        c.execute("CREATE TABLE feed (id int PRIMARY KEY, body text, e vector(384))")
        c.execute("INSERT INTO feed SELECT i, (%s::text[])[1 + i %% 12] FROM generate_series(1, 10) i", (WORDS,))
        # A partitioned source: its triggers are on every partition, and pg_restore's own
        # ALTER TABLEs must not make the event trigger add them before the dump does.
        c.execute("CREATE TABLE pfeed (id int, region text, body text, e vector(384), PRIMARY KEY (id, region)) "
                  "PARTITION BY LIST (region)")
        c.execute("CREATE TABLE pfeed_us PARTITION OF pfeed FOR VALUES IN ('us')")
        c.execute("CREATE TABLE pfeed_eu PARTITION OF pfeed FOR VALUES IN ('eu')")
        c.execute("INSERT INTO pfeed SELECT i, CASE WHEN i %% 2 = 0 THEN 'us' ELSE 'eu' END, (%s::text[])[1 + i %% 12] "
                  "FROM generate_series(1, 8) i", (WORDS,))
        pcont = c.execute("SELECT tributary_job_create('pfeed', '{body}', 'e', mode => 'continuous')").fetchone()[0]
        once = c.execute("SELECT tributary_job_create('docs', '{body}', 'e', batch_size => 16)").fetchone()[0]
        cont = c.execute("SELECT tributary_job_create('feed', '{body}', 'e', mode => 'continuous', batch_size => 16)").fetchone()[0]
        wait_until(lambda j: job(c, j), once, lambda j: j["state"] == "done", 120, "once job done")
        wait_until(lambda j: job(c, j), cont, lambda j: j["rows_queued"] == 0 and j["rows_done"] == 10, 120, "continuous job caught up")
        wait_until(lambda j: job(c, j), pcont, lambda j: j["rows_queued"] == 0 and j["rows_done"] == 8, 120, "partitioned job caught up")
        # A second continuous job, paused with rows in its queue: the dump carries them.
        c.execute("CREATE TABLE feed2 (id int PRIMARY KEY, body text, e vector(384))")
        paused = c.execute("SELECT tributary_job_create('feed2', '{body}', 'e', mode => 'continuous')").fetchone()[0]
        c.execute("SELECT tributary_job_pause(%s)", (paused,))
        c.execute("INSERT INTO feed2 VALUES (1, 'glacier melt'), (2, 'violin concerto')")
        assert job(c, paused)["rows_queued"] == 2
        # Rows queued while no worker runs (tributary.max_workers = 0, the source's worker
        # stopped): the running job is dumped with them, and the restored database gets a worker
        # with nobody asking, because the launcher finds databases created after it started.
        c.execute("ALTER SYSTEM SET tributary.max_workers = 0")
        c.execute("SELECT pg_reload_conf()")
        wait_setting(env["dsn"], "tributary.max_workers", "0")
        time.sleep(1)   # the launcher, woken by the reload's signal, reads it at its next loop
        c.execute("SELECT pg_terminate_backend(pid, 10000) FROM tributary.workers() w WHERE w.datid = "
                  "(SELECT oid FROM pg_database WHERE datname = current_database())")
        c.execute("INSERT INTO feed VALUES (20, 'red wine'), (21, 'chess opening')")
        assert job(c, cont)["rows_queued"] == 2
        jobs_before = c.execute("SELECT id, name, state, mode, rows_done FROM tributary._jobs ORDER BY id").fetchall()

    dump = tmp_path / "src.dump"
    args = conninfo_to_dict(env["dsn"])
    conn_args = ["-h", args["host"], "-p", str(args["port"]), "-U", args.get("user", "postgres")]
    subprocess.run([os.path.join(env["pgbin"], "pg_dump"), *conn_args, "-Fc", "-f", str(dump), SRC], check=True)
    with db(env, SRC) as c:   # the source's workers must not serve what the copy is checked on
        c.execute("SELECT tributary_job_drop(id) FROM tributary.jobs")
    with connect(env["dsn"]) as c:
        c.execute(f"CREATE DATABASE {DST}")
        c.execute("ALTER SYSTEM RESET tributary.max_workers")
        c.execute("SELECT pg_reload_conf()")
    r = subprocess.run([os.path.join(env["pgbin"], "pg_restore"), *conn_args, "--exit-on-error", "-d", DST, str(dump)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr

    with db(env, DST) as c:
        assert c.execute("SELECT id, name, state, mode, rows_done FROM tributary._jobs ORDER BY id").fetchall() == jobs_before
        assert job(c, paused)["rows_queued"] == 2
        assert worst_cosine(c, "docs")[1] == 0
        # The running continuous job goes on by itself: the two rows restored in its queue are
        # embedded by a worker nobody asked for (loading the job's row asks the launcher), ...
        wait_until(lambda j: job(c, j), cont, lambda j: j["rows_queued"] == 0 and j["rows_done"] == 12, 180,
                   "the restored queue drained by a worker nobody asked for")
        # ... and its restored triggers queue new and changed rows, which get embedded.
        c.execute("INSERT INTO feed VALUES (11, 'tax return deadline'), (12, 'oak tree leaves')")
        c.execute("UPDATE feed SET body = 'jet engine repair' WHERE id = 1")
        wait_until(lambda j: job(c, j), cont, lambda j: j["rows_queued"] == 0 and j["rows_done"] == 15, 180, "new rows embedded")
        wait_until(lambda j: job(c, j), pcont, lambda j: j["rows_queued"] == 0 and j["rows_done"] == 8, 180, "partitioned job caught up")
        c.execute("INSERT INTO pfeed_us VALUES (100, 'us', 'violin concerto'), (101, 'us', 'red wine')")
        c.execute("INSERT INTO pfeed VALUES (102, 'eu', 'glacier melt')")
        wait_until(lambda j: job(c, j), pcont, lambda j: j["rows_queued"] == 0 and j["rows_done"] == 11, 180, "partitioned job's new rows")
        # The paused one resumes where the dump left it.
        c.execute("SELECT tributary_job_resume(%s)", (paused,))
        wait_until(lambda j: job(c, j), paused, lambda j: j["rows_queued"] == 0 and j["rows_done"] == 2, 180, "restored queue drained")
        # A new job gets a new id, its queue collides with nothing.
        c.execute("CREATE TABLE more (id int PRIMARY KEY, body text, e vector(384))")
        c.execute("INSERT INTO more SELECT i, (%s::text[])[1 + i %% 12] FROM generate_series(1, 20) i", (WORDS,))
        new = c.execute("SELECT tributary_job_create('more', '{body}', 'e')").fetchone()[0]
        assert new > max(r[0] for r in jobs_before)
        wait_until(lambda j: job(c, j), new, lambda j: j["state"] == "done", 120, "new job done")
        for table in ("docs", "feed", "feed2", "pfeed", "more"):
            worst, missing = worst_cosine(c, table)
            assert missing == 0, table
            assert worst > 0.9999, (table, worst)
