"""tributary_embed_column pipelined (tributary.pipeline, src/service/pipeline.rs): the next rows
read and the last vectors written while the model runs on another thread. On by default on a GPU
only; `on` forces it on the CPU provider, which is how these tests reach it on a machine
without a GPU. Also the split of a call's time in tributary.sessions (read_ms, write_ms,
shapes) and tributary.gpu_max_batch_tokens' guard.

Needs TRIBUTARY_TEST_DSN (scripts/test.sh sets it to a throwaway cluster's database).
"""
import threading
import time

import psycopg
import pytest

from jobwait import connect


def make_table(conn, name, rows, nulls=True):
    conn.execute(f"DROP TABLE IF EXISTS {name}")
    conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, body text, n int, e vector(384))")
    # Lengths from a few tokens to past the window, some NULL texts (never embedded).
    conn.execute(
        f"INSERT INTO {name} SELECT g, CASE WHEN %s AND g %% 17 = 0 THEN NULL "
        "ELSE repeat('word' || g || ' ', 1 + (g * 37) %% 90) END, g FROM generate_series(1, %s) g",
        (nulls, rows),
    )


def vectors(conn, name):
    return conn.execute(f"SELECT id, e::text FROM {name} ORDER BY id").fetchall()


def max_diff(a, b):
    assert [r[0] for r in a] == [r[0] for r in b]
    worst = 0.0
    for (_, x), (_, y) in zip(a, b):
        assert (x is None) == (y is None)
        if x is None:
            continue
        xs = [float(v) for v in x.strip("[]").split(",")]
        ys = [float(v) for v in y.strip("[]").split(",")]
        worst = max(worst, max(abs(p - q) for p, q in zip(xs, ys)))
    return worst


@pytest.mark.parametrize("columns", ["ARRAY['body']", "'{*}'"])
def test_pipelined_writes_what_the_sequential_loop_writes(dsn, columns):
    with connect(dsn) as c:
        # One table (a whole row's text names its table): sequential first, then pipelined.
        make_table(c, "pipe_same", 300)
        c.execute("SET tributary.pipeline = off")
        n_seq = c.execute(f"SELECT tributary_embed_column('pipe_same', {columns}, 'e', NULL, 32)").fetchone()[0]
        sequential = vectors(c, "pipe_same")
        c.execute("UPDATE pipe_same SET e = NULL")
        c.execute("SET tributary.pipeline = on")
        n_par = c.execute(f"SELECT tributary_embed_column('pipe_same', {columns}, 'e', NULL, 32)").fetchone()[0]
        assert n_seq == n_par
        expected = 300 if columns == "'{*}'" else 300 - 300 // 17
        assert n_par == expected
        assert c.execute("SELECT count(*) FROM pipe_same WHERE e IS NOT NULL").fetchone()[0] == expected
        # The same rows, the same vectors (batches are cut the same way; float noise only).
        assert max_diff(sequential, vectors(c, "pipe_same")) < 1e-5


def test_sessions_show_the_split_and_the_session_comes_back(dsn):
    with connect(dsn) as c:
        make_table(c, "pipe_split", 200)
        c.execute("SET tributary.pipeline = on")
        c.execute("SELECT tributary_embed_column('pipe_split', ARRAY['body'], 'e', NULL, 50)")
        rows = c.execute(
            "SELECT count(*), sum(read_ms), sum(write_ms), sum(run_ms), sum(shapes), sum(rows) "
            "FROM tributary.sessions WHERE model = 'all-MiniLM-L6-v2'"
        ).fetchone()
        count, read_ms, write_ms, run_ms, shapes, nrows = rows
        # The session lent to the model thread was put back, not replaced by a second one.
        assert count == 1
        assert read_ms > 0 and write_ms > 0 and run_ms > 0
        assert shapes > 0 and nrows >= 200 - 200 // 17
        # The sequential loop reports its split too.
        c.execute("SET tributary.pipeline = off")
        c.execute("UPDATE pipe_split SET e = NULL")
        c.execute("SELECT tributary_embed_column('pipe_split', ARRAY['body'], 'e', NULL, 50)")
        read2, write2 = c.execute(
            "SELECT read_ms, write_ms FROM tributary.sessions WHERE model = 'all-MiniLM-L6-v2'"
        ).fetchone()
        assert read2 > read_ms and write2 > write_ms


