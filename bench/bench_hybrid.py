"""Benchmark auto on hybrid (recurrent + attention) targets: plain, fixed MTP, and auto with and without MTP loaded.

    python bench/bench_hybrid.py [--reps N] [--tokens N] [--threads N] [--configs NAME ...] [--check] [--json PATH]

The targets are tiny ``qwen35`` models that ``spec_actor.testing`` writes
to a temporary folder (F32, one NextN/MTP block), the architecture of the
Qwen 3.5 / 3.6 MTP models:

- ``2 blocks``, ``16 blocks``, ``64 blocks``: the tests' hybrid with deeper
  trunks (the blocks past the first two are quiet: they cost their compute
  but leave the greedy path about as it is);
- ``Qwen3.5 state``: 4 blocks whose delta-nets carry a released Qwen 3.5
  model's recurrent state (2 MiB per block), so that rollback snapshots and
  checkpoints cost what they cost at the size users have;
- ``wide FFN``: 16 blocks with a 16,384-wide feed-forward (on a 2-core
  CPU a step verifying 4 tokens still costs about twice a plain one here:
  its 64-wide products are too short to share their weights' reads);
- ``wide trunk``: 8 blocks 512 wide (the language in their first 64
  dimensions, ``tiny_models.base_embeddings``), whose weights take the
  share of a step that they take in a real model: a step verifying 4
  tokens costs about 1.6 plain ones, and fixed MTP pays a little on the
  prompt picked for it (its continuation repeats least of 20 random ones).

Modes: ``plain`` (no draft), ``mtp 3`` (fixed MTP, 3 tokens), ``auto`` (the
model loaded without its MTP block) and ``auto+mtp`` (loaded with it). Each
run is a fresh session of ``--tokens`` greedy tokens from a prompt of token
ids whose continuation barely repeats; after one warm-up per mode the
repeats go round-robin over the modes. Speed is decode tokens/s (the prompt
prefill left out); the table shows medians, and per-step figures of the last
run (``rest``: the step's time outside drafting, the decode and sampling:
rollback, trims, events). ``vs plain`` is the median over repetitions of
each run's rate over plain's in the same repetition (the runs of one
repetition run back to back, so a slow phase of a shared machine moves both). The breakdown table profiles every step of one
more run per mode (``spec_actor.nif.testing.profile_steps``) and gives the
medians by part over the steps that verified no draft, and over those that
verified one: the cheap arms' ``proposals``, the rest of drafting
(``choice``: auto's choice and the model arm's draft), the target's
``checkpoint`` before verifying, its ``decode``, ``sample``, the draft
context's ``feed`` of the committed tokens, the drafter's ``observe``, the
memories' ``trim``, events (``emit``), a checkpoint ``restore``, and
``other``: the step's time outside those (the engine's loop and batch).

Targets: on every model, auto and auto+mtp >= 0.98x plain and >= 0.95x the
better of plain and fixed MTP; greedy output of every mode equal to plain's
on the tests' hybrids (2 and 16 blocks).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from _common import Rates, Report, Table, Target, add_report_options, targets_table

from spec_actor import Model, RunResult, Session, Spec, load_model
from spec_actor.nif import testing as nt
from spec_actor.testing import tiny_models as tm

N_CTX = 1024
# Token ids whose greedy continuation on the 64-block hybrid barely repeats
# (14 repeated 3-grams in 160 tokens, the fewest of 150 random prompts).
PROMPT = (90, 66, 275, 318, 301, 269, 66, 334, 111, 107, 99, 261, 308, 37, 84, 300, 277, 313, 41, 43, 325, 320, 98,
          102, 88, 80, 108, 73, 303, 87, 105, 115)
# The same for the wide trunk (37 repeated 3-grams in 160 tokens, the fewest of 20 random prompts).
WIDE_PROMPT = (310, 273, 215, 165, 126, 310, 139, 190, 134, 159, 217, 74, 176, 78, 262, 79, 327, 206, 149, 232, 190,
               54, 200, 128, 195, 329, 188, 158, 204, 84, 311, 329)


@dataclasses.dataclass(frozen=True)
class Config:
    """One hybrid target: its trunk and delta-net sizes, and whether its greedy text must equal plain's."""

    dims: tm.Dims
    ssm: tm.SsmDims = tm.TINY_SSM
    exact: bool = False
    prompt: tuple[int, ...] = PROMPT


