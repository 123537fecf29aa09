"""Batched decoding: a pool's sequences against llama.cpp's ``llama-batched-bench`` on the same build.

    python bench/bench_batched.py [--sequences 1 4 8] [--prompt-tokens 32] [--tokens 96] [--reps 3]
                                  [--json PATH] [--check]

Plain decoding (``Spec("none")``) on the embedded Gemma 3 270M, every CPU.
For K sequences, ``llama-batched-bench -npp P -ntg G -npl K`` (compiled from
the same llama.cpp source and linked to the same libraries, bench/llama_tools.py)
reports its aggregate generation speed S_TG: K*G tokens over the time of the
generation phase. spec_actor runs K concurrent requests of P-token prompts on
``open_pool(size=K)`` and is timed the same way: the tokens generated after
each request's first, over the time from the last request's first token to
the last token. The two take turns per rep; medians are shown.

Target (issue 21): at 4 and 8 sequences, spec_actor's aggregate >= 0.9x
llama-batched-bench's. Timings move with the machine: run it on an idle one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import trio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import Report, Table, Target, add_report_options, targets_table  # noqa: E402
from llama_tools import build_tools  # noqa: E402

import spec_actor  # noqa: E402

THREADS = os.cpu_count() or 2
WORDS = ("harbour boat gull salt tide rope net sail mast dock wave shore crab fog pier lamp bell oar keel "
         "storm").split()


def prompt_of(i: int, n_tokens: int, model: spec_actor.Model) -> list[int]:
    """A prompt of exactly ``n_tokens`` token ids, its own per sequence."""
    text = f"Tale {i}: " + " ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range(4 * n_tokens))
    return model.tokenizer.encode(text)[:n_tokens]


def batched_bench(exe: Path, model: Path, k: int, n_prompt: int, n_gen: int) -> float:
    """llama-batched-bench's S_TG (aggregate generation tokens/s) for k sequences."""
    n_ctx = k * (n_prompt + n_gen) + 64
    cmd = [str(exe), "-m", str(model), "-c", str(n_ctx), "-b", "2048", "-ub", "512", "-npp", str(n_prompt),
           "-ntg", str(n_gen), "-npl", str(k), "-t", str(THREADS), "--output-format", "jsonl"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, stdin=subprocess.DEVNULL)
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    if not rows:
        raise RuntimeError(f"no result from llama-batched-bench:\n{(out.stdout + out.stderr)[-2000:]}")
    return float(rows[-1]["speed_tg"])


async def pool_rate(model: spec_actor.Model, k: int, n_prompt: int, n_gen: int) -> float:
    """spec_actor's aggregate generation tokens/s for k concurrent plain requests on one pool."""
    prompts = [prompt_of(i, n_prompt, model) for i in range(k)]
    firsts: list[float] = []
    lasts: list[float] = []
    counts: list[int] = []

    async def one(pool: spec_actor.ActorPool, prompt: list[int]) -> None:
        n = 0
        first = None
        async with pool.stream_events(prompt, max_tokens=n_gen, temp=0.0) as events:
            async for ev in events:
                if isinstance(ev, spec_actor.Token):
                    n += 1
                    if first is None:
                        first = time.perf_counter()
        firsts.append(first if first is not None else time.perf_counter())
        lasts.append(time.perf_counter())
        counts.append(n)

    async with spec_actor.open_pool(model, size=k, spec="none", n_ctx=n_prompt + n_gen + 64,
                                    n_threads=THREADS, prefix_cache=False) as pool:
        await pool.generate(prompts[0][:8], max_tokens=2)  # warm up, as llama-batched-bench does
        async with trio.open_nursery() as nursery:
            for prompt in prompts:
                nursery.start_soon(one, pool, prompt)
    return (sum(counts) - k) / (max(lasts) - max(firsts))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequences", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--prompt-tokens", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=96, help="tokens generated per sequence")
    parser.add_argument("--reps", type=int, default=3)
    add_report_options(parser)
    args = parser.parse_args()
    exe = build_tools(["llama-batched-bench"])["llama-batched-bench"]
    model_path = spec_actor.default_model_path()
    model = spec_actor.load_model(model_path)
    report = Report("bench_batched", {k: v for k, v in vars(args).items() if k not in ("json", "check")})
    rates: dict[tuple[str, int], list[float]] = {}
    for rep in range(args.reps):
        for k in args.sequences:
            ours = trio.run(pool_rate, model, k, args.prompt_tokens, args.tokens)
            theirs = batched_bench(exe, model_path, k, args.prompt_tokens, args.tokens)
            rates.setdefault(("spec_actor", k), []).append(ours)
            rates.setdefault(("llama-batched-bench", k), []).append(theirs)
            print(f"  rep {rep + 1}, {k} sequences: spec_actor {ours:.1f} tok/s, llama-batched-bench {theirs:.1f}",
                  file=sys.stderr, flush=True)
    med = {key: statistics.median(v) for key, v in rates.items()}
    table = Table(("sequences", "spec_actor tok/s", "llama-batched-bench tok/s", "ratio"), "rrrr")
    for k in args.sequences:
        ratio = med["spec_actor", k] / med["llama-batched-bench", k]
        table.add(str(k), f"{med['spec_actor', k]:.1f}", f"{med['llama-batched-bench', k]:.1f}", f"{ratio:.2f}x")
        if k > 1:
            report.add_target(Target(f"{k} sequences: aggregate, spec_actor / llama-batched-bench", ratio, ">=",
                                     0.9, "x"))
    print("\n" + table.plain())
    if report.targets:
        print("\n" + targets_table(report.targets).plain())
    return report.finish(args, {"rates": [{"system": s, "sequences": k, "tokens_per_sec": v}
                                          for (s, k), v in rates.items()]})


if __name__ == "__main__":
    sys.exit(main())
