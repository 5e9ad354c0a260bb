"""No type owner's code runs inside tributary's calls (issue 46): the second half of the hostile
objects test (test_search_path.py is the first, the overloads). A plain role owns the types the
caller's columns use, and with them the code PostgreSQL runs for a type without asking its
owner's leave: casts (`CREATE CAST ... WITH FUNCTION` needs only ownership of one of the two
types), operators, domain constraints. tributary must read such values through their types'
output functions (or as their table's owner in a security-restricted context), never through a
cast a role made, or that role's code runs with the caller's rights.

The targets are not listed here: they are read from the extension's SQL scripts (sql/*.sql, not
the update scripts) and the string literals of its Rust sources (src/**/*.rs, the tests left
out), as the overload half reads names: every `::type`, `::pg_catalog.type` and
`CAST(... AS type)`, plus `text`, `json`, `jsonb`, `varchar` and `name` always (`to_jsonb`,
`row_to_json`, `jsonb_build_object` and friends use a type's cast to json; `format` and `||` a
cast to text). A new cast in the sources is covered without editing this file.

The hostile role ht_mal owns schema htm with a type of every category a column can have: enums
(htm.mood, htm.genre, htm.code: the last a primary and foreign key type), a range (htm.span,
over float8) and its multirange (htm.spans), a composite (htm.addr, whose fields are an enum and
a range), domains over each (htm.dmood, htm.daddr, htm.dspan) and over an array (htm.dtags), and
the array of each. The victim ht_ann owns tables in schema hta that use them next to text
columns: as plain columns, arrays, keys (a single enum key, a composite key with an enum part, a
foreign key of enum type), split and group_by columns, labels, prediction targets, match and
dedup columns, child and parent rows of row text, job sources and job keys.

Protocol: every case (one or more per public function of the installed extension, and every job
kind: columns, whole rows into a target table, continuous with its trigger, chunks, predictions)
runs first with the types and tables but no hostile objects (the baseline), as a superuser and as
ht_ann. Then ht_mal creates, for every type T above (arrays included) and every target X found,
`CREATE CAST (T AS X) WITH FUNCTION ... AS ASSIGNMENT` and `CREATE CAST (X AS T) WITH FUNCTION`
(a cast whose source or target is a domain is stored but ignored by PostgreSQL, which warns: they
are made anyway, so that a PostgreSQL that honoured them would be covered), operators `=`, `<>`,
`<`, `>`, `<=`, `>=`, `<=>`, `||` on the types in htm and in public (which anyone may write, as in
a database made before PostgreSQL 15), and a CHECK constraint (NOT VALID) on every domain. Every
such function inserts a row into htm.calls (what ran, as whom) and raises a WARNING (a statement
that fails loses the row, not the WARNING); run by a superuser, it makes ht_mal a superuser (the
issue's exploit). PostgreSQL runs a domain's CHECK for every row written, as the writer: the
test's own writes after that point never touch a domain column. Operator classes and families
cannot be hostile: CREATE OPERATOR CLASS / FAMILY is refused to a role that is not a superuser
(asserted), so DISTINCT, ORDER BY, GROUP BY and indexes on these types use PostgreSQL's own
(enum_ops, record_ops, range_ops). Every case then runs again as the superuser and as ht_ann,
the calling session's search_path `htm, public`: no WARNING reaches the client, htm.calls stays
empty, the results (or SQLSTATEs) equal the baseline's, and neither role is a superuser after.
Also the issue's own reproduction: tenant.mood_txt, which makes its role a superuser, cast from
tenant.mood to text, and a superuser's tributary_dedup over it.

On 0.10.0 (the release build of 326f572, PostgreSQL 15) the test failed: 5,718 hostile calls,
as the superuser and as ht_ann, ht_mal made a superuser, and the reproduction's tenant too. Every
case of these ran hostile code: tributary_embed(record) and tributary_row_text (casts to json and
text of the row, its parents and children, text -> htm.code for child keys), tributary_embed_column
(named columns: casts to text of every column type; '{*}': casts to json), tributary_predict and
tributary_evaluate (k-NN: label and group_by to text, keys to json, CAST(split_at AS htm.mood);
the split on the domain ran its CHECK), tributary_predict_column (both forms; keys through
CAST(key ->> 'lot' AS htm.mood)), tributary_train (both), tributary_predict(predictor, row)
(row to json, and the domain's CHECK when the row is rebuilt), tributary_match (all four: keys and
columns to text, labels' keys), tributary_dedup (all three), tributary_match_explain, and every job
kind (the columns job, the whole-row job into a target table, the chunk job, the predict job: in
the worker, as ht_ann). Not affected: tributary_embed(text / text[]), embed_for, forget_column,
info, tokenize, chunk, the settings and activity functions, model registration, drop_predictor.

Runs on the jobs cluster (TRIBUTARY_JOBS_DSN, tributary in shared_preload_libraries), in a
database of its own; scripts/major_steps.sh runs it on every major.
"""
import os
import re
import time

import psycopg
from psycopg import sql as pgsql
from psycopg.conninfo import make_conninfo
import pytest

from test_search_path import WORD_CALL, connect, public_functions, sql_texts

DB = "tributary_hostile_types"
ANN, MAL, TENANT = "ht_ann", "ht_mal", "ht_tenant"
PATH = "htm, public"   # the calling session's search_path in every run

# ---------------------------------------------------------------------------------------------
# The cast targets, read from the sources.

_QUAL = r'(?:(?:%(?:\d+\$)?s|\{\w*\}|"?[A-Za-z_]\w*"?)\s*\.\s*)?'
_NAME = r'("?[A-Za-z_]\w*"?(?:\s+precision|\s+varying|\s+with(?:out)?\s+time\s+zone)?)\s*((?:\[\s*\]\s*)*)'
COLON_CAST = re.compile(r"::\s*" + _QUAL + _NAME)
TYPE_NAME = re.compile(r"^\s*" + _QUAL + _NAME + r"\s*(?:\(\s*[\d\s,]*\)\s*)?$")
# Conversions that render a value through its type's cast to json (PostgreSQL's json code looks
# up a cast to json for every type that is not built in), and through output functions.
JSON_FUNCS = {"to_json", "to_jsonb", "row_to_json", "array_to_json", "json_build_object", "jsonb_build_object",
              "json_build_array", "jsonb_build_array", "json_agg", "jsonb_agg", "json_object_agg",
              "jsonb_object_agg"}
TEXT_FUNCS = {"format", "concat", "concat_ws"}
ALWAYS = ["text", "json", "jsonb", "varchar", "name"]


