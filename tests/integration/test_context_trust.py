"""Children and link-table context is read only from trusted tables (issue 34, item 3).

A role holding only REFERENCES on ann's table can make a table that references it; reading that
table as context would run its owner's code (a row-level security policy) as the reader. Context
tables are read only when owned by the row table's owner or by a role the reader is a member of,
unless `include` names them (`table.*`); others are left out silently.

Needs TRIBUTARY_TEST_DSN (a plain cluster) or TRIBUTARY_JOBS_DSN (tributary in
shared_preload_libraries); the job test needs TRIBUTARY_JOBS_DSN and is skipped without it.
Runs as a superuser plus the roles ctx_ann and ctx_mal, made (and dropped) here.
"""
import os
import time

import pytest

import jobwait

DIM = 384  # all-MiniLM-L6-v2
ROLES = ("ctx_ann", "ctx_mal")


def connect(dsn, role=None):
    return jobwait.connect(dsn, **({"user": role} if role else {}))


def reset(dsn):
    with connect(dsn) as c:
        for role in ROLES:
            if c.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
                c.execute(f"DROP OWNED BY {role} CASCADE")
                c.execute(f"DROP ROLE {role}")


def setup_tables(dsn):
    """ctx_ann.people (id, name, secret) with her own child table visits; ctx_mal.notes
    references it, with row-level security whose policy copies people's secrets (and who ran it)
    into ctx_mal.loot."""
    reset(dsn)
    with connect(dsn) as c:
        c.execute("CREATE EXTENSION IF NOT EXISTS tributary CASCADE")
        for role in ROLES:
            c.execute(f"CREATE ROLE {role} LOGIN")
            c.execute(f"CREATE SCHEMA {role} AUTHORIZATION {role}")
    with connect(dsn, "ctx_ann") as a:
        a.execute("CREATE TABLE ctx_ann.people (id int PRIMARY KEY, name text, secret text, e vector(%s))" % DIM)
        a.execute("INSERT INTO ctx_ann.people VALUES (1, 'Ann Lee', 'the vault code is 4711'), (2, 'Bo Ng', 'bo secret')")
        a.execute("CREATE TABLE ctx_ann.visits (id int PRIMARY KEY, people_id int REFERENCES ctx_ann.people, place text)")
        a.execute("INSERT INTO ctx_ann.visits VALUES (1, 1, 'the lighthouse museum')")
        a.execute("GRANT USAGE ON SCHEMA ctx_ann TO ctx_mal")
        a.execute("GRANT REFERENCES ON ctx_ann.people TO ctx_mal")
    with connect(dsn, "ctx_mal") as m:
        m.execute("CREATE TABLE ctx_mal.loot (who name, secret text)")
        m.execute("GRANT INSERT ON ctx_mal.loot TO PUBLIC")
        m.execute("""CREATE FUNCTION ctx_mal.steal() RETURNS boolean LANGUAGE plpgsql AS $$ BEGIN
            INSERT INTO ctx_mal.loot VALUES (current_user, NULL);
            BEGIN
                INSERT INTO ctx_mal.loot SELECT current_user, p.secret FROM ctx_ann.people p;
            EXCEPTION WHEN insufficient_privilege THEN NULL;
            END;
            RETURN true; END $$""")
        m.execute("GRANT EXECUTE ON FUNCTION ctx_mal.steal() TO PUBLIC")
        m.execute("CREATE TABLE ctx_mal.notes (id int PRIMARY KEY, people_id int REFERENCES ctx_ann.people, note text)")
        m.execute("INSERT INTO ctx_mal.notes VALUES (1, 1, 'planted note about the harbour')")
        m.execute("ALTER TABLE ctx_mal.notes ENABLE ROW LEVEL SECURITY")
        m.execute("CREATE POLICY p ON ctx_mal.notes USING (ctx_mal.steal())")
        m.execute("GRANT USAGE ON SCHEMA ctx_mal TO PUBLIC")
        m.execute("GRANT SELECT ON ctx_mal.notes TO PUBLIC")


def loot(dsn):
    with connect(dsn) as c:
        return c.execute("SELECT who, secret FROM ctx_mal.loot").fetchall()


def clear_loot(dsn):
    with connect(dsn) as c:
        c.execute("TRUNCATE ctx_mal.loot")


@pytest.fixture(scope="module")
def main_dsn():
    dsn = os.environ.get("TRIBUTARY_TEST_DSN") or os.environ.get("TRIBUTARY_JOBS_DSN")
    if not dsn:
        pytest.fail("TRIBUTARY_TEST_DSN (or TRIBUTARY_JOBS_DSN) is not set: run these through scripts/test.sh")
    setup_tables(dsn)
    yield dsn
    reset(dsn)


ROW_TEXT = "SELECT tributary_row_text(p, children => 5{extra}) FROM ctx_ann.people p WHERE id = 1"


