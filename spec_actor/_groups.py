"""Unwrap the ExceptionGroups that trio nurseries add, at the API boundary.

Callers of spec_actor write ``except spec_actor.SpecActorError``; a nursery
inside `open_actor` would otherwise hand them ``ExceptionGroup([error])``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

import trio

if sys.version_info < (3, 11):  # pragma: no cover - Python 3.10
    from exceptiongroup import BaseExceptionGroup

__all__ = ["unwrap_groups"]


def _single(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The one exception a group stands for, or None if it holds several real ones.

    Cancelled exceptions next to a real error are side effects of that error
    (trio cancels the other tasks), so the real error wins; a group of
    Cancelled only stands for one Cancelled.
    """
    real = [e for e in group.exceptions if not isinstance(e, trio.Cancelled)]
    if len(real) == 1:
        return real[0]
    if not real:
        return group.exceptions[0]
    return None


@contextmanager
def unwrap_groups() -> Iterator[None]:
    """Re-raise an ExceptionGroup made by our own nursery as the one exception inside.

    Unwraps one level only: a group that the caller's own code raised comes
    out as the caller raised it. A group of several real errors (which
    spec_actor's tasks do not produce) is re-raised unchanged.
    """
    try:
        yield
    except BaseExceptionGroup as group:
        inner = _single(group)
        if inner is None:
            raise
        context = inner.__context__
        try:
            raise inner
        finally:
            # `raise` inside this handler set the group as the context; restore it.
            inner.__context__ = context
            del inner, group
