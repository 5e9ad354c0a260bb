#!/usr/bin/env python3
"""Search over chunks against the truncated single vector, on real long documents: Debian's
manual pages (section 1, rendered to plain text by man/groff).

For each of N documents longer than three windows of the model, a query is a sentence from
beyond the first window (so the truncated vector never saw it): a sentence of 60 to 200
characters, verbatim (line wraps joined), from the document's third chunk or later, that no other
of the documents contains. Each query is run twice:
- truncated: documents ranked by `embedding <=> tributary_embed(query)` over `docs.embedding`,
  one vector per document of its first 256 tokens (what tributary_embed_column writes);
- chunks: documents ranked by their best chunk, `min(embedding <=> query)` over `doc_chunks`
  (tributary_chunk, then tributary_embed_column on the chunks).
Prints recall@1 and recall@5 of the right document for both, and what was embedded. A
benchmark, not a test: it asserts nothing.

Usage: benches/chunks.py --dsn DSN [--docs 60] [--model all-MiniLM-L6-v2]
"""
from __future__ import annotations

import argparse
import gzip
import os
import re
import subprocess
import time
from pathlib import Path

import psycopg

MAN1 = Path("/usr/share/man/man1")


def render(page: Path) -> str:
    """The page as plain text (man -l, no hyphenation or justification, 100 columns)."""
    env = dict(os.environ, MANWIDTH="100", MAN_KEEP_FORMATTING="0")
    out = subprocess.run(["man", "--no-hyphenation", "--no-justification", "-P", "cat", "-l", str(page)],
                         capture_output=True, text=True, env=env, timeout=30)
    text = re.sub(r".\x08", "", out.stdout)          # overstrike (bold, underline)
    return re.sub(r"[ \t]+", " ", text).strip()


def pages(limit: int) -> list[tuple[str, str]]:
    """`limit` section-1 pages of 3,000 to 60,000 characters, every k-th of the sorted list
    (deterministic), as (name, text)."""
    names = sorted(p for p in MAN1.iterdir() if p.name.endswith(".1.gz"))
    picked = []
    step = max(1, len(names) // (limit * 6))
    for p in names[::step]:
        try:
            with gzip.open(p, "rt", errors="replace") as f:
                if f.read(2000).lstrip().startswith(".so "):
                    continue          # an alias of another page
        except OSError:
            continue
        text = render(p)
        if 3000 <= len(text) <= 60000:
            picked.append((p.name.removesuffix(".1.gz"), text))
        if len(picked) == limit:
            break
    return picked


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dsn", required=True)
    ap.add_argument("--docs", type=int, default=60)
    ap.add_argument("--model", default="all-MiniLM-L6-v2")
    a = ap.parse_args()
    t0 = time.time()
    docs = pages(a.docs)
    with psycopg.connect(a.dsn, autocommit=True) as c:
        c.execute("SET tributary.truncation = 'truncate'")
        c.execute("SET tributary.progress_interval = 0")
        c.execute("DROP TABLE IF EXISTS doc_chunks, docs")
        dim = c.execute("SELECT dimension FROM tributary.models WHERE name = %s", (a.model,)).fetchone()[0]
        c.execute(f"CREATE TABLE docs (id int PRIMARY KEY, name text, body text, embedding vector({dim}))")
        with c.cursor().copy("COPY docs (id, name, body) FROM STDIN") as cp:
            for i, (name, text) in enumerate(docs, 1):
                cp.write_row((i, name, text))
        c.execute(f"CREATE TABLE doc_chunks (doc_id int, seq int, chunk text, start_char int, end_char int, "
                  f"embedding vector({dim}), PRIMARY KEY (doc_id, seq))")
        c.execute("INSERT INTO doc_chunks (doc_id, seq, chunk, start_char, end_char) "
                  "SELECT d.id, k.seq, k.chunk, k.start_char, k.end_char FROM docs d, tributary_chunk(d.body, %s) k",
                  (a.model,))
        t1 = time.time()
        c.execute("SELECT tributary_embed_column('docs', '{body}', 'embedding', model => %s)", (a.model,))
        t2 = time.time()
        c.execute("SELECT tributary_embed_column('doc_chunks', '{chunk}', 'embedding', model => %s)", (a.model,))
        t3 = time.time()
        # Tokens of the documents, as the sum of their chunks' (no overlap: the chunks cover the text).
        tokens, truncated = c.execute(
            "SELECT sum(n), count(*) FILTER (WHERE k > 1) FROM (SELECT doc_id, count(*) AS k, "
            "sum(cardinality(tributary_tokenize(chunk, %s)) - 2) AS n FROM doc_chunks GROUP BY doc_id) s",
            (a.model,)).fetchone()
        n_chunks = c.execute("SELECT count(*) FROM doc_chunks").fetchone()[0]

        # Queries: a sentence of 60-200 characters from the third chunk on (past the first window),
        # line wraps joined, that no other document contains (boilerplate such as "display this help
        # and exit" would have no one right answer).
        bodies = dict(c.execute("SELECT id, regexp_replace(body, '\\s+', ' ', 'g') FROM docs").fetchall())
        queries = []
        for doc_id in sorted(bodies):
            rows = c.execute("SELECT chunk FROM doc_chunks WHERE doc_id = %s AND seq >= 3 ORDER BY seq",
                             (doc_id,)).fetchall()
            sentences = [x.strip() for (chunk,) in rows
                         for x in re.split(r"(?<=[.!?])\s+", re.sub(r"\s+", " ", chunk)) if 60 <= len(x.strip()) <= 200]
            unique = [x for x in sentences if sum(x in b for b in bodies.values()) == 1]
            if unique:
                queries.append((doc_id, unique[len(unique) // 2]))
        hits = {"truncated": [0, 0], "chunks": [0, 0]}
        for doc_id, q in queries:
            qv = c.execute("SELECT tributary_embed(%s, %s)::text", (q, a.model)).fetchone()[0]
            single = [r[0] for r in c.execute(
                "SELECT id FROM docs ORDER BY embedding <=> %s::vector LIMIT 5", (qv,)).fetchall()]
            best = [r[0] for r in c.execute(
                "SELECT doc_id FROM doc_chunks GROUP BY doc_id ORDER BY min(embedding <=> %s::vector) LIMIT 5",
                (qv,)).fetchall()]
            for key, ranked in (("truncated", single), ("chunks", best)):
                hits[key][0] += ranked[:1] == [doc_id]
                hits[key][1] += doc_id in ranked
    n = len(queries)
    print(f"{len(docs)} manual pages (section 1), {tokens} tokens ({truncated} documents longer than the 256-token window), "
          f"{n_chunks} chunks; model {a.model}; {n} queries (a sentence from the third chunk or later, found in no other document)")
    print(f"embedding: documents {t2 - t1:.1f} s, chunks {t3 - t2:.1f} s; whole run {time.time() - t0:.0f} s")
    print("| search | recall@1 | recall@5 |")
    print("|---|---|---|")
    for key, label in (("truncated", "one vector per document (first 256 tokens)"), ("chunks", "chunks (best chunk per document)")):
        print(f"| {label} | {hits[key][0] / n:.2f} ({hits[key][0]}/{n}) | {hits[key][1] / n:.2f} ({hits[key][1]}/{n}) |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
