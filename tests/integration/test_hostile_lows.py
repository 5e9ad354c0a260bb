"""The low findings of issue 46 in matching and predictors, each reproduced on a real cluster with
the real model:

- an overload with the same parameter types after defaults, made by a role with CREATE on the
  extension's schema (public), never makes tributary_dedup or tributary_embed_for ambiguous
  (42725 on 0.10.0) and never runs: both call functions in schema tributary;
- tributary_match_explain() shows a call's explanation only to the roles that made it: after
  SET ROLE, inside another role's SECURITY DEFINER function, or after calling one, another role
  reads NULL, not counts of rows row-level security hides from it (0.10.0 showed them);
- a labels table whose is_match is not boolean is 42804 naming the column and the type (0.10.0:
  42883 naming internal SQL); a domain over boolean is accepted;
- a column name of a megabyte is cut to 64 characters in the message (0.10.0 echoed it whole);
- a stored model whose tree loops, or indexes a feature or a node that does not exist, is
  rejected when it is read ('invalid predictor model') within seconds by tributary_predict_column
  and tributary_predict (0.10.0 looped until SIGKILL, deaf to statement_timeout and cancel; the
  guard here kills such a backend after a minute and fails).

Runs on the main cluster (TRIBUTARY_TEST_DSN), in a database of its own, as the superuser and
the roles lows_alice and lows_bob made here.
"""
import os
import re
import signal
import threading
import time

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from jobwait import connect

DB = "tributary_lows"
ROLES = ("lows_alice", "lows_bob")
INVALID_MODEL = "invalid predictor model"


@pytest.fixture(scope="module")
def env(dsn):
    with connect(dsn) as c:
        c.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
        for r in ROLES:
            if c.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (r,)).fetchone():
                c.execute(f"DROP OWNED BY {r} CASCADE")
                c.execute(f"DROP ROLE {r}")
            c.execute(f"CREATE ROLE {r} LOGIN")
        c.execute(f"CREATE DATABASE {DB}")
    db = make_conninfo(dsn, dbname=DB)
    with connect(db) as c:
        c.execute("CREATE EXTENSION tributary CASCADE")
        for r in ROLES:
            c.execute(f"CREATE SCHEMA {r} AUTHORIZATION {r}")
            c.execute(f"GRANT USAGE ON SCHEMA {r} TO PUBLIC")
    yield db
    with connect(dsn) as c:
        c.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
        for r in ROLES:
            c.execute(f"DROP ROLE IF EXISTS {r}")


def error_of(conn, sql, args=None):
    with pytest.raises(psycopg.Error) as info:
        cur = conn.execute(sql, args)
        if cur.description:
            cur.fetchall()
    return info.value


PEOPLE = [
    (1, "Jonathan Smith", "1980-04-02", "jon.smith@example.org"),
    (2, "Jonathon Smith", "1980-04-02", "jon.smith@example.org"),
    (3, "Smith, Jonathan", "1980-04-02", None),
    (4, "Aisha Okafor", "1975-11-30", "aisha.okafor@example.net"),
    (5, "Aisha Okafur", "1975-11-30", "aisha.okafor@example.net"),
    (6, "Pierre Dubois", "1991-07-14", "pdubois@example.fr"),
    (7, "Ingrid Johansson", "1968-02-09", "ingrid.j@example.se"),
    (8, "Tomasz Nowak", "1983-09-21", "tnowak@example.pl"),
    (9, "Emily Watson", "2001-12-05", "emily.watson@example.co.uk"),
    (10, "Kwame Mensah", "1959-06-17", "kwame@example.gh"),
]


def people(c, table):
    """`table` (id int PRIMARY KEY, name text, born date, email text): 10 people, two of them
    twice or three times over (tests/pg_regress/sql/match.sql's em.person)."""
    c.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, name text, born date, email text)")
    c.cursor().executemany(f"INSERT INTO {table} VALUES (%s, %s, %s, %s)", PEOPLE)


# --- 1. An overload with the same parameter types after defaults ----------------------------

