"""The event and statistics schema, read once from the compiled library.

``native/abi/spec_actor.h`` is the one source: its integer ``#define``\\ s, enum
members and the fields of ``sa_stats`` reach Python through cffi, and the
stats map keys through ``sa_stats_map_key``. Nothing here is typed twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ._raw import ffi, lib

__all__ = [
    "DRAFTER_NAMES",
    "EVENT_SCHEMA_VERSION",
    "EV_DONE",
    "EV_EOG",
    "EV_ERROR",
    "EV_PROGRESS",
    "EV_STATS",
    "EV_TOKEN",
    "MAX_DRAFT_POS",
    "SPEC_TYPE_IDS",
    "STATS_FIELDS",
    "STATS_MAP_KEYS",
    "stats_array_length",
    "stats_array_per_pos",
    "stats_field_kind",
]

EVENT_SCHEMA_VERSION: int = lib.SA_EVENT_SCHEMA_VERSION
"""Version of the msgpack event schema the library writes."""

MAX_DRAFT_POS: int = lib.SA_MAX_DRAFT_POS
"""The most tokens one step may draft: the length of the per-position stats arrays."""

EV_TOKEN: int = lib.SA_EV_TOKEN
EV_STATS: int = lib.SA_EV_STATS
EV_DONE: int = lib.SA_EV_DONE
EV_EOG: int = lib.SA_EV_EOG
EV_ERROR: int = lib.SA_EV_ERROR
EV_PROGRESS: int = lib.SA_EV_PROGRESS

STATS_FIELDS: tuple[str, ...] = tuple(name for name, _ in ffi.typeof("sa_stats").fields)
"""The fields of the native ``sa_stats`` struct, in declaration order."""


def _map_keys() -> tuple[str, ...]:
    keys = []
    while (key := lib.sa_stats_map_key(len(keys))) != ffi.NULL:
        keys.append(ffi.string(key).decode("ascii"))
    return tuple(keys)


STATS_MAP_KEYS: tuple[str, ...] = _map_keys()
"""The keys of an event's stats map, in the order the library writes them."""

_FIELD_TYPES = dict(ffi.typeof("sa_stats").fields)


def stats_field_kind(name: str) -> Literal["int", "float", "array"]:
    """Whether ``sa_stats.name`` holds an integer, a float or an array (per position or per drafter)."""
    t = _FIELD_TYPES[name].type
    if t.kind == "array":
        return "array"
    return "float" if t.cname in ("double", "float") else "int"


def stats_array_length(name: str) -> int:
    """The declared length of the array field ``sa_stats.name``."""
    return _FIELD_TYPES[name].type.length


def stats_array_per_pos(name: str) -> bool:
    """Whether the array field ``sa_stats.name`` is per draft position (cut to ``n_pos``), not per drafter."""
    return stats_array_length(name) == MAX_DRAFT_POS


def _spec_type_ids() -> dict[str, int]:
    ids = {}
    for value in sorted(ffi.typeof("sa_spec_type").elements):
        ids[ffi.string(lib.sa_spec_type_name(value)).decode("ascii")] = value
    return ids


SPEC_TYPE_IDS: dict[str, int] = _spec_type_ids()
"""llama.cpp's speculative type names -> ``sa_spec_type`` values, in llama.cpp's order."""

@dataclass(frozen=True)
class SpecFacts:
    """One row of the shim's table of speculative types (native/draft/spec_types.cpp)."""

    draft_context: bool
    """Drafts with a second context: a draft model, EAGLE-3, MTP or DFlash."""
    drafts_full_length: bool
    """Every draft has its full ``n_draft`` tokens (a drafter forward pass each)."""
    default_n_draft: int
    """``n_draft`` when the caller gives none (for ``auto``, its ceiling)."""
    rollback_snapshots: bool
    """On a recurrent or hybrid target, rejections roll back from llama.cpp's
    recurrent snapshots (``n_ubatch >= n_draft + 2``), not from checkpoints."""


def _spec_facts() -> dict[str, SpecFacts]:
    facts = {}
    out = ffi.new("sa_spec_facts *")
    for name, value in SPEC_TYPE_IDS.items():
        if lib.sa_spec_type_facts(value, out) != lib.SA_OK:
            raise RuntimeError(f"the native library has no facts for speculative type {name}")
        facts[name] = SpecFacts(bool(out.draft_context), bool(out.drafts_full_length), int(out.default_n_draft),
                                bool(out.rollback_snapshots))
    return facts


SPEC_FACTS: dict[str, SpecFacts] = _spec_facts()
"""llama.cpp's speculative type names (and ``auto``) -> their facts, from the shim's one table."""

DRAFTER_NAMES: tuple[str, ...] = tuple(ffi.string(lib.sa_drafter_name(i)).decode() for i in range(lib.SA_N_DRAFTERS))
"""Drafter names by native drafter id (``sa_drafter``): speculative type names
``"memory"``, ``"text"`` and ``"splice"``; the id of ``auto`` itself has the name ``""``."""
