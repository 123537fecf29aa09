"""The ASGI application: routes, the API key, and the state the request handlers share."""

from __future__ import annotations

import secrets
from typing import Literal

import trio

from ._errors import ApiError, shutting_down
from ._generation import answer
from ._http import Exchange, HungUp, Receive, Scope, Send
from ._metrics import CONTENT_TYPE
from ._prepare import prepare
from ._state import ServerState

__all__ = ["App", "ServerState"]


class App:
    """The OpenAI-compatible ASGI application over one pool.

    Routes: ``POST /v1/completions``, ``POST /v1/chat/completions``,
    ``GET /v1/models`` (these three need the API key when one is set),
    ``GET /health`` and ``GET /metrics``.
    """

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self._routes = {
            "/v1/completions": ("POST", True, self._completions),
            "/v1/chat/completions": ("POST", True, self._chat),
            "/v1/models": ("GET", True, self._models),
            "/health": ("GET", False, self._health),
            "/metrics": ("GET", False, self._metrics),
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] == "websocket":
            await _refuse_websocket(scope, receive, send)
            return
        if scope["type"] != "http":
            return
        exchange = Exchange(scope, receive, send)
        try:
            await self._route(exchange)
        except HungUp:
            return
        except ApiError as error:
            await exchange.send_error(error)

    async def _route(self, exchange: Exchange) -> None:
        path = exchange.path.rstrip("/") or "/"
        route = self._routes.get(path)
        if route is None:
            raise ApiError(404, f"no route {exchange.method} {exchange.path}; this server has "
                                f"{', '.join(f'{m} {p}' for p, (m, _, _) in self._routes.items())}",
                           code="not_found")
        method, needs_key, handler = route
        if exchange.method != method:
            raise ApiError(405, f"{path} takes {method}, not {exchange.method}", code="method_not_allowed")
        if needs_key:
            self._check_key(exchange)
        await handler(exchange)

    def _check_key(self, exchange: Exchange) -> None:
        key = self.state.api_key
        if key is None:
            return
        sent = exchange.header(b"authorization") or ""
        scheme, _, token = sent.partition(" ")
        if scheme.lower() != "bearer" or not secrets.compare_digest(token.strip().encode(), key.encode()):
            raise ApiError(401, "missing or incorrect API key: send it as `Authorization: Bearer KEY`",
                           code="invalid_api_key")

    async def _completions(self, exchange: Exchange) -> None:
        await self._generate(exchange, "completion")

    async def _chat(self, exchange: Exchange) -> None:
        await self._generate(exchange, "chat")

    async def _generate(self, exchange: Exchange, kind: Literal["completion", "chat"]) -> None:
        arrived_at = trio.current_time()
        state = self.state
        if state.stopping.is_set():
            raise shutting_down()
        try:
            data = await exchange.read_body(state.max_body, state.limits.read_timeout)
        except ApiError as error:
            if error.status == 408:
                state.metrics.timed_out("read")
            raise
        prepared = await prepare(kind, data, state.pool.model, state.pool.actors[0].n_ctx, state.limits,
                                 state.prepare_limiter, state.chat_template)
        await answer(exchange, prepared, state, arrived_at)

    async def _models(self, exchange: Exchange) -> None:
        model = {"id": self.state.model_name, "object": "model", "created": self.state.created,
                 "owned_by": "spec_actor"}
        await exchange.send_json(200, {"object": "list", "data": [model]})

    async def _health(self, exchange: Exchange) -> None:
        if self.state.stopping.is_set():
            raise shutting_down()
        await exchange.send_json(200, {"status": "ok"})

    async def _metrics(self, exchange: Exchange) -> None:
        await exchange.send_bytes(200, self.state.metrics.render(), [(b"content-type", CONTENT_TYPE.encode())])


async def _lifespan(receive: Receive, send: Send) -> None:
    # The pool is opened and closed around the server, so startup and shutdown have nothing to do.
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _refuse_websocket(scope: Scope, receive: Receive, send: Send) -> None:
    """Refuse a WebSocket upgrade: a 404 in OpenAI's error shape where the server can send one, else a close."""
    message = await receive()
    if message["type"] != "websocket.connect":
        return
    if "websocket.http.response" in scope.get("extensions", {}):
        exchange = Exchange(scope, receive, _denial(send))
        await exchange.send_error(ApiError(404, "this server speaks HTTP, not WebSocket; send a plain request",
                                           code="websocket_not_supported"))
    else:
        await send({"type": "websocket.close", "code": 1003})


def _denial(send: Send) -> Send:
    """``send`` with HTTP response messages renamed to the WebSocket denial response's."""
    async def deny(message: dict) -> None:  # type: ignore[type-arg]
        await send(dict(message, type="websocket." + message["type"]))
    return deny  # type: ignore[return-value]
