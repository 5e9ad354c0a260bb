#!/usr/bin/env python3
"""The sentence-transformers baseline (issue 49 item 4): all-MiniLM-L6-v2 through
sentence-transformers on the same machine, in the same lease, on the same texts as tributary's
runs, end to end from Python strings (tokenization included), fp16 (`model.half()`) and fp32, at
several batch sizes; writes st.md and st.csv, and, when a file of tributary's CPU rows is given
(run.sh's `pg` phase writes one), the per-row cosine of these embeddings against them.

Run on the GPU machine with /opt/torch/.venv/bin/python (torch, sentence-transformers, transformers,
numpy, safetensors); run.sh's `st` phase does. The model folder is .gpu/st-model/all-MiniLM-L6-v2
from the small carry archive (scripts/gpu/st_model.py): config.json, tokenizer files and
model.safetensors with the weights STORED AS FP16 (45 MB instead of 90): the fp16 runs use them as
they are; the fp32 runs use them upcast to fp32 (`model.float()`), i.e. fp16-rounded weights
computed in fp32, which changes the vectors very slightly and the speed not at all.

The model is built as `models.Transformer(dir) + models.Pooling(384, "mean") + models.Normalize()`
(all-MiniLM-L6-v2's modules.json), max_seq_length 256 as tributary's tributary.json. Timed:
`model.encode(texts, batch_size=B, convert_to_numpy=True, normalize_embeddings=False)` over the
first --rows texts (the pg phase's row count), between torch.cuda.synchronize() calls, after one
warm-up pass per dtype. Measurements go in rounds (every config once, most important first, then
again) until --time-limit is near; each config's figure is the median of its rounds.

Usage: st_baseline.py --model DIR --texts FILE --out DIR [--rows 16384] [--batches 128,256,512,1024]
                      [--dtypes fp16,fp32] [--repeats 3] [--time-limit 85] [--device cuda]
                      [--cpu-rows FILE]   (lines "id<TAB>[x1,x2,...]", id = 1-based line of --texts)
"""
from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import time

T_START = time.monotonic()


def elapsed() -> float:
    return time.monotonic() - T_START


