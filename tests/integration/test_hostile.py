"""Adversarial tests: tributary is safe to install in a shared database.

Every case runs as the non-superuser roles alice and bob (conftest.py's `hostile_main` and
`hostile_jobs` make them; alice owns schema alice, bob schema bob), asserts an exact SQLSTATE or a
correct result, and after every case the cluster's server log must show no crashed server process.

Needs TRIBUTARY_TEST_DSN (the main cluster, as a superuser) and, for the job cases,
TRIBUTARY_JOBS_DSN (a cluster with tributary in shared_preload_libraries); scripts/test.sh sets
both. Cases skip when theirs is missing.
"""
import os
import threading
import time

import psycopg
import pytest

from jobwait import wait_until

DIM = 384  # all-MiniLM-L6-v2
# Runs for minutes on 2 vCPUs (5,000 texts of 256 tokens); 18 MB of text in all.
LONG_CALL = "SELECT tributary_embed(array_agg(repeat('lorem ipsum ' || g || ' ', 200))) FROM generate_series(1, 5000) g"


@pytest.fixture(autouse=True)
def no_crash(request):
    """After every case: no server process died (server log). Then alice and bob are made
    non-superusers again (one escalation must not taint later cases), and their jobs and the
    objects the case made are dropped."""
    for name in ("hostile_main", "hostile_jobs", "evil", "nb"):  # what outlives the case
        if name in request.fixturenames:
            request.getfixturevalue(name)
    clusters = [request.getfixturevalue(n) for n in ("hostile_main", "hostile_jobs") if n in request.fixturenames]
    before = [(c, c.log_size(), c.objects()) for c in clusters]
    yield
    for c, _, objects in before:
        for role in c.ROLES:
            if c.rolsuper(role):
                c.su(f"ALTER ROLE {role} NOSUPERUSER")
        c.drop_jobs()
        c.drop_objects(c.objects() - objects)
    crashes = [line for c, offset, _ in before for line in c.crashes_since(offset)]
    assert not crashes, "server processes died:\n" + "\n".join(crashes)


def sqlstate(conn, sql, args=None):
    """The SQLSTATE `sql` fails with, or None if it succeeds. A lost connection raises."""
    try:
        cur = conn.execute(sql, args)
        if cur.description:
            cur.fetchall()
    except psycopg.Error as e:
        if e.sqlstate is None:
            raise
        return e.sqlstate
    return None


def expect(conn, sql, code, args=None):
    got = sqlstate(conn, sql, args)
    assert got == code, f"{sql}: expected SQLSTATE {code}, got {got or 'success'}"


def error_of(conn, sql, args=None):
    with pytest.raises(psycopg.Error) as info:
        conn.execute(sql, args)
    return info.value


def one(conn, sql, args=None):
    return conn.execute(sql, args).fetchone()[0]


def make_docs(conn, table, rows=12, embed=True):
    """`table` (id int PRIMARY KEY, body text, label text, grp int, e vector(384)), embedded."""
    conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, body text, label text, grp int, e vector({DIM}))")
    conn.execute(f"INSERT INTO {table} SELECT g, CASE WHEN g %% 2 = 0 THEN 'a cat sat on the mat ' ELSE 'stock prices fell ' END || g, "
                 f"CASE WHEN g %% 2 = 0 THEN 'pets' ELSE 'money' END, g %% 4 FROM generate_series(1, %s) g", (rows,))
    if embed:
        conn.execute(f"SELECT tributary_embed_column('{table}', ARRAY['body'], 'e')")


def worst_cosine_distance(conn, table, text_expr):
    """Largest cosine distance between `table`.e and tributary_embed(text_expr) over its rows."""
    return one(conn, f"SELECT max(e <=> tributary_embed({text_expr})) FROM {table} t")


def peak_mb(pid):
    """VmHWM (peak resident memory) of process `pid`, in MB."""
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) // 1024
    raise AssertionError(f"no VmHWM for {pid}")


def in_thread(conn, sql):
    """Runs `sql` on `conn` in a thread; the dict gets `error` (None on success) and `ended`."""
    out = {}

    def run():
        try:
            conn.execute(sql).fetchall()
            out["error"] = None
        except psycopg.Error as e:
            out["error"] = e
        out["ended"] = time.monotonic()

    th = threading.Thread(target=run)
    th.start()
    return th, out


def finish(cluster, th, pid, timeout=60):
    """Waits for `th`; a call still running after `timeout` s is terminated and the case fails."""
    th.join(timeout)
    if th.is_alive():
        cluster.su("SELECT pg_terminate_backend(%s)", (pid,))
        th.join(30)
        pytest.fail(f"the call was still running {timeout} s later")


def job(cluster, job_id):
    rows = cluster.su("SELECT state, rows_done, rows_queued, rows_failed, last_error FROM tributary.jobs WHERE id = %s", (job_id,))
    assert rows, f"job {job_id} is gone"
    return dict(zip(["state", "rows_done", "rows_queued", "rows_failed", "last_error"], rows[0]))


# Seconds to wait for what a job's worker does: starting, loading the model and retrying a row
# after its back-off take long on a loaded 2-vCPU machine.
JOB_WAIT = 180


def wait_job(cluster, job_id, predicate, timeout, what):
    return wait_until(lambda i: job(cluster, i), job_id, predicate, timeout, what, every=0.2)


# ---------------------------------------------------------------------------------------------
# A. Limits


def test_too_many_texts_fail_fast_and_the_backend_survives(hostile_main):
    """20 million texts in one call exceed tributary.max_texts_per_call (100,000): 54000 at once,
    before anything is tokenized, and the backend goes on embedding."""
    with hostile_main.connect("alice") as a:
        a.execute("SET statement_timeout = '60s'")
        t0 = time.monotonic()
        expect(a, "SELECT tributary_embed(array_fill(''::text, ARRAY[20000000]))", "54000")
        assert time.monotonic() - t0 < 10
        assert one(a, "SELECT vector_dims(tributary_embed('still here'))") == DIM


@pytest.mark.parametrize("label,text", [("empty text", "''"), ("1 MB text", "repeat('word ', 200000)"),
                                        ("50 MB text", "repeat('word ', 10000000)")])
