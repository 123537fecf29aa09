"""Grammar-constrained generation with speculation that really drafts.

The prompt is a JSON list to copy, so the n-gram types find the text they
draft from and the model drafters (self-draft on Gemma; MTP, draft-simple,
EAGLE-3 on the tiny models) draft every step. Each mode must draft
(``drafts_generated > 0``), the output must parse and follow the grammar, and
it must equal plain greedy decoding under the same grammar (on the tiny
float32 models exactly; on Gemma up to near-ties, see decision 0019).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import pytest
from greedy_helpers import greedy
from tiny_model_fixtures import mtp_model, tiny_draft, tiny_eagle3, tiny_paths, tiny_target  # noqa: F401

import spec_actor
from spec_actor import Session, Spec

NGRAM_TYPES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")
RECORDS = '[{"name": "alpha", "id": 101}, {"name": "beta", "id": 202}, {"name": "gamma", "id": 303}, ' \
          '{"name": "delta", "id": 404}]'
COPY_JSON_PROMPT = f"Copy this JSON list exactly.\nInput: {RECORDS}\nOutput: "
# A list of one to four {"name", "id"} records: at most ~170 characters, so
# every model closes it within N tokens, after which only end-of-generation is allowed.
RECORDS_GRAMMAR = r"""
root   ::= "[" record ( ", " record ){0,3} "]"
record ::= "{\"name\": \"" [a-z]{1,8} "\", \"id\": " [1-9] [0-9]{0,2} "}"
"""
RECORD_RE = re.compile(r'\{"name": "[a-z]{1,8}", "id": [1-9][0-9]{0,2}\}')
N = 160

Getter = Callable[[str], spec_actor.Model]
MODES: dict[str, tuple[str, Callable[[Getter], Spec]]] = {
    "gemma-self-draft": ("gemma", lambda get: Spec("draft-simple", n_draft=4, draft_model=get("gemma"))),
    **{f"gemma-{t}": ("gemma", (lambda t: lambda get: Spec(t, n_draft=8, ngram_size_n=3, ngram_size_m=8,
                                                          ngram_mod_n_match=6))(t))
       for t in NGRAM_TYPES},
    "gemma-ngram-mod-auto": ("gemma", lambda get: Spec("ngram-mod", n_draft="auto", ngram_mod_n_match=6)),
    "tiny-mtp": ("mtp_model", lambda get: Spec("mtp", n_draft=3)),
    "tiny-draft-simple": ("tiny_target", lambda get: Spec("draft-simple", n_draft=4, draft_model=get("tiny_draft"))),
    "tiny-eagle3": ("tiny_target", lambda get: Spec("eagle3", n_draft=3, draft_model=get("tiny_eagle3"))),
}


def assert_follows_grammar(text: str) -> None:
    """The text is a JSON list of 1-4 records of the grammar's shape."""
    value = json.loads(text)
    assert isinstance(value, list) and 1 <= len(value) <= 4
    assert text == "[" + ", ".join(RECORD_RE.findall(text)) + "]"


@pytest.mark.parametrize("mode", list(MODES))
def test_grammar_with_speculation_that_drafts(request, mode):
    target, build = MODES[mode]
    model = request.getfixturevalue(target)
    with Session(model, n_ctx=512, n_threads=1) as plain:
        expected = greedy(plain, COPY_JSON_PROMPT, N, grammar=RECORDS_GRAMMAR)
    with Session(model, spec=build(request.getfixturevalue), n_ctx=512, n_threads=1) as session:
        result = greedy(session, COPY_JSON_PROMPT, N, grammar=RECORDS_GRAMMAR)
    s = result.stats
    print(mode, repr(result.text), s.summary())
    assert s.drafts_generated > 0, "the mode drafted nothing: this run would not test speculation"
    assert s.drafts_accepted <= s.drafts_generated
    assert result.status == "eog", "the grammar was complete: only end-of-generation was allowed"
    assert_follows_grammar(result.text)
    if mode.startswith("gemma"):
        assert result.text == RECORDS, "Gemma copies the list (plain greedy does)"
        assert expected.text == RECORDS
        assert s.drafts_accepted > 0
    else:
        assert result.tokens == expected.tokens
