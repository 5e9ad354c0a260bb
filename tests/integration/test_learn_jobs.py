"""Predict jobs (issue 35, point 4): tributary_predict_job_create(predictor, target) keeps a
column filled by the background workers with what tributary_predict_column(predictor, target)
would write then, refreshed after inserts into the table, changes of its rows (not of the target
alone), and changes of the rows its history reads (a parent table's, and labels of earlier
related rows); as the table's owner (a plain role), with the queue emptied and no refresh
triggered by the job's own writes; errors by SQLSTATE; drop removes the job and its triggers.

Runs on the jobs cluster (TRIBUTARY_JOBS_DSN: tributary in shared_preload_libraries), in a
database of its own.
"""
import os
import time

import psycopg
from psycopg.conninfo import make_conninfo
import pytest

from jobwait import connect, wait_setting, wait_until

DB = "tributary_learn_jobs"
OWNER, OTHER = "lj_owner", "lj_other"


@pytest.fixture(scope="module")
def env():
    dsn = os.environ.get("TRIBUTARY_JOBS_DSN")
    if not dsn:
        pytest.fail("TRIBUTARY_JOBS_DSN is not set: run these through scripts/test.sh")
    with connect(dsn) as c:
        c.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
        for r in (OWNER, OTHER):
            c.execute(f"DROP ROLE IF EXISTS {r}")
            c.execute(f"CREATE ROLE {r} LOGIN")
        c.execute(f"CREATE DATABASE {DB}")
    db = make_conninfo(dsn, dbname=DB)
    with connect(db) as c:
        c.execute("CREATE EXTENSION tributary CASCADE")
        c.execute(f"GRANT CREATE ON SCHEMA public TO {OWNER}, {OTHER}")
    yield {"su": db, "owner": make_conninfo(db, user=OWNER), "other": make_conninfo(db, user=OTHER)}
    with connect(dsn) as c:
        c.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
        for r in (OWNER, OTHER):
            c.execute(f"DROP ROLE IF EXISTS {r}")


def make_table(c):
    """Events of people (the parent), dated by day; a person's kinds repeat, so the history
    through person_id predicts the kind. Days 95.. are unlabelled. who_log records who wrote
    each change of `guess` (a trigger of the owner's)."""
    c.execute("""
        CREATE TABLE ev_person (person_id int PRIMARY KEY, name text);
        CREATE TABLE ev (id int PRIMARY KEY, person_id int REFERENCES ev_person, day int,
                         note text, kind text, guess text, copy text);
        INSERT INTO ev_person SELECT p, 'person ' || p FROM generate_series(1, 40) p;
        INSERT INTO ev (id, person_id, day, note, kind)
        SELECT i, 1 + (i % 40), i / 8, 'event number ' || i,
               CASE WHEN i % 5 = 0 THEN chr(97 + ((i / 40) % 4)) ELSE chr(97 + ((1 + (i % 40)) % 4)) END
          FROM generate_series(1, 800) i;
        UPDATE ev SET kind = NULL WHERE day >= 95;
        CREATE TABLE who_log (usr name, session_usr name, id int, guess text);
        CREATE FUNCTION log_guess() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO public.who_log VALUES (current_user, session_user, NEW.id, NEW.guess);
            RETURN NEW;
        END $$;
        CREATE TRIGGER log_guess BEFORE UPDATE ON ev FOR EACH ROW
            WHEN (OLD.guess IS DISTINCT FROM NEW.guess) EXECUTE FUNCTION log_guess();
    """)


def job(su, job_id):
    cur = su.execute("SELECT * FROM tributary.predict_jobs WHERE id = %s", (job_id,))
    row = cur.fetchone()
    return dict(zip([d.name for d in cur.description], row)) if row else None


