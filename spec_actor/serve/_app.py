"""The ASGI application: Starlette's router (and CORS middleware, when asked) over the request handlers.

Starlette routes each request by path and method, answers a wrong method
with a 405 that lists the allowed ones, and answers CORS preflights. Each
route's endpoint is a raw ASGI app (`_Endpoint`) that checks the API key and
hands an `Exchange` to its handler: the handlers keep their own control of
the body (read within `ServeLimits`), of hang-ups and of every send
(docs/decisions/0041), which Starlette's request and response classes would
take over. hypercorn's connections (`_connections`) sit below it all.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from . import _anthropic, _completion, _infill, _llama, _openai, _ops, _responses_api, _vertex
from ._auth import check_key
from ._cors import cors_middleware
from .._errors import ConfigError, SpecActorError
from ._errors import ApiError, api_error_for
from ._http import Exchange, HungUp, Receive, Scope, Send
from ._state import ServerState

__all__ = ["App", "ROUTES", "RouteSpec", "ServerState"]

Handler = Callable[[Exchange, ServerState], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class RouteSpec:
    """One route: its method and path, its handler, whether it needs the API key and whether it wakes the server."""

    method: str
    path: str
    handler: Handler
    needs_key: bool = True
    wakes: bool = True
    """Whether the handler needs the model: it wakes a sleeping server (`PoolKeeper.awake`) and keeps it awake."""
    setup: Callable[[Exchange], None] | None = None
    """Adapts the exchange to the route's API before anything is sent (Anthropic's error shape); None: OpenAI's."""


ROUTES: tuple[RouteSpec, ...] = (
    # OpenAI's, and the same without /v1 as llama-server serves them
    RouteSpec("POST", "/v1/completions", _openai.completions),
    RouteSpec("POST", "/v1/chat/completions", _openai.chat),
    RouteSpec("POST", "/chat/completions", _openai.chat),
    RouteSpec("POST", "/v1/responses", _responses_api.responses),
    RouteSpec("POST", "/responses", _responses_api.responses),
    RouteSpec("POST", "/v1/responses/input_tokens", _responses_api.input_tokens),
    RouteSpec("POST", "/responses/input_tokens", _responses_api.input_tokens),
    RouteSpec("GET", "/v1/models", _openai.models, wakes=False),
    RouteSpec("GET", "/models", _openai.models, wakes=False),
    # Anthropic's Messages API, on the chat completions' path
    RouteSpec("POST", "/v1/messages", _anthropic.messages, setup=_anthropic.speak_anthropic),
    RouteSpec("POST", "/v1/messages/count_tokens", _anthropic.count_tokens, setup=_anthropic.speak_anthropic),
    # llama-server's own (its /completions is its native /completion, not OpenAI's)
    RouteSpec("POST", "/completion", _completion.completion),
    RouteSpec("POST", "/completions", _completion.completion),
    RouteSpec("POST", "/infill", _infill.infill),
    RouteSpec("POST", "/tokenize", _llama.tokenize),
    RouteSpec("POST", "/detokenize", _llama.detokenize),
    RouteSpec("POST", "/apply-template", _llama.apply_template),
    RouteSpec("POST", "/chat/completions/input_tokens", _llama.input_tokens),
    RouteSpec("POST", "/v1/chat/completions/input_tokens", _llama.input_tokens),
    RouteSpec("GET", "/props", _llama.props, wakes=False),
    RouteSpec("GET", "/slots", _llama.slots),
    # open without the key; these and the model list answer a sleeping server without waking it
    RouteSpec("GET", "/health", _ops.health, needs_key=False, wakes=False),
    RouteSpec("GET", "/v1/health", _ops.health, needs_key=False, wakes=False),
    RouteSpec("GET", "/metrics", _ops.metrics, needs_key=False, wakes=False),
)
"""Every route the server has, in the order the 404 message lists them (docs/server-compatibility.md)."""


