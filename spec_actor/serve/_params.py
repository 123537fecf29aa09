"""The JSON body of a completion request, checked and turned into generation options.

Fields follow OpenAI's API as its clients send them. Fields this server does
not know are ignored, as other OpenAI-compatible servers ignore them; known
fields of the wrong type, out of range, or asking for a feature this server
does not have (``echo``) are a 400 that names the field. ``n``
asks for several choices, at most the server's `choice_limit` (each a
sequence of the pool). ``top_k``, ``min_p``, ``repeat_penalty``, ``repeat_last_n``,
``grammar`` (GBNF) and ``json_schema`` are accepted as extensions, by
llama.cpp's ``llama-server`` names; ``response_format`` (JSON object or
schema) becomes a grammar (see `_structured`). llama-server's native
``/completion`` body is checked by `_completion` with the same options.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from .._chat import ROLES
from .._errors import ConfigError, GrammarError
from .._limits import GrammarLimits
from .._sampling import Sampling
from ._errors import ApiError, bad_request
from ._fields import get_field, json_object, json_type, short
from ._logprobs import chat_logprobs_option, completion_logprobs_option
from ._structured import request_grammar
from ._tools import message_fields, tool_options

__all__ = ["Job", "NativeFields", "check_chat_turns", "parse_chat", "parse_completion", "request_options", "stream_fields", "unsupported"]

Kind = Literal["completion", "chat", "native"]
"""The endpoint: OpenAI's completions or chat completions, or llama-server's native ``/completion``."""

# Default `max_tokens` of /v1/completions, as in OpenAI's API; chat generates
# until the end of the turn or of the context.
COMPLETION_MAX_TOKENS = 16

# Most stop strings per request (OpenAI takes 4): each is matched against every token's text.
MAX_STOP = 16

# OpenAI's sampling fields -> spec_actor's `Sampling` names, then the extensions.
_FLOAT_FIELDS = {"temperature": "temp", "top_p": "top_p", "presence_penalty": "presence_penalty",
                 "frequency_penalty": "frequency_penalty", "min_p": "min_p", "repeat_penalty": "repeat_penalty"}
_INT_FIELDS = {"seed": "seed", "top_k": "top_k", "repeat_last_n": "penalty_last_n"}


@dataclass(frozen=True, slots=True)
class NativeFields:
    """What shapes a native completion's answer beside its generation options."""

    n_predict: int
    """Tokens asked for; -1: no limit."""
    n_probs: int
    """Alternatives per token in ``completion_probabilities``; 0: none."""
    return_tokens: bool
    """Whether a whole answer lists the generated token ids (a stream always does)."""
    response_fields: tuple[str, ...] | None
    """The fields of the last answer to keep (``"a/b"`` takes ``b`` out of ``a``); None: all."""
    ignore_eos: bool = False
    """Whether end-of-generation tokens are banned (``ignore_eos``; the biases are in the sampling)."""
    prompts: tuple[str | list[int | str], ...] = ()
    """Every prompt of the request (llama-server takes several); the job's ``prompt`` is the first."""
    post_sampling_probs: bool = False
    """Whether ``completion_probabilities`` are the sampler's (``prob``), not the raw logits' (``logprob``)."""


@dataclass(frozen=True, slots=True)
class Job:
    """One checked completion request."""

    kind: Kind
    """Which endpoint: plain text completion, chat, or llama-server's native completion."""
    stream: bool
    """Answer with server-sent events."""
    include_usage: bool
    """Streaming only: send a last chunk with ``usage`` (``stream_options``)."""
    max_tokens: int | None
    """Most tokens to generate; None: until the end of the turn or of the context."""
    prompt: str | list[int] | list[int | str] | None = None
    """The prompt of a completion: text or token ids (a native completion's: texts and ids mixed)."""
    messages: list[dict[str, Any]] = field(default_factory=list)
    """The conversation of a chat, each ``{"role", "content"}`` with text content (and tool fields)."""
    options: dict[str, Any] = field(default_factory=dict)
    """Request options of ``stream_events`` (``sampling``, ``stop``), max_tokens aside."""
    native: NativeFields | None = None
    """A native completion's fields that shape its answer; None for the OpenAI endpoints."""
    n: int = 1
    """Choices to generate, each a sequence of the pool (``n``)."""
    verbose: bool = False
    """Add llama-server's ``__verbose`` object (the prompt as text) to a whole OpenAI answer (``verbose``)."""
    timings_per_token: bool = False
    """Streaming: every event carries the ``timings`` so far, not only the last (llama-server's ``timings_per_token``)."""


