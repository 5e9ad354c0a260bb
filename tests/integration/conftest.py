"""Shared fixtures: the database the integration tests run in (TRIBUTARY_TEST_DSN, which
scripts/test.sh sets to a throwaway cluster's database), with tributary created."""
import os
import re

import psycopg
import pytest

from jobwait import connect, wait_setting


@pytest.fixture(scope="module")
def dsn():
    dsn = os.environ.get("TRIBUTARY_TEST_DSN")
    if not dsn:
        pytest.fail("TRIBUTARY_TEST_DSN is not set: run these through scripts/test.sh")
    with connect(dsn) as c:
        c.execute("CREATE EXTENSION IF NOT EXISTS tributary CASCADE")
    return dsn


# ---------------------------------------------------------------------------------------------
# The adversarial suite (test_hostile.py): a cluster reached as its superuser, non-superuser
# roles alice and bob (each owning a schema of its name), and the cluster's server log.

# What the postmaster logs when a backend or background worker dies abnormally.
CRASH_LINE = re.compile(r"terminated by signal|was terminated|server process .* exited with exit code")


class HostileCluster:
    """One database of a cluster, for tests that run as the roles alice and bob.

    `dsn` reaches it as a superuser; `connect(role)` as alice or bob (autocommit), waiting through
    a crash restart. `log` is the cluster's server log (scripts/cluster.sh writes it next to the
    data directory)."""

    ROLES = ("alice", "bob")

    def __init__(self, dsn):
        self.dsn = dsn
        with self.connect() as c:
            datadir = c.execute("SHOW data_directory").fetchone()[0]
        self.log = os.path.join(os.path.dirname(datadir), "server.log")
        if not os.access(self.log, os.R_OK):
            pytest.fail(f"cannot read the server log {self.log} (the crash check needs it)")

    def connect(self, role=None, attempts=120):
        return connect(self.dsn, attempts=attempts, **({"user": role} if role else {}))

    def su(self, sql, args=None):
        """One statement as the superuser; its rows (or None)."""
        with self.connect() as c:
            cur = c.execute(sql, args)
            return cur.fetchall() if cur.description else None

    def rolsuper(self, role):
        return self.su("SELECT rolsuper FROM pg_roles WHERE rolname = %s", (role,))[0][0]

    def log_size(self):
        return os.path.getsize(self.log)

    def crashes_since(self, offset):
        """Lines of the server log after byte `offset` that say a server process died."""
        with open(self.log, "rb") as f:
            if os.fstat(f.fileno()).st_size < offset:
                offset = 0
            f.seek(offset)
            text = f.read().decode("utf-8", "replace")
        return [line for line in text.splitlines() if CRASH_LINE.search(line)]

    def objects(self):
        """DROP targets for the relations, types and functions in schemas alice and bob."""
        return {r[0] for r in self.su("""
            SELECT CASE c.relkind WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW' WHEN 'c' THEN 'TYPE'
                   ELSE 'TABLE' END || ' ' || c.oid::regclass::text
              FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname IN ('alice', 'bob') AND c.relkind IN ('r', 'p', 'v', 'm', 'c')
            UNION ALL
            SELECT 'DOMAIN ' || t.oid::regtype::text FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
             WHERE n.nspname IN ('alice', 'bob') AND t.typtype = 'd'
            UNION ALL
            SELECT 'FUNCTION ' || p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
             WHERE n.nspname IN ('alice', 'bob')""")}

    def drop_objects(self, objects):
        """Drops `objects` (from `objects()`), with what depends on them; errors are ignored."""
        with self.connect() as c:
            for obj in sorted(objects):
                kind, name = obj.split(" ", 1) if not obj.startswith("MATERIALIZED") else ("MATERIALIZED VIEW", obj[18:])
                try:
                    c.execute(f"DROP {kind} IF EXISTS {name} CASCADE")
                except psycopg.Error:
                    pass

    def drop_jobs(self, roles=ROLES):
        """Drops every job of `roles` (as the superuser); errors are ignored."""
        try:
            ids = self.su("SELECT id FROM tributary.jobs WHERE owner::text = ANY(%s)", (list(roles),))
        except psycopg.Error:
            return
        for (job_id,) in ids:
            try:
                self.su("SELECT tributary_job_drop(%s)", (job_id,))
            except psycopg.Error:
                pass

    def reset_roles(self):
        """alice and bob exist, can log in, are not superusers, and own empty schemas alice and
        bob (bob's readable by alice); their jobs and objects from earlier runs are gone."""
        with self.connect() as c:
            c.execute("CREATE EXTENSION IF NOT EXISTS tributary CASCADE")
            for r in self.ROLES:
                if not c.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (r,)).fetchone():
                    c.execute(f"CREATE ROLE {r} LOGIN")
                c.execute(f"ALTER ROLE {r} NOSUPERUSER NOCREATEROLE NOCREATEDB NOBYPASSRLS LOGIN")
        self.drop_jobs()
        with self.connect() as c:
            c.execute("DROP OWNED BY alice, bob CASCADE")
            c.execute("CREATE SCHEMA alice AUTHORIZATION alice")
            c.execute("CREATE SCHEMA bob AUTHORIZATION bob")
            c.execute("GRANT USAGE ON SCHEMA bob TO alice")


def _hostile_cluster(env, what):
    dsn = os.environ.get(env)
    if not dsn:
        pytest.skip(f"{env} is not set ({what}): run these through scripts/test.sh")
    cluster = HostileCluster(dsn)
    cluster.reset_roles()
    return cluster


@pytest.fixture(scope="module")
def hostile_main():
    """TRIBUTARY_TEST_DSN's cluster with roles alice and bob."""
    return _hostile_cluster("TRIBUTARY_TEST_DSN", "the main test cluster")


@pytest.fixture(scope="module")
def hostile_jobs():
    """TRIBUTARY_JOBS_DSN's cluster (tributary in shared_preload_libraries) with roles alice and
    bob; failed rows are retried after 10 s, twice, and queues are polled every 200 ms (the
    settings test_jobs.py uses)."""
    cluster = _hostile_cluster("TRIBUTARY_JOBS_DSN", "a cluster with tributary in shared_preload_libraries")
    with cluster.connect() as c:
        c.execute("ALTER SYSTEM SET tributary.job_max_attempts = 2")
        c.execute("ALTER SYSTEM SET tributary.job_poll_interval = 200")
        c.execute("SELECT pg_reload_conf()")
    wait_setting(cluster.dsn, "tributary.job_max_attempts", "2")
    return cluster
