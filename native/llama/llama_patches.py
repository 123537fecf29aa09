"""Apply spec_actor's edits to the llama.cpp source it builds: the patch files in patches/ (decision 0096).

Each file in ``patches/`` is one change (decisions 0085, 0086, 0088, 0089,
0090, 0092, 0093, 0094, 0097, 0105 and 0117), a unified diff with a header that says
why; they apply in the order of their names. A hunk applies only where its
header puts it and only if every line it keeps or removes is there exactly:
no offset, no fuzz, so a llama.cpp the patches were not written for fails
the build with the patch, file and line, instead of building without the
edit. The files' bytes are part of the build's cache key (llama_build.py),
and the patched tree is a copy of the unpacked source, never the source
itself. The files are ordinary patches: ``git apply`` and ``patch -p1`` make
the same tree (tests/test_llama_patches.py).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

PATCHES = Path(__file__).resolve().with_name("patches")

_HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_LINE = re.compile(r"[^\n]*\n|[^\n]+\Z")  # a line is what ends at "\n", as diff counts them


@dataclass(frozen=True)
class Hunk:
    """Lines ``old`` at line ``start`` (1-based) become ``new``."""

    start: int
    old: tuple[str, ...]
    new: tuple[str, ...]


@dataclass(frozen=True)
class FilePatch:
    """The hunks of one patch for the file at ``path`` (relative to the tree)."""

    path: str
    hunks: tuple[Hunk, ...]


class PatchError(SystemExit):
    """Raised when a patch is malformed or does not apply to the tree."""


def patch_files(folder: Path = PATCHES) -> list[Path]:
    """The patch files, in the order they apply."""
    return sorted(folder.glob("*.patch"))


def fingerprint(folder: Path = PATCHES) -> str:
    """A hash of every patch file's name and bytes, for the build's cache key."""
    digest = hashlib.sha256()
    for path in patch_files(folder):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def parse(text: str, name: str) -> list[FilePatch]:
    """The file patches of a unified diff; the text before the first ``---`` line is its header."""
    lines = _LINE.findall(text)
    files: list[FilePatch] = []
    i = 0
    while i < len(lines):
        if not (lines[i].startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")):
            i += 1
            continue
        path = _strip_prefix(lines[i + 1][4:].rstrip("\n").split("\t")[0], name)
        i += 2
        hunks = []
        while i < len(lines) and lines[i].startswith("@@ "):
            hunk, i = _parse_hunk(lines, i, name, path)
            hunks.append(hunk)
        if not hunks:
            raise PatchError(f"llama.cpp patch {name}: {path} has no hunks")
        files.append(FilePatch(path, tuple(hunks)))
    if not files:
        raise PatchError(f"llama.cpp patch {name}: no file to patch (not a unified diff)")
    return files


def _strip_prefix(path: str, name: str) -> str:
    if not path.startswith("b/"):
        raise PatchError(f"llama.cpp patch {name}: {path!r} is not a b/ path of an existing file")
    return path[2:]


def _parse_hunk(lines: list[str], i: int, name: str, path: str) -> tuple[Hunk, int]:
    match = _HUNK.match(lines[i])
    if match is None:
        raise PatchError(f"llama.cpp patch {name}: {path}: bad hunk header {lines[i]!r}")
    start, n_old = int(match[1]), int(match[2] or 1)
    n_new = int(match[4] or 1)
    old: list[str] = []
    new: list[str] = []
    i += 1
    while len(old) < n_old or len(new) < n_new:
        if i >= len(lines) or lines[i][:1] not in (" ", "-", "+"):
            raise PatchError(f"llama.cpp patch {name}: {path}: the hunk at line {start} ends early")
        kind, line = lines[i][0], lines[i][1:]
        if kind != "+":
            old.append(line)
        if kind != "-":
            new.append(line)
        i += 1
    if i < len(lines) and lines[i].startswith("\\"):
        raise PatchError(f"llama.cpp patch {name}: {path}: a file without a final newline is not supported")
    return Hunk(start, tuple(old), tuple(new)), i


def patch_text(text: str, patch: FilePatch, name: str) -> str:
    """``text`` with every hunk of ``patch`` applied; PatchError where a hunk's lines are not where it says."""
    lines = _LINE.findall(text)
    shift = 0  # lines that earlier hunks added, less those they removed
    for number, hunk in enumerate(patch.hunks, 1):
        at = hunk.start - 1 + shift if hunk.old else hunk.start + shift
        if tuple(lines[at:at + len(hunk.old)]) != hunk.old:
            raise PatchError(f"llama.cpp patch {name}: {patch.path} does not hold hunk {number}'s lines at line "
                             f"{at + 1} (a llama.cpp this patch was not written for); see native/llama/patches/")
        lines[at:at + len(hunk.old)] = hunk.new
        shift += len(hunk.new) - len(hunk.old)
    return "".join(lines)


def apply(tree: Path, folder: Path = PATCHES) -> None:
    """Apply every patch in ``folder`` to the llama.cpp tree at ``tree``, in order; PatchError where one does not."""
    for patch_path in patch_files(folder):
        for patch in parse(patch_path.read_bytes().decode(), patch_path.name):
            target = tree / patch.path
            if not target.is_file():
                raise PatchError(f"llama.cpp patch {patch_path.name}: the tree has no {patch.path}")
            # bytes in and out: no newline translation, no locale encoding
            target.write_bytes(patch_text(target.read_bytes().decode(), patch, patch_path.name).encode())
