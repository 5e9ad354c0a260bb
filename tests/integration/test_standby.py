"""Hot standby: tributary on a streaming replica, and a continuous job across a promotion.

The module builds its own two clusters under /tmp/tributary-standby-*, both owned by the postgres
OS user and reached over unix sockets only: a primary (port 55491, tributary in
shared_preload_libraries, wal_level = replica) and a streaming standby made with
`pg_basebackup -R -X stream` (port 55492, the same settings, hot_standby = on). Needs
TRIBUTARY_PGBIN (PostgreSQL's bin directory; scripts/test.sh sets it); the jobs cluster and the
main test cluster are not touched. Both clusters are stopped and removed at the end, also when a
test fails.

What it checks:
  - the standby, read-only and in recovery, embeds (`tributary_embed` of a text and of a text[])
    with the primary's vectors, answers nearest-neighbour searches over the replicated vectors as
    the primary does, and shows its session in `tributary.sessions`;
  - writes fail cleanly there: `tributary_embed_column` (on a table with rows to fill and on one
    already filled) and `tributary_job_create` raise 25006 (read_only_sql_transaction), and the
    server and the session stay up;
  - no tributary background process (launcher, worker) runs on the standby while it is in
    recovery, while the primary has its launcher; the standby's log has no tributary errors;
  - a continuous job survives the loss of the primary: rows inserted on the primary (replayed on
    the standby) while the job works on them, the primary stopped with `pg_ctl -m immediate`, the
    standby promoted: a launcher and a worker start there, the job catches up by itself (every row
    holds its own text's vector, and rows_done counts each row once: batches committed on the old
    primary but never replayed are done again) and embeds rows inserted on the promoted server.
"""
import os
import re
import shutil
import subprocess
import tempfile
import time

import psycopg
import pytest

from jobwait import connect, wait_until

PRIMARY_PORT, STANDBY_PORT = 55491, 55492

SENTENCES = [
    "The cat sleeps on the warm windowsill.",
    "Interest rates rose again this quarter.",
    "A volcano erupted near the coastal village.",
    "She baked sourdough bread for the neighbours.",
    "The football match ended in a goalless draw.",
    "Quantum computers use qubits instead of bits.",
    "Tomatoes need plenty of sunlight to ripen.",
    "The orchestra rehearsed Beethoven's ninth symphony.",
    "He forgot his umbrella on the crowded train.",
    "Glaciers are retreating faster than expected.",
    "The new phone has a foldable screen.",
    "Children built a snowman in the park.",
    "The museum opened an exhibition of ancient coins.",
    "Coffee prices doubled after the drought.",
    "A submarine explored the deepest ocean trench.",
    "The recipe calls for two cups of flour.",
    "Parliament passed the budget after a long debate.",
    "The hikers reached the summit at dawn.",
    "My laptop battery drains too quickly.",
    "Bees pollinate most of the flowering crops.",
    "The detective found a clue under the carpet.",
    "Electric cars are getting cheaper every year.",
    "The library extended its opening hours.",
    "A rare comet will be visible next week.",
    "The dentist recommended flossing every day.",
    "Wolves were reintroduced to the national park.",
    "The startup raised money from venture investors.",
    "Heavy rain flooded the underground station.",
    "The violinist tuned her instrument before the concert.",
    "Our flight was delayed by three hours.",
]

PROMPT_QUERIES = [
    "a pet resting in the sun",
    "central bank monetary policy",
    "space objects in the night sky",
]

# A server log line with PostgreSQL 15's default log_line_prefix ('%m [%p] ').
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \S+ \[(\d+)\] ([A-Z]+\d?):  (.*)$")
OUR_DIRS = re.compile(r"\S*/tributary-standby-\S*")
CRASH_LINE = re.compile(r"terminated by signal|was terminated|server process .* exited with exit code")


def as_pg(cmd):
    return (["sudo", "-u", "postgres", "--"] if os.getuid() == 0 else []) + cmd


