"""A request body turned into a checked `Job` and its prompt's token ids (run it in a worker thread).

Parsing JSON, checking a grammar, rendering a chat template and tokenizing
are linear in the body but take milliseconds per megabyte or more: the
handlers run `prepare_body` with `in_worker`, so that one large request
never delays ``/health`` or another client's stream.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from .._errors import SpecActorError
from .._model import Model
from .._templates import is_builtin
from .._tools import RenderedChat, chat_prompt, chat_text
from ._body import parse_body
from ._defaults import RequestDefaults
from ._errors import api_error_for, bad_request, context_exceeded
from ._fields import get_field, json_object
from ._limits import ServeLimits
from ._logit_bias import with_logit_bias
from ._native import parse_native
from ._params import Job, Kind, check_chat_turns, parse_chat, parse_completion
from ._tokens import mixed_tokens

__all__ = ["Prepared", "chat_template_text", "count_chat_tokens", "count_job_tokens", "prepare_body", "prepare_job"]


@dataclass(frozen=True, slots=True)
class Prepared:
    """A checked request, its prompt's token ids and the options to run it with."""

    job: Job
    tokens: list[int]
    options: dict[str, Any] = field(default_factory=dict)
    """The job's options, with what a chat template adds (a tool-call grammar, stop strings)."""
    rendered: RenderedChat | None = None
    """A chat rendered by its Jinja template: how to parse its reply (tool calls)."""
    prompts: tuple[list[int], ...] = ()
    """A native request's prompts, when it has several (``tokens`` is the first); else empty."""

    def prompt_tokens(self) -> tuple[list[int], ...]:
        """The token ids of each prompt of the request (one, or a native request's several)."""
        return self.prompts or (self.tokens,)


def prepare_body(kind: Kind, data: bytes, model: Model, n_ctx: int,
                 limits: ServeLimits, chat_template: str | None = None, max_choices: int = 1,
                 defaults: RequestDefaults = RequestDefaults()) -> Prepared:
    """Check and tokenize the body ``data`` of a ``kind`` request (thread-safe, bounded by ``limits``).

    ``max_choices`` bounds an OpenAI request's ``n`` (`ServerState.max_choices`); ``defaults`` fill
    the sampling and length fields the body leaves out.

    Raises:
        ApiError: a 400 naming the field or the limit; a prompt of ``n_ctx``
            tokens or more is `context_exceeded`.
    """
    body = defaults.fill(parse_body(data, limits.body), kind)
    if kind == "chat":
        job = parse_chat(body, limits.grammar, max_choices)
        check_chat_turns(body, job)
    elif kind == "native":
        job = parse_native(body, model.info.n_vocab, limits.grammar, max_choices)
    else:
        job = parse_completion(body, model.info.n_vocab, limits.grammar, max_choices)
    job = dataclasses.replace(job, options=with_logit_bias(job.options, body, model))
    return prepare_job(job, model, n_ctx, chat_template)


def prepare_job(job: Job, model: Model, n_ctx: int, chat_template: str | None = None,
                prompt_param: str | None = None) -> Prepared:
    """Render and tokenize a checked ``job`` (thread-safe); errors about its prompt name ``prompt_param``.

    ``prompt_param`` defaults to ``messages`` for a chat, else ``prompt``
    (another API's request turned into a chat names its own field).

    Raises:
        ApiError: a 400 naming the field; a prompt of ``n_ctx`` tokens or
            more is `context_exceeded`.
    """
    prompt_param = prompt_param or ("messages" if job.kind == "chat" else "prompt")  # a chat's prompt: messages
    if job.native is not None and len(job.native.prompts) > 1:  # several prompts: each checked, named by its place
        prompts = [_checked_tokens(dataclasses.replace(job, prompt=prompt), model, n_ctx, chat_template,
                                   f"prompt[{i}]")[0] for i, prompt in enumerate(job.native.prompts)]
        return Prepared(job, prompts[0], dict(job.options), None, tuple(prompts))
    return Prepared(job, *_checked_tokens(job, model, n_ctx, chat_template, prompt_param))