def test_overloads_with_defaults_make_no_call_ambiguous_and_never_run(env):
    with connect(env) as su:
        su.execute("SET tributary.progress_interval = 0")
        people(su, "public.dd")
        su.execute("CREATE TABLE public.docs (id int PRIMARY KEY, body text, e vector(384))")
        su.execute("INSERT INTO public.docs VALUES (1, 'a cat sat on the mat'), (2, 'stock prices fell')")
        su.execute("SELECT tributary_embed_column('public.docs', '{body}', 'e')")
        su.execute("GRANT SELECT ON public.dd, public.docs TO PUBLIC")
        # What the calls give without the overloads.
        clusters = su.execute("SELECT cluster, key FROM tributary_dedup('public.dd', '{name,born,email}') ORDER BY 1, 2").fetchall()
        assert clusters, "dedup found no groups"
        query = su.execute("SELECT tributary_embed_for('public.docs', 'e', 'a cat')::text").fetchone()[0]
        assert query is not None
        su.execute("GRANT CREATE ON SCHEMA public TO lows_bob")
        su.execute("CREATE TABLE public.calls (fn text)")
        su.execute("GRANT INSERT ON public.calls TO lows_bob")
    try:
        with connect(env, user="lows_bob") as bob:
            # Same leading parameter types, one more parameter with a default: a call by the
            # shorter list matches both, in one schema.
            bob.execute("""CREATE FUNCTION public.tributary_match_explain(x int DEFAULT 0) RETURNS jsonb
                           LANGUAGE sql AS $$ INSERT INTO public.calls VALUES ('explain') RETURNING '{}'::jsonb $$""")
            bob.execute("""CREATE FUNCTION public.tributary_embed("text" text, model text DEFAULT NULL, prompt text DEFAULT NULL,
                                                               x int DEFAULT 0) RETURNS vector
                           LANGUAGE sql AS $$ INSERT INTO public.calls VALUES ('embed') RETURNING NULL::vector $$""")
            bob.execute("""CREATE FUNCTION public.tributary_match(left_table regclass, right_table regclass, columns text[],
                               right_columns text[] DEFAULT NULL, k integer DEFAULT 10, threshold float8 DEFAULT NULL,
                               one_to_one boolean DEFAULT true, labels regclass DEFAULT NULL, model text DEFAULT NULL,
                               min_precision float8 DEFAULT NULL, x int DEFAULT 0)
                           RETURNS TABLE (left_key text, right_key text, score float8, evidence jsonb)
                           LANGUAGE sql AS $$ INSERT INTO public.calls VALUES ('match') RETURNING '', '', 0::float8, '{}'::jsonb $$""")
        for role in (None, "lows_alice"):
            kw = {"user": role} if role else {}
            with connect(env, **kw) as c:
                c.execute("SET tributary.progress_interval = 0")
                got = c.execute("SELECT cluster, key FROM tributary_dedup('public.dd', '{name,born,email}') ORDER BY 1, 2").fetchall()
                assert got == clusters, f"tributary_dedup as {role or 'the superuser'}"
                got = c.execute("SELECT tributary_embed_for('public.docs', 'e', 'a cat')::text").fetchone()[0]
                assert got == query, f"tributary_embed_for as {role or 'the superuser'}"
        with connect(env) as su:
            assert su.execute("SELECT count(*) FROM public.calls").fetchone()[0] == 0, "an overload ran"
    finally:
        with connect(env) as su:
            su.execute("DROP FUNCTION IF EXISTS public.tributary_match_explain(int)")
            su.execute("DROP FUNCTION IF EXISTS public.tributary_embed(text, text, text, int)")
            su.execute("DROP FUNCTION IF EXISTS public.tributary_match(regclass, regclass, text[], text[], integer, "
                       "double precision, boolean, regclass, text, double precision, integer)")
            su.execute("DROP TABLE IF EXISTS public.calls, public.dd, public.docs")
            su.execute("REVOKE CREATE ON SCHEMA public FROM lows_bob")


# --- 2. tributary_match_explain() per role ----------------------------------------------------

