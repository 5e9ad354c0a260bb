#!/usr/bin/env python3
"""Models that learn (tributary_train) against what a data scientist would build with the same
information, FORWARD IN TIME, one dataset per run, baselines in the same run, under two protocols.
Prints a markdown table (protocol, method, accuracy, macro-F1, accuracy on the cold test rows, MAE,
rows, seconds) and writes benches/results/learn_DATASET.json. Reports numbers; asserts nothing.

Datasets (each loaded into PostgreSQL with its primary and foreign keys; label, as_of, split; the
cold share: test rows whose ENTITY has no strictly earlier row, printed with every run):
    films    scripts/films.py: film, person, film_person (a link table). Label film.genre (the
             first genre of the film's list, 21 classes), as_of film.year; every film with a genre
             and a year (17,029): train year < 2010, test year >= 2010 (23%). Cold: none of the
             film's people in an earlier film (15% of the test rows).
    lahman   scripts/lahman.py: franchise, team (a team-season), person, player_season. Label
             player_season.position (the player's primary position that season, 10 classes; the
             per-position game counts are not loaded), as_of year; seasons 1960-2024 (74,303
             rows): train year < 2015, test year >= 2015 (21%). Cold: the player's first season
             (17%).
    chinook  scripts/chinook.py (schema chinook), then for this task: invoice_line gets genre (its
             track's genre name, the label) and invoice_date (its invoice's date, the as_of);
             track.genre_id and the genre table are DROPPED so the label is only in invoice_line.
             2,240 lines of 412 invoices, 2007-01-01 .. 2011-12-22: train invoice_date <
             2011-01-01, test >= 2011-01-01 (the latest ~20%). "Which genre is this purchase?"
             from the track, its album, artist, media type and playlists, and the customer's and
             the album's earlier purchases. Cold: the track's first sale (71%).
    chinook-basket  scripts/chinook.py, then: invoice gets basket (the number of its lines as
             text: 1, 2, 4, 6, 9 or 14; the label), and invoice_line and invoice.total are
             DROPPED (they define it). 412 invoices, as_of invoice_date, the same split. "How many
             tracks will this invoice hold?" from the customer's and the support rep's customers'
             earlier invoices, the invoice's billing address and the customer's columns: a task
             the words cannot answer (on the genre task TF-IDF + LR alone reaches 0.98). Cold: the
             customer's first invoice.
    cold-pynews  benches/pynews.py: CPython's changelog from Debian bookworm's python3.11-doc
             (3.11.2-6+deb12u9; `apt-get download`, cached in ~/.cache/tributary/pynews): 95
             releases 3.5.0a1 (2015-02-08) .. 3.11.2 (2023-02-07) of which 89 have entries;
             tables release_line (7), release (89), issue (7,462), person (720), module (179),
             news_entry (10,017), entry_person (2,476) and entry_module (3,651), the last two link
             tables (many-to-many). Label news_entry.section (Library, Core and Builtins, Tests,
             IDLE, Build, Documentation, Windows, C API, Security, Tools/Demos, macOS: 11
             classes), as_of news_entry.released (the release's date): train released <
             2021-10-05, test >= 2021-10-05 (the 3.11 line: 1,933 rows, 19%). "Which part of
             CPython is this change in?" from its text, its modules, its contributors, its issue's
             and its release line's earlier entries. Cold: the issue's first entry (92%: most
             test rows are new issues).

Protocols (every run has both; the protocol column of the table and the JSON):
    period-ahead  the test period's labels are unknown: every test row is predicted at once from
                 the training period's labels (history cutoff = split_at for every test row).
    online       each test row is predicted at its own as_of with every strictly earlier label,
                 test rows' too (history cutoff = the row's as_of); the model is the one trained on
                 the training period. Methods without label history (majority, TF-IDF + LR) make
                 the same predictions under both: protocol "both".

Methods:
    tributary    tributary_embed_column(tbl, '{*}', 'e_row', exclude => '{label}', ...) where the
                 dataset has text (films: children => 5, the people through film_person;
                 chinook: parents => 3, track/album/artist/media type/invoice/customer;
                 cold-pynews: parents => 2, children => 5; lahman: no text, embedding NULL), then
                 period-ahead: tributary_train('p', tbl, label, e_row, as_of => ..., split_at =>
                 ...): its rows (predictor, knn, baseline on the test rows) as it returns them;
                 then the held-out check the maintainers run: a copy of the database (CREATE
                 DATABASE ... TEMPLATE, so every foreign key and link table is there), the
                 test-period labels set to NULL, tributary_train('p2', tbl, label, e_row, as_of =>
                 ...) without split_at, tributary_predict_column('p2', 'predicted'), scored
                 against the true labels.
                 online: on the database WITH the test labels, tributary_predict_column_online('p',
                 'predicted_online') (each labelled row predicted as of its own
                 as_of with every strictly earlier label), scored on the test rows; where
                 tributary_predict_column_online is not installed (pg_proc):
                 "online: tributary_predict_column_online not installed". Where tributary_train
                 is not in pg_proc: "tributary_train not installed".
    majority     the most frequent training label for every test row.
    TF-IDF + LR  TfidfVectorizer(ngram_range=(1, 2), min_df=2) + LogisticRegression(max_iter=1000),
                 once with C = 1 and once with C in {1, 5, 20} chosen on the time-ordered validation
                 below (the one the stack uses), on the text a data scientist would use: the row's
                 own text columns and the names of the rows it links to (films: title, the other
                 columns, the people's names; lahman: player name, bats/throws, birth country, team
                 code and name, franchise, league, division, park; chinook: track name, composer,
                 album title, artist, media type, playlist names, billing city/country;
                 cold-pynews: the entry's text, the release's name, the modules' and people's names).
    GBDT stack   HistGradientBoostingClassifier over (1) the TF-IDF + LR model's class
                 probabilities, out of fold (StratifiedKFold(5, shuffle, seed 0) over the training
                 rows) for training rows and from the fit on all training rows for test rows;
                 (2) as-of history built by hand in pandas (history()), for every foreign-key path:
                 the counts of each label among the related rows whose label is visible (as_of
                 strictly before the row's label cutoff, see below), their total and the label
                 shares; the age of the newest visible label (the row's as_of minus the newest
                 visible related row's as_of); the count of ALL related rows strictly earlier than
                 the row (labelled or not: it carries over to rows with no visible label); the
                 number of groups the row links to. Paths: films: the film's directors', writers'
                 and cast's earlier films, one path per role, and the directors' earlier films in
                 the film's first language; lahman: the player's earlier seasons, the franchise's
                 earlier player-seasons, the player's earlier seasons with this franchise; chinook:
                 earlier purchases of the same track, album, artist, media type, playlist and by the
                 same customer, and the customer's earlier purchases of this media type;
                 chinook-basket: the customer's and the support rep's customers' earlier invoices;
                 cold-pynews: the issue's earlier entries, the modules' (through entry_module), the
                 contributors' (through entry_person), the release line's (the far parent), and
                 the modules' earlier entries within this release line (a path restricted to
                 related rows that share the row's other parent: restricted());
                 (3) the numeric columns (and a few low-cardinality categories);
                 (4) where as_of is a timestamp, its month and weekday (and hour when not all 0).
                 The training rows' history is built in one of two ways, and the time-ordered
                 validation picks one: FRESH (each training row sees every earlier training label)
                 or BLOCKED (the training rows split by as_of into 6 blocks of about equal size;
                 block b sees only the labels of blocks 0..b-1, block 0 none: as a test period sees
                 only the labels before it). The time-ordered validation: the latest 20% of the
                 training rows by as_of (cut at the 80% quantile) are scored as a test period
                 (their label cutoff = the cut), the model is fitted on the earlier 80% (whose own
                 history is fresh or blocked within them); for each variant the number of boosting
                 iterations (by 20, up to 400; learning_rate 0.05, early_stopping off) with the
                 lowest log loss; the variant with the lower log loss is CHOSEN, refitted on all
                 training rows with its iterations and is the table's stack row (the other variant
                 is reported too, marked "not chosen"). Online: the chosen model on test features
                 with every strictly earlier label. Two ablations of the chosen stack (without the
                 text probabilities, without the history) with the same iterations.

Nothing leaks: a history feature counts a related row's label only when that row's as_of is
strictly before the row's cutoff, and the cutoff is never later than the row's own as_of
(period-ahead test rows: split_at, so no test label enters any period-ahead feature; online: the
row's own as_of); the row itself and same-as_of rows never count; the label column and anything
that defines it are in no text and no numeric feature; the TF-IDF model behind the test rows'
probabilities is fitted on training rows only. Macro-F1: scikit-learn's (unweighted mean over the
classes in the test labels or the predictions). Accuracy on cold rows: over the test rows whose
entity has no strictly earlier row (the cold share printed with the split).

Usage: learn.py DATASET [--dsn DSN] [--json PATH] [--no-tributary] [--skip-load] [--k 10]
Connection: --dsn (a database the script may fill; the held-out check creates DB_heldout next
to it).
"""
from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.append(str(ROOT / "benches"))   # after scripts/: benches/films.py is not scripts/films.py


