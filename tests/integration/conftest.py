"""Shared fixtures: the database the integration tests run in (TRIBUTARY_TEST_DSN, which
scripts/test.sh sets to a throwaway cluster's database), with tributary created."""
import os

import psycopg
import pytest


@pytest.fixture(scope="module")
def dsn():
    dsn = os.environ.get("TRIBUTARY_TEST_DSN")
    if not dsn:
        pytest.fail("TRIBUTARY_TEST_DSN is not set: run these through scripts/test.sh")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("CREATE EXTENSION IF NOT EXISTS tributary CASCADE")
    return dsn
