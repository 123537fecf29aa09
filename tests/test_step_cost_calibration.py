"""Spec("auto")'s step-cost table: measured once per model and thread count, then only scaled (docs/decisions/0060).

The first auto run of a model at a thread count times verification batches
on its own (empty) context, or an actor or pool does when it opens
(`Session.prepare`, decision 0079); every later auto session of that model and
thread count in the process reuses the table, and each session's steps only
scale it: by one factor for one-token decodes and one for batches, each
leaning on the factor of all steps (decision 0083). The counts come from a process-wide counter of
measurements, the tables from the sessions' own cost models; no timing is
asserted. Each test loads its own copy of a tiny model, so no other test of
the run has measured it before.
"""

from __future__ import annotations

import gc
import threading

import pytest
import trio
from tiny_model_fixtures import tiny_paths  # noqa: F401 - fixture, found by pytest here

import spec_actor
from spec_actor import Session
from spec_actor.nif import testing as nt

PROMPT = "the cat and the dog and the cat and the dog and the cat and the"
N = 48
N_CTX = 512

# Shaped like decision 0029's table (us by drafted tokens): not linear, an odd batch dearer than the next.
TABLE = [23_000.0, 37_000.0, 66_000.0, 54_000.0, 79_000.0, 66_000.0, 93_000.0, 85_000.0, 111_000.0]


def fresh(path) -> spec_actor.Model:
    """A model object of its own: its tables are not in the registry yet."""
    return spec_actor.load_model(path)


def generate(model: spec_actor.Model, *, n_threads: int = 1,
             cost: list[float] | None = None) -> tuple[tuple[int, ...], list[float], bool, float]:
    """Greedy tokens of one auto run on a new session, and the session's step cost after it (auto_step_cost)."""
    with Session(model, spec="auto", n_ctx=N_CTX, n_threads=n_threads) as session:
        if cost is not None:
            nt.fix_step_cost_table(session._handle, cost)
        result = session.run(PROMPT, max_tokens=N, temp=0.0)
        assert result.status == "done", result.terminal
        return (result.tokens, *nt.auto_step_cost(session._handle))


def test_measured_once_per_model_and_thread_count_then_reused(tiny_paths):
    model = fresh(tiny_paths.mtp)
    before = nt.step_cost_calibrations()
    _, table, calibrated, _ = generate(model)
    assert calibrated and nt.step_cost_calibrations() == before + 1
    for _ in range(2):  # later sessions, and a session's later runs, measure nothing
        _, again, calibrated, scale = generate(model)
        assert calibrated and nt.step_cost_calibrations() == before + 1
        # the same table, each session with its own scale: its batches' entries keep their ratios
        # exactly (a one-token decode has a factor of its own, decision 0083)
        assert [a / again[1] for a in again[1:]] == pytest.approx([t / table[1] for t in table[1:]], rel=1e-9)
    generate(model, n_threads=2)  # another thread count is another table
    assert nt.step_cost_calibrations() == before + 2
    generate(fresh(tiny_paths.mtp))  # another model object (it may be offloaded differently)
    assert nt.step_cost_calibrations() == before + 3


def test_sessions_starting_together_measure_once(tiny_paths):
    model = fresh(tiny_paths.target)
    before = nt.step_cost_calibrations()
    tables: list[list[float]] = []
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            _, table, calibrated, _ = generate(model)
            assert calibrated
            tables.append([t / table[1] for t in table[1:]])  # a batch's entries (decision 0083)
        except BaseException as e:  # noqa: BLE001 - handed to the test thread
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert nt.step_cost_calibrations() == before + 1
    assert len(tables) == 3 and tables[1] == pytest.approx(tables[0]) and tables[2] == pytest.approx(tables[0])


def test_the_measured_table_is_positive_and_rises_with_the_draft(tiny_paths):
    _, shape, calibrated, scale = generate(fresh(tiny_paths.target))
    assert calibrated and scale > 0
    assert all(t > 0 for t in shape)
    # The drafted lengths lie within 1.5x of a non-decreasing line: a length
    # never costs more than 2.25x a longer one.
    for m in range(1, len(shape)):
        for n in range(m + 1, len(shape)):
            assert shape[m] <= 2.25 * shape[n], (m, n, shape)


