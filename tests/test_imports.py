"""The package's internal structure: no import cycles, no reaching into another object's privates.

Both checks read the source with `ast`, so they see every import, including
the ones under ``if TYPE_CHECKING:`` and inside functions: an import that
only a type checker or a late call performs is still a dependency a reader
has to follow, and a cycle through one is a cycle in the design.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

import spec_actor

PACKAGE_DIR = Path(spec_actor.__file__).resolve().parent
PACKAGE = "spec_actor"
ARCHITECTURE = Path(__file__).resolve().parent.parent / "docs" / "architecture.md"

# Accesses that look private but are not, each with the reason.
ALLOWED_ACCESSES = {
    "lib._sa_on_events": "a C symbol of the cffi library: the extern \"Python\" callback that the "
                         "cdef in nif/_build.py declares, not a Python private",
}

# Attribute names that look private but are Python's or a library's public API.
ALLOWED_ATTRIBUTES = frozenset({
    "_exit",  # os._exit: the documented way to end a process at once (the CLI's second Ctrl-C)
})


@dataclass(frozen=True)
class SourceModule:
    """One module of the package: its dotted name, path and syntax tree."""

    name: str
    path: Path
    tree: ast.Module

    @property
    def is_package(self) -> bool:
        return self.path.name == "__init__.py"


def package_modules() -> dict[str, SourceModule]:
    """Every ``.py`` module under the package, by dotted name."""
    modules = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE_DIR).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        name = ".".join([PACKAGE, *parts])
        modules[name] = SourceModule(name, path, ast.parse(path.read_text(encoding="utf-8"), str(path)))
    return modules


def _resolve(module: SourceModule, node: ast.ImportFrom) -> str:
    """The absolute name of what ``from X import ...`` imports from."""
    if node.level == 0:
        return node.module or ""
    base = module.name.split(".")
    if not module.is_package:
        base.pop()
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imported_modules(module: SourceModule, known: set[str]) -> set[str]:
    """The package modules this module imports (submodules named in ``from X import y`` included)."""
    found: set[str] = set()
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    found.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            source = _resolve(module, node)
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                if sub in known:
                    found.add(sub)
                elif source in known:
                    found.add(source)
    found.discard(module.name)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports."""
    modules = package_modules()
    known = set(modules)
    return {name: imported_modules(mod, known) for name, mod in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def private_accesses(module: SourceModule, known: set[str]) -> list[str]:
    """Where a module reaches another object's or module's underscore names.

    Flags ``x._name`` unless ``x`` is ``self`` or ``cls`` (a class's own
    members) or ``super()``, and ``from m import _name`` unless ``_name`` is
    a module of the package (private modules are how the package is laid
    out; their public names are what others use).
    """
    found = []
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Attribute):
            name = node.attr
            if not _is_private(name) or name in ALLOWED_ATTRIBUTES or ast.unparse(node) in ALLOWED_ACCESSES:
                continue
            base = node.value
            if isinstance(base, ast.Name) and base.id in ("self", "cls"):
                continue
            if isinstance(base, ast.Call) and isinstance(base.func, ast.Name) and base.func.id == "super":
                continue
            found.append(f"{module.path.relative_to(PACKAGE_DIR)}:{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom):
            source = _resolve(module, node)
            for alias in node.names:
                if _is_private(alias.name) and f"{source}.{alias.name}" not in known:
                    found.append(f"{module.path.relative_to(PACKAGE_DIR)}:{node.lineno}: "
                                 f"from {source} import {alias.name}")
    return found


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


@dataclass(frozen=True)
class Layer:
    """One row of docs/architecture.md's layer table: its name and the files its ``files`` column names."""

    name: str
    paths: tuple[str, ...]


def layer_table(markdown: str) -> list[Layer]:
    """The rows of the table under ``| layer | files | owns |``, top row first.

    A file named without a folder (`` `_pool.py` ``) is in the folder of the
    one before it in the same cell, as the table writes them.
    """
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.replace(" ", "").startswith("|layer|files|owns|"))
    layers = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        name, files = (cell.strip() for cell in line.strip("|").split("|")[:2])
        paths, folder = [], ""
        for path in re.findall(r"`([^`]+)`", files):
            path = path if "/" in path else folder + path
            folder = path if path.endswith("/") else path.rpartition("/")[0] + "/"
            paths.append(path)
        layers.append(Layer(name, tuple(paths)))
    return layers


def modules_of(paths: tuple[str, ...], modules: set[str]) -> set[str]:
    """The package modules that files and folders under ``spec_actor/`` name (others are not Python's)."""
    found = set()
    for path in paths:
        if not path.startswith(PACKAGE + "/"):
            continue
        if path.endswith("/"):
            prefix = path.rstrip("/").replace("/", ".")
            found |= {m for m in modules if m == prefix or m.startswith(prefix + ".")}
        else:
            name = path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
            assert name in modules, f"docs/architecture.md names {path}, which is not a module of the package"
            found.add(name)
    return found


