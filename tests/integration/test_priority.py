"""Priorities in CPU run admission (src/pg/admission.rs), seen from SQL: the order in which
waiting calls get a slot, the slot kept for interactive runs, no starvation of bulk work, what
`tributary.priority = auto` picks, and who may set what. The mechanism only: how fast short
queries are under load is measured in benches/priority.sh, not here.

Each test sets `tributary.max_cpu_runs = 1` (one shared slot) and a long bulk call holding it in
runs of several seconds (a superuser's `tributary.max_batch_tokens = 16384` over long texts), so
that the waiters' order is decided by priority, not by timing.

Runs on the jobs cluster (TRIBUTARY_JOBS_DSN: tributary in shared_preload_libraries, for
tributary.stat_activity and a job's worker).
"""
import os
import threading
import time

import psycopg
import pytest

from jobwait import connect
from test_many_backends import set_server

ROLE = "tributary_prio_user"

# One text of about 250 tokens; 64 of them are one run of 16,000 tokens (seconds on 2 vCPUs).
LONG = " ".join(f"word{i}" for i in range(120))
LONG_CALL = ("SELECT cardinality(tributary_embed(array_agg(%s || ' ' || g))) FROM generate_series(1, 192) g")
# 64 short texts: about 64 x 12 estimated tokens, above tributary.interactive_tokens: bulk.
BULK_CALL = ("SELECT cardinality(tributary_embed(array_agg('bulk text number ' || g || ' of a test call'))) "
             "FROM generate_series(1, 64) g")


@pytest.fixture(scope="module")
def dsn():
    dsn = os.environ.get("TRIBUTARY_JOBS_DSN")
    if not dsn:
        pytest.fail("TRIBUTARY_JOBS_DSN is not set: run these through scripts/test.sh")
    with connect(dsn) as c:
        c.execute("CREATE EXTENSION IF NOT EXISTS tributary CASCADE")
        if c.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (ROLE,)).fetchone():
            c.execute(f"DROP OWNED BY {ROLE}")
            c.execute(f"DROP ROLE {ROLE}")
        c.execute(f"CREATE ROLE {ROLE} LOGIN")
    yield dsn
    set_server(dsn, max_cpu_runs=None, interactive_cpu_runs=None)
    with connect(dsn) as c:
        c.execute(f"DROP OWNED BY {ROLE}")
        c.execute(f"DROP ROLE {ROLE}")


