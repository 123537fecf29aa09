"""Benchmark Spec("auto") against plain decoding and every fixed n-gram type, side by side.

    python bench/bench_auto.py [--reps N] [--tokens N] [--threads N] [--only W ...] [--modes M ...] [--priced | --learning] [--check]

One process, the embedded Gemma 3 270M Q4_K_M. Modes: plain; ngram-simple,
ngram-map-k, ngram-map-k4v, ngram-mod and ngram-cache at n_draft 8 and 16;
auto. Workloads (bench/prompts/):

- code copied with edits (copy_edit), extraction into JSON (extract_json),
  question answering by quoting a passage (qa_quote), a story (story), a
  chat turn in Gemma's template (chat), a German prompt (non_english), the
  story sampled at temperature 1.0 (story sampled), a verbatim copy of a
  long passage (copy_long): each run on a fresh session, so nothing carries
  over from an earlier run;
- an agentic chain: three requests on one session, each showing the
  previous answer and asking for an edit (agent_task.txt, then "add a
  docstring", then "add type hints"). The chain's text is fixed once from
  plain greedy output, so every mode runs the same three prompts; the third
  request is measured.

After a warm-up run of every mode, the repeats go round-robin over the modes
(one mode later each round), so drift and load hit all modes alike. Speed is
decode tokens/s (tokens emitted / wall time from the first decode step; the
prefill is the same for every mode). The tables show medians and ratios to
plain; the targets of issue 10 are printed with pass/fail:

- auto >= 0.98x plain on every prompt (the sampled one included);
- auto >= 0.95x the best fixed mode of each prompt;
- geometric mean over the suite: auto >= 1.1x the best single fixed mode
  (the one with the best geometric mean);
- agentic chain, third request: auto >= 3x plain;
- verbatim copy of a long passage: auto >= 3x plain.

Run it on an otherwise idle machine; on a loaded one read only the ratios.

``--priced`` takes the timing noise out of the comparison: it first measures
what a step costs by draft length (bench_verify_cost.py's table), fixes
auto's chooser to that table, and prices every run's steps with it (the
steps each mode took by draft length, counted from its statistics, plus its
measured sampling and drafting time). What differs between the modes is
then only what each drafted and what the target accepted; greedy runs are
deterministic, so one repeat is enough.

``--learning`` checks auto's own cost learning against that table
(decision 0060): per workload, auto with the table fixed and auto as users
get it (its step-cost table measured once in the process, then scaled
online), both priced with the table. The ratio (target >= 0.95 on every
workload) is what the live cost model loses against knowing the machine's
table; timing noise stays out of it, as with ``--priced``.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spec_actor import Model, RunResult, Session, Spec, load_model
from spec_actor.nif import testing as native_testing

from _common import Rates, Target, targets_table

PROMPTS = Path(__file__).resolve().parent / "prompts"
N_CTX = 2048
GREEDY: dict[str, Any] = {"temp": 0.0}
SAMPLED: dict[str, Any] = {"temp": 1.0, "top_k": 40, "seed": 1234}
NGRAM_TYPES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")
MODES: dict[str, Spec] = {
    "plain": Spec("none"),
    **{f"{t} {n}": Spec(t, n_draft=n) for t in NGRAM_TYPES for n in (8, 16)},
    "auto": Spec("auto"),
}


def fixed_modes() -> tuple[str, ...]:
    return tuple(m for m in MODES if m not in ("plain", "auto"))
# (name, prompt file, sampling); "story sampled" reuses story.txt
SUITE = (
    ("copy_edit", "copy_edit.txt", GREEDY),
    ("extract_json", "extract_json.txt", GREEDY),
    ("qa_quote", "qa_quote.txt", GREEDY),
    ("story", "story.txt", GREEDY),
    ("chat", "chat.txt", GREEDY),
    ("non_english", "non_english.txt", GREEDY),
    ("story sampled", "story.txt", SAMPLED),
    ("copy_long", "copy_long.txt", GREEDY),
)
CHAIN_EDITS = ("add a docstring", "add type hints")
CHAIN = "agentic chain (3rd request)"


Cell = Rates  # the measurements of one mode on one workload


@dataclass
class Workload:
    name: str
    prompts: tuple[str, ...]  # run in order on one session; the last one is measured
    sampling: dict[str, Any]
    cells: dict[str, Cell] = field(default_factory=dict)


def run(model: Model, spec: Spec, work: Workload, tokens: int, threads: int | None,
        cost_us: list[float] | None = None) -> RunResult:
    with Session(model, spec=spec, n_ctx=N_CTX, n_threads=threads) as session:
        if cost_us is not None and spec.is_auto:
            native_testing.fix_step_cost_table(session._handle, cost_us)
        for prompt in work.prompts:
            result = session.run(prompt, max_tokens=tokens, parse_special=True, **work.sampling)
            if result.status not in ("done", "eog"):
                raise SystemExit(f"{work.name}: run ended with {result.status}: {result.terminal}")
    return result


def chain_prompts(model: Model, tokens: int, threads: int | None) -> tuple[str, ...]:
    """The agentic chain's three prompts, each built on plain greedy's previous answer."""
    prompts = [(PROMPTS / "agent_task.txt").read_text()]
    with Session(model, spec="none", n_ctx=N_CTX, n_threads=threads) as session:
        for edit in CHAIN_EDITS:
            answer = session.run(prompts[-1], max_tokens=tokens, temp=0.0).text.split("```")[0]
            prompts.append(f"Here is the current version of the function:\n\n```python\n{answer.strip()}\n```\n\n"
                           f"Rewrite the whole function and {edit}; keep everything else as it is.\n\n```python\n")
    return tuple(prompts)


def steps_by_length(result: RunResult) -> dict[int, int]:
    """{drafted tokens verified: steps} of a run, from its per-position draft counts."""
    st = result.stats
    reached = [*st.drafted_per_pos, 0]  # reached[i]: drafts that reached position i + 1
    steps = {0: st.iters - reached[0]}
    for n in range(1, len(reached)):
        if reached[n - 1] > reached[n]:
            steps[n] = reached[n - 1] - reached[n]
    return steps


def priced_tokens_per_sec(result: RunResult, cost_us: list[float]) -> float:
    """Tokens/s of a run with every step priced by ``cost_us[drafted tokens]`` (sampling and drafting as measured)."""
    t = result.stats.timing_us
    us = sum(count * cost_us[min(n, len(cost_us) - 1)] for n, count in steps_by_length(result).items())
    return result.stats.tokens_emitted / ((us + t.sample + t.draft) / 1e6)


def measure(model: Model, work: Workload, reps: int, tokens: int, threads: int | None,
            cost_us: list[float] | None = None) -> None:
    work.cells = {mode: Cell() for mode in MODES}
    for spec in MODES.values():
        run(model, spec, work, tokens, threads, cost_us)  # warm-up
    names = list(MODES)
    for rep in range(reps):
        for k in range(len(names)):
            mode = names[(rep + k) % len(names)]
            result = run(model, MODES[mode], work, tokens, threads, cost_us)
            rate = result.stats.tokens_per_sec if cost_us is None else priced_tokens_per_sec(result, cost_us)
            work.cells[mode].rates.append(rate)
            work.cells[mode].last = result
    print(f"  {work.name}: done", file=sys.stderr)


def step_cost_table(model_path: str, threads: int) -> list[float]:
    """Median us of a step verifying 0..n drafted tokens (n: the longest any mode drafts), by bench_verify_cost.py."""
    from bench_verify_cost import measure_batches

    longest = max(spec.max_draft for spec in MODES.values())
    times = measure_batches(model_path, threads, reps=9, past=300, sizes=list(range(1, longest + 2)))
    return [float(statistics.median(times[size])) for size in sorted(times)]


def learning(model: Model, works: list[Workload], reps: int, tokens: int, threads: int | None) -> bool:
    """Auto with its live step cost vs auto handed the measured table, both priced with the table."""
    cost_us = step_cost_table(model.path, threads or os.cpu_count() or 2)
    print("| workload | auto, table fixed (priced tok/s) | auto, live cost (priced tok/s, median) | live / fixed "
          "| live's tokens/step | fixed's tokens/step |")
    print("|---|---:|---:|---:|---:|---:|")
    checks = []
    for w in works:
        fixed = run(model, MODES["auto"], w, tokens, threads, cost_us)
        live = [run(model, MODES["auto"], w, tokens, threads) for _ in range(reps)]
        rates = [priced_tokens_per_sec(r, cost_us) for r in live]
        f, m = priced_tokens_per_sec(fixed, cost_us), statistics.median(rates)
        last = live[-1].stats
        print(f"| {w.name} | {f:.1f} | {m:.1f} | {m / f:.3f} | {last.mean_accepted_per_step:.2f} | "
              f"{fixed.stats.mean_accepted_per_step:.2f} |", flush=True)
        checks.append(Target(f"{w.name}: live / fixed table", m / f, ">=", 0.95, "x"))
    print()
    print(targets_table(checks).render(markdown=True))
    return all(t.met for t in checks)


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def table(works: list[Workload]) -> None:
    print("| workload | plain tok/s | best fixed | best fixed / plain | auto / plain | auto / best fixed "
          "| auto tokens/step | auto's drafters (accepted/drafted, share) |")
    print("|---|---:|---|---:|---:|---:|---:|---|")
    for w in works:
        c = w.cells
        plain = c["plain"].median
        auto = c["auto"]
        assert auto.last is not None
        # --modes may leave no fixed mode to compare with
        best = max(fixed_modes(), key=lambda m: c[m].median, default=None)
        vs_best = ("—", "—") if best is None else (f"{c[best].median / plain:.2f}×",
                                                   f"{auto.median / c[best].median:.2f}×")
        print(f"| {w.name} | {plain:.1f} | {best or '—'} | {vs_best[0]} | {auto.median / plain:.2f}× | "
              f"{vs_best[1]} | {auto.last.stats.mean_accepted_per_step:.2f} | "
              f"{auto.last.stats.drafter_summary() or 'none'} |")
    print()
    print("| workload | " + " | ".join(MODES) + " |")
    print("|---|" + "---:|" * len(MODES))
    for w in works:
        plain = w.cells["plain"].median
        print(f"| {w.name} | " + " | ".join(f"{w.cells[m].median / plain:.2f}" for m in MODES) + " |")


def targets(works: list[Workload]) -> bool:
    by_name = {w.name: w for w in works}
    suite = [w for w in works if w.name != CHAIN]
    checks: list[tuple[str, float, float]] = []
    for w in suite:
        c = w.cells
        checks.append((f"{w.name}: auto / plain", c["auto"].median / c["plain"].median, 0.98))
    for w in suite:
        c = w.cells
        best = max(fixed_modes(), key=lambda m: c[m].median)
        checks.append((f"{w.name}: auto / best fixed ({best})", c["auto"].median / c[best].median, 0.95))
    ratio = {m: geomean([w.cells[m].median / w.cells["plain"].median for w in suite]) for m in (*fixed_modes(), "auto")}
    best_single = max(fixed_modes(), key=lambda m: ratio[m])
    checks.append((f"suite geomean: auto / best single fixed ({best_single}, {ratio[best_single]:.2f}× plain)",
                   ratio["auto"] / ratio[best_single], 1.1))
    chain = by_name[CHAIN].cells
    checks.append(("agentic chain, 3rd request: auto / plain", chain["auto"].median / chain["plain"].median, 3.0))
    copy = by_name["copy_long"].cells
    checks.append(("verbatim copy of a long passage: auto / plain", copy["auto"].median / copy["plain"].median, 3.0))
    targets = [Target(what, value, ">=", needed, "x") for what, value, needed in checks]
    print()
    print(targets_table(targets).render(markdown=True))
    return all(t.met for t in targets)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=3, help="measured runs per mode and workload (>= 1)")
    parser.add_argument("--tokens", type=int, default=160, help="tokens per request")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: all cores)")
    parser.add_argument("--only", nargs="*", help="run only these workloads (names as in the table)")
    parser.add_argument("--modes", nargs="*", help="run only these modes (plain and auto are always run)")
    parser.add_argument("--priced", action="store_true",
                        help="price every run's steps with a measured cost table instead of timing it (see above)")
    parser.add_argument("--learning", action="store_true",
                        help="auto's live step cost against the measured table, both priced (see above)")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is not met")
    args = parser.parse_args()
    if args.reps < 1:
        parser.error("--reps must be at least 1")
    if args.modes:
        unknown = set(args.modes) - set(MODES)
        if unknown:
            parser.error(f"unknown mode(s) {sorted(unknown)}; modes: {', '.join(MODES)}")
        for mode in [m for m in MODES if m not in (*args.modes, "plain", "auto")]:
            del MODES[mode]
    model = load_model()
    works = [Workload(name, ((PROMPTS / file).read_text(),), sampling) for name, file, sampling in SUITE]
    if not args.only or CHAIN in args.only:  # its prompts cost three plain runs
        works.append(Workload(CHAIN, chain_prompts(model, args.tokens, args.threads), GREEDY))
    if args.only:
        works = [w for w in works if w.name in args.only]
    load_before = os.getloadavg()[0]
    if args.learning:
        ok = learning(model, works, args.reps, args.tokens, args.threads)
        print(f"\nload average {load_before:.2f} before and {os.getloadavg()[0]:.2f} after, {os.cpu_count()} CPUs")
        return 0 if ok or not args.check else 1
    cost_us = None
    if args.priced:
        cost_us = step_cost_table(model.path, args.threads or os.cpu_count() or 2)
        print("step cost by drafted tokens (ms): " + " ".join(f"{n}:{c / 1e3:.0f}" for n, c in enumerate(cost_us)),
              file=sys.stderr)
    for w in works:
        measure(model, w, args.reps, args.tokens, args.threads, cost_us)
    load_after = os.getloadavg()[0]
    how = "steps priced with the measured step-cost table, median of" if args.priced else "median of"
    print(f"\nGemma 3 270M Q4_K_M, {args.tokens} tokens per request, {how} {args.reps} run(s) after a warm-up, "
          f"{os.cpu_count()} CPUs, load average {load_before:.2f} before and {load_after:.2f} after\n")
    table(works)
    ok = targets(works) if not args.only and not args.modes else True
    return 0 if ok or not args.check else 1


if __name__ == "__main__":
    sys.exit(main())
