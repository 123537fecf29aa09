"""One generation request: what its stream and the actor that runs it share.

The stream and the actor never touch each other: the stream talks to its
`Request`, and the actor binds the request to itself (`Request.bind`) with
the few calls a request needs of its owner (`RequestOwner`) when it takes
the request into its mailbox.
"""

from __future__ import annotations

import dataclasses
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
    `bind`), run by the actor's task and worker thread. The request changes
    its own state: the actor and the stream call its methods, and read its
    state through read-only properties. Everything but `cancelled` (read by
    the worker thread) and the permits is changed in the trio thread only.
    """

    __slots__ = (
        "_tokens", "_options", "_send", "_receive", "_permits", "_state", "_cancelled", "_finished", "_error",
        "_final_stats", "_owner", "_permit_lock", "_on_permit",
    )  # fmt: skip

    def __init__(self, tokens: list[int], options: RequestOptions, buffer: int) -> None:
        self._tokens = tokens
        self._options = options
        # Backpressure: the worker takes a permit per batch and the stream gives
        # it back when it reads the batch, so at most `buffer` batches (one loop
        # step each) wait unread; then the native loop waits for the reader.
        self._permits = threading.Semaphore(buffer)
        self._permit_lock = threading.Lock()
        self._on_permit: Callable[[], None] | None = None  # try_take_permit's waiter
        self._send: trio.MemorySendChannel[list[Event]]
        self._receive: trio.MemoryReceiveChannel[list[Event]]
        self._send, self._receive = trio.open_memory_channel(buffer + 1)  # + STARTED
        self._state = State.NEW
        self._cancelled = False
        self._finished = trio.Event()
        self._error: SpecActorError | None = None
        self._final_stats = EMPTY_STATS
        self._owner: RequestOwner | None = None

    # -- what anyone may read ---------------------------------------------------------

    @property
    def tokens(self) -> list[int]:
        """The prompt's token ids."""
        return self._tokens

    @property
    def options(self) -> RequestOptions:
        """What the caller asked for: budget, sampling, stop strings, timeout."""
        return self._options

    @property
    def state(self) -> State:
        """Where the request is in its life."""
        return self._state

    @property
    def cancelled(self) -> bool:
        """The consumer left (or a stop string matched): stop at the next loop step (any thread)."""
        return self._cancelled

    @property
    def error(self) -> SpecActorError | None:
        """Why the request ended without a terminal event, if it did not run to one."""
        return self._error

    @property
    def final_stats(self) -> StatsSnapshot:
        """The request's statistics once finished."""
        return self._final_stats

    def is_finished(self) -> bool:
        """Whether the native loop has returned (or the request left the queue)."""
        return self._finished.is_set()

    async def wait_finished(self) -> None:
        """Wait until `is_finished` (trio thread)."""
        await self._finished.wait()

    # -- the owner's side ---------------------------------------------------------

    def bind(self, owner: RequestOwner) -> None:
        """Queue the request on ``owner`` (trio thread; by the actor that takes it)."""
        self._owner = owner
        self._state = State.QUEUED

    def start(self) -> None:
        """The owner hands the request to its native loop (trio thread): it is running."""
        self._state = State.RUNNING

    def note_cancelled(self) -> None:
        """The owner is stopping the request: its worker stops at the next step (trio thread)."""
        self._cancelled = True

    def take_permit(self) -> None:
        """Wait for room for one more unread batch (worker thread): backpressure."""
        self._permits.acquire()

    def try_take_permit(self, on_free: Callable[[], None]) -> bool:
        """Take a permit without waiting (any thread); if there is none, the next one given back goes to on_free().

        A batched engine's sequence pauses instead of blocking the batch:
        on_free resumes it, holding that permit.
        """
        with self._permit_lock:
            if self._permits.acquire(blocking=False):
                return True
            self._on_permit = on_free
            return False

    def release_permit(self) -> None:
        """Give one permit back: a batch was read, or a waiting worker must see a cancel (any thread)."""
        with self._permit_lock:
            waiter, self._on_permit = self._on_permit, None
            if waiter is None:
                self._permits.release()
        if waiter is not None:
            waiter()

    def deliver(self, batch: list[Event]) -> None:
        """Put a batch of the worker thread into the channel (trio thread, by run_sync_soon).

        Never blocks: the worker held a permit for it, and the channel has room
        for every permit. A batch for a stream that left is dropped (the worker
        stops on `cancelled`), and so is one past the room, which only the
        extra permit that wakes a loop being cancelled can send.
        """
        try:
            self._send.send_nowait(batch)
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.WouldBlock):
            pass

    def finish(self, stats: StatsSnapshot, error: SpecActorError | None = None) -> None:
        """Record the outcome and wake the stream (trio thread only, idempotent)."""
        if self._state is State.FINISHED:
            return
        self._final_stats = stats
        if error is not None and self._error is None:
            self._error = error
        self._state = State.FINISHED
        self._send.close()
        self._finished.set()

    # -- the stream's side ----------------------------------------------------------

    async def next_batch(self) -> list[Event]:
        """The next batch of events (trio thread); trio.EndOfChannel once the request is over."""
        return await self._receive.receive()

    def count_delivered(self, n_tokens: int) -> StatsSnapshot:
        """Record that only ``n_tokens`` reached the consumer (a stop string cut the run); the new final stats."""
        self._final_stats = dataclasses.replace(self._final_stats, tokens_emitted=n_tokens)
        return self._final_stats

    def cancel(self) -> None:
        """Stop the request, queued or running, and close its channel (trio thread only).

        Idempotent. The native loop stops within one step; `finished` is set
        once it has.
        """
        if self._owner is not None and self._state is not State.FINISHED:
            self._owner.withdraw(self)
        self._receive.close()

    def cancel_soon(self) -> None:
        """`cancel` from any thread, for a stream that was dropped unclosed.

        In the owner's trio thread the native cancel flag is set at once
        (lock-free); the rest of `cancel` runs there as soon as possible.
        """
        owner = self._owner
        if owner is None or self._state is State.FINISHED:
            return
        if threading.get_ident() == owner.trio_thread:
            self._cancelled = True
            if self._state is State.RUNNING:
                owner.interrupt()
        try:
            owner.trio_token.run_sync_soon(self.cancel)
        except trio.RunFinishedError:
            pass

    def stats(self) -> StatsSnapshot:
        """Live statistics while running, the final ones once over, zeros before (any thread)."""
        owner = self._owner
        if self._state is State.RUNNING and owner is not None:
            try:
                snapshot = owner.live_stats()
            except Exception:  # noqa: BLE001 - the owner closed meanwhile
                return self._final_stats
            if self._state is State.RUNNING:
                return snapshot
        return self._final_stats
