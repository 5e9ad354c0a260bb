#!/usr/bin/env python3
"""Chinook: predict a track's genre (track.genre_id) from its nearest embedded tracks, with the
track row alone and with its foreign-key context (album title, artist name, media type), split
by album so that tracks of one album are never on both sides. Reports accuracy and macro-F1 next
to the majority-class baseline, for several seeds (splits), as a markdown table. Reports numbers;
asserts nothing (tests/integration/test_chinook.py checks that it runs and beats the baseline).

The label is left out of the text: exclude => '{genre_id}' also leaves out the genre parent row
that genre_id reaches (see the README, "Rows as text").

Usage: chinook_predict.py [--dsn DSN] [--seeds 0,1,2] [--k 10] [--skip-load]
Connection: libpq environment variables (PGHOST, PGPORT, ...) or --dsn. Loads Chinook with
scripts/chinook.py (schema "chinook", dropped and recreated) unless --skip-load.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import psycopg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: The two ways a track becomes text: (embedding column, tributary_embed_column options).
VARIANTS = {
    "track row alone": ("embedding", "exclude => '{genre_id}'"),
    "track + album, artist, media type (parents => 2)": ("context_embedding", "exclude => '{genre_id}', parents => 2"),
    # Not in the test: shows how much the numeric columns (length, size, price) cost.
    "the same without bytes, milliseconds, unit_price": (
        "context_text_embedding", "exclude => '{genre_id,bytes,milliseconds,unit_price}', parents => 2"),
}


def load(dsn: str) -> None:
    """Loads Chinook into schema chinook with a vector(384) column on track per variant."""
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "chinook.py"), "--dsn", dsn],
                   check=True, stdout=subprocess.DEVNULL)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS tributary CASCADE")
        for column, _ in VARIANTS.values():
            conn.execute(f"ALTER TABLE chinook.track ADD COLUMN {column} vector(384)")


def embed(conn: psycopg.Connection, column: str, options: str) -> tuple[int, float]:
    """Fills chinook.track.<column> with whole-row embeddings; returns (rows, seconds)."""
    conn.execute("SET tributary.progress_interval = 0")
    t0 = time.monotonic()
    n = conn.execute(
        f"SELECT tributary_embed_column('chinook.track', '{{*}}', '{column}', {options})").fetchone()[0]
    return n, time.monotonic() - t0


def example(conn: psycopg.Connection, options: str, track_id: int = 1) -> str:
    """The text one track becomes under `options`."""
    return conn.execute(f"SELECT tributary_row_text(t, {options}) FROM chinook.track t WHERE track_id = %s",
                        (track_id,)).fetchone()[0]


def evaluate(conn: psycopg.Connection, column: str, seed: int, k: int) -> dict[str, tuple[float, float, int, int]]:
    """{metric: (model, baseline, test_rows, train_rows)} for one split."""
    rows = conn.execute(
        "SELECT metric, model, baseline, test_rows, train_rows FROM tributary_evaluate("
        "'chinook.track', 'genre_id', %s, group_by => 'album_id', k => %s, seed => %s)",
        (column, k, seed)).fetchall()
    return {m: (model, base, test, train) for m, model, base, test, train in rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", default="")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--skip-load", action="store_true")
    args = ap.parse_args()
    if not args.skip_load:
        load(args.dsn)
    seeds = [int(s) for s in args.seeds.split(",")]
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS tributary CASCADE")
        print("| text of a track | rows | embed s | accuracy | baseline accuracy | macro-F1 | baseline macro-F1 | test rows (mean) |")
        print("|---|---|---|---|---|---|---|---|")
        for name, (column, options) in VARIANTS.items():
            n, secs = embed(conn, column, options)
            results = [evaluate(conn, column, s, args.k) for s in seeds]

            def mean(metric: str, i: int) -> float:
                return sum(r[metric][i] for r in results) / len(results)
            print(f"| {name} | {n} | {secs:.1f} | {mean('accuracy', 0):.3f} | {mean('accuracy', 1):.3f} | "
                  f"{mean('macro_f1', 0):.3f} | {mean('macro_f1', 1):.3f} | {mean('accuracy', 2):.0f} |")
        print(f"\nk = {args.k}, seeds {args.seeds} (splits by album, about 20% of albums held out each), "
              "mean over seeds.\n")
        single = conn.execute(
            "SELECT round(100.0 * count(*) FILTER (WHERE n = 1) / count(*), 1) FROM chinook.track t "
            "JOIN chinook.album a USING (album_id) "
            "JOIN (SELECT artist_id, count(*) AS n FROM chinook.album GROUP BY artist_id) c USING (artist_id)").fetchone()[0]
        print(f"{single}% of tracks are by an artist with a single album: held out, their artist is never "
              "in the training rows.\n")
        for name, (_, options) in VARIANTS.items():
            print(f"Text of track 1, {name}:\n```\n{example(conn, options)}\n```")


if __name__ == "__main__":
    main()
