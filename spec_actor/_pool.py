"""`ActorPool` and `open_pool`: several actors on one model, requests to the least busy.

Where the model and spec allow it the actors are the slots of one batched
session (one context, one decode per step for all of them, docs/decisions/0050);
otherwise each actor has its own session.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, final

import trio

from ._actor import (DEFAULT_STREAM_BUFFER, GenerationActor, check_actor_options, make_session, open_actor,
                     serve_session)
from ._errors import ActorClosedError
from ._guards import ensure_trio
from ._model import Model
from ._options import RequestOptions
from ._request import Request
from ._session import Session, SessionSlot, can_batch
from ._spec import DEFAULT_SPEC, Spec
from ._stats import StatsSnapshot, sum_snapshots
from ._validate import check_int
from .streams import StreamSource

__all__ = ["ActorPool", "open_pool"]


@final
class ActorPool(StreamSource):
    """N generation actors sharing one loaded model; each request goes to the least busy.

    Made by `open_pool`. Same request API as `GenerationActor`
    (`stream_events`, `stream`, `generate`, `stats`); a request is given,
    when its stream is entered, to an idle actor, or else to the one with
    the fewest requests waiting, and stays there. Requests on different
    actors run at the same time: as sequences of one batched session (one
    decode per step for all), or where the model or spec does not allow
    that (`batched` is False) in separate sessions whose native loops
    release the GIL. A slow reader pauses only its own request.

    **Cancellation**: as for a single actor (see `EventStream`); a request
    cancelled on one actor does not disturb the others.

    `prepare_request` and `submit_request` are package-internal (the
    `RequestQueue` hooks of streams).
    """

    __slots__ = ("_actors", "_next", "_closed")

    def __init__(self, actors: Sequence[GenerationActor]) -> None:
        self._actors = tuple(actors)
        self._next = 0
        self._closed = False

    @property
    def actors(self) -> tuple[GenerationActor, ...]:
        """The pool's actors, for per-actor statistics."""
        return self._actors

    @property
    def model(self) -> Model:
        """The model every actor of the pool runs."""
        return self._actors[0].model

    @property
    def size(self) -> int:
        return len(self._actors)

    @property
    def batched(self) -> bool:
        """Whether the actors are sequences of one batched session (docs/decisions/0050)."""
        return isinstance(self._actors[0].session, SessionSlot)

    @property
    def closed(self) -> bool:
        """Whether the pool takes no more requests."""
        return self._closed

    def stats(self) -> StatsSnapshot:
        """Cumulative statistics summed over the actors (lock-free, any task or thread).

        Counts and times are sums; ``tokens_per_sec`` is the sum of the
        actors' rates (the pool's throughput when all are busy); ``ttft_us``
        and ``n_draft`` are the largest; ``running`` is True if any runs.
        """
        return sum_stats([actor.stats() for actor in self._actors])

    def kv_cells(self) -> tuple[int, int]:
        """(cells held, cells available) in the KV cache, summed over the actors' sequences (lock-free).

        ``held / available`` is the inference gateway's KV-cache utilization
        (``kv_cache_usage_perc`` in ``/metrics``): running requests' cells and
        the prompt prefixes kept between requests count as held.
        """
        counts = [actor.kv_cells() for actor in self._actors]
        return sum(held for held, _ in counts), sum(capacity for _, capacity in counts)

    def forget(self) -> None:
        """Drop every actor's cross-request memory (see `GenerationActor.forget`)."""
        for actor in self._actors:
            actor.forget()

    def print_stats(self) -> None:
        """Print each actor's summary to stderr: its own drafters and prefix cache, and llama.cpp's."""
        for actor in self._actors:
            actor.print_stats()

    def __repr__(self) -> str:
        loads = ", ".join(str(a.load) for a in self._actors)
        return f"<spec_actor.ActorPool size={self.size} loads=[{loads}]{' closed' if self._closed else ''}>"

    def close(self) -> None:
        """Take no more requests and close every actor at once (see `GenerationActor.close`)."""
        self._closed = True
        for actor in self._actors:
            actor.close()

    def prepare_request(self, prompt: str | Sequence[int], options: RequestOptions) -> Request:
        """Package-internal: a request checked against the actors' context (`RequestQueue`)."""
        if self._closed:
            raise ActorClosedError("the pool is closed; make requests inside its `async with open_pool(...)`")
        return self._actors[0].prepare_request(prompt, options)  # every actor has the same context

    def submit_request(self, request: Request) -> None:
        """Package-internal: queue ``request`` on the least busy actor (`RequestQueue`).

        Among the least busy, the one whose last request and reply share the
        longest prefix with this prompt takes it, so a conversation returns
        to the sequence that keeps its history (the prefix cache). A prefix
        shorter than a tenth of the prompt (llama-server's slot similarity)
        counts as none: then round robin, so idle actors share the work.
        """
        n = len(self._actors)
        order = [self._actors[(self._next + i) % n] for i in range(n)]
        least = min(a.load for a in order)
        floor = len(request.tokens) // 10

        def reuse(actor: GenerationActor) -> int:
            shared = actor.shared_prefix(request.tokens)
            return shared if shared > floor else 0

        actor = max((a for a in order if a.load == least), key=reuse)
        actor.submit_request(request)
        self._next = (self._actors.index(actor) + 1) % n


