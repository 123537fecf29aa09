"""DFlash end to end (issue "MTP on a hybrid model ... DFlash end to end").

The tiny DFlash drafter of spec_actor.testing drafts for the tiny llama
target through the real llama.cpp: a block ``[last token, mask, ...]``
decoded non-causally against the target's hidden states injected into its
KV cache. Its weights are random, so its drafts are rejected; what must hold
is that greedy output equals plain greedy output exactly (F32) and that the
counters agree with the events.
"""

from __future__ import annotations

import pytest
from test_hybrid import CTX, N, N_CTX, PROMPT, run_with_step_events
from tiny_model_fixtures import tiny_dflash, tiny_paths, tiny_target  # noqa: F401 - fixtures, found by pytest here

import spec_actor
from spec_actor import Session, Spec, SpecError, open_actor
from spec_actor.testing import tiny_models


@pytest.fixture(scope="module")
def target_plain_tokens(tiny_target) -> tuple[int, ...]:
    with Session(tiny_target, n_ctx=N_CTX, **CTX) as session:
        result = session.run(PROMPT, max_tokens=N, temp=0.0)
    assert result.status == "done" and len(result.tokens) == N
    return result.tokens


@pytest.mark.parametrize("n_draft", [1, 4])
def test_hybrid_dflash_greedy_equals_plain_and_counters_match_events(tiny_target, tiny_dflash,
                                                                     target_plain_tokens, n_draft):
    result, steps = run_with_step_events(tiny_target, Spec("dflash", n_draft=n_draft, draft_model=tiny_dflash))
    print(result.stats.summary())
    assert result.tokens == target_plain_tokens
    assert result.stats.drafts_generated > 0
    for st in steps:
        # DFlash decodes a whole block: n_draft tokens, capped by the budget
        assert st.drafted == min(n_draft, N - st.emitted_before - 1), st
        assert st.drafts == (1 if st.drafted else 0), st
        assert st.accepted == st.tokens - 1, st  # an attention-only target: no re-verify pass


async def test_hybrid_dflash_through_the_actor(tiny_target, tiny_dflash, target_plain_tokens):
    spec = Spec("dflash", n_draft=3, draft_model=tiny_dflash)
    async with open_actor(tiny_target, spec=spec, n_ctx=N_CTX, **CTX) as actor:
        first = await actor.generate(PROMPT, max_tokens=N, temp=0.0)
        again = await actor.generate(PROMPT, max_tokens=N, temp=0.0)
        snap = actor.stats()
    assert first == again == tiny_target.tokenizer.decode(target_plain_tokens)
    assert snap.requests == 2 and snap.drafts_generated > 0


def test_hybrid_dflash_drafter_without_mask_token_is_refused(tiny_target, tiny_paths, tmp_path):
    # llama.cpp fills the drafted block with the mask token and aborts the process without one
    path = tiny_models.write_dflash_drafter(tmp_path / "no-mask.gguf", tiny_paths.target, mask_token=False)
    drafter = spec_actor.load_model(path)
    with pytest.raises(SpecError, match="no mask token"):
        Session(tiny_target, n_ctx=N_CTX, spec=Spec("dflash", n_draft=3, draft_model=drafter), **CTX)
