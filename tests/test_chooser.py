"""auto's chooser alone (choose_offer in native/draft/adaptive.h), given offers and a fixed step cost.

The answers are worked out here by hand from the chooser's definition: the
best expected tokens per microsecond, expected[n] / (cost[n] + draft_us +
sample_us * expected[n]), over plain decoding and every offer's lengths,
a longer or later choice winning only by more than a ten-thousandth.
"""

from __future__ import annotations

import itertools
import random

import pytest

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



# accepted with chance .9, .8, .7, .6 for the first 1..4 tokens: exactly a accepted of 4 with chance .1 each
ROLLED = [1.0, 1.9, 2.7, 3.4, 4.0]
CHEAP_LONG = [100.0, 150.0, 180.0, 200.0, 210.0]


def test_a_draft_longer_than_the_target_undoes_for_free_pays_its_checkpoint_and_expected_restore():
    """docs/decisions/0091: beyond rollback_free tokens, the save, and per rejection too deep the restore and
    a step re-verifying the a accepted tokens and the sampled one (cost[a + 1] - cost[0])."""
    # free everywhere: 1.9/150 = .0127, 2.7/180 = .0150, 3.4/200 = .0170, 4.0/210 = .0190
    assert nt.choose_offer([ROLLED], CHEAP_LONG) == (0, 4)
    assert nt.choose_offer([ROLLED], CHEAP_LONG, rollback_free=4, save_us=1e6, restore_us=1e6) == (0, 4)
    # free up to 2, save = restore = 20: n = 3 pays 20 + .1 * (20 + 50) = 27: 3.4/227 = .0150;
    # n = 4 pays 20 + 7 + .1 * (20 + 80) = 37: 4.0/247 = .0162, still the best
    assert nt.choose_offer([ROLLED], CHEAP_LONG, rollback_free=2, save_us=20.0, restore_us=20.0) == (0, 4)
    # save = restore = 60: n = 3 pays 60 + 11 = 71: 3.4/271 = .0125; n = 4 pays 60 + 11 + 14 = 85:
    # 4.0/295 = .0136; n = 2 stays free at .0150
    assert nt.choose_offer([ROLLED], CHEAP_LONG, rollback_free=2, save_us=60.0, restore_us=60.0) == (0, 2)
    # nothing free (a target that only has full checkpoints), save = restore = 60: n = 1 pays 60 + .1 * 110
    # = 71: 1.9/221 = .0086; n = 2: 60 + 11 + 14 = 85: 2.7/265 = .0102; n = 3: 85 + .1 * 160 = 101:
    # 3.4/301 = .0113; n = 4: 101 + .1 * 170 = 118: 4.0/328 = .0122, over plain's 1/100
    assert nt.choose_offer([ROLLED], CHEAP_LONG, rollback_free=0, save_us=60.0, restore_us=60.0) == (0, 4)


def test_a_rollback_dear_enough_makes_plain_steps_win():
    # COST, nothing free, save = restore = 100: n = 1 pays 100 + .1 * (100 + 50) = 115: 1.9/265 = .0072;
    # n = 2: 100 + 15 + .1 * 180 = 133: 2.7/313 = .0086; n = 3: 133 + .1 * 260 = 159: 3.4/419 = .0081;
    # n = 4: 159 + .1 * 270 = 186: 4.0/456 = .0088 — all under plain's .0100
    assert nt.choose_offer([ROLLED], COST) == (0, 2)
    assert nt.choose_offer([ROLLED], COST, rollback_free=0, save_us=100.0, restore_us=100.0) == (-1, 0)


def _best_by_enumeration(expected, cost, n_fixed, e_fixed, n_total):
    """The best rate of any combination of draft lengths (the oracle), and a combination that reaches it."""
    rated = [(_rate(expected, cost, n_fixed, e_fixed, lengths), list(lengths))
             for lengths in itertools.product(*(range(len(e)) for e in expected))
             if n_fixed + sum(lengths) <= n_total]
    best_rate, best = max(rated, key=lambda r: r[0])
    return best, best_rate


