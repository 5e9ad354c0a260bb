"""Jobs in background workers, on a real cluster with tributary in shared_preload_libraries.

Needs TRIBUTARY_JOBS_DSN (a database of that cluster), TRIBUTARY_JOBS_PGDATA (its data
directory) and TRIBUTARY_PGBIN (PostgreSQL's bin directory): scripts/test.sh sets them. The crash
test kills workers with SIGKILL and stops the whole cluster with `pg_ctl -m immediate`, so the
cluster is this module's own.

Every row's writes are counted by a BEFORE UPDATE trigger in the same transaction as the write: a
batch that is rolled back (crash, cancel) takes its increments along, so `writes = 1` on every
row proves each row was written by exactly one committed batch.
"""
import os
import signal
import subprocess
import sys
import time

import psycopg
import pytest

from jobwait import connect, wait_setting, wait_until

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

COUNT_WRITES = """
CREATE OR REPLACE FUNCTION count_writes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.embedding IS NOT NULL AND NEW.embedding IS DISTINCT FROM OLD.embedding THEN
        NEW.writes := OLD.writes + 1;
    END IF;
    RETURN NEW;
END $$"""


@pytest.fixture(scope="module")
def cluster():
    dsn = os.environ.get("TRIBUTARY_JOBS_DSN")
    pgdata = os.environ.get("TRIBUTARY_JOBS_PGDATA")
    pgbin = os.environ.get("TRIBUTARY_PGBIN", "/usr/lib/postgresql/15/bin")
    if not dsn or not pgdata:
        pytest.fail("TRIBUTARY_JOBS_DSN and TRIBUTARY_JOBS_PGDATA are not set: run these through scripts/test.sh")
    with connect(dsn) as c:
        c.execute("CREATE EXTENSION IF NOT EXISTS tributary CASCADE")
        c.execute(COUNT_WRITES)
        # Failed rows are retried after 10 s; two attempts keep the test short.
        c.execute("ALTER SYSTEM SET tributary.job_max_attempts = 2")
        c.execute("ALTER SYSTEM SET tributary.job_poll_interval = 200")
        c.execute("SELECT pg_reload_conf()")
    wait_setting(dsn, "tributary.job_max_attempts", "2")
    return {"dsn": dsn, "pgdata": pgdata, "pgbin": pgbin}



def query(dsn, sql, args=None):
    """One statement on a fresh connection, retried through a crash restart."""
    for i in range(120):
        try:
            with connect(dsn) as c:
                return c.execute(sql, args).fetchall()
        except psycopg.OperationalError:
            if i == 119:
                raise
            time.sleep(0.5)


def job(dsn, job_id):
    rows = query(dsn, "SELECT state, rows_done, rows_queued, rows_failed, rows_total, last_error FROM tributary.jobs WHERE id = %s", (job_id,))
    return dict(zip(["state", "rows_done", "rows_queued", "rows_failed", "rows_total", "last_error"], rows[0]))


def wait_for(dsn, job_id, predicate, timeout, what):
    return wait_until(lambda i: job(dsn, i), job_id, predicate, timeout, what)


def as_pg(cmd):
    return (["sudo", "-u", "postgres", "--"] if os.getuid() == 0 else []) + cmd


def busy_workers(dsn, job_id):
    """pids of the workers running a batch of the job (they show in pg_stat_activity)."""
    return [r[0] for r in query(dsn, "SELECT pid FROM pg_stat_activity WHERE backend_type = 'tributary worker' "
                                     "AND state = 'active' AND query LIKE %s", (f"tributary job {job_id} %",))]


