"""`StreamSource`: the request API that actors and pools share, over the `RequestQueue` hooks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from .._chat import Message
from .._model import Model
from .._tools import chat_prompt, parse_reply
from .._options import RequestOptions
from .._request import Request
from ._event_stream import EventStream
from ._text_stream import TextStream

__all__ = ["RequestQueue", "StreamSource"]


class RequestQueue(Protocol):
    """The hooks a `StreamSource` stands on; package-internal, not for applications.

    `GenerationActor` implements them on its session and mailbox, `ActorPool`
    by handing each request to one of its actors.
    """

    __slots__ = ()

    @property
    def model(self) -> Model:
        """The model the requests run on (public: actors and pools expose it)."""
        ...

    def prepare_request(self, prompt: str | Sequence[int], options: RequestOptions) -> Request:
        """A new request for ``prompt``: tokenized and checked against the context, not queued.

        Raises `PromptError` or `ActorClosedError`.
        """
        ...

    def submit_request(self, request: Request) -> None:
        """Queue ``request`` (when its stream is entered); raises `QueueFullError` or `ActorClosedError`."""
        ...


class StreamSource(RequestQueue):
    """Makes request streams; `GenerationActor` and `ActorPool` are sources.

    Subclasses implement the `RequestQueue` hooks.
    """

    __slots__ = ()

    def stream_events(self, prompt: str | Sequence[int], **options: Any) -> EventStream:
        """Return the event stream of a new request for ``prompt``.

        Options:
            max_tokens (int): most tokens to generate, default 256.
            emit_stats_every (int): a `Stats` event every this many tokens; 0
                (default) for none.
            timeout (float | None): seconds without an event, once the
                request runs, after which it ends with ``Error`` (a
                `GenerationTimeout`) and the native run is cancelled. Time
                waiting in the queue does not count.
            deadline (float | None): a `trio.current_time()` value by which
                the request ends, queued or running: the native run is
                cancelled and the stream ends with ``Done(stats,
                reason="deadline")`` after the text generated so far.
            stop (str | list[str]): stop strings; the output ends before the
                first one, the run is cancelled and the terminal is
                ``Done(stats, reason="stop")``. Text that may begin a stop
                string is held back until it cannot.
            add_special, parse_special (bool): how a text prompt is tokenized.
            logprobs (int | None): each `Token` carries the target model's
                log-probability and this many (0 to 20) most likely
                alternatives at its position; None (default) for none.
            logprobs_after_sampling (bool): those log-probabilities are the
                distribution the sampler drew the token from (after top-k,
                top-p, min-p, the grammar; a greedy pick has probability
                1), listing only tokens it could draw, rather than the
                target's raw logits' (default False).
            prompt_progress (bool): `Progress` events while the prompt is
                evaluated: one before it starts, one per prompt chunk the
                engine decodes, the last (``processed == total``) before
                the first `Token`; False (default) for none.
            sampling (Sampling), or sampler options: temp, top_k, top_p,
                min_p, seed, penalty_last_n, repeat_penalty,
                frequency_penalty, presence_penalty, grammar, grammar_root;
                or json_schema (a dict) instead of grammar: the output is
                JSON that the schema allows.

        The prompt is a string or a sequence of token ids. Nothing is queued
        until the stream is entered or iterated.

        Raises:
            ConfigError: an option is unknown or out of range.
            PromptError: the prompt is empty or does not fit the context.
            ActorClosedError: the actor (or pool) is closed.
        """
        request = self.prepare_request(prompt, RequestOptions.from_kwargs(**options))
        return EventStream(request, self.submit_request)

    def stream(self, prompt: str | Sequence[int], **options: Any) -> TextStream:
        """Return the text stream of a new request: the generated text piece by piece.

        Takes the options of `stream_events` and raises as it does; the
        stream raises the request's error, if it fails, after its last piece.
        """
        return TextStream(self.stream_events(prompt, **options))

    async def generate(self, prompt: str | Sequence[int], **options: Any) -> str:
        """Generate and return the whole text for ``prompt``.

        Takes the options of `stream_events`.

        Raises:
            SpecActorError: the request was refused or failed (`ConfigError`,
                `PromptError`, `QueueFullError`, `ActorClosedError`,
                `GenerationTimeout`, native errors).

        **Cancellation**: cancelling the caller cancels the request and waits,
        shielded, for the native loop to stop (within one loop step, or
        milliseconds during a prefill) before the cancellation propagates.
        """
        async with self.stream(prompt, **options) as text:
            return "".join([piece async for piece in text])

    def chat_events(self, messages: Sequence[Message], *, template: str | None = None, tools: Any = None,
                    tool_choice: Any = None, parallel_tool_calls: bool = False, **options: Any) -> EventStream:
        """Return the event stream of a new chat request: the reply to ``messages``.

        ``messages`` is a list of ``{"role": ..., "content": ...}`` dicts,
        formatted with the model's own chat template by llama.cpp (see
        `Model.apply_chat_template`; ``template`` overrides it) and ending
        with the opening of the assistant's turn. Takes the options of
        `stream_events`. Each message's content is text: control-token text
        in it stays text (`Model.tokenize_chat`); ``parse_special=True``
        parses it as tokens, for callers who write token text on purpose.
        The reply ends at the model's end-of-turn token (an ``Eog`` event).

        A GGUF with its own template is rendered by it through llama.cpp's
        Jinja engine, as llama-server renders it; so is any request with
        ``tools`` (OpenAI function tools; ``template`` is then Jinja text,
        or ``"gemma"``). A Gemma 3 without a template that renders tools
        (the embedded one) gets the package's template of Gemma 3's turns
        with tools (docs/decisions/0102). A last assistant message is
        continued: the reply is what follows its text (assistant prefill).
        ``tool_choice`` ("auto", "none", "required" or a named function)
        "required" and a named function constrain the reply to a call;
        ``messages`` may hold ``tool`` results and assistant ``tool_calls``
        (see `spec_actor._tools`). `chat` parses the calls back.

        Raises:
            ConfigError: the model has no chat template and none was given, or
                llama.cpp does not support the template; a role is not
                system, user, assistant or tool; or an option is bad.
            PromptError: a message is malformed, or the conversation does not
                fit the context.
            ActorClosedError: the actor (or pool) is closed.
        """
        prompt, options, _ = chat_prompt(self.model, messages, options, template=template, tools=tools,
                                         tool_choice=tool_choice, parallel_tool_calls=parallel_tool_calls)
        return self.stream_events(prompt, **options)

    def chat_stream(self, messages: Sequence[Message], *, template: str | None = None,
                    **options: Any) -> TextStream:
        """Return the text stream of a chat request (see `chat_events`)."""
        return TextStream(self.chat_events(messages, template=template, **options))

    async def chat(self, messages: Sequence[Message], *, template: str | None = None, tools: Any = None,
                   tool_choice: Any = None, parallel_tool_calls: bool = False, **options: Any) -> Any:
        """Generate and return the whole reply to ``messages`` (see `chat_events`).

        Returns the text; with ``tools``, a `ChatReply` whose ``tool_calls``
        are the parsed calls (text the format's parser rejects stays its
        ``content``). Raises and cancels as `generate` does.
        """
        prompt, options, rendered = chat_prompt(self.model, messages, options, template=template, tools=tools,
                                                tool_choice=tool_choice, parallel_tool_calls=parallel_tool_calls)
        async with self.stream(prompt, **options) as stream:
            text = "".join([piece async for piece in stream])
        return text if tools is None or rendered is None else parse_reply(text, rendered)
