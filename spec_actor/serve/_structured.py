"""Structured output: the grammar of a request's ``response_format``, ``json_schema`` or ``grammar``.

OpenAI's shapes: ``{"type": "text"}``, ``{"type": "json_object"}`` and
``{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}``;
llama-server's ``{"type": "json_object", "schema": {...}}`` is accepted too,
and so is its top-level ``json_schema`` (a schema; ``{}`` is any object).
Strict or not, the output is constrained to the schema (a grammar cannot
half-follow one). A request may send one of ``grammar``, ``json_schema``
and a ``response_format`` other than text.
"""

from __future__ import annotations

from typing import Any

from .._errors import GrammarError
from .._json_schema import JSON_OBJECT_SCHEMA, schema_grammar
from ._errors import bad_request
from ._fields import get_field, json_type

__all__ = ["request_grammar", "response_format_grammar"]

_TYPES = ("text", "json_object", "json_schema")


def request_grammar(body: dict[str, Any]) -> str | None:
    """The GBNF grammar a request asks for with ``response_format``, ``json_schema`` or ``grammar``; None: none.

    Raises:
        ApiError: a 400 naming the field, as `response_format_grammar`, or
            for a ``json_schema`` that is not an object or cannot be converted.
    """
    schema = body.get("json_schema")
    if schema is None:
        return response_format_grammar(body) or get_field(body, "grammar", str, default=None)
    if body.get("grammar") is not None or response_format_grammar(body) is not None:
        raise bad_request("send one of grammar, json_schema and response_format, not several", param="json_schema")
    if not isinstance(schema, dict):
        raise bad_request(f"json_schema must be a JSON schema object, not {json_type(schema)}", param="json_schema",
                          code="invalid_type")
    try:
        return schema_grammar(schema or JSON_OBJECT_SCHEMA)  # as llama-server: {} is any object
    except GrammarError as exc:
        message = exc.message if exc.message.startswith("json_schema") else f"json_schema: {exc.message}"
        raise bad_request(message, param="json_schema", code="invalid_json_schema") from None


def response_format_grammar(body: dict[str, Any]) -> str | None:
    """The GBNF grammar that ``body["response_format"]`` asks for; None for plain text.

    Raises:
        ApiError: a 400 naming ``response_format`` (or the part of its schema)
            when it is malformed, its schema cannot be converted, or the body
            also has ``grammar``.
    """
    fmt = body.get("response_format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict):
        raise _bad("response_format must be an object such as {\"type\": \"json_object\"}")
    kind = fmt.get("type")
    if kind not in _TYPES:
        raise _bad(f"response_format.type must be one of {', '.join(_TYPES)}, not {kind!r}")
    if kind == "text":
        return None
    if body.get("grammar") is not None:
        raise _bad("send either grammar or response_format, not both")
    if kind == "json_object":
        schema = fmt.get("schema") or JSON_OBJECT_SCHEMA
        where = "response_format.schema"
    else:
        spec = fmt.get("json_schema")
        if not isinstance(spec, dict):
            raise _bad("response_format.json_schema must be an object with a \"schema\" (and a \"name\")")
        strict = spec.get("strict")
        if strict is not None and not isinstance(strict, bool):
            raise _bad("response_format.json_schema.strict must be a boolean")
        schema = spec.get("schema") or JSON_OBJECT_SCHEMA  # as llama-server: none or {} is any object
        where = "response_format.json_schema.schema"
    if not isinstance(schema, dict):
        raise _bad(f"{where} must be a JSON schema object")
    try:
        return schema_grammar(schema)
    except GrammarError as exc:
        raise _bad(f"{where}: {exc.message}", code="invalid_json_schema") from None


def _bad(message: str, code: str | None = None) -> Exception:
    return bad_request(message, param="response_format", code=code)