def test_long_texts_are_cut_before_tokenizing(hostile_main, capsys, label, text):
    """A text of any length embeds (it is cut to 64 bytes x the model's window first) with the
    backend's peak memory under 500 MB, and a long text embeds as its first 256 tokens do."""
    with hostile_main.connect("alice") as a:
        pid = one(a, "SELECT pg_backend_pid()")
        a.execute("SET statement_timeout = '120s'")
        assert one(a, f"SELECT vector_dims(tributary_embed({text}))") == DIM
        peak = peak_mb(pid)
        with capsys.disabled():
            print(f"\npeak backend memory: {label}: {peak} MB")
        if text != "''":
            assert one(a, f"SELECT tributary_embed({text}) <=> tributary_embed(repeat('word ', 1000))") < 1e-4
    assert peak < 500


def test_cancel_stops_a_long_call_within_a_second(hostile_main):
    """pg_cancel_backend on a call that would run for minutes ends it with 57014 within 1 s."""
    with hostile_main.connect("alice") as a, hostile_main.connect("alice") as ctl:
        pid = one(a, "SELECT pg_backend_pid()")
        a.execute("SELECT tributary_embed('warm up')")
        th, out = in_thread(a, LONG_CALL)
        time.sleep(1.0)
        assert one(ctl, "SELECT state FROM pg_stat_activity WHERE pid = %s", (pid,)) == "active"
        cancelled_at = time.monotonic()
        assert one(ctl, "SELECT pg_cancel_backend(%s)", (pid,))
        finish(hostile_main, th, pid)
        assert out["error"] is not None and out["error"].sqlstate == "57014", out["error"]
        assert out["ended"] - cancelled_at < 1.0, f"ended {out['ended'] - cancelled_at:.2f} s after the cancel"
        assert one(a, "SELECT vector_dims(tributary_embed('still here'))") == DIM


def test_statement_timeout_stops_a_long_call(hostile_main):
    """statement_timeout = 1s ends a call that would run for minutes with 57014 about 1 s in."""
    with hostile_main.connect("alice") as a:
        pid = one(a, "SELECT pg_backend_pid()")
        a.execute("SELECT tributary_embed('warm up')")
        a.execute("SET statement_timeout = '1s'")
        started = time.monotonic()
        th, out = in_thread(a, LONG_CALL)
        finish(hostile_main, th, pid)
        assert out["error"] is not None and out["error"].sqlstate == "57014", out["error"]
        assert out["ended"] - started < 2.2, f"ended {out['ended'] - started:.2f} s after the start"
        a.execute("SET statement_timeout = 0")
        assert one(a, "SELECT vector_dims(tributary_embed('still here'))") == DIM


# ---------------------------------------------------------------------------------------------
# B. Settings

RAISED = [("tributary.intra_op_threads", "1024"), ("tributary.max_batch_tokens", "4194304"),
          ("tributary.gpu_max_batch_tokens", "4194304"),
          ("tributary.ort_library", "/tmp/evil.so"), ("tributary.model_path", "/tmp"),
          ("tributary.execution_provider", "cpu")]


@pytest.mark.parametrize("setting,value", RAISED)
def test_non_superuser_cannot_raise_limits_or_name_files(hostile_main, setting, value):
    """Raising a resource limit past its default, or setting a superuser-only setting, is 42501
    for alice, by SET and by set_config."""
    with hostile_main.connect("alice") as a:
        a.execute("SELECT tributary_row_template_version()")  # the library is loaded
        expect(a, f"SET {setting} = '{value}'", "42501")
        expect(a, "SELECT set_config(%s, %s, false)", "42501", (setting, value))


@pytest.mark.parametrize("setting,value", RAISED)
def test_placeholder_set_before_loading_is_not_applied(hostile_main, setting, value):
    """A value alice sets before tributary is loaded in her backend (a placeholder) is not taken
    when it loads: the setting keeps its default and embedding works."""
    with hostile_main.connect("alice") as a:
        sqlstate(a, f"SET {setting} = '{value}'")  # may be refused outright: also fine
        assert one(a, "SELECT vector_dims(tributary_embed('after the placeholder'))") == DIM
        assert one(a, f"SHOW {setting}") != value


def test_lowering_limits_works(hostile_main):
    """Lowering max_batch_tokens and intra_op_threads is allowed and gives the same vectors."""
    with hostile_main.connect("alice") as a:
        v = one(a, "SELECT tributary_embed('the same text either way')::text")
        a.execute("SET tributary.max_batch_tokens = 512")
        a.execute("SET tributary.intra_op_threads = 1")
        assert one(a, "SELECT tributary_embed('the same text either way') <=> %s::vector", (v,)) < 1e-5


# ---------------------------------------------------------------------------------------------
# C. Jobs: the privilege escalation through a domain CHECK on the key

ESCALATION = [
    """CREATE FUNCTION alice.pwn(v int) RETURNS boolean LANGUAGE plpgsql AS $$ BEGIN
       IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN EXECUTE 'ALTER ROLE alice SUPERUSER'; END IF;
       RETURN true; END $$""",
    "CREATE DOMAIN alice.evil_id AS int CHECK (alice.pwn(VALUE))",
    """CREATE FUNCTION alice.boom() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
       IF NEW.id = 2 THEN RAISE EXCEPTION 'boom'; END IF; RETURN NEW; END $$""",
]


@pytest.fixture(scope="module")
def evil(hostile_jobs):
    """alice.pwn (makes alice a superuser when run by one), the domain alice.evil_id that calls
    it, and the trigger function alice.boom (fails row 2)."""
    with hostile_jobs.connect("alice") as a:
        for sql in ESCALATION:
            a.execute(sql)
    return hostile_jobs


