"""Tokenizer of a loaded model: text <-> token ids."""

from __future__ import annotations

from typing import Any, Iterable, Protocol

from .nif import model as _nm


class NativeModel(Protocol):
    """What a `Tokenizer` needs of its model: the native handle (a `Model` has it)."""

    @property
    def handle(self) -> Any:
        """The native model handle; raises `ModelLoadError` once the model is closed."""
        ...


class Tokenizer:
    """Text <-> token ids for one model. Thread-safe."""

    def __init__(self, model: NativeModel) -> None:
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

    def is_eog(self, token: int) -> bool:
        """Whether token ends generation."""
        return _nm.is_eog(self._model.handle, token)