def read_texts(path: str, n: int) -> list[str]:
    # the texts file's format (scripts/gpu/texts.py): one per line, newlines written as `\n`;
    # tools/bench and the pg phase turn them back into newlines, so do we
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            out.append(line.rstrip("\n").replace("\\n", "\n"))
            if len(out) >= n:
                break
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--texts", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rows", type=int, default=16384)
    ap.add_argument("--batches", default="128,256,512,1024")
    ap.add_argument("--dtypes", default="fp16,fp32")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--time-limit", type=float, default=85.0,
                    help="seconds from the start of this script after which no new measurement starts")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--max-seq-length", type=int, default=256)
    ap.add_argument("--cpu-rows", default="")
    ap.add_argument("--warmup-rows", type=int, default=2048)
    a = ap.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    md_path, csv_path = os.path.join(a.out, "st.md"), os.path.join(a.out, "st.csv")
    md = []

    def say(line: str = "") -> None:
        print(line, flush=True)
        md.append(line)

    def write_md() -> None:
        with open(md_path, "w", encoding="utf-8") as f:
            f.write("\n".join(md) + "\n")

    import numpy as np
    import torch
    import transformers
    import sentence_transformers
    from sentence_transformers import SentenceTransformer, models

    cuda = a.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        say("## sentence-transformers baseline\n\n**FAILED**: torch.cuda.is_available() is False")
        write_md()
        return 1
    card = torch.cuda.get_device_name(0) if cuda else f"cpu ({os.cpu_count()} cores, {torch.get_num_threads()} torch threads)"

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    texts = read_texts(a.texts, a.rows)
    batches = [int(b) for b in a.batches.split(",") if b.strip()]
    dtypes = [d.strip() for d in a.dtypes.split(",") if d.strip()]
    t_import = elapsed()
    tr = models.Transformer(a.model, max_seq_length=a.max_seq_length)
    pool = models.Pooling(384, "mean")
    model = SentenceTransformer(modules=[tr, pool, models.Normalize()], device=a.device)
    model.eval()
    t_load = elapsed() - t_import
    auto = getattr(tr, "auto_model", None) or getattr(tr, "model", None)
    attn = getattr(getattr(auto, "config", None), "_attn_implementation", "?")
    unpad = getattr(tr, "unpad_inputs", "n/a")

    say(f"## sentence-transformers baseline: all-MiniLM-L6-v2, {len(texts)} real texts, {card}")
    say("")
    say(f"sentence-transformers {sentence_transformers.__version__}, transformers {transformers.__version__}, "
        f"torch {torch.__version__} (CUDA {torch.version.cuda}), numpy {np.__version__}; "
        f"imports {t_import:.1f} s, model load {t_load:.1f} s; model {a.model} (weights stored fp16; "
        f"fp32 = those upcast); max_seq_length {model.max_seq_length}; attention {attn}, unpad_inputs {unpad}; "
        f"`encode(texts, batch_size=B, convert_to_numpy=True, normalize_embeddings=False)` end to end "
        f"from Python strings (tokenization included), after one warm-up pass of {a.warmup_rows} texts per dtype; "
        f"median of the rounds that fit in {a.time_limit:.0f} s.")

    def set_dtype(d: str) -> None:
        if d == "fp16":
            model.half()
        else:
            model.float()

    # tokenization alone (the fast tokenizer, as encode() calls it), once
    t = time.perf_counter()
    prep = getattr(model, "preprocess", None)   # 6.x; tokenize() is its deprecated alias
    if prep is not None:
        prep(inputs=texts[: min(len(texts), 4096)])
    else:
        model.tokenize(texts[: min(len(texts), 4096)])
    tok_rate = min(len(texts), 4096) / (time.perf_counter() - t)

    # the order of importance: batch 512 first (the figure of record), then larger, then smaller
    order = sorted(batches, key=lambda b: (b != 512, b < 512, b if b > 512 else -b))
    configs = [(d, b) for b in order for d in dtypes]
    runs: dict[tuple[str, int], list[float]] = {c: [] for c in configs}
    warmed: set[str] = set()
    current = None
    guess = {c: len(texts) / 3000.0 for c in configs}  # seconds, until measured
    stopped = ""
    for rnd in range(a.repeats):
        for c in configs:
            d, b = c
            if elapsed() + guess[c] + (0 if d in warmed else guess[c] / 4) > a.time_limit:
                stopped = f"round {rnd + 1} stopped at {d} batch {b}: {elapsed():.0f} s of {a.time_limit:.0f}"
                break
            if current != d:
                set_dtype(d)
                current = d
            if d not in warmed:
                with torch.inference_mode():
                    model.encode(texts[: a.warmup_rows], batch_size=512, convert_to_numpy=True,
                                 normalize_embeddings=False, show_progress_bar=False)
                sync()
                warmed.add(d)
            sync()
            t = time.perf_counter()
            emb = model.encode(texts, batch_size=b, convert_to_numpy=True,
                               normalize_embeddings=False, show_progress_bar=False)
            sync()
            s = time.perf_counter() - t
            if emb.shape != (len(texts), 384) or not np.isfinite(emb).all() or float(np.abs(emb).sum()) == 0.0:
                say(f"**FAILED**: {d} batch {b}: output {emb.shape}, finite {np.isfinite(emb).all()}")
                write_md()
                return 1
            runs[c].append(s)
            guess[c] = s
            print(f"st: {d} batch {b} round {rnd + 1}: {s:.2f} s, {len(texts) / s:.0f} rows/s ({elapsed():.0f} s)", flush=True)
        if stopped:
            break

    say("")
    say(f"tokenizer alone: {tok_rate:.0f} rows/s ({min(len(texts), 4096)} texts)")
    say("")
    say("| dtype | batch | rows | rounds | median s | rows/s | rows/s of each round |")
    say("|---|---:|---:|---:|---:|---:|---|")
    rows_out = []
    best = None
    for c in configs:
        d, b = c
        if not runs[c]:
            say(f"| {d} | {b} | {len(texts)} | 0 | | | not measured (time box) |")
            continue
        med = statistics.median(runs[c])
        rate = len(texts) / med
        each = " ".join(f"{len(texts) / s:.0f}" for s in runs[c])
        say(f"| {d} | {b} | {len(texts)} | {len(runs[c])} | {med:.3f} | {rate:.0f} | {each} |")
        rows_out.append([d, b, len(texts), len(runs[c]), f"{med:.4f}", f"{rate:.1f}", each, card.replace(",", ";")])
        if best is None or rate > best[2]:
            best = (d, b, rate)
    with open(csv_path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["dtype", "batch", "rows", "rounds", "median_s", "rows_per_s", "rows_per_s_each", "device"])
        w.writerows(rows_out)
    say("")
    if best:
        say(f"best: **{best[2]:.0f} rows/s** ({best[0]}, batch {best[1]}) on {card}")
    if stopped:
        say(f"(time box: {stopped})")

    # the per-row cosine against tributary's CPU rows, when the pg phase left them
    if a.cpu_rows and os.path.exists(a.cpu_rows):
        ids, ref = [], []
        with open(a.cpu_rows, encoding="utf-8") as f:
            for line in f:
                i, v = line.rstrip("\n").split("\t", 1)
                if int(i) <= len(texts):
                    ids.append(int(i))
                    ref.append(np.array(v.strip("[]").split(","), dtype=np.float32))
        if ids:
            ref = np.stack(ref)
            ref /= np.linalg.norm(ref, axis=1, keepdims=True)
            sub = [texts[i - 1] for i in ids]
            say("")
            for d in dtypes:
                set_dtype(d)
                e = model.encode(sub, batch_size=512, convert_to_numpy=True,
                                 normalize_embeddings=False, show_progress_bar=False).astype(np.float32)
                e /= np.linalg.norm(e, axis=1, keepdims=True)
                cos = (e * ref).sum(axis=1)
                say(f"cosine ST {d} vs tributary CPU rows ({os.path.basename(a.cpu_rows)}): {len(ids)} rows, "
                    f"min {cos.min():.6f}, mean {cos.mean():.6f}, below 0.999: {int((cos < 0.999).sum())}, "
                    f"below 0.99: {int((cos < 0.99).sum())}")
    elif a.cpu_rows:
        say("")
        say(f"(no {a.cpu_rows}: no cosine against tributary's CPU rows)")
    say("")
    say(f"({elapsed():.0f} s in all)")
    write_md()
    return 0


if __name__ == "__main__":
    sys.exit(main())
