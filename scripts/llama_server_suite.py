"""Run llama.cpp's own server test suite against ``llama-server`` and ``spec-actor serve``; count what passes.

The suite is ``tools/server/tests`` of the llama.cpp source that spec_actor
builds (found through bench/llama_server_build.py, which builds llama-server
there once). Its tests start the server themselves, as the binary named by
``LLAMA_SERVER_BIN_PATH`` with llama-server's flags, and fetch their models
from Hugging Face. This script points that variable at a wrapper, this very
file with ``--as-server``, which runs either server on the embedded Gemma 3
270M whatever model the test names (nothing is downloaded) and, for
spec-actor, maps llama-server's flags to ``spec-actor serve``'s (below,
`spec_actor_args`). The suite's presets are not preloaded (they would only
download). Expected texts in the suite were written for its own tiny models,
so some tests fail on both servers: compare the two columns, not the totals.

    python scripts/llama_server_suite.py                       # every file, both servers
    python scripts/llama_server_suite.py --files test_tokenize.py test_completion.py \\
        --json suite.json                                      # some files; results merged into suite.json
    python scripts/llama_server_suite.py --report suite.json   # the table of what suite.json holds

Needs the suite's Python packages beside spec_actor's test extra: requests,
wget, filelock, aiohttp (its tools/server/tests/requirements.txt, whose
pins this script does not need).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SERVERS = ("llama-server", "spec-actor")

# llama-server's flags that take a value (the ones the suite passes; tools/server/tests/utils.py).
VALUE_FLAGS = {
    "--port", "--temp", "--seed", "--host", "--model", "-m", "--model-url", "--model-draft", "--hf-repo",
    "--hf-file", "--models-dir", "--models-max", "--models-preset", "--cors-origins", "--batch-size",
    "--ubatch-size", "-b", "-ub", "--threads", "-t", "--n-gpu-layers", "--pooling", "--alias", "--tags", "--ctx-size", "-c",
    "--parallel", "-np", "-ctk", "-ctv", "-fa", "--n-predict", "--slot-save-path", "--grp-attn-n", "--grp-attn-w",
    "--lora", "--spec-type", "--api-key", "--spec-draft-n-max", "--spec-draft-n-min", "--spec-synth-len",
    "--spec-synth-rates", "--reasoning-format", "--reasoning", "--chat-template", "--chat-template-file",
    "--mmproj-url", "--media-path", "--sleep-idle-seconds", "--cache-ram", "--tools", "--tools-runtime",
    "--mcp-servers-config", "--mcp-servers-json", "--kv-unified-per-slot",
}
MODEL_FLAGS = {"--model", "-m", "--model-url", "--hf-repo", "--hf-file"}
"""The flags that name a model: both servers get the embedded one instead."""


def parse_flags(args: list[str]) -> list[tuple[str, str | None]]:
    """llama-server's command line as (flag, value or None) pairs, in order."""
    pairs: list[tuple[str, str | None]] = []
    i = 0
    while i < len(args):
        flag = args[i]
        if flag in VALUE_FLAGS and i + 1 < len(args):
            pairs.append((flag, args[i + 1]))
            i += 2
        else:
            pairs.append((flag, None))
            i += 1
    return pairs


def llama_server_args(pairs: list[tuple[str, str | None]], model: str) -> list[str]:
    """llama-server's own flags, the model replaced by ``model``."""
    out = ["-m", model]
    for flag, value in pairs:
        if flag not in MODEL_FLAGS:
            out += [flag] if value is None else [flag, value]
    return out