# --------------------------------------------------------------------------------------- datasets

@dataclass
class Data:
    """One task: rows (key, as_of, label, text, numeric and categorical columns), history paths."""
    name: str
    table: str                  # the label table as tributary sees it (schema-qualified if needed)
    key: str
    label: str
    as_of: str
    split_at: str               # as text, as tributary_train gets it
    rows: pd.DataFrame          # columns: key, "as_of", "label", "text", numeric..., categorical...
    numeric: list[str]
    categorical: list[str]
    # path name -> (links of the row to groups, links of the related rows to groups or None = same)
    paths: dict[str, tuple[pd.DataFrame, pd.DataFrame | None]] = field(default_factory=dict)
    embed: str | None = None    # tributary_embed_column arguments after the target, or None
    describe: str = ""
    entity: str | None = None   # the path whose group is the row's entity (cold: none earlier); None = all


def restricted(rows: pd.DataFrame, key: str, path: tuple[pd.DataFrame, pd.DataFrame | None],
               column: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A path restricted to the related rows that share the row's value of `column` (another
    parent or a category): e.g. a module's earlier entries within this row's release line. The
    groups become (group, value) pairs."""
    side, other = path
    val = rows[[key, column]]

    def pair(x):
        x = x.merge(val, on=key)
        return pd.DataFrame({key: x[key].to_numpy(), "group": x["group"].astype(str) + "|" + x[column].astype(str)})
    return pair(side), pair(side if other is None else other)


def films_data() -> Data:
    import films as loader
    films, people, links = loader.read()
    name_of = {pid: n for n, pid in people.items()}
    names: dict[int, list[str]] = {}
    for fid, pid, _role in links:
        names.setdefault(fid, []).append(name_of[pid])
    df = pd.DataFrame(films)
    df = df[df.genre.notna() & df.year.notna()].copy()
    other = ["released", "rated", "runtime_min", "language", "country", "production", "awards", "metacritic"]
    df["text"] = [" ; ".join([f["title"]] + [f"{c}: {f[c]}" for c in other if f[c] is not None]  # as films.py
                             + names.get(f["film_id"], [])) for f in films if f["genre"] and f["year"]]
    df["month"] = pd.to_datetime(df.released, errors="coerce").dt.month
    df["n_people"] = df.film_id.map(lambda i: len(names.get(i, [])))
    df["first_language"] = df.language.fillna("").str.split(",").str[0]
    df["first_country"] = df.country.fillna("").str.split(",").str[0]
    rows = df.rename(columns={"year": "as_of", "genre": "label"})
    rows["year"] = rows.as_of
    lk = pd.DataFrame(links, columns=["film_id", "group", "role"])
    lk = lk[lk.film_id.isin(rows.film_id)]
    every = lk[["film_id", "group"]].drop_duplicates()
    paths = {f"film_person({r}) -> person -> film_person -> film": (lk[lk.role == r][["film_id", "group"]], every)
             for r in ("director", "writer", "cast")}
    paths["the directors' earlier films in the film's first language"] = restricted(
        rows, "film_id", paths["film_person(director) -> person -> film_person -> film"], "first_language")
    return Data("films", "film", "film_id", "genre", "year", "2010", rows,
                ["year", "runtime_min", "metacritic", "month", "n_people"],
                ["rated", "first_language", "first_country"], paths,
                embed="'{*}', 'e_row', exclude => '{genre}', children => 5",
                describe="film, person, film_person (link table); label film.genre; as_of film.year",
                entity=None)


def lahman_data(from_year: int = 1960, embed: str | None = None, name: str = "lahman") -> Data:
    import lahman as loader
    t = loader.read(from_year)
    ps = t["player_season"].merge(t["person"], on="player_id", how="left") \
        .merge(t["team"].drop(columns=["year"]).rename(columns={"name": "team_name"}), on="team_id", how="left") \
        .merge(t["franchise"].rename(columns={"name": "franchise_name"}), on="franch_id", how="left")
    txt = ["name_first", "name_last", "bats", "throws", "birth_country", "team_code", "team_name",
           "franchise_name", "league", "division", "park"]
    ps["text"] = ps[txt].astype("string").fillna("").agg(" ; ".join, axis=1)
    ps["age"] = ps.year - ps.birth_year.astype(float)
    rows = ps.rename(columns={"year": "as_of", "position": "label"})
    rows["year"] = rows.as_of
    key = "player_season_id"
    paths = {
        "player_season -> person (the player's earlier seasons)":
            (rows[[key, "player_id"]].rename(columns={"player_id": "group"}), None),
        "player_season -> team -> franchise (the franchise's earlier player-seasons)":
            (rows[[key, "franch_id"]].rename(columns={"franch_id": "group"}), None),
    }
    paths["the player's earlier seasons with this franchise"] = restricted(
        rows, key, paths["player_season -> person (the player's earlier seasons)"], "franch_id")
    numeric = ["year", "age", "height", "weight", "g_all", "gs", "ab", "r", "h", "doubles", "triples", "hr",
               "rbi", "sb", "cs", "bb", "so", "w", "l"]
    for c in numeric:
        rows[c] = rows[c].astype(float)
    return Data(name, "player_season", key, "position", "year", "2015", rows, numeric,
                ["bats", "throws", "league", "birth_country"], paths, embed=embed,
                describe=f"franchise, team, person, player_season (seasons {from_year}-2024); "
                         "label player_season.position; as_of year",
                entity="player_season -> person (the player's earlier seasons)")


def lahman_100k_data() -> Data:
    """The training-time check at scale: Lahman from 1900 (105,054 player-seasons, 89,533 before
    2015), with an embedding of each row and its parents (the person, the team), so that every
    feature tributary builds is built: k-NN votes over 100k rows, the text model, the history."""
    return lahman_data(1900, "'{*}', 'e_row', exclude => '{position}', parents => 1", "lahman-100k")


CHINOOK_PREP = """
ALTER TABLE chinook.invoice_line ADD COLUMN genre text, ADD COLUMN invoice_date timestamp;
UPDATE chinook.invoice_line l SET genre = g.name, invoice_date = i.invoice_date
  FROM chinook.track t, chinook.genre g, chinook.invoice i
 WHERE t.track_id = l.track_id AND g.genre_id = t.genre_id AND i.invoice_id = l.invoice_id;
