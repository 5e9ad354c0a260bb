#!/usr/bin/env python3
"""Export the films of PyPI bokeh-sampledata (movies.db) as a tributary-learn Dataset in JSON, for
`cargo run -p tributary-learn --release --example films -- films.json`.

Normalised as scripts/films.py does: genre = the FIRST genre of the film's own list; only films
with a genre and a year (17,029); people = directors, writers, cast. Rows: as_of = year; role
"train" for year < 2010, "test" for >= 2010; text = title, rated, language, country, production
and the people's names; paths: director, writer, cast (group id = person id); numbers: runtime,
metacritic, year.

Usage: export_films.py OUT.json [--db path/to/movies.db]
(default db: bokeh_sampledata's _data/movies.db from the running Python)
"""
import json
import os
import sqlite3
import sys


def split_list(s):
    out = []
    for x in (s or "").split(","):
        x = x.strip()
        if x and x != "N/A" and x not in out:
            out.append(x)
    return out


def main():
    out = sys.argv[1]
    if "--db" in sys.argv:
        db = sys.argv[sys.argv.index("--db") + 1]
    else:
        import bokeh_sampledata
        db = os.path.join(os.path.dirname(bokeh_sampledata.__file__), "_data", "movies.db")
    src = sqlite3.connect(db)
    rows = src.execute(
        'SELECT o."ID", o."Title", o."Year", o."Rating", o."Runtime", o."Language", o."Country", '
        't."Production", o."Metacritic", o."Genre", o."Director", o."Writer", o."Cast" '
        'FROM omdb o LEFT JOIN tomatoes t ON t."ID" = o."ID" ORDER BY o."ID"').fetchall()
    people = {}
    ds = {"as_of": [], "label": [], "role": [], "text": [], "paths": {"director": [], "writer": [], "cast": []},
          "numbers": {"runtime": [], "metacritic": [], "year": []}}
    for (fid, title, year, rated, runtime, language, country, production, metacritic, genre,
         director, writer, cast) in rows:
        genres = split_list(genre)
        if not genres or year is None:
            continue
        i = len(ds["label"])
        ds["label"].append(genres[0])
        ds["as_of"].append(float(year))
        ds["role"].append("train" if year < 2010 else "test")
        names = []
        for value, role in zip((director, writer, cast), ("director", "writer", "cast")):
            for name in split_list(value):
                pid = people.setdefault(name, len(people) + 1)
                if [i, pid] not in ds["paths"][role][-20:]:
                    ds["paths"][role].append([i, pid])
                names.append(name)
        ds["text"].append(" ".join(str(x) for x in (title, rated, language, country, production) if x)
                          + " " + " ".join(names))
        num = lambda v: float(v) if isinstance(v, (int, float)) else None
        ds["numbers"]["runtime"].append(num(runtime))
        ds["numbers"]["metacritic"].append(num(metacritic))
        ds["numbers"]["year"].append(float(year))
    with open(out, "w") as f:
        json.dump(ds, f)
    print(f"{len(ds['label'])} films, {len(people)} people -> {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
