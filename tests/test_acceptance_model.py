"""The per-position acceptance model that Spec("auto") keeps for each drafter (native/draft/adaptive.h).

Expected tokens are derived here by hand from the model's definition
(decayed counts with a prior behind each position) and compared with the
native model through a testing probe; the ramp and the sampled prior are
checked by what they must do to the draft lengths worth verifying.
"""

from __future__ import annotations

import pytest

from spec_actor.nif import testing as nt

GREEDY_PRIOR, SAMPLED_PRIOR, PRIOR_WEIGHT, DECAY = 0.6, 0.3, 1.5, 0.97


def test_no_data_gives_the_prior_chain():
    greedy = nt.expected_tokens([], 6)
    # position 1 at the prior, positions 2..4 (the ramp before any measure) at the rate before them,
    # past that the prior halves each position
    p = [GREEDY_PRIOR] * 4 + [GREEDY_PRIOR * 0.5, GREEDY_PRIOR * 0.25]
    chain, want = 1.0, [1.0]
    for q in p:
        chain *= q
        want.append(want[-1] + chain)
    assert greedy == pytest.approx(want)


def test_sampling_starts_from_a_lower_prior():
    greedy = nt.expected_tokens([], 8)
    sampled = nt.expected_tokens([], 8, first_prior=SAMPLED_PRIOR)
    assert sampled[1] == pytest.approx(1 + SAMPLED_PRIOR)
    assert all(s < g for s, g in zip(sampled[1:], greedy[1:]))


def test_measured_positions_follow_their_counts():
    # ten drafts of 4 tokens, the first 2 accepted each time
    out = nt.expected_tokens([(4, 2)] * 10, 4)
    weight = sum(DECAY**k for k in range(10))
    p1 = (weight + PRIOR_WEIGHT * GREEDY_PRIOR) / (weight + PRIOR_WEIGHT)
    p2 = (weight + PRIOR_WEIGHT * p1) / (weight + PRIOR_WEIGHT)  # accepted as often as reached
    p3 = (0 + PRIOR_WEIGHT * p2) / (weight + PRIOR_WEIGHT)  # reached every time, never accepted
    assert out[1] == pytest.approx(1 + p1)
    assert out[2] == pytest.approx(1 + p1 + p1 * p2)
    assert out[3] == pytest.approx(1 + p1 + p1 * p2 + p1 * p2 * p3)


def test_reach_grows_with_what_was_accepted():
    short = nt.expected_tokens([(4, 4)] * 10, 32)
    long = nt.expected_tokens([(16, 16)] * 10, 32)
    # accepted to 4: trusted to about twice that, little past it
    assert short[8] - short[4] > 3.0
    assert short[32] - short[8] < 1.0
    # accepted to 16: trusted to the ceiling of 32
    assert long[32] - long[16] > 12.0


def test_a_floor_holds_past_the_ramp():
    # the memory's long-match arm has a floor of 0.8 past the first position
    checked = [(4, 4)] * 10
    plain = nt.expected_tokens(checked, 32)
    floored = nt.expected_tokens(checked, 32, later_floor=0.8)
    assert floored[32] - floored[8] > 2.0 > plain[32] - plain[8]


def test_probe_rejects_bad_arguments():
    with pytest.raises(Exception, match="n_accepted <= n_checked"):
        nt.expected_tokens([(2, 3)], 4)
    with pytest.raises(Exception, match="0..SA_MAX_DRAFT_POS"):
        nt.expected_tokens([], 65)
