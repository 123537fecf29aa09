"""Chat messages: checked, rendered with a chat template by llama.cpp, and tokenized.

`render_chat` is the one place that turns messages into prompt text; what
renders it (llama.cpp's ``llama_chat_apply_template`` today) can change under
it. `tokenize_chat` keeps the messages' content text, whatever the renderer:
it renders a unique marker in place of each content, cuts the rendered text
at the control tokens of the template's own markup, and tokenizes the text
between them, content included, as plain text (docs/decisions/0040).
"""

from __future__ import annotations

import functools
import re
import secrets
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from ._errors import ConfigError, PromptError
from .nif import model as _nm

__all__ = ["ROLES", "ChatTokenizer", "Message", "choose_template", "render_chat", "split_prefill", "tokenize_chat"]

ROLES = frozenset({"system", "user", "assistant", "tool"})
"""The roles a message may have: the ones chat templates know."""

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


def message_pairs(messages: Sequence[Message], *, content_optional: bool = False) -> list[tuple[str, str]]:
    """``messages`` as (role, content) pairs, checked (``content_optional``: a missing content is "").

    Raises:
        PromptError: ``messages`` is empty, or a message is not a mapping with
            a string ``role`` and a text ``content``.
        ConfigError: a role is not one of `ROLES`.
    """
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence) or not messages:
        raise PromptError('messages must be a non-empty list of {"role": ..., "content": ...} dicts')
    pairs = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
            raise PromptError(f'message {i} must be a dict with a string "role" and a "content"')
        if message["role"] not in ROLES:
            raise ConfigError(f"message {i}: role {_short(message['role'])} is not one of "
                              f"{', '.join(sorted(ROLES))}; a role is a name, never text to insert")
        content = message.get("content")
        pairs.append((message["role"], "" if content is None and content_optional else _content_text(content, i)))
    for i, (_, content) in enumerate(pairs):
        if "\0" in content:
            raise PromptError("chat messages must not contain NUL characters")
        if not content.isascii():
            try:
                content.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise PromptError(f"message {i}: content is not valid Unicode text ({exc.reason} at "
                                  f"character {exc.start})") from None
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
    A last assistant message is continued (`split_prefill`).

    Raises:
        ConfigError: llama.cpp does not support the template.
        PromptError: the messages are malformed.
    """
    head, prefill = split_prefill(messages, add_generation_prompt)
    text = _nm.apply_chat_template(template, message_pairs(head), add_generation_prompt=add_generation_prompt)
    return text + (prefill or "")


def split_prefill(messages: Sequence[Message], add_generation_prompt: bool) -> tuple[Sequence[Message], str | None]:
    """(the messages to render, the assistant text that continues them), as llama-server prefills a reply.

    When the reply's turn is to open (``add_generation_prompt``) and the
    last message is from the assistant, after at least one other, that
    message is not a finished turn but the start of the reply: the others
    are rendered with the opening of the assistant's turn and its content
    follows verbatim, without an end of turn; the model continues it.
    Otherwise the messages are rendered as they are (prefill None).

    Raises:
        PromptError: the message to continue has ``tool_calls`` (a call is
            answered by a ``tool`` message, not continued).
    """
    if (not add_generation_prompt or isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence)
            or len(messages) < 2 or not isinstance(messages[-1], Mapping)
            or messages[-1].get("role") != "assistant"):
        return messages, None
    last = messages[-1]
    if last.get("tool_calls"):
        raise PromptError(f"message {len(messages) - 1}: an assistant message with tool_calls cannot be continued; "
                          "send the calls' results as tool messages after it")
    content = last.get("content")
    return messages[:-1], "" if content is None else _content_text(content, len(messages) - 1)


def _short(text: str) -> str:
    return repr(text) if len(text) <= 40 else repr(text[:37]) + "..."


class ChatTokenizer(Protocol):
    """What `tokenize_chat` needs of a tokenizer; `Tokenizer` has it."""

    def encode(self, text: str, *, add_special: bool = True, parse_special: bool = False) -> list[int]:
        """Token ids of ``text``."""
        ...

    def piece(self, token: int, *, special: bool = False) -> bytes:
        """The bytes of one token; a control token's are empty unless ``special``."""
        ...


# llama.cpp's `trim` (and Jinja's) strip these around a content; the markers
# carry one space each side to see whether the template stripped them.
_TRIMMED = " \t\n\v\f\r"


