"""Recurrent and hybrid targets in the batched engine (docs/decisions/0061).

The tiny qwen35 hybrid (a gated delta-net block and an attention block, F32)
runs a pool's requests as the sequences of one session: one recurrent state
per sequence, rolled back from that sequence's own checkpoints. Every
request must give exactly what it gives alone on a plain session.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import pytest
import trio
from greedy_helpers import first_difference, repeated_phrase_prompts
from tiny_model_fixtures import hybrid_model, hybrid_model_without_mtp, tiny_paths  # noqa: F401

import spec_actor
from spec_actor import Done, Eog, Session, Spec, Stats, Token
from spec_actor._pool import open_pool

N_CTX = 256
N = 24
# ngram-simple that drafts from the prompts' repeats (as in test_hybrid.py)
NGRAM = Spec("ngram-simple", n_draft=8, ngram_size_n=2, ngram_size_m=8)


def _alone(model: spec_actor.Model, spec: Spec | str, prompt: list[int], **options: Any) -> list[int]:
    """The request's tokens on a fresh plain session of its own."""
    with Session(model, spec=spec, n_ctx=N_CTX, prefix_cache=False, n_threads=1) as session:
        return list(session.run(prompt, **options).tokens)


def _open(model: spec_actor.Model, spec: Spec | str, size: int, **options: Any) -> Any:
    return open_pool(model, size=size, spec=spec, n_ctx=N_CTX, n_batch=64, n_ubatch=64, memory=0, n_threads=1,
                     **options)


async def _collect(pool: Any, prompt: list[int], **options: Any) -> tuple[list[int], list[Any]]:
    """A request's token ids and all its events."""
    tokens: list[int] = []
    events: list[Any] = []
    async with pool.stream_events(prompt, **options) as stream:
        async for ev in stream:
            events.append(ev)
            if isinstance(ev, Token) and ev.id >= 0:
                tokens.append(ev.id)
    return tokens, events


async def _all_at_once(pool: Any, prompts: list[list[int]], **options: Any) -> list[tuple[list[int], list[Any]]]:
    got: dict[int, tuple[list[int], list[Any]]] = {}

    async def one(i: int) -> None:
        got[i] = await _collect(pool, prompts[i], **options)

    async with trio.open_nursery() as nursery:
        for i in range(len(prompts)):
            nursery.start_soon(one, i)
    return [got[i] for i in range(len(prompts))]


def _model(request: pytest.FixtureRequest, spec: Spec | str) -> spec_actor.Model:
    # auto without a model drafter here; with the MTP layer loaded: tests/test_engine_draft_context.py
    return request.getfixturevalue("hybrid_model_without_mtp" if spec == "auto" else "hybrid_model")


def _options(i: int, sampled: bool) -> dict[str, Any]:
    """Request i's sampling: greedy, or (every fourth, where asked) sampled with its own seed."""
    if sampled and i % 4 == 3:
        return {"max_tokens": N, "temp": 0.9, "seed": 1000 + i}
    return {"max_tokens": N, "temp": 0.0}


# A rollback restores the sampler too, so a sampled request under none or
# ngram-simple (drafts from its own tokens) is fixed; auto's draft lengths
# follow measured times, so there only greedy output is.
@pytest.mark.parametrize(("spec", "sampled"), [("none", True), (NGRAM, True), ("auto", False)],
                         ids=["none", "ngram-simple", "auto"])