ALTER TABLE chinook.invoice_line ALTER COLUMN invoice_date SET NOT NULL;
ALTER TABLE chinook.track DROP COLUMN genre_id;
DROP TABLE chinook.genre;
CREATE INDEX ON chinook.invoice_line (invoice_date);
ANALYZE chinook.invoice_line, chinook.track;
"""


def chinook_data() -> Data:
    import chinook as c
    m = c.read_fixture(c.fetch_sdist(c.cache_dir(c.CACHE, False)))
    t = {model.split(".")[1]: pd.DataFrame(recs) for model, recs in m.items()}
    genre = t["genre"].set_index("pk")["name"]
    track = t["track"].rename(columns={"pk": "track", "name": "track_name"})
    album = t["album"].rename(columns={"pk": "album", "title": "album_title"})
    artist = t["artist"].rename(columns={"pk": "artist", "name": "artist_name"})
    media = t["mediatype"].rename(columns={"pk": "mediatype", "name": "media_name"})
    inv = t["invoice"].rename(columns={"pk": "invoice", "total": "invoice_total"})
    pl = t["playlisttrack"].merge(t["playlist"].rename(columns={"pk": "playlist", "name": "playlist_name"}),
                                  on="playlist")
    pl_names = pl.groupby("track")["playlist_name"].agg(lambda s: " ; ".join(sorted(s)))
    df = t["invoiceline"].rename(columns={"pk": "invoice_line_id"}) \
        .merge(track.drop(columns=["unit_price"]), on="track").merge(album, on="album", how="left") \
        .merge(artist, on="artist", how="left").merge(media, on="mediatype", how="left").merge(inv, on="invoice")
    df["label"] = df.genre.map(genre)
    df["as_of"] = pd.to_datetime(df.invoicedate.str.rstrip("Z"))
    df["playlists"] = df.track.map(pl_names).fillna("")
    txt = ["track_name", "composer", "album_title", "artist_name", "media_name", "playlists", "billingcity",
           "billingcountry"]
    df["text"] = df[txt].astype("string").fillna("").agg(" ; ".join, axis=1)
    df["n_playlists"] = df.track.map(pl.groupby("track").size()).fillna(0)
    for col in ("unit_price", "quantity", "milliseconds", "bytes", "invoice_total", "n_playlists"):
        df[col] = df[col].astype(float)
    key = "invoice_line_id"
    line_pl = df[[key, "track"]].merge(pl[["track", "playlist"]], on="track")[[key, "playlist"]]
    paths = {}
    for name, col in [("invoice_line -> track (earlier sales of the track)", "track"),
                      ("invoice_line -> track -> album", "album"),
                      ("invoice_line -> track -> album -> artist", "artist"),
                      ("invoice_line -> track -> media_type", "mediatype"),
                      ("invoice_line -> invoice -> customer (the customer's earlier purchases)", "customer")]:
        paths[name] = (df[[key, col]].rename(columns={col: "group"}), None)
    paths["invoice_line -> track -> playlist_track -> playlist"] = (line_pl.rename(columns={"playlist": "group"}), None)
    paths["the customer's earlier purchases of this media type"] = restricted(
        df, key, paths["invoice_line -> invoice -> customer (the customer's earlier purchases)"], "mediatype")
    return Data("chinook", "chinook.invoice_line", key, "genre", "invoice_date", "2011-01-01", df,
                ["unit_price", "quantity", "milliseconds", "bytes", "invoice_total", "n_playlists"],
                ["media_name", "billingcountry"], paths,
                embed="'{*}', 'e_row', exclude => '{genre}', parents => 3",
                describe="chinook schema, track.genre_id and genre dropped; label invoice_line.genre; "
                         "as_of invoice_line.invoice_date",
                entity="invoice_line -> track (earlier sales of the track)")


CHINOOK_BASKET_PREP = """
ALTER TABLE chinook.invoice ADD COLUMN basket text;
UPDATE chinook.invoice i SET basket = (SELECT count(*) FROM chinook.invoice_line l WHERE l.invoice_id = i.invoice_id)::text;
ALTER TABLE chinook.invoice ALTER COLUMN basket SET NOT NULL, DROP COLUMN total;
DROP TABLE chinook.invoice_line;
CREATE INDEX ON chinook.invoice (invoice_date);
ANALYZE chinook.invoice;
"""


def chinook_basket_data() -> Data:
    import chinook as c
    m = c.read_fixture(c.fetch_sdist(c.cache_dir(c.CACHE, False)))
    t = {model.split(".")[1]: pd.DataFrame(recs) for model, recs in m.items()}
    size = t["invoiceline"].groupby("invoice").size()
    emp = t["employee"].rename(columns={"pk": "support_rep", "firstname": "rep_first", "lastname": "rep_last"})
    cust = t["customer"].rename(columns={"pk": "customer", "city": "c_city", "country": "c_country",
                                         "state": "c_state"})
    df = t["invoice"].rename(columns={"pk": "invoice_id"}).merge(cust, on="customer", how="left") \
        .merge(emp[["support_rep", "rep_first", "rep_last"]], on="support_rep", how="left")
    df["label"] = df.invoice_id.map(size).astype(int).astype(str)
    df["as_of"] = pd.to_datetime(df.invoicedate.str.rstrip("Z"))
    txt = ["billingaddress", "billingcity", "billingstate", "billingcountry", "billingpostalcode", "firstname",
           "lastname", "company", "c_city", "c_country", "rep_first", "rep_last"]
    df["text"] = df[txt].astype("string").fillna("").agg(" ; ".join, axis=1)
    df["days"] = (df.as_of - pd.Timestamp("2007-01-01")).dt.days.astype(float)
    key = "invoice_id"
    paths = {"invoice -> customer (the customer's earlier invoices)":
             (df[[key, "customer"]].rename(columns={"customer": "group"}), None),
             "invoice -> customer -> employee (the support rep's customers' earlier invoices)":
             (df[[key, "support_rep"]].rename(columns={"support_rep": "group"}), None)}
    return Data("chinook-basket", "chinook.invoice", key, "basket", "invoice_date", "2011-01-01", df,
                ["days"], ["billingcountry"], paths,
                embed="'{*}', 'e_row', exclude => '{basket}', parents => 2",
                describe="chinook schema, invoice_line dropped, invoice.total dropped; label invoice.basket "
                         "(its number of lines); as_of invoice.invoice_date",
                entity="invoice -> customer (the customer's earlier invoices)")


def pynews_data() -> Data:
    """cold-pynews: CPython's changelog (benches/pynews.py): which section does an entry belong to?"""
    import pynews
    t = pynews.read()
    e = pd.DataFrame(t["news_entry"])
    rel = pd.DataFrame(t["release"]).drop(columns=["released"])
    df = e.merge(rel, on="release_id", how="left")
    df["as_of"] = pd.to_datetime(df.released)
    df["label"] = df.section
    key = "entry_id"
    em = pd.DataFrame(t["entry_module"], columns=[key, "group"])
    ep = pd.DataFrame(t["entry_person"], columns=[key, "group"])
    name_of = {i: n for n, i in t["person"].items()}
    mods = em.groupby(key)["group"].agg(" ".join)
    ppl = ep.assign(n=ep.group.map(name_of)).groupby(key)["n"].agg(" ; ".join)
    df["text"] = (df.body + " ; " + df.name + " ; modules: " + df[key].map(mods).fillna("") + " ; people: "
                  + df[key].map(ppl).fillna(""))
    df["tracker"] = df.issue_id.fillna("none").str.split("-").str[0]
    df["release_kind"] = df.name.str.extract(r"(alpha|beta|release candidate|final)")[0]
    df["n_chars"] = df.body.str.len().astype(float)
    df["n_modules"] = df[key].map(em.groupby(key).size()).fillna(0).astype(float)
    df["n_people"] = df[key].map(ep.groupby(key).size()).fillna(0).astype(float)
    issue = "news_entry -> issue (the issue's earlier entries)"
    paths = {issue: (df[[key, "issue_id"]].dropna().rename(columns={"issue_id": "group"}), None),
             "news_entry -> entry_module -> module -> entry_module -> news_entry": (em, None),
             "news_entry -> entry_person -> person -> entry_person -> news_entry": (ep, None),
             "news_entry -> release -> release_line (the far parent: the line's earlier entries)":
                 (df[[key, "line"]].rename(columns={"line": "group"}), None)}
    paths["the modules' earlier entries within this release line"] = restricted(
        df, key, paths["news_entry -> entry_module -> module -> entry_module -> news_entry"], "line")
    return Data("cold-pynews", "news_entry", key, "section", "released", "2021-10-05", df,
                ["n_chars", "n_modules", "n_people"], ["tracker", "release_kind"], paths,
                embed="'{*}', 'e_row', exclude => '{section}', parents => 2, children => 5",
                describe=f"CPython changelog ({t['source']}): news_entry -> release -> release_line, "
                         "-> issue, entry_module/entry_person link tables; label news_entry.section; "
                         "as_of news_entry.released", entity=issue)