def _type_name(name, brackets):
    """A type name as to_regtype reads it: a quoted name ("char") stays quoted."""
    return (name if name.startswith('"') else name.lower()) + ("[]" * brackets.count("["))


def cast_targets_in(text):
    """The type names `text` casts to: `::type` and `CAST(... AS type)` (the AS at the CAST's own
    parenthesis depth); placeholders left out, a placeholder schema (`%s.vector`) dropped."""
    out = [_type_name(m.group(1), m.group(2)) for m in COLON_CAST.finditer(text)]
    for m in re.finditer(r"(?i)\bCAST\s*\(", text):
        i, depth, last = m.end(), 0, None
        while i < len(text):
            ch = text[i]
            if ch == "(":
                depth += 1
            elif ch == ")":
                if depth == 0:
                    break
                depth -= 1
            elif depth == 0 and text[i:i + 2].upper() == "AS" and not (text[i - 1].isalnum() or text[i - 1] == "_") \
                    and i + 2 < len(text) and text[i + 2].isspace():
                last = i + 2
            i += 1
        if last is not None:
            t = TYPE_NAME.match(text[last:i])
            if t:
                out.append(_type_name(t.group(1), t.group(2)))
    return out


def source_conversions():
    """(cast target names as written, conversion functions called) in tributary's SQL."""
    targets, funcs = set(), set()
    for t in sql_texts():
        t = t.replace('\\"', '"')   # a Rust literal's escaped quotes
        targets.update(cast_targets_in(t))
        funcs.update(m.group(1).lower() for m in WORD_CALL.finditer(t))
    return targets, funcs & (JSON_FUNCS | TEXT_FUNCS)


def cast_targets(c):
    """Every target found plus ALWAYS, as (oid, qualified name), through the catalog (aliases
    such as int4 and integer are one type; names that are no type, such as a column alias
    after AS, and pseudo-types are left out)."""
    found, _ = source_conversions()
    c.execute("SET search_path = pg_catalog, public")
    out = {}
    for name in sorted(found | set(ALWAYS)):
        row = c.execute("SELECT t.oid, pg_catalog.format_type(t.oid, NULL) FROM pg_catalog.pg_type t "
                        "WHERE t.oid = pg_catalog.to_regtype(%s) AND t.typtype <> 'p'", (name,)).fetchone()
        if row:
            out[row[0]] = row[1]
    c.execute("SET search_path = pg_catalog")   # names as format_type qualifies them: public.vector
    return sorted(c.execute("SELECT t, pg_catalog.format_type(t, NULL) FROM pg_catalog.unnest(%s::oid[]) t",
                            (list(out),)).fetchall())


# ---------------------------------------------------------------------------------------------
# The database: types (ht_mal), tables (ht_ann), rows, embeddings.

TYPES_SQL = """
CREATE TYPE htm.mood AS ENUM ('happy', 'sad', 'calm');
CREATE TYPE htm.genre AS ENUM ('scifi', 'romance', 'crime');
CREATE TYPE htm.code AS ENUM ('p1', 'p2', 'p3', 'p4', 'p5', 'p6', 'p7', 'p8', 's1', 's2', 's3',
                              'j1', 'j2', 'j3', 'r1', 'r2', 'r3', 'r4', 'd1', 'd2', 'x1');
CREATE TYPE htm.span AS RANGE (subtype = float8, multirange_type_name = htm.spans);
CREATE TYPE htm.addr AS (street text, city text, m htm.mood, s htm.span);
CREATE DOMAIN htm.dmood AS htm.mood;
CREATE DOMAIN htm.daddr AS htm.addr;
CREATE DOMAIN htm.dspan AS htm.span;
CREATE DOMAIN htm.dtags AS htm.mood[];
"""
# Every type a cast is made for: each category and the array of each (domains' arrays too).
BASE_TYPES = ["htm.mood", "htm.genre", "htm.code", "htm.span", "htm.spans", "htm.addr",
              "htm.dmood", "htm.daddr", "htm.dspan", "htm.dtags"]
HOSTILE_TYPES = BASE_TYPES + [t + "[]" for t in BASE_TYPES if t != "htm.dtags"]
OP_TYPES = ["htm.mood", "htm.genre", "htm.code", "htm.span", "htm.spans", "htm.addr", "htm.mood[]", "htm.code[]"]
DOMAINS = {"htm.dmood": "htm.mood", "htm.daddr": "htm.addr", "htm.dspan": "htm.span", "htm.dtags": "htm.mood[]"}

A = "'(\"1 Main St\",%s,%s,\"[%s,%s)\")'"   # an htm.addr literal


def addr(city, mood, lo):
    return A % (city, mood, lo, lo + 1)


def with_addrs(sql):
    """`sql` with ADDR(city,mood,lo) made addr(...)."""
    return re.sub(r"ADDR\((\w+),(\w+),(\d+)\)", lambda m: addr(m.group(1), m.group(2), int(m.group(3))), sql)


