"""Checked wrapper for the native GBNF pre-checks."""

from __future__ import annotations

from .._errors import GrammarError
from ._check import check
from ._raw import ffi, lib

DEPTH_CEILING: int = lib.SA_GRAMMAR_DEPTH_CEILING
"""The deepest ``( )`` nesting any limits may allow (llama.cpp's parser recurses once per level)."""


def check_grammar(text: str, limits: tuple[int, int, int, int] | None = None) -> None:
    """Raise GrammarError for GBNF that llama.cpp's parser cannot survive, or that exceeds ``limits``.

    ``limits`` is (max_depth, max_rules, max_alternatives, max_repetition)
    (`GrammarLimits.native`); None checks only the depth ceiling. A linear
    scan of the text (about 1 ms per MB). Syntax errors that llama.cpp
    reports itself surface when the request runs.
    """
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise GrammarError(f"the grammar is not valid Unicode text: {exc.reason} at character {exc.start}") from None
    bounds = ffi.NULL if limits is None else ffi.new("sa_grammar_limits *", limits)
    check(lib.sa_grammar_check(data, bounds), "grammar")
