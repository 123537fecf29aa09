"""The batched engine: a pool's requests as the sequences of one session (docs/decisions/0050).

Every request in the batch must give what the same request gives alone on
a plain session: exactly on the float32 tiny model, within Gemma's
near-ties (decision 0031). Progress is asserted in engine steps, never in
seconds.
"""

from __future__ import annotations

import ctypes
import os
import random
import re
import threading
from typing import Any

import pytest
import trio
from greedy_helpers import assert_equal_within_a_near_tie, first_difference
from greedy_helpers import collect as _collect
from tiny_model_fixtures import (  # noqa: F401
    hybrid_model,
    hybrid_model_without_mtp,
    tiny_dflash,
    tiny_draft,
    tiny_paths,
    tiny_target,
)

import spec_actor
from spec_actor import Done, Eog, Error, Session, Token
from spec_actor._pool import open_pool
from spec_actor._session import can_batch

N_CTX = 256
N = 24


def _prompts(model: spec_actor.Model, n: int, seed: int = 7) -> list[list[int]]:
    """n token prompts of different lengths (3 to 60 tokens)."""
    rng = random.Random(seed)
    n_vocab = model.info.n_vocab
    return [[rng.randrange(1, n_vocab) for _ in range(rng.randrange(3, 60))] for _ in range(n)]


def _alone(model: spec_actor.Model, spec: spec_actor.Spec | str, prompt: Any, **options: Any) -> list[int]:
    """The request's tokens on a fresh plain session of its own."""
    with Session(model, spec=spec, n_ctx=N_CTX, prefix_cache=False, n_threads=1) as session:
        return list(session.run(prompt, **options).tokens)


def _options(i: int, sampled: bool) -> dict[str, Any]:
    """Request i's sampling: greedy, or (every fourth, where asked) sampled with its own seed."""
    if sampled and i % 4 == 3:
        return {"max_tokens": N, "temp": 0.9, "seed": 1000 + i}
    return {"max_tokens": N, "temp": 0.0}


def _open(model: spec_actor.Model, spec: spec_actor.Spec | str, size: int, **options: Any) -> Any:
    return open_pool(model, size=size, spec=spec, n_ctx=N_CTX, n_batch=64, n_ubatch=64, memory=0, **options)


# ngram-simple drafts from the request's own tokens only, so a sampled
# request consumes its random numbers alike in the batch and alone; auto's
# draft lengths follow measured times, so there only greedy output is fixed.
@pytest.mark.parametrize(("spec", "sampled"), [("ngram-simple", True), ("auto", False), ("none", True)])
async def test_eight_requests_in_one_batch_equal_their_lone_runs(tiny_target, spec, sampled):  # noqa: F811
    prompts = _prompts(tiny_target, 8)
    expected = [_alone(tiny_target, spec, p, **_options(i, sampled)) for i, p in enumerate(prompts)]
    got: dict[int, list[int]] = {}
    async with _open(tiny_target, spec, 8) as pool:
        assert pool.batched
        session = pool.actors[0].session

        async def one(i: int) -> None:
            got[i], terminal = await _collect(pool, prompts[i], **_options(i, sampled))
            assert isinstance(terminal, (Done, Eog))

        async with trio.open_nursery() as nursery:
            for i in range(8):
                nursery.start_soon(one, i)
        steps = session.steps()
    for i in range(8):
        assert got[i] == expected[i], f"request {i} differs at {first_difference(got[i], expected[i])}"
    # one decode served several sequences: fewer steps than tokens made
    assert steps < sum(len(t) for t in expected) / 2


async def test_gemma_batch_equals_lone_runs_within_near_ties(gemma):
    prompts = ["Once upon a time", "The capital of France is", "def fib(n):\n    ", "List three colors:",
               "Water boils at", "My favourite food is", "The quick brown fox", "In 1969, the first"]
    grammar = 'root ::= [ a-zA-Z,.]+'
    opts = [{"max_tokens": 16, "temp": 0.0, **({"grammar": grammar} if i % 3 == 1 else {})} for i in range(8)]
    # no prefix cache on the reference: what it held must not change batch shapes (decision 0031)
    with Session(gemma, spec="none", n_ctx=N_CTX, prefix_cache=False) as plain:
        expected = [list(plain.run(p, **o).tokens) for p, o in zip(prompts, opts)]
        got: dict[int, list[int]] = {}
        async with open_pool(gemma, size=8, n_ctx=N_CTX) as pool:
            assert pool.batched

            async def one(i: int) -> None:
                got[i], _ = await _collect(pool, prompts[i], **opts[i])

            async with trio.open_nursery() as nursery:
                for i in range(8):
                    nursery.start_soon(one, i)
        for i in range(8):
            assert_equal_within_a_near_tie(plain, prompts[i], got[i], expected[i])