TABLES_SQL = """
CREATE TABLE hta.people (id htm.code PRIMARY KEY, name text, city text, mood htm.mood, tags htm.mood[],
    addr htm.addr, span htm.span, spans htm.spans, dmood htm.dmood, daddr htm.daddr, dspan htm.dspan,
    dtags htm.dtags, addrs htm.addr[], e vector(384));
CREATE TABLE hta.people2 (id int PRIMARY KEY, full_name text, town text, mood htm.mood, addr htm.addr,
    span htm.span);
CREATE TABLE hta.orders (id int PRIMARY KEY, person_id htm.code REFERENCES hta.people, item text,
    mood htm.mood, addr htm.addr, span htm.span);
CREATE TABLE hta.studios (id htm.code PRIMARY KEY, name text, mood htm.mood);
CREATE TABLE hta.films (id int, lot htm.mood, title text, genre htm.genre, mood htm.mood, dmood htm.dmood,
    tags htm.mood[], addr htm.addr, span htm.span, era htm.mood, studio htm.code REFERENCES hta.studios,
    yr int, e vector(384), guess text, gguess htm.genre, PRIMARY KEY (id, lot));
CREATE TABLE hta.match_labels (left_key htm.code, right_key int, is_match boolean);
CREATE TABLE hta.scratch (id htm.code PRIMARY KEY, note text, mood htm.mood, e vector(384));
-- (no domain columns in the jobs' sources: the test writes their rows after the domains got
-- their hostile CHECK, which PostgreSQL runs for every row written, as the writer)
CREATE TABLE hta.jobs_src (id htm.code PRIMARY KEY, body text, mood htm.mood, tags htm.mood[],
    addr htm.addr, span htm.span, spans htm.spans, e vector(384));
CREATE TABLE hta.rows_src (id htm.code PRIMARY KEY, person_id htm.code REFERENCES hta.people, body text,
    mood htm.mood, tags htm.mood[], addr htm.addr, span htm.span);
CREATE TABLE hta.docs (id htm.code PRIMARY KEY, mood htm.mood, body text);
INSERT INTO hta.people (id, name, city, mood, tags, addr, span, spans, dmood, daddr, dspan, dtags, addrs) VALUES
    ('p1', 'Maria Lopez', 'Madrid', 'happy', '{happy,sad}', ADDR(Madrid,happy,1), '[1,2)', '{[1,2)}',
     'happy', ADDR(Madrid,sad,2), '[2,3)', '{calm}', ARRAY[ADDR(Madrid,calm,3)::htm.addr]),
    ('p2', 'John Smith', 'Boston', 'sad', '{sad}', ADDR(Boston,sad,4), '[4,5)', '{[4,5)}',
     'sad', NULL, '[5,6)', '{happy}', NULL),
    ('p3', 'Anna Schmidt', 'Berlin', 'calm', '{}', ADDR(Berlin,calm,6), '[6,7)', NULL,
     'calm', ADDR(Berlin,happy,7), NULL, '{}', NULL),
    ('p4', 'Li Wei', 'Shanghai', 'happy', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
    ('p5', 'Olga Petrova', 'Moscow', 'sad', '{calm,sad}', ADDR(Moscow,sad,8), '[8,9)', NULL,
     'sad', NULL, NULL, NULL, NULL),
    ('p6', 'Pierre Dubois', 'Paris', 'calm', '{happy}', ADDR(Paris,happy,9), '[9,10)', NULL,
     NULL, NULL, NULL, NULL, NULL),
    ('p7', 'Maria Lopes', 'Madrid', 'happy', '{happy,sad}', ADDR(Madrid,happy,1), '[1,2)', NULL,
     'happy', NULL, '[2,3)', '{calm}', NULL),
    ('p8', 'Kenji Sato', 'Osaka', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
INSERT INTO hta.people2 VALUES
    (11, 'Maria Lopez', 'Madrid', 'happy', ADDR(Madrid,happy,1), '[1,2)'),
    (12, 'Jon Smith', 'Boston', 'sad', ADDR(Boston,sad,4), '[4,5)'),
    (13, 'Anna Schmitt', 'Berlin', 'calm', ADDR(Berlin,calm,6), '[6,7)'),
    (14, 'Wei Li', 'Shanghai', 'happy', NULL, NULL),
    (15, 'Olga Petrova', 'Moskow', 'sad', ADDR(Moscow,sad,8), '[8,9)'),
    (16, 'Pierre Dubois', 'Paris', NULL, NULL, NULL);
INSERT INTO hta.orders VALUES (1, 'p1', 'guitar strings', 'happy', ADDR(Madrid,happy,1), '[1,2)'),
    (2, 'p1', 'piano stool', 'sad', NULL, '[2,3)'), (3, 'p2', 'baseball bat', 'calm', NULL, NULL),
    (4, 'p3', 'beer mug', NULL, ADDR(Berlin,calm,6), NULL), (5, 'p6', 'cheese knife', 'happy', NULL, NULL);
INSERT INTO hta.studios VALUES ('s1', 'Orbit Pictures', 'happy'), ('s2', 'Heart Films', 'sad'),
    ('s3', 'Noir House', 'calm');
INSERT INTO hta.films (id, lot, title, genre, mood, dmood, tags, addr, span, era, studio, yr) VALUES
    (1, 'happy', 'Space battle among the stars', 'scifi', 'happy', 'happy', '{happy}', ADDR(Rome,happy,1), '[1,2)', 'happy', 's1', 2001),
    (2, 'sad', 'Alien invasion of Earth', 'scifi', 'sad', 'sad', '{sad}', NULL, '[2,3)', 'happy', 's1', 2002),
    (3, 'calm', 'Robots take over the galaxy', 'scifi', 'happy', 'calm', NULL, NULL, NULL, 'sad', 's1', 2008),
    (4, 'happy', 'Two friends fall in love in Paris', 'romance', 'happy', 'happy', '{happy,calm}', NULL, '[4,5)', 'happy', 's2', 2003),
    (5, 'sad', 'A wedding and a kiss', 'romance', 'calm', 'sad', NULL, ADDR(Paris,sad,5), NULL, 'happy', 's2', 2004),
    (6, 'calm', 'Love letters across the ocean', 'romance', 'sad', 'calm', '{}', NULL, '[6,7)', 'sad', 's2', 2009),
    (7, 'happy', 'A detective hunts a killer', 'crime', 'sad', 'happy', '{sad}', NULL, NULL, 'happy', 's3', 2005),
    (8, 'sad', 'Bank robbery goes wrong', 'crime', 'calm', 'sad', NULL, ADDR(Rome,calm,8), '[8,9)', 'happy', 's3', 2006),
    (9, 'calm', 'The mafia boss and the police', 'crime', 'calm', 'calm', '{calm}', NULL, NULL, 'sad', 's3', 2010),
    (10, 'happy', 'Starship crew meets aliens', NULL, 'happy', 'happy', '{happy}', NULL, '[10,11)', 'calm', 's1', 2011),
    (11, 'sad', 'Romantic dinner in Rome', NULL, 'sad', 'sad', NULL, NULL, NULL, 'calm', 's2', 2012),
    (12, 'calm', 'A murder in the city', NULL, 'calm', 'calm', '{calm}', NULL, NULL, 'calm', 's3', 2013);
INSERT INTO hta.match_labels VALUES ('p1', 11, true), ('p2', 12, true), ('p3', 14, false);
INSERT INTO hta.scratch VALUES ('x1', 'first', 'happy', NULL);
INSERT INTO hta.docs VALUES ('d1', 'calm', repeat('A long document about rivers and lakes. ', 30)),
                            ('d2', 'sad', 'A short one.');
"""


