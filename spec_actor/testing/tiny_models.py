"""Tiny random-weight GGUF models for testing speculative decoding.

The embedded default model (Gemma 3 270M) has no NextN/MTP layers and no
companion draft model, so the test suite writes its own models here: small
enough to write in milliseconds and to run on two CPU cores, yet real
llama.cpp architectures that ``llama_model_load_from_file`` accepts.

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

``write_draft_pair(dir)``
    A ``llama`` target (4 blocks, n_embd 64) and a smaller ``llama`` draft
    (1 block: exactly the target's first block, embedding and output) with an
    identical vocabulary, so ``common_speculative_are_compatible`` accepts
    them (draft-simple).

``write_incompatible_draft(path, like=target)``
    A ``llama`` draft whose vocabulary has the same size, type and special
    tokens but different token texts from id 5 on (byte tokens in reverse
    order), so the compatibility check fails.

``write_eagle3_drafter(path, target)``
    An ``eagle3`` drafter (one decoder block + the ``fc`` feature-fusion
    layer) for the draft-pair target: ``eagle3.target_layers = [1, 2, 3]``,
    ``eagle3.target_hidden_size = 64``. It carries its own ``token_embd`` and
    ``output``, so the drafter context also works without ``ctx_other``.

Weights are float32, drawn from a fixed seed (stable per tensor name), and
shaped so that greedy decoding is not degenerate: the residual stream is
dominated by the token embedding, so each model behaves roughly like a fixed
random bigram map with some context mixing. Draft, MTP head and EAGLE-3
drafter are built to approximate that same map, so their drafts are accepted
part of the time (not always, not never). Control tokens (EOS included) and
bytes that are not printable ASCII get logits far below the others, so even
sampled text is printable ASCII plus newlines and generation practically
never ends with an end-of-generation token before the token budget.

Only numpy and the standard library are used: the GGUF writer is a small
self-contained implementation of the documented format (header, key/value
metadata, tensor infos, aligned tensor data), so nothing depends on the
``gguf`` package or on a llama.cpp source tree.
"""

from __future__ import annotations

import dataclasses
import os
import struct
import zlib
from pathlib import Path
from typing import Any, BinaryIO, Mapping, Sequence

import numpy as np

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "PAD_ID",
    "GGUFFile",
    "GGUFTensorInfo",
    "MTP_ARCH",
    "DRAFT_ARCH",
    "EAGLE3_TARGET_LAYERS",
    "read_gguf",
    "write_gguf",
    "vocab_tokens",
    "write_mtp_model",
    "write_draft_pair",
    "write_incompatible_draft",
    "write_eagle3_drafter",
]

# --------------------------------------------------------------------------
# GGUF format (ggml/include/gguf.h, docs: ggml/docs/gguf.md)
# --------------------------------------------------------------------------

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
GGUF_ALIGNMENT = 32  # GGUF_DEFAULT_ALIGNMENT; we do not write general.alignment

# gguf_type
UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)

_SCALAR_FMT = {
    UINT8: "<B",
    INT8: "<b",
    UINT16: "<H",
    INT16: "<h",
    UINT32: "<I",
    INT32: "<i",
    FLOAT32: "<f",
    BOOL: "<?",
    UINT64: "<Q",
    INT64: "<q",
    FLOAT64: "<d",
}
_SCALAR_NP = {
    UINT8: "<u1",
    INT8: "<i1",
    UINT16: "<u2",
    INT16: "<i2",
    UINT32: "<u4",
    INT32: "<i4",
    FLOAT32: "<f4",
    BOOL: "<u1",
    UINT64: "<u8",
    INT64: "<i8",
    FLOAT64: "<f8",
}

# ggml_type (ggml/include/ggml.h) for the dtypes we write
GGML_TYPE_F32 = 0
GGML_TYPE_F16 = 1
GGML_TYPE_I32 = 26
GGML_TYPE_I64 = 27
_GGML_TYPE_OF_DTYPE = {
    np.dtype("<f4"): GGML_TYPE_F32,
    np.dtype("<f2"): GGML_TYPE_F16,
    np.dtype("<i4"): GGML_TYPE_I32,
    np.dtype("<i8"): GGML_TYPE_I64,
}
_DTYPE_OF_GGML_TYPE = {v: k for k, v in _GGML_TYPE_OF_DTYPE.items()}