def _threads_and_fds() -> tuple[int, int]:
    return threading.active_count(), len(os.listdir("/proc/self/fd"))


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def _rss() -> int:
    """Resident memory in KiB."""
    with open("/proc/self/status", encoding="ascii") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


def _heap_in_use() -> int:
    """Bytes malloc has handed out and not had back (its arenas and mmapped blocks), in KiB.

    Unlike resident memory, it does not count what the allocator keeps after
    a free: in the full suite a freed 16 MiB ngram-mod table once stayed
    resident in a worker thread's arena, which moved RSS by 16 MB and is no
    leak.
    """
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = _Mallinfo2
    info = libc.mallinfo2()
    return (info.uordblks + info.hblkhd) // 1024


ROUNDS = 200
SIZE = 8
MTP = spec_actor.Spec("mtp", n_draft=3)


# auto on the llama target, and MTP on the hybrid: one shared draft context whose cells and per-sequence
# drafting state a cancelled sequence leaves behind (decision 0069)
@pytest.mark.parametrize(("model_name", "spec"), [("tiny_target", "auto"), ("hybrid_model", MTP)],
                         ids=["auto", "mtp-hybrid"])
async def test_cancelling_one_of_n_leaves_the_others_equal_to_their_lone_runs(request, model_name, spec):
    model = request.getfixturevalue(model_name)
    rng = random.Random(11)
    prompts = _prompts(model, SIZE + 1, seed=3)
    prompts[SIZE] = (prompts[SIZE] * 8)[:150]  # the victim: a long prompt, prefilled over several steps
    expected = [_alone(model, spec, p, max_tokens=N, temp=0.0) for p in prompts[:SIZE]]
    async with _open(model, spec, SIZE, stream_buffer=1) as pool:
        warm = None
        heap_by_round: list[int] = []
        rss_by_round: list[int] = []
        for round_ in range(ROUNDS):
            where = rng.choice(["queued", "prefill", "decode"])
            after = rng.randrange(1, 6)
            got: dict[int, list[int]] = {}

            async def victim() -> None:
                async with pool.stream_events(prompts[SIZE], max_tokens=200, temp=0.0) as events:
                    if where == "queued":
                        return  # left before an actor took it: all of them are busy
                    n = 0
                    async for ev in events:
                        n += isinstance(ev, Token)
                        if where == "prefill" or n >= after:
                            return

            ends: dict[int, Any] = {}

            async def other(i: int) -> None:
                got[i], ends[i] = await _collect(pool, prompts[i], max_tokens=N, temp=0.0)

            async with trio.open_nursery() as nursery:
                for i in range(SIZE if where == "queued" else SIZE - 1):
                    nursery.start_soon(other, i)
                await trio.sleep(0)
                nursery.start_soon(victim)
            if where != "queued":
                got[SIZE - 1], ends[SIZE - 1] = await _collect(pool, prompts[SIZE - 1], max_tokens=N, temp=0.0)
            for i in range(SIZE):
                assert got[i] == expected[i], (round_, where, i, ends[i])
            if round_ == ROUNDS // 4:  # warmed up: allocators and caches at their working size
                warm = _threads_and_fds()
            heap_by_round.append(_heap_in_use())
            rss_by_round.append(_rss())
        threads, fds = _threads_and_fds()
        # no leak over the rounds: the fds of the first, threads for at most
        # the actors' runs and trio's spare worker threads (or what trio's
        # thread cache still held from an earlier test), and the floor of the
        # heap in use in the last quarter of the rounds within 8 MiB of that
        # of the second (a leak raises the floor; a request's own buffers,
        # such as ngram-mod's 16 MiB table, come and go)
        assert fds == warm[1] and threads <= max(warm[0], 1 + SIZE + 2)
        quarter = ROUNDS // 4
        early, late = min(heap_by_round[quarter:2 * quarter]), min(heap_by_round[-quarter:])
        assert late - early < 8 * 1024, (early, late)
        # and what the allocator keeps resident stays bounded too: within four
        # ngram-mod tables (freed tables once kept 800 MB resident in 50 rounds)
        early, late = min(rss_by_round[quarter:2 * quarter]), min(rss_by_round[-quarter:])
        assert late - early < 64 * 1024, (early, late)


