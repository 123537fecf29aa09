"""Running a Session in a worker thread so that Ctrl-C stops it at once.

The main thread keeps Python's signal handling: it waits on a queue (which a
signal interrupts), writes the output, redraws the status line, and on
SIGINT or SIGTERM sets the session's native cancel flag. That flag is also
llama.cpp's abort callback, so even a long prompt prefill stops within
milliseconds; the worker's ``run`` then returns with the tokens so far.
"""

from __future__ import annotations

import os
import queue
import signal
import threading
import time
from types import FrameType
from typing import Any, Callable, Sequence

from .._events import Event
from .._session import RunResult, Session

_END = object()

# How long the main thread waits for a cancelled run to return before giving up on it.
CANCEL_GRACE_S = 3.0


class Interrupts:
    """Turns SIGINT/SIGTERM into a cancel of the running session.

    Use as a context manager in the main thread. ``signum`` is the first
    signal received (None if none); ``exit_code`` is 128 + signum, the
    shell's convention (130 for Ctrl-C). A second signal exits at once after
    the ``on_force`` callbacks (which restore the terminal) ran.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self._session: Session | None = None
        self._old: dict[int, Any] = {}
        self.on_force: list[Callable[[], None]] = []

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old.clear()

    @property
    def exit_code(self) -> int:
        return 128 + (self.signum or 0)

    def watch(self, session: Session | None) -> None:
        """Cancel this session on a signal (None: no session is running)."""
        self._session = session
        if session is not None and self.signum is not None:
            session.cancel()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None:
            for fn in self.on_force:
                fn()
            os._exit(128 + signum)
        self.signum = signum
        session = self._session
        if session is not None:
            session.cancel()


def run_in_worker(session: Session, prompt: str | Sequence[int], interrupts: Interrupts, *,
                  on_events: Callable[[list[Event]], None] | None = None,
                  on_tick: Callable[[], None] | None = None, tick_s: float = 0.1,
                  **run_options: Any) -> RunResult:
    """``session.run(prompt, **run_options)`` in a worker thread, cancellable by a signal.

    ``on_events`` gets each step's events and ``on_tick`` is called at least
    every ``tick_s`` seconds, both in this (the main) thread. If either
    raises, the run is cancelled and the exception propagates once the worker
    has stopped. Returns the run's result; a cancelled run has status
    'cancelled' and the statistics so far.
    """
    pending: queue.SimpleQueue[Any] = queue.SimpleQueue()
    outcome: dict[str, Any] = {}

    def sink(events: list[Event]) -> bool:
        pending.put(events)
        return True

    def work() -> None:
        try:
            outcome["result"] = session.run(prompt, on_events=sink if on_events else None,
                                            clear_cancel=False, **run_options)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread
            outcome["error"] = exc
        finally:
            pending.put(_END)

    # Clear a stale cancel before the signal handler can see this session, so that a
    # signal arriving from here on is never lost.
    session.clear_cancel()
    interrupts.watch(session)
    worker = threading.Thread(target=work, name="spec-actor-run", daemon=True)
    worker.start()
    try:
        _pump(pending, session, interrupts, on_events, on_tick, tick_s)
    except BaseException:
        session.cancel()
        worker.join(CANCEL_GRACE_S)
        raise
    finally:
        interrupts.watch(None)
    worker.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def _pump(pending: queue.SimpleQueue[Any], session: Session, interrupts: Interrupts,
          on_events: Callable[[list[Event]], None] | None, on_tick: Callable[[], None] | None,
          tick_s: float) -> None:
    cancelled_at: float | None = None
    while True:
        try:
            item = pending.get(timeout=tick_s)
        except queue.Empty:
            item = None
        if item is _END:
            return
        if item is not None and on_events is not None:
            on_events(item)
        if on_tick is not None:
            on_tick()
        if interrupts.signum is not None:
            cancelled_at = cancelled_at or time.monotonic()
            if time.monotonic() - cancelled_at > CANCEL_GRACE_S:
                raise TimeoutError("the native loop did not stop after a cancel")
