"""CPU run admission's lock bookkeeping under concurrency (src/pg/admission.rs): every release of a
queue or slot lock matches one grant, so no client ever sees PostgreSQL's
`WARNING: you don't own a lock of type ExclusiveLock`.

Six clients, each on its own connection, call tributary_embed back to back at mixed priorities
(interactive single texts and small arrays, bulk and background arrays of several runs each)
under `tributary.max_cpu_runs = 1` with one slot kept for interactive runs: the interactive, bulk
and background queues all fill, kept and shared slots are both taken, and bulk and background
heads give way long enough to be promoted (admission::PROMOTE_AFTER). Every notice and warning
each client receives is collected; the results must be right too (384 dimensions each).

Then the error paths: callers that time out while queued or running (lock_timeout,
statement_timeout) beside bulk load hold no lock afterwards and see no warning either.

Runs on TRIBUTARY_TEST_DSN (a plain cluster, reached as a superuser: the test sets the server's
tributary.max_cpu_runs and tributary.interactive_cpu_runs, and resets them at the end).
"""
import os
import threading
import time

import psycopg

from jobwait import connect

CLIENTS = 6
# How long the clients keep calling (each finishes the call it is in).
SECONDS = 12
# 48 short texts in runs of at most 256 tokens: several runs per call, above
# tributary.interactive_tokens, so `auto` would run it as bulk too.
ARRAY_CALL = ("SELECT array_agg(vector_dims(v)) FROM unnest(tributary_embed("
              "ARRAY(SELECT %s || ' text number ' || g || ' of an admission test call' FROM generate_series(1, %s) g))) v")
ONE_CALL = "SELECT ARRAY[vector_dims(tributary_embed(%s))]"

# (priority, texts per call): two interactive single-text clients, one interactive array client,
# two bulk clients, one background client.
CLIENT_KINDS = [("interactive", 1), ("interactive", 1), ("interactive", 4),
                ("bulk", 48), ("bulk", 48), ("background", 48)]


def set_server(dsn, **settings):
    """ALTER SYSTEM SET tributary.k = v (None: RESET) and reload; waits until a new connection
    sees the values. The library is loaded first: on a plain cluster the settings exist only then."""
    with connect(dsn) as c:
        c.execute("LOAD 'tributary'")
        for k, v in settings.items():
            c.execute(f"ALTER SYSTEM RESET tributary.{k}" if v is None else f"ALTER SYSTEM SET tributary.{k} = {int(v)}")
        c.execute("SELECT pg_reload_conf()")
    deadline = time.monotonic() + 60
    while True:
        with connect(dsn) as c:
            c.execute("LOAD 'tributary'")
            seen = {k: c.execute(f"SELECT setting, boot_val FROM pg_settings WHERE name = 'tributary.{k}'").fetchone()
                    for k in settings}
        if all(s == (str(v) if v is not None else b) for k, v in settings.items() for s, b in [seen[k]]):
            return
        assert time.monotonic() < deadline, f"settings not applied: {seen} vs {settings}"
        time.sleep(0.1)


def client(dsn, k, priority, texts, stop, out, pids, made=None):
    """Calls tributary_embed until `stop` is set; `out[k]` gets (notices, calls, bad results, error),
    `made[k]` the calls begun so far."""
    notices, calls, bad, error = [], 0, [], None
    try:
        with connect(dsn) as c:
            pids[k] = c.execute("SELECT pg_backend_pid()").fetchone()[0]
            c.add_notice_handler(lambda d: notices.append(f"{d.severity}: {d.message_primary}"))
            c.execute(f"SET tributary.priority = {priority}")
            c.execute("SET tributary.max_batch_tokens = 256")
            while not stop.is_set():
                calls += 1
                if made is not None:
                    made[k] = calls
                if texts == 1:
                    (dims,) = c.execute(ONE_CALL, (f"client {k} call {calls}: a short query about databases",)).fetchone()
                else:
                    (dims,) = c.execute(ARRAY_CALL, (f"client {k} call {calls}", texts)).fetchone()
                if dims != [384] * texts:
                    bad.append((calls, dims))
    except psycopg.Error as e:
        error = e
    out[k] = (notices, calls, bad, error)


