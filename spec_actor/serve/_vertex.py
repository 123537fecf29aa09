"""Google Cloud Vertex AI's prediction protocol: ``POST /predict`` runs each of its instances on another route.

Vertex AI starts a custom serving container with ``AIP_MODE=PREDICTION``
and sends ``{"instances": [...]}`` to ``AIP_PREDICT_ROUTE`` on
``AIP_HTTP_PORT``, its health checks to ``AIP_HEALTH_ROUTE``. llama-server
answers there when it finds those variables (its ``server-http.cpp``), and
so does this server (`VertexRoutes.from_env`, read by ``spec-actor serve``).
Each instance names the route it is for in ``@requestFormat``: the path
(``/v1/chat/completions``) or its camelCase alias (``chatCompletions``:
the path without ``/v1``, each ``/``, ``-`` or ``_`` capitalizing the next
letter). The rest of the instance is that route's body, run as a request
of its own through the whole application (key, limits, handler), never
streamed; the answer is ``{"predictions": [...]}``, one per instance in
order: the route's JSON answer, or an ``{"error": ...}`` for an instance
that failed or is malformed (the others still run).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import trio

from ._body import parse_body
from ._errors import ApiError, bad_request
from ._fields import json_type, short
from ._http import Exchange, Receive, Scope, Send
from ._state import ServerState
from ._work import in_worker, read_body

__all__ = ["MAX_INSTANCES", "Dispatch", "VertexRoutes", "predict", "request_format"]

MAX_INSTANCES = 128
"""Most instances in one prediction request (as llama-server)."""

App = Callable[[Scope, Receive, Send], Any]
"""An ASGI application."""

_CONNECTION_KEYS = ("asgi", "http_version", "scheme", "client", "server", "extensions")
"""The keys of the prediction request's ASGI scope that an instance's request shares."""


@dataclass(frozen=True, slots=True)
class VertexRoutes:
    """Where Vertex AI sends predictions and health checks, and the port it expects the server on."""

    predict: str = "/predict"
    """The prediction route (``AIP_PREDICT_ROUTE``)."""
    health: str | None = None
    """A second path for ``GET /health`` (``AIP_HEALTH_ROUTE``); None: ``/health`` only."""
    port: int | None = None
    """The port to listen on (``AIP_HTTP_PORT``); None: the server's own."""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> VertexRoutes | None:
        """The routes Vertex AI's variables ask for; None unless ``AIP_MODE`` is ``PREDICTION``.

        Raises:
            ValueError: ``AIP_HTTP_PORT`` is not a port number.
        """
        if env.get("AIP_MODE") != "PREDICTION":
            return None
        port = env.get("AIP_HTTP_PORT") or None
        if port is not None and not (port.isdigit() and 0 < int(port) < 65536):
            raise ValueError(f"AIP_HTTP_PORT={port!r} is not a port number")
        return cls(predict=_leading_slash(env.get("AIP_PREDICT_ROUTE") or "/predict"),
                   health=_leading_slash(env["AIP_HEALTH_ROUTE"]) if env.get("AIP_HEALTH_ROUTE") else None,
                   port=int(port) if port is not None else None)


def _leading_slash(path: str) -> str:
    return path if path.startswith("/") else "/" + path


def request_format(path: str) -> str:
    """A route's ``@requestFormat`` alias: ``/v1/chat/completions`` -> ``chatCompletions``."""
    words = [w for w in path.removeprefix("/v1").replace("-", "/").replace("_", "/").split("/") if w]
    return "".join(w if i == 0 else w[:1].upper() + w[1:] for i, w in enumerate(words))


