"""Run one checked completion request on the pool and answer it, whole or as an event stream.

A request ends early when its client hangs up or the server stops: the
generation's cancel scope is cancelled, which leaves the library's event
stream, which stops the native loop (within one loop step, or milliseconds
into a prompt prefill) and waits until the actor is idle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from .._errors import SpecActorError
from .._events import Done, Eog, Error, Token
from .._stats import StatsSnapshot
from ..streams import EventStream
from ._errors import ApiError, api_error_for, shutting_down
from ._http import Exchange
from ._params import Job
from ._responses import Reply

if TYPE_CHECKING:
    from ._app import ServerState

__all__ = ["Cancellation", "answer"]


@dataclass(frozen=True, slots=True)
class Cancellation:
    """A request that the server ended early, and how fast its actor became idle."""

    reason: str
    """``"hangup"`` (the client closed the connection) or ``"shutdown"``."""
    seen_at: float
    """`trio.current_time()` when the server saw the reason."""
    idle_at: float
    """`trio.current_time()` when the native loop had stopped."""
    tokens_before: int
    """Tokens the request had generated just before the native cancel flag was set."""
    stats: StatsSnapshot
    """The request's statistics once its loop stopped (no prefill time: the prefill was cut short)."""

    @property
    def tokens_after(self) -> int:
        """Tokens the request had generated when its loop stopped."""
        return self.stats.tokens_emitted

    @property
    def seconds_to_idle(self) -> float:
        """From seeing the hang-up (or the shutdown) to the actor being idle."""
        return self.idle_at - self.seen_at


@dataclass(slots=True)
class _Progress:
    """What one request delivered so far."""

    arrived_at: float
    text: list[str]
    tokens: int = 0
    first_token_at: float | None = None
    finish_reason: str | None = None
    prompt_tokens: int = 0


async def answer(exchange: Exchange, job: Job, state: ServerState) -> None:
    """Run ``job`` and send its response; the request's errors go out as OpenAI errors.

    Raises:
        ApiError: the request was refused before anything was sent (bad
            options, prompt too long, queue full, server stopping).
    """
    reply = Reply(job.kind, state.model_name)
    progress = _Progress(arrived_at=trio.current_time(), text=[])
    events = _open(job, state)
    why: list[tuple[str, float]] = []
    run_scope = trio.CancelScope()

    async def end_when(wait: object, reason: str) -> None:
        await wait()  # type: ignore[operator]
        if exchange.complete:  # too late to end it: the whole response went out
            return
        why.append((reason, exchange.hung_up_at if reason == "hangup" else trio.current_time()))
        run_scope.cancel()

    error: ApiError | None = None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(end_when, exchange.watch_hangup, "hangup")
        nursery.start_soon(end_when, state.stopping.wait, "shutdown")
        with run_scope:
            try:
                await _run(exchange, job, events, reply, progress, state, why)
            except ApiError as exc:  # raised outside the nursery, not in an ExceptionGroup
                error = exc
        nursery.cancel_scope.cancel()
    if error is not None and not why:
        raise error
    if why:
        await _ended_early(exchange, reply, why[0][0], state)
    elif progress.finish_reason is not None:
        state.metrics.e2e.observe(trio.current_time() - progress.arrived_at)


def _open(job: Job, state: ServerState) -> EventStream:
    max_tokens = job.max_tokens or state.pool.actors[0].n_ctx  # the context's end stops it first
    try:
        if job.kind == "chat":
            return state.pool.chat_events(job.messages, max_tokens=max_tokens, **job.options)
        return state.pool.stream_events(job.prompt, max_tokens=max_tokens, **job.options)
    except SpecActorError as exc:
        raise api_error_for(exc) from None


async def _run(exchange: Exchange, job: Job, events: EventStream, reply: Reply, progress: _Progress,
               state: ServerState, why: list[tuple[str, float]]) -> None:
    try:
        await events.__aenter__()
    except SpecActorError as exc:
        raise api_error_for(exc) from None
    try:
        async for ev in events:
            if type(ev) is Token:
                if progress.first_token_at is None:
                    progress.first_token_at = trio.current_time()
                    state.metrics.ttft.observe(progress.first_token_at - progress.arrived_at)
                    if job.stream:
                        await _open_stream(exchange, reply)
                progress.tokens += 1
                if ev.text:
                    if job.stream:
                        await exchange.send_event(reply.piece(ev.text))
                    else:
                        progress.text.append(ev.text)
            elif type(ev) is Error:
                raise api_error_for(ev.exception())
            elif isinstance(ev, (Done, Eog)):
                progress.finish_reason = "length" if type(ev) is Done and ev.reason == "max_tokens" else "stop"
                progress.prompt_tokens = ev.stats.prompt_tokens
    except ApiError:
        state.metrics.finished("error")
        raise
    finally:
        with trio.CancelScope(shield=True):
            tokens_before = events.stats().tokens_emitted  # read just before aclose sets the cancel flag
            await events.aclose()
            if why:
                _record(state, why[0], tokens_before, events.stats())
    await _finish(exchange, job, reply, progress, events, state)


async def _open_stream(exchange: Exchange, reply: Reply) -> None:
    await exchange.start_events()
    opening = reply.opening()
    if opening is not None:
        await exchange.send_event(opening)


async def _finish(exchange: Exchange, job: Job, reply: Reply, progress: _Progress, events: EventStream,
                  state: ServerState) -> None:
    reason = progress.finish_reason or "stop"
    prompt_tokens = progress.prompt_tokens or events.stats().prompt_tokens
    state.metrics.finished(reason)
    if not job.stream:
        await exchange.send_json(200, reply.whole("".join(progress.text), reason, prompt_tokens, progress.tokens))
        return
    if not exchange.started:  # no token at all (an immediate end of generation)
        await _open_stream(exchange, reply)
    await exchange.send_event(reply.closing(reason))
    if job.include_usage:
        await exchange.send_event(reply.usage_chunk(prompt_tokens, progress.tokens))
    await exchange.end_events()


def _record(state: ServerState, why: tuple[str, float], tokens_before: int, stats: StatsSnapshot) -> None:
    reason, seen_at = why
    record = Cancellation(reason, seen_at, trio.current_time(), tokens_before, stats)
    state.cancellations.append(record)
    if reason == "hangup":
        state.metrics.disconnect_to_idle.observe(record.seconds_to_idle)


async def _ended_early(exchange: Exchange, reply: Reply, reason: str, state: ServerState) -> None:
    state.metrics.finished("abort")
    if reason == "shutdown":
        with trio.CancelScope(shield=True):
            await exchange.send_error(shutting_down())
