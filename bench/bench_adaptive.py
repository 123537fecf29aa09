"""Benchmark adaptive drafting (``n_draft="auto"``) against plain decoding and fixed draft lengths.

    python bench/bench_adaptive.py [--reps N] [--tokens N] [--threads N] [--check]
    python bench/bench_adaptive.py --rollback [--trunk-layers N ...] [--reps N] [--tokens N] [--threads N]

One process, the embedded Gemma 3 270M Q4_K_M, 160 tokens per run from two
prompts: bench/prompts/story.txt (free text) and bench/prompts/copy.txt (the
model copies code it has just seen: long drafts are accepted).

- Greedy, both prompts: plain; ngram-mod with n_draft 2, 4, 8, 16 and auto;
  ngram-cache with n_draft 8 and auto. Targets: on story, auto >= 0.98x
  plain; on copy, auto >= 0.95x the best fixed n_draft.
- Low-acceptance stress, story sampled at temperature 1.0 (top_k 40, fixed
  seed): plain, and ngram-simple with 1-token keys, which drafts at almost
  every step and is almost always wrong, fixed 8 vs auto. Gemma's greedy
  story soon repeats itself, so greedy n-gram drafts are right there; sampled
  text is where drafting loses and auto must fall back to plain steps.

Every run has a fresh session, so no n-gram table or adaptive state carries
over from an earlier run of the same prompt (that would turn every mode into a
replay). After one warm-up run per mode, the repeats go round-robin over the
modes (starting one mode later each round) so that drift and other load hit
all modes alike.

Speed is decode tokens/s (tokens emitted / wall time from the first decode
step to the last; the prompt prefill is the same for every mode and is left
out). The table shows medians; the greedy rows compare each mode's last output
with plain greedy output and, where they differ, give plain's top-2 logit
margin at the first differing token (batched verification rounds differently
from one-token steps, so outputs may part at a near-tie, and from there the
drafts differ too). Run it on an otherwise idle machine: llama.cpp's
threads slow down many times over when another process takes a core.

``--rollback`` measures what undoing a rejected draft costs instead, on the
tiny random-weight models of spec_actor.testing (written to a temporary
folder): the attention-only ``glm4moe`` MTP model, where a rejected draft is
trimmed from the KV cache, against the hybrid ``qwen35`` MTP model, where the
recurrent state is rolled back from snapshots (MTP, ``n_rs_seq``) or restored
from a checkpoint and the accepted prefix verified again (ngram-simple). Per
loop step: draft, verify, and the rest of the step (checkpoint save/restore,
sequence removal, handing the events over: total minus prefill, draft, verify
and sample). A checkpoint saved or restored for a step is charged to its
verify time, so ngram-simple 3 (checkpoint path) beside mtp 3 (snapshot
path) prices the two ways of undoing a draft of the same length. Auto there
must make at least as many tokens per step as fixed MTP (issue 19);
``--check`` exits 1 when it does not on every hybrid row.

The default hybrid has one delta-net and one attention block, so its one MTP
block costs as much as half a trunk step and more: each of a draft's tokens is
one decode of the MTP context, and at this size a decode costs its overhead
and the output head, not its blocks. In a real MTP model the block is one of
dozens. ``--trunk-layers`` adds hybrids with deeper trunks (the extra blocks
quiet: they cost their compute but barely move the residual, see
``write_hybrid_mtp_model``), where the MTP block's share of a step comes
closer to a real model's.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spec_actor import Model, RunResult, Session, Spec, load_model
from spec_actor.nif import testing as nt

from _common import Rates

PROMPTS = Path(__file__).resolve().parent / "prompts"
N_CTX = 1024
GREEDY: dict[str, Any] = {"temp": 0.0}
SAMPLED: dict[str, Any] = {"temp": 1.0, "top_k": 40, "seed": 1234}

GREEDY_MODES: dict[str, Spec] = {
    "plain": Spec("none"),
    "ngram-mod 2": Spec("ngram-mod", n_draft=2),
    "ngram-mod 4": Spec("ngram-mod", n_draft=4),
    "ngram-mod 8": Spec("ngram-mod", n_draft=8),
    "ngram-mod 16": Spec("ngram-mod", n_draft=16),
    "ngram-mod auto": Spec("ngram-mod", n_draft="auto"),
    "ngram-cache 8": Spec("ngram-cache", n_draft=8),
    "ngram-cache auto": Spec("ngram-cache", n_draft="auto"),
}
FIXED_MOD = ("ngram-mod 2", "ngram-mod 4", "ngram-mod 8", "ngram-mod 16")
STRESS_MODES: dict[str, Spec] = {
    "plain": Spec("none"),
    "ngram-simple 8": Spec("ngram-simple", n_draft=8, ngram_size_n=1, ngram_size_m=16),
    "ngram-simple auto": Spec("ngram-simple", n_draft="auto", ngram_size_n=1, ngram_size_m=16),
}


@dataclass
class Cell(Rates):
    """The measurements of one mode in one scenario."""

    same_as_plain: bool | None = None
    tie_margin: float | None = None
    """Where the last output differs from plain greedy: plain's top-2 logit margin there."""


