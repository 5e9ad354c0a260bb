"""Past one server: a coordinator whose partitioned table has postgres_fdw foreign tables on two
shard clusters as partitions (README, "Past one server").

The coordinator is a database of the jobs cluster (TRIBUTARY_JOBS_DSN, tributary preloaded); the
two shards are clusters of this module's own (initdb with TRIBUTARY_PGBIN, tributary preloaded,
own ports and sockets), stopped and removed at the end. The tables belong to a non-superuser,
shard_owner, on every server; the foreign servers reach the shards as shard_owner with a password
(scram-sha-256 on the shards' sockets), as postgres_fdw and dblink require of non-superusers.

Rows are Debian package descriptions (scripts/debian_data.py), split between the shards by a
list partition on `region`. Each shard's table counts the writes of its embedding column `e` per
row (a BEFORE UPDATE trigger, in the writing transaction): writes = 1 on every row means each row
was embedded by exactly one committed batch.
"""
import contextlib
import os
import shutil
import subprocess
import sys
import threading
import time

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from jobwait import connect, wait_until

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARDS = {"s1": 55451, "s2": 55452}
REGION = {"s1": "eu", "s2": "us"}
OWNER, PASSWORD = "shard_owner", "shard-owner-pw"
ROWS = 1_000       # app.docs
CRASH_ROWS = 6_000  # app.crash

COUNT_WRITES = """
CREATE OR REPLACE FUNCTION app.count_writes() RETURNS trigger LANGUAGE plpgsql
-- (postgres_fdw's sessions on the shard run with search_path = pg_catalog: pgvector's operators
-- are in public)
SET search_path = public, pg_catalog AS $$
BEGIN
    IF NEW.e IS NOT NULL AND NEW.e IS DISTINCT FROM OLD.e THEN
        NEW.writes := OLD.writes + 1;
    END IF;
    RETURN NEW;
END $$"""

SHARD_TABLE = """CREATE TABLE app.{t} (package text PRIMARY KEY, source text, label text, body text,
    region text NOT NULL, e vector(384), e_col vector(384), writes int NOT NULL DEFAULT 0)"""


def as_pg(cmd):
    return (["sudo", "-u", "postgres", "--"] if os.getuid() == 0 else []) + cmd


def shard_base(name):
    return f"/tmp/tributary-shard-{name}"


def shard_dsn(name, db="shard", user="postgres"):
    return make_conninfo(host=f"{shard_base(name)}/sock", port=SHARDS[name], user=user, dbname=db)


def pg_ctl(pgbin, name, *args):
    base = shard_base(name)
    return subprocess.run(as_pg([os.path.join(pgbin, "pg_ctl"), "-D", f"{base}/data", "-l", f"{base}/server.log",
                                 "-w", "-t", "120", *args]), check=True, capture_output=True)


def start_shard(pgbin, name):
    base = shard_base(name)
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(f"{base}/sock")
    if os.getuid() == 0:
        subprocess.run(["chown", "-R", "postgres:postgres", base], check=True)
    subprocess.run(as_pg([os.path.join(pgbin, "initdb"), "-D", f"{base}/data", "-U", "postgres", "-A", "trust",
                          "--no-sync"]), check=True, capture_output=True)
    conf = f"""
listen_addresses = ''
port = {SHARDS[name]}
unix_socket_directories = '{base}/sock'
fsync = off
shared_buffers = 256MB
shared_preload_libraries = 'tributary'
max_worker_processes = 16
tributary.job_poll_interval = 200
"""
    hba = f"{base}/data/pg_hba.conf"
    # shard_owner with a password (the first matching line wins), everyone else trusted.
    script = (f"cat >> {base}/data/postgresql.conf <<'EOF'\n{conf}\nEOF\n"
              f"(echo 'local all {OWNER} scram-sha-256'; cat {hba}) > {hba}.new && mv {hba}.new {hba}")
    subprocess.run(as_pg(["sh", "-c", script]), check=True)
    pg_ctl(pgbin, name, "start")


def run(dsn, *statements, user=None):
    with connect(dsn) as c:
        for s in statements:
            c.execute(s)


def query(dsn, sql, args=None):
    with connect(dsn) as c:
        return c.execute(sql, args).fetchall()


