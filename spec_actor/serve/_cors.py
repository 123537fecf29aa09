"""Cross-origin access (CORS), off unless the server is given the web origins it may serve.

A browser sends a page's requests to any address the page names, loopback
included, and only CORS decides whether the page may read the answer. A
server on ``127.0.0.1`` with cross-origin access open is therefore reachable
from every site its user visits. So no origin is allowed by default;
``--cors-origins`` names the ones that are: ``scheme://host[:port]``,
``"*"`` for any, or ``"localhost"`` for pages served from this machine
(``http(s)://`` ``localhost``, ``127.0.0.1`` or ``[::1]``, any port), as
llama-server's special value means. Starlette's `CORSMiddleware` then
answers their preflights (``OPTIONS`` with ``Access-Control-Request-Method``)
and marks their responses. Other origins' preflights get a 200 without
``Access-Control-Allow-Origin`` (which the browser takes as a refusal), as
llama-server answers them; its body says what was refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from .._errors import ConfigError

__all__ = ["LOCALHOST", "check_origins", "cors_middleware"]

LOCALHOST = "localhost"
"""The origin list entry that allows the pages of this machine, on any port (llama-server's special value)."""
_LOCALHOST_PATTERN = r"https?://(localhost|127\.0\.0\.1|\[::1\])(:[0-9]{1,5})?"


def check_origins(origins: Iterable[str]) -> tuple[str, ...]:
    """``origins`` checked: each ``"*"``, `LOCALHOST` or ``scheme://host[:port]`` (a browser's ``Origin`` header).

    Raises:
        ConfigError: an origin has a path, query or no host, or is not a string.
    """
    if isinstance(origins, str):
        raise ConfigError(f"cors_origins={origins!r} is invalid: expected a sequence of origins, not one string")
    out = []
    for origin in origins:
        if not isinstance(origin, str):
            raise ConfigError(f"cors origin {origin!r} is invalid: expected a string")
        if origin not in ("*", LOCALHOST):
            parts = urlsplit(origin)
            if parts.scheme not in ("http", "https") or not parts.hostname or parts.path or parts.query \
                    or parts.fragment or parts.username is not None:
                raise ConfigError(f"cors origin {origin!r} is invalid: expected *, localhost or "
                                  "scheme://host[:port], as a browser sends it in the Origin header "
                                  "(no path, no trailing slash)")
        out.append(origin)
    return tuple(out)


def cors_middleware(origins: Sequence[str], methods: Iterable[str]) -> list[Middleware]:
    """The CORS middleware for ``origins`` and the routes' ``methods``; none when ``origins`` is empty.

    Any request header is allowed (clients send ``Authorization``,
    ``X-Api-Key`` and their own ``X-Stainless-*`` ones); no credentials
    (cookies): the API key travels in a header.
    """
    if not origins:
        return []
    named = [o for o in origins if o != LOCALHOST]
    pattern = _LOCALHOST_PATTERN if LOCALHOST in origins else None
    return [Middleware(_CORS, allow_origins=named, allow_origin_regex=pattern, allow_methods=sorted(set(methods)),
                       allow_headers=["*"])]


class _CORS(CORSMiddleware):
    """Starlette's CORS middleware, a refused preflight answered 200 without ``Access-Control-Allow-Origin``.

    Its headers go out capitalized as llama-server writes them (``Access-Control-Allow-Origin``): names
    are case-insensitive, but clients that keep headers in a plain dict look them up that way.
    """

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def capitalized(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = dict(message, headers=[(_canonical(name), value) for name, value in message["headers"]])
            await send(message)
        await super().__call__(scope, receive, capitalized)

    def preflight_response(self, request_headers: Headers) -> Response:
        response = super().preflight_response(request_headers)
        if response.status_code == 400:  # Starlette's refusal; llama-server answers 200, the browser refuses either
            response.status_code = 200
        return response


def _canonical(name: bytes) -> bytes:
    """A CORS header's name capitalized (``Access-Control-Allow-Origin``); other names as they are."""
    if not name.lower().startswith(b"access-control-"):
        return name
    return b"-".join(part.capitalize() for part in name.split(b"-"))