def evil_table(a, name, boom_on_target=False):
    """alice.<name> (id alice.evil_id PRIMARY KEY, body, e) with rows 1-4; row 2's write fails
    (on alice.<name>_emb, pre-created, when boom_on_target)."""
    a.execute(f"CREATE TABLE alice.{name} (id alice.evil_id PRIMARY KEY, body text, e vector({DIM}))")
    a.execute(f"INSERT INTO alice.{name} SELECT g, 'text ' || g FROM generate_series(1, 4) g")
    boomed = f"alice.{name}"
    if boom_on_target:
        boomed = f"alice.{name}_emb"
        a.execute(f"CREATE TABLE {boomed} (id alice.evil_id PRIMARY KEY, e vector({DIM}))")
    a.execute(f"CREATE TRIGGER boom BEFORE INSERT OR UPDATE ON {boomed} FOR EACH ROW EXECUTE FUNCTION alice.boom()")


def still_not_superuser(cluster, wait):
    """Runs `wait` (which may time out), then asserts alice is not a superuser, first."""
    failure = None
    try:
        wait()
    except AssertionError as e:
        failure = e
    assert not cluster.rolsuper("alice"), "alice became a superuser"
    if failure:
        raise failure


def row2_error(cluster, job_id):
    rows = cluster.su("SELECT attempts, status FROM tributary.job_errors WHERE job_id = %s AND key->>'id' = '2'", (job_id,))
    return rows[0] if rows else (0, None)


def embedded_ids(cluster, table):
    return [r[0] for r in cluster.su(f"SELECT id FROM {table} WHERE e IS NOT NULL ORDER BY id")]


def test_escalation_first_pass(evil):
    """A job on a table whose key is a domain with alice's CHECK function embeds rows 1, 3, 4,
    records row 2's failure, and never runs alice's function as a superuser."""
    with evil.connect("alice") as a:
        evil_table(a, "esc")
        job_id = one(a, "SELECT tributary_job_create('alice.esc', '{body}', 'e')")
    still_not_superuser(evil, lambda: wait_job(evil, job_id, lambda j: j["rows_done"] >= 3 and j["rows_failed"] >= 1, JOB_WAIT, "first pass"))
    assert embedded_ids(evil, "alice.esc") == [1, 3, 4]
    assert row2_error(evil, job_id)[0] >= 1


def test_escalation_retry(evil):
    """(a) The failed row's retry after its back-off (requeued by the worker) does not run alice's
    function as a superuser either."""
    with evil.connect("alice") as a:
        evil_table(a, "esc_retry")
        job_id = one(a, "SELECT tributary_job_create('alice.esc_retry', '{body}', 'e')")
    still_not_superuser(evil, lambda: wait_job(evil, job_id, lambda j: j["state"] in ("done", "failed"), JOB_WAIT, "done"))
    assert row2_error(evil, job_id) == (2, "gave_up")
    assert embedded_ids(evil, "alice.esc_retry") == [1, 3, 4]


def test_escalation_resume(evil):
    """(b) tributary_job_resume by alice after the job is done with a failed row requeues it
    without running alice's function as a superuser."""
    with evil.connect("alice") as a:
        evil_table(a, "esc_resume")
        job_id = one(a, "SELECT tributary_job_create('alice.esc_resume', '{body}', 'e')")

        def resume_and_wait():
            wait_job(evil, job_id, lambda j: j["state"] == "done", JOB_WAIT, "done")
            a.execute("SELECT tributary_job_resume(%s)", (job_id,))
            deadline = time.monotonic() + JOB_WAIT
            while row2_error(evil, job_id)[0] < 3 or job(evil, job_id)["state"] != "done":
                assert time.monotonic() < deadline, f"row 2 not retried after resume: {row2_error(evil, job_id)}"
                time.sleep(0.2)

        still_not_superuser(evil, resume_and_wait)


def test_escalation_whole_row_job(evil):
    """(c) A whole-row job ('{*}') on such a table does not run alice's function as a superuser."""
    with evil.connect("alice") as a:
        evil_table(a, "esc_whole")
        job_id = one(a, "SELECT tributary_job_create('alice.esc_whole', '{*}', 'e')")
    still_not_superuser(evil, lambda: wait_job(evil, job_id, lambda j: j["state"] in ("done", "failed"), JOB_WAIT, "done"))
    assert embedded_ids(evil, "alice.esc_whole") == [1, 3, 4]


def test_escalation_continuous_job(evil):
    """(d) A continuous job whose triggers queue alice's inserts and updates does not run alice's
    function as a superuser (first pass, trigger-queued rows, the retry)."""
    with evil.connect("alice") as a:
        evil_table(a, "esc_cont")
        job_id = one(a, "SELECT tributary_job_create('alice.esc_cont', '{body}', 'e', mode => 'continuous')")

        def edit_and_wait():
            wait_job(evil, job_id, lambda j: j["rows_done"] >= 3 and j["rows_failed"] >= 1, JOB_WAIT, "first pass")
            a.execute("INSERT INTO alice.esc_cont SELECT g, 'text ' || g FROM generate_series(5, 6) g")
            a.execute("UPDATE alice.esc_cont SET body = 'changed ' || id WHERE id IN (3, 4)")
            wait_job(evil, job_id, lambda j: j["rows_done"] >= 7 and j["rows_queued"] == 0, JOB_WAIT, "edits embedded")
            deadline = time.monotonic() + JOB_WAIT
            while row2_error(evil, job_id)[1] != "gave_up":
                assert time.monotonic() < deadline, f"row 2 not retried: {row2_error(evil, job_id)}"
                time.sleep(0.2)

        still_not_superuser(evil, edit_and_wait)
    assert embedded_ids(evil, "alice.esc_cont") == [1, 3, 4, 5, 6]


def test_escalation_target_table_job(evil):
    """(e) A job writing into a separate target table keyed by the domain does not run alice's
    function as a superuser."""
    with evil.connect("alice") as a:
        evil_table(a, "esc_tgt", boom_on_target=True)
        job_id = one(a, "SELECT tributary_job_create('alice.esc_tgt', '{body}', 'e', target_table => 'alice.esc_tgt_emb')")
    still_not_superuser(evil, lambda: wait_job(evil, job_id, lambda j: j["state"] in ("done", "failed"), JOB_WAIT, "done"))
    assert embedded_ids(evil, "alice.esc_tgt_emb") == [1, 3, 4]


