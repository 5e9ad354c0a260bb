"""Chinook (a real 11-table database, scripts/chinook.py): whole-row embedding with foreign-key
context through tributary_embed_column, and genre prediction from neighbours evaluated against the
majority-class baseline, split by album. A check that the evaluation runs and beats the baseline;
the numbers themselves are reported by benches/chinook_predict.py into BENCHMARKS.md.
"""
import os
import sys

import pytest

from jobwait import connect

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benches"))
import chinook_predict  # noqa: E402

@pytest.fixture(scope="module")
def chinook(dsn):
    chinook_predict.load(dsn)
    return dsn


def test_genre_prediction_beats_majority_baseline(chinook):
    with connect(chinook) as conn:
        for name, (column, options) in list(chinook_predict.VARIANTS.items())[:2]:
            n, _ = chinook_predict.embed(conn, column, options)
            assert n == 3503, name
            left = conn.execute(f"SELECT count(*) FROM chinook.track WHERE {column} IS NULL").fetchone()[0]
            assert left == 0, name
            r = chinook_predict.evaluate(conn, column, seed=0, k=10)
            acc, base_acc, test_rows, train_rows = r["accuracy"]
            f1, base_f1, _, _ = r["macro_f1"]
            assert test_rows + train_rows == 3503 and test_rows > 300, (name, test_rows, train_rows)
            assert acc > base_acc, (name, acc, base_acc)
            assert f1 > base_f1, (name, f1, base_f1)


def test_context_text_holds_parents_and_not_the_label(chinook):
    with connect(chinook) as conn:
        text = chinook_predict.example(conn, "exclude => '{genre_id}', parents => 2", track_id=1)
        assert "album.title: For Those About To Rock We Salute You" in text
        assert "album.artist.name: AC/DC" in text
        assert "media_type.name:" in text
        assert "genre" not in text
        # The same split twice gives the same numbers (seeded), another seed another split.
        a = chinook_predict.evaluate(conn, "context_embedding", seed=0, k=10)
        b = chinook_predict.evaluate(conn, "context_embedding", seed=0, k=10)
        c = chinook_predict.evaluate(conn, "context_embedding", seed=1, k=10)
        assert a == b
        assert a["accuracy"][2] != c["accuracy"][2] or a["accuracy"][0] != c["accuracy"][0]
