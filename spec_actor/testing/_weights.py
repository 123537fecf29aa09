"""Weights shared by the tiny models: a fixed-seed random source, sizes, the
shared token embedding and output matrix, and attention / FFN blocks.
"""

from __future__ import annotations

import dataclasses
import zlib

import numpy as np

from ._gguf import GGUFValue, f32, string, u32
from ._vocab import Vocab

SEED = 10  # picked among a few seeds: long greedy cycles, mid-range acceptance


class Rng:
    """Deterministic per-name normal draws (independent of call order)."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def normal(self, name: str, shape: tuple[int, ...], std: float) -> np.ndarray:
        """float32 draws of the given standard deviation, fixed by ``name``."""
        g = np.random.default_rng([self.seed, zlib.crc32(name.encode())])
        return (g.standard_normal(shape) * std).astype(np.float32)


def ones(n: int) -> np.ndarray:
    """A float32 vector of ones (a norm weight that changes nothing)."""
    return np.ones(n, dtype=np.float32)


@dataclasses.dataclass(frozen=True)
class Dims:
    """Sizes of one tiny transformer."""

    n_embd: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_layer: int
    n_ctx_train: int = 4096

    @property
    def head_dim(self) -> int:
        """Width of one attention head."""
        return self.n_embd // self.n_head


# Shared "language": a token embedding E and an output matrix W (the bigram map
# is argmax W @ rmsnorm(E[t])). Draft, MTP head and EAGLE-3 drafter reuse them.
BASE_EMBD = 64
LOGIT_STD = 4.0  # std of a printable token's logit for a unit-RMS hidden state


def base_embeddings(vocab: Vocab, seed: int, n_embd: int = BASE_EMBD) -> tuple[np.ndarray, np.ndarray]:
    """Token embedding and output matrix shared by all tiny models, ``n_embd`` wide.

    Dimension 0 of every embedding is a large constant, so after the final
    RMS norm it is a positive "bias" input of about 3; the output rows of
    tokens the models must not produce (control tokens, non-printable bytes)
    are zero except for a large negative weight on it: their logits sit about
    15 below zero, far under the printable tokens' (std 4, top ~ +10), so even
    sampling at high temperature practically never yields them.
    """
    rng = Rng(seed)
    n_vocab = len(vocab.tokens)
    emb = rng.normal("base.embd", (n_vocab, BASE_EMBD), 1.0)
    emb[:, 0] = 3.0
    out = rng.normal("base.output", (n_vocab, BASE_EMBD), LOGIT_STD / np.sqrt(BASE_EMBD))
    out[:, 0] = 0.0
    out[~vocab.printable] = 0.0
    out[~vocab.printable, 0] = -5.0
    if n_embd == BASE_EMBD:
        return emb, out
    if n_embd < BASE_EMBD:
        raise ValueError(f"n_embd must be at least {BASE_EMBD}, got {n_embd}")
    # A wider model keeps the same language: its embedding and output rows are
    # zero past the first BASE_EMBD dimensions. The final RMS norm then scales
    # those dimensions up by about sqrt(n_embd / BASE_EMBD), which the output
    # rows scale back, so the logits stay about as sharp as at BASE_EMBD.
    wide_emb = np.zeros((n_vocab, n_embd), dtype=np.float32)
    wide_emb[:, :BASE_EMBD] = emb
    wide_out = np.zeros((n_vocab, n_embd), dtype=np.float32)
    wide_out[:, :BASE_EMBD] = out * np.float32(np.sqrt(BASE_EMBD / n_embd))
    return wide_emb, wide_out


def common_kv(arch: str, name: str, d: Dims, n_blocks: int) -> dict[str, GGUFValue]:
    """Metadata every tiny model carries: name, sizes, norm epsilon, RoPE base."""
    return {
        "general.architecture": string(arch),
        "general.name": string(name),
        "general.file_type": u32(0),  # LLAMA_FTYPE_ALL_F32
        f"{arch}.context_length": u32(d.n_ctx_train),
        f"{arch}.embedding_length": u32(d.n_embd),
        f"{arch}.block_count": u32(n_blocks),
        f"{arch}.feed_forward_length": u32(d.n_ff),
        f"{arch}.attention.head_count": u32(d.n_head),
        f"{arch}.attention.head_count_kv": u32(d.n_head_kv),
        f"{arch}.attention.layer_norm_rms_epsilon": f32(1e-5),
        f"{arch}.rope.freq_base": f32(10000.0),
    }


def attention(rng: Rng, t: dict[str, np.ndarray], i: int, d: Dims, gain: float, gated_q: bool = False) -> None:
    """q/k/v/o projections of block ``i``; ``gain`` ~ how much one block moves the residual.

    ``gated_q``: the query projection also yields a per-head output gate
    (twice the rows), as in Qwen3-Next / Qwen 3.5 attention.
    """
    n_in = d.n_embd
    hd = d.head_dim
    std = np.sqrt(gain) / np.sqrt(n_in)
    p = f"blk.{i}."
    q_rows = d.n_head * hd * (2 if gated_q else 1)
    t[p + "attn_q.weight"] = rng.normal(p + "q", (q_rows, n_in), 1.0 / np.sqrt(n_in))
    t[p + "attn_k.weight"] = rng.normal(p + "k", (d.n_head_kv * hd, n_in), 1.0 / np.sqrt(n_in))
    t[p + "attn_v.weight"] = rng.normal(p + "v", (d.n_head_kv * hd, n_in), std)
    t[p + "attn_output.weight"] = rng.normal(p + "o", (d.n_embd, d.n_head * hd), np.sqrt(gain) / np.sqrt(d.n_head * hd))


def ffn(rng: Rng, t: dict[str, np.ndarray], i: int, d: Dims, gain: float) -> None:
    """A SwiGLU feed-forward block for block ``i`` (gate, up, down)."""
    p = f"blk.{i}."
    t[p + "ffn_gate.weight"] = rng.normal(p + "gate", (d.n_ff, d.n_embd), 1.0 / np.sqrt(d.n_embd))
    t[p + "ffn_up.weight"] = rng.normal(p + "up", (d.n_ff, d.n_embd), 1.0 / np.sqrt(d.n_embd))
    t[p + "ffn_down.weight"] = rng.normal(p + "down", (d.n_embd, d.n_ff), gain / np.sqrt(d.n_ff))


# NextN/MTP blocks: how much they move the residual, and how much of the
# trunk's hidden state h enters them beside the next token's embedding.
MTP_BLOCK_GAIN = 0.1
MTP_H_MIX = 0.15


def nextn_input(rng: Rng, t: dict[str, np.ndarray], i: int, n: int) -> None:
    """The NextN input of block ``i``: eh_proj(concat(enorm(embd(next token)), hnorm(h))).

    It mostly passes the next token's embedding through (a little of h), so
    the block predicts about what the trunk predicts one step later and its
    drafts are accepted part of the time.
    """
    p = f"blk.{i}."
    eh = rng.normal(p + "eh_proj", (n, 2 * n), MTP_H_MIX / np.sqrt(n))
    eh[:, :n] = np.eye(n, dtype=np.float32)
    t[p + "nextn.eh_proj.weight"] = eh
    t[p + "nextn.enorm.weight"] = ones(n)
    t[p + "nextn.hnorm.weight"] = ones(n)
