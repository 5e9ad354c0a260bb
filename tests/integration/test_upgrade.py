"""ALTER EXTENSION tributary UPDATE from 0.1.0 (sql/versions/tributary--0.1.0.sql, the released
install script, installed beside the current one by scripts/setup.sh) with a registered model and
a running continuous job: the job goes on after the update, and the updated extension is the same,
object for object, as a fresh install of the current version.

Runs on the jobs cluster (TRIBUTARY_JOBS_DSN), in two databases of its own.
"""
import ast
import difflib
import os

from psycopg.conninfo import make_conninfo
import pytest

from jobwait import connect, wait_until

OLD = "0.1.0"
UPD, FRESH = "tributary_upgrade", "tributary_upgrade_fresh"

# Every member object of the extension, described by what defines it: functions by
# pg_get_functiondef (body, attributes, SET clauses), relations by their columns, constraints,
# indexes, options and view definitions, and every object's owner, privileges and comment. The
# extension's dumped configuration (pg_extension_config_dump) and version too.
DESCRIBE = r"""
WITH ext AS (SELECT oid, extconfig, extcondition, extversion, extrelocatable, extnamespace FROM pg_extension WHERE extname = 'tributary'),
members AS (
    SELECT d.classid, d.objid FROM pg_depend d, ext
    WHERE d.refclassid = 'pg_extension'::regclass AND d.refobjid = ext.oid AND d.deptype = 'e')
SELECT 'function ' || p.oid::regprocedure || E'\n' || pg_get_functiondef(p.oid)
       || E'\nowner ' || p.proowner::regrole || E'\nacl ' || coalesce(p.proacl::text, 'default')
       || E'\ncomment ' || coalesce(obj_description(p.oid, 'pg_proc'), '-')
FROM members m JOIN pg_proc p ON m.classid = 'pg_proc'::regclass AND p.oid = m.objid
UNION ALL
SELECT c.relkind::text || ' ' || c.oid::regclass
       || E'\ncolumns ' || coalesce((SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
              || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
              || coalesce(' default ' || pg_get_expr(ad.adbin, ad.adrelid), ''), ', ' ORDER BY a.attnum)
            FROM pg_attribute a LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
            WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped), '')
       || E'\nconstraints ' || coalesce((SELECT string_agg(conname || ' ' || pg_get_constraintdef(oid), '; ' ORDER BY conname)
            FROM pg_constraint WHERE conrelid = c.oid), '')
       || E'\nindexes ' || coalesce((SELECT string_agg(pg_get_indexdef(indexrelid), '; ' ORDER BY pg_get_indexdef(indexrelid))
            FROM pg_index WHERE indrelid = c.oid), '')
       || E'\ntriggers ' || coalesce((SELECT string_agg(pg_get_triggerdef(t.oid), '; ' ORDER BY tgname)
            FROM pg_trigger t WHERE tgrelid = c.oid AND NOT tgisinternal), '')
       || E'\noptions ' || coalesce(c.reloptions::text, '-') || ' rls ' || c.relrowsecurity
       || E'\nview ' || CASE WHEN c.relkind = 'v' THEN pg_get_viewdef(c.oid) ELSE '-' END
       || E'\nowner ' || c.relowner::regrole || E'\nacl ' || coalesce(c.relacl::text, 'default')
       || E'\ncolumn acls ' || coalesce((SELECT string_agg(attname || ' ' || attacl::text, ', ' ORDER BY attnum)
            FROM pg_attribute WHERE attrelid = c.oid AND attacl IS NOT NULL), '-')
       || E'\ncomment ' || coalesce(obj_description(c.oid, 'pg_class'), '-')
FROM members m JOIN pg_class c ON m.classid = 'pg_class'::regclass AND c.oid = m.objid
UNION ALL
SELECT pg_describe_object(m.classid, m.objid, 0)
       || E'\ncomment ' || coalesce(obj_description(m.objid, m.classid::regclass::name), '-')
FROM members m WHERE m.classid NOT IN ('pg_proc'::regclass, 'pg_class'::regclass)
UNION ALL
SELECT 'extension ' || extversion || ' relocatable ' || extrelocatable || ' schema ' || extnamespace::regnamespace
       || E'\nconfig ' || coalesce((SELECT string_agg(x::regclass::text || ' ' || coalesce(w, '-'), '; ' ORDER BY x::regclass::text)
            FROM unnest(extconfig, extcondition) AS u(x, w)), '-')
FROM ext
ORDER BY 1
"""


