"""One place that turns native status codes into spec_actor exceptions."""

from __future__ import annotations

from .._errors import error_for_status
from ._raw import ffi, lib

OK = lib.SA_OK


def last_error() -> str:
    """The calling thread's last native error message."""
    return ffi.string(lib.sa_last_error()).decode("utf-8", "replace")


def check(status: int, what: str) -> None:
    """Raise the SpecActorError for ``status`` unless it is SA_OK.

    Must be called on the thread that made the native call: the message is
    kept per thread.
    """
    if status != OK:
        raise error_for_status(status, f"{what}: {last_error()}")