@pytest.fixture(scope="module")
def topo():
    jobs_dsn = os.environ.get("TRIBUTARY_JOBS_DSN")
    pgbin = os.environ.get("TRIBUTARY_PGBIN", "/usr/lib/postgresql/15/bin")
    if not jobs_dsn:
        pytest.fail("TRIBUTARY_JOBS_DSN is not set: run these through scripts/test.sh")
    admin = make_conninfo(jobs_dsn, dbname="postgres")
    coord = make_conninfo(jobs_dsn, dbname="tributary_coord")
    coord_owner = make_conninfo(coord, user=OWNER, password=PASSWORD)
    try:
        for name in SHARDS:
            start_shard(pgbin, name)
            run(shard_dsn(name, db="postgres"),
                f"CREATE ROLE {OWNER} LOGIN PASSWORD '{PASSWORD}'", "CREATE DATABASE shard")
            run(shard_dsn(name), "CREATE EXTENSION tributary CASCADE", f"CREATE SCHEMA app AUTHORIZATION {OWNER}")
            with connect(shard_dsn(name, user=OWNER) + f" password={PASSWORD}") as c:
                c.execute(COUNT_WRITES)
                for t in ("docs", "crash"):
                    c.execute(SHARD_TABLE.format(t=t))
                    c.execute(f"CREATE TRIGGER count_writes BEFORE UPDATE ON app.{t} FOR EACH ROW EXECUTE FUNCTION app.count_writes()")
        run(admin, "DROP DATABASE IF EXISTS tributary_coord WITH (FORCE)", "CREATE DATABASE tributary_coord")
        run(admin, f"DO $$BEGIN CREATE ROLE {OWNER} LOGIN PASSWORD '{PASSWORD}'; EXCEPTION WHEN duplicate_object THEN NULL; END$$")
        run(coord, "CREATE EXTENSION tributary CASCADE", "CREATE EXTENSION postgres_fdw", "CREATE EXTENSION dblink",
            f"CREATE SCHEMA app AUTHORIZATION {OWNER}")
        for name, port in SHARDS.items():
            run(coord,
                f"CREATE SERVER {name} FOREIGN DATA WRAPPER postgres_fdw OPTIONS "
                f"(host '{shard_base(name)}/sock', port '{port}', dbname 'shard', extensions 'vector')",
                f"GRANT USAGE ON FOREIGN SERVER {name} TO {OWNER}",
                f"CREATE USER MAPPING FOR {OWNER} SERVER {name} OPTIONS (user '{OWNER}', password '{PASSWORD}')")
        # The rows, loaded on the coordinator and inserted through it (postgres_fdw routes them).
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "debian_data.py"), "--dsn", coord,
                        "--table", "debian_src", "--limit", str(ROWS + CRASH_ROWS + 100), "--drop"], check=True)
        run(coord, f"GRANT SELECT ON debian_src TO {OWNER}")
        with connect(coord_owner) as c:
            for t in ("docs", "crash"):
                c.execute(f"CREATE TABLE app.{t} (package text, source text, label text, body text, region text NOT NULL, "
                          "e vector(384), e_col vector(384), writes int NOT NULL DEFAULT 0) PARTITION BY LIST (region)")
                for name in SHARDS:
                    c.execute(f"CREATE FOREIGN TABLE app.{t}_{name} PARTITION OF app.{t} FOR VALUES IN ('{REGION[name]}') "
                              f"SERVER {name} OPTIONS (schema_name 'app', table_name '{t}')")
            # docs: the first ROWS packages; crash: the next CRASH_ROWS; 100 kept for later inserts.
            c.execute("CREATE TABLE app.src AS SELECT row_number() OVER (ORDER BY package) AS n, package, source, section AS label, "
                      "split_part(description, E'\\n', 1) || E'\\n' || description AS body, "
                      "CASE WHEN hashtext(package) % 2 = 0 THEN 'eu' ELSE 'us' END AS region FROM debian_src")
            c.execute(f"INSERT INTO app.docs (package, source, label, body, region) "
                      f"SELECT package, source, label, body, region FROM app.src WHERE n <= {ROWS}")
            c.execute(f"INSERT INTO app.crash (package, source, label, body, region) "
                      f"SELECT package, source, label, body, region FROM app.src WHERE n > {ROWS} AND n <= {ROWS + CRASH_ROWS}")
        yield {"coord": coord, "owner": coord_owner, "pgbin": pgbin, "admin": admin}
    finally:
        for name in SHARDS:
            subprocess.run(as_pg([os.path.join(pgbin, "pg_ctl"), "-D", f"{shard_base(name)}/data", "-m", "immediate", "stop"]),
                           capture_output=True)
            shutil.rmtree(shard_base(name), ignore_errors=True)
        with connect(admin) as c:
            c.execute("DROP DATABASE IF EXISTS tributary_coord WITH (FORCE)")


def job_row(dsn, job_id):
    with connect(dsn, row_factory=psycopg.rows.dict_row) as c:
        return c.execute("SELECT * FROM tributary.jobs WHERE id = %s", (job_id,)).fetchone()


