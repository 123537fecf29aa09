"""The inference gateway's gauges in ``/metrics``: requests waiting and running, KV-cache utilization.

An endpoint picker of the Gateway API Inference Extension routes on these
three gauges (docs/deployment.md, "Kubernetes"). The KV-cache utilization is
checked against the pool's own cell counts (`ActorPool.kv_cells`), and those
against what the requests decoded.
"""

from __future__ import annotations

import pytest
import trio

from serve_helpers import CTX, http, metric, metrics, serving, start_cli_server
from tiny_model_fixtures import tiny_paths, tiny_target  # noqa: F401  (fixtures)

from spec_actor.serve._metrics import VLLM_GAUGES

STORY = "Once upon a time, in a small village by the sea, there lived an old fisherman who"


def _prompt(n: int, offset: int, n_vocab: int) -> list[int]:
    """n token ids, none of them special (ids 3 and up), distinct from another offset's from the first."""
    return [3 + (offset + 7 * i) % (n_vocab - 3) for i in range(n)]


def _usage(values: dict) -> float:
    return metric(values, "kv_cache_usage_perc")


async def test_running_and_waiting_count_requests_and_the_cache_fills_while_they_run(gemma):
    async with serving(gemma, pool=2, max_queue=4) as server, http(server) as client:
        idle = await metrics(client)
        assert (metric(idle, "num_requests_running"), metric(idle, "num_requests_waiting"), _usage(idle)) == (0, 0, 0)
        seen: list[dict] = []
        started = [trio.Event(), trio.Event()]
        body = {"prompt": STORY, "max_tokens": 96, "temperature": 0, "stream": True}

        async def stream(i: int) -> None:
            async with client.stream("POST", "/v1/completions", json=body) as response:
                async for line in response.aiter_lines():
                    if line.startswith("data: {"):
                        started[i].set()

        async def queued() -> None:
            response = await client.post("/v1/completions", json={"prompt": STORY, "max_tokens": 4, "temperature": 0})
            assert response.status_code == 200

        async with trio.open_nursery() as nursery:
            nursery.start_soon(stream, 0)
            nursery.start_soon(stream, 1)
            for event in started:
                await event.wait()
            nursery.start_soon(queued)  # both actors busy: it waits in a queue
            with trio.fail_after(60):
                while True:
                    seen.append(values := await metrics(client))
                    if metric(values, "num_requests_waiting") == 1:
                        break
                    await trio.sleep(0.005)
        with trio.fail_after(30):  # an actor is idle once its response has gone out, which the client can outrun
            while metric(after := await metrics(client), "num_requests_running") > 0:
                await trio.sleep(0.005)
    both = [m for m in seen if metric(m, "num_requests_running") == 2]
    assert both, "no scrape saw the two streams running"
    assert metric(seen[-1], "num_requests_running") == 2  # the third waited while both ran
    for values in seen:
        assert metric(values, "num_requests_running") + metric(values, "num_requests_waiting") <= 3
        assert 0 < _usage(values) <= 1  # both prompts are in the cache from their first token on
    assert (metric(after, "num_requests_running"), metric(after, "num_requests_waiting")) == (0, 0)


async def test_kv_usage_follows_the_cells_the_requests_hold(tiny_target):
    n_vocab = tiny_target.info.n_vocab
    async with serving(tiny_target, pool=2) as server, http(server) as client:
        pool = server.pool
        held, available = pool.kv_cells()
        assert (held, available) == (0, 2 * CTX)  # each sequence of the batched pool may hold n_ctx cells
        expected = 0
        usages = [_usage(await metrics(client))]
        for n_prompt in (20, 300):  # a short prompt on one actor, a long one on the other
            reply = await client.post("/v1/completions", json={
                "prompt": _prompt(n_prompt, n_prompt, n_vocab), "max_tokens": 8, "temperature": 0})
            choice, usage = reply.json()["choices"][0], reply.json()["usage"]
            assert usage["prompt_tokens"] == n_prompt
            # the prefix cache keeps every decoded token: the prompt and the reply but its last
            # token, which was sampled and never decoded (unless an end of generation came after it)
            expected += n_prompt + usage["completion_tokens"] - (choice["finish_reason"] == "length")
            values = await metrics(client)
            assert pool.kv_cells() == (expected, available)
            assert _usage(values) == pytest.approx(expected / available)
            usages.append(_usage(values))
        assert usages[0] < usages[1] < usages[2] and usages[2] - usages[1] > 0.25  # the long prompt's ~300 cells
        # a request as long as the context allows: the metric stays within [0, 1]
        reply = await client.post("/v1/completions", json={
            "prompt": _prompt(CTX - 9, 1, n_vocab), "max_tokens": 8, "temperature": 0})
        assert reply.status_code == 200, reply.text
        full = await metrics(client)
        held, _ = pool.kv_cells()
        assert _usage(full) == pytest.approx(held / available) and 0 < _usage(full) <= 1
        assert held <= available
        pool.forget()  # the kept prefixes are dropped: their cells are free
        assert _usage(await metrics(client)) == 0 and pool.kv_cells() == (0, available)


async def test_vllm_names_repeat_the_gateway_gauges_only_when_asked(tiny_target):
    async with serving(tiny_target, pool=2, vllm_metric_names=True) as server, http(server) as client:
        await client.post("/v1/completions", json={"prompt": [5, 6, 7, 8], "max_tokens": 4, "temperature": 0})
        values = await metrics(client)
    for name in VLLM_GAUGES:
        assert values[(f"vllm:{name}", ())] == metric(values, name)
    assert values[("vllm:kv_cache_usage_perc", ())] > 0
    assert not any(sample.startswith("vllm:") and sample.removeprefix("vllm:") not in VLLM_GAUGES
                   for sample, _ in values)
    async with serving(tiny_target) as server, http(server) as client:
        assert not any(sample.startswith("vllm:") for sample, _ in await metrics(client))


def test_the_cli_flag_exports_the_vllm_names():
    import httpx

    proc, url = start_cli_server("--metrics-vllm-names")
    try:
        text = httpx.get(f"{url}/metrics", timeout=60).text
    finally:
        proc.terminate()
        proc.wait(60)
    for name in VLLM_GAUGES:
        assert f"\nvllm:{name}{{" in text and f"\nspec_actor:{name}{{" in text