def settled(su, job_id, timeout=180):
    """Waits until the job's queue is empty and no refresh is running (its row not locked)."""
    def read(j):
        r = job(su, j)
        # A refresh holds the job's row (FOR NO KEY UPDATE) until it commits.
        r["busy"] = su.execute("SELECT count(*) FROM tributary._predict_jobs WHERE id = %s AND id NOT IN "
                               "(SELECT id FROM tributary._predict_jobs FOR NO KEY UPDATE SKIP LOCKED)",
                               (j,)).fetchone()[0]
        return r
    return wait_until(read, job_id, lambda j: j["state"] != "active" or (j["pending"] == 0 and j["busy"] == 0),
                      timeout, "an empty queue")


def fresh_equals_job(owner):
    """tributary_predict_column into `copy` now, as the owner: the job's `guess` is the same."""
    owner.execute("UPDATE ev SET copy = NULL")
    owner.execute("SELECT tributary_predict_column('p', 'copy')")
    return owner.execute("SELECT count(*) FILTER (WHERE guess IS DISTINCT FROM copy), count(*), count(guess) "
                         "FROM ev WHERE kind IS NULL").fetchone()


def test_predict_job_keeps_the_column_current(env):
    with connect(env["su"]) as su, connect(env["owner"]) as owner:
        make_table(owner)
        owner.execute("SELECT * FROM tributary_train('p', 'ev', 'kind', as_of => 'day')").fetchall()
        job_id = owner.execute("SELECT tributary_predict_job_create('p', 'guess')").fetchone()[0]
        # Triggers on the table and on its parent.
        assert sorted(r[0] for r in su.execute(
            "SELECT tgrelid::regclass::text FROM pg_trigger WHERE tgname = %s", (f"tributary_predict_{job_id}",))) \
            == ["ev", "ev_person"]

        # The first refresh fills the unlabelled rows there now.
        j = wait_until(lambda i: job(su, i), job_id, lambda j: j["runs"] >= 1 or j["state"] != "active",
                       120, "the first refresh")
        assert j["state"] == "active" and j["last_error"] is None, j
        assert j["rows_done"] == 41, j
        settled(su, job_id)
        diff, n, filled = fresh_equals_job(owner)
        assert (diff, n, filled) == (0, 41, 41)

        # A new unlabelled row: its guess is filled, equal to predict_column's.
        settled(su, job_id)
        before = job(su, job_id)
        owner.execute("INSERT INTO ev (id, person_id, day, note) VALUES (801, 7, 101, 'event number 801')")
        j = wait_until(lambda i: job(su, i), job_id,
                       lambda j: j["runs"] > before["runs"] or j["state"] != "active", 120, "a refresh after the insert")
        assert j["state"] == "active" and j["last_run_at"] > before["last_run_at"], j
        assert owner.execute("SELECT guess FROM ev WHERE id = 801").fetchone()[0] is not None
        settled(su, job_id)
        diff, n, filled = fresh_equals_job(owner)
        assert (diff, n, filled) == (0, 42, 42)

        # A label of earlier related rows changes: the later unlabelled row of that person is
        # refreshed to what predict_column says now: another class than before. A person the
        # predictor never saw (its name and key are no words the text model knows), whose five
        # rows after training are all 'b': only its history speaks, then says 'c'.
        settled(su, job_id)
        owner.execute("INSERT INTO ev_person VALUES (41, 'person 41')")
        owner.execute("INSERT INTO ev (id, person_id, day, note, kind) "
                      "SELECT 801 + d, 41, 95 + d, 'event number ' || (801 + d), 'b' FROM generate_series(1, 5) d")
        before = job(su, job_id)
        owner.execute("INSERT INTO ev (id, person_id, day, note) VALUES (807, 41, 101, 'event number 807')")
        wait_until(lambda i: job(su, i), job_id, lambda j: j["runs"] > before["runs"], 120, "a refresh after the insert")
        settled(su, job_id)
        assert owner.execute("SELECT guess FROM ev WHERE id = 807").fetchone()[0] == "b"
        before = job(su, job_id)
        owner.execute("UPDATE ev SET kind = 'c' WHERE person_id = 41 AND kind IS NOT NULL")
        j = wait_until(lambda i: job(su, i), job_id,
                       lambda j: j["runs"] > before["runs"] or j["state"] != "active", 120, "a refresh after the label change")
        assert j["state"] == "active" and j["last_run_at"] > before["last_run_at"], j
        settled(su, job_id)
        assert owner.execute("SELECT guess FROM ev WHERE id = 807").fetchone()[0] == "c"
        diff, n, filled = fresh_equals_job(owner)
        assert (diff, n, filled) == (0, 43, 43)

        # A change of the parent table refreshes too.
        settled(su, job_id)
        before = job(su, job_id)
        owner.execute("UPDATE ev_person SET name = 'someone' WHERE person_id = 3")
        wait_until(lambda i: job(su, i), job_id, lambda j: j["runs"] > before["runs"], 120, "a refresh after the parent's change")

        # The job's own writes (guess only) queue nothing: the queue stays empty, no more refreshes.
        settled(su, job_id)
        quiet = job(su, job_id)
        time.sleep(4)   # four poll intervals
        after = job(su, job_id)
        assert (after["runs"], after["pending"]) == (quiet["runs"], 0), (quiet, after)
        assert su.execute("SELECT count(*) FROM tributary._predict_dirty").fetchone()[0] == 0

        # Every write of guess was the worker's (session: the bootstrap superuser) as the owner.
        who = su.execute("SELECT DISTINCT usr, session_usr FROM who_log").fetchall()
        assert who == [(OWNER, "postgres")], who

        # Drop: the job and its triggers go, the predictions stay.
        owner.execute("SELECT tributary_predict_job_drop(%s)", (job_id,))
        assert job(su, job_id) is None
        assert su.execute("SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'tributary_predict_%'").fetchone()[0] == 0
        assert owner.execute("SELECT count(guess) FROM ev WHERE kind IS NULL").fetchone()[0] == 43


