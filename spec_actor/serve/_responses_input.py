"""A Responses API request (``POST /v1/responses``) checked and turned into the chat completion it stands for.

As llama-server does (its ``server_chat_convert_responses_to_chatcmpl``),
the request becomes a chat completion body, which then takes the chat's
whole path: `parse_chat`, the chat template and tool grammar
(`prepare_job`), the generation. The mapping:

- ``instructions``: a first ``system`` message; ``input``: a string (one
  ``user`` message) or a list of items: messages (role ``user``,
  ``assistant``, ``system`` or ``developer``, the last as ``system``; content
  a string or ``input_text``/``output_text``/``refusal`` parts),
  ``function_call`` items (joined to the assistant turn before them as its
  ``tool_calls``) and ``function_call_output`` items (``tool`` messages);
- ``max_output_tokens``: ``max_completion_tokens``; ``tools`` (function
  tools, flat as the Responses API writes them) and ``tool_choice``: the
  chat's nested shapes; ``text.format``: ``response_format``;
- ``temperature``, ``top_p``, ``parallel_tool_calls``, ``stream`` and the
  llama-server sampling extensions (``top_k``, ``min_p``, ``seed``, ...)
  as they are.

Every field is checked here, so errors name the Responses field (``input[2].role``,
``tools[0].type``); what the chat checks later (a tool's schema, a format's
schema, the prompt's size) is renamed to the Responses field. A request for
what this server does not keep or have (``previous_response_id``,
``conversation``, ``background``, hosted tools, images, logprobs) is a 400
with code ``unsupported``; ``store`` is accepted and nothing is stored.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from .._model import Model
from ._body import parse_body
from ._errors import ApiError, bad_request
from ._fields import get_field, json_object, json_type, short
from ._limits import ServeLimits
from ._params import Job, parse_chat, unsupported
from ._prepare import Prepared, count_job_tokens, prepare_job

__all__ = ["ResponsesRequest", "count_responses_tokens", "prepare_responses", "to_chat"]

_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
"""A Responses message's role -> the chat role it renders as."""

_TEXT_PARTS = {"input_text": "text", "output_text": "text", "refusal": "refusal"}
"""Content parts that carry text -> the key that holds it."""

_PASSED = ("model", "user", "stream", "temperature", "top_p", "parallel_tool_calls", "top_k", "min_p", "seed",
           "presence_penalty", "frequency_penalty", "repeat_penalty", "repeat_last_n", "return_progress")
"""Fields that mean the same in a chat completion body (OpenAI's, then llama-server's extensions)."""

_NOT_KEPT = "this server keeps no responses or conversations; send the whole conversation in input"

_CHAT_NAMES = (("response_format.json_schema.schema", "text.format.schema"), ("response_format", "text.format"),
               ("max_completion_tokens", "max_output_tokens"), ("].function", "]"))
"""Names in the chat path's errors -> the Responses request's (``tools[0].function.name``: ``tools[0].name``)."""


@dataclass(frozen=True, slots=True)
class ResponsesRequest:
    """A checked Responses request: its chat completion body, and what its response object repeats."""

    chat: dict[str, Any]
    """The chat completion body it stands for."""
    echo: dict[str, Any]
    """The request's settings as the response object shows them (``instructions``, ``tools``, ``text``, ...)."""
    timings_per_token: bool = False
    """llama-server's extension: each streamed delta carries the ``timings`` so far."""


def to_chat(body: object) -> ResponsesRequest:
    """Check a Responses request ``body`` and translate it to a chat completion body.

    Raises:
        ApiError: a 400 naming the Responses field.
    """
    body = json_object(body)
    _refuse_unkept(body)
    chat = {name: body[name] for name in _PASSED if name in body}
    instructions = get_field(body, "instructions", str, default=None)
    chat["messages"] = ([{"role": "system", "content": instructions}] if instructions else []) + _input(body)
    max_output = get_field(body, "max_output_tokens", int, default=None)
    if max_output is not None:
        if max_output < 1:
            raise bad_request(f"max_output_tokens={max_output} is invalid: ask for at least 1 token",
                              param="max_output_tokens")
        chat["max_completion_tokens"] = max_output
    tools = _tools(body.get("tools"))
    if tools:
        chat["tools"] = tools
    choice = _tool_choice(body.get("tool_choice"))
    if choice is not None:
        chat["tool_choice"] = choice
    text = get_field(body, "text", dict, default={})
    response_format = _format(text.get("format"))
    if response_format is not None:
        chat["response_format"] = response_format
    metadata = get_field(body, "metadata", dict, default={})
    echo = {"instructions": instructions, "max_output_tokens": max_output, "metadata": metadata,
            "parallel_tool_calls": bool(body.get("parallel_tool_calls")), "previous_response_id": None,
            "reasoning": None, "store": False, "temperature": body.get("temperature"),
            "text": {"format": text.get("format") or {"type": "text"}},
            "tool_choice": body.get("tool_choice") or "auto", "tools": body.get("tools") or [],
            "top_p": body.get("top_p"), "truncation": "disabled"}
    return ResponsesRequest(chat, echo, get_field(body, "timings_per_token", bool, default=False))


