"""Checks at the API's entry points that turn misuse into a clear error.

spec_actor runs on trio, and an actor belongs to the trio run and thread that
opened it. Called from asyncio, or from a foreign thread, the API used to fail
deep inside trio or hang; these checks say what to do instead. Only the
documented thread-safe calls (``stats``, ``print_stats``, ``stream.stats``)
skip them.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import sniffio
import trio

from ._errors import PromptError, SpecActorError

__all__ = ["WrongContextError", "check_token_ids", "ensure_trio", "ensure_trio_caller"]


class WrongContextError(SpecActorError, RuntimeError):
    """Raised when spec_actor is called from asyncio, or from a thread that does not own the actor.

    Call it from ``trio.run(...)``; from a worker thread, go through the
    actor's trio thread with ``trio.from_thread.run(actor.generate, ...)``.
    """


def _async_library() -> str | None:
    try:
        return sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        return None


def _wrong_context(what: str, library: str | None) -> WrongContextError:
    if library is not None and library != "trio":
        return WrongContextError(
            f"{what} was called from {library}; spec_actor runs on trio: call it inside trio.run(...) "
            "(from asyncio, run trio in a thread or use trio-asyncio)")
    return WrongContextError(
        f"{what} was called from thread {threading.current_thread().name!r}, which does not run the actor's "
        "trio loop; call it from the trio thread that opened the actor, or from a worker thread with "
        "trio.from_thread.run(...)")


def ensure_trio(what: str) -> None:
    """Raise WrongContextError unless called inside a trio run (e.g. from asyncio)."""
    library = _async_library()
    if library != "trio":
        raise _wrong_context(what, library)


def ensure_trio_caller(token: trio.lowlevel.TrioToken, what: str) -> None:
    """Raise WrongContextError unless called on the trio run (and so the thread) of ``token``."""
    try:
        current = trio.lowlevel.current_trio_token()
    except RuntimeError:
        current = None
    if current is token:
        return
    if current is not None:
        raise WrongContextError(f"{what} was called from another trio run than the one that opened the actor; "
                                "an actor serves the trio run that opened it")
    raise _wrong_context(what, _async_library())


def check_token_ids(tokens: Sequence[int], n_vocab: int) -> None:
    """Raise PromptError unless every token id is an int from 0 to n_vocab - 1."""
    for i, token in enumerate(tokens):
        if type(token) is not int or not 0 <= token < n_vocab:
            raise PromptError(f"prompt token {token!r} at position {i} is not a token id of this model: "
                              f"ids are ints from 0 to {n_vocab - 1}; tokenize text with the model's tokenizer")
