"""Auto's splice lookup (native/draft/splice_lookup.cpp): a value's rest, then the record's seam.

Output that repeats a record around values copied from the prompt (JSON
extraction: `{"name": "Tom Becker", "role": ...}`) has two parts no other
arm drafts together: the value's rest, which the prompt spells (` Becker,`),
and the punctuation and next key that close it, which the previous records
spell alike (`", "role": "`). Expected proposals here are written out by hand from
the texts, through the tokenizer; the lookup's result is never an input.
"""

from __future__ import annotations

import pytest

import spec_actor
from spec_actor.nif import testing as nt
from test_auto import accepted_by, lossless_gemma_auto_run

SOURCE = ("Extract the people into JSON.\n"
          "Text: The call was opened by Tom Becker, a data engineer from Berlin, "
          "Aiko Tanaka, the lead designer from Osaka, and Lena Park, a product owner from Seoul.\n"
          "JSON:\n")
RECORDS = ('  {"name": "Tom Becker", "role": "data engineer"},\n'
           '  {"name": "Aiko Tanaka", "role": "lead designer"},\n')


def tokens_of(model: spec_actor.Model, *parts: str) -> list[int]:
    """The parts' tokens, each part tokenized on its own (so the test knows where each begins)."""
    return [t for part in parts for t in model.tokenizer.encode(part, add_special=False)]


def splice(model: spec_actor.Model, tokens: list[int], n_max: int = 16) -> list[int]:
    return nt.splice_lookup(model.handle, tokens, n_max)


def test_a_name_ends_where_the_text_says_and_the_records_go_on(gemma):
    # the output is inside the third name: "Lena" of "Lena Park,"
    request = tokens_of(gemma, SOURCE, RECORDS, '  {"name": "', "Lena")
    rest = tokens_of(gemma, " Park")  # the text goes on ", a product owner": the value ends at the comma
    seam = tokens_of(gemma, '", "role": "')  # what followed both earlier names, up to the role's value
    # the records' tokens split where the test assumes: a name, then the seam on its own
    assert tokens_of(gemma, RECORDS) == tokens_of(gemma, '  {"name": "', "Tom", " Becker", '", "role": "', "data",
                                                  " engineer", '"},\n', '  {"name": "', "A", "iko", " Tanaka",
                                                  '", "role": "', "lead", " designer", '"},\n')
    assert splice(gemma, request) == rest + seam
    # n_max cuts the proposal
    assert splice(gemma, request, n_max=2) == (rest + seam)[:2]


def test_a_key_needs_two_earlier_values_closed_alike(gemma):
    # one earlier record: the seam could be a phrase that came back once
    one = RECORDS.splitlines(keepends=True)[0]
    assert splice(gemma, tokens_of(gemma, SOURCE, one, '  {"name": "', "Lena")) == []
    # two records whose names were closed differently
    unlike = '  {"name": "Tom Becker", "role": "data engineer"},\n  {"name": "Aiko Tanaka"},\n'
    assert splice(gemma, tokens_of(gemma, SOURCE, unlike, '  {"name": "', "Lena")) == []


def test_nothing_is_proposed_where_no_value_ends_or_no_record_came_before(gemma):
    # the output ends in punctuation: not inside a value
    assert splice(gemma, tokens_of(gemma, SOURCE, RECORDS, '  {"name": "')) == []
    # no earlier value after the same key
    assert splice(gemma, tokens_of(gemma, SOURCE, RECORDS, '  {"nombre": "', "Lena")) == []
    # the text does not know the value: its end is not in sight
    assert splice(gemma, tokens_of(gemma, SOURCE, RECORDS, '  {"name": "', "Zebedee")) == []
    assert splice(gemma, tokens_of(gemma, SOURCE, RECORDS, '  {"name": "', "Lena"), n_max=0) == []
    assert splice(gemma, []) == []


def test_a_token_outside_the_vocabulary_is_refused_not_read(gemma):
    for token in (-1, 10**9):
        with pytest.raises(spec_actor.SpecActorError, match="outside the vocabulary"):
            splice(gemma, [*tokens_of(gemma, SOURCE), token])


def test_auto_drafts_the_seams_of_a_json_extraction_with_the_splice_lookup_and_stays_lossless(gemma):
    result = lossless_gemma_auto_run(gemma, "extract_json.txt", n=96)
    assert accepted_by(result, "splice") >= 6, result.stats.summary()
