"""Speculation is lossless: teacher-forced equality with plain greedy decoding, in every mode.

Each test runs a speculative session and walks its whole output with
`greedy_helpers.disputed_positions`: plain greedy decoding restarted from
the speculative prefix at every disagreement, so every disputed position is
counted, not only the first. On the float32 tiny models batched
verification and single-token decoding agree, so no position may be
disputed. Gemma (Q4_K_M) rounds differently in a batch: a dispute is
excused only at a measured near-tie (`GEMMA_NEAR_TIE`, decision 0019), and
the tests print the count.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from greedy_helpers import GEMMA_NEAR_TIE, assert_lossless, greedy, with_eog
from lossless_noise import greedy_contexts, margin_pairs
from tiny_model_fixtures import mtp_model, tiny_draft, tiny_eagle3, tiny_paths, tiny_target  # noqa: F401

import spec_actor
from spec_actor import Session, Spec

NGRAM_TYPES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")
TINY_PROMPTS = {
    "hello": "Hello world, this is a tiny model",
    "code": "def add(a, b):\n    return a + b\n\ndef add(a, b):\n",
}
GEMMA_PROMPTS = {
    "code": "def add(a, b):\n    return a + b\n\ndef mul(a, b):\n    return a * b\n\n"
            "Here is the same code again, copied exactly:\n\ndef add(a, b):\n",
    "story": "Once upon a time, in a small village by the sea, there lived an old fisherman named",
}
N_TINY = 96
# ngram-cache finds nothing to draft in the "hello" text of the tiny target
# (it does draft on the code prompt); every other mode drafts on both.
# Spec("auto") may rightly choose not to draft.
DRAFTS_NOTHING = {("ngram-cache", "hello"), ("ngram-cache-auto", "hello"),
                  ("spec-auto", "hello"), ("spec-auto", "code")}
N_GEMMA = 32
# In the story's first 32 tokens Gemma repeats nothing, so no n-gram type
# finds anything to draft there (they all draft on the code prompt, which
# asks for a copy); Spec("auto") may rightly choose not to draft.
GEMMA_DRAFTS_NOTHING = {*((t, "story") for t in (*NGRAM_TYPES, "ngram-mod-auto")),
                        ("spec-auto", "story"), ("spec-auto", "code")}

Getter = Callable[[str], spec_actor.Model]
# name -> (target fixture, Spec builder taking the fixture getter)
Mode = tuple[str, Callable[[Getter], Spec]]


def _ngram(spec_type: str, n_draft: int | str) -> Callable[[Getter], Spec]:
    # short n-grams, so that the tiny models' short-cycled text drafts often
    return lambda get: Spec(spec_type, n_draft=n_draft, ngram_size_n=2, ngram_size_m=8, ngram_mod_n_match=4)


def _modes(auto: bool) -> dict[str, Mode]:
    """Every drafting mode of the tiny models, with fixed or adaptive (``n_draft="auto"``) draft lengths."""
    def n(fixed: int) -> int | str:
        return "auto" if auto else fixed

    return {
        "mtp": ("mtp_model", lambda get: Spec("mtp", n_draft=n(3))),
        "draft-simple": ("tiny_target", lambda get: Spec("draft-simple", n_draft=n(4),
                                                         draft_model=get("tiny_draft"))),
        "eagle3": ("tiny_target", lambda get: Spec("eagle3", n_draft=n(3), draft_model=get("tiny_eagle3"))),
        **{t: ("tiny_target", _ngram(t, n(8))) for t in NGRAM_TYPES},
    }


def _has_spec_auto() -> bool:
    """Whether Spec("auto") (the drafter chosen online) exists in this version."""
    try:
        Spec("auto")
    except spec_actor.ConfigError:
        return False
    return True


# Spec("auto") joins both tables on its own once the type exists.
SPEC_AUTO: dict[str, Mode] = {"spec-auto": ("tiny_target", lambda get: Spec("auto"))} if _has_spec_auto() else {}
TINY_MODES = {**_modes(False), **{f"{name}-auto": mode for name, mode in _modes(True).items()}, **SPEC_AUTO}
GEMMA_MODES: dict[str, Callable[[Getter], Spec]] = {
    "self-draft": lambda get: Spec("draft-simple", n_draft=4, draft_model=get("gemma")),
    "self-draft-auto": lambda get: Spec("draft-simple", n_draft="auto", draft_model=get("gemma")),
    **{t: (lambda t: lambda get: Spec(t, n_draft=8, ngram_size_n=3, ngram_size_m=8, ngram_mod_n_match=8))(t)
       for t in NGRAM_TYPES},
    "ngram-mod-auto": lambda get: Spec("ngram-mod", n_draft="auto", ngram_mod_n_match=8),
    **({"spec-auto": lambda get: Spec("auto")} if SPEC_AUTO else {}),
}


@pytest.fixture(scope="module")
def plain_sessions(request):
    """Plain greedy sessions per target fixture name, opened on first use."""
    sessions: dict[str, Session] = {}

    def get(name: str) -> Session:
        if name not in sessions:
            sessions[name] = Session(request.getfixturevalue(name), n_ctx=512, n_threads=1)
        return sessions[name]

    yield get
    for session in sessions.values():
        session.close()


@pytest.mark.parametrize("prompt_id", list(TINY_PROMPTS))
@pytest.mark.parametrize("mode", list(TINY_MODES))
def test_tiny_models_speculative_output_equals_plain_greedy_at_every_position(request, plain_sessions,
                                                                             mode, prompt_id):
    target, build = TINY_MODES[mode]
    prompt = TINY_PROMPTS[prompt_id]
    with Session(request.getfixturevalue(target), spec=build(request.getfixturevalue), n_ctx=512,
                 n_threads=1) as session:
        result = greedy(session, prompt, N_TINY)
    print(mode, prompt_id, result.stats.summary())
    if (mode, prompt_id) not in DRAFTS_NOTHING:
        assert result.stats.drafts_generated > 0, "the mode must draft here, or equality proves nothing"
    disputes = assert_lossless(plain_sessions(target), prompt, with_eog(result))
    assert disputes == []


@pytest.mark.parametrize("prompt_id", list(GEMMA_PROMPTS))
@pytest.mark.parametrize("mode", list(GEMMA_MODES))
def test_gemma_speculative_output_equals_plain_greedy_except_at_near_ties(request, plain_sessions, mode, prompt_id):
    prompt = GEMMA_PROMPTS[prompt_id]
    spec = GEMMA_MODES[mode](request.getfixturevalue)
    with Session(request.getfixturevalue("gemma"), spec=spec, n_ctx=512, n_threads=1) as session:
        result = greedy(session, prompt, N_GEMMA)
    if (mode, prompt_id) not in GEMMA_DRAFTS_NOTHING:
        assert result.stats.drafts_generated > 0, "the mode must draft here, or equality proves nothing"
    disputes = assert_lossless(plain_sessions("gemma"), prompt, with_eog(result), near_tie=GEMMA_NEAR_TIE)
    print(f"gemma {mode} {prompt_id}: {len(disputes)} disputed of {len(result.tokens)} positions, "
          f"{result.stats.drafts_accepted}/{result.stats.drafts_generated} drafts accepted")


def test_gemma_batch_vs_single_noise_is_below_the_near_tie_threshold(gemma):
    """Re-measure the noise that decision 0019 sized the threshold from, on a few positions."""
    contexts = greedy_contexts(gemma, [GEMMA_PROMPTS["story"]], n_tokens=16, every=2)
    pairs = margin_pairs(gemma, contexts, n_ubatch=9)
    deltas = [p.delta for p in pairs if p.single[:2] == p.batch[:2]]
    print(f"batch-of-9 vs single: max |margin difference| {max(deltas):.5f} over {len(deltas)} contexts")
    assert len(deltas) >= len(pairs) // 2
    assert max(deltas) < GEMMA_NEAR_TIE