async def test_a_reader_that_stops_pauses_only_its_own_sequence(tiny_target):  # noqa: F811
    prompts = _prompts(tiny_target, 3, seed=5)
    async with _open(tiny_target, "none", 3, stream_buffer=1) as pool:
        session = pool.actors[0].session
        async with pool.stream_events(prompts[0], max_tokens=64, temp=0.0) as slow:
            await slow.__anext__()  # read one batch, then stop reading
            slow_actor = next(a for a in pool.actors if a.busy)
            start_steps = session.steps()
            others = [await _collect(pool, p, max_tokens=48, temp=0.0) for p in prompts[1:]]
            assert all(len(t) == 48 for t, _ in others)
            # the others ran 96 steps (spec none: one token each); the paused one
            # made at most the batches its channel holds, plus the one in flight
            assert session.steps() - start_steps >= 96
            assert slow_actor.session.last_stats().tokens_emitted <= 4
            rest = [ev.id async for ev in slow if isinstance(ev, Token)]
        assert len(rest) >= 60  # resumed when read again, to its end


async def test_each_requests_statistics_count_its_own_tokens(tiny_target):  # noqa: F811
    prompts = _prompts(tiny_target, 4, seed=9)
    results: dict[int, tuple[list[int], Any]] = {}
    async with _open(tiny_target, "ngram-simple", 4) as pool:

        async def one(i: int) -> None:
            results[i] = await _collect(pool, prompts[i], max_tokens=8 * (i + 1), temp=0.0)

        async with trio.open_nursery() as nursery:
            for i in range(4):
                nursery.start_soon(one, i)
        for i, (tokens, terminal) in results.items():
            s = terminal.stats
            assert s.tokens_emitted == len(tokens)
            assert s.prompt_tokens == len(prompts[i])
            assert s.requests == 1 and s.drafts_accepted <= s.drafts_generated
        total = pool.stats()
        assert total.tokens_emitted == sum(len(t) for t, _ in results.values())
        assert total.requests == 4


async def test_each_actor_of_a_batched_pool_counts_and_prints_its_own_sequence(tiny_target, capfd):  # noqa: F811
    # issue 47: slot 0 was the session's own state, and every actor of a
    # batched pool printed slot 0's drafters and prefix cache as its own
    prompts = _prompts(tiny_target, 2, seed=11)
    async with open_pool(tiny_target, size=2, spec="auto", n_ctx=N_CTX, n_batch=64, n_ubatch=64,
                         n_threads=1) as pool:
        first, second = pool.actors
        await _collect(first, prompts[0], max_tokens=8, temp=0.0)
        for _ in range(2):  # the repeat reuses its prefix and drafts from the cross-request memory
            await _collect(second, prompts[1] * 3, max_tokens=40, temp=0.0)
        stats = [actor.stats() for actor in pool.actors]
        assert [s.requests for s in stats] == [1, 2] and stats[0].drafters != stats[1].drafters
        total = pool.stats()
        assert (total.requests, total.tokens_emitted) == (3, sum(s.tokens_emitted for s in stats))
        # the shared session, asked without a sequence, sums its sequences as the pool does its actors
        shared = first.session._session
        assert shared.stats() == total and shared.stats(1) == stats[1]
        usages = [shared.prefix_cache_usage(seq) for seq in (0, 1)]
        assert usages[1].tokens > 0 and shared.prefix_cache_usage().tokens == usages[0].tokens + usages[1].tokens
        for actor, snap in zip(pool.actors, stats):
            capfd.readouterr()
            actor.print_stats()
            err = capfd.readouterr().err
            rows = re.findall(r"^  (\S+) +(\d+) +(\d+) +(\d+)$", err, re.M)
            assert rows == [(d.name, str(d.steps), str(d.drafted), str(d.accepted)) for d in snap.drafters], err
            assert f"{snap.prompt_reused} of {snap.prompt_tokens} prompt tokens reused" in err, err


