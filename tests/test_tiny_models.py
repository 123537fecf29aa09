"""The tiny GGUF writers in spec_actor.testing.tiny_models.

These checks need neither the native extension nor llama.cpp: they parse the
written files back and check the format and the metadata llama.cpp relies on
(the native load/decode/speculation tests live elsewhere).
"""

from __future__ import annotations

import importlib.util
import struct
import sys
import time
from pathlib import Path

import numpy as np
import pytest

try:
    from spec_actor.testing import tiny_models as tm
except ImportError:  # package __init__ needs the native extension; this module does not
    _path = Path(__file__).resolve().parents[1] / "spec_actor" / "testing" / "tiny_models.py"
    _spec = importlib.util.spec_from_file_location("_spec_actor_tiny_models", _path)
    assert _spec is not None and _spec.loader is not None
    tm = importlib.util.module_from_spec(_spec)
    sys.modules[_spec.name] = tm
    _spec.loader.exec_module(tm)


def _timed(fn, *args):
    # the writers take milliseconds; how long is for bench/, so this only reports it
    t0 = time.perf_counter()
    result = fn(*args)
    print(f"{fn.__name__} took {time.perf_counter() - t0:.3f} s")
    return result


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny")
    target, draft = _timed(tm.write_draft_pair, d)
    return {
        "mtp": _timed(tm.write_mtp_model, d / "mtp.gguf"),
        "target": target,
        "draft": draft,
        "bad": _timed(tm.write_incompatible_draft, d / "bad.gguf", target),
        "eagle3": _timed(tm.write_eagle3_drafter, d / "eagle3.gguf", target),
    }


def _check_layout(g: tm.GGUFFile) -> None:
    """Header/data layout as ggml's gguf reader expects it."""
    assert g.version == 3
    assert g.data_offset % tm.GGUF_ALIGNMENT == 0
    end = 0
    for info in g.tensors.values():
        assert info.offset % tm.GGUF_ALIGNMENT == 0
        end = max(end, info.offset + info.nbytes)
    assert g.file_size == g.data_offset + tm._align(end)
    # no two tensors overlap
    spans = sorted((i.offset, i.offset + i.nbytes) for i in g.tensors.values())
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))


def _arch(g: tm.GGUFFile) -> str:
    return g.metadata["general.architecture"]


def _hp(g: tm.GGUFFile, key: str):
    return g.metadata[f"{_arch(g)}.{key}"]


def _check_common(g: tm.GGUFFile) -> None:
    _check_layout(g)
    md, types = g.metadata, g.metadata_types
    arch = _arch(g)
    for key in ("context_length", "embedding_length", "block_count", "feed_forward_length",
                "attention.head_count", "attention.head_count_kv"):
        assert types[f"{arch}.{key}"] == tm.UINT32, key  # llama.cpp checks types strictly
    assert types[f"{arch}.attention.layer_norm_rms_epsilon"] == tm.FLOAT32
    assert md["tokenizer.ggml.model"] == "gpt2"
    assert md["tokenizer.ggml.pre"] == "gpt-2"
    tokens = md["tokenizer.ggml.tokens"]
    assert len(tokens) == len(set(tokens)) == len(md["tokenizer.ggml.token_type"])
    assert types["tokenizer.ggml.token_type"] == tm.ARRAY
    assert md["tokenizer.ggml.bos_token_id"] == tm.BOS_ID
    assert md["tokenizer.ggml.eos_token_id"] == tm.EOS_ID
    assert md["tokenizer.ggml.add_bos_token"] is True
    n_embd = _hp(g, "embedding_length")
    n_vocab = len(tokens)
    assert g.tensors["token_embd.weight"].ne == (n_embd, n_vocab)
    assert g.tensors["output.weight"].ne == (n_embd, n_vocab)
    assert g.tensors["output_norm.weight"].ne == (n_embd,)
    for info in g.tensors.values():
        assert info.ggml_type == tm.GGML_TYPE_F32
        assert np.isfinite(g.tensor(info.name)).all(), info.name


def test_all_files_parse(models):
    for path in models.values():
        assert path.exists()
        assert path.read_bytes()[:4] == b"GGUF"
        _check_common(tm.read_gguf(path))


