"""``logprobs``: the request fields, and the target model's log-probabilities in OpenAI's shapes.

Chat completions take ``logprobs`` (a boolean) and ``top_logprobs`` (0 to
20); a choice's ``logprobs`` is ``{"content": [{"token", "logprob",
"bytes", "top_logprobs": [...]}], "refusal": None}``. Completions take
``logprobs`` (an integer, 0 to 20, the alternatives per token); a choice's
``logprobs`` is ``{"tokens", "token_logprobs", "top_logprobs",
"text_offset"}``. Under speculation the values are the target model's at
each emitted position, whoever drafted the token.
"""

from __future__ import annotations

import math
from typing import Any

from .._events import Token
from .._tokenizer import Tokenizer
from .._validate import MAX_TOP_LOGPROBS
from ._errors import bad_request

__all__ = ["LogprobsShaper", "chat_logprobs_option", "completion_logprobs_option", "native_probabilities"]


def chat_logprobs_option(body: dict[str, Any]) -> int | None:
    """The alternatives per token a chat request asks for (None: no logprobs).

    Raises:
        ApiError: a 400 naming ``logprobs`` or ``top_logprobs``.
    """
    logprobs = body.get("logprobs")
    top = body.get("top_logprobs")
    if logprobs is not None and not isinstance(logprobs, bool):
        raise bad_request(f"logprobs must be a boolean on chat completions, not {logprobs!r}", param="logprobs",
                          code="invalid_type")
    if top is not None:
        _check_count("top_logprobs", top)
        if not logprobs:
            raise bad_request("top_logprobs needs logprobs=true", param="top_logprobs")
    return (top or 0) if logprobs else None


def completion_logprobs_option(body: dict[str, Any]) -> int | None:
    """The alternatives per token a completion asks for with ``logprobs`` (None: none).

    Raises:
        ApiError: a 400 naming ``logprobs``.
    """
    logprobs = body.get("logprobs")
    if logprobs is None or logprobs is False:
        return None
    _check_count("logprobs", logprobs)
    return logprobs


def native_probabilities(tokens: list[Token], tokenizer: Tokenizer, post_sampling: bool = False) -> list[dict[str, Any]]:
    """llama-server's ``completion_probabilities`` of ``tokens``: each token's and its alternatives' log-probabilities.

    Each entry is ``{"id", "token", "bytes", "logprob", "top_logprobs":
    [{"id", "token", "bytes", "logprob"}]}`` (``/completion`` with
    ``n_probs``); pieces with special tokens written out. With
    ``post_sampling`` (the tokens carry the sampler's probabilities, as
    ``post_sampling_probs`` asks) they are ``prob`` and ``top_probs``.
    """
    def entry(token: int, logprob: float | None) -> dict[str, Any]:
        fields = {"id": token} | _entry(tokenizer, token, logprob, special=True)
        if post_sampling:
            del fields["logprob"]
            fields["prob"] = None if logprob is None else math.exp(logprob)
        return fields

    top = "top_probs" if post_sampling else "top_logprobs"
    return [entry(t.id, t.logprob) | {top: [entry(i, p) for i, p in t.top_logprobs]} for t in tokens]


def _entry(tokenizer: Tokenizer, token: int, logprob: float | None, *, special: bool = False) -> dict[str, Any]:
    piece = tokenizer.piece(token, special=special)
    return {"token": piece.decode("utf-8", "replace"), "logprob": logprob, "bytes": list(piece)}


def _check_count(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_TOP_LOGPROBS:
        raise bad_request(f"{name}={value!r} is invalid: use an integer from 0 to {MAX_TOP_LOGPROBS}", param=name)


class LogprobsShaper:
    """Turns tokens carrying log-probabilities into a choice's ``logprobs`` object.

    One per response: for completions, ``text_offset`` continues across the
    chunks of a stream.
    """

    __slots__ = ("chat", "tokenizer", "offset")

    def __init__(self, chat: bool, tokenizer: Tokenizer) -> None:
        self.chat = chat
        self.tokenizer = tokenizer
        self.offset = 0

    def shape(self, tokens: list[Token]) -> dict[str, Any]:
        """The ``logprobs`` of the tokens of one chunk, or of a whole response."""
        if self.chat:
            tok = self.tokenizer
            return {"content": [_entry(tok, t.id, t.logprob) | {"top_logprobs": [_entry(tok, i, p) for i, p in
                                                                                 t.top_logprobs]}
                                for t in tokens], "refusal": None}
        texts, offsets = [], []
        for t in tokens:
            offsets.append(self.offset)
            texts.append(self._text(t.id))
            self.offset += len(t.text)
        return {"tokens": texts, "token_logprobs": [t.logprob for t in tokens],
                "top_logprobs": [{self._text(i): p for i, p in t.top_logprobs} for t in tokens],
                "text_offset": offsets}

    def _text(self, token: int) -> str:
        return self.tokenizer.piece(token).decode("utf-8", "replace")