def test_the_steps_only_scale_the_table():
    query = list(range(len(TABLE) + 4))  # past the table too (its last entries repeat)
    unscaled = nt.step_cost([], query, calibrated=TABLE)
    assert unscaled[: len(TABLE)] == pytest.approx(TABLE)
    # a machine twice as slow, seen at a few lengths only
    slow = [(n, int(2 * TABLE[n])) for n in (0, 1, 3) * 80]
    predicted = nt.step_cost(slow, query, calibrated=TABLE)
    assert predicted[0] == pytest.approx(2 * TABLE[0], rel=0.05)
    for n in query[1:]:  # every batch length, seen or not, keeps its ratio to the others
        assert predicted[n] / predicted[1] == pytest.approx(unscaled[n] / unscaled[1], rel=1e-9), n
    # and to a one-token decode, within what the two factors' weights leave (decision 0083)
    assert predicted[1] / predicted[0] == pytest.approx(unscaled[1] / unscaled[0], rel=0.01)
    assert predicted[2] > predicted[3]  # the shape a line would lose


def test_a_one_token_decode_and_a_batch_each_learn_their_factor():
    """On a GPU a one-token decode runs as a CUDA graph and a batch does not (decision 0083).

    The table is the one auto calibrated on an H200 (decision 0081). There a plain step took about
    1,050 us, 0.66 of the table's 1,586, and the drafted steps about 2,600-2,900 us, near 1.45 of
    the table's batch entries: one factor for all steps priced a batch of 3 at 1.19 plain steps
    where it cost about 2.6. Here the steps are priced that way, plain and batched in turn."""
    gpu = [1586.0, 1871.0, 1837.0, 1881.0, 1886.0, 1940.0, 1985.0, 1997.0, 2527.0, 2560.0, 2567.0,
           2606.0, 2650.0, 2668.0, 2680.0, 2710.0, 3240.0]
    factor = {0: 0.66, 2: 1.45, 3: 1.45, 8: 1.45}
    steps = [(n, int(factor[n] * gpu[n])) for n in (0, 0, 2, 0, 3, 0, 8) * 30]
    predicted = nt.step_cost(steps, [0, 2, 3, 8], calibrated=gpu)
    for k, n in enumerate((0, 2, 3, 8)):
        assert predicted[k] == pytest.approx(factor[n] * gpu[n], rel=0.06), (n, predicted)
    measured_ratio = 1.45 * gpu[3] / (0.66 * gpu[0])  # a batch of 3 against a plain step: 2.6
    assert predicted[2] / predicted[0] == pytest.approx(measured_ratio, rel=0.1)
    # a batch is still priced so after 20 plain steps, and returns to the factor of all steps after 600
    for n_plain, expected in ((20, measured_ratio), (600, gpu[3] / gpu[0])):
        later = nt.step_cost([*steps, *[(0, int(0.66 * gpu[0]))] * n_plain], [0, 3], calibrated=gpu)
        assert later[1] / later[0] == pytest.approx(expected, rel=0.1), (n_plain, later)

def test_past_its_end_the_table_repeats_its_last_entries_rising_with_them():
    """A batch of many sequences is priced past the measured lengths: the kernels' block shape goes on.

    The shape of a 2-core EPYC (decision 0065): every fourth batch size is
    cheaper than the one before it. Expected values are worked out here from
    the rule (the last 8 entries repeat, each repeat rising by what the table
    rose over those 8), not read back from the native code.
    """
    shaped = [13.0, 27.0, 36.0, 40.0, 59.0, 58.0, 68.0, 54.0, 68.0, 67.0, 70.0, 56.0, 74.0, 91.0, 107.0, 83.0]
    last, rise = len(shaped) - 1, shaped[-1] - shaped[-9]
    query = list(range(len(shaped) + 20))
    predicted = nt.step_cost([], query, calibrated=shaped)
    expected = list(shaped)
    for n in range(len(shaped), len(query)):
        expected.append(expected[n - 8] + rise)
    assert predicted == pytest.approx(expected)
    for n in (19, 23, 27, 31, 35):  # batch sizes 20, 24, ...: each cheaper than the one before, as measured
        assert predicted[n] < predicted[n - 1]
    assert predicted[last + 8] == pytest.approx(shaped[last] + rise)
    # a linear table stays the line it is
    line = [1000.0 + 100.0 * n for n in range(12)]
    assert nt.step_cost([], [30, 40], calibrated=line) == pytest.approx([4000.0, 5000.0])


def test_a_single_slow_step_moves_the_scale_little():
    steady = [(n, int(TABLE[n])) for n in (0, 1, 2, 4) * 20]
    before = nt.step_cost(steady, [3], calibrated=TABLE)[0]
    after = nt.step_cost([*steady, (4, int(20 * TABLE[4]))], [3], calibrated=TABLE)[0]
    assert before == pytest.approx(TABLE[3], rel=1e-6)
    assert before < after < 1.1 * before


