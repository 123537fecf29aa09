"""Generation events and the decoder of native msgpack event batches.

The native loop hands over one msgpack batch per step (schema in
``native/abi/spec_actor.h``). `BatchDecoder.decode` validates a batch and returns
`RawToken` tuples for tokens (the session turns their bytes into text with a
UTF-8 stream decoder) and finished `Stats`, `Progress`, `Done`, `Eog` and
`Error` events for the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, NamedTuple, Union, final

import msgpack

from ._errors import ConfigError, EventDecodeError, SpecActorError
from ._stats import StatsSnapshot
from .nif._check import error_for_status
from .nif.schema import EV_DONE as SA_EV_DONE
from .nif.schema import EV_EOG as SA_EV_EOG
from .nif.schema import EV_ERROR as SA_EV_ERROR
from .nif.schema import EV_PROGRESS as SA_EV_PROGRESS
from .nif.schema import EV_STATS as SA_EV_STATS
from .nif.schema import EV_TOKEN as SA_EV_TOKEN

__all__ = [
    "TERMINAL",
    "BatchDecoder",
    "Done",
    "Eog",
    "Error",
    "Event",
    "Progress",
    "RawEvent",
    "RawToken",
    "Stats",
    "Token",
]

@final
@dataclass(frozen=True, slots=True)
class Token:
    """One generated token and the text it completes."""

    id: int
    """The token id."""
    text: str
    """Valid UTF-8 text; empty while a multi-byte character is incomplete."""
    logprob: float | None = None
    """The target model's log-probability of this token at its position (its
    raw logits' log-softmax, before sampler filters or a grammar), when the
    request asked for ``logprobs``; else None."""
    top_logprobs: tuple[tuple[int, float], ...] = ()
    """With ``logprobs=n``: the n most likely (token id, log-probability) at
    this position, most likely first."""


@final
@dataclass(frozen=True, slots=True)
class Stats:
    """A periodic statistics snapshot for the running request."""

    snapshot: StatsSnapshot
    """The statistics of the request so far."""


@final
@dataclass(frozen=True, slots=True)
class Progress:
    """How far the prompt's evaluation is, when the request asked for it (``prompt_progress=True``).

    One comes before any prompt token is evaluated (``processed == cached``),
    then one per prompt chunk the engine decoded; the last has
    ``processed == total`` and comes before the first `Token`. The
    overall progress is ``processed / total``; of the tokens that need
    evaluating, ``(processed - cached) / (total - cached)``.
    """

    total: int
    """The prompt's tokens."""
    cached: int
    """Of those, the ones the prefix cache kept from an earlier request (not evaluated again)."""
    processed: int
    """Of those, the ones the context holds so far, the cached ones (and any copied from another
    sequence of a pool holding the same prefix) included."""
    time_us: int
    """The time the prompt's chunks took to decode so far, in microseconds (0 in the first one; the
    request's ``StatsSnapshot.timing_us.prefill`` once the prompt is in)."""


@final
@dataclass(frozen=True, slots=True)
class Done:
    """Terminal event: generation stopped without an end-of-generation token."""

    stats: StatsSnapshot
    """The final statistics of the request."""
    reason: Literal["max_tokens", "stop", "deadline"] = "max_tokens"
    """``"max_tokens"``: the token budget was reached; ``"stop"``: a stop condition matched;
    ``"deadline"``: the request's ``deadline`` passed."""
    stop: str = ""
    """The stop string that matched (``reason="stop"``); "" otherwise."""

    def __post_init__(self) -> None:
        if self.reason not in ("max_tokens", "stop", "deadline"):
            raise ConfigError(f"Done.reason={self.reason!r} is invalid: expected 'max_tokens', 'stop' "
                              "or 'deadline'")


@final
@dataclass(frozen=True, slots=True)
class Eog:
    """Terminal event: the model produced an end-of-generation token."""

    stats: StatsSnapshot
    """The final statistics of the request."""
    token: int
    """The end-of-generation token id (not emitted as a `Token`)."""


@final
@dataclass(frozen=True, slots=True)
class Error:
    """Terminal event: generation failed."""

    reason: str
    """What went wrong."""
    code: int | None = None
    """The native ``sa_status``, if the failure came from native code."""
    cause: SpecActorError | None = field(default=None, compare=False, repr=False)
    """The exception behind the event when spec_actor raised it (a timeout, a closed actor), else None."""

    def exception(self) -> SpecActorError:
        """Return the exception matching this error, to raise at the API boundary.

        That is `cause` where there is one, else an exception of the class
        that `code` maps to.
        """
        if self.cause is not None:
            return self.cause
        if self.code is None:
            return SpecActorError(self.reason)
        return error_for_status(self.code, self.reason)


Event = Union[Token, Stats, Progress, Done, Eog, Error]
"""Any event of an event stream."""

TERMINAL = (Done, Eog, Error)
"""The terminal event classes, for ``isinstance(event, TERMINAL)``."""


class RawToken(NamedTuple):
    """A token event as decoded from a batch, before UTF-8 decoding."""

    id: int
    """The token id."""
    piece: bytes
    """The raw bytes of the token's text (may be a partial UTF-8 sequence)."""
    logprob: float | None = None
    """The target's log-probability of the token, when the run reports them."""
    top_logprobs: tuple[tuple[int, float], ...] = ()
    """The most likely (token id, log-probability) at its position, when asked for."""