def busy_worker(dsn, job_id, timeout=120):
    """pid of a worker running a batch of the job, looked for every 50 ms for up to `timeout` s
    (a new worker loads the model first); None if there was none."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = busy_workers(dsn, job_id)
        if pids:
            return pids[0]
        time.sleep(0.05)
    return None


def make_debian_table(dsn, table, limit):
    """`limit` Debian packages: (package PRIMARY KEY, synopsis, embedding, writes)."""
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "debian_data.py"), "--dsn", dsn,
                    "--table", f"{table}_src", "--limit", str(limit), "--drop"], check=True)
    with connect(dsn) as c:
        c.execute(f"DROP TABLE IF EXISTS {table}")
        c.execute(f"CREATE TABLE {table} (package text PRIMARY KEY, synopsis text, embedding vector(384), writes int NOT NULL DEFAULT 0)")
        c.execute(f"INSERT INTO {table} (package, synopsis) SELECT package, split_part(description, E'\\n', 1) FROM {table}_src")
        c.execute(f"CREATE TRIGGER count_writes BEFORE UPDATE ON {table} FOR EACH ROW EXECUTE FUNCTION count_writes()")
        return c.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def test_crash_kill9_and_immediate_stop_embed_every_row_exactly_once(cluster):
    dsn = cluster["dsn"]
    n = make_debian_table(dsn, "crash_pkgs", 50_000)
    assert n == 50_000
    job_id = query(dsn, "SELECT tributary_job_create('crash_pkgs', '{synopsis}', workers => 2, batch_size => 256)")[0][0]

    kills = 0
    for at in (6_000, 14_000, 22_000):
        wait_for(dsn, job_id, lambda j: j["rows_done"] >= at, 600, f"{at} rows")
        pid = busy_worker(dsn, job_id)
        assert pid, "no worker was running a batch"
        os.kill(pid, signal.SIGKILL)
        kills += 1
        time.sleep(1.0)

    wait_for(dsn, job_id, lambda j: j["rows_done"] >= 30_000, 600, "30000 rows")
    assert busy_worker(dsn, job_id), "no batch in flight before the immediate stop"
    pg_ctl = os.path.join(cluster["pgbin"], "pg_ctl")
    subprocess.run(as_pg([pg_ctl, "-D", cluster["pgdata"], "-m", "immediate", "-w", "stop"]), check=True, capture_output=True)
    subprocess.run(as_pg([pg_ctl, "-D", cluster["pgdata"], "-l", os.path.join(os.path.dirname(cluster["pgdata"]), "server.log"),
                          "-w", "-t", "120", "start"]), check=True, capture_output=True)

    done = wait_for(dsn, job_id, lambda j: j["state"] in ("done", "failed"), 900, "done")
    assert done["state"] == "done", done
    assert kills == 3

    nulls, rows, once, most = query(dsn, "SELECT count(*) FILTER (WHERE embedding IS NULL), count(*), "
                                         "count(*) FILTER (WHERE writes = 1), max(writes) FROM crash_pkgs")[0]
    assert (nulls, rows, once, most) == (0, 50_000, 50_000, 1)
    # Progress agrees with the table: every row counted once, nothing queued or failed.
    assert (done["rows_done"], done["rows_queued"], done["rows_failed"], done["rows_total"]) == (50_000, 0, 0, 50_000)
    batches = query(dsn, "SELECT sum(rows) FROM tributary._job_batches WHERE job_id = %s", (job_id,))[0][0]
    assert batches == 50_000
    # The vectors are the model's: a sample against tributary_embed in this backend.
    worst = query(dsn, "SELECT max(embedding <=> tributary_embed(synopsis)) FROM "
                       "(SELECT * FROM crash_pkgs ORDER BY md5(package) LIMIT 200) s")[0][0]
    assert worst < 1e-5
    # The workers were really killed and the cluster really crashed and recovered.
    log = open(os.path.join(os.path.dirname(cluster["pgdata"]), "server.log"), errors="replace").read()
    assert log.count("was terminated by signal 9") >= 3
    assert "database system was interrupted" in log or "database system was not properly shut down" in log


def test_continuous_mode_tracks_inserts_changes_and_deletes(cluster):
    dsn = cluster["dsn"]
    with connect(dsn) as c:
        c.execute("DROP TABLE IF EXISTS notes, notes_embeddings")
        c.execute("CREATE TABLE notes (id int PRIMARY KEY, title text, body text, stars int)")
        c.execute("INSERT INTO notes SELECT g, 'note ' || g, 'body of note ' || g, 0 FROM generate_series(1, 300) g")
        job_id = c.execute("SELECT tributary_job_create('notes', '{title,body}', target_table => 'notes_embeddings', "
                           "mode => 'continuous', batch_size => 64)").fetchone()[0]
    wait_for(dsn, job_id, lambda j: j["rows_done"] == 300, 300, "300 rows")
    with connect(dsn) as c:
        c.execute("INSERT INTO notes SELECT g, 'note ' || g, 'a later note ' || g, 0 FROM generate_series(301, 350) g")
        c.execute("UPDATE notes SET body = 'rewritten body' WHERE id <= 10")
        c.execute("UPDATE notes SET stars = 5 WHERE id BETWEEN 11 AND 20")   # not a source column
        c.execute("DELETE FROM notes WHERE id BETWEEN 21 AND 30")
        c.execute("UPDATE notes SET title = NULL, body = NULL WHERE id = 31")  # nothing left to embed
    j = wait_for(dsn, job_id, lambda j: j["rows_done"] == 360 and j["rows_queued"] == 0, 300, "360 rows")
    assert j["state"] == "running"   # continuous jobs keep running
    with connect(dsn) as c:
        ids = {r[0] for r in c.execute("SELECT id FROM notes_embeddings")}
        assert ids == set(range(1, 351)) - set(range(21, 32))
        worst = c.execute("SELECT max(e.embedding <=> tributary_embed(concat_ws(E'\\n', n.title, n.body))) "
                          "FROM notes n JOIN notes_embeddings e USING (id)").fetchone()[0]
        assert worst < 1e-5
        # Changing a column that is not embedded queued nothing: 300 + 50 new + 10 changed.
        assert c.execute("SELECT rows_done FROM tributary.jobs WHERE id = %s", (job_id,)).fetchone()[0] == 360
        c.execute("SELECT tributary_job_drop(%s)", (job_id,))
        assert c.execute("SELECT count(*) FROM pg_trigger WHERE tgrelid = 'notes'::regclass").fetchone()[0] == 0
        assert c.execute("SELECT to_regclass(%s)", (f"tributary._queue_{job_id}",)).fetchone()[0] is None


def test_bad_rows_go_to_job_errors_and_the_job_goes_on(cluster):
    dsn = cluster["dsn"]
    with connect(dsn) as c:
        c.execute("DROP TABLE IF EXISTS picky")
        c.execute("CREATE TABLE picky (id int PRIMARY KEY, body text, embedding vector(384), writes int NOT NULL DEFAULT 0)")
        c.execute("INSERT INTO picky SELECT g, 'text ' || g FROM generate_series(1, 1000) g")
        c.execute("CREATE TRIGGER count_writes BEFORE UPDATE ON picky FOR EACH ROW EXECUTE FUNCTION count_writes()")
        c.execute("""CREATE OR REPLACE FUNCTION reject() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN IF NEW.id IN (77, 501, 502) AND NEW.embedding IS NOT NULL THEN
                RAISE EXCEPTION 'row % rejected', NEW.id USING ERRCODE = 'check_violation'; END IF; RETURN NEW; END $$""")
        c.execute("CREATE TRIGGER reject BEFORE UPDATE ON picky FOR EACH ROW EXECUTE FUNCTION reject()")
        job_id = c.execute("SELECT tributary_job_create('picky', '{body}', batch_size => 128)").fetchone()[0]
    # Two attempts 10 s apart, then the job gives up on the three rows and is done.
    j = wait_for(dsn, job_id, lambda j: j["state"] in ("done", "failed"), 300, "done")
    assert j["state"] == "done" and j["rows_done"] == 997 and j["rows_failed"] == 3 and j["rows_total"] == 1000
    assert "rejected" in j["last_error"]
    with connect(dsn) as c:
        errors = c.execute("SELECT key->>'id', sqlstate, message, attempts, status FROM tributary.job_errors "
                           "WHERE job_id = %s ORDER BY 1", (job_id,)).fetchall()
        assert errors == [("501", "23514", "row 501 rejected", 2, "gave_up"),
                          ("502", "23514", "row 502 rejected", 2, "gave_up"),
                          ("77", "23514", "row 77 rejected", 2, "gave_up")]
        assert c.execute("SELECT count(*) FILTER (WHERE embedding IS NULL), max(writes) FROM picky").fetchone() == (3, 1)
        # Fixed data, resumed job: the given-up rows get embedded.
        c.execute("DROP TRIGGER reject ON picky")
        c.execute("SELECT tributary_job_resume(%s)", (job_id,))
    j = wait_for(dsn, job_id, lambda j: j["state"] == "done" and j["rows_done"] == 1000, 120, "resumed and done")
    with connect(dsn) as c:
        assert c.execute("SELECT count(*) FILTER (WHERE embedding IS NULL), max(writes) FROM picky").fetchone() == (0, 1)
        assert c.execute("SELECT count(*) FROM tributary.job_errors WHERE job_id = %s", (job_id,)).fetchone()[0] == 0


def test_pause_cancel_backend_and_terminate_stop_within_a_batch(cluster):
    dsn = cluster["dsn"]
    with connect(dsn) as c:
        c.execute("DROP TABLE IF EXISTS slow")
        c.execute("CREATE TABLE slow (id int PRIMARY KEY, body text, embedding vector(384), writes int NOT NULL DEFAULT 0)")
        c.execute("INSERT INTO slow SELECT g, repeat('a longer text number ' || g || ' ', 20) FROM generate_series(1, 4000) g")
        c.execute("CREATE TRIGGER count_writes BEFORE UPDATE ON slow FOR EACH ROW EXECUTE FUNCTION count_writes()")
        job_id = c.execute("SELECT tributary_job_create('slow', '{body}', batch_size => 64)").fetchone()[0]
    wait_for(dsn, job_id, lambda j: j["rows_done"] >= 256, 300, "256 rows")
    with connect(dsn) as c:
        c.execute("SELECT tributary_job_pause(%s)", (job_id,))
        # The batch in flight ends (however long it takes here); then nothing moves.
        deadline = time.monotonic() + 120
        while busy_workers(dsn, job_id):
            assert time.monotonic() < deadline, "a batch still ran 120 s after the pause"
            time.sleep(0.05)
        paused_at = job(dsn, job_id)["rows_done"]
        time.sleep(2.0)
        assert job(dsn, job_id)["rows_done"] == paused_at
        assert job(dsn, job_id)["state"] == "paused"
        c.execute("SELECT tributary_job_resume(%s)", (job_id,))
    wait_for(dsn, job_id, lambda j: j["rows_done"] >= paused_at + 256, 300, "progress after resume")
    # pg_cancel_backend and pg_terminate_backend on the worker mid-batch: the batch is rolled
    # back, the launcher starts a new worker, nothing is lost or written twice.
    for fn in ("pg_cancel_backend", "pg_terminate_backend"):
        pid = busy_worker(dsn, job_id)
        assert pid
        assert query(dsn, f"SELECT {fn}(%s)", (pid,))[0][0]
        time.sleep(0.5)
    j = wait_for(dsn, job_id, lambda j: j["state"] in ("done", "failed"), 600, "done")
    assert j["state"] == "done" and j["rows_done"] == 4000
    assert query(dsn, "SELECT count(*) FILTER (WHERE embedding IS NULL), min(writes), max(writes) FROM slow")[0] == (0, 1, 1)


def test_job_runs_with_its_owners_rights(cluster):
    dsn = cluster["dsn"]
    with connect(dsn) as c:
        c.execute("DROP TABLE IF EXISTS owned")
        c.execute("DROP ROLE IF EXISTS job_alice")
        c.execute("DROP ROLE IF EXISTS job_bob")
        c.execute("CREATE ROLE job_alice")
        c.execute("CREATE ROLE job_bob")
        c.execute("GRANT CREATE ON SCHEMA public TO job_alice")
        c.execute("SET ROLE job_alice")
        c.execute("CREATE TABLE owned (id int PRIMARY KEY, body text, embedding vector(384))")
        c.execute("INSERT INTO owned SELECT g, 'owned text ' || g FROM generate_series(1, 100) g")
        job_id = c.execute("SELECT tributary_job_create('owned', '{body}')").fetchone()[0]
        assert c.execute("SELECT owner::text FROM tributary.jobs WHERE id = %s", (job_id,)).fetchone()[0] == "job_alice"
        c.execute("SET ROLE job_bob")
        # Not bob's table, not bob's job: no job on it, no control of it, not in his view.
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("SELECT tributary_job_create('owned', '{body}')")
        # Another role's job does not exist for bob (42704, as an unknown id: ids are not revealed).
        with pytest.raises(psycopg.errors.UndefinedObject):
            c.execute("SELECT tributary_job_pause(%s)", (job_id,))
        assert c.execute("SELECT count(*) FROM tributary.jobs WHERE id = %s", (job_id,)).fetchone()[0] == 0
        c.execute("RESET ROLE")
    j = wait_for(dsn, job_id, lambda j: j["state"] in ("done", "failed"), 300, "done")
    assert j["state"] == "done" and j["rows_done"] == 100
    # Alice loses UPDATE on her own table: a new job on it fails as a job (42501), not row by row.
    with connect(dsn) as c:
        c.execute("UPDATE owned SET embedding = NULL WHERE id <= 10")
        c.execute("REVOKE UPDATE ON owned FROM job_alice")
        c.execute("SET ROLE job_alice")
        job2 = c.execute("SELECT tributary_job_create('owned', '{body}')").fetchone()[0]
        c.execute("RESET ROLE")
    j = wait_for(dsn, job2, lambda j: j["state"] in ("done", "failed"), 300, "failed")
    assert j["state"] == "failed" and "42501" in j["last_error"] and j["rows_queued"] == 10
    assert query(dsn, "SELECT count(*) FROM tributary.job_errors WHERE job_id = %s", (job2,))[0][0] == 0


def test_continuous_job_under_concurrent_updates_ends_with_current_text(cluster):
    """Rows changed while their batch is in flight: the write checks that the text it embedded
    is still the row's text, so no embedding of an older text survives the last change."""
    dsn = cluster["dsn"]
    # Enough rows that the job runs for seconds (it embedded 1,500 in about a second once ONNX
    # Runtime's threads stopped spinning), so that many edits land while batches are in flight.
    n = 5000
    with connect(dsn) as c:
        c.execute("DROP TABLE IF EXISTS busy")
        c.execute("CREATE TABLE busy (id int PRIMARY KEY, body text, embedding vector(384))")
        c.execute("INSERT INTO busy SELECT g, 'first text of row ' || g FROM generate_series(1, %s) g", (n,))
        job_id = c.execute("SELECT tributary_job_create('busy', '{body}', mode => 'continuous', batch_size => 32, "
                           "workers => 2)").fetchone()[0]
        edits = 0
        deadline = time.monotonic() + 600
        while job(dsn, job_id)["rows_done"] < n and time.monotonic() < deadline:
            # Rows near the front of the queue, likely in a batch right now.
            done = job(dsn, job_id)["rows_done"]
            c.execute("UPDATE busy SET body = 'edit ' || %s || ' of row ' || id WHERE id BETWEEN %s AND %s",
                      (edits, done + 1, done + 40))
            edits += 1
            time.sleep(0.03)
        assert edits > 10
    wait_for(dsn, job_id, lambda j: j["rows_queued"] == 0 and j["rows_done"] >= n, 600, "queue drained")
    time.sleep(1.0)
    wait_for(dsn, job_id, lambda j: j["rows_queued"] == 0, 120, "queue drained again")
    with connect(dsn) as c:
        stale = c.execute("SELECT count(*) FROM busy WHERE embedding IS NULL "
                          "OR (embedding <=> tributary_embed(body)) > 1e-5").fetchone()[0]
        assert stale == 0
        c.execute("SELECT tributary_job_drop(%s)", (job_id,))