@pytest.fixture(scope="module")
def env():
    dsn = os.environ.get("TRIBUTARY_JOBS_DSN")
    if not dsn:
        pytest.fail("TRIBUTARY_JOBS_DSN is not set: run these through scripts/test.sh")
    with connect(dsn) as c:
        for name in (UPD, FRESH):
            c.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            c.execute(f"CREATE DATABASE {name}")
        current = c.execute("SELECT default_version FROM pg_available_extensions WHERE name = 'tributary'").fetchone()[0]
        versions = {r[0] for r in c.execute("SELECT version FROM pg_available_extension_versions WHERE name = 'tributary'")}
    assert OLD in versions, f"tributary {OLD} is not installed beside {current}: scripts/setup.sh copies sql/versions/"
    assert current != OLD
    yield {"dsn": dsn, "current": current}
    with connect(dsn) as c:
        for name in (UPD, FRESH):
            c.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def db(env, name):
    return connect(make_conninfo(env["dsn"], dbname=name))


def job(c, job_id):
    cur = c.execute("SELECT * FROM tributary.jobs WHERE id = %s", (job_id,))
    return dict(zip([d.name for d in cur.description], cur.fetchone()))


def test_update_from_0_1_0(env):
    with db(env, UPD) as c:
        c.execute(f"CREATE EXTENSION tributary VERSION '{OLD}' CASCADE")
        # A model registered under 0.1.0 (the default model's files under another name).
        path = c.execute("SELECT path FROM tributary.models WHERE name = 'all-MiniLM-L6-v2'").fetchone()[0]
        c.execute("SELECT tributary_register_model('minilm-registered', %s)", (path,))
        c.execute("CREATE TABLE notes (id int PRIMARY KEY, body text, e vector(384))")
        c.execute("INSERT INTO notes VALUES (1, 'zebra'), (2, 'apple'), (3, 'car engine')")
        jid = c.execute("SELECT tributary_job_create('notes', '{body}', 'e', model => 'minilm-registered', "
                        "mode => 'continuous')").fetchone()[0]
        wait_until(lambda j: job(c, j), jid, lambda j: j["rows_done"] == 3 and j["rows_queued"] == 0, 120, "0.1.0 job caught up")

        c.execute("ALTER EXTENSION tributary UPDATE")
        assert c.execute("SELECT extversion FROM pg_extension WHERE extname = 'tributary'").fetchone()[0] == env["current"]
        assert c.execute("SELECT count(*) FROM tributary.models WHERE name = 'minilm-registered'").fetchone()[0] == 1
        # The 0.1.0 job runs the current version's statements (rebuilt by the update), and follows
        # a rename made after it.
        stale = c.execute("SELECT count(*) FROM tributary._jobs j, tributary._job_build(j) b "
                          "WHERE (j.claim_sql, j.select_sql, j.write_sql, j.enqueue_sql) "
                          "IS DISTINCT FROM (b.claim_sql, b.select_sql, b.write_sql, b.enqueue_sql)").fetchone()[0]
        assert stale == 0, f"{stale} job(s) kept the statements of {OLD}"
        c.execute("ALTER TABLE notes RENAME COLUMN body TO content")
        c.execute("ALTER TABLE notes RENAME COLUMN content TO body")

        # The job goes on: new and changed rows are embedded by the updated extension.
        c.execute("INSERT INTO notes VALUES (4, 'banana bread'), (5, 'violin')")
        c.execute("UPDATE notes SET body = 'glacier' WHERE id = 1")
        j = wait_until(lambda j: job(c, j), jid, lambda j: j["rows_done"] == 6 and j["rows_queued"] == 0, 180, "job caught up after the update")
        assert j["state"] == "running"
        worst, missing = c.execute("SELECT min(1 - (e <=> tributary_embed(body, 'minilm-registered'))), "
                                   "count(*) FILTER (WHERE e IS NULL) FROM notes").fetchone()
        assert missing == 0 and worst > 0.9999, (worst, missing)
        # A new job under the new version.
        c.execute("CREATE TABLE more (id int PRIMARY KEY, body text, e vector(384))")
        c.execute("INSERT INTO more VALUES (1, 'oak tree'), (2, 'red wine')")
        new = c.execute("SELECT tributary_job_create('more', '{body}', 'e')").fetchone()[0]
        wait_until(lambda j: job(c, j), new, lambda j: j["state"] == "done", 180, "new job done")
        # A predictor (0.9.0) trained and applied in the updated database, over the rows embedded
        # by the job made under 0.1.0.
        c.execute("ALTER TABLE notes ADD COLUMN kind text, ADD COLUMN guess text")
        c.execute("UPDATE notes SET kind = CASE WHEN id % 2 = 0 THEN 'even' ELSE 'odd' END WHERE id < 5")
        c.execute("SELECT * FROM tributary_train('upd_p', 'notes', 'kind', 'e', algorithm => 'logistic')")
        assert c.execute("SELECT training_rows FROM tributary.predictors WHERE name = 'upd_p'").fetchone()[0] == 4
        assert c.execute("SELECT tributary_predict_column('upd_p', 'guess')").fetchone()[0] == 1
        updated = [r[0] for r in c.execute(DESCRIBE)]

    with db(env, FRESH) as c:
        c.execute("CREATE EXTENSION tributary CASCADE")
        fresh = [r[0] for r in c.execute(DESCRIBE)]

    if updated != fresh:
        diff = "\n".join(difflib.unified_diff(fresh, updated, "fresh install", "updated from " + OLD, lineterm="", n=1))
        pytest.fail("the updated extension differs from a fresh install:\n" + diff[:20000])


