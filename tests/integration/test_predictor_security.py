"""Predictors keep to what each role may see, and run no other role's code (issue 46, items 1, 3,
4 and the lows of 5 in tributary_train, tributary_predict_column, tributary_predict and predict
jobs). Each test fails on 0.10.0:

- row-level security: a role that a policy shows part of the rows neither sees nor uses a
  predictor trained on all of them (42501 with the reason in the DETAIL; the view shows it
  nothing); a role that sees every row (row security off, BYPASSRLS) does;
- a predict job is bound to its predictor's table and owner: retrained on another table, or made
  again by another role, the job fails with last_error and writes nothing;
- a link table of another role is no history path unless named, and its policy never runs as
  the trainer; a predict job puts no trigger on another role's table;
- an overload of tributary_predict_column in the extension's schema does not break (42725) the
  refreshes of predict jobs;
- a cast that a type's owner made never runs during training or prediction;
- the lows: a sequence or a view as tbl (42809), an anonymous ROW(...) or another table's row
  (42804), an unknown as_of (42703), an infinite date (a missing value), a 1 MB predictor name
  (42622, short message), a 1 MB history name (a short message).

Runs on the main test cluster (TRIBUTARY_TEST_DSN) and, for predict jobs, on the jobs cluster
(TRIBUTARY_JOBS_DSN), each in a database of its own.
"""
import os

import psycopg
from psycopg.conninfo import make_conninfo
import pytest

from jobwait import connect, wait_until

DB = "tributary_predictor_security"
ROLES = ("ps_alice", "ps_bob", "ps_carol", "ps_tenant")


def make_db(base):
    with connect(base) as c:
        c.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
        for r in ROLES:
            c.execute(f"DROP ROLE IF EXISTS {r}")
            c.execute(f"CREATE ROLE {r} LOGIN")
        c.execute(f"CREATE DATABASE {DB}")
    db = make_conninfo(base, dbname=DB)
    with connect(db) as c:
        c.execute("CREATE EXTENSION tributary CASCADE")
        for r in ROLES:
            c.execute(f"CREATE SCHEMA {r} AUTHORIZATION {r}")
            c.execute(f"GRANT USAGE ON SCHEMA {r} TO PUBLIC")
    return db


def drop_db(base):
    with connect(base) as c:
        c.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
        for r in ROLES:
            c.execute(f"DROP ROLE IF EXISTS {r}")


@pytest.fixture(scope="module")
def main(dsn):
    db = make_db(dsn)
    yield {r: make_conninfo(db, user=r) for r in ROLES} | {"su": db}
    drop_db(dsn)


@pytest.fixture(scope="module")
def jobs():
    base = os.environ.get("TRIBUTARY_JOBS_DSN")
    if not base:
        pytest.fail("TRIBUTARY_JOBS_DSN is not set: run these through scripts/test.sh")
    db = make_db(base)
    yield {r: make_conninfo(db, user=r) for r in ROLES} | {"su": db}
    drop_db(base)


def events(c, t, label="kind"):
    """Table `t` (in the connection's role's schema) of 800 events of 40 people: a person's
    events are mostly one kind ('a'..'d'), so the history through person_id predicts it; dated
    by day; `guess` is a target. Rows with days >= 95 are unlabelled."""
    c.execute(f"""
        CREATE TABLE {t}_person (person_id int PRIMARY KEY, name text, age int);
        CREATE TABLE {t} (id int PRIMARY KEY, person_id int REFERENCES {t}_person, day int,
                          note text, {label} text, guess text);
        INSERT INTO {t}_person SELECT p, 'person ' || p, 20 + p FROM generate_series(1, 40) p;
        INSERT INTO {t} (id, person_id, day, note, {label})
        SELECT i, 1 + (i % 40), i / 8, 'event number ' || i,
               CASE WHEN i % 5 = 0 THEN chr(97 + ((i / 40) % 4)) ELSE chr(97 + ((1 + (i % 40)) % 4)) END
          FROM generate_series(1, 800) i;
        UPDATE {t} SET {label} = NULL WHERE day >= 95;
    """)


