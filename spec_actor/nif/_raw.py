"""The raw cffi objects, imported in one place with a clear failure."""

from __future__ import annotations

try:
    from ._native import ffi, lib
except ImportError as exc:  # pragma: no cover - only on a broken install
    raise ImportError(
        "spec_actor's native extension is missing or failed to load "
        f"({exc}); reinstall with `pip install .` from the source tree"
    ) from exc

lib.sa_backend_init()

__all__ = ["ffi", "lib"]
