"""Benchmark auto on hybrid (recurrent + attention) targets: plain, fixed MTP, and auto with and without MTP loaded.

    python bench/bench_hybrid.py [--reps N] [--tokens N] [--threads N] [--configs NAME ...] [--step-table PATH]
                                 [--check] [--json PATH]

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
repetition run back to back, so a slow phase of a shared machine moves
both).

Every run is profiled (``spec_actor.nif.testing.profile_steps``), and
``priced`` gives the same ratio with each step priced at medians over all
the runs on the same model load: its decode at the median for its length
(a one-token decode right after a drafted step, where llama.cpp's graph
changes shape, at the median of those), its checkpoint and restore at
theirs, and the mode's own drafting work at its median per step (a
one-token decode at the median over every run, the longer ones over the
runs on the same model load, with MTP loaded or not). It keeps what each
mode chose and leaves out the machine's noise, which on a shared 2-core VM
moves single runs by 10-60%, more than the targets' margins. The breakdown table gives the medians by
part over the steps that verified no draft, and over those that verified
one: the cheap arms' ``proposals``, the rest of drafting
(``choice``: auto's choice and the model arm's draft), the target's
``checkpoint`` before verifying, its ``decode``, ``sample``, the draft
context's ``feed`` of the committed tokens, the drafter's ``observe``, the
memories' ``trim``, events (``emit``), a checkpoint ``restore``, and
``other``: the step's time outside those (the engine's loop and batch).

What each process chooses still moves with the step-cost table that its
first auto run calibrates. ``--step-table PATH`` fixes auto's table to the
one kept in PATH (written there by the first run that lacks it), so that
two builds, or two policies, are compared under the same prices: their
greedy choices are then the same from one process to the next (with
MTP loaded, the model arm still prices its own measured drafting and feed
times, so auto+mtp's may still differ).

Targets: on every model, auto and auto+mtp >= 0.98x plain and >= 0.95x the
better of plain and fixed MTP, measured and priced; greedy output of every
mode equal to plain's on the tests' hybrids (2 and 16 blocks).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from _common import Rates, Report, Table, Target, add_report_options, targets_table, write_json

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
# Lengths of a step-cost table that --step-table keeps (drafts of 0..32 tokens, auto's ceiling).
TABLE_LENGTHS = 33
# The step profile's parts (spec_actor.nif.testing.STEP_PARTS) as the breakdown shows them; "other" is the
# step's time outside them (the engine's loop, the batch, the run's bookkeeping).
PARTS = ("proposals", "choice", "checkpoint", "decode", "sample", "feed", "observe", "trim", "emit", "restore",
         "other")


def run(model: Model, spec: Spec, prompt: list[int], tokens: int, threads: int | None,
        profile: list[dict[str, int]] | None = None, arm: dict[str, Any] | None = None,
        table: list[float] | None = None) -> RunResult:
    """One fresh session's greedy run.

    profile: receives its steps' time by part; arm: auto's model arm after
    it; table: auto's step cost, fixed (an empty list receives the one the
    run priced with).
    """
    with Session(model, spec=spec, n_ctx=N_CTX, n_threads=threads) as session:
        auto = spec.type == "auto"
        if auto and table:
            nt.fix_step_cost_table(session._handle, table)
        if profile is not None:
            nt.profile_steps(session._handle, True)
        result = session.run(prompt, max_tokens=tokens, temp=0.0)
        if profile is not None:
            profile.extend(nt.take_step_profile(session._handle))
        if arm is not None and auto:
            arm["batches"], arm["dropped"] = nt.auto_model_arm(session._handle)
        if auto and table is not None and not table:
            table.extend(nt.auto_step_cost(session._handle, TABLE_LENGTHS)[0])
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


def breakdown(profiles: list[list[dict[str, int]]], arm: dict[str, Any]) -> dict[str, Any]:
    """Median µs by part over the runs' steps that verified no draft, and over those that verified one."""
    records = [r for profile in profiles for r in profile]
    steps = [step_parts(r) for r in records]
    drafted = [r["n_draft"] > 0 for r in records]
    out = {"undrafted": medians([s for s, d in zip(steps, drafted) if not d]),
           "drafted": medians([s for s, d in zip(steps, drafted) if d]), "model_arm": arm}
    for kind in ("undrafted", "drafted"):
        out[kind]["steps"] /= max(len(profiles), 1)  # per run
    return out


# What a step of auto or of a fixed drafter spends beside the target's decode, checkpoint and restore.
OWN_WORK = ("proposals", "choice", "feed", "observe")


def follows_draft(profile: list[dict[str, int]]) -> list[bool]:
    """For each step of a run, whether the step before it verified a draft (the first step's: no)."""
    return [False] + [r["n_draft"] > 0 for r in profile[:-1]]