@pytest.fixture(scope="module")
def env():
    base = os.environ.get("TRIBUTARY_JOBS_DSN")
    if not base:
        pytest.fail("TRIBUTARY_JOBS_DSN is not set: run these through scripts/test.sh")
    with connect(base) as c:
        c.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
        for r in (ANN, MAL, TENANT):
            if not c.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (r,)).fetchone():
                c.execute(f"CREATE ROLE {r} LOGIN")
            c.execute(f"ALTER ROLE {r} NOSUPERUSER NOCREATEROLE NOCREATEDB NOBYPASSRLS LOGIN")
            c.execute(f"ALTER ROLE {r} RESET ALL")
        c.execute("ALTER SYSTEM SET tributary.job_poll_interval = 200")
        c.execute("SELECT pg_reload_conf()")
        c.execute(f"CREATE DATABASE {DB}")
    dsn = make_conninfo(base, dbname=DB)
    try:
        with connect(dsn) as c:
            c.execute("CREATE EXTENSION tributary CASCADE")
            c.execute("GRANT CREATE, USAGE ON SCHEMA public TO PUBLIC")
            c.execute(f"CREATE SCHEMA htm AUTHORIZATION {MAL}")
            c.execute(f"CREATE SCHEMA hta AUTHORIZATION {ANN}")
            c.execute(f"CREATE SCHEMA tenant AUTHORIZATION {TENANT}")
        with connect(dsn, user=MAL) as c:
            c.execute("GRANT USAGE ON SCHEMA htm TO PUBLIC")
            c.execute(TYPES_SQL)
        with connect(dsn, user=ANN) as c:
            c.execute("SET search_path = public")
            c.execute(with_addrs(TABLES_SQL))
            c.execute("SELECT public.tributary_embed_column(tbl => 'hta.films', columns => '{title}', target => 'e')")
        with connect(dsn) as c:
            query = c.execute("SELECT e::text FROM hta.films WHERE id = 10").fetchone()[0]
        yield {"dsn": dsn, "base": base, "query": query}
    finally:
        with connect(base) as c:
            for r in (ANN, MAL, TENANT):
                c.execute(f"ALTER ROLE {r} NOSUPERUSER")
            c.execute("ALTER SYSTEM RESET tributary.job_poll_interval")
            c.execute("SELECT pg_reload_conf()")
            c.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")


# ---------------------------------------------------------------------------------------------
# The hostile objects.

HIT_SQL = f"""
CREATE TABLE htm.calls (n bigserial, what text, who text DEFAULT current_user);
GRANT INSERT, SELECT ON htm.calls TO PUBLIC;
GRANT USAGE ON SEQUENCE htm.calls_n_seq TO PUBLIC;
CREATE FUNCTION htm._hit(what text) RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog AS $$
BEGIN
    INSERT INTO htm.calls (what) VALUES (what);
    IF (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) current_user) THEN
        EXECUTE 'ALTER ROLE {MAL} SUPERUSER';
    END IF;
    RAISE WARNING 'HOSTILE TYPE CODE RAN: % as %', what, current_user;
END $$;
"""
TEXTLIKE = {"text", "character varying", "name", "character", '"char"'}


def _returning(target, arg):
    """A plausible value of `target` made from `arg` without a cast of a hostile type."""
    out = f"pg_catalog.format('%s', {arg})"
    if target in TEXTLIKE:
        return out
    if target in ("json", "jsonb"):
        return f"pg_catalog.to_{target}({out})"
    if target == "text[]":
        return f"ARRAY[{out}]"
    return "NULL"


def make_hostile(dsn, targets):
    """As ht_mal: the log, the casts both ways between every hostile type and every target, the
    operators in htm and public, the domains' constraints. Returns what was made and refused."""
    made = {"casts": 0, "refused casts": [], "operators": 0, "checks": 0}
    with connect(dsn, user=MAL) as c:
        c.execute(HIT_SQL)

        def attempt(stmt):
            try:
                with c.transaction():
                    c.execute(stmt)
                return True
            except psycopg.Error as e:
                return e

        def lit(s):
            return pgsql.Literal(s).as_string(c)

        n = 0
        for t in HOSTILE_TYPES:
            for _, x in targets:
                for src, dst, ctx in ((t, x, " AS ASSIGNMENT"), (x, t, "")):
                    n += 1
                    fn = f"htm.cast_{n}"
                    body = (f"BEGIN PERFORM htm._hit({lit(f'cast ({src} AS {dst})')}); "
                            f"RETURN {_returning(dst, 'v') if src == t else 'NULL'}; END")
                    r = attempt(f"CREATE FUNCTION {fn}(v {src}) RETURNS {dst} LANGUAGE plpgsql AS $h${body}$h$")
                    if r is True:
                        r = attempt(f"CREATE CAST ({src} AS {dst}) WITH FUNCTION {fn}({src}){ctx}")
                    if r is True:
                        made["casts"] += 1
                    else:
                        made["refused casts"].append(f"({src} AS {dst}): {r.sqlstate} {r}")
        for schema in ("htm", "public"):
            for t in OP_TYPES:
                sigs = [(op, t, t, "boolean") for op in ("=", "<>", "<", ">", "<=", ">=", "<=>")]
                sigs += [("||", t, t, "text"), ("||", "text", t, "text"), ("||", t, "text", "text")]
                for op, l, r_, ret in sigs:
                    n += 1
                    fn = f"htm.op_{n}"
                    body = f"BEGIN PERFORM htm._hit({lit(f'operator {schema}.{op}({l}, {r_})')}); RETURN NULL; END"
                    r = attempt(f"CREATE FUNCTION {fn}(a {l}, b {r_}) RETURNS {ret} LANGUAGE plpgsql AS $h${body}$h$")
                    if r is True:
                        r = attempt(f"CREATE OPERATOR {schema}.{op} (LEFTARG = {l}, RIGHTARG = {r_}, FUNCTION = {fn})")
                    assert r is True, (schema, op, l, r_, r)
                    made["operators"] += 1
        for d, base in DOMAINS.items():
            fn = f"htm.check_{d.split('.')[1]}"
            c.execute(f"CREATE FUNCTION {fn}(v {base}) RETURNS boolean LANGUAGE plpgsql AS "
                      f"$h$BEGIN PERFORM htm._hit({lit('domain check ' + d)}); RETURN true; END$h$")
            c.execute(f"ALTER DOMAIN {d} ADD CONSTRAINT hostile CHECK ({fn}(VALUE)) NOT VALID")
            made["checks"] += 1
        # Operator classes and families are the superuser's: a plain role cannot give its types
        # hostile ones, so sorting, grouping, hashing and indexes use PostgreSQL's own.
        for stmt in ("CREATE OPERATOR FAMILY htm.mood_fam USING btree",
                     "CREATE OPERATOR CLASS htm.mood_ops FOR TYPE htm.mood USING hash AS OPERATOR 1 htm.= (htm.mood, htm.mood)"):
            r = attempt(stmt)
            assert isinstance(r, psycopg.errors.InsufficientPrivilege), (stmt, r)
    return made


# ---------------------------------------------------------------------------------------------
# The cases: as in test_search_path.py, one or more per public function by regprocedure, every
# call in named notation.