def train(c, name, tbl, **kw):
    args = ", ".join([f"'{name}'", f"'{tbl}'", "'kind'", *(f"{k} => {v}" for k, v in kw.items())])
    return c.execute(f"SELECT method, accuracy FROM tributary_train({args})").fetchall()


def size(e):
    """The length of an error's message, DETAIL and HINT together."""
    return sum(len(x or "") for x in (e.diag.message_primary, e.diag.message_detail, e.diag.message_hint))


def fails(c, sql, sqlstate, args=None):
    with pytest.raises(psycopg.Error) as e:
        c.execute(sql, args)
    assert e.value.sqlstate == sqlstate, (sql, e.value.sqlstate, str(e.value)[:300])
    return e.value


# ---------------------------------------------------------------------------------------------
# Item 3: row-level security.

def test_a_role_that_rls_shows_part_of_the_rows_neither_sees_nor_uses_the_predictor(main):
    with connect(main["ps_alice"]) as a:
        events(a, "ps_alice.sec")
        # A class only rows hidden from bob have.
        a.execute("UPDATE ps_alice.sec SET kind = 'topsecret' WHERE id % 7 = 0 AND kind IS NOT NULL")
        a.execute("ALTER TABLE ps_alice.sec ENABLE ROW LEVEL SECURITY")
        a.execute("CREATE POLICY visible ON ps_alice.sec FOR SELECT USING (kind IS DISTINCT FROM 'topsecret')")
        a.execute("GRANT SELECT ON ps_alice.sec, ps_alice.sec_person TO ps_bob, ps_carol")
        a.execute("GRANT UPDATE (guess) ON ps_alice.sec TO ps_bob, ps_carol")
        train(a, "sec_p", "ps_alice.sec", as_of="'day'", algorithm="'logistic'")
        assert "topsecret" in a.execute("SELECT classes FROM tributary.predictors WHERE name = 'sec_p'").fetchone()[0]
    with connect(main["ps_bob"]) as b:
        # Bob sees 5/6 of the labelled rows: no trace of the predictor.
        assert b.execute("SELECT count(*) FROM tributary.predictors WHERE name = 'sec_p'").fetchone()[0] == 0
        e = fails(b, "SELECT p.* FROM ps_alice.sec s, tributary_predict('sec_p', s) p WHERE s.id = 1", "42501")
        assert "Row-level security" in (e.diag.message_detail or "") and "sec" in e.diag.message_detail, e.diag.message_detail
        assert e.diag.message_hint, e
        fails(b, "SELECT tributary_predict_column('sec_p', 'guess')", "42501")
        assert b.execute("SELECT count(*) FROM ps_alice.sec WHERE guess IS NOT NULL").fetchone()[0] == 0
    with connect(main["su"]) as su:
        su.execute("ALTER ROLE ps_carol BYPASSRLS")
    try:
        # A role that sees every row (BYPASSRLS) sees and uses it.
        with connect(main["ps_carol"]) as c:
            assert c.execute("SELECT count(*) FROM tributary.predictors WHERE name = 'sec_p'").fetchone()[0] == 1
            assert c.execute("SELECT p.prediction FROM ps_alice.sec s, tributary_predict('sec_p', s) p "
                             "WHERE s.id = 790").fetchone()[0] is not None
    finally:
        with connect(main["su"]) as su:
            su.execute("ALTER ROLE ps_carol NOBYPASSRLS")
    # Row security off: bob sees every row, and so the predictor.
    with connect(main["ps_alice"]) as a:
        a.execute("ALTER TABLE ps_alice.sec DISABLE ROW LEVEL SECURITY")
    with connect(main["ps_bob"]) as b:
        assert b.execute("SELECT count(*) FROM tributary.predictors WHERE name = 'sec_p'").fetchone()[0] == 1
        assert b.execute("SELECT tributary_predict_column('sec_p', 'guess')").fetchone()[0] > 0
    # A table its features read (the parent, for person_id.name's text) with row security:
    # hidden again, the DETAIL names that table.
    with connect(main["ps_alice"]) as a:
        a.execute("ALTER TABLE ps_alice.sec_person ENABLE ROW LEVEL SECURITY")
        a.execute("CREATE POLICY few ON ps_alice.sec_person USING (person_id < 30)")
    with connect(main["ps_bob"]) as b:
        assert b.execute("SELECT count(*) FROM tributary.predictors WHERE name = 'sec_p'").fetchone()[0] == 0
        e = fails(b, "SELECT tributary_predict_column('sec_p', 'guess')", "42501")
        assert "sec_person" in (e.diag.message_detail or ""), e.diag.message_detail
    # The owner is not bound by the rule.
    with connect(main["ps_alice"]) as a:
        assert a.execute("SELECT count(*) FROM tributary.predictors WHERE name = 'sec_p'").fetchone()[0] == 1
        assert a.execute("SELECT tributary_predict_column('sec_p', 'guess')").fetchone()[0] > 0


