"""The hostile suite, part two: jobs act as the table's owner, and no DDL or role change breaks a
table's writers (issue "Jobs act as the table's owner").

Whoever makes, resumes or continues a job or a chunk job on alice's table (a superuser, or a role
that is a member of alice), alice's code (a domain CHECK on the key, a trigger) runs as alice and
nobody else. RENAME of the table, a column or its schema, DROP COLUMN, ALTER TABLE ... OWNER TO,
REASSIGN OWNED / DROP OWNED / DROP ROLE and DROP EXTENSION ... CASCADE leave every writer able to
INSERT; the job follows, or says in tributary.jobs what happened. No role without grants can lock
or write tributary's tables.

Runs on the jobs cluster (TRIBUTARY_JOBS_DSN: tributary in shared_preload_libraries), as the
roles alice and bob of tests/integration/conftest.py plus roles made and dropped here.
"""
import time

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from jobwait import connect
from test_hostile import DIM, JOB_WAIT, error_of, expect, job, no_crash, one, sqlstate, wait_job  # noqa: F401 (no_crash: autouse)

# alice's bait: run by a superuser it makes alice one; run by boss it copies boss's payroll.
BAIT = [
    """CREATE FUNCTION alice.pwn(v int) RETURNS boolean LANGUAGE plpgsql AS $$ BEGIN
       IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN EXECUTE 'ALTER ROLE alice SUPERUSER'; END IF;
       BEGIN
           INSERT INTO alice.stolen SELECT current_user, s.* FROM boss.payroll s;
       EXCEPTION WHEN insufficient_privilege OR undefined_table THEN NULL;
       END;
       RETURN true; END $$""",
    "CREATE DOMAIN alice.evil_id AS int CHECK (alice.pwn(VALUE))",
    "CREATE TABLE alice.stolen (who name, name text, salary int)",
]


@pytest.fixture(scope="module")
def owned(hostile_jobs):
    """alice's bait, and boss: a plain role, member of alice, with a payroll table of its own."""
    cl = hostile_jobs
    with cl.connect() as c:
        c.execute("DROP SCHEMA IF EXISTS boss CASCADE")
        for role in ("boss", "dora", "carol", "maker"):
            if c.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
                c.execute(f"DROP OWNED BY {role} CASCADE")
                c.execute(f"DROP ROLE {role}")
        c.execute("DROP SCHEMA IF EXISTS dora CASCADE")
        c.execute("CREATE ROLE boss LOGIN")
        c.execute("GRANT alice TO boss")
        c.execute("CREATE SCHEMA boss AUTHORIZATION boss")
    with cl.connect("boss") as b:
        b.execute("CREATE TABLE boss.payroll (name text, salary int)")
        b.execute("INSERT INTO boss.payroll VALUES ('boss', 1000000)")
    with cl.connect("alice") as a:
        for sql in BAIT:
            a.execute(sql)
    yield cl
    with cl.connect() as c:
        c.execute("DROP SCHEMA IF EXISTS boss CASCADE")
        c.execute("DROP OWNED BY boss CASCADE")
        c.execute("DROP ROLE IF EXISTS boss")


def bait_table(a, name, rows=4):
    """alice.<name> (id alice.evil_id PRIMARY KEY, body text, e vector), rows 1..rows."""
    a.execute(f"CREATE TABLE alice.{name} (id alice.evil_id PRIMARY KEY, body text, e vector({DIM}))")
    a.execute(f"INSERT INTO alice.{name} SELECT g, 'text number ' || g FROM generate_series(1, %s) g", (rows,))


def safe(cl):
    """alice is no superuser and read nothing of boss's."""
    assert not cl.rolsuper("alice"), "alice became a superuser"
    stolen = cl.su("SELECT who, name FROM alice.stolen")
    assert stolen == [], f"alice's code read boss's payroll as {stolen}"


def embedded(cl, table, col="e"):
    return cl.su(f"SELECT count(*) FILTER (WHERE {col} IS NOT NULL), count(*) FROM {table}")[0]


def done(j):
    return j["state"] == "done"


