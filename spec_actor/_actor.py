"""`GenerationActor` and `open_actor`: one native session served to many trio tasks."""

from __future__ import annotations

import functools
import inspect
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, final

import trio

from ._errors import ActorClosedError, ConfigError, QueueFullError, SpecActorError
from ._events import Event
from ._groups import unwrap_groups
from ._guards import ensure_trio, ensure_trio_caller
from ._model import Model
from ._options import RequestOptions
from ._request import EMPTY_STATS, STARTED, Request, RequestOwner, State
from ._events import TERMINAL
from ._session import PAUSE_SEQUENCE, ActorSession, RunResult, Session
from ._spec import DEFAULT_SPEC, Spec
from ._stats import StatsSnapshot
from ._validate import check_int
from .streams import StreamSource

__all__ = ["DEFAULT_STREAM_BUFFER", "GenerationActor", "open_actor"]

DEFAULT_STREAM_BUFFER = 32
"""Batches (native loop steps) a request's channel holds before the loop waits for its reader."""

_CONTEXT_OPTIONS = tuple(p for p in inspect.signature(Session).parameters
                         if p not in ("model", "spec", "n_ctx", "n_seq"))


@final
class GenerationActor(StreamSource):
    """Serves generation requests from any number of trio tasks on one native session.

    Made by `open_actor`. Requests (`stream_events`, `stream`, `generate`)
    wait in a bounded FIFO mailbox and run one at a time; each runs the
    native speculative loop in a worker thread, which hands every loop
    step's events to the request's stream through a bounded channel.

    Thread-safety: make and read streams from the trio thread that opened
    the actor. `stats`, `stream.stats()` and `print_stats` may be called
    from any task or thread; they take no lock.

    `prepare_request` and `submit_request` are package-internal (the
    `RequestQueue` hooks that streams and pools use); applications make
    requests with `stream_events`, `stream` and `generate`.

    **Cancellation**: a request whose stream is left early (``break``, an
    exception, a cancel scope, ``aclose()``, or a dropped plain ``async
    for``) leaves the queue, or has the native cancel flag set, which the
    loop checks every step and llama.cpp between graph nodes: it stops
    within one loop step while decoding, within milliseconds in a prompt
    prefill. ``aclose()`` and ``async with`` wait for that, shielded, so the
    actor is idle when they return; see `EventStream`.
    """

    __slots__ = ("_session", "_max_queue", "_buffer", "_trio_token", "_owner", "_queue", "_lot",
                 "_current", "_closed", "_failure", "_limiter", "_final_stats", "_held")

    def __init__(self, session: ActorSession, nursery: trio.Nursery, *, max_queue: int, buffer: int) -> None:
        """Serve ``session`` from a task in ``nursery``; the actor frees the session when that task ends."""
        self._session = session
        self._max_queue = max_queue
        self._buffer = buffer
        self._trio_token = trio.lowlevel.current_trio_token()
        self._owner = RequestOwner(withdraw=self._withdraw, interrupt=session.cancel,
                                   live_stats=session.last_stats, trio_token=self._trio_token,
                                   trio_thread=threading.get_ident())
        self._queue: deque[Request] = deque()
        self._lot = trio.lowlevel.ParkingLot()
        self._current: Request | None = None
        self._closed = False
        self._failure: BaseException | None = None
        self._limiter = trio.CapacityLimiter(1)  # our own: the app's to_thread use cannot starve us
        self._final_stats: StatsSnapshot | None = None
        self._held: list[int] = []  # the tokens of the last request and its reply (what the prefix cache keeps)
        nursery.start_soon(self._serve)

    # -- public -----------------------------------------------------------------

    @property
    def session(self) -> ActorSession:
        """The native session or sequence (for its `model`, `spec`, `n_ctx`); do not run it directly."""
        return self._session

    @property
    def model(self) -> Model:
        """The model the actor's session runs."""
        return self._session.model

    @property
    def spec(self) -> Spec:
        """The speculative decoding settings."""
        return self._session.spec

    @property
    def n_ctx(self) -> int:
        """The context size in tokens; a prompt must be shorter."""
        return self._session.n_ctx

    @property
    def closed(self) -> bool:
        """Whether the actor takes no more requests."""
        return self._closed

    @property
    def busy(self) -> bool:
        """Whether a request is running."""
        return self._current is not None

    @property
    def queued(self) -> int:
        """Requests waiting in the mailbox (not counting the running one)."""
        return len(self._queue)

    @property
    def load(self) -> int:
        """Requests waiting or running."""
        return len(self._queue) + (self._current is not None)

    def stats(self) -> StatsSnapshot:
        """Cumulative statistics of every request this actor ran, live while one runs.

        A frozen snapshot, read lock-free from native atomic counters:
        callable from any task or thread, at any time. After the actor
        closed, its last snapshot.

        Cheap enough to poll: while no counter changed it returns the same
        snapshot object (about 0.2 us); after a loop step it reads the
        counters afresh (a few us). What a fast poller costs is its own
        wake-ups, CPU taken from generation where it uses every core: on a
        2-core machine a trio task waking at 1 kHz took about 7% of tokens/s
        and a thread 4% (trio's and the OS's scheduling, not this call; see
        bench/bench_actor.py). Poll every 10 ms or more.
        """
        final = self._final_stats
        return final if final is not None else self._session.stats()

    def forget(self) -> None:
        """Drop the cross-request memory and the kept prompt prefix (see ``memory=`` and ``prefix_cache=`` on `open_actor`).

        Lock-free, from any task or thread. It takes effect when the next
        request starts: that request evaluates its whole prompt; a request
        already running keeps drafting from what it had. After the actor
        closed, does nothing.
        """
        self._held = []
        if not self._session.closed:
            self._session.forget()

    def kv_cells(self) -> tuple[int, int]:
        """(cells held, cells available) of this actor's sequence in the KV cache (lock-free, any thread).

        The running request's positions and, between requests, the kept
        prompt prefix; none after `forget`. After the actor closed: (0, n_ctx).
        """
        try:
            return self._session.kv_cells()
        except ActorClosedError:
            return 0, self.n_ctx

    def shared_prefix(self, tokens: Sequence[int]) -> int:
        """How many leading ``tokens`` the last request and its reply began with (a pool routes by it)."""
        held = self._held
        n = min(len(held), len(tokens))
        i = 0
        while i < n and held[i] == tokens[i]:
            i += 1
        return i

    def print_stats(self) -> None:
        """Print the speculative summary (per drafter under auto) and llama.cpp's performance summary to stderr.

        Raises:
            ActorClosedError: the actor is closed (its session is freed).
        """
        if self._session.closed:
            raise ActorClosedError("the actor is closed; print its stats inside `async with open_actor(...)`")
        self._session.print_stats()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"running {self.busy}, {self.queued} queued"
        return f"<spec_actor.GenerationActor spec={self.spec.type!r} n_ctx={self.n_ctx} {state}>"

    def close(self) -> None:
        """Take no more requests: queued ones end with `ActorClosedError`, the running one is cancelled.

        Synchronous and idempotent; leaving the ``async with open_actor(...)``
        block does it, then waits for the native loop and frees the session.
        """
        self._shutdown()

    # -- requests (trio thread) -----------------------------------------------------

    def prepare_request(self, prompt: str | Sequence[int], options: RequestOptions) -> Request:
        """Package-internal: a request for ``prompt``, checked against the context (`RequestQueue`)."""
        ensure_trio_caller(self._trio_token, "stream_events/stream/generate/chat")
        self._check_open()
        tokens = self._session.tokenize(prompt, add_special=options.add_special,
                                        parse_special=options.parse_special)
        return Request(tokens, options, self._buffer)

    def _check_open(self) -> None:
        if self._closed:
            if self._failure is not None:
                raise ActorClosedError(f"the actor stopped after a failure: {self._failure!r}") from self._failure
            raise ActorClosedError("the actor is closed; make requests inside its `async with open_actor(...)`")

    def submit_request(self, request: Request) -> None:
        """Package-internal: queue ``request`` and bind it to this actor (`RequestQueue`)."""
        ensure_trio_caller(self._trio_token, "iterating a stream")
        self._check_open()
        if len(self._queue) >= self._max_queue:
            raise QueueFullError(
                f"the actor's mailbox is full ({self._max_queue} requests waiting); "
                "wait for some to finish, open the actor with a larger max_queue, or use a pool")
        request.bind(self._owner)
        self._queue.append(request)
        self._lot.unpark()

    def _withdraw(self, request: Request) -> None:
        """Stop a request of this actor: out of the queue, or the native cancel flag."""
        request.note_cancelled()
        if request.state is State.QUEUED:
            self._queue.remove(request)
            request.finish(EMPTY_STATS)
        elif request.state is State.RUNNING and self._current is request:
            self._stop_running(request)

    def _stop_running(self, request: Request) -> None:
        """Set the native cancel flag, and wake the loop if it waits for its reader."""
        self._session.cancel()
        request.release_permit()  # the loop checks the flag as soon as it has the permit

    # -- the actor task ---------------------------------------------------------------

    async def _serve(self) -> None:
        # Runs the requests one by one; when it ends no worker thread is left
        # (each run waits for its thread, even when cancelled), so it keeps the
        # session's last statistics and frees it.
        try:
            while True:
                while not self._queue and not self._closed:
                    await self._lot.park()
                if self._closed:
                    return
                await self._run(self._queue.popleft())
        except Exception as exc:  # noqa: BLE001 - reported to every caller instead
            self._failure = exc
            self._shutdown(ActorClosedError(f"the actor stopped after a failure: {exc!r}"))
        finally:
            self._shutdown()
            self._final_stats = self._session.stats()
            self._session.close()

    async def _run(self, req: Request) -> None:
        # The cancel flag is cleared here, between requests, never while one runs.
        req.start()
        self._current = req
        self._session.clear_cancel()
        if req.cancelled:
            self._session.cancel()
        req.deliver(STARTED)
        error: SpecActorError | None = None
        result: RunResult | None = None
        try:
            result = await trio.to_thread.run_sync(self._run_native, req, limiter=self._limiter)
        except SpecActorError as exc:
            error = exc
        except Exception as exc:  # noqa: BLE001 - a bug must reach the caller, not hang it
            error = SpecActorError(f"generation failed: {exc!r}")
            error.__cause__ = exc
        else:
            if result is not None and result.terminal is None and not req.cancelled and self._closed:
                error = ActorClosedError("the actor was closed while this request was running")
        finally:
            self._current = None
            self._held = req.tokens + list(result.tokens) if error is None and result is not None else []
            req.finish(self._session.last_stats(), error)

    def _run_native(self, req: Request) -> RunResult | None:
        """The worker thread: run the native loop, handing each step's events to the stream.

        A batch goes to the trio thread with run_sync_soon, without waiting for
        it (FIFO, and ahead of this thread's result), so the loop never stalls
        on a trio wake-up; it waits only for a permit, when the reader is
        `buffer` batches behind.
        """
        if req.cancelled:
            return None
        on_events = self._pausing_sink(req) if self._session.pauses else self._blocking_sink(req)
        opts = req.options
        return self._session.run(req.tokens, max_tokens=opts.max_tokens, emit_stats_every=opts.emit_stats_every,
                                 sampling=opts.sampling, on_events=on_events, clear_cancel=False,
                                 logprobs=opts.logprobs, logprobs_after_sampling=opts.logprobs_after_sampling,
                                 prompt_progress=opts.prompt_progress)

    def _blocking_sink(self, req: Request) -> Any:
        """Hands a batch to the stream; waits for a permit first while the reader is `buffer` batches behind."""
        def on_events(events: list[Event]) -> bool:
            req.take_permit()
            return self._hand_over(req, events)

        return on_events

    def _hand_over(self, req: Request, events: list[Event]) -> bool:
        """Queue a batch for the stream on the trio thread, without waiting; False: stop the run."""
        if req.cancelled:
            return False
        try:
            self._trio_token.run_sync_soon(req.deliver, events)
        except trio.RunFinishedError:
            return False
        return True

    def _pausing_sink(self, req: Request) -> Any:
        """On a batched engine's sequence: the batch never waits for one reader.

        Each batch goes out on a permit taken before it was made; when the
        reader is `buffer` batches behind, no permit is left for the next
        one and the sink pauses the sequence (the engine's steps go on
        without it) until the reader gives a permit back, which resumes it.
        """
        session = self._session
        req.take_permit()  # the first batch's (a fresh request has them all)

        def resume() -> None:
            if req.state is State.RUNNING:
                session.resume()

        def on_events(events: list[Event]) -> bool | str:
            if not self._hand_over(req, events):
                return False
            if events and isinstance(events[-1], TERMINAL):
                return True
            return True if req.try_take_permit(resume) else PAUSE_SEQUENCE

        return on_events

    # -- closing ------------------------------------------------------------------------

    def _shutdown(self, error: ActorClosedError | None = None) -> None:
        """Refuse new requests, fail the queued ones, cancel the running one (sync)."""
        self._closed = True
        while self._queue:
            self._queue.popleft().finish(
                EMPTY_STATS, error or ActorClosedError("the actor was closed before this request started"))
        if self._current is not None:
            self._stop_running(self._current)
        self._lot.unpark_all()