def _rate(expected, cost, n_fixed, e_fixed, lengths):
    t = n_fixed + sum(lengths)
    return (e_fixed + sum(e[n] for e, n in zip(expected, lengths))) / cost[t - 1]


def test_a_batched_step_spends_its_drafts_where_they_are_likeliest_accepted():
    """Three sequences, one step: the strong proposal gets the tokens, the weak one none (decision 0066)."""
    cost = [1000.0 + 100.0 * k for k in range(40)]  # a decode of T tokens: 1000 + 100 (T - 1)
    strong = [1.0, 1.9, 2.71, 3.439]      # p = .9 at every position
    middling = [1.0, 1.5, 1.75]          # .5, then .25
    weak = [1.0, 1.1, 1.11]              # .1, then .01
    lengths = nt.allocate_drafts([strong, middling, weak], cost, n_fixed=3)
    # By hand: 3 tokens make 3 at 1200 (.002500). The gains in order are
    # .9, .81, .729 (strong), .5 (middling), .25, .1, .01. Adding them one by
    # one: 3.9/1300 = .003000, 4.71/1400 = .003364, 5.439/1500 = .003626,
    # 5.939/1600 = .003712, 6.189/1700 = .003641: the best is 4 draft tokens.
    assert lengths == [3, 1, 0]
    assert lengths == _best_by_enumeration([strong, middling, weak], cost, 3, 0.0, 1 << 16)[0]


def test_a_batched_step_on_checkpointed_targets_prices_each_drafts_rollback():
    """Decision 0091 in the joint choice: several sequences of a recurrent target roll back from checkpoints
    (nothing undone for free), so each draft pays its save and, on a rejection, the restore and the
    re-verification of its a accepted tokens and the sampled one beside the step's 2 other tokens
    (cost[2 + a + 1] - cost[2] = 100 (a + 1))."""
    cost = [1000.0 + 100.0 * k for k in range(40)]
    strong, middling, weak = [1.0, 1.9, 2.71, 3.439], [1.0, 1.5, 1.75], [1.0, 1.1, 1.11]
    assert nt.allocate_drafts([strong, middling, weak], cost, n_fixed=3) == [3, 1, 0]  # as above, all free
    # save = restore = 50. strong: 1 token 50 + .1 * 150 = 65, 2: 65 + .09 * 250 = 87.5, 3: 87.5 + .081 * 350
    # = 115.85; middling, 1 token: 50 + .5 * 150 = 125. In the gains' order: 3.9/1365 = .002857,
    # 4.71/1487.5 = .003166, 5.439/1615.85 = .003366, then middling's first: 5.939/1840.85 = .003226
    assert nt.allocate_drafts([strong, middling, weak], cost, n_fixed=3, rollback_free=0, save_us=50.0,
                              restore_us=50.0) == [3, 0, 0]
    # a save of 2000 for every draft: the best of them, strong's 3 tokens at 5.439/(1500 + 2065.85) = .001525,
    # is under plain's 3/1200 = .0025
    assert nt.allocate_drafts([strong, middling, weak], cost, n_fixed=3, rollback_free=0, save_us=2000.0,
                              restore_us=50.0) == [0, 0, 0]

def test_the_joint_lengths_land_the_step_on_a_cheaper_batch_size():
    """With the kernels' block shape (decision 0065) a fourth token can make the step cheaper, not dearer."""
    # T:  1     2     3     4     5     6     7     8     9
    cost = [13.0, 27.0, 36.0, 40.0, 59.0, 58.0, 68.0, 54.0, 68.0, 67.0, 70.0, 56.0]
    faint = [1.0, 1.05]  # a proposal nobody would verify alone: 1.05/27 < 1/13
    seven = [[1.0, 1.05] for _ in range(7)]
    lengths = nt.allocate_drafts(seven, cost, n_fixed=7)
    # 7 tokens cost 68, 8 cost 54: one faint draft token makes the step cheaper
    assert sum(lengths) == 1
    assert _rate(seven, cost, 7, 0.0, lengths) > _rate(seven, cost, 7, 0.0, [0] * 7)
    assert nt.allocate_drafts([faint], cost, n_fixed=1) == [0]