def test_superuser_job_on_alices_table_acts_as_alice(owned):
    """A superuser makes a once job and a continuous job on alice's table: both are alice's
    (tributary.jobs.owner), alice's domain CHECK runs as alice (she does not become a superuser),
    every row is embedded, and alice's later INSERTs are embedded too."""
    cl = owned
    with cl.connect("alice") as a:
        bait_table(a, "su_once")
        bait_table(a, "su_cont")
    once = cl.su("SELECT tributary_job_create('alice.su_once', '{body}', 'e')")[0][0]
    cont = cl.su("SELECT tributary_job_create('alice.su_cont', '{body}', 'e', mode => 'continuous')")[0][0]
    assert {r[0] for r in cl.su("SELECT owner::text FROM tributary.jobs WHERE id IN (%s, %s)", (once, cont))} == {"alice"}
    wait_job(cl, once, done, JOB_WAIT, "done")
    with cl.connect("alice") as a:
        a.execute("INSERT INTO alice.su_cont VALUES (5, 'a later row')")
    wait_job(cl, cont, lambda j: j["rows_done"] >= 5 and j["rows_queued"] == 0, JOB_WAIT, "the later row embedded")
    safe(cl)
    assert embedded(cl, "alice.su_once") == (4, 4)
    assert embedded(cl, "alice.su_cont") == (5, 5)
    # Resumed by the superuser: the requeue runs as alice too.
    cl.su("SELECT tributary_job_resume(%s)", (once,))
    wait_job(cl, once, done, JOB_WAIT, "done again")
    safe(cl)


def test_member_role_job_acts_as_alice(owned):
    """boss, a plain role and member of alice, makes a job on alice's table: it runs as alice, so
    her domain's function cannot read boss's payroll."""
    cl = owned
    with cl.connect("alice") as a:
        bait_table(a, "boss_job")
    with cl.connect("boss") as b:
        job_id = one(b, "SELECT tributary_job_create('alice.boss_job', '{body}', 'e', mode => 'continuous')")
    # (Not boss: a role's own INSERT evaluates the table's domain as that role, in PostgreSQL.)
    with cl.connect("alice") as a:
        a.execute("INSERT INTO alice.boss_job VALUES (5, 'a later row')")
    with cl.connect("boss") as b:
        b.execute("SELECT tributary_job_pause(%s)", (job_id,))
        b.execute("SELECT tributary_job_resume(%s)", (job_id,))
    wait_job(cl, job_id, lambda j: j["rows_done"] >= 5 and j["rows_queued"] == 0, JOB_WAIT, "all rows embedded")
    safe(cl)
    assert cl.su("SELECT owner::text FROM tributary.jobs WHERE id = %s", (job_id,)) == [("alice",)]


def test_chunk_job_made_by_a_superuser_belongs_to_alice(owned):
    """A superuser's chunk job on alice's table: the chunk table, the trigger function and the
    job are alice's; the initial chunking, alice's later INSERTs and the embedding job run as
    alice; the trigger function depends on the extension."""
    cl = owned
    with cl.connect("alice") as a:
        bait_table(a, "su_chunked")
    job_id = cl.su("SELECT tributary_chunk_job_create('alice.su_chunked', 'body', 'su_chunks', chunk_tokens => 16)")[0][0]
    with cl.connect("alice") as a:
        a.execute("INSERT INTO alice.su_chunked VALUES (5, 'a later row about owners and roles')")
    wait_job(cl, job_id, lambda j: j["rows_done"] >= 5 and j["rows_queued"] == 0, JOB_WAIT, "the chunks embedded")
    safe(cl)
    owners = cl.su("""
        SELECT (SELECT relowner::regrole::text FROM pg_class WHERE oid = 'alice.su_chunks'::regclass),
               (SELECT p.proowner::regrole::text FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid
                 WHERE t.tgrelid = 'alice.su_chunked'::regclass AND t.tgname LIKE 'tributary_chunks_%%'),
               (SELECT owner::text FROM tributary.jobs WHERE id = %s),
               (SELECT count(*) FROM pg_depend d JOIN pg_trigger t ON d.objid = t.tgfoid
                 WHERE t.tgrelid = 'alice.su_chunked'::regclass AND d.deptype = 'x'
                   AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'tributary'))""", (job_id,))[0]
    assert owners == ("alice", "alice", "alice", 1)
    assert cl.su("SELECT count(DISTINCT id), count(*) = count(embedding) FROM alice.su_chunks") == [(5, True)]
    with cl.connect("boss") as b:
        b.execute("SELECT tributary_chunk_job_drop(%s)", (job_id,))
    assert cl.su("SELECT count(*) FROM pg_trigger WHERE tgrelid = 'alice.su_chunked'::regclass AND NOT tgisinternal") == [(0,)]