def prepare_responses(data: bytes, model: Model, n_ctx: int, limits: ServeLimits,
                      chat_template: str | None = None) -> tuple[Prepared, ResponsesRequest]:
    """Check, translate and tokenize a Responses request body (thread-safe, bounded by ``limits``).

    Raises:
        ApiError: a 400 naming the Responses field; a prompt of ``n_ctx``
            tokens or more is `context_exceeded` (param ``input``).
    """
    request, job = _job(data, limits)
    with _responses_names():
        prepared = prepare_job(job, model, n_ctx, chat_template, prompt_param="input")
    sampling = job.options["sampling"]  # the settings it runs with (greedy unless asked, decision 0018)
    return prepared, replace(request, echo=request.echo | {"temperature": sampling.temp, "top_p": sampling.top_p})


def count_responses_tokens(data: bytes, model: Model, limits: ServeLimits, chat_template: str | None = None) -> int:
    """The prompt tokens a Responses request body would run (``/v1/responses/input_tokens``).

    Raises:
        ApiError: a 400 naming the Responses field.
    """
    _, job = _job(data, limits)
    with _responses_names():
        return count_job_tokens(job, model, chat_template, prompt_param="input")


def _job(data: bytes, limits: ServeLimits) -> tuple[ResponsesRequest, Job]:
    request = to_chat(parse_body(data, limits.body))
    with _responses_names():
        return request, parse_chat(request.chat, limits.grammar)


@contextmanager
def _responses_names() -> Iterator[None]:
    """An `ApiError` raised inside, with the chat path's field names renamed to the Responses request's."""
    try:
        yield
    except ApiError as error:
        for chat_name, name in _CHAT_NAMES:
            error.message = error.message.replace(chat_name, name)
            if error.param is not None:
                error.param = error.param.replace(chat_name, name)
        error.args = (error.message,)
        raise


# -- fields -------------------------------------------------------------------------------

def _refuse_unkept(body: dict[str, Any]) -> None:
    """400s for the fields that ask for what this server does not keep or have."""
    for name in ("previous_response_id", "conversation", "prompt"):
        if body.get(name) not in (None, ""):
            what = "prompt templates stored by OpenAI" if name == "prompt" else name
            raise bad_request(f"{what} is not supported: {_NOT_KEPT}; leave {name} out", param=name,
                              code="unsupported")
    if get_field(body, "background", bool, default=False):
        raise unsupported("background", "background=true (responses run while the request is open)")
    get_field(body, "store", bool, default=False)  # accepted: nothing is stored either way
    if get_field(body, "truncation", str, default="disabled") != "disabled":
        raise unsupported("truncation", f"truncation={body['truncation']!r} (a prompt too long is a 400)")
    if get_field(body, "top_logprobs", int, default=0):
        raise unsupported("top_logprobs", "top_logprobs")
    include = get_field(body, "include", list, default=[])
    if "message.output_text.logprobs" in include:
        raise unsupported("include", "include=['message.output_text.logprobs']")
    if get_field(body, "max_tool_calls", int, default=None) is not None:
        raise unsupported("max_tool_calls", "max_tool_calls")


def _input(body: dict[str, Any]) -> list[dict[str, Any]]:
    value = body.get("input")
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise bad_request("input must be a string or a non-empty array of items (messages, function_call, "
                          f"function_call_output), not {json_type(value)}", param="input",
                          code="invalid_type" if value is not None else "missing")
    messages: list[dict[str, Any]] = []
    for i, item in enumerate(value):
        _add_item(messages, item, f"input[{i}]")
    return messages


