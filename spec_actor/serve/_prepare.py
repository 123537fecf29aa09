"""A request body turned into a checked `Job` and its prompt's token ids, in a worker thread.

Parsing JSON, checking a grammar, rendering a chat template and tokenizing
are linear in the body but take milliseconds per megabyte or more: the event
loop hands them to a thread (`prepare`), so that one large request never
delays ``/health`` or another client's stream.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import trio

from .._errors import PromptError, SpecActorError
from .._model import Model
from .._tools import RenderedChat, chat_prompt
from ._body import parse_body
from ._errors import api_error_for
from ._limits import ServeLimits
from ._params import Job, parse_chat, parse_completion

__all__ = ["Prepared", "prepare"]


@dataclass(frozen=True, slots=True)
class Prepared:
    """A checked request, its prompt's token ids and the options to run it with."""

    job: Job
    tokens: list[int]
    options: dict[str, Any] = field(default_factory=dict)
    """The job's options, with what a chat template adds (a tool-call grammar, stop strings)."""
    rendered: RenderedChat | None = None
    """A chat rendered by its Jinja template: how to parse its reply (tool calls)."""


async def prepare(kind: Literal["completion", "chat"], data: bytes, model: Model, n_ctx: int,
                  limits: ServeLimits, limiter: trio.CapacityLimiter, chat_template: str | None = None) -> Prepared:
    """Check and tokenize the body ``data`` of a ``kind`` request in a worker thread of ``limiter``.

    Raises:
        ApiError: a 400 naming the field or the limit.

    **Cancellation**: abandons the thread's result; the thread finishes its
    (bounded) work on its own.
    """
    return await trio.to_thread.run_sync(_prepare, kind, data, model, n_ctx, limits, chat_template, limiter=limiter,
                                         abandon_on_cancel=True)


def _prepare(kind: Literal["completion", "chat"], data: bytes, model: Model, n_ctx: int,
             limits: ServeLimits, chat_template: str | None = None) -> Prepared:
    body = parse_body(data, limits.body)
    if kind == "chat":
        job = parse_chat(body, limits.grammar)
    else:
        job = parse_completion(body, model.info.n_vocab, limits.grammar)
    try:
        tokens, options, rendered = _tokens(job, model, chat_template)
        if len(tokens) >= n_ctx:
            raise PromptError(f"the prompt is {len(tokens)} tokens long and the server's context holds "
                              f"{n_ctx}; send a shorter prompt")
    except SpecActorError as exc:
        error = api_error_for(exc)
        if job.kind == "chat" and error.param == "prompt":
            error.param = "messages"  # a chat's prompt is its messages
        raise error from None
    return Prepared(job, tokens, options, rendered)


def _tokens(job: Job, model: Model, chat_template: str | None) -> tuple[list[int], dict[str, Any], RenderedChat | None]:
    options = dict(job.options)
    if job.kind == "chat":
        tools = {k: options.pop(k) for k in ("tools", "tool_choice", "parallel_tool_calls") if k in options}
        return chat_prompt(model, job.messages, options, template=chat_template, jinja=chat_template is not None,
                           **tools)
    if isinstance(job.prompt, str):
        return model.tokenizer.encode(job.prompt, add_special=True, parse_special=False), options, None
    return list(job.prompt or ()), options, None