def test_renames_are_followed(owned):
    """RENAME COLUMN of the text and target columns, RENAME of the table and of its schema: the
    continuous job follows each (tributary.jobs shows the new names), every INSERT works, and the
    rows written after each rename are embedded."""
    cl = owned
    with cl.connect("alice") as a:
        a.execute(f"CREATE TABLE alice.ren (id int PRIMARY KEY, body text, e vector({DIM}))")
        a.execute("INSERT INTO alice.ren SELECT g, 'row ' || g FROM generate_series(1, 3) g")
        job_id = one(a, "SELECT tributary_job_create('alice.ren', '{body}', 'e', mode => 'continuous')")
    wait_job(cl, job_id, lambda j: j["rows_done"] >= 3, JOB_WAIT, "first pass")
    steps = [
        ("ALTER TABLE alice.ren RENAME COLUMN body TO content", "alice.ren", "content", "e"),
        ("ALTER TABLE alice.ren RENAME COLUMN e TO emb", "alice.ren", "content", "emb"),
        ("ALTER TABLE alice.ren RENAME TO renamed", "alice.renamed", "content", "emb"),
        ("ALTER SCHEMA alice RENAME TO alice_moved", "alice_moved.renamed", "content", "emb"),
        ("ALTER SCHEMA alice_moved RENAME TO alice", "alice.renamed", "content", "emb"),
    ]
    n = 3
    try:
        for ddl, table, text_col, target in steps:
            if ddl.startswith("ALTER SCHEMA"):
                cl.su(ddl)
            else:
                with cl.connect("alice") as a:
                    a.execute(ddl)
            n += 1
            with cl.connect("alice") as a:
                a.execute(f"INSERT INTO {table} (id, {text_col}) VALUES (%s, 'after: ' || %s)", (n, ddl))
            j = wait_job(cl, job_id, lambda j, n=n: j["rows_done"] >= n and j["rows_queued"] == 0, JOB_WAIT, f"row {n} after {ddl}")
            assert j["state"] in ("running", "pending"), j
            shown = cl.su("SELECT source::text, columns, target FROM tributary.jobs WHERE id = %s", (job_id,))[0]
            assert shown == (table, [text_col], target), f"after {ddl}: {shown}"
            assert embedded(cl, table, target) == (n, n), f"after {ddl}"
    finally:
        cl.su("DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'alice_moved') THEN "
              "ALTER SCHEMA alice_moved RENAME TO alice; END IF; END $$")
    # The column binding followed the target column.
    assert cl.su("SELECT attname::text FROM tributary.column_models WHERE relid = 'alice.renamed'::regclass") == [("emb",)]


