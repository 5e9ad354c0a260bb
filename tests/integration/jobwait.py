"""Waiting for a job's state, shared by test_jobs.py and test_hostile.py."""

import time


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
