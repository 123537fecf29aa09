"""The JSON objects of OpenAI's completion and chat completion responses, whole and streamed."""

from __future__ import annotations

import functools
import secrets
import time
from typing import Any

from .. import __version__
from ..nif.model import llama_build_info
from ._params import Kind

__all__ = ["Reply", "system_fingerprint", "usage"]


@functools.cache
def system_fingerprint() -> str:
    """What serves the answers: llama-server's fingerprint (its llama.cpp build, ``b<number>-<commit>``), then this
    library's version."""
    return f"{llama_build_info()}-spec_actor-{__version__}"


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> dict[str, Any]:
    """The ``usage`` object: tokens in the prompt and in the delivered completion.

    ``prompt_tokens_details.cached_tokens``: the prompt tokens the actor's
    prefix cache held from earlier requests (not evaluated again).
    """
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens}}


class Reply:
    """Builds the response objects of one request, for its endpoint (`Kind`).

    Every object carries the same ``id``, ``created`` and ``model``.
    """

    __slots__ = ("kind", "id", "created", "model")

    def __init__(self, kind: Kind, model: str) -> None:
        self.kind = kind
        self.id = ("chatcmpl-" if kind == "chat" else "cmpl-") + secrets.token_hex(12)
        self.created = int(time.time())
        self.model = model

    def choice(self, index: int, text: str, finish_reason: str) -> dict[str, Any]:
        """Choice ``index`` of a whole response (``stream`` false)."""
        if self.kind == "chat":
            return {"index": index, "message": {"role": "assistant", "content": text}, "logprobs": None,
                    "finish_reason": finish_reason}
        return {"index": index, "text": text, "logprobs": None, "finish_reason": finish_reason}

    def whole(self, choices: list[dict[str, Any]], prompt_tokens: int, completion_tokens: int,
              cached_tokens: int = 0) -> dict[str, Any]:
        """The response of a request with ``stream`` false: its `choice` objects, and the usage of all."""
        return self._object(False, choices) | {"usage": usage(prompt_tokens, completion_tokens, cached_tokens)}

    def opening(self, index: int = 0) -> dict[str, Any] | None:
        """The first chunk of choice ``index``'s stream, before any text: a chat's assistant role; none for completions.

        Its ``content`` is null, as llama-server sends it (OpenAI sends ""; its schema allows both): a
        client may take every content it gets for a piece of the text, which an empty one is not.
        """
        if self.kind != "chat":
            return None
        return self._object(True, [self._choice(index, {"role": "assistant", "content": None}, None)])

    def piece(self, text: str, index: int = 0) -> dict[str, Any]:
        """The chunk that carries a piece of choice ``index``'s generated text."""
        return self._object(True, [self._choice(index, {"content": text} if self.kind == "chat" else text, None)])

    def closing(self, finish_reason: str, index: int = 0) -> dict[str, Any]:
        """The chunk that ends choice ``index``, with its finish reason."""
        return self._object(True, [self._choice(index, {} if self.kind == "chat" else "", finish_reason)])

    def usage_chunk(self, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> dict[str, Any]:
        """The last chunk when ``stream_options.include_usage`` is set: no choices, the usage."""
        return self._object(True, []) | {"usage": usage(prompt_tokens, completion_tokens, cached_tokens)}

    def _choice(self, index: int, content: dict[str, str | None] | str, finish_reason: str | None) -> dict[str, Any]:
        key = "delta" if self.kind == "chat" else "text"
        return {"index": index, key: content, "logprobs": None, "finish_reason": finish_reason}

    def _object(self, chunk: bool, choices: list[dict[str, Any]]) -> dict[str, Any]:
        if self.kind == "chat":
            kind = "chat.completion.chunk" if chunk else "chat.completion"
        else:
            kind = "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model,
                "system_fingerprint": system_fingerprint(), "choices": choices}