def job_state(c, job_id):
    return c.execute("SELECT state, rows_done, last_error FROM tributary.jobs WHERE id = %s", (job_id,)).fetchone()


def wait_while(clean, pending, job_id, timeout=60, read=None):
    """Polls until `pending()` is false: 'done', or (after `timeout` s, or once the job failed)
    what the job says, which then differs from the baseline's 'done'."""
    deadline = time.monotonic() + timeout
    while pending():
        state = read() if read else job_state(clean, job_id)
        if time.monotonic() > deadline or state[0] in ("failed", "cancelled", "broken"):
            return f"not done: {state}"
        time.sleep(0.3)
    return "done"


def job_case(c, clean, env):
    """A continuous job over hostile-typed columns with a hostile key: rows written under the
    hostile path (its trigger), the worker embeds them; pause, resume, cancel, drop."""
    job_id = c.execute("SELECT public.tributary_job_create(source => 'hta.jobs_src', columns => '{body,mood,tags,addr,span,spans}', "
                       "target => 'e', mode => 'continuous', name => 'ht_job')").fetchone()[0]
    c.execute("INSERT INTO hta.jobs_src (id, body, mood, tags, addr, span, spans) VALUES "
              f"('j1', 'a river in spring', 'happy', '{{happy,sad}}', {addr('Oslo', 'calm', 1)}, '[1,2)', '{{[1,2)}}'), "
              "('j2', 'snow on the mountains', 'sad', NULL, NULL, '[3,4)', NULL), ('j3', NULL, 'calm', '{calm}', NULL, NULL, '{}')")
    c.execute("UPDATE hta.jobs_src SET body = 'a river in autumn', mood = 'calm' WHERE id OPERATOR(pg_catalog.=) 'j1'")
    waited = wait_while(clean, lambda: clean.execute(
        "SELECT count(*) FILTER (WHERE e IS NULL) + (SELECT rows_queued FROM tributary.jobs WHERE id = %s) FROM hta.jobs_src",
        (job_id,)).fetchone()[0], job_id)
    for op in ("pause", "resume", "cancel"):
        c.execute(f"SELECT public.tributary_job_{op}(job => {job_id})")
    errors = clean.execute("SELECT key::text, sqlstate FROM tributary.job_errors WHERE job_id = %s", (job_id,)).fetchall()
    c.execute(f"SELECT public.tributary_job_drop(job => {job_id})")
    return clean.execute("SELECT id, e::text FROM hta.jobs_src ORDER BY id").fetchall() + [(waited, errors)]


def row_job_case(c, clean, env):
    """A whole-row job ('{*}', parents) into a target table keyed by the hostile key, continuous:
    an insert, an update and a delete under the hostile path."""
    c.execute("INSERT INTO hta.rows_src VALUES "
              f"('r1', 'p1', 'first row', 'happy', '{{happy}}', {addr('Lima', 'sad', 1)}, '[1,2)'), "
              "('r2', 'p2', 'second row', 'sad', NULL, NULL, NULL), ('r3', NULL, 'third row', 'calm', '{}', NULL, '[5,6)')")
    job_id = c.execute("SELECT public.tributary_job_create(source => 'hta.rows_src', columns => '{*}', target_table => 'hta.rows_emb', "
                       "mode => 'continuous', parents => 1, name => 'ht_rows')").fetchone()[0]
    c.execute(f"INSERT INTO hta.rows_src VALUES ('r4', 'p3', 'fourth row', 'happy', '{{calm}}', {addr('Kyiv', 'happy', 4)}, NULL)")
    c.execute("UPDATE hta.rows_src SET mood = 'sad', addr = NULL WHERE id OPERATOR(pg_catalog.=) 'r1'")
    c.execute("DELETE FROM hta.rows_src WHERE id OPERATOR(pg_catalog.=) 'r3'")
    waited = wait_while(clean, lambda: clean.execute(
        "SELECT (SELECT count(*) FROM hta.rows_emb) <> 3 OR rows_queued > 0 FROM tributary.jobs WHERE id = %s",
        (job_id,)).fetchone()[0], job_id)
    errors = clean.execute("SELECT key::text, sqlstate FROM tributary.job_errors WHERE job_id = %s", (job_id,)).fetchall()
    c.execute(f"SELECT public.tributary_job_drop(job => {job_id})")
    return clean.execute("SELECT t::text FROM hta.rows_emb t ORDER BY 1").fetchall() + [(waited, errors)]


def chunk_job_case(c, clean, env):
    job_id = c.execute("SELECT public.tributary_chunk_job_create(source => 'hta.docs', text_column => 'body', "
                       "chunk_table => 'hta.doc_chunks', chunk_tokens => 32, name => 'ht_chunks')").fetchone()[0]
    waited = wait_while(clean, lambda: clean.execute(
        "SELECT rows_done = 0 OR rows_queued > 0 OR (SELECT count(*) FROM hta.doc_chunks WHERE embedding IS NULL) > 0 "
        "FROM tributary.jobs WHERE id = %s", (job_id,)).fetchone()[0], job_id)
    c.execute(f"SELECT public.tributary_chunk_job_drop(job => {job_id})")
    return clean.execute("SELECT t::text FROM hta.doc_chunks t ORDER BY 1").fetchall() + [(waited,)]


def predict_job_case(c, clean, env):
    job_id = c.execute("SELECT public.tributary_predict_job_create(predictor => 'ht_pred', target => 'guess')").fetchone()[0]
    c.execute("UPDATE hta.films SET title = title WHERE id OPERATOR(pg_catalog.=) 1")
    waited = wait_while(clean, lambda: clean.execute(
        "SELECT runs < 1 OR pending > 0 OR state <> 'active' FROM tributary.predict_jobs WHERE id = %s", (job_id,)).fetchone()[0],
        job_id, read=lambda: clean.execute("SELECT state, last_error FROM tributary.predict_jobs WHERE id = %s",
                                           (job_id,)).fetchone())
    c.execute(f"SELECT public.tributary_predict_job_drop(job => {job_id})")
    return clean.execute("SELECT id, guess FROM hta.films ORDER BY id").fetchall() + [(waited,)]


def match_explain_case(c, clean, env):
    c.execute("SELECT * FROM public.tributary_match(left_table => 'hta.people', right_table => 'hta.people2', "
              "columns => '{name,mood,addr}', right_columns => '{full_name,mood,addr}')")
    e = c.execute("SELECT public.tributary_match_explain()").fetchone()[0]
    return [(e["accepted"], e["how"], e["estimated_matches"], [x["column"] for x in e["columns"]])]


