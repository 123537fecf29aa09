"""The tiny GGUF writers in spec_actor.testing.tiny_models.

These checks do not run llama.cpp: they read the written files back (with
gguf-py's reader, and the fixed header with struct) and check the format and
the metadata llama.cpp relies on. The native load/decode/speculation tests
live elsewhere (test_speculative_models.py, test_hybrid.py).
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFValueType

from spec_actor.testing import _gguf, _vocab, _weights
from spec_actor.testing import tiny_models as tm


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny")
    target, draft = tm.write_draft_pair(d)
    return {
        "mtp": tm.write_mtp_model(d / "mtp.gguf"),
        "hybrid": tm.write_hybrid_mtp_model(d / "hybrid.gguf"),
        "target": target,
        "draft": draft,
        "bad": tm.write_incompatible_draft(d / "bad.gguf", target),
        "eagle3": tm.write_eagle3_drafter(d / "eagle3.gguf", target),
        "dflash": tm.write_dflash_drafter(d / "dflash.gguf", target),
    }


def _check_layout(g: tm.GGUFFile) -> None:
    """Header/data layout as ggml's gguf reader expects it."""
    a = g.alignment
    assert g.version == 3 and a == 32  # GGUF_DEFAULT_ALIGNMENT: no general.alignment written
    assert g.data_offset % a == 0
    end = 0
    for info in g.tensors.values():
        assert info.offset % a == 0
        assert info.nbytes == int(np.prod(info.ne)) * np.dtype(np.float32 if info.ggml_type == GGMLQuantizationType.F32
                                                               else np.float16).itemsize
        end = max(end, info.offset + info.nbytes)
    assert g.file_size == g.data_offset + (end + a - 1) // a * a
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
        assert types[f"{arch}.{key}"] == GGUFValueType.UINT32, key  # llama.cpp checks types strictly
    assert types[f"{arch}.attention.layer_norm_rms_epsilon"] == GGUFValueType.FLOAT32
    assert md["tokenizer.ggml.model"] == "gpt2"
    assert md["tokenizer.ggml.pre"] == "gpt-2"
    tokens = md["tokenizer.ggml.tokens"]
    assert len(tokens) == len(set(tokens)) == len(md["tokenizer.ggml.token_type"])
    assert types["tokenizer.ggml.token_type"] == GGUFValueType.ARRAY
    assert md["tokenizer.ggml.bos_token_id"] == tm.BOS_ID
    assert md["tokenizer.ggml.eos_token_id"] == tm.EOS_ID
    assert md["tokenizer.ggml.add_bos_token"] is True
    n_embd = _hp(g, "embedding_length")
    n_vocab = len(tokens)
    assert g.tensors["token_embd.weight"].ne == (n_embd, n_vocab)
    assert g.tensors["output.weight"].ne == (n_embd, n_vocab)
    assert g.tensors["output_norm.weight"].ne == (n_embd,)
    for info in g.tensors.values():
        assert info.ggml_type == GGMLQuantizationType.F32
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
    assert e3.metadata_types["eagle3.target_layers"] == GGUFValueType.ARRAY
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
        tm.write_hybrid_mtp_model(d / "hybrid.gguf")
        target, _ = tm.write_draft_pair(d)
        tm.write_eagle3_drafter(d / "e3.gguf", target)
    for name in ("mtp.gguf", "hybrid.gguf", "tiny-target.gguf", "tiny-draft.gguf", "e3.gguf"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_draft_shares_the_targets_first_block(models):
    tgt, dft = tm.read_gguf(models["target"]), tm.read_gguf(models["draft"])
    for name in dft.tensors:
        np.testing.assert_array_equal(dft.tensor(name), tgt.tensor(name))


def test_vocab_covers_ascii_and_merges_are_consistent():
    tokens = tm.vocab_tokens()
    byte_chars = _vocab.bytes_to_unicode()
    index = {t: i for i, t in enumerate(tokens)}
    for b in range(256):
        assert byte_chars[b] in index
    for merge in _vocab.MERGES:
        left, right = merge.split(" ")
        assert left in index and right in index and left + right in index
        assert index[left + right] > max(index[left], index[right])


def test_bigram_logits_are_not_degenerate():
    """Greedy decoding has something to choose: no exact ties, only printable winners."""
    vocab = _vocab.build_vocab()
    emb, out = _weights.base_embeddings(vocab, _weights.SEED)
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
    V = GGUFValueType
    md = {
        "general.architecture": _gguf.string("llama"),
        "k.u32": _gguf.u32(7),
        "k.i32": _gguf.i32(-7),
        "k.f32": _gguf.f32(0.5),
        "k.bool": _gguf.boolean(False),
        "k.u8": _gguf.GGUFValue(255, V.UINT8),
        "k.i64": _gguf.GGUFValue(-(2**40), V.INT64),
        "k.f64": _gguf.GGUFValue(1.25, V.FLOAT64),
        "k.arr_str": _gguf.array(V.STRING, ["a", "ü", ""]),
        "k.arr_i32": _gguf.array(V.INT32, [1, -2, 3]),
        "k.arr_f32": _gguf.array(V.FLOAT32, [0.5, 1.5]),
    }
    tensors = {
        "a": np.arange(6, dtype=np.float32).reshape(2, 3),
        "b": np.arange(5, dtype=np.float16),
        "c": np.array([1, 2, 3], dtype=np.int64),
    }
    path = tm.write_gguf(tmp_path / "x.gguf", md, tensors)
    g = tm.read_gguf(path)
    assert g.metadata["general.architecture"] == "llama"
    assert g.metadata["k.u32"] == 7 and g.metadata_types["k.u32"] == V.UINT32
    assert g.metadata["k.i32"] == -7 and g.metadata_types["k.i32"] == V.INT32
    assert g.metadata["k.f32"] == 0.5
    assert g.metadata["k.bool"] is False
    assert g.metadata["k.u8"] == 255 and g.metadata_types["k.u8"] == V.UINT8
    assert g.metadata["k.i64"] == -(2**40)
    assert g.metadata["k.f64"] == 1.25
    assert g.metadata["k.arr_str"] == ["a", "ü", ""]
    assert g.metadata["k.arr_i32"] == [1, -2, 3] and g.array_types["k.arr_i32"] == V.INT32
    assert g.metadata["k.arr_f32"] == [0.5, 1.5]
    assert g.tensors["a"].ne == (3, 2)
    assert g.tensors["b"].ggml_type == GGMLQuantizationType.F16
    for name, arr in tensors.items():
        np.testing.assert_array_equal(g.tensor(name), arr)
    # the fixed header, byte for byte, independently of gguf-py's reader
    raw = path.read_bytes()
    assert raw[:4] == b"GGUF"
    assert struct.unpack_from("<IQQ", raw, 4) == (3, len(tensors), len(md))
    key_len, = struct.unpack_from("<Q", raw, 24)
    assert raw[32:32 + key_len] == b"general.architecture"  # written first


def test_gguf_arrays_must_not_be_empty():
    with pytest.raises(ValueError, match="empty"):
        _gguf.array(GGUFValueType.STRING, [])


def test_write_gguf_needs_the_architecture(tmp_path):
    with pytest.raises(ValueError, match="general.architecture"):
        tm.write_gguf(tmp_path / "x.gguf", {"general.name": _gguf.string("x")}, {})
    assert list(tmp_path.iterdir()) == []


def test_read_gguf_rejects_other_files(tmp_path):
    p = tmp_path / "not.gguf"
    p.write_bytes(b"GGML" + bytes(60))
    with pytest.raises(ValueError):
        tm.read_gguf(p)


def test_hybrid_model_is_qwen35_with_one_nextn_block(models):
    """Names and shapes as src/models/qwen35.cpp creates them (load_arch_tensors)."""
    g = tm.read_gguf(models["hybrid"])
    assert _arch(g) == tm.HYBRID_ARCH == "qwen35"
    n_blocks, n_nextn = _hp(g, "block_count"), _hp(g, "nextn_predict_layers")
    assert (n_blocks, n_nextn) == (3, 1)
    interval = _hp(g, "full_attention_interval")
    n_trunk = n_blocks - n_nextn
    recurrent = [(i + 1) % interval != 0 for i in range(n_trunk)]
    assert recurrent == [True, False]  # a hybrid: one delta-net block, one attention block
    n = _hp(g, "embedding_length")
    hd = n // _hp(g, "attention.head_count")
    n_kv = _hp(g, "attention.head_count_kv") * hd
    d_state, n_group, n_v = _hp(g, "ssm.state_size"), _hp(g, "ssm.group_count"), _hp(g, "ssm.time_step_rank")
    assert _hp(g, "ssm.inner_size") == d_state * n_v
    assert len(_hp(g, "rope.dimension_sections")) == 4
    t = g.tensors
    conv_dim = 2 * d_state * n_group + d_state * n_v
    assert t["blk.0.attn_qkv.weight"].ne == (n, conv_dim)
    assert t["blk.0.attn_gate.weight"].ne == (n, d_state * n_v)
    assert t["blk.0.ssm_conv1d.weight"].ne == (_hp(g, "ssm.conv_kernel"), conv_dim)
    assert t["blk.0.ssm_a"].ne == t["blk.0.ssm_dt.bias"].ne == (n_v,)
    assert t["blk.0.ssm_out.weight"].ne == (d_state * n_v, n)
    assert (g.tensor("blk.0.ssm_a") < 0).all()  # A = -exp(A_log): a decaying state
    for i in (1, 2):  # gated attention: the query projection also yields the output gate
        assert t[f"blk.{i}.attn_q.weight"].ne == (n, 2 * n)
        assert t[f"blk.{i}.attn_k.weight"].ne == t[f"blk.{i}.attn_v.weight"].ne == (n, n_kv)
        assert t[f"blk.{i}.attn_q_norm.weight"].ne == (hd,)
    assert not any(name.startswith("blk.1.ssm") for name in t)
    assert t["blk.2.nextn.eh_proj.weight"].ne == (2 * n, n)
    assert not any(".nextn." in name for name in t if not name.startswith("blk.2."))


def test_dflash_drafter_matches_target_and_names_its_mask_token(models):
    """Names and shapes as src/models/dflash.cpp creates them (the plain variant)."""
    tgt, df = tm.read_gguf(models["target"]), tm.read_gguf(models["dflash"])
    assert _arch(df) == "dflash"
    layers = _hp(df, "target_layers")
    assert list(layers) == list(tm.DFLASH_TARGET_LAYERS)
    assert all(0 <= i < _hp(tgt, "block_count") for i in layers)
    n = _hp(df, "embedding_length")
    assert n == _hp(tgt, "embedding_length")  # fc reads len(target_layers) target states of n_embd each
    assert df.tensors["fc.weight"].ne == (len(layers) * n, n)
    assert df.tensors["enc.output_norm.weight"].ne == (n,)
    assert df.tensors["blk.0.attn_q_norm.weight"].ne == (n // _hp(df, "attention.head_count"),)
    # without a mask token llama.cpp aborts while drafting
    mask = df.metadata["tokenizer.ggml.mask_token_id"]
    assert df.metadata["tokenizer.ggml.tokens"][mask] == "<mask>"
    assert df.metadata["tokenizer.ggml.tokens"] == tgt.metadata["tokenizer.ggml.tokens"]
