"""Every script in bench/, scripts/ and examples/ answers --help with its usage, at once, and does nothing else.

Each runs as a user would after the README's install, from a copy of the
checkout (beside a decoy spec_actor, `outside_checkout`), in an empty
working directory, with an empty home and cache. A script that built,
loaded a model or wrote a file would leave something in one of them, or
run past the time limit (a llama.cpp build takes minutes).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from outside_checkout import REPO, assert_installed_package_used, copy_scripts, run_script

FOLDERS = ("bench", "scripts", "examples")
SCRIPTS = sorted(path.relative_to(REPO) for folder in FOLDERS for path in (REPO / folder).iterdir()
                 if path.suffix in (".py", ".sh") and not path.name.startswith("_"))
HELP_SECONDS = 60  # a hang bound: an import and argparse take a second or two


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the script folders and of native/, beside the decoy spec_actor."""
    root = tmp_path_factory.mktemp("checkout")
    for folder in FOLDERS:
        copy_scripts(root, folder)
    (root / "native").unlink()  # a copy, not copy_scripts' link, so that a write there shows
    shutil.copytree(REPO / "native", root / "native", ignore=shutil.ignore_patterns("__pycache__"))
    return root


def tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under root: relative path -> (size, modification time)."""
    found = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            stat = path.lstat()
            found[str(path.relative_to(root))] = (stat.st_size, stat.st_mtime_ns)
    return found


def test_every_script_is_listed():
    names = {path.name for path in SCRIPTS}
    assert {"llama_server_build.py", "render_docs.py", "sanitize.sh", "stream_stdout.py"} <= names
    assert "_common.py" not in names  # a module the scripts import, not a script


@pytest.mark.parametrize("script", SCRIPTS, ids=str)
def test_a_script_answers_help_and_does_nothing_else(checkout: Path, tmp_path: Path, script: Path) -> None:
    cwd, home = tmp_path / "cwd", tmp_path / "home"
    cwd.mkdir()
    home.mkdir()
    env = dict(os.environ, HOME=str(home), XDG_CACHE_HOME=str(home / "cache"),
               SPEC_ACTOR_CACHE_DIR=str(home / "spec_actor"), PYTHONDONTWRITEBYTECODE="1")
    before = tree(checkout)
    if script.suffix == ".sh":
        done = subprocess.run(["bash", str(checkout / script), "--help"], cwd=cwd, env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=HELP_SECONDS)
    else:
        done = run_script(checkout / script, "--help", cwd=cwd, env=env, timeout=HELP_SECONDS)
        assert_installed_package_used(done, script.name)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith(f"usage: {script.name}"), done.stdout[:1000]
    assert [tree(checkout), tree(cwd), tree(home)] == [before, {}, {}]