def decode_prices(profiles: list[list[dict[str, int]]]) -> dict[str, Any]:
    """Median µs of the target's decode by tokens verified beside the first, of a checkpoint, of a restore.

    A one-token decode right after a drafted step is priced apart (``after_draft``): llama.cpp's graph
    changes shape there, and what that costs belongs to the draft before it.
    """
    by_length: dict[int, list[int]] = {}
    after_draft: list[int] = []
    for profile in profiles:
        for r, after in zip(profile, follows_draft(profile)):
            (after_draft if after and r["n_draft"] == 0 else by_length.setdefault(r["n_draft"], [])).append(r["decode"])
    records = [r for profile in profiles for r in profile]
    checkpoints = [r["checkpoint"] for r in records if r["checkpoint"] > 0]
    restores = [r["restore"] for r in records if r["restore"] > 0]
    return {"decode": {n: statistics.median(v) for n, v in sorted(by_length.items())},
            "after_draft": statistics.median(after_draft) if after_draft else None,
            "checkpoint": statistics.median(checkpoints) if checkpoints else 0.0,
            "restore": statistics.median(restores) if restores else 0.0}


def priced_rates(profiles: list[list[dict[str, int]]], made: list[int], prices: dict[str, Any]) -> list[float]:
    """Each run's tokens per second, its steps priced at the medians of every run on the same model load.

    A step's decode costs the median for its length (a one-token decode
    right after a drafted step the median of those), its checkpoint and
    restore theirs, and the mode's own work (OWN_WORK) its median per step of
    the same kind (drafted or not): what the run's choices cost, with the
    shared machine's slow phases left out. Events and sampling, the same
    work per token in every mode, are left out too.
    """
    records = [r for profile in profiles for r in profile]
    own = {kind: statistics.median([sum(r[p] for p in OWN_WORK) for r in records if (r["n_draft"] > 0) == kind] or [0])
           for kind in (False, True)}
    def decode(r: dict[str, int], after: bool) -> float:
        return prices["after_draft"] if after and r["n_draft"] == 0 else prices["decode"][r["n_draft"]]

    rates = []
    for profile, n in zip(profiles, made):
        us = sum(decode(r, after) + (prices["checkpoint"] if r["checkpoint"] else 0.0)
                 + (prices["restore"] if r["restore"] else 0.0) + own[r["n_draft"] > 0]
                 for r, after in zip(profile, follows_draft(profile)))
        rates.append(1e6 * n / us if us > 0 else 0.0)
    return rates


def measure(name: str, config: Config, folder: Path, reps: int, tokens: int, threads: int | None,
            tables: dict[str, list[float]] | None = None) -> dict[str, Any]:
    """Every mode on one model: tokens/s measured and priced, the last run's per-step figures, the breakdown.

    tables: auto's step cost by "model/load" to fix in its sessions; a
    missing entry is filled with the table its warm-up priced with.
    """
    path = tm.write_hybrid_mtp_model(folder / f"{name.replace(' ', '-')}.gguf", dims=config.dims, ssm=config.ssm)
    models = {False: load_model(path), True: load_model(path, load_mtp=True)}
    prompt = list(config.prompt)
    cells = {mode: Rates() for mode in MODES}
    profiles: dict[str, list[list[dict[str, int]]]] = {mode: [] for mode in MODES}
    made: dict[str, list[int]] = {mode: [] for mode in MODES}
    arms: dict[str, dict[str, Any]] = {mode: {} for mode in MODES}
    fixed: dict[str, list[float] | None] = {mode: None for mode in MODES}
    if tables is not None:
        for mode in MODES:
            if MODES[mode].type == "auto":
                fixed[mode] = tables.setdefault(f"{name}/{'mtp' if LOADS_MTP[mode] else 'plain'}", [])
    try:
        for mode, spec in MODES.items():
            run(models[LOADS_MTP[mode]], spec, prompt, tokens, threads, table=fixed[mode])  # warm-up
        names = list(MODES)
        for rep in range(reps):
            for k in range(len(names)):
                mode = names[(rep + k) % len(names)]
                profile: list[dict[str, int]] = []
                result = run(models[LOADS_MTP[mode]], MODES[mode], prompt, tokens, threads, profile, arms[mode],
                             fixed[mode])
                cells[mode].rates.append(result.stats.tokens_per_sec)
                cells[mode].last = result
                profiles[mode].append(profile)
                made[mode].append(result.stats.tokens_emitted)
    finally:
        for model in models.values():
            model.close()
    # The decode's prices by length, pooled over the modes that share a model load: with MTP loaded, a decode
    # of several tokens also writes llama.cpp's rollback snapshots. A one-token decode builds the same graph
    # on both loads (decision 0093), so its price is pooled over every run, as plain and auto+mtp are compared.
    prices = {load: decode_prices([p for mode in MODES if LOADS_MTP[mode] == load for p in profiles[mode]])
              for load in (False, True)}
    one_token = decode_prices([p for mode in MODES for p in profiles[mode]])
    for load_prices in prices.values():
        load_prices["decode"][0] = one_token["decode"][0]
        load_prices["after_draft"] = one_token["after_draft"]
    priced = {mode: Rates(priced_rates(profiles[mode], made[mode], prices[LOADS_MTP[mode]])) for mode in MODES}
    plain = cells["plain"].last
    rows = {}
    for mode, cell in cells.items():
        last = cell.last
        assert last is not None and plain is not None
        s, t = last.stats, last.stats.timing_us
        per = max(s.iters, 1)
        rows[mode] = {
            "tokens_per_sec": cell.median, "rates": cell.rates, "vs_plain": cell.paired_ratio(cells["plain"]),
            "vs_best": cell.paired_ratio(cells["plain"], cells["mtp 3"]), "priced_rates": priced[mode].rates,
            "priced_vs_plain": priced[mode].paired_ratio(priced["plain"]),
            "priced_vs_best": priced[mode].paired_ratio(priced["plain"], priced["mtp 3"]),
            "steps": s.iters, "drafted": s.drafts_generated, "accepted": s.drafts_accepted,
            "draft_us": t.draft / per, "verify_us": t.verify / per,
            "rest_us": (t.total - t.prefill - t.draft - t.verify - t.sample) / per,
            "same_text": last.tokens == plain.tokens, "drafters": s.drafter_summary(),
        }
    return {"model": name, "exact": config.exact, "state_bytes_per_block": config.ssm.state_bytes,
            "modes": rows, "steps": {mode: breakdown(profiles[mode], arms[mode]) for mode in MODES},
            "decode_prices": {("mtp loaded" if load else "without mtp"): prices[load] for load in prices}}


