"""A pytest plugin for llama.cpp's server test suite, loaded by scripts/llama_server_suite.py (``-p``).

The suite's session fixture starts every model preset once, to download its
model before the tests. Here every preset runs on the embedded model and
nothing can be downloaded, so that step is left out.
"""

from __future__ import annotations


def pytest_configure(config) -> None:
    """Make the suite's ``ServerPreset.load_all`` do nothing (its ``utils`` module is on sys.path)."""
    import utils

    utils.ServerPreset.load_all = staticmethod(lambda: None)
