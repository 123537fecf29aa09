"""Checked wrapper for llama.cpp's JSON schema to GBNF converter."""

from __future__ import annotations

from ._check import string_out
from ._raw import lib


def schema_to_grammar(schema_json: str) -> str:
    """GBNF text that accepts exactly the JSON documents ``schema_json`` (a JSON schema) allows.

    Raises:
        GrammarError: the schema is not JSON or has a part the converter
            cannot turn into a grammar; the message names the part.
    """
    return string_out(lib.sa_json_schema_to_grammar, schema_json.encode("utf-8"), what="json_schema")
