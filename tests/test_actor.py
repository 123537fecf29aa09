"""The generation actor on the real model: requests, cancellation, stats, backpressure."""

from __future__ import annotations

import os
import threading

import psutil
import pytest
import trio
from actor_fixtures import QUESTION, REPEATS, STORY, fresh_greedy, greedy_after, long_prompt, wait_idle

import spec_actor
from spec_actor import (
    ActorClosedError,
    ConfigError,
    Done,
    Eog,
    Error,
    GrammarError,
    PromptError,
    QueueFullError,
    SpecActorError,
    Stats,
    Token,
)
from spec_actor._actor import open_actor
from spec_actor._events import TERMINAL


def token_events(events):
    return [ev for ev in events if type(ev) is Token]


async def test_event_order_and_exactly_one_terminal(gemma):
    # plain decoding: the two runs must give the same tokens (under auto the
    # second run drafts from the first, and Gemma may part at a near-tie)
    async with open_actor(gemma, spec="none", n_ctx=256) as actor:
        async with actor.stream_events(STORY, max_tokens=12, emit_stats_every=4) as stream:
            events = [ev async for ev in stream]
        plain = [ev async for ev in actor.stream_events(STORY, max_tokens=12, emit_stats_every=4)]
    for evs in (events, plain):
        terminals = [ev for ev in evs if isinstance(ev, TERMINAL)]
        assert len(terminals) == 1 and evs[-1] is terminals[0]
        assert isinstance(evs[-1], Done) and evs[-1].reason == "max_tokens"
        assert len(token_events(evs)) == 12 == evs[-1].stats.tokens_emitted
        stats = [ev.snapshot for ev in evs if type(ev) is Stats]
        assert len(stats) >= 2
        assert [s.tokens_emitted for s in stats] == sorted(s.tokens_emitted for s in stats)
        # a Stats event comes after the tokens it counts
        for i, ev in enumerate(evs):
            if type(ev) is Stats:
                assert ev.snapshot.tokens_emitted <= len(token_events(evs[:i]))
    assert token_events(events) == token_events(plain)
    assert stream.stats().tokens_emitted == 12 and not stream.stats().running


async def test_stream_text_equals_generate_text_greedy(gemma):
    async with open_actor(gemma, spec="none", n_ctx=256) as actor:  # three runs compared: plain (see above)
        pieces = [piece async for piece in actor.stream(QUESTION, max_tokens=24)]
        text = await actor.generate(QUESTION, max_tokens=24)
        events = [ev async for ev in actor.stream_events(QUESTION, max_tokens=24)]
    assert all(pieces) and "".join(pieces) == text
    assert "".join(ev.text for ev in token_events(events)) == text
    assert len(text) > 20


async def test_max_tokens_is_exact(gemma):
    async with open_actor(gemma, n_ctx=256) as actor:
        for n in (1, 4, 16):
            events = [ev async for ev in actor.stream_events(STORY, max_tokens=n)]
            assert len(token_events(events)) == n
            assert isinstance(events[-1], Done) and events[-1].stats.tokens_emitted == n


async def test_cancel_mid_decode_leaves_the_actor_usable(gemma):
    async with open_actor(gemma, spec="none", n_ctx=512) as actor:  # compared with a plain actor after STORY
        got = []
        with trio.CancelScope() as scope:
            async for piece in actor.stream(STORY, max_tokens=400):
                got.append(piece)
                if len(got) == 3:  # mid-decode: the next wait for a token is cancelled
                    scope.cancel()
        assert scope.cancelled_caught and len(got) >= 3
        # the stream waited for the native loop: idle right away
        snap = actor.session.last_stats()
        assert not snap.running and not actor.busy
        assert len(got) <= snap.tokens_emitted < 400
        text = await actor.generate(QUESTION, max_tokens=16)
    # what the same actor gives after a request on STORY that ran to its end
    assert text == await greedy_after(gemma, STORY, QUESTION, 16, n_ctx=512)


