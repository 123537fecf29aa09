"""Damaged GGUF files give ModelLoadError or a healthy model, never a signal or a hang (issue 11, item 2).

The tiny generated models (a llama and a glm4moe MoE with MTP layers) are
truncated, have header counts and every numeric metadata value patched, and
get random byte flips. Each case runs in a child worker process, one case at
a time: a worker killed by a signal is recorded with the case and replaced,
and a case that does not answer within `HANG_S` is a hang. The counts
(cases, errors, healthy) are printed for the record (run with ``-s``).
"""

from __future__ import annotations

import json
import selectors
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import gguf_mutations as gm
from spec_actor.testing import tiny_models

WORKER = """
import json, sys
import spec_actor
print("ready", flush=True)
for line in sys.stdin:
    path, load_mtp = json.loads(line)
    try:
        model = spec_actor.load_model(path, load_mtp=load_mtp)
        with spec_actor.Session(model, n_ctx=64, n_threads=1) as session:
            result = session.run("hello world", max_tokens=4)
        outcome = ["healthy", result.status]
    except spec_actor.SpecActorError as exc:
        outcome = [type(exc).__name__, str(exc)[:300]]
    print(json.dumps(outcome), flush=True)
"""

HANG_S = 60.0
"""Wall-clock seconds after which a case counts as hung."""


class Worker:
    """A child that loads and runs one damaged file at a time."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", WORKER], cwd=Path(__file__).parent, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.proc.stdout, selectors.EVENT_READ)
        assert self._answer() == "ready"

    def _answer(self) -> str | None:
        if not self.sel.select(HANG_S):
            self.proc.kill()
            self.proc.wait()
            return None
        return self.proc.stdout.readline().strip() or None

    def run(self, path: Path, load_mtp: bool) -> list[str]:
        """["healthy", status], [error class, message], ["signal N"/"exit N"] or ["hang"]."""
        self.proc.stdin.write(json.dumps([str(path), load_mtp]) + "\n")
        self.proc.stdin.flush()
        line = self._answer()
        if line is not None:
            return json.loads(line)
        code = self.proc.wait()
        return ["hang"] if code == -9 else [f"signal {-code}" if code < 0 else f"exit {code}"]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def _cases(original: bytes, seed: int):
    lay = gm.layout(original)
    yield from gm.truncation_cases(lay, len(original))
    yield from gm.header_cases(lay)
    yield from gm.metadata_cases(lay)
    yield from gm.byte_flip_cases(lay, len(original), 30, seed)


def fuzz(files: list[tuple[Path, bool]], workdir: Path) -> tuple[Counter[str], list[tuple[str, list[str]]]]:
    """Run every case of every file; return the outcome counts and the failures (signals, hangs, wrong errors)."""
    counts: Counter[str] = Counter()
    failures: list[tuple[str, list[str]]] = []
    worker = Worker()
    try:
        for seed, (path, load_mtp) in enumerate(files):
            original = path.read_bytes()
            for name, mutate in _cases(original, seed):
                case = workdir / "case.gguf"
                case.write_bytes(mutate(original))
                outcome = worker.run(case, load_mtp)
                counts["cases"] += 1
                if outcome[0] == "healthy":
                    counts["healthy"] += 1
                elif outcome[0] in ("ModelLoadError", "ConfigError", "ContextError"):
                    # ConfigError / ContextError: the file loads but says it
                    # holds fewer tokens than the worker's context (a clear error too).
                    counts["errors"] += 1
                else:
                    failures.append((f"{path.name}: {name}", outcome))
                    if outcome[0].startswith(("signal", "exit", "hang")):
                        worker = Worker()
    finally:
        worker.close()
    return counts, failures


def test_damaged_tiny_models_end_in_an_error_or_a_healthy_generation(tmp_path: Path) -> None:
    target, _ = tiny_models.write_draft_pair(tmp_path)
    mtp = tiny_models.write_mtp_model(tmp_path / "tiny-mtp.gguf")
    counts, failures = fuzz([(target, False), (mtp, True)], tmp_path)
    print(f"\nGGUF fuzz: {counts['cases']} cases, {counts['errors']} errors, {counts['healthy']} healthy, "
          f"{len(failures)} failures")
    assert not failures, "\n".join(f"{case}: {outcome}" for case, outcome in failures)
    assert counts["errors"] > 0 and counts["healthy"] > 0


@pytest.mark.parametrize("value", [0, 100000, 2**31 - 1])
def test_embedded_gemma_with_a_bad_block_count_is_a_model_load_error(tmp_path: Path, value: int) -> None:
    # The reproduction: this aborted the interpreter (SIGABRT).
    from spec_actor._model import default_model_path

    path = tmp_path / "gemma.gguf"
    shutil.copyfile(default_model_path(), path)
    with open(path, "rb") as fh:
        head = fh.read(1 << 20)  # the metadata comes before the tokenizer's long arrays
    offset = _scalar_offset(head, "gemma3.block_count")
    with open(path, "r+b") as fh:
        fh.seek(offset)
        fh.write(value.to_bytes(4, "little"))
    worker = Worker()
    try:
        outcome = worker.run(path, False)
    finally:
        worker.close()
    assert outcome[0] == "ModelLoadError", outcome
    assert f"gemma3.block_count is {value}; a model has 1 to 512 blocks" in outcome[1]


def _scalar_offset(head: bytes, key: str) -> int:
    needle = len(key).to_bytes(8, "little") + key.encode()
    at = head.index(needle) + len(needle)
    assert int.from_bytes(head[at:at + 4], "little") == 4  # a u32 value
    return at + 4
