#!/usr/bin/env python3
"""Real matching data from Debian's package lists, offline, for benches/match_em.py (issue 36).

A record is one binary package of one suite (main, amd64), described by what a package's page shows:
    title        the short description (first line of Description), e.g. "Python 3 bindings for foo"
    description  the long description (Translation-en, found by Description-md5), plain text with
                 Debian's ' .' paragraph marks removed, whitespace collapsed, cut to 500 characters
    maintainer   "Name <email>" as in Packages
    section      e.g. libs, python, devel
    homepage     upstream URL (often missing)
The package name and the source package name are NOT columns: the truth is "same package name in
both suites", so they would be the answer. (Homepage and the long description sometimes mention the
name; that is what a package's record says about itself, as a paper's abstract may repeat its title.)
Renamed packages (e.g. the 64-bit time_t renames libfoo1 -> libfoo1t64 in trixie) count as
different packages. Keys are opaque (b00000.., t00000..), assigned after a seeded shuffle.

    debian_suites  publication-like: 5,000 package names sampled (seed) from those in BOTH suites;
                   left = their bookworm records, right = their trixie records: every row has a
                   partner; titles repeat (transitional packages, -dev/-doc/-dbg families).
    debian_sparse  most rows have no partner: 100 names sampled from both suites, plus 900 other
                   bookworm packages (left) and 900 other trixie packages (right), none sharing a
                   name with the other side: 10% of the rows of each side have a partner.

Lists read (nothing is downloaded; the loader stops with what to run when they are missing):
    bookworm  /var/cache/tributary-data/aptl (scripts/debian_data.py's cache, has Translation-en),
              else /var/lib/apt/lists (the host's; without Translation-en the long description is
              empty): *dists_bookworm_main_binary-amd64_Packages[.lz4] + *_main_i18n_Translation-en*
    trixie    /var/cache/tributary/pg17-trixie/var/lib/apt/lists (the Debian 13 root that
              scripts/setup.sh makes for PostgreSQL 17)
The lists change over time: the 'Date:' of each suite's InRelease is returned and recorded.

Usage (prints sizes, partner shares, repeated titles, suite dates): scripts/debian_em_data.py [debian_suites|debian_sparse]
"""
from __future__ import annotations

import glob
import os
import random
import re
import subprocess
import sys
from collections import Counter

from debian_data import read_text  # the same lists, lz4/xz/gz or plain

BOOKWORM_DIRS = ("/var/cache/tributary-data/aptl", "/var/lib/apt/lists")
TRIXIE_DIRS = ("/var/cache/tributary/pg17-trixie/var/lib/apt/lists",)
COLUMNS = ["title", "description", "maintainer", "section", "homepage"]
DESC_CHARS = 500
HOWTO = {
    "bookworm": "run `sudo apt-get update` on this Debian 12 host (or scripts/debian_data.py, which fills "
                "/var/cache/tributary-data/aptl with Acquire::Languages=en for the long descriptions)",
    "trixie": "run scripts/setup.sh, which makes the Debian 13 root /var/cache/tributary/pg17-trixie "
              "(its apt lists come with it)",
}


def _stanzas(text: str, keep: set[str]):
    for block in text.split("\n\n"):
        fields, key = {}, None
        for line in block.split("\n"):
            if not line:
                continue
            if line[0] in " \t":
                if key in keep:
                    fields[key] += "\n" + line
            elif ":" in line:
                key, _, value = line.partition(":")
                if key in keep:
                    fields[key] = value.strip()
        if fields:
            yield fields


def _long(raw: str) -> str:
    """Description-en's continuation lines as plain text (the first line is the title)."""
    _, _, rest = raw.partition("\n")
    lines = [ln.strip() for ln in rest.split("\n")]
    text = " ".join("" if ln == "." else ln for ln in lines)
    return re.sub(r"\s+", " ", text).strip()


def _find(dirs, suite: str):
    for d in dirs:
        pk = sorted(glob.glob(os.path.join(d, f"*dists_{suite}_main_binary-amd64_Packages*")))
        tr = sorted(glob.glob(os.path.join(d, f"*dists_{suite}_main_i18n_Translation-en*")))
        rel = os.path.join(d, f"deb.debian.org_debian_dists_{suite}_InRelease")
        if pk:
            return pk[0], (tr[0] if tr else None), (rel if os.path.exists(rel) else None)
    raise SystemExit(f"debian_em_data: no {suite} main amd64 Packages list in {', '.join(dirs)}: {HOWTO[suite]}")


def release_date(path: str | None) -> str | None:
    if not path:
        return None
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("Date:"):
                return line.split(":", 1)[1].strip()
    return None