class Dispatch:
    """The routes an instance may name, by path and by alias, and a way to run one through ``app``."""

    def __init__(self, app: App, routes: Sequence[tuple[str, str]], exclude: str) -> None:
        self.app = app
        self.by_name: dict[str, tuple[str, str]] = {}
        for method, path in routes:
            if path == exclude:  # the prediction route itself: no instance runs it again
                continue
            self.by_name.setdefault(path, (method, path))
            self.by_name.setdefault(request_format(path), (method, path))  # the first route of an alias wins

    async def run(self, outer: Exchange, method: str, path: str, body: bytes) -> object:
        """The JSON answer of ``method path`` with ``body``, sent with the outer request's headers.

        The inner request sees a hang-up when the outer client hangs up.
        """
        headers = [(k, v) for k, v in outer.scope.get("headers", ())
                   if k.lower() not in (b"content-length", b"content-type", b"transfer-encoding")]
        headers += [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        scope = {key: outer.scope[key] for key in _CONNECTION_KEYS if key in outer.scope}  # not the router's keys
        scope |= {"type": "http", "method": method, "path": path, "raw_path": path.encode(), "query_string": b"",
                  "root_path": "", "headers": headers}
        sent_body = False
        chunks: list[bytes] = []

        async def receive() -> dict[str, Any]:
            nonlocal sent_body
            if not sent_body:
                sent_body = True
                return {"type": "http.request", "body": body, "more_body": False}
            await outer.hung_up.wait()
            return {"type": "http.disconnect"}

        async def send(message: Mapping[str, Any]) -> None:
            if message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        await self.app(scope, receive, send)
        data = b"".join(chunks)
        try:
            return json.loads(data) if data else None
        except ValueError:
            return data.decode("utf-8", "replace")


async def predict(exchange: Exchange, state: ServerState, dispatch: Dispatch) -> None:
    """``POST /predict``: ``{"predictions": [...]}``, each instance run on the route its ``@requestFormat`` names.

    Raises:
        ApiError: a 400 naming ``instances`` when the body is not an object
            with an array of at most `MAX_INSTANCES` instances.
    """
    body = await in_worker(state, parse_body, await read_body(exchange, state), state.limits.body)
    instances = body.get("instances") if isinstance(body, dict) else None
    if not isinstance(instances, list):
        raise bad_request("the body must be an object with an array of instances, each a route's body with its "
                          f"@requestFormat; instances is {json_type(instances)}", param="instances",
                          code="invalid_type" if instances is not None else "missing")
    if len(instances) > MAX_INSTANCES:
        raise bad_request(f"instances has {len(instances)} items; send at most {MAX_INSTANCES}", param="instances")
    predictions: list[object] = [None] * len(instances)

    async def one(i: int, instance: object) -> None:
        try:
            method, path, inner = _instance(dispatch, instance, f"instances[{i}]")
            predictions[i] = await dispatch.run(exchange, method, path, inner)
        except ApiError as error:
            predictions[i] = error.body()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(_cancel_on_hangup, exchange, nursery.cancel_scope)
        async with trio.open_nursery() as instances_nursery:
            for i, instance in enumerate(instances):
                instances_nursery.start_soon(one, i, instance)
        nursery.cancel_scope.cancel()
    await exchange.send_json(200, {"predictions": predictions})


async def _cancel_on_hangup(exchange: Exchange, scope: trio.CancelScope) -> None:
    await exchange.watch_hangup()
    scope.cancel()


def _instance(dispatch: Dispatch, instance: object, where: str) -> tuple[str, str, bytes]:
    """(method, path, body) of one instance: its route and its body without ``@requestFormat`` or streaming.

    Raises:
        ApiError: a 400 naming the instance's field.
    """
    if not isinstance(instance, dict):
        raise bad_request(f"{where} must be an object (a route's body with its @requestFormat), not "
                          f"{json_type(instance)}", param=where, code="invalid_type")
    name = instance.get("@requestFormat")
    if not isinstance(name, str):
        raise bad_request(f"{where}.@requestFormat must be a string naming a route (chatCompletions, "
                          f"/v1/chat/completions, ...), not {json_type(name)}", param=f"{where}.@requestFormat",
                          code="invalid_type" if name is not None else "missing")
    route = dispatch.by_name.get(name)
    if route is None:
        raise bad_request(f"{where}.@requestFormat {short(name)} names no route; use one of "
                          f"{', '.join(sorted(n for n in dispatch.by_name if not n.startswith('/')))}",
                          param=f"{where}.@requestFormat", code="invalid_value")
    inner = {k: v for k, v in instance.items() if k != "@requestFormat"}
    if "stream" in inner:
        inner["stream"] = False  # a prediction is one JSON answer
    return route[0], route[1], json.dumps(inner, ensure_ascii=False).encode()