def test_every_spec_batches(hybrid_model, hybrid_model_without_mtp, tiny_target, tiny_draft, tiny_dflash):  # noqa: F811
    assert can_batch(tiny_target, "auto") and can_batch(tiny_target, "ngram-mod")
    # recurrent and hybrid targets batch (decision 0061), draft contexts too (decision 0069)
    assert can_batch(hybrid_model, "none") and can_batch(hybrid_model, "ngram-simple")
    assert can_batch(hybrid_model_without_mtp, "auto") and can_batch(hybrid_model, "auto")
    assert can_batch(tiny_target, spec_actor.Spec("dflash", n_draft=3, draft_model=tiny_dflash))
    assert not can_batch(tiny_target, "no-such-spec")
    draft_simple = spec_actor.Spec("draft-simple", draft_model=tiny_draft)
    assert can_batch(tiny_target, draft_simple)
    with Session(tiny_target, spec=draft_simple, n_ctx=N_CTX, n_seq=2) as session:
        assert session.n_seq == 2


def test_only_decodes_without_a_prompt_chunk_price_auto_steps(gemma):
    # A prompt token costs about half a verified one (no output row), which
    # the step-cost table cannot price: a decode that holds another
    # sequence's prompt chunk must not move the cost auto prices drafts by.
    from spec_actor.nif import testing as nt

    story = "Write a short story about a lighthouse keeper and a storm."
    counting = "Count from one to five hundred in words: one, two, three, four, five, six,"
    long_prompt = " ".join(f"Line {i}: the ledger lists order {i * 7} as shipped." for i in range(40))
    with Session(gemma, spec="auto", n_ctx=2048, n_seq=2, n_threads=1) as session:
        handle = session._handle
        # alone, every verified step prices: all but the first token's, which came from
        # the prompt's own decode (decision 0080)
        before = nt.auto_priced_steps(handle)
        alone = session.run(story, seq=0, max_tokens=16, temp=0.0)
        assert nt.auto_priced_steps(handle) - before == alone.stats.iters - 1
        # Beside another sequence's prefill, the steps that held its chunks do not. The
        # decoding run goes on until the other run has returned and it has had two more
        # steps, then stops itself: whatever the threads' timing, it decodes beside the
        # other's prompt and, at least once, alone (its events come within its steps, so
        # its second step after the other returned began after that).
        decoding, other_returned = threading.Event(), threading.Event()
        steps_after: list[int] = []
        results: list[spec_actor.RunResult] = []

        def on_long(events: list[Any]) -> bool:
            decoding.set()
            if other_returned.is_set():
                steps_after.append(len(events))
            return len(steps_after) < 2

        # the budget outlasts the other's prefill, cut into chunks of 16 tokens or more
        long_run = threading.Thread(target=lambda: results.append(session.run(
            counting, seq=0, max_tokens=1024, temp=0.0, on_events=on_long)))
        before = nt.auto_priced_steps(handle)
        long_run.start()
        try:
            assert decoding.wait(30)
            other = session.run(long_prompt, seq=1, max_tokens=2, temp=0.0)
        finally:
            other_returned.set()
            long_run.join()
        priced = nt.auto_priced_steps(handle) - before
    long = results[0]
    assert other.status in ("done", "eog") and long.status == "stopped", (other.status, long.status)
    # unpriced: the first token's step and every step that held a chunk of the other's prompt
    assert 0 < priced < long.stats.iters - 1, (priced, long.stats.iters)


def test_a_request_returns_within_a_step_of_its_end_while_others_decode(gemma):
    # The callers take turns running steps; one whose request ended must not
    # wait for a moment without steps, which another caller's steady decoding
    # never leaves (it waited for the whole of the other request before).
    # Gemma's steps are long next to the Python that a return goes through.
    decoding = threading.Event()
    ended_at: list[int] = []
    with Session(gemma, spec="none", n_ctx=N_CTX, n_seq=2, n_threads=1) as session:

        def on_short(events: list[Any]) -> bool:
            if any(isinstance(ev, (Done, Eog)) for ev in events):
                ended_at.append(session.steps())
            return True

        counting = "Count from one to five hundred in words: one, two, three, four, five, six,"
        long_run = threading.Thread(target=session.run, args=(counting,), kwargs={
            "seq": 0, "max_tokens": N_CTX - 8, "temp": 0.0, "on_events": lambda _: decoding.set() or True})
        long_run.start()
        try:
            assert decoding.wait(30)
            session.run("The capital of France is", seq=1, max_tokens=2, temp=0.0, on_events=on_short)
            returned_at = session.steps()
            assert long_run.is_alive()  # the other request still decodes
        finally:
            session.cancel(0)
            long_run.join()
    assert ended_at and returned_at - ended_at[0] <= 2