def parts(dsn, job_id):
    with connect(dsn, row_factory=psycopg.rows.dict_row) as c:
        return {str(r["server"]): r for r in c.execute("SELECT * FROM tributary.job_parts WHERE job_id = %s", (job_id,))}


def shard_check(name, table, column="e"):
    """(rows, rows without a vector, worst cosine distance of a sample to tributary_embed on the
    shard, min writes, max writes) of a shard's table."""
    return query(shard_dsn(name),
                 f"SELECT count(*), count(*) FILTER (WHERE {column} IS NULL), "
                 f"(SELECT max({column} <=> tributary_embed(body)) FROM (SELECT * FROM app.{table} ORDER BY md5(package) LIMIT 100) s), "
                 f"min(writes), max(writes) FROM app.{table}")[0]


def test_embed_column_through_the_coordinator_says_where_it_runs_and_fills_every_shard(topo):
    notices = []
    with connect(topo["owner"]) as c:
        c.add_notice_handler(lambda d: notices.append((d.message_primary, d.message_hint)))
        n = c.execute("SELECT tributary_embed_column('app.docs', '{body}', 'e_col')").fetchone()[0]
    assert n == ROWS
    said = [m for m in notices if "embeds the foreign partitions of app.docs on this server" in m[0]]
    assert said and "tributary_job_create()" in said[0][1], notices
    total = 0
    for name in SHARDS:
        rows, missing, worst, _, _ = shard_check(name, "docs", "e_col")
        assert rows > ROWS // 4 and missing == 0 and worst < 1e-5, (name, rows, missing, worst)
        total += rows
    assert total == ROWS


def test_job_made_on_the_coordinator_runs_on_every_shard_and_follows_new_rows(topo):
    coord, owner = topo["coord"], topo["owner"]
    job = query(owner, "SELECT tributary_job_create('app.docs', '{body}', 'e', mode => 'continuous', batch_size => 64)")[0][0]
    p = parts(owner, job)
    assert sorted(p) == sorted(SHARDS)
    for name, part in p.items():
        assert str(part["partition"]) == f"app.docs_{name}" and part["remote_table"] == "app.docs"
        remote = query(shard_dsn(name), "SELECT mode, source::text, owner::text FROM tributary.jobs WHERE id = %s",
                       (part["remote_job"],))
        assert remote == [("continuous", "app.docs", OWNER)], (name, remote)
    # The coordinator's row: the parts' sums (a superuser sees it too).
    done = wait_until(lambda i: job_row(owner, i), job, lambda j: j["rows_done"] == ROWS and j["rows_queued"] == 0,
                      600, f"{ROWS} rows")
    assert done["state"] == "running" and done["owner"] == OWNER and done["source"] == "app.docs", done
    assert query(coord, "SELECT count(*) FROM tributary.jobs WHERE id = %s", (job,))[0][0] == 1  # postgres: superuser
    for name in SHARDS:
        rows, missing, worst, lo, hi = shard_check(name, "docs")
        assert missing == 0 and worst < 1e-5 and (lo, hi) == (1, 1), (name, missing, worst, lo, hi)
    # Rows inserted later through the coordinator land on the shards and are embedded there.
    run(owner, f"INSERT INTO app.docs (package, source, label, body, region) "
               f"SELECT package, source, label, body, region FROM app.src WHERE n > {ROWS + CRASH_ROWS}")
    wait_until(lambda i: job_row(owner, i), job, lambda j: j["rows_done"] == ROWS + 100 and j["rows_queued"] == 0,
               300, "the 100 rows inserted later")
    assert query(owner, "SELECT count(*) FROM app.docs WHERE e IS NULL")[0][0] == 0
    p = parts(owner, job)
    assert sum(x["rows_done"] for x in p.values()) == ROWS + 100
    assert all(x["state"] == "running" for x in p.values()), p
    # Pause and resume reach every part.
    run(owner, f"SELECT tributary_job_pause({job})")
    for name, part in p.items():
        assert query(shard_dsn(name), "SELECT state FROM tributary._jobs WHERE id = %s", (part["remote_job"],)) == [("paused",)]
    assert job_row(owner, job)["state"] == "paused"
    run(owner, f"SELECT tributary_job_resume({job})")
    wait_until(lambda i: job_row(owner, i), job, lambda j: j["state"] == "running", 180, "running again")


