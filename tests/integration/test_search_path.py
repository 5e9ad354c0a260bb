"""No other role's code runs inside tributary's calls (issue 34): a hostile role's overloads of
every function, aggregate and operator name that tributary's SQL references, in a schema of its
own placed first (before and after pg_catalog) and last on the caller's search_path, and in a
writable public (where the extension and pgvector live), never run, and every public SQL
function of the extension gives the same results as without them, called as a superuser and as
a plain role; a continuous job's trigger and background worker too.

The names are not listed here: they are read from the extension's SQL scripts (sql/*.sql) and
from the string literals of the Rust sources that build SQL (src/**/*.rs, the tests left out),
so a new call is covered without editing this file. Every public function of the installed
extension must have a case below (a new function fails the test until it gets one).

Every hostile function and aggregate step inserts a row into mal.calls and raises a WARNING;
the test asserts that no WARNING reached the client, that mal.calls stays empty and that
results (or SQLSTATEs) equal those of the same calls made before the hostile objects existed.

Runs on the jobs cluster (TRIBUTARY_JOBS_DSN, tributary in shared_preload_libraries), in a
database of its own; scripts/major_steps.sh runs it on every major.
"""
import os
import pathlib
import re
import time

import psycopg
from psycopg import sql as pgsql
from psycopg.conninfo import make_conninfo
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DB = "tributary_search_path"
ANN, MAL = "sp_ann", "sp_mal"

# Argument types of the hostile overloads: what untyped literals ('...' is unknown, which
# prefers text) and the typed values tributary passes would pick over pg_catalog's.
FUNC_SIGS = [[], ["text"], ["text", "text"], ["text", "text", "text"], ["text", "text", "text", "text"],
             ["text", "text", "text", "text", "text"], ["anyelement"], ["anyelement", "anyelement"],
             ["double precision"], ["integer"], ["bigint"], ["jsonb"], ["name"], ["regclass"], ["oid"],
             ["text[]"], ["jsonb[]"], ["public.vector"], ["public.vector", "text"], ["text", "public.vector"]]
AGG_TYPES = ["double precision", "text", "integer", "bigint", "jsonb", "boolean", "numeric", "anyelement"]
OP_TYPES = [("text", "text"), ("character varying", "character varying"), ("name", "name"), ("name", "text"),
            ("text", "name"), ("integer", "integer"), ("bigint", "bigint"), ("integer", "bigint"),
            ("bigint", "integer"), ("double precision", "double precision"), ("numeric", "numeric"),
            ("jsonb", "jsonb"), ("jsonb", "text"), ("jsonb", "text[]"), ("tid", "tid"), ("oid", "oid"),
            ("boolean", "boolean"), ('"char"', '"char"'), ("text[]", "text[]"),
            ("public.vector", "public.vector"), ("public.halfvec", "public.halfvec"), ("anyelement", "anyelement")]
# Not function names: words followed by "(" in SQL that PostgreSQL parses as syntax.
NOT_FUNCTIONS = {
    "and", "or", "not", "in", "as", "on", "is", "by", "if", "of", "to", "at", "do", "all", "any", "some",
    "exists", "values", "select", "from", "where", "using", "returns", "returning", "table", "array", "row",
    "cast", "case", "when", "then", "else", "end", "over", "filter", "within", "group", "partition",
    "order", "limit", "into", "set", "update", "insert", "delete", "with", "join", "lateral", "unique",
    "primary", "key", "references", "check", "default", "function", "procedure", "trigger", "index",
    "create", "alter", "drop", "grant", "revoke", "execute", "perform", "raise", "return", "query",
    "begin", "declare", "loop", "foreach", "exit", "continue", "while", "for", "like", "ilike", "similar",
    "between", "distinct", "union", "intersect", "except", "only", "nulls", "first", "last", "desc", "asc",
    "materialized", "recursive", "ordinality", "variadic", "out", "inout", "self", "fn", "let", "mut",
    "match", "some", "ok", "err", "vec", "format", "new", "old", "none",
}
WORD_CALL = re.compile(r"(?<![\w$])([A-Za-z_][A-Za-z0-9_]*)\s*\(")
OP_TOKEN = re.compile(r"(?<![-+*/<>=~!@#%^&|`?])([-+*/<>=~!@#%^&|`?]{1,3})(?![-+*/<>=~!@#%^&|`?])")
RUST_STRING = re.compile(r'r#*"(.*?)"#*|"((?:[^"\\]|\\.)*)"', re.S)


