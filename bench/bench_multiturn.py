"""Multi-turn conversations: the actor's prefix cache against llama.cpp's llama-server.

    python bench/bench_multiturn.py [--reps 2] [--max-tokens 48] [--turns 6] [--no-llama-server]
                                    [--json out.json] [--check]

Two conversations on the embedded Gemma 3 270M, greedy, each answer appended
before the next turn:

- chat: a system message with a ~1,500-token document, then one question per turn;
- agent: a ~1,000-token system prompt describing tools and a task, then each
  turn the assistant's output and a ~200-token tool result.

Each runs on the actor with its defaults (``Spec("auto")``,
``prefix_cache=True``) and on ``llama-server`` built from the same llama.cpp
source and flags (bench/llama_server_build.py, decision 0002) with its
defaults (prompt cache on), one slot, every CPU. Both get the same token ids,
rendered with the model's chat template by spec_actor; each continues with
its own replies. The cold actor (``Spec("none")``, ``prefix_cache=False``)
runs the actor's prompts of ``--cold-turns`` (it keeps nothing, so the turns
before do not change its time). Per turn: time to the first token (TTFT)
and the turn's time (prompt and generation). Within a rep the systems take turns running
whole conversations; each rep's conversations start with their own first
line, and the actor forgets between reps, so no cache carries across reps.
Shown: medians over ``--reps``.

Targets (issue 20): chat, median TTFT over turns 3-6 at most 1.0x
llama-server's and the whole conversation at most 0.9x; chat, TTFT at turn 6
at most 1.5x turn 2's; agent, turn 5 at least 3x faster than the cold actor.
Timings move with the machine: run it on an idle one.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
import trio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import Report, Table, Target, add_report_options, targets_table  # noqa: E402
from bench_serve import free_port, running, sse_objects  # noqa: E402
from llama_server_build import build_llama_server  # noqa: E402

import spec_actor  # noqa: E402
from spec_actor import Spec, Token, default_model_path, open_actor  # noqa: E402

N_CTX = 4096
SYSTEMS = ("actor", "llama-server", "actor cold")
CITIES = ("Oslo", "Lyon", "Porto", "Graz", "Turin", "Ghent", "Bergen", "Malmo", "Leeds", "Cork", "Split", "Brno")
ITEMS = ("copper wire", "olive oil", "rye flour", "glass jars", "wool socks", "tin cans", "oak planks",
         "paper rolls", "brass hinges", "salt cod", "cotton rope", "clay pots")
NAMES = ("Ada", "Bruno", "Clara", "Dmitri", "Elin", "Farid", "Greta", "Hugo", "Ines", "Jonas", "Kaja", "Luca")
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")


@dataclass
class Turn:
    prompt_tokens: int
    ttft_s: float
    seconds: float
    reused: int | None
    """Prompt tokens the system did not evaluate again (the actor's prompt_reused, llama-server's cache_n)."""
    text: str


def n_tokens(model: spec_actor.Model, text: str) -> int:
    return len(model.tokenizer.encode(text, add_special=False))


def grow(model: spec_actor.Model, line: Callable[[int], str], at_least: int) -> str:
    """Lines ``line(0), line(1), ...`` until the text has ``at_least`` tokens."""
    lines: list[str] = []
    while n_tokens(model, "\n".join(lines)) < at_least:
        lines.append(line(len(lines)))
    return "\n".join(lines)


def chat_workload(model: spec_actor.Model, rep: int, turns: int) -> tuple[list[dict[str, str]], list[str]]:
    """The chat's first messages and its user turns."""
    rng = random.Random(1)
    facts = [(rng.choice(CITIES), rng.randint(10, 990), rng.choice(ITEMS), rng.choice(NAMES), rng.choice(DAYS))
             for _ in range(200)]
    doc = grow(model, lambda i: f"{i + 1}. The warehouse in {facts[i][0]} holds {facts[i][1]} crates of "
                                f"{facts[i][2]}, counted by {facts[i][3]} on {facts[i][4]}.", 1500)
    system = f"Conversation {rep}. Answer briefly from this inventory report.\n\n{doc}"
    questions = [f"How many crates of {facts[i][2]} are in {facts[i][0]}, and who counted them?"
                 for i in range(3, 3 + 7 * turns, 7)]
    return [{"role": "system", "content": system}], questions


def agent_workload(model: spec_actor.Model, rep: int, turns: int) -> tuple[list[dict[str, str]], list[str]]:
    """The agent's first messages and its tool results, one per turn."""
    rng = random.Random(2)
    tools = grow(model, lambda i: f"Tool `{rng.choice(ITEMS).replace(' ', '_')}_{i}`: looks up "
                                  f"{rng.choice(ITEMS)} stock in {rng.choice(CITIES)}; arguments: "
                                  f"`city` (string), `day` ({', '.join(DAYS[:3])}), `limit` (integer, "
                                  f"at most {rng.randint(5, 50)}). Returns a table of rows.", 1000)
    system = (f"Conversation {rep}. You are an inventory agent. Call one tool per turn and say which and why.\n\n"
              f"{tools}")
    task = "Task: find the city with the most crates of olive oil, then who counted them."

    def result(t: int) -> str:
        rows = [f"{rng.choice(CITIES)} | {rng.choice(ITEMS)} | {rng.randint(10, 990)} | {rng.choice(NAMES)}"
                for _ in range(14)]
        return f"Tool result {t + 1}:\ncity | item | crates | counted by\n" + "\n".join(rows)

    return ([{"role": "system", "content": system}, {"role": "user", "content": task}],
            [result(t) for t in range(turns)])