def test_job_prompt_truncation_count_and_the_columns_model(cluster):
    """A job embeds with the model's prompt, counts truncated texts in the jobs view, records its
    target column's model, and a second model for that column is refused (22023)."""
    dsn = cluster["dsn"]

    def full(job_id):
        with connect(dsn) as c:
            cur = c.execute("SELECT * FROM tributary.jobs WHERE id = %s", (job_id,))
            return dict(zip([d.name for d in cur.description], cur.fetchone()))

    with connect(dsn) as c:
        c.execute("SELECT tributary_job_drop(id) FROM tributary.jobs WHERE source::text = 'manpages'")
        c.execute("DROP TABLE IF EXISTS manpages")
        c.execute("SELECT tributary_register_model('minilm-prompts', 'all-MiniLM-L6-v2', "
                  "prompts => '{\"query\": \"query: \", \"passage\": \"passage: \"}')")
        c.execute("CREATE TABLE manpages (id int PRIMARY KEY, body text, embedding vector(384))")
        c.execute("INSERT INTO manpages SELECT g, CASE WHEN g % 5 = 0 THEN repeat('option ' || g || ' sets the mode. ', 80) "
                  "ELSE 'short page ' || g END FROM generate_series(1, 50) g")
        with pytest.raises(psycopg.errors.UndefinedObject):
            c.execute("SELECT tributary_job_create('manpages', '{body}', model => 'minilm-prompts', prompt => 'document')")
        job_id = c.execute("SELECT tributary_job_create('manpages', '{body}', model => 'minilm-prompts', "
                           "prompt => 'passage', mode => 'continuous')").fetchone()[0]
    j = wait_until(full, job_id, lambda j: j["rows_done"] == 50 and j["rows_queued"] == 0, 300, "50 rows")
    assert j["prompt"] == "passage"
    assert j["rows_truncated"] == 10, j
    with connect(dsn) as c:
        c.execute("INSERT INTO manpages VALUES (51, repeat('a long new page ', 200))")
    j = wait_until(full, job_id, lambda j: j["rows_done"] == 51 and j["rows_queued"] == 0, 300, "51 rows")
    assert j["rows_truncated"] == 11, j
    with connect(dsn) as c:
        # The vectors are the prompt's.
        worst = c.execute("SELECT max(embedding <=> tributary_embed(body, 'minilm-prompts', prompt => 'passage')) "
                          "FROM manpages").fetchone()[0]
        assert worst < 1e-5
        model, prompt, by = c.execute("SELECT model, prompt, filled_by FROM tributary.column_models "
                                      "WHERE relid = 'manpages'::regclass AND attname = 'embedding'").fetchone()
        assert (model, prompt, by) == ("minilm-prompts", "passage", "a job of postgres")
        # Queries by the column use its model with the query prompt.
        assert c.execute("SELECT tributary_embed_for('manpages', 'embedding', 'the mode') "
                         "<=> tributary_embed('the mode', 'minilm-prompts', prompt => 'query') < 1e-6").fetchone()[0]
        # Another model for the same column: refused, before anything is written.
        with pytest.raises(psycopg.errors.InvalidParameterValue) as e:
            c.execute("SELECT tributary_embed_column('manpages', '{body}', 'embedding')")
        assert "minilm-prompts" in str(e.value)
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            c.execute("SELECT tributary_job_create('manpages', '{body}', name => 'again')")
    # Under tributary.truncation = error (the server's value, which jobs read), a long row is a
    # failed row with 22001 in tributary.job_errors, and the job goes on with the others.
    with connect(dsn) as c:
        c.execute("ALTER SYSTEM SET tributary.truncation = 'error'")
        c.execute("SELECT pg_reload_conf()")
    try:
        wait_setting(dsn, "tributary.truncation", "error")
        time.sleep(1.0)   # the idle worker, woken by the reload's signal, reads it at its next loop
        with connect(dsn) as c:
            c.execute("INSERT INTO manpages VALUES (52, repeat('too long ', 400)), (53, 'a short page')")
        j = wait_until(full, job_id, lambda j: j["rows_done"] == 52 and j["rows_failed"] == 1, 300, "52 rows, 1 failed")
        assert j["state"] == "running" and j["rows_truncated"] == 11, j
        with connect(dsn) as c:
            errs = c.execute("SELECT key, sqlstate FROM tributary.job_errors WHERE job_id = %s", (job_id,)).fetchall()
        assert errs == [({"id": 52}, "22001")], errs
    finally:
        with connect(dsn) as c:
            c.execute("ALTER SYSTEM RESET tributary.truncation")
            c.execute("SELECT pg_reload_conf()")
            c.execute("SELECT tributary_job_drop(%s)", (job_id,))