def test_no_lock_warnings_from_concurrent_admission(dsn):
    set_server(dsn, max_cpu_runs=1, interactive_cpu_runs=1)
    try:
        # Sessions made (the model loaded) before the clients start.
        with connect(dsn) as c:
            assert c.execute("SELECT vector_dims(tributary_embed('warm up'))").fetchone() == (384,)
        stop, out, pids, made = threading.Event(), [None] * CLIENTS, [None] * CLIENTS, [0] * CLIENTS
        threads = [threading.Thread(target=client, args=(dsn, k, p, n, stop, out, pids, made), daemon=True)
                   for k, (p, n) in enumerate(CLIENT_KINDS)]
        for t in threads:
            t.start()
        # Who was seen in which queue, holding (head) or waiting: {(pid, queue, granted)}.
        seen = set()
        with connect(dsn) as m:
            # SECONDS, and on a slow machine until every client has begun two calls (its session
            # made, its turns taken; none has failed): up to 5 minutes more.
            deadline, last = time.monotonic() + SECONDS, time.monotonic() + SECONDS + 300
            while time.monotonic() < deadline or (min(made) < 2 and out.count(None) == CLIENTS
                                                  and time.monotonic() < last):
                seen |= set(m.execute("SELECT pid, queue, granted FROM tributary.cpu_runs WHERE queue IS NOT NULL"))
                time.sleep(0.01)
        stop.set()
        for t in threads:
            t.join(timeout=120)
        assert all(o is not None for o in out), "a client did not finish within 120 s"
        errors = [(k, o[3]) for k, o in enumerate(out) if o[3] is not None]
        assert not errors, errors
        calls = [o[1] for o in out]
        assert all(n >= 2 for n in calls), f"too few calls to mean anything: {calls}"
        bad = [(k, o[2]) for k, o in enumerate(out) if o[2]]
        assert not bad, f"wrong dimensions: {bad}"
        # The queues were all used, and bulk or background work was promoted to the interactive
        # queue after giving way.
        queues = {q for _, q, _ in seen}
        assert queues == {"interactive", "bulk", "background"}, seen
        promoted = [k for k, (p, _) in enumerate(CLIENT_KINDS)
                    if p != "interactive" and any((pids[k], "interactive", g) in seen for g in (True, False))]
        assert promoted, f"no bulk or background client was seen in the interactive queue: {seen}"
        notices = [(k, n) for k, o in enumerate(out) for n in o[0]]
        lock_warnings = [n for n in notices if "you don't own a lock" in n[1]]
        per_client = [sum(1 for n in lock_warnings if n[0] == k) for k in range(CLIENTS)]
        assert not lock_warnings, (f"{len(lock_warnings)} lock warnings (per client {per_client}) in {sum(calls)} "
                                   f"calls (per client {calls}): {lock_warnings[0]}")
        # Nothing else either: these calls raise no notice at all.
        assert not notices, notices[:10]
    finally:
        set_server(dsn, max_cpu_runs=None, interactive_cpu_runs=None)