@asynccontextmanager
async def open_actor(model: Model, *, spec: Spec | str = DEFAULT_SPEC, n_ctx: int = 4096, max_queue: int = 16,
                     stream_buffer: int = DEFAULT_STREAM_BUFFER,
                     **context_options: Any) -> AsyncIterator[GenerationActor]:
    """Open a generation actor: one native session serving trio tasks one request at a time.

    Args:
        model: A loaded model (`load_model`); any number of actors may share it.
        spec: Speculative decoding: a `Spec` or a type name. The default,
            ``"auto"``, chooses the drafter and draft length online and
            falls back to plain decoding where drafting does not pay;
            ``"none"`` turns speculation off; a type (``"ngram-mod"``) fixes it.
        n_ctx: Context size in tokens; a prompt must be shorter.
        max_queue: Requests that may wait; one more fails at once with
            `QueueFullError`.
        stream_buffer: Loop steps of events a request's channel holds before
            the native loop waits for the reader.
        context_options: memory, prefix_cache, prefix_checkpoint_bytes,
            n_batch, n_ubatch, n_threads, n_threads_batch, type_k, type_v,
            flash_attn (see `Session`). ``memory`` (tokens, default 65536,
            about 2 MB; 0: off) is what ``"auto"`` keeps of earlier prompts
            and outputs to draft from: a request that repeats an earlier one
            runs faster, a timing side channel. ``prefix_cache`` (default
            True) keeps the context between requests: a request that starts
            like the previous one (a chat's history, a shared system prompt)
            evaluates only the rest of its prompt, the same kind of side
            channel. With mutually untrusted users on one actor pass
            ``memory=0, prefix_cache=False`` or call
            `GenerationActor.forget` between them. n_threads defaults
            to every CPU the process may use, shared with the other sessions
            generating at the same time (docs/decisions/0027); the session
            computes on its own pool of threads, so CPU that the event loop
            uses meanwhile slows it down (docs/decisions/0006); pass fewer
            where the loop is busy.

    The session is created in a worker thread (it allocates the KV cache)
    and prepared there (`Session.prepare`: under ``"auto"``, the step-cost
    measurement that the first request would otherwise wait for).

    Raises:
        ConfigError: an option is unknown or out of range.
        ContextError, SpecError, ModelLoadError: the native session could not
            be made; the message says why.

    Errors raised in the body come out as raised (never in an ExceptionGroup).

    **Cancellation**: leaving the block — normally, by an exception, or by
    cancellation — closes the actor: queued requests end with
    `ActorClosedError`, the running one has the native cancel flag set (it
    stops within one loop step, or milliseconds during a prefill), the exit
    waits for the worker thread to return, then frees the native session.
    Requests made after that raise `ActorClosedError`.
    """
    ensure_trio("open_actor")
    check_actor_options(model, max_queue, stream_buffer, context_options)
    session = await make_session(functools.partial(Session, model, spec=spec, n_ctx=n_ctx, **context_options))
    try:
        async with serve_session(session, max_queue=max_queue, stream_buffer=stream_buffer) as actor:
            yield actor
    finally:
        session.close()  # the actor's task closed it already, unless the actor was never made


