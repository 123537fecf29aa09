"""The vocabulary every tiny model carries: GPT-2 style byte-level BPE.

Token ids 0..4 are control tokens (BOS, EOS, PAD, UNK, MASK), then the 256
byte tokens, then a few dozen merges so that ASCII prompts tokenize into
multi-byte tokens. The "reversed" variant lists the byte tokens in reverse
order: same size, type and special tokens, different texts (an incompatible
draft). The "fim" variant appends six fill-in-the-middle control tokens
(`FIM_TOKENS`), whose ids `fim_kv` writes into the metadata: their texts are
none that llama.cpp would recognise by itself, so only the metadata names them.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ._gguf import GGUFValue, GGUFValueType, array, boolean, string, u32

BOS_ID = 0
EOS_ID = 1
PAD_ID = 2
MASK_ID = 4
_SPECIALS = ("<s>", "</s>", "<pad>", "<unk>", "<mask>")  # ids 0..4: all CONTROL
FIM_TOKENS = {"pre": "<FILL_PRE>", "suf": "<FILL_SUF>", "mid": "<FILL_MID>", "pad": "<FILL_PAD>",
              "rep": "<FILL_REPO>", "sep": "<FILL_FILE>"}
"""The "fim" variant's tokens by the metadata's kind (``tokenizer.ggml.fim_<kind>_token_id``), in id order."""

# token types (llama_token_type)
_TT_NORMAL = 1
_TT_CONTROL = 3

# A few dozen merges so that ASCII prompts tokenize into multi-byte tokens.
# Each merge's two halves exist by the time it is applied (checked below).
MERGES = (
    "Ġ t", "h e", "i n", "e r", "a n", "Ġ a", "Ġt he", "o n", "r e", "a t",
    "e n", "n d", "Ġ s", "Ġ w", "Ġ o", "Ġ c", "Ġ f", "Ġ b", "Ġ m", "Ġ p",
    "Ġ d", "Ġ h", "Ġ i", "Ġ l", "Ġ n", "Ġ e", "Ġ g", "Ġ r", "Ġ u", "Ġ y",
    "in g", "o u", "e s", "e d", "o r", "a r", "a l", "s t", "l e", "l l",
    "o w", "i s", "i t", "a s", "c e", "m e", "e f", "Ġa nd", "Ġo f", "Ġt o",
    "Ġi n", "Ġi s", "Ġi t", "Ġy ou", "Ġw as", "Ġw h", "Ġu p", "Ġo n", "Ġup on",
    "Ġt i", "Ġti me", "Ġd ef", "Ġ T", "Ġ I", "Ġ A", "Ġ =", "Ġ (", "( )",
    "Ġ Ġ", "ĠĠ ĠĠ", "Ċ Ċ", ": Ċ", "Ġ 1", "Ġ 0", "Ġ x",
)


def bytes_to_unicode() -> list[str]:
    """GPT-2's reversible byte -> printable unicode character table."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs))
    return [chr(table[b]) for b in range(256)]


@dataclasses.dataclass(frozen=True)
class Vocab:
    """Token texts, types and merges, and which tokens the models may produce."""

    tokens: tuple[str, ...]
    types: tuple[int, ...]
    merges: tuple[str, ...]
    printable: np.ndarray  # bool mask: token may be produced by the models


def build_vocab(variant: str = "default") -> Vocab:
    """The tiny models' vocabulary; ``"reversed"``: byte tokens in reverse order."""
    byte_chars = bytes_to_unicode()
    byte_order = list(range(256))
    if variant == "reversed":
        byte_order.reverse()
    elif variant not in ("default", "fim"):
        raise ValueError(f"unknown vocab variant {variant!r}")
    tokens: list[str] = list(_SPECIALS)
    types: list[int] = [_TT_CONTROL] * len(_SPECIALS)
    printable: list[bool] = [False] * len(_SPECIALS)
    for b in byte_order:
        tokens.append(byte_chars[b])
        types.append(_TT_NORMAL)
        printable.append(0x20 <= b <= 0x7E or b == 0x0A)
    known = set(tokens)
    for m in MERGES:
        left, right = m.split(" ")
        assert left in known and right in known, m
        tok = left + right
        assert tok not in known, m
        tokens.append(tok)
        types.append(_TT_NORMAL)
        printable.append(True)
        known.add(tok)
    if variant == "fim":  # after the merges: every other id stays the default vocabulary's
        tokens.extend(FIM_TOKENS.values())
        types.extend([_TT_CONTROL] * len(FIM_TOKENS))
        printable.extend([False] * len(FIM_TOKENS))
    return Vocab(tuple(tokens), tuple(types), MERGES, np.array(printable))


def vocab_tokens(variant: str = "default") -> tuple[str, ...]:
    """The token texts every tiny model carries (``"reversed"``: the incompatible one)."""
    return build_vocab(variant).tokens


def fim_kv(vocab: Vocab, kinds: tuple[str, ...] = tuple(FIM_TOKENS)) -> dict[str, GGUFValue]:
    """``tokenizer.ggml.fim_<kind>_token_id`` of the "fim" vocabulary's tokens of ``kinds``."""
    return {f"tokenizer.ggml.fim_{kind}_token_id": u32(vocab.tokens.index(FIM_TOKENS[kind])) for kind in kinds}


def tokenizer_kv(vocab: Vocab) -> dict[str, GGUFValue]:
    """The tokenizer.ggml.* metadata of every tiny model."""
    return {
        "tokenizer.ggml.model": string("gpt2"),
        "tokenizer.ggml.pre": string("gpt-2"),
        "tokenizer.ggml.tokens": array(GGUFValueType.STRING, vocab.tokens),
        "tokenizer.ggml.token_type": array(GGUFValueType.INT32, vocab.types),
        "tokenizer.ggml.merges": array(GGUFValueType.STRING, vocab.merges),
        "tokenizer.ggml.bos_token_id": u32(BOS_ID),
        "tokenizer.ggml.eos_token_id": u32(EOS_ID),
        "tokenizer.ggml.padding_token_id": u32(PAD_ID),
        "tokenizer.ggml.add_bos_token": boolean(True),
        "tokenizer.ggml.add_eos_token": boolean(False),
    }
