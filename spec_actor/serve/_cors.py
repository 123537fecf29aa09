"""Cross-origin access (CORS), off unless the server is given the web origins it may serve.

A browser sends a page's requests to any address the page names, loopback
included, and only CORS decides whether the page may read the answer. A
server on ``127.0.0.1`` with cross-origin access open is therefore reachable
from every site its user visits. So no origin is allowed by default;
``--cors-origins`` names the ones that are (``"*"``: any), and Starlette's
`CORSMiddleware` then answers their preflights (``OPTIONS`` with
``Access-Control-Request-Method``) and marks their responses. Other origins'
preflights get a 400 and no ``Access-Control-Allow-Origin``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from urllib.parse import urlsplit

from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware

from .._errors import ConfigError

__all__ = ["check_origins", "cors_middleware"]


def check_origins(origins: Iterable[str]) -> tuple[str, ...]:
    """``origins`` checked: each ``"*"`` or ``scheme://host[:port]`` (a browser's ``Origin`` header).

    Raises:
        ConfigError: an origin has a path, query or no host, or is not a string.
    """
    if isinstance(origins, str):
        raise ConfigError(f"cors_origins={origins!r} is invalid: expected a sequence of origins, not one string")
    out = []
    for origin in origins:
        if not isinstance(origin, str):
            raise ConfigError(f"cors origin {origin!r} is invalid: expected a string")
        if origin != "*":
            parts = urlsplit(origin)
            if parts.scheme not in ("http", "https") or not parts.hostname or parts.path or parts.query \
                    or parts.fragment or parts.username is not None:
                raise ConfigError(f"cors origin {origin!r} is invalid: expected * or scheme://host[:port], "
                                  "as a browser sends it in the Origin header (no path, no trailing slash)")
        out.append(origin)
    return tuple(out)


def cors_middleware(origins: Sequence[str], methods: Iterable[str]) -> list[Middleware]:
    """Starlette's CORS middleware for ``origins`` and the routes' ``methods``; none when ``origins`` is empty.

    Any request header is allowed (clients send ``Authorization``,
    ``X-Api-Key`` and their own ``X-Stainless-*`` ones); no credentials
    (cookies): the API key travels in a header.
    """
    if not origins:
        return []
    return [Middleware(CORSMiddleware, allow_origins=list(origins), allow_methods=sorted(set(methods)),
                       allow_headers=["*"])]