def sql_texts():
    """The SQL the extension runs: its scripts (not the update scripts, which replay old
    versions) and the string literals of its Rust sources (the tests left out)."""
    texts = []
    for p in sorted((ROOT / "sql").glob("*.sql")):
        if "--" not in p.name:
            texts.append(re.sub(r"--[^\n]*", " ", p.read_text()))
    for p in sorted((ROOT / "src").rglob("*.rs")):
        if p.name.startswith("tests"):
            continue
        src = re.sub(r"(?m)^\s*//[^\n]*", " ", p.read_text())
        texts.extend(a or b for a, b in RUST_STRING.findall(src))
    return texts


def referenced_names():
    """(function and aggregate names, operator symbols) that tributary's SQL references."""
    funcs, ops = set(), set()
    for t in sql_texts():
        for m in WORD_CALL.finditer(t):
            name = m.group(1).lower()
            if name not in NOT_FUNCTIONS and len(name) > 1:
                funcs.add(name)
        for m in re.finditer(r"OPERATOR\(\s*[\w\"]+\.([^)\s]+)\s*\)", t):
            ops.add(m.group(1))
        for m in OP_TOKEN.finditer(t):
            tok = m.group(1)
            if "--" not in tok and "/*" not in tok:
                ops.add(tok)
    return funcs, ops


def connect(dsn, **kw):
    # No server-side prepared statements: a statement prepared before DDL (ALTER EXTENSION
    # UPDATE, a rebuilt view) fails with "cached plan must not change result type" after it.
    return psycopg.connect(dsn, autocommit=True, prepare_threshold=None, **kw)


@pytest.fixture(scope="module")
def env():
    base = os.environ.get("TRIBUTARY_JOBS_DSN")
    if not base:
        pytest.fail("TRIBUTARY_JOBS_DSN is not set: run these through scripts/test.sh")
    with connect(base) as c:
        c.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
        for r in (ANN, MAL):
            if not c.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (r,)).fetchone():
                c.execute(f"CREATE ROLE {r} LOGIN")
            c.execute(f"ALTER ROLE {r} NOSUPERUSER NOCREATEROLE NOCREATEDB NOBYPASSRLS LOGIN")
            c.execute(f"ALTER ROLE {r} RESET ALL")
        c.execute("ALTER SYSTEM SET tributary.job_poll_interval = 200")
        c.execute("SELECT pg_reload_conf()")
        c.execute(f"CREATE DATABASE {DB}")
    dsn = make_conninfo(base, dbname=DB)
    with connect(dsn) as c:
        c.execute("CREATE EXTENSION tributary CASCADE")
        # Every database made before PostgreSQL 15 has a public schema anyone may write.
        c.execute("GRANT CREATE, USAGE ON SCHEMA public TO PUBLIC")
        c.execute(f"CREATE SCHEMA ann AUTHORIZATION {ANN}")
        c.execute(f"CREATE SCHEMA mal AUTHORIZATION {MAL}")
        c.execute(f"GRANT USAGE ON SCHEMA mal TO PUBLIC")
        c.execute(f"GRANT USAGE ON SCHEMA ann TO {MAL}")
    with connect(dsn, user=ANN) as c:
        c.execute("SET search_path = public")
        c.execute("""
            CREATE TABLE ann.people (id int PRIMARY KEY, name text, city text, e vector(384));
            CREATE TABLE ann.people2 (id int PRIMARY KEY, full_name text, town text);
            CREATE TABLE ann.orders (id int PRIMARY KEY, person_id int REFERENCES ann.people, item text);
            CREATE TABLE ann.films (id int PRIMARY KEY, title text, genre text, e vector(384), guess text);
            CREATE TABLE ann.scratch (id int PRIMARY KEY, note text, e vector(384));
            CREATE TABLE ann.jobs_src (id int PRIMARY KEY, body text, e vector(384));
            CREATE TABLE ann.docs (id int PRIMARY KEY, body text);
            INSERT INTO ann.people VALUES
                (1, 'Maria Lopez', 'Madrid'), (2, 'John Smith', 'Boston'), (3, 'Anna Schmidt', 'Berlin'),
                (4, 'Li Wei', 'Shanghai'), (5, 'Olga Petrova', 'Moscow'), (6, 'Pierre Dubois', 'Paris'),
                (7, 'Maria Lopes', 'Madrid'), (8, 'Kenji Sato', 'Osaka');
            INSERT INTO ann.people2 VALUES
                (11, 'Maria Lopez', 'Madrid'), (12, 'Jon Smith', 'Boston'), (13, 'Anna Schmitt', 'Berlin'),
                (14, 'Wei Li', 'Shanghai'), (15, 'Olga Petrova', 'Moskow'), (16, 'Pierre Dubois', 'Paris');
            INSERT INTO ann.orders VALUES (1, 1, 'guitar strings'), (2, 1, 'piano stool'), (3, 2, 'baseball bat'),
                (4, 3, 'beer mug'), (5, 6, 'cheese knife');
            INSERT INTO ann.films (id, title, genre) VALUES
                (1, 'Space battle among the stars', 'scifi'), (2, 'Alien invasion of Earth', 'scifi'),
                (3, 'Robots take over the galaxy', 'scifi'), (4, 'Two friends fall in love in Paris', 'romance'),
                (5, 'A wedding and a kiss', 'romance'), (6, 'Love letters across the ocean', 'romance'),
                (7, 'A detective hunts a killer', 'crime'), (8, 'Bank robbery goes wrong', 'crime'),
                (9, 'The mafia boss and the police', 'crime'), (10, 'Starship crew meets aliens', NULL),
                (11, 'Romantic dinner in Rome', NULL), (12, 'A murder in the city', NULL);
            INSERT INTO ann.scratch VALUES (1, 'first', NULL), (2, 'second', NULL);
            INSERT INTO ann.docs VALUES (1, repeat('A long document about rivers and lakes. ', 30)),
                                        (2, 'A short one.');
        """)
        c.execute("SELECT public.tributary_embed_column(tbl => 'ann.films', columns => '{title}', target => 'e')")
    query = None
    with connect(dsn) as c:
        query = c.execute("SELECT e::text FROM ann.films WHERE id = 10").fetchone()[0]
    yield {"dsn": dsn, "base": base, "query": query}
    with connect(base) as c:
        c.execute("ALTER SYSTEM RESET tributary.job_poll_interval")
        c.execute("SELECT pg_reload_conf()")
        c.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")


