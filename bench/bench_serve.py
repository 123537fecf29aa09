"""Benchmark ``spec-actor serve`` against llama.cpp's ``llama-server``: concurrent streaming clients.

    python bench/bench_serve.py [--clients 1 4 8] [--workload mixed] [--reps 3] [--max-tokens 96]
                                [--rounds 1] [--spec SPEC] [--with-plain] [--no-hangup]
                                [--no-llama-server] [--json out.json] [--check]

Both servers run as subprocesses on the embedded Gemma 3 270M, built from the
same llama.cpp source (bench/llama_server_build.py compiles llama-server once,
into the cache), each with its defaults: spec-actor ``serve --pool K`` (its
default spec, ``auto``, unless ``--spec``), llama-server ``-np K`` with
every core and a context of K times ours. For each client count, every client
streams ``--rounds`` greedy completions of its own prompt, one after the
other. Workloads:

- ``mixed``: each client its own kind of prompt from ``bench/prompts`` (code
  copy, code edit, JSON extraction, quoted answer, story, non-English), as
  issue 21 measured;
- ``story``: every client continues a short story (little to copy);
- ``shared``: every client's prompt starts with the same ~1,500-token system
  prompt, then its own question (the same system prompt and tool schema for
  every user).

The runs are interleaved (for each rep and client count, every server in
turn, the first one turning by one each rep) and the table shows medians
over ``--reps``: aggregate tokens/s (all
tokens over the run's wall time) and the requests' time to first token
(TTFT) at the 50th and 99th percentile. ``--with-plain`` adds spec-actor with
``--spec none`` (auto under load against plain batched decoding).

Then, unless ``--no-hangup``, the hang-up measurement: a client streams a
~3,000-token prompt and hangs up 0.3 s into its prefill; at once another
client sends a short request. Shown: that request's TTFT as its client sees
it, and for spec-actor the server's own disconnect-to-idle time.

Targets (issue 21): aggregate at 4 and 8 clients and at 1 client >= 1.2x
llama-server's; TTFT p50 <= llama-server's at every client count; with
``--workload shared``, TTFT p50 <= 0.5x llama-server's; with
``--with-plain``, auto >= 1.0x plain at the largest client count.
Timings move with the machine: run it on an idle one.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
import trio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import Report, Table, Target, add_report_options, targets_table  # noqa: E402
from llama_server_build import build_llama_server  # noqa: E402

from spec_actor import default_model_path  # noqa: E402

N_CTX = 4096
STORY = "Once upon a time, in a small village by the sea, there lived an old fisherman named"
PARAGRAPH = ("The harbour was quiet in the early morning. Fishing boats rocked gently at their moorings, "
             "gulls circled above the grey water, and the smell of salt and tar hung in the cool air. ")
MIXED = ("copy.txt", "copy_edit.txt", "extract_json.txt", "qa_quote.txt", "story.txt", "non_english.txt")
"""The prompt kinds of ``--workload mixed``, from bench/prompts, one per client in turn."""
SHARED_RULES = ("Rule {i}: when a customer asks about order {i}, look it up in the ledger, quote the status "
                "word for word, and never promise a delivery date that the ledger does not give. ")
HANGUP_AFTER_S = 0.3
STARTUP_TIMEOUT_S = 180


def workload_prompt(workload: str, client: int, round_: int) -> str:
    """The prompt of one request: its own per client and round, so no two requests are equal."""
    if workload == "story":
        return f"Story {client}.{round_}. {STORY}"
    if workload == "shared":
        system = "You are the support desk of a shop.\n" + "".join(SHARED_RULES.format(i=i) for i in range(40))
        return f"{system}\nCustomer {client}.{round_}: what is the status of order {client * 7 + round_}?\nAnswer:"
    text = (HERE / "prompts" / MIXED[client % len(MIXED)]).read_text(encoding="utf-8")
    return f"[{client}.{round_}] {text}"


@dataclass
class Row:
    """One server's run at one client count."""

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
    cmd = [sys.executable, "-m", "spec_actor.cli", "serve", "--port", str(port), "--pool", str(clients),
           "-c", str(N_CTX), "--max-queue", "64"]
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