def _checked_tokens(job: Job, model: Model, n_ctx: int, chat_template: str | None,
                    prompt_param: str) -> tuple[list[int], dict[str, Any], RenderedChat | None]:
    """`_tokens` of ``job``, its prompt neither empty nor filling the context; errors name ``prompt_param``."""
    with _as_api_error(prompt_param):
        tokens, options, rendered = _tokens(job, model, chat_template)
    if not tokens:
        raise bad_request(f"{prompt_param} is empty; send some text or token ids", param=prompt_param)
    if len(tokens) >= n_ctx:
        raise context_exceeded(len(tokens), n_ctx, prompt_param)
    return tokens, options, rendered


def chat_template_text(data: bytes, model: Model, limits: ServeLimits, chat_template: str | None = None,
                       defaults: RequestDefaults = RequestDefaults()) -> str:
    """The prompt text a chat body renders to (llama-server's ``/apply-template``), control tokens as text.

    ``add_generation_prompt: false`` ends it after the last message.

    Raises:
        ApiError: a 400 naming the field, as for a chat completion.
    """
    body = defaults.fill(parse_body(data, limits.body), "chat")
    job = parse_chat(body, limits.grammar)
    add_generation_prompt = get_field(json_object(body), "add_generation_prompt", bool, default=True)
    options = dict(job.options)
    with _as_api_error("messages"):
        return chat_text(model, job.messages, add_generation_prompt=add_generation_prompt,
                         **_template_options(chat_template), **_tool_fields(options))


def count_chat_tokens(data: bytes, model: Model, limits: ServeLimits, chat_template: str | None = None,
                      defaults: RequestDefaults = RequestDefaults()) -> int:
    """The prompt tokens of a chat body, as a chat completion would run it (``/chat/completions/input_tokens``).

    Raises:
        ApiError: a 400 naming the field, as for a chat completion.
    """
    job = parse_chat(defaults.fill(parse_body(data, limits.body), "chat"), limits.grammar)
    return count_job_tokens(job, model, chat_template)


def count_job_tokens(job: Job, model: Model, chat_template: str | None = None, prompt_param: str = "messages") -> int:
    """The prompt tokens of a checked chat ``job``; errors about its prompt name ``prompt_param``.

    Raises:
        ApiError: a 400 naming the field.
    """
    with _as_api_error(prompt_param):
        return len(_tokens(job, model, chat_template)[0])


@contextmanager
def _as_api_error(prompt_param: str) -> Iterator[None]:
    """The library's errors as `ApiError`; one about the prompt names ``prompt_param``."""
    try:
        yield
    except SpecActorError as exc:
        error = api_error_for(exc)
        if error.param == "prompt":
            error.param = prompt_param
        raise error from None


def _template_options(chat_template: str | None) -> dict[str, Any]:
    """The template options of a chat on a server started with ``chat_template``: Jinja text, a built-in name or None."""
    return {"template": chat_template, "jinja": chat_template is not None and not is_builtin(chat_template)}


def _tool_fields(options: dict[str, Any]) -> dict[str, Any]:
    """The tool fields and template variables taken out of a chat job's ``options``, for `chat_prompt`."""
    return {k: options.pop(k) for k in ("tools", "tool_choice", "parallel_tool_calls", "template_kwargs")
            if k in options}


def _tokens(job: Job, model: Model, chat_template: str | None) -> tuple[list[int], dict[str, Any], RenderedChat | None]:
    options = dict(job.options)
    if job.kind == "chat":
        return chat_prompt(model, job.messages, options, **_template_options(chat_template), **_tool_fields(options))
    if job.kind == "native":  # as llama-server tokenizes it: control-token text parsed
        tokens = mixed_tokens(model.tokenizer, model.info.n_vocab, job.prompt, "prompt", add_special=True,
                              parse_special=True)
        return tokens, options, None
    if isinstance(job.prompt, str):
        return model.tokenizer.encode(job.prompt, add_special=True, parse_special=False), options, None
    return list(job.prompt or ()), options, None
