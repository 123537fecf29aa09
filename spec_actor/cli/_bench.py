"""``spec-actor bench``: every requested speculative type on the built-in prompts.

Each measured run is greedy generation on a fresh actor (a fresh session, so
no n-gram state carries over between runs), timed by the native decode clock
(prompt prefill excluded). Runs are interleaved -- repeat by repeat, prompt by
prompt, type by type -- so that drift in machine load hits every mode alike.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import trio

from .._actor import open_actor
from .._errors import ConfigError
from .._events import TERMINAL, Error
from .._machine import machine_info
from .._model import Model
from .._sampling import Sampling
from .._spec import DRAFT_MODEL_TYPES, Spec, canonical_type
from .._stats import StatsSnapshot
from .._table import Table
from ._common import (CliError, Subcommands, add_draft_options, add_engine_options, add_model_options,
                      auto_n_ctx, make_spec, n_draft_arg, open_model, positive_int)
from ._interrupts import Interrupts
from ._prompts import DESCRIPTIONS, PROMPTS
from ._status import LineStatus, NoStatus, is_terminal

DEFAULT_TYPES = ("none", "ngram-mod", "ngram-cache", "ngram-simple", "ngram-map-k", "ngram-map-k4v")
JSON_SCHEMA = "spec_actor.bench/1"
_WARMUP_TOKENS = 32


def add_parser(sub: Subcommands) -> None:
    p = sub.add_parser(
        "bench", help="compare speculative types on built-in prompts",
        description="Run the built-in prompts (copy-heavy code, a story, a chat turn) with every requested "
                    "speculative type, greedy, with warm-up and repeats, and print a table: median decode "
                    "tokens/s, ratio to plain decoding, draft acceptance and tokens per step.")
    add_model_options(p)
    p.add_argument("--types", nargs="+", metavar="TYPE",
                   help=f"speculative types to run, space- or comma-separated (default: {' '.join(DEFAULT_TYPES)})")
    p.add_argument("--prompts", nargs="+", metavar="NAME",
                   help=f"built-in prompts to run (default: {' '.join(PROMPTS)})")
    p.add_argument("-d", "--n-draft", type=n_draft_arg, metavar="N|auto",
                   help="most tokens drafted per step, for every type (default: each type's own)")
    add_draft_options(p)
    p.add_argument("-n", "--max-tokens", type=positive_int, default=160, metavar="N",
                   help="tokens generated per run (default: 160)")
    p.add_argument("-r", "--repeats", type=positive_int, default=3, metavar="N",
                   help="measured runs per prompt and type; the table shows medians (default: 3)")
    p.add_argument("--warmup", type=int, default=1, metavar="N",
                   help=f"untimed {_WARMUP_TOKENS}-token runs per type before measuring (default: 1)")
    add_engine_options(p)
    p.add_argument("--json", metavar="FILE", help="also write every sample and median as JSON")
    p.add_argument("--plot", metavar="FILE.png", help="also draw a bar chart (needs spec_actor[plot])")
    p.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    p.set_defaults(handler=run)


@dataclass
class Cell:
    """The samples of one prompt and one speculative type."""

    prompt: str
    label: str
    spec: Spec
    samples: list[StatsSnapshot] = field(default_factory=list)

    @property
    def median_tps(self) -> float:
        return statistics.median(s.tokens_per_sec for s in self.samples)

    @property
    def acceptance(self) -> float | None:
        drafted = sum(s.drafts_generated for s in self.samples)
        return sum(s.drafts_accepted for s in self.samples) / drafted if drafted else None

    @property
    def tokens_per_step(self) -> float:
        iters = sum(s.iters for s in self.samples)
        return sum(s.tokens_emitted for s in self.samples) / iters if iters else 0.0


def run(args: argparse.Namespace) -> int:
    plt = _pyplot() if args.plot else None
    specs = _specs(args)
    prompts = _prompt_names(args.prompts)
    if args.warmup < 0:
        raise CliError("argument --warmup: expected an integer >= 0", exit_code=2)
    model = open_model(args, mtp=any(s.is_mtp for s in specs.values()))
    tokens = {name: model.tokenizer.encode(PROMPTS[name]) for name in prompts}
    n_ctx = args.n_ctx or auto_n_ctx(max(map(len, tokens.values())), args.max_tokens, model.info.n_ctx_train)
    cells = {(p, label): Cell(p, label, spec) for p in prompts for label, spec in specs.items()}
    progress = LineStatus(sys.stdout, sys.stderr) if is_terminal(sys.stderr) else NoStatus(sys.stdout, sys.stderr)
    total = len(cells) * args.repeats + len(specs) * args.warmup

    async def measure() -> None:
        done = 0
        for label, spec in specs.items():
            for _ in range(args.warmup):
                done += 1
                progress.status(f"bench {done}/{total}: warm-up {label}", force=True)
                await _one_run(model, spec, tokens[prompts[0]], min(args.max_tokens, _WARMUP_TOKENS), n_ctx,
                               args.threads, label)
        for _ in range(args.repeats):
            for cell in cells.values():
                done += 1
                progress.status(f"bench {done}/{total}: {cell.prompt} {cell.label}", force=True)
                cell.samples.append(await _one_run(model, cell.spec, tokens[cell.prompt], args.max_tokens,
                                                   n_ctx, args.threads, cell.label))

    interrupts = Interrupts()
    interrupts.on_force.append(progress.close)
    try:
        trio.run(interrupts.run, measure)
    finally:
        progress.close()
    measured = [c for c in cells.values() if c.samples]
    meta = _meta(model, args, n_ctx)
    if measured:
        print(render_table(measured, meta, markdown=args.markdown))
    if interrupts.signum is not None:
        print("spec-actor: interrupted; the table shows the runs that finished, no files were written",
              file=sys.stderr, flush=True)
        return interrupts.exit_code
    if args.json:
        _write(args.json, json.dumps(to_json(measured, meta), indent=2) + "\n")
    if plt is not None:
        plot(plt, measured, meta, args.plot)
    return 0


async def _one_run(model: Model, spec: Spec, tokens: list[int], max_tokens: int, n_ctx: int,
                   threads: int | None, label: str) -> StatsSnapshot:
    """One greedy run on a fresh actor: the request's statistics."""
    terminal = None
    try:
        async with open_actor(model, spec=spec, n_ctx=n_ctx, n_threads=threads) as actor:
            async with actor.stream_events(tokens, max_tokens=max_tokens, sampling=Sampling(temp=0.0)) as events:
                async for ev in events:
                    if isinstance(ev, TERMINAL):
                        terminal = ev
    except ConfigError as exc:
        raise CliError(f"{label}: {exc.message}", exit_code=2) from None
    if isinstance(terminal, Error):
        raise CliError(f"{label}: generation failed: {terminal.reason}")
    return events.stats()