def wait_until(predicate, timeout, what):
    """Polls `predicate()` every 20 ms until it holds; fails the test after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not seen in {timeout} s")
        time.sleep(0.02)


class Call(threading.Thread):
    """`sql` on its own connection (set up by `setup` statements first); `.done` is the monotonic
    time it returned, `.error` what it raised."""

    def __init__(self, dsn, sql, args=None, setup=()):
        super().__init__(daemon=True)
        self.conn = connect(dsn)
        for s in setup:
            self.conn.execute(s)
        # The session is created (and the model loaded) before the call under test.
        self.conn.execute("SELECT vector_dims(tributary_embed('warm up ' || pg_backend_pid()))")
        self.pid = self.conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        self.sql, self.args, self.done, self.error, self.result = sql, args, None, None, None

    def run(self):
        try:
            self.result = self.conn.execute(self.sql, self.args).fetchall()
        except psycopg.Error as e:
            self.error = e
        self.done = time.monotonic()
        self.conn.close()


def cpu_runs(c):
    """{pid: (slot, queue, granted)} from tributary.cpu_runs."""
    return {r[0]: r[1:] for r in c.execute("SELECT pid, slot, queue, granted FROM tributary.cpu_runs")}


def holding_shared_slot(dsn):
    """Starts a long bulk call and returns once it holds slot 0."""
    long_call = Call(dsn, LONG_CALL, (LONG,), setup=["SET tributary.max_batch_tokens = 16384"])
    long_call.start()
    with connect(dsn) as m:
        wait_until(lambda: cpu_runs(m).get(long_call.pid, (None,))[0] == 0, timeout=60,
                   what="the long call to hold slot 0")
    return long_call


def test_interactive_gets_the_next_free_slot_before_bulk(dsn):
    set_server(dsn, max_cpu_runs=1, interactive_cpu_runs=0)
    # Connections and sessions first: warming up is a call of its own.
    bulk = Call(dsn, BULK_CALL)
    one = Call(dsn, "SELECT vector_dims(tributary_embed('one short query about databases'))")
    long_call = holding_shared_slot(dsn)
    with connect(dsn) as m:
        bulk.start()
        wait_until(lambda: cpu_runs(m).get(bulk.pid) == (None, "bulk", True), timeout=30,
                   what="the bulk call to head the bulk queue")
        one.start()
        wait_until(lambda: cpu_runs(m).get(one.pid) == (None, "interactive", True), timeout=30,
                   what="the short call to head the interactive queue")
        # Both wait while the long call runs, each visible with its priority and since when.
        seen = {r[0]: r[1:] for r in m.execute(
            "SELECT pid, priority, cpu_wait_start IS NOT NULL FROM tributary.stat_activity WHERE pid = ANY(%s)",
            ([bulk.pid, one.pid],))}
        assert seen == {bulk.pid: ("bulk", True), one.pid: ("interactive", True)}, seen
        assert long_call.done is None, "the long call ended too soon for the test to mean anything"
        for t in (one, bulk, long_call):
            t.join(timeout=300)
        assert not (one.error or bulk.error or long_call.error), (one.error, bulk.error, long_call.error)
        # The bulk call was first in line, but the short one got the slot first.
        assert one.done < bulk.done, (one.done, bulk.done)
        assert one.result == [(384,)] and bulk.result == [(64,)]


def test_a_kept_slot_lets_a_short_query_run_beside_bulk_work(dsn):
    set_server(dsn, max_cpu_runs=1, interactive_cpu_runs=1)
    bulk = Call(dsn, BULK_CALL)
    long_call = holding_shared_slot(dsn)
    with connect(dsn) as m, connect(dsn) as c:
        # A bulk call may not take the kept slot: it waits for the long call's run.
        bulk.start()
        wait_until(lambda: cpu_runs(m).get(bulk.pid) == (None, "bulk", True), timeout=30,
                   what="the bulk call to wait in the bulk queue")
        pid = c.execute("SELECT pg_backend_pid()").fetchone()[0]
        c.execute("SELECT vector_dims(tributary_embed('warm up'))")
        c.execute("SELECT vector_dims(tributary_embed('another short query about databases'))")
        assert long_call.done is None and bulk.done is None, "the long call ended too soon"
        # The short query ran on the kept slot (1) without waiting, while both others held or
        # waited for the shared one.
        waits, prio = m.execute("SELECT cpu_waits, priority FROM tributary.stat_activity WHERE pid = %s", (pid,)).fetchone()
        assert (waits, prio) == (0, "interactive")
        assert cpu_runs(m).get(bulk.pid) == (None, "bulk", True)
        for t in (bulk, long_call):
            t.join(timeout=300)
        assert not (bulk.error or long_call.error), (bulk.error, long_call.error)


def test_bulk_work_is_not_starved_by_a_stream_of_short_queries(dsn):
    """Four clients send one-text queries back to back: with one shared slot and none kept, the
    interactive queue is seldom empty. A bulk call of several runs still ends: its head joins the
    interactive queue after waiting a second (admission::PROMOTE_AFTER)."""
    set_server(dsn, max_cpu_runs=1, interactive_cpu_runs=0)
    stop = threading.Event()
    counts = [0] * 4

    def stream(k):
        with connect(dsn) as c:
            n = 0
            while not stop.is_set():
                n += 1
                c.execute("SELECT vector_dims(tributary_embed(%s))", (f"short query {n} of stream {k} about databases",))
                counts[k] += 1

    streams = [threading.Thread(target=stream, args=(k,), daemon=True) for k in range(4)]
    for t in streams:
        t.start()
    try:
        wait_until(lambda: min(counts) >= 5, timeout=60, what="the streams to run")
        # Several runs: 64 texts in runs of at most 256 tokens.
        bulk = Call(dsn, BULK_CALL, setup=["SET tributary.max_batch_tokens = 256"])
        before = list(counts)
        bulk.start()
        bulk.join(timeout=120)
        assert bulk.done is not None, "the bulk call did not end within 120 s under the stream of short queries"
        assert bulk.error is None and bulk.result == [(64,)], bulk.error
        # The stream went on meanwhile (it was not the bulk call that had the slot to itself).
        assert all(a - b >= 5 for a, b in zip(counts, before)), (before, counts)
    finally:
        stop.set()
        for t in streams:
            t.join(timeout=60)


def test_auto_picks_by_size_and_jobs_run_in_the_background(dsn):
    set_server(dsn, max_cpu_runs=None, interactive_cpu_runs=None)
    with connect(dsn) as c, connect(dsn) as m:
        pid = c.execute("SELECT pg_backend_pid()").fetchone()[0]

        def priority():
            return m.execute("SELECT priority FROM tributary.stat_activity WHERE pid = %s", (pid,)).fetchone()[0]

        c.execute("SELECT tributary_embed('a short query')")
        assert priority() == "interactive"
        c.execute(BULK_CALL)
        assert priority() == "bulk"
        c.execute("SET tributary.interactive_tokens = 0")
        c.execute("SELECT tributary_embed('another short query')")
        assert priority() == "bulk"
        c.execute("RESET tributary.interactive_tokens")
        c.execute("SET tributary.priority = background")
        c.execute("SELECT tributary_embed('a third short query')")
        assert priority() == "background"
        # A job's worker runs at background priority (a continuous job: its worker stays).
        c.execute("DROP TABLE IF EXISTS prio_feed")
        c.execute("CREATE TABLE prio_feed (id int PRIMARY KEY, body text, embedding vector(384))")
        c.execute("INSERT INTO prio_feed SELECT g, 'feed row ' || g FROM generate_series(1, 20) g")
        job = c.execute("SELECT tributary_job_create('prio_feed', '{body}', 'embedding', mode => 'continuous')").fetchone()[0]
        wait_until(lambda: m.execute("SELECT count(*) FROM prio_feed WHERE embedding IS NULL").fetchone()[0] == 0,
                   timeout=120, what="the job to embed every row")
        workers = m.execute("SELECT DISTINCT priority FROM tributary.stat_activity "
                            "WHERE backend_type = 'tributary worker' AND calls > 0").fetchall()
        assert ("background",) in workers, workers
        c.execute("SELECT tributary_job_drop(%s)", (job,))
        c.execute("DROP TABLE prio_feed")


def test_a_role_may_lower_its_priority_but_not_raise_it(dsn):
    with connect(f"{dsn} user={ROLE}") as c:
        assert c.execute("SHOW tributary.priority").fetchone()[0] == "auto"
        for lower in ("bulk", "background", "auto"):
            c.execute(f"SET tributary.priority = {lower}")
        with pytest.raises(psycopg.errors.InsufficientPrivilege) as e:
            c.execute("SET tributary.priority = interactive")
        assert 'permission denied to raise "tributary.priority" above auto' in str(e.value)
        assert e.value.diag.message_hint
        c.execute("SET tributary.interactive_tokens = 100")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("SET tributary.interactive_tokens = 100000")
        # Nor through set_config, nor per function.
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("SELECT set_config('tributary.priority', 'interactive', false)")
    # What a superuser allows a role, the role may use.
    with connect(dsn) as su:
        su.execute(f"ALTER ROLE {ROLE} SET tributary.priority = 'interactive'")
    try:
        with connect(f"{dsn} user={ROLE}") as c:
            assert c.execute("SHOW tributary.priority").fetchone()[0] == "interactive"
            c.execute("SET tributary.priority = bulk")
            c.execute("SET tributary.priority = interactive")
    finally:
        with connect(dsn) as su:
            su.execute(f"ALTER ROLE {ROLE} RESET tributary.priority")
    # The server's settings are a superuser's.
    with connect(f"{dsn} user={ROLE}") as c:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("ALTER SYSTEM SET tributary.interactive_cpu_runs = 8")
