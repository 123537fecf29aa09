"""Tiny random-weight GGUF models for testing speculative decoding.

The embedded default model (Gemma 3 270M) has no NextN/MTP layers and no
companion draft model, so the test suite writes its own models here: small
enough to write in milliseconds and to run on two CPU cores, yet real
llama.cpp architectures that ``llama_model_load_from_file`` accepts. The files
are written by gguf-py's ``GGUFWriter`` (the ``gguf`` package of the test
extra; see ``_gguf.py``).

What is written, and how llama.cpp loads it:

``write_mtp_model(path)``
    Architecture ``glm4moe`` (GLM-4.5 family): 2 trunk blocks of plain
    attention with a dense FFN, plus 1 NextN/MTP block (attention + MoE with a
    shared expert) appended as block 2, ``glm4moe.nextn_predict_layers = 1``.
    Load with ``llama_model_params.load_mtp = true``; ``llama_model_n_layer_nextn()``
    is 1 either way, but without ``load_mtp`` the NextN tensors are skipped and
    creating an MTP context then *aborts the process* (GGML_ASSERT in
    src/models/glm4-moe.cpp, graph_mtp). The target context is a
    plain KV cache (no recurrent state), so partial sequence removal works and
    no checkpoints (``n_rs_seq``) are needed. The MTP draft context is a second
    context on the *same* model with ``ctx_type = LLAMA_CONTEXT_TYPE_MTP``
    (and ``ctx_other`` = the target context, as common_speculative does).

``write_hybrid_mtp_model(path)``
    Architecture ``qwen35`` (Qwen 3.5 / 3.6, the models MTP drafting was made
    for): a hybrid of a recurrent gated delta-net block and a gated attention
    block, plus 1 NextN/MTP block. A rejected draft cannot be undone by
    trimming a KV cache here: the recurrent state is rolled back from
    snapshots (MTP: ``n_rs_seq``) or restored from a checkpoint and re-verified
    (the other types). ``ssm=QWEN35_SSM`` gives its recurrent blocks a
    released Qwen 3.5 model's state (about 2 MiB per block and sequence), so
    that what snapshots and checkpoints cost can be measured at that size.
    See ``_hybrid.py``.

``write_draft_pair(dir)``
    A ``llama`` target (4 blocks, n_embd 64) and a smaller ``llama`` draft
    (1 block: exactly the target's first block, embedding and output) with an
    identical vocabulary, so ``common_speculative_are_compatible`` accepts
    them (draft-simple).

``write_fim_model(path, kinds)``
    The draft's 1-block ``llama`` with six fill-in-the-middle control tokens
    appended to its vocabulary, named by ``tokenizer.ggml.fim_*_token_id``
    metadata for ``kinds`` (``POST /infill``).

``write_incompatible_draft(path, like=target)``
    A ``llama`` draft whose vocabulary has the same size, type and special
    tokens but different token texts from id 5 on (byte tokens in reverse
    order), so the compatibility check fails.

``write_eagle3_drafter(path, target)``
    An ``eagle3`` drafter (one decoder block + the ``fc`` feature-fusion
    layer) for the draft-pair target: ``eagle3.target_layers = [1, 2, 3]``,
    ``eagle3.target_hidden_size = 64``. It carries its own ``token_embd`` and
    ``output``, so the drafter context also works without ``ctx_other``.

``write_dflash_drafter(path, target)``
    A ``dflash`` drafter (``fc`` + one non-causal decoder block) for the
    draft-pair target, reading its layers 1 and 3. Its drafts are random and
    practically always rejected. See ``_dflash.py``.

Weights are float32, drawn from a fixed seed (stable per tensor name), and
shaped so that greedy decoding is not degenerate: the residual stream is
dominated by the token embedding, so each model behaves roughly like a fixed
random bigram map with some context mixing. Draft, MTP head and EAGLE-3
drafter are built to approximate that same map, so their drafts are accepted
part of the time (not always, not never). Control tokens (EOS included) and
bytes that are not printable ASCII get logits far below the others, so even
sampled text is printable ASCII plus newlines and generation practically
never ends with an end-of-generation token before the token budget.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ._gguf import (GGUFFile, GGUFTensorInfo, GGUFValue, GGUFValueType, array, boolean, f32, read_gguf, string,
                    u32, write_gguf)
from ._dflash import DFLASH_TARGET_LAYERS, write_dflash_drafter
from ._hybrid import HYBRID_ARCH, HYBRID_DIMS, QWEN35_SSM, TINY_SSM, SsmDims, write_hybrid_mtp_model
from ._vocab import BOS_ID, EOS_ID, FIM_TOKENS, PAD_ID, Vocab, build_vocab, fim_kv, tokenizer_kv, vocab_tokens
from ._weights import MTP_BLOCK_GAIN, SEED, Dims, Rng, attention, base_embeddings, common_kv, ffn, nextn_input, ones

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "PAD_ID",
    "FIM_TOKENS",
    "GGUFFile",
    "GGUFTensorInfo",
    "MTP_ARCH",
    "HYBRID_ARCH",
    "DRAFT_ARCH",
    "EAGLE3_TARGET_LAYERS",
    "DFLASH_TARGET_LAYERS",
    "read_gguf",
    "write_gguf",
    "vocab_tokens",
    "write_mtp_model",
    "write_hybrid_mtp_model",
    "SsmDims",
    "TINY_SSM",
    "QWEN35_SSM",
    "write_chat_model",
    "write_fim_model",
    "write_draft_pair",
    "write_incompatible_draft",
    "write_eagle3_drafter",
    "write_dflash_drafter",
]


# --------------------------------------------------------------------------
# llama (draft-simple target / draft, incompatible draft)
# --------------------------------------------------------------------------

TARGET_DIMS = Dims(n_embd=64, n_head=4, n_head_kv=2, n_ff=128, n_layer=4)
DRAFT_DIMS = dataclasses.replace(TARGET_DIMS, n_layer=1)
DRAFT_ARCH = "llama"
# Residual update per block, relative to the token embedding. The draft is the
# target's first block (same weights, same seed); the target's later blocks are
# gentler, so the draft agrees with the target often but not always.
_FIRST_GAIN = 0.35
_LATER_GAIN = 0.12
_LLAMASEED = SEED + 1


def _llama_gains(n_layer: int) -> list[float]:
    return [_FIRST_GAIN] + [_LATER_GAIN] * (n_layer - 1)


def _write_llama(path: Path, name: str, d: Dims, vocab: Vocab, chat_template: str | None = None,
                 extra_kv: dict[str, GGUFValue] | None = None) -> Path:
    emb, out = base_embeddings(vocab, SEED)
    rng = Rng(_LLAMASEED)
    t: dict[str, np.ndarray] = {
        "token_embd.weight": emb,
        "output_norm.weight": ones(d.n_embd),
        "output.weight": out,
    }
    for i, gain in enumerate(_llama_gains(d.n_layer)):
        t[f"blk.{i}.attn_norm.weight"] = ones(d.n_embd)
        attention(rng, t, i, d, gain)
        t[f"blk.{i}.ffn_norm.weight"] = ones(d.n_embd)
        ffn(rng, t, i, d, gain)
    kv = common_kv("llama", name, d, d.n_layer)
    kv["llama.vocab_size"] = u32(len(vocab.tokens))
    kv["llama.rope.dimension_count"] = u32(d.head_dim)
    kv.update(tokenizer_kv(vocab))
    if chat_template is not None:
        kv["tokenizer.chat_template"] = string(chat_template)
    kv.update(extra_kv or {})
    return write_gguf(path, kv, t)


def write_draft_pair(directory: str | os.PathLike[str], target_dims: Dims = TARGET_DIMS,
                     draft_dims: Dims = DRAFT_DIMS) -> tuple[Path, Path]:
    """Write ``tiny-target.gguf`` and ``tiny-draft.gguf`` (same vocab) into ``directory``.

    Benchmarks pass wider dims, so that compute, not per-call overhead, sets
    what a token costs each model.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    vocab = build_vocab()
    target = _write_llama(directory / "tiny-target.gguf", "tiny-target", target_dims, vocab)
    draft = _write_llama(directory / "tiny-draft.gguf", "tiny-draft", draft_dims, vocab)
    return target, draft