def make_hostile(dsn):
    """As sp_mal: overloads of every referenced name in schema mal and in public, and the log.
    Returns how many functions, aggregates and operators were made."""
    funcs, ops = referenced_names()
    made = {"functions": 0, "aggregates": 0, "operators": 0}
    with connect(dsn, user=MAL) as c:
        c.execute("""
            CREATE TABLE mal.calls (what text, who text DEFAULT current_user, at timestamptz DEFAULT pg_catalog.now());
            GRANT INSERT, SELECT ON mal.calls TO PUBLIC;
            CREATE FUNCTION mal._hit(what text) RETURNS void LANGUAGE plpgsql AS $$
            BEGIN
                INSERT INTO mal.calls (what) VALUES (what);
                RAISE WARNING 'HOSTILE OVERLOAD RAN: % as %', what, current_user;
            END $$;
        """)
        aggregates = {r[0] for r in c.execute(
            "SELECT DISTINCT proname FROM pg_proc WHERE prokind = 'a' AND proname = ANY(%s)", (sorted(funcs),))}

        def attempt(stmt):
            try:
                with c.transaction():
                    c.execute(stmt)
                return True
            except psycopg.Error:
                return False   # a signature the schema already has (public's own functions), or a name PostgreSQL refuses

        for schema in ("mal", "public"):
            for name in sorted(funcs):
                for sig in FUNC_SIGS:
                    ret = "anyelement" if sig and sig[0] == "anyelement" else "text"
                    args = ", ".join(sig)
                    body = (f"BEGIN PERFORM mal._hit({pgsql.Literal(schema + '.' + name + '(' + args + ')').as_string(c)}); "
                            f"RETURN NULL; END")
                    made["functions"] += attempt(
                        f'CREATE FUNCTION {schema}."{name}"({args}) RETURNS {ret} LANGUAGE plpgsql AS $h${body}$h$')
            for name in sorted(aggregates):
                for typ in AGG_TYPES:
                    step = f"mal._step_{re.sub(r'[^a-z]', '_', typ)}"
                    attempt(f"CREATE FUNCTION {step}(s text, v {typ}) RETURNS text LANGUAGE plpgsql AS "
                            f"$h$BEGIN PERFORM mal._hit('aggregate step {typ}'); RETURN s; END$h$")
                    made["aggregates"] += attempt(
                        f'CREATE AGGREGATE {schema}."{name}"({typ}) (sfunc = {step}, stype = text)')
            for i, op in enumerate(sorted(ops)):
                for l, r in OP_TYPES:
                    fn = f"mal._op_{abs(hash((schema, op, l, r))) % 10**12}"
                    ret = "anyelement" if l == "anyelement" else "boolean"
                    lit = pgsql.Literal(f"operator {schema}.{op}({l}, {r})").as_string(c)
                    if not attempt(f"CREATE FUNCTION {fn}(a {l}, b {r}) RETURNS {ret} LANGUAGE plpgsql AS "
                                   f"$h$BEGIN PERFORM mal._hit({lit}); RETURN NULL; END$h$"):
                        continue
                    made["operators"] += attempt(
                        f"CREATE OPERATOR {schema}.{op} (LEFTARG = {l}, RIGHTARG = {r}, FUNCTION = {fn})")
    return made