CONFIGS = {
    "2 blocks": Config(tm.HYBRID_DIMS, exact=True),
    "16 blocks": Config(dataclasses.replace(tm.HYBRID_DIMS, n_layer=16), exact=True),
    "64 blocks": Config(dataclasses.replace(tm.HYBRID_DIMS, n_layer=64)),
    "Qwen3.5 state": Config(dataclasses.replace(tm.HYBRID_DIMS, n_layer=4), ssm=tm.QWEN35_SSM),
    "wide FFN": Config(dataclasses.replace(tm.HYBRID_DIMS, n_layer=16, n_ff=16384)),
    "wide trunk": Config(dataclasses.replace(tm.HYBRID_DIMS, n_embd=512, n_ff=2048, n_layer=8), prompt=WIDE_PROMPT),
}
MODES = {"plain": Spec("none"), "mtp 3": Spec("mtp", n_draft=3), "auto": Spec("auto"), "auto+mtp": Spec("auto")}
LOADS_MTP = {"plain": False, "mtp 3": True, "auto": False, "auto+mtp": True}
# The step profile's parts (spec_actor.nif.testing.STEP_PARTS) as the breakdown shows them; "other" is the
# step's time outside them (the engine's loop, the batch, the run's bookkeeping).
PARTS = ("proposals", "choice", "checkpoint", "decode", "sample", "feed", "observe", "trim", "emit", "restore",
         "other")


def run(model: Model, spec: Spec, prompt: list[int], tokens: int, threads: int | None,
        profile: list[dict[str, int]] | None = None, arm: dict[str, Any] | None = None) -> RunResult:
    """One fresh session's greedy run; profile: receives its steps' time by part; arm: auto's model arm after it."""
    with Session(model, spec=spec, n_ctx=N_CTX, n_threads=threads) as session:
        if profile is not None:
            nt.profile_steps(session._handle, True)
        result = session.run(prompt, max_tokens=tokens, temp=0.0)
        if profile is not None:
            profile.extend(nt.take_step_profile(session._handle))
        if arm is not None and spec.type == "auto":
            arm["batches"], arm["dropped"] = nt.auto_model_arm(session._handle)
    if result.status not in ("done", "eog"):
        raise SystemExit(f"run ended with {result.status}: {result.terminal}")
    return result


def step_parts(record: dict[str, int]) -> dict[str, float]:
    """One profiled step's time by part (µs), "other" what its whole time holds beside them."""
    parts = {p: float(record[p]) for p in PARTS if p != "other"}
    parts["other"] = float(record["step"]) - sum(parts.values())
    parts["step"] = float(record["step"])
    return parts


def medians(steps: list[dict[str, float]]) -> dict[str, float]:
    """Median of each part and of the whole step over steps (0 when there are none), and their count."""
    out = {p: statistics.median(s[p] for s in steps) if steps else 0.0 for p in (*PARTS, "step")}
    out["steps"] = float(len(steps))
    return out


def step_breakdown(model: Model, spec: Spec, prompt: list[int], tokens: int,
                   threads: int | None) -> dict[str, dict[str, float]]:
    """Median µs by part of one run's steps: those that verified no draft, and those that verified one."""
    profile: list[dict[str, int]] = []
    arm: dict[str, Any] = {}
    run(model, spec, prompt, tokens, threads, profile, arm)
    steps = [step_parts(r) for r in profile]
    drafted = [r["n_draft"] > 0 for r in profile]
    return {"undrafted": medians([s for s, d in zip(steps, drafted) if not d]),
            "drafted": medians([s for s, d in zip(steps, drafted) if d]), "model_arm": arm}


def measure(name: str, config: Config, folder: Path, reps: int, tokens: int, threads: int | None) -> dict[str, Any]:
    """Every mode on one model: median tokens/s, the last run's per-step figures, the undrafted breakdown."""
    path = tm.write_hybrid_mtp_model(folder / f"{name.replace(' ', '-')}.gguf", dims=config.dims, ssm=config.ssm)
    models = {False: load_model(path), True: load_model(path, load_mtp=True)}
    prompt = list(config.prompt)
    try:
        cells = {mode: Rates() for mode in MODES}
        for mode, spec in MODES.items():
            run(models[LOADS_MTP[mode]], spec, prompt, tokens, threads)  # warm-up
        names = list(MODES)
        for rep in range(reps):
            for k in range(len(names)):
                mode = names[(rep + k) % len(names)]
                result = run(models[LOADS_MTP[mode]], MODES[mode], prompt, tokens, threads)
                cells[mode].rates.append(result.stats.tokens_per_sec)
                cells[mode].last = result
        breakdown = {mode: step_breakdown(models[LOADS_MTP[mode]], MODES[mode], prompt, tokens, threads)
                     for mode in MODES}
    finally:
        for model in models.values():
            model.close()
    plain = cells["plain"].last
    rows = {}
    for mode, cell in cells.items():
        last = cell.last
        assert last is not None and plain is not None
        s, t = last.stats, last.stats.timing_us
        per = max(s.iters, 1)
        rows[mode] = {
            "tokens_per_sec": cell.median, "rates": cell.rates, "vs_plain": cell.paired_ratio(cells["plain"]),
            "vs_best": cell.paired_ratio(cells["plain"], cells["mtp 3"]), "steps": s.iters, "drafted": s.drafts_generated,
            "accepted": s.drafts_accepted, "draft_us": t.draft / per, "verify_us": t.verify / per,
            "rest_us": (t.total - t.prefill - t.draft - t.verify - t.sample) / per,
            "same_text": last.tokens == plain.tokens, "drafters": s.drafter_summary(),
        }
    return {"model": name, "exact": config.exact, "state_bytes_per_block": config.ssm.state_bytes,
            "modes": rows, "steps": breakdown}


