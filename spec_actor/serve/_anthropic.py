"""Anthropic's Messages API, ``POST /v1/messages`` and ``/v1/messages/count_tokens``, on the chat completions' path.

The request becomes the chat `Job` a chat completion would be
(`_anthropic_request`) and runs as one (`prepare_job`, `Answer`: the same
template, tool-call grammar and parser, limits, hang-ups and metrics); only
the answer's shape is Anthropic's (docs/decisions/0100): a whole ``message``
with ``text`` and ``tool_use`` blocks, or typed server-sent events
(``message_start``, ``content_block_start``/``_delta``/``_stop``,
``message_delta``, ``message_stop``), and errors as
``{"type": "error", "error": {"type", "message"}}``.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

import trio

from .._events import Done, Token
from .._model import Model
from .._tools import ChatReply, ReplyDelta, ToolCall, new_call_id, parse_reply
from ._anthropic_request import parse_messages
from ._body import parse_body
from ._errors import ApiError, shutting_down
from ._generation import Answer, Choice
from ._http import Exchange
from ._limits import ServeLimits
from ._params import Job
from ._prepare import Prepared, count_job_tokens, prepare_job
from ._state import ServerState
from ._timings import speculation_fields
from ._work import in_worker, read_body

__all__ = ["MessagesAnswer", "count_message_tokens", "count_tokens", "error_body", "messages", "prepare_messages",
           "speak_anthropic"]

# Anthropic's error types by HTTP status; other 4xx are invalid requests, other 5xx api errors.
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 408: "timeout_error", 413: "request_too_large", 429: "rate_limit_error",
                503: "overloaded_error"}


def speak_anthropic(exchange: Exchange) -> None:
    """Make the exchange answer errors in Anthropic's shape, and end streams without OpenAI's ``[DONE]``."""
    exchange.error_body = error_body
    exchange.error_event = "error"
    exchange.stream_end = b""


def error_body(error: ApiError) -> dict[str, Any]:
    """``error`` as Anthropic sends errors; the field it names leads the message where the message lacks it."""
    kind = _ERROR_TYPES.get(error.status, "api_error" if error.status >= 500 else "invalid_request_error")
    message = error.message
    if error.param is not None and error.param not in message:
        message = f"{error.param}: {message}"
    return {"type": "error", "error": {"type": kind, "message": message}}


async def messages(exchange: Exchange, state: ServerState) -> None:
    """``POST /v1/messages``: Anthropic's Messages API, whole or streamed."""
    arrived_at = trio.current_time()
    if state.stopping.is_set():
        raise shutting_down()
    data = await read_body(exchange, state)
    prepared = await in_worker(state, prepare_messages, data, state.pool.model, state.n_ctx, state.limits,
                               state.chat_template)
    await MessagesAnswer(exchange, prepared, state, arrived_at).run()


async def count_tokens(exchange: Exchange, state: ServerState) -> None:
    """``POST /v1/messages/count_tokens``: ``{"input_tokens": N}``, the prompt tokens the message would run."""
    data = await read_body(exchange, state)
    count = await in_worker(state, count_message_tokens, data, state.pool.model, state.limits, state.chat_template)
    await exchange.send_json(200, {"input_tokens": count})


def prepare_messages(data: bytes, model: Model, n_ctx: int, limits: ServeLimits,
                     chat_template: str | None = None) -> Prepared:
    """Check a Messages body and tokenize its chat, as `prepare_body` does a chat completion's (thread-safe).

    Raises:
        ApiError: a 400 naming the field.
    """
    return prepare_job(_job(data, limits), model, n_ctx, chat_template)


def count_message_tokens(data: bytes, model: Model, limits: ServeLimits, chat_template: str | None = None) -> int:
    """The prompt tokens of a Messages body (``max_tokens`` not needed), as the message would run (thread-safe).

    Raises:
        ApiError: a 400 naming the field.
    """
    return count_job_tokens(_job(data, limits, count_only=True), model, chat_template)


def _job(data: bytes, limits: ServeLimits, *, count_only: bool = False) -> Job:
    return parse_messages(parse_body(data, limits.body), limits.grammar, count_only=count_only)


