"""Requests that end early: a client hanging up mid-stream or during a long prefill, and shutdown.

How fast the actor becomes idle is measured by the server (`Cancellation`,
and the ``disconnect_to_idle_seconds`` histogram) and reported by
bench/bench_serve.py; the tests assert what does not depend on the machine's
load (docs/decisions/0017): the native loop stopped within a loop step of the
cancel (or before the prefill ended), the actor is idle, the next request is
served and equals a fresh actor's output.
"""

from __future__ import annotations

import functools

import httpx
import trio
from actor_fixtures import QUESTION, STORY, greedy_after, long_prompt
from serve_helpers import CTX, http, metric, metrics, serving, sse_data, wait_for


STEP_SLACK = 2
"""Tokens a plain (non-speculative) loop may add after the cancel: the step that ends while the
flag is being set, and the one it was in."""


async def test_hangup_mid_stream_stops_the_generation(gemma):
    # the server's actor (plain, one thread) after a request on STORY that ran to its end
    expected = await greedy_after(gemma, STORY, QUESTION, 6, n_ctx=CTX, n_threads=1)
    async with serving(gemma) as server, http(server) as client:
        actor = server.pool.actors[0]
        body = {"prompt": STORY, "max_tokens": 400, "temperature": 0, "stream": True}
        async with client.stream("POST", "/v1/completions", json=body) as response:
            got = []
            async for line in response.aiter_lines():
                got += sse_data([line])
                if len(got) == 3:
                    break  # leaving the block closes the connection mid-stream
        await wait_for(lambda: server.state.cancellations)
        record = server.state.cancellations[-1]
        assert record.reason == "hangup" and not actor.busy and not actor.session.last_stats().running
        assert 3 <= record.tokens_before <= record.tokens_after <= record.tokens_before + STEP_SLACK
        assert actor.session.last_stats().tokens_emitted == record.tokens_after < 400
        assert 0 <= record.seconds_to_idle
        values = await metrics(client)
        assert metric(values, "disconnect_to_idle_seconds_count") == 1
        assert metric(values, "request_success_total", finished_reason="abort") == 1
        after = await client.post("/v1/completions", json={"prompt": QUESTION, "max_tokens": 6, "temperature": 0})
    assert after.json()["choices"][0]["text"] == expected


async def test_hangup_during_the_prefill_cuts_it_short(gemma):
    prompt = long_prompt(gemma, 1500)
    async with serving(gemma, n_ctx=2048, n_threads=2) as server, http(server) as client:
        actor = server.pool.actors[0]
        body = {"prompt": prompt, "max_tokens": 4, "temperature": 0, "stream": True}
        async with trio.open_nursery() as nursery:
            nursery.start_soon(functools.partial(client.post, "/v1/completions", json=body))
            await wait_for(lambda: actor.busy)
            nursery.cancel_scope.cancel()  # the client gives up before its first token
        await wait_for(lambda: server.state.cancellations)
        record = server.state.cancellations[-1]
        assert record.reason == "hangup" and not actor.busy
        # No token, and no prefill time: the prefill stopped before its end.
        assert record.tokens_after == 0 and record.stats.timing_us.prefill == 0
        full = await client.post("/v1/completions", json=body | {"stream": False, "max_tokens": 1})
        assert full.status_code == 200 and full.json()["usage"]["prompt_tokens"] == len(gemma.tokenizer.encode(prompt))
        assert actor.session.last_stats().timing_us.prefill > 0  # a prefill that ran to its end counts its time


async def test_shutdown_ends_streams_cleanly_and_refuses_the_rest(gemma):
    async with serving(gemma, max_queue=2) as server, http(server) as client:
        actor = server.pool.actors[0]
        queued: list[httpx.Response] = []

        async def wait_in_queue() -> None:
            queued.append(await client.post("/v1/completions", json={"prompt": QUESTION, "max_tokens": 4}))

        body = {"prompt": STORY, "max_tokens": 400, "temperature": 0, "stream": True}
        async with client.stream("POST", "/v1/completions", json=body) as response, trio.open_nursery() as nursery:
            lines = response.aiter_lines()
            first = [line async for line in _until_data(lines)]
            nursery.start_soon(wait_in_queue)
            await wait_for(lambda: actor.queued == 1)
            server.stop()
            rest = sse_data([line async for line in lines])  # the stream ends: no exception
        assert sse_data(first)[0]["choices"][0]["text"]
        assert rest[-1] == "[DONE]" and rest[-2]["error"]["code"] == "shutting_down"
        assert all("choices" in chunk for chunk in rest[:-2])
        assert queued[0].status_code == 503 and queued[0].json()["error"]["code"] == "shutting_down"
        assert [r.reason for r in server.state.cancellations] == ["shutdown", "shutdown"]

        async def refused() -> bool:
            try:
                await client.get("/health", headers={"connection": "close"})
            except httpx.ConnectError:
                return True
            return False

        with trio.fail_after(30):
            while not await refused():  # the listener closes
                await trio.sleep(0.01)
    assert server.pool.closed


async def _until_data(lines):
    async for line in lines:
        yield line
        if line.startswith("data: "):
            return