def test_predict_job_errors(env):
    with connect(env["su"]) as su, connect(env["owner"]) as owner, connect(env["other"]) as other:
        if su.execute("SELECT to_regclass('public.ev') IS NULL").fetchone()[0]:
            make_table(owner)
        if not su.execute("SELECT EXISTS (SELECT 1 FROM tributary.predictors WHERE name = 'p')").fetchone()[0]:
            owner.execute("SELECT * FROM tributary_train('p', 'ev', 'kind', as_of => 'day')").fetchall()

        def sqlstate(conn, sql, args=()):
            try:
                conn.execute(sql, args)
            except psycopg.Error as e:
                return e.sqlstate
            return None

        assert sqlstate(owner, "SELECT tributary_predict_job_create('nope', 'guess')") == "42704"
        assert sqlstate(owner, "SELECT tributary_predict_job_create('p', 'kind')") == "22023"
        assert sqlstate(owner, "SELECT tributary_predict_job_create('p', 'no_such')") == "42703"
        assert sqlstate(owner, "SELECT tributary_predict_job_create(NULL, 'guess')") == "22004"
        # Not the table's owner (nor a member of it).
        owner.execute(f"GRANT SELECT ON ev TO {OTHER}")
        assert sqlstate(other, "SELECT tributary_predict_job_create('p', 'guess')") == "42501"
        # The table's owner that may not use the predictor (another role's, label not readable).
        owner.execute(f"REVOKE SELECT ON ev FROM {OTHER}")
        su.execute("CREATE TABLE ev_su AS SELECT * FROM ev")
        su.execute(f"ALTER TABLE ev_su OWNER TO {OWNER}")
        owner.execute(f"REVOKE SELECT ON ev_su FROM {OWNER}")
        su.execute("SELECT * FROM tributary_train('p_su', 'ev_su', 'kind', as_of => 'day')").fetchall()
        assert sqlstate(owner, "SELECT tributary_predict_job_create('p_su', 'guess')") == "42501"

        j = owner.execute("SELECT tributary_predict_job_create('p', 'guess')").fetchone()[0]
        assert sqlstate(owner, "SELECT tributary_predict_job_create('p', 'guess')") == "42710"
        # Only the table's owner (or a member) sees and drops it.
        assert other.execute("SELECT count(*) FROM tributary.predict_jobs").fetchone()[0] == 0
        assert sqlstate(other, "SELECT tributary_predict_job_drop(%s)", (j,)) == "42704"
        assert sqlstate(other, "SELECT count(*) FROM tributary._predict_jobs") == "42501"
        owner.execute("SELECT tributary_predict_job_drop(%s)", (j,))
        assert sqlstate(owner, "SELECT tributary_predict_job_drop(%s)", (j,)) == "42704"