def test_a_wait_loop_reads_the_jobs_view_across_the_update(env):
    """A wait loop's `SELECT * FROM tributary.jobs WHERE id = %s`, run more than five times
    (psycopg then prepares it on the server) on one connection made as the tests make theirs,
    before and after ALTER EXTENSION tributary UPDATE, which changes the view's columns: every
    read works (a prepared one failed with "cached plan must not change result type", 0A000).
    The update runs on another connection: psycopg 3.3 forgets its prepared statements after an
    ALTER on their own connection, psycopg 3.2 (Debian trixie's) only after a DROP."""
    name = "tributary_upgrade_poll"
    with connect(env["dsn"]) as c:
        c.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        c.execute(f"CREATE DATABASE {name}")
    try:
        with db(env, name) as c, db(env, name) as poll:
            c.execute(f"CREATE EXTENSION tributary VERSION '{OLD}' CASCADE")
            c.execute("CREATE TABLE notes (id int PRIMARY KEY, body text, e vector(384))")
            jid = c.execute("SELECT tributary_job_create('notes', '{body}', 'e')").fetchone()[0]
            before = [job(poll, jid) for _ in range(8)]
            c.execute("ALTER EXTENSION tributary UPDATE")
            after = [job(poll, jid) for _ in range(8)]
        assert [j["id"] for j in before + after] == [jid] * 16
        assert list(after[0]) != list(before[0]), "the update did not change tributary.jobs' columns"
    finally:
        with connect(env["dsn"]) as c:
            c.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def test_every_connection_of_the_tests_survives_ddl():
    """Every psycopg connection in tests/integration is made by jobwait.connect or passes
    prepare_threshold=None itself (see the test above): no statement is prepared on the server."""
    here = os.path.dirname(os.path.abspath(__file__))

    def from_psycopg(node):
        while isinstance(node, ast.Attribute):
            node = node.value
        return isinstance(node, ast.Name) and node.id == "psycopg"

    bad = []
    for name in sorted(f for f in os.listdir(here) if f.endswith(".py")):
        with open(os.path.join(here, name)) as f:
            tree = ast.parse(f.read(), name)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("psycopg") \
                    and any(a.name in ("connect", "Connection", "AsyncConnection") for a in node.names):
                bad.append(f"{name}:{node.lineno}: imports psycopg's connect or Connection")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr == "connect" and from_psycopg(node.func.value) \
                    and not any(k.arg == "prepare_threshold" and isinstance(k.value, ast.Constant) and k.value.value is None
                                for k in node.keywords):
                bad.append(f"{name}:{node.lineno}: psycopg connect without prepare_threshold=None")
    assert not bad, "connect through jobwait.connect:\n" + "\n".join(sorted(bad))


PREVIOUS = "0.9.0"