def test_timeouts_while_waiting_release_exactly_what_they_hold(dsn):
    """The error paths: callers that give up waiting (lock_timeout while their queue's head polls
    for a slot, statement_timeout while they wait in the lock manager for their queue or during a
    run) release what they hold, once. After each call, failed or not, the backend holds no queue
    or slot lock (tributary.cpu_runs), and no client ever saw a lock warning."""
    set_server(dsn, max_cpu_runs=1, interactive_cpu_runs=0)
    try:
        with connect(dsn) as c:
            assert c.execute("SELECT vector_dims(tributary_embed('warm up'))").fetchone() == (384,)
        stop, out, pids = threading.Event(), [None] * 2, [None] * 2
        # Two bulk clients keep the one shared slot busy.
        load = [threading.Thread(target=client, args=(dsn, k, "bulk", 48, stop, out, pids), daemon=True)
                for k in range(2)]
        for t in load:
            t.start()
        results = [None] * 4

        def impatient(k):
            notices, timeouts, leaks, calls, error = [], 0, [], 0, None
            try:
                with connect(dsn) as c:
                    c.add_notice_handler(lambda d: notices.append(f"{d.severity}: {d.message_primary}"))
                    c.execute("SET tributary.max_batch_tokens = 256")
                    c.execute(f"SET tributary.priority = {('interactive', 'bulk', 'background', 'interactive')[k]}")
                    # The session is made before any timeout: what is under test is admission,
                    # not a timeout while the model loads.
                    c.execute("SELECT vector_dims(tributary_embed('warm up'))")
                    deadline = time.monotonic() + SECONDS / 2
                    while time.monotonic() < deadline:
                        calls += 1
                        timeout = ("lock_timeout", "statement_timeout")[calls % 2]
                        c.execute(f"SET {timeout} = {10 + 37 * calls % 300}")
                        try:
                            (dims,) = c.execute(ARRAY_CALL, (f"impatient {k} call {calls}", 8)).fetchone()
                            assert dims == [384] * 8, dims
                        except (psycopg.errors.QueryCanceled, psycopg.errors.LockNotAvailable):
                            timeouts += 1
                        c.execute(f"RESET {timeout}")
                        held = c.execute("SELECT slot, queue FROM tributary.cpu_runs WHERE pid = pg_backend_pid()").fetchall()
                        if held:
                            leaks.append((calls, held))
            except psycopg.Error as e:
                error = e
            results[k] = (notices, timeouts, leaks, calls, error)

        threads = [threading.Thread(target=impatient, args=(k,), daemon=True) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
        stop.set()
        for t in load:
            t.join(timeout=300)
        assert all(r is not None for r in results) and all(o is not None for o in out), "a client did not finish"
        assert not [r[4] for r in results if r[4]] and not [o[3] for o in out if o[3]], (results, out)
        assert not [o[2] for o in out if o[2]], "wrong dimensions"
        leaks = [r[2] for r in results if r[2]]
        assert not leaks, f"locks still held after a call: {leaks}"
        timeouts = [r[1] for r in results]
        assert sum(timeouts) >= 4, f"too few calls timed out to mean anything: {timeouts} of {[r[3] for r in results]}"
        notices = [n for r in results for n in r[0]] + [n for o in out for n in o[0]]
        assert not notices, notices[:10]
    finally:
        set_server(dsn, max_cpu_runs=None, interactive_cpu_runs=None)


def test_timeout_while_the_session_is_made_leaves_the_backend_usable():
    """A statement_timeout that fires while a backend makes its first ONNX Runtime session (the
    first tributary_embed of a connection) ends that call with 57014, and the backend's next
    call works: an ERROR raised while the backend's session cache was locked (inside the "session
    created" LOG line) once left the lock taken, and the next call waited forever, past cancel
    and pg_terminate_backend. Timeouts of 20 to 200 ms fall before, during and after the session
    is made (it takes 100-300 ms here)."""
    dsn = os.environ["TRIBUTARY_TEST_DSN"]
    for ms in (5, 20, 47, 100, 200, 400):
        with connect(dsn) as c:
            c.execute(f"SET statement_timeout = {ms}")
            try:
                c.execute("SELECT vector_dims(tributary_embed('first call of this backend'))")
            except psycopg.errors.QueryCanceled:
                pass
            c.execute("SET statement_timeout = '60s'")
            # In a thread: a backend stuck on the lock ignores statement_timeout and cancel.
            got = []
            t = threading.Thread(target=lambda: got.append(
                c.execute("SELECT vector_dims(tributary_embed('second call'))").fetchone()), daemon=True)
            t.start()
            t.join(120)
            assert got == [(384,)], f"the call after a {ms} ms timeout did not return in 120 s: {got}"
