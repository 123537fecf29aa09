"""`ServeLimits`: what one client may take of the server, in time and in parsing."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import final

from .._errors import ConfigError
from .._limits import BodyLimits, GrammarLimits
from .._validate import check_int

__all__ = ["BodyLimits", "GrammarLimits", "ServeLimits"]


@final
@dataclass(frozen=True, slots=True)
class ServeLimits:
    """The bounds the server puts on each request (``spec-actor serve`` has a flag for each).

    Args:
        send_timeout: Seconds one write to a client may wait for it to read;
            past that the request ends, its actor is freed and the
            connection is closed (``--send-timeout``).
        read_timeout: Seconds a request body may take to arrive; past that a
            408 (``--read-timeout``).
        max_request_seconds: Wall time of one request from its arrival,
            queueing included; past that it ends as if ``max_tokens`` was
            reached (finish reason ``length``); None: no limit
            (``--max-request-seconds``).
        shutdown_timeout: Seconds that open connections get once the server
            stops before they are cut (``--shutdown-timeout``).
        body: Nesting and number sizes of a JSON body.
        grammar: Size of a request's GBNF grammar.
        max_choices: Most choices (``n``) one completion request may ask
            for; None: the pool's size. Never more than the pool's size,
            as llama-server bounds ``n`` by its slots: each choice is a
            sequence of its own, and more would wait behind the others
            (``--max-choices``; docs/decisions/0103).

    Raises:
        ConfigError: a time is not a positive finite number, or
            ``max_choices`` is not None or a positive int.
    """

    send_timeout: float = 30.0
    read_timeout: float = 30.0
    max_request_seconds: float | None = 600.0
    shutdown_timeout: float = 10.0
    body: BodyLimits = field(default_factory=BodyLimits)
    grammar: GrammarLimits = field(default_factory=GrammarLimits)
    max_choices: int | None = None

    def __post_init__(self) -> None:
        for name in ("send_timeout", "read_timeout", "max_request_seconds", "shutdown_timeout"):
            value = getattr(self, name)
            if value is None and name == "max_request_seconds":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
                raise ConfigError(f"{name}={value!r} is invalid: expected seconds > 0")
            object.__setattr__(self, name, float(value))
        if not isinstance(self.body, BodyLimits) or not isinstance(self.grammar, GrammarLimits):
            raise ConfigError("body and grammar must be a BodyLimits and a GrammarLimits")
        if self.max_choices is not None:
            check_int("max_choices", self.max_choices, 1, hint="or None for the pool's size")

    def choice_limit(self, pool_size: int) -> int:
        """The most choices one request may ask for on a pool of ``pool_size`` sequences."""
        return pool_size if self.max_choices is None else min(self.max_choices, pool_size)
