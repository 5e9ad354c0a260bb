#!/usr/bin/env python3
"""Turns one run of benches/suite.sh into tables, the issue's targets as measured ratios, and the
throughput plot. Reports; asserts nothing.

Reads RESULTS_DIR/results.jsonl (one JSON line per measurement), RESULTS_DIR/sweep.csv
(tools/bench sweep: label, provider, graph, io_binding, batch, fixed_tokens, rows, rows_per_s,
tokens_per_s, padding_pct, ms_per_call) and RESULTS_DIR/criterion/<group>/<id>/new/*.json.
Writes RESULTS_DIR/report.md, benches/throughput.png and the part of BENCHMARKS.md between
`<!-- suite:begin -->` and `<!-- suite:end -->`.

Usage: report.py RESULTS_DIR [RESULTS_DIR...] [--benchmarks BENCHMARKS.md] [--plot benches/throughput.png]
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- suite:begin -->", "<!-- suite:end -->"

# What each method is, in the table's words.
METHODS = [
    ("engine", "engine only (tools/bench, no PostgreSQL), 1024 texts per call"),
    ("column", "tributary_embed_column, fp32"),
    ("column_int8", "tributary_embed_column, all-MiniLM-L6-v2-int8"),
    ("array", "tributary_embed(text[]), 1024 rows per call + UPDATE, from a DO loop"),
    ("row", "UPDATE ... SET embedding = tributary_embed(description): one call per row"),
    ("job", "job in a background worker (batch 256), create to last commit"),
    ("python", "Python: onnxruntime + tokenizers + psycopg (sorted batches of 64, COPY back), fp32"),
    ("python_int8", "the same Python pipeline on the int8 graph"),
    ("naive", "Python, one row per model run and per UPDATE"),
]


def load(out: Path):
    rows = [json.loads(l) for l in (out / "results.jsonl").read_text().splitlines() if l.strip()]
    sweep = []
    if (out / "sweep.csv").exists():
        with open(out / "sweep.csv") as f:
            for r in csv.reader(f):
                if r and r[0] != "label":
                    sweep.append(r)
    crit = []
    tokens_file = out / "criterion" / "tributary_tokens.json"
    tokens = json.loads(tokens_file.read_text()) if tokens_file.exists() else {}
    for est in sorted((out / "criterion").glob("**/new/estimates.json")):
        bench = json.loads((est.parent / "benchmark.json").read_text())
        mean_s = json.loads(est.read_text())["mean"]["point_estimate"] / 1e9
        elements = (bench.get("throughput") or {}).get("Elements")
        full = bench.get("full_id", "")
        t = tokens.get(full, {})
        padding = 1 - t["tokens"] / t["padded_tokens"] if t.get("padded_tokens") else None
        crit.append((bench.get("group_id"), full.split("/", 1)[-1], mean_s, elements, t.get("tokens"), padding))
    return rows, sweep, crit


def rate(r: dict):
    """(rows, seconds, tokens) of one measurement, whichever shape it was recorded in."""
    res = r.get("result")
    if isinstance(res, dict) and "seconds" in res:
        return res["rows"], res["seconds"], res.get("tokens", r.get("tokens"))
    return r["rows"], float(r["seconds"]), r.get("tokens")


def render(rows, sweep, crit) -> str:
    md = []
    flops = next((r for r in rows if r.get("bench") == "flops"), None)
    by_n = defaultdict(dict)
    for r in rows:
        if "rows" in r and r.get("bench") not in ("flops",):
            by_n[r["rows"]][r["bench"]] = r
    if flops:
        md.append(f"Machine: {flops['cpu']}, {flops['vcpus']} vCPUs; ONNX Runtime {flops['ort']}, "
                  f"{flops['threads']} intra-op threads everywhere; CPU execution provider.")
        md.append("")
    targets = []
    for n in sorted(by_n):
        m = by_n[n]
        tokens = next((r.get("tokens") for r in m.values() if r.get("tokens")), None)
        md.append(f"### {n:,} Debian package descriptions ({tokens:,} tokens)" if tokens else f"### {n:,} rows")
        md.append("")
        md.append("| method | rows | seconds | rows/s | tokens/s | vs Python fp32 | vs engine only |")
        md.append("|---|---:|---:|---:|---:|---:|---:|")
        rps = {}
        for key, _ in METHODS:
            if key in m:
                k_rows, secs, _tok = rate(m[key])
                rps[key] = k_rows / secs
        for key, label in METHODS:
            if key not in m:
                continue
            k_rows, secs, tok = rate(m[key])
            r = rps[key]
            tps = f"{tok / secs:,.0f}" if tok and k_rows == n else ""
            vs_py = f"{r / rps['python']:.2f}x" if "python" in rps else ""
            vs_eng = f"{r / rps['engine']:.2f}x" if "engine" in rps else ""
            note = f" (first {k_rows:,} rows)" if k_rows != n else ""
            md.append(f"| {label}{note} | {k_rows:,} | {secs:.1f} | {r:.1f} | {tps} | {vs_py} | {vs_eng} |")
        md.append("")
        left = {k: v.get("left_null") for k, v in m.items() if v.get("left_null") not in (None, 0)}
        md.append("Rows left without an embedding: " + (", ".join(f"{k} {v}" for k, v in left.items()) or "none") + ".")
        if "agreement_column_python" in m:
            md.append(f"Min cosine between tributary_embed_column's and the Python pipeline's vectors: "
                      f"{m['agreement_column_python']['result']['min']:.6f}.")
        if "int8_fidelity" in m:
            f = m["int8_fidelity"]["result"]
            md.append(f"int8 vs fp32 on these rows: cosine mean {f['cosine_mean']:.4f}, min {f['cosine_min']:.4f} "
                      f"({f['rows_below_0_99']} rows below 0.99); top-10 neighbours shared, over {f['queries']} query "
                      f"rows: mean {f['top10_overlap_mean']:.1%}, min {f['top10_overlap_min']:.0%}.")
        md.append("")
        if "column" in rps and "python" in rps:
            targets.append((f"tributary_embed_column ≥ 1.5x the Python pipeline (fp32, {n:,} rows)",
                            f"{rps['column'] / rps['python']:.2f}x", rps["column"] / rps["python"] >= 1.5))
        if "column_int8" in rps and "python_int8" in rps:
            targets.append((f"the same, both on the int8 graph ({n:,} rows)",
                            f"{rps['column_int8'] / rps['python_int8']:.2f}x", rps["column_int8"] / rps["python_int8"] >= 1.5))
        if "column_int8" in rps and "python" in rps:
            targets.append((f"tributary_embed_column int8 vs the Python pipeline fp32 ({n:,} rows)",
                            f"{rps['column_int8'] / rps['python']:.2f}x", rps["column_int8"] / rps["python"] >= 1.5))
        if "column" in rps and "engine" in rps:
            over = rps["engine"] / rps["column"] - 1
            targets.append((f"PostgreSQL overhead ≤ 15% over engine only ({n:,} rows)", f"{over:.1%}", over <= 0.15))
        if "column_int8" in rps and "column" in rps:
            sp = rps["column_int8"] / rps["column"]
            fid = m.get("int8_fidelity", {}).get("result", {})
            cos = fid.get("cosine_mean")
            ok = sp >= 1.8 and cos is not None and cos >= 0.99
            targets.append((f"int8 ≥ 1.8x fp32 with mean cosine ≥ 0.99, through tributary_embed_column ({n:,} rows)",
                            f"{sp:.2f}x, cosine {cos:.4f}" if cos is not None else f"{sp:.2f}x", ok))
    if flops:
        frac = flops["executed_flops"] / flops["peak_flops"]
        md.append("### The physical limit (benches/flops.py)")
        md.append("")
        md.append("| what | GFLOP/s | of measured peak |")
        md.append("|---|---:|---:|")
        md.append(f"| numpy BLAS sgemm 2048^3 | {flops['blas_flops'] / 1e9:.1f} | {flops['blas_flops'] / flops['peak_flops']:.0%} |")
        md.append(f"| ONNX Runtime MatMul, the model's largest shape | {flops['ort_matmul_flops'] / 1e9:.1f} | {flops['ort_matmul_flops'] / flops['peak_flops']:.0%} |")
        md.append(f"| the model, executed FLOPs (padded tokens) | {flops['executed_flops'] / 1e9:.1f} | {frac:.0%} |")
        md.append(f"| the model, useful FLOPs (real tokens) | {flops['useful_flops'] / 1e9:.1f} | {flops['useful_flops'] / flops['peak_flops']:.0%} |")
        md.append("")
        md.append(f"{flops['rows']:,} descriptions, {flops['tokens']:,} tokens, padding {flops['padded'] / flops['tokens'] - 1:.1%}; "
                  f"{flops['flop_per_token'] / 1e6:.1f} MFLOP per real token.")
        targets.append(("fp32 engine ≥ 50% of the machine's measured FLOP/s", f"{frac:.0%}", frac >= 0.5))
        if flops.get("int8"):
            i8 = flops["int8"]
            md.append(f"int8 graph on the same runs: {i8['speedup']:.2f}x fp32, cosine to fp32 mean {i8['cosine_mean']:.4f}, "
                      f"min {i8['cosine_min']:.4f}.")
            targets.append(("int8 ≥ 1.8x fp32 with mean cosine ≥ 0.99, model runs only (flops.py)",
                            f"{i8['speedup']:.2f}x, cosine {i8['cosine_mean']:.4f}",
                            i8["speedup"] >= 1.8 and i8["cosine_mean"] >= 0.99))
        md.append("")
    if sweep:
        md.append("### Engine only: batch size and input length (tools/bench sweep, plotted in benches/throughput.png)")
        md.append("")
        md.append("| input | texts per call | rows/s | tokens/s | padding |")
        md.append("|---|---:|---:|---:|---:|")
        for r in sweep:
            md.append(f"| {r[0]} | {r[4]} | {float(r[7]):,.1f} | {float(r[8]):,.0f} | {float(r[9]):.1f}% |")
        md.append("")
    if crit:
        md.append("### Criterion (tools/bench/benches/engine.rs), mean time per iteration")
        md.append("")
        md.append("| group | point | ms per iteration | rows/s | tokens/s | padding |")
        md.append("|---|---|---:|---:|---:|---:|")
        for g, i, s, el, tok, pad in crit:
            rps = f"{el / s:,.1f}" if el else ""
            tps = f"{tok / s:,.0f}" if tok else ""
            pads = f"{pad:.1%}" if pad is not None else ""
            md.append(f"| {g} | {i} | {s * 1e3:,.0f} | {rps} | {tps} | {pads} |")
        md.append("")
    if targets:
        md.insert(0, "")
        rows_t = ["| target | measured | met |", "|---|---:|:---:|"] + [f"| {t} | {v} | {'yes' if ok else 'no'} |" for t, v, ok in targets]
        md[0:0] = ["### Targets (ratios from this run)", ""] + rows_t
    return "\n".join(md) + "\n"


def plot(sweep, path: Path) -> bool:
    if not sweep:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = defaultdict(list)
    for r in sweep:
        series[r[0]].append((int(r[4]), float(r[7]), float(r[8]), r[5]))
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for label, pts in series.items():
        pts.sort()
        a1.plot([p[0] for p in pts], [p[2] for p in pts], marker="o", label=label)
    a1.set_xscale("log", base=2)
    a1.set_xlabel("texts per call (batch size)")
    a1.set_ylabel("tokens/s (real tokens)")
    a1.set_title("throughput against batch size")
    a1.grid(True, alpha=0.3)
    a1.legend(fontsize=8)
    fixed = defaultdict(list)
    for label, pts in series.items():
        for b, rps, tps, k in pts:
            if k:
                fixed[b].append((int(k), rps, tps))
    for b in sorted(fixed):
        pts = sorted(fixed[b])
        a2.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"{b} texts per call")
    a2.set_xscale("log", base=2)
    a2.set_yscale("log")
    a2.set_xlabel("input length (tokens, special tokens included)")
    a2.set_ylabel("rows/s")
    a2.set_title("throughput against input length")
    a2.grid(True, alpha=0.3)
    a2.legend(fontsize=8)
    fig.suptitle("tributary engine, all-MiniLM-L6-v2 fp32, CPU execution provider")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", type=Path, nargs="+", help="one suite run, or several (e.g. 10k rows and 50k rows run apart)")
    ap.add_argument("--benchmarks", type=Path, default=ROOT / "BENCHMARKS.md")
    ap.add_argument("--plot", type=Path, default=ROOT / "benches/throughput.png")
    a = ap.parse_args(argv)
    rows, sweep, crit, heads = [], [], [], []
    here = a.benchmarks.resolve().parent
    for d in a.results:
        r, sw, cr = load(d)
        rows += r
        sweep = sweep or sw
        crit = crit or cr
        cmd = d / "command.txt"
        cmds = cmd.read_text().split("\n") if cmd.exists() else ["bash benches/suite.sh"]
        heads.append(" then ".join(f"`{c.strip()}`" for c in cmds if c.strip())
                     + f" (results: `{os.path.relpath(d.resolve(), here)}`)")
    body = render(rows, sweep, crit)
    body = "Produced by " + " and ".join(heads) + ".\n\n" + body
    (a.results[-1] / "report.md").write_text(body)
    if plot(sweep, a.plot):
        body += f"\n![throughput against batch size and input length]({os.path.relpath(a.plot.resolve(), here)})\n"
    text = a.benchmarks.read_text() if a.benchmarks.exists() else "# Benchmarks\n"
    section = f"{BEGIN}\n{body}{END}"
    if BEGIN in text and END in text:
        text = text[: text.index(BEGIN)] + section + text[text.index(END) + len(END):]
    else:
        first = text.find("\n## ")
        block = f"\n## The suite (benches/suite.sh)\n\n{section}\n"
        text = text + block if first < 0 else text[:first] + "\n" + block + text[first:]
    a.benchmarks.write_text(text)
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
