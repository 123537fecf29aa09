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

import dataclasses
import os
from pathlib import Path

import numpy as np

from ._gguf import GGUFValueType, array, u32, write_gguf
from ._vocab import build_vocab, tokenizer_kv
from ._weights import MTP_BLOCK_GAIN, SEED, Dims, Rng, attention, base_embeddings, common_kv, ffn, nextn_input, ones

HYBRID_ARCH = "qwen35"
HYBRID_DIMS = Dims(n_embd=64, n_head=4, n_head_kv=2, n_ff=128, n_layer=2)


@dataclasses.dataclass(frozen=True)
class SsmDims:
    """Sizes of a gated delta-net block, which set its recurrent state per sequence.

    Key heads (``ssm.group_count``) x ``state`` for q and k, value heads
    (``ssm.time_step_rank``) x ``state`` for v; ``ssm.inner_size`` is the
    value width. The state is ``v_heads x state x state`` floats (the delta
    rule's matrix per value head) plus ``conv_kernel - 1`` inputs of the
    causal convolution over q, k and v.
    """

    state: int = 16
    groups: int = 2
    v_heads: int = 4
    conv_kernel: int = 4

    @property
    def key_dim(self) -> int:
        """Width of q and of k."""
        return self.state * self.groups

    @property
    def value_dim(self) -> int:
        """Width of v (``ssm.inner_size``)."""
        return self.state * self.v_heads

    @property
    def state_bytes(self) -> int:
        """Bytes of one block's recurrent state for one sequence (F32)."""
        conv = (self.conv_kernel - 1) * (2 * self.key_dim + self.value_dim)
        return 4 * (self.v_heads * self.state * self.state + conv)


# The tests' default: a state of a few KiB per block.
TINY_SSM = SsmDims()
# A Qwen3.5-class block (head width 128, 16 key and 32 value heads): about
# 2 MiB of state per block and sequence, as the released models carry, for
# measuring what snapshots and checkpoints cost at the size users have.
QWEN35_SSM = SsmDims(state=128, groups=16, v_heads=32)
# Residual update per trunk block, and the seed: picked among a few settings
# for a greedy path with a few dozen distinct tokens before it settles into a
# cycle, and MTP and n-gram drafts that are accepted part of the time.
_RECURRENT_GAIN = 0.2
_ATTN_GAIN = 0.2
_SEED_OFFSET = 8
# How much a block past the first two moves the residual, relative to them.
_QUIET_GAIN = 0.02


def _delta_net(rng: Rng, t: dict[str, np.ndarray], i: int, n: int, gain: float, ssm: SsmDims) -> None:
    """The gated delta-net tensors of block ``i`` (shapes: qwen35.cpp, load_block_trunk)."""
    p = f"blk.{i}."
    conv_dim = 2 * ssm.key_dim + ssm.value_dim
    t[p + "attn_qkv.weight"] = rng.normal(p + "qkv", (conv_dim, n), 1.0 / np.sqrt(n))
    t[p + "attn_gate.weight"] = rng.normal(p + "z", (ssm.value_dim, n), 1.0 / np.sqrt(n))
    t[p + "ssm_conv1d.weight"] = rng.normal(p + "conv", (conv_dim, ssm.conv_kernel), 1.0 / np.sqrt(ssm.conv_kernel))
    t[p + "ssm_dt.bias"] = np.zeros(ssm.v_heads, dtype=np.float32)
    # A = -exp(A_log): per-head decay rates from slow to fast, so the state
    # remembers some heads' inputs for many tokens and others' for few.
    t[p + "ssm_a"] = -np.geomspace(0.05, 1.0, ssm.v_heads).astype(np.float32)
    t[p + "ssm_beta.weight"] = rng.normal(p + "beta", (ssm.v_heads, n), 1.0 / np.sqrt(n))
    t[p + "ssm_alpha.weight"] = rng.normal(p + "alpha", (ssm.v_heads, n), 1.0 / np.sqrt(n))
    t[p + "ssm_norm.weight"] = ones(ssm.state)
    t[p + "ssm_out.weight"] = rng.normal(p + "out", (n, ssm.value_dim), np.sqrt(gain) / np.sqrt(ssm.value_dim))


def _gated_attention(rng: Rng, t: dict[str, np.ndarray], i: int, d: Dims, gain: float) -> None:
    attention(rng, t, i, d, gain, gated_q=True)
    t[f"blk.{i}.attn_q_norm.weight"] = ones(d.head_dim)
    t[f"blk.{i}.attn_k_norm.weight"] = ones(d.head_dim)


def write_hybrid_mtp_model(path: str | os.PathLike[str], dims: Dims = HYBRID_DIMS, ssm: SsmDims = TINY_SSM) -> Path:
    """Write a ``qwen35`` model: delta-net and attention blocks in turn, then 1 NextN/MTP block.

    The default is one block of each. Benchmarks pass a deeper trunk (an
    even ``n_layer``), so that the MTP block costs the share of a trunk step
    that it does in a real model: the blocks past the first two are quiet
    (they move the residual ``_QUIET_GAIN`` as much), so they cost a step its
    compute but leave the greedy path and the MTP block's acceptance about
    as they are. ``ssm`` sizes the delta-net blocks, and so the recurrent
    state that rollback snapshots and checkpoints copy: `QWEN35_SSM` gives
    each block a released Qwen 3.5 model's state at this tiny width. A wider
    ``n_embd`` (at least 64) keeps the same language in the first 64
    dimensions (`base_embeddings`): its weights then take the larger share of
    a step that they take in a real model, so that verifying a few tokens
    costs less than as many steps.
    """
    d = dims
    if d.n_layer < 2 or d.n_layer % 2:
        raise ValueError(f"a hybrid trunk needs an even n_layer >= 2, got {d.n_layer}")
    n = d.n_embd
    vocab = build_vocab()
    emb, out = base_embeddings(vocab, SEED, n)
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
            _delta_net(rng, t, i, n, _RECURRENT_GAIN * quiet, ssm)
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
            f"{a}.ssm.conv_kernel": u32(ssm.conv_kernel),
            f"{a}.ssm.inner_size": u32(ssm.value_dim),
            f"{a}.ssm.state_size": u32(ssm.state),
            f"{a}.ssm.time_step_rank": u32(ssm.v_heads),
            f"{a}.ssm.group_count": u32(ssm.groups),
        }
    )
    kv.update(tokenizer_kv(vocab))
    return write_gguf(path, kv, t)
