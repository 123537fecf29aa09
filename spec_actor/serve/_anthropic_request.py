"""Anthropic's Messages request, checked and translated into the chat completion body the chat path runs.

``POST /v1/messages`` (and ``/count_tokens``) take Anthropic's fields:
``messages`` of roles ``user`` and ``assistant`` whose ``content`` is text
or a list of blocks (``text``, ``tool_use``, ``tool_result``, and an
assistant's ``thinking``, which becomes its ``reasoning_content`` as
llama-server converts it; ``redacted_thinking`` is dropped), ``system``, ``max_tokens`` (required, as Anthropic
requires it), ``temperature`` (0 to 1), ``top_p``, ``top_k``,
``stop_sequences``, ``stream``, ``tools`` (``name``, ``description``,
``input_schema``) and ``tool_choice`` (``auto``, ``any``, ``tool``,
``none``). Each is checked here, a 400 naming the field, and rewritten as
the chat completion body `parse_chat` takes: a ``tool_use`` block becomes an
assistant ``tool_calls`` entry, a ``tool_result`` block a ``tool`` message.
What this server cannot do (images, documents, server tools) is a 400 that
says so (docs/decisions/0100). Other fields (``metadata``, ``thinking``,
``service_tier``) are ignored, as the chat path ignores unknown fields.
"""

from __future__ import annotations

import json
from typing import Any

from .._limits import GrammarLimits
from ._errors import ApiError, bad_request
from ._fields import get_field, json_object, json_type, short
from ._params import MAX_STOP, Job, parse_chat

__all__ = ["parse_messages"]

_ROLES = ("user", "assistant")
_UNSUPPORTED_BLOCKS = ("image", "document", "search_result", "container_upload")
_IGNORED_BLOCKS = ("redacted_thinking",)  # encrypted reasoning: nothing a template could render
_CHOICES = {"auto": "auto", "any": "required", "none": "none"}  # and "tool": a named function


def parse_messages(body: object, grammar_limits: GrammarLimits = GrammarLimits(), *,
                   count_only: bool = False) -> Job:
    """Check a Messages body and return the chat `Job` it asks for; ``count_only``: no ``max_tokens`` needed.

    Raises:
        ApiError: a 400 naming the field, by Anthropic's names.
    """
    chat = chat_body(body, count_only=count_only)
    try:
        return parse_chat(chat, grammar_limits)
    except ApiError as error:
        if error.param == "tools":  # a tool's error names the chat field: say it by Anthropic's name
            error.message = error.message.replace(".function.parameters", ".input_schema").replace(".function", "")
        raise


def chat_body(body: object, *, count_only: bool = False) -> dict[str, Any]:
    """The chat completion body of a Messages body, its fields checked.

    Raises:
        ApiError: a 400 naming the field, by Anthropic's names.
    """
    body = json_object(body)
    get_field(body, "model", str, default=None)
    chat: dict[str, Any] = {"messages": _system(body.get("system")) + _messages(body.get("messages"))}
    if not count_only:
        chat |= _generation_fields(body)
    tools = _tools(body.get("tools"))
    if tools is not None:
        chat["tools"] = tools
    chat |= _tool_choice(body.get("tool_choice"))
    return chat


def _generation_fields(body: dict[str, Any]) -> dict[str, Any]:
    """``max_tokens`` (required), the sampling fields, ``stop_sequences`` and ``stream``, by the chat's names."""
    max_tokens = get_field(body, "max_tokens", int, default=None)
    if max_tokens is None:
        raise bad_request("max_tokens is required: the most tokens to generate", param="max_tokens",
                          code="missing")
    temperature = get_field(body, "temperature", float, default=None)
    if temperature is not None and not 0.0 <= temperature <= 1.0:
        raise bad_request(f"temperature={temperature:g} is invalid: use 0 to 1", param="temperature")
    # top_p, top_k and stream are checked by parse_chat, under the same names
    fields = {"max_tokens": max_tokens, "temperature": temperature, "top_p": body.get("top_p"),
              "top_k": body.get("top_k"), "stream": body.get("stream"),
              "stop": _stop_sequences(body.get("stop_sequences"))}
    return {name: value for name, value in fields.items() if value is not None and value != []}


