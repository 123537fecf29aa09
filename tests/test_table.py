"""spec_actor._table: the one table printer, in plain text and Markdown; whole outputs compared."""

from __future__ import annotations

import pytest

from spec_actor._table import Table


def sample() -> Table:
    table = Table(("prompt", "type", "tok/s"), "llr")
    table.add("copy", "none", "43.7")
    table.add("copy", "ngram-cache", 101.2)
    table.section()
    table.add("story", "none", "9.0")
    table.section()  # a trailing break adds nothing
    return table


def test_plain_pads_aligns_and_separates_sections():
    assert sample().plain() == (
        "prompt  type         tok/s\n"
        "------  -----------  -----\n"
        "copy    none          43.7\n"
        "copy    ngram-cache  101.2\n"
        "\n"
        "story   none           9.0"
    )


def test_markdown_has_the_alignment_row_and_no_sections():
    assert sample().render(markdown=True) == (
        "| prompt | type | tok/s |\n"
        "|---|---|---:|\n"
        "| copy | none | 43.7 |\n"
        "| copy | ngram-cache | 101.2 |\n"
        "| story | none | 9.0 |"
    )


def test_markdown_escapes_pipes_and_plain_strips_trailing_blanks():
    table = Table(("a", "b"))
    table.add("x|y", "")
    assert table.markdown() == "| a | b |\n|---|---|\n| x\\|y |  |"
    assert table.plain() == "a    b\n---  -\nx|y"


def test_rows_and_empty_table():
    table = Table(("name",), "r")
    assert table.plain() == "name\n----" and table.rows == []
    table.section()
    table.add(7)
    assert table.rows == [("7",)] and table.plain() == "name\n----\n   7"


def test_bad_shapes_are_clear_errors():
    with pytest.raises(ValueError, match="align must give 'l' or 'r' for each of the 2 columns"):
        Table(("a", "b"), "lx")
    with pytest.raises(ValueError, match="align must give"):
        Table(("a", "b"), "l")
    with pytest.raises(ValueError, match="a row needs 2 cells, got 1"):
        Table(("a", "b")).add("only one")
