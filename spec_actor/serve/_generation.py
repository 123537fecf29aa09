"""Run one checked completion request on the pool and answer it, whole or as an event stream.

A request ends early when its client hangs up, stops reading for longer
than the send timeout, or the server stops: the generation's cancel scope is
cancelled, which leaves the library's event stream, which stops the native
loop (within one loop step, or milliseconds into a prompt prefill) and waits
until the actor is idle. A stalled client's connection is also closed: only
that ends a write to it. A request that reaches ``max_request_seconds`` ends
as if its ``max_tokens`` was reached (the stream's ``deadline``).

A request with ``n`` choices runs ``n`` event streams of the same prompt at
once, one per sequence of the pool: the engine lets the later ones wait
for the first one's prefill and copy its cells (docs/decisions/0103).
Their events are answered one at a time, in the order they come; a
streamed chunk names its choice's ``index``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import dataclasses

import trio

from .._errors import SpecActorError
from .._events import Done, Eog, Error, Event, Progress, Token
from .._sampling import LLAMA_DEFAULT_SEED, Sampling
from .._stats import StatsSnapshot, sum_snapshots
from .._tools import RenderedChat, ReplyDiffer, parse_reply
from ..streams import EventStream
from ._errors import ApiError, api_error_for, shutting_down
from ._http import Exchange
from ._prepare import Prepared
from ._responses import Reply
from ._logprobs import LogprobsShaper
from ._state import Cancellation, ServerState
from ._timings import progress_timings, prompt_progress, speculation_fields, timings
from ._tools import delta_json, tool_calls_json


__all__ = ["Answer", "Choice", "answer", "choice_options"]


async def answer(exchange: Exchange, prepared: Prepared, state: ServerState, arrived_at: float) -> None:
    """Run the prepared request and send its response; ``arrived_at`` starts its time budget.

    Raises:
        ApiError: the request was refused or failed before its response
            started (bad options, prompt too long, queue full, bad grammar,
            server stopping), or failed after (the caller then sends it as
            the stream's last event).
    """
    await Answer(exchange, prepared, state, arrived_at).run()


class Choice:
    """One choice of a request: its event stream, what it delivered, and how it ended."""

    def __init__(self, index: int, events: EventStream, differ: ReplyDiffer | None,
                 shaper: LogprobsShaper | None) -> None:
        self.index = index
        self.events = events
        self.differ = differ
        """A streamed reply that may hold calls: its text and calls as deltas, as they are generated."""
        self.shaper = shaper
        self.text: list[str] = []
        self.tokens = 0
        self.finish_reason: str | None = None
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.final_stats: StatsSnapshot | None = None
        self.end: Done | Eog | None = None
        """The event that ended the generation, once it came."""
        self.logprob_tokens: list[Token] = []
        """Tokens whose logprobs are not sent yet (all of them when not streaming)."""
        self.entered = False
        """Whether its stream was entered (submitted to the pool), so it must be closed."""

    def stats(self) -> StatsSnapshot:
        """The final statistics, or the live ones of a generation that did not end."""
        return self.final_stats or self.events.stats()

    def counts(self) -> tuple[int, int]:
        """(prompt tokens, of those the ones the prefix cache held) of the finished generation."""
        if not self.prompt_tokens:
            last = self.events.stats()
            self.prompt_tokens, self.cached_tokens = last.prompt_tokens, last.prompt_reused
        return self.prompt_tokens, self.cached_tokens

    def with_logprobs(self, response: dict[str, Any]) -> dict[str, Any]:
        """``response`` with the logprobs of the tokens not sent yet in its choice, if the request asked."""
        if self.shaper is not None:
            response["choices"][0]["logprobs"] = self.shaper.shape(self.logprob_tokens)
            self.logprob_tokens = []
        return response


def choice_options(options: dict[str, Any], index: int) -> dict[str, Any]:
    """The options of choice ``index``: a set seed plus the index (as llama-server seeds its child tasks).

    The sum wraps below `LLAMA_DEFAULT_SEED`, which would ask for a random one.
    """
    sampling = options.get("sampling")
    if index == 0 or not isinstance(sampling, Sampling) or sampling.seed == LLAMA_DEFAULT_SEED:
        return options
    return options | {"sampling": dataclasses.replace(sampling, seed=(sampling.seed + index) % LLAMA_DEFAULT_SEED)}


class Answer:
    """One request's run: its choices' event streams, what they delivered, and why it ended early, if it did.

    `run` runs it. The answer's shape is OpenAI's; another endpoint's
    (`_completion.NativeAnswer`, one choice) overrides `_deliver` (each
    token) and `_respond` (the end), and keeps the rest: the hang-up,
    shutdown and stall watches, the metrics and the record of requests
    ended early.
    """

    def __init__(self, exchange: Exchange, prepared: Prepared, state: ServerState, arrived_at: float) -> None:
        self.exchange = exchange
        self.job = job = prepared.job
        self.prompt_tokens = prepared.tokens
        """The (first) prompt's token ids."""
        self.state = state
        self.reply = Reply(job.kind, state.model_name)
        self.arrived_at = arrived_at
        self.rendered: RenderedChat | None = prepared.rendered
        """A chat rendered by its Jinja template: how to parse its reply (tool calls)."""
        streams_calls = job.stream and self.rendered is not None and self.rendered.tools
        logprobs = job.options.get("logprobs") is not None
        prompts = prepared.prompt_tokens()  # n choices of each (llama-server's several prompts, each n_cmpl times)
        self.choices = [
            Choice(i, self._open(prompts[i // job.n], choice_options(prepared.options, i % job.n)),
                   ReplyDiffer(self.rendered) if streams_calls and self.rendered is not None else None,
                   LogprobsShaper(job.kind == "chat", state.pool.model.tokenizer) if logprobs else None)
            for i in range(job.n * len(prompts))]
        self.tokens = 0
        """Tokens generated over all choices."""
        self.ended_by: tuple[str, float] | None = None
        """("hangup", "send_timeout" or "shutdown", when it was seen) once the request is ended early."""
        self.run_scope = trio.CancelScope()

    def _open(self, tokens: list[int], options: dict[str, Any]) -> EventStream:
        job, pool = self.job, self.state.pool
        max_tokens = job.max_tokens or pool.actors[0].n_ctx  # the context's end stops it first
        budget = self.state.limits.max_request_seconds
        deadline = None if budget is None else self.arrived_at + budget
        try:
            return pool.stream_events(tokens, max_tokens=max_tokens, deadline=deadline, **options)
        except SpecActorError as exc:
            raise api_error_for(exc) from None

    async def run(self) -> None:
        error: ApiError | None = None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._end_when, self.exchange.watch_hangup, "hangup")
            nursery.start_soon(self._end_when, self.state.stopping.wait, "shutdown")
            nursery.start_soon(self._end_when, self._stalled, "send_timeout")
            with self.run_scope:
                try:
                    await self._generate()
                    await self._respond()
                except ApiError as exc:  # raised below, outside the nursery (not in an ExceptionGroup)
                    error = exc
            nursery.cancel_scope.cancel()
        if self.ended_by is not None:
            self.state.metrics.finished("abort")
            if self.ended_by[0] == "send_timeout":
                self.state.metrics.timed_out("send")
            if self.ended_by[0] == "shutdown":
                with trio.CancelScope(shield=True):
                    await self.exchange.send_error(shutting_down())
        elif error is not None:
            self.state.metrics.finished("error")
            raise error
        else:
            self.state.metrics.e2e.observe(trio.current_time() - self.arrived_at)

    async def _end_when(self, wait: Callable[[], Awaitable[object]], reason: str) -> None:
        await wait()
        if self.exchange.complete or self.ended_by is not None:  # too late, or ended already (first reason wins)
            return
        seen_at = self.exchange.hung_up_at if reason == "hangup" else None
        self.ended_by = (reason, seen_at if seen_at is not None else trio.current_time())
        self.run_scope.cancel()
        if reason == "send_timeout":  # the send in progress ends only with its connection
            self.state.connections.abort(self.exchange.scope.get("client"))

    async def _stalled(self) -> None:
        await self.exchange.wait_stalled(self.state.limits.send_timeout)

    async def _generate(self) -> None:
        """Read every choice's events, streaming the text out (or keeping it); leave the streams idle in any case."""
        try:
            for choice in self.choices:  # all queued at once: the pool gives each its own sequence
                try:
                    await choice.events.__aenter__()
                except SpecActorError as exc:
                    raise api_error_for(exc) from None
                choice.entered = True
            if len(self.choices) == 1:
                async for ev in self.choices[0].events:
                    await self._event(self.choices[0], ev)
            else:
                await self._merge()
        finally:
            with trio.CancelScope(shield=True):
                async with trio.open_nursery() as nursery:  # every loop told to stop at once, then waited for
                    for choice in self.choices:
                        if choice.entered:
                            nursery.start_soon(self._close, choice)

    async def _merge(self) -> None:
        """The choices' events, each handled as it comes (one at a time: the sends stay in order)."""
        send, receive = trio.open_memory_channel[tuple[Choice, Event | SpecActorError]](0)
        failure: ApiError | None = None
        async with trio.open_nursery() as nursery:
            async with send:
                for choice in self.choices:
                    nursery.start_soon(self._forward, choice, send.clone())
            try:
                async for choice, ev in receive:
                    await self._event(choice, ev)
            except ApiError as exc:  # raised below, outside the nursery (not in an ExceptionGroup)
                failure = exc
                nursery.cancel_scope.cancel()
        if failure is not None:
            raise failure

    @staticmethod
    async def _forward(choice: Choice, send: trio.MemorySendChannel[tuple[Choice, Event | SpecActorError]]) -> None:
        async with send:
            try:
                async for ev in choice.events:
                    await send.send((choice, ev))
            except SpecActorError as exc:  # answered by the reader (an error here would come in an ExceptionGroup)
                await send.send((choice, exc))

    async def _event(self, choice: Choice, ev: Event | SpecActorError) -> None:
        if isinstance(ev, SpecActorError):
            raise api_error_for(ev)
        if type(ev) is Token:
            await self._token(choice, ev)
        elif type(ev) is Progress:
            if self.job.stream:
                await self._progress(choice, ev)
        elif type(ev) is Error:
            raise api_error_for(ev.exception())
        elif isinstance(ev, (Done, Eog)):
            choice.finish_reason = "length" if type(ev) is Done and ev.reason != "stop" else "stop"
            if type(ev) is Done and ev.reason == "deadline":
                self.state.metrics.timed_out("request")
            choice.prompt_tokens = ev.stats.prompt_tokens
            choice.cached_tokens = ev.stats.prompt_reused
            choice.final_stats = ev.stats
            choice.end = ev
            # llama-server's counts, before the answer goes out: a client that reads /metrics next sees them
            self.state.metrics.generated(ev.stats, choice.tokens + (type(ev) is Eog))
            if self.job.stream and len(self.choices) > 1:
                await self._close_choice(choice)

    async def _close(self, choice: Choice) -> None:
        """Leave ``choice``'s stream (the native loop stops), and record it if the request was ended early."""
        tokens_before = choice.events.stats().tokens_emitted  # just before aclose sets the cancel flag
        await choice.events.aclose()
        if self.ended_by is not None:
            self._record(choice, tokens_before)

    async def _token(self, choice: Choice, ev: Token) -> None:
        if self.tokens == 0:
            self.state.metrics.ttft.observe(trio.current_time() - self.arrived_at)
            if self.job.stream and not self.exchange.started:  # (progress reports may have opened it)
                await self._open_stream()
        self.tokens += 1
        choice.tokens += 1
        await self._deliver(choice, ev)

    async def _deliver(self, choice: Choice, ev: Token) -> None:
        """Send a generated token's text (streaming), or keep it for the whole answer."""
        if choice.shaper is not None:
            choice.logprob_tokens.append(ev)
        if not ev.text:
            return
        if choice.differ is not None:
            choice.text.append(ev.text)
            await self._send_deltas(choice, partial=True)
        elif self.job.stream:
            await self.exchange.send_event(self._with_timings(choice, self.reply.piece(ev.text, choice.index)))
        else:
            choice.text.append(ev.text)

    async def _send_deltas(self, choice: Choice, *, partial: bool) -> None:
        """What the reply's parse gained (text, a call's start, a piece of its arguments), a chunk each."""
        assert choice.differ is not None
        for delta in choice.differ.update("".join(choice.text), partial=partial):
            chunk = self.reply.piece("", choice.index)
            chunk["choices"][0]["delta"] = delta_json(delta)
            await self.exchange.send_event(self._with_timings(choice, chunk))

    def _with_timings(self, choice: Choice, chunk: dict[str, Any]) -> dict[str, Any]:
        """A streamed chunk of ``choice`` with its logprobs, and the ``timings`` so far with ``timings_per_token``."""
        chunk = choice.with_logprobs(chunk)
        if self.job.timings_per_token:
            chunk["timings"] = timings(choice.stats(), choice.tokens)
        return chunk

    async def _progress(self, choice: Choice, ev: Progress) -> None:
        """A streamed report of the prompt's evaluation (``return_progress``), as llama-server sends it: a chat's
        assistant-role chunk, or an empty piece of text, with ``prompt_progress``. The first opens the stream."""
        if not self.exchange.started:
            await self.exchange.start_events()
        chunk = self.reply.opening(choice.index) or self.reply.piece("", choice.index)
        if self.job.timings_per_token:
            chunk["timings"] = progress_timings(ev)
        await self.exchange.send_event(chunk | {"prompt_progress": prompt_progress(ev)})

    async def _open_stream(self) -> None:
        await self.exchange.start_events()
        for choice in self.choices:
            opening = self.reply.opening(choice.index)
            if opening is not None:
                await self.exchange.send_event(opening)

    def _parses_calls(self) -> bool:
        return self.rendered is not None and self.rendered.tools

    def _counts(self) -> tuple[int, int]:
        """(prompt tokens, of those the ones the prefix cache held) of the finished request.

        With several choices the prompt counts once; held are the tokens
        the least served choice found in the cache (the others may also
        have copied what a sibling had just evaluated).
        """
        counts = [choice.counts() for choice in self.choices]
        return counts[0][0], min(cached for _, cached in counts)

    def _stats(self) -> StatsSnapshot:
        """The request's statistics: its choices' summed."""
        snaps = [choice.stats() for choice in self.choices]
        return snaps[0] if len(snaps) == 1 else sum_snapshots(snaps)

    async def _respond(self) -> None:
        """Send the end of the answer: the whole response, or a stream's closing chunks."""
        prompt_tokens, cached_tokens = self._counts()
        speculation = speculation_fields(self._stats(), self.tokens)
        if not self.job.stream:
            choices = [self._whole_choice(choice) for choice in self.choices]
            whole = self.reply.whole(choices, prompt_tokens, self.tokens, cached_tokens)
            if self.job.verbose:
                whole["__verbose"] = self._verbose()
            await self.exchange.send_json(200, whole | speculation)
            return
        if len(self.choices) == 1:  # several choices closed each as it ended
            await self._close_choice(self.choices[0], speculation)
        if self.job.include_usage:
            await self.exchange.send_event(self.reply.usage_chunk(prompt_tokens, self.tokens, cached_tokens) | speculation)
        await self.exchange.end_events()

    def _verbose(self) -> dict[str, Any]:
        """llama-server's ``__verbose`` of a whole answer: its prompt as text (control tokens as text), the first
        choice's content, and their token counts."""
        first = self.choices[0]
        return {"prompt": self.state.pool.model.tokenizer.decode(self.prompt_tokens, special=True),
                "content": "".join(first.text), "tokens_evaluated": len(self.prompt_tokens),
                "tokens_predicted": first.tokens}

    def _whole_choice(self, choice: Choice) -> dict[str, Any]:
        """Choice ``choice`` of a whole response (its tool calls parsed), counted in the metrics."""
        reason = choice.finish_reason or "stop"
        reply = parse_reply("".join(choice.text), self.rendered) if self._parses_calls() else None
        out = self.reply.choice(choice.index, reply.content if reply else "".join(choice.text), reason)
        if reply is not None and reply.tool_calls:
            out["finish_reason"] = "tool_calls"
            out["message"] |= {"content": reply.content or None, "tool_calls": tool_calls_json(reply)}
        self.state.metrics.finished(out["finish_reason"])
        return choice.with_logprobs({"choices": [out]})["choices"][0]

    async def _close_choice(self, choice: Choice, extra: dict[str, Any] | None = None) -> None:
        """A streamed choice's last chunks: what its reply's parse adds, then its finish reason."""
        reason = choice.finish_reason or "stop"
        if not self.exchange.started:  # not a single token (an immediate end of generation)
            await self._open_stream()
        if choice.differ is not None:  # the whole reply's parse: what it adds to the stream, then the end
            await self._send_deltas(choice, partial=False)
            if choice.differ.calls:
                reason = "tool_calls"
        self.state.metrics.finished(reason)
        closing = self.reply.closing(reason, choice.index)
        if choice.logprob_tokens:  # tokens that added nothing the stream sent yet
            closing = choice.with_logprobs(closing)
        await self.exchange.send_event(closing | (extra or speculation_fields(choice.stats(), choice.tokens)))

    def _record(self, choice: Choice, tokens_before: int) -> None:
        assert self.ended_by is not None
        reason, seen_at = self.ended_by
        record = Cancellation(reason, seen_at, trio.current_time(), tokens_before, choice.events.stats())
        self.state.cancellations.append(record)
        if reason == "hangup":
            self.state.metrics.disconnect_to_idle.observe(record.seconds_to_idle)