def run_pg(cmd, timeout=120):
    """Runs a PostgreSQL binary as the postgres OS user; fails the test with its output."""
    r = subprocess.run(as_pg(cmd), capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited with {r.returncode}:\n{r.stdout}\n{r.stderr}")
    return r


def tail(path, n=60):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError as e:
        return f"(cannot read {path}: {e})"


class Node:
    """One cluster of the pair: data directory, socket directory, port and server log."""

    def __init__(self, pgbin, base, name, port):
        self.pgbin, self.name, self.port = pgbin, name, port
        self.data = os.path.join(base, name, "data")
        self.sock = os.path.join(base, name, "sock")
        self.log = os.path.join(base, name, "server.log")
        self.dsn = f"host={self.sock} port={port} user=postgres dbname=postgres connect_timeout=10"

    def bin(self, name):
        return os.path.join(self.pgbin, name)

    def start(self):
        r = subprocess.run(as_pg([self.bin("pg_ctl"), "-D", self.data, "-l", self.log, "-w", "-t", "60", "start"]),
                           capture_output=True, text=True, timeout=90)
        if r.returncode != 0:
            raise AssertionError(f"{self.name} did not start: {r.stdout}{r.stderr}\n{tail(self.log)}")

    def stop(self, mode="fast"):
        subprocess.run(as_pg([self.bin("pg_ctl"), "-D", self.data, "-m", mode, "-w", "-t", "60", "stop"]),
                       capture_output=True, text=True, timeout=90)

    def running(self):
        r = subprocess.run(as_pg([self.bin("pg_ctl"), "-D", self.data, "status"]),
                           capture_output=True, text=True, timeout=30)
        return r.returncode == 0

    def connect(self):
        return connect(self.dsn, attempts=60)

    def query(self, sql, args=None):
        """One statement on a fresh connection; its rows (or None)."""
        with self.connect() as c:
            cur = c.execute(sql, args)
            return cur.fetchall() if cur.description else None

    def one(self, sql, args=None):
        return self.query(sql, args)[0][0]

    def log_text(self, since=0):
        with open(self.log, "rb") as f:
            f.seek(since)
            return f.read().decode("utf-8", "replace")


def log_errors(text):
    """ERROR/FATAL/PANIC reports of a server log, each with its DETAIL/HINT/CONTEXT/STATEMENT
    lines (same pid, right after it), as lists of lines."""
    reports, current = [], None
    for line in text.splitlines():
        m = LOG_LINE.match(line)
        if not m:
            if current is not None:
                current.append(line)   # a continuation (multi-line statement)
            continue
        pid, level = m.group(1), m.group(2)
        if level in ("ERROR", "FATAL", "PANIC"):
            current = [line]
            reports.append((pid, current))
        elif current is not None and level in ("DETAIL", "HINT", "CONTEXT", "STATEMENT") and pid == reports[-1][0]:
            current.append(line)
        else:
            current = None
    return [lines for _, lines in reports]


def tributary_errors(node, allowed=(), since=0):
    """The error reports in `node`'s log (from byte `since`) that mention tributary, except those
    whose first line holds one of the `allowed` messages."""
    # This module's directories (/tmp/tributary-standby-*, in the walreceiver's connection
    # errors once the primary is gone) are no mention of tributary.
    return [r for r in log_errors(node.log_text(since))
            if "tributary" in OUR_DIRS.sub("", "\n".join(r)).lower() and not any(a in r[0] for a in allowed)]


def crashes(node, since=0):
    return [line for line in node.log_text(since).splitlines() if CRASH_LINE.search(line)]


def poll(what, fn, timeout, every=0.2):
    """Calls `fn()` until it returns something true; returns that, or fails after `timeout` s
    with `what` and the last value."""
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached in {timeout} s (last: {v!r})")
        time.sleep(every)


def wait_replayed(primary, standby, timeout=120):
    """Waits until the standby has replayed the primary's WAL up to its current position."""
    lsn = primary.one("SELECT pg_current_wal_lsn()::text")
    poll(f"standby replay up to {lsn}",
         lambda: standby.one("SELECT pg_is_in_recovery() AND pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,)),
         timeout, every=0.1)
    return lsn


def tributary_processes(node):
    return [tuple(r) for r in node.query("SELECT backend_type, pid FROM pg_stat_activity "
                                         "WHERE backend_type LIKE 'tributary%' ORDER BY 1, 2")]


COLUMNS = ["state", "rows_done", "rows_queued", "rows_failed", "rows_total", "last_error", "worker_pids", "waiting_for"]


def job(node, job_id):
    row = node.query(f"SELECT {', '.join(COLUMNS)} FROM tributary.jobs WHERE id = %s", (job_id,))
    assert row, f"job {job_id} is not in tributary.jobs on {node.name}"
    return dict(zip(COLUMNS, row[0]))


def wait_job(node, job_id, predicate, timeout, what):
    return wait_until(lambda i: job(node, i), job_id, predicate, timeout, f"{what} (on the {node.name})")


@pytest.fixture(scope="module")
def pair():
    """A primary and its streaming standby (both running, the standby in recovery and caught up);
    stopped and removed afterwards."""
    pgbin = os.environ.get("TRIBUTARY_PGBIN")
    if not pgbin:
        pytest.fail("TRIBUTARY_PGBIN is not set: run these through scripts/test.sh "
                    "(or set it to PostgreSQL 15's bin directory, e.g. /usr/lib/postgresql/15/bin)")
    if not os.access(os.path.join(pgbin, "pg_ctl"), os.X_OK):
        pytest.fail(f"TRIBUTARY_PGBIN={pgbin} holds no pg_ctl")
    base = tempfile.mkdtemp(prefix="tributary-standby-", dir="/tmp")
    os.chmod(base, 0o755)
    primary = Node(pgbin, base, "primary", PRIMARY_PORT)
    standby = Node(pgbin, base, "standby", STANDBY_PORT)
    try:
        for node in (primary, standby):
            os.makedirs(node.sock)
        if os.getuid() == 0:
            subprocess.run(["chown", "-R", "postgres:postgres", base], check=True)
        run_pg([primary.bin("initdb"), "-D", primary.data, "-U", "postgres", "-A", "trust", "--no-sync"])
        with open(os.path.join(primary.data, "postgresql.conf"), "a") as f:
            f.write(f"""
listen_addresses = ''
port = {PRIMARY_PORT}
unix_socket_directories = '{primary.sock}'
shared_preload_libraries = 'tributary'
max_worker_processes = 16
wal_level = replica
max_wal_senders = 4
hot_standby = on
fsync = off
tributary.job_poll_interval = 200
""")
        primary.start()
        # pg_hba.conf of initdb -A trust lets local replication connections in.
        run_pg([primary.bin("pg_basebackup"), "-D", standby.data, "-h", primary.sock, "-p", str(PRIMARY_PORT),
                "-U", "postgres", "-R", "-X", "stream", "-c", "fast"])
        with open(os.path.join(standby.data, "postgresql.conf"), "a") as f:
            f.write(f"""
# the standby's own (later lines win over the primary's copied above)
port = {STANDBY_PORT}
unix_socket_directories = '{standby.sock}'
""")
        standby.start()
        poll("pg_is_in_recovery() on the standby", lambda: standby.one("SELECT pg_is_in_recovery()"), 120)
        wait_replayed(primary, standby)
        yield primary, standby
    finally:
        for node in (standby, primary):
            try:
                if os.path.exists(os.path.join(node.data, "postmaster.pid")):
                    node.stop("immediate")
            except Exception:
                pass
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def docs(pair):
    """docs(id, body, e vector(384)) on the primary, filled by tributary_embed_column, and
    docs_unfilled (the same columns, 5 rows, e NULL), replayed on the standby; the number of rows
    tributary_embed_column reported."""
    primary, standby = pair
    with primary.connect() as c:
        c.execute("CREATE EXTENSION tributary CASCADE")
        c.execute("CREATE TABLE docs (id int PRIMARY KEY, body text, e vector(384))")
        with c.cursor() as cur:
            cur.executemany("INSERT INTO docs (id, body) VALUES (%s, %s)", list(enumerate(SENTENCES, 1)))
        filled = c.execute("SELECT tributary_embed_column('docs', ARRAY['body'], 'e')").fetchone()[0]
        # Rows still to embed, for the writes refused on the standby.
        c.execute("CREATE TABLE docs_unfilled (id int PRIMARY KEY, body text, e vector(384))")
        c.execute("INSERT INTO docs_unfilled SELECT g, 'unfilled row ' || g FROM generate_series(1, 5) g")
    wait_replayed(primary, standby)
    return filled


def test_primary_fills_and_standby_replays(pair, docs):
    """tributary_embed_column fills every row on the primary; the standby, in recovery, has them."""
    primary, standby = pair
    n = len(SENTENCES)
    assert docs == n
    assert primary.query("SELECT count(*), count(e) FROM docs")[0] == (n, n)
    assert standby.one("SELECT pg_is_in_recovery()") is True
    assert standby.query("SELECT count(*), count(e) FROM docs")[0] == (n, n)
    # The very same vectors, byte for byte.
    assert standby.one("SELECT md5(string_agg(e::text, ',' ORDER BY id)) FROM docs") == \
        primary.one("SELECT md5(string_agg(e::text, ',' ORDER BY id)) FROM docs")
    assert standby.one("SELECT extversion FROM pg_extension WHERE extname = 'tributary'") == \
        primary.one("SELECT extversion FROM pg_extension WHERE extname = 'tributary'")


def test_standby_embeds_and_searches(pair, docs):
    """On the standby: tributary_embed equals the primary's, nearest-neighbour searches return
    the primary's ids (and a row's own text finds that row first), and tributary.sessions shows
    the session."""
    primary, standby = pair
    with standby.connect() as s:
        assert s.execute("SELECT pg_is_in_recovery()").fetchone()[0] is True
        assert s.execute("SHOW transaction_read_only").fetchone()[0] == "on"
        for text in ["some text"] + PROMPT_QUERIES:
            v = s.execute("SELECT tributary_embed(%s)::text", (text,)).fetchone()[0]
            assert v and v.startswith("[")
            d = primary.one("SELECT %s::vector <=> tributary_embed(%s)", (v, text))
            assert d < 1e-6, f"standby's tributary_embed({text!r}) is {d} away from the primary's"

        knn = "SELECT id FROM docs ORDER BY e <=> tributary_embed(%s) LIMIT 3"
        for text in PROMPT_QUERIES + [SENTENCES[0], SENTENCES[13], SENTENCES[-1]]:
            on_standby = [r[0] for r in s.execute(knn, (text,)).fetchall()]
            on_primary = [r[0] for r in primary.query(knn, (text,))]
            assert on_standby == on_primary, f"search {text!r}: standby {on_standby}, primary {on_primary}"
            assert len(on_standby) == 3
        for i, body in enumerate(SENTENCES, 1):
            top, d = s.execute("SELECT id, e <=> tributary_embed(%s) FROM docs ORDER BY e <=> tributary_embed(%s) LIMIT 1",
                               (body, body)).fetchone()
            assert (top, d < 1e-5) == (i, True), f"row {i}'s own text finds row {top} first (distance {d})"

        sessions = s.execute("SELECT count(*) FROM tributary.sessions").fetchone()[0]
        assert sessions >= 1, "tributary.sessions shows no session on the standby after embedding"
        assert s.execute("SELECT pg_is_in_recovery()").fetchone()[0] is True


def test_standby_embeds_arrays(pair, docs):
    """tributary_embed(text[]) on the standby: one vector per text, each its text's own (as
    tributary_embed(text) gives it), NULL for NULL, and an empty array for an empty one."""
    primary, standby = pair
    with standby.connect() as s:
        assert s.execute("SELECT pg_is_in_recovery()").fetchone()[0] is True
        texts = [SENTENCES[2], "some text", SENTENCES[7]]
        n, worst = s.execute("""
            SELECT count(*), max(v <=> tributary_embed(t))
              FROM unnest(tributary_embed(%s::text[]), %s::text[]) AS x(v, t)""", (texts, texts)).fetchone()
        assert n == 3 and worst < 1e-4, (n, worst)

        assert s.execute("SELECT (tributary_embed(ARRAY['a', NULL, 'b']::text[]))[2] IS NULL, "
                         "cardinality(tributary_embed('{}'::text[]))").fetchone() == (True, 0)


def assert_standby_up(standby, started):
    """The standby runs, has not restarted since `started`, is in recovery and logged no crash."""
    assert standby.running()
    assert standby.one("SELECT pg_postmaster_start_time()") == started, "the standby restarted"
    assert standby.one("SELECT pg_is_in_recovery()") is True
    assert not crashes(standby), crashes(standby)


def test_standby_refuses_embed_column(pair, docs):
    """tributary_embed_column on the standby raises 25006, with rows to fill (docs_unfilled) and
    without (docs, already filled: it fails as any UPDATE does there); the server and the
    session stay up."""
    primary, standby = pair
    started = standby.one("SELECT pg_postmaster_start_time()")
    with standby.connect() as s:
        for table in ("docs_unfilled", "docs"):
            with pytest.raises(psycopg.Error) as e:
                s.execute("SELECT tributary_embed_column(%s, ARRAY['body'], 'e')", (table,))
            assert e.value.sqlstate == "25006", f"tributary_embed_column on {table}: {e.value.sqlstate} {e.value}"
            # The same session goes on.
            assert s.execute("SELECT tributary_embed('still here') IS NOT NULL").fetchone()[0] is True
        assert s.execute("SELECT count(*), count(e) FROM docs_unfilled").fetchone() == (5, 0)
    assert_standby_up(standby, started)


def test_standby_refuses_job_create(pair, docs):
    """tributary_job_create (once and continuous) on the standby raises 25006; the server and the
    session stay up, and no job appears on the primary."""
    primary, standby = pair
    started = standby.one("SELECT pg_postmaster_start_time()")
    with standby.connect() as s:
        for mode in ("once", "continuous"):
            with pytest.raises(psycopg.Error) as e:
                s.execute("SELECT tributary_job_create('docs', '{body}', 'e', mode => %s)", (mode,))
            assert e.value.sqlstate == "25006", f"tributary_job_create ({mode}): {e.value.sqlstate} {e.value}"
            assert s.execute("SELECT 1").fetchone()[0] == 1
    assert_standby_up(standby, started)
    assert primary.one("SELECT count(*) FROM tributary.jobs") == 0


def test_no_background_processes_on_standby(pair, docs):
    """No tributary launcher or worker on the standby in recovery; the primary has its launcher.
    No tributary error in the standby's log but the refused writes above (25006)."""
    primary, standby = pair
    poll("a tributary launcher on the primary",
         lambda: ("tributary launcher" in {t for t, _ in tributary_processes(primary)}), 120)
    for _ in range(6):   # ~3 s
        assert standby.one("SELECT pg_is_in_recovery()") is True
        assert standby.one("SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'tributary%'") == 0, \
            tributary_processes(standby)
        time.sleep(0.5)
    ps = subprocess.run(["ps", "-u", "postgres", "-o", "pid=,args="], capture_output=True, text=True).stdout
    standby_pid = int(open(os.path.join(standby.data, "postmaster.pid")).readline())
    children = [line for line in ps.splitlines() if "tributary" in line
                and os.path.exists(f"/proc/{line.split()[0]}/stat")
                and _ppid(int(line.split()[0])) == standby_pid]
    assert not children, f"tributary processes under the standby's postmaster: {children}"
    errors = tributary_errors(standby, allowed=("read-only transaction",))
    assert not errors, "tributary errors in the standby's log:\n" + "\n\n".join("\n".join(r) for r in errors)
    assert not crashes(standby), crashes(standby)


def _ppid(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def test_continuous_job_across_promotion(pair, docs):
    """A continuous job on the primary; 200 rows inserted, replayed on the standby; the primary
    stopped (immediate) mid-job and the standby promoted: a launcher and a worker start there and
    the job catches up by itself, every row with its own text's vector and counted once in
    rows_done; new rows on the promoted server are embedded too."""
    primary, standby = pair
    n0 = len(SENTENCES)
    job_id = primary.one("SELECT tributary_job_create('docs', '{body}', 'e', mode => 'continuous', batch_size => 8)")
    # Nothing to embed yet (tributary_embed_column filled every row): the job shows `pending`
    # until its first rows come, while a worker already watches the database.
    wait_job(primary, job_id, lambda j: j["state"] in ("pending", "running") and j["rows_queued"] == 0
             and not j["last_error"], 180, "caught up")
    poll("a tributary worker on the primary",
         lambda: ("tributary worker" in {t for t, _ in tributary_processes(primary)}), 120)

    extra = 200
    primary.query("INSERT INTO docs (id, body) SELECT g, 'Note number ' || g || ' about ' || "
                  "(ARRAY['rivers', 'trains', 'gardens', 'markets', 'storms', 'castles', 'robots', 'islands'])[1 + g %% 8] "
                  "|| ' and ' || (ARRAY['winter', 'music', 'bridges', 'coffee', 'maps'])[1 + g %% 5] "
                  "FROM generate_series(%s::int, %s::int) g", (n0 + 1, n0 + extra))
    # Mid-job: once the first batch of the new rows has committed (or right away if it takes long).
    deadline = time.monotonic() + 20
    while primary.one("SELECT count(e) FROM docs") == n0 and time.monotonic() < deadline:
        time.sleep(0.02)
    wait_replayed(primary, standby)
    primary_done = primary.one("SELECT count(e) FROM docs")
    primary.stop("immediate")
    assert not primary.running()
    replayed = standby.query("SELECT count(*), count(e) FROM docs")[0]
    assert replayed[0] == n0 + extra, replayed
    # Rows the job had embedded on the primary when it stopped (as the standby has them): the
    # rest is left to the promoted server.
    print(f"at the stop: primary had {primary_done} of {n0 + extra} rows embedded, the standby {replayed[1]}")

    assert standby.one("SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'tributary%'") == 0
    log_at = os.path.getsize(standby.log)
    run_pg([standby.bin("pg_ctl"), "-D", standby.data, "-w", "-t", "60", "promote"], timeout=90)
    assert standby.one("SELECT pg_is_in_recovery()") is False
    promoted_at = time.monotonic()

    seen = set()

    def both():
        seen.update(t for t, _ in tributary_processes(standby))
        return {"tributary launcher", "tributary worker"} <= seen
    poll("a tributary launcher and a tributary worker on the promoted server", both, 180)
    print(f"launcher and worker {time.monotonic() - promoted_at:.1f} s after the promotion")

    j = wait_job(standby, job_id,
                 lambda j: j["rows_queued"] == 0 and standby.one("SELECT count(*) FROM docs WHERE e IS NULL") == 0,
                 300, "every row embedded")
    assert j["state"] == "running" and j["rows_failed"] == 0, j
    assert standby.query("SELECT count(*), count(e) FROM docs")[0] == (n0 + extra, n0 + extra)
    worst = standby.one("SELECT min(1 - (e <=> tributary_embed(body))) FROM docs")
    assert worst > 0.9999, f"a row's vector is not its own text's: worst similarity {worst}"

    # New rows on the promoted server: the job embeds them.
    standby.query("INSERT INTO docs (id, body) VALUES (%s, %s), (%s, %s)",
                  (n0 + extra + 1, "Written after the promotion.", n0 + extra + 2, "The standby is the primary now."))
    wait_job(standby, job_id,
             lambda j: j["rows_queued"] == 0 and standby.one("SELECT count(*) FROM docs WHERE e IS NULL") == 0,
             180, "the rows inserted after the promotion")
    assert standby.one("SELECT min(1 - (e <=> tributary_embed(body))) FROM docs WHERE id > %s", (n0 + extra,)) > 0.9999
    j = job(standby, job_id)
    # A batch commits with its progress: batches the standby never saw (committed on the old
    # primary after the replay we waited for) are not counted, and were done again.
    assert (j["state"], j["rows_done"], j["rows_queued"], j["rows_failed"]) == ("running", extra + 2, 0, 0), j
    assert not crashes(standby, since=log_at), crashes(standby, since=log_at)
    errors = tributary_errors(standby, since=log_at)
    assert not errors, "tributary errors in the promoted server's log since the promotion:\n" + "\n\n".join("\n".join(r) for r in errors)
