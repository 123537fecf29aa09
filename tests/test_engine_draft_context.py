"""Specs with a draft context in the batched engine (docs/decisions/0069, 0070).

A draft model, EAGLE-3, DFlash and MTP (fixed, and as auto's model arm on
the hybrid it was built for) run a pool's requests as the sequences of one
session: one draft context holds every sequence, and one common_speculative
drafts for each and reads each decoded batch once. Every request must give
exactly what it gives alone on a plain session (float32 tiny models, greedy),
and the model drafter must really draft in the batch: its drafts (accepted
ones, where its random weights get any accepted) are counted from each
request's own statistics.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
import trio
from greedy_helpers import first_difference, repeated_phrase_prompts, tie_free_prompts
from step_costs import CHEAP_DRAFTS_US
from tiny_model_fixtures import (  # noqa: F401
    hybrid_model,
    tiny_dflash,
    tiny_draft,
    tiny_eagle3,
    tiny_paths,
    tiny_target,
)

import spec_actor
from spec_actor import Done, Eog, Error, Session, Spec, Token
from spec_actor._pool import open_pool
from spec_actor._session import can_batch
from spec_actor.nif import testing as nt

N_CTX = 256
N = 24


def _plain(model: spec_actor.Model, prompt: list[int], **options: Any) -> list[int]:
    """The request's greedy tokens on a fresh plain session of its own."""
    with Session(model, spec="none", n_ctx=N_CTX, prefix_cache=False, n_threads=1) as session:
        return list(session.run(prompt, max_tokens=N, temp=0.0, **options).tokens)


async def _collect(pool: Any, prompt: list[int]) -> tuple[list[int], list[Any]]:
    """A request's token ids and all its events."""
    tokens: list[int] = []
    events: list[Any] = []
    async with pool.stream_events(prompt, max_tokens=N, temp=0.0) as stream:
        async for ev in stream:
            events.append(ev)
            if isinstance(ev, Token) and ev.id >= 0:
                tokens.append(ev.id)
    return tokens, events


async def _all_at_once(pool: Any, prompts: list[list[int]]) -> list[tuple[list[int], list[Any]]]:
    got: dict[int, tuple[list[int], list[Any]]] = {}

    async def one(i: int) -> None:
        got[i] = await _collect(pool, prompts[i])

    async with trio.open_nursery() as nursery:
        for i in range(len(prompts)):
            nursery.start_soon(one, i)
    return [got[i] for i in range(len(prompts))]


def _spec(request: pytest.FixtureRequest, name: str) -> tuple[spec_actor.Model, Spec | str, str]:
    """(target, spec, the drafter whose accepted drafts the batch must show)."""
    if name == "draft-simple":
        return request.getfixturevalue("tiny_target"), Spec("draft-simple", n_draft=4,
                                                            draft_model=request.getfixturevalue("tiny_draft")), name
    if name == "eagle3":
        return request.getfixturevalue("tiny_target"), Spec("eagle3", n_draft=3,
                                                            draft_model=request.getfixturevalue("tiny_eagle3")), \
            "draft-eagle3"
    if name == "dflash":
        return request.getfixturevalue("tiny_target"), Spec("dflash", n_draft=3,
                                                            draft_model=request.getfixturevalue("tiny_dflash")), \
            "draft-dflash"
    if name == "auto-draft":  # auto's lazy draft-model arm: each sequence catches its own cells up
        # the target drafts for itself: a draft from a context that caught up exactly is accepted whole
        target = request.getfixturevalue("tiny_target")
        return target, Spec("auto", draft_model=target), "draft-simple"
    if name == "mtp-hybrid":
        return request.getfixturevalue("hybrid_model"), Spec("mtp", n_draft=3), "draft-mtp"
    return request.getfixturevalue("hybrid_model"), "auto", "draft-mtp"  # auto on the hybrid: its MTP arm


