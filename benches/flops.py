#!/usr/bin/env python3
"""How close the CPU engine runs to the machine: the model's FLOPs over the machine's measured
FLOP/s, in one run (a first part of the benchmark-suite issue; reports, asserts nothing).

1. The machine: float32 matrix products with the same thread count, measured here: numpy's BLAS
   on 2048 x 2048 matrices, and ONNX Runtime's own MatMul on the model's biggest shape
   ([2048 tokens, 384] x [384, 1536]). The higher is the "measured peak".
2. The model: the same ONNX graph tributary runs (ort/models/<name>/model.onnx), the same
   tokenizer settings, texts sorted by length and cut into runs of at most --budget padded
   tokens (tributary.max_batch_tokens' default, 2048), on a deterministic sample of Debian
   package descriptions (scripts/debian_data.py's index).
3. FLOPs of a BERT encoder forward pass (multiply-add = 2 FLOPs), per layer and sequence of
   length L with hidden size h and feed-forward size 4h: 24 h^2 L for the Q, K, V and output
   projections and the feed-forward (2 x 12 h^2 weights, as in Kaplan et al. 2020, "Scaling
   Laws for Neural Language Models", table 1) plus 4 L^2 h for QK^T and attention x V. "Executed"
   counts padded tokens (what the hardware computes), "useful" counts real tokens.

4. The same runs through the model's int8 graph (model_int8.onnx, when the directory has one):
   its speed-up over fp32 on the same feeds, and its per-row cosine to fp32.

Usage: flops.py [--threads N] [--rows 2000] [--budget 2048] [--model-dir DIR] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--budget", type=int, default=2048, help="most padded tokens per ONNX Runtime run")
    ap.add_argument("--model-dir", type=Path, default=ROOT / "ort/models/all-MiniLM-L6-v2")
    ap.add_argument("--json", type=Path, help="append the numbers as one JSON line to this file")
    a = ap.parse_args(argv)
    # BLAS thread pools read these when numpy is imported.
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(a.threads)
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper
    from tokenizers import Tokenizer

    sys.path.insert(0, str(ROOT / "scripts"))
    import debian_data

    meta = json.loads((a.model_dir / "tributary.json").read_text())
    h, layers = meta["dimension"], meta["layers"]

    def session(path_or_bytes):
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = a.threads
        opts.inter_op_num_threads = 1
        return ort.InferenceSession(path_or_bytes, opts, providers=["CPUExecutionProvider"])

    def best_of(f, n=5):
        f()
        times = []
        for _ in range(n):
            t = time.perf_counter()
            f()
            times.append(time.perf_counter() - t)
        return min(times)

    # 1. The machine.
    n = 2048
    x = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    blas = 2 * n**3 / best_of(lambda: x @ x)
    m, k, f = 2048, h, 4 * h
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "w"], ["y"])], "mm",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, f])],
        [helper.make_tensor("w", TensorProto.FLOAT, [k, f], np.random.default_rng(1).standard_normal(k * f).astype(np.float32))])
    mm = session(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString())
    a_in = np.random.default_rng(2).standard_normal((m, k), dtype=np.float32)
    ortmm = 2 * m * k * f / best_of(lambda: mm.run(None, {"a": a_in}), 10)
    peak = max(blas, ortmm)

    # 2. The model on real texts.
    packages, _ = debian_data.load_index(debian_data.CACHE)
    names = sorted(debian_data.sample(packages, a.rows))
    texts = [packages[p][5] for p in names]
    tok = Tokenizer.from_file(str(a.model_dir / meta["files"]["tokenizer"]))
    tok.enable_truncation(meta["max_length"])
    tok.no_padding()
    enc = sorted((e.ids for e in tok.encode_batch(texts)), key=len)
    batches, cur = [], []
    for ids in enc:
        if cur and len(ids) * (len(cur) + 1) > a.budget:
            batches.append(cur)
            cur = []
        cur.append(ids)
    batches.append(cur)
    feeds = []
    for b in batches:
        width = max(len(i) for i in b)
        ids = np.zeros((len(b), width), dtype=np.int32)
        mask = np.zeros((len(b), width), dtype=np.int32)
        for r, i in enumerate(b):
            ids[r, : len(i)] = i
            mask[r, : len(i)] = 1
        feeds.append({"input_ids": ids, "attention_mask": mask})
    def timed(path):
        model = session(str(path))
        model.run(None, feeds[0])
        t = time.perf_counter()
        out = [model.run(None, fd)[0] for fd in feeds]
        return time.perf_counter() - t, np.concatenate(out)

    secs, ref = timed(a.model_dir / meta["files"]["fp32"])
    int8 = None
    if "int8" in meta["files"]:
        secs8, q = timed(a.model_dir / meta["files"]["int8"])
        cos = (ref * q).sum(1) / (np.linalg.norm(ref, axis=1) * np.linalg.norm(q, axis=1))
        int8 = {"seconds": secs8, "speedup": secs / secs8, "cosine_mean": float(cos.mean()), "cosine_min": float(cos.min())}

    def flops(length):
        return layers * (24 * h * h * length + 4 * length * length * h)

    real = sum(len(i) for i in enc)
    padded = sum(fd["input_ids"].size for fd in feeds)
    useful = sum(flops(len(i)) for i in enc)
    executed = sum(fd["input_ids"].shape[0] * flops(fd["input_ids"].shape[1]) for fd in feeds)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"machine: {cpu}, {os.cpu_count()} vCPUs; threads: {a.threads}; ONNX Runtime {ort.__version__}")
    print(f"model: {meta['name']} fp32, {layers} layers, hidden {h}; {len(texts)} Debian descriptions, "
          f"{real} tokens ({real / len(texts):.1f} per row), {padded} padded ({padded / real - 1:.1%} padding), "
          f"{len(feeds)} runs of at most {a.budget} padded tokens")
    print()
    print("| what | GFLOP/s | of measured peak |")
    print("|---|---:|---:|")
    print(f"| numpy BLAS sgemm 2048^3 | {blas / 1e9:.1f} | {blas / peak:.0%} |")
    print(f"| ONNX Runtime MatMul [2048,{k}]x[{k},{f}] | {ortmm / 1e9:.1f} | {ortmm / peak:.0%} |")
    print(f"| model, executed FLOPs (padded tokens) | {executed / secs / 1e9:.1f} | {executed / secs / peak:.0%} |")
    print(f"| model, useful FLOPs (real tokens) | {useful / secs / 1e9:.1f} | {useful / secs / peak:.0%} |")
    print()
    print(f"model: {len(texts) / secs:.1f} rows/s, {real / secs:.0f} tokens/s, {secs:.1f} s; "
          f"{useful / real / 1e6:.1f} MFLOP per real token at these lengths")
    if int8:
        print(f"int8 graph: {len(texts) / int8['seconds']:.1f} rows/s, {int8['speedup']:.2f}x fp32 on the same runs; "
              f"cosine to fp32 mean {int8['cosine_mean']:.4f}, min {int8['cosine_min']:.4f}")
    if a.json:
        with open(a.json, "a") as f:
            f.write(json.dumps({"bench": "flops", "cpu": cpu, "vcpus": os.cpu_count(), "threads": a.threads,
                                "ort": ort.__version__, "rows": len(texts), "tokens": real, "padded": padded,
                                "seconds": secs, "blas_flops": blas, "ort_matmul_flops": ortmm, "peak_flops": peak,
                                "executed_flops": executed / secs, "useful_flops": useful / secs,
                                "flop_per_token": useful / real, "int8": int8}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