# ---------------------------------------------------------------------------------------------
# Item 4: history paths follow the owner rule of child context.

def test_a_link_table_of_another_role_is_no_history_path_and_its_policy_never_runs(main):
    with connect(main["ps_alice"]) as a:
        events(a, "ps_alice.ln")
        a.execute("CREATE TABLE ps_alice.ln_tag (tag_id int PRIMARY KEY)")
        a.execute("INSERT INTO ps_alice.ln_tag SELECT g FROM generate_series(0, 3) g")
        a.execute("GRANT REFERENCES ON ps_alice.ln, ps_alice.ln_tag TO ps_bob")
    with connect(main["ps_bob"]) as b:
        # Bob's link table, with a policy that records who reads it.
        b.execute("""
            CREATE TABLE ps_bob.spy_log (usr name);
            GRANT INSERT ON ps_bob.spy_log TO PUBLIC;
            CREATE FUNCTION ps_bob.spy(int) RETURNS boolean LANGUAGE plpgsql AS $$
            BEGIN INSERT INTO ps_bob.spy_log VALUES (current_user); RETURN true; END $$;
            CREATE TABLE ps_bob.ln_link (id int REFERENCES ps_alice.ln, tag_id int REFERENCES ps_alice.ln_tag);
            INSERT INTO ps_bob.ln_link SELECT i, i % 4 FROM generate_series(1, 800) i;
            ALTER TABLE ps_bob.ln_link ENABLE ROW LEVEL SECURITY;
            CREATE POLICY spying ON ps_bob.ln_link USING (ps_bob.spy(id));
            GRANT SELECT ON ps_bob.ln_link TO ps_alice;
        """)
    with connect(main["ps_alice"]) as a:
        paths = a.execute("SELECT tributary._learn_spec('ps_alice.ln', 'kind', NULL, 'day', NULL, NULL) -> 'paths'").fetchone()[0]
        assert "ln_link.tag_id" not in paths and "person_id" in paths, paths
        notices = []
        a.add_notice_handler(lambda d: notices.append(d.message_primary))
        train(a, "ln_p", "ps_alice.ln", as_of="'day'", algorithm="'logistic'")
        assert any("ln_link" in n and "other roles" in n for n in notices), notices
        assert "ln_link.tag_id" not in a.execute("SELECT options -> 'history' FROM tributary.predictors "
                                                 "WHERE name = 'ln_p'").fetchone()[0]
        a.execute("SELECT tributary_predict_column('ln_p', 'guess')")
        a.execute("SELECT p.* FROM ps_alice.ln s, tributary_predict('ln_p', s) p WHERE s.id = 799")
    with connect(main["ps_bob"]) as b:
        assert b.execute("SELECT count(*) FROM ps_bob.spy_log WHERE usr = 'ps_alice'").fetchone()[0] == 0
    # Named, it is read (the trainer's choice), and kept for the predictor's later use.
    with connect(main["ps_alice"]) as a:
        train(a, "ln_q", "ps_alice.ln", as_of="'day'", history="'{ln_link.tag_id}'", columns="'{-guess}'",
              algorithm="'logistic'")
        assert a.execute("SELECT options -> 'history', options -> 'named' FROM tributary.predictors "
                         "WHERE name = 'ln_q'").fetchone() == (["ln_link.tag_id"], ["ln_link.tag_id"])
        a.execute("SELECT tributary_predict_column('ln_q', 'guess')")


