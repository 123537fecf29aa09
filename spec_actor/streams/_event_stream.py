"""`EventStream`: one request's events, read from its bounded memory channel."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from types import TracebackType
from typing import final

import trio

from .._errors import GenerationTimeout, SpecActorError
from .._events import TERMINAL, Done, Error, Event, Token
from .._request import STARTED, Request, State
from .._stats import StatsSnapshot
from ._stop import StopMatcher

__all__ = ["EventStream"]


@final
class EventStream:
    """The events of one generation request: `Token`, `Stats` (`Progress`, when asked), then one terminal.

    Made by ``actor.stream_events(prompt, **options)`` (or a pool's). Use it
    as ``async with actor.stream_events(...) as events: async for ev in
    events`` or as a plain ``async for ev in actor.stream_events(...)``. The
    request is queued when the stream is entered or first iterated, not when
    it is made; options were checked when it was made.

    The stream ends with exactly one terminal event — `Done` (the token
    budget, or ``reason="stop"`` after a stop string), `Eog` or `Error` —
    unless the consumer leaves early. After the terminal the iteration
    stops once the native loop has returned, so `stats` is then final.

    Backpressure: the channel holds a bounded number of batches (one per
    native loop step). A consumer slower than the model pauses the native
    loop; one that stops reading holds that many batches and no more.

    **Cancellation**: leaving the stream before its terminal event — ``break``,
    an exception, a cancelled trio scope around the loop, `aclose` — ends the
    request. A queued request leaves the queue; a running one has the native
    cancel flag set, which the loop checks every step and llama.cpp checks
    between graph nodes, so it stops within one loop step while decoding and
    within milliseconds during a prompt prefill. `aclose` (which ``async
    with`` and a cancelled ``async for`` call) waits for that, shielded from
    cancellation; when it returns the actor is idle and serves its next
    request at once. A plain ``async for`` left by ``break`` or an exception
    cannot wait: dropping the stream sets the cancel flag at once and the
    actor starts its next request as soon as the loop acknowledges it. `close`
    does the same explicitly.

    Thread-safety: iterate from one trio task. `stats` may be called from any
    task or thread.
    """

    __slots__ = ("_submit_to", "_req", "_stop", "_ready", "_ended", "_started")

    def __init__(self, request: Request, submit: Callable[[Request], None]) -> None:
        self._submit_to = submit  # queues the request when the stream is entered
        self._req = request
        self._stop = StopMatcher(request.options.stop) if request.options.stop else None
        self._ready: deque[Event] = deque()
        self._ended = False  # no more events will be added to _ready
        self._started = False  # the actor started the request (its first batch arrived)

    # -- iteration ------------------------------------------------------------

    async def __aenter__(self) -> EventStream:
        self._submit()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> Event:
        if not self._ready and not self._ended:
            self._submit()
            try:
                while not self._ready and not self._ended:
                    await self._pull()
            except BaseException:
                with trio.CancelScope(shield=True):
                    await self._leave()
                raise
        if self._ready:
            return self._ready.popleft()
        await self._settle()
        raise StopAsyncIteration

    # -- leaving ----------------------------------------------------------------

    async def aclose(self) -> None:
        """End the request if it is still queued or running, and wait until it is over.

        Shielded from cancellation: when this returns the native loop has
        stopped and the actor can serve its next request. Idempotent; a no-op
        on a stream that was never entered.
        """
        with trio.CancelScope(shield=True):
            await self._leave()

    def close(self) -> None:
        """End the request without waiting (synchronous; from the trio thread).

        Sets the native cancel flag (or takes the request out of the queue);
        the actor starts its next request once the native loop has stopped,
        within one loop step. Prefer `aclose`, which also waits.
        """
        self._ended = True
        self._ready.clear()
        self._req.cancel()

    def __del__(self) -> None:
        # A plain `async for` left by break or an exception drops the stream
        # without closing it: stop the request here.
        req = getattr(self, "_req", None)
        if req is not None:
            req.cancel_soon()

    # -- statistics -------------------------------------------------------------

    def stats(self) -> StatsSnapshot:
        """Statistics of this request: live while it runs, final once it is over.

        Zero counts while it waits in the queue. A frozen snapshot; lock-free,
        callable from any task or thread.
        """
        return self._req.stats()

    # -- internals ----------------------------------------------------------------

    def _submit(self) -> None:
        if self._req.state is State.NEW and not self._ended:
            self._submit_to(self._req)

    async def _leave(self) -> None:
        self._ended = True
        self._ready.clear()
        self._req.cancel()
        if self._req.state is not State.NEW:
            await self._req.wait_finished()

    async def _settle(self) -> None:
        # The terminal was read: wait (briefly) for the native loop to return.
        if self._req.state is State.NEW or self._req.is_finished():
            return
        try:
            await self._req.wait_finished()
        except BaseException:
            with trio.CancelScope(shield=True):
                await self._leave()
            raise

    async def _pull(self) -> None:
        req = self._req
        timeout = req.options.timeout if self._started else None
        deadline = req.options.deadline
        limit = min(math.inf if deadline is None else deadline,
                    math.inf if timeout is None else trio.current_time() + timeout)
        try:
            batch = None
            with trio.move_on_at(limit):
                batch = await req.next_batch()
            if batch is None:
                if deadline is not None and trio.current_time() >= deadline:
                    await self._stop_run()
                    self._end(Done(req.final_stats, reason="deadline"))
                else:
                    await self._time_out(timeout)
                return
        except trio.EndOfChannel:
            await req.wait_finished()
            error = req.error or SpecActorError(
                "the generation stopped before its end: its native run was cancelled "
                "by something other than this stream")
            self._end(Error(error.message, error.code, error))
            return
        if batch is STARTED:
            self._started = True
            return
        req.release_permit()
        if self._take(batch) and self._stop is not None:
            await self._stop_run()
            # The run went on past the stop string: count only what was delivered.
            self._end(Done(req.count_delivered(self._stop.released), reason="stop", stop=self._stop.matched))

    def _take(self, batch: list[Event]) -> bool:
        """Move a batch's events to _ready; return True when a stop string matched."""
        for ev in batch:
            if type(ev) is Token and self._stop is not None:
                released, matched = self._stop.push(ev)
                self._ready.extend(released)
                if matched:
                    return True
            elif isinstance(ev, TERMINAL):
                self._end(ev)
            else:
                self._ready.append(ev)
        return False

    def _end(self, terminal: Event) -> None:
        if self._stop is not None:
            self._ready.extend(self._stop.flush())
        self._ready.append(terminal)
        self._ended = True

    async def _time_out(self, timeout: float) -> None:
        await self._stop_run()
        error = GenerationTimeout(
            f"generation timed out: no event for {timeout:g} s (timeout={timeout:g}); "
            "the native run was cancelled. Raise the timeout or check what slows the model")
        self._end(Error(error.message, cause=error))

    async def _stop_run(self) -> None:
        with trio.CancelScope(shield=True):
            self._req.cancel()
            await self._req.wait_finished()