async def actor_turn(actor: Any, tokens: list[int], max_tokens: int) -> Turn:
    start = time.perf_counter()
    ttft = None
    pieces: list[str] = []
    reused = None
    async with actor.stream_events(tokens, max_tokens=max_tokens, temp=0.0) as events:
        async for ev in events:
            if type(ev) is Token:
                if ttft is None:
                    ttft = time.perf_counter() - start
                pieces.append(ev.text)
            elif hasattr(ev, "stats"):
                reused = ev.stats.prompt_reused
    seconds = time.perf_counter() - start
    return Turn(len(tokens), ttft if ttft is not None else seconds, seconds, reused, "".join(pieces))


async def server_turn(client: httpx.AsyncClient, tokens: list[int], max_tokens: int) -> Turn:
    body = {"prompt": tokens, "n_predict": max_tokens, "temperature": 0, "stream": True, "cache_prompt": True}
    start = time.perf_counter()
    ttft = None
    pieces: list[str] = []
    reused = None
    async for data in sse_objects(client, "/completion", body):
        if data.get("content") and ttft is None:
            ttft = time.perf_counter() - start
        pieces.append(data.get("content", ""))
        if "timings" in data:
            reused = data["timings"].get("cache_n")
    seconds = time.perf_counter() - start
    return Turn(len(tokens), ttft if ttft is not None else seconds, seconds, reused, "".join(pieces))


async def conversation(model: spec_actor.Model, turn_fn: Callable[[list[int]], Any],
                       opening: list[dict[str, str]], inputs: Sequence[str],
                       role: str) -> tuple[list[Turn], list[list[int]]]:
    """One whole conversation: each input as a ``role`` message, the reply appended after it.

    Returns the turns and the prompt of each.
    """
    messages = list(opening)
    turns, prompts = [], []
    for text in inputs:
        messages.append({"role": role, "content": text})
        prompts.append(model.tokenizer.encode(model.apply_chat_template(messages), parse_special=True))
        turn = await turn_fn(prompts[-1])
        turns.append(turn)
        messages.append({"role": "assistant", "content": turn.text.strip() or "(no reply)"})
    return turns, prompts


async def measure(model: spec_actor.Model, server_url: str | None, reps: int, turns: int, max_tokens: int,
                  cold_turns: Sequence[int]) -> dict[str, dict[str, list[list[Turn | None]]]]:
    """{workload: {system: [one list of turns per rep]}}; the cold actor runs the actor's prompts of
    ``cold_turns`` only (it keeps nothing, so the turns before do not change its time), None elsewhere."""
    workloads = {"chat": (chat_workload, "user"), "agent": (agent_workload, "user")}
    systems = [s for s in SYSTEMS if server_url is not None or s != "llama-server"]
    out: dict[str, dict[str, list[list[Turn | None]]]] = {w: {s: [] for s in systems} for w in workloads}
    async with open_actor(model, n_ctx=N_CTX) as actor, \
            open_actor(model, spec=Spec("none"), prefix_cache=False, n_ctx=N_CTX) as cold, \
            httpx.AsyncClient(base_url=server_url or "http://unused", timeout=600) as client:
        run = {"actor": lambda t: actor_turn(actor, t, max_tokens),
               "actor cold": lambda t: actor_turn(cold, t, max_tokens),
               "llama-server": lambda t: server_turn(client, t, max_tokens)}
        warm = model.tokenizer.encode("Hello")
        for system in systems:  # the first request pages the model in
            await run[system](warm)
        for rep in range(reps):
            actor.forget()  # no memory of the previous rep's conversations either
            for workload, (make, role) in workloads.items():
                opening, inputs = make(model, rep, turns)
                warm_systems = [s for s in systems if s != "actor cold"]
                order = warm_systems[rep % len(warm_systems):] + warm_systems[:rep % len(warm_systems)]
                for system in order:
                    done, prompts = await conversation(model, run[system], opening, inputs, role)
                    out[workload][system].append(done)
                    print(f"  rep {rep + 1} {workload} {system}: {sum(t.seconds for t in done):.2f} s",
                          file=sys.stderr, flush=True)
                    if system == "actor":
                        out[workload]["actor cold"].append(
                            [await run["actor cold"](p) if i + 1 in cold_turns else None for i, p in enumerate(prompts)])
    return out


def per_turn(runs: list[list[Turn | None]], field: str) -> list[float | None]:
    """The median over reps of ``field`` at each turn (None where a turn was not measured)."""
    medians = []
    for i in range(len(runs[0])):
        values = [getattr(run[i], field) for run in runs if run[i] is not None]
        medians.append(statistics.median(values) if values else None)
    return medians


