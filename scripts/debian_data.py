#!/usr/bin/env python3
"""Load the Debian package index (about 64k binary packages with long English descriptions) into
PostgreSQL: real, relational text for demos, tests and benchmarks, fetched offline-friendly
through apt (see ../shared/DATA.md).

Tables (created by this script):
    debian_packages(package text PRIMARY KEY, source text, section text, maintainer text,
                    version text, description text [, embedding vector(N)])
    debian_depends(package text, dependency text)

The index is downloaded once into a cache directory with `apt-get update -o Dir::State::Lists=...`
(only the Debian archive the machine already uses) and reused afterwards, so running this twice
is safe. Connection: libpq environment variables (PGHOST, PGPORT, ...) or --dsn.

Usage: debian_data.py [--dsn DSN] [--table NAME] [--limit ROWS] [--vector-dim N] [--drop]
"""
from __future__ import annotations

import argparse
import glob
import hashlib
import os
import re
import subprocess
import sys

CACHE = "/var/cache/tributary-data/aptl"


def fetch_lists(cache: str) -> tuple[list[str], list[str]]:
    """Returns the Packages and Translation-en files, running apt-get update into `cache` once."""
    def found():
        return (sorted(glob.glob(os.path.join(cache, "*_main_binary-*_Packages*"))),
                sorted(glob.glob(os.path.join(cache, "*_i18n_Translation-en*"))))

    pkgs, trans = found()
    if not pkgs or not trans:
        os.makedirs(os.path.join(cache, "partial"), exist_ok=True)
        cmd = ["apt-get", "update", "-qq", "-o", "Acquire::Languages=en", "-o", f"Dir::State::Lists={cache}"]
        if os.geteuid() != 0:
            cmd = ["sudo"] + cmd
        subprocess.run(cmd, check=True)
        pkgs, trans = found()
    if not pkgs or not trans:
        sys.exit(f"debian_data: no Packages / Translation-en lists in {cache} after apt-get update")
    return pkgs, trans


def read_text(path: str) -> str:
    if path.endswith(".lz4"):
        return subprocess.run(["lz4", "-dc", path], check=True, capture_output=True).stdout.decode("utf-8", "replace")
    if path.endswith(".xz"):
        import lzma
        return lzma.open(path, "rt", encoding="utf-8", errors="replace").read()
    if path.endswith(".gz"):
        import gzip
        return gzip.open(path, "rt", encoding="utf-8", errors="replace").read()
    return open(path, encoding="utf-8", errors="replace").read()


def stanzas(text: str):
    """RFC 822 stanzas as dicts; continuation lines (leading space) are kept with their field."""
    for block in text.split("\n\n"):
        fields, key = {}, None
        for line in block.split("\n"):
            if not line:
                continue
            if line[0] in " \t" and key:
                fields[key] += "\n" + line
            elif ":" in line:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        if fields:
            yield fields


def long_description(raw: str) -> str:
    """Debian's description format to plain text: ' .' lines are blank lines."""
    first, _, rest = raw.partition("\n")
    lines = [first.strip()]
    for line in rest.split("\n"):
        line = line[1:] if line.startswith(" ") else line
        lines.append("" if line.strip() == "." else line.rstrip())
    return "\n".join(lines).strip()


def load_index(cache: str):
    pkgs, trans = fetch_lists(cache)
    descriptions = {}
    for path in trans:
        for st in stanzas(read_text(path)):
            if "Package" in st and "Description-en" in st:
                descriptions[(st["Package"], st.get("Description-md5", ""))] = long_description(st["Description-en"])
    packages, depends = {}, set()
    for path in pkgs:
        for st in stanzas(read_text(path)):
            name = st.get("Package")
            if not name or name in packages:
                continue
            desc = descriptions.get((name, st.get("Description-md5", "")))
            if desc is None:
                desc = long_description(st["Description"]) if "Description" in st else None
            if not desc:
                continue
            source = re.sub(r"\s*\(.*\)", "", st.get("Source", name)).strip() or name
            packages[name] = (name, source, st.get("Section"), st.get("Maintainer"), st.get("Version"), desc)
            for field in ("Depends", "Pre-Depends"):
                for dep in st.get(field, "").replace("\n", " ").split(","):
                    for alt in dep.split("|"):
                        d = re.sub(r"[\s(\[<].*", "", alt.strip()).split(":")[0]
                        if d:
                            depends.add((name, d))
    return packages, depends


def sample(names, limit):
    """A deterministic pseudo-random sample (by hash of the name), so a limit keeps a mix of sections."""
    ranked = sorted(names, key=lambda n: hashlib.sha1(n.encode()).hexdigest())
    return set(ranked[:limit])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dsn", default="", help="libpq connection string (default: PG* environment)")
    ap.add_argument("--table", default="debian_packages")
    ap.add_argument("--limit", type=int, help="load only this many packages (deterministic sample)")
    ap.add_argument("--vector-dim", type=int, help="add a column embedding vector(N)")
    ap.add_argument("--drop", action="store_true", help="drop and recreate the tables")
    ap.add_argument("--cache", default=CACHE, help="apt lists cache directory")
    a = ap.parse_args(argv)

    import psycopg
    from psycopg import sql

    packages, depends = load_index(a.cache)
    keep = sample(packages, a.limit) if a.limit else set(packages)
    table = sql.Identifier(a.table)
    dep_table = sql.Identifier(a.table.replace("packages", "depends") if "packages" in a.table else a.table + "_depends")
    with psycopg.connect(a.dsn, autocommit=False) as conn:
        if a.drop:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}, {}").format(table, dep_table))
        if a.vector_dim:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.execute(sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (package text PRIMARY KEY, source text NOT NULL, section text, "
            "maintainer text, version text, description text NOT NULL{})").format(
                table, sql.SQL(f", embedding vector({int(a.vector_dim)})" if a.vector_dim else "")))
        conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} (package text NOT NULL, dependency text NOT NULL)").format(dep_table))
        conn.execute(sql.SQL("TRUNCATE {}, {}").format(table, dep_table))
        with conn.cursor() as cur:
            with cur.copy(sql.SQL("COPY {} (package, source, section, maintainer, version, description) FROM STDIN").format(table)) as cp:
                for name in sorted(keep):
                    cp.write_row(packages[name])
            with cur.copy(sql.SQL("COPY {} (package, dependency) FROM STDIN").format(dep_table)) as cp:
                for row in sorted(depends):
                    if row[0] in keep:
                        cp.write_row(row)
        n = conn.execute(sql.SQL("SELECT count(*), count(DISTINCT source), count(DISTINCT section) FROM {}").format(table)).fetchone()
        d = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(dep_table)).fetchone()[0]
        conn.commit()
    print(f"debian_data: {n[0]} packages ({n[1]} source packages, {n[2]} sections), {d} dependency edges -> {a.table}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
