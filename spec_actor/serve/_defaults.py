"""The server's defaults of a request's fields: llama-server's ``--temp``, ``--seed``, ``--n-predict``, ``--reasoning``.

A field a request leaves out (or sends as null) takes the server's value, as
if the request had sent it; a field the request sends wins. Without a
server default the request's own default stays: greedy (decision 0018), a
random seed, and the endpoint's length (``/v1/completions``: 16 tokens; the
others: to the end of the turn or of the context).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .._errors import ConfigError
from .._sampling import LLAMA_DEFAULT_SEED, Sampling

__all__ = ["REASONING", "RequestDefaults"]

REASONING = ("on", "off", "auto")
"""llama-server's ``--reasoning`` values."""

_LENGTH_FIELDS = {"native": ("n_predict", "max_tokens"), "completion": ("max_tokens",),
                  "chat": ("max_completion_tokens", "max_tokens")}
"""Per endpoint kind, the fields that bound a request's length; the server's default goes into the first."""


@dataclass(frozen=True, slots=True)
class RequestDefaults:
    """What a request gets for the sampling and length fields it leaves out; None: the request's own default."""

    temperature: float | None = None
    """``temperature`` (0 to 2)."""
    seed: int | None = None
    """``seed`` (0 to 2**32 - 2; llama-server's -1, a random seed, is None here)."""
    n_predict: int | None = None
    """The most tokens to generate (``n_predict``, ``max_tokens``); at least 1."""
    template_kwargs: Mapping[str, Any] = field(default_factory=dict)
    """A chat's ``chat_template_kwargs`` under the request's own (llama-server's ``--reasoning off``:
    ``{"enable_thinking": False}``)."""
    verbose: bool = False
    """``verbose``: every whole OpenAI answer carries llama-server's ``__verbose`` (its ``--verbose``)."""

    def __post_init__(self) -> None:
        if self.temperature is not None and not 0.0 <= self.temperature <= 2.0:
            raise ConfigError(f"temperature={self.temperature!r} is invalid: use 0 to 2")
        if self.seed is not None and not 0 <= self.seed < LLAMA_DEFAULT_SEED:
            raise ConfigError(f"seed={self.seed!r} is invalid: use 0 to {LLAMA_DEFAULT_SEED - 1}")
        if self.n_predict is not None and self.n_predict < 1:
            raise ConfigError(f"n_predict={self.n_predict!r} is invalid: use at least 1")

    @classmethod
    def from_llama_server(cls, temperature: float | None = None, seed: int | None = None,
                          n_predict: int | None = None, reasoning: str = "auto",
                          verbose: bool = False) -> RequestDefaults:
        """The defaults of llama-server's flags, whose -1 means "random seed" and "no limit".

        ``reasoning`` (``--reasoning``): ``"on"`` or ``"off"`` sets the template's ``enable_thinking``;
        ``"auto"`` leaves it to the template. ``verbose``: its ``--verbose``, ``__verbose`` in every answer.
        """
        if reasoning not in REASONING:
            raise ConfigError(f"reasoning={reasoning!r} is invalid: use {', '.join(REASONING)}")
        kwargs = {} if reasoning == "auto" else {"enable_thinking": reasoning == "on"}
        return cls(temperature, None if seed == -1 else seed,
                   None if n_predict is not None and n_predict < 0 else n_predict, kwargs, verbose)

    def fill(self, body: object, kind: str) -> object:
        """``body`` (a request's parsed JSON) with the defaults in the fields it leaves out; not an object: as is.

        ``kind`` is the endpoint's: ``"native"`` (``/completion``), ``"completion"`` or ``"chat"``.
        """
        if not isinstance(body, dict):
            return body
        out: dict[str, Any] = dict(body)
        for name, value in (("temperature", self.temperature), ("seed", self.seed), ("verbose", self.verbose or None)):
            if value is not None and out.get(name) is None:
                out[name] = value
        own = out.get("chat_template_kwargs")
        if kind == "chat" and self.template_kwargs and (own is None or isinstance(own, dict)):
            out["chat_template_kwargs"] = {**self.template_kwargs, **(own or {})}
        lengths = _LENGTH_FIELDS[kind]
        if self.n_predict is not None and all(out.get(name) is None for name in lengths):
            out[lengths[0]] = self.n_predict
        return out

    def sampling(self) -> Sampling:
        """The sampling of a request that sets none of the fields (``/props``' default generation settings)."""
        return Sampling(temp=self.temperature or 0.0, seed=LLAMA_DEFAULT_SEED if self.seed is None else self.seed)
