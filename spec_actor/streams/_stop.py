"""Stop strings over a token stream, holding back text that may start one."""

from __future__ import annotations

import dataclasses

from .._events import Token

__all__ = ["StopMatcher"]


class StopMatcher:
    """Finds the first stop string in the text of a sequence of tokens.

    Tokens are held back whole while their text may be the start of a stop
    string, so every released `Token` keeps its real id. On a match the
    tokens before it are released, the one in which the stop string starts
    cut to the text before it (dropped if that is empty), and the rest
    dropped.
    """

    __slots__ = ("_stops", "_held", "_text", "released", "matched")

    def __init__(self, stops: tuple[str, ...]) -> None:
        self._stops = stops
        self._held: list[Token] = []
        self._text = ""  # the joined text of the held tokens
        self.released = 0
        """Tokens released so far (a cut one included)."""
        self.matched = ""
        """The stop string found ("" until one is): the one that starts first, the first listed at a tie."""

    def push(self, token: Token) -> tuple[list[Token], bool]:
        """Add a token; return the tokens safe to release and whether a stop string matched."""
        self._held.append(token)
        self._text += token.text
        found = [(i, stop) for stop in self._stops if (i := self._text.find(stop)) >= 0]
        if found:
            index, self.matched = min(found, key=lambda f: f[0])
            out = self._cut(index)
            self.released += len(out)
            return out, True
        keep = self._partial_len()
        released: list[Token] = []
        rest = len(self._text)
        while self._held and rest - len(self._held[0].text) >= keep:
            head = self._held.pop(0)
            rest -= len(head.text)
            released.append(head)
        self._text = self._text[len(self._text) - rest:]
        self.released += len(released)
        return released, False

    def flush(self) -> list[Token]:
        """Release everything held (the generation ended without a match)."""
        held, self._held, self._text = self._held, [], ""
        self.released += len(held)
        return held

    def _partial_len(self) -> int:
        # Length of the longest end of the held text that begins a stop string.
        text = self._text
        best = 0
        for stop in self._stops:
            for n in range(min(len(stop) - 1, len(text)), best, -1):
                if text.endswith(stop[:n]):
                    best = n
                    break
        return best

    def _cut(self, index: int) -> list[Token]:
        out: list[Token] = []
        start = 0
        for token in self._held:
            end = start + len(token.text)
            if end <= index:
                out.append(token)
            else:
                if index > start:
                    out.append(dataclasses.replace(token, text=token.text[: index - start]))
                break
            start = end
        self._held, self._text = [], ""
        return out
