"""Each example runs as a script, on a small token budget, and prints what it should."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import spec_actor

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
# The examples import the same spec_actor as the tests (installed or in-tree).
PACKAGE_ROOT = Path(spec_actor.__file__).resolve().parent.parent


def run_example(name: str, max_tokens: int = 8) -> str:
    env = dict(os.environ, SPEC_ACTOR_MAX_TOKENS=str(max_tokens))
    env["PYTHONPATH"] = os.pathsep.join([str(PACKAGE_ROOT), *filter(None, [env.get("PYTHONPATH")])])
    done = subprocess.run([sys.executable, str(EXAMPLES / name)], env=env, capture_output=True,
                          text=True, timeout=600)  # a hang bound, generous for a loaded machine
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_stream_stdout():
    out = run_example("stream_stdout.py")
    assert out.startswith("Once upon a time") and "8 tokens at" in out


def test_cancel_on_timeout():
    # whether 400 tokens outlast the example's 1 s deadline (and its 1 ms
    # timeout fires) depends on the machine: either outcome, reported right
    out = run_example("cancel_on_timeout.py", 400)
    assert re.search(r"^(cancelled at the deadline|finished before the deadline) after \d+ pieces; "
                     r"actor idle: True$", out, re.M), out
    assert re.search(r"^generate (timed out after|finished within its timeout)", out, re.M), out
    assert "next: '" in out


def test_live_stats():
    out = run_example("live_stats.py", 16)
    last = out.split("\r")[-1]
    assert "  16 tokens" in last and "tok/s" in last and "Release notes, version 2.1:" in last


def test_pool_fanout():
    out = run_example("pool_fanout.py")
    assert out.count("\n[") + out.startswith("[") == 4
    assert "actor 0: 2 requests" in out and "actor 1: 2 requests" in out
