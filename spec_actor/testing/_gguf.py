"""GGUF files through llama.cpp's own Python package (``gguf``, the test extra).

The tiny-model writers describe a model as plain data, metadata values typed
with the helpers below and numpy tensors, and :func:`write_gguf` hands both to
``gguf.GGUFWriter``. :func:`read_gguf` reads a file back with
``gguf.GGUFReader`` into plain Python values, for the writers' own checks and
for the tests.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValue, GGUFValueType, GGUFWriter

__all__ = ["GGUFFile", "GGUFTensorInfo", "GGUFValue", "GGUFValueType", "array", "boolean", "f32", "i32",
           "read_gguf", "string", "u32", "write_gguf"]

ARCH_KEY = "general.architecture"


def u32(v: int) -> GGUFValue:
    """A uint32 metadata value (llama.cpp reads most hyperparameters as uint32)."""
    return GGUFValue(int(v), GGUFValueType.UINT32)


def i32(v: int) -> GGUFValue:
    """An int32 metadata value."""
    return GGUFValue(int(v), GGUFValueType.INT32)


def f32(v: float) -> GGUFValue:
    """A float32 metadata value."""
    return GGUFValue(float(v), GGUFValueType.FLOAT32)


def boolean(v: bool) -> GGUFValue:
    """A bool metadata value."""
    return GGUFValue(bool(v), GGUFValueType.BOOL)


def string(v: str) -> GGUFValue:
    """A string metadata value."""
    return GGUFValue(str(v), GGUFValueType.STRING)


def array(elem: GGUFValueType, values: Sequence[Any]) -> GGUFValue:
    """A non-empty array of ``elem`` values (gguf-py writes no empty arrays)."""
    if not values:
        raise ValueError("GGUF arrays written here must not be empty")
    return GGUFValue(list(values), GGUFValueType.ARRAY, elem)


def write_gguf(path: str | os.PathLike[str], metadata: Mapping[str, GGUFValue],
               tensors: Mapping[str, np.ndarray]) -> Path:
    """Write a GGUF file with ``gguf.GGUFWriter``; returns its path.

    ``metadata`` must name the architecture (``general.architecture``).
    ``tensors`` maps names to numpy arrays (float32, float16 or integer); a
    numpy array of shape ``(a, b, c)`` is the ggml tensor ``ne = [c, b, a]``.
    The file is written under a temporary name and renamed into place, so a
    reader never sees half a file.
    """
    path = Path(path)
    if ARCH_KEY not in metadata:
        raise ValueError(f"metadata must name the architecture ({ARCH_KEY})")
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    writer = GGUFWriter(tmp, str(metadata[ARCH_KEY].value))
    try:
        for key, value in metadata.items():
            if key != ARCH_KEY:
                writer.add_key_value(key, value.value, value.type, value.sub_type)
        for name, arr in tensors.items():
            writer.add_tensor(name, np.ascontiguousarray(arr))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    finally:
        writer.close()
    os.replace(tmp, path)
    return path


@dataclasses.dataclass(frozen=True)
class GGUFTensorInfo:
    """One tensor's header entry."""

    name: str
    ne: tuple[int, ...]
    """ggml order: the fastest-varying dimension first."""
    ggml_type: GGMLQuantizationType
    offset: int
    """Relative to :attr:`GGUFFile.data_offset`."""
    nbytes: int

    @property
    def shape(self) -> tuple[int, ...]:
        """numpy shape (slowest-varying dimension first)."""
        return tuple(reversed(self.ne))


@dataclasses.dataclass(frozen=True)
class GGUFFile:
    """A GGUF file's header, metadata and tensor infos, read by ``gguf.GGUFReader``."""

    path: Path
    version: int
    metadata: dict[str, Any]
    """Values as plain Python (arrays as lists)."""
    metadata_types: dict[str, GGUFValueType]
    """Type of each value (ARRAY for arrays)."""
    array_types: dict[str, GGUFValueType]
    """Element type of each array value."""
    tensors: dict[str, GGUFTensorInfo]
    alignment: int
    data_offset: int
    file_size: int

    def tensor(self, name: str) -> np.ndarray:
        """One tensor's data as a numpy array (numpy shape)."""
        for t in GGUFReader(self.path).tensors:
            if t.name == name:
                return np.array(t.data).reshape(self.tensors[name].shape)
        raise KeyError(name)


def read_gguf(path: str | os.PathLike[str]) -> GGUFFile:
    """Parse a GGUF file; raises ValueError if it is not one."""
    path = Path(path)
    reader = GGUFReader(path)
    metadata: dict[str, Any] = {}
    types: dict[str, GGUFValueType] = {}
    elems: dict[str, GGUFValueType] = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):  # the reader's own entries for the fixed header
            continue
        metadata[key] = field.contents()
        types[key] = field.types[0]
        if field.types[0] == GGUFValueType.ARRAY:
            elems[key] = field.types[-1]
    tensors = {
        t.name: GGUFTensorInfo(t.name, tuple(int(x) for x in t.shape), GGMLQuantizationType(t.tensor_type),
                               int(t.data_offset) - reader.data_offset, int(t.n_bytes))
        for t in reader.tensors
    }
    version = int(reader.fields["GGUF.version"].contents())
    return GGUFFile(path, version, metadata, types, elems, tensors, reader.alignment, reader.data_offset,
                    path.stat().st_size)
