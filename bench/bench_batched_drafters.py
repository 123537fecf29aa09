"""Pools whose spec drafts with a second context: one batched session against one session per request.

    python bench/bench_batched_drafters.py [--clients 8] [--reps 3] [--tokens 128] [--json out.json] [--check]

A real-size model: the embedded Gemma 3 270M with itself as the draft model
(``draft-simple``: every draft token costs a forward pass of the target's
size). Then the tiny generated models (random weights, float32): plain
decoding for reference, MTP on the qwen35 hybrid (fixed
``Spec("mtp", n_draft=3)``, and auto, whose model arm is MTP) and a draft
model on the llama pair. For each, ``--clients``
concurrent greedy requests of ``--tokens`` tokens, each with its own prompt,
run through ``open_pool(size=clients)``: batched (one context, one draft
context, one decode per step, one draft call for all sequences; decisions
0069, 0070), and as one session per request (what a pool of such a spec was
before). Shown: aggregate tokens/s, medians over ``--reps`` interleaved reps,
the ratio, and the draft time per token made (from each request's
statistics). The tiny models' weights fit in the CPU caches and their
decodes take microseconds, so per-step overheads (thread barriers, a
unified KV cache attended by every sequence, checkpoints) decide their
ratios, which move by 30% between runs: only the Gemma row says what a
real model gains.

Target: on Gemma, batched >= 1x one session per request.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import trio
from _common import Report, Table, Target, add_report_options, targets_table

import spec_actor
from spec_actor import Done, Eog, Spec
from spec_actor._pool import ActorPool, open_pool
from spec_actor.testing import tiny_models

N_CTX = 512
GEMMA_CASE = "draft-simple (Gemma 270M drafting for itself)"


def prompts_for(model: spec_actor.Model, n: int) -> list[list[int]]:
    """n prompts, each a random phrase repeated (every drafter finds something to propose)."""
    rng = random.Random(41)
    out = []
    for _ in range(n):
        phrase = [rng.randrange(1, model.info.n_vocab) for _ in range(rng.randrange(3, 9))]
        out.append((phrase * 20)[:rng.randrange(8, 61)])
    return out


async def run_all(pool: ActorPool, prompts: list[list[int]], tokens: int) -> tuple[float, float]:
    """(aggregate tokens/s, draft microseconds per token made) of all prompts at once."""
    made: list[Any] = []  # each request's statistics, from its terminal event

    async def one(prompt: list[int]) -> None:
        async with pool.stream_events(prompt, max_tokens=tokens, temp=0.0) as events:
            async for ev in events:
                if isinstance(ev, (Done, Eog)):
                    made.append(ev.stats)

    t0 = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for p in prompts:
            nursery.start_soon(one, p)
    wall = time.perf_counter() - t0
    n = sum(s.tokens_emitted for s in made)
    return n / wall, sum(s.timing_us.draft for s in made) / max(n, 1)


async def open_mode(stack: AsyncExitStack, model: spec_actor.Model, spec: Spec | str, clients: int,
                    batched: bool) -> ActorPool:
    options = {"spec": spec, "n_ctx": N_CTX, "memory": 0}
    if batched:
        pool = await stack.enter_async_context(open_pool(model, size=clients, **options))
        assert pool.batched, "this spec no longer batches"
        return pool
    actors = [await stack.enter_async_context(spec_actor.open_actor(model, **options)) for _ in range(clients)]
    return ActorPool(actors)


async def measure(cases: list[tuple[str, spec_actor.Model, Spec | str]], clients: int, reps: int,
                  tokens: int) -> dict[str, dict[str, list[tuple[float, float]]]]:
    out: dict[str, dict[str, list[tuple[float, float]]]] = {name: {"batched": [], "separate": []} for name, *_ in cases}
    for name, model, spec in cases:
        prompts = prompts_for(model, clients)
        async with AsyncExitStack() as stack:
            pools = {mode: await open_mode(stack, model, spec, clients, mode == "batched")
                     for mode in ("batched", "separate")}
            for mode, pool in pools.items():  # warm-up: step-cost calibration, first allocations
                await run_all(pool, prompts[:1], 8)
            for rep in range(reps):
                order = ["batched", "separate"] if rep % 2 == 0 else ["separate", "batched"]
                for mode in order:
                    out[name][mode].append(await run_all(pools[mode], prompts, tokens))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(prog="bench_batched_drafters.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=128)
    add_report_options(parser)
    args = parser.parse_args()
    report = Report("bench_batched_drafters", {"clients": args.clients, "reps": args.reps, "tokens": args.tokens})
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        hybrid = spec_actor.load_model(tiny_models.write_hybrid_mtp_model(d / "hybrid.gguf"), load_mtp=True)
        target_path, draft_path = tiny_models.write_draft_pair(d)
        target, draft = spec_actor.load_model(target_path), spec_actor.load_model(draft_path)
        cases = [("none (hybrid)", hybrid, "none"), ("none (llama)", target, "none"),
                 ("mtp (hybrid)", hybrid, Spec("mtp", n_draft=3)), ("auto (hybrid, MTP arm)", hybrid, "auto"),
                 ("draft-simple (llama pair)", target, Spec("draft-simple", n_draft=4, draft_model=draft))]
        gemma = spec_actor.load_model()
        cases.insert(0, (GEMMA_CASE, gemma, Spec("draft-simple", n_draft=4, draft_model=gemma)))
        measured = trio.run(measure, cases, args.clients, args.reps, args.tokens)
    table = Table(("spec", "batched tok/s", "separate tok/s", "ratio", "draft us/token batched", "separate"), "lrrrrr")
    rows = []
    for name, modes in measured.items():
        b = statistics.median(r for r, _ in modes["batched"])
        s = statistics.median(r for r, _ in modes["separate"])
        db = statistics.median(d for _, d in modes["batched"])
        ds = statistics.median(d for _, d in modes["separate"])
        table.add(name, f"{b:.0f}", f"{s:.0f}", f"{b / s:.2f}x", f"{db:.0f}", f"{ds:.0f}")
        rows.append({"spec": name, "batched": b, "separate": s, "draft_us_batched": db, "draft_us_separate": ds})
        if name == GEMMA_CASE:
            report.add_target(Target(f"{name}: batched / one session per request", b / s, ">=", 1.0, "x"))
    print(table.render())
    print()
    print(targets_table(report.targets).render())
    return report.finish(args, {"rows": rows})


if __name__ == "__main__":
    raise SystemExit(main())
