"""The docs hold together: the indexes of the decision records and of the tests are complete, and links resolve."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DECISIONS = REPO / "docs" / "decisions"
INDEX = DECISIONS / "README.md"
TESTS = REPO / "tests"
DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")), TESTS / "README.md"]
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.M | re.S)
_STATUS = re.compile(r"^\*\*Status:\*\* (?P<status>(?:partly )?superseded by (?:\[\d{4}\]\([^)]+\)(?:, )?)+)", re.M)


def records() -> dict[str, Path]:
    """Every decision record by its number."""
    return {path.name[:4]: path for path in sorted(DECISIONS.glob("[0-9][0-9][0-9][0-9]-*.md"))}


def index_rows() -> dict[str, tuple[str, str, str]]:
    """The index's table: number -> (linked file, title, status)."""
    rows = {}
    for line in INDEX.read_text(encoding="utf-8").splitlines():
        match = re.fullmatch(r"\| \[(\d{4})\]\(([^)]+)\) \| (.+) \| (.+) \|", line)
        if match:
            number, target, title, status = match.groups()
            assert number not in rows, f"record {number} is in the index twice"
            rows[number] = (target, title, status)
    return rows


def links(path: Path) -> list[str]:
    """The link targets of a Markdown file, outside fenced code."""
    return _LINK.findall(_FENCE.sub("", path.read_text(encoding="utf-8")))


def successors(status: str) -> list[str]:
    return re.findall(r"\[(\d{4})\]", status)


def test_every_record_is_in_the_index_with_its_title_and_status():
    found, rows = records(), index_rows()
    assert len(found) > 50 and sorted(rows) == sorted(found)  # it read both, and they agree
    for number, path in found.items():
        target, title, status = rows[number]
        assert target == path.name
        assert f"# {number}: {title}" == path.read_text(encoding="utf-8").splitlines()[0]
        assert status == "accepted" or re.fullmatch(r"(partly )?superseded by \[\d{4}\]\(.*", status), status


def test_a_superseded_record_says_so_at_its_top_and_links_to_its_successors():
    found, rows = records(), index_rows()
    for number, path in found.items():
        text = path.read_text(encoding="utf-8")
        head = "\n".join(text.splitlines()[:3])
        own = _STATUS.search(head)
        status = rows[number][2]
        if status == "accepted":
            assert "**Status:**" not in text, f"{path.name} has a status line, the index says accepted"
            continue
        assert own is not None, f"{path.name}: the index says {status!r}, the record has no status line"
        assert own["status"].startswith(status.split(" by ")[0]) and successors(own["status"]) == successors(status)
        for later in successors(status):  # numbers are not dates: parallel branches took 0007 after 0013
            assert later in found and later != number, f"{path.name} is superseded by {later}, no other record"


def test_the_tests_index_lists_every_test_file_and_helper():
    index = (TESTS / "README.md").read_text(encoding="utf-8")
    listed = re.findall(r"^\| \[(test_\w+\.py)\]\(\1\) \|", index, re.M)
    assert sorted(listed) == sorted(path.name for path in TESTS.glob("test_*.py"))
    helpers = {path.name for path in TESTS.glob("*.py")} - set(listed)
    assert helpers <= set(re.findall(r"`(\w+\.py)`", index.split("## Helpers")[1]))


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(doc):
    assert doc.exists(), doc
    broken = []
    for target in links(doc):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # a URL or an anchor in the same file
        if not (doc.parent / target.split("#")[0]).exists():
            broken.append(target)
    assert broken == []


def test_links_reads_markdown_links_outside_code():
    doc = "see [a](x.md) and [b](../y.md#part)\n```\n[not](z.md)\n```\n[c](https://e.org)\n"
    assert _LINK.findall(_FENCE.sub("", doc)) == ["x.md", "../y.md#part", "https://e.org"]
