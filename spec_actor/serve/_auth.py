"""The API key: sent as ``Authorization: Bearer KEY`` (OpenAI's clients) or ``X-Api-Key: KEY`` (Anthropic's).

llama-server takes both headers and answers a missing or wrong key with a
401 whose type is ``authentication_error``; so does this server. The scheme
is matched case-insensitively (RFC 7235), spaces around the key are ignored,
and the key is compared in constant time (docs/decisions/0042).
"""

from __future__ import annotations

import secrets

from ._errors import ApiError
from ._http import Exchange

__all__ = ["check_key"]


def check_key(exchange: Exchange, key: str | None) -> None:
    """Return if the request carries ``key`` (or no key is set).

    Raises:
        ApiError: 401, type ``authentication_error``, code ``invalid_api_key``.
    """
    if key is None:
        return
    expected = key.encode()
    scheme, _, token = (exchange.header(b"authorization") or "").partition(" ")
    bearer = token.strip().encode() if scheme.lower() == "bearer" else b""
    api_key = (exchange.header(b"x-api-key") or "").strip().encode()
    # both compared, whatever the first gives: the time does not tell which header was right
    if secrets.compare_digest(bearer, expected) | secrets.compare_digest(api_key, expected):
        return
    raise ApiError(401, "missing or incorrect API key: send it as `Authorization: Bearer KEY` or `X-Api-Key: KEY`",
                   type="authentication_error", code="invalid_api_key")
