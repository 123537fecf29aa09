"""Frozen statistics snapshots of a speculative generation.

A `StatsSnapshot` is built either from the stats map of a native event
(`StatsSnapshot.from_map`, validated) or from the fields of a native
``sa_stats`` struct (`StatsSnapshot.from_fields`, trusted and cheap).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import astuple, dataclass, fields
from typing import Any, final

from ._errors import EventDecodeError
from .nif import schema

__all__ = ["DRAFTER_NAMES", "NATIVE_FIELDS", "SA_MAX_DRAFT_POS", "DrafterStats", "StatsSnapshot", "Timings", "sum_snapshots"]

SA_MAX_DRAFT_POS = schema.MAX_DRAFT_POS
"""Length of the per-position arrays in the native ``sa_stats`` struct."""

NATIVE_FIELDS: tuple[str, ...] = schema.STATS_FIELDS
"""The ``sa_stats`` field names, which are the keyword names of `StatsSnapshot.from_fields`."""

DRAFTER_NAMES: tuple[str, ...] = schema.DRAFTER_NAMES
"""Drafter names by native drafter id: llama.cpp's speculative type names
(``"none"`` counts plain steps), ``"memory"``, the cross-request memory,
``"text"``, auto's text lookup, and ``"splice"``, auto's splice lookup (a
value's rest, then the record's punctuation and next key); the id of
``auto`` itself has the name ``""``."""

# Stats map keys of the event schema, all required: key -> accepted value types.
_KIND_TYPES: dict[str, tuple[type, ...]] = {"int": (int,), "float": (int, float), "array": (list,)}
_MAP_TYPES: dict[str, tuple[type, ...]] = {
    key: _KIND_TYPES[schema.stats_field_kind(key)] for key in schema.STATS_MAP_KEYS
}
_ARRAY_KEYS = tuple(key for key in schema.STATS_MAP_KEYS if schema.stats_field_kind(key) == "array")


@final
@dataclass(frozen=True, slots=True)
class Timings:
    """Time spent in each phase of generation, in microseconds."""

    prefill: int
    """Evaluating the prompt."""
    draft: int
    """Producing draft tokens (draft model, MTP head or n-gram lookup)."""
    verify: int
    """Evaluating drafts with the target model."""
    sample: int
    """Sampling and accepting tokens."""
    total: int
    """The whole run, prefill included."""


@final
@dataclass(frozen=True, slots=True)
class DrafterStats:
    """What one drafter contributed (see `StatsSnapshot.drafters`)."""

    name: str
    """The drafter: a speculative type name (``"ngram-mod"``, ``"draft-mtp"``, ...),
    ``"memory"`` (the cross-request memory), ``"text"`` (auto's text lookup),
    ``"splice"`` (auto's splice lookup) or ``"none"`` (plain steps)."""
    steps: int
    """Loop steps whose draft came from this drafter."""
    drafted: int
    """Draft tokens it proposed that were verified."""
    accepted: int
    """Of those, accepted by the target."""
    share: float
    """Its accepted tokens as a share of all tokens emitted (0.0 to 1.0)."""

    @property
    def acceptance_rate(self) -> float:
        """``accepted / drafted`` (0.0 when nothing was drafted)."""
        return self.accepted / self.drafted if self.drafted else 0.0


@final
@dataclass(frozen=True, slots=True)
class StatsSnapshot:
    """A frozen snapshot of generation statistics.

    Returned by the actor's ``stats()`` (cumulative, or for the last request)
    and carried by ``Stats``, ``Done`` and ``Eog`` events. Counts are
    cumulative over whatever the snapshot covers.
    """

    iters: int
    """Loop steps (draft, verify, accept) run so far."""
    drafts_generated: int
    """Draft tokens proposed."""
    drafts_accepted: int
    """Draft tokens the target model accepted."""
    acceptance_rate: float
    """``drafts_accepted / drafts_generated``, computed natively (0.0 when nothing was drafted)."""
    tokens_emitted: int
    """Tokens produced (accepted drafts plus the target's own sample each step)."""
    tokens_per_sec: float
    """Tokens emitted per second of decoding, live while running."""
    timing_us: Timings
    """Time per phase, in microseconds."""
    ttft_us: int
    """Time to the first emitted token, in microseconds."""
    prompt_tokens: int
    """Prompt tokens of the requests (``prompt_reused + prompt_prefilled``)."""
    n_draft: int
    """The current draft length ceiling (it changes when the draft length is adaptive)."""
    accepted_per_pos: tuple[int, ...]
    """Accepted draft tokens at each draft position (index 0 is the first drafted token)."""
    drafted_per_pos: tuple[int, ...]
    """Drafted tokens at each draft position; same length as `accepted_per_pos`."""
    requests: int = 0
    """Requests (runs) covered by this snapshot."""
    running: bool = False
    """Whether a run was in progress when the snapshot was taken."""
    decode_us: int = 0
    """Wall time since the first token, in microseconds, live while running."""
    drafter: str = "none"
    """The drafter of the latest step (``"none"``: it drafted nothing); under
    ``Spec("auto")`` it follows the online choice."""
    drafters: tuple[DrafterStats, ...] = ()
    """Per drafter that ran a step, in native id order: steps, drafted,
    accepted and share of the tokens. Under ``Spec("auto")`` it shows what
    the choice settled on."""
    prompt_reused: int = 0
    """Prompt tokens not evaluated again: the session's context held their
    state from earlier requests (the longest common prefix; see
    ``prefix_cache`` on `Session`)."""
    prompt_prefilled: int = 0
    """Prompt tokens evaluated (``prompt_tokens - prompt_reused``)."""

    @classmethod
    def from_fields(
        cls,
        *,
        iters: int,
        drafts_generated: int,
        drafts_accepted: int,
        tokens_emitted: int,
        prompt_tokens: int,
        t_prefill_us: int,
        t_draft_us: int,
        t_verify_us: int,
        t_sample_us: int,
        t_total_us: int,
        ttft_us: int,
        n_draft: int,
        tokens_per_sec: float,
        acceptance_rate: float,
        accepted_per_pos: Iterable[int],
        drafted_per_pos: Iterable[int],
        requests: int = 0,
        running: bool | int = False,
        t_decode_us: int = 0,
        n_pos: int | None = None,
        drafter: int = 0,
        drafter_steps: Iterable[int] = (),
        drafter_drafted: Iterable[int] = (),
        drafter_accepted: Iterable[int] = (),
        prompt_reused: int = 0,
        prompt_prefilled: int = 0,
    ) -> StatsSnapshot:
        """Build a snapshot from values named as in the native ``sa_stats`` struct.

        No validation: for trusted native values. The per-position arrays may
        be any iterable of ints (a cffi ``uint64_t[64]`` array works as is);
        they are cut to ``n_draft`` entries, or longer where a later position
        has a count (the ceiling can shrink under adaptive drafting), and
        padded with zeros to at least ``n_draft``. With ``n_draft == 0`` only
        trailing zeros are dropped. ``n_pos``, when the native side already
        computed that length, skips the search.
        """
        if n_pos is None:
            accepted, drafted = _trim_per_pos(tuple(accepted_per_pos), tuple(drafted_per_pos), n_draft)
        else:
            accepted, drafted = tuple(accepted_per_pos)[:n_pos], tuple(drafted_per_pos)[:n_pos]
        return cls(
            iters=iters,
            drafts_generated=drafts_generated,
            drafts_accepted=drafts_accepted,
            acceptance_rate=float(acceptance_rate),
            tokens_emitted=tokens_emitted,
            tokens_per_sec=float(tokens_per_sec),
            timing_us=Timings(t_prefill_us, t_draft_us, t_verify_us, t_sample_us, t_total_us),
            ttft_us=ttft_us,
            prompt_tokens=prompt_tokens,
            n_draft=n_draft,
            accepted_per_pos=accepted,
            drafted_per_pos=drafted,
            requests=requests,
            running=bool(running),
            decode_us=t_decode_us,
            drafter=drafter_name(drafter),
            drafters=drafter_table(drafter_steps, drafter_drafted, drafter_accepted, tokens_emitted),
            prompt_reused=prompt_reused,
            prompt_prefilled=prompt_prefilled,
        )

    @classmethod
    def from_map(cls, d: Mapping[str, Any]) -> StatsSnapshot:
        """Build a snapshot from the stats map of a native event.

        The keys are those of the event schema in ``native/abi/spec_actor.h``
        (`nif.schema.STATS_MAP_KEYS`), all required; ``running`` is False.
        Float fields accept ints too.

        Raises:
            EventDecodeError: ``d`` is not a map, or a key is missing, unknown
                or of the wrong type.
        """
        if not isinstance(d, Mapping):
            raise EventDecodeError(f"stats: expected a map, found {type(d).__name__}")
        missing = _MAP_TYPES.keys() - d.keys()
        if missing:
            raise EventDecodeError(f"stats map: missing key(s) {sorted(missing)}")
        unknown = d.keys() - _MAP_TYPES.keys()
        if unknown:
            raise EventDecodeError(f"stats map: unknown key(s) {sorted(map(str, unknown))}")
        for key, types in _MAP_TYPES.items():
            _check_type(key, d[key], types)
        for key in _ARRAY_KEYS:
            values, most = d[key], schema.stats_array_length(key)
            if len(values) > most or any(type(v) is not int for v in values):
                raise EventDecodeError(f"stats map: {key} must be a list of at most {most} ints, found {values!r}")
        return cls.from_fields(**d)

    @property
    def mean_accepted_per_step(self) -> float:
        """Tokens emitted per loop step (``tokens_emitted / iters``; 0.0 before the first step).

        Without speculation this is 1.0; each accepted draft token adds to it.
        """
        return self.tokens_emitted / self.iters if self.iters else 0.0

    def drafter_summary(self) -> str:
        """Per drafter, ``name steps/accepted (share)``, most tokens first; "" if none drafted."""
        rows = sorted((d for d in self.drafters if d.name != "none"), key=lambda d: -d.accepted)
        return ", ".join(f"{d.name} {d.steps} steps {d.accepted}/{d.drafted} ({d.share:.0%})" for d in rows)

    def summary(self) -> str:
        """Return a one-line, human-readable summary."""
        drafters = self.drafter_summary()
        return (
            f"{self.tokens_emitted} tokens at {self.tokens_per_sec:.1f} tok/s, "
            f"{self.iters} steps ({self.mean_accepted_per_step:.2f} tokens/step), "
            f"drafts {self.drafts_accepted}/{self.drafts_generated} accepted "
            f"({self.acceptance_rate:.1%}), n_draft {self.n_draft}, "
            f"prompt {self.prompt_tokens} tokens ({self.prompt_reused} reused) in "
            f"{self.timing_us.prefill / 1000:.1f} ms, "
            f"ttft {self.ttft_us / 1000:.1f} ms"
            + (f"; drafters: {drafters}" if drafters else "")
        )


def _check_type(key: str, value: object, types: tuple[type, ...]) -> None:
    # bool is an int subclass: accept it only where listed explicitly.
    if type(value) not in types:
        want = " or ".join(t.__name__ for t in types)
        raise EventDecodeError(f"stats map: {key} must be {want}, found {type(value).__name__} {value!r}")


def _trim_per_pos(
    accepted: tuple[int, ...], drafted: tuple[int, ...], n_draft: int
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    n = max(n_draft, _used_len(accepted), _used_len(drafted))
    return _fit(accepted, n), _fit(drafted, n)


def _used_len(values: tuple[int, ...]) -> int:
    n = len(values)
    while n and not values[n - 1]:
        n -= 1
    return n


def _fit(values: tuple[int, ...], n: int) -> tuple[int, ...]:
    return values[:n] if len(values) >= n else values + (0,) * (n - len(values))


def sum_snapshots(snaps: Sequence[StatsSnapshot]) -> StatsSnapshot:
    """Add up the snapshots of several sessions (an actor pool's total).

    Counts, times and tokens/s add up, per position too; ``ttft_us`` and
    ``n_draft`` are the largest, ``running`` whether any runs, and
    ``acceptance_rate`` and each drafter's share are recomputed from the
    sums, and ``drafter`` is that of the snapshot with the most tokens. Walks the snapshot's
    fields, so a field added to `StatsSnapshot` is summed without a change here.
    """
    if not snaps:
        raise ValueError("sum_snapshots needs at least one snapshot")
    values: dict[str, Any] = {}
    for f in fields(StatsSnapshot):
        items = [getattr(s, f.name) for s in snaps]
        if f.name in _LARGEST:
            values[f.name] = max(items)
        elif f.name == "drafter":
            values[f.name] = max(snaps, key=lambda s: s.tokens_emitted).drafter
        elif f.name == "drafters":
            values[f.name] = _sum_drafters(items, sum(s.tokens_emitted for s in snaps))
        elif isinstance(items[0], bool):
            values[f.name] = any(items)
        elif isinstance(items[0], Timings):
            values[f.name] = Timings(*(sum(col) for col in zip(*(astuple(t) for t in items))))
        elif isinstance(items[0], tuple):
            width = max(map(len, items))
            values[f.name] = tuple(sum(col) for col in zip(*(_fit(t, width) for t in items)))
        else:
            values[f.name] = sum(items)
    generated, accepted = values["drafts_generated"], values["drafts_accepted"]
    values["acceptance_rate"] = accepted / generated if generated else 0.0
    return StatsSnapshot(**values)


_LARGEST = frozenset(("ttft_us", "n_draft"))


def _sum_drafters(tables: Sequence[tuple[DrafterStats, ...]], tokens: int) -> tuple[DrafterStats, ...]:
    sums: dict[str, list[int]] = {}
    for table in tables:
        for d in table:
            row = sums.setdefault(d.name, [0, 0, 0])
            row[0] += d.steps
            row[1] += d.drafted
            row[2] += d.accepted
    return tuple(DrafterStats(name, n, d, a, a / tokens if tokens else 0.0) for name, (n, d, a) in sums.items())


def drafter_name(drafter: int) -> str:
    """The name of a native drafter id ("none" for an unknown one)."""
    return DRAFTER_NAMES[drafter] if 0 <= drafter < len(DRAFTER_NAMES) and DRAFTER_NAMES[drafter] else "none"


def drafter_table(
    steps: Iterable[int], drafted: Iterable[int], accepted: Iterable[int], tokens_emitted: int
) -> tuple[DrafterStats, ...]:
    """`DrafterStats` of each drafter id with steps, from the native per-id arrays."""
    return tuple(
        DrafterStats(DRAFTER_NAMES[i], n, d, a, a / tokens_emitted if tokens_emitted else 0.0)
        for i, (n, d, a) in enumerate(zip(steps, drafted, accepted))
        if n and i < len(DRAFTER_NAMES)
    )
