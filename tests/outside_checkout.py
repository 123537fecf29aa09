"""Run the checkout's scripts the way a user does after the README's install: from elsewhere, on the installed package.

:func:`copy_scripts` copies ``bench/`` or ``examples/`` into a folder that
also holds a decoy ``spec_actor`` package which fails on import, and
:func:`run_script` runs a script there and says so on stderr when the
script put that folder on ``sys.path``. Either way, a script that puts its
checkout ahead of the installed package (the fault of issue 9 item 7)
shows: with a real install the decoy is imported; with an editable install,
whose import hook finds the package before ``sys.path`` is searched, the
path check still sees it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DECOY = "the checkout's spec_actor was imported instead of the installed one"
ON_PATH = "the script put its checkout folder on sys.path"
TIMEOUT = 300
# Runs SCRIPT as `python SCRIPT ARGS` would (its folder first on sys.path, run as __main__), and at exit
# reports whether the checkout folder (the decoy's parent) is on sys.path.
_RUNNER = """
import atexit, os, runpy, sys
script, root = sys.argv[1], sys.argv[2]
def check():
    if any(os.path.realpath(p or os.curdir) == root for p in sys.path):
        print(%r, file=sys.stderr, flush=True)
atexit.register(check)
sys.argv = [script, *sys.argv[3:]]
sys.path[0] = os.path.dirname(script)
runpy.run_path(script, run_name="__main__")
""" % ON_PATH


def copy_scripts(root: Path, folder: str) -> Path:
    """Copy ``REPO/folder`` to ``root/folder`` beside a decoy spec_actor; return the copy."""
    decoy = root / "spec_actor"
    if not decoy.exists():
        decoy.mkdir(parents=True)
        (decoy / "__init__.py").write_text(f"raise ImportError({DECOY!r})\n")
        (root / "native").symlink_to(REPO / "native")  # bench/llama_tools.py builds from the checkout's recipe
    return Path(shutil.copytree(REPO / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__")))


def run_script(script: Path, *args: str, cwd: Path, env: dict[str, str] | None = None,
               timeout: float = TIMEOUT) -> subprocess.CompletedProcess[str]:
    """Run ``python SCRIPT ARGS`` with this interpreter from ``cwd``, capturing text output.

    Its stderr contains ``DECOY`` or ``ON_PATH`` when the script reached for
    the checkout that holds it.
    """
    root = os.path.realpath(Path(script).parent.parent)
    return subprocess.run([sys.executable, "-c", _RUNNER, str(script), root, *args], cwd=cwd,
                          env=env or dict(os.environ), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=timeout)


def assert_installed_package_used(done: subprocess.CompletedProcess[str], script: str) -> None:
    """Fail when the run imported or path-inserted the checkout's spec_actor."""
    assert DECOY not in done.stderr and ON_PATH not in done.stderr, (
        f"{script} put its checkout ahead of the installed spec_actor on sys.path:\n{done.stderr[-2000:]}")
