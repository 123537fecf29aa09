"""Checked wrapper for the native GBNF pre-checks."""

from __future__ import annotations

from ._check import check
from ._raw import lib


def check_grammar(text: str) -> None:
    """Raise GrammarError for GBNF that llama.cpp's parser cannot survive (e.g. ``{5,2}``).

    A linear scan of the text: cheap enough for the caller's thread. Syntax
    errors that llama.cpp reports itself surface when the request runs.
    """
    check(lib.sa_grammar_check(text.encode("utf-8")), "grammar")