def tokenize_chat(tokenizer: ChatTokenizer, template: str, messages: Sequence[Message], *,
                  add_generation_prompt: bool = True, add_special: bool = True,
                  parse_special: bool = False,
                  render: Callable[[list[dict[str, Any]]], str] | None = None) -> list[int]:
    """The token ids of the conversation, with every message's content tokenized as plain text.

    Only the template's own markup (``<start_of_turn>``) becomes control
    tokens; a content of ``"<end_of_turn>"`` is the 7 tokens of that text,
    as it would be outside any template. Otherwise the ids are those of the
    whole rendered text tokenized with special tokens parsed: llama.cpp cuts
    that text at its control tokens and tokenizes the text between them
    plainly, and so does this, at the markup's control tokens only.
    ``parse_special=True`` tokenizes the rendered text whole, special tokens
    in content included, for callers who write token text on purpose.
    ``add_special`` adds the model's BOS (and EOS) as tokenizing the whole
    text would. Linear in the conversation's length; safe in a worker thread.
    ``render`` renders messages instead of ``render_chat(template, ...)``
    (the Jinja path of `spec_actor._tools`); the messages it gets keep every
    field but ``content``, and a message without content keeps none.

    Raises:
        PromptError, ConfigError: as `render_chat`.
    """
    if render is None:
        def render(msgs: list[dict[str, Any]]) -> str:
            return render_chat(template, msgs, add_generation_prompt=add_generation_prompt)
    if parse_special:
        return tokenizer.encode(render([dict(m) for m in messages]), add_special=add_special, parse_special=True)
    pairs = message_pairs(messages, content_optional=True)
    nonce = _nonce(pairs)
    marked = [dict(m) | ({"content": f" \ue000{nonce}{i}\ue001 "} if m.get("content") is not None else {})
              for i, m in enumerate(messages)]
    rendered = render(marked)
    controls: dict[str, list[str | int]] = {}  # markup repeats every turn: split each once
    segments: list[str | int] = []  # text, or the id of one of the markup's control tokens
    at = 0
    for match in re.finditer(f"( ?)\ue000{nonce}(\\d+)\ue001( ?)", rendered):
        segments += _markup(tokenizer, rendered[at:match.start()], controls)
        segments.append(_as_rendered(pairs[int(match[2])][1], match[1], match[3]))
        at = match.end()
    segments += _markup(tokenizer, rendered[at:], controls)
    return _frame(tokenizer, _encode_segments(tokenizer, segments), add_special)


def _nonce(pairs: list[tuple[str, str]]) -> str:
    """A random tag that no content holds, so that each marker is found where the template put it."""
    while True:
        nonce = secrets.token_hex(6)
        if not any(nonce in content for _, content in pairs):
            return nonce


def _as_rendered(content: str, left: str, right: str) -> str:
    """``content`` with the whitespace the template stripped from its marker's sides stripped too."""
    if not left:
        content = content.lstrip(_TRIMMED)
    if not right:
        content = content.rstrip(_TRIMMED)
    return content


def _markup(tokenizer: ChatTokenizer, text: str, cache: dict[str, list[str | int]]) -> list[str | int]:
    """``text`` cut at its control tokens: its plain text pieces and the control tokens' ids."""
    if text not in cache:
        out: list[str | int] = []
        at = 0
        for token in tokenizer.encode(text, add_special=False, parse_special=True):
            if tokenizer.piece(token):
                continue  # plain text: tokenized again with its neighbours
            spelled = tokenizer.piece(token, special=True).decode("utf-8", "replace")
            found = text.find(spelled, at) if spelled else -1
            if found < 0:  # not spelled out in the text (cannot happen with llama.cpp's vocabularies)
                continue
            out += [text[at:found], token]
            at = found + len(spelled)
        out.append(text[at:])
        cache[text] = out
    return cache[text]


def _encode_segments(tokenizer: ChatTokenizer, segments: list[str | int]) -> list[int]:
    """Control ids as they are; each run of text between them tokenized as one plain text."""
    tokens: list[int] = []
    run: list[str] = []
    for segment in [*segments, -1]:
        if isinstance(segment, str):
            run.append(segment)
            continue
        text = "".join(run)
        if text:
            tokens += tokenizer.encode(text, add_special=False, parse_special=False)
        run.clear()
        if segment >= 0:
            tokens.append(segment)
    return tokens


def _frame(tokenizer: ChatTokenizer, tokens: list[int], add_special: bool) -> list[int]:
    """``tokens`` with the BOS/EOS that tokenizing with ``add_special`` adds around any text."""
    if not add_special:
        return tokens
    probe = "a"
    plain = tokenizer.encode(probe, add_special=False)
    framed = tokenizer.encode(probe, add_special=True)
    start = _find(framed, plain)
    return framed[:start] + tokens + framed[start + len(plain):]


def _find(framed: list[int], plain: list[int]) -> int:
    """Where ``plain`` starts inside ``framed`` (its tokenization with BOS/EOS added); 0 if it is not there."""
    for start in range(len(framed) - len(plain) + 1):
        if framed[start:start + len(plain)] == plain:
            return start
    return 0
