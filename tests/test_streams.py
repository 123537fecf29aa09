"""Event and text streams on the real model: stop strings, timeouts, closing."""

from __future__ import annotations

import pytest
import trio
from actor_fixtures import QUESTION, STORY, long_prompt, wait_idle

from spec_actor import Done, Error, GenerationTimeout, Token
from spec_actor._actor import open_actor


async def test_stop_string_ends_the_output_before_it(gemma):
    async with open_actor(gemma, spec="none", n_ctx=256) as actor:
        full = await actor.generate(STORY, max_tokens=40)
        stop = full[len(full) // 2: len(full) // 2 + 3]
        expected = full[: full.index(stop)]
        async with actor.stream_events(STORY, max_tokens=40, stop=[stop, "never appears"]) as events:
            evs = [ev async for ev in events]
        assert isinstance(evs[-1], Done) and (evs[-1].reason, evs[-1].stop) == ("stop", stop)
        assert "".join(ev.text for ev in evs if type(ev) is Token) == expected
        assert [ev for ev in evs if isinstance(ev, (Done, Error))] == [evs[-1]]
        assert await actor.generate(STORY, max_tokens=40, stop=stop) == expected
        # the run was cancelled: fewer tokens than the budget, and the actor idles
        assert events.stats().tokens_emitted < 40 and not actor.busy
        unmatched = [ev async for ev in actor.stream_events(STORY, max_tokens=40, stop="never appears")]
        assert (unmatched[-1].reason, unmatched[-1].stop) == ("max_tokens", "")
        assert "".join(ev.text for ev in unmatched if type(ev) is Token) == full


async def test_timeout_without_events_fails_the_request_and_cancels_it(gemma):
    prompt = long_prompt(gemma, 3000)
    async with open_actor(gemma, spec="none", n_ctx=4096) as actor:
        evs = [ev async for ev in actor.stream_events(prompt, max_tokens=4, timeout=0.1)]
        assert isinstance(evs[-1], Error) and "timed out" in evs[-1].reason
        assert not actor.busy and not actor.session.last_stats().running
        with pytest.raises(GenerationTimeout, match="timeout=0.1"):
            await actor.generate(prompt, max_tokens=4, timeout=0.1)
        # a generous timeout does not fire
        assert len(await actor.generate(QUESTION, max_tokens=8, timeout=30)) > 0


async def test_close_without_waiting_and_aclose_are_idempotent(gemma):
    async with open_actor(gemma, spec="none", n_ctx=256) as actor:
        stream = actor.stream(STORY, max_tokens=200)
        await stream.__anext__()
        stream.close()
        stream.close()
        await wait_idle(actor)
        assert stream.stats().tokens_emitted < 200
        with pytest.raises(StopAsyncIteration):
            await stream.__anext__()
        await stream.aclose()
        never_started = actor.stream(STORY)
        await never_started.aclose()
        assert never_started.stats().tokens_emitted == 0
        assert len(await actor.generate(STORY, max_tokens=3)) > 0


async def test_queued_request_cancelled_leaves_the_queue(gemma):
    async with open_actor(gemma, spec="none", n_ctx=256) as actor:
        async with actor.stream(STORY, max_tokens=100) as running:
            await running.__anext__()
            with trio.CancelScope() as scope:
                async with actor.stream(STORY, max_tokens=4) as queued:
                    assert actor.queued == 1
                    scope.cancel()  # while it waits behind the running request
                    async for _ in queued:
                        pass
            assert actor.queued == 0 and queued.stats().requests == 0


async def test_a_run_cancelled_from_outside_its_stream_ends_with_error(gemma):
    async with open_actor(gemma, spec="none", n_ctx=256) as actor:
        async with actor.stream_events(STORY, max_tokens=200) as events:
            got = [await events.__anext__()]
            actor.session.cancel()  # not through the stream
            got += [ev async for ev in events]
        assert isinstance(got[-1], Error) and "other than this stream" in got[-1].reason
        assert len(await actor.generate(STORY, max_tokens=3)) > 0