@dataclasses.dataclass(frozen=True)
class KV:
    """A typed GGUF metadata value. ``elem`` is the element type of arrays."""

    type: int
    value: Any
    elem: int | None = None


def u32(v: int) -> KV:
    return KV(UINT32, int(v))


def i32(v: int) -> KV:
    return KV(INT32, int(v))


def f32(v: float) -> KV:
    return KV(FLOAT32, float(v))


def boolean(v: bool) -> KV:
    return KV(BOOL, bool(v))


def string(v: str) -> KV:
    return KV(STRING, str(v))


def array(elem: int, values: Sequence[Any]) -> KV:
    return KV(ARRAY, list(values), elem)


def _align(n: int, a: int = GGUF_ALIGNMENT) -> int:
    return (n + a - 1) // a * a


def _pack_str(s: str) -> bytes:
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _pack_kv(kv: KV) -> bytes:
    if kv.type == STRING:
        return _pack_str(kv.value)
    if kv.type == ARRAY:
        if kv.elem is None or kv.elem == ARRAY:
            raise ValueError("array element type missing or nested arrays")
        head = struct.pack("<IQ", kv.elem, len(kv.value))
        if kv.elem == STRING:
            return head + b"".join(_pack_str(s) for s in kv.value)
        return head + np.asarray(kv.value, dtype=_SCALAR_NP[kv.elem]).tobytes()
    return struct.pack(_SCALAR_FMT[kv.type], kv.value)


def write_gguf(path: str | os.PathLike[str], metadata: Mapping[str, KV], tensors: Mapping[str, np.ndarray]) -> Path:
    """Write a GGUF v3 file.

    ``tensors`` maps names to C-contiguous numpy arrays of float32, float16,
    int32 or int64; a numpy array of shape ``(a, b, c)`` is the ggml tensor
    with ``ne = [c, b, a]`` (ggml lists the fastest-varying dimension first).
    The file is written to a temporary name and renamed into place.
    """
    path = Path(path)
    infos = bytearray()
    blobs: list[bytes] = []
    offset = 0
    for name, arr in tensors.items():
        arr = np.ascontiguousarray(arr)
        ggml_type = _GGML_TYPE_OF_DTYPE.get(arr.dtype.newbyteorder("<"))
        if ggml_type is None:
            raise TypeError(f"tensor {name}: unsupported dtype {arr.dtype}")
        ne = tuple(reversed(arr.shape)) or (1,)
        infos += _pack_str(name)
        infos += struct.pack("<I", len(ne))
        infos += struct.pack(f"<{len(ne)}Q", *ne)
        infos += struct.pack("<IQ", ggml_type, offset)
        data = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        blobs.append(data)
        offset = _align(offset + len(data))

    header = bytearray()
    header += GGUF_MAGIC
    header += struct.pack("<IQQ", GGUF_VERSION, len(tensors), len(metadata))
    for key, kv in metadata.items():
        header += _pack_str(key)
        header += struct.pack("<I", kv.type)
        header += _pack_kv(kv)
    header += infos
    header += b"\0" * (_align(len(header)) - len(header))

    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(header)
        for data in blobs:
            f.write(data)
            f.write(b"\0" * (_align(len(data)) - len(data)))
    os.replace(tmp, path)
    return path


@dataclasses.dataclass(frozen=True)
class GGUFTensorInfo:
    name: str
    ne: tuple[int, ...]  # ggml order: fastest-varying dimension first
    ggml_type: int
    offset: int  # relative to GGUFFile.data_offset

    @property
    def shape(self) -> tuple[int, ...]:
        """numpy shape (slowest-varying first)."""
        return tuple(reversed(self.ne))

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.ne)) * _DTYPE_OF_GGML_TYPE[self.ggml_type].itemsize