@dataclass
class Scenario:
    name: str
    prompt: str
    sampling: dict[str, Any]
    modes: dict[str, Spec]
    cells: dict[str, Cell] = field(default_factory=dict)


def run(model: Model, spec: Spec, scenario: Scenario, tokens: int, threads: int | None) -> RunResult:
    with Session(model, spec=spec, n_ctx=N_CTX, n_threads=threads) as session:
        result = session.run(scenario.prompt, max_tokens=tokens, **scenario.sampling)
    if result.status not in ("done", "eog"):
        raise SystemExit(f"run ended with {result.status}: {result.terminal}")
    return result


def measure(model: Model, scenario: Scenario, reps: int, tokens: int, threads: int | None) -> None:
    cells = scenario.cells = {mode: Cell() for mode in scenario.modes}
    for spec in scenario.modes.values():
        run(model, spec, scenario, tokens, threads)  # warm-up: weights paged in, caches filled
    names = list(scenario.modes)
    for rep in range(reps):
        for k in range(len(names)):
            mode = names[(rep + k) % len(names)]
            result = run(model, scenario.modes[mode], scenario, tokens, threads)
            cells[mode].rates.append(result.stats.tokens_per_sec)
            cells[mode].last = result
        print(f"  {scenario.name}: round {rep + 1}/{reps} done", file=sys.stderr)
    if scenario.sampling is GREEDY:
        compare_with_plain(model, scenario)


def compare_with_plain(model: Model, scenario: Scenario) -> None:
    """Mark the modes whose greedy output differs from plain's, with the logit margin where it does.

    Batched verification rounds differently from one-token steps, so greedy
    outputs may part at a near-tie of the top two logits; a large margin
    there would be a bug.
    """
    plain = scenario.cells["plain"].last
    assert plain is not None
    with Session(model, n_ctx=N_CTX) as probe:
        for cell in scenario.cells.values():
            assert cell.last is not None
            cell.same_as_plain = cell.last.tokens == plain.tokens
            if not cell.same_as_plain:
                i = next((k for k, (a, b) in enumerate(zip(plain.tokens, cell.last.tokens)) if a != b),
                         min(len(plain.tokens), len(cell.last.tokens)))
                context = probe.tokenize(scenario.prompt) + list(plain.tokens[:i])
                cell.tie_margin = nt.top2(probe._handle, context)[2]


def table(scenarios: list[Scenario]) -> None:
    print("| prompt | mode | tokens/s (median) | min–max | steps | drafted | accepted | vs plain | same text |")
    print("|---|---|---:|---:|---:|---:|---:|---:|:---:|")
    for sc in scenarios:
        base = sc.cells["plain"].median
        for mode, cell in sc.cells.items():
            assert cell.last is not None
            s = cell.last.stats
            same = ("—" if cell.same_as_plain is None else "yes" if cell.same_as_plain
                    else f"no (top-2 margin {cell.tie_margin:.2f})")
            print(f"| {sc.name} | {mode} | {cell.median:.1f} | {min(cell.rates):.1f}–{max(cell.rates):.1f} | "
                  f"{s.iters} | {s.drafts_generated} | {s.drafts_accepted} | {cell.median / base:.2f}× | {same} |")


