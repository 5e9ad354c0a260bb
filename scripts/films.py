#!/usr/bin/env python3
"""Load the films database of PyPI bokeh-sampledata (bokeh_sampledata/_data/movies.db, SQLite, about
17,500 films from 1940-2014 with their genres, directors, writers and cast; CC0-1.0 per the package's
licenses/datasets.json) into PostgreSQL, normalised into tables with primary and foreign keys:

    film(film_id int PK, title text NOT NULL, year int NOT NULL, released date, rated text,
         runtime_min real, language text, country text, production text, awards text,
         metacritic int, genre text [, <vector columns from --vector-columns>])
    person(person_id int PK, name text NOT NULL UNIQUE)
    film_person(film_id int -> film, person_id int -> person, role text ('director', 'writer',
                'cast'), PRIMARY KEY (film_id, person_id, role))   -- plus an index on person_id

The source keeps one row per film (omdb) with genres, directors, writers and cast as comma-separated
lists; production (the studio) comes from its second table (tomatoes). Its other columns are left
out: rating counts and scores, image/website/DVD (empty), imdb ids.

film.genre, the single-label target: the FIRST genre in the film's own list (the source's order,
which is not alphabetical: "Drama, Crime"), i.e. the film's main genre; NULL for the 443 films
with no genre. The full genre lists are NOT loaded: a film_genre table referencing film would put
the other genres into the text of a film row embedded with its child rows (a leak of the label).

Tables are dropped (CASCADE) and recreated in the current schema (search_path; default public).
--limit N keeps a seeded random sample of N films (the same films for the same seed), with the
people linked to them. Loaded with COPY in one transaction and ANALYZEd.

Usage: films.py [--dsn DSN] [--limit N] [--seed 0] [--vector-columns e_title,e_row] [--dim 384]
Connection: libpq environment variables (PGHOST, PGPORT, ...) or --dsn.
"""
from __future__ import annotations

import argparse
import os
import random
import sqlite3
import sys

import psycopg


def movies_db() -> str:
    import bokeh_sampledata
    return os.path.join(os.path.dirname(bokeh_sampledata.__file__), "_data", "movies.db")


def split_list(s: str | None) -> list[str]:
    """'A, B, C' -> ['A', 'B', 'C'] without blanks, 'N/A' or repeats (order kept)."""
    out = []
    for x in (s or "").split(","):
        x = x.strip()
        if x and x != "N/A" and x not in out:
            out.append(x)
    return out


def read(limit: int | None = None, seed: int = 0):
    """(films, people, links): films as dicts (keys = film columns), people {name: id}, links
    [(film_id, person_id, role)]."""
    src = sqlite3.connect(movies_db())
    rows = src.execute(
        'SELECT o."ID", o."Title", o."Year", o."Released", o."Rating", o."Runtime", o."Language", '
        'o."Country", t."Production", o."Awards", o."Metacritic", o."Genre", o."Director", o."Writer", '
        'o."Cast" FROM omdb o LEFT JOIN tomatoes t ON t."ID" = o."ID" ORDER BY o."ID"').fetchall()
    if limit and limit < len(rows):
        keep = set(random.Random(seed).sample([r[0] for r in rows], limit))
        rows = [r for r in rows if r[0] in keep]
    films, people, links = [], {}, []
    for (fid, title, year, released, rated, runtime, language, country, production, awards, metacritic,
         genre, director, writer, cast) in rows:
        genres = split_list(genre)
        films.append({"film_id": fid, "title": title, "year": year, "released": released or None,
                      "rated": rated or None, "runtime_min": runtime, "language": language or None,
                      "country": country or None, "production": production or None,
                      "awards": awards or None, "metacritic": metacritic,
                      "genre": genres[0] if genres else None})
        seen = set()
        for value, role in zip((director, writer, cast), ("director", "writer", "cast")):
            for name in split_list(value):
                pid = people.setdefault(name, len(people) + 1)
                if (pid, role) not in seen:
                    seen.add((pid, role))
                    links.append((fid, pid, role))
    return films, people, links


FILM_COLUMNS = ["film_id", "title", "year", "released", "rated", "runtime_min", "language", "country",
                "production", "awards", "metacritic", "genre"]


def load(dsn: str, limit: int | None = None, seed: int = 0, vector_columns=(), dim: int = 384) -> dict:
    films, people, links = read(limit, seed)
    vecs = "".join(f", {c} vector({dim})" for c in vector_columns)
    with psycopg.connect(dsn) as conn:
        conn.execute("DROP TABLE IF EXISTS film_person, person, film CASCADE")
        if vector_columns:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.execute(f"""CREATE TABLE film (
            film_id int PRIMARY KEY, title text NOT NULL, year int NOT NULL, released date, rated text,
            runtime_min real, language text, country text, production text, awards text,
            metacritic int, genre text{vecs})""")
        conn.execute("CREATE TABLE person (person_id int PRIMARY KEY, name text NOT NULL UNIQUE)")
        conn.execute("""CREATE TABLE film_person (
            film_id int NOT NULL REFERENCES film, person_id int NOT NULL REFERENCES person,
            role text NOT NULL CHECK (role IN ('director', 'writer', 'cast')),
            PRIMARY KEY (film_id, person_id, role))""")
        with conn.cursor() as cur:
            with cur.copy(f"COPY film ({', '.join(FILM_COLUMNS)}) FROM STDIN") as cp:
                for f in films:
                    cp.write_row([f[c] for c in FILM_COLUMNS])
            with cur.copy("COPY person (person_id, name) FROM STDIN") as cp:
                for name, pid in people.items():
                    cp.write_row((pid, name))
            with cur.copy("COPY film_person (film_id, person_id, role) FROM STDIN") as cp:
                for row in links:
                    cp.write_row(row)
        conn.execute("CREATE INDEX ON film_person (person_id)")
        conn.execute("CREATE INDEX ON film (year)")
        conn.commit()
        conn.autocommit = True
        for t in ("film", "person", "film_person"):
            conn.execute(f"ANALYZE {t}")
    return {"film": len(films), "person": len(people), "film_person": len(links)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dsn", default="")
    ap.add_argument("--limit", type=int)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vector-columns", default="")
    ap.add_argument("--dim", type=int, default=384)
    a = ap.parse_args(argv)
    counts = load(a.dsn, a.limit, a.seed, [c for c in a.vector_columns.split(",") if c], a.dim)
    print(" ".join(f"{t}={n}" for t, n in counts.items()), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
