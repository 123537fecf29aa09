"""What a server's request handlers share: its state, and the record of requests it ended early."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

import trio

from typing import Any

from .._pool import ActorPool
from .._stats import StatsSnapshot
from ._connections import Connections
from ._defaults import RequestDefaults
from ._limits import ServeLimits
from ._metrics import ServerMetrics
from ._sleep import PoolKeeper

__all__ = ["Cancellation", "Endpoints", "ServerState"]


@dataclass(frozen=True, slots=True)
class Cancellation:
    """A request that the server ended early, and how fast its actor became idle."""

    reason: str
    """``"hangup"`` (the client closed the connection), ``"send_timeout"`` (it stopped reading) or ``"shutdown"``."""
    seen_at: float
    """`trio.current_time()` when the server saw the reason."""
    idle_at: float
    """`trio.current_time()` when the native loop had stopped."""
    tokens_before: int
    """Tokens the request had generated just before the native cancel flag was set."""
    stats: StatsSnapshot
    """The request's statistics once its loop stopped (no prefill time: the prefill was cut short)."""

    @property
    def tokens_after(self) -> int:
        """Tokens the request had generated when its loop stopped."""
        return self.stats.tokens_emitted

    @property
    def seconds_to_idle(self) -> float:
        """From seeing the hang-up (or the shutdown) to the actor being idle."""
        return self.idle_at - self.seen_at


@dataclass(frozen=True, slots=True)
class Endpoints:
    """The routes a server may turn off; off, they answer llama-server's 501 ``not_supported_error``."""

    metrics: bool = True
    """``GET /metrics`` (llama-server: only with ``--metrics``; here on unless ``--no-metrics``, decision 0107)."""
    slots: bool = True
    """``GET /slots`` (on unless ``--no-slots``, as in llama-server)."""


@dataclass(slots=True)
class ServerState:
    """What every request handler of one server shares."""

    keeper: PoolKeeper
    """The owner of the pool: opens it, puts it to sleep after idle time, wakes it (``--sleep-idle-seconds``)."""
    model_name: str
    """The model's id in responses and in ``/v1/models``."""
    metrics: ServerMetrics
    """The Prometheus registry."""
    api_key: str | None = None
    """The key clients must send as ``Authorization: Bearer KEY`` to ``/v1/*``; None: no key."""
    max_body: int = 1 << 20
    """Largest request body in bytes; a larger one is a 413."""
    limits: ServeLimits = field(default_factory=ServeLimits)
    """Timeouts and parser bounds of each request."""
    connections: Connections = field(default_factory=Connections)
    """The open connections, to cut one whose client stopped reading."""
    prepare_limiter: trio.CapacityLimiter = field(default_factory=lambda: trio.CapacityLimiter(2))
    """Worker threads that parse and tokenize request bodies at once."""
    stopping: trio.Event = field(default_factory=trio.Event)
    """Set when the server starts shutting down: requests end, new ones get a 503."""
    cancellations: deque[Cancellation] = field(default_factory=lambda: deque(maxlen=256))
    """The latest requests ended early, newest last (for tests and benchmarks)."""
    chat_template: str | None = None
    """Chat template used instead of the GGUF's: Jinja text or a built-in name (llama-server's --chat-template
    and --chat-template-file); None: the GGUF's."""
    created: int = field(default_factory=lambda: int(time.time()))
    """When the server started (Unix time), the models' ``created`` and ``/metrics``' ``Process-Start-Time-Unix``."""
    defaults: RequestDefaults = field(default_factory=lambda: RequestDefaults())
    """The sampling and length a request gets for the fields it leaves out (``--temp``, ``--seed``, ``--n-predict``)."""
    model_aliases: tuple[str, ...] = ()
    """The model's names given to the server (``/v1/models``' ``aliases``; the first is `model_name`)."""
    model_tags: tuple[str, ...] = ()
    """Informational tags of the model (``/v1/models``' ``tags``)."""
    endpoints: Endpoints = field(default_factory=lambda: Endpoints())
    """Which of the optional routes answer (``/metrics``, ``/slots``)."""
    props: dict[str, Any] = field(default_factory=dict)
    """``GET /props``' body but ``is_sleeping``, read from the pool and model once, as the server starts."""

    @property
    def pool(self) -> ActorPool:
        """The actors that run the generations, for the routes that wake the server (`PoolKeeper.pool`)."""
        return self.keeper.pool

    @property
    def n_ctx(self) -> int:
        """The context of each sequence of the pool, in tokens; a prompt must be shorter."""
        return self.pool.actors[0].n_ctx

    @property
    def max_choices(self) -> int:
        """The most choices (``n``) one request may ask for (`ServeLimits.choice_limit`)."""
        return self.limits.choice_limit(self.pool.size)
