"""Incremental UTF-8 decoding of token pieces."""

from __future__ import annotations

import codecs
from typing import final

__all__ = ["Utf8Stream"]

_Decoder = codecs.getincrementaldecoder("utf-8")


@final
class Utf8Stream:
    """Turns a stream of byte pieces into valid text, one piece at a time.

    A multi-byte character split across pieces is held back (at most 3
    bytes) until it is complete. Bytes that can never form a character become
    U+FFFD, so the joined output of all `push` calls plus `flush` equals
    ``b"".join(pieces).decode("utf-8", "replace")``. Not thread-safe: one
    stream per generation.
    """

    __slots__ = ("_decoder",)

    def __init__(self) -> None:
        self._decoder = _Decoder(errors="replace")

    def push(self, piece: bytes) -> str:
        """Add ``piece`` and return the text it completes (possibly ``""``)."""
        return self._decoder.decode(piece)

    def flush(self) -> str:
        """Return what is held back, with U+FFFD for an incomplete character, and reset."""
        text = self._decoder.decode(b"", final=True)
        self._decoder.reset()
        return text

    @property
    def pending(self) -> int:
        """The number of bytes held back, waiting for the rest of a character."""
        return len(self._decoder.getstate()[0])
