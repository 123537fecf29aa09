"""What verifying a draft costs on this machine, by draft length, and the speed-up ceiling that follows.

    python bench/bench_verify_cost.py [--reps N] [--threads N] [--past N] [--max-draft N] [--sequences K]
                                      [--model PATH] [--json PATH]

A speculative step decodes the last sampled token plus the n drafted tokens
in one batch, with logits at every position. ``verify-cost``
(bench/verify_cost.cpp, compiled against spec_actor's cached llama.cpp)
times exactly that batch for each size, interleaved round-robin, after
``--past`` tokens of context. The table gives, per draft length n:

- the median time of the step, and its ratio to a plain step (n = 0);
- the ceiling: the speed-up over plain decoding if every drafted token were
  accepted and drafting cost nothing, (n + 1) * t(0) / t(n).

No drafter can beat the best ceiling in the table: it bounds what any
speculative mode reaches on this machine with this model (issue 10's 3x
targets are checked against it). Costs are not linear in n on a CPU: matrix
kernels work on blocks of rows, so an odd batch may cost more than the next
even one; Spec("auto") learns that shape online (docs/decisions/0029).

``--sequences K`` times the step of a batched engine instead: K sequences,
each after ``--past`` tokens of its own, each verifying n drafted tokens in
one decode (K * (n + 1) tokens). The ceiling is then against plain batched
decoding of the K sequences, (n + 1) * t_K(0) / t_K(n): what speculation
can add under load, however well it drafts (issue 21's aggregate targets
are checked against it; plain batched decoding is on par with llama-server's).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

from _common import Report, Table, add_report_options
from llama_tools import build_tools

import spec_actor


MAX_BATCH = 65
"""The largest batch: the last sampled token and SA_MAX_DRAFT_POS (64) drafted ones."""


def measure_batches(model: str, threads: int, reps: int, past: int, sizes: list[int],
                    sequences: int = 1, decoded: dict[int, int] | None = None) -> dict[int, list[int]]:
    """{tokens per sequence: step times in us} from one run of verify-cost (compiled first if missing).

    ``decoded``, if given, receives the tokens verify-cost put into each size's batch.
    """
    exe = str(build_tools(["verify-cost"])["verify-cost"])
    cmd = [exe, model, str(threads), str(reps), str(past), str(sequences), *map(str, sizes)]
    done = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise SystemExit(f"verify-cost failed ({done.returncode}): {done.stderr[-2000:]}")
    times = {}
    for line in done.stdout.splitlines():
        fields = line.split()
        if fields and fields[0] == "n":
            times[int(fields[1])] = [int(x) for x in fields[3:]]
            if decoded is not None:
                decoded[int(fields[1])] = int(fields[2])
    return times


def cost_table(rows: list[dict]) -> Table:
    """The printed table: one row per draft length."""
    table = Table(("draft length", "batch", "step ms (median)", "step / plain", "ceiling vs plain"), "rrrrr")
    for r in rows:
        table.add(r["draft"], r["batch"], f"{r['median_us'] / 1e3:.1f}", f"{r['vs_plain']:.2f}", f"{r['ceiling']:.2f}x")
    return table


def main() -> int:
    parser = argparse.ArgumentParser(prog="bench_verify_cost.py", description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=15, help="timed batches per size (median taken)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2, help="CPU threads")
    parser.add_argument("--past", type=int, default=300, help="tokens of context before each batch")
    parser.add_argument("--max-draft", type=int, default=32, help="longest draft length timed")
    parser.add_argument("--sequences", type=int, default=1,
                        help="sequences verifying in one decode (a batched engine's step; default 1)")
    parser.add_argument("--model", help="GGUF file (default: the embedded Gemma 3 270M)")
    add_report_options(parser, targets=False)
    args = parser.parse_args()
    if args.reps < 1 or args.past < 1 or args.sequences < 1 or not 1 <= args.max_draft < MAX_BATCH:
        parser.error(f"--reps, --past and --sequences must be at least 1, --max-draft 1..{MAX_BATCH - 1}")

    model = args.model or spec_actor.load_model().path
    sizes = list(range(1, args.max_draft + 2))
    k = args.sequences
    report = Report("bench_verify_cost", {"reps": args.reps, "threads": args.threads, "past": args.past,
                                          "sequences": k, "model": os.path.basename(model)})
    print(f"[bench] timing batches of {k} x 1..{sizes[-1]} tokens, {args.reps} reps each", file=sys.stderr, flush=True)
    decoded: dict[int, int] = {}
    times = measure_batches(model, args.threads, args.reps, args.past, sizes, k, decoded)
    plain = statistics.median(times[1])
    rows = []
    for size in sizes:
        median = statistics.median(times[size])
        rows.append({"draft": size - 1, "batch": decoded[size], "median_us": median, "vs_plain": median / plain,
                     "ceiling": size * plain / median})
    print(cost_table(rows).render())
    best = max(rows, key=lambda r: r["ceiling"])
    against = "plain" if k == 1 else f"plain batched decoding of {k} sequences"
    print(f"\nbest ceiling: {best['ceiling']:.2f}x {against}, at draft length {best['draft']} "
          f"(every drafted token accepted, drafting free)")
    return report.finish(args, {"rows": rows, "best_ceiling": best["ceiling"], "best_draft": best["draft"]})


if __name__ == "__main__":
    sys.exit(main())
