"""`open_server`: the pool, the ASGI app and hypercorn's trio worker on one socket."""

from __future__ import annotations

import contextlib
import functools
import logging
import socket
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, final

import trio
from hypercorn.config import Config

from .._model import Model
from .._pool import ActorPool, open_pool
from ._llama import props_body
from .._groups import unwrap_groups
from .._spec import Spec
from .._tools import check_template
from .._errors import ConfigError
from .._validate import check_int
from ._app import App, ServerState
from ._defaults import RequestDefaults
from ._cors import check_origins
from ._limits import ServeLimits
from ._metrics import ServerMetrics
from ._sleep import PoolKeeper
from ._state import Endpoints
from ._vertex import VertexRoutes

__all__ = ["Server", "open_server"]

DEFAULT_MAX_BODY = 1 << 20
"""Largest request body (1 MiB): a prompt of about 250,000 tokens, beyond any context here."""


@final
class Server:
    """A running ``spec-actor serve``: its address, its pool, and a way to stop it.

    Made by `open_server`.
    """

    __slots__ = ("_state", "url")

    def __init__(self, state: ServerState, url: str) -> None:
        self._state = state
        self.url = url
        """The base URL, ``http://HOST:PORT`` (the port the OS chose when asked for 0)."""

    @property
    def port(self) -> int:
        """The TCP port the server listens on."""
        return int(self.url.rsplit(":", 1)[1])

    @property
    def pool(self) -> ActorPool:
        """The actors that run the requests (for their statistics).

        Raises:
            RuntimeError: the server sleeps (``sleep_idle_seconds``): it has no pool until a request wakes it.
        """
        return self._state.pool

    @property
    def sleeping(self) -> bool:
        """Whether the server sleeps: its pool closed after ``sleep_idle_seconds`` without work."""
        return self._state.keeper.sleeping

    @property
    def state(self) -> ServerState:
        """What the request handlers share: metrics, recent cancellations, the stopping flag."""
        return self._state

    @property
    def stopping(self) -> bool:
        """Whether the server is shutting down."""
        return self._state.stopping.is_set()

    def stop(self) -> None:
        """Start shutting down (idempotent, synchronous): `open_server`'s block returns soon after.

        The server stops accepting connections; running requests end (a
        stream with an error event and ``data: [DONE]``, a whole response
        with a 503), queued ones get a 503; connections still open after
        the shutdown timeout are cut; then the pool closes.
        """
        self._state.stopping.set()

    async def wait_stopped(self) -> None:
        """Wait until `stop` is called (by a signal handler, a test, ...)."""
        await self._state.stopping.wait()