def upward_imports(layers: list[Layer], graph: dict[str, set[str]]) -> list[str]:
    """Each import of a module in a row above the importer's, and each module in no row or in two."""
    row: dict[str, int] = {}
    problems = []
    for i, layer in enumerate(layers):
        for module in sorted(modules_of(layer.paths, set(graph))):
            if module in row:
                problems.append(f"{module} is in two rows: {layers[row[module]].name!r} and {layer.name!r}")
            row[module] = i
    problems += [f"{module} is in no row of the table" for module in sorted(set(graph) - set(row))]
    for module, deps in sorted(graph.items()):
        for dep in sorted(deps):
            if module in row and dep in row and row[dep] < row[module]:
                problems.append(f"{module} (row {layers[row[module]].name!r}) imports {dep}, "
                                f"which is in a row above it: {layers[row[dep]].name!r}")
    return problems


# -- the checks -------------------------------------------------------------------------


def test_the_package_has_no_import_cycle():
    graph = import_graph()
    assert "spec_actor._actor" in graph and "spec_actor.streams._event_stream" in graph  # it walked the tree
    assert cycles(graph) == []


def test_no_module_reaches_into_another_objects_private_names():
    modules = package_modules()
    known = set(modules)
    found = [hit for mod in modules.values() for hit in private_accesses(mod, known)]
    assert found == []


def test_the_architecture_tables_rows_import_only_rows_under_them():
    layers = layer_table(ARCHITECTURE.read_text(encoding="utf-8"))
    assert [layer.name for layer in layers][-2:] == ["native", "llama.cpp"]  # it read the whole table
    assert upward_imports(layers, import_graph()) == []


def test_the_command_line_runs_on_the_actor_not_on_a_bare_session():
    graph = import_graph()
    commands = {name: deps for name, deps in graph.items() if name.startswith("spec_actor.cli")}
    assert [name for name, deps in commands.items() if "spec_actor._session" in deps] == []
    assert "spec_actor._actor" in commands["spec_actor.cli._generate"]
    assert "spec_actor._actor" in commands["spec_actor.cli._bench"]


# -- the checks check what they claim ------------------------------------------------------


def _module(name: str, source: str) -> SourceModule:
    path = PACKAGE_DIR / (name.replace(".", "/").removeprefix(PACKAGE + "/") + ".py")
    return SourceModule(name, path, ast.parse(source))


def test_import_graph_sees_relative_type_checking_and_function_imports():
    known = {"spec_actor", "spec_actor._a", "spec_actor._b", "spec_actor._c", "spec_actor.streams",
             "spec_actor.streams._s"}
    mod = _module("spec_actor.streams._s", (
        "from typing import TYPE_CHECKING\n"
        "from .. import _a\n"
        "if TYPE_CHECKING:\n"
        "    from .._b import B\n"
        "def f():\n"
        "    import spec_actor._c\n"
        "    from . import _s\n"
    ))
    assert imported_modules(mod, known) == {"spec_actor._a", "spec_actor._b", "spec_actor._c"}
    package = SourceModule("spec_actor.streams", PACKAGE_DIR / "streams" / "__init__.py",
                           ast.parse("from ._s import S\nfrom .. import x\n"))
    assert imported_modules(package, known) == {"spec_actor.streams._s", "spec_actor"}


@pytest.mark.parametrize(("graph", "expected"), [
    ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
    ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}, "e": {"a", "c"}}, [["a", "b"], ["c", "d"]]),
])
def test_cycles_finds_every_strongly_connected_group(graph, expected):
    assert cycles(graph) == expected


def test_private_accesses_flags_other_objects_and_private_imports():
    known = {"spec_actor", "spec_actor._a", "spec_actor._b"}
    mod = _module("spec_actor._b", (
        "from ._a import _helper, public\n"
        "from . import _a\n"
        "class C:\n"
        "    def f(self, other):\n"
        "        self._x = other._y\n"
        "        super()._z()\n"
        "        return _a._w, cls._v, os._exit\n"
    ))
    hits = [h.split(": ", 1)[1] for h in private_accesses(mod, known)]
    assert hits == ["from spec_actor._a import _helper", "other._y", "_a._w"]


def test_layer_table_reads_folders_short_names_and_flags_upward_imports():
    table = (
        "| layer | files | owns |\n"
        "|---|---|---|\n"
        "| top | `spec_actor/_a.py`, `_b.py` | a and b |\n"
        "| middle | `spec_actor/streams/` | streams |\n"
        "| bottom | `spec_actor/_c.py`; `native/x.py` | c |\n"
        "\n| not | `spec_actor/_d.py` | after the table |\n"
    )
    layers = layer_table("# Title\n\n" + table)
    assert layers == [Layer("top", ("spec_actor/_a.py", "spec_actor/_b.py")),
                      Layer("middle", ("spec_actor/streams/",)),
                      Layer("bottom", ("spec_actor/_c.py", "native/x.py"))]
    graph = {"spec_actor._a": {"spec_actor._b", "spec_actor.streams._s"}, "spec_actor._b": set(),
             "spec_actor.streams": {"spec_actor.streams._s"}, "spec_actor.streams._s": {"spec_actor._c"},
             "spec_actor._c": set()}
    assert upward_imports(layers, graph) == []
    graph["spec_actor._c"] = {"spec_actor.streams"}
    graph["spec_actor._e"] = set()
    assert upward_imports(layers, graph) == [
        "spec_actor._e is in no row of the table",
        "spec_actor._c (row 'bottom') imports spec_actor.streams, which is in a row above it: 'middle'"]