def wall(runs: list[list[Turn | None]]) -> float | None:
    """The median over reps of a whole conversation's time (None unless every turn was measured)."""
    if any(t is None for run in runs for t in run):
        return None
    return statistics.median(sum(t.seconds for t in run) for run in runs)


def report_table(report: dict[str, Any]) -> Table:
    """Per workload and turn: prompt tokens, the actor's reused tokens, TTFT and turn time of each system (medians)."""
    results = report["results"]
    systems = [s for s in SYSTEMS if s in next(iter(results.values()))]
    header = ["workload", "turn", "prompt", "reused"] + [f"TTFT {s}" for s in systems] + \
             [f"turn {s}" for s in systems]
    t = Table(header, "lrrr" + "r" * 2 * len(systems))
    def shown(value: float | None, scale: float, unit: str) -> str:
        return "" if value is None else f"{value * scale:.{0 if unit == ' ms' else 2}f}{unit}"

    for workload, by_system in results.items():
        runs = {s: [[Turn(**turn) if turn else None for turn in run] for run in by_system[s]] for s in systems}
        ttft = {s: per_turn(runs[s], "ttft_s") for s in systems}
        secs = {s: per_turn(runs[s], "seconds") for s in systems}
        for i, turn in enumerate(runs["actor"][0]):
            t.add(workload, i + 1, turn.prompt_tokens, turn.reused, *(shown(ttft[s][i], 1000, " ms") for s in systems),
                  *(shown(secs[s][i], 1, " s") for s in systems))
        t.add(workload, "all", "", "", *("" for _ in systems), *(shown(wall(runs[s]), 1, " s") for s in systems))
        t.section()
    return t


def add_targets(report: Report, results: dict[str, dict[str, list[list[Turn]]]]) -> None:
    chat, agent = results["chat"], results["agent"]
    actor_ttft = per_turn(chat["actor"], "ttft_s")
    if "llama-server" in chat:
        server_ttft = per_turn(chat["llama-server"], "ttft_s")
        report.add_target(Target("chat: median TTFT turns 3-6, actor / llama-server",
                                 statistics.median(actor_ttft[2:6]) / statistics.median(server_ttft[2:6]), "<=", 1.0,
                                 "x"))
        report.add_target(Target("chat: whole conversation, actor / llama-server",
                                 wall(chat["actor"]) / wall(chat["llama-server"]), "<=", 0.9, "x"))
    if len(actor_ttft) >= 6:
        report.add_target(Target("chat: actor TTFT turn 6 / turn 2", actor_ttft[5] / actor_ttft[1], "<=", 1.5, "x"))
    cold = per_turn(agent["actor cold"], "seconds")
    if len(cold) >= 5 and cold[4] is not None:
        report.add_target(Target("agent: turn 5, cold actor / actor", cold[4] / per_turn(agent["actor"], "seconds")[4],
                                 ">=", 3.0, "x"))


def llama_server_cmd(exe: Path, port: int) -> list[str]:
    """llama-server with its defaults (prompt cache on), one slot, every CPU, the actor's context size."""
    return [str(exe), "-m", str(default_model_path()), "--port", str(port), "-np", "1", "-c", str(N_CTX),
            "-t", str(len(os.sched_getaffinity(0))), "--no-ui", "--log-disable"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=2, help="conversations per system and workload")
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--max-tokens", type=int, default=48, help="tokens per answer")
    parser.add_argument("--cold-turns", type=int, nargs="*", default=[5], metavar="TURN",
                        help="turns the cold actor runs (the actor's prompts; default: 5, the target's)")
    parser.add_argument("--no-llama-server", action="store_true", help="measure the actor only")
    add_report_options(parser)
    args = parser.parse_args()
    report = Report("bench_multiturn", {"reps": args.reps, "turns": args.turns, "max_tokens": args.max_tokens,
                                        "cold_turns": args.cold_turns, "n_ctx": N_CTX,
                                        "llama_server": not args.no_llama_server})
    load = os.getloadavg()[0]
    model = spec_actor.load_model()
    if args.no_llama_server:
        measured = trio.run(measure, model, None, args.reps, args.turns, args.max_tokens, args.cold_turns)
    else:
        exe = build_llama_server()
        port = free_port()
        with running(llama_server_cmd(exe, port), port) as url:
            measured = trio.run(measure, model, url, args.reps, args.turns, args.max_tokens, args.cold_turns)
    results = {w: {s: [[asdict(t) if t else None for t in run] for run in runs] for s, runs in by.items()}
               for w, by in measured.items()}
    print(report_table({"results": results}).plain())
    add_targets(report, measured)
    print("\n" + targets_table(report.targets).plain())
    print(f"\n{args.reps} reps, medians; {len(os.sched_getaffinity(0))} of {os.cpu_count()} CPUs; "
          f"load average {load:.2f} before, {os.getloadavg()[0]:.2f} after")
    return report.finish(args, results)


if __name__ == "__main__":
    sys.exit(main())