@pytest.fixture
def hidden(env):
    """lows_alice's table lows_alice.ppl of 10 rows, of which row-level security shows lows_bob
    the first 5; lows_alice.match_all() (SECURITY DEFINER) runs tributary_match over all of them
    as lows_alice; lows_bob.peek() (SECURITY DEFINER) returns tributary_match_explain() as
    lows_bob."""
    with connect(env, user="lows_alice") as a:
        people(a, "lows_alice.ppl")
        a.execute("ALTER TABLE lows_alice.ppl ENABLE ROW LEVEL SECURITY")
        a.execute("CREATE POLICY few ON lows_alice.ppl FOR SELECT TO lows_bob USING (id <= 5)")
        a.execute("GRANT SELECT ON lows_alice.ppl TO lows_bob")
        a.execute("""CREATE FUNCTION lows_alice.match_all() RETURNS bigint SECURITY DEFINER
                     SET search_path = pg_catalog, public LANGUAGE sql
                     AS $$ SELECT count(*) FROM tributary_match('lows_alice.ppl', 'lows_alice.ppl', '{name}') $$""")
    with connect(env, user="lows_bob") as b:
        b.execute("""CREATE FUNCTION lows_bob.peek() RETURNS jsonb SECURITY DEFINER
                     SET search_path = pg_catalog, public LANGUAGE sql AS $$ SELECT tributary_match_explain() $$""")
    yield
    with connect(env) as su:
        su.execute("DROP TABLE IF EXISTS lows_alice.ppl CASCADE")
        su.execute("DROP FUNCTION IF EXISTS lows_alice.match_all()")
        su.execute("DROP FUNCTION IF EXISTS lows_bob.peek()")


def explain(c):
    return c.execute("SELECT tributary_match_explain()").fetchone()[0]


def test_explain_after_set_role_is_not_shown_to_the_other_role(env, hidden):
    with connect(env) as su:
        su.execute("SET tributary.progress_interval = 0")
        su.execute("SET ROLE lows_alice")
        su.execute("SELECT count(*) FROM tributary_match('lows_alice.ppl', 'lows_alice.ppl', '{name}')").fetchall()
        assert explain(su)["rows"] == [10, 10]
        su.execute("SET ROLE lows_bob")
        assert explain(su) is None, "lows_bob reads lows_alice's explanation after SET ROLE"
        su.execute("SET ROLE lows_alice")
        assert explain(su)["rows"] == [10, 10], "lows_alice's own explanation is shown to her again"
        # lows_bob's own call: his rows.
        su.execute("SET ROLE lows_bob")
        su.execute("SELECT count(*) FROM tributary_match('lows_alice.ppl', 'lows_alice.ppl', '{name}')").fetchall()
        assert explain(su)["rows"] == [5, 5]


def test_explain_is_not_shown_inside_or_after_a_security_definer_call(env, hidden):
    with connect(env, user="lows_alice") as a:
        a.execute("SET tributary.progress_interval = 0")
        a.execute("SELECT count(*) FROM tributary_match('lows_alice.ppl', 'lows_alice.ppl', '{name}')").fetchall()
        assert explain(a)["rows"] == [10, 10]
        # Inside lows_bob's SECURITY DEFINER function the current user is lows_bob.
        assert a.execute("SELECT lows_bob.peek()").fetchone()[0] is None, \
            "lows_bob's SECURITY DEFINER function reads lows_alice's explanation"
        assert explain(a)["rows"] == [10, 10]
    with connect(env, user="lows_bob") as b:
        b.execute("SET tributary.progress_interval = 0")
        assert b.execute("SELECT lows_alice.match_all()").fetchone()[0] >= 0
        # lows_alice's call, made inside her function, is not lows_bob's to read.
        assert explain(b) is None, "lows_bob reads the counts of rows row-level security hides from him"


# --- 3. A labels table whose is_match is not boolean -----------------------------------------