def _system(system: object) -> list[dict[str, Any]]:
    """The system prompt as a chat's first message (none when absent or empty)."""
    if system is None:
        return []
    if isinstance(system, str):
        text = system
    elif isinstance(system, list):
        text = "".join(_text_block(block, f"system[{i}]") for i, block in enumerate(system))
    else:
        raise bad_request(f"system must be a string or an array of text blocks, not {json_type(system)}",
                          param="system", code="invalid_type")
    return [{"role": "system", "content": text}] if text else []


def _messages(messages: object) -> list[dict[str, Any]]:
    if not isinstance(messages, list) or not messages:
        raise bad_request("messages must be a non-empty array of {role, content} objects", param="messages",
                          code="invalid_type" if messages is not None else "missing")
    out: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise bad_request(f"{where} must be an object, not {json_type(message)}", param=where,
                              code="invalid_type")
        role = message.get("role")
        if role not in _ROLES:
            raise bad_request(f"{where}.role {short(role)} is not a role: use user or assistant (a system "
                              "prompt goes in the top-level system field)", param=f"{where}.role",
                              code="invalid_value")
        content = message.get("content")
        if isinstance(content, str):
            out.append({"role": role, "content": content})
        elif isinstance(content, list):
            out += _blocks(role, content, f"{where}.content")
        else:
            raise bad_request(f"{where}.content must be a string or an array of content blocks, not "
                              f"{json_type(content)}", param=f"{where}.content",
                              code="invalid_type" if content is not None else "missing")
    return out


def _blocks(role: str, blocks: list[Any], where: str) -> list[dict[str, Any]]:
    """One message's content blocks as chat messages: a user's tool results first, then its text."""
    texts: list[dict[str, str]] = []
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    thoughts: list[str] = []
    for j, block in enumerate(blocks):
        at = f"{where}[{j}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            texts.append({"type": "text", "text": _text_block(block, at)})
        elif kind == "thinking":
            thoughts.append(_thinking(block, role, at))
        elif kind == "tool_use":
            calls.append(_tool_use(block, role, at))
        elif kind == "tool_result":
            results.append(_tool_result(block, role, at))
        elif kind in _UNSUPPORTED_BLOCKS:
            raise bad_request(f"{at} is a {kind} block: this server reads text only; send text blocks",
                              param=at, code="unsupported")
        elif kind not in _IGNORED_BLOCKS:
            if not isinstance(block, dict):
                raise bad_request(f"{at} must be a content block object, not {json_type(block)} {short(block)}",
                                  param=at, code="invalid_type")
            raise bad_request(f"{at}.type {short(kind)} is not a content block type: use text, tool_use or "
                              "tool_result", param=f"{at}.type", code="invalid_value")
    if role == "assistant":
        return [{"role": "assistant", "content": texts} | ({"tool_calls": calls} if calls else {})
                | ({"reasoning_content": "".join(thoughts)} if thoughts else {})]
    return results + ([{"role": "user", "content": texts}] if texts or not results else [])


def _text_block(block: object, at: str) -> str:
    """The text of a ``{"type": "text", "text": ...}`` block (other keys, as ``cache_control``, ignored)."""
    if not isinstance(block, dict) or block.get("type") != "text":
        raise bad_request(f'{at} must be a text block {{"type": "text", "text": ...}}', param=at,
                          code="invalid_type")
    return _string(block, "text", at)


def _thinking(block: dict[str, Any], role: str, at: str) -> str:
    """The text of an assistant's ``thinking`` block (its ``signature`` is not checked: nothing is signed here)."""
    if role != "assistant":
        raise bad_request(f"{at} is a thinking block, which only an assistant message holds", param=at,
                          code="invalid_value")
    return _string(block, "thinking", at)


def _string(block: dict[str, Any], key: str, at: str) -> str:
    """``block[key]``, which must be a string (a 400 naming ``at.key`` otherwise)."""
    value = block.get(key)
    if not isinstance(value, str):
        raise bad_request(f"{at}.{key} must be a string, not {json_type(value)}", param=f"{at}.{key}",
                          code="invalid_type" if value is not None else "missing")
    return value


def _tool_use(block: dict[str, Any], role: str, at: str) -> dict[str, Any]:
    """A ``tool_use`` block as a chat ``tool_calls`` entry."""
    if role != "assistant":
        raise bad_request(f"{at} is a tool_use block, which only an assistant message holds", param=at,
                          code="invalid_value")
    for key in ("id", "name"):
        if not isinstance(block.get(key), str) or not block[key]:
            raise bad_request(f"{at}.{key} must be a non-empty string", param=f"{at}.{key}", code="invalid_type")
    arguments = block.get("input")
    if not isinstance(arguments, dict):
        raise bad_request(f"{at}.input must be an object, not {json_type(arguments)}", param=f"{at}.input",
                          code="invalid_type" if arguments is not None else "missing")
    return {"id": block["id"], "type": "function",
            "function": {"name": block["name"], "arguments": json.dumps(arguments, ensure_ascii=False)}}


