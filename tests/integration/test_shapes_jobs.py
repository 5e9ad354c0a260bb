"""Jobs on partitioned tables (three levels, DEFAULT partitions) and on inheritance trees, run by
the background workers of the jobs cluster (TRIBUTARY_JOBS_DSN, as in test_jobs.py).

Every table is built so that ctids collide (the same number of rows in each partition or child,
inserted round-robin), and every check is that each row's vector is its own text's (cosine
distance to `tributary_embed(body)` under 1e-4) and that no row with text is left NULL.
"""
import os

import pytest

from jobwait import connect, wait_until

LEAVES = ["us_old", "us_new", "us_other", "eu", "other"]
# (region, year) of a row in each leaf of the tree below.
PLACE = {"us_old": ("us", 2005), "us_new": ("us", 2020), "us_other": ("us", 1990),
         "eu": ("eu", 2005), "other": ("asia", 2005)}


@pytest.fixture(scope="module")
def dsn():
    dsn = os.environ.get("TRIBUTARY_JOBS_DSN")
    if not dsn:
        pytest.fail("TRIBUTARY_JOBS_DSN is not set: run these through scripts/test.sh")
    with connect(dsn) as c:
        c.execute("CREATE EXTENSION IF NOT EXISTS tributary CASCADE")
        c.execute("ALTER SYSTEM SET tributary.job_poll_interval = 200")
        c.execute("SELECT pg_reload_conf()")
        # Jobs of an earlier run go first (their triggers and queues with them).
        c.execute("SELECT tributary_job_drop(id) FROM tributary.jobs WHERE source::text LIKE 'shapes.%'")
        c.execute("DROP SCHEMA IF EXISTS shapes CASCADE")
        c.execute("CREATE SCHEMA shapes")
    return dsn


def one(c, sql, args=None):
    return c.execute(sql, args).fetchone()[0]


def job(c, job_id):
    row = c.execute("SELECT state, rows_done, rows_queued, rows_failed, last_error FROM tributary.jobs WHERE id = %s",
                    (job_id,)).fetchone()
    return dict(zip(["state", "rows_done", "rows_queued", "rows_failed", "last_error"], row))


def wrong(c, table):
    """Rows of `table` (with its partitions or children) with text and no vector, and rows whose
    vector is not their own text's."""
    return c.execute(f"""
        SELECT count(*) FILTER (WHERE e IS NULL AND body IS NOT NULL),
               count(*) FILTER (WHERE e IS NOT NULL AND (e <=> tributary_embed(body)) > 1e-4)
          FROM {table}""").fetchone()


def wait_right(c, job_id, table, timeout=120, settled=None):
    """Waits until the job has nothing queued, none failed, and every row of `table` has its own
    text's vector; `settled(job)` adds a condition on the job's columns."""
    def read(i):
        j = job(c, i)
        j["wrong"] = wrong(c, table)
        return j
    return wait_until(read, job_id,
                      lambda j: j["rows_queued"] == 0 and j["rows_failed"] == 0 and j["wrong"] == (0, 0)
                      and (settled is None or settled(j)),
                      timeout, f"every row of {table} embedded with its own text")