DATASETS = {"films": films_data, "lahman": lahman_data, "lahman-100k": lahman_100k_data,
            "chinook": chinook_data, "chinook-basket": chinook_basket_data, "cold-pynews": pynews_data}


def load(name: str, dsn: str) -> None:
    if name == "films":
        import films
        print(f"loaded {films.load(dsn)}", file=sys.stderr)
    elif name in ("lahman", "lahman-100k"):
        import lahman
        print(f"loaded {lahman.load(dsn, 1900 if name == 'lahman-100k' else 1960)}", file=sys.stderr)
    elif name == "cold-pynews":
        import pynews
        print(f"loaded {pynews.load(dsn)}", file=sys.stderr)
    else:
        import subprocess
        import psycopg
        subprocess.run([sys.executable, str(ROOT / "scripts/chinook.py"), "--dsn", dsn, "--schema", "chinook"],
                       check=True, stdout=sys.stderr)
        prep = CHINOOK_PREP if name == "chinook" else CHINOOK_BASKET_PREP
        with psycopg.connect(dsn, autocommit=True) as conn:
            for stmt in prep.split(";\n"):
                if stmt.strip():
                    conn.execute(stmt)


# ------------------------------------------------------------------------------------- baselines

def test_mask(d: Data) -> np.ndarray:
    """The test rows: as_of >= split_at (compared as the as_of column's type)."""
    col = d.rows["as_of"]
    split = pd.Timestamp(d.split_at) if col.dtype.kind == "M" else float(d.split_at)
    return (col >= split).to_numpy()


def metrics(y_true, y_pred) -> tuple[float, float]:
    from sklearn.metrics import accuracy_score, f1_score
    return float(accuracy_score(y_true, y_pred)), float(f1_score(y_true, y_pred, average="macro", zero_division=0))


def as_number(col: pd.Series) -> np.ndarray:
    """as_of as a number: datetimes in days since 1970-01-01, anything else as it is (years)."""
    if col.dtype.kind == "M":
        return ((col - pd.Timestamp(0)).dt.total_seconds() / 86400).to_numpy(float)
    return col.astype(float).to_numpy()


def split_number(d: Data) -> float:
    return float(as_number(pd.Series([pd.Timestamp(d.split_at)]))[0]) if d.rows["as_of"].dtype.kind == "M" \
        else float(d.split_at)