RawEvent = Union[RawToken, Stats, Progress, Done, Eog, Error]
"""What `BatchDecoder.decode` returns for each event."""

# Per event kind: its name, its schema and its field types.
_SCHEMA: dict[int, tuple[str, str, tuple[type, ...]]] = {
    SA_EV_TOKEN: ("token", f"[{SA_EV_TOKEN}, token_id:int, piece:bin]", (int, bytes)),
    SA_EV_STATS: ("stats", f"[{SA_EV_STATS}, stats:map]", (dict,)),
    SA_EV_DONE: ("done", f"[{SA_EV_DONE}, stats:map]", (dict,)),
    SA_EV_EOG: ("eog", f"[{SA_EV_EOG}, stats:map, eog_token_id:int]", (dict, int)),
    SA_EV_ERROR: ("error", f"[{SA_EV_ERROR}, code:int, message:str]", (int, str)),
    SA_EV_PROGRESS: ("progress", f"[{SA_EV_PROGRESS}, total:int, cache:int, processed:int, time_us:int]",
                     (int, int, int, int)),
}
_TERMINAL_NAMES: dict[type, str] = {Done: "done", Eog: "eog", Error: "error"}


@final
class BatchDecoder:
    """Decodes and validates native event batches.

    Stateless and cheap; one per session is fine. Thread-safe.
    """

    __slots__ = ()

    def decode(self, data: bytes) -> list[RawEvent]:
        """Decode one msgpack batch into events, in order.

        Raises:
            EventDecodeError: ``data`` is not one msgpack array of events that
                match the schema (wrong kind, field count or type, or events
                after a terminal event). The message says what was expected
                and what was found.
        """
        try:
            batch = msgpack.unpackb(data, raw=False, strict_map_key=True, use_list=True)
        except (ValueError, TypeError, msgpack.UnpackException) as exc:
            raise EventDecodeError(f"event batch is not valid msgpack: {exc}") from exc
        if type(batch) is not list:
            raise EventDecodeError(f"event batch: expected an array of events, found {_describe(batch)}")
        out: list[RawEvent] = []
        for index, ev in enumerate(batch):
            # Fast path: a well-formed token event.
            if type(ev) is list and len(ev) == 3:
                kind, token_id, piece = ev
                if kind == SA_EV_TOKEN and type(kind) is int and type(token_id) is int and type(piece) is bytes:
                    out.append(RawToken(token_id, piece))
                    continue
            elif type(ev) is list and len(ev) == 4 and ev[0] == SA_EV_TOKEN:
                try:
                    out.append(_token_with_logprobs(ev))
                except EventDecodeError as exc:
                    raise EventDecodeError(f"event batch: event {index}: {exc.message}") from None
                continue
            try:
                event = _decode_other(ev)
            except EventDecodeError as exc:
                raise EventDecodeError(f"event batch: event {index}: {exc.message}") from None
            name = _TERMINAL_NAMES.get(type(event))
            if name is not None and index + 1 < len(batch):
                raise EventDecodeError(f"event batch: event {index + 1} follows the terminal {name} event")
            out.append(event)
        return out


def _token_with_logprobs(ev: list) -> RawToken:
    """``[0, token_id, piece, [logprob, [[id, logprob], ...]]]``, checked."""
    _, token_id, piece, logprobs = ev
    ok = type(token_id) is int and type(piece) is bytes and type(logprobs) is list and len(logprobs) == 2
    if ok:
        logprob, top = logprobs
        ok = type(logprob) is float and type(top) is list and all(
            type(t) is list and len(t) == 2 and type(t[0]) is int and type(t[1]) is float for t in top)
    if not ok:
        found = "[" + ", ".join(_describe(x) for x in ev) + "]"
        raise EventDecodeError(f"token event: expected [{SA_EV_TOKEN}, token_id:int, piece:bin, "
                               f"[logprob:float, [[token_id:int, logprob:float], ...]]], found {found}")
    return RawToken(token_id, piece, logprob, tuple((t, p) for t, p in top))


def _decode_other(ev: object) -> RawEvent:
    if type(ev) is not list or not ev:
        raise EventDecodeError(f"expected a non-empty array, found {_describe(ev)}")
    kind = ev[0]
    if type(kind) is not int or kind not in _SCHEMA:
        raise EventDecodeError(f"expected an event kind from {min(_SCHEMA)} to {max(_SCHEMA)}, found {_describe(kind)}")
    name, shape, types = _SCHEMA[kind]
    fields = ev[1:]
    if len(fields) != len(types) or any(type(f) is not t for f, t in zip(fields, types)):
        found = "[" + ", ".join(_describe(x) for x in ev) + "]"
        raise EventDecodeError(f"{name} event: expected {shape}, found {found}")
    if kind == SA_EV_TOKEN:
        return RawToken(fields[0], fields[1])
    if kind == SA_EV_ERROR:
        return Error(fields[1], fields[0])
    if kind == SA_EV_PROGRESS:
        return Progress(*fields)
    snapshot = StatsSnapshot.from_map(fields[0])
    if kind == SA_EV_STATS:
        return Stats(snapshot)
    if kind == SA_EV_DONE:
        return Done(snapshot)
    return Eog(snapshot, fields[1])


def _describe(value: object) -> str:
    text = repr(value)
    if len(text) > 40:
        text = text[:37] + "..."
    return f"{type(value).__name__} {text}"
