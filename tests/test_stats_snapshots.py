"""Live statistics read from another thread are consistent snapshots.

The native loop updates many counters per step; a reader polling as fast as
it can must never see a half-applied step (see native/report/stats.h).
"""

from __future__ import annotations

import threading
import time

from spec_actor import Session, Spec, StatsSnapshot
from spec_actor.nif import testing as nt

# Code repeated verbatim: ngram-mod drafts long runs here and most are accepted,
# so every step changes the drafted, accepted and per-position counters together.
_BLOCK = "".join(f"def f{i}(x):\n    return x * {i} + {i * 7}\n\n" for i in range(12))
COPY_PROMPT = _BLOCK + "The same code, copied exactly:\n\n" + _BLOCK[:40]


def invariant_violations(s: StatsSnapshot) -> list[str]:
    """What is wrong with one snapshot; empty when it is self-consistent."""
    bad = []
    if s.drafts_accepted > s.drafts_generated:
        bad.append(f"accepted {s.drafts_accepted} > drafted {s.drafts_generated}")
    if sum(s.accepted_per_pos) != s.drafts_accepted:
        bad.append(f"sum(accepted_per_pos) {sum(s.accepted_per_pos)} != drafts_accepted {s.drafts_accepted}")
    if sum(s.drafted_per_pos) != s.drafts_generated:
        bad.append(f"sum(drafted_per_pos) {sum(s.drafted_per_pos)} != drafts_generated {s.drafts_generated}")
    pairs = list(zip(s.accepted_per_pos, s.drafted_per_pos))
    if any(a > d for a, d in pairs):
        bad.append(f"a position accepted more than it drafted: {pairs}")
    for name, values in (("accepted_per_pos", s.accepted_per_pos), ("drafted_per_pos", s.drafted_per_pos)):
        if any(later > earlier for earlier, later in zip(values, values[1:])):
            bad.append(f"{name} grows with the position: {values}")
    # every step emits its accepted drafts plus at most one token of its own
    if s.tokens_emitted > s.iters + s.drafts_accepted:
        bad.append(f"tokens_emitted {s.tokens_emitted} > iters {s.iters} + accepted {s.drafts_accepted}")
    expected_rate = s.drafts_accepted / s.drafts_generated if s.drafts_generated else 0.0
    if abs(s.acceptance_rate - expected_rate) > 1e-12:
        bad.append(f"acceptance_rate {s.acceptance_rate} != {expected_rate}")
    return bad


def test_snapshots_polled_natively_during_speculative_generation_are_consistent(gemma):
    """Native readers copy snapshots in a tight loop on two threads (cumulative
    and last run) while two requests run back to back, so reads overlap the
    loop's updates, a run's reset of its counters included; every distinct
    snapshot is checked here. A third thread polls the public ``stats()`` and
    ``last_stats()`` as fast as Python can."""
    spec = Spec("ngram-mod", n_draft=16, ngram_mod_n_match=8)
    n_runs = 2
    # one compute thread: the pollers keep cores busy beside the loop
    with Session(gemma, spec=spec, n_ctx=2048, n_threads=1) as session:
        seen: dict[int, tuple[list[dict], int]] = {}

        def poll(which: int) -> None:
            seen[which] = nt.poll_stats(session._handle, which, until_requests=n_runs, max_polls=10**9)

        public_violations: list[str] = []
        public_running = 0

        def poll_public() -> None:
            nonlocal public_running
            while any(p.is_alive() for p in pollers):
                for snap in (session.stats(), session.last_stats()):
                    public_running += snap.running
                    public_violations.extend(f"stats(): {v}" for v in invariant_violations(snap))
                time.sleep(0)  # let the loop's event callback have the GIL

        pollers = [threading.Thread(target=poll, args=(which,)) for which in (0, 1)]
        for p in pollers:
            p.start()
        python_poller = threading.Thread(target=poll_public)
        python_poller.start()
        results = [session.run(COPY_PROMPT, max_tokens=96) for _ in range(n_runs)]
        for p in [*pollers, python_poller]:
            p.join()

    assert [r.status for r in results] == ["done"] * n_runs
    assert all(r.stats.drafts_generated > 0 and r.stats.drafts_accepted > 0 for r in results), \
        "the prompt must make ngram-mod draft and accept"
    violations = []
    for which, (snaps, polls) in seen.items():
        name = ("cumulative", "last run")[which]
        # a read per loop step at least, or the pollers did not overlap the run
        assert polls > 10 * sum(r.stats.iters for r in results), (name, polls)
        assert len(snaps) > sum(r.stats.iters for r in results) // 2, (name, len(snaps))
        previous = None
        for values in snaps:
            snap = StatsSnapshot.from_fields(**values)
            violations += [f"{name}: {v}" for v in invariant_violations(snap)]
            if which == 0 and previous is not None:  # cumulative counters never go back
                for field in ("iters", "drafts_generated", "drafts_accepted", "tokens_emitted", "requests"):
                    if getattr(snap, field) < getattr(previous, field):
                        violations.append(f"cumulative {field} went back")
            previous = snap
    assert public_running > 10, "the public poller must overlap the runs"
    assert (violations + public_violations)[:20] == []
    final = StatsSnapshot.from_fields(**seen[0][0][-1])
    assert final.requests == n_runs and not final.running
    assert final.drafts_generated == sum(r.stats.drafts_generated for r in results)
