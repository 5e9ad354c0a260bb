#!/usr/bin/env python3
"""The pipeline a user writes today without tributary, as a baseline: read rows from PostgreSQL,
tokenize with HF tokenizers, run the same ONNX model with ONNX Runtime's Python API, write the
vectors back. Same model file, same truncation (max_length tokens from tributary.json), same
thread count as the tributary run it is compared with.

A fair, good user script: rows are sorted by token count before batching (as
sentence-transformers' encode() does), batches are padded to their longest row, and vectors go
back with one COPY into a temporary table and one UPDATE, in one transaction.

Prints one JSON line: rows, tokens (real, non-padding), seconds (end to end, model loading
excluded), rows_per_s, tokens_per_s, and the time split read_s / tokenize_s / infer_s / write_s.

`--naive` is the loop people write first (and what a remote embedding API forces): one row at a
time, one ONNX Runtime run of batch 1 and one UPDATE per row, one transaction at the end.

Usage: python_baseline.py [--dsn DSN] [--table T] [--model-dir DIR] [--threads N] [--batch-size N] [--limit N]
                          [--precision fp32|int8] [--naive]
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import psycopg
from psycopg import sql
from tokenizers import Tokenizer

ROOT = Path(__file__).resolve().parent.parent


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dsn", default="")
    ap.add_argument("--table", default="debian_packages")
    ap.add_argument("--key", default="package")
    ap.add_argument("--text", default="description")
    ap.add_argument("--model-dir", type=Path, default=ROOT / "ort/models/all-MiniLM-L6-v2")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--batch-size", type=int, default=64, help="rows per ONNX Runtime run")
    ap.add_argument("--limit", type=int)
    ap.add_argument("--precision", default="fp32", help="which graph of tributary.json's files")
    ap.add_argument("--naive", action="store_true", help="one row per model run and per UPDATE")
    a = ap.parse_args(argv)

    meta = json.loads((a.model_dir / "tributary.json").read_text())
    tok = Tokenizer.from_file(str(a.model_dir / "tokenizer.json"))
    tok.enable_truncation(meta["max_length"])
    tok.no_padding()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = a.threads
    opts.inter_op_num_threads = 1
    session = ort.InferenceSession(str(a.model_dir / meta["files"][a.precision]), opts, providers=["CPUExecutionProvider"])
    if a.naive:
        return naive(a, tok, session)

    t = {"read_s": 0.0, "tokenize_s": 0.0, "infer_s": 0.0, "write_s": 0.0}
    start = time.perf_counter()
    with psycopg.connect(a.dsn) as conn:
        t0 = time.perf_counter()
        q = sql.SQL("SELECT {k}, {x} FROM {t} WHERE embedding IS NULL AND {x} IS NOT NULL").format(
            k=sql.Identifier(a.key), x=sql.Identifier(a.text), t=sql.Identifier(a.table))
        if a.limit:
            q = q + sql.SQL(" LIMIT {}").format(a.limit)
        rows = conn.execute(q).fetchall()
        t["read_s"] += time.perf_counter() - t0

        t0 = time.perf_counter()
        encodings = tok.encode_batch([r[1] for r in rows])
        ids = [e.ids for e in encodings]
        t["tokenize_s"] += time.perf_counter() - t0
        tokens = sum(map(len, ids))

        t0 = time.perf_counter()
        order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
        out = np.zeros((len(ids), meta["dimension"]), dtype=np.float32)
        for s in range(0, len(order), a.batch_size):
            idx = order[s:s + a.batch_size]
            width = len(ids[idx[0]])
            batch = np.zeros((len(idx), width), dtype=np.int32)
            mask = np.zeros_like(batch)
            for r, i in enumerate(idx):
                batch[r, :len(ids[i])] = ids[i]
                mask[r, :len(ids[i])] = 1
            out[idx] = session.run(["embedding"], {"input_ids": batch, "attention_mask": mask})[0]
        t["infer_s"] += time.perf_counter() - t0

        t0 = time.perf_counter()
        with conn.cursor() as cur:
            cur.execute("CREATE TEMP TABLE baseline_vectors (k text, e vector) ON COMMIT DROP")
            with cur.copy("COPY baseline_vectors (k, e) FROM STDIN") as cp:
                for (key, _), v in zip(rows, out):
                    cp.write_row((key, "[" + ",".join(map(repr, v.tolist())) + "]"))
            cur.execute(sql.SQL("UPDATE {t} AS t SET embedding = b.e FROM baseline_vectors b WHERE t.{k} = b.k").format(
                t=sql.Identifier(a.table), k=sql.Identifier(a.key)))
        conn.commit()
        t["write_s"] += time.perf_counter() - t0
    seconds = time.perf_counter() - start
    print(json.dumps({"pipeline": "python-ort", "rows": len(rows), "tokens": tokens, "seconds": seconds,
                      "rows_per_s": len(rows) / seconds, "tokens_per_s": tokens / seconds,
                      "threads": a.threads, "batch_size": a.batch_size} | t))
    return 0


def naive(a, tok, session) -> int:
    """One row at a time: tokenize it, run the model on a batch of 1, UPDATE its row."""
    start = time.perf_counter()
    tokens = 0
    with psycopg.connect(a.dsn) as conn:
        q = sql.SQL("SELECT {k}, {x} FROM {t} WHERE embedding IS NULL AND {x} IS NOT NULL").format(
            k=sql.Identifier(a.key), x=sql.Identifier(a.text), t=sql.Identifier(a.table))
        if a.limit:
            q = q + sql.SQL(" LIMIT {}").format(a.limit)
        rows = conn.execute(q).fetchall()
        update = sql.SQL("UPDATE {t} SET embedding = %s::vector WHERE {k} = %s").format(
            t=sql.Identifier(a.table), k=sql.Identifier(a.key))
        for key, text in rows:
            ids = tok.encode(text).ids
            tokens += len(ids)
            batch = np.array([ids], dtype=np.int32)
            v = session.run(["embedding"], {"input_ids": batch, "attention_mask": np.ones_like(batch)})[0][0]
            conn.execute(update, ("[" + ",".join(map(repr, v.tolist())) + "]", key))
        conn.commit()
    seconds = time.perf_counter() - start
    print(json.dumps({"pipeline": "python-naive", "rows": len(rows), "tokens": tokens, "seconds": seconds,
                      "rows_per_s": len(rows) / seconds, "tokens_per_s": tokens / seconds, "threads": a.threads}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
