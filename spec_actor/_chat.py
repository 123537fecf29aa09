"""Chat messages: checked and rendered with a chat template by llama.cpp."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from ._errors import ConfigError, PromptError
from .nif import model as _nm

__all__ = ["Message", "choose_template", "render_chat"]

Message = Mapping[str, Any]
"""One chat message: ``{"role": "user", "content": "Hi"}``; content may also be a
list of OpenAI-style text parts (``[{"type": "text", "text": "Hi"}]``)."""


def _content_text(content: Any, index: int) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence) and all(
            isinstance(part, Mapping) and part.get("type") == "text" and isinstance(part.get("text"), str)
            for part in content):
        return "".join(part["text"] for part in content)
    raise PromptError(f"message {index}: content must be a string or a list of "
                      f'{{"type": "text", "text": ...}} parts, not {type(content).__name__}')


def message_pairs(messages: Sequence[Message]) -> list[tuple[str, str]]:
    """``messages`` as (role, content) pairs, checked.

    Raises:
        PromptError: ``messages`` is empty, or a message is not a mapping with
            a string ``role`` and a text ``content``.
    """
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence) or not messages:
        raise PromptError('messages must be a non-empty list of {"role": ..., "content": ...} dicts')
    pairs = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
            raise PromptError(f'message {i} must be a dict with a string "role" and a "content"')
        pairs.append((message["role"], _content_text(message.get("content"), i)))
    for role, content in pairs:
        if "\0" in role or "\0" in content:
            raise PromptError("chat messages must not contain NUL characters")
    return pairs


@functools.cache
def family_template(arch: str) -> str | None:
    """llama.cpp's built-in template for architecture ``arch`` (``gemma3`` -> ``gemma``), if it has one.

    The longest built-in name that ``arch`` starts with; None if there is none.
    """
    names = [name for name in _nm.builtin_chat_templates() if name and arch.startswith(name)]
    return max(names, key=len) if names else None


def choose_template(model_template: str, arch: str, template: str | None, model_path: str) -> str:
    """The template to use: ``template``, else the GGUF's own, else its family's built-in one.

    Raises:
        ConfigError: none of the three exists, or ``template`` is not a string.
    """
    if template is not None:
        if not isinstance(template, str) or not template:
            raise ConfigError("template must be a non-empty string: a chat template or a built-in name like 'chatml'")
        return template
    chosen = model_template or family_template(arch)
    if not chosen:
        raise ConfigError(f"model {model_path} has no chat template and llama.cpp has no built-in one for its "
                          f"architecture {arch!r}; pass template= (e.g. template=\"chatml\") or format the "
                          "prompt yourself and call generate()/stream()")
    return chosen


def render_chat(template: str, messages: Sequence[Message], *, add_generation_prompt: bool) -> str:
    """The conversation as prompt text, formatted by llama.cpp's ``llama_chat_apply_template``.

    ``template`` is a template text or a built-in name such as ``"chatml"``.

    Raises:
        ConfigError: llama.cpp does not support the template.
        PromptError: the messages are malformed.
    """
    return _nm.apply_chat_template(template, message_pairs(messages), add_generation_prompt=add_generation_prompt)