def test_matching_after_update_from_0_9_0(env):
    """tributary_match under 0.9.0 (the weighted mean and its threshold; 0.9.0 installed through
    the chain of update scripts from 0.1.0's), then ALTER EXTENSION UPDATE: the same call gives
    probabilities, min_precision and the explanation work, and the updated extension is the same
    as a fresh install."""
    name = "tributary_upgrade_090"
    with connect(env["dsn"]) as c:
        versions = {r[0] for r in c.execute("SELECT version FROM pg_available_extension_versions WHERE name = 'tributary'")}
        assert PREVIOUS in versions, f"tributary {PREVIOUS} cannot be installed (sql/versions/ and the update scripts)"
        c.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        c.execute(f"CREATE DATABASE {name}")
    try:
        with db(env, name) as c:
            # Through the chain explicitly: a full tributary--0.9.0.sql that an older install left
            # in the extension directory (a build with other functions) must not be used.
            c.execute("CREATE EXTENSION tributary VERSION '0.1.0' CASCADE")
            c.execute(f"ALTER EXTENSION tributary UPDATE TO '{PREVIOUS}'")
            c.execute("SET tributary.progress_interval = 0")
            c.execute("CREATE TABLE a (id int PRIMARY KEY, name text, city text, born text)")
            c.execute("CREATE TABLE b (id int PRIMARY KEY, name text, city text, born text)")
            c.execute("INSERT INTO a VALUES (1, 'margaret thompson', 'leeds', '1950-03-02'), "
                      "(2, 'rajesh kumar', 'york', '1971-11-30'), (3, 'lucia fernandez', 'bath', '1988-07-14'), "
                      "(4, 'henrik larsson', 'hull', '1966-01-09')")
            c.execute("INSERT INTO b VALUES (10, 'margret thompson', 'leeds', '1950-03-02'), "
                      "(11, 'kumar rajesh', 'york', '1971-11-30'), (12, 'gustav nilsson', 'ely', '1979-05-05'), "
                      "(13, 'lucia fernandes', 'bath', '1988-07-14')")
            before = c.execute("SELECT left_key, right_key FROM tributary_match('a', 'b', '{name,city,born}') "
                               "ORDER BY 1").fetchall()
            assert ("1", "10") in before
            c.execute("ALTER EXTENSION tributary UPDATE")
            assert c.execute("SELECT extversion FROM pg_extension WHERE extname = 'tributary'").fetchone()[0] == env["current"]
            c.execute("SET tributary.progress_interval = 0")
            after = c.execute("SELECT left_key, right_key, score, evidence FROM tributary_match('a', 'b', '{name,city,born}') "
                              "ORDER BY 1").fetchall()
            assert [(r[0], r[1]) for r in after] == [("1", "10"), ("2", "11"), ("3", "13")], after
            assert all(0.5 <= r[2] <= 1 and set(r[3]) == {"name", "city", "born"} for r in after), after
            e = c.execute("SELECT tributary_match_explain()").fetchone()[0]
            assert e["accepted"] == 3 and [x["column"] for x in e["columns"]] == ["name", "city", "born"], e
            strict = c.execute("SELECT count(*) FROM tributary_match('a', 'b', '{name,city,born}', min_precision => 0.99)").fetchone()[0]
            assert strict <= 3
            assert c.execute("SELECT count(*) FROM tributary_dedup('a', '{name,city,born}')").fetchone()[0] == 0
            updated = [r[0] for r in c.execute(DESCRIBE)]
        with db(env, FRESH) as c:
            c.execute("DROP EXTENSION IF EXISTS tributary CASCADE")
            c.execute("CREATE EXTENSION tributary CASCADE")
            fresh = [r[0] for r in c.execute(DESCRIBE)]
        if updated != fresh:
            diff = "\n".join(difflib.unified_diff(fresh, updated, "fresh install", "updated from " + PREVIOUS,
                                                  lineterm="", n=1))
            pytest.fail("the extension updated from 0.9.0 differs from a fresh install:\n" + diff[:20000])
    finally:
        with connect(env["dsn"]) as c:
            c.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def pjob(c, job_id):
    cur = c.execute("SELECT * FROM tributary.predict_jobs WHERE id = %s", (job_id,))
    return dict(zip([d.name for d in cur.description], cur.fetchone()))