def test_chunk_job_follows_renames(owned):
    """A chunk job after RENAME COLUMN of its text column and RENAME of the source and of the chunk
    table: its trigger function is rewritten (still alice's, still tied to the extension), every
    INSERT and UPDATE works and is chunked and embedded; DROP COLUMN of the text column is refused
    by PostgreSQL (2BP01) while the trigger needs it."""
    cl = owned
    with cl.connect("alice") as a:
        a.execute("CREATE TABLE alice.cdoc (id int PRIMARY KEY, body text)")
        a.execute("INSERT INTO alice.cdoc VALUES (1, 'first document about owners')")
        job_id = one(a, "SELECT tributary_chunk_job_create('alice.cdoc', 'body', 'cdoc_chunks')")
        a.execute("ALTER TABLE alice.cdoc RENAME COLUMN body TO content")
        a.execute("INSERT INTO alice.cdoc VALUES (2, 'second document after the column rename')")
        a.execute("ALTER TABLE alice.cdoc RENAME TO cdoc2")
        a.execute("ALTER TABLE alice.cdoc_chunks RENAME TO cdoc2_chunks")
        a.execute("INSERT INTO alice.cdoc2 VALUES (3, 'third document after both tables were renamed')")
        a.execute("UPDATE alice.cdoc2 SET content = 'first document, rewritten' WHERE id = 1")
        expect(a, "ALTER TABLE alice.cdoc2 DROP COLUMN content", "2BP01")
    rows = cl.su("SELECT id, chunk FROM alice.cdoc2_chunks ORDER BY id, chunk_seq")
    assert rows == [(1, "first document, rewritten"), (2, "second document after the column rename"),
                    (3, "third document after both tables were renamed")], rows
    wait_job(cl, job_id, lambda j: j["rows_queued"] == 0 and j["rows_done"] >= 3, JOB_WAIT, "chunks embedded")
    assert embedded(cl, "alice.cdoc2_chunks", "embedding") == (3, 3)
    fn = cl.su("""SELECT p.proowner::regrole::text, p.prosrc LIKE '%%alice.cdoc2_chunks%%' AND p.prosrc LIKE '%%NEW.content%%',
                         EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = p.oid AND d.deptype = 'x')
                    FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid
                   WHERE t.tgrelid = 'alice.cdoc2'::regclass AND NOT t.tgisinternal""")
    assert fn == [("alice", True, True)], fn


def test_dropped_column_stops_the_job_not_the_writers(owned):
    """DROP COLUMN of a continuous job's text column: INSERTs go on, the job is paused with a
    last_error naming the column, and resuming it says 42703 with a hint."""
    cl = owned
    with cl.connect("alice") as a:
        a.execute(f"CREATE TABLE alice.dropcol (id int PRIMARY KEY, title text, body text, e vector({DIM}))")
        a.execute("INSERT INTO alice.dropcol SELECT g, 'title ' || g, 'row ' || g FROM generate_series(1, 3) g")
        job_id = one(a, "SELECT tributary_job_create('alice.dropcol', '{title,body}', 'e', mode => 'continuous')")
        wait_job(cl, job_id, lambda j: j["rows_done"] >= 3, JOB_WAIT, "first pass")
        a.execute("ALTER TABLE alice.dropcol DROP COLUMN body")
        a.execute("INSERT INTO alice.dropcol (id, title) VALUES (4, 'written after the drop')")
        j = job(cl, job_id)
        assert j["state"] == "paused" and '"body"' in j["last_error"], j
        e = error_of(a, "SELECT tributary_job_resume(%s)", (job_id,))
        assert e.sqlstate == "42703" and e.diag.message_hint, (e.sqlstate, str(e))
    # The target column dropped from a job's separate target table: the same.
    with cl.connect("alice") as a:
        a.execute("CREATE TABLE alice.dropcol2 (id int PRIMARY KEY, body text)")
        a.execute("INSERT INTO alice.dropcol2 SELECT g, 'row ' || g FROM generate_series(1, 3) g")
        job2 = one(a, "SELECT tributary_job_create('alice.dropcol2', '{body}', 'e', target_table => 'dropcol2_emb', mode => 'continuous')")
        wait_job(cl, job2, lambda j: j["rows_done"] >= 3, JOB_WAIT, "first pass")
        a.execute("ALTER TABLE alice.dropcol2_emb DROP COLUMN e")
        a.execute("INSERT INTO alice.dropcol2 VALUES (4, 'written after the drop')")
        a.execute("UPDATE alice.dropcol2 SET body = 'changed' WHERE id = 1")
        a.execute("DELETE FROM alice.dropcol2 WHERE id = 2")
        j = job(cl, job2)
        assert j["state"] == "paused" and '"e"' in j["last_error"], j