def test_a_shard_stopped_during_a_job_loses_nothing_and_embeds_nothing_twice(topo):
    owner, pgbin = topo["owner"], topo["pgbin"]
    job = query(owner, "SELECT tributary_job_create('app.crash', '{body}', 'e', batch_size => 32)")[0][0]
    wait_until(lambda i: parts(owner, i)["s2"], job, lambda p: (p["rows_done"] or 0) >= 300, 600, "300 rows on s2")
    pg_ctl(pgbin, "s2", "-m", "immediate", "stop")
    try:
        # Visible on the coordinator, not a silent stall.
        j = job_row(owner, job)
        assert j["state"] == "unreachable" and "s2: " in j["last_error"], j
        p = parts(owner, job)
        assert p["s2"]["state"] == "unreachable" and p["s2"]["last_error"], p["s2"]
        assert p["s1"]["state"] in ("running", "done"), p["s1"]
        # An operation names the shard that failed and says what was done.
        with pytest.raises(psycopg.Error) as e:
            run(owner, f"SELECT tributary_job_pause({job})")
        assert e.value.sqlstate == "08001" and "shard s2, foreign table app.crash_s2" in str(e.value), e.value
        assert e.value.diag.message_detail == "Already paused: app.crash_s1.", e.value.diag.message_detail
    finally:
        pg_ctl(pgbin, "s2", "start")
    run(owner, f"SELECT tributary_job_resume({job})")
    done = wait_until(lambda i: job_row(owner, i), job, lambda j: j["state"] in ("done", "failed", "unreachable"), 900, "done")
    assert done["state"] == "done", (done["state"], done["last_error"], done["parts"])
    assert (done["rows_done"], done["rows_queued"], done["rows_failed"]) == (CRASH_ROWS, 0, 0), done
    for name in SHARDS:
        rows, missing, worst, lo, hi = shard_check(name, "crash")
        assert missing == 0 and worst < 1e-5 and (lo, hi) == (1, 1), (name, rows, missing, worst, lo, hi)
    # Drop reaches every part.
    remote = {n: x["remote_job"] for n, x in parts(owner, job).items()}
    run(owner, f"SELECT tributary_job_drop({job})")
    for name, rj in remote.items():
        assert query(shard_dsn(name), "SELECT count(*) FROM tributary._jobs WHERE id = %s", (rj,))[0][0] == 0
    assert query(owner, "SELECT count(*) FROM tributary.jobs WHERE id = %s", (job,))[0][0] == 0


