"""Run Python code in a child process, so a crash or a hang fails one test, not the run.

The hardening and fuzz tests reproduce bugs that killed the interpreter
(SIGSEGV, SIGABRT) or hung it; in the test process those would take the
whole run down with them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parent


@dataclass(frozen=True)
class ChildResult:
    """How a child process ended."""

    returncode: int
    """Exit status; negative: killed by that signal."""
    stdout: str
    stderr: str

    def describe(self) -> str:
        """A message for a failed assertion: the status and the child's output."""
        return f"exit status {self.returncode}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr[-4000:]}"


def run_child(code: str, *args: str, timeout: float = 120.0) -> ChildResult:
    """Run ``code`` (dedented) with this interpreter and the tests folder on sys.path.

    Raises subprocess.TimeoutExpired (after killing the child) when it runs
    longer than ``timeout`` seconds: a hang is a failure, never a wait.
    """
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]))
    # cwd: `python -c` puts the working directory first on sys.path, and from
    # the checkout's root that would shadow the installed package
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                          timeout=timeout, env=env, check=False, cwd=TESTS_DIR)
    return ChildResult(proc.returncode, proc.stdout, proc.stderr)
