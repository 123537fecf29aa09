"""The ASGI side of one HTTP exchange: the request body, JSON and event-stream responses, hang-ups."""

from __future__ import annotations

import json
from urllib.parse import parse_qs
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import trio

from ._errors import ApiError

__all__ = ["Exchange", "HungUp", "Receive", "Scope", "Send"]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

_JSON = [(b"content-type", b"application/json")]
_SSE = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache"),
        (b"x-accel-buffering", b"no")]


class HungUp(Exception):
    """Raised when the client closes the connection before its request body arrived."""


class Exchange:
    """One request and its response, over ASGI.

    `read_body` reads the body (once); after that, `watch_hangup` notices
    the client going away, which ASGI reports as ``http.disconnect`` on
    `receive`. Responses are a JSON body (`send_json`) or an event stream
    (`start_events`, `send_event`, `end_events`). Sends to a client that
    has gone are dropped.
    """

    __slots__ = ("scope", "_receive", "_send", "started", "streaming", "complete", "hung_up", "hung_up_at",
                 "sending_since", "_send_began", "stream_end", "error_body", "error_event", "typed_events")

    def __init__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.scope = scope
        self._receive = receive
        self._send = send
        self.started = False
        """Whether the response status and headers went out."""
        self.streaming = False
        """Whether the response is an event stream (`start_events`)."""
        self.complete = False
        """Whether the whole response went out (ASGI then reports a disconnect that is no hang-up)."""
        self.hung_up = trio.Event()
        """Set when the client closed the connection."""
        self.hung_up_at: float | None = None
        """`trio.current_time()` when the hang-up was seen."""
        self.sending_since: float | None = None
        """`trio.current_time()` when the send in progress began; None between sends."""
        self._send_began = trio.Event()
        self.stream_end = b"data: [DONE]\n\n"
        """What `end_events` sends last: OpenAI's ``[DONE]`` event, or b"" (llama-server's native streams)."""
        self.error_body: Callable[[ApiError], dict[str, Any]] = ApiError.body
        """The JSON body of an error: OpenAI's shape, or the route's API's (Anthropic's, the Responses API's event)."""
        self.error_event: str | None = None
        """The event name of an error in a stream (Anthropic's ``error``); None: a bare ``data:`` event."""
        self.typed_events = False
        """Whether each unnamed event names its data's ``type`` on an ``event:`` line (the Responses API's streams)."""

    # -- request ----------------------------------------------------------------------

    @property
    def method(self) -> str:
        """The request method (``GET``, ``POST``)."""
        return str(self.scope.get("method", "GET"))

    @property
    def path(self) -> str:
        """The request path, without the query string."""
        return str(self.scope.get("path", "/"))

    def query(self, name: str) -> str | None:
        """The first value of a query-string parameter (``?name=value``), or None."""
        values = parse_qs(self.scope.get("query_string", b"").decode("latin-1")).get(name)
        return values[0] if values else None

    def header(self, name: bytes) -> str | None:
        """A request header's value (latin-1), or None."""
        for key, value in self.scope.get("headers", ()):
            if key.lower() == name:
                return value.decode("latin-1")
        return None

    async def read_body(self, limit: int, timeout: float) -> bytes:
        """The request body, whole.

        Raises:
            ApiError: 413 for a body over ``limit`` bytes, 408 for one that
                has not arrived ``timeout`` seconds after the request.
            HungUp: the client left before sending the whole body.
        """
        declared = self.header(b"content-length")
        if declared is not None and declared.strip().isdigit() and int(declared) > limit:
            raise _too_large(limit)
        chunks, size = [], 0
        with trio.move_on_after(timeout):
            while True:
                message = await self._receive()
                if message["type"] == "http.disconnect":
                    self._mark_hung_up()
                    raise HungUp
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > limit:
                    raise _too_large(limit)
                chunks.append(chunk)
                if not message.get("more_body", False):
                    return b"".join(chunks)
        raise ApiError(408, f"the request body did not arrive within {timeout:g} s (the server's "
                            "--read-timeout); send it at once", code="request_timeout")

    async def watch_hangup(self) -> None:
        """Return when the client hangs up before the response is complete, setting `hung_up`.

        Run it as a task after `read_body`; once the response is complete it never returns.
        """
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                if self.complete:
                    await trio.sleep_forever()
                self._mark_hung_up()
                return

    async def wait_stalled(self, timeout: float) -> None:
        """Return once one send has waited ``timeout`` seconds for the client to read.

        Run it as a task beside the sends. A client that reads nothing fills
        the socket buffers, and then a send waits (hypercorn shields it from
        cancellation: only closing the connection ends it).
        """
        while True:
            await self._send_began.wait()
            since = self.sending_since
            if since is None:  # that send is over; wait for the next
                await trio.lowlevel.checkpoint()
                continue
            await trio.sleep_until(since + timeout)
            if self.sending_since == since:
                return

    def _mark_hung_up(self) -> None:
        if self.hung_up_at is None:
            self.hung_up_at = trio.current_time()
        self.hung_up.set()

    # -- responses --------------------------------------------------------------------

    async def send_json(self, status: int, body: object, headers: list[tuple[bytes, bytes]] | None = None) -> None:
        """Send a whole JSON response."""
        data = json.dumps(body, ensure_ascii=False).encode()
        await self.send_bytes(status, data, _JSON + (headers or []))

    async def send_error(self, error: ApiError) -> None:
        """Send an error in `error_body`'s shape; in a started event stream, as an event that ends it.

        Nothing is sent once the response is complete, or half of a whole
        response is out (nothing valid can follow).
        """
        if self.complete:
            return
        if self.streaming:
            await self.send_event(self.error_body(error), self.error_event)
            await self.end_events()
        elif not self.started:
            headers = [(b"www-authenticate", b"Bearer")] if error.status == 401 else None
            await self.send_json(error.status, self.error_body(error), headers)

    async def send_bytes(self, status: int, data: bytes, headers: list[tuple[bytes, bytes]]) -> None:
        """Send a whole response with the given body and headers."""
        self.started = True
        await self._out({"type": "http.response.start", "status": status,
                         "headers": headers + [(b"content-length", str(len(data)).encode())]})
        await self._out({"type": "http.response.body", "body": data})

    async def start_events(self) -> None:
        """Start a 200 server-sent-event stream."""
        self.started = self.streaming = True
        await self._out({"type": "http.response.start", "status": 200, "headers": _SSE})

    async def send_event(self, data: object, name: str | None = None) -> None:
        """Send one ``data: <json>`` event, after an ``event: <name>`` line when named.

        Unnamed, with `typed_events`, the name is the data's ``type``.
        """
        payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        if name is None and self.typed_events and isinstance(data, dict):
            name = data["type"]
        event = f"event: {name}\n" if name is not None else ""
        await self._out({"type": "http.response.body", "body": f"{event}data: {payload}\n\n".encode(),
                         "more_body": True})

    async def end_events(self) -> None:
        """Send `stream_end` (``data: [DONE]``) and end the stream."""
        await self._out({"type": "http.response.body", "body": self.stream_end, "more_body": False})

    async def _out(self, message: MutableMapping[str, Any]) -> None:
        if self.hung_up.is_set():
            return
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            self.complete = True
        self.sending_since = trio.current_time()
        self._send_began.set()
        try:
            await self._send(message)
        finally:
            self.sending_since = None
            self._send_began = trio.Event()


def _too_large(limit: int) -> ApiError:
    return ApiError(413, f"the request body is larger than the server's limit of {limit} bytes; "
                         "send a shorter request or start the server with a larger --max-body",
                    code="request_too_large")