def test_errors_at_creation_name_the_shard_and_leave_no_part_behind(topo):
    coord, owner = topo["coord"], topo["owner"]
    before = {n: query(shard_dsn(n), "SELECT count(*) FROM tributary._jobs")[0][0] for n in SHARDS}
    run(shard_dsn("s1", db="postgres"), "CREATE DATABASE plain")
    run(shard_dsn("s1", db="plain"), "CREATE EXTENSION vector", f"CREATE SCHEMA app AUTHORIZATION {OWNER}")
    run(shard_dsn("s1", db="plain", user=OWNER) + f" password={PASSWORD}", SHARD_TABLE.format(t="docs"))
    run(coord,
        "CREATE SERVER s_down FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '/tmp/tributary-shard-none/sock', port '55459', dbname 'shard')",
        f"CREATE SERVER s_plain FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '{shard_base('s1')}/sock', port '{SHARDS['s1']}', dbname 'plain')")
    for srv in ("s_down", "s_plain"):
        run(coord, f"GRANT USAGE ON FOREIGN SERVER {srv} TO {OWNER}",
            f"CREATE USER MAPPING FOR {OWNER} SERVER {srv} OPTIONS (user '{OWNER}', password '{PASSWORD}')")

    def make(table, partitions):
        """app.<table> over `partitions` (name, server, remote table name, local?), then a job on it."""
        with connect(owner) as c:
            c.execute(f"CREATE TABLE app.{table} (package text, body text, e vector(384), region text) PARTITION BY LIST (region)")
            for i, (server, remote) in enumerate(partitions):
                if server is None:
                    c.execute(f"CREATE TABLE app.{table}_{i} PARTITION OF app.{table} FOR VALUES IN ('r{i}')")
                else:
                    c.execute(f"CREATE FOREIGN TABLE app.{table}_{i} PARTITION OF app.{table} FOR VALUES IN ('r{i}') "
                              f"SERVER {server} OPTIONS (schema_name 'app', table_name '{remote}')")
        with pytest.raises(psycopg.Error) as e:
            run(owner, f"SELECT tributary_job_create('app.{table}', '{{body}}', 'e')")
        return e.value

    e = make("bad_down", [("s1", "docs"), ("s_down", "docs")])
    assert e.sqlstate == "08001" and "shard s_down, foreign table app.bad_down_1" in str(e), e
    e = make("bad_plain", [("s_plain", "docs")])
    assert e.sqlstate == "42704" and "shard s_plain, foreign table app.bad_plain_0: tributary is not installed" in str(e), e
    e = make("bad_table", [("s1", "no_such_table")])
    assert e.sqlstate == "42P01" and "app.no_such_table does not exist there" in str(e), e
    e = make("bad_mixed", [("s1", "docs"), (None, None)])
    assert e.sqlstate == "0A000" and "both local and foreign partitions" in str(e), e
    # The first shard's job is made, the second's fails (no such column there): the first is
    # dropped again, and the error is the shard's own, named by it.
    run(shard_dsn("s2", user=OWNER) + f" password={PASSWORD}", "ALTER TABLE app.docs RENAME COLUMN body TO body_gone")
    try:
        e = make("bad_second", [("s1", "docs"), ("s2", "docs")])
    finally:
        run(shard_dsn("s2", user=OWNER) + f" password={PASSWORD}", "ALTER TABLE app.docs RENAME COLUMN body_gone TO body")
    assert e.sqlstate == "42703" and str(e).startswith("shard s2, foreign table app.bad_second_1: column \"body\""), e
    # A role whose user mapping's remote role does not own the shard's table: the shard's 42501.
    run(shard_dsn("s1", db="postgres"), "CREATE ROLE intruder LOGIN PASSWORD 'intruder-pw'")
    run(shard_dsn("s1"), "GRANT USAGE ON SCHEMA app TO intruder")
    run(coord, "DO $$BEGIN CREATE ROLE intruder LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END$$",
        "CREATE SCHEMA intr AUTHORIZATION intruder",
        "GRANT USAGE ON FOREIGN SERVER s1 TO intruder",
        "CREATE USER MAPPING FOR intruder SERVER s1 OPTIONS (user 'intruder', password 'intruder-pw')")
    # (the shard lets intruder in with a password only)
    hba = f"{shard_base('s1')}/data/pg_hba.conf"
    subprocess.run(as_pg(["sh", "-c", f"(echo 'local all intruder scram-sha-256'; cat {hba}) > {hba}.new && mv {hba}.new {hba}"]), check=True)
    run(shard_dsn("s1", db="postgres"), "SELECT pg_reload_conf()")
    intruder = make_conninfo(coord, user="intruder")
    run(intruder, "CREATE TABLE intr.t (package text, body text, e vector(384), region text) PARTITION BY LIST (region)",
        "CREATE FOREIGN TABLE intr.t_s1 PARTITION OF intr.t FOR VALUES IN ('eu') SERVER s1 OPTIONS (schema_name 'app', table_name 'docs')")
    with pytest.raises(psycopg.Error) as e:
        run(intruder, "SELECT tributary_job_create('intr.t', '{body}', 'e')")
    assert e.value.sqlstate == "42501" and "shard s1, foreign table intr.t_s1: must be owner of table app.docs" in str(e.value), e.value
    # intruder cannot see or touch shard_owner's sharded jobs on the coordinator.
    job = query(owner, "SELECT tributary_job_create('app.docs', '{body}', 'e_col', name => 'visible to owner only')")[0][0]
    assert query(intruder, "SELECT count(*) FROM tributary.jobs")[0][0] == 0
    assert query(intruder, "SELECT count(*) FROM tributary.job_parts")[0][0] == 0
    assert query(intruder, "SELECT tributary._job_parts_status(%s)", (job,))[0][0] is None
    with pytest.raises(psycopg.Error) as e:
        run(intruder, f"SELECT tributary_job_drop({job})")
    assert e.value.sqlstate == "42704"
    run(owner, f"SELECT tributary_job_drop({job})")
    # No part was left behind on any shard.
    after = {n: query(shard_dsn(n), "SELECT count(*) FROM tributary._jobs")[0][0] for n in SHARDS}
    assert after == before, (before, after)