@dataclasses.dataclass(frozen=True)
class GGUFFile:
    path: Path
    version: int
    metadata: dict[str, Any]
    metadata_types: dict[str, int]
    tensors: dict[str, GGUFTensorInfo]
    data_offset: int
    file_size: int

    def tensor(self, name: str) -> np.ndarray:
        """Read one tensor's data back as a numpy array (numpy shape)."""
        info = self.tensors[name]
        dtype = _DTYPE_OF_GGML_TYPE[info.ggml_type]
        with open(self.path, "rb") as f:
            f.seek(self.data_offset + info.offset)
            raw = f.read(info.nbytes)
        return np.frombuffer(raw, dtype=dtype).reshape(info.shape)


def _read_exact(f: BinaryIO, n: int) -> bytes:
    b = f.read(n)
    if len(b) != n:
        raise ValueError("truncated GGUF file")
    return b


def _read_struct(f: BinaryIO, fmt: str) -> Any:
    vals = struct.unpack(fmt, _read_exact(f, struct.calcsize(fmt)))
    return vals[0] if len(vals) == 1 else vals


def _read_str(f: BinaryIO) -> str:
    n = _read_struct(f, "<Q")
    return _read_exact(f, n).decode("utf-8")


def _read_value(f: BinaryIO, vtype: int) -> Any:
    if vtype == STRING:
        return _read_str(f)
    if vtype == ARRAY:
        elem, n = _read_struct(f, "<IQ")
        if elem == STRING:
            return [_read_str(f) for _ in range(n)]
        if elem not in _SCALAR_NP:
            raise ValueError(f"bad array element type {elem}")
        dt = np.dtype(_SCALAR_NP[elem])
        vals = np.frombuffer(_read_exact(f, dt.itemsize * n), dtype=dt)
        return [bool(v) for v in vals] if elem == BOOL else vals.tolist()
    if vtype not in _SCALAR_FMT:
        raise ValueError(f"bad value type {vtype}")
    return _read_struct(f, _SCALAR_FMT[vtype])


def read_gguf(path: str | os.PathLike[str]) -> GGUFFile:
    """Parse a GGUF file's header, metadata and tensor infos (not the data)."""
    path = Path(path)
    with open(path, "rb") as f:
        if _read_exact(f, 4) != GGUF_MAGIC:
            raise ValueError(f"{path}: not a GGUF file")
        version, n_tensors, n_kv = _read_struct(f, "<IQQ")
        metadata: dict[str, Any] = {}
        types: dict[str, int] = {}
        for _ in range(n_kv):
            key = _read_str(f)
            vtype = _read_struct(f, "<I")
            metadata[key] = _read_value(f, vtype)
            types[key] = vtype
        alignment = int(metadata.get("general.alignment", GGUF_ALIGNMENT))
        tensors: dict[str, GGUFTensorInfo] = {}
        for _ in range(n_tensors):
            name = _read_str(f)
            n_dims = _read_struct(f, "<I")
            ne = struct.unpack(f"<{n_dims}Q", _read_exact(f, 8 * n_dims))
            ggml_type, offset = _read_struct(f, "<IQ")
            tensors[name] = GGUFTensorInfo(name, tuple(ne), ggml_type, offset)
        data_offset = _align(f.tell(), alignment)
    return GGUFFile(path, version, metadata, types, tensors, data_offset, path.stat().st_size)


# --------------------------------------------------------------------------
# Vocabulary: GPT-2 style byte-level BPE ("gpt2" model, "gpt-2" pre-tokenizer)
# --------------------------------------------------------------------------

BOS_ID = 0
EOS_ID = 1
PAD_ID = 2
_SPECIALS = ("<s>", "</s>", "<pad>", "<unk>", "<mask>")  # ids 0..4: all CONTROL

# token types (llama_token_type)
_TT_NORMAL = 1
_TT_CONTROL = 3