def _specs(args: argparse.Namespace) -> dict[str, Spec]:
    names = [t for item in (args.types or DEFAULT_TYPES) for t in item.replace(",", " ").split()]
    if not names:
        raise CliError("argument --types: name at least one speculative type", exit_code=2)
    specs: dict[str, Spec] = {}
    for name in names:
        try:
            canon = canonical_type(name)
            draft = args.draft_model if canon in DRAFT_MODEL_TYPES else None  # the others ignore it
            specs[canon] = make_spec(canon, args.n_draft if canon != "none" else None, draft, args.spec_param)
        except ConfigError as exc:
            raise CliError(f"argument --types: {exc.message}", exit_code=2) from None
    return specs


def _prompt_names(names: list[str] | None) -> list[str]:
    chosen = [n for item in (names or PROMPTS) for n in item.replace(",", " ").split()]
    unknown = [n for n in chosen if n not in PROMPTS]
    if unknown or not chosen:
        raise CliError(f"argument --prompts: expected names from {', '.join(PROMPTS)}, "
                       f"got {' '.join(unknown) or 'none'}", exit_code=2)
    return list(dict.fromkeys(chosen))


def _meta(model: Model, args: argparse.Namespace, n_ctx: int) -> dict[str, Any]:
    from .. import __version__

    info = model.info
    return {
        "spec_actor_version": __version__,
        "command": shlex.join(["spec-actor", *sys.argv[1:]]),
        "model": {"path": info.path, "name": model.meta("general.name"), "arch": info.arch,
                  "description": info.description, "n_params": info.n_params, "size_bytes": info.size_bytes},
        "machine": machine_info(),
        "settings": {"max_tokens": args.max_tokens, "repeats": args.repeats, "warmup": args.warmup,
                     "temp": 0.0, "n_ctx": n_ctx, "threads": args.threads or os.cpu_count(),
                     "n_draft": args.n_draft},
        "prompts": {name: DESCRIPTIONS[name] for name in PROMPTS},
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def _top_drafter(cell: Cell) -> str | None:
    """For auto, the drafter that supplied most tokens in the last run; None for a fixed type."""
    if not cell.spec.is_auto or not cell.samples:
        return None
    drafters = [d for d in cell.samples[-1].drafters if d.name != "none"]
    return max(drafters, key=lambda d: d.accepted).name if drafters else "none"


def _plain(cells: list[Cell], prompt: str) -> Cell | None:
    return next((c for c in cells if c.prompt == prompt and c.spec.type == "none"), None)


def to_json(cells: list[Cell], meta: dict[str, Any]) -> dict[str, Any]:
    """The benchmark as JSON-ready data: metadata, then one result per prompt and type."""
    results = []
    for cell in cells:
        plain = _plain(cells, cell.prompt)
        results.append({
            "prompt": cell.prompt,
            "type": cell.spec.type,
            "n_draft": cell.spec.n_draft,
            "median_tokens_per_sec": cell.median_tps,
            "ratio_to_plain": cell.median_tps / plain.median_tps if plain and plain.median_tps else None,
            "acceptance_rate": cell.acceptance,
            "mean_accepted_per_step": cell.tokens_per_step,
            "tokens_per_sec": [s.tokens_per_sec for s in cell.samples],
            "tokens_emitted": [s.tokens_emitted for s in cell.samples],
            "drafts_generated": [s.drafts_generated for s in cell.samples],
            "drafts_accepted": [s.drafts_accepted for s in cell.samples],
            "iters": [s.iters for s in cell.samples],
            "prompt_tokens": cell.samples[0].prompt_tokens,
            "ttft_ms": [s.ttft_us / 1000 for s in cell.samples],
            "drafters": cell.samples[-1].drafter_summary(),
            "top_drafter": _top_drafter(cell),
        })
    return {"schema": JSON_SCHEMA, **meta, "results": results}


def render_table(cells: list[Cell], meta: dict[str, Any], *, markdown: bool = False) -> str:
    """The side-by-side table of measured cells, with a header naming model, settings and machine."""
    return render_report(to_json(cells, meta), markdown=markdown)


def render_report(report: dict[str, Any], *, markdown: bool = False) -> str:
    """The table of a ``--json`` report (as :func:`to_json` makes it), with its header lines.

    ``bench/render_docs.py`` renders docs/benchmarks.md's table from the committed
    report with this same function.
    """
    s, m, mach = report["settings"], report["model"], report["machine"]
    lines = [
        f"model:   {m['name'] or m['path']} ({m['description']})",
        f"runs:    {s['max_tokens']} greedy tokens, median of {s['repeats']} after {s['warmup']} warm-up "
        f"per type, {s['threads']} threads",
        f"machine: {mach['cpu']}, {mach['cpu_count']} CPUs, {mach['system']}; spec_actor {report['spec_actor_version']}",
        "",
    ]
    if markdown:
        lines = [f"{line}  " if line else line for line in lines]
    table = Table(("prompt", "type", "n_draft", "tok/s", "vs plain", "accepted", "tok/step"), "llrrrrr")
    for i, r in enumerate(report["results"]):
        if i and r["prompt"] != report["results"][i - 1]["prompt"]:
            table.section()
        ratio, accepted = r["ratio_to_plain"], r["acceptance_rate"]
        top = r.get("top_drafter")  # absent from reports older than auto
        table.add(r["prompt"], f"{r['type']} ({top})" if top else r["type"], r["n_draft"] if r["type"] != "none" else "-",
                  f"{r['median_tokens_per_sec']:.1f}", f"{ratio:.2f}x" if ratio is not None else "-",
                  f"{accepted:.1%}" if accepted is not None else "-", f"{r['mean_accepted_per_step']:.2f}")
    return "\n".join([*lines, table.render(markdown=markdown)])


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise CliError("--plot needs matplotlib: pip install 'spec_actor[plot]'") from None
    return plt


def plot(plt: Any, cells: list[Cell], meta: dict[str, Any], path: str) -> None:
    """A grouped bar chart of median tokens/s: one group per prompt, one bar per type."""
    prompts = list(dict.fromkeys(c.prompt for c in cells))
    types = list(dict.fromkeys(c.spec.type for c in cells))
    by_key = {(c.prompt, c.spec.type): c for c in cells}
    width = 0.8 / len(types)
    fig, ax = plt.subplots(figsize=(max(6.0, 2.0 + 0.5 * len(prompts) * len(types)), 4.5))
    for i, type_ in enumerate(types):
        xs = [p + (i - (len(types) - 1) / 2) * width for p in range(len(prompts))]
        ys = [by_key[(p, type_)].median_tps if (p, type_) in by_key else 0.0 for p in prompts]
        bars = ax.bar(xs, ys, width, label=type_)
        for bar, prompt in zip(bars, prompts):
            plain = _plain(cells, prompt)
            if plain is not None and plain.median_tps and (prompt, type_) in by_key:
                ax.annotate(f"{by_key[(prompt, type_)].median_tps / plain.median_tps:.2f}x",
                            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                            ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(prompts)), prompts)
    ax.set_ylabel("decode tokens/s (median)")
    s, m = meta["settings"], meta["model"]
    ax.set_title(f"{m['name'] or m['arch']}: {s['max_tokens']} greedy tokens, {s['threads']} threads")
    ax.legend(fontsize=8)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=120)
    except OSError as exc:
        raise CliError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)


def _write(path: str, text: str) -> None:
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as exc:
        raise CliError(f"cannot write {path}: {exc.strerror or exc}") from None