async def test_eight_hybrid_requests_in_one_batch_equal_their_lone_runs(request, spec, sampled):
    model = _model(request, spec)
    prompts = repeated_phrase_prompts(model, 8, seed=21)
    expected = [_alone(model, spec, p, **_options(i, sampled)) for i, p in enumerate(prompts)]
    async with _open(model, spec, 8) as pool:
        assert pool.batched
        session = pool.actors[0].session
        got: dict[int, tuple[list[int], list[Any]]] = {}

        async def one(i: int) -> None:
            got[i] = await _collect(pool, prompts[i], **_options(i, sampled))

        async with trio.open_nursery() as nursery:
            for i in range(8):
                nursery.start_soon(one, i)
        results = [got[i] for i in range(8)]
        steps = session.steps()
    for i, (tokens, events) in enumerate(results):
        assert isinstance(events[-1], (Done, Eog)), events[-1]
        assert tokens == expected[i], f"request {i} differs at {first_difference(tokens, expected[i])}"
    # one decode served several sequences: fewer steps than tokens made
    assert steps < sum(len(t) for t in expected) / 2


async def test_more_sequences_than_n_ubatch_split_into_equal_micro_batches(hybrid_model):  # noqa: F811
    """llama.cpp's split_equal may take n_ubatch + 1 one-token sequences into one micro-batch; it must
    neither abort nor change a token."""
    prompts = repeated_phrase_prompts(hybrid_model, 8, seed=34)
    expected = [_alone(hybrid_model, NGRAM, p, max_tokens=N, temp=0.0) for p in prompts]
    async with open_pool(hybrid_model, size=8, spec=NGRAM, n_ctx=N_CTX, n_batch=64, n_ubatch=2, memory=0,
                         n_threads=1) as pool:
        assert pool.batched
        results = await _all_at_once(pool, prompts, max_tokens=N, temp=0.0)
    for i, (tokens, _) in enumerate(results):
        assert tokens == expected[i], f"request {i} differs at {first_difference(tokens, expected[i])}"


def _steps(events: list[Any]) -> list[tuple[int, int, int]]:
    """(tokens, drafted, accepted) of each step, from a stream with emit_stats_every=1."""
    out = []
    tokens = drafted = accepted = 0
    for ev in events:
        if isinstance(ev, Token):
            tokens += 1
        elif isinstance(ev, (Stats, Done, Eog)):
            snap = ev.snapshot if isinstance(ev, Stats) else ev.stats
            out.append((tokens, snap.drafts_generated - drafted, snap.drafts_accepted - accepted))
            tokens, drafted, accepted = 0, snap.drafts_generated, snap.drafts_accepted
    return out


async def test_rejected_drafts_roll_back_each_sequences_own_state_in_the_batch(hybrid_model):  # noqa: F811
    """Every rejection on the hybrid restores that sequence's checkpoint (no n_rs_seq snapshots without
    a draft context) and re-verifies the accepted prefix plus the correction: that step emits
    accepted + 2 tokens, which no other path does."""
    prompts = repeated_phrase_prompts(hybrid_model, 6, seed=5)
    expected = [_alone(hybrid_model, NGRAM, p, max_tokens=N, temp=0.0) for p in prompts]
    async with _open(hybrid_model, NGRAM, 6) as pool:
        assert pool.batched
        results = await _all_at_once(pool, prompts, max_tokens=N, temp=0.0, emit_stats_every=1)
    rolled_back = 0
    for i, (tokens, events) in enumerate(results):
        assert tokens == expected[i], f"request {i} differs at {first_difference(tokens, expected[i])}"
        for n_tokens, drafted, accepted in _steps(events):
            assert n_tokens <= accepted + 2
            rolled_back += accepted < drafted and n_tokens == accepted + 2
    assert rolled_back >= 2, "no rejected draft went through the checkpoint rollback in the batch"