def parse_completion(body: object, n_vocab: int, grammar_limits: GrammarLimits = GrammarLimits(),
                     max_choices: int = 1) -> Job:
    """Check the body of ``POST /v1/completions``; a grammar against ``grammar_limits``, ``n`` to ``max_choices``.

    Raises:
        ApiError: a 400 naming the field to change.
    """
    body = json_object(body)
    n = _choices(body, max_choices)
    if get_field(body, "echo", bool, default=False):
        raise unsupported("echo", "echo=true")
    if get_field(body, "suffix", str, default=""):
        raise unsupported("suffix", "suffix")
    best_of = get_field(body, "best_of", int, default=1)
    if best_of != 1:
        raise unsupported("best_of", f"best_of={best_of}")
    prompt = _prompt(body.get("prompt"), n_vocab)
    max_tokens = _max_tokens(body, ("max_tokens",), COMPLETION_MAX_TOKENS)
    options = request_options(body, grammar_limits) | {"logprobs": completion_logprobs_option(body)}
    return Job("completion", *stream_fields(body), max_tokens=max_tokens, prompt=prompt, options=options, n=n,
               verbose=_verbose(body), timings_per_token=timings_per_token(body))


def parse_chat(body: object, grammar_limits: GrammarLimits = GrammarLimits(), max_choices: int = 1) -> Job:
    """Check the body of ``POST /v1/chat/completions``; a grammar against ``grammar_limits``, ``n`` to ``max_choices``.

    Raises:
        ApiError: a 400 naming the field to change.
    """
    body = json_object(body)
    n = _choices(body, max_choices)
    messages = _messages(body.get("messages"))
    max_tokens = _max_tokens(body, ("max_completion_tokens", "max_tokens"), None)
    options = (request_options(body, grammar_limits) | {"logprobs": chat_logprobs_option(body)} | tool_options(body)
               | _template_kwargs(body))
    return Job("chat", *stream_fields(body), max_tokens=max_tokens, messages=messages, options=options, n=n,
               verbose=_verbose(body), timings_per_token=timings_per_token(body))


def check_chat_turns(body: dict[str, Any], job: Job) -> None:
    """What an OpenAI chat completion may not ask, as llama-server refuses it (not Anthropic's or the Responses API's
    turns, which those APIs allow): two assistant messages at the end, and ``continue_final_message`` together
    with ``add_generation_prompt`` (a reply's turn cannot be both continued and opened).

    Raises:
        ApiError: a 400 naming the field.
    """
    roles = [message["role"] for message in job.messages]
    if roles[-2:] == ["assistant", "assistant"]:
        raise bad_request("messages ends with two assistant messages: send one, whose content the reply continues",
                          param=f"messages[{len(roles) - 1}]")
    continues = get_field(body, "continue_final_message", bool, default=False)
    opens = get_field(body, "add_generation_prompt", bool, default=False)
    if continues and opens:
        raise bad_request("continue_final_message and add_generation_prompt cannot both be true: the last "
                          "assistant message is continued, so leave add_generation_prompt out",
                          param="continue_final_message")


# -- fields -------------------------------------------------------------------------------

def _choices(body: dict[str, Any], max_choices: int) -> int:
    """``n``, checked against ``max_choices``; also refuses the fields this server does not have."""
    n = get_field(body, "n", int, default=1)
    if n < 1:
        raise bad_request(f"n={n} is invalid: ask for at least 1 choice", param="n")
    if n > max_choices:
        raise bad_request(f"n={n} is more choices than this server runs at once; ask for at most {max_choices} "
                          "(the pool's size, --pool, or --max-choices)", param="n")
    get_field(body, "model", str, default=None)
    get_field(body, "user", str, default=None)
    return n


def timings_per_token(body: dict[str, Any]) -> bool:
    """llama-server's ``timings_per_token``: whether every streamed event carries the ``timings`` so far."""
    return get_field(body, "timings_per_token", bool, default=False)


def _verbose(body: dict[str, Any]) -> bool:
    """llama-server's ``verbose``: whether the answer carries ``__verbose``."""
    return get_field(body, "verbose", bool, default=False)


def _template_kwargs(body: dict[str, Any]) -> dict[str, Any]:
    """``{"template_kwargs": ...}``: llama-server's ``chat_template_kwargs``, variables of a Jinja template; {} if none.

    Their ``enable_thinking`` must be a bool (llama.cpp's formats read it too).
    """
    kwargs = get_field(body, "chat_template_kwargs", dict, default=None)
    if not kwargs:
        return {}
    if "enable_thinking" in kwargs and not isinstance(kwargs["enable_thinking"], bool):
        raise bad_request(f"chat_template_kwargs.enable_thinking must be true or false, not "
                          f"{json_type(kwargs['enable_thinking'])}", param="chat_template_kwargs.enable_thinking",
                          code="invalid_type")
    return {"template_kwargs": kwargs}


def unsupported(param: str, what: str) -> ApiError:
    """The 400 of a field asking for what this server does not do (code ``unsupported``)."""
    return bad_request(f"{what} is not supported by this server; leave {param} out", param=param,
                       code="unsupported")


