"""A tiny ``qwen35`` model: recurrent + attention trunk and one NextN/MTP block.

Tensor names and shapes follow the llama.cpp this project builds
(src/models/qwen35.cpp, ``load_arch_tensors``; src/llama-arch.cpp for the
names; tests/test-llama-archs.cpp for the hyperparameters its random models
use). Blocks:

- block 0: gated delta-net ("linear attention"; recurrent state: a causal
  convolution over the last ``conv_kernel`` inputs and a per-head
  ``state_size`` x ``state_size`` matrix),
- block 1: gated full attention with q/k norms and multi-section RoPE,
- block 2: the NextN/MTP block (``eh_proj`` over the concatenated next-token
  embedding and trunk state, then a gated attention block and a dense FFN),
  run only by an MTP context (``load_mtp=True``).

``full_attention_interval = 2`` makes every second trunk block attention, so
llama.cpp gives the target context a hybrid memory (KV cache + recurrent
state) and ``llama_model_is_hybrid`` is true. The recurrent block moves the
residual as much as the attention block does, so a wrongly restored state
changes the greedy output (the rollback tests rely on that).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ._gguf import GGUFValueType, array, u32, write_gguf
from ._vocab import build_vocab, tokenizer_kv
from ._weights import MTP_BLOCK_GAIN, SEED, Dims, Rng, attention, base_embeddings, common_kv, ffn, nextn_input, ones

HYBRID_ARCH = "qwen35"
HYBRID_DIMS = Dims(n_embd=64, n_head=4, n_head_kv=2, n_ff=128, n_layer=2)
# Gated delta-net sizes: key heads (ssm.group_count) x state_size for q and k,
# value heads (ssm.time_step_rank) x state_size for v; inner_size = the value width.
SSM_STATE = 16
SSM_GROUPS = 2
SSM_V_HEADS = 4
SSM_CONV_KERNEL = 4
# Residual update per trunk block, and the seed: picked among a few settings
# for a greedy path with a few dozen distinct tokens before it settles into a
# cycle, and MTP and n-gram drafts that are accepted part of the time.
_RECURRENT_GAIN = 0.2
_ATTN_GAIN = 0.2
_SEED_OFFSET = 8
# How much a block past the first two moves the residual, relative to them.
_QUIET_GAIN = 0.02


def _delta_net(rng: Rng, t: dict[str, np.ndarray], i: int, n: int, gain: float) -> None:
    """The gated delta-net tensors of block ``i`` (shapes: qwen35.cpp, load_block_trunk)."""
    p = f"blk.{i}."
    key_dim = SSM_STATE * SSM_GROUPS
    value_dim = SSM_STATE * SSM_V_HEADS
    conv_dim = 2 * key_dim + value_dim
    t[p + "attn_qkv.weight"] = rng.normal(p + "qkv", (conv_dim, n), 1.0 / np.sqrt(n))
    t[p + "attn_gate.weight"] = rng.normal(p + "z", (value_dim, n), 1.0 / np.sqrt(n))
    t[p + "ssm_conv1d.weight"] = rng.normal(p + "conv", (conv_dim, SSM_CONV_KERNEL), 1.0 / np.sqrt(SSM_CONV_KERNEL))
    t[p + "ssm_dt.bias"] = np.zeros(SSM_V_HEADS, dtype=np.float32)
    # A = -exp(A_log): per-head decay rates from slow to fast, so the state
    # remembers some heads' inputs for many tokens and others' for few.
    t[p + "ssm_a"] = -np.geomspace(0.05, 1.0, SSM_V_HEADS).astype(np.float32)
    t[p + "ssm_beta.weight"] = rng.normal(p + "beta", (SSM_V_HEADS, n), 1.0 / np.sqrt(n))
    t[p + "ssm_alpha.weight"] = rng.normal(p + "alpha", (SSM_V_HEADS, n), 1.0 / np.sqrt(n))
    t[p + "ssm_norm.weight"] = ones(SSM_STATE)
    t[p + "ssm_out.weight"] = rng.normal(p + "out", (n, value_dim), np.sqrt(gain) / np.sqrt(value_dim))


def _gated_attention(rng: Rng, t: dict[str, np.ndarray], i: int, d: Dims, gain: float) -> None:
    attention(rng, t, i, d, gain, gated_q=True)
    t[f"blk.{i}.attn_q_norm.weight"] = ones(d.head_dim)
    t[f"blk.{i}.attn_k_norm.weight"] = ones(d.head_dim)


def write_hybrid_mtp_model(path: str | os.PathLike[str], dims: Dims = HYBRID_DIMS) -> Path:
    """Write a ``qwen35`` model: delta-net and attention blocks in turn, then 1 NextN/MTP block.

    The default is one block of each. Benchmarks pass a deeper trunk (an
    even ``n_layer``), so that the MTP block costs the share of a trunk step
    that it does in a real model: the blocks past the first two are quiet
    (they move the residual ``_QUIET_GAIN`` as much), so they cost a step its
    compute but leave the greedy path and the MTP block's acceptance about
    as they are.
    """
    d = dims
    if d.n_layer < 2 or d.n_layer % 2:
        raise ValueError(f"a hybrid trunk needs an even n_layer >= 2, got {d.n_layer}")
    n = d.n_embd
    vocab = build_vocab()
    emb, out = base_embeddings(vocab, SEED)
    rng = Rng(SEED + _SEED_OFFSET)
    t: dict[str, np.ndarray] = {
        "token_embd.weight": emb,
        "output_norm.weight": ones(n),
        "output.weight": out,
    }
    for i in range(d.n_layer):
        quiet = _QUIET_GAIN if i >= 2 else 1.0
        t[f"blk.{i}.attn_norm.weight"] = ones(n)
        t[f"blk.{i}.post_attention_norm.weight"] = ones(n)
        if i % 2 == 0:
            _delta_net(rng, t, i, n, _RECURRENT_GAIN * quiet)
            ffn(rng, t, i, d, _RECURRENT_GAIN * quiet)
        else:
            _gated_attention(rng, t, i, d, _ATTN_GAIN * quiet)
            ffn(rng, t, i, d, _ATTN_GAIN * quiet)
    i = d.n_layer
    p = f"blk.{i}."
    t[p + "attn_norm.weight"] = ones(n)
    t[p + "post_attention_norm.weight"] = ones(n)
    _gated_attention(rng, t, i, d, MTP_BLOCK_GAIN)
    ffn(rng, t, i, d, MTP_BLOCK_GAIN)
    nextn_input(rng, t, i, n)

    a = HYBRID_ARCH
    kv = common_kv(a, "tiny-hybrid-mtp", d, d.n_layer + 1)
    kv.update(
        {
            f"{a}.vocab_size": u32(len(vocab.tokens)),
            f"{a}.rope.dimension_count": u32(d.head_dim),
            # text-only positions: the sections only split the rotary dims (sum = n_rot / 2)
            f"{a}.rope.dimension_sections": array(GGUFValueType.INT32, [d.head_dim // 4, d.head_dim // 4, 0, 0]),
            f"{a}.nextn_predict_layers": u32(1),
            f"{a}.full_attention_interval": u32(2),
            f"{a}.ssm.conv_kernel": u32(SSM_CONV_KERNEL),
            f"{a}.ssm.inner_size": u32(SSM_STATE * SSM_V_HEADS),
            f"{a}.ssm.state_size": u32(SSM_STATE),
            f"{a}.ssm.time_step_rank": u32(SSM_V_HEADS),
            f"{a}.ssm.group_count": u32(SSM_GROUPS),
        }
    )
    kv.update(tokenizer_kv(vocab))
    return write_gguf(path, kv, t)