async def test_cancel_mid_prefill_leaves_the_actor_usable(gemma):
    # how fast the cancel lands is a latency target: bench/, not here
    prompt = long_prompt(gemma, 3000)
    async with open_actor(gemma, spec="none", n_ctx=4096) as actor:  # compared with a fresh plain session
        got = []
        with trio.fail_after(120), trio.CancelScope() as scope:
            async with actor.stream(prompt, max_tokens=8) as stream:
                while not stream.stats().running:  # the native run started: it is in its prefill
                    await trio.sleep(0.001)
                assert stream.stats().tokens_emitted == 0
                scope.cancel()
                async for piece in stream:
                    got.append(piece)
        assert scope.cancelled_caught and not got
        snap = stream.stats()
        assert not snap.running and snap.tokens_emitted == 0
        text = await actor.generate(QUESTION, max_tokens=16)
    assert text == await fresh_greedy(gemma, QUESTION, 16, n_ctx=4096)


async def test_break_out_of_plain_async_for_stops_the_native_loop(gemma):
    async with open_actor(gemma, n_ctx=256) as actor:
        async for _piece in actor.stream(STORY, max_tokens=200):
            break
        await wait_idle(actor)
        emitted = actor.session.last_stats().tokens_emitted
        await trio.sleep(0.1)
        after = actor.session.last_stats()
        assert after.tokens_emitted == emitted < 200 and not after.running
        # an exception out of the loop body drops the stream the same way
        with pytest.raises(RuntimeError):
            async for _ev in actor.stream_events(STORY, max_tokens=200):
                raise RuntimeError("consumer failed")
        await wait_idle(actor)
        assert actor.session.last_stats().tokens_emitted < 200
        assert len(token_events([ev async for ev in actor.stream_events(STORY, max_tokens=5)])) == 5


async def _one_cycle(actor, i: int) -> None:
    kind = i % 4
    if kind == 0:  # break inside async with
        async with actor.stream(QUESTION, max_tokens=3) as text:
            async for _ in text:
                break
    elif kind == 1:  # a cancel scope
        with trio.CancelScope() as scope:
            async for _ in actor.stream(QUESTION, max_tokens=3):
                scope.cancel()
    elif kind == 2:  # explicit aclose
        events = actor.stream_events(QUESTION, max_tokens=3)
        async for ev in events:
            if type(ev) is Token:
                break
        await events.aclose()
    else:  # a plain async for dropped by break
        async for _ in actor.stream(QUESTION, max_tokens=3):
            break


async def test_200_start_cancel_cycles_leak_nothing(gemma):
    proc = psutil.Process()
    # one thread: each cycle is one short prefill and one token, and a second
    # native thread only adds contention on a loaded two-core machine
    async with open_actor(gemma, n_ctx=128, n_threads=1) as actor:
        for i in range(16):
            await _one_cycle(actor, i)
        await wait_idle(actor)
        await trio.sleep(0.05)
        threads, fds, rss = threading.active_count(), len(os.listdir("/proc/self/fd")), proc.memory_info().rss
        for i in range(200):
            await _one_cycle(actor, i)
        await wait_idle(actor)
        # trio keeps idle worker threads cached for a while (they exit after
        # 10 s idle): wait for the count to come back rather than expect it
        with trio.fail_after(60):
            while threading.active_count() > threads + 1:
                await trio.sleep(0.05)
        assert len(os.listdir("/proc/self/fd")) <= fds
        assert proc.memory_info().rss - rss < 64 * 2**20
        assert actor.stats().requests >= 216
        assert len(await actor.generate(QUESTION, max_tokens=4)) > 0