async def test_cancelling_one_hybrid_sequence_leaves_the_others_and_its_next_request_exact(hybrid_model):  # noqa: F811
    rng = random.Random(13)
    prompts = repeated_phrase_prompts(hybrid_model, 5, seed=8)
    prompts[4] = (prompts[4] * 10)[:150]  # the victim: a long prompt, prefilled over several steps
    expected = [_alone(hybrid_model, NGRAM, p, max_tokens=N, temp=0.0) for p in prompts]
    reused_after_decode = 0
    async with _open(hybrid_model, NGRAM, 4, stream_buffer=1) as pool:
        assert pool.batched
        for round_ in range(10):
            where = ["prefill", "decode", "queued"][round_ % 3] if round_ < 3 else rng.choice(["prefill", "decode"])
            after = rng.randrange(1, 6)
            got: dict[int, list[int]] = {}

            async def victim() -> None:
                async with pool.stream_events(prompts[4], max_tokens=200, temp=0.0) as events:
                    if where == "queued":
                        return  # left before an actor took it: all four are busy
                    n = 0
                    async for ev in events:
                        n += isinstance(ev, Token)
                        if where == "prefill" or n >= after:
                            return

            async def other(i: int) -> None:
                got[i], _ = await _collect(pool, prompts[i], max_tokens=N, temp=0.0)

            async with trio.open_nursery() as nursery:
                for i in range(4 if where == "queued" else 3):
                    nursery.start_soon(other, i)
                await trio.sleep(0)
                nursery.start_soon(victim)
            for i in range(4 if where == "queued" else 3):
                assert got[i] == expected[i], (round_, where, i)
            # the victim's prompt again: to the slot that holds it (prefix-affine routing), from its checkpoint
            again, events = await _collect(pool, prompts[4], max_tokens=N, temp=0.0)
            assert again == expected[4], (round_, where, first_difference(again, expected[4]))
            if where == "decode":
                assert events[-1].stats.prompt_reused == len(prompts[4]) - 1, round_
                reused_after_decode += 1
    assert reused_after_decode >= 1


def test_a_decode_cut_midway_on_one_sequence_leaves_the_others_state(hybrid_model, capfd):  # noqa: F811
    """A cancel aborts a decode only when its sequence is alone in it (Engine::sole). llama.cpp then drops
    that sequence's entries from the failed micro-batch on: the other sequence's recurrent state and cache
    must stay as they were, and the cut sequence must start clean (it trusts only its checkpoints)."""
    rng = random.Random(17)
    n_vocab = hybrid_model.info.n_vocab
    options = {"n_ctx": 2048, "n_batch": 2048, "n_ubatch": 256, "n_threads": 1}
    first = repeated_phrase_prompts(hybrid_model, 1, seed=40)[0]
    spec_actor.set_log_level(2)  # llama.cpp's warning on a cut decode tells that the cancel landed midway
    try:
        with Session(hybrid_model, spec=NGRAM, n_seq=2, **options) as session:
            kept = list(session.run(first, max_tokens=N, temp=0.0, seq=0).tokens)
            cut = None
            # a cancel before the run starts is cleared by it, one after its end does nothing: try again
            for delay in [0.001 * 2**k for k in range(8)] * 2:
                long_prompt = [rng.randrange(1, n_vocab) for _ in range(1500)]
                worker = threading.Thread(target=session.run, args=(long_prompt,),
                                          kwargs={"max_tokens": 200, "temp": 0.0, "seq": 1})
                worker.start()
                time.sleep(delay)
                session.cancel(1)
                worker.join(60)
                assert not worker.is_alive()
                session.clear_cancel(1)
                if "removing memory module entries for seq_id = 1" in capfd.readouterr().err:
                    cut = long_prompt
                    break
            assert cut is not None, "no cancel landed inside a decode"
            longer = first + kept + [5, 6, 7]
            again = session.run(longer, max_tokens=N, temp=0.0, seq=0)
            after_cut = list(session.run(cut, max_tokens=N, temp=0.0, seq=1).tokens)
    finally:
        spec_actor.set_log_level(1)
    assert again.stats.prompt_reused > len(first)  # seq 0 resumed from what it kept
    with Session(hybrid_model, spec=NGRAM, prefix_cache=False, **options) as alone:
        assert list(again.tokens) == list(alone.run(longer, max_tokens=N, temp=0.0).tokens)
        assert after_cut == list(alone.run(cut, max_tokens=N, temp=0.0).tokens)
