"""JSON schemas as grammars: checked in Python, converted by llama.cpp's own converter.

The checks bound what would make the converter or llama.cpp's grammar
parser work without limit: nesting (the converter recurses), the document's
size, and repetition counts (``maxItems: 10**9`` or a pattern's ``a{10**9}``
become that many grammar copies). Everything else the converter checks,
naming the part it cannot convert.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from ._errors import GrammarError
from .nif.json_schema import schema_to_grammar

__all__ = ["JSON_OBJECT_SCHEMA", "MAX_COUNT", "MAX_DEPTH", "MAX_SCHEMA_BYTES", "check_schema", "schema_grammar"]

MAX_DEPTH = 64
"""Deepest nesting of objects and arrays in a schema document."""
MAX_SCHEMA_BYTES = 256 * 1024
"""Largest schema, as compact JSON text."""
MAX_COUNT = 4096
"""Largest count a schema may give (minItems, maxLength, ... and a pattern's ``{m,n}``)."""

JSON_OBJECT_SCHEMA: dict[str, Any] = {"type": "object"}
"""The schema of OpenAI's ``response_format: {"type": "json_object"}``: any JSON object."""

_COUNT_KEYS = ("minItems", "maxItems", "minLength", "maxLength", "minProperties", "maxProperties",
               "minContains", "maxContains")
_PATTERN_COUNT = re.compile(r"\{\s*(\d+)\s*(?:,\s*(\d*)\s*)?\}")


def schema_grammar(schema: Mapping[str, Any]) -> str:
    """The GBNF grammar of ``schema``, a JSON schema as a dict (``{}``: any JSON value).

    Raises:
        GrammarError: the schema is not JSON data, is too deep or too large,
            gives a count over `MAX_COUNT`, or has a part llama.cpp's
            converter cannot convert; the message names the part.
    """
    return schema_to_grammar(check_schema(schema))


def check_schema(schema: object, name: str = "json_schema") -> str:
    """``schema`` as compact JSON text, once it passes the bounds (``name`` prefixes the messages).

    Raises:
        GrammarError: as `schema_grammar`, for the checks made before native code.
    """
    if not isinstance(schema, Mapping):
        raise GrammarError(f"{name} must be a JSON schema object (a dict), not {type(schema).__name__}")
    _check_parts(schema, name)
    try:
        text = json.dumps(schema, allow_nan=False, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise GrammarError(f"{name} is not JSON data: {exc}") from None
    if len(text.encode("utf-8")) > MAX_SCHEMA_BYTES:
        raise GrammarError(f"{name} is larger than {MAX_SCHEMA_BYTES} bytes of JSON; simplify it")
    if "\0" in text:
        raise GrammarError(f"{name} must not contain NUL characters")
    return text


def _check_parts(schema: object, name: str) -> None:
    """Walk the document without recursion: nesting depth, counts, pattern repetitions."""
    stack: list[tuple[object, str, int]] = [(schema, "#", 1)]
    while stack:
        node, path, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise GrammarError(f"{name} nests deeper than {MAX_DEPTH} levels at {path}; flatten it")
        if isinstance(node, Mapping):
            for key, value in node.items():
                if not isinstance(key, str):
                    raise GrammarError(f"{name} has a non-string key {key!r} at {path}")
                where = f"{path}/{key}"
                if key in _COUNT_KEYS and isinstance(value, int) and value > MAX_COUNT:
                    raise GrammarError(f"{name} {where}={value} is larger than {MAX_COUNT}; use a smaller count")
                if key == "pattern" and isinstance(value, str):
                    _check_pattern(value, f"{name} {where}")
                if isinstance(value, (Mapping, list, tuple)):
                    stack.append((value, where, depth + 1))
        elif isinstance(node, (list, tuple)):
            stack.extend((item, f"{path}/{i}", depth + 1) for i, item in enumerate(node)
                         if isinstance(item, (Mapping, list, tuple)))


def _check_pattern(pattern: str, where: str) -> None:
    for match in _PATTERN_COUNT.finditer(pattern):
        for count in match.groups():
            if count and (len(count) > 9 or int(count) > MAX_COUNT):
                raise GrammarError(f"{where} repeats {match.group(0)}: counts above {MAX_COUNT} "
                                   "are not supported; use a smaller count")