@asynccontextmanager
async def open_server(model: Model, *, host: str | Sequence[str] = "127.0.0.1", port: int = 8080, pool: int = 1,
                      spec: Spec | str | None = None, api_key: str | None = None, n_ctx: int = 4096,
                      max_queue: int = 16, max_body: int = DEFAULT_MAX_BODY, model_name: str | None = None,
                      model_aliases: Sequence[str] = (), model_tags: Sequence[str] = (),
                      limits: ServeLimits | None = None, chat_template: str | None = None,
                      cors_origins: Sequence[str] = (), vllm_metric_names: bool = False,
                      defaults: RequestDefaults | None = None, metrics_endpoint: bool = True,
                      slots_endpoint: bool = True, vertex: VertexRoutes | None = None,
                      sleep_idle_seconds: float | None = None, reload: Callable[[], Model] | None = None,
                      **context_options: Any) -> AsyncIterator[Server]:
    """Serve ``model`` over HTTP with OpenAI's API until the block is left or `Server.stop` is called.

    Args:
        model: The loaded model (`load_model`).
        host, port: Where to listen: an address, or several on the same port (as llama-server's
            ``--host 127.0.0.1,::1``); port 0 lets the OS choose (see `Server.url`, the first address's).
        pool: Actors, so requests that run at once (each has its own context).
        spec: Speculative decoding of every actor; None for the library's default.
        api_key: When set, every route but ``/health`` and ``/metrics`` needs it, sent as
            ``Authorization: Bearer KEY`` or ``X-Api-Key: KEY``.
        n_ctx: Context size of each actor; a prompt must be shorter.
        max_queue: Requests that may wait per actor; past that, a 429.
        max_body: Largest request body in bytes; past that, a 413.
        model_name: The model id clients see (default: the GGUF's file name without ``.gguf``).
        model_aliases, model_tags: Further names and informational tags of the model, listed in
            ``/v1/models`` (llama-server's ``aliases``, with ``model_name``, and ``tags``).
        limits: Timeouts (send, read, per request, shutdown) and parser
            bounds (`ServeLimits`; its defaults when None).
        chat_template: The chat template of every chat instead of the GGUF's own:
            Jinja text (as llama-server's ``--chat-template-file``) or the name of a
            llama.cpp built-in template such as ``"chatml"`` (as its ``--chat-template``;
            `spec_actor._templates.builtin_names`). Jinja text is needed for tools
            on a GGUF without a template, except Gemma 3's (docs/decisions/0102).
        cors_origins: Web origins (``https://app.example``) whose pages may call the
            server from a browser, ``"*"`` for any; empty (the default): none, since
            any page a browser opens could otherwise reach a server on loopback
            (docs/server-compatibility.md, "CORS").
        vllm_metric_names: Also export the inference gateway's three gauges in
            ``/metrics`` under vLLM's names (``vllm:num_requests_waiting``, ...),
            which an endpoint picker reads by default.
        defaults: What a request gets for the temperature, seed and length it leaves out
            (llama-server's ``--temp``, ``--seed``, ``--n-predict``); None: the request's own defaults.
        metrics_endpoint, slots_endpoint: Whether ``GET /metrics`` and ``GET /slots`` answer; off,
            they are llama-server's 501 (docs/decisions/0107).
        vertex: Also answer Google Cloud Vertex AI's prediction route (and health
            route) as llama-server does under ``AIP_MODE=PREDICTION``
            (`VertexRoutes.from_env` reads its variables); None: not.
        sleep_idle_seconds: After this many seconds without a request that needs the model, close
            the pool (its contexts and KV caches), as llama-server's ``--sleep-idle-seconds``; the next such
            request opens it again, and waits for it. ``/health``, ``/props`` (its ``is_sleeping``),
            ``/models`` and ``/metrics`` (the figures as it fell asleep) answer meanwhile without
            waking it (docs/decisions/0111). None (the default): never.
        reload: How to load the model again after a sleep. Given, the server owns ``model``: it
            closes it on falling asleep, so the weights are freed too. None: ``model`` stays the
            caller's and only the pool is freed. A load that fails answers the requests waiting on
            it with a 503; the next request tries again.
        context_options: n_threads, n_batch, ... for `open_pool`.

    Raises:
        ConfigError: an option is out of range, or ``chat_template`` is not
            a template llama.cpp can render a chat with.
        OSError: the address cannot be bound (in use, not local), before the pool opens.

    **Cancellation**: leaving the block stops the server as `Server.stop`
    describes, then closes the pool, which stops every native loop. It
    returns within ``limits.shutdown_timeout`` (and a loop step) however the
    clients behave; when a wake from sleep is loading the model, also after
    that load (a worker thread) ends.
    """
    check_int("max_body", max_body, 1024, hint="leave room for a request's JSON")
    if sleep_idle_seconds is not None and (isinstance(sleep_idle_seconds, bool)
                                           or not isinstance(sleep_idle_seconds, (int, float))
                                           or not 0 < sleep_idle_seconds < float("inf")):
        raise ConfigError(f"sleep_idle_seconds={sleep_idle_seconds!r} is invalid: expected seconds > 0, or None")
    limits = ServeLimits() if limits is None else limits
    if not isinstance(limits, ServeLimits):
        raise ConfigError(f"limits={limits!r} is invalid: expected a spec_actor.serve.ServeLimits")
    if defaults is not None and not isinstance(defaults, RequestDefaults):
        raise ConfigError(f"defaults={defaults!r} is invalid: expected a spec_actor.serve.RequestDefaults")
    if chat_template is not None:
        check_template(model, chat_template)
    origins = check_origins(cors_origins)
    hosts = _hosts(host)
    aliases = ((model_name,) if model_name else ()) + _names(model_aliases, "model_aliases")
    tags = _names(model_tags, "model_tags")
    pool_options = dict(context_options, size=pool, n_ctx=n_ctx, max_queue=max_queue)
    if spec is not None:
        pool_options["spec"] = spec
    name = model_name or Path(model.path).name.removesuffix(".gguf")
    with contextlib.ExitStack() as bound:  # bound before the pool opens: a taken port fails fast, plainly
        socks = [bound.enter_context(_bound_socket(hosts[0], port))]
        port = socks[0].getsockname()[1]  # the other addresses share the first one's port
        socks += [bound.enter_context(_bound_socket(h, port)) for h in hosts[1:]]
        keeper = PoolKeeper(model, functools.partial(open_pool, **pool_options), sleep_idle_seconds, reload)
        with unwrap_groups():
            async with trio.open_nursery() as owner:
                # The keeper's task owns the pool: it opens it here, and closes it after the listener stops.
                await owner.start(keeper.run)
                stopping = trio.Event()
                try:
                    state = ServerState(keeper=keeper, model_name=name, stopping=stopping,
                                        metrics=ServerMetrics(keeper.reading, name, vllm_names=vllm_metric_names),
                                        api_key=api_key, max_body=max_body, limits=limits, chat_template=chat_template,
                                        defaults=defaults or RequestDefaults(), model_aliases=aliases,
                                        model_tags=tags,
                                        endpoints=Endpoints(metrics=metrics_endpoint, slots=slots_endpoint))
                    state.props = props_body(state)
                    owner.start_soon(_refuse_wakes_when_stopping, stopping, keeper)
                    url = _url(socks[0])
                    with unwrap_groups():  # this nursery's group, then the owner's below
                        async with trio.open_nursery() as nursery:
                            # The listener owns the socket from here: when it stops listening (at
                            # shutdown), the socket closes and new connections are refused.
                            await nursery.start(functools.partial(
                                state.connections.serve, App(state, cors_origins=origins, vertex=vertex), _config(),
                                socks, state.stopping, limits.shutdown_timeout))
                            try:
                                yield Server(state, url)
                            finally:
                                state.stopping.set()
                finally:
                    stopping.set()
                    keeper.close()


