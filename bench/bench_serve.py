"""Benchmark ``spec-actor serve`` against llama.cpp's ``llama-server``: concurrent streaming clients.

    python bench/bench_serve.py [--clients 1 4 8] [--max-tokens 128] [--rounds 2] [--spec none]
                                [--json out.json] [--no-llama-server]

Both servers run as subprocesses on the embedded Gemma 3 270M, built from the
same llama.cpp source (bench/llama_server_build.py compiles llama-server once,
into the cache), with the same speculative type and the same CPU threads in
all: llama-server gets one slot per client and every core; spec-actor gets one
actor per client (``--pool``), the sequences of one batched session on every
core (decision 0050). For each client
count, every client streams ``--rounds`` greedy completions of its own story
prompt, one after the other. The table shows aggregate tokens/s (all tokens
over the wall time of the run) and each request's time to first token (TTFT)
at the 50th and 99th percentile.

Then the hang-up measurement of the issue: a client streams a ~3,000-token
prompt and hangs up 0.3 s into its prefill; at once another client sends a
short request. Shown: that request's TTFT as its client sees it (llama-server
finishes the abandoned prefill first) and, for spec-actor, the server's own
disconnect-to-idle time (from its /metrics).

Timings move with the machine: run it on an idle one, and compare the two
servers within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
import trio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from llama_server_build import build_llama_server  # noqa: E402

from spec_actor import default_model_path  # noqa: E402

N_CTX = 4096
STORY = "Once upon a time, in a small village by the sea, there lived an old fisherman named"
PARAGRAPH = ("The harbour was quiet in the early morning. Fishing boats rocked gently at their moorings, "
             "gulls circled above the grey water, and the smell of salt and tar hung in the cool air. ")
HANGUP_AFTER_S = 0.3
STARTUP_TIMEOUT_S = 180


@dataclass
class Row:
    server: str
    clients: int
    tokens: int
    seconds: float
    ttft_s: list[float]

    @property
    def tokens_per_sec(self) -> float:
        return self.tokens / self.seconds

    def percentile(self, q: float) -> float:
        xs = sorted(self.ttft_s)
        return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


@dataclass
class Hangup:
    server: str
    plain_ttft_s: float
    """The short request's TTFT on an idle server, for comparison."""
    next_ttft_s: float
    """Its TTFT right after a client left a long prefill."""
    disconnect_to_idle_s: float | None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running(cmd: list[str], port: int):
    """Start a server subprocess and wait for its /health; stop it with SIGINT afterwards."""
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{cmd[0]} exited: {proc.stderr.read()[-2000:]}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{cmd[0]} did not start in {STARTUP_TIMEOUT_S} s")
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.send_signal(2)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def spec_actor_cmd(port: int, clients: int, spec: str | None) -> list[str]:
    # the pool's requests are the sequences of one batched session (decision 0050): it gets every core
    threads = os.cpu_count() or 1
    cmd = [sys.executable, "-m", "spec_actor.cli", "serve", "--port", str(port), "--pool", str(clients),
           "-c", str(N_CTX), "-t", str(threads), "--max-queue", "64"]
    return cmd + (["--spec", spec] if spec else [])


def llama_server_cmd(exe: Path, port: int, clients: int, spec: str | None) -> list[str]:
    cmd = [str(exe), "-m", str(default_model_path()), "--port", str(port), "-np", str(clients),
           "-c", str(N_CTX * clients), "-t", str(os.cpu_count() or 1), "--no-ui", "--log-disable"]
    return cmd + (["--spec-type", spec] if spec and spec not in ("none", "auto") else [])