class App:
    """The server's ASGI application over one pool: `ROUTES` behind Starlette's router.

    Paths are matched without a trailing slash (``/v1/models/`` is
    ``/v1/models``). WebSocket upgrades get a 404 in OpenAI's error shape.
    With ``cors_origins`` (checked by `check_origins`; ``"*"`` for any),
    Starlette's CORS middleware answers their preflights and marks their
    responses; without, no cross-origin header is ever sent (`_cors`).
    With ``vertex``, Vertex AI's prediction route (and health route) are
    added (`_vertex`).

    Raises:
        ConfigError: a ``vertex`` route is already one of ``routes``.
    """

    def __init__(self, state: ServerState, routes: Sequence[RouteSpec] = ROUTES,
                 cors_origins: Sequence[str] = (), vertex: _vertex.VertexRoutes | None = None) -> None:
        self.state = state
        if vertex is not None:
            routes = [*routes, *_vertex_routes(self, routes, vertex)]
        middleware = cors_middleware(cors_origins, (r.method for r in routes))
        self.starlette = Starlette(routes=[_route(r, state) for r in routes], middleware=middleware,
                                   exception_handlers={HTTPException: _http_error, Exception: _server_error})
        self.starlette.router.redirect_slashes = False  # trailing slashes are stripped below instead

    @property
    def routes(self) -> list[tuple[str, str]]:
        """(method, path) of every route the router has."""
        return _routes_of(self.starlette)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await _refuse_websocket(scope, receive, send)
            return
        if scope["type"] == "http":
            scope["path"] = scope["path"].rstrip("/") or "/"
        await self.starlette(scope, receive, send)


def _vertex_routes(app: App, routes: Sequence[RouteSpec], vertex: _vertex.VertexRoutes) -> list[RouteSpec]:
    """Vertex AI's prediction route, which runs each instance through ``app``, and its health route."""
    taken = {r.path for r in routes}
    for path in (vertex.predict, vertex.health):
        if path in taken:
            raise ConfigError(f"the Vertex AI route {path} (AIP_PREDICT_ROUTE or AIP_HEALTH_ROUTE) is already one "
                              "of this server's routes; choose another path")
    dispatch = _vertex.Dispatch(app, [(r.method, r.path) for r in routes], exclude=vertex.predict)
    # The instances' own routes wake the server as they need.
    out = [RouteSpec("POST", vertex.predict, lambda exchange, state: _vertex.predict(exchange, state, dispatch),
                     wakes=False)]
    if vertex.health is not None:
        out.append(RouteSpec("GET", vertex.health, _ops.health, needs_key=False, wakes=False))
    return out


def _route(spec: RouteSpec, state: ServerState) -> Route:
    route = Route(spec.path, _Endpoint(spec, state), methods=[spec.method])
    route.methods = {spec.method}  # Starlette adds HEAD beside GET; the handlers send bodies, so no HEAD
    return route


def _routes_of(app: Starlette) -> list[tuple[str, str]]:
    return [(method, route.path) for route in app.routes for method in sorted(getattr(route, "methods", None) or ())]


class _Endpoint:
    """A route's ASGI app: the route's setup, the API key, then the handler on an `Exchange`, the server
    woken first when the route needs the model.

    The handler's `ApiError` (or the library's error) becomes the response,
    or a stream's last event when the response has started.
    """

    def __init__(self, route: RouteSpec, state: ServerState) -> None:
        self.route = route
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        exchange = Exchange(scope, receive, send)
        if self.route.setup is not None:
            self.route.setup(exchange)
        try:
            if self.route.needs_key:
                check_key(exchange, self.state.api_key)
            if self.route.wakes:
                async with self.state.keeper.awake():
                    await self.route.handler(exchange, self.state)
            else:
                await self.route.handler(exchange, self.state)
        except HungUp:
            return
        except ApiError as error:
            await exchange.send_error(error)
        except SpecActorError as exc:  # the library's own, not mapped where it was raised
            await exchange.send_error(api_error_for(exc))


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's 404 (no such path) and 405 (wrong method) in OpenAI's error shape."""
    assert isinstance(exc, HTTPException)
    path = request.url.path
    if exc.status_code == 405:
        allowed = (exc.headers or {}).get("Allow", "")
        error = ApiError(405, f"{path} takes {allowed}, not {request.method}", code="method_not_allowed")
    elif exc.status_code == 404:
        error = ApiError(404, f"no route {request.method} {path}; this server has "
                              f"{', '.join(f'{m} {p}' for m, p in _routes_of(request.app))}",
                         type="not_found_error", code="not_found")
    else:
        error = ApiError(exc.status_code, exc.detail, code=None)
    return JSONResponse(error.body(), exc.status_code, headers=exc.headers)


async def _server_error(request: Request, exc: Exception) -> Response:
    """A 500 in OpenAI's error shape for an exception no handler expected (Starlette then re-raises it, logged)."""
    error = ApiError(500, f"internal error: {type(exc).__name__}", type="server_error")
    return JSONResponse(error.body(), 500)


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
