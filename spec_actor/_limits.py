"""Bounds on untrusted input: `GrammarLimits` for GBNF grammars, `BodyLimits` for JSON request bodies."""

from __future__ import annotations

from dataclasses import dataclass
from typing import final

from ._validate import check_int
from .nif.grammar import DEPTH_CEILING

__all__ = ["BodyLimits", "GrammarLimits"]


@final
@dataclass(frozen=True, slots=True)
class GrammarLimits:
    """Bounds on a grammar's size, checked (linearly, in native code) before llama.cpp parses it.

    llama.cpp's GBNF parser recurses once per ``( )`` nesting level, so a
    deep enough grammar overflows the stack and kills the process; a
    grammar's cost per generated token grows with its alternatives. The
    defaults are far beyond what a hand-written or schema-generated grammar
    needs (llama.cpp's JSON grammar nests 3 deep with 30 alternatives).

    Args:
        max_depth: Nesting of ``( )`` groups, at most 1000 (``spec_actor.nif.grammar.DEPTH_CEILING``).
        max_rules: Rule definitions (``name ::= ...``).
        max_alternatives: ``|`` separators of all rules together (a rule
            of n alternatives has n - 1).
        max_repetition: The largest count in a ``{m}`` or ``{m,n}``
            repetition (llama.cpp refuses more than 2000 itself).

    Raises:
        ConfigError: a limit is not a positive int (or the depth exceeds the ceiling).
    """

    max_depth: int = 256
    max_rules: int = 4096
    max_alternatives: int = 1024
    max_repetition: int = 2000

    def __post_init__(self) -> None:
        check_int("max_depth", self.max_depth, 1, DEPTH_CEILING,
                  hint="deeper grammars can overflow llama.cpp's parser stack")
        for name in ("max_rules", "max_alternatives", "max_repetition"):
            check_int(name, getattr(self, name), 1)

    def native(self) -> tuple[int, int, int, int]:
        """The limits in ``sa_grammar_limits`` field order."""
        return (self.max_depth, self.max_rules, self.max_alternatives, self.max_repetition)


@final
@dataclass(frozen=True, slots=True)
class BodyLimits:
    """How deep and how large the numbers of a JSON request body may be.

    Args:
        max_depth: Nesting of arrays and objects (a chat body needs 4; a
            tool's JSON schema a few dozen at most).
        max_number_chars: Characters of one number literal (a 64-bit seed
            has 20).

    Raises:
        ConfigError: a limit is out of range.
    """

    max_depth: int = 64
    max_number_chars: int = 40

    def __post_init__(self) -> None:
        check_int("max_depth", self.max_depth, 2, 900, hint="Python's JSON parser recurses once per level")
        check_int("max_number_chars", self.max_number_chars, 20, 4000)
