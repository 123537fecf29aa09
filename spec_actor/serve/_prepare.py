"""A request body turned into a checked `Job` and its prompt's token ids, in a worker thread.

Parsing JSON, checking a grammar, rendering a chat template and tokenizing
are linear in the body but take milliseconds per megabyte or more: the event
loop hands them to a thread (`prepare`), so that one large request never
delays ``/health`` or another client's stream.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import trio

from .._errors import PromptError, SpecActorError
from .._model import Model
from ._body import parse_body
from ._errors import api_error_for
from ._limits import ServeLimits
from ._params import Job, parse_chat, parse_completion

__all__ = ["Prepared", "prepare"]


@dataclass(frozen=True, slots=True)
class Prepared:
    """A checked request and its prompt's token ids."""

    job: Job
    tokens: list[int]


async def prepare(kind: Literal["completion", "chat"], data: bytes, model: Model, n_ctx: int,
                  limits: ServeLimits, limiter: trio.CapacityLimiter) -> Prepared:
    """Check and tokenize the body ``data`` of a ``kind`` request in a worker thread of ``limiter``.

    Raises:
        ApiError: a 400 naming the field or the limit.

    **Cancellation**: abandons the thread's result; the thread finishes its
    (bounded) work on its own.
    """
    return await trio.to_thread.run_sync(_prepare, kind, data, model, n_ctx, limits, limiter=limiter,
                                         abandon_on_cancel=True)


def _prepare(kind: Literal["completion", "chat"], data: bytes, model: Model, n_ctx: int,
             limits: ServeLimits) -> Prepared:
    body = parse_body(data, limits.body)
    if kind == "chat":
        job = parse_chat(body, limits.grammar)
    else:
        job = parse_completion(body, model.info.n_vocab, limits.grammar)
    try:
        tokens = _tokens(job, model)
        if len(tokens) >= n_ctx:
            raise PromptError(f"the prompt is {len(tokens)} tokens long and the server's context holds "
                              f"{n_ctx}; send a shorter prompt")
    except SpecActorError as exc:
        error = api_error_for(exc)
        if job.kind == "chat" and error.param == "prompt":
            error.param = "messages"  # a chat's prompt is its messages
        raise error from None
    return Prepared(job, tokens)


def _tokens(job: Job, model: Model) -> list[int]:
    if job.kind == "chat":
        return model.tokenize_chat(job.messages)
    if isinstance(job.prompt, str):
        return model.tokenizer.encode(job.prompt, add_special=True, parse_special=False)
    return list(job.prompt or ())
