"""Damaged copies of a GGUF file for the model-loading fuzz test.

`layout` finds where each header field, metadata value and tensor record of
a GGUF file lies; the ``*_cases`` functions turn that into named mutations
(a truncation, one patched field, a flipped byte), each a function from the
original bytes to damaged ones.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

Mutation = Callable[[bytes], bytes]

# GGUF value types: struct format of the fixed-size ones.
_FIXED = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9

VALUES = (0, 1, 7, 100000, 2**31 - 1)
"""What every numeric metadata value is set to in turn (issue 11)."""


@dataclass
class Layout:
    """Offsets of the patchable parts of one GGUF file."""

    scalars: list[tuple[str, int, int]] = field(default_factory=list)
    """(key, value type, offset) of each numeric scalar metadata value."""
    counts: list[tuple[str, int]] = field(default_factory=list)
    """(name, offset) of u64 counts and lengths: header counts, string and array lengths."""
    u32s: list[tuple[str, int]] = field(default_factory=list)
    """(name, offset) of u32 tensor fields: dimension counts and types."""
    boundaries: list[tuple[str, int]] = field(default_factory=list)
    """(name, offset) where a header part starts: truncation points."""


def layout(data: bytes) -> Layout:
    """Parse a well-formed GGUF file into a `Layout`."""
    out = Layout()
    pos = 8
    out.counts += [("header.n_tensors", pos), ("header.n_kv", pos + 8)]
    n_tensors, n_kv = struct.unpack_from("<QQ", data, pos)
    pos += 16

    def string(name: str) -> str:
        nonlocal pos
        (n,) = struct.unpack_from("<Q", data, pos)
        out.counts.append((f"{name}.strlen", pos))
        text = data[pos + 8:pos + 8 + n].decode("utf-8", "replace")
        pos += 8 + n
        return text

    for i in range(n_kv):
        out.boundaries.append((f"kv{i}", pos))
        key = string(f"kv{i}.key")
        (vtype,) = struct.unpack_from("<I", data, pos)
        pos += 4
        if vtype in _FIXED:
            out.scalars.append((key, vtype, pos))
            pos += struct.calcsize(_FIXED[vtype])
        elif vtype == _STRING:
            string(key)
        else:
            etype, n = struct.unpack_from("<IQ", data, pos)
            out.counts.append((f"{key}.arrlen", pos + 4))
            pos += 12
            if etype != _STRING:
                pos += n * struct.calcsize(_FIXED[etype])
                continue
            for j in range(n):
                if j < 2:  # the first strings' lengths are patched; the rest only skipped
                    string(f"{key}[{j}]")
                else:
                    (m,) = struct.unpack_from("<Q", data, pos)
                    pos += 8 + m
    for i in range(n_tensors):
        out.boundaries.append((f"tensor{i}", pos))
        string(f"tensor{i}.name")
        (n_dims,) = struct.unpack_from("<I", data, pos)
        out.u32s.append((f"tensor{i}.n_dims", pos))
        pos += 4
        for d in range(n_dims):
            out.counts.append((f"tensor{i}.ne{d}", pos))
            pos += 8
        out.u32s.append((f"tensor{i}.type", pos))
        out.counts.append((f"tensor{i}.offset", pos + 4))
        pos += 12
    out.boundaries.append(("tensor data", pos))
    return out


def _patch(offset: int, fmt: str, value: int | float) -> Mutation:
    def mutate(data: bytes) -> bytes:
        buf = bytearray(data)
        struct.pack_into(fmt, buf, offset, value)
        return bytes(buf)
    return mutate


def _fit(fmt: str, value: int) -> int | float | bool:
    """``value`` in a field of struct format ``fmt``: saturated to its range."""
    if fmt in ("<f", "<d"):
        return float(value)
    if fmt == "<?":
        return bool(value)
    bits = struct.calcsize(fmt) * 8
    lo, hi = (0, 2**bits - 1) if fmt[1].isupper() else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    return max(lo, min(hi, value))


def metadata_cases(lay: Layout) -> Iterator[tuple[str, Mutation]]:
    """Every numeric scalar metadata value set to each of `VALUES`."""
    for key, vtype, offset in lay.scalars:
        fmt = _FIXED[vtype]
        for value in VALUES:
            yield f"{key}={value}", _patch(offset, fmt, _fit(fmt, value))


def header_cases(lay: Layout) -> Iterator[tuple[str, Mutation]]:
    """Counts, lengths, dimension counts and tensor types set to absurd values."""
    for name, offset in lay.counts:
        if name.startswith(("header.", "kv0", "kv1", "tensor0", "tensor1")) or name.endswith(".arrlen"):
            for value in (0, 1, 2**31 - 1, 2**64 - 1):
                yield f"{name}={value}", _patch(offset, "<Q", value)
    for name, offset in lay.u32s[:6]:
        for value in (0, 5, 100, 2**31 - 1):
            yield f"{name}={value}", _patch(offset, "<I", value)


def truncation_cases(lay: Layout, size: int) -> Iterator[tuple[str, Mutation]]:
    """The file cut at header boundaries, just after them, and inside the data."""
    points = {0, 4, 8, 16, 24, size // 2, size - 1}
    for _, offset in lay.boundaries[:12] + lay.boundaries[-3:]:
        points |= {offset, offset + 3}
    for n in sorted(p for p in points if 0 <= p < size):
        yield f"truncated to {n} bytes", lambda data, n=n: data[:n]


def byte_flip_cases(lay: Layout, size: int, n: int, seed: int) -> Iterator[tuple[str, Mutation]]:
    """``n`` random single-byte flips, half of them in the header and metadata."""
    rng = random.Random(seed)
    data_start = lay.boundaries[-1][1]
    for i in range(n):
        offset = rng.randrange(data_start) if i % 2 == 0 else rng.randrange(size)
        xor = rng.randrange(1, 256)

        def mutate(data: bytes, offset: int = offset, xor: int = xor) -> bytes:
            buf = bytearray(data)
            buf[offset] ^= xor
            return bytes(buf)

        yield f"byte {offset} ^= {xor:#04x}", mutate