def make_tree(c, name, per_leaf):
    """shapes.<name>: list by region, 'us' a range-partitioned middle level by year, DEFAULT
    partitions at both levels; the primary key (id, region, year) holds both partition keys.
    `per_leaf` rows in each of the five leaves, inserted round-robin through the root, so that
    the leaves' ctids are the same."""
    t = f"shapes.{name}"
    c.execute(f"CREATE TABLE {t} (id int, region text, year int, body text, e vector(384), "
              f"PRIMARY KEY (id, region, year)) PARTITION BY LIST (region)")
    c.execute(f"CREATE TABLE {t}_us PARTITION OF {t} FOR VALUES IN ('us') PARTITION BY RANGE (year)")
    c.execute(f"CREATE TABLE {t}_us_old PARTITION OF {t}_us FOR VALUES FROM (2000) TO (2010)")
    c.execute(f"CREATE TABLE {t}_us_new PARTITION OF {t}_us FOR VALUES FROM (2010) TO (2030)")
    c.execute(f"CREATE TABLE {t}_us_other PARTITION OF {t}_us DEFAULT")
    c.execute(f"CREATE TABLE {t}_eu PARTITION OF {t} FOR VALUES IN ('eu')")
    c.execute(f"CREATE TABLE {t}_other PARTITION OF {t} DEFAULT")
    rows, i = [], 0
    for k in range(per_leaf):
        for leaf in LEAVES:
            i += 1
            region, year = PLACE[leaf]
            rows.append((i, region, year, f"{leaf} row {k}: text number {i} about {['cars', 'bread', 'music', 'rivers'][i % 4]}"))
    with c.cursor() as cur:
        cur.executemany(f"INSERT INTO {t} (id, region, year, body) VALUES (%s, %s, %s, %s)", rows)
    # The ctids collide: every leaf holds (0,1) .. (0,per_leaf).
    assert c.execute(f"SELECT count(DISTINCT tableoid), count(DISTINCT ctid) FROM {t}").fetchone() == (5, per_leaf)
    return t


def test_once_job_on_a_three_level_partition_tree(dsn):
    with connect(dsn) as c:
        t = make_tree(c, "once_tree", 6)
        c.execute(f"INSERT INTO {t} (id, region, year, body) VALUES (1000, 'eu', 2001, NULL)")  # nothing to embed
        job_id = one(c, f"SELECT tributary_job_create('{t}', '{{body}}', 'e', batch_size => 4)")
        j = wait_until(lambda i: job(c, i), job_id, lambda j: j["state"] in ("done", "failed"), 120, "done")
        assert j["state"] == "done" and j["rows_done"] == 30 and j["rows_failed"] == 0, j
        assert wrong(c, t) == (0, 0)
        assert one(c, f"SELECT count(*) FROM {t} WHERE e IS NULL") == 1


def test_continuous_job_on_a_three_level_partition_tree(dsn):
    with connect(dsn) as c:
        t = make_tree(c, "cont_tree", 4)
        job_id = one(c, f"SELECT tributary_job_create('{t}', '{{body}}', 'e', mode => 'continuous', batch_size => 5)")
        wait_right(c, job_id, t, settled=lambda j: j["rows_done"] >= 20)

        # Through the root, directly into a leaf and into the middle level's DEFAULT partition.
        c.execute(f"INSERT INTO {t} (id, region, year, body) VALUES (101, 'us', 2007, 'inserted through the root')")
        c.execute(f"INSERT INTO {t}_eu (id, region, year, body) VALUES (102, 'eu', 2001, 'inserted into a leaf')")
        c.execute(f"INSERT INTO {t}_us (id, region, year, body) VALUES (103, 'us', 1970, 'inserted into the middle')")
        # A row moved across partitions (a new key, since the key holds the partition key), with
        # new text and without; a changed text directly in a leaf; a DELETE.
        c.execute(f"UPDATE {t} SET region = 'eu', body = 'moved to europe with new text' WHERE id = 1")
        c.execute(f"UPDATE {t} SET year = 2005 WHERE id = 2")
        c.execute(f"UPDATE {t}_us_other SET body = 'changed in its own leaf' WHERE id = 3")
        c.execute(f"DELETE FROM {t} WHERE id = 4")
        wait_right(c, job_id, t)
        assert one(c, f"SELECT tableoid::regclass::text FROM {t} WHERE id = 1") == f"{t}_eu"
        assert one(c, f"SELECT tableoid::regclass::text FROM {t} WHERE id = 2") == f"{t}_us_old"

        # A partition attached with rows while the job runs, and one created later and written
        # directly: both get the job's triggers, and the attached one's rows are queued.
        c.execute(f"CREATE TABLE {t}_jp (LIKE {t})")
        c.execute(f"INSERT INTO {t}_jp (id, region, year, body) SELECT 200 + g, 'jp', 2000 + g, 'attached row ' || g "
                  f"FROM generate_series(1, 4) g")
        c.execute(f"ALTER TABLE {t} ATTACH PARTITION {t}_jp FOR VALUES IN ('jp')")
        c.execute(f"CREATE TABLE {t}_fr PARTITION OF {t} FOR VALUES IN ('fr')")
        c.execute(f"INSERT INTO {t}_fr (id, region, year, body) VALUES (301, 'fr', 2001, 'into a partition made later')")
        wait_right(c, job_id, t)
        c.execute(f"UPDATE {t}_jp SET body = 'changed after the attach' WHERE id = 201")
        c.execute(f"UPDATE {t}_fr SET body = 'changed in the later partition' WHERE id = 301")
        wait_right(c, job_id, t)
        assert one(c, f"SELECT count(*) FROM {t}") == 20 + 3 - 1 + 4 + 1

        # Dropping the job takes its triggers off every table of the tree.
        tables = one(c, "SELECT count(DISTINCT tgrelid) FROM pg_trigger WHERE tgname LIKE %s", (f"tributary\\_job\\_{job_id}\\_%",))
        assert tables == 9  # root, middle, five leaves, jp, fr
        c.execute("SELECT tributary_job_drop(%s)", (job_id,))
        assert one(c, "SELECT count(*) FROM pg_trigger WHERE tgname LIKE %s", (f"tributary\\_job\\_{job_id}\\_%",)) == 0