# ---------------------------------------------------------------------------------------------
# C. Jobs: authorization, visibility, names, temporary tables, triggers


def alice_job(cluster, table="alice.ctl"):
    """A continuous job of alice's on a new 3-row table (it stays pending or running)."""
    with cluster.connect("alice") as a:
        make_docs(a, table, rows=3, embed=False)
        return one(a, "SELECT tributary_job_create(%s, '{body}', 'e', mode => 'continuous')", (table,))


def test_security_definer_function_acts_as_its_owner(hostile_main):
    """alice calling bob's SECURITY DEFINER function that pauses alice's job: to bob the job does
    not exist (42704), and it is not paused."""
    job_id = alice_job(hostile_main)
    with hostile_main.connect("bob") as b:
        b.execute("""CREATE FUNCTION bob.f(j bigint) RETURNS void LANGUAGE plpgsql SECURITY DEFINER
                     SET search_path = public AS $$ BEGIN PERFORM tributary_job_pause(j); END $$""")
    with hostile_main.connect("alice") as a:
        expect(a, "SELECT bob.f(%s)", "42704", (job_id,))
    assert job(hostile_main, job_id)["state"] != "paused"


@pytest.mark.parametrize("fn", ["tributary_job_pause", "tributary_job_resume", "tributary_job_cancel", "tributary_job_drop"])
def test_another_users_job_looks_like_no_job(hostile_main, fn):
    """bob controlling alice's job gets 42704 with the message a job id that does not exist gets
    (no job ids revealed), and alice's job is untouched."""
    job_id = alice_job(hostile_main)
    before = job(hostile_main, job_id)["state"]
    missing = hostile_main.su("SELECT max(id) + 1000000 FROM tributary.jobs")[0][0]
    with hostile_main.connect("bob") as b:
        theirs = error_of(b, f"SELECT {fn}(%s)", (job_id,))
        nothing = error_of(b, f"SELECT {fn}(%s)", (missing,))
    assert (theirs.sqlstate, nothing.sqlstate) == ("42704", "42704")
    assert theirs.diag.message_primary.replace(str(job_id), "N") == nothing.diag.message_primary.replace(str(missing), "N")
    # Untouched: still there (job() asserts it), not paused or cancelled; its worker may have
    # moved it on meanwhile (pending -> running -> done), as it does by itself.
    after = job(hostile_main, job_id)["state"]
    assert before in ("pending", "running") and after in ("pending", "running", "done"), (before, after)


def test_views_show_only_own_jobs(hostile_jobs):
    """tributary.jobs, tributary.job_errors and tributary.workers() show alice only her jobs and
    their workers, bob only his; the superuser sees all."""
    cl = hostile_jobs
    with cl.connect("alice") as a, cl.connect("bob") as b:
        for conn, who, rows in ((b, "bob", 1500), (a, "alice", 3)):
            conn.execute(f"""CREATE FUNCTION {who}.reject() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
                             IF NEW.id % 50 = 1 THEN RAISE EXCEPTION 'rejected'; END IF; RETURN NEW; END $$""")
            make_docs(conn, f"{who}.t", rows=rows, embed=False)
            conn.execute(f"CREATE TRIGGER reject BEFORE UPDATE ON {who}.t FOR EACH ROW EXECUTE FUNCTION {who}.reject()")
        bob_job = one(b, "SELECT tributary_job_create('bob.t', '{body}', 'e', batch_size => 8)")
        a_job = one(a, "SELECT tributary_job_create('alice.t', '{body}', 'e')")

        # A worker busy with bob's job (seen by the superuser before and after alice looks).
        seen = None
        deadline = time.monotonic() + JOB_WAIT
        while seen is None and time.monotonic() < deadline:
            busy = cl.su("SELECT pid FROM tributary.workers() WHERE job = %s", (bob_job,))
            if busy:
                shown = a.execute("SELECT pid, job FROM tributary.workers()").fetchall()
                if cl.su("SELECT pid FROM tributary.workers() WHERE job = %s", (bob_job,)) == busy:
                    seen = shown
            time.sleep(0.05)
        assert seen is not None, "no worker was seen running bob's job"
        assert all(job_id == a_job for _, job_id in seen), f"alice sees workers of other jobs: {seen}"

        wait_job(cl, a_job, lambda j: j["rows_failed"] >= 1, JOB_WAIT, "alice's failed row")
        wait_job(cl, bob_job, lambda j: j["rows_failed"] >= 1, JOB_WAIT, "bob's failed row")
        for conn, mine in ((a, a_job), (b, bob_job)):
            assert {r[0] for r in conn.execute("SELECT id FROM tributary.jobs")} == {mine}
            errors = {r[0] for r in conn.execute("SELECT job_id FROM tributary.job_errors")}
            assert errors == {mine}
    assert {r[0] for r in cl.su("SELECT job_id FROM tributary.job_errors")} >= {a_job, bob_job}
    assert {r[0] for r in cl.su("SELECT id FROM tributary.jobs")} >= {a_job, bob_job}


@pytest.mark.parametrize("source", ["shadow", "pg_temp.shadow", "pg_temp.only_temp"])
def test_job_on_temporary_table_is_refused(hostile_jobs, source):
    """A job on a temporary table (also one named like alice's regular table alice.shadow) is
    0A000, and alice.shadow is never embedded."""
    with hostile_jobs.connect("alice") as a:
        make_docs(a, "alice.shadow", rows=5, embed=False)
        a.execute(f"CREATE TEMP TABLE shadow (id int PRIMARY KEY, body text, e vector({DIM}))")
        a.execute(f"CREATE TEMP TABLE only_temp (id int PRIMARY KEY, body text, e vector({DIM}))")
        a.execute("INSERT INTO shadow SELECT g, 'temporary ' || g FROM generate_series(1, 5) g")
        a.execute("INSERT INTO only_temp SELECT g, 'temporary ' || g FROM generate_series(1, 5) g")
        got = sqlstate(a, "SELECT tributary_job_create(%s, '{body}', 'e')", (source,))
        # A job that slipped through has had time to run.
        for (job_id,) in hostile_jobs.su("SELECT id FROM tributary.jobs WHERE owner::text = 'alice'"):
            wait_job(hostile_jobs, job_id, lambda j: j["state"] not in ("pending", "running"), 20, "finished")
        assert hostile_jobs.su("SELECT count(*) FROM alice.shadow WHERE e IS NOT NULL")[0][0] == 0
    assert got == "0A000", f"expected SQLSTATE 0A000, got {got or 'success'}"


