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


def run_example(examples, name: str, max_tokens: int = 8, *args: str) -> str:
    folder, cwd = examples
    env = dict(os.environ, SPEC_ACTOR_MAX_TOKENS=str(max_tokens))
    # the timeout is a hang bound, generous for a loaded machine
    done = run_script(folder / name, *args, cwd=cwd, env=env, timeout=600)
    assert_installed_package_used(done, name)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_stream_stdout(examples):
    out = run_example(examples, "stream_stdout.py")
    assert out.startswith("Once upon a time") and "8 tokens at" in out


# The example's per-request timeout (0.1 ms) is shorter than any first token: it always fires.
TIMED_OUT = r"^generate timed out after \d+\.\d+ s: generation timed out: no event for 0\.0001 s"


@pytest.mark.parametrize(("deadline", "outcome"), [
    ("0", r"cancelled at the deadline after 0 pieces"),  # the deadline has passed at the stream's first await
    ("600", r"finished before the deadline after [1-8] pieces"),  # 8 tokens take far less than 10 minutes
])
def test_cancel_on_timeout(examples, deadline, outcome):
    out = run_example(examples, "cancel_on_timeout.py", 8, "8", deadline)
    assert re.search(rf"^{outcome}; actor idle: True$", out, re.M), out
    assert re.search(TIMED_OUT, out, re.M), out
    assert re.search(r"^next: (['\"]).+\1$", out, re.M), out  # the repr of a non-empty text


def test_live_stats(examples):
    out = run_example(examples, "live_stats.py", 16)
    last = out.split("\r")[-1]
    assert "  16 tokens" in last and "tok/s" in last and "Release notes, version 2.1:" in last


def test_pool_fanout(examples):
    out = run_example(examples, "pool_fanout.py")
    assert out.count("\n[") + out.startswith("[") == 4
    assert "actor 0: 2 requests" in out and "actor 1: 2 requests" in out

