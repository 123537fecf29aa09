"""Checked wrapper of ggml's RPC server (an ``rpc-worker``'s one call)."""

from __future__ import annotations

from ._check import check
from ._raw import lib


def serve(host: str, port: int, n_threads: int) -> None:
    """Serve this process's devices to ggml RPC clients on host:port; blocks while it serves.

    Raises ConfigError when it cannot listen (the address is in use or not
    this machine's, or the host is not an IPv4 address).
    """
    check(lib.sa_rpc_serve(host.encode(), port, n_threads), "rpc worker")


def models_on(endpoint: str) -> int:
    """Models of this process with layers on the RPC worker ``endpoint`` (they share its one connection)."""
    return lib.sa_rpc_models_on(endpoint.encode())
