"""The live status line on stderr, and nothing at all off a terminal.

Three displays, picked by `make_display`:

- `NoStatus`: stderr is not a terminal (or TERM=dumb): no live line, so no
  control characters ever reach a log or a pipe.
- `LineStatus`: stderr is a terminal and stdout is not (the text goes to a
  file or a pipe): one line redrawn in place with a carriage return.
- `RegionStatus`: stdout and stderr are the same terminal. The text streams
  into a scroll region of all rows but the last and the status sits on the
  last row, as apt draws its progress bar; the region is reset on exit.
"""

from __future__ import annotations

import os
import shutil
import time
from typing import TextIO

_REDRAW_S = 0.1  # at most ten redraws a second


def is_terminal(stream: TextIO | None) -> bool:
    """Whether stream is an interactive terminal that understands escape sequences."""
    if stream is None or os.environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (ValueError, OSError):  # closed or detached
        return False


def _same_terminal(a: TextIO, b: TextIO) -> bool:
    try:
        return os.path.samestat(os.fstat(a.fileno()), os.fstat(b.fileno()))
    except (ValueError, OSError):
        return False


def make_display(out: TextIO, err: TextIO) -> NoStatus:
    """The right display for these streams."""
    if not is_terminal(err):
        return NoStatus(out, err)
    if is_terminal(out) and _same_terminal(out, err):
        return RegionStatus(out, err)
    return LineStatus(out, err)


class NoStatus:
    """No live line; the base of the other displays.

    ``write`` streams text to stdout; ``status`` offers a new status text
    (drawn at most every 0.1 s); ``close`` removes the live line and leaves
    the cursor at the start of a line, ready for the final summary.
    """

    live = False

    def __init__(self, out: TextIO, err: TextIO) -> None:
        self.out = out
        self.err = err
        self._last_draw = 0.0
        self._text = ""
        self._ends_line = True

    def write(self, text: str) -> None:
        if text:
            self.out.write(text)
            self.out.flush()
            self._ends_line = text.endswith("\n")

    def _flush_out(self) -> None:
        try:
            self.out.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more to show there
            self._ends_line = True

    def status(self, text: str, *, force: bool = False) -> None:
        now = time.monotonic()
        if not self.live or (not force and now - self._last_draw < _REDRAW_S and text != ""):
            return
        self._last_draw = now
        self._text = text
        self._draw(text)

    def close(self) -> None:
        """Remove the status line; on a terminal, end the text's last line."""
        if not self._ends_line and is_terminal(self.out):
            self.out.write("\n")
            self._flush_out()
            self._ends_line = True

    def _draw(self, text: str) -> None:
        pass

    def _columns(self) -> int:
        return shutil.get_terminal_size((80, 24)).columns

    def _fit(self, text: str) -> str:
        width = max(1, self._columns() - 1)
        return text[:width]


class LineStatus(NoStatus):
    """The status on stderr's current line, redrawn in place."""

    live = True

    def _draw(self, text: str) -> None:
        self.err.write("\r\x1b[2K" + self._fit(text))
        self.err.flush()

    def close(self) -> None:
        self.err.write("\r\x1b[2K")
        self.err.flush()
        super().close()


class RegionStatus(NoStatus):
    """The text scrolls above; the status holds the terminal's last row."""

    live = True

    def __init__(self, out: TextIO, err: TextIO) -> None:
        super().__init__(out, err)
        self._rows = 0
        self._active = False

    def _setup(self) -> None:
        rows = shutil.get_terminal_size((80, 24)).lines
        if rows < 3:
            return
        if not self._active:
            # A new line first, so that shrinking the region by a row hides nothing.
            self.err.write("\n\x1b[1A")
        # Save the cursor, limit scrolling to rows 1..rows-1, go back into it.
        self.err.write(f"\x1b7\x1b[1;{rows - 1}r\x1b8")
        self._rows = rows
        self._active = True

    def _draw(self, text: str) -> None:
        self._flush_out()
        if not self._active or shutil.get_terminal_size((80, 24)).lines != self._rows:
            self._setup()
            if not self._active:
                return
        self.err.write(f"\x1b7\x1b[{self._rows};1H\x1b[2K{self._fit(text)}\x1b8")
        self.err.flush()

    def close(self) -> None:
        self._flush_out()
        if self._active:
            # Clear the status row, give the whole screen back to scrolling, and
            # keep the cursor where the text ended.
            self.err.write(f"\x1b7\x1b[{self._rows};1H\x1b[2K\x1b[r\x1b8")
            self._active = False
        if not self._ends_line:
            self.err.write("\n")
            self._ends_line = True
        self.err.flush()
