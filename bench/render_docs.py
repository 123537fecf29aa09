"""Write the benchmark tables of the README and docs/ from the reports in bench/results/.

    python bench/render_docs.py                 # rewrite every marked region from the committed JSON
    python bench/render_docs.py --check         # exit 1 when a region differs from its JSON (nothing written)
    python bench/render_docs.py --run [NAME..]  # first rerun the benches behind the reports, then rewrite

A region is the text between ``<!-- bench:NAME -->`` and ``<!-- /bench:NAME -->``
in ``README.md`` or ``docs/*.md``; it shows ``bench/results/NAME.json`` as
a Markdown table and a line that says where the numbers come from. The
table is drawn by the same function that prints it when the bench runs:
``report_table(report)`` of the script named in the report's ``"bench"``
field, or ``spec-actor bench``'s own renderer for its ``--json`` output.
Text outside the markers is left alone.

``--run`` reruns each report's recorded ``command`` (from the checkout's
root, with ``--json`` pointing at the report) on this machine, so run it on
an idle one; a bench that fails keeps its old report and is named at the end.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from _common import RESULTS

from spec_actor.cli._bench import JSON_SCHEMA as CLI_SCHEMA
from spec_actor.cli._bench import render_report

REPO = RESULTS.parent.parent
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
_REGION = re.compile(r"(<!-- bench:(?P<name>[\w.-]+) -->\n)(?P<body>.*?)(<!-- /bench:(?P=name) -->)", re.S)


def load_reports() -> dict[str, dict[str, Any]]:
    """Every report in bench/results/, by file stem."""
    return {path.stem: json.loads(path.read_text(encoding="utf-8")) for path in sorted(RESULTS.glob("*.json"))}


def render_region(name: str, report: dict[str, Any], doc: Path) -> str:
    """The Markdown of one region: the table, then where it comes from."""
    if report.get("schema") == CLI_SCHEMA:
        body = render_report(report, markdown=True)
    else:
        body = importlib.import_module(report["bench"]).report_table(report).markdown()
    return f"{body}\n\n{source_line(name, report, doc)}\n"


def source_line(name: str, report: dict[str, Any], doc: Path) -> str:
    """One line naming the JSON, the command, the date, the machine and how the numbers were obtained."""
    link = os.path.relpath(RESULTS / f"{name}.json", doc.parent)
    mach = report["machine"]
    cpus = f"{mach['cpu_count']} CPUs"
    if mach.get("cpus_usable") not in (None, mach["cpu_count"]):
        cpus += f" ({mach['cpus_usable']} usable)"
    load = ""
    if mach.get("load_average") is not None:
        load = f", load average {mach['load_average']:.2f}"
        if report.get("load_average_after") is not None:
            load += f" before, {report['load_average_after']:.2f} after"
    source = report.get("source", "measured")
    how = "" if source == "measured" else f" {source}"
    command = shlex.join(without_json(shlex.split(report["command"])))
    return (f"<sub>Data: [`bench/results/{name}.json`]({link}), from `{command}` on "
            f"{report['time'][:10]}, {mach['cpu']}, {cpus}{load}.{how}</sub>")


def render_doc(text: str, doc: Path, reports: dict[str, dict[str, Any]]) -> tuple[str, list[str]]:
    """The document with every region rewritten, and the report names it used."""
    used: list[str] = []

    def replace(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in reports:
            raise SystemExit(f"{doc.relative_to(REPO)}: region bench:{name} has no bench/results/{name}.json")
        used.append(name)
        return match[1] + render_region(name, reports[name], doc) + match[4]

    return _REGION.sub(replace, text), used


def rerun(names: list[str], reports: dict[str, dict[str, Any]]) -> list[str]:
    """Rerun the benches behind the named reports; the names whose run failed."""
    failed = []
    for name in names:
        argv = rerun_argv(reports[name]["command"], RESULTS / f"{name}.json")
        print(f"render_docs: running {shlex.join(argv)}", file=sys.stderr, flush=True)
        if subprocess.run(argv, cwd=REPO).returncode != 0:
            failed.append(name)
    return failed


def rerun_argv(command: str, out: Path) -> list[str]:
    """A report's recorded command as argv for this interpreter, writing its JSON to ``out``."""
    words = without_json(shlex.split(command))
    head = {"python": [sys.executable], "spec-actor": [sys.executable, "-m", "spec_actor.cli"]}.get(words[0])
    if head is None:
        raise SystemExit(f"render_docs: cannot rerun {command!r}: it must start with 'python' or 'spec-actor'")
    return [*head, *words[1:], "--json", str(out)]


def without_json(words: list[str]) -> list[str]:
    """A command's words without its ``--json PATH`` (or ``--json=PATH``)."""
    kept: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word == "--json":
            skip = True
        elif not word.startswith("--json="):
            kept.append(word)
    return kept


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="only check that the docs match the JSON; exit 1 if not")
    mode.add_argument("--run", nargs="*", metavar="NAME",
                      help="rerun the benches behind these reports first (default: all of them)")
    args = parser.parse_args(argv)
    reports = load_reports()
    failed: list[str] = []
    if args.run is not None:
        unknown = sorted(set(args.run) - set(reports))
        if unknown:
            parser.error(f"no report named {', '.join(unknown)}; choose from {', '.join(reports)}")
        failed = rerun(args.run or list(reports), reports)
        reports = load_reports()
    stale, used = [], set()
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        new, names = render_doc(text, doc, reports)
        used.update(names)
        if new != text:
            stale.append(str(doc.relative_to(REPO)))
            if not args.check:
                doc.write_text(new, encoding="utf-8")
    for name in sorted(set(reports) - used):
        print(f"render_docs: note: bench/results/{name}.json is shown in no document", file=sys.stderr)
    if args.check and stale:
        print(f"render_docs: out of date: {', '.join(stale)}; run python bench/render_docs.py", file=sys.stderr)
        return 1
    done = f"rewrote {', '.join(stale)}" if stale else "the docs already match their reports"
    print(f"render_docs: {done} ({len(used)} reports from bench/results/)", file=sys.stderr)
    if failed:
        print(f"render_docs: these benches failed and kept their old reports: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