def test_refresh_interrupted_or_failing(env):
    """A refresh ended mid-way (the worker terminated) leaves its queue: the next worker runs it
    again. A failing refresh is recorded, retried, and fails the job after job_max_attempts."""
    with connect(env["su"]) as su, connect(env["owner"]) as owner:
        owner.execute("DROP TABLE IF EXISTS ev, ev_person, ev_su, who_log CASCADE")
        owner.execute("DROP FUNCTION IF EXISTS log_guess()")
        for p in ("p", "p_su"):
            su.execute("SELECT tributary_drop_predictor(%s)", (p,))
        make_table(owner)
        # What the refresh's write meets: nothing, a 30 s sleep, or an error.
        owner.execute("""
            CREATE TABLE mode (m text);
            INSERT INTO mode VALUES ('none');
            CREATE FUNCTION slow_or_fail() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF (SELECT m FROM public.mode) = 'slow' THEN PERFORM pg_sleep(30); END IF;
                IF (SELECT m FROM public.mode) = 'fail' THEN RAISE EXCEPTION 'refresh refused'; END IF;
                RETURN NULL;
            END $$;
            CREATE TRIGGER slow_or_fail AFTER UPDATE OF guess ON ev FOR EACH STATEMENT EXECUTE FUNCTION slow_or_fail();
        """)
        owner.execute("SELECT * FROM tributary_train('p', 'ev', 'kind', as_of => 'day')").fetchall()
        job_id = owner.execute("SELECT tributary_predict_job_create('p', 'guess')").fetchone()[0]
        wait_until(lambda i: job(su, i), job_id, lambda j: j["runs"] >= 1, 120, "the first refresh")
        settled(su, job_id)

        # Terminated mid-refresh: nothing committed, the queue stays, a new worker runs it.
        owner.execute("UPDATE mode SET m = 'slow'")
        before = job(su, job_id)
        owner.execute("INSERT INTO ev (id, person_id, day, note) VALUES (801, 7, 101, 'event number 801')")
        deadline = time.monotonic() + 120
        while True:
            pid = su.execute("SELECT pid FROM pg_stat_activity WHERE backend_type = 'tributary worker' "
                             "AND wait_event = 'PgSleep' AND datname = current_database()").fetchone()
            if pid:
                break
            assert time.monotonic() < deadline, "no refresh started"
            time.sleep(0.2)
        owner.execute("UPDATE mode SET m = 'none'")
        su.execute("SELECT pg_terminate_backend(%s)", (pid[0],))
        j = job(su, job_id)
        assert j["runs"] == before["runs"] and j["pending"] >= 1, j
        j = wait_until(lambda i: job(su, i), job_id, lambda j: j["runs"] > before["runs"], 120,
                       "the refresh again, by another worker")
        settled(su, job_id)
        assert owner.execute("SELECT guess FROM ev WHERE id = 801").fetchone()[0] is not None
        diff, n, filled = fresh_equals_job(owner)
        assert (diff, n, filled) == (0, 42, 42)

        # Failing: recorded, retried, failed after tributary.job_max_attempts (2 here).
        settled(su, job_id)
        su.execute("ALTER SYSTEM SET tributary.job_max_attempts = 2")
        su.execute("SELECT pg_reload_conf()")
        try:
            wait_setting(env["su"], "tributary.job_max_attempts", "2")
            time.sleep(0.5)   # the idle worker, woken by the reload's signal, reads it at its next loop
            owner.execute("UPDATE mode SET m = 'fail'")
            before = job(su, job_id)
            owner.execute("INSERT INTO ev (id, person_id, day, note) VALUES (802, 8, 101, 'event number 802')")
            j = wait_until(lambda i: job(su, i), job_id, lambda j: j["state"] == "failed", 120, "the job failed")
            assert j["attempts"] == 2 and j["runs"] == before["runs"], j
            assert "refresh refused" in j["last_error"] and "P0001" in j["last_error"], j
            assert j["pending"] >= 1, j            # what it could not refresh stays queued
            # A failed job queues nothing more, and the worker leaves it alone.
            pending = j["pending"]
            owner.execute("UPDATE mode SET m = 'none'")
            owner.execute("UPDATE ev SET note = 'changed' WHERE id = 802")
            time.sleep(3)
            j = job(su, job_id)
            assert (j["state"], j["pending"], j["runs"]) == ("failed", pending, before["runs"]), j
        finally:
            su.execute("ALTER SYSTEM RESET tributary.job_max_attempts")
            su.execute("SELECT pg_reload_conf()")
        owner.execute("SELECT tributary_predict_job_drop(%s)", (job_id,))
        assert su.execute("SELECT count(*) FROM tributary._predict_dirty").fetchone()[0] == 0