E = "public.tributary_embed"
TRAIN = ("SELECT 1 FROM public.tributary_train(predictor => 'ht_pred', tbl => 'hta.films', label => 'genre', "
         "embedding => 'e', algorithm => 'logistic', k => 3)")
DROP_PRED = "SELECT public.tributary_drop_predictor(predictor => p.name) FROM tributary.predictors p WHERE p.name = 'ht_pred'"
DROP_JOBS = ("SELECT public.tributary_job_drop(job => j.id) FROM tributary.jobs j "
             "WHERE j.name IN ('ht_job', 'ht_rows', 'ht_chunks')")
RESET_FILMS = "UPDATE hta.films SET guess = NULL, gguess = NULL"
PEOPLE_COLS = "'{name,mood,tags,addr,span,spans,dmood,daddr,dspan,dtags,addrs}'"
EMBEDDED = "SELECT id, e::text FROM hta.people ORDER BY id"
MATCH = ("SELECT * FROM public.tributary_match(left_table => 'hta.people', right_table => 'hta.people2', "
         "columns => %s, right_columns => %s%s)")
CASES = {
    "tributary_embed(text,text,text)": [{"call": f"SELECT {E}(text => 'a red apple')::text"}],
    "tributary_embed(text[],text,text)": [{"call": f"SELECT {E}(texts => ARRAY['a red apple', 'snow'])::text"}],
    "tributary_embed(record,text,text[],text[],integer,integer,text[],timestamp with time zone,boolean,integer)": [
        {"call": f'SELECT p.id, {E}("row" => p, parents => 1, children => 2)::text FROM hta.people p', "unordered": True},
        {"call": f'SELECT o.id, {E}("row" => o, parents => 2, keys => true)::text FROM hta.orders o', "unordered": True}],
    "tributary_row_text(record,text[],text[],integer,integer,text[],timestamp with time zone,boolean,integer,text,integer)": [
        {"call": 'SELECT p.id, public.tributary_row_text("row" => p, parents => 1, children => 2, keys => true) '
                 'FROM hta.people p', "unordered": True},
        {"call": 'SELECT p.id, public.tributary_row_text("row" => p, template => 1, children => 1) FROM hta.people p',
         "unordered": True},
        {"call": 'SELECT o.id, public.tributary_row_text("row" => o, parents => 2) FROM hta.orders o', "unordered": True},
        {"call": 'SELECT f.id, public.tributary_row_text("row" => f, parents => 1, keys => true) FROM hta.films f',
         "unordered": True},
        {"call": "SELECT public.tributary_row_text(\"row\" => ROW('x'::text, 'happy'::htm.mood, "
                 f"{addr('Oslo', 'sad', 1)}::htm.addr, '[1,2)'::htm.span, '{{sad}}'::htm.mood[]))"}],
    "tributary_embed_column(regclass,text[],name,text,integer,text[],integer,integer,text[],timestamp with time zone,text,integer)": [
        {"setup": ["UPDATE hta.people SET e = NULL"],
         "call": f"SELECT public.tributary_embed_column(tbl => 'hta.people', columns => {PEOPLE_COLS}, target => 'e')",
         "check": EMBEDDED, "teardown": ["UPDATE hta.people SET e = NULL"]},
        {"setup": ["UPDATE hta.people SET e = NULL"],
         "call": "SELECT public.tributary_embed_column(tbl => 'hta.people', columns => '{*}', target => 'e', children => 2)",
         "check": EMBEDDED, "teardown": ["UPDATE hta.people SET e = NULL"]}],
    "tributary_embed_for(regclass,name,text,text)": [
        {"call": "SELECT public.tributary_embed_for(tbl => 'hta.films', col => 'e', text => 'aliens in space')::text"}],
    "tributary_forget_column(regclass,name)": [
        {"setup": ["SELECT public.tributary_embed_column(tbl => 'hta.scratch', columns => '{note,mood}', target => 'e')",
                   "UPDATE hta.scratch SET e = NULL"],
         "call": "SELECT public.tributary_forget_column(tbl => 'hta.scratch', col => 'e')"}],
    "tributary_info(text)": [{"call": "SELECT model, dimension, max_length, pooling FROM public.tributary_info(model => NULL)"}],
    "tributary_tokenize(text,text)": [{"call": "SELECT public.tributary_tokenize(text => 'Hello, tokenizer!')"}],
    "tributary_chunk(text,text,integer,integer)": [
        {"call": "SELECT * FROM public.tributary_chunk(text => 'Rivers flow into lakes and lakes into rivers; "
                 "the sea takes them all in the end.', chunk_tokens => 8)"}],
    "tributary_row_template_version()": [{"call": "SELECT public.tributary_row_template_version()"}],
    "tributary_stat_activity()": [{"call": "SELECT 1 FROM public.tributary_stat_activity() LIMIT 0"}],
    "tributary_sessions()": [{"call": "SELECT 1 FROM public.tributary_sessions() LIMIT 0"}],
    "tributary_progress_embed_column()": [{"call": "SELECT 1 FROM public.tributary_progress_embed_column() LIMIT 0"}],
    "tributary_register_model(text,text,text,jsonb)": [
        {"call": "SELECT public.tributary_register_model(name => 'ht-model', path => 'all-MiniLM-L6-v2')"}],
    "tributary_drop_model(text)": [{"call": "SELECT public.tributary_drop_model(name => 'ht-model')"}],
    "tributary_predict(regclass,name,name,vector,integer,text)": [
        {"call": "SELECT prediction, confidence, neighbours, evidence FROM public.tributary_predict(tbl => 'hta.films', "
                 "label => 'genre', embedding => 'e', query => '$QUERY', k => 3)"},
        {"call": "SELECT prediction, confidence, neighbours FROM public.tributary_predict(tbl => 'hta.films', "
                 "label => 'mood', embedding => 'e', query => '$QUERY', k => 3)"}],
    "tributary_evaluate(regclass,name,name,name,integer,double precision,text,integer,name,text)": [
        {"call": "SELECT metric, model, baseline, test_rows, train_rows, split FROM public.tributary_evaluate(tbl => 'hta.films', "
                 "label => 'genre', embedding => 'e', k => 3, test_fraction => 0.4)"},
        {"call": "SELECT metric, model, baseline, test_rows, train_rows, split FROM public.tributary_evaluate(tbl => 'hta.films', "
                 "label => 'genre', embedding => 'e', group_by => 'mood', k => 3, test_fraction => 0.5)"},
        {"call": "SELECT metric, model, baseline, test_rows, train_rows, split FROM public.tributary_evaluate(tbl => 'hta.films', "
                 "label => 'genre', embedding => 'e', k => 3, split_column => 'era', split_at => 'sad')"},
        {"call": "SELECT metric, model, baseline, test_rows, train_rows, split FROM public.tributary_evaluate(tbl => 'hta.films', "
                 "label => 'genre', embedding => 'e', k => 3, split_column => 'dmood', split_at => 'calm')"}],
    "tributary_predict_column(regclass,name,name,name,integer,text,integer)": [
        {"setup": [RESET_FILMS],
         "call": "SELECT public.tributary_predict_column(tbl => 'hta.films', label => 'genre', embedding => 'e', "
                 "target => 'guess', k => 3)",
         "check": "SELECT id, guess FROM hta.films ORDER BY id", "teardown": [RESET_FILMS]},
        {"setup": [RESET_FILMS],
         "call": "SELECT public.tributary_predict_column(tbl => 'hta.films', label => 'genre', embedding => 'e', "
                 "target => 'gguess', k => 3)",
         "check": "SELECT id, gguess FROM hta.films ORDER BY id", "teardown": [RESET_FILMS]}],
    "tributary_train(text,regclass,name,name,name,text,text[],text[],text,integer)": [
        {"setup": [RESET_FILMS],
         "call": "SELECT method, algorithm, split, rows, round(accuracy::numeric, 6) FROM public.tributary_train("
                 "predictor => 'ht_pred', tbl => 'hta.films', label => 'genre', embedding => 'e', algorithm => 'logistic', k => 3)",
         "teardown": [DROP_PRED, RESET_FILMS]},
        {"setup": [RESET_FILMS],
         # (the accuracy of this one varies from one training to the next)
         "call": "SELECT method, algorithm, split, rows FROM public.tributary_train("
                 "predictor => 'ht_pred', tbl => 'hta.films', label => 'mood', as_of => 'yr', split_at => '2008', "
                 "algorithm => 'logistic')",
         "teardown": [DROP_PRED, RESET_FILMS]}],
    "tributary_predict_trigger()": [
        {"setup": [RESET_FILMS, TRAIN,
                   "CREATE TRIGGER ht_guess BEFORE UPDATE ON hta.films FOR EACH ROW "
                   "EXECUTE FUNCTION public.tributary_predict_trigger('ht_pred', 'gguess')"],
         "call": "UPDATE hta.films SET yr = yr",
         "check": "SELECT id, gguess FROM hta.films ORDER BY id",
         "teardown": ["DROP TRIGGER ht_guess ON hta.films", DROP_PRED, RESET_FILMS]}],
    "tributary_predict_column(text,name,integer)": [
        {"setup": [RESET_FILMS, TRAIN],
         "call": "SELECT public.tributary_predict_column(predictor => 'ht_pred', target => 'guess')",
         "check": "SELECT id, guess FROM hta.films ORDER BY id", "teardown": [DROP_PRED, RESET_FILMS]},
        {"setup": [RESET_FILMS, TRAIN],
         "call": "SELECT public.tributary_predict_column(predictor => 'ht_pred', target => 'gguess')",
         "check": "SELECT id, gguess FROM hta.films ORDER BY id", "teardown": [DROP_PRED, RESET_FILMS]}],
    "tributary_predict_column_online(text,name,integer)": [
        {"setup": [RESET_FILMS, TRAIN],
         "call": "SELECT public.tributary_predict_column_online(predictor => 'ht_pred', target => 'guess')",
         "check": "SELECT id, guess FROM hta.films ORDER BY id", "teardown": [DROP_PRED, RESET_FILMS]}],
    "tributary_predict(text,anyelement)": [
        {"setup": [RESET_FILMS, TRAIN],
         # (the evidence's feature weights vary from one training to the next: its shape and keys compared)
         "call": "SELECT f.id, p.prediction, (SELECT array_agg(k ORDER BY k) FROM jsonb_object_keys(p.evidence) k), "
                 "p.evidence -> 'history', jsonb_path_query_array(p.evidence, '$.neighbours[*].key') "
                 "FROM hta.films f, public.tributary_predict(predictor => 'ht_pred', \"row\" => f) p",
         "unordered": True, "teardown": [DROP_PRED, RESET_FILMS]}],
    "tributary_drop_predictor(text)": [
        {"setup": [RESET_FILMS, TRAIN], "call": "SELECT public.tributary_drop_predictor(predictor => 'ht_pred')"}],
    "tributary_predict_job_create(text,name)": [
        {"setup": [RESET_FILMS, TRAIN], "call": predict_job_case,
         "teardown": ["SELECT public.tributary_predict_job_drop(job => j.id) FROM tributary.predict_jobs j", DROP_PRED, RESET_FILMS]}],
    "tributary_predict_job_drop(bigint)": [],   # in the predict job case
    "tributary_match(regclass,regclass,text[],text[],integer,double precision,boolean,regclass,text,double precision)": [
        {"call": MATCH % ("'{name,city,mood}'", "'{full_name,town,mood}'", "")},
        {"call": MATCH % ("'{name,addr,span}'", "'{full_name,addr,span}'", ", threshold => 0.3")},
        {"call": MATCH % ("'{name,city}'", "'{full_name,town}'", ", labels => 'hta.match_labels'")},
        {"call": "SELECT * FROM public.tributary_match(left_table => 'hta.films', right_table => 'hta.films', "
                 "columns => '{title,mood,tags}', one_to_one => false, threshold => 0.2)"}],
    "tributary_dedup(regclass,text[],integer,double precision,regclass,text,double precision)": [
        {"call": "SELECT * FROM public.tributary_dedup(tbl => 'hta.people', columns => '{name,city,mood,tags}', threshold => 0.5)"},
        {"call": "SELECT * FROM public.tributary_dedup(tbl => 'hta.people', columns => '{name,addr,dspan,dtags}')"},
        {"call": "SELECT * FROM public.tributary_dedup(tbl => 'hta.films', columns => '{title,mood}', threshold => 0.2)"}],
    "tributary_match_explain()": [{"call": match_explain_case}],
    "tributary_job_create(regclass,text[],name,text,text,text,integer,integer,text,text[],integer,integer,text[],text,integer)": [
        {"call": job_case, "teardown": [DROP_JOBS, "DELETE FROM hta.jobs_src"]},
        {"call": row_job_case, "teardown": [DROP_JOBS, "DELETE FROM hta.rows_src", "DROP TABLE IF EXISTS hta.rows_emb"]}],
    "tributary_job_pause(bigint)": [], "tributary_job_resume(bigint)": [], "tributary_job_cancel(bigint)": [],
    "tributary_job_drop(bigint)": [],   # all four in the job cases
    "tributary_chunk_job_create(regclass,name,text,text,integer,integer,text,text)": [
        {"call": chunk_job_case, "teardown": [DROP_JOBS, "DROP TABLE IF EXISTS hta.doc_chunks"]}],
    "tributary_chunk_job_drop(bigint)": [],   # in the chunk job case
}


