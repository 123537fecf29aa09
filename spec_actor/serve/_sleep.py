"""`PoolKeeper`: the one owner of a server's pool, which closes it after idle time and opens it again on demand.

llama-server's ``--sleep-idle-seconds N`` (docs/decisions/0111): after N
seconds without a request that needs the model, the pool closes (its
contexts and KV caches freed) and, when the server was given a way to load
the model again, the model too. The next request that needs the model
wakes the pool: it waits for the load, as every request that arrives
meanwhile does, and one load serves them all. ``/health``, ``/props``,
``/models`` and ``/metrics`` answer while asleep without waking it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import final

import trio

from .._model import Model
from .._pool import ActorPool
from ._errors import ApiError, shutting_down
from ._reading import PoolReading

__all__ = ["PoolKeeper"]

OpenPool = Callable[[Model], AbstractAsyncContextManager[ActorPool]]


class _Wake:
    """One attempt to open the pool again: every request waiting on it learns the same outcome."""

    def __init__(self) -> None:
        self.done = trio.Event()
        self.error: str | None = None


@final
class PoolKeeper:
    """Opens the server's pool, closes it after ``idle_seconds`` without work, and opens it again for the next work.

    `run` (a task of the server's nursery) is the only code that opens or
    closes the pool; request handlers that need the model enter `awake`,
    which wakes the pool and keeps it from sleeping while they run. With
    ``idle_seconds`` None the pool never sleeps.

    ``reload``, when given, loads the model again after a sleep: the keeper
    then owns ``model`` and closes it on falling asleep, so its weights are
    freed with the pool. Without it only the pool (contexts, KV caches)
    is freed and ``model`` stays the caller's.

    Thread-safety: use from the server's trio thread.
    """

    def __init__(self, model: Model, open_pool: OpenPool, idle_seconds: float | None,
                 reload: Callable[[], Model] | None = None) -> None:
        self._model: Model | None = model
        self._open = open_pool
        self._reload = reload
        self.idle_seconds = idle_seconds
        """Seconds without work before the pool closes; None: never."""
        self._pool: ActorPool | None = None
        self._users = 0
        self._waiting = 0
        self._last_used = 0.0
        self._closing = False
        self._refusing = False  # the server is stopping: no more wakes
        self._kick = trio.Event()  # set to wake the pool, or to close it
        self._poke = trio.Event()  # set when the last request leaves the pool, or to close it
        self._wake = _Wake()
        self._reading: PoolReading | None = None  # the last pool's, taken as it closed

    @property
    def sleeping(self) -> bool:
        """Whether the pool is closed (asleep, or still loading again): ``/props``' ``is_sleeping``."""
        return self._pool is None

    @property
    def pool(self) -> ActorPool:
        """The open pool, for handlers inside `awake`.

        Raises:
            RuntimeError: the server is asleep (the caller did not wake it).
        """
        if self._pool is None:
            raise RuntimeError("the server's pool is asleep: wake it with PoolKeeper.awake() first")
        return self._pool

    @property
    def waiting(self) -> int:
        """Requests waiting for the pool to wake."""
        return self._waiting

    def reading(self) -> PoolReading:
        """The pool's figures now, or while asleep the ones taken as it fell asleep (``GET /metrics``), the
        requests waiting for the wake counted as queued."""
        if self._pool is None:
            assert self._reading is not None, "run() opens the pool before the server answers"
            return dataclasses.replace(self._reading, queued=self._reading.queued + self._waiting)
        return PoolReading.of(self._pool, self._reading)

    @asynccontextmanager
    async def awake(self) -> AsyncIterator[ActorPool]:
        """The open pool, woken first if asleep; it does not sleep until the block is left.

        Raises:
            ApiError: 503 when the model could not be loaded again (the next
                request tries again), or when the server is stopping.

        **Cancellation**: a request cancelled while it waits for the load
        leaves it running for the others.
        """
        while self._pool is None:
            if self._refusing:
                raise shutting_down()
            wake = self._wake
            self._kick.set()
            self._waiting += 1
            try:
                await wake.done.wait()
            finally:
                self._waiting -= 1
            if wake.error is not None:
                raise ApiError(503, f"the model could not be loaded again after sleeping: {wake.error}",
                               type="unavailable_error", code="model_reload_failed")
        self._users += 1
        try:
            yield self._pool
        finally:
            self._users -= 1
            self._last_used = trio.current_time()
            self._poke.set()  # the idle countdown starts again from now

    def refuse_wakes(self) -> None:
        """Answer the requests waiting for a wake, and any later one, with a 503: the server is stopping."""
        self._refusing = True
        self._wake.done.set()

    def close(self) -> None:
        """Make `run` close the pool and return (idempotent); no request wakes it any more."""
        self.refuse_wakes()
        self._closing = True
        self._kick.set()
        self._poke.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Open the pool, report started, then sleep and wake it as the work asks, until `close`.

        Raises:
            The first opening's errors (before it reports started); later loads' errors go to the requests.
        """
        started = False
        while True:
            wake = self._wake
            try:
                if self._model is None:  # in a thread: /health and the other read-only routes answer meanwhile
                    self._model = await trio.to_thread.run_sync(self._load)
                async with self._open(self._model) as pool:
                    self._serve(pool)
                    wake.done.set()
                    if not started:
                        task_status.started()
                        started = True
                    await self._until_idle()
                    self._fall_asleep(pool)
            except Exception as exc:
                if not started:
                    raise
                # a failed load is the waiting requests' 503; they have their answer, so no retry for them
                wake.error = str(exc) or type(exc).__name__
                wake.done.set()
                if not self._closing:
                    self._pool = None
                    self._kick = trio.Event()
            self._wake = _Wake()
            self._close_model()
            await self._kick.wait()
            if self._closing:
                return
            self._kick = trio.Event()

    def _load(self) -> Model:
        assert self._reload is not None
        return self._reload()

    def _serve(self, pool: ActorPool) -> None:
        """Make ``pool`` the open one: requests use it from here, and the idle countdown starts."""
        self._pool = pool
        self._last_used = trio.current_time()

    async def _until_idle(self) -> None:
        """Return once no request has needed the pool for ``idle_seconds``, or at `close`."""
        while not self._closing:
            if self.idle_seconds is None:
                left = float("inf")
            elif self._users:
                left = float("inf")  # the last one to leave pokes
            else:
                left = self._last_used + self.idle_seconds - trio.current_time()
                if left <= 0:
                    return
            self._poke = trio.Event()
            with trio.move_on_after(left):
                await self._poke.wait()

    def _fall_asleep(self, pool: ActorPool) -> None:
        """Take the last reading and hide the pool: from here requests wait for the next wake.

        At `close` the pool stays visible (closed, for `Server.pool`) and no reading is taken: the server
        may be unwinding an error that closed the actors.
        """
        if not self._closing:
            self._reading = PoolReading.of(pool, self._reading)
            self._pool = None

    def _close_model(self) -> None:
        """Drop the model when the keeper can load it again: its weights go with the pool."""
        if self._reload is not None and self._model is not None:
            self._model.close()
            self._model = None