def write_chat_model(path: str | os.PathLike[str], chat_template: str) -> Path:
    """Write the 1-block llama of the draft pair carrying ``chat_template`` (Jinja text) in its metadata.

    For tests of chat rendering with a real family's template: its weights are random.
    """
    return _write_llama(Path(path), "tiny-chat", DRAFT_DIMS, build_vocab(), chat_template)


def write_fim_model(path: str | os.PathLike[str], kinds: Sequence[str] = tuple(FIM_TOKENS)) -> Path:
    """Write the 1-block llama of the draft pair with fill-in-the-middle tokens (``POST /infill``).

    Its vocabulary is the default one plus six control tokens after it
    (`FIM_TOKENS`); the metadata names those of ``kinds`` (``"pre"``,
    ``"suf"``, ``"mid"``, ``"pad"``, ``"rep"``, ``"sep"``) as
    ``tokenizer.ggml.fim_<kind>_token_id``, so a model without ``"rep"`` and
    ``"sep"``, or without ``"mid"``, can be written too. Its weights are random.
    """
    unknown = set(kinds) - set(FIM_TOKENS)
    if unknown:
        raise ValueError(f"unknown FIM token kinds {sorted(unknown)}; use {', '.join(FIM_TOKENS)}")
    vocab = build_vocab("fim")
    return _write_llama(Path(path), "tiny-fim", DRAFT_DIMS, vocab, extra_kv=fim_kv(vocab, tuple(kinds)))