def test_mtp_model_has_one_nextn_block(models):
    g = tm.read_gguf(models["mtp"])
    assert _arch(g) == "glm4moe"
    n_blocks = _hp(g, "block_count")
    n_nextn = _hp(g, "nextn_predict_layers")
    assert n_nextn == 1 and n_blocks == 3
    assert _hp(g, "leading_dense_block_count") == n_blocks - n_nextn
    n_embd = _hp(g, "embedding_length")
    n_exp, n_ff_exp = _hp(g, "expert_count"), _hp(g, "expert_feed_forward_length")
    assert 0 < _hp(g, "expert_used_count") <= n_exp
    assert _hp(g, "expert_shared_count") == 1  # the MTP graph always adds the shared expert
    mtp = f"blk.{n_blocks - 1}."
    t = g.tensors
    assert t[mtp + "nextn.eh_proj.weight"].ne == (2 * n_embd, n_embd)
    assert t[mtp + "nextn.enorm.weight"].ne == (n_embd,)
    assert t[mtp + "nextn.hnorm.weight"].ne == (n_embd,)
    assert t[mtp + "ffn_gate_inp.weight"].ne == (n_embd, n_exp)
    assert t[mtp + "exp_probs_b.bias"].ne == (n_exp,)
    assert t[mtp + "ffn_up_exps.weight"].ne == (n_embd, n_ff_exp, n_exp)
    assert t[mtp + "ffn_down_exps.weight"].ne == (n_ff_exp, n_embd, n_exp)
    assert t[mtp + "ffn_down_shexp.weight"].ne == (n_ff_exp, n_embd)
    # the trunk blocks are dense and carry no nextn tensors
    for i in range(n_blocks - n_nextn):
        assert f"blk.{i}.ffn_up.weight" in t
        assert not any(name.startswith(f"blk.{i}.nextn.") for name in t)


def test_draft_pair_is_compatible(models):
    tgt, dft = tm.read_gguf(models["target"]), tm.read_gguf(models["draft"])
    assert _arch(tgt) == _arch(dft) == tm.DRAFT_ARCH
    # what common_speculative_are_compatible compares
    for key in ("tokenizer.ggml.model", "tokenizer.ggml.tokens", "tokenizer.ggml.bos_token_id",
                "tokenizer.ggml.eos_token_id", "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token"):
        assert tgt.metadata[key] == dft.metadata[key], key
    # the draft is smaller
    assert _hp(dft, "block_count") < _hp(tgt, "block_count")
    assert models["draft"].stat().st_size < models["target"].stat().st_size


def test_incompatible_draft_differs_in_token_texts(models):
    tgt, bad = tm.read_gguf(models["target"]), tm.read_gguf(models["bad"])
    a, b = tgt.metadata["tokenizer.ggml.tokens"], bad.metadata["tokenizer.ggml.tokens"]
    # same type, size and special tokens: only the text check (from id 5 on) rejects it
    assert tgt.metadata["tokenizer.ggml.model"] == bad.metadata["tokenizer.ggml.model"]
    assert len(a) == len(b)
    assert a[:5] == b[:5]
    assert a[5] != b[5]
    assert tgt.metadata["tokenizer.ggml.bos_token_id"] == bad.metadata["tokenizer.ggml.bos_token_id"]


def test_eagle3_drafter_matches_target(models):
    tgt, e3 = tm.read_gguf(models["target"]), tm.read_gguf(models["eagle3"])
    assert _arch(e3) == "eagle3"
    assert _hp(e3, "block_count") == 1
    layers = _hp(e3, "target_layers")
    assert e3.metadata_types["eagle3.target_layers"] == tm.ARRAY
    assert len(layers) == 3 and all(0 <= i < _hp(tgt, "block_count") for i in layers)
    n_tgt = _hp(e3, "target_hidden_size")
    assert n_tgt == _hp(tgt, "embedding_length")
    n = _hp(e3, "embedding_length")
    assert e3.tensors["fc.weight"].ne == (3 * n_tgt, n)
    assert e3.tensors["blk.0.attn_q.weight"].ne[0] == 2 * n  # concat(embedding, g)
    assert e3.metadata["tokenizer.ggml.tokens"] == tgt.metadata["tokenizer.ggml.tokens"]


