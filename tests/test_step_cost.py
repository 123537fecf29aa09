"""The step-cost model that prices draft lengths for Spec("auto") and n_draft="auto" (docs/decisions/0029).

CPU matrix kernels work on blocks of rows, so the cost of verifying a draft
is not linear in its length: on the 2-core test machines a batch of 3 (two
drafted tokens) took longer than a batch of 4. The model must learn that
shape from the steps it sees, follow load changes, and shrug off single
slow steps. The curves below are synthetic, so the expected values are known
exactly; the model is the native one, through a testing probe.
"""

from __future__ import annotations

import random

import pytest

from spec_actor.nif import testing as nt

# Shaped like bench/bench_verify_cost.py on a 2-core EPYC: us per step by drafted tokens.
CURVE = {0: 23_000, 1: 37_000, 2: 66_000, 3: 54_000, 4: 79_000, 5: 66_000, 6: 93_000, 7: 85_000, 8: 111_000}


def steps(lengths: list[int], scale: float = 1.0) -> list[tuple[int, int]]:
    return [(n, int(CURVE[n] * scale)) for n in lengths]


def test_learns_a_cost_that_is_not_linear_in_the_draft_length():
    rng = random.Random(1)
    observed = steps(rng.choices(list(CURVE), k=200))
    predicted = nt.step_cost(observed, list(CURVE))
    for n, truth in CURVE.items():
        assert predicted[n] == pytest.approx(truth, rel=0.05), (n, predicted)
    # a line cannot price these: each odd batch (even draft length > 0) dearer than the next one
    for n in (2, 4, 6):
        assert predicted[n] > predicted[n + 1], (n, predicted)


def test_a_length_never_verified_is_priced_by_the_line_through_the_others():
    rng = random.Random(2)
    seen = [0, 1, 3, 7]
    predicted = nt.step_cost(steps(rng.choices(seen, k=200)), [0, 1, 3, 5, 7])
    assert [round(p) for p in predicted] == sorted(round(p) for p in predicted)  # rises with n
    assert predicted[2] < predicted[3] < predicted[4]                           # 5 between 3 and 7
    for n, p in zip(seen, (predicted[0], predicted[1], predicted[2], predicted[4])):
        assert p == pytest.approx(CURVE[n], rel=0.05), (n, predicted)


def test_follows_the_machine_getting_slower():
    rng = random.Random(3)
    lengths = rng.choices(list(CURVE), k=400)
    observed = steps(lengths[:200]) + steps(lengths[200:], scale=1.5)
    predicted = nt.step_cost(observed, list(CURVE))
    for n, truth in CURVE.items():
        assert predicted[n] == pytest.approx(1.5 * truth, rel=0.1), (n, predicted)


def test_a_single_slow_step_moves_the_price_little():
    rng = random.Random(4)
    observed = steps(rng.choices(list(CURVE), k=200))
    before = nt.step_cost(observed, [3])[0]
    after = nt.step_cost(observed + [(3, 20 * CURVE[3])], [3])[0]
    assert before <= after < 1.25 * before


def test_probe_rejects_bad_arguments():
    with pytest.raises(Exception, match="0..SA_MAX_DRAFT_POS"):
        nt.step_cost([(-1, 100)], [0])
    with pytest.raises(Exception, match="0..SA_MAX_DRAFT_POS"):
        nt.step_cost([(1, 100)], [65])


# A calibrated table (us by drafted tokens) that the steps below match exactly, so that its scale stays 1.
SWITCH_TABLE = [100.0, 200.0, 250.0, 300.0]


def test_a_one_token_step_right_after_a_draft_is_not_priced_as_a_plain_step():
    """llama.cpp's graph changes shape from a drafted step back to a one-token one (decision 0117): that one-token
    decode is no plain step's price, so the plain price keeps the plain steps' own time. Steps that share their
    decode with other sequences, and one-token steps after plain ones, are priced as before.
    """
    plain = [(0, 0, 100)] * 5
    assert nt.step_price([*plain, (3, 0, 300), (0, 0, 160)], [0], calibrated=SWITCH_TABLE) == [pytest.approx(100.0)]
    # the step cost alone folds the 160 us step into the plain price
    folded = nt.step_cost([(0, 100)] * 5 + [(3, 300), (0, 160)], [0], calibrated=SWITCH_TABLE)[0]
    assert folded > 100.0
    # in a batch (other sequences' tokens beside), or after a plain step, the one-token step is priced: as the
    # step cost alone prices the same decodes (tokens beside the first, microseconds)
    for steps_seen in ([*plain, (3, 2, 400), (0, 0, 160)], [*plain, (3, 0, 300), (0, 2, 160)], [*plain, (0, 0, 160)]):
        alone = nt.step_cost([(n + others, us) for n, others, us in steps_seen], [0], calibrated=SWITCH_TABLE)
        assert nt.step_price(steps_seen, [0], calibrated=SWITCH_TABLE) == [pytest.approx(alone[0])], steps_seen