def test_the_sequence_with_the_most_tokens_left_drafts_first():
    """Decision 0087: a token is weighted by its sequence's tokens left over the most any sequence has left."""
    cost = [1000.0, 1500.0, 2000.0, 2500.0]  # 500 us a token
    nearly_done = [1.0, 1.9]  # p = .9
    far_from_done = [1.0, 1.6]  # p = .6
    # Unweighted, by hand: 2 tokens make 2 at 1500 (.001333); + .9 (the first):
    # 2.9/2000 = .00145; + .6: 3.5/2500 = .0014. Only the first drafts.
    assert nt.allocate_drafts([nearly_done, far_from_done], cost, n_fixed=2) == [1, 0]
    # Weighted .2 and 1 (20 tokens left against 100): 1.2 at 1500 (.0008);
    # + .6 (the second): 1.8/2000 = .0009; + .18: 1.98/2500 = .000792.
    # Only the second drafts: it is the one that would end up decoding alone.
    assert nt.allocate_drafts([nearly_done, far_from_done], cost, n_fixed=2, weights=[0.2, 1.0]) == [0, 1]


@pytest.mark.parametrize("seed", range(40))
def test_the_joint_lengths_are_the_best_of_every_combination(seed):
    """Against enumeration on random proposals and random non-linear costs: the same best rate."""
    rng = random.Random(seed)
    options = []
    for _ in range(rng.randint(1, 4)):
        expected, run, e = [1.0], 1.0, 1.0
        for _ in range(rng.randint(0, 4)):
            run *= rng.uniform(0.05, 1.0)
            e += run
            expected.append(e)
        options.append(expected)
    others = rng.randint(0, 5)
    n_fixed = len(options) + others
    e_fixed = float(others)
    n_total = rng.randint(n_fixed, n_fixed + 12)
    cost = [1000.0]
    for _ in range(40):
        cost.append(cost[-1] + rng.uniform(-150.0, 400.0) if cost[-1] > 400 else cost[-1] + 200.0)
    lengths = nt.allocate_drafts(options, cost, n_fixed, e_fixed, n_total)
    assert all(0 <= n < len(e) for n, e in zip(lengths, options))
    assert n_fixed + sum(lengths) <= n_total
    _, best_rate = _best_by_enumeration(options, cost, n_fixed, e_fixed, n_total)
    # greedy by marginal gain is optimal for every total when each option's gains fall (they do: products of p <= 1)
    assert _rate(options, cost, n_fixed, e_fixed, lengths) == pytest.approx(best_rate, rel=2e-4)


def test_drafts_that_broke_off_temper_later_drafts_of_their_length_band():
    """The promise record (native/draft/promise_record.h, decision 0117): per band of lengths (1-2, 3-4, 5-8,
    9-16, 17+), decayed sums (0.9 a draft) of the accepted tokens drafts promised, untempered, and of those they
    brought; the factor is (delivered + 2) / (promised + 2), at most 1.
    """
    assert nt.promise_factors([], 20) == [1.0] * 20
    # a 20-token draft promised 15 and got 5: band 17+ is at 7 / 17, the others untouched
    assert nt.promise_factors([(20, 15.0, 5)], 20) == [1.0] * 16 + [pytest.approx(7 / 17)] * 4
    # an 18-token draft then promised 10 and got all 10: the first one decays
    second = nt.promise_factors([(20, 15.0, 5), (18, 10.0, 10)], 20)
    assert second[16:] == [pytest.approx((0.9 * 5 + 10 + 2) / (0.9 * 15 + 10 + 2))] * 4
    # a band that delivers more than it promised stays at 1; a 4-token draft that got nothing tempers 3-4 only
    assert nt.promise_factors([(2, 0.5, 2), (4, 2.0, 0)], 6) == [1.0, 1.0, 0.5, 0.5, 1.0, 1.0]


def test_the_promise_record_refuses_impossible_drafts():
    for bad in ([(0, 2.0, 0)], [(3, 2.0, 4)], [(3, -0.5, 1)]):
        with pytest.raises(ValueError):
            nt.promise_factors(bad, 4)
