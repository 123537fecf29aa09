"""A pool of actors on one model: routing, parallel streams, summed stats."""

from __future__ import annotations

import pytest
import trio
from actor_fixtures import QUESTION, STORY
from greedy_helpers import assert_equal_within_a_near_tie

from spec_actor import ActorClosedError, ConfigError, Done, Eog, Session, Token
from spec_actor._pool import open_pool


async def test_pool_of_two_runs_two_streams_at_once(gemma):
    # without the prefix cache: what an actor ran before must not change the batch shapes of the
    # prefill, where Gemma may part at a logit near-tie (decision 0031)
    async with open_pool(gemma, size=2, spec="none", n_ctx=256, prefix_cache=False) as pool:
        assert [a.session for a in pool.actors][0] is not pool.actors[1].session
        overlap = False
        texts = {}
        done = 0

        async def watch():
            nonlocal overlap
            while done < 2:
                overlap |= all(a.session.last_stats().running for a in pool.actors)
                await trio.sleep(0.002)

        async def ids(prompt):
            async with pool.stream_events(prompt, max_tokens=24) as events:
                return [ev.id async for ev in events if isinstance(ev, Token) and ev.id >= 0]

        async def one(name, prompt):
            nonlocal done
            texts[name] = await ids(prompt)
            done += 1

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch)
            nursery.start_soon(one, "story", STORY)
            nursery.start_soon(one, "question", QUESTION)
        assert overlap, "the two requests never ran at the same time"
        assert all(texts.values())
        assert [a.stats().requests for a in pool.actors] == [1, 1]
        total = pool.stats()
        assert total.requests == 2
        assert total.tokens_emitted == sum(a.stats().tokens_emitted for a in pool.actors) == 48
        # the same request on either actor gives the same greedy text
        assert await pool.generate(STORY, max_tokens=24) == await pool.generate(STORY, max_tokens=24)
        alone = await ids(STORY)
    # run beside another request (one decode for both) or alone: Gemma may part at a near-tie (decision 0031)
    with Session(gemma, spec="none", n_ctx=256, prefix_cache=False) as plain:
        assert_equal_within_a_near_tie(plain, STORY, texts["story"], alone)
    with pytest.raises(ActorClosedError):
        pool.stream(STORY)


async def test_pool_sends_requests_to_the_least_busy_actor(gemma):
    async with open_pool(gemma, size=2, n_ctx=128, n_threads=1) as pool:
        async with pool.stream(STORY, max_tokens=64) as first:
            await first.__anext__()
            busy = [a for a in pool.actors if a.busy]
            assert len(busy) == 1
            async with pool.stream(STORY, max_tokens=2) as second:
                text = "".join([piece async for piece in second])
            assert text and busy[0].stats().requests == 1


async def _turn(pool, prompt: str) -> tuple[str, object]:
    """One greedy request: its text and its final statistics."""
    async with pool.stream_events(prompt, max_tokens=8, temp=0.0) as events:
        evs = [ev async for ev in events]
    assert isinstance(evs[-1], (Done, Eog))
    return "".join(ev.text for ev in evs if isinstance(ev, Token)), evs[-1].stats


async def test_pool_returns_a_conversation_to_the_actor_that_keeps_it(gemma):
    """Each conversation's next turn goes to the idle actor holding its history (round robin would swap them)."""
    story = f"{STORY} {STORY.lower()} and his dog."
    question = f"{QUESTION} red, yellow and blue; the three secondary colors are"
    n_story, n_question = len(gemma.tokenizer.encode(story)), len(gemma.tokenizer.encode(question))
    async with open_pool(gemma, size=2, spec="none", n_ctx=256) as pool:
        a1, _ = await _turn(pool, story)
        b1, _ = await _turn(pool, question)
        _, b2 = await _turn(pool, question + b1 + " Then")
        _, a2 = await _turn(pool, story + a1 + " Then")
        assert [a.stats().requests for a in pool.actors] == [2, 2]
    # a turn on the other actor would reuse only what both conversations start with (BOS)
    assert b2.prompt_reused >= n_question - 2, b2
    assert a2.prompt_reused >= n_story - 2, a2


async def test_pool_rejects_bad_size(gemma):
    with pytest.raises(ConfigError, match="size"):
        async with open_pool(gemma, size=0):
            pass


async def test_pool_body_errors_come_out_plain(gemma):
    with pytest.raises(ValueError, match="mine"):
        async with open_pool(gemma, size=2, n_ctx=64):
            raise ValueError("mine")
