"""Each example runs as a script from outside the checkout, on a small token budget, and prints what it should."""

from __future__ import annotations

import os
import re

import pytest
from outside_checkout import assert_installed_package_used, copy_scripts, run_script


@pytest.fixture(scope="module")
def examples(tmp_path_factory: pytest.TempPathFactory):
    """(copied examples folder, a working directory outside any checkout)."""
    root = tmp_path_factory.mktemp("checkout")
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    return copy_scripts(root, "examples"), elsewhere


def run_example(examples, name: str, max_tokens: int = 8) -> str:
    folder, cwd = examples
    env = dict(os.environ, SPEC_ACTOR_MAX_TOKENS=str(max_tokens))
    done = run_script(folder / name, cwd=cwd, env=env, timeout=600)  # a hang bound, generous for a loaded machine
    assert_installed_package_used(done, name)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_stream_stdout(examples):
    out = run_example(examples, "stream_stdout.py")
    assert out.startswith("Once upon a time") and "8 tokens at" in out


def test_cancel_on_timeout(examples):
    # whether 400 tokens outlast the example's 1 s deadline (and its 1 ms
    # timeout fires) depends on the machine: either outcome, reported right
    out = run_example(examples, "cancel_on_timeout.py", 400)
    assert re.search(r"^(cancelled at the deadline|finished before the deadline) after \d+ pieces; "
                     r"actor idle: True$", out, re.M), out
    assert re.search(r"^generate (timed out after|finished within its timeout)", out, re.M), out
    assert "next: '" in out


def test_live_stats(examples):
    out = run_example(examples, "live_stats.py", 16)
    last = out.split("\r")[-1]
    assert "  16 tokens" in last and "tok/s" in last and "Release notes, version 2.1:" in last


def test_pool_fanout(examples):
    out = run_example(examples, "pool_fanout.py")
    assert out.count("\n[") + out.startswith("[") == 4
    assert "actor 0: 2 requests" in out and "actor 1: 2 requests" in out

