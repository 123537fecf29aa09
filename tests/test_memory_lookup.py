"""The session memory's lookup for a running request (docs/decisions/0076).

A batched session's sequences share one memory of earlier requests. Each
running request keeps its own tokens, and the memory is matched against that
request's tail: not against whatever sequence appended to it last, which in
a batch is usually another request. The native lookup is checked against a
brute-force reference written here from its definition.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from spec_actor.nif import testing as nt

KEY = 3  # the shortest match that proposes
MAX_MATCH = 64
PER_MATCH = 2  # proposal tokens per matched token


def reference(kept: list[list[int]], tail: list[int], n_max: int) -> tuple[list[int], int]:
    """The longest match of the tail's end that something follows, the most recent on a tie."""
    best_len, best = 0, (0, 0)
    for si in reversed(range(len(kept))):
        seq = kept[si]
        for end in reversed(range(len(seq) - 1)):
            n = 0
            while n < MAX_MATCH and n <= end and n < len(tail) and seq[end - n] == tail[-1 - n]:
                n += 1
            if n > best_len:
                best_len, best = n, (si, end)
    if best_len < KEY or n_max <= 0:
        return [], 0
    si, end = best
    want = min(n_max, PER_MATCH * best_len, len(kept[si]) - end - 1)
    return kept[si][end + 1:end + 1 + want], best_len


def test_the_running_requests_tail_is_matched_not_the_last_kept_sequence():
    earlier = [5, 6, 7, 8, 9, 10, 11]
    other = [20, 21, 22, 23, 24]  # kept last: its own tail would propose nothing of earlier's
    proposal, match = nt.memory_propose_after([earlier, other], [1, 2, 6, 7, 8], 8)
    assert (proposal, match) == ([9, 10, 11], 3)


def test_no_match_no_short_tail_and_no_budget_propose_nothing():
    kept = [[1, 2, 3, 4, 5, 6]]
    assert nt.memory_propose_after(kept, [9, 9, 9, 9], 8) == ([], 0)
    assert nt.memory_propose_after(kept, [2, 3], 8) == ([], 0)  # shorter than a key
    assert nt.memory_propose_after(kept, [1, 2, 3], 0) == ([], 0)
    assert nt.memory_propose_after([], [1, 2, 3], 8) == ([], 0)


small_seq = st.lists(st.integers(1, 6), min_size=0, max_size=24)


@settings(max_examples=300, deadline=None)
@given(kept=st.lists(small_seq, min_size=0, max_size=4), tail=small_seq, n_max=st.integers(0, 12))
def test_the_lookup_equals_the_brute_force_reference(kept, tail, n_max):
    assert nt.memory_propose_after(kept, tail, n_max) == reference(kept, tail, n_max)