def test_search_prediction_and_matching_through_the_coordinator_equal_one_server(topo):
    owner = topo["owner"]
    # A local copy of every row (with a primary key), as one server would hold them.
    run(owner, "CREATE TABLE app.docs_local AS SELECT package, source, label, body, e FROM app.docs",
        "ALTER TABLE app.docs_local ADD PRIMARY KEY (package)")
    q = "SELECT tributary_embed('a text editor for programmers')"
    # The distance ordering is pushed to each shard when the query vector is an initplan and the
    # servers list extensions 'vector'.
    plan = "\n".join(r[0] for r in query(owner, f"EXPLAIN (VERBOSE, COSTS OFF) SELECT package FROM app.docs ORDER BY e <=> ({q}) LIMIT 10"))
    remote = [l for l in plan.splitlines() if "Remote SQL:" in l]
    # (each shard's rows come sorted through a cursor, postgres_fdw's fetch_size at a time, and
    # Merge Append stops after 10: the LIMIT itself is not sent)
    assert len(remote) == 2 and all("ORDER BY (e OPERATOR(public.<=>) $1::public.vector)" in l for l in remote), plan
    assert "Merge Append" in plan, plan
    got = [r[0] for r in query(owner, f"SELECT package FROM app.docs ORDER BY e <=> ({q}) LIMIT 10")]
    vec = query(owner, q)[0][0]
    exact = []
    for name in SHARDS:
        exact += query(shard_dsn(name), "SELECT e <=> %s::vector, package FROM app.docs", (vec,))
    assert got == [p for _, p in sorted(exact)[:10]]
    # Prediction and its evaluation: the same as on one server; evidence keyed by the shards' key.
    pred = "SELECT prediction, round(confidence::numeric, 6), neighbours, evidence FROM tributary_predict('{t}', 'label', 'e', ({q}), k => 10)"
    sharded = query(owner, pred.format(t="app.docs", q=q))
    one = query(owner, pred.format(t="app.docs_local", q=q))
    assert sharded == one and "package" in sharded[0][3][0]["key"], (sharded, one)
    ev = "SELECT metric, round(model::numeric, 6), round(baseline::numeric, 6), test_rows, train_rows FROM tributary_evaluate('{t}', 'label', 'e', group_by => 'source', k => 10)"
    assert query(owner, ev.format(t="app.docs")) == query(owner, ev.format(t="app.docs_local"))
    # Matching: pairs keyed by the shards' primary key, the same pairs as between two local tables.
    run(owner, "CREATE TABLE app.docs_local2 AS SELECT * FROM app.docs_local", "ALTER TABLE app.docs_local2 ADD PRIMARY KEY (package)")
    m = "SELECT left_key, right_key FROM tributary_match('{a}', 'app.docs_local', '{{label,body}}') ORDER BY 1, 2"
    sharded = set(query(owner, m.format(a="app.docs")))
    one = set(query(owner, m.format(a="app.docs_local2")))
    # Every row is its own copy's match (rows whose texts are equal are ties, which the two
    # tables' row orders may break either way: a few).
    assert sum(l == r for l, r in sharded) >= 0.97 * (ROWS + 100), len(sharded)
    assert len(sharded ^ one) <= 0.02 * len(one), (len(sharded), len(one), sorted(sharded ^ one)[:10])


@pytest.fixture(scope="module")
def tiny(topo):
    """app.tiny: two rows on each shard, and a job on it made through the coordinator, finished
    (the states of its parts do not change any more)."""
    owner = topo["owner"]
    for name in SHARDS:
        run(shard_dsn(name, user=OWNER) + f" password={PASSWORD}", SHARD_TABLE.format(t="tiny"))
    with connect(owner) as c:
        c.execute("CREATE TABLE app.tiny (package text, source text, label text, body text, region text NOT NULL, "
                  "e vector(384), e_col vector(384), writes int NOT NULL DEFAULT 0) PARTITION BY LIST (region)")
        for name in SHARDS:
            c.execute(f"CREATE FOREIGN TABLE app.tiny_{name} PARTITION OF app.tiny FOR VALUES IN ('{REGION[name]}') "
                      f"SERVER {name} OPTIONS (schema_name 'app', table_name 'tiny')")
        c.execute("INSERT INTO app.tiny (package, body, region) SELECT package, body, r FROM app.src, "
                  "unnest('{eu,us}'::text[]) r WHERE n <= 2")
    job = query(owner, "SELECT tributary_job_create('app.tiny', '{body}', 'e', name => 'tiny')")[0][0]
    wait_until(lambda i: job_row(owner, i), job, lambda j: j["state"] in ("done", "failed"), 300, "finished")
    return job


@contextlib.contextmanager
def locked_jobs(name, seconds=90):
    """tributary._jobs of shard `name` locked ACCESS EXCLUSIVE by an open transaction: until the
    block ends, or for `seconds` at most (the shard then ends the idle transaction's session)."""
    c = connect(shard_dsn(name), autocommit=False)
    try:
        c.execute(f"SET idle_in_transaction_session_timeout = '{seconds}s'")
        c.execute("LOCK TABLE tributary._jobs IN ACCESS EXCLUSIVE MODE")
        yield
    finally:
        try:
            c.rollback()
            c.close()
        except psycopg.Error:
            pass


def timed(dsn, sql, statement_timeout=None, lock_timeout=None):
    """(seconds `sql` took, its error or None) in a new session of `dsn` (connecting not timed)."""
    with connect(dsn) as c:
        if statement_timeout:
            c.execute(f"SET statement_timeout = '{statement_timeout}'")
        if lock_timeout:
            c.execute(f"SET lock_timeout = '{lock_timeout}'")
        t = time.monotonic()
        try:
            c.execute(sql).fetchall()
        except psycopg.Error as e:
            return time.monotonic() - t, e
        return time.monotonic() - t, None


