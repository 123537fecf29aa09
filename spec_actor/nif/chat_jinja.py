"""Checked wrappers for chats rendered by the model's Jinja template and replies parsed back (common/chat)."""

from __future__ import annotations

import json
from typing import Any

from ._check import check
from ._raw import ffi, lib
from .model import ModelHandle


def _json_out(fn: Any, *args: Any, what: str, size_hint: int) -> dict[str, Any]:
    n = ffi.new("int32_t *")
    cap = size_hint
    for _ in range(2):
        buf = ffi.new("char[]", cap)
        status = fn(*args, buf, cap, n)
        if status != lib.SA_ERR_BUFFER:
            check(status, what)
            return json.loads(ffi.string(buf, n[0]).decode("utf-8", "replace"))
        cap = n[0] + 1
    check(status, what)
    raise AssertionError("unreachable")


def render(handle: ModelHandle, request: dict[str, Any]) -> dict[str, Any]:
    """``request`` (messages, tools, tool_choice, ...) rendered by ``common_chat_templates_apply``.

    Returns its ``prompt``, ``grammar``, ``grammar_lazy``, ``format``,
    ``generation_prompt``, ``parser`` and ``additional_stops`` (see
    ``sa_chat_jinja_apply``). Raises ConfigError naming what is malformed.
    """
    text = json.dumps(request, ensure_ascii=False).encode("utf-8")
    return _json_out(lib.sa_chat_jinja_apply, handle, text, what="chat template", size_hint=4 * len(text) + 65536)


def parse(text: str, chat: dict[str, Any], *, partial: bool) -> dict[str, Any]:
    """``text`` parsed with ``common_chat_parse``: ``content``, ``reasoning_content``, ``tool_calls``."""
    data = text.encode("utf-8")
    params = chat.get("_parse_key")  # the same text for every parse of a chat: its loaded parser is reused
    if params is None:
        params = chat["_parse_key"] = json.dumps({k: chat[k] for k in ("format", "generation_prompt", "parser")},
                                                 sort_keys=True).encode("utf-8")
    return _json_out(lib.sa_chat_jinja_parse, data, int(partial), params, what="tool call parser",
                     size_hint=2 * len(data) + 4096)