# (The test's own SQL never casts a value of a hostile type: it selects them as they are, and
# psycopg reads their output functions' text.)
def run_case(dsn, role, case, env):
    """One case as `role` (None: the superuser): setup and check under search_path public, the
    call under PATH. Returns ('ok', rows) or ('error', sqlstate), the client's WARNINGs, and
    the hostile calls logged during the call (its setup's are the setup's own cases')."""
    warnings = []
    kw = {"user": role} if role else {}
    with connect(dsn, **kw) as clean, connect(dsn, **kw) as c:
        clean.execute("SET search_path = public")
        c.add_notice_handler(lambda d: warnings.append(d.message_primary) if d.severity == "WARNING" else None)
        c.execute(pgsql.SQL("SET search_path = {}").format(pgsql.SQL(PATH)))
        logged = clean.execute("SELECT pg_catalog.to_regclass('htm.calls') IS NOT NULL").fetchone()[0]

        def count():
            return clean.execute("SELECT coalesce(max(n), 0) FROM htm.calls").fetchone()[0] if logged else 0
        before = None
        try:
            for s in case.get("setup", []):
                clean.execute(s)
            before = count()
            out = case["call"](c, clean, env) if callable(case["call"]) else c.execute(
                case["call"].replace("$QUERY", env["query"])).fetchall()
            if "check" in case:
                out = clean.execute(case["check"]).fetchall()
            result = ("ok", sorted(map(repr, out)) if case.get("unordered") else [tuple(map(repr, r)) for r in out])
        except psycopg.Error as e:
            result = ("error", e.sqlstate)
        ran = clean.execute("SELECT what, who FROM htm.calls WHERE n > %s", (before,)).fetchall() \
            if logged and before is not None else []
        for s in case.get("teardown", []):
            try:
                clean.execute(s)
            except psycopg.Error:
                pass
    return result, warnings, ran