def spec_actor_args(pairs: list[tuple[str, str | None]], scratch: Path) -> list[str]:
    """``spec-actor serve``'s flags for llama-server's: the ones with a counterpart; the others are left out.

    llama-server's ``--ctx-size`` is the context of all its slots together,
    ``--pool``'s actors each have ``-c``, unless ``--kv-unified`` makes ``-c``
    the cache they share, as it is there (``--kv-unified-per-slot`` is passed
    as it is; decision 0113); a ``--chat-template`` given as Jinja
    text is written to a file under ``scratch``, a built-in template's name
    is passed as it is. Speculation is off unless ``--spec-type`` asks, as in
    llama-server. ``--alias``'s names go to ``--model-name`` sorted: llama-server's
    model id is the first of them in that order. ``/metrics`` is off unless
    ``--metrics`` asks, and ``/slots`` with ``--no-slots``, as in llama-server
    (here both are on by default: decision 0107). ``--verbose`` is passed: its
    ``__verbose`` answers.
    """
    flags = dict(pairs)
    slots = int(flags.get("--parallel") or flags.get("-np") or 1)
    out = ["--spec", flags.get("--spec-type") or "none", "--pool", str(slots)]
    ctx = flags.get("--ctx-size") or flags.get("-c")
    shared = "--kv-unified" in flags or "-kvu" in flags
    if ctx:
        out += ["-c", str(int(ctx) if shared else max(int(ctx) // slots, 1))]
    if shared:
        out.append("--kv-unified")
    if flags.get("--kv-unified-per-slot"):
        out += ["--kv-unified-per-slot", str(flags["--kv-unified-per-slot"])]
    for ours, names in (("--port", ("--port",)), ("-t", ("--threads", "-t")), ("--host", ("--host",)),
                        ("--api-key", ("--api-key",)), ("--cors-origins", ("--cors-origins",)),
                        ("--chat-template", ("--chat-template-file",)), ("--temp", ("--temp",)),
                        ("--seed", ("--seed",)), ("--n-predict", ("--n-predict",)), ("--model-tags", ("--tags",)),
                        ("--reasoning", ("--reasoning",)), ("--batch-size", ("--batch-size", "-b")),
                        ("--ubatch-size", ("--ubatch-size", "-ub")),
                        ("--sleep-idle-seconds", ("--sleep-idle-seconds",))):
        for name in names:
            if flags.get(name):
                out += [ours, str(flags[name])]
    if flags.get("--alias"):
        out += ["--model-name", ",".join(sorted(a.strip() for a in str(flags["--alias"]).split(",") if a.strip()))]
    if "--metrics" not in flags:
        out.append("--no-metrics")
    if "--no-slots" in flags:
        out.append("--no-slots")
    if "--verbose" in flags:
        out.append("--verbose")
    template = flags.get("--chat-template")
    if template and ("{%" in template or "{{" in template):
        path = scratch / f"template-{os.getpid()}.jinja"
        path.write_text(template)
        out += ["--chat-template", str(path)]
    elif template:  # a built-in template's name, which --chat-template takes too (decision 0102)
        out += ["--chat-template", template]
    return out


def run_as_server(which: str, llama_bin: str, model: str, args: list[str]) -> int:
    """The wrapper's part: start the chosen server with the suite's command line, mapped; its exit status."""
    pairs = parse_flags(args)
    if which == "llama-server":
        cmd = [llama_bin, *llama_server_args(pairs, model)]
    else:
        scratch = Path(tempfile.gettempdir())
        cmd = [sys.executable, "-m", "spec_actor.cli", "serve", *spec_actor_args(pairs, scratch)]
    print(f"[suite wrapper] {' '.join(cmd)}", file=sys.stderr, flush=True)
    os.execv(cmd[0], cmd)
    return 127  # not reached


def suite_dir(llama_bin: Path) -> Path:
    """``tools/server/tests`` of the source the cached build was made from."""
    source = (llama_bin.parent.parent.parent / "prefix" / "source-dir.txt").read_text().strip()
    tests = Path(source) / "tools" / "server" / "tests"
    if not (tests / "utils.py").exists():
        raise SystemExit(f"no llama.cpp server tests in {tests}")
    return tests


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_file(tests: Path, name: str, server: str, llama_bin: Path, model: str, timeout: float,
             work: Path) -> dict:
    """One test file of the suite against one server: counts and the failures' first lines.

    pytest runs in a process group of its own, with the servers its tests
    start: past ``timeout`` the whole group is killed, and the tests that had
    ended by then are counted.
    """
    wrapper = work / f"server-{server}"
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} {Path(__file__).resolve()} --as-server {server} "
                       f"--llama-bin {llama_bin} --model {model} -- \"$@\"\n")
    wrapper.chmod(0o755)
    log = work / f"{server}-{name}.log"
    env = dict(os.environ, LLAMA_SERVER_BIN_PATH=str(wrapper), PORT=str(free_port()), LLAMA_CACHE=str(work),
               COLUMNS="250", PYTHONDONTWRITEBYTECODE="1",  # nothing written into the llama.cpp source
               PYTHONPATH=os.pathsep.join([str(HERE), str(tests)]))
    cmd = [sys.executable, "-m", "pytest", "-v", "-rfE", "-p", "no:cacheprovider", "-p", "_llama_suite_plugin",
           "-c", str(tests / "pytest.ini"), "--rootdir", str(tests), "-m", "not slow", str(tests / "unit" / name)]
    start = time.monotonic()
    with log.open("w") as out:
        # in the suite's folder, as its tests.sh runs it: they name template files relative to it
        proc = subprocess.Popen(cmd, cwd=tests, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            proc.wait(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # pytest, and any server a test left running
            proc.wait()
    result = {"passed": 0, "failed": 0, "skipped": 0, "seconds": round(time.monotonic() - start, 1),
              "timed_out": timed_out, "failures": []}
    text = log.read_text(errors="replace")
    for match in re.finditer(r"^\S+?::(.+?) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b", text, re.M):
        outcome = match.group(2)
        key = {"PASSED": "passed", "XPASS": "passed", "SKIPPED": "skipped", "XFAIL": "skipped"}.get(outcome, "failed")
        result[key] += 1
    for match in re.finditer(r"^(?:FAILED|ERROR) \S+?::(.+?)(?: - (.*))?$", text, re.M):
        result["failures"].append(f"{match.group(1)}: {(match.group(2) or '')[:200]}")
    return result


def print_table(results: dict) -> None:
    """Per file: passed/run on each server; then the totals."""
    print(f"{'file':32} {'llama-server':>14} {'spec-actor':>14}")
    totals = {s: [0, 0] for s in SERVERS}
    for name in sorted({n for s in SERVERS for n in results.get(s, {})}):
        cells = []
        for server in SERVERS:
            r = results.get(server, {}).get(name)
            if r is None:
                cells.append("-")
                continue
            run = r["passed"] + r["failed"]
            totals[server][0] += r["passed"]
            totals[server][1] += run
            cells.append(f"{r['passed']}/{run}" + (" (timeout)" if r["timed_out"] else ""))
        print(f"{name:32} {cells[0]:>14} {cells[1]:>14}")
    print(f"{'total':32} " + " ".join(f"{f'{p}/{n}':>14}" for p, n in totals.values()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", nargs="*", help="test files of tools/server/tests/unit (default: all)")
    parser.add_argument("--servers", nargs="*", choices=SERVERS, default=list(SERVERS))
    parser.add_argument("--timeout", type=float, default=600, help="seconds per file and server (default 600)")
    parser.add_argument("--json", type=Path, help="merge the results into this JSON file")
    parser.add_argument("--report", type=Path, help="print the table of a JSON file of results and exit")
    parser.add_argument("--logs", type=Path, help="keep each run's pytest output in this folder")
    parser.add_argument("--as-server", choices=SERVERS, help=argparse.SUPPRESS)
    parser.add_argument("--llama-bin", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("server_args", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.as_server:
        raise SystemExit(run_as_server(args.as_server, args.llama_bin, args.model, args.server_args))
    if args.report:
        print_table(json.loads(args.report.read_text()))
        return

    sys.path.insert(0, str(HERE.parent / "bench"))
    from llama_server_build import build_llama_server

    import spec_actor

    llama_bin = build_llama_server()
    tests = suite_dir(llama_bin)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a `timeout` still ends the running file's group
    model = spec_actor.load_model().path
    names = args.files or sorted(p.name for p in (tests / "unit").glob("test_*.py"))
    results = json.loads(args.json.read_text()) if args.json and args.json.exists() else {}
    work = Path(tempfile.mkdtemp(prefix="llama-suite-"))
    if args.logs:
        args.logs.mkdir(parents=True, exist_ok=True)
    try:
        for name in names:
            for server in args.servers:
                r = run_file(tests, name, server, llama_bin, model, args.timeout, work)
                results.setdefault(server, {})[name] = r
                if args.logs:
                    shutil.copy(work / f"{server}-{name}.log", args.logs)
                print(f"{name} on {server}: {r['passed']} passed, {r['failed']} failed, {r['skipped']} skipped "
                      f"in {r['seconds']} s" + (" (timed out)" if r["timed_out"] else ""), flush=True)
                if args.json:
                    args.json.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print_table(results)


if __name__ == "__main__":
    main()