def test_predictors_and_predict_jobs_after_update_from_0_11_0(env):
    """A predictor trained and a predict job made under 0.11.0's SQL (0.10.0 and its update to
    0.11.0), then ALTER EXTENSION UPDATE: the predictor predicts as before, one row through
    indexes, tributary_predict_column_online works, the old job (statement-level triggers) keeps its column
    current, and the updated extension is a fresh install. (Trained by this library: the crate's
    features are this version's; the SQL's time parts are off, and its options say so.)"""
    name = "tributary_upgrade_0110"
    with connect(env["dsn"]) as c:
        c.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        c.execute(f"CREATE DATABASE {name}")
    try:
        with db(env, name) as c:
            # Through the chain explicitly (as above).
            c.execute("CREATE EXTENSION tributary VERSION '0.1.0' CASCADE")
            c.execute("ALTER EXTENSION tributary UPDATE TO '0.11.0'")
            c.execute("SET tributary.progress_interval = 0")
            c.execute("""
                CREATE TABLE up_person (person_id int PRIMARY KEY, name text);
                CREATE TABLE up_ev (id int PRIMARY KEY, person_id int REFERENCES up_person, day int,
                                    note text, kind text, guess text, guess2 text);
                CREATE INDEX ON up_ev (person_id, day);
                INSERT INTO up_person SELECT p, 'person ' || p FROM generate_series(1, 40) p;
                INSERT INTO up_ev (id, person_id, day, note, kind)
                SELECT i, 1 + (i % 40), i / 8, 'event number ' || i,
                       CASE WHEN i % 5 = 0 THEN chr(97 + ((i / 40) % 4)) ELSE chr(97 + ((1 + (i % 40)) % 4)) END
                  FROM generate_series(1, 800) i;
                UPDATE up_ev SET kind = NULL WHERE day >= 95;
            """)
            c.execute("SELECT * FROM tributary_train('up_p', 'up_ev', 'kind', as_of => 'day')").fetchall()
            assert c.execute("SELECT options ->> 'time_parts' FROM tributary.predictors WHERE name = 'up_p'").fetchone()[0] == "false"
            old_job = c.execute("SELECT tributary_predict_job_create('up_p', 'guess')").fetchone()[0]
            wait_until(lambda i: pjob(c, i), old_job, lambda j: j["runs"] >= 1, 120, "the old job's first refresh")
            before = dict(c.execute("SELECT id, guess FROM up_ev WHERE kind IS NULL").fetchall())
            assert len(before) == 41 and all(before.values())

            c.execute("ALTER EXTENSION tributary UPDATE")
            assert c.execute("SELECT extversion FROM pg_extension WHERE extname = 'tributary'").fetchone()[0] == env["current"]
            c.execute("SET tributary.progress_interval = 0")
            # The same predictions, through tributary_predict_column and one row at a time.
            c.execute("SELECT tributary_predict_column('up_p', 'guess2')")
            assert dict(c.execute("SELECT id, guess2 FROM up_ev WHERE kind IS NULL").fetchall()) == before
            one = dict(c.execute("SELECT e.id, p.prediction FROM up_ev e, tributary_predict('up_p', e) p "
                                 "WHERE e.kind IS NULL").fetchall())
            assert one == before
            assert c.execute("SELECT tributary_predict_column_online('up_p', 'guess2')").fetchone()[0] == 800
            # The old job goes on (a new row, refreshed).
            runs = pjob(c, old_job)["runs"]
            c.execute("INSERT INTO up_ev (id, person_id, day, note) VALUES (801, 7, 101, 'event number 801')")
            wait_until(lambda i: pjob(c, i), old_job, lambda j: j["runs"] > runs, 120, "the old job after the update")
            wait_until(lambda i: c.execute("SELECT guess FROM up_ev WHERE id = 801").fetchone()[0], 801,
                       lambda g: g is not None, 60, "the new row's prediction")
            updated = [r[0] for r in c.execute(DESCRIBE)]
        with db(env, FRESH) as c:
            c.execute("DROP EXTENSION IF EXISTS tributary CASCADE")
            c.execute("CREATE EXTENSION tributary CASCADE")
            fresh = [r[0] for r in c.execute(DESCRIBE)]
        if updated != fresh:
            diff = "\n".join(difflib.unified_diff(fresh, updated, "fresh install", "updated from 0.11.0",
                                                  lineterm="", n=1))
            pytest.fail("the extension updated from 0.11.0 differs from a fresh install:\n" + diff[:20000])
    finally:
        with connect(env["dsn"]) as c:
            c.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
