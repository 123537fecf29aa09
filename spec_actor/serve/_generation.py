"""Run one checked completion request on the pool and answer it, whole or as an event stream.

A request ends early when its client hangs up, stops reading for longer
than the send timeout, or the server stops: the generation's cancel scope is
cancelled, which leaves the library's event stream, which stops the native
loop (within one loop step, or milliseconds into a prompt prefill) and waits
until the actor is idle. A stalled client's connection is also closed: only
that ends a write to it. A request that reaches ``max_request_seconds`` ends
as if its ``max_tokens`` was reached (the stream's ``deadline``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import trio

from .._errors import SpecActorError
from .._events import Done, Eog, Error, Token
from .._stats import StatsSnapshot
from .._tools import RenderedChat, ReplyDiffer, parse_reply
from ..streams import EventStream
from ._errors import ApiError, api_error_for, shutting_down
from ._http import Exchange
from ._prepare import Prepared
from ._responses import Reply
from ._logprobs import LogprobsShaper
from ._state import Cancellation, ServerState
from ._timings import speculation_fields
from ._tools import delta_json, tool_calls_json


__all__ = ["Answer", "answer"]


async def answer(exchange: Exchange, prepared: Prepared, state: ServerState, arrived_at: float) -> None:
    """Run the prepared request and send its response; ``arrived_at`` starts its time budget.

    Raises:
        ApiError: the request was refused or failed before its response
            started (bad options, prompt too long, queue full, bad grammar,
            server stopping), or failed after (the caller then sends it as
            the stream's last event).
    """
    await Answer(exchange, prepared, state, arrived_at).run()


class Answer:
    """One request's run: its event stream, what it delivered, and why it ended early, if it did.

    `run` runs it. The answer's shape is OpenAI's; another endpoint's
    (`_completion.NativeAnswer`) overrides `_deliver` (each token) and
    `_respond` (the end), and keeps the rest: the hang-up, shutdown and
    stall watches, the metrics and the record of requests ended early.
    """

    def __init__(self, exchange: Exchange, prepared: Prepared, state: ServerState, arrived_at: float) -> None:
        self.exchange = exchange
        self.job = job = prepared.job
        self.state = state
        self.reply = Reply(job.kind, state.model_name)
        self.arrived_at = arrived_at
        self.rendered: RenderedChat | None = prepared.rendered
        """A chat rendered by its Jinja template: how to parse its reply (tool calls)."""
        self.differ = (ReplyDiffer(self.rendered) if job.stream and self.rendered is not None
                       and self.rendered.tools else None)
        """A streamed reply that may hold calls: its text and calls as deltas, as they are generated."""
        self.events = self._open(prepared.tokens, prepared.options)
        self.text: list[str] = []
        self.tokens = 0
        self.finish_reason: str | None = None
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.final_stats: StatsSnapshot | None = None
        self.end: Done | Eog | None = None
        """The event that ended the generation, once it came."""
        self.ended_by: tuple[str, float] | None = None
        """("hangup", "send_timeout" or "shutdown", when it was seen) once the request is ended early."""
        self.run_scope = trio.CancelScope()
        self.shaper = (LogprobsShaper(job.kind == "chat", state.pool.model.tokenizer)
                       if job.options.get("logprobs") is not None else None)
        self.logprob_tokens: list[Token] = []
        """Tokens whose logprobs are not sent yet (all of them when not streaming)."""

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
        """Read the events, streaming the text out (or keeping it); leave the stream idle in any case."""
        try:
            await self.events.__aenter__()
        except SpecActorError as exc:
            raise api_error_for(exc) from None
        try:
            async for ev in self.events:
                if type(ev) is Token:
                    await self._token(ev)
                elif type(ev) is Error:
                    raise api_error_for(ev.exception())
                elif isinstance(ev, (Done, Eog)):
                    self.finish_reason = "length" if type(ev) is Done and ev.reason != "stop" else "stop"
                    if type(ev) is Done and ev.reason == "deadline":
                        self.state.metrics.timed_out("request")
                    self.prompt_tokens = ev.stats.prompt_tokens
                    self.cached_tokens = ev.stats.prompt_reused
                    self.final_stats = ev.stats
                    self.end = ev
        finally:
            with trio.CancelScope(shield=True):
                tokens_before = self.events.stats().tokens_emitted  # just before aclose sets the cancel flag
                await self.events.aclose()
                if self.ended_by is not None:
                    self._record(tokens_before)

    async def _token(self, ev: Token) -> None:
        if self.tokens == 0:
            self.state.metrics.ttft.observe(trio.current_time() - self.arrived_at)
            if self.job.stream:
                await self._open_stream()
        self.tokens += 1
        await self._deliver(ev)

    async def _deliver(self, ev: Token) -> None:
        """Send a generated token's text (streaming), or keep it for the whole answer."""
        if self.shaper is not None:
            self.logprob_tokens.append(ev)
        if not ev.text:
            return
        if self.differ is not None:
            self.text.append(ev.text)
            await self._send_deltas(partial=True)
        elif self.job.stream:
            await self.exchange.send_event(self._with_logprobs(self.reply.piece(ev.text)))
        else:
            self.text.append(ev.text)

    async def _send_deltas(self, *, partial: bool) -> None:
        """What the reply's parse gained (text, a call's start, a piece of its arguments), a chunk each."""
        assert self.differ is not None
        for delta in self.differ.update("".join(self.text), partial=partial):
            chunk = self.reply.piece("")
            chunk["choices"][0]["delta"] = delta_json(delta)
            await self.exchange.send_event(self._with_logprobs(chunk))

    async def _open_stream(self) -> None:
        await self.exchange.start_events()
        opening = self.reply.opening()
        if opening is not None:
            await self.exchange.send_event(opening)

    def _parses_calls(self) -> bool:
        return self.rendered is not None and self.rendered.tools

    def _counts(self) -> tuple[int, int]:
        """(prompt tokens, of those the ones the prefix cache held) of the finished request."""
        if not self.prompt_tokens:
            last = self.events.stats()
            self.prompt_tokens, self.cached_tokens = last.prompt_tokens, last.prompt_reused
        return self.prompt_tokens, self.cached_tokens

    async def _respond(self) -> None:
        """Send the end of the answer: the whole response, or a stream's closing chunks."""
        reason = self.finish_reason or "stop"
        prompt_tokens, cached_tokens = self._counts()
        reply = None
        if self.differ is None and self._parses_calls():
            reply = parse_reply("".join(self.text), self.rendered)
        if reply is not None and reply.tool_calls:
            reason = "tool_calls"
        if self.differ is not None:  # the whole reply's parse: what it adds to the stream, then the end
            if not self.exchange.started:  # not a single token (an immediate end of generation)
                await self._open_stream()
            await self._send_deltas(partial=False)
            if self.differ.calls:
                reason = "tool_calls"
        self.state.metrics.finished(reason)
        speculation = speculation_fields(self.final_stats or self.events.stats(), self.tokens)
        if not self.job.stream:
            whole = self.reply.whole(reply.content if reply else "".join(self.text), reason, prompt_tokens,
                                     self.tokens, cached_tokens)
            if reply is not None and reply.tool_calls:
                whole["choices"][0]["message"] |= {"content": reply.content or None,
                                                   "tool_calls": tool_calls_json(reply)}
            await self.exchange.send_json(200, self._with_logprobs(whole) | speculation)
            return
        if not self.exchange.started:  # not a single token (an immediate end of generation)
            await self._open_stream()
        closing = self.reply.closing(reason)
        if self.logprob_tokens:  # tokens that added nothing the stream sent yet
            closing = self._with_logprobs(closing)
        await self.exchange.send_event(closing | speculation)
        if self.job.include_usage:
            await self.exchange.send_event(self.reply.usage_chunk(prompt_tokens, self.tokens, cached_tokens) | speculation)
        await self.exchange.end_events()

    def _with_logprobs(self, response: dict[str, Any]) -> dict[str, Any]:
        """``response`` with the logprobs of the tokens not sent yet in its choice, if the request asked."""
        if self.shaper is not None:
            response["choices"][0]["logprobs"] = self.shaper.shape(self.logprob_tokens)
            self.logprob_tokens = []
        return response

    def _record(self, tokens_before: int) -> None:
        assert self.ended_by is not None
        reason, seen_at = self.ended_by
        record = Cancellation(reason, seen_at, trio.current_time(), tokens_before, self.events.stats())
        self.state.cancellations.append(record)
        if reason == "hangup":
            self.state.metrics.disconnect_to_idle.observe(record.seconds_to_idle)