def shard_calls(name):
    """The sessions a coordinator has open on shard `name` (tributary._shard_query's application_name)."""
    return query(shard_dsn(name, db="postgres"),
                 "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'tributary shard call'")[0][0]


def test_a_locked_shard_holds_no_caller_past_its_statement_timeout_or_a_cancel(topo, tiny):
    owner, coord = topo["owner"], topo["coord"]
    was = {n: (p["state"], p["remote_job"]) for n, p in parts(owner, tiny).items()}
    # A shard whose tributary._jobs is locked (90 s at most): the views and a pause end at the
    # caller's statement_timeout (libpq's wait used to hold them until the lock went, cancel or not).
    with locked_jobs("s1"):
        for sql in ("SELECT * FROM tributary.jobs", "SELECT * FROM tributary.job_parts",
                    f"SELECT tributary_job_pause({tiny})"):
            elapsed, e = timed(owner, sql, "3s")
            print(f"{sql}: {elapsed:.2f} s, {e and e.sqlstate}")
            assert e is not None and e.sqlstate == "57014" and elapsed < 4.0, (sql, elapsed, e)
        # The query on the shard is cancelled and its session closed.
        wait_until(lambda _: shard_calls("s1"), None, lambda n: n == 0, 30, "no session left on s1")
        # The caller's lock_timeout goes to the shard: a pause ends with the shard's 55P03 naming
        # it, a view read answers with the part's error.
        elapsed, e = timed(owner, f"SELECT tributary_job_pause({tiny})", lock_timeout="3s")
        print(f"pause with lock_timeout 3s: {elapsed:.2f} s, {e and e.sqlstate}")
        assert e is not None and e.sqlstate == "55P03" and "s1" in str(e) and elapsed < 4.0, (elapsed, e)
        with connect(owner) as c:
            c.execute("SET lock_timeout = '3s'")
            t = time.monotonic()
            rows = c.execute("SELECT server, state, last_error FROM tributary.job_parts WHERE job_id = %s", (tiny,)).fetchall()
            elapsed = time.monotonic() - t
        print(f"job_parts with lock_timeout 3s: {elapsed:.2f} s, {rows}")
        s1 = [r for r in rows if r[0] == "s1"][0]
        assert elapsed < 4.0 and s1[1] == "unreachable" and "lock timeout" in s1[2], (elapsed, rows)
        wait_until(lambda _: shard_calls("s1"), None, lambda n: n == 0, 30, "no session left on s1")
    # (the pause reached no part)
    assert {n: (p["state"], p["remote_job"]) for n, p in parts(owner, tiny).items()} == was
    # pg_cancel_backend of a reader ends it within a second.
    with locked_jobs("s1"):
        with connect(owner) as c:
            pid = c.execute("SELECT pg_backend_pid()").fetchone()[0]
            got = {}

            def read():
                try:
                    c.execute(f"SELECT * FROM tributary.job_parts WHERE job_id = {tiny}").fetchall()
                except psycopg.Error as e:
                    got["error"], got["at"] = e, time.monotonic()

            reader = threading.Thread(target=read)
            reader.start()
            # Cancelled while it waits for the locked shard (its call there shows), not before.
            deadline = time.monotonic() + 60
            while not shard_calls("s1"):
                assert time.monotonic() < deadline and reader.is_alive(), ("the reader never waited for s1", got)
                time.sleep(0.05)
            cancelled = time.monotonic()
            query(coord, "SELECT pg_cancel_backend(%s)", (pid,))
            reader.join(30)
            assert "error" in got and got["error"].sqlstate == "57014", got
            print(f"cancelled reader ended {got['at'] - cancelled:.2f} s after pg_cancel_backend")
            assert got["at"] - cancelled < 1.0, got["at"] - cancelled
    # A job creation that times out on one shard drops the part it made on the other.
    jobs = "SELECT count(*) FROM tributary._jobs"
    before = {n: query(shard_dsn(n), jobs)[0][0] for n in SHARDS}
    with locked_jobs("s2"):
        elapsed, e = timed(owner, "SELECT tributary_job_create('app.tiny', '{body}', 'e_col')", "3s")
        print(f"tributary_job_create with s2 locked: {elapsed:.2f} s, {e and e.sqlstate}")
        assert e is not None and e.sqlstate == "57014" and elapsed < 4.0, (elapsed, e)
    assert {n: query(shard_dsn(n), jobs)[0][0] for n in SHARDS} == before
    # Without a statement_timeout, a part's state is waited for 10 s: the part shows unreachable
    # and the view answers for the others.
    with locked_jobs("s1"):
        t = time.monotonic()
        p = parts(owner, tiny)
        elapsed = time.monotonic() - t
        print(f"job_parts with s1 locked, no statement_timeout: {elapsed:.2f} s")
        assert 9.5 < elapsed < 12.0, elapsed
        assert p["s1"]["state"] == "unreachable" and "shard s1 did not answer within 10" in p["s1"]["last_error"], p["s1"]
        assert p["s2"]["state"] == was["s2"][0], p["s2"]


