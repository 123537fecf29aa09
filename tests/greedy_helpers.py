"""Checks shared by the tests that compare speculative output with plain greedy output."""

from __future__ import annotations

from collections.abc import Sequence

import spec_actor
from spec_actor import Session


def greedy(session: Session, prompt: str, n: int = 32, **options) -> spec_actor.RunResult:
    """One greedy run of ``n`` tokens at most."""
    return session.run(prompt, max_tokens=n, temp=0.0, **options)


def assert_consistent(result: spec_actor.RunResult, n_max: int) -> None:
    """The run ended normally and its counters agree with each other and with its tokens."""
    s = result.stats
    assert result.status in ("done", "eog")
    assert s.drafts_accepted <= s.drafts_generated
    assert s.tokens_emitted == len(result.tokens)
    assert 0 < len(result.tokens) <= n_max
    assert sum(s.accepted_per_pos) == s.drafts_accepted
    assert sum(s.drafted_per_pos) == s.drafts_generated
    # every step yields one sampled token plus its accepted drafts (the last
    # step may be cut by max_tokens or end at an end-of-generation token)
    assert s.iters <= s.tokens_emitted + 1
    assert s.tokens_emitted <= s.iters + s.drafts_accepted


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first differing token, or None if the sequences are equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def assert_same_or_near_tie(session: Session, prompt: str, plain_tokens: Sequence[int],
                            spec_tokens: Sequence[int]) -> None:
    """Greedy speculative output must equal plain greedy, except after a near-tie.

    Batched verification and single-token decoding round differently, so a
    divergence is accepted only where the plain model's top-2 logits are
    within 0.5 of each other at the first differing position (reported).
    ``session`` runs the probe: any session on the same target model.
    """
    i = first_difference(plain_tokens, spec_tokens)
    if i is None:
        return
    assert i < min(len(plain_tokens), len(spec_tokens)), "one output is a prefix of the other"
    context = session.tokenize(prompt) + list(plain_tokens[:i])
    top1, top2, margin = session.top2(context)
    print(f"first difference at {i}: plain {plain_tokens[i]} vs spec {spec_tokens[i]}, "
          f"top-2 ({top1}, {top2}) margin {margin:.4f}")
    assert {plain_tokens[i], spec_tokens[i]} <= {top1, top2}
    assert margin < 0.5, f"outputs differ at {i} although the logit margin is {margin}"
