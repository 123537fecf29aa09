"""Reading a request's JSON fields: checked types, and 400s that name the field and say what came."""

from __future__ import annotations

import math
from typing import Any

from ._errors import bad_request

__all__ = ["get_field", "json_object", "json_type", "short"]

_TYPE_NAMES = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "an array",
               dict: "an object"}


def json_object(body: object) -> dict[str, Any]:
    """``body`` if it is a JSON object.

    Raises:
        ApiError: a 400 saying what the body is instead.
    """
    if not isinstance(body, dict):
        raise bad_request(f"the request body must be a JSON object, not {json_type(body)}")
    return body


def get_field(body: dict[str, Any], name: str, kind: type, *, default: Any, where: str | None = None) -> Any:
    """``body[name]`` checked against ``kind`` (int excludes bool, float accepts int); absent or null: ``default``.

    ``where`` is the field's name in messages (default ``name``).

    Raises:
        ApiError: a 400 naming the field (code ``invalid_type``).
    """
    value = body.get(name)
    if value is None:
        return default
    ok = (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
          if kind is float else isinstance(value, kind) and not (kind is int and isinstance(value, bool)))
    if not ok:
        where = where or name
        raise bad_request(f"{where} must be {_TYPE_NAMES[kind]}, not {json_type(value)} {short(value)}",
                          param=where, code="invalid_type")
    return float(value) if kind is float else value


def json_type(value: object) -> str:
    """The JSON type name of a parsed value (``"integer"``, ``"array"``, ...)."""
    for kind, name in ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"),
                       (list, "array"), (dict, "object")):
        if isinstance(value, kind):
            return name
    return "null" if value is None else type(value).__name__


def short(value: object) -> str:
    """``repr(value)``, cut to 40 characters for a message."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
