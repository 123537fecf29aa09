"""What request handlers share: reading a body within the server's limits, and work in a worker thread.

Parsing JSON, tokenizing and rendering templates are linear in the body but
take milliseconds per megabyte or more, so a handler runs them with
`in_worker` (docs/decisions/0042): one large request never delays
``/health`` or another client's stream.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import trio

from ._errors import ApiError
from ._http import Exchange
from ._state import ServerState

__all__ = ["answer_in_worker", "in_worker", "read_body"]

T = TypeVar("T")


async def read_body(exchange: Exchange, state: ServerState) -> bytes:
    """The request body, whole, within ``--max-body`` and ``--read-timeout`` (a 408 is counted in the metrics).

    Raises:
        ApiError: 413 (too large) or 408 (too slow).
        HungUp: the client left before sending it.
    """
    try:
        return await exchange.read_body(state.max_body, state.limits.read_timeout)
    except ApiError as error:
        if error.status == 408:
            state.metrics.timed_out("read")
        raise


async def in_worker(state: ServerState, work: Callable[..., T], *args: Any) -> T:
    """``work(*args)`` in one of the server's parsing threads (two at a time).

    **Cancellation**: abandons the thread's result; the thread finishes its
    (bounded) work on its own.
    """
    return await trio.to_thread.run_sync(work, *args, limiter=state.prepare_limiter, abandon_on_cancel=True)


async def answer_in_worker(exchange: Exchange, state: ServerState, work: Callable[[bytes], object]) -> None:
    """Read the body, answer with ``work(body)`` run in a worker thread (JSON, 200)."""
    data = await read_body(exchange, state)
    await exchange.send_json(200, await in_worker(state, work, data))
