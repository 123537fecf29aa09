"""Session-scoped fixtures: the tiny speculative GGUFs, written and loaded once per test run.

Test modules import the fixtures they use (``from tiny_model_fixtures import
mtp_model, ...``); pytest then finds them in the module's namespace. The
files come from `spec_actor.testing.tiny_models` (random weights, milliseconds
to write) and are loaded by the real llama.cpp.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

import spec_actor
from spec_actor.testing import tiny_models


@dataclass(frozen=True)
class TinyPaths:
    """Where the tiny models of this test run were written."""

    mtp: Path
    """glm4moe with 2 trunk blocks and 1 NextN/MTP block."""
    hybrid: Path
    """qwen35 with a delta-net block, an attention block and 1 NextN/MTP block."""
    target: Path
    """llama target of the draft pair (4 blocks)."""
    draft: Path
    """llama draft sharing the target's vocabulary (1 block)."""
    bad_draft: Path
    """llama draft whose token texts differ from the target's."""
    eagle3: Path
    """EAGLE-3 drafter reading the target's layers 1..3."""
    dflash: Path
    """DFlash drafter reading the target's layers 1 and 3."""


@pytest.fixture(scope="session")
def tiny_paths(tmp_path_factory: pytest.TempPathFactory) -> TinyPaths:
    d = tmp_path_factory.mktemp("tiny-models")
    target, draft = tiny_models.write_draft_pair(d)
    return TinyPaths(
        mtp=tiny_models.write_mtp_model(d / "tiny-mtp.gguf"),
        hybrid=tiny_models.write_hybrid_mtp_model(d / "tiny-hybrid-mtp.gguf"),
        target=target,
        draft=draft,
        bad_draft=tiny_models.write_incompatible_draft(d / "tiny-draft-incompatible.gguf", target),
        eagle3=tiny_models.write_eagle3_drafter(d / "tiny-eagle3.gguf", target),
        dflash=tiny_models.write_dflash_drafter(d / "tiny-dflash.gguf", target),
    )


def _loaded(name: str, file: str, doc: str, **options: bool):
    """A session-scoped fixture ``name``: the tiny model ``tiny_paths.<file>``, loaded once."""

    @pytest.fixture(scope="session", name=name)
    def fixture(tiny_paths: TinyPaths) -> spec_actor.Model:
        return spec_actor.load_model(getattr(tiny_paths, file), **options)

    fixture.__doc__ = doc
    return fixture


mtp_model = _loaded("mtp_model", "mtp", "The tiny glm4moe model with its NextN/MTP layers loaded.", load_mtp=True)
mtp_model_without_mtp = _loaded("mtp_model_without_mtp", "mtp",
                                "The same glm4moe file loaded without its NextN/MTP tensors.")
hybrid_model = _loaded("hybrid_model", "hybrid",
                       "The tiny qwen35 hybrid (recurrent + attention) model with its NextN/MTP layer loaded.",
                       load_mtp=True)
hybrid_model_without_mtp = _loaded("hybrid_model_without_mtp", "hybrid",
                                   "The same qwen35 file loaded without its NextN/MTP tensors (auto drafts no model).")
tiny_target = _loaded("tiny_target", "target", "The llama target of the draft pair.")
tiny_draft = _loaded("tiny_draft", "draft", "The 1-block llama draft sharing the target's vocabulary.")
tiny_bad_draft = _loaded("tiny_bad_draft", "bad_draft", "A llama draft whose token texts differ from the target's.")
tiny_eagle3 = _loaded("tiny_eagle3", "eagle3", "The EAGLE-3 drafter for the target.")
tiny_dflash = _loaded("tiny_dflash", "dflash", "The DFlash drafter for the target.")