# ---------------------------------------------------------------------------------------------
# Item 1: no cast a type's owner made runs as the caller.

def test_no_cast_of_a_type_owner_runs_in_training_or_prediction(main):
    with connect(main["ps_tenant"]) as t:
        t.execute("""
            CREATE TABLE ps_tenant.cast_log (usr name, what text);
            GRANT INSERT ON ps_tenant.cast_log TO PUBLIC;
            CREATE TYPE ps_tenant.mood AS ENUM ('happy', 'sad', 'calm', 'cross');
            CREATE FUNCTION ps_tenant.mood_txt(m ps_tenant.mood) RETURNS text LANGUAGE plpgsql
                SET search_path = pg_catalog AS $f$
            BEGIN
                INSERT INTO ps_tenant.cast_log VALUES (current_user, 'text');
                RETURN pg_catalog.textin(pg_catalog.enum_out(m));
            END $f$;
            CREATE FUNCTION ps_tenant.mood_json(m ps_tenant.mood) RETURNS json LANGUAGE plpgsql
                SET search_path = pg_catalog AS $f$
            BEGIN
                INSERT INTO ps_tenant.cast_log VALUES (current_user, 'json');
                RETURN pg_catalog.to_json(pg_catalog.textin(pg_catalog.enum_out(m)));
            END $f$;
            CREATE FUNCTION ps_tenant.mood_in(s text) RETURNS ps_tenant.mood LANGUAGE plpgsql
                SET search_path = pg_catalog AS $f$
            DECLARE r ps_tenant.mood;
            BEGIN
                INSERT INTO ps_tenant.cast_log VALUES (current_user, 'from text');
                EXECUTE pg_catalog.format('SELECT %L::ps_tenant.mood', s) INTO r;
                RETURN r;
            END $f$;
            CREATE CAST (ps_tenant.mood AS text) WITH FUNCTION ps_tenant.mood_txt(ps_tenant.mood);
            CREATE CAST (ps_tenant.mood AS json) WITH FUNCTION ps_tenant.mood_json(ps_tenant.mood);
            CREATE CAST (text AS ps_tenant.mood) WITH FUNCTION ps_tenant.mood_in(text);
            CREATE TABLE ps_tenant.moody (id int PRIMARY KEY, day int, weather ps_tenant.mood,
                                          mood ps_tenant.mood, guess ps_tenant.mood);
            -- The mood follows the weather's mood, one row in ten otherwise.
            INSERT INTO ps_tenant.moody (id, day, weather, mood)
            SELECT i, i, (ARRAY['happy', 'sad', 'calm', 'cross'])[1 + i % 4]::ps_tenant.mood,
                   (ARRAY['happy', 'sad', 'calm', 'cross'])[1 + (i + (i % 10 = 0)::int) % 4]::ps_tenant.mood
              FROM generate_series(1, 400) i;
            UPDATE ps_tenant.moody SET mood = NULL WHERE id > 360;
        """)
        t.execute("DELETE FROM ps_tenant.cast_log")
    with connect(main["su"]) as su:
        rows = su.execute("SELECT method, accuracy FROM tributary_train('moody_p', 'ps_tenant.moody', 'mood', "
                          "as_of => 'day', algorithm => 'logistic')").fetchall()
        assert rows, rows
        assert su.execute("SELECT tributary_predict_column('moody_p', 'guess')").fetchone()[0] == 40
        assert su.execute("SELECT count(*) FROM ps_tenant.moody WHERE guess = weather AND id > 360").fetchone()[0] >= 25
        su.execute("SELECT p.* FROM ps_tenant.moody m, tributary_predict('moody_p', m) p WHERE m.id > 390")
        assert su.execute("SELECT usr, what, count(*) FROM ps_tenant.cast_log GROUP BY 1, 2").fetchall() == []


