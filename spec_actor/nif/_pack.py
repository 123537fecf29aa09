"""Packing plain Python values into the native parameter structs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._raw import ffi


def new_struct(ctype: str, values: Mapping[str, Any], keepalive: list[Any]) -> Any:
    """A new ``ctype *`` with each field set from ``values`` (keys are field names).

    ``str`` values become NUL-terminated UTF-8 buffers appended to
    ``keepalive`` (the caller keeps it alive while the struct is in use);
    None becomes NULL. A key that is not a field of the struct raises
    AttributeError: the names are the header's.
    """
    struct = ffi.new(ctype)
    fill(struct, values, keepalive)
    return struct


def fill(struct: Any, values: Mapping[str, Any], keepalive: list[Any]) -> None:
    """Set the fields of a cffi struct (or struct pointer) from ``values``; see `new_struct`."""
    for name, value in values.items():
        if isinstance(value, str):
            buf = ffi.new("char[]", value.encode("utf-8"))
            keepalive.append(buf)
            value = buf
        elif value is None:
            value = ffi.NULL
        setattr(struct, name, value)
