"""Benchmark the process-wide thread budget: two actors generating at once, side by side.

    python bench/bench_threads.py [--reps N] [--tokens N] [--tiny]

One process, one model (the embedded Gemma, or ``--tiny``: the tiny llama
of spec_actor.testing). Each repetition measures, in turn:

- alone:    one actor (default threads) generating by itself;
- budget:   two actors with default threads generating at the same time
            (the budget gives each max(1, cpus // 2) threads);
- explicit: two actors each given ``n_threads = cpus`` explicitly
            (the behaviour before the budget: 2 x cpus spinning threads).

It prints medians of the tokens/s (concurrent rows: both actors together)
and the ratios against ``alone``. On a machine that runs anything else
meanwhile only the ratios mean something.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from contextlib import AsyncExitStack
from typing import Any

import trio

from spec_actor import GenerationActor, Model, load_model, open_actor
from spec_actor._machine import usable_cpus
from spec_actor.testing import tiny_models

PROMPT = "Once upon a time, in a small village by the sea, there lived an old fisherman named"


async def tokens_per_sec(model: Model, n_actors: int, tokens: int, **options: Any) -> float:
    """Tokens/s of ``n_actors`` actors (opened with options) generating at the same time, summed."""
    async with AsyncExitStack() as stack:
        actors: list[GenerationActor] = [
            await stack.enter_async_context(open_actor(model, n_ctx=512, **options)) for _ in range(n_actors)]
        for actor in actors:  # warm-up
            await actor.generate(PROMPT, max_tokens=4)
        before = sum(a.stats().tokens_emitted for a in actors)
        t0 = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for actor in actors:
                nursery.start_soon(lambda a=actor: a.generate(PROMPT, max_tokens=tokens))
        elapsed = time.perf_counter() - t0
        return (sum(a.stats().tokens_emitted for a in actors) - before) / elapsed


async def main(args: argparse.Namespace) -> None:
    if args.tiny:
        model = load_model(tiny_models.write_draft_pair(tempfile.mkdtemp())[0])
    else:
        model = load_model()
    n = usable_cpus()
    cases = {"alone": (1, {}), "budget": (2, {}), "explicit": (2, {"n_threads": n})}
    results: dict[str, list[float]] = {name: [] for name in cases}
    for rep in range(args.reps):
        for name, (n_actors, options) in cases.items():
            results[name].append(await tokens_per_sec(model, n_actors, args.tokens, **options))
        print(f"rep {rep + 1}/{args.reps}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in results.items()), flush=True)
    alone = statistics.median(results["alone"])
    print(f"\n{'tiny llama' if args.tiny else 'gemma 270M'}, {n} CPUs, {args.tokens} tokens per actor, "
          f"median of {args.reps}, load average {os.getloadavg()[0]:.1f}")
    print(f"{'case':<10} {'actors':>6} {'tok/s (all)':>12} {'vs alone':>9}")
    for name, (n_actors, _) in cases.items():
        med = statistics.median(results[name])
        print(f"{name:<10} {n_actors:>6} {med:>12.1f} {med / alone:>8.2f}x")
    budget, explicit = statistics.median(results["budget"]), statistics.median(results["explicit"])
    print(f"budget / explicit: {budget / explicit:.2f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3, help="repetitions (medians are shown)")
    parser.add_argument("--tokens", type=int, default=64, help="tokens each actor generates")
    parser.add_argument("--tiny", action="store_true", help="use the tiny llama instead of Gemma")
    trio.run(main, parser.parse_args())
