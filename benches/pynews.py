#!/usr/bin/env python3
"""CPython's changelog ("What's New / Changelog", Misc/NEWS) as a relational, time-stamped dataset in
which most of the latest rows are COLD (their issue has no earlier entry), for benches/learn.py's
`cold-pynews` task.

Source: Debian bookworm's `python3.11-doc` package (3.11.2-6+deb12u9 when this was written; the
upstream 3.11.2 changelog, unchanged by Debian), file
usr/share/doc/python3.11/html/whatsnew/changelog.html.gz: 95 releases from Python 3.5.0 alpha 1
(2015-02-08) to 3.11.2 final (2023-02-07), 10,017 entries, each under one section heading
(Library, Core and Builtins, Tests, IDLE, Build, Documentation, Windows, C API, Security,
Tools/Demos, macOS: 11 classes). The .deb is fetched with `apt-get download python3.11-doc` into
~/.cache/tributary/pynews (or taken from /usr/share/doc/python3.11 where the package is installed);
only that one file is read.

Tables (created in the current schema, dropped first):

    release_line(line text PK)                                   '3.11', '3.10', ... (7)
    release(release_id int PK, line text -> release_line, name text, released date)     (95)
    issue(issue_id text PK, tracker text)                        'gh-92173' / 'bpo-34052'
    person(person_id int PK, name text UNIQUE)                   from "Patch by X and Y." and alike
    module(module text PK)                                       the stdlib modules the changelog
                                                                 links to (its #module-X anchors)
    news_entry(entry_id int PK, release_id int -> release, issue_id text -> issue (NULL for 67),
               released date NOT NULL (the release's date: the as_of), body text, section text)
    entry_person(entry_id -> news_entry, person_id -> person, PK both)     a link table
    entry_module(entry_id -> news_entry, module -> module, PK both)        a link table

news_entry.section is the label ("which part of CPython does this change belong to?"); body is
the entry's text with its leading issue reference ("gh-92173: ") removed (the reference is the
issue_id foreign key). An entry mentions a module when it links to the module's library page,
when a code span starts with the module's name (`asyncio.Task`), or when the bare name (5+
characters, not an English word of the short stoplist below) or "NAME module" appears in its text.
Contributors: names after "patch by", "contributed by", "written by", "implemented by", "reported
by" (split on "and" and commas; 1-4 capitalised words).

Usage: pynews.py [--dsn DSN]   (loads the tables; prints the row counts)
"""
from __future__ import annotations

import argparse
import gzip
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

PACKAGE = "python3.11-doc"
MEMBER = "usr/share/doc/python3.11/html/whatsnew/changelog.html.gz"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tributary" / "pynews"
SECTIONS = {"Library", "Core and Builtins", "Tests", "IDLE", "Build", "Documentation", "Windows", "C API",
            "Security", "Tools/Demos", "macOS"}
# Module names that are also ordinary words: counted only as links, code spans or "NAME module".
WORDS = {"array", "types", "token", "queue", "string", "random", "select", "signal", "secrets", "struct",
         "numbers", "parser", "symbol", "warnings", "locale", "codecs", "keyword", "builtins", "calendar",
         "operator", "profile", "platform", "resource", "decimal", "fractions", "readline", "formatter",
         "statistics", "traceback"}


def changelog_path() -> tuple[Path, str]:
    """(the changelog.html.gz file, where it came from: the installed package or the .deb's name)."""
    installed = Path("/") / MEMBER
    if installed.exists():
        return installed, f"installed {PACKAGE}"
    CACHE.mkdir(parents=True, exist_ok=True)
    out = CACHE / MEMBER
    debs = sorted(CACHE.glob(f"{PACKAGE}_*.deb"))
    if not debs:
        r = subprocess.run(["apt-get", "download", PACKAGE], cwd=CACHE, capture_output=True, text=True)
        if r.returncode != 0:      # no package lists yet: update them once, then try again
            subprocess.run(["apt-get", "update", "-qq"], check=False)
            subprocess.run(["apt-get", "download", PACKAGE], cwd=CACHE, check=True)
        debs = sorted(CACHE.glob(f"{PACKAGE}_*.deb"))
    if not out.exists():
        tar = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(debs[-1])], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(CACHE), f"./{MEMBER}"], input=tar, check=True)
    return out, debs[-1].name