@pytest.mark.parametrize("name", ["draft-simple", "eagle3", "dflash", "auto-draft", "mtp-hybrid", "auto-hybrid"])
async def test_eight_requests_share_one_draft_context_and_equal_their_lone_plain_runs(request, name):
    model, spec, drafter = _spec(request, name)
    assert can_batch(model, spec)
    # auto's lazy arm drafts on merit or on its slot's every 32nd step, which one request of N tokens
    # may not reach: three waves of the eight requests reach it on the slots the cheap arms did not serve
    waves = 3 if name == "auto-draft" else 1
    prompts = tie_free_prompts(model, 8, seed=41, n_tokens=N)
    expected = [_plain(model, p) for p in prompts] * waves
    results = []
    async with open_pool(model, size=8, spec=spec, n_ctx=N_CTX, n_batch=64, n_ubatch=64, memory=0,
                         n_threads=1) as pool:
        assert pool.batched
        session = pool.actors[0].session
        if isinstance(spec, str) or spec.type == "auto":  # what auto drafts must not follow the machine's load
            nt.fix_step_cost_table(session._session._handle, CHEAP_DRAFTS_US)
        for _ in range(waves):
            results += await _all_at_once(pool, prompts)
        steps = session.steps()
    drafted = accepted = 0
    for i, (tokens, events) in enumerate(results):
        assert isinstance(events[-1], (Done, Eog)), events[-1]
        assert tokens == expected[i], f"request {i} differs at {first_difference(tokens, expected[i])}"
        drafted += sum(d.drafted for d in events[-1].stats.drafters if d.name == drafter)
        accepted += sum(d.accepted for d in events[-1].stats.drafters if d.name == drafter)
    # the tiny DFlash drafter's random block is (almost) never accepted; the others' drafts are
    assert drafted > 0 and (accepted > 0 or name == "dflash"), (drafter, drafted, accepted)
    if name == "auto-draft":  # a catch-up that skipped or repeated a position would draft something else
        assert accepted == drafted, (drafted, accepted)
    # one decode served several sequences: fewer steps than tokens made
    assert steps < sum(len(t) for t in expected) / 2


async def test_a_cancelled_sequence_leaves_the_shared_draft_context_exact_for_the_others(hybrid_model):  # noqa: F811
    """Cancel one MTP sequence of four at random points, ten times: the others' outputs, and the victim's
    own next request on its slot (its draft-context cells freed or kept with its prefix), stay exact."""
    rng = random.Random(3)
    prompts = repeated_phrase_prompts(hybrid_model, 4, seed=17)
    prompts[3] = (prompts[3] * 10)[:150]  # the victim: a long prompt, prefilled over several steps
    expected = [_plain(hybrid_model, p) for p in prompts]
    async with open_pool(hybrid_model, size=4, spec=Spec("mtp", n_draft=3), n_ctx=N_CTX, n_batch=64,
                         n_ubatch=64, memory=0, n_threads=1, stream_buffer=1) as pool:
        assert pool.batched
        for round_ in range(10):
            after = rng.randrange(0, 6)  # 0: during its prefill
            got: dict[int, list[int]] = {}

            async def victim() -> None:
                async with pool.stream_events(prompts[3], max_tokens=200, temp=0.0) as events:
                    n = 0
                    async for ev in events:
                        n += isinstance(ev, Token)
                        if n >= after:
                            return

            async def other(i: int) -> None:
                got[i], _ = await _collect(pool, prompts[i])

            async with trio.open_nursery() as nursery:
                for i in range(3):
                    nursery.start_soon(other, i)
                await trio.sleep(0)
                nursery.start_soon(victim)
            for i in range(3):
                assert got[i] == expected[i], (round_, i, first_difference(got[i], expected[i]))
            again, events = await _collect(pool, prompts[3])
            assert again == expected[3], (round_, first_difference(again, expected[3]))
            assert not any(isinstance(ev, Error) for ev in events)

