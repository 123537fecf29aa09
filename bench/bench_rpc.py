"""What an RPC worker costs on one machine: tokens/s of a model local vs through a loopback worker.

    python bench/bench_rpc.py [--model PATH] [--tokens N] [--reps N] [--specs none auto]
                              [--threads N] [--worker-threads N] [--prompt FILE] [--json PATH]

Starts ``spec-actor rpc-worker`` on 127.0.0.1 (a subprocess of this Python),
loads the model on this process's CPU and with its layers on the worker
(``load_model(rpc=[...])``: all layers and the output head, and all but the
first layer, which then computes here), and times greedy requests of the
same prompt on each, alternating, for every spec. Tokens/s is the decode speed of the
session's own statistics; the table gives medians and the ratio to local.
On one machine the worker and this process share the cores, so the ratio
measures the protocol's per-step cost (a few round trips and copies over
loopback), not what a second machine's cores would add (docs/deployment.md,
"RPC workers").
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _common import Report, Table, add_report_options

import spec_actor
from spec_actor import Session, load_model
from spec_actor._rpc import check_workers

PROMPTS = Path(__file__).resolve().parent / "prompts"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_worker(threads: int) -> tuple[subprocess.Popen[bytes], str]:
    """A worker on a free loopback port, once it answers the handshake."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "spec_actor.cli", "rpc-worker", "--port", str(port),
                             "-t", str(threads)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            check_workers([endpoint], timeout=5)
            return proc, endpoint
        except spec_actor.ModelLoadError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise SystemExit(f"bench_rpc: no worker answered on {endpoint}") from None
            time.sleep(0.1)


def tokens_per_sec(model: spec_actor.Model, spec: str, prompt: str, tokens: int, threads: int) -> float:
    with Session(model, spec=spec, n_ctx=4096, n_threads=threads) as session:
        session.run(prompt, max_tokens=8, temp=0.0)  # warm: the first decode allocates, auto calibrates
        result = session.run(prompt, max_tokens=tokens, temp=0.0)
    if len(result.tokens) < tokens // 2:
        raise SystemExit(f"bench_rpc: the {spec} run ended after {len(result.tokens)} tokens; use another prompt")
    return result.stats.tokens_per_sec


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="GGUF file (default: the embedded Gemma 3 270M Q4_K_M)")
    parser.add_argument("--tokens", type=int, default=160, help="tokens per request (default: 160)")
    parser.add_argument("--reps", type=int, default=3, help="requests per row and placement (default: 3)")
    parser.add_argument("--specs", nargs="+", default=["none", "auto"], help="specs to time (default: none auto)")
    parser.add_argument("--threads", type=int, default=2, help="this process's CPU threads (default: 2)")
    parser.add_argument("--worker-threads", type=int, default=2, help="the worker's CPU threads (default: 2)")
    parser.add_argument("--prompt", help="prompt file (default: bench/prompts/copy.txt)")
    add_report_options(parser, targets=False)
    args = parser.parse_args()

    prompt = Path(args.prompt or PROMPTS / "copy.txt").read_text()
    report = Report("bench_rpc", {k: v for k, v in vars(args).items() if k != "json"})
    worker, endpoint = start_worker(args.worker_threads)
    try:
        local = load_model(args.model)
        n_layer = local.info.n_layer
        placements = {"local": local, "worker, all layers": load_model(args.model, rpc=[endpoint]),
                      "worker, all but layer 0": load_model(args.model, rpc=[endpoint], n_gpu_layers=n_layer)}
        rows = []
        for spec in args.specs:
            speeds: dict[str, list[float]] = {name: [] for name in placements}
            for _ in range(args.reps):  # alternating, so drift hits every placement alike
                for name, model in placements.items():
                    speeds[name].append(tokens_per_sec(model, spec, prompt, args.tokens, args.threads))
            base = statistics.median(speeds["local"])
            for name, values in speeds.items():
                rows.append({"spec": spec, "placement": name, "tokens_per_sec": values,
                             "median": statistics.median(values), "ratio": statistics.median(values) / base})
    finally:
        worker.terminate()
        worker.wait(30)
    status = report.finish(args, {"rows": rows})
    print(report_table(report.data).render())
    return status


def report_table(report: dict[str, Any]) -> Table:
    """Tokens/s by spec and placement, and the ratio to the model on this CPU (bench/render_docs.py draws it too)."""
    table = Table(("spec", "placement", "tokens/s (median)", "vs local"), "llrr")
    for row in report["results"]["rows"]:
        table.add(row["spec"], row["placement"], f"{row['median']:.1f}", f"{row['ratio']:.2f}x")
    return table


if __name__ == "__main__":
    sys.exit(main())
