"""One place that turns native status codes into spec_actor exceptions."""

from __future__ import annotations

from typing import Any

from .._errors import (
    ConfigError,
    ContextError,
    DecodeError,
    GrammarError,
    ModelLoadError,
    PromptError,
    SpecActorError,
    SpecError,
)
from ._raw import ffi, lib

OK = lib.SA_OK

# sa_status -> exception class, the one mapping from native codes. Codes not
# listed (SA_ERR_BUFFER, SA_ERR_INTERNAL, unknown ones) map to the base class.
_STATUS_ERRORS: dict[int, type[SpecActorError]] = {
    lib.SA_ERR_INVALID_ARG: ConfigError,
    lib.SA_ERR_MODEL_LOAD: ModelLoadError,
    lib.SA_ERR_CONTEXT: ContextError,
    lib.SA_ERR_SPEC: SpecError,
    lib.SA_ERR_PROMPT: PromptError,
    lib.SA_ERR_GRAMMAR: GrammarError,
    lib.SA_ERR_DECODE: DecodeError,
}


def error_for_status(code: int, message: str) -> SpecActorError:
    """Return (not raise) the exception for a failed native ``sa_status``.

    Args:
        code: The status a native call returned; callers pass failures only
            (not SA_OK, SA_CANCELLED or SA_STOPPED).
        message: The native message (``sa_last_error()``); when empty, a
            message naming the status is used instead.

    Returns:
        An instance of the class mapped to ``code``, or of `SpecActorError`
        for codes without a more specific class; its ``code`` is ``code``.
    """
    cls = _STATUS_ERRORS.get(code, SpecActorError)
    return cls(message or f"native call failed with sa_status {code}", code)


def last_error() -> str:
    """The calling thread's last native error message."""
    return ffi.string(lib.sa_last_error()).decode("utf-8", "replace")


def string_out(fn: Any, *args: Any, what: str = "model metadata") -> str:
    """The text a native ``fn(*args, buf, cap, n_out)`` writes: asked for its size, then fetched.

    Raises the SpecActorError of a failed status (``what`` prefixes its message).
    """
    n = ffi.new("int32_t *")
    status = fn(*args, ffi.NULL, 0, n)
    if status == OK:
        return ""
    if status != lib.SA_ERR_BUFFER:
        check(status, what)
    buf = ffi.new("char[]", n[0] + 1)
    check(fn(*args, buf, n[0] + 1, n), what)
    return ffi.string(buf, n[0]).decode("utf-8", "replace")


def check(status: int, what: str) -> None:
    """Raise the SpecActorError for ``status`` unless it is SA_OK.

    Must be called on the thread that made the native call: the message is
    kept per thread.
    """
    if status != OK:
        raise error_for_status(status, f"{what}: {last_error()}")