def test_a_change_refreshes_only_the_rows_it_reaches(env):
    """With a one-column primary key the job's triggers queue the changed rows, and a refresh
    predicts only the unlabelled rows they reach: the row itself, and the rows sharing a history
    group with it that are later in as_of (through indexes). After inserts, a label change and a
    delete, rows_done grew by exactly those rows, and every prediction is what
    tributary_predict_column would write now."""
    with connect(env["su"]) as su, connect(env["owner"]) as owner:
        owner.execute("DROP TABLE IF EXISTS ev_tag, ev_tagname, ev, ev_person, ev_su, who_log, mode CASCADE")
        owner.execute("DROP FUNCTION IF EXISTS log_guess(), slow_or_fail()")
        for p in ("p", "p_su"):
            su.execute("SELECT tributary_drop_predictor(%s)", (p,))
        make_table(owner)
        owner.execute("CREATE INDEX ON ev (person_id, day)")
        # A link table of ev: events tagged, tags shared.
        owner.execute("""
            CREATE TABLE ev_tagname (tag_id int PRIMARY KEY, name text);
            INSERT INTO ev_tagname SELECT g, 'tag ' || g FROM generate_series(1, 20) g;
            CREATE TABLE ev_tag (id int REFERENCES ev, tag_id int REFERENCES ev_tagname, PRIMARY KEY (id, tag_id));
            CREATE INDEX ON ev_tag (tag_id);
            INSERT INTO ev_tag SELECT i, 1 + i % 20 FROM generate_series(1, 700) i;
        """)
        owner.execute("SELECT * FROM tributary_train('p', 'ev', 'kind', as_of => 'day')").fetchall()
        assert "ev_tag.tag_id:count" in owner.execute("SELECT features FROM tributary.predictors WHERE name = 'p'").fetchone()[0]
        job_id = owner.execute("SELECT tributary_predict_job_create('p', 'guess')").fetchone()[0]
        assert sorted(r[0] for r in su.execute(
            "SELECT tgname FROM pg_trigger WHERE tgrelid = 'ev_tag'::regclass AND tgname LIKE %s",
            (f"tributary_predict_{job_id}%",))) == [f"tributary_predict_{job_id}", f"tributary_predict_{job_id}_delete",
                                                  f"tributary_predict_{job_id}_insert", f"tributary_predict_{job_id}_update"]
        assert sorted(r[0] for r in su.execute(
            "SELECT tgname FROM pg_trigger WHERE tgrelid = 'ev'::regclass AND tgname LIKE %s",
            (f"tributary_predict_{job_id}%",))) == [f"tributary_predict_{job_id}", f"tributary_predict_{job_id}_delete",
                                                  f"tributary_predict_{job_id}_insert", f"tributary_predict_{job_id}_update"]
        wait_until(lambda i: job(su, i), job_id, lambda j: j["runs"] >= 1 or j["state"] != "active", 120, "the first refresh")
        settled(su, job_id)
        assert job(su, job_id)["rows_done"] == 41

        def change(sql, reached, what):
            # (fresh_equals_job's writes of `copy` are changes too: their refresh first.)
            settled(su, job_id)
            before = job(su, job_id)
            owner.execute(sql)
            j = wait_until(lambda i: job(su, i), job_id,
                           lambda j: j["runs"] > before["runs"] or j["state"] != "active", 120, what)
            settled(su, job_id)
            j = job(su, job_id)
            assert j["state"] == "active" and j["last_error"] is None, j
            assert j["rows_done"] - before["rows_done"] == reached, (what, j["rows_done"] - before["rows_done"], reached)
            diff, n, filled = fresh_equals_job(owner)
            assert diff == 0 and n == filled, (what, diff, n, filled)

        # A new unlabelled row of person 7 (the latest of its rows): that row alone.
        change("INSERT INTO ev (id, person_id, day, note) VALUES (801, 7, 101, 'event number 801')", 1, "an insert")
        # An earlier label of person 7 (event 406, day 50, tag 7): the later unlabelled rows of
        # person 7 (766 and 801) and of tag 7.
        reached = owner.execute("""
            SELECT count(*) FROM ev x WHERE x.kind IS NULL AND x.day > 50
               AND (x.person_id = 7 OR x.id IN (SELECT id FROM ev_tag WHERE tag_id = 7))
        """).fetchone()[0]
        assert reached >= 2
        change("UPDATE ev SET kind = 'a' WHERE id = 406", reached, "a label change")
        # A deleted labelled row of person 8 without tags (event 727, day 90): its later
        # unlabelled row, 767.
        change("DELETE FROM ev WHERE id = 727", 1, "a delete")
        # A new link (event 801 tagged 3): 801 itself (no later rows share its person or tags).
        change("INSERT INTO ev_tag VALUES (801, 3)", 1, "a link")
        # A link of an earlier labelled row (event 600, day 75, tagged 4 now): the later unlabelled
        # rows sharing its person or one of its tags.
        reached = owner.execute("""
            SELECT count(*) FROM ev x WHERE x.kind IS NULL AND x.day > 75
               AND (x.person_id = (SELECT person_id FROM ev WHERE id = 600)
                    OR x.id IN (SELECT id FROM ev_tag WHERE tag_id IN (SELECT tag_id FROM ev_tag WHERE id = 600 UNION SELECT 4)))
        """).fetchone()[0]
        change("INSERT INTO ev_tag VALUES (600, 4)", reached, "a link of an earlier row")
        # A change of another column (event 1's note, person 2, day 0): the later unlabelled rows
        # of person 2; the job's own writes queue nothing.
        reached = owner.execute("""
            SELECT count(*) FROM ev x WHERE x.kind IS NULL AND x.day > 0
               AND (x.person_id = 2 OR x.id IN (SELECT id FROM ev_tag WHERE tag_id IN (SELECT tag_id FROM ev_tag WHERE id = 1)))
        """).fetchone()[0]
        change("UPDATE ev SET note = 'changed' WHERE id = 1", reached, "another column")
        settled(su, job_id)
        assert job(su, job_id)["pending"] == 0
        owner.execute("SELECT tributary_predict_job_drop(%s)", (job_id,))
        assert su.execute("SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'tributary_predict_%'").fetchone()[0] == 0
