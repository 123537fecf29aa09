"""Token ids in request bodies: llama-server's mixed prompts, ``/tokenize`` and ``/detokenize``.

llama-server takes a prompt as text, as token ids, or as an array mixing
both (``[12, 34, "text", 56]``); only a leading text gets the model's BOS
(``add_special``). Token ids outside the vocabulary are a 400 naming the
field and the position, never a native call. Pieces and texts are the
token's bytes with special tokens written out (``<bos>``), as llama-server's
``common_token_to_piece`` gives them. Every function here is linear in the
body and meant for a worker thread (`in_worker`).
"""

from __future__ import annotations

from typing import Any

from .._tokenizer import Tokenizer
from ._errors import bad_request
from ._fields import get_field, json_object, json_type, short

__all__ = ["detokenize", "mixed_tokens", "piece_json", "token_ids", "tokenize"]


def mixed_tokens(tokenizer: Tokenizer, n_vocab: int, value: object, where: str, *, add_special: bool,
                 parse_special: bool) -> list[int]:
    """The token ids of ``value``: text, or an array of texts and token ids (llama-server's ``tokenize_mixed``).

    A text gets BOS (with ``add_special``) only when it is the whole value
    or the array's first item.

    Raises:
        ApiError: a 400 naming ``where`` (or the item) for another type or an id outside the vocabulary.
    """
    if isinstance(value, str):
        return tokenizer.encode(value, add_special=add_special, parse_special=parse_special)
    if not isinstance(value, list):
        raise bad_request(f"{where} must be a string or an array of strings and token ids, not "
                          f"{json_type(value)} {short(value)}", param=where, code="invalid_type")
    tokens: list[int] = []
    for i, item in enumerate(value):
        if isinstance(item, str):
            tokens += tokenizer.encode(item, add_special=add_special and i == 0, parse_special=parse_special)
        else:
            tokens.append(_token_id(item, n_vocab, f"{where}[{i}]"))
    return tokens


def token_ids(value: object, n_vocab: int, where: str) -> list[int]:
    """``value`` as a list of token ids of the vocabulary.

    Raises:
        ApiError: a 400 naming ``where`` or the bad item.
    """
    if not isinstance(value, list):
        raise bad_request(f"{where} must be an array of token ids, not {json_type(value)} {short(value)}",
                          param=where, code="invalid_type" if value is not None else "missing")
    return [_token_id(item, n_vocab, f"{where}[{i}]") for i, item in enumerate(value)]


def _token_id(item: object, n_vocab: int, where: str) -> int:
    if not isinstance(item, int) or isinstance(item, bool):
        raise bad_request(f"{where} must be a token id (an integer), not {json_type(item)} {short(item)}",
                          param=where, code="invalid_type")
    if not 0 <= item < n_vocab:
        raise bad_request(f"{where} is {item}, outside the vocabulary (token ids 0 to {n_vocab - 1})",
                          param=where, code="invalid_value")
    return item


def piece_json(piece: bytes) -> str | list[int]:
    """A token's piece as llama-server sends it: its text if the bytes are valid UTF-8, else the byte values."""
    try:
        return piece.decode("utf-8")
    except UnicodeDecodeError:
        return list(piece)


def tokenize(body: object, tokenizer: Tokenizer, n_vocab: int) -> dict[str, Any]:
    """The answer of ``POST /tokenize``: ``{"tokens": [ids]}``, or ``[{"id", "piece"}]`` with ``with_pieces``.

    Fields: ``content`` (text, or texts and token ids mixed), ``add_special``
    (BOS; default false), ``parse_special`` (control-token text becomes
    control tokens; default true), ``with_pieces`` (default false).

    Raises:
        ApiError: a 400 naming the field.
    """
    body = json_object(body)
    add_special = get_field(body, "add_special", bool, default=False)
    parse_special = get_field(body, "parse_special", bool, default=True)
    with_pieces = get_field(body, "with_pieces", bool, default=False)
    if body.get("content") is None:
        raise bad_request("content is missing: send the text to tokenize", param="content", code="missing")
    tokens = mixed_tokens(tokenizer, n_vocab, body["content"], "content", add_special=add_special,
                          parse_special=parse_special)
    if not with_pieces:
        return {"tokens": tokens}
    return {"tokens": [{"id": t, "piece": piece_json(tokenizer.piece(t, special=True))} for t in tokens]}


def detokenize(body: object, tokenizer: Tokenizer, n_vocab: int) -> dict[str, Any]:
    """The answer of ``POST /detokenize``: ``{"content": text}`` of the ``tokens`` (invalid UTF-8 as U+FFFD).

    Raises:
        ApiError: a 400 naming ``tokens`` or the id outside the vocabulary.
    """
    tokens = token_ids(json_object(body).get("tokens"), n_vocab, "tokens")
    return {"content": tokenizer.decode(tokens, special=True)}