def stream_fields(body: dict[str, Any]) -> tuple[bool, bool]:
    """(``stream``, whether a streamed answer ends with a ``usage`` chunk), checked."""
    stream = get_field(body, "stream", bool, default=False)
    stream_options = get_field(body, "stream_options", dict, default={})
    include_usage = get_field(stream_options, "include_usage", bool, default=False)
    return stream, bool(stream and include_usage)


def _max_tokens(body: dict[str, Any], names: tuple[str, ...], default: int | None) -> int | None:
    for name in names:
        value = get_field(body, name, int, default=None)
        if value is not None:
            if value < 1:
                raise bad_request(f"{name}={value} is invalid: ask for at least 1 token", param=name)
            return value
    return default


def request_options(body: dict[str, Any], grammar_limits: GrammarLimits) -> dict[str, Any]:
    """``sampling``, ``stop`` and ``prompt_progress`` (llama-server's ``return_progress``, on a stream) for
    ``stream_events``; ranges are checked by `Sampling`.

    Raises:
        ApiError: a 400 naming the field.
    """
    options: dict[str, Any] = {}
    for name, option in _FLOAT_FIELDS.items():
        value = get_field(body, name, float, default=None)
        if value is not None:
            options[option] = value
    if options.get("temp", 0.0) > 2.0:
        raise bad_request(f"temperature={options['temp']:g} is invalid: use 0 to 2", param="temperature")
    for name, option in _INT_FIELDS.items():
        value = get_field(body, name, int, default=None)
        if value is not None:
            options[option] = value
    grammar = request_grammar(body)
    if grammar is not None:
        options["grammar"] = grammar
    options = {"sampling": _sampling(options, grammar_limits)}
    if get_field(body, "return_progress", bool, default=False) and get_field(body, "stream", bool, default=False):
        options["prompt_progress"] = True  # llama-server's: the stream reports the prompt's evaluation
    stop = body.get("stop")
    if stop is not None:
        items = [stop] if isinstance(stop, str) else stop
        if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
            raise bad_request(f"stop must be a string or an array of strings, not {json_type(stop)}",
                              param="stop", code="invalid_type")
        if len(items) > MAX_STOP:
            raise bad_request(f"stop has {len(items)} strings; send at most {MAX_STOP}", param="stop")
        if any(items):
            options["stop"] = [s for s in items if s]
    return options


def _sampling(options: dict[str, Any], grammar_limits: GrammarLimits) -> Sampling:
    """The `Sampling` of the options; its errors name the request's field."""
    try:
        return Sampling(**options, grammar_limits=grammar_limits)
    except GrammarError as exc:
        raise bad_request(exc.message, param="grammar", code="invalid_grammar") from None
    except ConfigError as exc:
        option = exc.message.split("=", 1)[0]
        field = next((name for table in (_FLOAT_FIELDS, _INT_FIELDS) for name, opt in table.items()
                      if opt == option), option if option == "grammar" else None)
        prefix = f"{field}: " if field is not None and field != option else ""
        raise bad_request(prefix + exc.message, param=field) from None


def _prompt(prompt: object, n_vocab: int) -> str | list[int]:
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one prompt
    if isinstance(prompt, str):
        if not prompt:
            raise bad_request("prompt is empty; send some text", param="prompt")
        return prompt
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        bad = [t for t in prompt if not 0 <= t < n_vocab]
        if bad:
            raise bad_request(f"prompt has token ids outside the vocabulary (0 to {n_vocab - 1}): {short(bad)}",
                              param="prompt")
        return list(prompt)
    if isinstance(prompt, list) and len(prompt) > 1:
        raise bad_request("prompt holds several prompts; send one per request", param="prompt", code="unsupported")
    raise bad_request(f"prompt must be a string or an array of token ids, not {json_type(prompt)} {short(prompt)}",
                      param="prompt", code="invalid_type" if prompt is not None else "missing")


def _messages(messages: object) -> list[dict[str, str]]:
    if not isinstance(messages, list) or not messages:
        raise bad_request("messages must be a non-empty array of {role, content} objects", param="messages",
                          code="invalid_type" if messages is not None else "missing")
    out = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise bad_request(f"{where} must be an object, not {json_type(message)}", param=where)
        role = message.get("role")
        if not isinstance(role, str) or not role:
            raise bad_request(f"{where}.role must be a non-empty string", param=f"{where}.role")
        if role not in ROLES:
            raise bad_request(f"{where}.role {short(role)} is not a role: use one of {', '.join(sorted(ROLES))}",
                              param=f"{where}.role", code="invalid_value")
        out.append({"role": role, "content": _content(message.get("content"), f"{where}.content")}
                   | message_fields(message, where))
    return out


def _content(content: object, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: only text ones
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise bad_request(f"{where} may hold only text parts ({{\"type\": \"text\", \"text\": ...}})",
                                  param=where, code="unsupported")
            texts.append(part["text"])
        return "".join(texts)
    raise bad_request(f"{where} must be a string or an array of text parts, not {json_type(content)}",
                      param=where, code="invalid_type")
