"""`Spec`: which speculative decoding to run, with llama.cpp's parameters."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal, final

from ._errors import ConfigError
from ._validate import check_float, check_int
from .nif import schema

__all__ = [
    "AUTO_N_DRAFT_CEILING", "DEFAULT_SPEC", "DRAFT_MODEL_TYPES", "OPTIONAL_DRAFT_MODEL_TYPES", "SA_MAX_DRAFT_POS",
    "SPEC_TYPES", "Spec", "canonical_type",
]

SA_MAX_DRAFT_POS = schema.MAX_DRAFT_POS
"""The most tokens one step may draft (the native per-position stats size)."""

AUTO_N_DRAFT_CEILING = 16
"""The draft length ceiling used with ``n_draft="auto"`` by the types that
draft only what a step asks for (draft-simple and the n-gram types)."""

_NGRAM_MAX = 1024  # the range llama.cpp's command line accepts for n-gram sizes

# Canonical name -> default n_draft, from the shim's one table of speculative
# types (native/draft/spec_types.cpp). The names are llama.cpp's. Model drafts (a
# draft model, EAGLE3, MTP, DFlash) default to 3 tokens: each costs a forward
# pass of the drafter. N-gram lookups are nearly free: 8. "auto"'s n_draft is
# the ceiling of its online choice (docs/decisions/0024).
_TYPES: dict[str, int] = {name: facts.default_n_draft for name, facts in schema.SPEC_FACTS.items()}
_ALIASES = {"mtp": "draft-mtp", "draft": "draft-simple", "eagle3": "draft-eagle3", "dflash": "draft-dflash"}
_NEEDS_DRAFT_MODEL = frozenset({"draft-simple", "draft-eagle3", "draft-dflash"})
_TAKES_DRAFT_MODEL = _NEEDS_DRAFT_MODEL | {"auto"}
# llama.cpp's MTP, EAGLE-3 and DFlash drafters always draft their whole n_max
# (a drafter forward pass per token) and cut the draft afterwards. Under
# n_draft="auto" their ceiling therefore stays at the fixed default, so a step
# never pays for more draft passes than the fixed length would; the adaptive
# choice trims how much of the draft is verified.
_DRAFTS_FULL_LENGTH = frozenset(name for name, facts in schema.SPEC_FACTS.items() if facts.drafts_full_length)

SPEC_TYPES: tuple[str, ...] = tuple(_TYPES)
"""The canonical speculative type names, in llama.cpp's order, then ``auto``."""

DEFAULT_SPEC = "auto"
"""The spec of `open_actor`, `open_pool`, `Session` and ``spec-actor generate``
when none is given. ``"none"`` turns speculation off."""

DRAFT_MODEL_TYPES: frozenset[str] = _NEEDS_DRAFT_MODEL
"""The types that draft with a second model and need ``draft_model``."""

OPTIONAL_DRAFT_MODEL_TYPES: frozenset[str] = _TAKES_DRAFT_MODEL - _NEEDS_DRAFT_MODEL
"""The types that may take a ``draft_model`` without needing one (``auto``)."""


