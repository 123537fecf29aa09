"""auto's chooser alone (choose_offer in native/adaptive.h), given offers and a fixed step cost.

The answers are worked out here by hand from the chooser's definition: the
best expected tokens per microsecond, expected[n] / (cost[n] + draft_us +
sample_us * expected[n]), over plain decoding and every offer's lengths,
a longer or later choice winning only by more than a ten-thousandth.
"""

from __future__ import annotations

from spec_actor.nif import testing as nt

# cost of a step verifying 0..4 drafted tokens (us); past the end the last difference goes on
COST = [100.0, 150.0, 180.0, 260.0, 270.0]
A = [1.0, 1.8, 2.4, 2.8, 3.0]  # rates 1.8/150=.0120, 2.4/180=.0133, 2.8/260=.0108, 3.0/270=.0111
B = [1.0, 1.5, 2.5, 3.4]       # rates 1.5/150=.0100, 2.5/180=.0139, 3.4/260=.0131


def test_the_offer_and_length_with_the_best_rate_win():
    # plain: 1/100 = .0100; A's best 2 at .0133; B's best 2 at .0139
    assert nt.choose_offer([A, B], COST) == (1, 2)
    assert nt.choose_offer([A], COST) == (0, 2)


def test_drafting_time_moves_the_choice_to_longer_drafts():
    # with 50 us of drafting in every step: plain 1/150 = .0067; A: 2.4/230 = .0104 (its best);
    # B: 2.5/230 = .0109 < 3.4/310 = .0110, so B's 3 tokens
    assert nt.choose_offer([A, B], COST, draft_us=50.0) == (1, 3)


def test_sampling_time_is_charged_per_token_made():
    # sample_us 20: plain 1/120 = .00833; A: 2.4/(180+48) = .01053, 1.8/(150+36) = .00968;
    # B: 2.5/(180+50) = .01087, 3.4/(260+68) = .01037
    assert nt.choose_offer([A, B], COST, sample_us=20.0) == (1, 2)


def test_plain_wins_when_verifying_costs_more_than_drafts_bring():
    expensive = [100.0, 300.0, 500.0]
    # A: 1.8/300 = .0060, 2.4/500 = .0048, beyond: 2.8/700, 3.0/900 — all under plain's .0100
    assert nt.choose_offer([A], expensive) == (-1, 0)
    assert nt.choose_offer([], COST) == (-1, 0)


def test_a_tie_goes_to_the_shorter_draft_and_the_earlier_offer():
    flat = [100.0, 200.0, 300.0]
    even = [1.0, 2.0, 3.0]  # 2/200 = 3/300 = .01 = plain's 1/100
    assert nt.choose_offer([even], flat) == (-1, 0)
    better = [1.0, 2.2, 3.3]  # .011 at both lengths: the shorter stays
    assert nt.choose_offer([better, better], flat) == (0, 1)


def test_a_draft_in_a_batched_step_is_priced_by_the_step_it_joins():
    """Alone a sequence drafts long; as other sequences fill the step it drafts less, then not at all."""
    cost = [1000.0 + 50.0 * k for k in range(9)]  # a step of k + 1 tokens; past 8 the last difference (50) goes on
    a = [1.0, 1.5, 1.75, 1.875, 1.9375]
    # alone: plain 1/1000 = .001000; 1.5/1050 = .001429, 1.75/1100 = .001591, 1.875/1150 = .001630,
    # 1.9375/1200 = .001615
    assert nt.choose_offer([a], cost) == (0, 3)
    # beside 7 tokens expected to make 7: plain 8/1350 = .005926; 8.5/1400 = .006071, 8.75/1450 = .006034
    assert nt.choose_offer([a], cost, n_others=7, e_others=7.0) == (0, 1)
    weak = [1.0, 1.3]
    # alone: 1.3/1050 = .001238 beats plain's .001000
    assert nt.choose_offer([weak], cost) == (0, 1)
    # beside 15 tokens expected to make 15: plain 16/1750 = .009143 beats 16.3/1800 = .009056
    assert nt.choose_offer([weak], cost, n_others=15, e_others=15.0) == (-1, 0)
