"""native/'s layout holds: the C ABI in abi/ alone, the testing ABI in its own header, every source built.

Read from the source text, as tests/test_imports.py reads the package's.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NATIVE = REPO / "native"
SOURCES = sorted(p for p in NATIVE.rglob("*") if p.suffix in (".cpp", ".h"))
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def _code(path: Path) -> str:
    """The file's text without its comments."""
    return _COMMENT.sub("", path.read_text(encoding="utf-8"))


def _defined_abi_functions(path: Path) -> set[str]:
    """The sa_* functions that a source file defines (a body follows the parameter list)."""
    return set(re.findall(r"\b(sa_\w+)\s*\([^;{)]*(?:\([^)]*\)[^;{)]*)*\)\s*\{", _code(path)))


def _declared_functions(header: Path) -> set[str]:
    """The functions declared between a header's CDEF markers."""
    text = header.read_text(encoding="utf-8")
    cdef = text.split("/* CDEF-BEGIN */")[1].split("/* CDEF-END */")[0]
    return set(re.findall(r"\b(sa_\w+)\s*\(", _COMMENT.sub("", cdef)))


def test_every_extern_c_function_is_under_abi():
    assert len(SOURCES) > 50  # it read the tree
    outside = [str(p.relative_to(NATIVE)) for p in SOURCES
               if 'extern "C"' in _code(p) and p.parent.name != "abi"]
    assert outside == []
    defined = {name for p in SOURCES if p.suffix == ".cpp" for name in _defined_abi_functions(p)}
    in_abi = {name for p in (NATIVE / "abi").glob("*.cpp") for name in _defined_abi_functions(p)}
    public = _declared_functions(NATIVE / "abi" / "spec_actor.h")
    testing = _declared_functions(NATIVE / "abi" / "spec_actor_testing.h")
    assert len(public) >= 40 and len(testing) >= 20
    # every declared function is defined in abi/, and nothing else defines one
    assert public | testing <= in_abi and defined & (public | testing) <= in_abi


def test_the_testing_abi_has_its_own_header_and_one_caller():
    public = _declared_functions(NATIVE / "abi" / "spec_actor.h")
    testing = _declared_functions(NATIVE / "abi" / "spec_actor_testing.h")
    assert [name for name in public if name.startswith("sa_testing_")] == []
    assert all(name.startswith("sa_testing_") for name in testing)
    callers = sorted(str(p.relative_to(REPO)) for p in (REPO / "spec_actor").rglob("*.py")
                     if "sa_testing_" in p.read_text(encoding="utf-8") and p.name != "_build.py")
    assert callers == ["spec_actor/nif/testing.py"]


def test_cmake_builds_every_source_file_of_native():
    listed = set(re.findall(r"^\s+(native/\S+\.cpp)\)?$", (REPO / "CMakeLists.txt").read_text(), re.M))
    on_disk = {str(p.relative_to(REPO)) for p in SOURCES if p.suffix == ".cpp"}
    assert len(on_disk) > 25 and listed == on_disk


def test_includes_name_their_folder():
    headers = {str(p.relative_to(NATIVE)) for p in SOURCES if p.suffix == ".h"}
    names = {Path(h).name for h in headers}
    for path in SOURCES:
        for included in re.findall(r'^#include "([^"]+)"', path.read_text(encoding="utf-8"), re.M):
            # ours by folder from native/; llama.cpp's by name, never one of ours
            assert included in headers or Path(included).name not in names, (path.name, included)