def report_table(report: dict[str, Any]) -> Table:
    """Tokens/s and per-step figures by model and mode."""
    table = Table(("model", "mode", "tokens/s", "vs plain", "steps", "drafted", "accepted", "draft µs/step",
                   "verify µs/step", "rest µs/step", "same text"), "llrrrrrrrrl")
    for res in report["results"]:
        for mode, r in res["modes"].items():
            table.add(res["model"], mode, f"{r['tokens_per_sec']:.0f}", f"{r['vs_plain']:.2f}x",
                      r["steps"], r["drafted"], r["accepted"], f"{r['draft_us']:.0f}", f"{r['verify_us']:.0f}",
                      f"{r['rest_us']:.0f}", "yes" if r["same_text"] else "NO")
    return table


def breakdown_table(results: list[dict[str, Any]]) -> Table:
    """Median µs by part of the steps that verified no draft, and of those that verified one."""
    table = Table(("model", "mode", "step", "steps", *PARTS, "step µs", "model arm"),
                  "lllr" + "r" * (len(PARTS) + 1) + "l")
    for res in results:
        for mode, kinds in res["steps"].items():
            arm = kinds["model_arm"]
            # batches auto's model arm read in the run, and whether it ended dropped
            arm_text = f"{arm['batches']} batches{', dropped' if arm['dropped'] else ''}" if arm else ""
            for kind in ("undrafted", "drafted"):
                b = kinds[kind]
                if b["steps"]:
                    table.add(res["model"], mode, kind, f"{b['steps']:.0f}", *(f"{b[p]:.0f}" for p in PARTS),
                              f"{b['step']:.0f}", arm_text)
    return table


def add_targets(report: Report, res: dict[str, Any]) -> None:
    """The issue's targets on one model."""
    modes = res["modes"]
    for auto in ("auto", "auto+mtp"):
        report.add_target(Target(f"{res['model']}: {auto} / plain", modes[auto]["vs_plain"], ">=", 0.98, "x"))
        report.add_target(Target(f"{res['model']}: {auto} / best of plain and mtp 3", modes[auto]["vs_best"],
                                 ">=", 0.95, "x"))
    if res["exact"]:
        same = all(r["same_text"] for r in modes.values())
        report.add_target(Target(f"{res['model']}: every mode's greedy text is plain's", float(same), ">=", 1.0))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5, help="measured runs per mode and model (>= 3)")
    parser.add_argument("--tokens", type=int, default=160, help="tokens per run")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: all cores)")
    parser.add_argument("--configs", nargs="+", choices=list(CONFIGS), default=list(CONFIGS), metavar="NAME",
                        help=f"models to measure (default: all of {', '.join(CONFIGS)})")
    add_report_options(parser)
    args = parser.parse_args()
    if args.reps < 3:
        parser.error("--reps must be at least 3 (the tables show medians)")
    report = Report("bench_hybrid", {"reps": args.reps, "tokens": args.tokens, "threads": args.threads,
                                     "configs": args.configs})
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.configs:
            print(f"measuring {name} ...", file=sys.stderr)
            res = measure(name, CONFIGS[name], Path(tmp), args.reps, args.tokens, args.threads)
            add_targets(report, res)
            results.append(res)
    print(f"\ntiny F32 qwen35 hybrids, {args.tokens} greedy tokens, median of {args.reps} runs after a warm-up, "
          f"{os.cpu_count()} CPUs\n")
    print(report_table({"results": results}).plain())
    print("\nsteps that verified no draft or a draft, median µs by part (one more run per mode):\n")
    print(breakdown_table(results).plain())
    print("\nwhat drafted in auto's last run (drafter, steps, accepted/drafted tokens):\n")
    for res in results:
        for mode in ("auto", "auto+mtp"):
            print(f"  {res['model']}, {mode}: {res['modes'][mode]['drafters'] or 'nothing'}")
    print()
    print(targets_table(report.targets).plain())
    return report.finish(args, results)


if __name__ == "__main__":
    sys.exit(main())
