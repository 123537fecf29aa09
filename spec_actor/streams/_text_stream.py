"""`TextStream`: the text pieces of one generation request."""

from __future__ import annotations

from types import TracebackType
from typing import final

from .._errors import SpecActorError
from .._events import Error, Token
from .._stats import StatsSnapshot
from ._event_stream import EventStream

__all__ = ["TextStream"]


@final
class TextStream:
    """The text of one generation request, piece by piece.

    Made by ``actor.stream(prompt, **options)``. Yields the non-empty text of
    each `Token` event, valid UTF-8 (a character split across tokens comes
    whole); the joined pieces are the generated text. A failed request
    raises its error (a `SpecActorError`, such as `GenerationTimeout`) after
    the pieces produced before the failure.

    Use it as ``async with actor.stream(...) as text: async for piece in
    text`` or as a plain ``async for``.

    **Cancellation**: as for `EventStream`: leaving early stops the native
    loop; `aclose` (and ``async with``, and a cancelled ``async for``) wait,
    shielded, until it has stopped, so the actor is then idle.
    """

    __slots__ = ("_events", "_error")

    def __init__(self, events: EventStream) -> None:
        self._events = events
        self._error: SpecActorError | None = None

    async def __aenter__(self) -> TextStream:
        await self._events.__aenter__()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self._events.aclose()

    def __aiter__(self) -> TextStream:
        return self

    async def __anext__(self) -> str:
        while True:
            try:
                ev = await self._events.__anext__()
            except StopAsyncIteration:
                error, self._error = self._error, None
                if error is not None:
                    raise error from None
                raise
            if type(ev) is Token:
                if ev.text:
                    return ev.text
            elif type(ev) is Error:
                self._error = ev.exception()

    async def aclose(self) -> None:
        """End the request if it is still queued or running, and wait until it is over.

        See `EventStream.aclose`.
        """
        await self._events.aclose()

    def close(self) -> None:
        """End the request without waiting; see `EventStream.close`."""
        self._events.close()

    def stats(self) -> StatsSnapshot:
        """Statistics of this request; see `EventStream.stats`."""
        return self._events.stats()