# The search_paths a caller may have: the hostile schema first (pg_catalog implicitly before it,
# and explicitly after it), last; public (writable, holding overloads too) in all of them.
PATHS = ["mal, public", "mal, pg_catalog, public", "public, mal"]


def job_state(c, job_id):
    return c.execute("SELECT state, rows_done FROM tributary.jobs WHERE id = %s", (job_id,)).fetchone()


def run_case(dsn, role, path, case, env):
    """Runs one case as `role` under `path`: its setup and check under a clean path, the call
    under `path`. Returns ('ok', rows) or ('error', sqlstate), and the WARNINGs the client got."""
    warnings = []
    kw = {"user": role} if role else {}
    with connect(dsn, **kw) as clean, connect(dsn, **kw) as c:
        clean.execute("SET search_path = public")
        c.add_notice_handler(lambda d: warnings.append(d.message_primary) if d.severity == "WARNING" else None)
        c.execute(pgsql.SQL("SET search_path = {}").format(pgsql.SQL(path)))
        try:
            for s in case.get("setup", []):
                clean.execute(s)
            out = case["call"](c, clean, env) if callable(case["call"]) else c.execute(
                case["call"].replace("$QUERY", env["query"])).fetchall()
            if "check" in case:
                out = clean.execute(case["check"]).fetchall()
            result = ("ok", sorted(map(repr, out)) if case.get("unordered") else [tuple(map(repr, r)) for r in out])
        except psycopg.Error as e:
            result = ("error", e.sqlstate)
        for s in case.get("teardown", []):
            try:
                clean.execute(s)
            except psycopg.Error:
                pass
    return result, warnings


def match_explain_case(c, clean, env):
    """tributary_match under the hostile path, then its explanation (kept per session)."""
    c.execute("SELECT * FROM public.tributary_match(left_table => 'ann.people', right_table => 'ann.people2', "
              "columns => '{name,city}', right_columns => '{full_name,town}')")
    # (read in Python: the call's SQL is only the function, like the other cases; timings left out)
    e = c.execute("SELECT public.tributary_match_explain()").fetchone()[0]
    return [(e["accepted"], e["how"], e["estimated_matches"], [x["column"] for x in e["columns"]])]


def job_case(c, clean, env):
    """A continuous job made under the hostile path, rows written under it (the trigger), the
    worker embeds them, pause, resume and drop under it too."""
    job_id = c.execute("SELECT public.tributary_job_create(source => 'ann.jobs_src', columns => '{body}', target => 'e', "
                       "mode => 'continuous', name => 'sp_job')").fetchone()[0]
    c.execute("INSERT INTO ann.jobs_src VALUES (1, 'a river in spring', NULL), (2, 'snow on the mountains', NULL)")
    # (the test's own statement runs under the hostile path: its operator qualified)
    c.execute("UPDATE ann.jobs_src SET body = 'a river in autumn' WHERE id OPERATOR(pg_catalog.=) 1")
    deadline = time.monotonic() + 90
    while clean.execute("SELECT count(*) FROM ann.jobs_src WHERE e IS NULL").fetchone()[0] > 0 \
            or clean.execute("SELECT count(*) FROM tributary.jobs WHERE id = %s AND rows_queued > 0", (job_id,)).fetchone()[0]:
        state = job_state(clean, job_id)
        assert time.monotonic() < deadline and state[0] not in ("failed", "cancelled"), \
            f"job {job_id} did not embed the rows: {state}, {clean.execute('SELECT last_error FROM tributary.jobs WHERE id = %s', (job_id,)).fetchone()}"
        time.sleep(0.3)
    c.execute(f"SELECT public.tributary_job_pause(job => {job_id})")
    c.execute(f"SELECT public.tributary_job_resume(job => {job_id})")
    c.execute(f"SELECT public.tributary_job_cancel(job => {job_id})")
    errors = clean.execute("SELECT sqlstate, message FROM tributary.job_errors WHERE job_id = %s", (job_id,)).fetchall()
    c.execute(f"SELECT public.tributary_job_drop(job => {job_id})")
    rows = clean.execute("SELECT id, body, round((1 - (e <=> public.tributary_embed(text => body)))::numeric, 4) "
                         "FROM ann.jobs_src ORDER BY id").fetchall()
    return rows + [("job errors", errors)]