def ratios(story: Scenario, copy: Scenario, stress: Scenario) -> bool:
    s, c, x = story.cells, copy.cells, stress.cells
    best_fixed = max(FIXED_MOD, key=lambda m: c[m].median)
    checks = [
        ("story: ngram-mod auto / plain", s["ngram-mod auto"].median / s["plain"].median, 0.98),
        (f"copy: ngram-mod auto / best fixed ({best_fixed})", c["ngram-mod auto"].median / c[best_fixed].median,
         0.95),
        ("story: ngram-cache auto / plain", s["ngram-cache auto"].median / s["plain"].median, 0.98),
        ("copy: ngram-cache auto / ngram-cache 8", c["ngram-cache auto"].median / c["ngram-cache 8"].median, 0.95),
        ("story sampled: ngram-simple auto / plain", x["ngram-simple auto"].median / x["plain"].median, 0.95),
    ]
    print()
    print("| ratio | value | target | met |")
    print("|---|---:|---:|:---:|")
    ok = True
    for what, value, target in checks:
        met = value >= target
        ok &= met
        print(f"| {what} | {value:.3f} | ≥ {target} | {'yes' if met else 'NO'} |")
    return ok


TINY_PROMPT = "Hello world, this is a tiny model"
ROLLBACK_MODES: dict[str, Spec] = {
    "plain": Spec("none"),
    "mtp 3": Spec("mtp", n_draft=3),
    "ngram-simple 3": Spec("ngram-simple", n_draft=3, ngram_size_n=2, ngram_size_m=8),
    "ngram-simple 8": Spec("ngram-simple", n_draft=8, ngram_size_n=2, ngram_size_m=8),
    "auto": Spec("auto"),
}
ROLLBACK_PATH = {"mtp 3": "snapshots", "ngram-simple 3": "checkpoint", "ngram-simple 8": "checkpoint",
                 "auto": "both"}
"""How the hybrid model undoes a rejection per mode (attention-only: a KV trim for all)."""


