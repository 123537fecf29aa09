"""RPC workers: their addresses, checked before a model is placed on them (docs/decisions/0097).

llama.cpp's RPC backend places a model's layers on other processes' devices
(``load_model(path, rpc=["host:port", ...])``, ``spec-actor rpc-worker``).
ggml connects with a blocking ``connect()`` and no timeout; a host that drops
packets would hold a load for about two minutes, and a port where something
else listens for ever. So each worker is asked for ggml's RPC handshake here
first, with a timeout: a load fails at once with the worker's address and
what went wrong. After the load, every send and receive to a worker is
bounded by ``rpc_timeout`` (decision 0105): a worker that is stopped or stuck
fails the request it serves, as a dead one does.
"""

from __future__ import annotations

import ipaddress
import math
import socket
import struct
from collections.abc import Sequence

from ._errors import ConfigError, ModelLoadError
from .nif.rpc import models_on

__all__ = ["CONNECT_TIMEOUT", "RPC_TIMEOUT", "check_timeout", "check_workers", "is_loopback", "parse_worker"]

CONNECT_TIMEOUT = 5.0
"""Seconds a worker has to answer the handshake before a load fails."""

RPC_TIMEOUT = 60.0
"""Default seconds a send or receive to a worker may move nothing before its connection fails.

A bound on a stall, not on a transfer: a layer's weights going over a slow
link keep moving, and each byte restarts the wait. The longest legitimate
silence is a worker computing its share of one batch before it answers; on
a CPU worker a 512-token batch through a large model takes tens of seconds
(docs/decisions/0105-rpc-calls-are-bounded.md).
"""

_MAX_TIMEOUT = 86400.0  # a day: more is no bound at all, and fits ggml's millisecond count easily


def check_timeout(seconds: object) -> int:
    """``seconds`` (``rpc_timeout``) as whole milliseconds, at least 1.

    Raises:
        ConfigError: not a number, or not positive and finite (at most a day).
    """
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) \
            or not 0 < seconds <= _MAX_TIMEOUT:
        raise ConfigError(f"rpc_timeout={seconds!r} must be a number of seconds, more than 0 and at most "
                          f"{_MAX_TIMEOUT:g} (a day)")
    return max(1, math.ceil(seconds * 1000))

# ggml-rpc's protocol (ggml/src/ggml-rpc/ggml-rpc.cpp, ggml-rpc.h): a command is
# | cmd: u8 | size: u64 | payload |, an answer | size: u64 | payload |. HELLO
# (14) sends 24 bytes of transport capabilities (zeros: plain TCP) and is
# answered with the protocol version (major, minor, patch, padding) and 24 bytes.
_HELLO = 14
_CAPS = 24
_PROTOCOL_MAJOR = 7


def parse_worker(endpoint: object) -> tuple[str, int]:
    """(host, port) of ``"host:port"``, the host a name or an IPv4 address (ggml's client takes no IPv6).

    Raises:
        ConfigError: not a string of that form, or the port is not 1..65535.
    """
    if not isinstance(endpoint, str):
        raise ConfigError(f"RPC worker {endpoint!r} must be a string \"host:port\"")
    host, sep, port = endpoint.partition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535 or any(c in host for c in ", "):
        raise ConfigError(f"RPC worker {endpoint!r} must be \"host:port\" (a host name or IPv4 address) with a "
                          "port from 1 to 65535")
    return host, int(port)


def check_workers(endpoints: Sequence[str], timeout: float = CONNECT_TIMEOUT) -> list[str]:
    """The endpoints, each checked to answer ggml's RPC handshake within ``timeout`` seconds.

    Raises:
        ConfigError: an endpoint is malformed, or the list is empty or repeats one.
        ModelLoadError: a worker cannot be reached, does not answer in time,
            or answers as something other than a ggml RPC server of this
            protocol version.
    """
    if isinstance(endpoints, str) or not isinstance(endpoints, Sequence) or not endpoints:
        raise ConfigError(f"rpc={endpoints!r} must be a non-empty list of \"host:port\" strings")
    if len(set(endpoints)) != len(endpoints):
        raise ConfigError(f"rpc={list(endpoints)!r} names a worker twice")
    for endpoint in endpoints:
        host, port = parse_worker(endpoint)
        if not models_on(endpoint):  # else this process holds its one connection, which ggml shares
            _handshake(endpoint, host, port, timeout)
    return list(endpoints)


def _handshake(endpoint: str, host: str, port: int, timeout: float) -> None:
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(struct.pack("<BQ", _HELLO, _CAPS) + bytes(_CAPS))
            answer = _read(sock, 8 + 4 + _CAPS)
    except socket.timeout:
        raise ModelLoadError(f"RPC worker {endpoint} did not answer within {timeout:g} s (another client may "
                             "be using it: a worker serves one at a time)") from None
    except OSError as exc:
        raise ModelLoadError(f"RPC worker {endpoint} cannot be reached: {exc.strerror or exc} (is `spec-actor "
                             "rpc-worker` running there?)") from None
    size, = struct.unpack_from("<Q", answer)
    if size != 4 + _CAPS or answer[8] != _PROTOCOL_MAJOR:
        raise ModelLoadError(f"RPC worker {endpoint} is not a ggml RPC server of protocol {_PROTOCOL_MAJOR}.x "
                             f"(it answered {answer[:12].hex()}); run the same spec_actor version there")


def _read(sock: socket.socket, n: int) -> bytes:
    """Exactly n bytes, or ConnectionError when the peer closes first."""
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"the connection closed after {len(data)} of {n} bytes")
        data += chunk
    return data


def is_loopback(host: str) -> bool:
    """Whether an IPv4 address (what a worker listens on) is this machine's loopback."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