def test_job_names_are_unique_per_owner(hostile_main):
    """alice and bob may each have a job named 'same'; alice's second 'same' is 42710."""
    with hostile_main.connect("alice") as a, hostile_main.connect("bob") as b:
        make_docs(a, "alice.named", rows=3, embed=False)
        make_docs(b, "bob.named", rows=3, embed=False)
        a.execute("SELECT tributary_job_create('alice.named', '{body}', 'e', name => 'same')")
        b.execute("SELECT tributary_job_create('bob.named', '{body}', 'e', name => 'same')")
        expect(a, "SELECT tributary_job_create('alice.named', '{label}', 'e', name => 'same')", "42710")


def test_continuous_job_trigger_functions_cannot_be_changed_by_the_owner(hostile_main):
    """The functions a continuous job's triggers run (they run with the job's rights) cannot be
    altered or replaced by the job's owner: 42501."""
    alice_job(hostile_main, "alice.cont")
    fns = [r[0] for r in hostile_main.su(
        "SELECT DISTINCT tgfoid::regprocedure::text FROM pg_trigger "
        "WHERE tgrelid = 'alice.cont'::regclass AND tgname LIKE 'tributary\\_job\\_%'")]
    assert fns, "the continuous job made no triggers"
    with hostile_main.connect("alice") as a:
        for fn in fns:
            for change in ("SET search_path = alice, public", "SECURITY INVOKER", "RENAME TO mine"):
                expect(a, f"ALTER FUNCTION {fn} {change}", "42501")
            expect(a, f"CREATE OR REPLACE FUNCTION {fn} RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$", "42501")


@pytest.mark.parametrize("t,ddl", [("gone_column", "ALTER TABLE alice.{t} DROP COLUMN body"), ("gone_table", "DROP TABLE alice.{t}")])
def test_dropping_the_source_during_a_job_ends_it_cleanly(hostile_jobs, capsys, t, ddl):
    """Dropping the embedded column or the whole source while its job runs: the job is paused
    (column), fails or finishes with a last_error saying why, and nothing crashes."""
    with hostile_jobs.connect("alice") as a:
        a.execute(f"CREATE TABLE alice.{t} (id int PRIMARY KEY, body text, e vector({DIM}))")
        a.execute(f"INSERT INTO alice.{t} SELECT g, repeat('some words for row ' || g || ' ', 10) FROM generate_series(1, 3000) g")
        job_id = one(a, f"SELECT tributary_job_create('alice.{t}', '{{body}}', 'e', batch_size => 16)")
        wait_job(hostile_jobs, job_id, lambda j: j["rows_done"] >= 16, JOB_WAIT, "a first batch")
        a.execute("SET lock_timeout = '30s'")
        a.execute(ddl.format(t=t))
    # A dropped column pauses the job (tributary._job_ddl); a dropped table fails it.
    j = wait_job(hostile_jobs, job_id, lambda j: j["state"] in ("failed", "done", "cancelled", "paused"), JOB_WAIT, "an end")
    with capsys.disabled():
        print(f"\n{ddl.format(t=t)} during the job: state {j['state']}, last_error {j['last_error']!r}")
    assert j["last_error"], j


# ---------------------------------------------------------------------------------------------
# D. The SQL surface against hostile arguments (main cluster, as alice)

SENSIBLE = {  # argument name -> a good value, where the type alone does not say
    "tbl": "'alice.nb'::regclass", "source": "'alice.nb'::regclass", "columns": "ARRAY['body']", "target": "'e'",
    "model": "'all-MiniLM-L6-v2'", "label": "'label'", "embedding": "'e'", "group_by": "'grp'",
    "query": "(SELECT e FROM alice.nb WHERE id = 1)", "row": "(SELECT n FROM alice.nb n WHERE id = 1)",
    "include": "ARRAY['body']", "exclude": "ARRAY['label']", "time_columns": "ARRAY[]::text[]", "kind": "'auto'",
    "mode": "'once'", "precision": "'fp32'", "path": "'/nonexistent'", "name": "'battery'", "test_fraction": "0.3",
    "k": "3", "batch_size": "16", "workers": "1", "template": "1", "max_tokens": "128",
}
BY_TYPE = {
    "text": "'hello world'", "text[]": "ARRAY['hello', 'world']", "integer": "1", "bigint": "1", "boolean": "false",
    "double precision": "0.5", "name": "'e'", "regclass": "'alice.nb'::regclass", "timestamp with time zone": "now()",
    "vector": SENSIBLE["query"], "record": SENSIBLE["row"],
}


@pytest.fixture(scope="module")
def nb(hostile_main):
    """alice.nb: 12 embedded rows with a label and a group, for calls that need a table."""
    with hostile_main.connect("alice") as a:
        make_docs(a, "alice.nb")
    return hostile_main


def tributary_functions(cluster):
    """(signature, qualified name, returns a set, [(arg name, type, default)]) of every function
    whose name starts with tributary_."""
    out = []
    for oid, sig, qname, retset, names, modes, alltypes, intypes in cluster.su(
        "SELECT p.oid, p.oid::regprocedure::text, quote_ident(n.nspname) || '.' || quote_ident(p.proname), p.proretset, "
        "       p.proargnames, p.proargmodes::text[], "
        "       array(SELECT format_type(t, NULL) FROM unnest(coalesce(p.proallargtypes, p.proargtypes::oid[])) WITH ORDINALITY u(t, i) ORDER BY i), "
        "       p.pronargs "
        "FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE p.proname LIKE 'tributary\\_%' ORDER BY 2"):
        modes = modes or ["i"] * len(alltypes)
        args = []
        for pos, (mode, typ) in enumerate(zip(modes, alltypes), start=1):
            if mode in ("i", "b"):
                default = cluster.su("SELECT pg_get_function_arg_default(%s, %s)", (oid, pos))[0][0]
                args.append(((names or [None] * len(alltypes))[pos - 1], typ, default))
        assert len(args) == intypes, sig
        out.append((sig, qname, retset, args))
    return out