def rollback_table(reps: int, tokens: int, threads: int | None, trunk_layers: list[int]) -> bool:
    """Per-step draft / verify / rest time: attention-only vs hybrid MTP models (tiny, F32).

    Returns whether auto makes at least as many tokens per step as fixed MTP on every hybrid model.
    """
    import dataclasses
    import tempfile

    from spec_actor.testing import tiny_models

    print("steps, drafted, accepted and µs/step: the last run; tokens/s: the median\n")
    print("| model | mode | rollback | steps | drafted | accepted | tokens/step | draft µs/step | verify µs/step "
          "| rest µs/step | tokens/s | vs plain | same text |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|")
    hybrids: dict[str, dict[str, RunResult]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        models = {
            "glm4moe (attention)": tiny_models.write_mtp_model(Path(tmp) / "glm4moe.gguf"),
            "qwen35 (hybrid)": tiny_models.write_hybrid_mtp_model(Path(tmp) / "qwen35.gguf"),
        }
        for n_layer in trunk_layers:
            models[f"qwen35 (hybrid, {n_layer} blocks)"] = tiny_models.write_hybrid_mtp_model(
                Path(tmp) / f"qwen35-{n_layer}.gguf", dims=dataclasses.replace(tiny_models.HYBRID_DIMS, n_layer=n_layer))
        for name, path in models.items():
            model = load_model(path, load_mtp=True)
            scenario = Scenario(name, TINY_PROMPT, GREEDY, ROLLBACK_MODES)
            measure(model, scenario, reps, tokens, threads)
            base = scenario.cells["plain"]
            for mode, cell in scenario.cells.items():
                assert cell.last is not None and base.last is not None
                s, t = cell.last.stats, cell.last.stats.timing_us
                rest = t.total - t.prefill - t.draft - t.verify - t.sample
                per = max(s.iters, 1)
                same = "yes" if cell.last.tokens == base.last.tokens else "NO"
                path_kind = "—" if mode == "plain" else ROLLBACK_PATH[mode] if "hybrid" in name else "KV trim"
                print(f"| {name} | {mode} | {path_kind} | {s.iters} | {s.drafts_generated} | {s.drafts_accepted} | "
                      f"{s.mean_accepted_per_step:.2f} | {t.draft / per:.0f} | {t.verify / per:.0f} | "
                      f"{rest / per:.0f} | {cell.median:.0f} | {cell.median / base.median:.2f}× | {same} |")
                if "hybrid" in name:
                    hybrids.setdefault(name, {})[mode] = cell.last
            model.close()
    # Verify µs/step includes the checkpoint saved before verifying and the
    # restore after a rejection (charged to the step); the same draft length
    # on both paths sets them side by side.
    ok = True
    for name, hybrid in hybrids.items():
        snap, ckpt = hybrid["mtp 3"].stats, hybrid["ngram-simple 3"].stats
        print(f"\n{name}, drafts of 3: verify {ckpt.timing_us.verify / max(ckpt.iters, 1):.0f} µs/step on the "
              f"checkpoint path (ngram-simple 3) beside {snap.timing_us.verify / max(snap.iters, 1):.0f} µs/step on "
              f"the snapshot path (mtp 3)")
        auto, mtp = hybrid["auto"].stats, hybrid["mtp 3"].stats
        met = auto.mean_accepted_per_step >= mtp.mean_accepted_per_step
        ok &= met
        print(f"{name}: auto {auto.mean_accepted_per_step:.2f} tokens/step, fixed mtp 3 "
              f"{mtp.mean_accepted_per_step:.2f}: target auto >= mtp {'met' if met else 'NOT met'}; auto's "
              f"drafters: {auto.drafter_summary() or 'none'}")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5, help="measured runs per mode and scenario (>= 3)")
    parser.add_argument("--tokens", type=int, default=160, help="tokens per run")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: all cores)")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target ratio is not met")
    parser.add_argument("--rollback", action="store_true",
                        help="only measure rollback cost: tiny attention-only vs hybrid MTP model")
    parser.add_argument("--trunk-layers", type=int, nargs="*", default=[], metavar="N",
                        help="with --rollback: also hybrids with N trunk blocks (even, >= 2)")
    args = parser.parse_args()
    if args.reps < 3:
        parser.error("--reps must be at least 3 (the tables show medians)")
    if args.rollback:
        print(f"\ntiny F32 models, {args.tokens} tokens, median of {args.reps} runs after a warm-up, "
              f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}\n")
        ok = rollback_table(args.reps, args.tokens, args.threads, args.trunk_layers)
        return 0 if ok or not args.check else 1
    model = load_model()
    story_text = (PROMPTS / "story.txt").read_text()
    story = Scenario("story", story_text, GREEDY, GREEDY_MODES)
    copy = Scenario("copy", (PROMPTS / "copy.txt").read_text(), GREEDY, GREEDY_MODES)
    stress = Scenario("story sampled", story_text, SAMPLED, STRESS_MODES)
    scenarios = [story, copy, stress]
    load_before = os.getloadavg()[0]
    for sc in scenarios:
        print(f"{sc.name}: {len(model.tokenizer.encode(sc.prompt))} prompt tokens", file=sys.stderr)
        measure(model, sc, args.reps, args.tokens, args.threads)
    load_after = os.getloadavg()[0]
    print(f"\nGemma 3 270M Q4_K_M, {args.tokens} tokens, median of {args.reps} runs after a warm-up, "
          f"{os.cpu_count()} CPUs, load average {load_before:.2f} before and {load_after:.2f} after\n")
    table(scenarios)
    ok = ratios(story, copy, stress)
    return 0 if ok or not args.check else 1


if __name__ == "__main__":
    sys.exit(main())
