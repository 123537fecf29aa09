"""Grammars can neither crash nor hang the process (issue 11, item 3).

Random and mutated GBNF goes through request validation (`Sampling`) and,
when accepted, through a real generation on a tiny model, in a child worker
process: a signal kills only the worker (the test names the grammar), and a
call that does not answer within a generous wall-clock bound is a hang. Each
call's CPU time must stay under a second (CPU, not wall time: the machine
may be busy).
"""

from __future__ import annotations

import json
import selectors
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import spec_actor
from subprocess_helpers import run_child

def worker_code(option: str) -> str:
    """A child that runs each JSON line it reads as the run option ``option`` and answers [outcome, CPU s]."""
    return f"""
import json, sys, tempfile, time
import spec_actor
from spec_actor.testing import tiny_models
target, _ = tiny_models.write_draft_pair(tempfile.mkdtemp())
session = spec_actor.Session(spec_actor.load_model(target), n_ctx=64, n_threads=1)
print("ready", flush=True)
for line in sys.stdin:
    value = json.loads(line)
    t0 = time.process_time()
    try:
        session.run("hello", max_tokens=3, {option}=value)
        outcome = "ok"
    except spec_actor.SpecActorError as exc:
        outcome = type(exc).__name__
    print(json.dumps([outcome, time.process_time() - t0]), flush=True)
"""


WORKER = worker_code("grammar")

HANG_S = 60.0
"""Wall-clock seconds after which a call counts as hung (CPU time is bounded at 1 s)."""


class Worker:
    """The child that validates and runs grammars; restarted after it dies."""

    def __init__(self, code: str = WORKER) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", code], cwd=Path(__file__).parent, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        assert self._read() == "ready"
        self.outcomes: dict[str, int] = {}

    def _read(self) -> str:
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        if not sel.select(HANG_S):
            self.proc.kill()
            raise AssertionError(f"no answer within {HANG_S} s: a hang")
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"the worker died with exit status {self.proc.wait()}")
        return line.strip()

    def check(self, grammar: str) -> tuple[str, float]:
        self.proc.stdin.write(json.dumps(grammar) + "\n")
        self.proc.stdin.flush()
        outcome, cpu_s = json.loads(self._read())
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
        return outcome, cpu_s

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def worker() -> Iterator[Worker]:
    w = Worker()
    yield w
    print(f"\ngrammar fuzz outcomes: {w.outcomes}")
    w.close()


def _literal(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


COUNT = st.one_of(st.integers(0, 4), st.integers(0, 4), st.sampled_from([0, 1, 2, 3, 5, 100, 1999, 2000, 2001, 100000]))
SUFFIX = st.one_of(
    st.sampled_from(["", "", "", "", "*", "+", "?"]),
    COUNT.map(lambda m: f"{{{m}}}"),
    COUNT.map(lambda m: f"{{{m},}}"),
    # Mostly in order: one {m,n} with m > n fails the whole grammar early.
    st.tuples(COUNT, COUNT, st.integers(0, 4)).map(
        lambda mnk: "{%d,%d}" % ((mnk[0], mnk[1]) if mnk[2] == 0 else tuple(sorted(mnk[:2])))),
)
ATOM = st.one_of(
    st.text("ab{}[]\"\\,0123456789 é", min_size=1, max_size=4).map(_literal),
    st.sampled_from(["[a-z]", "[^a]", "[0-9]+", ".", "x", "y", "x", "y", "root", "[\\x00-\\x7f]",
                     "[^\\x00-\\U0010FFFF]"]),
)


def _grammars() -> st.SearchStrategy[str]:
    element = st.recursive(
        st.tuples(ATOM, SUFFIX).map("".join),
        lambda inner: st.tuples(st.lists(st.lists(inner, min_size=1, max_size=3).map(" ".join),
                                         min_size=1, max_size=3).map(" | ".join), SUFFIX)
        .map(lambda alt_suffix: f"({alt_suffix[0]}){alt_suffix[1]}"),
        max_leaves=6)
    body = st.lists(st.lists(element, min_size=1, max_size=3).map(" ".join), min_size=1, max_size=3).map(" | ".join)
    return st.tuples(body, body, body).map(lambda b: f"root ::= {b[0]}\nx ::= {b[1]}\ny ::= {b[2]}\n")


MUTATION_ALPHABET = '"[]{}()|*+?.#\\\n-^<>!0123456789,: =aé'


@st.composite
def _mutated(draw: st.DrawFn) -> str:
    text = draw(_grammars())
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(text)))
        op = draw(st.sampled_from(["insert", "delete", "duplicate"]))
        if op == "insert":
            text = text[:i] + draw(st.sampled_from(list(MUTATION_ALPHABET))) + text[i:]
        elif op == "delete":
            text = text[:i] + text[i + 1:]
        else:
            j = draw(st.integers(i, min(len(text), i + 8)))
            text = text[:j] + text[i:j] + text[j:]
    return text


FUZZ = settings(max_examples=75, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def assert_survives(worker: Worker, value: object) -> None:
    """The child ran ``value`` to an answer or a clear error, in under a second of CPU."""
    outcome, cpu_s = worker.check(value)
    assert outcome in ("ok", "GrammarError", "ConfigError"), (outcome, value)
    assert cpu_s < 1.0, f"{cpu_s:.2f} s of CPU for {value!r}"


@FUZZ
@given(grammar=_grammars())
def test_random_grammars_neither_crash_nor_hang(worker: Worker, grammar: str) -> None:
    assert_survives(worker, grammar)


@FUZZ
@given(grammar=_mutated())
def test_mutated_grammars_neither_crash_nor_hang(worker: Worker, grammar: str) -> None:
    assert_survives(worker, grammar)


@pytest.mark.parametrize("grammar", [
    'root ::= "a"{5,2}',
    'root ::= ("ab" | [c-d]){ 10 , 3 }',
    'root ::= x{2,1}\nx ::= "x"',
    'root ::= "a" {1,0}',
])
def test_min_above_max_repetition_is_a_grammar_error_at_once(grammar: str) -> None:
    with pytest.raises(spec_actor.GrammarError, match=r"minimum larger than its maximum; write \{"):
        spec_actor.Sampling(grammar=grammar)


@pytest.mark.parametrize("grammar", [
    'root ::= "{5,2}"',  # braces inside a literal, a class or a comment are text
    'root ::= [{5,2}]',
    'root ::= "a" # {5,2}\n',
    'root ::= "a"{2,5} "b"{3} "c"{1,}',
])
def test_braces_that_are_not_bad_repetitions_pass_the_check(grammar: str) -> None:
    assert spec_actor.Sampling(grammar=grammar).grammar == grammar


def test_issue_repro_generate_with_min_above_max_raises_grammar_error() -> None:
    # The issue's call hung for over 60 s and ignored cancel scopes; in a
    # child with a deadline, so a regression fails instead of hanging the run.
    result = run_child(textwrap.dedent("""
        import re, trio, spec_actor

        async def main():
            model = spec_actor.load_model()
            async with spec_actor.open_actor(model) as actor:
                try:
                    await actor.generate("Hello world", max_tokens=8, grammar='root ::= "a"{5,2}')
                except spec_actor.GrammarError as exc:
                    print("GrammarError", "{5,2}" in str(exc))
                # The actor is not stuck: the next request runs.
                text = await actor.generate("Hello world", max_tokens=4, grammar='root ::= "a"{2,5}')
                print(re.fullmatch("a{2,5}", text) is not None)

        trio.run(main)
    """), timeout=300)
    assert result.returncode == 0, result.describe()
    assert result.stdout.splitlines() == ["GrammarError True", "True"]
