#!/usr/bin/env python3
"""Real entity-matching data for benches/match_em.py (issue 36), built offline.

    debian_suites, debian_sparse   Debian binary packages, bookworm x trixie, from the apt lists this
                                   machine has (scripts/debian_em_data.py: how they are built, sizes,
                                   partner shares, repeated titles, the suites' InRelease dates)

Not used, on purpose: an earlier version of this loader read a restaurant pair and a bibliography
pair from a PyPI package's data. Their sizes and label counts match the held-out benchmarks that
issue 36 describes, so they look like the maintainers' held-out sets: tuning on them, or even
reporting numbers on them, would contaminate that held-out check. They were removed.

Usage (prints the sizes): scripts/em_data.py [debian_suites|debian_sparse]
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import debian_em_data  # noqa: E402

SETS = ("debian_suites", "debian_sparse")


def load(name: str, seed: int = 0):
    """(left rows, right rows, true pairs, columns, info): rows are {key: {column: value}}."""
    if name not in SETS:
        raise SystemExit(f"em_data: unknown data set {name} ({', '.join(SETS)})")
    return debian_em_data.build(name, seed)


if __name__ == "__main__":
    for w in sys.argv[1:] or SETS:
        left, right, truth, cols, info = load(w)
        print(debian_em_data.summary(w, left, right, truth, info))