async def _refuse_wakes_when_stopping(stopping: trio.Event, keeper: PoolKeeper) -> None:
    """Requests waiting for a sleeping server to wake get a 503 as soon as it starts stopping."""
    await stopping.wait()
    keeper.refuse_wakes()


def _hosts(host: str | Sequence[str]) -> tuple[str, ...]:
    """The addresses to listen on: one, or a non-empty sequence of distinct ones.

    Raises:
        ConfigError: none, or not strings.
    """
    hosts = (host,) if isinstance(host, str) else tuple(host)
    if not hosts or not all(isinstance(h, str) and h for h in hosts) or len(set(hosts)) < len(hosts):
        raise ConfigError(f"host={host!r} is invalid: expected an address, or a sequence of distinct addresses")
    return hosts


def _names(names: Sequence[str], what: str) -> tuple[str, ...]:
    """``names`` (model aliases or tags) checked: non-empty strings.

    Raises:
        ConfigError: one string instead of a sequence, or an item that is not a non-empty string.
    """
    if isinstance(names, str) or not all(isinstance(n, str) and n for n in names):
        raise ConfigError(f"{what}={names!r} is invalid: expected a sequence of non-empty strings")
    return tuple(names)


def _bound_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to (host, port), not yet listening.

    Raises:
        OSError: the address is taken, not local, or not resolvable.
    """
    check_int("port", port, 0, 65535, hint="use 0 for any free port")
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # accepted sockets inherit it: events go out at once
        sock.bind(address)
    except BaseException:
        sock.close()
        raise
    return sock


def _url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _config() -> Config:
    config = Config()
    config.loglevel = "WARNING"
    config.accesslog = None
    config.errorlog = logging.getLogger("spec_actor.serve")
    return config