def test_writers_are_deterministic(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        d.mkdir()
        tm.write_mtp_model(d / "mtp.gguf")
        target, _ = tm.write_draft_pair(d)
        tm.write_eagle3_drafter(d / "e3.gguf", target)
    for name in ("mtp.gguf", "tiny-target.gguf", "tiny-draft.gguf", "e3.gguf"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_draft_shares_the_targets_first_block(models):
    tgt, dft = tm.read_gguf(models["target"]), tm.read_gguf(models["draft"])
    for name in dft.tensors:
        np.testing.assert_array_equal(dft.tensor(name), tgt.tensor(name))


def test_vocab_covers_ascii_and_merges_are_consistent():
    tokens = tm.vocab_tokens()
    byte_chars = tm._bytes_to_unicode()
    index = {t: i for i, t in enumerate(tokens)}
    for b in range(256):
        assert byte_chars[b] in index
    for merge in tm._MERGES:
        left, right = merge.split(" ")
        assert left in index and right in index and left + right in index
        assert index[left + right] > max(index[left], index[right])


def test_bigram_logits_are_not_degenerate():
    """Greedy decoding has something to choose: no exact ties, only printable winners."""
    vocab = tm._build_vocab()
    emb, out = tm._base_embeddings(vocab, tm._SEED)
    x = emb / np.sqrt((emb**2).mean(axis=1, keepdims=True))
    logits = x @ out.T
    top2 = np.sort(logits, axis=1)[:, -2:]
    assert (top2[:, 1] - top2[:, 0] > 1e-4).all()
    winners = logits.argmax(axis=1)
    assert vocab.printable[winners].all()
    assert len(set(winners.tolist())) > len(winners) // 4  # not a handful of sinks
    # control tokens (EOS) and non-printable bytes sit far below the winners
    assert (logits[:, ~vocab.printable].max(axis=1) < top2[:, 1] - 10).all()


def test_write_gguf_roundtrip_all_value_types(tmp_path):
    md = {
        "general.architecture": tm.string("llama"),
        "k.u32": tm.u32(7),
        "k.i32": tm.i32(-7),
        "k.f32": tm.f32(0.5),
        "k.bool": tm.boolean(False),
        "k.u8": tm.KV(tm.UINT8, 255),
        "k.i64": tm.KV(tm.INT64, -(2**40)),
        "k.f64": tm.KV(tm.FLOAT64, 1.25),
        "k.arr_str": tm.array(tm.STRING, ["a", "ü", ""]),
        "k.arr_i32": tm.array(tm.INT32, [1, -2, 3]),
        "k.arr_f32": tm.array(tm.FLOAT32, [0.5, 1.5]),
        "k.arr_empty": tm.array(tm.STRING, []),
    }
    tensors = {
        "a": np.arange(6, dtype=np.float32).reshape(2, 3),
        "b": np.arange(5, dtype=np.float16),
        "c": np.array([1, 2, 3], dtype=np.int64),
    }
    path = tm.write_gguf(tmp_path / "x.gguf", md, tensors)
    g = tm.read_gguf(path)
    _check_layout(g)
    assert g.metadata["k.u32"] == 7 and g.metadata_types["k.u32"] == tm.UINT32
    assert g.metadata["k.i32"] == -7
    assert g.metadata["k.f32"] == 0.5
    assert g.metadata["k.bool"] is False
    assert g.metadata["k.u8"] == 255
    assert g.metadata["k.i64"] == -(2**40)
    assert g.metadata["k.f64"] == 1.25
    assert g.metadata["k.arr_str"] == ["a", "ü", ""]
    assert g.metadata["k.arr_i32"] == [1, -2, 3]
    assert g.metadata["k.arr_f32"] == [0.5, 1.5]
    assert g.metadata["k.arr_empty"] == []
    assert g.tensors["a"].ne == (3, 2)
    assert g.tensors["b"].ggml_type == tm.GGML_TYPE_F16
    for name, arr in tensors.items():
        np.testing.assert_array_equal(g.tensor(name), arr)
    # fixed header fields, byte for byte
    raw = path.read_bytes()
    assert raw[:4] == b"GGUF"
    assert struct.unpack_from("<IQQ", raw, 4) == (3, len(tensors), len(md))


def test_read_gguf_rejects_other_files(tmp_path):
    p = tmp_path / "not.gguf"
    p.write_bytes(b"GGML" + bytes(60))
    with pytest.raises(ValueError):
        tm.read_gguf(p)


def test_files_parse_with_gguf_py_when_installed(models):
    """Cross-check with llama.cpp's own Python reader, if that package is around."""
    gguf = pytest.importorskip("gguf")
    for path in models.values():
        r = gguf.GGUFReader(path)
        ours = tm.read_gguf(path)
        assert {t.name for t in r.tensors} == set(ours.tensors)
        for t in r.tensors:
            assert tuple(int(x) for x in t.shape) == ours.tensors[t.name].ne
