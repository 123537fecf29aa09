"""One generation request: what the stream and the actor share about it."""

from __future__ import annotations

import enum
import threading
from typing import TYPE_CHECKING

import trio

from ._errors import SpecActorError
from ._events import Event
from ._options import RequestOptions
from ._stats import NATIVE_FIELDS, StatsSnapshot

if TYPE_CHECKING:
    from ._actor import GenerationActor

__all__ = ["EMPTY_STATS", "STARTED", "Request", "State"]

EMPTY_STATS = StatsSnapshot.from_fields(
    **{name: () if name.endswith("_per_pos") or name.startswith("drafter_") else 0 for name in NATIVE_FIELDS}
)
"""The statistics of a request that has not run."""

STARTED: list[Event] = []
"""The batch the actor sends first, when a request starts (compared by identity)."""


class State(enum.Enum):
    NEW = "new"
    """Created by a stream, not yet submitted."""
    QUEUED = "queued"
    """Waiting in an actor's mailbox."""
    RUNNING = "running"
    """Handed to the native loop (or about to be)."""
    FINISHED = "finished"
    """Over: the native loop returned, or the request left the queue."""


class Request:
    """A request's state, its event channel and its outcome.

    Created by a stream, submitted to an actor (which sets `actor`), run by
    the actor's task and worker thread. Everything but `cancelled` (read by
    the worker thread) is changed in the trio thread only.
    """

    __slots__ = (
        "tokens", "options", "send", "receive", "permits", "state", "actor", "cancelled",
        "finished", "error", "final_stats",
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
        self.actor: GenerationActor | None = None
        self.cancelled = False
        """The consumer left (or a stop string matched): stop at the next loop step."""
        self.finished = trio.Event()
        """Set once the native loop has returned (or the request left the queue)."""
        self.error: SpecActorError | None = None
        """Why the request ended without a terminal event, if it did not run to one."""
        self.final_stats = EMPTY_STATS
        """The request's statistics once finished."""

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
