"""The raw cffi objects, imported in one place with a clear failure."""

from __future__ import annotations

import os

try:
    from ._native import ffi, lib
except ImportError as exc:  # pragma: no cover - only on a broken install
    raise ImportError(
        "spec_actor's native extension is missing or failed to load "
        f"({exc}); reinstall with `pip install .` from the source tree"
    ) from exc

# llama.cpp logs nothing by default: failures reach callers as exceptions
# carrying the native message. SPEC_ACTOR_LOG_LEVEL=1..4 shows its log.
lib.sa_set_log_level(int(os.environ.get("SPEC_ACTOR_LOG_LEVEL", "0") or 0))
lib.sa_backend_init()

__all__ = ["ffi", "lib"]
