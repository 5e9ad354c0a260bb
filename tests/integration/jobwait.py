"""Waiting for a job's state, and connecting through a restart: shared by the jobs tests."""

import time

import psycopg


def connect(dsn, attempts=120, autocommit=True, **kwargs):
    """Connects (autocommit unless told), waiting through a restart (the postmaster refuses
    connections meanwhile). Every connection of the integration tests is made here, or passes
    prepare_threshold=None itself (test_upgrade.py checks it): psycopg prepares a statement on the
    server after its fifth execution, and a poll prepared before DDL (ALTER EXTENSION UPDATE
    changing a view's columns) then fails with "cached plan must not change result type"."""
    for i in range(attempts):
        try:
            return psycopg.connect(dsn, autocommit=autocommit, prepare_threshold=None, **kwargs)
        except psycopg.OperationalError:
            if i == attempts - 1:
                raise
            time.sleep(0.5)


def wait_until(read, job_id, predicate, timeout, what, every=0.3):
    """Polls `read(job_id)` (a dict of the job's columns) every `every` s until `predicate`
    holds; returns that dict, or fails the test after `timeout` s saying `what` was awaited."""
    deadline = time.monotonic() + timeout
    while True:
        j = read(job_id)
        if predicate(j):
            return j
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job_id}: {what} not reached in {timeout} s: {j}")
        time.sleep(every)


def wait_setting(dsn, name, value, timeout=60):
    """After ALTER SYSTEM and pg_reload_conf(): waits until a new session's pg_settings shows
    `name` at `value` (its `setting`, in the setting's base unit): the postmaster has then read
    the file and signalled every process; a launcher or idle worker, woken by that signal,
    applies it at its next loop."""
    deadline = time.monotonic() + timeout
    while True:
        with connect(dsn) as c:
            got = c.execute("SELECT setting FROM pg_settings WHERE name = %s", (name,)).fetchone()
        got = got and got[0]
        if got == value:
            return
        assert time.monotonic() < deadline, f"{name} is {got}, not {value!r}, {timeout} s after the reload"
        time.sleep(0.1)
