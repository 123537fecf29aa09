"""Auto's splice lookup (native/splice_lookup.cpp): a value's rest, then the record's seam.

Output that repeats a record around values copied from the prompt (JSON
extraction: `{"name": "Tom Becker", "role": ...}`) has two parts no other
arm drafts together: the value's rest, which the prompt spells (` Becker,`),
and the punctuation and next key that close it, which the previous record
spells (`", "role": "`). Expected proposals here are written out by hand from
the texts, through the tokenizer; the lookup's result is never an input.
"""

from __future__ import annotations

import spec_actor
from spec_actor.nif import testing as nt
from test_auto import accepted_by, lossless_gemma_auto_run

SOURCE = ("Extract the people into JSON.\n"
          "Text: The call was opened by Tom Becker, a data engineer from Berlin, "
          "and Aiko Tanaka, the lead designer from Osaka.\n"
          "JSON:\n")
FIRST_RECORD = '  {"name": "Tom Becker", "role": "data engineer"},\n'


def tokens_of(model: spec_actor.Model, *parts: str) -> list[int]:
    """The parts' tokens, each part tokenized on its own (so the test knows where each begins)."""
    return [t for part in parts for t in model.tokenizer.encode(part, add_special=False)]


def splice(model: spec_actor.Model, tokens: list[int], n_max: int = 16) -> list[int]:
    return nt.splice_lookup(model.handle, tokens, n_max)


def test_a_name_ends_where_the_text_says_and_the_previous_record_goes_on(gemma):
    # the output is inside the second name: "Aiko" of "Aiko Tanaka,"
    request = tokens_of(gemma, SOURCE, FIRST_RECORD, '  {"name": "', "Aiko")
    rest = tokens_of(gemma, " Tanaka")  # the text goes on ", the lead designer": the value ends at the comma
    seam = tokens_of(gemma, '", "role": "')  # what followed "Tom Becker" up to the role's value
    assert tokens_of(gemma, FIRST_RECORD)[:len(tokens_of(gemma, '  {"name": "Tom Becker'))] == \
        tokens_of(gemma, '  {"name": "Tom Becker')  # the record's tokens split where the test assumes
    assert splice(gemma, request) == rest + seam
    # n_max cuts the proposal
    assert splice(gemma, request, n_max=2) == (rest + seam)[:2]


def test_nothing_is_proposed_where_no_value_ends_or_no_record_came_before(gemma):
    # the output ends in punctuation: not inside a value
    assert splice(gemma, tokens_of(gemma, SOURCE, FIRST_RECORD, '  {"name": "')) == []
    # the first record: no earlier value after the same key
    assert splice(gemma, tokens_of(gemma, SOURCE, '  {"nombre": "', "Aiko")) == []
    # the text does not know the value: no end in sight
    assert splice(gemma, tokens_of(gemma, SOURCE, FIRST_RECORD, '  {"name": "', "Zebedee")) == []
    assert splice(gemma, tokens_of(gemma, SOURCE, FIRST_RECORD, '  {"name": "', "Aiko"), n_max=0) == []
    assert splice(gemma, []) == []


def test_auto_drafts_the_seams_of_a_json_extraction_with_the_splice_lookup_and_stays_lossless(gemma):
    result = lossless_gemma_auto_run(gemma, "extract_json.txt", n=96)
    assert accepted_by(result, "splice") >= 6, result.stats.summary()
