"""A tiny DFlash drafter for the draft-pair ``llama`` target.

Layout from the llama.cpp this project builds (src/models/dflash.cpp,
``load_arch_tensors``, the plain variant without DFlash2 convolutions, DSpark
heads or a reduced vocabulary): ``fc`` fuses the target's hidden states at
``dflash.target_layers`` (``len(target_layers) * n_embd`` wide), ``enc.output_norm``
normalizes the result, which is injected into the drafter's KV cache; one
decoder block with q/k norms then reads a block ``[last token, mask, mask,
...]`` with non-causal attention, and the outputs at the mask positions are
the drafted tokens.

The drafter must name its mask token (``tokenizer.ggml.mask_token_id``):
without one, common_speculative puts a null token into the draft batch and
llama.cpp aborts the process (GGML_ABORT in common_batch::get_sub_batch).

Weights are random: the drafts are almost never right. That is enough for
what the tests need from it, a DFlash generation whose drafts are rejected
at every step, so greedy output and counters can be checked end to end.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ._gguf import GGUFValueType, array, read_gguf, u32, write_gguf
from ._vocab import MASK_ID, build_vocab, tokenizer_kv
from ._weights import SEED, Dims, Rng, attention, base_embeddings, common_kv, ffn, ones

DFLASH_TARGET_LAYERS = (1, 3)
DFLASH_DIMS = Dims(n_embd=64, n_head=4, n_head_kv=2, n_ff=128, n_layer=1)
_GAIN = 0.05


def write_dflash_drafter(path: str | os.PathLike[str], target: str | os.PathLike[str] | None = None, *,
                         mask_token: bool = True) -> Path:
    """Write a ``dflash`` drafter for :func:`write_draft_pair`'s target (checked if given).

    ``mask_token=False`` leaves out ``tokenizer.ggml.mask_token_id``: a damaged
    drafter that spec_actor must refuse (llama.cpp would abort while drafting).
    """
    d = DFLASH_DIMS
    if target is not None:
        meta = read_gguf(target).metadata
        arch = meta["general.architecture"]
        if int(meta[f"{arch}.embedding_length"]) != d.n_embd or int(meta[f"{arch}.block_count"]) <= max(DFLASH_TARGET_LAYERS):
            raise ValueError("write_dflash_drafter: target is not the tiny_models draft-pair target")
    n = d.n_embd
    vocab = build_vocab()
    emb, out = base_embeddings(vocab, SEED)
    rng = Rng(SEED + 9)
    n_in = len(DFLASH_TARGET_LAYERS) * n
    t: dict[str, np.ndarray] = {
        "token_embd.weight": emb,
        "output.weight": out,
        "output_norm.weight": ones(n),
        "fc.weight": rng.normal("fc", (n, n_in), 1.0 / np.sqrt(n_in)),
        "enc.output_norm.weight": ones(n),
        "blk.0.attn_norm.weight": ones(n),
        "blk.0.attn_q_norm.weight": ones(d.head_dim),
        "blk.0.attn_k_norm.weight": ones(d.head_dim),
        "blk.0.ffn_norm.weight": ones(n),
    }
    attention(rng, t, 0, d, _GAIN)
    ffn(rng, t, 0, d, _GAIN)
    a = "dflash"
    kv = common_kv(a, "tiny-dflash", d, d.n_layer)
    kv.update(
        {
            f"{a}.vocab_size": u32(len(vocab.tokens)),
            f"{a}.rope.dimension_count": u32(d.head_dim),
            f"{a}.target_layers": array(GGUFValueType.INT32, DFLASH_TARGET_LAYERS),
        }
    )
    kv.update(tokenizer_kv(vocab))
    if mask_token:
        kv["tokenizer.ggml.mask_token_id"] = u32(MASK_ID)
    return write_gguf(path, kv, t)