async def make_session(make: Callable[[], Session]) -> Session:
    """Package-internal: the session ``make`` creates, made and prepared (`Session.prepare`) in worker threads.

    The first request then starts at once. A cancel while it prepares sets
    the session's cancel flag, so the worker returns within one timed batch;
    the session is closed before the cancel goes on.
    """
    session = await trio.to_thread.run_sync(make)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_cancel_when_cancelled, session)
            await trio.to_thread.run_sync(session.prepare)
            nursery.cancel_scope.cancel()
        session.clear_cancel()  # set by _cancel_when_cancelled on its way out
    except BaseException:
        session.close()
        raise
    return session


async def _cancel_when_cancelled(session: Session) -> None:
    try:
        await trio.sleep_forever()
    finally:
        session.cancel()


def check_actor_options(model: Model, max_queue: int, stream_buffer: int, context_options: dict[str, Any]) -> None:
    """Package-internal: the checks of `open_actor`'s arguments before a session is made (also `open_pool`'s)."""
    check_int("max_queue", max_queue, 1, hint="it counts the requests that may wait, the next one included")
    check_int("stream_buffer", stream_buffer, 1, hint="the channel needs room for at least one loop step")
    unknown = context_options.keys() - set(_CONTEXT_OPTIONS)
    if unknown:
        raise ConfigError(f"unknown context option(s) {', '.join(sorted(unknown))}; "
                          f"valid options: spec, n_ctx, {', '.join(_CONTEXT_OPTIONS)}")
    if not isinstance(model, Model):
        raise ConfigError(f"model={model!r} is invalid: expected a spec_actor.Model from load_model()")


@asynccontextmanager
async def serve_session(session: ActorSession, *, max_queue: int,
                        stream_buffer: int) -> AsyncIterator[GenerationActor]:
    """Package-internal: an actor serving session (a `Session` or a `SessionSlot`) until the block ends.

    Leaving the block closes the actor and waits for its worker thread;
    the caller frees the session.
    """
    with unwrap_groups():  # the error of the body or the actor, not a group of our nursery
        async with trio.open_nursery() as nursery:
            actor = GenerationActor(session, nursery, max_queue=max_queue, buffer=stream_buffer)
            try:
                yield actor
            finally:
                actor.close()