class _Changelog(HTMLParser):
    """Collects the top-level <li> of each section list, with their text, links and code spans."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.release = self.date = self.section = None
        self.heading = None
        self.htext = ""
        self.ul = 0
        self.code = 0
        self.cur = None
        self.entries: list[dict] = []

    def handle_starttag(self, tag, attrs):
        if tag in ("h2", "h3"):
            self.heading, self.htext = tag, ""
        elif tag == "ul":
            self.ul += 1
        elif tag == "li" and self.ul == 1 and self.section in SECTIONS and self.cur is None:
            self.cur = {"release": self.release, "date": self.date, "section": self.section, "text": "",
                        "links": [], "code": []}
        elif tag == "a" and self.cur is not None:
            self.cur["links"].append(dict(attrs).get("href") or "")
        elif tag == "code" and self.cur is not None:
            self.code += 1
            if self.code == 1:
                self.cur["code"].append("")

    def handle_endtag(self, tag):
        if tag == self.heading:
            h = self.htext.replace("¶", "").strip()
            if tag == "h2":
                self.release, self.date, self.section = h, None, None
            else:
                self.section = h if self.release and self.release.startswith("Python ") else None
            self.heading = None
        elif tag == "ul":
            self.ul -= 1
        elif tag == "code" and self.cur is not None:
            self.code -= 1
        elif tag == "li" and self.cur is not None and self.ul == 1:
            self.entries.append(self.cur)
            self.cur = None

    def handle_data(self, data):
        if self.heading:
            self.htext += data
        if self.cur is not None:
            self.cur["text"] += data
            if self.code:
                self.cur["code"][-1] += data
        elif self.release and self.date is None:
            m = re.search(r"Release date: (\d{4}-\d\d-\d\d)", data)
            if m:
                self.date = m.group(1)


PEOPLE = re.compile(r"(?:[Pp]atch(?:ed)?|[Cc]ontributed|[Ww]ritten|[Ii]mplemented|[Rr]eported) by\s+([^.;:()]+)")
NAME = re.compile(r"^[A-Z][\w'’-]*\.?(?: [A-Z]?[\w'’-]+\.?){0,3}$")


def _people(text: str) -> list[str]:
    out = []
    text = re.sub(r"\b([A-Z])\.(?= ?[A-Z])", "\\1\u00a7", text)      # keep initials: "Erlend E. Aasland"
    for m in PEOPLE.finditer(text):
        for part in re.split(r",\s*|\s+and\s+", m.group(1)):
            part = part.strip().replace("\u00a7", ".")
            if NAME.match(part) and part not in out:
                out.append(part)
    return out


def read() -> dict:
    """The tables as lists of dicts: release_line, release, issue, person, module, news_entry,
    entry_person, entry_module; plus 'source' (where the file came from)."""
    path, source = changelog_path()
    raw = gzip.open(path, "rt", encoding="utf-8").read()
    p = _Changelog()
    p.feed(raw)
    modules = set(re.findall(r"#module-([A-Za-z_][\w.]*)", raw))
    bare = {m for m in modules if "." not in m and len(m) >= 5 and m not in WORDS}
    releases: dict[str, dict] = {}
    issues: dict[str, str] = {}
    people: dict[str, int] = {}
    entries, entry_person, entry_module = [], [], []
    for e in p.entries:
        if e["date"] is None:
            continue
        rel = releases.get(e["release"])
        if rel is None:
            line = re.match(r"Python (\d+\.\d+)", e["release"]).group(1)
            rel = releases[e["release"]] = {"release_id": len(releases) + 1, "line": line, "name": e["release"],
                                            "released": e["date"]}
        text = " ".join(e["text"].split())
        m = re.match(r"((?:bpo|gh)-\d+)(?:,\s*(?:bpo|gh)-\d+)*:\s*", text)
        issue = None
        if m:
            issue = m.group(1)
            issues[issue] = "github" if issue.startswith("gh") else "bpo"
            text = text[m.end():]
        eid = len(entries) + 1
        entries.append({"entry_id": eid, "release_id": rel["release_id"], "issue_id": issue,
                        "released": e["date"], "body": text, "section": e["section"]})
        mods = set()
        for href in e["links"]:
            m2 = re.match(r"\.\./library/([\w.]+?)(?:-[\w-]+)?\.html", href)
            if m2 and m2.group(1) in modules:
                mods.add(m2.group(1))
        for span in e["code"]:
            parts = span.strip().split(".")
            for i in range(len(parts), 0, -1):
                if ".".join(parts[:i]) in modules:
                    mods.add(".".join(parts[:i]))
                    break
        for w in re.findall(r"[A-Za-z_][\w.]*\w", text):
            if w in bare:
                mods.add(w)
        for w in re.findall(r"\b([a-z_][\w.]*) module\b", text):
            if w in modules:
                mods.add(w)
        entry_module += [(eid, mod) for mod in sorted(mods)]
        for name in _people(text):
            entry_person.append((eid, people.setdefault(name, len(people) + 1)))
    return {"source": source,
            "release_line": sorted({r["line"] for r in releases.values()}),
            "release": list(releases.values()),
            "issue": issues, "person": people, "module": sorted(modules),
            "news_entry": entries, "entry_person": entry_person, "entry_module": entry_module}


def load(dsn: str) -> dict:
    import psycopg
    t = read()
    with psycopg.connect(dsn) as conn:
        conn.execute("DROP TABLE IF EXISTS entry_module, entry_person, news_entry, module, person, issue, release, "
                     "release_line CASCADE")
        conn.execute("CREATE TABLE release_line (line text PRIMARY KEY)")
        conn.execute("CREATE TABLE release (release_id int PRIMARY KEY, line text NOT NULL REFERENCES release_line, "
                     "name text NOT NULL, released date NOT NULL)")
        conn.execute("CREATE TABLE issue (issue_id text PRIMARY KEY, tracker text NOT NULL)")
        conn.execute("CREATE TABLE person (person_id int PRIMARY KEY, name text NOT NULL UNIQUE)")
        conn.execute("CREATE TABLE module (module text PRIMARY KEY)")
        conn.execute("""CREATE TABLE news_entry (
            entry_id int PRIMARY KEY, release_id int NOT NULL REFERENCES release,
            issue_id text REFERENCES issue, released date NOT NULL, body text NOT NULL, section text)""")
        conn.execute("CREATE TABLE entry_person (entry_id int NOT NULL REFERENCES news_entry, "
                     "person_id int NOT NULL REFERENCES person, PRIMARY KEY (entry_id, person_id))")
        conn.execute("CREATE TABLE entry_module (entry_id int NOT NULL REFERENCES news_entry, "
                     "module text NOT NULL REFERENCES module, PRIMARY KEY (entry_id, module))")
        with conn.cursor() as cur:
            def copy(table, cols, rows):
                with cur.copy(f"COPY {table} ({', '.join(cols)}) FROM STDIN") as cp:
                    for r in rows:
                        cp.write_row(r)
            copy("release_line", ["line"], [(x,) for x in t["release_line"]])
            copy("release", ["release_id", "line", "name", "released"],
                 [(r["release_id"], r["line"], r["name"], r["released"]) for r in t["release"]])
            copy("issue", ["issue_id", "tracker"], t["issue"].items())
            copy("person", ["person_id", "name"], [(i, n) for n, i in t["person"].items()])
            copy("module", ["module"], [(m,) for m in t["module"]])
            cols = ["entry_id", "release_id", "issue_id", "released", "body", "section"]
            copy("news_entry", cols, [[e[c] for c in cols] for e in t["news_entry"]])
            copy("entry_person", ["entry_id", "person_id"], t["entry_person"])
            copy("entry_module", ["entry_id", "module"], t["entry_module"])
        conn.execute("CREATE INDEX ON news_entry (released)")
        conn.execute("CREATE INDEX ON news_entry (issue_id)")
        conn.execute("CREATE INDEX ON news_entry (release_id)")
        conn.execute("CREATE INDEX ON entry_person (person_id)")
        conn.execute("CREATE INDEX ON entry_module (module)")
        conn.commit()
        conn.autocommit = True
        for name in ("release_line", "release", "issue", "person", "module", "news_entry", "entry_person",
                     "entry_module"):
            conn.execute(f"ANALYZE {name}")
    return {k: len(v) for k, v in t.items() if k != "source"} | {"source": t["source"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dsn", default="")
    a = ap.parse_args(argv)
    print(load(a.dsn), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
