"""HTTP errors in OpenAI's JSON shape, and the map from spec_actor's exceptions to them."""

from __future__ import annotations

from typing import Any

from .._errors import (ActorClosedError, ConfigError, GrammarError, PromptError, QueueFullError,
                       SpecActorError)

__all__ = ["ApiError", "api_error_for", "bad_request", "context_exceeded", "endpoint_off", "rpc_worker_failed",
           "shutting_down"]


class ApiError(Exception):
    """Raised when a request fails; carries the HTTP status and OpenAI's error fields.

    The body the client gets is ``{"error": {"message", "type", "param",
    "code"}}``, as OpenAI's API sends it, so its clients raise their usual
    exceptions (``openai.BadRequestError`` for a 400, and so on). ``extra``
    adds fields beside those, as llama-server's ``n_ctx`` and
    ``n_prompt_tokens`` on a context overflow.
    """

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None, extra: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.extra = extra or {}

    def body(self) -> dict[str, Any]:
        """The JSON body of the error response."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}
                | self.extra}

    def __repr__(self) -> str:
        return f"ApiError({self.status}, {self.message!r})"


def bad_request(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    """A 400 that names the field to change."""
    return ApiError(400, message, param=param, code=code)


def context_exceeded(n_prompt_tokens: int, n_ctx: int, param: str = "prompt") -> ApiError:
    """The 400 of a prompt that does not fit the context, as llama-server gives it.

    Type ``exceed_context_size_error`` with ``n_prompt_tokens`` and ``n_ctx``
    (llama-server's fields); code ``context_length_exceeded`` (OpenAI's).
    """
    return ApiError(400, f"the prompt is {n_prompt_tokens} tokens long and the server's context holds {n_ctx}; "
                         "send a shorter prompt", type="exceed_context_size_error", param=param,
                    code="context_length_exceeded", extra={"n_prompt_tokens": n_prompt_tokens, "n_ctx": n_ctx})


def endpoint_off(path: str, flag: str) -> ApiError:
    """The 501 of a route the server was started without (``flag`` turned it off), as llama-server gives it."""
    return ApiError(501, f"this server does not serve {path}: it was started with {flag}", type="not_supported_error",
                    code="not_supported")


def shutting_down() -> ApiError:
    """The 503 of a request that the server ended because it is stopping."""
    return ApiError(503, "the server is shutting down; retry against a running server",
                    type="service_unavailable", code="shutting_down")


def rpc_worker_failed(reason: str) -> ApiError:
    """The 503 of ``/health`` once the model's RPC worker failed: llama-server's ``unavailable_error``.

    The model cannot compute again until it is loaded again, so a load
    balancer or a readiness probe should drop this replica.
    """
    return ApiError(503, reason, type="unavailable_error", code="rpc_worker_failed")


def api_error_for(exc: SpecActorError) -> ApiError:
    """The HTTP error for a spec_actor exception raised while serving a request.

    Bad options and prompts are the client's (400), a full queue is 429, a
    closed pool means the server is stopping (503); anything else is a
    failure of the server (500) with the library's message.
    """
    if isinstance(exc, PromptError):
        code = "context_length_exceeded" if "context" in exc.message or "n_ctx" in exc.message else None
        return bad_request(exc.message, param="prompt", code=code)
    if isinstance(exc, GrammarError):
        return bad_request(exc.message, param="grammar", code="invalid_grammar")
    if isinstance(exc, ConfigError):
        return bad_request(exc.message)
    if isinstance(exc, QueueFullError):
        return ApiError(429, f"the server is busy: {exc.message}", type="rate_limit_exceeded",
                        code="queue_full")
    if isinstance(exc, ActorClosedError):
        return shutting_down()
    return ApiError(500, exc.message or type(exc).__name__, type="server_error")
