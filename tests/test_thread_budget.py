"""Concurrent sessions share the CPUs instead of oversubscribing them (issue 11).

Sessions with default thread counts split the process's CPUs while they
generate together (docs/decisions/0027). The tests observe the thread counts
a run actually uses (`spec_actor.nif.testing.threads_in_use`, read inside the run's own
event sink) with the two runs held in step by events, so no timing matters.
"""

from __future__ import annotations

import os
import threading

import pytest

import spec_actor
from spec_actor import Session
from spec_actor.nif import testing as nt
from tiny_model_fixtures import tiny_paths, tiny_target  # noqa: F401 - fixtures

PROMPT, MAX_TOKENS = "the quick brown fox", 24
WAIT_S = 120  # generous bound for a blocked handshake on a loaded machine


def _cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _wait(event: threading.Event) -> None:
    assert event.wait(WAIT_S), "the other run never reached its step"


def _concurrent(first: Session, second: Session) -> tuple[tuple[int, int], tuple[int, int], list[str]]:
    """Run both sessions in threads, in lock-step: returns the threads each used while both ran.

    The first run waits in its first step until the second has started and
    read its own share; then the first reads its share at its next step
    (the budget is re-read before every decode).
    """
    first_started, second_seen, first_seen = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, tuple[int, int]] = {}
    texts: dict[str, str] = {}

    def first_sink(_events: list) -> bool:
        if not first_started.is_set():
            first_started.set()
            _wait(second_seen)
        elif "first" not in seen:
            seen["first"] = nt.threads_in_use(first._handle)
            first_seen.set()
        return True

    def second_sink(_events: list) -> bool:
        if "second" not in seen:
            seen["second"] = nt.threads_in_use(second._handle)
            second_seen.set()
            _wait(first_seen)
        return True

    def run_first() -> None:
        texts["first"] = first.run(PROMPT, max_tokens=MAX_TOKENS, on_events=first_sink).text

    def run_second() -> None:
        _wait(first_started)
        texts["second"] = second.run(PROMPT, max_tokens=MAX_TOKENS, on_events=second_sink).text

    workers = [threading.Thread(target=run_first), threading.Thread(target=run_second)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(WAIT_S * 3)
    assert not any(w.is_alive() for w in workers), "a run hung"
    return seen["first"], seen["second"], [texts["first"], texts["second"]]


def test_two_default_sessions_split_the_cpus_and_keep_their_output(tiny_target: spec_actor.Model) -> None:
    cpus = _cpus()
    with Session(tiny_target, n_ctx=256) as alone:
        want = alone.run(PROMPT, max_tokens=MAX_TOKENS).text
        assert nt.threads_in_use(alone._handle) == (cpus, cpus)  # alone: every CPU
    with Session(tiny_target, n_ctx=256) as a, Session(tiny_target, n_ctx=256) as b:
        first, second, texts = _concurrent(a, b)
        share = max(1, cpus // 2)
        assert first == (share, share) and second == (share, share)
        assert texts == [want, want]
        # alone again: the whole budget comes back
        a.run(PROMPT, max_tokens=2)
        assert nt.threads_in_use(a._handle) == (cpus, cpus)


def test_explicit_threads_are_kept_and_count_against_the_budget(tiny_target: spec_actor.Model) -> None:
    cpus = _cpus()
    with Session(tiny_target, n_ctx=256, n_threads=1) as explicit, Session(tiny_target, n_ctx=256) as budgeted:
        first, second, _ = _concurrent(explicit, budgeted)
        assert first == (1, 1)
        assert second == (max(1, cpus - 1), max(1, cpus - 1))


@pytest.mark.parametrize("n_threads", [1, 2])
def test_explicit_thread_counts_are_used_as_given(tiny_target: spec_actor.Model, n_threads: int) -> None:
    with Session(tiny_target, n_ctx=256, n_threads=n_threads) as session:
        session.run(PROMPT, max_tokens=2)
        assert nt.threads_in_use(session._handle) == (n_threads, n_threads)