def test_jobs_on_an_inheritance_parent_and_child(dsn):
    """A job on the parent covers the parent's own rows (and says so); a job on a child covers
    the child's. Parent and children share ids and ctids."""
    with connect(dsn) as c:
        notices = []
        c.add_notice_handler(lambda d: notices.append(d.message_primary))
        c.execute("CREATE TABLE shapes.inh (id int PRIMARY KEY, body text, e vector(384))")
        c.execute("CREATE TABLE shapes.inh_c1 (extra int) INHERITS (shapes.inh)")
        c.execute("CREATE TABLE shapes.inh_c2 () INHERITS (shapes.inh)")
        c.execute("ALTER TABLE shapes.inh_c1 ADD PRIMARY KEY (id)")
        c.execute("ALTER TABLE shapes.inh_c2 ADD PRIMARY KEY (id)")
        for g in range(1, 5):
            c.execute("INSERT INTO shapes.inh VALUES (%s, %s)", (g, f"parent row {g} about a lighthouse"))
            c.execute("INSERT INTO shapes.inh_c1 VALUES (%s, %s)", (g, f"first child row {g} about a violin"))
            c.execute("INSERT INTO shapes.inh_c2 VALUES (%s, %s)", (g, f"second child row {g} about a glacier"))

        parent_job = one(c, "SELECT tributary_job_create('shapes.inh', '{body}', 'e', mode => 'continuous')")
        assert any("not those of its 2 inheritance child table(s)" in n for n in notices), notices
        wait_right(c, parent_job, "ONLY shapes.inh", settled=lambda j: j["rows_done"] >= 4)
        assert wrong(c, "shapes.inh_c1") == (4, 0) and wrong(c, "shapes.inh_c2") == (4, 0)

        child_job = one(c, "SELECT tributary_job_create('shapes.inh_c1', '{body}', 'e', mode => 'continuous')")
        # The parent has the child's key column: the child's job has triggers on it too.
        assert not any("made through" in n for n in notices), notices
        wait_right(c, child_job, "shapes.inh_c1", settled=lambda j: j["rows_done"] >= 4)
        assert wrong(c, "shapes.inh_c2") == (4, 0)

        # Writes to each table go to its own job.
        c.execute("INSERT INTO shapes.inh VALUES (5, 'a new parent row')")
        c.execute("INSERT INTO shapes.inh_c1 VALUES (5, 'a new child row')")
        c.execute("UPDATE ONLY shapes.inh SET body = 'parent text changed' WHERE id = 1")
        c.execute("UPDATE shapes.inh_c1 SET body = 'child text changed' WHERE id = 1")
        # A statement naming the parent that changes a child's row: the child's job sees it.
        c.execute("UPDATE shapes.inh SET body = 'child text changed through the parent' "
                  "WHERE id = 2 AND tableoid = 'shapes.inh_c1'::regclass")
        wait_right(c, parent_job, "ONLY shapes.inh")
        wait_right(c, child_job, "shapes.inh_c1")
        assert wrong(c, "shapes.inh_c2") == (4, 0)

        # A once job on the other child fills it; then the whole tree is right.
        c2_job = one(c, "SELECT tributary_job_create('shapes.inh_c2', '{body}', 'e')")
        wait_until(lambda i: job(c, i), c2_job, lambda j: j["state"] == "done", 120, "done")
        assert wrong(c, "shapes.inh") == (0, 0)
        for j in (parent_job, child_job, c2_job):
            c.execute("SELECT tributary_job_drop(%s)", (j,))
        assert one(c, "SELECT count(*) FROM pg_trigger WHERE tgrelid::regclass::text LIKE 'shapes.inh%'") == 0