def test_targets_are_read_from_the_sources():
    targets, funcs = source_conversions()
    for name in ("text", "jsonb", "name", "float8", "regclass", "bigint", "text[]", "oid", "int4", "vector"):
        assert name in targets, (name, sorted(targets))
    assert "integer" in targets or "int" in targets
    for f in ("to_jsonb", "row_to_json", "format", "jsonb_build_object"):
        assert f in funcs, f


def test_every_public_function_has_a_case(env):
    missing = [f for f in public_functions(env["dsn"]) if f not in CASES]
    assert not missing, f"public functions without a case in test_hostile_types.py: {missing}"


def test_no_type_owners_code_runs_and_results_are_unchanged(env):
    dsn = env["dsn"]
    cases = [(name, i, case) for name, cs in CASES.items() for i, case in enumerate(cs)]
    roles = [None, ANN]
    baseline, failures = {}, []
    for name, i, case in cases:
        for role in roles:
            baseline[(name, i, role)], w, _ = run_case(dsn, role, case, env)
            assert not w, (name, role, w)
    with connect(dsn) as c:
        targets = cast_targets(c)
    made = make_hostile(dsn, targets)
    assert len(targets) >= 10 and made["operators"] == 2 * len(OP_TYPES) * 10 and made["checks"] == len(DOMAINS), made
    assert not made["refused casts"] and made["casts"] == 2 * len(HOSTILE_TYPES) * len(targets), made["refused casts"][:10]
    hostile = []
    for name, i, case in cases:
        for role in roles:
            got, warnings, ran = run_case(dsn, role, case, env)
            who = role or "superuser"
            if ran:
                hostile.append(f"{name} #{i} as {who}: {len(ran)} calls, as {sorted({r for _, r in ran})}: "
                                  f"{sorted({w for w, _ in ran})}")
            if warnings:
                failures.append(f"{name} #{i} as {who}: WARNINGs {warnings[:2]}")
            if got != baseline[(name, i, role)]:
                failures.append(f"{name} #{i} as {who}: {str(got)[:300]} != {str(baseline[(name, i, role)])[:300]}")
    with connect(dsn) as c:
        supers = c.execute("SELECT rolname FROM pg_roles WHERE rolsuper AND rolname IN (%s, %s)", (ANN, MAL)).fetchall()
        logged = c.execute("SELECT what, who FROM htm.calls").fetchall()
    assert not (hostile or logged or failures or supers), \
        f"hostile type code ran ({len(logged)} calls in all; roles made superusers: {supers}; what ran: " \
        f"{sorted({w for w, _ in logged})}):\n" + "\n".join(hostile) + \
        "\nresults or WARNINGs that differ from the baseline:\n" + "\n".join(failures[:60])


def test_issue_reproduction_a_cast_to_text_makes_its_owner_superuser(env):
    """The issue's reproduction: a superuser's tributary_dedup over a plain role's table whose
    enum has a cast to text that makes its owner a superuser."""
    dsn = env["dsn"]
    with connect(dsn, user=TENANT) as c:
        c.execute(f"""
            CREATE TYPE tenant.mood AS ENUM ('happy', 'sad', 'calm');
            CREATE FUNCTION tenant.mood_txt(m tenant.mood) RETURNS text LANGUAGE plpgsql SET search_path = pg_catalog AS $f$
            BEGIN
              IF (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) current_user) THEN
                EXECUTE 'ALTER ROLE {TENANT} SUPERUSER';
              END IF;
              RETURN pg_catalog.textin(pg_catalog.enum_out(m));
            END $f$;
            CREATE CAST (tenant.mood AS text) WITH FUNCTION tenant.mood_txt(tenant.mood);
            CREATE TABLE tenant.moody (id int PRIMARY KEY, name text, mood tenant.mood, label text, guess text);
            INSERT INTO tenant.moody VALUES (1, 'Maria Lopez', 'happy', 'a', NULL), (2, 'Maria Lopes', 'happy', 'a', NULL),
                (3, 'John Smith', 'sad', 'b', NULL), (4, 'Jon Smith', 'sad', NULL, NULL), (5, 'Anna Schmidt', 'calm', 'b', NULL);
        """)
    with connect(dsn) as c:
        c.execute("SELECT count(*) FROM public.tributary_dedup(tbl => 'tenant.moody', columns => '{name,mood}')")
        assert c.execute("SELECT rolsuper FROM pg_roles WHERE rolname = %s", (TENANT,)).fetchone() == (False,), \
            "a superuser's tributary_dedup ran the table's type owner's cast"