# ---------------------------------------------------------------------------------------------
# Lows (item 5).

@pytest.fixture(scope="module")
def lows(main):
    """ps_alice.lw (events), a sequence and a view beside it, and predictor lw_p over it."""
    with connect(main["ps_alice"]) as a:
        events(a, "ps_alice.lw")
        a.execute("CREATE SEQUENCE ps_alice.lw_seq")
        a.execute("CREATE VIEW ps_alice.lw_view AS SELECT * FROM ps_alice.lw")
        train(a, "lw_p", "ps_alice.lw", as_of="'day'", algorithm="'logistic'")
    return main


def test_a_sequence_or_a_view_is_no_table(lows):
    with connect(lows["ps_alice"]) as a:
        e = fails(a, "SELECT * FROM tributary_train('lw_s', 'ps_alice.lw_seq', 'last_value')", "42809")
        assert "sequence" in (e.diag.message_detail or ""), e
        e = fails(a, "SELECT * FROM tributary_train('lw_v', 'ps_alice.lw_view', 'kind')", "42809")
        assert "view" in (e.diag.message_detail or ""), e


def test_an_unknown_as_of_is_42703(lows):
    with connect(lows["ps_alice"]) as a:
        e = fails(a, "SELECT * FROM tributary_train('lw_a', 'ps_alice.lw', 'kind', as_of => 'no_such_day')", "42703")
        assert "no_such_day" in str(e)


def test_names_of_a_megabyte_make_short_messages(lows):
    with connect(lows["ps_alice"]) as a:
        e = fails(a, "SELECT * FROM tributary_train(repeat('p', 1000000), 'ps_alice.lw', 'kind')", "42622")
        assert size(e) < 300, size(e)
        e = fails(a, "SELECT * FROM tributary_train('lw_h', 'ps_alice.lw', 'kind', history => ARRAY[repeat('h', 1000000)])",
                  "22023")
        assert size(e) < 1000, size(e)
        e = fails(a, "SELECT tributary_predict_column(repeat('p', 1000000), 'guess')", "42704")
        assert size(e) < 300, size(e)


def test_tributary_predict_takes_rows_of_the_predictors_table_only(lows):
    with connect(lows["ps_alice"]) as a:
        e = fails(a, "SELECT * FROM tributary_predict('lw_p', ROW(1, 2, 3, 'x', NULL, NULL))", "42804")
        assert "lw" in str(e) and "record" in str(e), e
        e = fails(a, "SELECT p.* FROM ps_alice.lw_person o, tributary_predict('lw_p', o) p LIMIT 1", "42804")
        assert "lw_person" in str(e), e
        # The table's own rows and ROW(...)::table work.
        assert a.execute("SELECT p.prediction FROM ps_alice.lw s, tributary_predict('lw_p', s) p "
                         "WHERE s.id = 799").fetchone()[0] is not None
        assert a.execute("SELECT prediction FROM tributary_predict('lw_p', "
                         "ROW(9001, 3, 99, 'new', NULL, NULL)::ps_alice.lw)").fetchone()[0] is not None