def _add_item(messages: list[dict[str, Any]], item: object, where: str) -> None:
    """Append the chat message(s) of one input item; a function call joins the assistant turn before it."""
    if not isinstance(item, dict):
        raise bad_request(f"{where} must be an object, not {json_type(item)}", param=where, code="invalid_type")
    kind = item.get("type", "message")
    if kind == "message":
        role = item.get("role")
        if role not in _ROLES:
            raise bad_request(f"{where}.role {short(role)} is not a role: use user, assistant, system or developer",
                              param=f"{where}.role", code="invalid_value")
        messages.append({"role": _ROLES[role], "content": _content(item.get("content"), f"{where}.content")})
    elif kind == "function_call":
        call = {"id": _text(item, "call_id", where), "type": "function",
                "function": {"name": _text(item, "name", where), "arguments": _text(item, "arguments", where, "")}}
        last = messages[-1] if messages else None
        if last is not None and last["role"] == "assistant":
            last.setdefault("tool_calls", []).append(call)
        else:
            messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
    elif kind == "function_call_output":
        messages.append({"role": "tool", "tool_call_id": _text(item, "call_id", where),
                         "content": _content(item.get("output"), f"{where}.output")})
    else:
        why = f" ({_NOT_KEPT})" if kind == "item_reference" else ""
        raise bad_request(f"{where}.type {short(kind)} is not supported: send message, function_call or "
                          f"function_call_output items{why}", param=f"{where}.type", code="unsupported")


def _text(item: dict[str, Any], key: str, where: str, empty: str | None = None) -> str:
    """``item[key]``, a string (non-empty unless ``empty`` is given: the value of an absent one)."""
    value = item.get(key, empty)
    if not isinstance(value, str) or (empty is None and not value):
        raise bad_request(f"{where}.{key} must be a {'' if empty is not None else 'non-empty '}string, "
                          f"not {json_type(value)}", param=f"{where}.{key}",
                          code="invalid_type" if value is not None else "missing")
    return value


def _content(content: object, where: str) -> str:
    """A message's content (or a call's output): a string, or text parts joined."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad_request(f"{where} must be a string or an array of input_text parts, not {json_type(content)}",
                          param=where, code="invalid_type" if content is not None else "missing")
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        key = _TEXT_PARTS.get(kind)  # type: ignore[arg-type]
        if key is None:
            readable = kind in ("input_image", "input_file", "input_audio")
            raise bad_request(f"{where}[{j}] is {short(kind)}: this server reads only text parts (input_text, "
                              "output_text)" if readable else f"{where}[{j}] must be a text part "
                              '({"type": "input_text", "text": ...})', param=f"{where}[{j}]",
                              code="unsupported" if readable else "invalid_type")
        if not isinstance(part.get(key), str):
            raise bad_request(f"{where}[{j}].{key} must be a string", param=f"{where}[{j}].{key}",
                              code="invalid_type")
        texts.append(part[key])
    return "".join(texts)


def _tools(tools: object) -> list[dict[str, Any]] | None:
    """Function tools as the chat writes them (the name, description, parameters and strict under ``function``)."""
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise bad_request(f"tools must be an array of function tools, not {json_type(tools)}", param="tools",
                          code="invalid_type")
    out = []
    for i, tool in enumerate(tools):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind != "function":
            raise bad_request(f"tools[{i}].type {short(kind)} is not supported: this server calls only function "
                              'tools ({"type": "function", "name": ..., "parameters": ...})', param=f"tools[{i}].type",
                              code="unsupported")
        assert isinstance(tool, dict)
        strict = get_field(tool, "strict", bool, default=None, where=f"tools[{i}].strict")
        function = {key: tool[key] for key in ("name", "description", "parameters") if key in tool}
        out.append({"type": "function", "function": function | ({"strict": strict} if strict is not None else {})})
    return out


def _tool_choice(choice: object) -> object:
    """The chat's ``tool_choice`` for the Responses one (``{"type": "function", "name": ...}`` nests the name)."""
    if choice is None or choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise bad_request(f"tool_choice {short(choice)} is not supported: use 'auto', 'none', 'required' or "
                      '{"type": "function", "name": ...}', param="tool_choice", code="unsupported")


def _format(fmt: object) -> dict[str, Any] | None:
    """The chat's ``response_format`` for ``text.format``; None for plain text."""
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind not in ("text", "json_object", "json_schema"):
        raise bad_request(f"text.format must be {{\"type\": \"text\"}}, {{\"type\": \"json_object\"}} or "
                          f"{{\"type\": \"json_schema\", \"name\": ..., \"schema\": ...}}, not {short(fmt)}",
                          param="text.format", code="invalid_value")
    assert isinstance(fmt, dict)
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    get_field(fmt, "name", str, default=None, where="text.format.name")
    schema = get_field(fmt, "schema", dict, default=None, where="text.format.schema")
    if schema is None:
        raise bad_request("text.format.schema is missing: a json_schema format needs a JSON schema object",
                          param="text.format.schema", code="missing")
    strict = get_field(fmt, "strict", bool, default=None, where="text.format.strict")
    spec = {"name": fmt.get("name", "response"), "schema": schema} | ({"strict": strict} if strict is not None else {})
    return {"type": "json_schema", "json_schema": spec}