@final
@dataclass(frozen=True, slots=True, repr=False)
class Spec:
    """Speculative decoding settings: a llama.cpp type and its parameters.

    ``type`` takes llama.cpp's names (`SPEC_TYPES`), the aliases ``mtp``,
    ``draft``, ``eagle3`` and ``dflash``, and underscores for hyphens; it is
    stored as the canonical name. Other defaults are llama.cpp's, except
    ``n_draft`` (llama.cpp's ``n_max``): when omitted it is 3 for model drafts
    (draft-simple, eagle3, mtp, dflash), where each drafted token costs a
    forward pass of the drafter, 8 for the n-gram types, whose lookups are
    nearly free, and 0 for ``none``. ``n_draft="auto"`` tunes the draft
    length online up to `max_draft`: `AUTO_N_DRAFT_CEILING` (16), or 3 for
    MTP, EAGLE-3 and DFlash, whose drafters always draft their full length.

    ``Spec("auto")`` (the default of actors, pools and sessions) chooses the
    drafter for every step as well as its length, learned online from what
    it measures: every n-gram kind, the cross-request memory of the session
    (see ``memory=`` on `open_actor`), the model's MTP layers when it was
    loaded with ``load_mtp=True``, or ``draft_model`` (a draft model or an
    EAGLE-3 head) when given, and always "no draft" when drafting does not
    pay. Its ``n_draft`` (default 32, or ``"auto"`` for that default) is the
    ceiling of the draft length.

    Args:
        type: The speculative type.
        n_draft: Most tokens drafted per step (1 to 64), ``"auto"``, or None
            for the type's default; never None after construction.
        n_min: Fewest draft tokens worth verifying (0 to n_draft).
        p_min: Draft-model greedy probability cut-off (0 to 1).
        p_split: llama.cpp's draft split probability (0 to 1).
        ngram_size_n: n-gram key size (ngram-simple, map-k, map-k4v).
        ngram_size_m: m-gram value size (same types).
        ngram_min_hits: Hits an n-gram needs before it drafts (same types).
        ngram_mod_n_match: ngram-mod's lookup length: the tokens that must
            repeat before it drafts. 12, not llama.cpp's 24: on a 160-token
            code copy 12 gives 2.15x plain and 24 gives 1.65x (bench_engine).
        ngram_mod_n_min: ngram-mod's fewest draft tokens.
        ngram_mod_n_max: ngram-mod's most draft tokens (at most 64).
        draft_model: The draft model (a loaded model or a GGUF path), needed
            by draft-simple, draft-eagle3 and draft-dflash and optional for
            auto; stored as given.

    Raises:
        ConfigError: A parameter is out of range; the message names it, the
            bad value and the allowed range.
    """

    type: str = "none"
    n_draft: int | Literal["auto"] | None = None  # None: the type's default, set in __post_init__
    n_min: int = 0
    p_min: float = 0.0
    p_split: float = 0.1
    ngram_size_n: int = 12
    ngram_size_m: int = 48
    ngram_min_hits: int = 1
    ngram_mod_n_match: int = 12
    ngram_mod_n_min: int = 48
    ngram_mod_n_max: int = 64
    draft_model: Any = None

    def __post_init__(self) -> None:
        name = _canonical(self.type)
        set_ = object.__setattr__
        set_(self, "type", name)
        default_n = _TYPES[name]
        if self.n_draft is None or (name == "auto" and self.n_draft == "auto"):
            set_(self, "n_draft", default_n)
        elif self.n_draft == "auto":
            if name == "none":
                raise ConfigError("n_draft='auto' needs a speculative type; 'none' drafts nothing")
        else:
            check_int("n_draft", self.n_draft, 0 if name == "none" else 1, SA_MAX_DRAFT_POS,
                      hint='or pass n_draft="auto"')  # fmt: skip
        ceiling = self.max_draft
        set_(self, "n_min", check_int("n_min", self.n_min, 0, ceiling, hint="n_min may not exceed n_draft"))
        set_(self, "p_min", check_float("p_min", self.p_min, 0.0, 1.0))
        set_(self, "p_split", check_float("p_split", self.p_split, 0.0, 1.0))
        for field in ("ngram_size_n", "ngram_size_m", "ngram_min_hits", "ngram_mod_n_match"):
            check_int(field, getattr(self, field), 1, _NGRAM_MAX)
        check_int("ngram_mod_n_max", self.ngram_mod_n_max, 1, SA_MAX_DRAFT_POS)
        check_int("ngram_mod_n_min", self.ngram_mod_n_min, 0, self.ngram_mod_n_max,
                  hint="ngram_mod_n_min may not exceed ngram_mod_n_max")  # fmt: skip
        if self.needs_draft_model and self.draft_model is None:
            raise ConfigError(f"{name} needs draft_model=... (a loaded draft model or a GGUF path)")
        if name not in _TAKES_DRAFT_MODEL and self.draft_model is not None:
            raise ConfigError(
                f"{name} does not use draft_model; pass it only with "
                f"{', '.join(sorted(_TAKES_DRAFT_MODEL))}"
            )

    @property
    def adaptive(self) -> bool:
        """Whether the draft length is tuned online (``n_draft="auto"``, or type ``auto``)."""
        return self.n_draft == "auto" or self.is_auto

    @property
    def is_auto(self) -> bool:
        """Whether the drafter itself is chosen online (type ``auto``)."""
        return self.type == "auto"

    @property
    def max_draft(self) -> int:
        """The most tokens drafted per step: ``n_draft``, or the ceiling when adaptive."""
        n = self.n_draft
        if isinstance(n, int):
            return n
        return _TYPES[self.type] if self.type in _DRAFTS_FULL_LENGTH else AUTO_N_DRAFT_CEILING

    @property
    def needs_draft_model(self) -> bool:
        """Whether this type needs a separate draft model (draft-simple, eagle3, dflash)."""
        return self.type in _NEEDS_DRAFT_MODEL

    @property
    def is_mtp(self) -> bool:
        """Whether this type drafts with the target's own MTP (NextN) layers."""
        return self.type == "draft-mtp"

    def check_batch(self, n_batch: int) -> None:
        """Check that a context batch of ``n_batch`` tokens can verify a full draft.

        ``auto`` fits its ceiling to the batch (``n_batch - 1``), so any batch does.

        Raises:
            ConfigError: ``n_batch < max_draft + 1`` for a fixed speculative type.
        """
        if self.type not in ("none", "auto") and n_batch < self.max_draft + 1:
            raise ConfigError(
                f"n_batch={n_batch} is too small for {self.type} with n_draft={self.n_draft!r}: "
                f"it must be at least {self.max_draft + 1} (n_draft + 1)"
            )

    def native_params(self) -> dict[str, int | float | str]:
        """These settings as plain values named as the native ``sa_spec_params`` fields.

        ``type`` is the canonical name; ``draft_model`` is not included (the
        session passes the loaded model's handle). The nif layer packs them.
        """
        return {
            "type": self.type, "n_draft": self.max_draft, "n_min": self.n_min, "p_min": self.p_min,
            "p_split": self.p_split, "adaptive": int(self.adaptive), "ngram_size_n": self.ngram_size_n,
            "ngram_size_m": self.ngram_size_m, "ngram_min_hits": self.ngram_min_hits,
            "ngram_mod_n_match": self.ngram_mod_n_match, "ngram_mod_n_min": self.ngram_mod_n_min,
            "ngram_mod_n_max": self.ngram_mod_n_max,
        }  # fmt: skip

    def __repr__(self) -> str:
        parts = [repr(self.type)]
        for f in dataclasses.fields(self)[1:]:
            value = getattr(self, f.name)
            default = _TYPES[self.type] if f.name == "n_draft" else f.default
            if value != default or type(value) is not type(default):
                parts.append(f"{f.name}={value!r}")
        return f"Spec({', '.join(parts)})"


def canonical_type(type_: object) -> str:
    """llama.cpp's name of a speculative type given by any of its names or aliases.

    Raises:
        ConfigError: ``type_`` names no speculative type; the message lists them.
    """
    return _canonical(type_)


def _canonical(type_: object) -> str:
    if not isinstance(type_, str):
        raise ConfigError(f"type={type_!r} is invalid: expected a str, one of {', '.join(SPEC_TYPES)}")
    key = type_.strip().lower().replace("_", "-")
    key = _ALIASES.get(key, key)
    if key not in _TYPES:
        raise ConfigError(
            f"type={type_!r} is not a speculative type: expected one of {', '.join(SPEC_TYPES)} "
            f"or an alias ({', '.join(f'{a}={c}' for a, c in _ALIASES.items())})"
        )
    return key
