"""spec_actor vs llama-cpp-python on the same model and prompts, in one process.

    python bench/bench_llama_cpp_python.py [--repeats 3] [--max-tokens 160] [--n-draft 8]
                                           [--prompts copy story chat] [--model PATH] [--json FILE]

llama-cpp-python is the Python binding people would otherwise pick. This runs
greedy generation of the built-in ``spec-actor bench`` prompts with:

- llama-cpp-python, plain streaming (``create_completion(stream=True)``);
- llama-cpp-python with its prompt-lookup drafting
  (``Llama(draft_model=LlamaPromptLookupDecoding(num_pred_tokens=N))``);
- spec_actor plain, ngram-mod and ngram-cache (``n_draft=N``).

Both engines are timed the same way, from the outside: decode tokens/s is the
number of tokens that arrived after the first one divided by the wall time
from the first to the last (prompt prefill excluded). Runs are interleaved and
each mode gets one untimed warm-up; the table shows medians and ratios.

llama-cpp-python is not a dependency of spec_actor. Install the version whose
llama.cpp spec_actor builds on (it compiles llama.cpp: about 5 minutes on two
cores)::

    pip install llama-cpp-python==0.3.36

Run it on an otherwise idle machine: with busy cores every number is noise.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

from _common import Report, Table, add_report_options

import spec_actor
from spec_actor.cli._prompts import PROMPTS

LLAMA_CPP_PYTHON = "llama-cpp-python==0.3.36"
THREADS = os.cpu_count() or 2
N_CTX = 2048


def _load_llama_cpp() -> Any:
    """The llama_cpp module, or None (after saying how to install it)."""
    try:
        import llama_cpp
        import llama_cpp.llama_speculative  # noqa: F401 - LlamaPromptLookupDecoding
    except ImportError:
        print(f"bench_llama_cpp_python: llama-cpp-python is not installed; install it with\n\n"
              f"    pip install {LLAMA_CPP_PYTHON}\n\n"
              "(it compiles llama.cpp from source: about 5 minutes on two cores), then run this again.",
              file=sys.stderr)
        return None
    version = getattr(llama_cpp, "__version__", "?")
    if version != LLAMA_CPP_PYTHON.split("==")[1]:
        print(f"bench_llama_cpp_python: note: llama-cpp-python {version} is installed; the reference "
              f"numbers use {LLAMA_CPP_PYTHON}", file=sys.stderr)
    return llama_cpp


def _rate(arrivals: list[tuple[float, int]]) -> float:
    """Decode tokens/s from (time, tokens) arrivals: tokens after the first arrival / time since it."""
    if len(arrivals) < 2:
        return 0.0
    first, last = arrivals[0][0], arrivals[-1][0]
    after_first = sum(n for _, n in arrivals[1:])
    return after_first / (last - first) if last > first else 0.0


def llama_cpp_python_run(llm: Any, prompt: str, max_tokens: int) -> tuple[float, str]:
    """One streamed greedy completion; (decode tokens/s, text)."""
    arrivals: list[tuple[float, int]] = []
    pieces: list[str] = []
    finish = None
    for chunk in llm.create_completion(prompt, max_tokens=max_tokens, temperature=0.0, repeat_penalty=1.0,
                                       stream=True):
        choice = chunk["choices"][0]
        finish = choice.get("finish_reason") or finish
        if choice["text"]:
            arrivals.append((time.perf_counter(), 1))
            pieces.append(choice["text"])
    text = "".join(pieces)
    if arrivals and finish == "length":
        # A chunk can carry more than one token (text held back for a split character):
        # put the difference on the last arrival so that the count is exact.
        missing = max_tokens - len(arrivals)
        arrivals[-1] = (arrivals[-1][0], arrivals[-1][1] + missing)
    return _rate(arrivals), text


def spec_actor_run(model: spec_actor.Model, spec: spec_actor.Spec, prompt: str,
                   max_tokens: int) -> tuple[float, str]:
    """One greedy run in a fresh session, timed like the llama-cpp-python run; (decode tokens/s, text)."""
    arrivals: list[tuple[float, int]] = []

    def on_events(events: list[spec_actor.Event]) -> None:
        n = sum(1 for ev in events if isinstance(ev, spec_actor.Token))
        if n:
            arrivals.append((time.perf_counter(), n))

    with spec_actor.Session(model, spec=spec, n_ctx=N_CTX, n_threads=THREADS) as session:
        result = session.run(prompt, max_tokens=max_tokens, temp=0.0, on_events=on_events)
    return _rate(arrivals), result.text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="GGUF file (default: the embedded Gemma 3 270M Q4_K_M)")
    parser.add_argument("--prompts", nargs="+", default=list(PROMPTS), choices=list(PROMPTS))
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--n-draft", type=int, default=8, help="draft length of every speculative mode")
    add_report_options(parser, targets=False)
    args = parser.parse_args(argv)

    llama_cpp = _load_llama_cpp()
    if llama_cpp is None:
        return 2
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    model_path = Path(args.model) if args.model else spec_actor.default_model_path()
    report = Report("bench_llama_cpp_python", {
        "model": model_path.name, "prompts": args.prompts, "max_tokens": args.max_tokens, "repeats": args.repeats,
        "n_draft": args.n_draft, "threads": THREADS, "temp": 0.0, "llama_cpp_python": llama_cpp.__version__})
    model = spec_actor.load_model(model_path)
    common = dict(model_path=str(model_path), n_ctx=N_CTX, n_threads=THREADS, n_threads_batch=THREADS,
                  verbose=False)
    plain_llm = llama_cpp.Llama(**common)
    lookup_llm = llama_cpp.Llama(**common, draft_model=LlamaPromptLookupDecoding(num_pred_tokens=args.n_draft))

    modes: dict[str, Callable[[str, int], tuple[float, str]]] = {
        "llama-cpp-python plain": lambda p, n: llama_cpp_python_run(plain_llm, p, n),
        "llama-cpp-python prompt-lookup": lambda p, n: llama_cpp_python_run(lookup_llm, p, n),
        "spec_actor plain": lambda p, n: spec_actor_run(model, spec_actor.Spec("none"), p, n),
        "spec_actor ngram-mod": lambda p, n: spec_actor_run(
            model, spec_actor.Spec("ngram-mod", n_draft=args.n_draft), p, n),
        "spec_actor ngram-cache": lambda p, n: spec_actor_run(
            model, spec_actor.Spec("ngram-cache", n_draft=args.n_draft), p, n),
    }
    for run in modes.values():  # warm-up: page in the weights, build every code path once
        run(PROMPTS[args.prompts[0]], 16)
    samples: dict[str, dict[str, list[float]]] = {p: {m: [] for m in modes} for p in args.prompts}
    for i in range(args.repeats):
        for prompt in args.prompts:
            for name, run in modes.items():  # interleaved so that drift hits every mode alike
                print(f"[{i + 1}/{args.repeats}] {prompt:6} {name}", file=sys.stderr, flush=True)
                samples[prompt][name].append(run(PROMPTS[prompt], args.max_tokens)[0])

    medians = {p: {m: statistics.median(v) for m, v in by_mode.items()} for p, by_mode in samples.items()}
    results = {"samples": samples, "median": medians}
    print(f"\n{args.max_tokens} greedy tokens, {model_path.name}, {THREADS} threads, n_draft {args.n_draft}, "
          f"median of {args.repeats}; llama-cpp-python {llama_cpp.__version__}, spec_actor {spec_actor.__version__}")
    print("decode tokens/s, wall clock from the first token to the last; in brackets the ratio to the same "
          "engine's plain run\n")
    print(report_table({"settings": report.data["settings"], "results": results}).plain())
    return report.finish(args, results)


def report_table(report: dict[str, Any]) -> Table:
    """One row per prompt, one column per engine and mode: median tokens/s (ratio to that engine's plain)."""
    n = report["settings"]["n_draft"]
    columns = {"llama-cpp-python plain": "llama-cpp-python plain",
               "llama-cpp-python prompt-lookup": f"llama-cpp-python prompt lookup ({n})",
               "spec_actor plain": "spec_actor plain", "spec_actor ngram-mod": f"spec_actor ngram-mod ({n})",
               "spec_actor ngram-cache": f"spec_actor ngram-cache ({n})"}
    table = Table(("prompt", *columns.values()), "l" + "r" * len(columns))
    for prompt, by_mode in report["results"]["median"].items():
        cells = []
        for mode in columns:
            plain = by_mode[mode.split()[0] + " plain"]
            cells.append(f"{by_mode[mode]:.1f}" + ("" if mode.endswith("plain") or not plain
                                                    else f" ({by_mode[mode] / plain:.2f}x)"))
        table.add(prompt, *cells)
    return table


if __name__ == "__main__":
    sys.exit(main())