def history(d: Data, classes: list[str], cutoff: np.ndarray) -> pd.DataFrame:
    """As-of history per path, for every row of d.rows, given each row's label CUTOFF (a number
    on as_number's scale, at most the row's own as_of): the labels of the related rows whose as_of
    is strictly before the cutoff are visible, no other. Per path p:
        hist{p}_n_{c}, hist{p}_share_{c}   counts and shares of each class among the visible labels
        hist{p}_n                          their total
        hist{p}_age                        the row's as_of minus the newest visible label's as_of (NaN: none)
        hist{p}_all                        ALL related rows strictly earlier than the row's own as_of,
                                           labels visible or not (their existence is known)
        hist{p}_groups                     how many groups the row is linked to on the path
    Related = linked to a same group (a person, a player, an issue ...); a row linked to several
    groups sums over them (the age takes the newest). The row itself never counts (strictly
    earlier). Cutoffs: period-ahead test rows = split_at (test labels never visible); online =
    the row's own as_of; training rows = their own as_of (fresh) or their time block's start
    (blocked)."""
    key = d.key
    t = as_number(d.rows["as_of"])
    base = pd.DataFrame({key: d.rows[key].to_numpy(), "t": t, "cut": np.minimum(cutoff, t)})
    dummies = pd.get_dummies(d.rows["label"]).reindex(columns=classes, fill_value=0).astype(np.float32)
    dummies["_all"] = np.float32(1)
    dummies[key] = d.rows[key].to_numpy()
    index = d.rows[key].to_numpy()
    cols: dict[str, pd.Series] = {}
    for p, (side, other) in enumerate(d.paths.values()):
        other = side if other is None else other
        o = other.merge(base[[key, "t"]], on=key).merge(dummies, on=key)
        cum = o.drop(columns=[key]).groupby(["group", "t"]).sum().sort_index()
        cum = cum.groupby(level=0).cumsum().reset_index().rename(columns={"t": "t_rel"})
        q = side.merge(base, on=key)
        codes, _ = pd.factorize(pd.concat([cum["group"], q["group"]]).astype(str))
        cum["g"], q["g"] = codes[:len(cum)], codes[len(cum):]
        cum = cum.drop(columns=["group"]).sort_values("t_rel")
        vis = pd.merge_asof(q.sort_values("cut"), cum, left_on="cut", right_on="t_rel", by="g",
                            allow_exact_matches=False, direction="backward")
        counts = vis.groupby(key)[classes].sum().reindex(index).fillna(0)
        newest = vis.groupby(key)["t_rel"].max().reindex(index)
        every = pd.merge_asof(q.sort_values("t"), cum[["g", "t_rel", "_all"]], left_on="t", right_on="t_rel",
                              by="g", allow_exact_matches=False, direction="backward")
        total = counts.sum(axis=1)
        cols[f"hist{p}_n"] = total
        cols[f"hist{p}_age"] = pd.Series(t - newest.to_numpy(), index=index)
        cols[f"hist{p}_all"] = every.groupby(key)["_all"].sum().reindex(index).fillna(0)
        cols[f"hist{p}_groups"] = side.groupby(key).size().reindex(index).fillna(0)
        for c in classes:
            cols[f"hist{p}_n_{c}"] = counts[c]
            cols[f"hist{p}_share_{c}"] = (counts[c] / total.replace(0, np.nan)).astype(float)
    out = pd.DataFrame(cols)
    out.index = index
    return out


def block_cutoffs(t: np.ndarray, blocks: int = 6) -> np.ndarray:
    """Forward time blocks: the rows split by as_of into `blocks` blocks of about equal size (rows
    with the same as_of stay in one block); each row's cutoff is its block's first as_of, so block
    b sees the labels of blocks 0..b-1 only (block 0: none), as a test period sees only the
    labels before it."""
    edges = np.unique(np.quantile(t, np.arange(blocks) / blocks, method="lower"))
    return edges[np.searchsorted(edges, t, side="right") - 1]


def cold_mask(d: Data) -> np.ndarray:
    """Rows whose entity (d.entity's path; every path when None) has no strictly earlier row."""
    h = history(d, [], as_number(d.rows["as_of"]))
    names = list(d.paths)
    use = [names.index(d.entity)] if d.entity else range(len(names))
    return (sum(h[f"hist{p}_all"].to_numpy() for p in use) == 0)


