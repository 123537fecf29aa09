"""What the scripts in ``bench/`` share: the ``--json`` report, ``--check`` targets and the table printer.

A script adds the two options with :func:`add_report_options`, fills a
:class:`Report` (settings, its results as plain JSON data, the targets it
measured) and ends with ``return report.finish(args)``: that prints the
targets, writes ``--json PATH`` and gives the exit status, 1 under
``--check`` when a target was missed.

``bench/render_docs.py`` turns the reports committed in ``bench/results/``
into the tables of the README and ``docs/benchmarks.md``: a script whose
report goes there defines ``report_table(report) -> Table`` and prints its
own table with it too, so the terminal and the docs show the same thing.

The scripts import this file as ``_common``: Python puts a script's own
folder first on ``sys.path``, so it works from any directory, and the
``spec_actor`` they import is the installed one.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections.abc import Sequence
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spec_actor import RunResult

import spec_actor
from spec_actor._machine import machine_info
from spec_actor._table import Table

SCHEMA = "spec_actor.bench-report/1"
RESULTS = Path(__file__).resolve().parent / "results"
"""Where the reports behind the README and docs/benchmarks.md live."""

__all__ = ["RESULTS", "SCHEMA", "Report", "Table", "Target", "add_report_options", "command_line", "targets_table",
           "write_json"]


def add_report_options(parser: argparse.ArgumentParser, *, targets: bool = True) -> None:
    """Add ``--json PATH`` and, for a script that measures targets, ``--check``."""
    parser.add_argument("--json", metavar="PATH", help="also write the settings, results and targets here as JSON")
    if targets:
        parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")


@dataclass(frozen=True)
class Target:
    """One target a benchmark measured: ``value`` must be ``>=`` or ``<=`` ``bound``."""

    name: str
    value: float
    op: str
    bound: float
    unit: str = ""

    def __post_init__(self) -> None:
        if self.op not in (">=", "<="):
            raise ValueError(f"Target.op must be '>=' or '<=', got {self.op!r}")

    @property
    def met(self) -> bool:
        """Whether the measured value is on the right side of the bound."""
        return self.value >= self.bound if self.op == ">=" else self.value <= self.bound

    def describe(self) -> str:
        """The bound as the tables print it, e.g. ``>= 0.98x``."""
        return f"{self.op} {self.bound:g}{self.unit}"


class Report:
    """A benchmark's JSON report: what ran, where, with which settings, what it measured."""

    def __init__(self, bench: str, settings: dict[str, Any]) -> None:
        self.data: dict[str, Any] = {
            "schema": SCHEMA,
            "bench": bench,
            "command": command_line(),
            "source": "measured",
            "spec_actor_version": spec_actor.__version__,
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "machine": machine_info(),
            "settings": settings,
            "results": None,
            "targets": [],
        }
        self._start = time.perf_counter()

    def add_target(self, target: Target) -> Target:
        """Record a target and return it."""
        self.data["targets"].append({**asdict(target), "met": target.met})
        return target

    @property
    def targets(self) -> list[Target]:
        """The targets recorded so far."""
        return [Target(t["name"], t["value"], t["op"], t["bound"], t["unit"]) for t in self.data["targets"]]

    def finish(self, args: argparse.Namespace, results: Any) -> int:
        """Store the results, say which targets were missed, write ``--json``; the exit status.

        The status is 1 when ``--check`` was given and a target was missed, else 0.
        """
        self.data["results"] = results
        self.data["seconds"] = round(time.perf_counter() - self._start, 1)
        self.data["load_average_after"] = machine_info()["load_average"]
        targets = self.targets
        missed = [t for t in targets if not t.met]
        if targets:
            print(f"\n{len(targets) - len(missed)} of {len(targets)} targets met", file=sys.stderr)
            for t in missed:
                print(f"  missed: {t.name}: {t.value:.3g}{t.unit}, target {t.describe()}", file=sys.stderr)
        if args.json:
            write_json(args.json, self.data)
        return 1 if missed and getattr(args, "check", False) else 0


def targets_table(targets: Sequence[Target]) -> Table:
    """A table of targets: what, measured value, bound, met."""
    table = Table(("target", "value", "bound", "met"), "lrrl")
    for t in targets:
        table.add(t.name, f"{t.value:.3g}{t.unit}", t.describe(), "yes" if t.met else "NO")
    return table


def command_line() -> str:
    """This run as a command a reader can type: ``python bench/NAME.py ARGS``."""
    return shlex.join(["python", f"bench/{Path(sys.argv[0]).name}", *sys.argv[1:]])


def write_json(path: str | Path, data: Any) -> None:
    """Write ``data`` as indented JSON; exit with a one-line message when the file cannot be written."""
    try:
        Path(path).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise SystemExit(f"cannot write {path}: {exc.strerror or exc}") from None


@dataclass
class Rates:
    """The measured rates of one mode on one workload, and its last run."""

    rates: list[float] = field(default_factory=list)
    last: RunResult | None = None

    @property
    def median(self) -> float:
        """The median of `rates`."""
        return statistics.median(self.rates)

    def paired_ratio(self, *baselines: Rates) -> float:
        """Median over repetitions of this mode's rate over the best baseline's in the same repetition.

        The runs of one repetition ran next to each other, so a phase of the
        machine that slows every run for a while (a shared host's other
        tenants) moves both sides of each ratio; ratios of medians taken
        across repetitions compare runs minutes apart.
        """
        n = min(len(self.rates), *(len(b.rates) for b in baselines))
        if n == 0:
            raise ValueError("no repetition measured both sides")
        return statistics.median(self.rates[i] / max(b.rates[i] for b in baselines) for i in range(n))