def write_incompatible_draft(path: str | os.PathLike[str], like: str | os.PathLike[str] | None = None) -> Path:
    """Write a draft whose token texts differ from the tiny target's.

    Same vocab type (BPE), size and special tokens as :func:`write_draft_pair`'s
    target (``like``, checked if given), but the byte tokens are in reverse
    order, so ``common_speculative_are_compatible`` rejects the pair at token 5.
    """
    vocab = build_vocab("reversed")
    if like is not None:
        other = read_gguf(like).metadata["tokenizer.ggml.tokens"]
        if len(other) != len(vocab.tokens) or other[5] == vocab.tokens[5]:
            raise ValueError("write_incompatible_draft: 'like' is not a tiny_models target")
    return _write_llama(Path(path), "tiny-draft-incompatible", DRAFT_DIMS, vocab)


# --------------------------------------------------------------------------
# glm4moe with one NextN/MTP block
# --------------------------------------------------------------------------

MTP_ARCH = "glm4moe"
MTP_DIMS = Dims(n_embd=64, n_head=4, n_head_kv=2, n_ff=128, n_layer=2)
_MTP_EXPERTS = 4
_MTP_EXPERTS_USED = 2
_MTP_FF_EXP = 32


def write_mtp_model(path: str | os.PathLike[str]) -> Path:
    """Write a ``glm4moe`` model with 2 trunk blocks and 1 NextN/MTP block."""
    path = Path(path)
    d = MTP_DIMS
    vocab = build_vocab()
    emb, out = base_embeddings(vocab, SEED)
    rng = Rng(SEED + 4)
    n = d.n_embd
    t: dict[str, np.ndarray] = {
        "token_embd.weight": emb,
        "output_norm.weight": ones(n),
        "output.weight": out,
    }
    # trunk: dense blocks (leading_dense_block_count = n_layer)
    for i, gain in enumerate(_llama_gains(d.n_layer)):
        t[f"blk.{i}.attn_norm.weight"] = ones(n)
        attention(rng, t, i, d, gain)
        t[f"blk.{i}.post_attention_norm.weight"] = ones(n)
        ffn(rng, t, i, d, gain)
    # NextN block: eh_proj(concat(enorm(embd(next token)), hnorm(h))) -> attention -> MoE.
    # It mostly passes the next token's embedding through (a little of h), so
    # its prediction approximates the trunk's next-token map one step ahead.
    i = d.n_layer
    p = f"blk.{i}."
    g = MTP_BLOCK_GAIN
    t[p + "attn_norm.weight"] = ones(n)
    attention(rng, t, i, d, g)
    t[p + "post_attention_norm.weight"] = ones(n)
    t[p + "ffn_gate_inp.weight"] = rng.normal(p + "router", (_MTP_EXPERTS, n), 1.0 / np.sqrt(n))
    t[p + "exp_probs_b.bias"] = np.zeros(_MTP_EXPERTS, dtype=np.float32)
    t[p + "ffn_gate_exps.weight"] = rng.normal(p + "gate_exps", (_MTP_EXPERTS, _MTP_FF_EXP, n), 1.0 / np.sqrt(n))
    t[p + "ffn_up_exps.weight"] = rng.normal(p + "up_exps", (_MTP_EXPERTS, _MTP_FF_EXP, n), 1.0 / np.sqrt(n))
    t[p + "ffn_down_exps.weight"] = rng.normal(p + "down_exps", (_MTP_EXPERTS, n, _MTP_FF_EXP), g / np.sqrt(_MTP_FF_EXP))
    t[p + "ffn_gate_shexp.weight"] = rng.normal(p + "gate_shexp", (_MTP_FF_EXP, n), 1.0 / np.sqrt(n))
    t[p + "ffn_up_shexp.weight"] = rng.normal(p + "up_shexp", (_MTP_FF_EXP, n), 1.0 / np.sqrt(n))
    t[p + "ffn_down_shexp.weight"] = rng.normal(p + "down_shexp", (n, _MTP_FF_EXP), g / np.sqrt(_MTP_FF_EXP))
    nextn_input(rng, t, i, n)

    kv = common_kv(MTP_ARCH, "tiny-mtp", d, d.n_layer + 1)
    a = MTP_ARCH
    kv.update(
        {
            f"{a}.vocab_size": u32(len(vocab.tokens)),
            f"{a}.rope.dimension_count": u32(d.head_dim),
            f"{a}.nextn_predict_layers": u32(1),
            f"{a}.leading_dense_block_count": u32(d.n_layer),
            f"{a}.expert_count": u32(_MTP_EXPERTS),
            f"{a}.expert_used_count": u32(_MTP_EXPERTS_USED),
            f"{a}.expert_shared_count": u32(1),
            f"{a}.expert_feed_forward_length": u32(_MTP_FF_EXP),
            f"{a}.expert_weights_scale": f32(1.0),
            f"{a}.expert_weights_norm": boolean(True),
            f"{a}.expert_gating_func": u32(2),  # sigmoid, as GLM-4.5
        }
    )
    kv.update(tokenizer_kv(vocab))
    return write_gguf(path, kv, t)


