"""Checked wrappers for the test probes of the ABI (its TESTING section).

Not used by generation: the test suite and benchmarks call these to inspect
a session, through `spec_actor.Session.top2`.
"""

from __future__ import annotations

from ._check import check
from ._raw import ffi, lib
from .session import SessionHandle


def top2(handle: SessionHandle, tokens: list[int]) -> tuple[int, int, float]:
    """(top-1 id, top-2 id, logit margin) after a plain forward pass over tokens.

    Clears the session's memory before and after: not during a run.
    """
    buf = ffi.new("int32_t[]", tokens)
    a, b, m = ffi.new("int32_t *"), ffi.new("int32_t *"), ffi.new("float *")
    check(lib.sa_testing_top2(handle, buf, len(tokens), a, b, m), "top-2 probe")
    return a[0], b[0], m[0]
