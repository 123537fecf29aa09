"""A command's work on trio, stopped by SIGINT or SIGTERM.

The commands run their generations on `open_actor` under `trio.run`. The
first signal cancels the work: a stream left by cancellation sets the
native cancel flag (also llama.cpp's abort callback, so even a long prompt
prefill stops within milliseconds) and waits for the loop to return, then
the command prints what it has and exits 128 + the signal (130 for Ctrl-C).
A second signal exits at once, after the ``on_force`` callbacks restored
the terminal.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import AsyncIterable, Awaitable, Callable, Iterator
from typing import TypeVar

import trio

from .._groups import unwrap_groups

__all__ = ["Interrupts"]

T = TypeVar("T")

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupts:
    """Runs a command's work so that SIGINT or SIGTERM cancels it.

    ``signum`` is the first signal received (None if none); ``exit_code`` is
    128 + signum, the shell's convention (130 for Ctrl-C).
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self.on_force: list[Callable[[], None]] = []

    @property
    def exit_code(self) -> int:
        """128 + the signal received (0 when none was)."""
        return 128 + (self.signum or 0)

    async def run(self, work: Callable[[], Awaitable[T]]) -> T | None:
        """Await ``work()``; return its result, or None when a signal cancelled it.

        Errors of ``work`` come out as raised, not in an ExceptionGroup.
        """
        result: T | None = None
        with unwrap_groups(), _signal_receiver() as signals:
            async with trio.open_nursery() as nursery:
                with trio.CancelScope() as work_scope:
                    if signals is not None:
                        nursery.start_soon(self._watch, signals, work_scope)
                    result = await work()
                nursery.cancel_scope.cancel()
        return result

    async def _watch(self, signals: AsyncIterable[int], work_scope: trio.CancelScope) -> None:
        async for signum in signals:
            if self.signum is not None:
                for fn in self.on_force:
                    fn()
                os._exit(128 + signum)
            self.signum = signum
            work_scope.cancel()


@contextlib.contextmanager
def _signal_receiver() -> Iterator[AsyncIterable[int] | None]:
    # Signals can be received in the main thread only; elsewhere (an embedding
    # test, say) trio's own KeyboardInterrupt handling stays in charge.
    if threading.current_thread() is not threading.main_thread():
        yield None
        return
    with trio.open_signal_receiver(*_SIGNALS) as signals:
        yield signals
