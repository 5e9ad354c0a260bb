"""Integration tests from a client: a real PostgreSQL cluster with pgvector and tributary,
the real ONNX Runtime library and the real default model.

Needs TRIBUTARY_TEST_DSN (scripts/test.sh sets it to a throwaway cluster's database).
"""
import threading
import time

import psycopg
import pytest

from jobwait import connect


def make_table(conn, name, rows, words=40):
    conn.execute(f"DROP TABLE IF EXISTS {name}")
    conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, body text, e vector(384))")
    conn.execute(
        f"INSERT INTO {name} SELECT g, repeat('text number ' || g || ' with several words ', %s) "
        "FROM generate_series(1, %s) g",
        (words, rows),
    )


def test_cancel_stops_within_a_batch_and_leaves_table_unchanged(dsn):
    with connect(dsn) as setup:
        make_table(setup, "cancel_me", 6000)
    with connect(dsn) as worker, connect(dsn) as ctl:
        pid = worker.execute("SELECT pg_backend_pid()").fetchone()[0]
        # Warm the session so that the cancel lands in the embedding loop, not in model loading.
        worker.execute("SELECT tributary_embed('warm up')")
        worker.execute("SET tributary.progress_interval = 0")
        outcome = {}

        def run():
            t0 = time.monotonic()
            try:
                worker.execute("SELECT tributary_embed_column('cancel_me', ARRAY['body'], 'e', NULL, 64)")
                outcome["error"] = None
            except psycopg.Error as e:
                outcome["error"] = e
            outcome["ended"] = time.monotonic()
            outcome["started"] = t0

        th = threading.Thread(target=run)
        th.start()
        time.sleep(2.0)
        # It is running: the query is active in pg_stat_activity.
        state = ctl.execute("SELECT state FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()[0]
        assert state == "active"
        cancelled_at = time.monotonic()
        assert ctl.execute("SELECT pg_cancel_backend(%s)", (pid,)).fetchone()[0]
        th.join(120)
        assert not th.is_alive(), "tributary_embed_column did not stop after pg_cancel_backend"
        err = outcome["error"]
        assert err is not None and err.sqlstate == "57014", f"expected query_canceled, got {err!r}"
        # One batch of 64 rows x 256 tokens is well under a few seconds even on a slow CPU.
        assert outcome["ended"] - cancelled_at < 30
        written = ctl.execute("SELECT count(*) FROM cancel_me WHERE e IS NOT NULL").fetchone()[0]
        assert written == 0
        # The backend that was cancelled is alive and still embeds.
        assert worker.execute("SELECT vector_dims(tributary_embed('still here'))").fetchone()[0] == 384


def test_progress_is_reported_as_notices(dsn):
    with connect(dsn) as c:
        make_table(c, "progress", 300, words=5)
        notices = []
        c.add_notice_handler(lambda d: notices.append(d.message_primary))
        c.execute("SET tributary.progress_interval = 1")
        n = c.execute("SELECT tributary_embed_column('progress', ARRAY['body'], 'e', NULL, 50)").fetchone()[0]
        assert n == 300
        progress = [m for m in notices if m.startswith("tributary_embed_column:")]
        assert progress, f"no progress notice among {notices}"
        assert "of 300 rows embedded" in progress[-1]


def test_concurrent_backends_each_embed_the_same(dsn):
    texts = [f"concurrent text {i}" for i in range(40)]
    results = {}

    def run(k):
        with connect(dsn, autocommit=False) as c:
            results[k] = c.execute("SELECT tributary_embed(%s::text[])::text", (texts,)).fetchone()[0]

    threads = [threading.Thread(target=run, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert len(results) == 3
    assert results[0] == results[1] == results[2]


def test_error_leaves_backend_usable_and_transaction_clean(dsn):
    with connect(dsn, autocommit=False) as c:
        with pytest.raises(psycopg.errors.UndefinedObject):
            c.execute("SELECT tributary_embed('x', 'nope')")
        c.rollback()
        assert c.execute("SELECT vector_dims(tributary_embed('x'))").fetchone()[0] == 384