GARBAGE = "SELECT id, {state} AS state, {rows_done} AS rows_done, rows_truncated, rows_queued, rows_failed, " \
          "rows_per_second, {last_error} AS last_error, last_error_at, started_at, last_batch_at, finished_at, waiting_for " \
          "FROM tributary.jobs_real"


def same(a, b):
    """Whether two rows of tributary.job_parts say the same (the rate changes with time)."""
    keys = ("state", "remote_job", "rows_done", "rows_queued", "rows_failed", "last_error", "finished_at")
    return all(a[k] == b[k] for k in keys)


def test_a_shard_answering_garbage_shows_invalid_and_the_views_still_work(topo, tiny):
    owner = topo["owner"]
    real = {"state": "state", "rows_done": "rows_done", "last_error": "last_error"}
    was = parts(owner, tiny)
    for change, reason in ((("rows_done", "'lots'::text"), 'invalid input syntax for type bigint: "lots"'),
                           (("last_error", "repeat('x', 10000000)"), "a last_error longer than 10000 characters"),
                           (("state", "repeat('y', 100)"), "state 'yyyyyyyyyyyyyyyyyyyy'")):
        # (as a superuser on the shard: its view tributary.jobs, which the coordinator reads, replaced)
        run(shard_dsn("s1"), "ALTER VIEW tributary.jobs RENAME TO jobs_real",
            "CREATE VIEW tributary.jobs AS " + GARBAGE.format(**dict(real, **dict([change]))),
            "GRANT SELECT ON tributary.jobs TO PUBLIC")
        try:
            p = parts(owner, tiny)
            assert p["s1"]["state"] == "invalid" and p["s1"]["server"] == "s1", p["s1"]
            assert p["s1"]["last_error"] == f"shard s1 answered an invalid state for its job {p['s1']['remote_job']}: {reason}", p["s1"]
            assert same(p["s2"], was["s2"]), (p["s2"], was["s2"])
            j = job_row(owner, tiny)
            assert j["state"] == "invalid" and j["last_error"].startswith("s1: shard s1 answered"), j
            assert tiny in [r[0] for r in query(owner, "SELECT id FROM tributary.jobs")]
        finally:
            run(shard_dsn("s1"), "DROP VIEW tributary.jobs", "ALTER VIEW tributary.jobs_real RENAME TO jobs")
    assert same(parts(owner, tiny)["s1"], was["s1"])


def test_a_foreign_partition_pointing_back_at_the_coordinator_is_refused_once(topo):
    coord, admin = topo["coord"], topo["admin"]
    c = conninfo_to_dict(coord)
    run(coord,
        f"CREATE SERVER loopback FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '{c['host']}', port '{c['port']}', "
        "dbname 'tributary_coord')",
        "CREATE USER MAPPING FOR postgres SERVER loopback OPTIONS (user 'postgres')",
        "CREATE TABLE app.loop (package text, body text, e vector(384), region text) PARTITION BY LIST (region)",
        "CREATE FOREIGN TABLE app.loop_0 PARTITION OF app.loop FOR VALUES IN ('r0') SERVER loopback "
        "OPTIONS (schema_name 'app', table_name 'loop')")
    backends = "SELECT count(*) FROM pg_stat_activity WHERE datname = 'tributary_coord' AND backend_type = 'client backend'"
    before = query(admin, backends)[0][0]
    peak, stop = [before], threading.Event()

    def sample():
        with connect(admin) as a:
            while not stop.is_set():
                peak[0] = max(peak[0], a.execute(backends).fetchone()[0])
                time.sleep(0.01)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        elapsed, e = timed(coord, "SELECT tributary_job_create('app.loop', '{body}', 'e')", "60s")
    finally:
        stop.set()
        sampler.join()
    print(f"loop-back refused in {elapsed:.2f} s, peak {peak[0]} client backends (before: {before})")
    assert e is not None and e.sqlstate == "0A000", e
    assert str(e).startswith("shard loopback, foreign table app.loop_0: table app.loop has foreign partitions: "
                             "a job on it cannot be made from a coordinator"), e
    assert "tributary shard call" in e.diag.message_detail and e.diag.message_hint, (e.diag.message_detail, e.diag.message_hint)
    # This session and the one it opened on the coordinator, no more.
    assert peak[0] <= before + 2, (before, peak[0])
    assert query(coord, "SELECT count(*) FROM tributary._sharded_jobs WHERE source = 'app.loop'::regclass")[0][0] == 0