def test_an_infinite_date_is_a_missing_value(main):
    with connect(main["ps_alice"]) as a:
        events(a, "ps_alice.inf")
        a.execute("ALTER TABLE ps_alice.inf ADD COLUMN seen date, ADD COLUMN at timestamptz")
        a.execute("UPDATE ps_alice.inf SET seen = date '2020-01-01' + id, at = timestamptz '2020-01-01' + id * interval '1 hour'")
        a.execute("UPDATE ps_alice.inf SET seen = 'infinity', at = '-infinity' WHERE id = 17")
        rows = dict(train(a, "inf_p", "ps_alice.inf", as_of="'day'", algorithm="'gbdt'"))
        assert rows["predictor"] is not None, rows
        cols = a.execute("SELECT options -> 'columns' FROM tributary.predictors WHERE name = 'inf_p'").fetchone()[0]
        assert "seen" in cols and "at" in cols, cols
        assert a.execute("SELECT tributary_predict_column('inf_p', 'guess')").fetchone()[0] > 0


# ---------------------------------------------------------------------------------------------
# Predict jobs (item 4 and the 42725 low), on the jobs cluster.

def job(su, job_id):
    cur = su.execute("SELECT * FROM tributary.predict_jobs WHERE id = %s", (job_id,))
    row = cur.fetchone()
    return dict(zip([d.name for d in cur.description], row)) if row else None


def first_refresh(su, job_id):
    return wait_until(lambda i: job(su, i), job_id,
                      lambda j: j["runs"] >= 1 or j["attempts"] >= 1 or j["state"] != "active", 60, "the first refresh")


def settled(su, job_id):
    return wait_until(lambda i: job(su, i), job_id,
                      lambda j: j["state"] != "active" or j["pending"] == 0, 60, "an empty queue")


def test_a_predict_job_is_bound_to_its_predictors_table_and_owner(jobs):
    with connect(jobs["su"]) as su, connect(jobs["ps_alice"]) as a:
        events(a, "ps_alice.bd")
        events(a, "ps_alice.bd2")
        train(a, "bd_p", "ps_alice.bd", as_of="'day'", algorithm="'logistic'")
        job_id = a.execute("SELECT tributary_predict_job_create('bd_p', 'guess')").fetchone()[0]
        j = first_refresh(su, job_id)
        assert j["runs"] == 1 and j["last_error"] is None, j
        settled(su, job_id)
        # Retrained on another table: the job writes nothing there and fails.
        train(a, "bd_p", "ps_alice.bd2", as_of="'day'", algorithm="'logistic'")
        a.execute("UPDATE ps_alice.bd SET note = note || '.' WHERE id = 1")
        j = wait_until(lambda i: job(su, i), job_id, lambda j: j["state"] != "active" or j["attempts"] > 0,
                       60, "the refresh after the retrain")
        assert j["state"] == "failed" and "bd2" in (j["last_error"] or "") and "trained on" in j["last_error"], j
        assert a.execute("SELECT count(*) FROM ps_alice.bd2 WHERE guess IS NOT NULL").fetchone()[0] == 0
        a.execute("SELECT tributary_predict_job_drop(%s)", (job_id,))

    # A predictor of the same name made by another role (drop, then train again).
    with connect(jobs["su"]) as su, connect(jobs["ps_alice"]) as a:
        a.execute("GRANT SELECT ON ps_alice.bd, ps_alice.bd_person TO ps_bob")
        # (guess holds the first job's predictions by now: no feature)
        train(a, "bd_q", "ps_alice.bd", as_of="'day'", columns="'{-guess}'", algorithm="'logistic'")
        job_id = a.execute("SELECT tributary_predict_job_create('bd_q', 'guess')").fetchone()[0]
        j = first_refresh(su, job_id)
        assert j["runs"] == 1 and j["last_error"] is None, j["last_error"]
        settled(su, job_id)
        a.execute("UPDATE ps_alice.bd SET guess = NULL")    # the target alone: queues nothing
        a.execute("SELECT tributary_drop_predictor('bd_q')")
        with connect(jobs["ps_bob"]) as b:
            train(b, "bd_q", "ps_alice.bd", as_of="'day'", algorithm="'gbdt'")
        a.execute("UPDATE ps_alice.bd SET note = note || '.' WHERE id = 2")
        j = wait_until(lambda i: job(su, i), job_id, lambda j: j["state"] != "active" or j["attempts"] > 0,
                       60, "the refresh after the new predictor")
        assert j["state"] == "failed" and "ps_bob" in (j["last_error"] or ""), j
        assert a.execute("SELECT count(*) FROM ps_alice.bd WHERE guess IS NOT NULL").fetchone()[0] == 0
        a.execute("SELECT tributary_predict_job_drop(%s)", (job_id,))


