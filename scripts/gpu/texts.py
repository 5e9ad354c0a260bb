#!/usr/bin/env python3
"""Writes real Debian package descriptions as a texts file for tools/bench: one text per line,
newlines inside a description written as the two characters `\\n`.

The descriptions come from scripts/debian_data.py's reader (the apt package index, downloaded
once into its cache; see ../shared/DATA.md). A deterministic sample by hash of the package name
keeps a mix of sections and lengths (average ~416 characters, ~100 tokens with a BERT tokenizer).

Usage: texts.py OUT [--limit ROWS]     (default 16384 rows; 0 = all ~64k)
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import debian_data  # noqa: E402  (scripts/debian_data.py)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--limit", type=int, default=16384)
    a = ap.parse_args(argv)
    packages, _ = debian_data.load_index(debian_data.CACHE)
    names = sorted(packages)
    if a.limit:
        keep = debian_data.sample(names, a.limit)
        names = [n for n in names if n in keep]
    a.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = a.out.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for n in names:
            desc = packages[n][5].replace("\r", " ").replace("\n", "\\n")
            f.write(desc + "\n")
    os.replace(tmp, a.out)
    print(f"{a.out}: {len(names)} descriptions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