async def sse_objects(client: httpx.AsyncClient, path: str, body: dict) -> AsyncIterator[dict]:
    """POST ``body`` to ``path`` and yield the JSON objects of the server-sent events as they arrive."""
    async with client.stream("POST", path, json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if line.startswith("data: {"):
                yield json.loads(line[6:])


async def stream_one(client: httpx.AsyncClient, prompt: str, max_tokens: int) -> tuple[int, float]:
    """Stream one greedy completion; return (tokens, seconds to the first token)."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    start = time.monotonic()
    ttft = None
    chunks = usage = 0
    async for data in sse_objects(client, "/v1/completions", body):
        if data.get("usage"):
            usage = data["usage"]["completion_tokens"]
        if data.get("choices") and data["choices"][0].get("text"):
            chunks += 1
            if ttft is None:
                ttft = time.monotonic() - start
    return usage or chunks, ttft if ttft is not None else time.monotonic() - start


async def load(url: str, server: str, clients: int, rounds: int, max_tokens: int) -> Row:
    ttfts: list[float] = []
    tokens = 0

    async def client_task(i: int) -> None:
        nonlocal tokens
        async with httpx.AsyncClient(base_url=url, timeout=600) as client:
            for r in range(rounds):
                n, ttft = await stream_one(client, f"Story {i}.{r}. {STORY}", max_tokens)
                tokens += n
                ttfts.append(ttft)

    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        await stream_one(client, STORY, 4)  # warm up (the first request pages the model in)
    start = time.monotonic()
    async with trio.open_nursery() as nursery:
        for i in range(clients):
            nursery.start_soon(client_task, i)
    return Row(server, clients, tokens, time.monotonic() - start, ttfts)


async def hangup(url: str, server: str) -> Hangup:
    long_prompt = PARAGRAPH * 80  # about 3,000 tokens
    async with httpx.AsyncClient(base_url=url, timeout=600) as a, httpx.AsyncClient(base_url=url, timeout=600) as b:
        await stream_one(b, STORY, 4)  # warm up
        _, plain = await stream_one(b, STORY, 4)
        with trio.move_on_after(HANGUP_AFTER_S):
            await stream_one(a, long_prompt, 64)
        _, ttft = await stream_one(b, STORY, 4)
        idle = None
        if server == "spec-actor":
            text = (await b.get("/metrics")).text
            values = {line.split("{")[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                      if line.startswith("spec_actor:disconnect_to_idle_seconds_")}
            if values.get("spec_actor:disconnect_to_idle_seconds_count"):
                idle = values["spec_actor:disconnect_to_idle_seconds_sum"] / values[
                    "spec_actor:disconnect_to_idle_seconds_count"]
    return Hangup(server, plain, ttft, idle)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=2, help="requests per client, one after the other")
    parser.add_argument("--spec", default=None, help="speculative type for both servers (default: spec-actor's "
                                                     "default, and none for llama-server)")
    parser.add_argument("--no-llama-server", action="store_true", help="measure spec-actor only")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    load_avg = os.getloadavg()[0]
    print(f"{os.cpu_count()} CPUs, load average {load_avg:.1f} (run on an idle machine)", flush=True)
    servers = [("spec-actor", lambda port, n: spec_actor_cmd(port, n, args.spec))]
    if not args.no_llama_server:
        exe = build_llama_server()
        servers.append(("llama-server", lambda port, n: llama_server_cmd(exe, port, n, args.spec)))
    rows: list[Row] = []
    hangups: list[Hangup] = []
    for name, make in servers:
        for n in args.clients:
            port = free_port()
            with running(make(port, n), port) as url:
                rows.append(trio.run(load, url, name, n, args.rounds, args.max_tokens))
                print(f"  {name} {n} clients: {rows[-1].tokens_per_sec:.1f} tok/s", file=sys.stderr, flush=True)
        port = free_port()
        with running(make(port, 1), port) as url:
            hangups.append(trio.run(hangup, url, name))
    print(f"\n{'server':<13} {'clients':>7} {'tok/s':>8} {'TTFT p50':>9} {'TTFT p99':>9}")
    for row in rows:
        print(f"{row.server:<13} {row.clients:>7} {row.tokens_per_sec:>8.1f} {row.percentile(0.5) * 1000:>7.0f}ms "
              f"{row.percentile(0.99) * 1000:>7.0f}ms")
    print(f"\nhang-up {HANGUP_AFTER_S} s into a ~3,000-token prefill, then a short request:")
    for h in hangups:
        idle = f", server-side disconnect-to-idle {h.disconnect_to_idle_s * 1000:.1f} ms" \
            if h.disconnect_to_idle_s is not None else ""
        print(f"  {h.server:<13} next request's TTFT {h.next_ttft_s * 1000:.0f} ms "
              f"(without the hang-up {h.plain_ttft_s * 1000:.0f} ms){idle}")
    by = {(r.server, r.clients): r for r in rows}
    if not args.no_llama_server:
        ratios = [f"{n}: {by['spec-actor', n].tokens_per_sec / by['llama-server', n].tokens_per_sec:.2f}x"
                  for n in args.clients]
        print(f"\nspec-actor / llama-server aggregate tok/s by clients: {', '.join(ratios)}")
    if args.json:
        args.json.write_text(json.dumps({"load_average": load_avg, "spec": args.spec,
                                         "rows": [asdict(r) | {"tokens_per_sec": r.tokens_per_sec} for r in rows],
                                         "hangup": [asdict(h) for h in hangups]}, indent=2))


if __name__ == "__main__":
    main()