# A few dozen merges so that ASCII prompts tokenize into multi-byte tokens.
# Each merge's two halves exist by the time it is applied (checked below).
_MERGES = (
    "Ġ t", "h e", "i n", "e r", "a n", "Ġ a", "Ġt he", "o n", "r e", "a t",
    "e n", "n d", "Ġ s", "Ġ w", "Ġ o", "Ġ c", "Ġ f", "Ġ b", "Ġ m", "Ġ p",
    "Ġ d", "Ġ h", "Ġ i", "Ġ l", "Ġ n", "Ġ e", "Ġ g", "Ġ r", "Ġ u", "Ġ y",
    "in g", "o u", "e s", "e d", "o r", "a r", "a l", "s t", "l e", "l l",
    "o w", "i s", "i t", "a s", "c e", "m e", "e f", "Ġa nd", "Ġo f", "Ġt o",
    "Ġi n", "Ġi s", "Ġi t", "Ġy ou", "Ġw as", "Ġw h", "Ġu p", "Ġo n", "Ġup on",
    "Ġt i", "Ġti me", "Ġd ef", "Ġ T", "Ġ I", "Ġ A", "Ġ =", "Ġ (", "( )",
    "Ġ Ġ", "ĠĠ ĠĠ", "Ċ Ċ", ": Ċ", "Ġ 1", "Ġ 0", "Ġ x",
)


def _bytes_to_unicode() -> list[str]:
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
class _Vocab:
    tokens: tuple[str, ...]
    types: tuple[int, ...]
    merges: tuple[str, ...]
    printable: np.ndarray  # bool mask: token may be produced by the models


def _build_vocab(variant: str = "default") -> _Vocab:
    byte_chars = _bytes_to_unicode()
    byte_order = list(range(256))
    if variant == "reversed":
        byte_order.reverse()
    elif variant != "default":
        raise ValueError(f"unknown vocab variant {variant!r}")
    tokens: list[str] = list(_SPECIALS)
    types: list[int] = [_TT_CONTROL] * len(_SPECIALS)
    printable: list[bool] = [False] * len(_SPECIALS)
    for b in byte_order:
        tokens.append(byte_chars[b])
        types.append(_TT_NORMAL)
        printable.append(0x20 <= b <= 0x7E or b == 0x0A)
    known = set(tokens)
    for m in _MERGES:
        left, right = m.split(" ")
        assert left in known and right in known, m
        tok = left + right
        assert tok not in known, m
        tokens.append(tok)
        types.append(_TT_NORMAL)
        printable.append(True)
        known.add(tok)
    return _Vocab(tuple(tokens), tuple(types), _MERGES, np.array(printable))


def vocab_tokens(variant: str = "default") -> tuple[str, ...]:
    """The token texts every tiny model carries (``"reversed"``: the incompatible one)."""
    return _build_vocab(variant).tokens


def _tokenizer_kv(vocab: _Vocab) -> dict[str, KV]:
    return {
        "tokenizer.ggml.model": string("gpt2"),
        "tokenizer.ggml.pre": string("gpt-2"),
        "tokenizer.ggml.tokens": array(STRING, vocab.tokens),
        "tokenizer.ggml.token_type": array(INT32, vocab.types),
        "tokenizer.ggml.merges": array(STRING, vocab.merges),
        "tokenizer.ggml.bos_token_id": u32(BOS_ID),
        "tokenizer.ggml.eos_token_id": u32(EOS_ID),
        "tokenizer.ggml.padding_token_id": u32(PAD_ID),
        "tokenizer.ggml.add_bos_token": boolean(True),
        "tokenizer.ggml.add_eos_token": boolean(False),
    }


# --------------------------------------------------------------------------
# Weights
# --------------------------------------------------------------------------

_SEED = 10  # picked among a few seeds: long greedy cycles, mid-range acceptance