async def test_stats_polled_at_1khz_are_monotonic_and_consistent(gemma):
    async with open_actor(gemma, spec="ngram-mod", n_ctx=512) as actor:
        before = actor.stats()
        cumulative, own = [], []
        received = 0
        done = False
        seen_running = trio.Event()

        async def poll(stream):
            while not done:
                cumulative.append(actor.stats())
                own.append(stream.stats())
                if own[-1].running and own[-1].tokens_emitted > 0:
                    seen_running.set()
                await trio.sleep(0.001)

        async with trio.open_nursery() as nursery, actor.stream_events(REPEATS, max_tokens=64) as stream:
            nursery.start_soon(poll, stream)
            async for ev in stream:
                received += type(ev) is Token
                if received == 1:  # backpressure holds the run open until a poll saw it live
                    with trio.fail_after(60):
                        await seen_running.wait()
            done = True
        final = stream.stats()
    assert len(cumulative) >= 2
    fields = ("iters", "tokens_emitted", "drafts_generated", "drafts_accepted", "prompt_tokens")
    for series in (cumulative, own):
        for a, b in zip(series, series[1:]):
            assert all(getattr(a, f) <= getattr(b, f) for f in fields), (a, b)
        assert all(s.drafts_accepted <= s.drafts_generated for s in series)
    assert any(s.running and s.tokens_emitted > 0 and s.tokens_per_sec > 0 for s in own)
    assert final.tokens_emitted == received and not final.running
    assert final.drafts_generated > 0
    assert actor.stats().tokens_emitted - before.tokens_emitted == received


async def test_slow_consumer_pauses_the_loop_and_gets_everything(gemma):
    # plain decoding: one token per loop step, so the pause point is a count
    async with open_actor(gemma, spec="none", n_ctx=256, stream_buffer=4) as actor:
        fast = await actor.generate(STORY, max_tokens=40)
        pieces = []
        async with actor.stream(STORY, max_tokens=40) as text:
            pieces.append(await text.__anext__())
            # stop reading: the loop fills the buffer, then waits
            paused = 1 + 4 + 1  # read + buffered batches (one token each) + the one being handed over
            with trio.fail_after(60):
                while text.stats().tokens_emitted < paused:
                    await trio.sleep(0.005)
            for _ in range(20):  # and stays there, running, as long as nobody reads
                assert text.stats().tokens_emitted == paused and text.stats().running
                await trio.sleep(0.005)
            async for piece in text:
                pieces.append(piece)
                await trio.sleep(0)
    assert "".join(pieces) == fast


async def test_eight_concurrent_requests_complete_in_fifo_order(gemma):
    finished = []
    async with open_actor(gemma, n_ctx=128) as actor:

        async def one(i, task_status=trio.TASK_STATUS_IGNORED):
            async with actor.stream_events(f"{QUESTION} number {i}:", max_tokens=4) as stream:
                task_status.started()
                events = [ev async for ev in stream]
            assert isinstance(events[-1], (Done, Eog))
            finished.append(i)

        async with trio.open_nursery() as nursery:
            for i in range(8):
                await nursery.start(one, i)
    assert finished == list(range(8))


async def test_full_mailbox_refuses_at_once(gemma):
    async with open_actor(gemma, n_ctx=128, max_queue=1) as actor:
        async with actor.stream(STORY, max_tokens=64) as running:
            await running.__anext__()
            async with actor.stream(STORY, max_tokens=2) as queued:
                with pytest.raises(QueueFullError, match="max_queue"):
                    async with actor.stream(STORY, max_tokens=2):
                        pass
                assert actor.queued == 1
                await queued.aclose()
            assert actor.queued == 0
        assert len(await actor.generate(STORY, max_tokens=2)) > 0


async def test_bad_requests_raise_useful_errors_and_leave_the_actor_healthy(gemma):
    async with open_actor(gemma, n_ctx=128) as actor:
        with pytest.raises(PromptError, match="empty"):
            actor.stream("")
        with pytest.raises(PromptError, match="n_ctx"):
            await actor.generate("word " * 400)
        with pytest.raises(ConfigError, match="tempp"):
            actor.stream(STORY, tempp=0.5)
        with pytest.raises(ConfigError, match="top_p"):
            await actor.generate(STORY, top_p=2.0)
        with pytest.raises(ConfigError, match="max_tokens"):
            actor.stream_events(STORY, max_tokens=0)
        with pytest.raises(ConfigError, match="stop"):
            actor.stream(STORY, stop=[""])
        with pytest.raises(ConfigError, match="timeout"):
            actor.stream(STORY, timeout=-1)
        events = [ev async for ev in actor.stream_events(STORY, grammar="root ::= (", max_tokens=4)]
        assert isinstance(events[-1], Error) and events[-1].reason
        with pytest.raises(GrammarError):
            await actor.generate(STORY, grammar="root ::= (", max_tokens=4)
        assert len(await actor.generate(STORY, max_tokens=4)) > 0
    with pytest.raises(ConfigError, match="bogus"):
        async with open_actor(gemma, spec="bogus"):
            pass
    with pytest.raises(ConfigError, match="n_ctxx"):
        async with open_actor(gemma, n_ctxx=64):
            pass
    with pytest.raises(ConfigError, match="n_ctx"):
        async with open_actor(gemma, n_ctx=0):
            pass