def test_labels_with_a_text_is_match_is_42804_naming_the_column(env):
    with connect(env) as c:
        c.execute("SET tributary.progress_interval = 0")
        people(c, "public.lb")
        try:
            c.execute("CREATE TABLE public.lb_text (left_key text, right_key text, is_match text)")
            c.execute("INSERT INTO public.lb_text VALUES ('1', '2', 'true'), ('1', '4', 'false')")
            e = error_of(c, "SELECT * FROM tributary_match('public.lb', 'public.lb', '{name}', labels => 'public.lb_text')")
            assert e.sqlstate == "42804", (e.sqlstate, str(e))
            assert "is_match" in e.diag.message_primary and "boolean" in e.diag.message_primary, e.diag.message_primary
            assert "text" in e.diag.message_primary
            # A domain over boolean, and keys of another type than text, are labels like any.
            c.execute("CREATE DOMAIN public.yes_no AS boolean")
            c.execute("CREATE TABLE public.lb_dom (left_key int, right_key int, is_match public.yes_no)")
            c.execute("INSERT INTO public.lb_dom VALUES (1, 2, true), (1, 4, false)")
            rows = c.execute("SELECT left_key, right_key, score FROM tributary_match('public.lb', 'public.lb', '{name}', "
                             "labels => 'public.lb_dom')").fetchall()
            assert ("1", "2", 1.0) in rows
        finally:
            c.execute("DROP TABLE IF EXISTS public.lb, public.lb_text, public.lb_dom")
            c.execute("DROP DOMAIN IF EXISTS public.yes_no")


# --- 4. A megabyte column name ---------------------------------------------------------------

@pytest.mark.parametrize("call", [
    "SELECT * FROM tributary_match('public.ln', 'public.ln', ARRAY[%s])",
    "SELECT * FROM tributary_match('public.ln', 'public.ln2', '{name}', right_columns => ARRAY[%s])",
    "SELECT * FROM tributary_dedup('public.ln', ARRAY['name', %s])",
])
def test_a_megabyte_column_name_is_cut_in_the_message(env, call):
    huge = "x" * (1 << 20)
    with connect(env) as c:
        c.execute("SET tributary.progress_interval = 0")
        c.execute("DROP TABLE IF EXISTS public.ln, public.ln2")
        people(c, "public.ln")
        people(c, "public.ln2")
        try:
            e = error_of(c, call, (huge,))
            assert e.sqlstate == "42703", (e.sqlstate, str(e)[:300])
            text = " ".join(filter(None, [e.diag.message_primary, e.diag.message_detail, e.diag.message_hint,
                                          e.diag.context]))
            assert len(text) < 2000, f"the message is {len(text)} characters long"
            assert "x" * 64 + "..." in e.diag.message_primary
        finally:
            c.execute("DROP TABLE IF EXISTS public.ln, public.ln2")


# --- 5. A stored model that loops or indexes out of range -------------------------------------

def cbor_uint(b, key, nth):
    """(offset, length, value) of the unsigned integer after the `nth` CBOR text key `key`."""
    pat = bytes([0x60 | len(key)]) + key.encode()
    for m_i, m in enumerate(re.finditer(re.escape(pat), b)):
        if m_i != nth:
            continue
        at = m.end()
        head = b[at]
        if head < 24:
            return at, 1, head
        size = {24: 1, 25: 2, 26: 4}[head]
        return at, 1 + size, int.from_bytes(b[at + 1:at + 1 + size], "big")
    return None


def cbor_set(b, key, nth, value):
    """`b` with the integer after the `nth` key `key` set to `value` (CBOR counts items, not
    bytes: the integer may change its encoded length)."""
    at, length, _ = cbor_uint(b, key, nth)
    if value < 24:
        enc = bytes([value])
    elif value < 256:
        enc = bytes([24, value])
    elif value < 65536:
        enc = bytes([25]) + value.to_bytes(2, "big")
    else:
        enc = bytes([26]) + value.to_bytes(4, "big")
    return b[:at] + enc + b[at + length:]


def root_split(b):
    """The occurrence of the node keys that is a tree's root split: a split's left child is the
    node after it, so `left` = 1 is node 0's."""
    i = 0
    while (u := cbor_uint(b, "left", i)) is not None:
        if u[2] == 1:
            return i
        i += 1
    pytest.fail("the model has no split")


def looped(b):
    i = root_split(b)
    return cbor_set(cbor_set(b, "left", i, 0), "right", i, 0)