def test_key_columns_named_like_the_jobs_own_aliases(dsn):
    """A partitioned table whose key columns are named k and c (aliases in the job's statements)
    and whose partition key is k: the job still reads and writes each row by its own key."""
    with connect(dsn) as c:
        c.execute("CREATE TABLE shapes.alias (k text, c int, body text, e vector(384), PRIMARY KEY (k, c)) PARTITION BY LIST (k)")
        c.execute("CREATE TABLE shapes.alias_a PARTITION OF shapes.alias FOR VALUES IN ('a')")
        c.execute("CREATE TABLE shapes.alias_b PARTITION OF shapes.alias DEFAULT")
        c.execute("INSERT INTO shapes.alias SELECT p, g, 'alias row ' || p || g FROM generate_series(1, 3) g, unnest(ARRAY['a', 'b']) p")
        job_id = one(c, "SELECT tributary_job_create('shapes.alias', '{body}', 'e', mode => 'continuous')")
        wait_right(c, job_id, "shapes.alias", settled=lambda j: j["rows_done"] >= 6)
        c.execute("INSERT INTO shapes.alias_a VALUES ('a', 4, 'a fourth row')")
        c.execute("UPDATE shapes.alias SET k = 'z' WHERE k = 'a' AND c = 1")  # into the DEFAULT partition
        wait_right(c, job_id, "shapes.alias")
        c.execute("SELECT tributary_job_drop(%s)", (job_id,))


def test_continuous_job_on_one_partition_sees_statements_on_its_ancestors(dsn):
    """A job on a leaf of the tree: statements naming the root or the middle level that insert,
    change or move rows into the leaf are seen (the job has triggers on the leaf's ancestors)."""
    with connect(dsn) as c:
        t = make_tree(c, "leaf_tree", 3)
        leaf = f"{t}_us_old"
        job_id = one(c, f"SELECT tributary_job_create('{leaf}', '{{body}}', 'e', mode => 'continuous')")
        wait_right(c, job_id, leaf, settled=lambda j: j["rows_done"] >= 3)
        c.execute(f"INSERT INTO {t} (id, region, year, body) VALUES (101, 'us', 2003, 'through the root into the leaf')")
        c.execute(f"INSERT INTO {t}_us (id, region, year, body) VALUES (102, 'us', 2004, 'through the middle into the leaf')")
        c.execute(f"UPDATE {t} SET body = 'changed through the root' WHERE id = 1")
        c.execute(f"UPDATE {t} SET year = 2001, body = 'moved into the leaf' WHERE id = 2")   # from us_new
        wait_right(c, job_id, leaf)
        assert one(c, f"SELECT count(*) FROM {leaf}") == 3 + 2 + 1
        # The rest of the tree is not the job's.
        assert wrong(c, f"{t}_eu")[0] == 3
        c.execute("SELECT tributary_job_drop(%s)", (job_id,))
        assert one(c, "SELECT count(*) FROM pg_trigger WHERE tgname LIKE %s", (f"tributary\\_job\\_{job_id}\\_%",)) == 0