async def test_errors_come_out_plain_not_in_exception_groups(gemma):
    with pytest.raises(ValueError, match="mine"):
        async with open_actor(gemma, n_ctx=64):
            raise ValueError("mine")
    with pytest.raises(PromptError):
        async with open_actor(gemma, n_ctx=64) as actor:
            await actor.generate("")
    with pytest.raises(spec_actor.SpecActorError):
        async with open_actor(gemma, n_ctx=64) as actor:
            await actor.generate("word " * 400)


async def test_closing_ends_running_and_queued_requests(gemma):
    outcomes = {}

    async def consume(name, stream):
        try:
            async for _ in stream:
                pass
        except SpecActorError as exc:
            outcomes[name] = exc

    async with trio.open_nursery() as nursery:
        async with open_actor(gemma, n_ctx=256) as actor:
            running = actor.stream(STORY, max_tokens=400)
            queued = actor.stream(STORY, max_tokens=400)
            with trio.fail_after(60):
                nursery.start_soon(consume, "running", running)
                while running.stats().tokens_emitted == 0:
                    await trio.sleep(0.005)
                nursery.start_soon(consume, "queued", queued)
                while actor.queued < 1:
                    await trio.sleep(0.005)
            assert actor.busy and actor.queued == 1
    assert isinstance(outcomes["running"], ActorClosedError)
    assert isinstance(outcomes["queued"], ActorClosedError)
    assert actor.closed and actor.stats().requests >= 1
    with pytest.raises(ActorClosedError):
        actor.stream(STORY)


async def test_print_stats_writes_llama_summary(gemma, capfd):
    async with open_actor(gemma, spec="ngram-mod", n_ctx=128) as actor:
        await actor.generate(REPEATS, max_tokens=8)
        actor.print_stats()
    assert capfd.readouterr().err.strip()


async def test_closing_while_the_reader_never_reads(gemma):
    async with open_actor(gemma, n_ctx=128, stream_buffer=1) as actor:
        stream = actor.stream_events(STORY, max_tokens=100)
        await stream.__aenter__()
        with trio.fail_after(20):
            while stream.stats().tokens_emitted < 1:
                await trio.sleep(0.01)
        await trio.sleep(0.1)
        assert actor.busy and stream.stats().tokens_emitted <= 2  # waiting for its reader
    events = [ev async for ev in stream]
    assert isinstance(events[-1], Error) and "closed" in events[-1].reason
    assert len(token_events(events)) >= 1


async def test_close_inside_the_block_ends_requests_and_refuses_new_ones(gemma):
    async with open_actor(gemma, n_ctx=256) as actor:
        async with actor.stream_events(STORY, max_tokens=400) as events:
            assert type(await events.__anext__()) is Token
            queued = actor.stream(STORY, max_tokens=4)
            await queued.__aenter__()
            assert actor.busy and actor.queued == 1
            actor.close()
            actor.close()  # idempotent
            rest = [ev async for ev in events]
        assert isinstance(rest[-1], Error) and "closed while this request was running" in rest[-1].reason
        assert isinstance(rest[-1].exception(), ActorClosedError)
        with pytest.raises(ActorClosedError, match="closed before this request started"):
            async for _ in queued:
                pass
        with pytest.raises(ActorClosedError):
            actor.stream(STORY)
        assert actor.closed and actor.queued == 0
    # The actor's task freed the session and kept its last statistics.
    assert actor.session.closed and actor.stats().requests == 1
