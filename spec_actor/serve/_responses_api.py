"""OpenAI's Responses API, ``POST /v1/responses`` (and ``/responses``), on the chat completions' path.

The request becomes the chat completion it stands for (`_responses_input`),
which is prepared and run as a chat is: the chat template, tool grammar,
hang-ups, shutdown, stalls and metrics (`_generation.Answer`). Only the
answer's shape is the Responses API's (`_responses_output`): a response
object whose ``output`` holds a message item and function call items, or a
stream of typed events (``event:`` lines, ``sequence_number``s) that ends
with ``response.completed`` (``response.incomplete`` at
``max_output_tokens``) and no ``[DONE]``. An error after the stream started
is an ``error`` event. Nothing is stored: ``previous_response_id`` is a 400.
``POST /v1/responses/input_tokens`` counts the prompt tokens of such a body.
"""

from __future__ import annotations

import trio

from .._events import Progress, Token
from .._tools import ReplyDelta, new_call_id, parse_reply
from ._errors import shutting_down
from ._generation import Answer, Choice
from ._http import Exchange
from ._prepare import Prepared
from ._responses_input import ResponsesRequest, count_responses_tokens, prepare_responses
from ._responses_output import Event, ResponseBuilder, response_usage
from ._state import ServerState
from ._timings import progress_timings, prompt_progress, speculation_fields, timings
from ._work import answer_in_worker, in_worker, read_body

__all__ = ["ResponsesAnswer", "input_tokens", "responses"]


async def responses(exchange: Exchange, state: ServerState) -> None:
    """``POST /v1/responses``: a model response, whole or as a stream of events."""
    arrived_at = trio.current_time()
    if state.stopping.is_set():
        raise shutting_down()
    data = await read_body(exchange, state)
    prepared, request = await in_worker(state, prepare_responses, data, state.pool.model, state.n_ctx,
                                        state.limits, state.chat_template)
    await ResponsesAnswer(exchange, prepared, state, arrived_at, request).run()


async def input_tokens(exchange: Exchange, state: ServerState) -> None:
    """``POST /v1/responses/input_tokens``: the prompt tokens a Responses body would run."""
    await answer_in_worker(exchange, state, lambda data: {
        "object": "response.input_tokens",
        "input_tokens": count_responses_tokens(data, state.pool.model, state.limits, state.chat_template)})


class ResponsesAnswer(Answer):
    """A Responses request's run, answered as the Responses API answers."""

    def __init__(self, exchange: Exchange, prepared: Prepared, state: ServerState, arrived_at: float,
                 request: ResponsesRequest) -> None:
        super().__init__(exchange, prepared, state, arrived_at)
        self.builder = ResponseBuilder(state.model_name, request.echo)
        self.request = request
        exchange.stream_end = b""  # the Responses API's stream ends with response.completed, no [DONE]
        exchange.typed_events = True

    async def _deliver(self, choice: Choice, ev: Token) -> None:
        if not ev.text:
            return
        choice.text.append(ev.text)
        if choice.differ is not None:
            events = self._deltas(choice, partial=True)
        elif self.job.stream:
            events = self.builder.text(ev.text)
        else:
            return
        if events and self.request.timings_per_token:  # as llama-server: on the token's last event
            events[-1]["timings"] = timings(choice.stats(), self.tokens)
        await self._send(events)

    def _deltas(self, choice: Choice, *, partial: bool) -> list[Event]:
        """The events of what the reply's parse gained."""
        assert choice.differ is not None
        return [event for delta in choice.differ.update("".join(choice.text), partial=partial)
                for event in self._events_of(delta)]

    def _events_of(self, delta: ReplyDelta) -> list[Event]:
        if delta.index is None:
            return self.builder.text(delta.content)
        if delta.name:
            return self.builder.call(delta.name, delta.id, delta.arguments)
        return self.builder.arguments(delta.index, delta.arguments)

    async def _open_stream(self) -> None:
        await self._send(await self._start())

    async def _start(self) -> list[Event]:
        """Start the event stream; its opening events, to send."""
        await self.exchange.start_events()
        self.exchange.error_body = self.builder.error_event  # an error now ends the stream as an event
        return self.builder.opening()

    async def _progress(self, choice: Choice, ev: Progress) -> None:
        """llama-server's report of the prompt's evaluation: ``prompt_progress`` (and the ``timings`` so far, with
        ``timings_per_token``) on a ``response.in_progress`` event, the first on the opening's."""
        events = [self.builder.in_progress()] if self.exchange.started else await self._start()
        events[-1]["prompt_progress"] = prompt_progress(ev)
        if self.request.timings_per_token:
            events[-1]["timings"] = progress_timings(ev)
        await self._send(events)

    async def _send(self, events: list[Event]) -> None:
        for event in events:
            await self.exchange.send_event(event)

    async def _respond(self) -> None:
        choice = self.choices[0]  # one per response
        prompt_tokens, cached_tokens = self._counts()
        if self.job.stream and not self.exchange.started:  # not a single token (an immediate end of generation)
            await self._open_stream()
        if choice.differ is not None:  # the whole reply's parse: what it adds to the stream
            await self._send(self._deltas(choice, partial=False))
        elif not self.job.stream:  # the whole reply, fed as a stream's would be
            text = "".join(choice.text)
            reply = parse_reply(text, self.rendered) if self._parses_calls() else None
            self.builder.text(reply.content if reply is not None else text)
            for call in reply.tool_calls if reply is not None else ():
                self.builder.call(call.name, new_call_id(call), call.arguments)
        incomplete = choice.finish_reason == "length"
        self.state.metrics.finished("tool_calls" if self.builder.calls else choice.finish_reason or "stop")
        events = self.builder.finish("incomplete" if incomplete else "completed",
                                     response_usage(prompt_tokens, self.tokens, cached_tokens))
        speculation = speculation_fields(self._stats(), self.tokens)
        if not self.job.stream:
            assert self.builder.final is not None
            await self.exchange.send_json(200, self.builder.final | speculation)
            return
        events[-1] |= speculation  # as llama-server: the last event carries the timings
        await self._send(events)
        await self.exchange.end_events()
