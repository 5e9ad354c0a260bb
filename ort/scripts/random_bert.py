#!/usr/bin/env python3
"""A randomly initialised BERT checkpoint with bge-base-en-v1.5's shapes, exported for tributary.

FOR THROUGHPUT MEASUREMENTS ONLY: the weights are random (fixed seed), so the embeddings mean
nothing. What it gives is a model with exactly the cost of BAAI/bge-base-en-v1.5 (BERT, 12 layers,
hidden 768, 12 heads, intermediate 3072, vocab 30522, 512 positions, CLS pooling, ~110 M
parameters of which ~85 M in the encoder, so about 2 * 85e6 = 0.17 GFLOP per token, ~22 GFLOP
per 128-token row; all-MiniLM-L6-v2 is ~22 MFLOP per token) on machines that cannot download the
real weights. A user with the real checkpoint
exports it with `export_model.py --checkpoint DIR` instead.

Writes a Hugging Face checkpoint directory (what `export_model.py --checkpoint` reads):

    config.json                 BertModel config (as bge-base-en-v1.5's)
    model.safetensors           float32 tensors named as HF `BertModel.state_dict()`
                                (embeddings.*, encoder.layer.{0..11}.*, pooler.dense.*)
    tokenizer.json              copied from the default model (same bert-base-uncased vocab, 30522)
    sentence_bert_config.json   max_seq_length 512
    1_Pooling/config.json       CLS pooling, as sentence-transformers writes it

then runs `export_model.py --checkpoint CKPT --out OUT --name NAME`, which writes OUT/NAME/
{model.onnx (~440 MB), model_fp16.onnx (~220 MB), tokenizer.json, tributary.json}.

Weights: linear and embedding matrices ~ N(0, 0.02) (BERT's initializer_range), biases 0,
LayerNorm weight 1 and bias 0; numpy's PCG64 with a fixed seed, so every run writes the same
bytes. Idempotent: an existing checkpoint with the same config and seed is kept, and
export_model.py skips an export whose weights have not changed.

Usage: random_bert.py [--out .gpu/models] [--name bge-base-shaped] [--checkpoint DIR]
                      [--tokenizer ort/models/all-MiniLM-L6-v2/tokenizer.json] [--seed 0]
                      [--layers 12] [--no-export]
Needs numpy, safetensors, and for the export onnx + onnxruntime (its transformer optimizer).
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# BAAI/bge-base-en-v1.5's config.json (architecture fields only).
CONFIG = {
    "architectures": ["BertModel"],
    "attention_probs_dropout_prob": 0.1,
    "classifier_dropout": None,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "hidden_size": 768,
    "initializer_range": 0.02,
    "intermediate_size": 3072,
    "layer_norm_eps": 1e-12,
    "max_position_embeddings": 512,
    "model_type": "bert",
    "num_attention_heads": 12,
    "num_hidden_layers": 12,
    "pad_token_id": 0,
    "position_embedding_type": "absolute",
    "type_vocab_size": 2,
    "vocab_size": 30522,
}

# sentence-transformers' 1_Pooling/config.json for CLS pooling.
POOLING = {
    "word_embedding_dimension": 768,
    "pooling_mode_cls_token": True,
    "pooling_mode_mean_tokens": False,
    "pooling_mode_max_tokens": False,
    "pooling_mode_mean_sqrt_len_tokens": False,
    "pooling_mode_weightedmean_tokens": False,
    "pooling_mode_lasttoken": False,
    "include_prompt": True,
}


def weights(config: dict, seed: int) -> dict:
    """HF BertModel tensors (float32, Linear weights as [out, in]) with random values."""
    import numpy as np

    rng = np.random.default_rng(seed)
    std = config["initializer_range"]
    H, I = config["hidden_size"], config["intermediate_size"]
    w = {}

    def normal(*shape):
        return (rng.standard_normal(shape, dtype=np.float32) * std).astype(np.float32)

    def linear(prefix, n_out, n_in):
        w[prefix + ".weight"] = normal(n_out, n_in)
        w[prefix + ".bias"] = np.zeros(n_out, np.float32)

    def layer_norm(prefix):
        w[prefix + ".weight"] = np.ones(H, np.float32)
        w[prefix + ".bias"] = np.zeros(H, np.float32)

    w["embeddings.word_embeddings.weight"] = normal(config["vocab_size"], H)
    w["embeddings.position_embeddings.weight"] = normal(config["max_position_embeddings"], H)
    w["embeddings.token_type_embeddings.weight"] = normal(config["type_vocab_size"], H)
    layer_norm("embeddings.LayerNorm")
    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}"
        for part in ("query", "key", "value"):
            linear(f"{p}.attention.self.{part}", H, H)
        linear(f"{p}.attention.output.dense", H, H)
        layer_norm(f"{p}.attention.output.LayerNorm")
        linear(f"{p}.intermediate.dense", I, H)
        linear(f"{p}.output.dense", H, I)
        layer_norm(f"{p}.output.LayerNorm")
    linear("pooler.dense", H, H)
    return w


def write_checkpoint(ckpt: Path, config: dict, seed: int, tokenizer: Path) -> None:
    """Writes the checkpoint directory unless one with the same config and seed is there."""
    from safetensors.numpy import save_file

    stamp = {"config": config, "seed": seed}
    stamp_path = ckpt / "random_bert.json"
    if (ckpt / "model.safetensors").exists() and stamp_path.exists() and json.loads(stamp_path.read_text()) == stamp:
        print(f"{ckpt}: checkpoint up to date (seed {seed})")
    else:
        (ckpt / "1_Pooling").mkdir(parents=True, exist_ok=True)
        w = weights(config, seed)
        n = sum(v.size for v in w.values())
        tmp = ckpt / "model.safetensors.tmp"
        save_file(w, str(tmp))
        tmp.replace(ckpt / "model.safetensors")
        (ckpt / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        (ckpt / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 512, "do_lower_case": True}, indent=2) + "\n")
        (ckpt / "1_Pooling" / "config.json").write_text(json.dumps(POOLING, indent=2) + "\n")
        stamp_path.write_text(json.dumps(stamp, indent=2) + "\n")
        print(f"{ckpt}: random checkpoint, {n / 1e6:.1f} M parameters, seed {seed}")
    if not tokenizer.exists():
        sys.exit(f"random_bert: no tokenizer at {tokenizer} (run scripts/setup.sh for the default model)")
    if not (ckpt / "tokenizer.json").exists() or (ckpt / "tokenizer.json").read_bytes() != tokenizer.read_bytes():
        shutil.copyfile(tokenizer, ckpt / "tokenizer.json")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / ".gpu/models", help="models directory (the model goes to OUT/NAME)")
    ap.add_argument("--name", default="bge-base-shaped")
    ap.add_argument("--checkpoint", type=Path, help="checkpoint directory (default: OUT/NAME.checkpoint)")
    ap.add_argument("--tokenizer", type=Path, default=ROOT / "ort/models/all-MiniLM-L6-v2/tokenizer.json")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layers", type=int, default=12, help="encoder layers (12 = bge-base; fewer for quick tests)")
    ap.add_argument("--no-export", action="store_true", help="write the checkpoint only")
    a = ap.parse_args(argv)
    config = dict(CONFIG, num_hidden_layers=a.layers)
    ckpt = a.checkpoint or a.out / f"{a.name}.checkpoint"
    write_checkpoint(ckpt, config, a.seed, a.tokenizer)
    if a.no_export:
        return 0
    cmd = [sys.executable, str(ROOT / "ort/scripts/export_model.py"), "--checkpoint", str(ckpt), "--out", str(a.out),
           "--name", a.name, "--pooling", "cls", "--max-length", "512"]
    return subprocess.run(cmd).returncode


if __name__ == "__main__":
    sys.exit(main())