def suite(name: str, dirs) -> tuple[dict, dict]:
    """({package: record}, info) for one suite; the first stanza of a package name wins."""
    pk, tr, rel = _find(dirs, name)
    longs = {}
    if tr:
        for s in _stanzas(read_text(tr), {"Description-md5", "Description-en"}):
            if "Description-md5" in s and "Description-en" in s:
                longs[s["Description-md5"]] = _long(s["Description-en"])
    out = {}
    for s in _stanzas(read_text(pk), {"Package", "Description", "Description-md5", "Maintainer", "Section", "Homepage"}):
        p = s.get("Package")
        if not p or p in out:
            continue
        desc = s.get("Description", "")
        title = desc.split("\n", 1)[0].strip()
        long = longs.get(s.get("Description-md5", "")) or (_long(desc) if "\n" in desc else "")
        out[p] = {"title": title or None, "description": long[:DESC_CHARS] or None,
                  "maintainer": s.get("Maintainer") or None, "section": s.get("Section") or None,
                  "homepage": s.get("Homepage") or None}
    info = {"suite": name, "packages_list": pk, "translation_list": tr, "inrelease": rel,
            "date": release_date(rel), "packages": len(out), "with_long_description": sum(
                1 for r in out.values() if r["description"])}
    return out, info


def _keyed(prefix: str, names: list[str], recs: dict, rng: random.Random) -> tuple[dict, dict]:
    names = list(names)
    rng.shuffle(names)
    keys = {n: f"{prefix}{i:05d}" for i, n in enumerate(names)}
    return {keys[n]: recs[n] for n in names}, keys


def repeated_titles(rows: dict) -> dict:
    c = Counter(r["title"] for r in rows.values() if r["title"])
    rep = {t: n for t, n in c.items() if n > 1}
    return {"rows_with_repeated_title": sum(rep.values()), "distinct_repeated_titles": len(rep),
            "most_common": c.most_common(5)}


def build(which: str, seed: int = 0, n_suites: int = 5000, n_sparse: int = 1000, n_shared: int = 100):
    """(left, right, truth {(left key, right key)}, columns, info)."""
    bw, ibw = suite("bookworm", BOOKWORM_DIRS)
    tx, itx = suite("trixie", TRIXIE_DIRS)
    both = sorted(set(bw) & set(tx))
    rng = random.Random(f"{which}:{seed}")
    if which == "debian_suites":
        names = rng.sample(both, n_suites)
        left, kl = _keyed("b", names, bw, rng)
        right, kr = _keyed("t", names, tx, rng)
        truth = {(kl[n], kr[n]) for n in names}
    elif which == "debian_sparse":
        shared = rng.sample(both, n_shared)
        sset = set(shared)
        lonly = rng.sample(sorted(set(bw) - sset), n_sparse - n_shared)
        taken = sset | set(lonly)
        ronly = rng.sample(sorted(set(tx) - taken), n_sparse - n_shared)
        left, kl = _keyed("b", shared + lonly, bw, rng)
        right, kr = _keyed("t", shared + ronly, tx, rng)
        truth = {(kl[n], kr[n]) for n in shared}
    else:
        raise SystemExit(f"unknown Debian dataset {which}")
    info = {"bookworm": ibw, "trixie": itx, "packages_in_both_suites": len(both), "seed": seed,
            "truth": "same binary package name in both suites (names are not columns)",
            "description_chars": DESC_CHARS,
            "share_with_partner": {"left": len({l for l, _ in truth}) / len(left),
                                   "right": len({r for _, r in truth}) / len(right)},
            "repeated_titles": {"left": repeated_titles(left), "right": repeated_titles(right)},
            "partner_title_equal": sum(left[l]["title"] == right[r]["title"] for l, r in truth) / len(truth)}
    return left, right, truth, COLUMNS, info


def summary(which: str, left, right, truth, info) -> str:
    rl, rr = info["repeated_titles"]["left"], info["repeated_titles"]["right"]
    return (f"{which}: {len(left)} x {len(right)} rows, {len(truth)} true pairs; share with a partner left "
            f"{info['share_with_partner']['left']:.2f}, right {info['share_with_partner']['right']:.2f}; rows whose "
            f"title repeats on their side: left {rl['rows_with_repeated_title']} ({rl['distinct_repeated_titles']} "
            f"titles), right {rr['rows_with_repeated_title']} ({rr['distinct_repeated_titles']} titles); partners "
            f"with the same title {info['partner_title_equal']:.2f}; bookworm InRelease Date {info['bookworm']['date']}"
            f" ({info['bookworm']['packages']} packages), trixie {info['trixie']['date']} "
            f"({info['trixie']['packages']} packages); {info['packages_in_both_suites']} names in both")


if __name__ == "__main__":
    for w in sys.argv[1:] or ["debian_suites", "debian_sparse"]:
        l, r, t, cols, inf = build(w)
        print(summary(w, l, r, t, inf))
        print("  most common titles left:", inf["repeated_titles"]["left"]["most_common"])