class MessagesAnswer(Answer):
    """A message's run (`Answer`), answered in Anthropic's shape."""

    def __init__(self, exchange: Exchange, prepared: Prepared, state: ServerState, arrived_at: float) -> None:
        super().__init__(exchange, prepared, state, arrived_at)
        self.message_id = "msg_" + secrets.token_hex(12)
        self.blocks = _Blocks(exchange)
        """A streamed message's content blocks."""

    async def _open_stream(self) -> None:
        await self.exchange.start_events()
        await self.exchange.send_event({"type": "message_start", "message": self._message([], None, None)},
                                       "message_start")

    async def _deliver(self, choice: Choice, ev: Token) -> None:
        if not ev.text:
            return
        choice.text.append(ev.text)
        if choice.differ is not None:  # a reply that may hold calls: what its parse gained
            for delta in choice.differ.update("".join(choice.text), partial=True):
                await self.blocks.send(delta)
        elif self.job.stream:
            await self.blocks.send(ReplyDelta(content=ev.text))

    async def _respond(self) -> None:
        choice = self.choices[0]  # one per message
        text = "".join(choice.text)
        if not self.job.stream:
            reply = ChatReply(text)
            if self.rendered is not None and self.rendered.tools:  # a reply that may hold calls
                reply = parse_reply(text, self.rendered)
            content = ([{"type": "text", "text": reply.content}] if reply.content else []) + [
                _tool_use(call) for call in reply.tool_calls]
            stop_reason, stop_sequence = self._finish(bool(reply.tool_calls))
            await self.exchange.send_json(200, self._message(content, stop_reason, stop_sequence) | self._speculation())
            return
        if not self.exchange.started:  # not a single token (an immediate end of generation)
            await self._open_stream()
        if choice.differ is not None:  # the whole reply's parse: what it adds to the stream
            for delta in choice.differ.update(text, partial=False):
                await self.blocks.send(delta)
        await self.blocks.close()
        stop_reason, stop_sequence = self._finish(bool(choice.differ and choice.differ.calls))
        await self.exchange.send_event({"type": "message_delta",
                                        "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
                                        "usage": self._usage()} | self._speculation(), "message_delta")
        await self.exchange.send_event({"type": "message_stop"}, "message_stop")
        await self.exchange.end_events()

    def _finish(self, calls: bool) -> tuple[str, str | None]:
        """(``stop_reason``, ``stop_sequence``), and the request counted as finished in the metrics."""
        end = self.choices[0].end
        if calls:
            reason, sequence = "tool_use", None
        elif type(end) is Done and end.reason == "stop" and end.stop in (self.job.options.get("stop") or ()):
            reason, sequence = "stop_sequence", end.stop
        elif type(end) is Done and end.reason != "stop":  # the budget, or the request's time limit
            reason, sequence = "max_tokens", None
        else:  # the end of the turn: an end-of-generation token, or the template's own stop string
            reason, sequence = "end_turn", None
        self.state.metrics.finished({"tool_use": "tool_calls", "max_tokens": "length"}.get(reason, "stop"))
        return reason, sequence

    def _message(self, content: list[dict[str, Any]], stop_reason: str | None,
                 stop_sequence: str | None) -> dict[str, Any]:
        return {"id": self.message_id, "type": "message", "role": "assistant", "model": self.state.model_name,
                "content": content, "stop_reason": stop_reason, "stop_sequence": stop_sequence,
                "usage": self._usage()}

    def _usage(self) -> dict[str, int]:
        """Anthropic's ``usage``: ``input_tokens`` are the prompt's tokens the prefix cache did not hold."""
        prompt_tokens, cached_tokens = self._counts()
        return {"input_tokens": prompt_tokens - cached_tokens, "cache_read_input_tokens": cached_tokens,
                "output_tokens": self.tokens}

    def _speculation(self) -> dict[str, Any]:
        """llama-server's ``timings`` and vLLM's ``speculative_decoding``, as the chat completions carry them.

        llama-server leaves ``timings`` out of Anthropic's answers; here every
        response carries them (decision 0108).
        """
        return speculation_fields(self._stats(), self.tokens)


def _tool_use(call: ToolCall) -> dict[str, Any]:
    """A parsed call as a ``tool_use`` block; its ``input`` is the arguments' JSON object."""
    try:
        arguments = json.loads(call.arguments)
    except ValueError:
        arguments = None
    # common/chat's parser writes the arguments as JSON; an object is what Anthropic's input must be
    return {"type": "tool_use", "id": new_call_id(call), "name": call.name,
            "input": arguments if isinstance(arguments, dict) else {}}


class _Blocks:
    """The content blocks of a streamed message: each started, filled by deltas and stopped in turn."""

    __slots__ = ("_exchange", "_index", "_open")

    _TEXT = -1
    """`_open` for a text block (a call's block holds its call index)."""

    def __init__(self, exchange: Exchange) -> None:
        self._exchange = exchange
        self._index = -1
        self._open: int | None = None

    async def send(self, delta: ReplyDelta) -> None:
        """Send what the reply gained: text, a call's start, or a piece of its arguments."""
        if delta.index is None:
            if delta.content:
                if self._open != self._TEXT:
                    await self._start({"type": "text", "text": ""}, self._TEXT)
                await self._delta({"type": "text_delta", "text": delta.content})
            return
        if delta.name:
            await self._start({"type": "tool_use", "id": delta.id, "name": delta.name, "input": {}}, delta.index)
        if delta.arguments and self._open == delta.index:
            await self._delta({"type": "input_json_delta", "partial_json": delta.arguments})

    async def close(self) -> None:
        """Stop the open block, if any."""
        if self._open is not None:
            self._open = None
            await self._event("content_block_stop", {"index": self._index})

    async def _start(self, block: dict[str, Any], key: int) -> None:
        await self.close()
        self._index += 1
        self._open = key
        await self._event("content_block_start", {"index": self._index, "content_block": block})

    async def _delta(self, delta: dict[str, str]) -> None:
        await self._event("content_block_delta", {"index": self._index, "delta": delta})

    async def _event(self, name: str, data: dict[str, Any]) -> None:
        await self._exchange.send_event({"type": name} | data, name)