def python_rows(d: Data, cold: np.ndarray) -> list[dict]:
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import log_loss
    from sklearn.model_selection import StratifiedKFold

    is_test = test_mask(d)
    tr, te = d.rows[~is_test], d.rows[is_test]
    y_tr, y_te = tr["label"].to_numpy(), te["label"].to_numpy()
    cold_te = cold[is_test]
    classes = sorted(set(y_tr))
    out = []
    common = {"test_rows": int(len(te)), "train_rows": int(len(tr))}

    def scored(pred) -> dict:
        acc, f1 = metrics(y_te, pred)
        pred = np.asarray(pred)
        cold_acc = float((pred[cold_te] == y_te[cold_te]).mean()) if cold_te.any() else None
        return {"accuracy": acc, "macro_f1": f1, "cold_accuracy": cold_acc, **common}

    both = "both (no label history: the same predictions)"
    t0 = time.perf_counter()
    maj = pd.Series(y_tr).mode()[0]
    out.append({"method": f"majority class ({maj})", "protocol": both, **scored([maj] * len(y_te)),
                "seconds": time.perf_counter() - t0})
    print(f"  majority: {out[-1]['accuracy']:.3f} / {out[-1]['macro_f1']:.3f}", file=sys.stderr, flush=True)

    # Time-ordered validation (never random across time): fit on the earliest 80% of the training
    # rows by as_of, score on the latest 20%; used for LR's C, the GBDT's history variant and
    # iterations.
    t_all = as_number(d.rows["as_of"])
    t_tr = t_all[~is_test]
    cut = np.sort(t_tr)[int(0.8 * len(t_tr))]
    early = t_tr < cut

    def text_model(c=1.0):
        return TfidfVectorizer(ngram_range=(1, 2), min_df=2), LogisticRegression(C=c, max_iter=1000)

    t0 = time.perf_counter()
    vec, lr = text_model()
    lr.fit(vec.fit_transform(tr["text"]), y_tr)
    p_te = lr.predict_proba(vec.transform(te["text"]))
    out.append({"method": "TF-IDF words 1-2 + logistic regression (C = 1, own text + linked names)",
                "protocol": both, **scored(lr.classes_[p_te.argmax(axis=1)]), "seconds": time.perf_counter() - t0})
    print(f"  TF-IDF + LR (C = 1): {out[-1]['accuracy']:.3f} / {out[-1]['macro_f1']:.3f} ({out[-1]['seconds']:.1f} s)",
          file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    c_scores = {}
    for c in (1.0, 5.0, 20.0):
        v, m = text_model(c)
        m.fit(v.fit_transform(tr["text"][early]), y_tr[early])
        c_scores[c] = metrics(y_tr[~early], m.predict(v.transform(tr["text"][~early])))[0]
    best_c = max(c_scores, key=c_scores.get)
    print(f"  LR's C on the time-ordered validation (accuracy): {c_scores} -> {best_c}", file=sys.stderr, flush=True)
    t_c = time.perf_counter() - t0
    t0 = time.perf_counter()
    vec, lr = text_model(best_c)
    lr.fit(vec.fit_transform(tr["text"]), y_tr)
    p_te = lr.predict_proba(vec.transform(te["text"]))
    out.append({"method": f"TF-IDF words 1-2 + logistic regression (C = {best_c:g} chosen on the time-ordered "
                          "validation)", "protocol": both, **scored(lr.classes_[p_te.argmax(axis=1)]),
                "seconds": time.perf_counter() - t0 + t_c, "c_validation_accuracy": c_scores})
    print(f"  TF-IDF + LR (C = {best_c:g}): {out[-1]['accuracy']:.3f} / {out[-1]['macro_f1']:.3f}", file=sys.stderr,
          flush=True)

    # The stack: out-of-fold text probabilities + as-of history + columns + time -> GBDT.
    t1 = time.perf_counter()
    oof = np.zeros((len(tr), len(lr.classes_)))
    for a, b in StratifiedKFold(5, shuffle=True, random_state=0).split(tr, y_tr):
        v, m = text_model(best_c)
        m.fit(v.fit_transform(tr["text"].iloc[a]), y_tr[a])
        pr = m.predict_proba(v.transform(tr["text"].iloc[b]))
        oof[np.ix_(b, np.searchsorted(lr.classes_, m.classes_))] = pr
    t_oof = time.perf_counter() - t1

    # History under each protocol: one label cutoff per row (see history()).
    t2 = time.perf_counter()
    split = split_number(d)
    hists = {}
    val_blocked = np.full(len(t_tr), cut)                  # the validation slice sees labels < cut only
    val_blocked[early] = block_cutoffs(t_tr[early])
    for name, cut_tr in [("val fresh", np.where(early, t_tr, cut)), ("val blocked", val_blocked),
                         ("fresh", t_tr), ("blocked", block_cutoffs(t_tr))]:
        c_all = t_all.copy()
        c_all[~is_test] = cut_tr
        c_all[is_test] = split                              # period-ahead: training labels only
        hists[name] = history(d, classes, c_all)
    hists["online"] = history(d, classes, t_all)          # every strictly earlier label, test rows' too
    t_hist = time.perf_counter() - t2
    print(f"  out-of-fold text probabilities {t_oof:.1f} s, history ({len(d.paths)} paths, "
          f"{hists['fresh'].shape[1]} features, 5 cutoff sets) {t_hist:.1f} s", file=sys.stderr, flush=True)

    timestamp = d.rows["as_of"].dtype.kind == "M"
    hourly = timestamp and bool((d.rows["as_of"].dt.hour != 0).any())

    def frame(part, probs, hist):
        x = pd.DataFrame(probs, columns=[f"text_p_{c}" for c in lr.classes_], index=part.index)
        x = pd.concat([x, hist.loc[part[d.key].values].set_index(part.index)], axis=1)
        for c in d.numeric:
            x[c] = part[c].astype(float)
        if timestamp:                                     # the as_of's calendar: carries over to new entities
            x["as_of_month"] = part["as_of"].dt.month.astype(float)
            x["as_of_weekday"] = part["as_of"].dt.weekday.astype(float)
            if hourly:
                x["as_of_hour"] = part["as_of"].dt.hour.astype(float)
        for c in d.categorical:
            top = tr[c].astype("string").value_counts().index[:50]
            v = part[c].astype("string")
            x[c] = pd.Categorical(v.where(v.isin(top), "other").fillna("missing"), categories=list(top) + ["other", "missing"])
        return x

    def gbdt(n):
        return HistGradientBoostingClassifier(max_iter=n, learning_rate=0.05, max_leaf_nodes=31,
                                              l2_regularization=1.0, early_stopping=False,
                                              categorical_features="from_dtype", random_state=0)

    def iterations(x):
        """Iterations (by 20, up to 400) by log loss on the validation slice (fit on the earliest 80%)."""
        m = gbdt(20)
        m.set_params(warm_start=True)
        best, best_n, curve = np.inf, 20, []
        for n in range(20, 401, 20):
            m.set_params(max_iter=n)
            m.fit(x[early], y_tr[early])
            late_y = y_tr[~early]
            pr = m.predict_proba(x[~early])
            known = np.isin(late_y, m.classes_)
            ll = log_loss(late_y[known], pr[known], labels=m.classes_)
            curve.append((n, round(float(ll), 4)))
            if ll < best:
                best, best_n = ll, n
            elif n >= best_n + 80:
                break
        return best, best_n, curve, m

    # Fresh or blocked training history: chosen on the validation slice (log loss), each with its
    # own iteration count, as a data scientist would.
    variants = {}
    for v in ("fresh", "blocked"):
        t3 = time.perf_counter()
        ll, n, curve, m_val = iterations(frame(tr, oof, hists[f"val {v}"]))
        val_acc = float((m_val.predict(frame(tr, oof, hists[f"val {v}"])[~early]) == y_tr[~early]).mean())
        variants[v] = {"logloss": ll, "iterations": n, "curve": curve, "validation_accuracy": val_acc,
                       "search_s": time.perf_counter() - t3}
        print(f"  validation, {v} training history: log loss {ll:.4f}, accuracy {val_acc:.3f} ({n} iterations)",
              file=sys.stderr, flush=True)
    chosen = min(variants, key=lambda v: variants[v]["logloss"])
    label = {"fresh": "fresh history (training rows see every earlier training label)",
             "blocked": "blocked history (6 forward time blocks: a block sees the labels of earlier blocks)"}
    stack = "GBDT stack: TF-IDF+LR out-of-fold probabilities + as-of history per FK path + columns + as_of time"
    models = {}
    for v in (chosen, *[x for x in variants if x != chosen]):
        t3 = time.perf_counter()
        x_tr, x_te = frame(tr, oof, hists[v]), frame(te, p_te, hists[v])
        m = gbdt(variants[v]["iterations"]).fit(x_tr, y_tr)
        models[v] = (m, x_tr, x_te)
        name = f"{stack}, {label[v]}" + (" [CHOSEN on validation]" if v == chosen else " [not chosen]")
        out.append({"method": name, "protocol": "period-ahead", **scored(m.predict(x_te)),
                    "seconds": time.perf_counter() - t3 + t_oof + t_hist + variants[v]["search_s"],
                    "iterations": variants[v]["iterations"], "history": v, "chosen": v == chosen,
                    "validation_cut": cut, "validation": {k: variants[k]["logloss"] for k in variants},
                    "validation_accuracy": {k: variants[k]["validation_accuracy"] for k in variants},
                    "validation_logloss_curve": variants[v]["curve"], "features": int(x_tr.shape[1]),
                    "history_paths": list(d.paths)})
        print(f"  GBDT stack, {v}: {out[-1]['accuracy']:.3f} / {out[-1]['macro_f1']:.3f} "
              f"({variants[v]['iterations']} iterations)", file=sys.stderr, flush=True)

    m, x_tr, x_te = models[chosen]
    # Online: each test row at its own as_of with every strictly earlier label (test rows' too);
    # the same model, trained on the training period.
    x_on = frame(te, p_te, hists["online"])
    out.append({"method": f"{stack}, {chosen} history (the chosen model)", "protocol": "online",
                **scored(m.predict(x_on)), "seconds": t_hist, "iterations": variants[chosen]["iterations"],
                "note": "test rows' history: every strictly earlier label, training and test"})
    print(f"  GBDT stack online: {out[-1]['accuracy']:.3f} / {out[-1]['macro_f1']:.3f}", file=sys.stderr, flush=True)

    # The chosen stack without the text model and without the history: what each part brings.
    for name, cols in [("GBDT without the text probabilities (history + columns)",
                        [c for c in x_tr.columns if not c.startswith("text_p_")]),
                       ("GBDT without the history (text probabilities + columns)",
                        [c for c in x_tr.columns if not c.startswith("hist")])]:
        t3 = time.perf_counter()
        g = gbdt(variants[chosen]["iterations"])
        g.fit(x_tr[cols], y_tr)
        out.append({"method": name, "protocol": "period-ahead", **scored(g.predict(x_te[cols])),
                    "seconds": time.perf_counter() - t3, "iterations": variants[chosen]["iterations"],
                    "note": f"ablation of the chosen ({chosen}) stack, same iterations"})
        print(f"  {name}: {out[-1]['accuracy']:.3f} / {out[-1]['macro_f1']:.3f}", file=sys.stderr, flush=True)
    return out


# ------------------------------------------------------------------------------------- tributary

def tributary_rows(d: Data, dsn: str, k: int, cold_keys: set[str]) -> list[dict]:
    import psycopg
    out = []

    def cold_accuracy(truth: dict, got: dict):
        keys = [x for x in truth if x in cold_keys]
        return sum(truth[x] == got.get(x) for x in keys) / len(keys) if keys else None
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.execute("CREATE EXTENSION IF NOT EXISTS tributary")
        if conn.execute("SELECT count(*) FROM pg_settings WHERE name = 'tributary.progress_interval'").fetchone()[0]:
            conn.execute("SET tributary.progress_interval = 0")
        have = {r[0] for r in conn.execute(
            "SELECT proname FROM pg_proc WHERE proname IN ('tributary_train', 'tributary_predict_column', "
            "'tributary_embed_column')").fetchall()}
        version = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'tributary'").fetchone()[0]
        print(f"tributary {version}: {sorted(have)}", file=sys.stderr)
        emb, embed_s = None, 0.0
        if d.embed and "tributary_embed_column" in have:
            conn.execute(f"ALTER TABLE {d.table} ADD COLUMN IF NOT EXISTS e_row vector(384)")
            t0 = time.perf_counter()
            try:
                n = conn.execute(f"SELECT tributary_embed_column('{d.table}', {d.embed})").fetchone()[0]
                embed_s = time.perf_counter() - t0
                emb = "e_row"
                out.append({"method": f"tributary_embed_column({d.embed.split(', ', 1)[1]})", "seconds": embed_s,
                            "protocol": "—",
                            "rows_embedded": n, "note": "embedding used by the rows below (seconds not included there)"})
                print(f"  embedded {n} rows in {embed_s:.0f} s", file=sys.stderr, flush=True)
            except psycopg.Error as e:
                conn.execute(f"ALTER TABLE {d.table} DROP COLUMN IF EXISTS e_row")
                out.append({"method": "tributary_embed_column", "note": f"error: {str(e).splitlines()[0]}"})
        online = conn.execute("SELECT count(*) FROM pg_proc WHERE proname = 'tributary_predict_column_online'"
                              "").fetchone()[0] > 0
        if "tributary_train" not in have:
            out.append({"method": "tributary_train (split_at)", "protocol": "period-ahead",
                        "note": "tributary_train not installed"})
            out.append({"method": "tributary_predict_column, held out (labels NULL)", "protocol": "period-ahead",
                        "note": "tributary_train not installed"})
            out.append({"method": "tributary_predict_column_online", "protocol": "online",
                        "note": "tributary_train not installed"})
            return out
        t0 = time.perf_counter()
        try:
            cur = conn.execute(
                "SELECT method, algorithm, split, rows, accuracy, macro_f1, mae, seconds FROM tributary_train("
                "predictor => 'p', tbl => %s, label => %s, embedding => %s, as_of => %s, split_at => %s, k => %s)",
                (d.table, d.label, emb, d.as_of, d.split_at, k))
            for method, algorithm, split, rows, acc, f1, mae, secs in cur.fetchall():
                out.append({"method": f"tributary_train: {method}" + (f" ({algorithm})" if algorithm else ""),
                            "protocol": "period-ahead", "split": split, "accuracy": acc, "macro_f1": f1, "mae": mae, "test_rows": rows,
                            "seconds": secs, "how": "tributary_train(split_at)"})
        except psycopg.Error as e:
            out.append({"method": "tributary_train (split_at)", "protocol": "period-ahead",
                        "note": f"error: {str(e).splitlines()[0]}",
                        "seconds": time.perf_counter() - t0})
        print(f"  tributary_train(split_at): {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
        dbname = conn.info.dbname
        def col_type(c):
            return conn.execute("SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                                "WHERE attrelid = %s::regclass AND attname = %s", (d.table, c)).fetchone()[0]
        label_type, as_of_type = col_type(d.label), col_type(d.as_of)
        truth = dict(conn.execute(
            f'SELECT "{d.key}"::text, "{d.label}"::text FROM {d.table} '
            f'WHERE "{d.as_of}" >= %s::text::{as_of_type} AND "{d.label}" IS NOT NULL', (d.split_at,)).fetchall())
        held = f"{dbname}_heldout"
        conn.execute(f'DROP DATABASE IF EXISTS "{held}"')
    # The held-out check on a copy of the whole database (every foreign key and link table kept).
    admin = psycopg.conninfo.make_conninfo(dsn, dbname="postgres")
    with psycopg.connect(admin, autocommit=True) as a:
        a.execute(f'CREATE DATABASE "{held}" TEMPLATE "{dbname}"')
    r = {"method": "tributary_predict_column, held out (test labels NULL, p2 without split_at)",
         "protocol": "period-ahead", "how": f"database copy {held}", "test_rows": len(truth)}
    t0 = time.perf_counter()
    try:
        with psycopg.connect(psycopg.conninfo.make_conninfo(dsn, dbname=held), autocommit=True) as conn:
            if conn.execute("SELECT count(*) FROM pg_settings WHERE name = 'tributary.progress_interval'").fetchone()[0]:
                conn.execute("SET tributary.progress_interval = 0")
            conn.execute(f'ALTER TABLE {d.table} ALTER COLUMN "{d.label}" DROP NOT NULL')
            n = conn.execute(f'UPDATE {d.table} SET "{d.label}" = NULL WHERE "{d.as_of}" >= %s::text::{as_of_type}',
                             (d.split_at,)).rowcount
            t1 = time.perf_counter()
            res = conn.execute(
                "SELECT method, algorithm, split, rows, accuracy, macro_f1, mae, seconds FROM tributary_train("
                "predictor => 'p2', tbl => %s, label => %s, embedding => %s, as_of => %s, k => %s)",
                (d.table, d.label, emb, d.as_of, k)).fetchall()
            r["train_s"] = time.perf_counter() - t1
            r["train_result"] = [dict(zip(["method", "algorithm", "split", "rows", "accuracy", "macro_f1", "mae",
                                           "seconds"], x)) for x in res]
            conn.execute(f"ALTER TABLE {d.table} ADD COLUMN predicted {label_type}")
            t1 = time.perf_counter()
            r["rows_written"] = conn.execute("SELECT tributary_predict_column('p2', 'predicted')").fetchone()[0]
            r["predict_s"] = time.perf_counter() - t1
            got = dict(conn.execute(f'SELECT "{d.key}"::text, predicted::text FROM {d.table} '
                                    f'WHERE "{d.as_of}" >= %s::text::{as_of_type}', (d.split_at,)).fetchall())
            keys = sorted(truth)
            acc, f1 = metrics([truth[x] for x in keys], [got.get(x) or "" for x in keys])
            r.update(accuracy=acc, macro_f1=f1, cold_accuracy=cold_accuracy(truth, got), labels_nulled=n,
                     predicted=sum(got.get(x) is not None for x in keys))
    except psycopg.Error as e:
        r["note"] = f"error: {str(e).splitlines()[0]}"
    r["seconds"] = time.perf_counter() - t0
    out.append(r)
    with psycopg.connect(admin, autocommit=True) as a:
        a.execute(f'DROP DATABASE IF EXISTS "{held}"')
    # Online, on the database WITH the test labels (after the held-out copy, so that the copy has
    # no prediction column): p (trained with split_at) predicts every labelled row as of its own
    # as_of with every strictly earlier label; scored on the test rows.
    r = {"method": "tributary_predict_column_online('p'): each row as of its as_of, every earlier label",
         "protocol": "online", "test_rows": len(truth)}
    if not online:
        r["note"] = "online: tributary_predict_column_online not installed"
        print("  online: tributary_predict_column_online not installed", file=sys.stderr, flush=True)
        out.append(r)
        return out
    t0 = time.perf_counter()
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            if conn.execute("SELECT count(*) FROM pg_settings WHERE name = 'tributary.progress_interval'").fetchone()[0]:
                conn.execute("SET tributary.progress_interval = 0")
            conn.execute(f"ALTER TABLE {d.table} ADD COLUMN predicted_online {label_type}")
            r["rows_written"] = conn.execute("SELECT tributary_predict_column_online('p', 'predicted_online')"
                                             ).fetchone()[0]
            got = dict(conn.execute(f'SELECT "{d.key}"::text, predicted_online::text FROM {d.table} '
                                    f'WHERE "{d.as_of}" >= %s::text::{as_of_type}', (d.split_at,)).fetchall())
            conn.execute(f"ALTER TABLE {d.table} DROP COLUMN predicted_online")
            keys = sorted(truth)
            acc, f1 = metrics([truth[x] for x in keys], [got.get(x) or "" for x in keys])
            r.update(accuracy=acc, macro_f1=f1, cold_accuracy=cold_accuracy(truth, got),
                     predicted=sum(got.get(x) is not None for x in keys))
    except psycopg.Error as e:
        r["note"] = f"error: {str(e).splitlines()[0]}"
    r["seconds"] = time.perf_counter() - t0
    out.append(r)
    return out


def export(d: Data, path: Path) -> None:
    """The dataset as crates/learn/examples/dataset.rs reads it (test labels kept: train() masks
    them by role): as_of as a number (datetimes in days), the text, the history paths as
    (row index, group id), the numbers and categories the stack uses."""
    rows = d.rows.reset_index(drop=True)
    t = rows["as_of"]
    as_of = (t - pd.Timestamp(0)).dt.total_seconds() / 86400 if t.dtype.kind == "M" else t.astype(float)
    index = {k: i for i, k in enumerate(rows[d.key])}
    groups: dict = {}

    def pairs(side):
        out = []
        for k, g in zip(side[d.key], side["group"]):
            if k in index and pd.notna(g):
                out.append([index[k], groups.setdefault(g, len(groups) + 1)])
        return out
    nan = lambda v: None if pd.isna(v) else v
    js = {"as_of": as_of.tolist(), "label": rows["label"].astype(str).tolist(),
          "role": np.where(test_mask(d), "test", "train").tolist(), "text": rows["text"].astype(str).tolist(),
          "paths": {name: pairs(side) for name, (side, _other) in d.paths.items()},
          "numbers": {c: [nan(v) for v in rows[c].astype(float)] for c in d.numeric},
          "categories": {c: [nan(v) for v in rows[c].astype("string")] for c in d.categorical}}
    path.write_text(json.dumps(js))
    print(f"exported {len(rows)} rows to {path}", file=sys.stderr)


# ------------------------------------------------------------------------------------------ main

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dataset", choices=sorted(DATASETS))
    ap.add_argument("--dsn", default="")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--skip-load", action="store_true")
    ap.add_argument("--no-tributary", action="store_true", help="the Python baselines only (no database)")
    ap.add_argument("--export", type=Path, help="write the dataset for crates/learn/examples/dataset.rs and stop")
    a = ap.parse_args(argv)
    json_path = a.json or ROOT / f"benches/results/learn_{a.dataset}.json"

    t0 = time.perf_counter()
    d = DATASETS[a.dataset]()
    is_test = test_mask(d)
    n_test = int(is_test.sum())
    cold = cold_mask(d)
    cold_share = float(cold[is_test].mean())
    entity = d.entity or "every path"
    print(f"{a.dataset}: {len(d.rows)} labelled rows, {d.rows['label'].nunique()} classes, test = {d.as_of} >= "
          f"{d.split_at}: {n_test} rows ({100 * n_test / len(d.rows):.1f}%), cold {100 * cold_share:.1f}% "
          f"(no earlier row on {entity}); read in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    if a.export:
        export(d, a.export)
        return 0
    results = []
    if a.no_tributary:
        results.append({"method": "tributary", "note": "not run (--no-tributary)"})
    else:
        if not a.skip_load:
            t0 = time.perf_counter()
            load(a.dataset, a.dsn)
            print(f"loaded in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
        cold_keys = {str(k) for k in d.rows[d.key][cold & is_test]}
        results += tributary_rows(d, a.dsn, a.k, cold_keys)
    results += python_rows(d, cold)

    def fmt(x, spec=".3f"):
        return "—" if x is None else format(x, spec)
    print(f"\n### {a.dataset}: {d.describe}; test = {d.as_of} >= {d.split_at}\n")
    print("| protocol | method | accuracy | macro-F1 | accuracy on cold rows | MAE | test rows | train rows | "
          "seconds | note |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        note = " ".join(str(x) for x in (r.get("split") and f"split: {r['split']}", r.get("how"), r.get("note")) if x)
        print(f"| {r.get('protocol', '—')} | {r['method']} | {fmt(r.get('accuracy'))} | {fmt(r.get('macro_f1'))} | "
              f"{fmt(r.get('cold_accuracy'))} | {fmt(r.get('mae'))} | {fmt(r.get('test_rows'), 'd')} | "
              f"{fmt(r.get('train_rows'), 'd')} | {fmt(r.get('seconds'), '.1f')} | {note} |")
    print(f"\n{len(d.rows)} labelled rows, {d.rows['label'].nunique()} classes; forward split: train {d.as_of} < "
          f"{d.split_at}, test {d.as_of} >= {d.split_at} ({n_test} rows). Cold test rows (no strictly earlier row "
          f"on {entity}): {int(cold[is_test].sum())} of {n_test} ({100 * cold_share:.1f}%). k = {a.k}. "
          "Protocols: period-ahead = the test period's labels unknown, every test row predicted at once from the "
          "training period's labels; online = each test row at its own as_of with every strictly earlier label "
          "(test rows' too), the model trained on the training period. Python seconds: one thread; the GBDT's "
          "include the out-of-fold text model, the history features (every cutoff set) and the iteration search.")
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps({"dataset": a.dataset, "describe": d.describe, "table": d.table,
                                     "label": d.label, "as_of": d.as_of, "split_at": d.split_at,
                                     "rows": len(d.rows), "test_rows": n_test, "k": a.k,
                                     "cold_entity": entity, "cold_test_rows": int(cold[is_test].sum()),
                                     "cold_share_of_test": cold_share,
                                     "history_paths": list(d.paths), "results": results}, indent=1, default=str) + "\n")
    print(f"\nJSON: {json_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
