"""Waiting for a job's state, and connecting through a restart: shared by the jobs tests."""

import time

import psycopg


def connect(dsn, attempts=120, **kwargs):
    """Connects (autocommit), waiting through a restart (the postmaster refuses connections meanwhile)."""
    for i in range(attempts):
        try:
            return psycopg.connect(dsn, autocommit=True, **kwargs)
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