class _Rng:
    """Deterministic per-name normal draws (independent of call order)."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def normal(self, name: str, shape: tuple[int, ...], std: float) -> np.ndarray:
        g = np.random.default_rng([self.seed, zlib.crc32(name.encode())])
        return (g.standard_normal(shape) * std).astype(np.float32)


def _ones(n: int) -> np.ndarray:
    return np.ones(n, dtype=np.float32)


@dataclasses.dataclass(frozen=True)
class _Dims:
    n_embd: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_layer: int
    n_ctx_train: int = 4096

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


# Shared "language": a token embedding E and an output matrix W (the bigram map
# is argmax W @ rmsnorm(E[t])). Draft, MTP head and EAGLE-3 drafter reuse them.
_BASE_EMBD = 64
_LOGIT_STD = 4.0  # std of a printable token's logit for a unit-RMS hidden state


def _base_embeddings(vocab: _Vocab, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Token embedding and output matrix shared by all tiny models.

    Dimension 0 of every embedding is a large constant, so after the final
    RMS norm it is a positive "bias" input of about 3; the output rows of
    tokens the models must not produce (control tokens, non-printable bytes)
    are zero except for a large negative weight on it: their logits sit about
    15 below zero, far under the printable tokens' (std 4, top ~ +10), so even
    sampling at high temperature practically never yields them.
    """
    rng = _Rng(seed)
    n_vocab = len(vocab.tokens)
    emb = rng.normal("base.embd", (n_vocab, _BASE_EMBD), 1.0)
    emb[:, 0] = 3.0
    out = rng.normal("base.output", (n_vocab, _BASE_EMBD), _LOGIT_STD / np.sqrt(_BASE_EMBD))
    out[:, 0] = 0.0
    out[~vocab.printable] = 0.0
    out[~vocab.printable, 0] = -5.0
    return emb, out


def _common_kv(arch: str, name: str, d: _Dims, n_blocks: int) -> dict[str, KV]:
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


def _attn(rng: _Rng, t: dict[str, np.ndarray], i: int, d: _Dims, gain: float) -> None:
    """q/k/v/o projections; ``gain`` ~ how much one block moves the residual."""
    n_in = d.n_embd
    hd = d.head_dim
    std = np.sqrt(gain) / np.sqrt(n_in)
    p = f"blk.{i}."
    t[p + "attn_q.weight"] = rng.normal(p + "q", (d.n_head * hd, n_in), 1.0 / np.sqrt(n_in))
    t[p + "attn_k.weight"] = rng.normal(p + "k", (d.n_head_kv * hd, n_in), 1.0 / np.sqrt(n_in))
    t[p + "attn_v.weight"] = rng.normal(p + "v", (d.n_head_kv * hd, n_in), std)
    t[p + "attn_output.weight"] = rng.normal(p + "o", (d.n_embd, d.n_head * hd), np.sqrt(gain) / np.sqrt(d.n_head * hd))


def _ffn(rng: _Rng, t: dict[str, np.ndarray], i: int, d: _Dims, gain: float) -> None:
    p = f"blk.{i}."
    t[p + "ffn_gate.weight"] = rng.normal(p + "gate", (d.n_ff, d.n_embd), 1.0 / np.sqrt(d.n_embd))
    t[p + "ffn_up.weight"] = rng.normal(p + "up", (d.n_ff, d.n_embd), 1.0 / np.sqrt(d.n_embd))
    t[p + "ffn_down.weight"] = rng.normal(p + "down", (d.n_embd, d.n_ff), gain / np.sqrt(d.n_ff))


# --------------------------------------------------------------------------
# llama (draft-simple target / draft, incompatible draft)
# --------------------------------------------------------------------------

TARGET_DIMS = _Dims(n_embd=64, n_head=4, n_head_kv=2, n_ff=128, n_layer=4)
DRAFT_DIMS = dataclasses.replace(TARGET_DIMS, n_layer=1)
DRAFT_ARCH = "llama"
# Residual update per block, relative to the token embedding. The draft is the
# target's first block (same weights, same seed); the target's later blocks are
# gentler, so the draft agrees with the target often but not always.
_FIRST_GAIN = 0.35
_LATER_GAIN = 0.12
_LLAMA_SEED = _SEED + 1


def _llama_gains(n_layer: int) -> list[float]:
    return [_FIRST_GAIN] + [_LATER_GAIN] * (n_layer - 1)