def chunk_job_case(c, clean, env):
    job_id = c.execute("SELECT public.tributary_chunk_job_create(source => 'ann.docs', text_column => 'body', "
                       "chunk_table => 'ann.doc_chunks', chunk_tokens => 32, name => 'sp_chunks')").fetchone()[0]
    deadline = time.monotonic() + 90
    # A chunk job follows its source (continuous): done when nothing is queued and every chunk has its embedding.
    while clean.execute("SELECT rows_done = 0 OR rows_queued > 0 FROM tributary.jobs WHERE id = %s", (job_id,)).fetchone()[0] \
            or clean.execute("SELECT count(*) FROM ann.doc_chunks WHERE embedding IS NULL").fetchone()[0]:
        state = job_state(clean, job_id)
        assert time.monotonic() < deadline and state[0] not in ("failed", "cancelled"), \
            f"chunk job {job_id} did not finish: {state}, {clean.execute('SELECT last_error FROM tributary.jobs WHERE id = %s', (job_id,)).fetchone()}"
        time.sleep(0.3)
    c.execute(f"SELECT public.tributary_chunk_job_drop(job => {job_id})")
    return clean.execute("SELECT count(*), count(*) FILTER (WHERE embedding IS NULL) FROM ann.doc_chunks").fetchall()


def predict_job_case(c, clean, env):
    """A predict job made under the hostile path; a row written under it (the trigger); the worker
    refreshes as the table's owner; dropped under it."""
    job_id = c.execute("SELECT public.tributary_predict_job_create(predictor => 'sp_pred', target => 'guess')").fetchone()[0]
    c.execute("UPDATE ann.films SET title = title WHERE id OPERATOR(pg_catalog.=) 1")
    deadline = time.monotonic() + 90
    # Done when nothing is queued after the UPDATE committed: a refresh that took the UPDATE's
    # queued row saw the UPDATE (one refresh may have taken both the creation's and the UPDATE's).
    while clean.execute("SELECT runs < 1 OR pending > 0 OR state <> 'active' FROM tributary.predict_jobs WHERE id = %s",
                        (job_id,)).fetchone()[0]:
        j = clean.execute("SELECT state, last_error FROM tributary.predict_jobs WHERE id = %s", (job_id,)).fetchone()
        assert time.monotonic() < deadline and j[0] == "active", f"predict job {job_id}: {j}"
        time.sleep(0.3)
    c.execute(f"SELECT public.tributary_predict_job_drop(job => {job_id})")
    return clean.execute("SELECT id, guess FROM ann.films ORDER BY id").fetchall()


# One case (or more) per public function of the extension, by regprocedure as it prints under
# search_path = public. Calls name every argument (named notation): a hostile overload has no
# parameter names, so it can never take the test's own call, only tributary's calls inside.
E = "public.tributary_embed"
# A case's job left behind by a failure (so the next run's name is free), dropped under a clean path.
DROP_JOBS = ("SELECT public.tributary_job_drop(job => j.id) FROM tributary.jobs j "
             "WHERE j.name IN ('sp_job', 'sp_chunks')")