def is_null(value):
    """NULL, or a row of NULLs."""
    return value is None or (isinstance(value, tuple) and all(is_null(v) for v in value))


def test_null_in_every_argument_position(nb):
    """NULL in any one argument of any tributary_ function, sensible values elsewhere: NULL (or,
    where NULL is the argument's default, any result) or a documented 22xxx/42xxx error; never
    XX000, 42601 or a crash."""
    functions = tributary_functions(nb)
    assert len(functions) >= 10, functions
    bad = []
    calls = 0
    a = nb.connect("alice")
    try:
        a.execute("SET statement_timeout = '60s'")
        for sig, qname, retset, args in functions:
            for i, (arg, typ, default) in enumerate(args):
                assert arg, f"{sig}: unnamed argument {i + 1}"
                values = []
                for j, (other, otyp, odefault) in enumerate(args):
                    if j == i:
                        null = "NULL::alice.nb" if otyp == "record" else f"NULL::{otyp}"
                        values.append(f'"{other}" => {null}')
                    elif odefault is None:
                        values.append(f'"{other}" => {SENSIBLE.get(other, BY_TYPE.get(otyp))}')
                call = f"{qname}({', '.join(values)})"
                sql = f"SELECT * FROM {call}" if retset else f"SELECT {call}"
                calls += 1
                try:
                    rows = a.execute(sql).fetchall()
                except psycopg.Error as e:
                    if e.sqlstate is None:
                        bad.append(f"{sql}: connection lost ({e})")
                        a = nb.connect("alice")
                    elif e.sqlstate[:2] not in ("22", "42") or e.sqlstate == "42601":
                        bad.append(f"{sql}: SQLSTATE {e.sqlstate}: {e.diag.message_primary}")
                    continue
                null_result = all(is_null(v) for r in rows for v in r)
                if not null_result and not (default or "").upper().startswith("NULL"):
                    bad.append(f"{sql}: a result ({str(rows)[:80]}), not NULL or an error")
    finally:
        a.close()
    assert calls > 40
    assert not bad, f"{len(bad)} of {calls} calls:\n" + "\n".join(bad)


@pytest.mark.parametrize("sql", [
    "SELECT tributary_embed('x', 'no such model')",
    "SELECT tributary_embed(ARRAY['x'], 'no such model')",
    "SELECT tributary_embed(n, 'no such model') FROM alice.nb n WHERE id = 1",
    "SELECT tributary_row_text(n, model => 'no such model') FROM alice.nb n WHERE id = 1",
    "SELECT tributary_embed_column('alice.nb', ARRAY['body'], 'e', 'no such model')",
    "SELECT * FROM tributary_info('no such model')",
])
def test_unknown_model(nb, sql):
    """An unknown model name is 42704 everywhere a model is named."""
    with nb.connect("alice") as a:
        expect(a, sql, "42704")


HOSTILE_TABLES = [
    # Not even a name to PostgreSQL's regclass input, which rejects it before tributary runs.
    ('x"; DROP TABLE public.y_canary, alice.y; --', "42602"),
    ('"x""; DROP TABLE public.y_canary, alice.y; --"', "42P01"),
    ('alice."y; DROP TABLE public.y_canary, alice.y; --"', "42P01"),
    ('alice."y "', "42P01"),
    ('"alice.y"', "42P01"),
]
TABLE_CALLS = [
    "SELECT tributary_embed_column(%s, ARRAY['body'], 'e')",
    "SELECT tributary_embed_column(%s, '{*}', 'e')",
    "SELECT * FROM tributary_predict(%s, 'label', 'e', (SELECT e FROM alice.nb WHERE id = 1))",
    "SELECT * FROM tributary_evaluate(%s, 'label', 'e')",
    "SELECT tributary_job_create(%s, '{body}', 'e')",
]


@pytest.fixture
def canaries(nb):
    """alice.y (alice's) and public.y_canary (the superuser's), which hostile names try to drop;
    checked to be still there afterwards."""
    nb.su("DROP TABLE IF EXISTS public.y_canary")
    with nb.connect("alice") as a:
        a.execute("CREATE TABLE alice.y (id int)")
    nb.su("CREATE TABLE public.y_canary (id int)")
    yield nb
    kept = nb.su("SELECT to_regclass('alice.y') IS NOT NULL AND to_regclass('public.y_canary') IS NOT NULL")[0][0]
    nb.su("DROP TABLE IF EXISTS public.y_canary, alice.y")
    assert kept, "a canary table was dropped"


@pytest.mark.parametrize("call", TABLE_CALLS)
@pytest.mark.parametrize("name,code", HOSTILE_TABLES)
def test_hostile_table_names(canaries, call, name, code):
    """A table name carrying SQL, quotes or spaces that names no table: 42P01 (42602 where it is
    no name at all), and nothing is dropped."""
    with canaries.connect("alice") as a:
        expect(a, call, code, (name,))


@pytest.mark.parametrize("sql,code", [
    ("SELECT tributary_embed_column('alice.nb', ARRAY['body\"; DROP TABLE public.y_canary, alice.y; --'], 'e')", "42703"),
    ("SELECT tributary_embed_column('alice.nb', ARRAY['body'], 'e\"; DROP TABLE public.y_canary, alice.y; --')", "42703"),
    ("SELECT * FROM tributary_predict('alice.nb', 'label\"; DROP TABLE public.y_canary, alice.y; --', 'e', "
     "(SELECT e FROM alice.nb WHERE id = 1))", "42703"),
    ("SELECT tributary_job_create('alice.nb', '{body}', 'e', target_table => 'x\"; DROP TABLE public.y_canary, alice.y; --')", "22023"),
])
def test_hostile_column_and_target_names(canaries, sql, code):
    """Column and target names carrying SQL are unknown columns (42703), a target table that is
    no name is a bad argument (22023, parse_ident's), and nothing is dropped."""
    with canaries.connect("alice") as a:
        expect(a, sql, code)