def bad_feature(b):
    return cbor_set(b, "feat", root_split(b), 60000)


def bad_child(b):
    return cbor_set(b, "right", root_split(b), 60000)


@pytest.fixture(scope="module")
def predictor(env):
    """A GBDT predictor lows_gbdt of public.ev's kind (events of people, the kind repeating per
    person), trained as the superuser; returns its model's bytes."""
    with connect(env) as c:
        c.execute("SET tributary.progress_interval = 0")
        c.execute("""
            CREATE TABLE public.ev_person (person_id int PRIMARY KEY, name text);
            CREATE TABLE public.ev (id int PRIMARY KEY, person_id int REFERENCES public.ev_person, day int,
                                    n int, kind text, guess text);
            INSERT INTO public.ev_person SELECT p, 'person ' || p FROM generate_series(1, 40) p;
            INSERT INTO public.ev (id, person_id, day, n, kind)
            SELECT i, 1 + (i % 40), i / 8, i % 13,
                   CASE WHEN i % 5 = 0 THEN chr(97 + ((i / 40) % 4)) ELSE chr(97 + ((1 + (i % 40)) % 4)) END
              FROM generate_series(1, 800) i;
            UPDATE public.ev SET kind = NULL WHERE id > 760;
        """)
        c.execute("SELECT * FROM tributary_train('lows_gbdt', 'public.ev', 'kind', as_of => 'day', algorithm => 'gbdt')").fetchall()
        model = c.execute("SELECT model FROM tributary._predictors WHERE name = 'lows_gbdt'").fetchone()[0]
    yield bytes(model)
    with connect(env) as c:
        c.execute("SELECT tributary_drop_predictor('lows_gbdt')")
        c.execute("DROP TABLE IF EXISTS public.ev, public.ev_person")


def run_guarded(env, sql, deadline=60):
    """Runs `sql` as the superuser under statement_timeout = 30 s on a connection of its own;
    returns the psycopg error it raised, or None. A backend still running after `deadline`
    seconds (deaf to statement_timeout and cancel) is killed with SIGKILL (the cluster restarts)
    and the test fails."""
    out = {}
    c = connect(env)
    pid = c.execute("SELECT pg_backend_pid()").fetchone()[0]
    c.execute("SET statement_timeout = '30s'")

    def go():
        try:
            cur = c.execute(sql)
            if cur.description:
                cur.fetchall()
            out["error"] = None
        except psycopg.Error as e:
            out["error"] = e

    t = threading.Thread(target=go, daemon=True)
    started = time.monotonic()
    t.start()
    t.join(deadline)
    if t.is_alive():
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            with connect(env) as su:
                su.execute("SELECT pg_terminate_backend(%s)", (pid,))
        t.join(10)
        pytest.fail(f"{sql}: still running after {deadline} s, past statement_timeout (killed)")
    c.close()
    return out["error"], time.monotonic() - started


@pytest.mark.parametrize("corrupt", [looped, bad_feature, bad_child])
@pytest.mark.parametrize("call", [
    "SELECT tributary_predict_column('lows_gbdt', 'guess')",
    "SELECT (tributary_predict('lows_gbdt', e)).prediction FROM public.ev e WHERE e.id = 790",
])
def test_a_corrupt_stored_model_is_rejected_when_read(env, predictor, corrupt, call):
    with connect(env) as su:
        su.execute("UPDATE tributary._predictors SET model = %s WHERE name = 'lows_gbdt'", (corrupt(predictor),))
    try:
        err, seconds = run_guarded(env, call)
        assert err is not None, f"{call}: a corrupt model was applied"
        assert INVALID_MODEL in str(err), f"{call}: {err.sqlstate} {err}"
        assert err.sqlstate in ("XX001", "22P02"), f"{call}: {err.sqlstate} {err}"
        assert seconds < 30, f"{call}: took {seconds:.0f} s"
    finally:
        with connect(env) as su:
            su.execute("UPDATE tributary._predictors SET model = %s WHERE name = 'lows_gbdt'", (predictor,))
    # The stored model as trained still predicts.
    err, _ = run_guarded(env, call)
    assert err is None, f"{call}: {err}"