def test_a_predict_job_puts_no_trigger_on_another_roles_table(jobs):
    with connect(jobs["su"]) as su, connect(jobs["ps_alice"]) as a:
        events(a, "ps_alice.tg")
        a.execute("CREATE TABLE ps_alice.tg_tag (tag_id int PRIMARY KEY)")
        a.execute("INSERT INTO ps_alice.tg_tag SELECT g FROM generate_series(0, 3) g")
        a.execute("GRANT REFERENCES ON ps_alice.tg, ps_alice.tg_tag TO ps_bob")
        with connect(jobs["ps_bob"]) as b:
            b.execute("CREATE TABLE ps_bob.tg_link (id int REFERENCES ps_alice.tg, tag_id int REFERENCES ps_alice.tg_tag)")
            b.execute("INSERT INTO ps_bob.tg_link SELECT i, i % 4 FROM generate_series(1, 800) i")
            b.execute("GRANT SELECT ON ps_bob.tg_link TO ps_alice")
        train(a, "tg_p", "ps_alice.tg", as_of="'day'", algorithm="'logistic'")
        notices = []
        a.add_notice_handler(lambda d: notices.append(d.message_primary))
        job_id = a.execute("SELECT tributary_predict_job_create('tg_p', 'guess')").fetchone()[0]
        on = sorted(r[0] for r in su.execute("SELECT tgrelid::regclass::text FROM pg_trigger WHERE tgname = %s",
                                             (f"tributary_predict_{job_id}",)))
        assert on == ["ps_alice.tg", "ps_alice.tg_person"], on
        assert any("tg_link" in n and "does not watch" in n for n in notices), notices
        j = first_refresh(su, job_id)
        assert j["runs"] == 1 and j["last_error"] is None, j
        a.execute("SELECT tributary_predict_job_drop(%s)", (job_id,))


def test_an_overload_in_the_extensions_schema_breaks_no_refresh(jobs):
    with connect(jobs["su"]) as su:
        su.execute("GRANT CREATE ON SCHEMA public TO ps_bob")
        with connect(jobs["ps_bob"]) as b:
            b.execute("""
                CREATE TABLE ps_bob.calls (usr name);
                GRANT INSERT ON ps_bob.calls TO PUBLIC;
                CREATE FUNCTION public.tributary_predict_column(predictor text, target name,
                                                                batch_size integer DEFAULT 1000, extra integer DEFAULT 0)
                RETURNS bigint LANGUAGE plpgsql AS $$
                BEGIN INSERT INTO ps_bob.calls VALUES (current_user); RETURN 0; END $$;
            """)
        try:
            with connect(jobs["ps_alice"]) as a:
                events(a, "ps_alice.ov")
                train(a, "ov_p", "ps_alice.ov", as_of="'day'", algorithm="'logistic'")
                job_id = a.execute("SELECT tributary_predict_job_create('ov_p', 'guess')").fetchone()[0]
                j = first_refresh(su, job_id)
                assert j["runs"] == 1 and j["last_error"] is None and j["rows_done"] == 41, j
                assert a.execute("SELECT count(guess) FROM ps_alice.ov WHERE kind IS NULL").fetchone()[0] == 41
                a.execute("SELECT tributary_predict_job_drop(%s)", (job_id,))
            assert su.execute("SELECT count(*) FROM ps_bob.calls").fetchone()[0] == 0
        finally:
            su.execute("DROP FUNCTION IF EXISTS public.tributary_predict_column(text, name, integer, integer)")
            su.execute("REVOKE CREATE ON SCHEMA public FROM ps_bob")