# --------------------------------------------------------------------------
# EAGLE-3 drafter for the llama target
# --------------------------------------------------------------------------

EAGLE3_TARGET_LAYERS = (1, 2, 3)
EAGLE3_DIMS = Dims(n_embd=64, n_head=2, n_head_kv=2, n_ff=128, n_layer=1)


def write_eagle3_drafter(path: str | os.PathLike[str], target: str | os.PathLike[str] | None = None) -> Path:
    """Write an ``eagle3`` drafter for :func:`write_draft_pair`'s target.

    The decoder's attention is built to attend mostly to the current position
    and to pass its token embedding through, so the drafter approximates the
    target's next-token map and some drafts are accepted.
    """
    path = Path(path)
    n_embd_tgt = TARGET_DIMS.n_embd
    n_layer_tgt = TARGET_DIMS.n_layer
    if target is not None:
        meta = read_gguf(target).metadata
        arch = meta["general.architecture"]
        n_embd_tgt = int(meta[f"{arch}.embedding_length"])
        n_layer_tgt = int(meta[f"{arch}.block_count"])
        if len(meta["tokenizer.ggml.tokens"]) != len(vocab_tokens()):
            raise ValueError("write_eagle3_drafter: target is not a tiny_models target")
    if max(EAGLE3_TARGET_LAYERS) >= n_layer_tgt:
        raise ValueError(f"target has {n_layer_tgt} layers; EAGLE-3 extracts {EAGLE3_TARGET_LAYERS}")
    d = EAGLE3_DIMS
    n = d.n_embd
    hd = d.head_dim
    vocab = build_vocab()
    emb, out = base_embeddings(vocab, SEED)
    rng = Rng(SEED + 5)
    # The decoder sees concat(attn_norm(embd(token)), attn_norm_2(g)), 2n wide.
    # q/k/v read the token half only, with sharp q.k (a position attends to
    # itself and to earlier copies of its token), v/o pass the embedding on;
    # with norm_before_residual the residual carries attn_norm_2(g), scaled
    # down by that norm's weight, so g (target features, or the drafter's own
    # previous output) only nudges the result.
    sel = np.zeros((d.n_head * hd, 2 * n), dtype=np.float32)
    sel[:, :n] = np.eye(n, dtype=np.float32)
    qk_gain = 2.0
    noise = 0.05
    t: dict[str, np.ndarray] = {
        "fc.weight": rng.normal("fc", (n, 3 * n_embd_tgt), 1.0 / np.sqrt(3 * n_embd_tgt)),
        "token_embd.weight": emb,
        "output_norm.weight": ones(n),
        "output.weight": out,
        "blk.0.attn_norm.weight": ones(n),
        "blk.0.attn_norm_2.weight": np.full(n, 0.03, dtype=np.float32),
        "blk.0.attn_q.weight": qk_gain * sel + rng.normal("q", sel.shape, noise / np.sqrt(n)),
        "blk.0.attn_k.weight": qk_gain * sel + rng.normal("k", sel.shape, noise / np.sqrt(n)),
        "blk.0.attn_v.weight": sel + rng.normal("v", sel.shape, noise / np.sqrt(n)),
        "blk.0.attn_output.weight": np.eye(n, dtype=np.float32) + rng.normal("o", (n, n), noise / np.sqrt(n)),
        "blk.0.ffn_norm.weight": ones(n),
    }
    ffn(rng, t, 0, d, 0.03)
    kv = common_kv("eagle3", "tiny-eagle3", d, 1)
    kv.update(
        {
            "eagle3.vocab_size": u32(len(vocab.tokens)),
            "eagle3.rope.dimension_count": u32(hd),
            "eagle3.target_layers": array(GGUFValueType.INT32, EAGLE3_TARGET_LAYERS),
            "eagle3.target_hidden_size": u32(n_embd_tgt),
            "eagle3.norm_before_residual": boolean(True),
        }
    )
    kv.update(tokenizer_kv(vocab))
    return write_gguf(path, kv, t)