def _write_llama(path: Path, name: str, d: _Dims, vocab: _Vocab) -> Path:
    emb, out = _base_embeddings(vocab, _SEED)
    rng = _Rng(_LLAMA_SEED)
    t: dict[str, np.ndarray] = {
        "token_embd.weight": emb,
        "output_norm.weight": _ones(d.n_embd),
        "output.weight": out,
    }
    for i, gain in enumerate(_llama_gains(d.n_layer)):
        t[f"blk.{i}.attn_norm.weight"] = _ones(d.n_embd)
        _attn(rng, t, i, d, gain)
        t[f"blk.{i}.ffn_norm.weight"] = _ones(d.n_embd)
        _ffn(rng, t, i, d, gain)
    kv = _common_kv("llama", name, d, d.n_layer)
    kv["llama.vocab_size"] = u32(len(vocab.tokens))
    kv["llama.rope.dimension_count"] = u32(d.head_dim)
    kv.update(_tokenizer_kv(vocab))
    return write_gguf(path, kv, t)


def write_draft_pair(directory: str | os.PathLike[str]) -> tuple[Path, Path]:
    """Write ``tiny-target.gguf`` and ``tiny-draft.gguf`` (same vocab) into ``directory``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    vocab = _build_vocab()
    target = _write_llama(directory / "tiny-target.gguf", "tiny-target", TARGET_DIMS, vocab)
    draft = _write_llama(directory / "tiny-draft.gguf", "tiny-draft", DRAFT_DIMS, vocab)
    return target, draft


def write_incompatible_draft(path: str | os.PathLike[str], like: str | os.PathLike[str] | None = None) -> Path:
    """Write a draft whose token texts differ from the tiny target's.

    Same vocab type (BPE), size and special tokens as :func:`write_draft_pair`'s
    target (``like``, checked if given), but the byte tokens are in reverse
    order, so ``common_speculative_are_compatible`` rejects the pair at token 5.
    """
    vocab = _build_vocab("reversed")
    if like is not None:
        other = read_gguf(like).metadata["tokenizer.ggml.tokens"]
        if len(other) != len(vocab.tokens) or other[5] == vocab.tokens[5]:
            raise ValueError("write_incompatible_draft: 'like' is not a tiny_models target")
    return _write_llama(Path(path), "tiny-draft-incompatible", DRAFT_DIMS, vocab)


# --------------------------------------------------------------------------
# glm4moe with one NextN/MTP block
# --------------------------------------------------------------------------

MTP_ARCH = "glm4moe"
MTP_DIMS = _Dims(n_embd=64, n_head=4, n_head_kv=2, n_ff=128, n_layer=2)
_MTP_EXPERTS = 4
_MTP_EXPERTS_USED = 2
_MTP_FF_EXP = 32
_MTP_BLOCK_GAIN = 0.1
_MTP_H_MIX = 0.15  # how much of the trunk's hidden state h enters the NextN block


def write_mtp_model(path: str | os.PathLike[str]) -> Path:
    """Write a ``glm4moe`` model with 2 trunk blocks and 1 NextN/MTP block."""
    path = Path(path)
    d = MTP_DIMS
    vocab = _build_vocab()
    emb, out = _base_embeddings(vocab, _SEED)
    rng = _Rng(_SEED + 4)
    n = d.n_embd
    t: dict[str, np.ndarray] = {
        "token_embd.weight": emb,
        "output_norm.weight": _ones(n),
        "output.weight": out,
    }
    # trunk: dense blocks (leading_dense_block_count = n_layer)
    for i, gain in enumerate(_llama_gains(d.n_layer)):
        t[f"blk.{i}.attn_norm.weight"] = _ones(n)
        _attn(rng, t, i, d, gain)
        t[f"blk.{i}.post_attention_norm.weight"] = _ones(n)
        _ffn(rng, t, i, d, gain)
    # NextN block: eh_proj(concat(enorm(embd(next token)), hnorm(h))) -> attention -> MoE.
    # It mostly passes the next token's embedding through (a little of h), so
    # its prediction approximates the trunk's next-token map one step ahead.
    i = d.n_layer
    p = f"blk.{i}."
    g = _MTP_BLOCK_GAIN
    t[p + "attn_norm.weight"] = _ones(n)
    _attn(rng, t, i, d, g)
    t[p + "post_attention_norm.weight"] = _ones(n)
    t[p + "ffn_gate_inp.weight"] = rng.normal(p + "router", (_MTP_EXPERTS, n), 1.0 / np.sqrt(n))
    t[p + "exp_probs_b.bias"] = np.zeros(_MTP_EXPERTS, dtype=np.float32)
    t[p + "ffn_gate_exps.weight"] = rng.normal(p + "gate_exps", (_MTP_EXPERTS, _MTP_FF_EXP, n), 1.0 / np.sqrt(n))
    t[p + "ffn_up_exps.weight"] = rng.normal(p + "up_exps", (_MTP_EXPERTS, _MTP_FF_EXP, n), 1.0 / np.sqrt(n))
    t[p + "ffn_down_exps.weight"] = rng.normal(p + "down_exps", (_MTP_EXPERTS, n, _MTP_FF_EXP), g / np.sqrt(_MTP_FF_EXP))
    t[p + "ffn_gate_shexp.weight"] = rng.normal(p + "gate_shexp", (_MTP_FF_EXP, n), 1.0 / np.sqrt(n))
    t[p + "ffn_up_shexp.weight"] = rng.normal(p + "up_shexp", (_MTP_FF_EXP, n), 1.0 / np.sqrt(n))
    t[p + "ffn_down_shexp.weight"] = rng.normal(p + "down_shexp", (n, _MTP_FF_EXP), g / np.sqrt(_MTP_FF_EXP))
    eh = rng.normal(p + "eh_proj", (n, 2 * n), _MTP_H_MIX / np.sqrt(n))
    eh[:, :n] = np.eye(n, dtype=np.float32)
    t[p + "nextn.eh_proj.weight"] = eh
    t[p + "nextn.enorm.weight"] = _ones(n)
    t[p + "nextn.hnorm.weight"] = _ones(n)

    kv = _common_kv(MTP_ARCH, "tiny-mtp", d, d.n_layer + 1)
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
    kv.update(_tokenizer_kv(vocab))
    return write_gguf(path, kv, t)


# --------------------------------------------------------------------------
# EAGLE-3 drafter for the llama target
# --------------------------------------------------------------------------

EAGLE3_TARGET_LAYERS = (1, 2, 3)
EAGLE3_DIMS = _Dims(n_embd=64, n_head=2, n_head_kv=2, n_ff=128, n_layer=1)


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
    vocab = _build_vocab()
    emb, out = _base_embeddings(vocab, _SEED)
    rng = _Rng(_SEED + 5)
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
        "output_norm.weight": _ones(n),
        "output.weight": out,
        "blk.0.attn_norm.weight": _ones(n),
        "blk.0.attn_norm_2.weight": np.full(n, 0.03, dtype=np.float32),
        "blk.0.attn_q.weight": qk_gain * sel + rng.normal("q", sel.shape, noise / np.sqrt(n)),
        "blk.0.attn_k.weight": qk_gain * sel + rng.normal("k", sel.shape, noise / np.sqrt(n)),
        "blk.0.attn_v.weight": sel + rng.normal("v", sel.shape, noise / np.sqrt(n)),
        "blk.0.attn_output.weight": np.eye(n, dtype=np.float32) + rng.normal("o", (n, n), noise / np.sqrt(n)),
        "blk.0.ffn_norm.weight": _ones(n),
    }
    _ffn(rng, t, 0, d, 0.03)
    kv = _common_kv("eagle3", "tiny-eagle3", d, 1)
    kv.update(
        {
            "eagle3.vocab_size": u32(len(vocab.tokens)),
            "eagle3.rope.dimension_count": u32(hd),
            "eagle3.target_layers": array(INT32, EAGLE3_TARGET_LAYERS),
            "eagle3.target_hidden_size": u32(n_embd_tgt),
            "eagle3.norm_before_residual": boolean(True),
        }
    )
    kv.update(_tokenizer_kv(vocab))
    return write_gguf(path, kv, t)
