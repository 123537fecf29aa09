"""Engine benchmark: spec_actor's native loop vs llama.cpp's own programs.

One command, one process, side by side, medians of several repeats:

    python bench/bench_engine.py [--repeats 3] [--tokens 160] [--json PATH]

Runs greedy generation of 160 tokens on the code-copy prompt with the
embedded Gemma 3 270M: spec_actor plain, ngram-mod and ngram-cache (n_draft
8), and llama.cpp's ``llama-completion`` (plain) and
``llama-speculative-simple`` (same speculative settings), both compiled from
the same llama.cpp source and linked to the same libraries. Decode tokens/s
(prompt excluded, sampling included) and ratios are printed. Run it on an idle machine: with the
two cores busy, llama.cpp's spinning threads make every number meaningless.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from _common import Report, Table, add_report_options
from llama_tools import build_tools

import spec_actor

HERE = Path(__file__).resolve().parent

PROMPTS = HERE / "prompts"
N_DRAFT = 8
THREADS = os.cpu_count() or 2

# (label, spec_actor Spec, llama-speculative-simple arguments or None for llama-completion)
MODES = [
    ("plain", spec_actor.Spec("none"), None),
    ("ngram-mod", spec_actor.Spec("ngram-mod", n_draft=N_DRAFT),
     ["--spec-type", "ngram-mod", "--spec-ngram-mod-n-max", str(N_DRAFT),
      "--spec-ngram-mod-n-min", str(N_DRAFT), "--spec-ngram-mod-n-match", "12"]),
    ("ngram-cache", spec_actor.Spec("ngram-cache", n_draft=N_DRAFT),
     ["--spec-type", "ngram-cache", "--spec-draft-n-max", str(N_DRAFT)]),
]


def spec_actor_tps(model: spec_actor.Model, spec: spec_actor.Spec, prompt: str, n: int) -> float:
    with spec_actor.Session(model, spec=spec, n_ctx=2048, n_threads=THREADS) as session:
        session.run(prompt[:64], max_tokens=2)  # warm-up, as llama.cpp's programs do before timing
        result = session.run(prompt, max_tokens=n, temp=0.0)
    return result.stats.tokens_per_sec


def llama_tps(tools: dict[str, Path], model: Path, prompt_file: Path, n: int, spec_args: list[str] | None) -> float:
    """Decode tokens/s of llama.cpp's program, timed over the same loop as ours.

    llama-completion's "eval time" leaves sampling out, while spec_actor's
    decode time (and llama-speculative-simple's) includes it; so for
    llama-completion we divide its eval runs by eval time plus sampling time.
    """
    common = ["-m", str(model), "-f", str(prompt_file), "-n", str(n), "--temp", "0", "-t", str(THREADS), "-c", "2048"]
    if spec_args is None:
        cmd = [str(tools["llama-completion"]), *common, "-no-cnv", "--no-display-prompt"]
    else:
        cmd = [str(tools["llama-speculative-simple"]), *common, *spec_args]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, stdin=subprocess.DEVNULL)
    log = out.stdout + out.stderr
    try:
        if spec_args is None:
            runs, eval_ms = re.findall(r"\beval time =\s+([\d.]+) ms /\s+(\d+) runs", log)[-1][::-1]
            sampling_ms = re.findall(r"sampling time =\s+([\d.]+) ms", log)[-1]
            return float(runs) / ((float(eval_ms) + float(sampling_ms)) / 1e3)
        return float(re.findall(r"decoded\s+\d+ tokens in .*speed:\s+([\d.]+) t/s", log)[-1])
    except IndexError:
        raise RuntimeError(f"could not read tokens/s from {cmd[0]}:\n{log[-2000:]}") from None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=160)
    parser.add_argument("--prompt", default=str(PROMPTS / "copy.txt"))
    add_report_options(parser, targets=False)
    args = parser.parse_args()
    report = Report("bench_engine", {"repeats": args.repeats, "tokens": args.tokens, "threads": THREADS,
                                     "n_draft": N_DRAFT, "prompt": Path(args.prompt).name, "temp": 0.0})

    tools = build_tools()
    model_path = spec_actor.default_model_path()
    model = spec_actor.load_model(model_path)
    prompt_file = Path(args.prompt)
    prompt = prompt_file.read_text()

    spec_actor_tps(model, MODES[0][1], prompt, 16)  # warm-up: page in the weights
    samples: dict[str, list[float]] = {}
    for _ in range(args.repeats):
        for label, spec, spec_args in MODES:  # interleaved so drift hits every mode alike
            samples.setdefault(f"spec_actor {label}", []).append(spec_actor_tps(model, spec, prompt, args.tokens))
            ref = "llama-completion" if spec_args is None else f"llama-speculative-simple {label}"
            samples.setdefault(ref, []).append(llama_tps(tools, model_path, prompt_file, args.tokens, spec_args))

    med = {name: statistics.median(v) for name, v in samples.items()}
    results = {"samples": samples, "median": med}
    plain = med["spec_actor plain"]
    print(f"\n{args.tokens} greedy tokens, prompt {prompt_file.name}, {THREADS} threads, "
          f"median of {args.repeats}; decode tokens/s\n")
    print(report_table({"results": results}).plain())
    print()
    print(f"spec_actor plain / llama-completion:           {plain / med['llama-completion']:.3f}")
    for label, _, _ in MODES[1:]:
        ours, theirs = med[f"spec_actor {label}"], med[f"llama-speculative-simple {label}"]
        print(f"spec_actor {label} / plain: {ours / plain:.2f}x   (llama.cpp's: {theirs / med['llama-completion']:.2f}x)")
    return report.finish(args, results)


def report_table(report: dict[str, Any]) -> Table:
    """Median decode tokens/s of every run and its ratio to spec_actor's plain run."""
    med = report["results"]["median"]
    plain = med["spec_actor plain"]
    table = Table(("run", "tokens/s", "vs plain"), "lrr")
    for label, _, _ in MODES:
        theirs = "llama.cpp `llama-completion`, plain" if label == "plain" else \
            f"llama.cpp `llama-speculative-simple`, {label}"
        ref = "llama-completion" if label == "plain" else f"llama-speculative-simple {label}"
        for name, key in ((f"spec_actor, {label}", f"spec_actor {label}"), (theirs, ref)):
            table.add(name, f"{med[key]:.1f}", f"{med[key] / plain:.2f}x")
    return table


if __name__ == "__main__":
    sys.exit(main())