def test_a_fixed_step_cost_is_kept_and_measures_nothing(tiny_paths):
    model = fresh(tiny_paths.mtp)
    fixed = [1000.0 + 100.0 * n for n in range(33)]
    before = nt.step_cost_calibrations()
    _, cost, calibrated, _ = generate(model, cost=fixed)
    assert not calibrated and cost == fixed
    assert nt.step_cost_calibrations() == before


def test_measuring_leaves_a_recurrent_context_as_it_was(tiny_paths):
    """On the hybrid model the first auto run measures on its recurrent state; output equals plain's."""
    model = spec_actor.load_model(tiny_paths.hybrid, load_mtp=True)
    with Session(model, spec="none", n_ctx=N_CTX, n_threads=1) as session:
        plain = session.run(PROMPT, max_tokens=N, temp=0.0).tokens
    before = nt.step_cost_calibrations()
    measured_first, _, calibrated, _ = generate(model)
    assert calibrated and nt.step_cost_calibrations() == before + 1
    reused, *_ = generate(model)
    assert measured_first == plain == reused


def test_an_actor_measures_when_it_opens_and_its_first_request_measures_nothing(tiny_paths):
    """open_actor prepares the session (decision 0079): the table is there before the first request."""
    model = fresh(tiny_paths.target)
    before = nt.step_cost_calibrations()

    async def main() -> None:
        async with spec_actor.open_actor(model, n_ctx=N_CTX, n_threads=1) as actor:
            assert nt.step_cost_calibrations() == before + 1  # measured at the open, no request made yet
            _, calibrated, _ = nt.auto_step_cost(actor.session._handle)
            assert calibrated
            tokens = [t async for t in actor.stream(PROMPT, max_tokens=N, temp=0.0)]
            assert tokens
            assert nt.step_cost_calibrations() == before + 1  # the request found the table

    trio.run(main)
    assert generate(model)[2] and nt.step_cost_calibrations() == before + 1  # a bare session of that model too


def test_a_pool_measures_once_when_it_opens(tiny_paths):
    model = fresh(tiny_paths.target)
    before = nt.step_cost_calibrations()

    async def main() -> None:
        async with spec_actor.open_pool(model, size=3, n_ctx=N_CTX, n_threads=1) as pool:
            assert pool.batched and nt.step_cost_calibrations() == before + 1
            async with trio.open_nursery() as nursery:
                for _ in range(3):
                    nursery.start_soon(pool.generate, PROMPT)
            assert nt.step_cost_calibrations() == before + 1

    trio.run(main)


def test_prepare_measures_nothing_for_other_specs_or_when_cancelled(tiny_paths):
    model = fresh(tiny_paths.target)
    before = nt.step_cost_calibrations()
    with Session(model, spec="none", n_ctx=N_CTX, n_threads=1) as session:
        session.prepare()
    assert nt.step_cost_calibrations() == before
    with Session(model, spec="auto", n_ctx=N_CTX, n_threads=1) as session:
        session.cancel()
        session.prepare()  # stopped at once, nothing kept
        assert nt.step_cost_calibrations() == before
        assert not nt.auto_step_cost(session._handle)[1]
        session.clear_cancel()
        session.prepare()
        assert nt.step_cost_calibrations() == before + 1 and nt.auto_step_cost(session._handle)[1]
        session.prepare()  # measured already: nothing more
        assert nt.step_cost_calibrations() == before + 1
        assert session.run(PROMPT, max_tokens=N, temp=0.0).status == "done"
    assert nt.step_cost_calibrations() == before + 1


def test_a_cancelled_open_keeps_no_table_and_the_next_session_measures(tiny_paths):
    """An open cancelled while its worker makes the session never measures: the cancel comes out first."""
    model = fresh(tiny_paths.target)
    before = nt.step_cost_calibrations()
    entered = False

    async def main() -> None:
        nonlocal entered
        with trio.CancelScope() as scope:
            async def cancel_soon() -> None:
                await trio.sleep(0)  # the open is in its worker thread, making the session
                scope.cancel()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(cancel_soon)
                async with spec_actor.open_actor(model, n_ctx=N_CTX, n_threads=1):
                    entered = True

    trio.run(main)
    assert not entered and nt.step_cost_calibrations() == before
    assert generate(model)[2]
    assert nt.step_cost_calibrations() == before + 1


def test_a_freed_model_takes_its_tables_along(tiny_paths):
    """A model loaded after another was freed may land at its address; it still measures its own table."""
    before = nt.step_cost_calibrations()
    for k in range(3):
        model = fresh(tiny_paths.target)
        assert generate(model)[2]
        assert nt.step_cost_calibrations() == before + k + 1
        model.close()  # the last reference: the native model is freed here
        gc.collect()
