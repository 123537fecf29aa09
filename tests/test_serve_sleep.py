"""``spec-actor serve --sleep-idle-seconds``: the pool (and a model the server can load again) freed after idle
time, woken by the next request that needs the model (spec_actor/serve/_sleep.py, docs/decisions/0111).

Each test talks to a real server over HTTP with httpx. The server loads the
embedded Gemma again through a loader that counts its calls, so whether a
request woke the server is a count, not a timing. Expected texts come from
a fresh actor (`fresh_greedy`).
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import pytest
import trio
from actor_fixtures import QUESTION, fresh_greedy
from serve_helpers import (CLI, CTX, TESTS_DIR, TIMEOUT, error_of, http, metric, metrics, serving, start_cli_server,
                           subprocess_env, wait_for)

from spec_actor import ConfigError, Model, load_model
from spec_actor.serve import Server, open_server

IDLE = 0.5
"""Seconds without work before a test server sleeps."""
N_PREDICT = 8
COMPLETION = {"prompt": QUESTION, "n_predict": N_PREDICT, "temperature": 0}


class Loader:
    """Loads the embedded Gemma, counting the loads; `hold` makes the next loads wait until `release`."""

    def __init__(self) -> None:
        self.loads = 0
        self.fail_next = False
        self._gate = threading.Event()
        self._gate.set()

    def __call__(self) -> Model:
        self._gate.wait(timeout=120)
        self.loads += 1
        if self.fail_next:
            self.fail_next = False
            return load_model(Path(__file__).parent / "no-such-model.gguf")  # the native loader's own error
        return load_model()

    def hold(self) -> None:
        self._gate.clear()

    def release(self) -> None:
        self._gate.set()


async def asleep(server: Server) -> None:
    """Wait (with a deadline) until the server sleeps."""
    await wait_for(lambda: server.sleeping)


async def wake_held(server: Server, client: httpx.AsyncClient, loader: Loader, n: int,
                    meanwhile: Callable[[list[httpx.Response]], Awaitable[object]]
                    ) -> tuple[list[httpx.Response], object]:
    """Send ``n`` completions to the sleeping server while ``loader`` holds the load; once all ``n`` wait on
    it, run ``meanwhile(answers so far)``, then let the load go. Returns the answers and what ``meanwhile``
    returned."""
    loader.hold()
    answers: list[httpx.Response] = []

    async def ask() -> None:
        answers.append(await client.post("/completion", json=COMPLETION))

    async with trio.open_nursery() as nursery:
        for _ in range(n):
            nursery.start_soon(ask)
        await wait_for(lambda: server.state.keeper.waiting == n)
        result = await meanwhile(answers)
        loader.release()
    return answers, result


async def test_idle_server_sleeps_and_read_only_routes_answer_without_waking_it():
    loader, model = Loader(), load_model()
    async with serving(model, sleep_idle_seconds=IDLE, reload=loader) as server, http(server) as client:
        awake_props = (await client.get("/props")).json()
        await client.post("/completion", json=COMPLETION)
        await metrics(client)  # the scrape that starts a fresh throughput window
        awake_metrics = (await client.get("/metrics")).text
        await asleep(server)
        await wait_for(lambda: model.closed)  # the server owns a model it can load again: its weights go too
        answers = {path: await client.get(path) for path in ("/health", "/v1/health", "/props", "/models",
                                                             "/v1/models", "/metrics")}
        again = await client.get("/metrics")
        assert server.sleeping and loader.loads == 0
    assert all(r.status_code == 200 for r in answers.values()), {p: r.text for p, r in answers.items()}
    assert answers["/props"].json() == awake_props | {"is_sleeping": True} and awake_props["is_sleeping"] is False
    assert answers["/models"].json()["data"][0]["id"] == awake_props["model_alias"]
    # while asleep /metrics serves the figures taken as it fell asleep, an empty throughput window
    assert answers["/metrics"].text == awake_metrics == again.text


async def test_a_generation_wakes_it_and_answers_the_same_greedy_text(gemma):
    expected = await fresh_greedy(gemma, QUESTION, N_PREDICT, n_ctx=CTX, n_threads=1)
    loader = Loader()
    async with serving(load_model(), sleep_idle_seconds=IDLE, reload=loader) as server, http(server) as client:
        before = (await client.post("/completion", json=COMPLETION)).json()
        tokens_before = metric(await metrics(client), "generation_tokens_total")
        await asleep(server)
        after = await client.post("/completion", json=COMPLETION)
        awake, loads = not server.sleeping, loader.loads
        tokens_after = metric(await metrics(client), "generation_tokens_total")
        # a tokenizer route wakes it too
        await asleep(server)
        tokens = await client.post("/tokenize", json={"content": QUESTION})
        loads_after_tokenize = loader.loads
    assert before["content"] == expected
    assert after.status_code == 200 and after.json()["content"] == expected
    assert awake and loads == 1 and loads_after_tokenize == 2
    # the counters go on from the pool that slept: two generations of the same length
    assert tokens_after == 2 * tokens_before > 0
    assert tokens.status_code == 200 and tokens.json()["tokens"] == gemma.tokenizer.encode(QUESTION, add_special=False)


async def test_concurrent_requests_wake_it_with_one_load(gemma):
    expected = await fresh_greedy(gemma, QUESTION, N_PREDICT, n_ctx=CTX, n_threads=1)
    loader = Loader()
    async with serving(load_model(), sleep_idle_seconds=IDLE, reload=loader) as server, http(server) as client:
        await asleep(server)
        # all four wait on the one load, which runs in a thread: the server answers meanwhile, and counts them
        answers, waiting = await wake_held(server, client, loader, 4, lambda _: metrics(client))
    assert isinstance(waiting, dict) and metric(waiting, "num_requests_waiting") == 4
    assert loader.loads == 1
    assert [r.status_code for r in answers] == [200] * 4
    assert [r.json()["content"] for r in answers] == [expected] * 4


async def test_a_failed_load_is_a_503_and_the_next_request_loads_again(gemma):
    expected = await fresh_greedy(gemma, QUESTION, N_PREDICT, n_ctx=CTX, n_threads=1)
    loader = Loader()
    async with serving(load_model(), sleep_idle_seconds=IDLE, reload=loader) as server, http(server) as client:
        await asleep(server)
        loader.fail_next = True
        failed = await client.post("/completion", json=COMPLETION)
        health = await client.get("/health")
        still_asleep = server.sleeping
        retried = await client.post("/completion", json=COMPLETION)
    error = error_of(failed, 503)
    assert error["code"] == "model_reload_failed" and "no-such-model.gguf" in error["message"]
    assert health.status_code == 200 and still_asleep
    assert retried.status_code == 200 and retried.json()["content"] == expected
    assert loader.loads == 2


async def test_without_a_loader_only_the_pool_sleeps_and_the_callers_model_stays_open(gemma):
    expected = await fresh_greedy(gemma, QUESTION, N_PREDICT, n_ctx=CTX, n_threads=1)
    async with serving(gemma, sleep_idle_seconds=IDLE) as server, http(server) as client:
        await asleep(server)
        assert not gemma.closed
        after = await client.post("/completion", json=COMPLETION)
    assert after.status_code == 200 and after.json()["content"] == expected


async def test_closing_while_asleep_or_while_waking_leaks_no_threads_or_fds():
    threads, fds = threading.active_count(), len(os.listdir("/proc/self/fd"))
    for _ in range(2):
        # closed while asleep
        async with serving(load_model(), sleep_idle_seconds=IDLE, reload=Loader()) as server:
            await asleep(server)
        # closed while a request waits for the load: it gets the shutdown's 503
        loader = Loader()
        async with serving(load_model(), sleep_idle_seconds=IDLE, reload=loader) as server, http(server) as client:
            await asleep(server)

            async def stop(answers: list[httpx.Response]) -> None:
                server.stop()
                await wait_for(lambda: len(answers) == 1)  # the waiting request's answer, before the load ends

            answers, _ = await wake_held(server, client, loader, 1, stop)
            # then the load runs on, and the server closes what it loaded
        assert error_of(answers[0], 503)["code"] == "shutting_down"
        assert loader.loads == 1
    # trio keeps idle worker threads cached for a while (they exit after 10 s idle)
    with trio.fail_after(60):
        while threading.active_count() > threads + 1:
            await trio.sleep(0.05)
    assert len(os.listdir("/proc/self/fd")) <= fds


def test_the_cli_flag_puts_the_server_to_sleep_and_a_request_wakes_it():
    proc, url = start_cli_server("--sleep-idle-seconds", str(IDLE))
    try:
        deadline = time.monotonic() + TIMEOUT
        while not httpx.get(f"{url}/props", timeout=TIMEOUT).json()["is_sleeping"]:
            assert time.monotonic() < deadline, "the server did not fall asleep"
            time.sleep(0.05)
        woken = httpx.post(f"{url}/completion", json=COMPLETION, timeout=TIMEOUT)
    finally:
        proc.terminate()
        proc.wait(TIMEOUT)
    assert woken.status_code == 200 and woken.json()["tokens_predicted"] == N_PREDICT


@pytest.mark.parametrize("value", ["0", "-2", "inf"])
def test_the_cli_refuses_a_bad_idle_time_before_loading_the_model(value):
    done = subprocess.run([*CLI, "serve", "--sleep-idle-seconds", value], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=TIMEOUT, env=subprocess_env(), cwd=TESTS_DIR)
    assert done.returncode == 2 and "--sleep-idle-seconds" in done.stderr


async def test_open_server_refuses_a_bad_idle_time(gemma):
    for value in (0, -1, float("nan"), "1", True):
        with pytest.raises(ConfigError, match="sleep_idle_seconds"):
            async with open_server(gemma, port=0, sleep_idle_seconds=value):
                pass