WEIRD = 'we"ird tab; DROP TABLE alice.y; --'


def test_names_with_quotes_and_spaces_work(canaries):
    """A table and columns whose names hold quotes, spaces and SQL are embedded correctly, by
    column and whole row, and a continuous job on it queues new rows (its triggers quote them)."""
    with canaries.connect("alice") as a:
        a.execute(f'CREATE TABLE alice."we""ird tab; DROP TABLE alice.y; --" '
                  f'(id int PRIMARY KEY, "bo""dy x; --" text, "e""v x" vector({DIM}), "w""hole" vector({DIM}))')
        tbl = one(a, "SELECT format('%%I.%%I', 'alice', %s::text)", (WEIRD,))
        a.execute(f"INSERT INTO {tbl} SELECT g, 'weird text ' || g FROM generate_series(1, 5) g")
        assert one(a, "SELECT tributary_embed_column(%s, ARRAY['bo\"dy x; --'], 'e\"v x')", (tbl,)) == 5
        assert one(a, "SELECT tributary_embed_column(%s, '{*}', 'w\"hole')", (tbl,)) == 5
        assert one(a, f'SELECT max("e""v x" <=> tributary_embed("bo""dy x; --")) FROM {tbl}') < 1e-4
        assert one(a, f'SELECT max("w""hole" <=> tributary_embed(t)) FROM {tbl} t') < 1e-4
        job_id = one(a, "SELECT tributary_job_create(%s, ARRAY['bo\"dy x; --'], 'e\"v x', mode => 'continuous')", (tbl,))
        a.execute(f"INSERT INTO {tbl} (id, \"bo\"\"dy x; --\") VALUES (6, 'a new row')")
        assert one(a, "SELECT rows_queued FROM tributary.jobs WHERE id = %s", (job_id,)) == 1
        # A target table named like that is made under exactly that name.
        target = 'alice."t""x; DROP TABLE alice.y; --"'
        a.execute("SELECT tributary_job_create(%s, ARRAY['bo\"dy x; --'], target_table => %s)", (tbl, target))
        assert a.execute("SELECT relnamespace::regnamespace::text, relname FROM pg_class WHERE oid = to_regclass(%s)",
                         (target,)).fetchone() == ("alice", 't"x; DROP TABLE alice.y; --')


@pytest.mark.parametrize("kind,create,code", [
    ("view", f"CREATE TABLE alice.rel_base (id int PRIMARY KEY, body text, e vector({DIM})); "
             "INSERT INTO alice.rel_base SELECT g, 'base ' || g FROM generate_series(1, 5) g; "
             "CREATE VIEW alice.rel AS SELECT * FROM alice.rel_base", "42809"),
    ("materialized view", f"CREATE MATERIALIZED VIEW alice.rel AS SELECT id, body, NULL::vector({DIM}) AS e FROM alice.nb", "42809"),
    # Rows of two partitions (and of a parent and its inheritance child) share ctids: every row
    # must still get its own text's vector.
    ("partitioned table", f"CREATE TABLE alice.rel (id int, body text, e vector({DIM})) PARTITION BY RANGE (id); "
                          "CREATE TABLE alice.rel_1 PARTITION OF alice.rel FOR VALUES FROM (0) TO (100); "
                          "CREATE TABLE alice.rel_2 PARTITION OF alice.rel FOR VALUES FROM (100) TO (200); "
                          "INSERT INTO alice.rel SELECT g, 'part one ' || g FROM generate_series(1, 3) g; "
                          "INSERT INTO alice.rel SELECT g, 'part two ' || g FROM generate_series(101, 102) g", None),
    ("inherited table", f"CREATE TABLE alice.rel (id int, body text, e vector({DIM})); "
                        "CREATE TABLE alice.rel_child (extra int) INHERITS (alice.rel); "
                        "INSERT INTO alice.rel SELECT g, 'parent ' || g FROM generate_series(1, 3) g; "
                        "INSERT INTO alice.rel_child SELECT g, 'child ' || g FROM generate_series(11, 12) g", None),
    ("temporary table", f"CREATE TEMP TABLE rel (id int PRIMARY KEY, body text, e vector({DIM})); "
                        "INSERT INTO rel SELECT g, 'temporary ' || g FROM generate_series(1, 5) g", None),
    ("unlogged table", f"CREATE UNLOGGED TABLE alice.rel (id int PRIMARY KEY, body text, e vector({DIM})); "
                       "INSERT INTO alice.rel SELECT g, 'unlogged ' || g FROM generate_series(1, 5) g", None),
])
def test_embed_column_on_each_kind_of_relation(nb, kind, create, code):
    """tributary_embed_column on a view (42809), a materialized view (42809), and on partitioned,
    inherited, temporary and unlogged tables, where it writes the right vectors (rows of different
    partitions or children share ctids)."""
    with nb.connect("alice") as a:
        for statement in create.split("; "):
            a.execute(statement)
        table = "rel" if kind == "temporary table" else "alice.rel"
        if code:
            expect(a, f"SELECT tributary_embed_column('{table}', ARRAY['body'], 'e')", code)
        else:
            assert one(a, f"SELECT tributary_embed_column('{table}', ARRAY['body'], 'e')") == 5
            assert worst_cosine_distance(a, table, "t.body") < 1e-4


@pytest.mark.parametrize("target_type,code", [("int", "42804"), ("text", "42804"), ("real[]", "42804"),
                                              ("vector(3)", "22000"), (f"halfvec({DIM + 1})", "22000")])
def test_wrong_target_column(nb, target_type, code):
    """A target that is not vector/halfvec is 42804; one of the wrong dimension is 22000."""
    with nb.connect("alice") as a:
        a.execute(f"CREATE TABLE alice.wrong (id int PRIMARY KEY, body text, t {target_type})")
        a.execute("INSERT INTO alice.wrong VALUES (1, 'some text')")
        expect(a, "SELECT tributary_embed_column('alice.wrong', ARRAY['body'], 't')", code)


NB_QUERY = "(SELECT e FROM alice.nb WHERE id = 1)"