def report_table(report: dict[str, Any]) -> Table:
    """Tokens/s and per-step figures by model and mode."""
    table = Table(("model", "mode", "tokens/s", "vs plain", "priced", "steps", "drafted", "accepted",
                   "draft µs/step", "verify µs/step", "rest µs/step", "same text"), "llrrrrrrrrrl")
    for res in report["results"]:
        for mode, r in res["modes"].items():
            table.add(res["model"], mode, f"{r['tokens_per_sec']:.0f}", f"{r['vs_plain']:.2f}x",
                      f"{r['priced_vs_plain']:.2f}x", r["steps"], r["drafted"], r["accepted"], f"{r['draft_us']:.0f}",
                      f"{r['verify_us']:.0f}", f"{r['rest_us']:.0f}", "yes" if r["same_text"] else "NO")
    return table


def breakdown_table(results: list[dict[str, Any]]) -> Table:
    """Median µs by part of the steps that verified no draft, and of those that verified one (steps per run)."""
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
        for how, key in (("measured", "vs"), ("priced", "priced_vs")):
            report.add_target(Target(f"{res['model']}: {auto} / plain, {how}", modes[auto][f"{key}_plain"],
                                     ">=", 0.98, "x"))
            report.add_target(Target(f"{res['model']}: {auto} / best of plain and mtp 3, {how}",
                                     modes[auto][f"{key}_best"], ">=", 0.95, "x"))
    if res["exact"]:
        same = all(r["same_text"] for r in modes.values())
        report.add_target(Target(f"{res['model']}: every mode's greedy text is plain's", float(same), ">=", 1.0))


def load_tables(path: str) -> dict[str, list[float]]:
    """The step-cost tables of --step-table, or none when the file does not exist yet."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise SystemExit(f"cannot read the step tables in {path}: {exc}") from None
    if not isinstance(data, dict) or not all(
            isinstance(v, list) and len(v) == TABLE_LENGTHS and all(isinstance(x, (int, float)) and x > 0 for x in v)
            for v in data.values()):
        raise SystemExit(f"{path}: expected {{model/load: [{TABLE_LENGTHS} positive µs]}}")
    return {k: [float(x) for x in v] for k, v in data.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5, help="measured runs per mode and model (>= 3)")
    parser.add_argument("--tokens", type=int, default=160, help="tokens per run")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: all cores)")
    parser.add_argument("--configs", nargs="+", choices=list(CONFIGS), default=list(CONFIGS), metavar="NAME",
                        help=f"models to measure (default: all of {', '.join(CONFIGS)})")
    parser.add_argument("--step-table", metavar="PATH",
                        help="fix auto's step cost to the tables in this JSON file; those it lacks are written "
                             "there as the first runs measured them, so that another build's run chooses under "
                             "the same prices")
    add_report_options(parser)
    args = parser.parse_args()
    if args.reps < 3:
        parser.error("--reps must be at least 3 (the tables show medians)")
    report = Report("bench_hybrid", {"reps": args.reps, "tokens": args.tokens, "threads": args.threads,
                                     "configs": args.configs, "step_table": args.step_table})
    results = []
    tables = load_tables(args.step_table) if args.step_table else None
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.configs:
            print(f"measuring {name} ...", file=sys.stderr)
            res = measure(name, CONFIGS[name], Path(tmp), args.reps, args.tokens, args.threads, tables)
            add_targets(report, res)
            results.append(res)
    if tables is not None:
        write_json(args.step_table, tables)
    print(f"\ntiny F32 qwen35 hybrids, {args.tokens} greedy tokens, median of {args.reps} runs after a warm-up, "
          f"{os.cpu_count()} CPUs\n")
    print(report_table({"results": results}).plain())
    print("\nsteps that verified no draft or a draft, median µs by part over every run, steps per run:\n")
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