CASES = {
    "tributary_embed(text,text,text)": [{"call": f"SELECT {E}(text => 'a red apple')::text"}],
    "tributary_embed(text[],text,text)": [{"call": f"SELECT {E}(texts => ARRAY['a red apple', NULL, 'snow'])::text"}],
    "tributary_embed(record,text,text[],text[],integer,integer,text[],timestamp with time zone,boolean,integer)": [
        {"call": f'SELECT p.id, {E}("row" => p, parents => 1, children => 2)::text FROM ann.people p',
         "unordered": True}],
    "tributary_row_text(record,text[],text[],integer,integer,text[],timestamp with time zone,boolean,integer,text,integer)": [
        {"call": 'SELECT p.id, public.tributary_row_text("row" => p, parents => 1, children => 2) FROM ann.people p',
         "unordered": True},
        {"call": 'SELECT o.id, public.tributary_row_text("row" => o, parents => 2) FROM ann.orders o', "unordered": True}],
    "tributary_embed_column(regclass,text[],name,text,integer,text[],integer,integer,text[],timestamp with time zone,text,integer)": [
        {"setup": ["UPDATE ann.people SET e = NULL"],
         "call": "SELECT public.tributary_embed_column(tbl => 'ann.people', columns => '{name,city}', target => 'e')",
         "check": "SELECT id, e::text FROM ann.people ORDER BY id"},
        {"setup": ["UPDATE ann.people SET e = NULL"],
         "call": "SELECT public.tributary_embed_column(tbl => 'ann.people', columns => '{*}', target => 'e', children => 2)",
         "check": "SELECT id, e::text FROM ann.people ORDER BY id"}],
    "tributary_embed_for(regclass,name,text,text)": [
        {"call": "SELECT public.tributary_embed_for(tbl => 'ann.films', col => 'e', text => 'aliens in space')::text"}],
    "tributary_forget_column(regclass,name)": [
        {"setup": ["SELECT public.tributary_embed_column(tbl => 'ann.scratch', columns => '{note}', target => 'e')",
                   "UPDATE ann.scratch SET e = NULL"],
         "call": "SELECT public.tributary_forget_column(tbl => 'ann.scratch', col => 'e')"}],
    "tributary_info(text)": [
        {"call": "SELECT model, dimension, max_length, pooling FROM public.tributary_info(model => NULL)"}],
    "tributary_tokenize(text,text)": [{"call": "SELECT public.tributary_tokenize(text => 'Hello, tokenizer!')"}],
    "tributary_chunk(text,text,integer,integer)": [
        {"call": "SELECT * FROM public.tributary_chunk(text => 'Rivers flow into lakes and lakes into rivers; "
                 "the sea takes them all in the end, and clouds bring the water back to the hills.', chunk_tokens => 16)"}],
    "tributary_row_template_version()": [{"call": "SELECT public.tributary_row_template_version()"}],
    "tributary_stat_activity()": [{"call": "SELECT 1 FROM public.tributary_stat_activity() LIMIT 0"}],
    "tributary_sessions()": [{"call": "SELECT 1 FROM public.tributary_sessions() LIMIT 0"}],
    "tributary_progress_embed_column()": [{"call": "SELECT 1 FROM public.tributary_progress_embed_column() LIMIT 0"}],
    "tributary_register_model(text,text,text,jsonb)": [
        {"call": "SELECT public.tributary_register_model(name => 'sp-model', path => 'all-MiniLM-L6-v2')"}],
    "tributary_drop_model(text)": [{"call": "SELECT public.tributary_drop_model(name => 'sp-model')"}],
    "tributary_predict(regclass,name,name,vector,integer,text)": [
        {"call": "SELECT prediction, confidence, neighbours FROM public.tributary_predict(tbl => 'ann.films', "
                 "label => 'genre', embedding => 'e', query => '$QUERY', k => 3)"}],
    "tributary_evaluate(regclass,name,name,name,integer,double precision,text,integer,name,text)": [
        {"call": "SELECT metric, model, baseline, test_rows, train_rows FROM public.tributary_evaluate(tbl => 'ann.films', "
                 "label => 'genre', embedding => 'e', k => 3, test_fraction => 0.4)"}],
    "tributary_predict_column(regclass,name,name,name,integer,text,integer)": [
        {"setup": ["UPDATE ann.films SET guess = NULL"],
         "call": "SELECT public.tributary_predict_column(tbl => 'ann.films', label => 'genre', embedding => 'e', "
                 "target => 'guess', k => 3)",
         "check": "SELECT id, guess FROM ann.films ORDER BY id"}],
    # Predictors (issue 35): trained, applied to the column and to one row, dropped, all under the path.
    "tributary_train(text,regclass,name,name,name,text,text[],text[],text,integer)": [
        {"setup": ["UPDATE ann.films SET guess = NULL"],
         "call": "SELECT method, algorithm, split, rows, round(accuracy::numeric, 6) FROM public.tributary_train("
                 "predictor => 'sp_pred', tbl => 'ann.films', label => 'genre', embedding => 'e', algorithm => 'logistic', k => 3)",
         "teardown": ["SELECT public.tributary_drop_predictor(predictor => 'sp_pred')"]}],
    "tributary_predict_trigger()": [
        {"setup": ["UPDATE ann.films SET guess = NULL",
                   "SELECT 1 FROM public.tributary_train(predictor => 'sp_pred', tbl => 'ann.films', label => 'genre', "
                   "embedding => 'e', algorithm => 'logistic', k => 3)",
                   "CREATE TRIGGER sp_guess BEFORE INSERT OR UPDATE ON ann.films FOR EACH ROW "
                   "EXECUTE FUNCTION public.tributary_predict_trigger('sp_pred', 'guess')"],
         "call": "UPDATE ann.films SET title = title WHERE id OPERATOR(pg_catalog.<) 5",
         "check": "SELECT id, guess FROM ann.films ORDER BY id",
         "teardown": ["DROP TRIGGER sp_guess ON ann.films",
                      "SELECT public.tributary_drop_predictor(predictor => 'sp_pred')"]}],
    "tributary_predict_column(text,name,integer)": [
        {"setup": ["UPDATE ann.films SET guess = NULL",
                   "SELECT 1 FROM public.tributary_train(predictor => 'sp_pred', tbl => 'ann.films', label => 'genre', "
                   "embedding => 'e', algorithm => 'logistic', k => 3)"],
         "call": "SELECT public.tributary_predict_column(predictor => 'sp_pred', target => 'guess')",
         "check": "SELECT id, guess FROM ann.films ORDER BY id",
         "teardown": ["SELECT public.tributary_drop_predictor(predictor => 'sp_pred')"]}],
    "tributary_predict(text,anyelement)": [
        {"setup": ["UPDATE ann.films SET guess = NULL",
                   "SELECT 1 FROM public.tributary_train(predictor => 'sp_pred', tbl => 'ann.films', label => 'genre', "
                   "embedding => 'e', algorithm => 'logistic', k => 3)"],
         "call": "SELECT f.id, p.prediction FROM ann.films f, public.tributary_predict(predictor => 'sp_pred', \"row\" => f) p",
         "unordered": True,
         "teardown": ["SELECT public.tributary_drop_predictor(predictor => 'sp_pred')"]}],
    "tributary_predict_column_online(text,name,integer)": [
        {"setup": ["UPDATE ann.films SET guess = NULL",
                   "SELECT 1 FROM public.tributary_train(predictor => 'sp_pred', tbl => 'ann.films', label => 'genre', "
                   "embedding => 'e', algorithm => 'logistic', k => 3)"],
         "call": "SELECT public.tributary_predict_column_online(predictor => 'sp_pred', target => 'guess')",
         "check": "SELECT id, guess FROM ann.films ORDER BY id",
         "teardown": ["SELECT public.tributary_drop_predictor(predictor => 'sp_pred')"]}],
    "tributary_drop_predictor(text)": [
        {"setup": ["UPDATE ann.films SET guess = NULL",
                   "SELECT 1 FROM public.tributary_train(predictor => 'sp_pred', tbl => 'ann.films', label => 'genre', "
                   "algorithm => 'logistic')"],
         "call": "SELECT public.tributary_drop_predictor(predictor => 'sp_pred')"}],
    "tributary_predict_job_create(text,name)": [
        {"setup": ["UPDATE ann.films SET guess = NULL",
                   "SELECT 1 FROM public.tributary_train(predictor => 'sp_pred', tbl => 'ann.films', label => 'genre', "
                   "embedding => 'e', algorithm => 'logistic', k => 3)"],
         "call": predict_job_case,
         "teardown": ["SELECT public.tributary_predict_job_drop(job => j.id) FROM tributary.predict_jobs j",
                      "SELECT public.tributary_drop_predictor(predictor => 'sp_pred')"]}],
    "tributary_predict_job_drop(bigint)": [],   # in the predict job case
    "tributary_match(regclass,regclass,text[],text[],integer,double precision,boolean,regclass,text,double precision)": [
        {"call": "SELECT * FROM public.tributary_match(left_table => 'ann.people', right_table => 'ann.people2', "
                 "columns => '{name,city}', right_columns => '{full_name,town}')"},
        # k above 500: hnsw.ef_search is capped at pgvector's 1000
        {"call": "SELECT * FROM public.tributary_match(left_table => 'ann.people', right_table => 'ann.people2', "
                 "columns => '{name,city}', right_columns => '{full_name,town}', k => 700, threshold => 0.5)"},
        {"call": "SELECT * FROM public.tributary_match(left_table => 'ann.people', right_table => 'ann.people2', "
                 "columns => '{name,city}', right_columns => '{full_name,town}', min_precision => 0.9)"}],
    "tributary_dedup(regclass,text[],integer,double precision,regclass,text,double precision)": [
        {"call": "SELECT * FROM public.tributary_dedup(tbl => 'ann.people', columns => '{name,city}', threshold => 0.5)"},
        {"call": "SELECT * FROM public.tributary_dedup(tbl => 'ann.people', columns => '{name,city}')"}],
    "tributary_match_explain()": [{"call": match_explain_case}],
    "tributary_job_create(regclass,text[],name,text,text,text,integer,integer,text,text[],integer,integer,text[],text,integer)": [
        {"setup": ["DELETE FROM ann.jobs_src"], "call": job_case, "teardown": [DROP_JOBS]}],
    "tributary_job_pause(bigint)": [], "tributary_job_resume(bigint)": [], "tributary_job_cancel(bigint)": [],
    "tributary_job_drop(bigint)": [],   # all four in the job case
    "tributary_chunk_job_create(regclass,name,text,text,integer,integer,text,text)": [
        {"setup": ["DROP TABLE IF EXISTS ann.doc_chunks"], "call": chunk_job_case, "teardown": [DROP_JOBS]}],
    "tributary_chunk_job_drop(bigint)": [],   # in the chunk job case
}


