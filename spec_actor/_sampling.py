"""`Sampling`: how the target model's next token is chosen."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, final

from ._errors import ConfigError
from ._gbnf_shape import check_shape
from ._json_schema import schema_grammar
from ._limits import GrammarLimits
from ._validate import check_float, check_int
from .nif.grammar import check_grammar

__all__ = ["LLAMA_DEFAULT_SEED", "Sampling"]

LLAMA_DEFAULT_SEED = 0xFFFFFFFF
"""The seed value that asks llama.cpp for a random seed."""

_FLOAT32_MAX = 3.4028234663852886e38
"""The largest bias the native float holds."""

_ROOT_RE = re.compile(r"[a-zA-Z0-9-]+")


@final
@dataclass(frozen=True, slots=True)
class Sampling:
    """Sampling settings; they all work together with speculation.

    The default is greedy (``temp=0.0``), unlike llama.cpp's 0.8: greedy
    output is reproducible and speculation accepts the most drafts with it.
    With ``temp > 0`` the other llama.cpp-default filters apply.

    Args:
        temp: Temperature; 0 picks the most likely token.
        top_k: Keep the k most likely tokens; 0 turns it off.
        top_p: Keep the smallest set of tokens whose probability reaches p
            (0 < p <= 1; 1.0 turns it off).
        min_p: Drop tokens less likely than min_p times the best (0 to 1;
            0 turns it off).
        seed: RNG seed (0 to 2**32 - 1); `LLAMA_DEFAULT_SEED` picks a random one.
        penalty_last_n: Tokens the penalties look back on; 0 off, -1 the
            whole context.
        repeat_penalty: Repetition penalty (> 0; 1.0 turns it off).
        frequency_penalty: Frequency penalty (0.0 turns it off).
        presence_penalty: Presence penalty (0.0 turns it off).
        grammar: GBNF grammar text that constrains the output, or None.
        grammar_root: The grammar's start rule.
        grammar_limits: How large the grammar may be (`GrammarLimits`):
            nesting, rules, alternatives, repetition counts.
        grammar_prefill: Text the grammar has already read when generation
            starts: the generation prompt that a chat format's tool-call
            grammar starts with and the prompt already ends with (see
            `spec_actor._tools`); "" for none.
        grammar_triggers: Makes the grammar lazy: JSON text of the triggers
            (``sa_chat_jinja_apply``'s ``grammar_triggers``) from the first of
            which on the grammar applies, as llama-server constrains a tool
            call under ``tool_choice="auto"``; None: the grammar applies
            from the first token.
        logit_bias: Biases added to tokens' logits before the other
            samplers, as llama.cpp's logit-bias sampler: a mapping of token
            id to bias, or (token id, bias) pairs; ``-math.inf`` bans a
            token. Token ids are checked against the model's vocabulary
            when the run starts. Stored as a tuple of pairs.

    `from_options` (the public API's sampler options) also takes
    ``json_schema``: a JSON schema (a dict) that becomes the grammar,
    converted by llama.cpp's converter (see `spec_actor._json_schema`).

    Raises:
        ConfigError: A value is out of range; the message says what to change.
        GrammarError: The grammar has a fault that llama.cpp's parser cannot
            survive, such as a repetition ``{5,2}``, or that exceeds
            ``grammar_limits``; other grammar errors
            are reported when the request runs.
    """

    temp: float = 0.0
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    seed: int = LLAMA_DEFAULT_SEED
    penalty_last_n: int = 64
    repeat_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    grammar: str | None = None
    grammar_root: str = "root"
    grammar_limits: GrammarLimits = GrammarLimits()
    grammar_prefill: str = ""
    grammar_triggers: str | None = None
    logit_bias: tuple[tuple[int, float], ...] = ()

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "temp", check_float("temp", self.temp, 0.0, hint="use 0 for greedy decoding"))
        check_int("top_k", self.top_k, 0, hint="use 0 to turn top-k off")
        set_(self, "top_p", check_float("top_p", self.top_p, 0.0, 1.0, lo_open=True,
                                        hint="use 1.0 to turn top-p off"))  # fmt: skip
        set_(self, "min_p", check_float("min_p", self.min_p, 0.0, 1.0, hint="use 0.0 to turn min-p off"))
        check_int("seed", self.seed, 0, 2**32 - 1, hint=f"use {LLAMA_DEFAULT_SEED} for a random seed")
        check_int("penalty_last_n", self.penalty_last_n, -1,
                  hint="use -1 for the whole context, 0 to turn it off")  # fmt: skip
        set_(self, "repeat_penalty", check_float("repeat_penalty", self.repeat_penalty, 0.0, lo_open=True,
                                                 hint="use 1.0 to turn it off"))  # fmt: skip
        for name in ("frequency_penalty", "presence_penalty"):
            set_(self, name, check_float(name, getattr(self, name), hint="use 0.0 to turn it off"))
        if self.grammar is not None and (
            not isinstance(self.grammar, str) or not self.grammar.strip() or "\0" in self.grammar
        ):
            raise ConfigError(
                f"grammar={self.grammar!r} is invalid: expected non-empty GBNF text without NUL "
                "characters, or None for no grammar"
            )
        if not isinstance(self.grammar_limits, GrammarLimits):
            raise ConfigError(f"grammar_limits={self.grammar_limits!r} is invalid: expected a spec_actor.GrammarLimits")
        if self.grammar is not None:
            check_grammar(self.grammar, self.grammar_limits.native())
            check_shape(self.grammar)
        if not isinstance(self.grammar_prefill, str) or "\0" in self.grammar_prefill:
            raise ConfigError(f"grammar_prefill={self.grammar_prefill!r} is invalid: expected text without NUL")
        if self.grammar_triggers is not None and (not isinstance(self.grammar_triggers, str)
                                                  or "\0" in self.grammar_triggers or self.grammar is None):
            raise ConfigError(f"grammar_triggers={self.grammar_triggers!r} is invalid: expected JSON text "
                              "without NUL, with a grammar")
        set_(self, "logit_bias", _check_logit_bias(self.logit_bias))
        if not isinstance(self.grammar_root, str) or not _ROOT_RE.fullmatch(self.grammar_root):
            raise ConfigError(
                f"grammar_root={self.grammar_root!r} is invalid: expected a rule name of letters, "
                "digits and '-', such as 'root'"
            )

    @classmethod
    def from_options(cls, **opts: Any) -> Sampling:
        """Build from keyword options named as the fields, as the public API passes them.

        Raises:
            ConfigError: An option name is unknown (the message lists the
                valid ones) or a value is out of range.
        """
        if "json_schema" in opts:
            opts["grammar"] = _schema_as_grammar(opts.pop("json_schema"), opts.get("grammar"))
        unknown = opts.keys() - _OPTION_NAMES
        if unknown:
            raise ConfigError(
                f"unknown sampling option(s) {', '.join(sorted(unknown))}; "
                f"valid options: {', '.join(_OPTION_NAMES_ORDERED)}"
            )
        return cls(**opts)

    def native_params(self) -> dict[str, int | float | str | None]:
        """These settings as plain values named as the native ``sa_sampling_params`` fields.

        The grammar is text (None: no grammar); the nif layer packs them.
        """
        return {
            "temp": self.temp, "top_k": self.top_k, "top_p": self.top_p, "min_p": self.min_p,
            "seed": self.seed, "penalty_last_n": self.penalty_last_n, "penalty_repeat": self.repeat_penalty,
            "penalty_freq": self.frequency_penalty, "penalty_present": self.presence_penalty,
            "grammar": self.grammar, "grammar_root": self.grammar_root,
            "grammar_triggers": self.grammar_triggers if self.grammar else None,
        }  # fmt: skip  (grammar_prefill and logit_bias's arrays go with the run: Session.run)


_OPTION_NAMES_ORDERED = (*(f.name for f in dataclasses.fields(Sampling)), "json_schema")
_OPTION_NAMES = frozenset(_OPTION_NAMES_ORDERED)


def _check_logit_bias(bias: Any) -> tuple[tuple[int, float], ...]:
    """``logit_bias`` as a tuple of (token id, bias) pairs: ids from 0, biases finite or -inf."""
    pairs = bias.items() if isinstance(bias, Mapping) else bias
    try:
        pairs = tuple(tuple(pair) for pair in pairs)
    except TypeError:
        pairs = None
    if pairs is None or not all(len(pair) == 2 for pair in pairs):
        raise ConfigError(f"logit_bias={bias!r} is invalid: expected a mapping of token id to bias, or "
                          "(token id, bias) pairs")
    out = []
    for token, value in pairs:
        check_int("logit_bias token", token, 0, hint="use the token ids of the model's vocabulary")
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value == -math.inf:
            out.append((token, -math.inf))
            continue
        out.append((token, check_float(f"logit_bias[{token}]", value, -_FLOAT32_MAX, _FLOAT32_MAX,
                                       hint="use a finite bias, or -math.inf to ban the token")))
    return tuple(out)


def _schema_as_grammar(schema: Any, grammar: str | None) -> str | None:
    """The grammar of a ``json_schema`` option (None: no schema); it excludes ``grammar``."""
    if schema is None:
        return grammar
    if grammar is not None:
        raise ConfigError("pass either grammar= or json_schema=, not both")
    return schema_grammar(schema)
