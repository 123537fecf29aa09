"""Tool calling on /v1/chat/completions: the request's ``tools`` fields, and calls in OpenAI's shapes.

The request's ``tools``, ``tool_choice`` and ``parallel_tool_calls`` are
checked here (a 400 naming the field); the chat is rendered and the reply
parsed by `spec_actor._tools` (llama.cpp's common/chat). A reply with calls
ends with ``finish_reason: "tool_calls"``; a stream sends text and calls as
they are generated (`spec_actor._tools.ReplyDiffer`): a call's first delta
has its ``index``, ``id``, ``type`` and ``function.name``, the next ones
pieces of ``function.arguments``.
"""

from __future__ import annotations

from typing import Any

from .._errors import ConfigError, GrammarError
from .._tools import ChatReply, ReplyDelta, ToolCall, check_tools, new_call_id, resolve_tool_choice
from ._errors import bad_request

__all__ = ["delta_json", "message_fields", "tool_calls_json", "tool_options"]


def tool_options(body: dict[str, Any]) -> dict[str, Any]:
    """``tools``, ``tool_choice`` and ``parallel_tool_calls`` of a chat body, checked; {} when it has no tools.

    Raises:
        ApiError: a 400 naming the field.
    """
    tools, choice = body.get("tools"), body.get("tool_choice")
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise bad_request("parallel_tool_calls must be a boolean", param="parallel_tool_calls", code="invalid_type")
    if tools is None or tools == []:
        if choice not in (None, "none", "auto"):
            raise bad_request(f"tool_choice={choice!r} needs tools; send tools or leave tool_choice out",
                              param="tool_choice")
        return {}
    try:
        checked = check_tools(tools)
    except (ConfigError, GrammarError) as exc:
        raise bad_request(exc.message, param="tools", code="invalid_tools") from None
    try:
        resolve_tool_choice(choice, checked)
    except ConfigError as exc:
        raise bad_request(exc.message, param="tool_choice") from None
    return {"tools": checked, "tool_choice": choice, "parallel_tool_calls": bool(parallel)}


def message_fields(message: dict[str, Any], where: str) -> dict[str, Any]:
    """The fields of a history message beside its content, checked: an assistant's ``tool_calls`` and
    ``reasoning_content`` (its earlier reasoning, which a reasoning model's template renders, as llama-server
    passes it), a tool's ``tool_call_id``, a ``name``."""
    out: dict[str, Any] = {}
    calls = message.get("tool_calls")
    if calls is not None:
        if message.get("role") != "assistant" or not isinstance(calls, list):
            raise bad_request(f"{where}.tool_calls must be an array on an assistant message",
                              param=f"{where}.tool_calls")
        for i, call in enumerate(calls):
            fn = call.get("function") if isinstance(call, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not isinstance(
                    fn.get("arguments"), str):
                raise bad_request(f"{where}.tool_calls[{i}] must be {{\"type\": \"function\", \"function\": "
                                  "{\"name\": ..., \"arguments\": \"<JSON text>\"}}", param=f"{where}.tool_calls")
        out["tool_calls"] = calls
    for key in ("tool_call_id", "name", "reasoning_content"):
        value = message.get(key)
        if value is not None:
            if not isinstance(value, str):
                raise bad_request(f"{where}.{key} must be a string", param=f"{where}.{key}")
            out[key] = value
    if "reasoning_content" in out and message.get("role") != "assistant":
        raise bad_request(f"{where}.reasoning_content is an assistant's earlier reasoning; only an assistant "
                          "message holds it", param=f"{where}.reasoning_content")
    return out


def tool_calls_json(reply: ChatReply) -> list[dict[str, Any]]:
    """The reply's calls as OpenAI ``message.tool_calls``."""
    return [_call(call) for call in reply.tool_calls]


def _call(call: ToolCall) -> dict[str, Any]:
    return {"id": new_call_id(call), "type": "function",
            "function": {"name": call.name, "arguments": call.arguments}}


def delta_json(delta: ReplyDelta) -> dict[str, Any]:
    """A chat chunk's ``delta`` for ``delta``: text, a call's start, or a piece of its arguments."""
    if delta.index is None:
        return {"content": delta.content}
    if delta.name:
        call = {"index": delta.index, "id": delta.id, "type": "function",
                "function": {"name": delta.name, "arguments": delta.arguments}}
    else:
        call = {"index": delta.index, "function": {"arguments": delta.arguments}}
    return {"tool_calls": [call]}