def test_owner_changes_move_the_job(owned):
    """ALTER TABLE ... OWNER TO bob: the job is bob's and acts as bob. Then REASSIGN OWNED BY dora
    TO carol, DROP OWNED BY dora and DROP ROLE dora of a table's owner, and DROP ROLE of the role
    that made a job: every INSERT works and is embedded, and tributary.jobs shows the owner."""
    cl = owned
    with cl.connect("alice") as a:
        a.execute(f"CREATE TABLE alice.moved (id int PRIMARY KEY, body text, e vector({DIM}))")
        a.execute("INSERT INTO alice.moved SELECT g, 'row ' || g FROM generate_series(1, 3) g")
        job_id = one(a, "SELECT tributary_job_create('alice.moved', '{body}', 'e', mode => 'continuous')")
    wait_job(cl, job_id, lambda j: j["rows_done"] >= 3, JOB_WAIT, "first pass")
    cl.su("GRANT USAGE ON SCHEMA alice TO bob")
    try:
        cl.su("ALTER TABLE alice.moved OWNER TO bob")
        with cl.connect("bob") as b:
            b.execute("INSERT INTO alice.moved VALUES (4, 'written by the new owner')")
        wait_job(cl, job_id, lambda j: j["rows_done"] >= 4 and j["rows_queued"] == 0, JOB_WAIT, "bob's row embedded")
        assert cl.su("SELECT owner::text FROM tributary.jobs WHERE id = %s", (job_id,)) == [("bob",)]
        with cl.connect("alice") as a:   # no longer hers
            expect(a, "INSERT INTO alice.moved VALUES (5, 'x')", "42501")
    finally:
        cl.su("ALTER TABLE alice.moved OWNER TO alice")
        cl.su("REVOKE USAGE ON SCHEMA alice FROM bob")

    with cl.connect() as c:
        for role in ("dora", "carol", "maker"):
            c.execute(f"CREATE ROLE {role} LOGIN")
        c.execute("GRANT dora TO maker")
        c.execute("CREATE SCHEMA dora AUTHORIZATION dora")
        c.execute("GRANT USAGE, CREATE ON SCHEMA dora TO carol")
    try:
        with cl.connect("dora") as d:
            d.execute(f"CREATE TABLE dora.t (id int PRIMARY KEY, body text, e vector({DIM}))")
            d.execute("INSERT INTO dora.t SELECT g, 'row ' || g FROM generate_series(1, 3) g")
        with cl.connect("maker") as m:
            cont = one(m, "SELECT tributary_job_create('dora.t', '{body}', 'e', mode => 'continuous')")
        wait_job(cl, cont, lambda j: j["rows_done"] >= 3, JOB_WAIT, "first pass")
        with cl.connect() as c:
            c.execute("DROP ROLE maker")        # made the job, owns nothing
        with cl.connect("dora") as d:
            d.execute("INSERT INTO dora.t VALUES (4, 'after the job maker was dropped')")
        wait_job(cl, cont, lambda j: j["rows_done"] >= 4 and j["rows_queued"] == 0, JOB_WAIT, "row 4 embedded")
        with cl.connect() as c:
            c.execute("REASSIGN OWNED BY dora TO carol")
            c.execute("DROP OWNED BY dora")
            c.execute("DROP ROLE dora")
        with cl.connect("carol") as k:
            k.execute("INSERT INTO dora.t VALUES (5, 'written by the new owner after REASSIGN OWNED')")
        wait_job(cl, cont, lambda j: j["rows_done"] >= 5 and j["rows_queued"] == 0, JOB_WAIT, "row 5 embedded")
        assert cl.su("SELECT owner::text FROM tributary.jobs WHERE id = %s", (cont,)) == [("carol",)]
        assert embedded(cl, "dora.t") == (5, 5)
    finally:
        with cl.connect() as c:
            for (j,) in c.execute("SELECT id FROM tributary.jobs WHERE source::text LIKE 'dora.%%'").fetchall():
                c.execute("SELECT tributary_job_drop(%s)", (j,))
            c.execute("DROP SCHEMA IF EXISTS dora CASCADE")
            for role in ("maker", "dora", "carol"):
                if c.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
                    c.execute(f"DROP OWNED BY {role} CASCADE")
                    c.execute(f"DROP ROLE {role}")


