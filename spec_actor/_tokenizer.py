"""Tokenizer of a loaded model, with a UTF-8-safe incremental detokenizer."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from ._utf8 import Utf8Stream
from .nif import model as _nm

if TYPE_CHECKING:
    from ._model import Model


class Tokenizer:
    """Text <-> token ids for one model. Thread-safe."""

    def __init__(self, model: Model) -> None:
        self._model = model

    def encode(self, text: str, *, add_special: bool = True, parse_special: bool = False) -> list[int]:
        """Token ids of text; add_special adds BOS where the model wants it,
        parse_special turns special-token text (``<start_of_turn>``) into ids."""
        return _nm.tokenize(self._model.handle, text, add_special=add_special, parse_special=parse_special)

    def piece(self, token: int, *, special: bool = False) -> bytes:
        """Raw bytes of one token (may be an incomplete UTF-8 character)."""
        return _nm.token_piece(self._model.handle, token, special=special)

    def decode(self, tokens: Iterable[int], *, special: bool = False) -> str:
        """Text of a token sequence (invalid UTF-8 becomes U+FFFD)."""
        return b"".join(self.piece(t, special=special) for t in tokens).decode("utf-8", "replace")

    def detokenizer(self) -> Detokenizer:
        """A fresh incremental detokenizer for one stream of tokens."""
        return Detokenizer(self)

    def is_eog(self, token: int) -> bool:
        """Whether token ends generation."""
        return _nm.is_eog(self._model.handle, token)


class Detokenizer:
    """Turns tokens into text one at a time, holding back split characters.

    ``push`` returns only complete UTF-8 text, so every piece is a valid
    string and the joined pieces plus ``flush()`` equal ``decode(tokens)``.
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer
        self._utf8 = Utf8Stream()

    def push(self, token: int) -> str:
        return self._utf8.push(self._tokenizer.piece(token))

    def flush(self) -> str:
        return self._utf8.flush()
