"""``spec-actor rpc-worker``: serve this machine's devices to ggml RPC clients, until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import ipaddress
import os
import signal
import sys
import threading

from .._rpc import is_loopback
from ._common import CliError, Subcommands, positive_int

DEFAULT_PORT = 50052
"""llama.cpp's rpc-server default port."""

WARNING = ("spec-actor: WARNING: ggml's RPC protocol has no authentication and a worker computes whatever a "
           "client sends it; anyone who can reach {host}:{port} can use this machine. Listen only on a private "
           "network, or keep 127.0.0.1 and reach it through an SSH tunnel (docs/deployment.md, \"RPC workers\").")


def add_parser(sub: Subcommands) -> None:
    p = sub.add_parser(
        "rpc-worker", help="serve this machine's CPU or GPUs to another spec-actor's model (llama.cpp RPC)",
        description="Serve this machine's devices (its GPUs, else its CPU) to a spec-actor or llama.cpp process "
                    "that loads a model with --rpc HOST:PORT (load_model(path, rpc=[...])): some of the model's "
                    "layers then live and compute here. One client at a time. The protocol has no "
                    "authentication: the worker listens on 127.0.0.1 unless told otherwise. Ctrl-C or SIGTERM "
                    "stops it.")
    p.add_argument("--host", default="127.0.0.1",
                   help="IPv4 address to listen on (default: 127.0.0.1; 0.0.0.0 for every interface, only on a "
                        "private network)")
    p.add_argument("--port", type=positive_int, default=DEFAULT_PORT, help=f"port (default: {DEFAULT_PORT})")
    p.add_argument("-t", "--threads", type=positive_int, metavar="N",
                   help="CPU threads of the computations (default: the CPUs this process may use)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        ipaddress.IPv4Address(args.host)
    except ValueError:
        raise CliError(f"argument --host: {args.host!r} is not an IPv4 address (ggml's RPC server listens on "
                       "one, e.g. 127.0.0.1 or 0.0.0.0)", exit_code=2) from None
    if not 1 <= args.port <= 65535:
        raise CliError(f"argument --port: {args.port} is not 1..65535", exit_code=2)
    from ..nif import rpc

    if not is_loopback(args.host):
        print(WARNING.format(host=args.host, port=args.port), file=sys.stderr, flush=True)
    threads = args.threads or len(os.sched_getaffinity(0))
    failure: list[BaseException] = []

    def serve() -> None:
        try:
            rpc.serve(args.host, args.port, threads)  # returns only when it cannot listen
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            failure.append(exc)
        finally:
            os.kill(os.getpid(), signal.SIGTERM)  # wake the main thread

    # ggml's server blocks in native code, where Python cannot deliver a signal:
    # it runs in a thread (which inherits the blocked signals), and the main
    # thread waits for Ctrl-C, SIGTERM or the server's end.
    stop = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)
    print(f"spec-actor: RPC worker on {args.host}:{args.port} ({threads} threads); Ctrl-C to stop",
          file=sys.stderr, flush=True)
    threading.Thread(target=serve, name="rpc-worker", daemon=True).start()
    signal.sigwait(stop)
    if failure:
        raise failure[0]
    print("spec-actor: RPC worker stopped", file=sys.stderr, flush=True)
    return 0