async def load(url: str, server: str, clients: int, rounds: int, max_tokens: int, workload: str) -> Row:
    """Every client streams its ``rounds`` requests, one after the other, all clients at once."""
    ttfts: list[float] = []
    tokens = 0

    async def client_task(i: int) -> None:
        nonlocal tokens
        for r in range(rounds):
            # a connection per request: llama-server may close a kept-alive one between
            # requests, and the client then fails with "Server disconnected"
            async with httpx.AsyncClient(base_url=url, timeout=600) as client:
                n, ttft = await stream_one(client, workload_prompt(workload, i, r), max_tokens)
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
        if server.startswith("spec-actor"):
            text = (await b.get("/metrics")).text
            values = {line.split("{")[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                      if line.startswith("spec_actor:disconnect_to_idle_seconds_")}
            if values.get("spec_actor:disconnect_to_idle_seconds_count"):
                idle = values["spec_actor:disconnect_to_idle_seconds_sum"] / values[
                    "spec_actor:disconnect_to_idle_seconds_count"]
    return Hangup(server, plain, ttft, idle)


def medians(rows: list[Row]) -> dict[tuple[str, int], dict[str, float]]:
    """(server, clients) -> median aggregate tokens/s and TTFT p50/p99 over the reps."""
    keys = sorted({(r.server, r.clients) for r in rows}, key=lambda k: (k[1], k[0]))
    out = {}
    for key in keys:
        mine = [r for r in rows if (r.server, r.clients) == key]
        out[key] = {"tokens_per_sec": statistics.median(r.tokens_per_sec for r in mine),
                    "ttft_p50_s": statistics.median(r.percentile(0.5) for r in mine),
                    "ttft_p99_s": statistics.median(r.percentile(0.99) for r in mine)}
    return out


def report_table(med: dict[tuple[str, int], dict[str, float]]) -> Table:
    """Median aggregate tokens/s and TTFT by server and client count."""
    table = Table(("server", "clients", "tok/s", "TTFT p50", "TTFT p99"), "lrrrr")
    for (server, clients), m in med.items():
        table.add(server, str(clients), f"{m['tokens_per_sec']:.1f}", f"{m['ttft_p50_s'] * 1000:.0f} ms",
                  f"{m['ttft_p99_s'] * 1000:.0f} ms")
    return table


def add_targets(report: Report, med: dict[tuple[str, int], dict[str, float]], clients: list[int], workload: str,
                ours: str) -> None:
    """Issue 21's targets, from the medians of servers measured side by side."""
    for n in clients:
        if (ours, n) not in med or ("llama-server", n) not in med:
            continue
        mine, theirs = med[ours, n], med["llama-server", n]
        report.add_target(Target(f"{workload}, {n} clients: aggregate, spec-actor / llama-server",
                                 mine["tokens_per_sec"] / theirs["tokens_per_sec"], ">=", 1.2, "x"))
        bound = 0.5 if workload == "shared" else 1.0
        report.add_target(Target(f"{workload}, {n} clients: TTFT p50, spec-actor / llama-server",
                                 mine["ttft_p50_s"] / theirs["ttft_p50_s"], "<=", bound, "x"))
    n = max(clients)
    if (ours, n) in med and ("spec-actor none", n) in med:
        report.add_target(Target(f"{workload}, {n} clients: auto / plain batched",
                                 med[ours, n]["tokens_per_sec"] / med["spec-actor none", n]["tokens_per_sec"],
                                 ">=", 1.0, "x"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--workload", choices=("mixed", "story", "shared"), default="mixed")
    parser.add_argument("--reps", type=int, default=3, help="runs per server and client count (medians shown)")
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--rounds", type=int, default=1, help="requests per client, one after the other")
    parser.add_argument("--spec", default=None, help="speculative type for both servers (default: spec-actor's "
                                                     "default, and none for llama-server)")
    parser.add_argument("--with-plain", action="store_true", help="also run spec-actor with --spec none")
    parser.add_argument("--no-hangup", action="store_true", help="skip the hang-up measurement")
    parser.add_argument("--no-llama-server", action="store_true", help="measure spec-actor only")
    add_report_options(parser)
    args = parser.parse_args()
    ours = "spec-actor" if not args.spec else f"spec-actor {args.spec}"
    servers: list[tuple[str, Callable[[int, int], list[str]]]] = [
        (ours, lambda port, n: spec_actor_cmd(port, n, args.spec))]
    if args.with_plain and args.spec != "none":
        servers.append(("spec-actor none", lambda port, n: spec_actor_cmd(port, n, "none")))
    if not args.no_llama_server:
        exe = build_llama_server()
        servers.append(("llama-server", lambda port, n: llama_server_cmd(exe, port, n, args.spec)))
    report = Report("bench_serve", {k: v for k, v in vars(args).items() if k not in ("json", "check")})
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} (run on an idle machine)", flush=True)
    rows: list[Row] = []
    for rep in range(args.reps):
        # interleaved: each server in turn at each client count, the first one turning by one each rep
        # (a fixed order gives whichever runs first or second a systematic share of the machine's drift)
        order = servers[rep % len(servers):] + servers[:rep % len(servers)]
        for n in args.clients:
            for name, make in order:
                port = free_port()
                with running(make(port, n), port) as url:
                    rows.append(trio.run(load, url, name, n, args.rounds, args.max_tokens, args.workload))
                print(f"  rep {rep + 1} {name} {n} clients: {rows[-1].tokens_per_sec:.1f} tok/s, "
                      f"TTFT p50 {rows[-1].percentile(0.5) * 1000:.0f} ms", file=sys.stderr, flush=True)
    hangups: list[Hangup] = []
    if not args.no_hangup:
        for name, make in servers:
            port = free_port()
            with running(make(port, 1), port) as url:
                hangups.append(trio.run(hangup, url, name))
    med = medians(rows)
    print("\n" + report_table(med).plain())
    if hangups:
        print(f"\nhang-up {HANGUP_AFTER_S} s into a ~3,000-token prefill, then a short request:")
    for h in hangups:
        idle = f", server-side disconnect-to-idle {h.disconnect_to_idle_s * 1000:.1f} ms" \
            if h.disconnect_to_idle_s is not None else ""
        print(f"  {h.server:<15} next request's TTFT {h.next_ttft_s * 1000:.0f} ms "
              f"(without the hang-up {h.plain_ttft_s * 1000:.0f} ms){idle}")
    add_targets(report, med, args.clients, args.workload, ours)
    if report.targets:
        print("\n" + targets_table(report.targets).plain())
    results = {"rows": [asdict(r) | {"tokens_per_sec": r.tokens_per_sec} for r in rows],
               "medians": [{"server": k[0], "clients": k[1], **v} for k, v in med.items()],
               "hangup": [asdict(h) for h in hangups]}
    return report.finish(args, results)


if __name__ == "__main__":
    sys.exit(main())