def test_drop_extension_cascade_leaves_writers_working(owned):
    """DROP EXTENSION tributary CASCADE in a database with a continuous job and a chunk job:
    every INSERT into the sources works afterwards (nothing of tributary's is left on them)."""
    cl = owned
    with cl.connect() as c:
        c.execute("DROP DATABASE IF EXISTS tributary_dropext WITH (FORCE)")
        c.execute("CREATE DATABASE tributary_dropext")
    dsn = make_conninfo(cl.dsn, dbname="tributary_dropext")
    try:
        with connect(dsn) as c:
            c.execute("CREATE EXTENSION tributary CASCADE")
            c.execute("GRANT CREATE ON SCHEMA public TO alice")
        with connect(dsn, user="alice") as a:
            a.execute(f"CREATE TABLE docs (id int PRIMARY KEY, body text, e vector({DIM}))")
            a.execute("INSERT INTO docs SELECT g, 'row ' || g FROM generate_series(1, 3) g")
            a.execute("SELECT tributary_job_create('docs', '{body}', 'e', mode => 'continuous')")
            a.execute("SELECT tributary_chunk_job_create('docs', 'body', 'docs_chunks')")
        with connect(dsn) as c:
            # Both jobs' first rows embedded first: a worker busy with a batch holds locks that
            # DROP EXTENSION would wait for in the other order (a deadlock PostgreSQL resolves by
            # cancelling one of the two; that race is not what this test is about).
            deadline = time.monotonic() + JOB_WAIT
            while c.execute("SELECT count(*) FILTER (WHERE rows_done >= 3 AND rows_queued = 0) = 2"
                            " FROM tributary.jobs").fetchone()[0] is not True:
                assert time.monotonic() < deadline, c.execute("SELECT * FROM tributary.jobs").fetchall()
                time.sleep(0.2)
            for attempt in range(5):
                try:
                    c.execute("DROP EXTENSION tributary CASCADE")
                    break
                except psycopg.errors.DeadlockDetected:
                    if attempt == 4:
                        raise
                    time.sleep(0.5)
            left = c.execute("SELECT count(*) FROM pg_trigger WHERE tgrelid = 'docs'::regclass AND NOT tgisinternal").fetchone()[0]
        with connect(dsn, user="alice") as a:
            a.execute("INSERT INTO docs (id, body) VALUES (4, 'after DROP EXTENSION')")
            a.execute("UPDATE docs SET body = 'changed' WHERE id = 1")
        assert left == 0
    finally:
        with cl.connect() as c:
            c.execute("DROP DATABASE IF EXISTS tributary_dropext WITH (FORCE)")


def test_no_role_can_lock_or_write_tributarys_tables(owned):
    """alice (no grants) cannot take a write lock on, or write, any table of tributary's: its
    catalog, the column bindings, the jobs' tables, and bob's job queue (42501)."""
    cl = owned
    with cl.connect("bob") as b:
        b.execute(f"CREATE TABLE bob.q (id int PRIMARY KEY, body text, e vector({DIM}))")
        b.execute("INSERT INTO bob.q VALUES (1, 'one')")
        bob_job = one(b, "SELECT tributary_job_create('bob.q', '{body}', 'e', mode => 'continuous')")
    tables = [r[0] for r in cl.su("""
        SELECT c.oid::regclass::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = 'tributary' AND c.relkind IN ('r', 'p')""")]
    assert "tributary.column_models" in tables and f"tributary._queue_{bob_job}" in tables
    with cl.connect("alice") as a:
        for t in tables:
            for sql in (f"LOCK TABLE {t} IN ACCESS EXCLUSIVE MODE", f"LOCK TABLE {t} IN ROW EXCLUSIVE MODE",
                        f"DELETE FROM {t}", f"INSERT INTO {t} DEFAULT VALUES", f"TRUNCATE {t}"):
                a.execute("BEGIN")
                got = sqlstate(a, sql)
                a.execute("ROLLBACK")
                assert got == "42501", f"{sql}: expected 42501, got {got or 'success'}"
        # Forgetting a column binding goes through tributary_forget_column, for owners only.
        expect(a, "SELECT tributary_forget_column('bob.q', 'e')", "42501")
    with cl.connect("bob") as b:
        assert one(b, "SELECT tributary_forget_column('bob.q', 'e')") is True
