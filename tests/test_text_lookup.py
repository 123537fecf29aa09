"""Auto's text lookup (native/draft/text_lookup.cpp): drafts by matching characters, not tokens.

A prompt's words come back in the output split into other tokens: a name
the prompt has after a space, the output writes after a quote. The lookup
keeps the request's text, finds the latest longest earlier occurrence of
its tail and proposes the whole tokens that spell what followed. Expected
values here come from the tokenizer and plain string searches, not from the
lookup itself.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import spec_actor
from spec_actor.nif import testing as nt
from test_auto import accepted_by, lossless_gemma_auto_run
from tiny_model_fixtures import tiny_paths, tiny_target  # noqa: F401

MIN_MATCH = 3  # bytes of the shortest match (TokenMemory::kKey units)
BYTES_PER_TOKEN = 2  # matched bytes per proposed token at most


def text_bytes(model: spec_actor.Model, tokens: list[int]) -> bytes:
    return b"".join(model.tokenizer.piece(t) for t in tokens)


def lookup(model: spec_actor.Model, text: str, n_max: int = 16) -> tuple[list[int], int]:
    return nt.text_lookup(model.handle, model.tokenizer.encode(text, add_special=False), n_max)


def test_a_name_the_prompt_split_otherwise_is_proposed(gemma):
    text = "The call was led by Tom Becker, a data engineer.\nJSON: {\"name\": \"Tom"
    tokens = gemma.tokenizer.encode(text, add_special=False)
    # the token n-grams cannot see it: the prompt's " Becker" follows " Tom", the output's "Tom"
    assert gemma.tokenizer.encode("Tom", add_special=False)[0] not in tokens[:-1]
    proposal, match = nt.text_lookup(gemma.handle, tokens, 16)
    assert match == len("Tom")
    assert proposal == gemma.tokenizer.encode(" Becker", add_special=False)


def test_a_long_match_proposes_up_to_one_token_per_two_matched_bytes(gemma):
    sentence = "the harbour was quiet in the early morning and the gulls circled"
    text = f"{sentence}. Later, {sentence[:30]}"
    proposal, match = lookup(gemma, text, n_max=64)
    assert match >= 30 and 0 < len(proposal) <= match // BYTES_PER_TOKEN
    # what followed the first occurrence, as far as the text goes
    assert text.encode()[30:].startswith(text_bytes(gemma, proposal))
    # n_max bounds it too
    assert len(lookup(gemma, text, n_max=2)[0]) == 2


def test_a_match_ending_between_tokens_proposes_the_tokens_that_followed_it(gemma):
    # decision 0084: where the earlier occurrence ends on a token boundary,
    # the request's own tokens from there are the proposal, not a new
    # tokenization of their text: " harb" "our" stays two tokens
    def encode(text: str) -> list[int]:
        return gemma.tokenizer.encode(text, add_special=False)

    head, odd = encode("the grey gulls circled over the"), encode(" harb") + encode("our")
    assert len(odd) == 2 and encode(" harbour") != odd
    tokens = head + odd + encode(" at dawn, and the gulls were quiet. Later, ") + head
    proposal, match = nt.text_lookup(gemma.handle, tokens, 64)
    assert match == len(text_bytes(gemma, head))
    # the text goes on past the first sentence: so do the tokens
    assert proposal == tokens[len(head):len(head) + match // BYTES_PER_TOKEN]
    assert nt.text_lookup(gemma.handle, tokens, 3)[0] == tokens[len(head):len(head) + 3]


def test_nothing_is_proposed_without_a_match_or_a_budget(gemma):
    assert lookup(gemma, "abcdefghij") == ([], 0)
    assert lookup(gemma, "") == ([], 0)
    assert lookup(gemma, "one two three, one two", n_max=0) == ([], 0)


ALPHABET = "ab xyz,.\"\n" + "éü" + "日本語" + "🙂"


TEXTS = st.lists(st.text(alphabet=ALPHABET, min_size=1, max_size=8), min_size=1, max_size=24).map(" ".join)
EXAMPLES = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def check_proposal(model: spec_actor.Model, text: str, n_max: int) -> None:
    tokens = model.tokenizer.encode(text, add_special=False)
    proposal, match = nt.text_lookup(model.handle, tokens, n_max)
    assert (match == 0) == (not proposal)
    if not proposal:
        return
    assert MIN_MATCH <= match and len(proposal) <= min(n_max, max(1, match // BYTES_PER_TOKEN))
    held, spelled = text_bytes(model, tokens), text_bytes(model, proposal)
    tail = held[-match:]
    # some earlier occurrence of the matched tail is followed by exactly the proposal's text
    starts = [i for i in range(len(held) - match) if held[i:i + match] == tail]
    assert any(held[i + match:].startswith(spelled) for i in starts), (held, tail, spelled)


@EXAMPLES
@given(text=TEXTS, n_max=st.integers(1, 12))
def test_a_proposal_spells_what_followed_an_earlier_occurrence_of_the_tail(gemma, text, n_max):
    check_proposal(gemma, text, n_max)


@EXAMPLES
@given(text=TEXTS, n_max=st.integers(1, 12))
def test_the_same_holds_for_a_byte_level_vocabulary(tiny_target, text, n_max):
    # the tiny models' byte-level BPE pieces may end inside a character
    check_proposal(tiny_target, text, n_max)


def test_auto_drafts_json_values_with_the_text_lookup_and_stays_lossless(gemma):
    result = lossless_gemma_auto_run(gemma, "extract_json.txt")
    # the splice lookup's proposals begin with the text lookup's continuation
    # (a value's rest), so its arm drafts values through it too (decision 0078)
    assert accepted_by(result, "text") + accepted_by(result, "splice") >= 4, result.stats.summary()
