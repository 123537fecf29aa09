"""One table printer for ``spec-actor bench``, the scripts in ``bench/`` and the generated docs.

A :class:`Table` holds rows of text cells under a header and renders them as
aligned plain text (for a terminal) or as a Markdown table (for the README,
``docs/benchmarks.md`` and ``--markdown``). Callers format their numbers;
the table only lays them out, so every benchmark's table looks the same.
"""

from __future__ import annotations

from collections.abc import Sequence

_GAP = "  "


class Table:
    """Rows of text cells under a header; ``align`` gives each column ``"l"`` (left) or ``"r"`` (right).

    ``section()`` starts a new group of rows: plain text separates groups by
    a blank line, Markdown (which has no such thing) ignores it.
    """

    def __init__(self, header: Sequence[str], align: str | None = None) -> None:
        align = align if align is not None else "l" * len(header)
        if len(align) != len(header) or set(align) - {"l", "r"}:
            raise ValueError(f"align must give 'l' or 'r' for each of the {len(header)} columns, got {align!r}")
        self.header = tuple(header)
        self.align = align
        self._rows: list[tuple[str, ...] | None] = []

    def add(self, *cells: object) -> None:
        """Append a row; each cell is shown as ``str(cell)``."""
        if len(cells) != len(self.header):
            raise ValueError(f"a row needs {len(self.header)} cells, got {len(cells)}: {cells!r}")
        self._rows.append(tuple(str(c) for c in cells))

    def section(self) -> None:
        """Begin a new group of rows (a blank line in plain text)."""
        if self._rows and self._rows[-1] is not None:
            self._rows.append(None)

    @property
    def rows(self) -> list[tuple[str, ...]]:
        """The rows added so far, without section breaks."""
        return [r for r in self._rows if r is not None]

    def render(self, *, markdown: bool = False) -> str:
        """The table as Markdown or as plain text, without a trailing newline."""
        return self.markdown() if markdown else self.plain()

    def markdown(self) -> str:
        """A Markdown table: one line per row, the alignment row under the header."""
        rule = "|" + "|".join("---:" if a == "r" else "---" for a in self.align) + "|"
        lines = ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in (self.header, *self.rows)]
        lines.insert(1, rule)
        return "\n".join(lines)

    def plain(self) -> str:
        """Columns padded to their widest cell, two spaces apart, a dashed rule under the header."""
        widths = [max(len(c) for c in col) for col in zip(self.header, *self.rows)]

        def fmt(cells: Sequence[str]) -> str:
            padded = (c.rjust(w) if a == "r" else c.ljust(w) for c, w, a in zip(cells, widths, self.align))
            return _GAP.join(padded).rstrip()

        lines = [fmt(self.header), fmt(["-" * w for w in widths])]
        lines += ["" if row is None else fmt(row) for row in self._rows]
        while len(lines) > 2 and lines[-1] == "":
            lines.pop()
        return "\n".join(lines)


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")