def public_functions(dsn):
    with connect(dsn) as c:
        c.execute("SET search_path = public")
        return sorted(r[0] for r in c.execute("""
            SELECT p.oid::regprocedure::text FROM pg_proc p
              JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
              JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'tributary'
             WHERE p.pronamespace = e.extnamespace"""))


def test_names_are_read_from_the_sources():
    funcs, ops = referenced_names()
    # A sample of what the audit found called unqualified, and what jobs' statements use.
    for name in ("tributary_embed_column", "vector_dims", "array_agg", "jsonb_agg", "hashtext", "count",
                 "to_jsonb", "row_to_json", "jsonb_populate_record", "unnest", "concat_ws", "num_nonnulls"):
        assert name in funcs, name
    for op in ("=", "<=>", "->>", "-", "||"):
        assert op in ops, op


def test_every_public_function_has_a_case(env):
    missing = [f for f in public_functions(env["dsn"]) if f not in CASES]
    assert not missing, f"public functions without a case in test_search_path.py: {missing}"


def test_no_overload_runs_and_results_are_unchanged(env):
    dsn = env["dsn"]
    cases = [(name, i, case) for name, cs in CASES.items() for i, case in enumerate(cs)]
    roles = [None, ANN]
    baseline = {}
    for name, i, case in cases:
        for role in roles:
            baseline[(name, i, role)], w = run_case(dsn, role, "public", case, env)
            assert not w, (name, role, w)
    made = make_hostile(dsn)
    assert made["functions"] > 1000 and made["aggregates"] > 10 and made["operators"] > 100, made
    failures = []
    for path in PATHS:
        for name, i, case in cases:
            for role in roles:
                got, warnings = run_case(dsn, role, path, case, env)
                who = role or "superuser"
                if warnings:
                    failures.append(f"{name} #{i} as {who} under {path}: {warnings[:3]}")
                if got != baseline[(name, i, role)]:
                    failures.append(f"{name} #{i} as {who} under {path}: {got} != {baseline[(name, i, role)]}")
    with connect(dsn) as c:
        calls = c.execute("SELECT what, who FROM mal.calls").fetchall()
        supers = c.execute("SELECT rolname FROM pg_roles WHERE rolsuper AND rolname IN (%s, %s)", (ANN, MAL)).fetchall()
    assert not calls, f"hostile overloads ran: {sorted(set(calls))[:20]}"
    assert not failures, "\n".join(failures[:30])
    assert not supers