def test_row_text_leaves_out_a_stranger_s_child_table(main_dsn):
    """ann's text of her row: her own visits appear, mal's notes do not, mal's policy never ran."""
    clear_loot(main_dsn)
    with connect(main_dsn, "ctx_ann") as a:
        text = a.execute(ROW_TEXT.format(extra="")).fetchone()[0]
    assert "lighthouse museum" in text, text
    assert "harbour" not in text and "notes" not in text, text
    assert loot(main_dsn) == [], "mal's policy ran inside ann's call"


def test_superuser_is_not_trusting_either(main_dsn):
    """A superuser is a member of every role, but that does not make mal's table trusted."""
    clear_loot(main_dsn)
    with connect(main_dsn) as c:
        text = c.execute(ROW_TEXT.format(extra="")).fetchone()[0]
        c.execute("SELECT tributary_embed(p, children => 5) FROM ctx_ann.people p WHERE id = 1").fetchone()
    assert "lighthouse museum" in text and "harbour" not in text, text
    assert loot(main_dsn) == [], "mal's policy ran inside a superuser's call"


def test_embed_row_and_embed_column_leave_it_out(main_dsn):
    clear_loot(main_dsn)
    with connect(main_dsn, "ctx_ann") as a:
        a.execute("SELECT tributary_embed(p, children => 5) FROM ctx_ann.people p")
        a.execute("UPDATE ctx_ann.people SET e = NULL")
        n = a.execute("SELECT tributary_embed_column('ctx_ann.people', '{*}', 'e', children => 5)").fetchone()[0]
        assert n == 2
        # The vector is that of the text without mal's rows.
        same = a.execute("SELECT (e <=> tributary_embed(p, children => 5)) < 1e-5 FROM ctx_ann.people p WHERE id = 1").fetchone()[0]
    assert same
    assert loot(main_dsn) == [], "mal's policy ran inside ann's embed"


def test_include_names_a_table_to_read_it(main_dsn):
    """Named in include (`notes.*` or `ctx_mal.notes.*`), mal's table is read (its policy runs:
    ann asked for it), and the row's own columns are all still there."""
    for entry in ("notes.*", "ctx_mal.notes.*"):
        clear_loot(main_dsn)
        with connect(main_dsn, "ctx_ann") as a:
            text = a.execute(ROW_TEXT.format(extra=", include => %s"), ([entry],)).fetchone()[0]
        assert "harbour" in text and "lighthouse museum" in text and "Ann Lee" in text, (entry, text)
        assert loot(main_dsn), "reading the named table ran its policy"
    with connect(main_dsn, "ctx_ann") as a:
        text = a.execute(ROW_TEXT.format(extra=", include => %s"), (["name", "notes.*"],)).fetchone()[0]
        assert "Ann Lee" in text and "harbour" in text and "vault code" not in text, text
        text = a.execute(ROW_TEXT.format(extra=", include => %s"), (["other.notes.*"],)).fetchone()[0]
        assert "harbour" not in text, text


def test_member_of_the_owner_is_trusted(main_dsn):
    """A child table owned by a role the reader is a member of is read."""
    clear_loot(main_dsn)
    with connect(main_dsn) as c:
        c.execute("GRANT ctx_mal TO ctx_ann")
    try:
        with connect(main_dsn, "ctx_ann") as a:
            text = a.execute(ROW_TEXT.format(extra="")).fetchone()[0]
        assert "harbour" in text, text
    finally:
        with connect(main_dsn) as c:
            c.execute("REVOKE ctx_mal FROM ctx_ann")


@pytest.fixture(scope="module")
def jobs_dsn():
    dsn = os.environ.get("TRIBUTARY_JOBS_DSN")
    if not dsn:
        pytest.skip("TRIBUTARY_JOBS_DSN is not set (a cluster with tributary in shared_preload_libraries)")
    setup_tables(dsn)
    with connect(dsn) as c:
        c.execute("ALTER SYSTEM SET tributary.job_poll_interval = 200")
        c.execute("SELECT pg_reload_conf()")
    yield dsn
    reset(dsn)


def test_job_worker_never_runs_a_stranger_s_code(jobs_dsn):
    """A whole-row job with children on ann's table: the worker (acting as ann) embeds every row,
    reads her own visits and never mal's notes."""
    clear_loot(jobs_dsn)
    with connect(jobs_dsn, "ctx_ann") as a:
        a.execute("UPDATE ctx_ann.people SET e = NULL")
        job_id = a.execute("SELECT tributary_job_create('ctx_ann.people', '{*}', 'e', children => 5)").fetchone()[0]
    deadline = time.monotonic() + 120
    with connect(jobs_dsn) as c:
        while True:
            state, done = c.execute("SELECT state, rows_done FROM tributary.jobs WHERE id = %s", (job_id,)).fetchone()
            if state in ("done", "failed") or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert (state, done) == ("done", 2), (state, done)
    with connect(jobs_dsn, "ctx_ann") as a:
        same = a.execute("SELECT (e <=> tributary_embed(p, children => 5)) < 1e-5 FROM ctx_ann.people p WHERE id = 1").fetchone()[0]
        a.execute("SELECT tributary_job_drop(%s)", (job_id,))
    assert same
    assert loot(jobs_dsn) == [], "mal's policy ran inside the job's worker"
