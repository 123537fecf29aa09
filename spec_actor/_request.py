"""One generation request: what its stream and the actor that runs it share.

The stream and the actor never touch each other: the stream talks to its
`Request`, and the actor binds the request to itself (`Request.bind`) with
the few calls a request needs of its owner (`RequestOwner`) when it takes
the request into its mailbox.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable
from dataclasses import dataclass

import trio

from ._errors import SpecActorError
from ._events import Event
from ._options import RequestOptions
from ._stats import NATIVE_FIELDS, StatsSnapshot

__all__ = ["EMPTY_STATS", "STARTED", "Request", "RequestOwner", "State"]

EMPTY_STATS = StatsSnapshot.from_fields(
    **{name: () if name.endswith("_per_pos") or name.startswith("drafter_") else 0 for name in NATIVE_FIELDS}
)
"""The statistics of a request that has not run."""

STARTED: list[Event] = []
"""The batch the actor sends first, when a request starts (compared by identity)."""


class State(enum.Enum):
    """Where a request is in its life; it only moves forward."""

    NEW = "new"
    """Created by a stream, not yet submitted."""
    QUEUED = "queued"
    """Waiting in an actor's mailbox."""
    RUNNING = "running"
    """Handed to the native loop (or about to be)."""
    FINISHED = "finished"
    """Over: the native loop returned, or the request left the queue."""


@dataclass(frozen=True, slots=True)
class RequestOwner:
    """What a request may ask of the actor that took it: bound by `Request.bind`."""

    withdraw: Callable[[Request], None]
    """Take the request out of the queue, or stop its native run (trio thread only)."""
    interrupt: Callable[[], None]
    """Set the native cancel flag of the running request (lock-free, any thread)."""
    live_stats: Callable[[], StatsSnapshot]
    """Statistics of the running request (lock-free, any thread)."""
    trio_token: trio.lowlevel.TrioToken
    """The trio run the owner lives in, to call `withdraw` from another thread."""
    trio_thread: int
    """The owner's trio thread (``threading.get_ident()``)."""


class Request:
    """A request's state, its event channel and its outcome.

    Created for a stream, submitted to an actor (which binds itself with
    `bind`), run by the actor's task and worker thread. Everything but
    `cancelled` (read by the worker thread) is changed in the trio thread
    only.
    """

    __slots__ = (
        "tokens", "options", "send", "receive", "permits", "state", "cancelled", "finished", "error",
        "final_stats", "_owner",
    )  # fmt: skip

    def __init__(self, tokens: list[int], options: RequestOptions, buffer: int) -> None:
        self.tokens = tokens
        self.options = options
        # Backpressure: the worker takes a permit per batch and the stream gives
        # it back when it reads the batch, so at most `buffer` batches (one loop
        # step each) wait unread; then the native loop waits for the reader.
        self.permits = threading.Semaphore(buffer)
        self.send: trio.MemorySendChannel[list[Event]]
        self.receive: trio.MemoryReceiveChannel[list[Event]]
        self.send, self.receive = trio.open_memory_channel(buffer + 1)  # + STARTED
        self.state = State.NEW
        self.cancelled = False
        """The consumer left (or a stop string matched): stop at the next loop step."""
        self.finished = trio.Event()
        """Set once the native loop has returned (or the request left the queue)."""
        self.error: SpecActorError | None = None
        """Why the request ended without a terminal event, if it did not run to one."""
        self.final_stats = EMPTY_STATS
        """The request's statistics once finished."""
        self._owner: RequestOwner | None = None

    # -- the owner's side ---------------------------------------------------------

    def bind(self, owner: RequestOwner) -> None:
        """Queue the request on ``owner`` (trio thread; by the actor that takes it)."""
        self._owner = owner
        self.state = State.QUEUED

    def deliver(self, batch: list[Event]) -> None:
        """Put a batch of the worker thread into the channel (trio thread, by run_sync_soon).

        Never blocks: the worker held a permit for it, and the channel has room
        for every permit. A batch for a stream that left is dropped (the worker
        stops on `cancelled`), and so is one past the room, which only the
        extra permit that wakes a loop being cancelled can send.
        """
        try:
            self.send.send_nowait(batch)
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.WouldBlock):
            pass

    def finish(self, stats: StatsSnapshot, error: SpecActorError | None = None) -> None:
        """Record the outcome and wake the stream (trio thread only, idempotent)."""
        if self.state is State.FINISHED:
            return
        self.final_stats = stats
        if error is not None and self.error is None:
            self.error = error
        self.state = State.FINISHED
        self.send.close()
        self.finished.set()

    # -- the stream's side ----------------------------------------------------------

    def cancel(self) -> None:
        """Stop the request, queued or running, and close its channel (trio thread only).

        Idempotent. The native loop stops within one step; `finished` is set
        once it has.
        """
        if self._owner is not None and self.state is not State.FINISHED:
            self._owner.withdraw(self)
        self.receive.close()

    def cancel_soon(self) -> None:
        """`cancel` from any thread, for a stream that was dropped unclosed.

        In the owner's trio thread the native cancel flag is set at once
        (lock-free); the rest of `cancel` runs there as soon as possible.
        """
        owner = self._owner
        if owner is None or self.state is State.FINISHED:
            return
        if threading.get_ident() == owner.trio_thread:
            self.cancelled = True
            if self.state is State.RUNNING:
                owner.interrupt()
        try:
            owner.trio_token.run_sync_soon(self.cancel)
        except trio.RunFinishedError:
            pass

    def stats(self) -> StatsSnapshot:
        """Live statistics while running, the final ones once over, zeros before (any thread)."""
        owner = self._owner
        if self.state is State.RUNNING and owner is not None:
            try:
                snapshot = owner.live_stats()
            except Exception:  # noqa: BLE001 - the owner closed meanwhile
                return self.final_stats
            if self.state is State.RUNNING:
                return snapshot
        return self.final_stats