@pytest.mark.parametrize("sql", [
    *(f"SELECT tributary_embed_column('alice.nb', ARRAY['body'], 'e', batch_size => {n})" for n in (0, -1, 2147483647)),
    *(f"SELECT tributary_job_create('alice.nb', '{{body}}', 'e', batch_size => {n})" for n in (0, -1, 2147483647)),
    *(f"SELECT tributary_job_create('alice.nb', '{{body}}', 'e', workers => {n})" for n in (0, -1)),
    *(f"SELECT * FROM tributary_predict('alice.nb', 'label', 'e', {NB_QUERY}, k => {n})" for n in (0, -1, 2147483647)),
    *(f"SELECT * FROM tributary_evaluate('alice.nb', 'label', 'e', test_fraction => {f})" for f in ("0", "1", "-0.5", "1.5", "'NaN'")),
    "SELECT * FROM tributary_evaluate('alice.nb', 'label', 'e', k => 0)",
    *(f"SELECT tributary_row_text(n, {o}) FROM alice.nb n WHERE id = 1"
      for o in ("parents => -1", "children => -1", "template => 999", "max_tokens => -1")),
    "SELECT tributary_embed(n, parents => -1) FROM alice.nb n WHERE id = 1",
    "SELECT tributary_embed_column('alice.nb', '{*}', 'e', parents => -1)",
])
def test_out_of_range_numbers(nb, sql):
    """Negative, zero or huge batch sizes, k, worker counts, fractions and context depths: 22023."""
    with nb.connect("alice") as a:
        expect(a, sql, "22023")


@pytest.mark.parametrize("kind,typ,value", [
    ("domain over text", "alice.short_text", "'a text in a domain ' || g"),
    ("text array", "text[]", "ARRAY['first item ' || g, 'second item']"),
    ("2-D int array", "int[]", "ARRAY[[g, 2], [3, 4]]"),
    ("json", "json", "json_build_object('title', 'json row ' || g, 'tags', json_build_array('a', 'b'))"),
    ("jsonb", "jsonb", "jsonb_build_object('title', 'jsonb row ' || g, 'n', g)"),
    ("composite", "alice.pair", "ROW('left side ' || g, g)::alice.pair"),
])
def test_columns_of_other_types(nb, kind, typ, value):
    """Domains over text, arrays, json and composite columns embed as their text cast."""
    with nb.connect("alice") as a:
        a.execute("CREATE DOMAIN alice.short_text AS text CHECK (length(VALUE) < 1000)")
        a.execute("CREATE TYPE alice.pair AS (name text, n int)")
        a.execute(f"CREATE TABLE alice.typed (id int PRIMARY KEY, v {typ}, e vector({DIM}))")
        a.execute(f"INSERT INTO alice.typed SELECT g, {value} FROM generate_series(1, 3) g")
        assert one(a, "SELECT tributary_embed_column('alice.typed', ARRAY['v'], 'e')") == 3
        assert worst_cosine_distance(a, "alice.typed", "t.v::text") < 1e-4
        a.execute("UPDATE alice.typed SET e = NULL")
        assert one(a, "SELECT tributary_embed_column('alice.typed', '{*}', 'e')") == 3
        assert worst_cosine_distance(a, "alice.typed", "t") < 1e-4


def test_whole_row_of_a_1600_column_table(nb):
    """A table of 1,600 columns (PostgreSQL's most) embeds whole rows, as tributary_embed(row)."""
    cols = [f"c{i}" for i in range(1, 1599)]
    filled = cols[49::50]
    with nb.connect("alice") as a:
        a.execute(f"CREATE TABLE alice.wide (id int PRIMARY KEY, {', '.join(c + ' text' for c in cols)}, e vector({DIM}))")
        for row in (1, 2):
            a.execute(f"INSERT INTO alice.wide (id, {', '.join(filled)}) VALUES ({row}, "
                      + ", ".join(f"'value {c} of row {row}'" for c in filled) + ")")
        assert one(a, "SELECT tributary_embed_column('alice.wide', '{*}', 'e')") == 2
        assert worst_cosine_distance(a, "alice.wide", "t") < 1e-4
        assert one(a, "SELECT length(tributary_row_text(t)) FROM alice.wide t WHERE id = 1") > 0


def test_two_dimensional_text_array(nb, capsys):
    """A 2-D text[] is 2202E, or gives vectors in the same shape (either is fine; printed)."""
    with nb.connect("alice") as a:
        try:
            dims = one(a, "SELECT array_dims(tributary_embed('{{a,b},{c,d}}'::text[]))")
            outcome = f"a {dims} result"
        except psycopg.Error as e:
            dims, outcome = None, f"SQLSTATE {e.sqlstate}"
        with capsys.disabled():
            print(f"\n2-D text[] to tributary_embed(text[]): {outcome}")
    assert dims == "[1:2][1:2]" or outcome == "SQLSTATE 2202E", outcome


SIGNALS = {"SIGHUP": 1, "SIGINT": 2, "SIGQUIT": 3, "SIGUSR1": 10, "SIGUSR2": 12, "SIGALRM": 14, "SIGTERM": 15}


def test_threads_block_postgres_signals(nb):
    """Every thread of a backend that has embedded, other than its main thread, blocks the
    signals PostgreSQL handles, so that they are always delivered to the main thread."""
    with nb.connect("alice") as a:
        pid = one(a, "SELECT pg_backend_pid()")
        a.execute("SELECT tributary_embed(array_agg('text number ' || g)) FROM generate_series(1, 64) g")
        others = [t for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid]
        if not others:
            pytest.skip("the backend has no threads besides its main thread")
        bad = []
        for tid in others:
            status = dict(line.split(":", 1) for line in open(f"/proc/{pid}/task/{tid}/status") if ":" in line)
            blocked = int(status["SigBlk"].strip(), 16)
            missing = [name for name, n in SIGNALS.items() if not blocked >> (n - 1) & 1]
            if missing:
                bad.append(f"thread {tid} ({status['Name'].strip()}) does not block {', '.join(missing)}")
        assert not bad, "\n".join(bad)
