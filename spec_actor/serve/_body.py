"""A request body parsed as JSON within bounds: nesting, number sizes, text that encodes as UTF-8.

Python's `json` recurses once per nesting level (RecursionError deep down),
refuses integers of more than 4300 digits with a ValueError, turns ``1e400``
into infinity and accepts lone surrogates (``"\\ud800"``) that no UTF-8
encoder takes later. Here each of those is a 400 that names the limit or the
field. The checks are linear in the body's size; run them in a worker
thread (`trio.to_thread`), as the server does.

A worker thread still holds the GIL through each call into C: `json.loads`
held it for 108 ms on a 20,000-message body, and the event loop waited. So
no step here makes one long C call on a large body: strings are skipped
match by match, brackets are summed in slices, and a body over
`_C_PARSER_MAX` bytes is parsed by `json`'s pure-Python scanner (slower, but
it lets the loop run between its steps).
"""

from __future__ import annotations

import json
import json.decoder
import json.scanner
import math
import re
from itertools import accumulate
from typing import Any

from .._limits import BodyLimits
from ._errors import ApiError, bad_request

__all__ = ["BodyLimits", "parse_body"]

# A JSON string with its escapes (the loop unrolled: 3x faster than an alternation per character).
_STRINGS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
# The escape of a UTF-16 surrogate: only through one can a JSON text hold a lone surrogate.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_DEPTH_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}
_NOT_BRACKETS = bytes(b for b in range(256) if b not in _DEPTH_STEP)
_SLICE = 1 << 16
"""Bytes summed in one C call of the depth scan (well under a millisecond)."""
_C_PARSER_MAX = 1 << 16
"""Largest body parsed by `json`'s C scanner (a few ms under the GIL); larger ones go through the Python one."""


def parse_body(data: bytes, limits: BodyLimits) -> Any:
    """``data`` parsed as JSON, checked against ``limits``.

    Raises:
        ApiError: 400 (code ``invalid_json``) naming the limit or field.
    """
    outside_strings = b"".join(_outside_strings(data))
    _check_depth(outside_strings, limits.max_depth)
    _check_numbers(outside_strings, limits.max_number_chars)
    try:
        body = _decoder(len(data)).decode(data.decode("utf-8"))
    except _Refused as exc:
        raise bad_request(f"the request body is refused: {exc}", code="invalid_json") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise bad_request(f"the request body is not valid JSON: {exc}", code="invalid_json") from None
    except RecursionError:  # below max_depth only if the interpreter's limit is lower; never a 500
        raise _too_deep(limits.max_depth) from None
    if _SURROGATE_ESCAPE.search(data):
        where = _surrogate_path(body, "body")
        if where is not None:
            raise bad_request(f"{where} holds a lone UTF-16 surrogate (an unpaired \\ud800-\\udfff escape); "
                              "send valid Unicode text", param=where, code="invalid_json")
    return body


def _outside_strings(data: bytes) -> list[bytes]:
    """``data`` in pieces, without its JSON strings: one short C call per string."""
    pieces, at = [], 0
    for match in _STRINGS.finditer(data):
        pieces.append(data[at:match.start()])
        at = match.end()
    pieces.append(data[at:])
    return pieces


def _decoder(size: int) -> json.JSONDecoder:
    """A decoder with the number checks; for a body over `_C_PARSER_MAX` bytes, the pure-Python scanner."""
    decoder = json.JSONDecoder(parse_float=_finite, parse_constant=_not_json)
    if size > _C_PARSER_MAX:
        decoder.parse_string = json.decoder.py_scanstring  # type: ignore[attr-defined]
        decoder.scan_once = json.scanner.py_make_scanner(decoder)  # type: ignore[attr-defined]
    return decoder


class _Refused(ValueError):
    """A value the limits refuse, raised from inside the JSON parser."""


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"the number {text} is out of range for a 64-bit float")
    return value


def _not_json(name: str) -> Any:
    raise _Refused(f"{name} is not JSON; send numbers as finite decimals")


def _check_numbers(outside_strings: bytes, max_chars: int) -> None:
    """Refuse a number literal longer than ``max_chars`` (Python refuses ints over 4300 digits with a ValueError)."""
    match = re.search(rb"[-+.0-9eE]{%d,}" % (max_chars + 1), outside_strings)
    if match:
        raise bad_request(f"the request body is refused: the number {match[0][:20].decode()}... has "
                          f"{len(match[0])} characters, more than the server's limit of {max_chars}",
                          code="invalid_json")


def _check_depth(outside_strings: bytes, max_depth: int) -> None:
    brackets = outside_strings.translate(None, _NOT_BRACKETS)
    depth = 0
    for start in range(0, len(brackets), _SLICE):
        steps = list(accumulate(map(_DEPTH_STEP.__getitem__, brackets[start:start + _SLICE]), initial=depth))
        if max(steps) > max_depth:
            raise _too_deep(max_depth)
        depth = steps[-1]


def _too_deep(max_depth: int) -> ApiError:
    return bad_request(f"the request body nests arrays and objects more than {max_depth} deep, "
                       "the server's limit", code="invalid_json")


def _surrogate_path(body: Any, where: str) -> str | None:
    """The path of the first string in ``body`` that does not encode as UTF-8 (iterative); None if all do."""
    todo: list[tuple[Any, str]] = [(body, where)]
    while todo:
        value, path = todo.pop()
        if isinstance(value, str):
            if not _encodes(value):
                return path
        elif isinstance(value, dict):
            for key, item in value.items():
                name = f"{path}.{key}" if path != "body" else key
                if not _encodes(key):
                    return f"{path} (a key)"
                todo.append((item, name))
        elif isinstance(value, list):
            todo.extend((item, f"{path}[{i}]") for i, item in enumerate(value))
    return None


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