def _tool_result(block: dict[str, Any], role: str, at: str) -> dict[str, Any]:
    """A ``tool_result`` block as a chat ``tool`` message (``is_error`` is type-checked, not rendered)."""
    if role != "user":
        raise bad_request(f"{at} is a tool_result block, which only a user message holds", param=at,
                          code="invalid_value")
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str) or not call_id:
        raise bad_request(f"{at}.tool_use_id must be a non-empty string", param=f"{at}.tool_use_id",
                          code="invalid_type")
    get_field(block, "is_error", bool, default=None, where=f"{at}.is_error")
    content = block.get("content")
    if content is None or isinstance(content, str):
        text = content or ""
    elif isinstance(content, list):
        text = "".join(_text_block(part, f"{at}.content[{k}]") for k, part in enumerate(content))
    else:
        raise bad_request(f"{at}.content must be a string or an array of text blocks, not {json_type(content)}",
                          param=f"{at}.content", code="invalid_type")
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def _stop_sequences(stops: object) -> list[str]:
    if stops is None:
        return []
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise bad_request(f"stop_sequences must be an array of strings, not {json_type(stops)} {short(stops)}",
                          param="stop_sequences", code="invalid_type")
    if len(stops) > MAX_STOP:
        raise bad_request(f"stop_sequences has {len(stops)} strings; send at most {MAX_STOP}",
                          param="stop_sequences")
    return [s for s in stops if s]


def _tools(tools: object) -> list[dict[str, Any]] | None:
    """Anthropic's client tools as chat function tools (their schemas are checked by `parse_chat`)."""
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise bad_request(f"tools must be an array of {{name, description, input_schema}} objects, not "
                          f"{json_type(tools)}", param="tools", code="invalid_type")
    out = []
    for i, tool in enumerate(tools):
        at = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise bad_request(f"{at} must be an object, not {json_type(tool)}", param=at, code="invalid_type")
        if tool.get("type") not in (None, "custom"):
            raise bad_request(f"{at}.type {short(tool['type'])} is a server tool, which this server does not run; "
                              "send client tools ({name, description, input_schema})", param=f"{at}.type",
                              code="unsupported")
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            raise bad_request(f"{at}.name must be a non-empty string", param=f"{at}.name", code="invalid_type")
        description = get_field(tool, "description", str, default=None, where=f"{at}.description")
        schema = tool.get("input_schema")
        if not isinstance(schema, dict):
            raise bad_request(f"{at}.input_schema must be a JSON schema object, not {json_type(schema)}",
                              param=f"{at}.input_schema", code="invalid_type" if schema is not None else "missing")
        function = {"name": name, "parameters": schema} | ({"description": description} if description else {})
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(choice: object) -> dict[str, Any]:
    """``tool_choice`` and ``parallel_tool_calls`` of the chat body ({} when absent)."""
    if choice is None:
        return {}
    if not isinstance(choice, dict):
        raise bad_request(f'tool_choice must be an object {{"type": "auto" | "any" | "tool" | "none"}}, not '
                          f"{json_type(choice)}", param="tool_choice", code="invalid_type")
    kind = choice.get("type")
    if kind == "tool":
        name = choice.get("name")
        if not isinstance(name, str) or not name:
            raise bad_request('tool_choice.name must name a tool when tool_choice.type is "tool"',
                              param="tool_choice.name", code="invalid_type")
        out: dict[str, Any] = {"tool_choice": {"type": "function", "function": {"name": name}}}
    elif kind in _CHOICES:
        out = {"tool_choice": _CHOICES[kind]}
    else:
        raise bad_request(f"tool_choice.type {short(kind)} is invalid: use auto, any, tool or none",
                          param="tool_choice.type", code="invalid_value")
    disable = get_field(choice, "disable_parallel_tool_use", bool, default=None,
                        where="tool_choice.disable_parallel_tool_use")
    if disable is not None:
        out["parallel_tool_calls"] = not disable
    return out