def sum_stats(snaps: Sequence[StatsSnapshot]) -> StatsSnapshot:
    """Add up the snapshots of several actors (see `ActorPool.stats`)."""
    return sum_snapshots(snaps)



@asynccontextmanager
async def open_pool(model: Model, *, size: int = 2, spec: Spec | str = DEFAULT_SPEC, n_ctx: int = 4096,
                    max_queue: int = 16, stream_buffer: int = DEFAULT_STREAM_BUFFER,
                    n_threads: int | None = None, n_threads_batch: int | None = None,
                    **context_options: Any) -> AsyncIterator[ActorPool]:
    """Open a pool of ``size`` actors on the shared ``model``.

    Takes the arguments of `open_actor` (each actor gets them, ``max_queue``
    included; ``n_ctx`` is each request's context). With ``size`` > 1 the
    actors are the sequences of one batched session: one KV cache of
    ``size * n_ctx`` cells, and one decode per step verifies every running
    request's draft (docs/decisions/0050); recurrent and hybrid models too,
    one recurrent state per sequence (docs/decisions/0061), and specs with
    a draft context (a draft model, MTP, EAGLE-3, DFlash), one draft context
    for all sequences (docs/decisions/0069). Only a spec that cannot be made
    gives each actor its own session (which then says why).
    ``kv_unified=True`` (a context option, llama-server's ``--kv-unified``)
    makes ``n_ctx`` the size of the one cache the batched actors share,
    which any one request may fill (up to ``kv_unified_per_slot`` cells
    when given); when a step finds it full, the most recently admitted
    request ends with a `DecodeError` ("Context size has been exceeded")
    and the others go on (`Session`, docs/decisions/0113). Actors with
    their own sessions each have a cache of ``n_ctx`` cells then.
    ``n_threads`` and ``n_threads_batch`` default to all CPUs; the
    process-wide thread budget shares them with the other sessions that
    generate at the same time (docs/decisions/0027). The session is made
    and prepared in worker threads, as `open_actor`'s is.

    Raises what `open_actor` raises. **Cancellation**: leaving the block
    closes every actor at once (each as `open_actor` describes) and waits
    for all their worker threads.
    """
    ensure_trio("open_pool")
    check_int("size", size, 1, hint="a pool needs at least one actor")
    batch_options = {k: context_options[k] for k in ("n_batch", "n_ubatch") if k in context_options}
    if size > 1 and can_batch(model, spec, **batch_options):
        async with _open_batched_pool(model, size=size, spec=spec, n_ctx=n_ctx, max_queue=max_queue,
                                      stream_buffer=stream_buffer, n_threads=n_threads,
                                      n_threads_batch=n_threads_batch, **context_options) as pool:
            yield pool
        return
    async with AsyncExitStack() as stack:
        actors = [
            await stack.enter_async_context(open_actor(
                model, spec=spec, n_ctx=n_ctx, max_queue=max_queue, stream_buffer=stream_buffer,
                n_threads=n_threads, n_threads_batch=n_threads_batch, **context_options))
            for _ in range(size)
        ]
        pool = ActorPool(actors)
        try:
            yield pool
        finally:
            pool.close()  # cancel all at once; the stack then waits for each


@asynccontextmanager
async def _open_batched_pool(model: Model, *, size: int, spec: Spec | str, n_ctx: int, max_queue: int,
                             stream_buffer: int, **context_options: Any) -> AsyncIterator[ActorPool]:
    """`open_pool` on one session with ``size`` sequences: an actor per sequence."""
    check_actor_options(model, max_queue, stream_buffer, context_options)
    session = await make_session(functools.partial(Session, model, spec=spec, n_ctx=n_ctx, n_seq=size,
                                                   **context_options))
    try:
        async with AsyncExitStack() as stack:
            actors = [
                await stack.enter_async_context(
                    serve_session(SessionSlot(session, seq), max_queue=max_queue, stream_buffer=stream_buffer))
                for seq in range(size)
            ]
            pool = ActorPool(actors)
            try:
                yield pool
            finally:
                pool.close()  # cancel all at once; the stack then waits for each actor's thread
    finally:
        session.close()  # after every actor's worker thread has returned