def test_a_trigger_that_embeds_during_the_pipelined_writes(dsn):
    """The UPDATE of each batch fires a trigger that embeds too, while the call's session is
    lent to the model thread: the trigger gets a session of its own, nothing waits on itself."""
    with connect(dsn) as c:
        make_table(c, "pipe_trig", 120, nulls=False)
        c.execute("ALTER TABLE pipe_trig ADD COLUMN e2 vector(384)")
        c.execute(
            # tributary's statements run with search_path = pg_catalog, pg_temp: the trigger's
            # function sets its own.
            "CREATE FUNCTION pipe_trig_fn() RETURNS trigger LANGUAGE plpgsql "
            "SET search_path = public AS $$ BEGIN "
            "NEW.e2 := tributary_embed(NEW.body); RETURN NEW; END $$"
        )
        c.execute("CREATE TRIGGER t BEFORE UPDATE ON pipe_trig FOR EACH ROW EXECUTE FUNCTION pipe_trig_fn()")
        c.execute("SET tributary.pipeline = on")
        c.execute("SET statement_timeout = '300s'")
        n = c.execute("SELECT tributary_embed_column('pipe_trig', ARRAY['body'], 'e', NULL, 40)").fetchone()[0]
        assert n == 120
        worst = c.execute("SELECT max(e <-> e2) FROM pipe_trig").fetchone()[0]
        assert worst < 1e-3, worst
        # One session again once the call is over (the trigger's, or the call's put back).
        assert c.execute("SELECT count(*) FROM tributary.sessions").fetchone()[0] >= 1


def test_truncation_error_in_a_pipelined_batch_writes_nothing(dsn):
    with connect(dsn) as c:
        make_table(c, "pipe_trunc", 150, nulls=False)
        c.execute("SET tributary.pipeline = on")
        c.execute("SET tributary.truncation = error")
        with pytest.raises(psycopg.Error) as err:
            c.execute("SELECT tributary_embed_column('pipe_trunc', ARRAY['body'], 'e', NULL, 20)")
        assert err.value.sqlstate == "22001"
        assert c.execute("SELECT count(*) FROM pipe_trunc WHERE e IS NOT NULL").fetchone()[0] == 0
        # The backend goes on: the session is usable.
        c.execute("RESET tributary.truncation")
        assert c.execute("SELECT tributary_embed('still here') IS NOT NULL").fetchone()[0]


def test_cancel_stops_a_pipelined_call(dsn):
    with connect(dsn) as setup:
        make_table(setup, "pipe_cancel", 4000, nulls=False)
    with connect(dsn) as worker, connect(dsn) as ctl:
        pid = worker.execute("SELECT pg_backend_pid()").fetchone()[0]
        worker.execute("SELECT tributary_embed('warm up')")
        worker.execute("SET tributary.pipeline = on")
        outcome = {}

        def run():
            try:
                worker.execute("SELECT tributary_embed_column('pipe_cancel', ARRAY['body'], 'e', NULL, 64)")
                outcome["error"] = None
            except psycopg.Error as e:
                outcome["error"] = e
            outcome["ended"] = time.monotonic()

        th = threading.Thread(target=run)
        th.start()
        time.sleep(2.0)
        assert ctl.execute("SELECT state FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()[0] == "active"
        cancelled_at = time.monotonic()
        assert ctl.execute("SELECT pg_cancel_backend(%s)", (pid,)).fetchone()[0]
        th.join(120)
        assert not th.is_alive(), "the pipelined call did not stop after pg_cancel_backend"
        err = outcome["error"]
        assert err is not None and err.sqlstate == "57014", f"expected query_canceled, got {err!r}"
        assert outcome["ended"] - cancelled_at < 30
        assert ctl.execute("SELECT count(*) FROM pipe_cancel WHERE e IS NOT NULL").fetchone()[0] == 0
        # The backend and its session survive: one session, and it embeds.
        assert worker.execute("SELECT tributary_embed('after') IS NOT NULL").fetchone()[0]
        assert worker.execute(
            "SELECT count(*) FROM tributary.sessions WHERE model = 'all-MiniLM-L6-v2'"
        ).fetchone()[0] == 1


def test_gpu_budget_is_raised_by_a_superuser_only(dsn):
    with connect(dsn) as c:
        c.execute("DROP ROLE IF EXISTS pipe_plain")
        c.execute("CREATE ROLE pipe_plain LOGIN")
        c.execute("SELECT tributary_row_template_version()")  # the library is loaded
        assert c.execute("SHOW tributary.gpu_max_batch_tokens").fetchone()[0] == "16384"
    with connect(dsn, user="pipe_plain") as p:
        p.execute("SELECT tributary_row_template_version()")  # the library is loaded
        p.execute("SET tributary.gpu_max_batch_tokens = 4096")
        with pytest.raises(psycopg.Error) as err:
            p.execute("SET tributary.gpu_max_batch_tokens = 65536")
        assert err.value.sqlstate == "42501"
