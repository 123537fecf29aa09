"""Shared fixtures: the embedded Gemma model and the tiny generated GGUFs."""

from __future__ import annotations

import pytest

import spec_actor


@pytest.fixture(scope="session")
def gemma() -> spec_actor.Model:
    """The embedded Gemma 3 270M Q4_K_M, loaded once per test session."""
    return spec_actor.load_model()