def test_chunk_job_keeps_chunks_embedded_as_the_source_changes(cluster):
    """A chunk job on real long documents: every chunk embedded by the workers with the model's
    vectors, then kept in step with inserts, rewrites and deletes of the source, by another role's
    writes too; no chunk is past the window."""
    dsn = cluster["dsn"]
    man = [p for p in sorted(os.listdir("/usr/share/man/man1")) if p.endswith(".1.gz")][:400]

    def page(name):
        import gzip
        with gzip.open(os.path.join("/usr/share/man/man1", name), "rt", errors="replace") as f:
            return f.read()

    texts = [t for t in (page(p) for p in man) if 4000 <= len(t) <= 40000 and not t.lstrip().startswith(".so ")][:12]
    assert len(texts) == 12
    with connect(dsn) as c:
        c.execute("SELECT tributary_chunk_job_drop(id) FROM tributary.jobs WHERE source::text = 'pages_chunks'")
        c.execute("DROP TABLE IF EXISTS pages_chunks, pages")
        c.execute("DROP ROLE IF EXISTS page_writer")
        c.execute("CREATE TABLE pages (id int PRIMARY KEY, body text)")
        for i, t in enumerate(texts, 1):
            c.execute("INSERT INTO pages VALUES (%s, %s)", (i, t))
        job_id = c.execute("SELECT tributary_chunk_job_create('pages', 'body', 'pages_chunks', "
                           "chunk_tokens => 200, overlap_tokens => 20)").fetchone()[0]
        n = c.execute("SELECT count(*) FROM pages_chunks").fetchone()[0]
        assert n > 12 * 2, n
    j = wait_for(dsn, job_id, lambda j: j["rows_done"] >= n and j["rows_queued"] == 0, 600, f"{n} chunks")
    assert j["state"] == "running" and j["rows_failed"] == 0, j
    with connect(dsn) as c:
        worst, missing, longest = c.execute(
            "SELECT max(embedding <=> tributary_embed(chunk)), count(*) FILTER (WHERE embedding IS NULL), "
            "max(cardinality(tributary_tokenize(chunk))) FROM pages_chunks").fetchone()
        assert missing == 0 and worst < 1e-5 and longest <= 256, (worst, missing, longest)
        c.execute("CREATE ROLE page_writer")
        c.execute("GRANT SELECT, INSERT, UPDATE, DELETE ON pages TO page_writer")
    # Changes, some by a role with no rights on the chunk table.
    with connect(dsn) as c:
        c.execute("SET ROLE page_writer")
        c.execute("UPDATE pages SET body = 'Rewritten to one short chunk.' WHERE id = 1")
        c.execute("DELETE FROM pages WHERE id = 2")
        c.execute("INSERT INTO pages VALUES (13, %s)", (texts[0],))
    with connect(dsn) as c:
        expected = c.execute("SELECT count(*) FROM pages p, tributary_chunk(p.body, chunk_tokens => 200, overlap_tokens => 20)").fetchone()[0]
        assert c.execute("SELECT count(*) FROM pages_chunks").fetchone()[0] == expected
        assert c.execute("SELECT count(*) FROM pages_chunks WHERE id = 2").fetchone()[0] == 0
        assert c.execute("SELECT array_agg(chunk) FROM pages_chunks WHERE id = 1").fetchone()[0] == ["Rewritten to one short chunk."]
    wait_until(lambda i: query(dsn, "SELECT count(*) FILTER (WHERE embedding IS NULL) FROM pages_chunks")[0][0],
               None, lambda missing: missing == 0, 300, "the changed chunks embedded")
    with connect(dsn) as c:
        # A search over the chunks finds the rewritten page by its new text.
        assert c.execute("SELECT id FROM pages_chunks ORDER BY embedding <=> tributary_embed('Rewritten to one short chunk.') "
                         "LIMIT 1").fetchone()[0] == 1
        c.execute("SELECT tributary_chunk_job_drop(%s)", (job_id,))
        assert c.execute("SELECT count(*) FROM pg_trigger WHERE tgrelid = 'pages'::regclass AND NOT tgisinternal").fetchone()[0] == 0
