"""The server's request parser and the grammar bounds under random and mutated input (issue 23).

The request path up to the actor (JSON within `BodyLimits`, the fields, the
grammar pre-check, the chat template, tokenizing) is `prepare_body`, the function
the server runs in a worker thread: any body must come out as a prepared
request or as an `ApiError` in OpenAI's 400 shape, never another exception,
and within a bounded CPU time. Grammars built with a known nesting depth,
rule count and alternative count (with decoy brackets and bars inside
strings, character classes and comments) must be refused exactly when they
exceed the limits.
"""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spec_actor import GrammarError, GrammarLimits
from spec_actor.nif.grammar import check_grammar
from spec_actor.serve import ApiError, BodyLimits, ServeLimits
from spec_actor.serve._prepare import Prepared, chat_template_text, count_chat_tokens, prepare_body
from spec_actor.serve._tokens import detokenize, tokenize

LIMITS = ServeLimits(body=BodyLimits(max_depth=16, max_number_chars=24),
                     grammar=GrammarLimits(max_depth=8, max_rules=6, max_alternatives=10, max_repetition=50))
CPU_BOUND_S = 1.0
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

VALID = [
    {"prompt": "Hi", "max_tokens": 2},
    {"prompt": [1, 2, 3], "max_tokens": 2, "temperature": 0.5, "stop": ["x"], "seed": 7},
    {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], "stream": True},
    {"messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}], "grammar": 'root ::= "a"'},
    {"prompt": [2, "Hi", 9], "n_predict": 3, "n_probs": 2, "json_schema": {"type": "object"}, "mirostat": 0},
]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**30, 10**30) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["prompt", "messages", "role", "content", "max_tokens", "grammar", "stop", "temperature",
                         "n", "stream", "type", "text", "seed", "tokens", "add_special", "with_pieces",
                         "parse_special", "n_predict", "n_probs", "json_schema", "samplers", "prompt_string",
                         "mirostat", "response_fields"]) | st.text(max_size=5), inner, max_size=5),
    max_leaves=30)


def check_prepared(kind: str, data: bytes, gemma) -> None:
    """``prepare_body`` answers ``data`` with a Prepared or a 400 ApiError in OpenAI's shape, in bounded CPU."""
    start = time.process_time()
    try:
        prepared = prepare_body(kind, data, gemma, 512, LIMITS)
    except ApiError as error:
        assert error.status == 400, error
        body = error.body()["error"]
        assert body["message"] and body["type"] == "invalid_request_error"
        json.dumps(error.body(), ensure_ascii=False).encode()  # the answer itself encodes
    else:
        assert isinstance(prepared, Prepared) and 0 < len(prepared.tokens) < 512
    assert time.process_time() - start < CPU_BOUND_S


@FUZZ
@given(kind=st.sampled_from(["completion", "chat", "native"]), body=json_values)
def test_random_json_bodies_are_prepared_or_refused(gemma, kind, body):
    check_prepared(kind, json.dumps(body).encode(), gemma)


def answered_or_refused(work, *args) -> None:
    """``work(*args)`` answers, or refuses with a 400 naming the field, in bounded CPU time."""
    start = time.process_time()
    try:
        work(*args)
    except ApiError as error:
        assert error.status == 400 and error.body()["error"]["message"], error
        assert error.param or "request body" in error.message, error  # a field is named, or the body is bad
    assert time.process_time() - start < CPU_BOUND_S


@FUZZ
@given(body=json_values, ids=st.lists(st.integers(-5, 300_000), max_size=6))
def test_llama_server_routes_answer_or_refuse_any_body(gemma, body, ids):
    tok, n_vocab = gemma.tokenizer, gemma.info.n_vocab
    for candidate in (body, {"content": body}, {"tokens": body}, {"tokens": ids}, {"content": ids}):
        answered_or_refused(tokenize, candidate, tok, n_vocab)
        answered_or_refused(detokenize, candidate, tok, n_vocab)
    data = json.dumps(body).encode()
    answered_or_refused(chat_template_text, data, gemma, LIMITS)
    answered_or_refused(count_chat_tokens, data, gemma, LIMITS)


MUTATIONS = st.sampled_from(["insert", "delete", "replace", "nest", "number", "surrogate"])
NOISE = st.sampled_from([b"[", b"]", b"{", b"}", b'"', b"\\", b",", b":", b"\\ud800", b"\\udc00", b"9" * 30,
                         b"1e999", b"NaN", b"-", b"\xff", b"\x00", b"<end_of_turn>", b"true", b"null"])


@FUZZ
@given(base=st.sampled_from(VALID), steps=st.lists(st.tuples(MUTATIONS, st.integers(0, 10**6), NOISE), max_size=6))
def test_mutated_bodies_are_prepared_or_refused(gemma, base, steps):
    data = json.dumps(base).encode()
    for how, where, noise in steps:
        at = where % (len(data) + 1)
        if how == "insert":
            data = data[:at] + noise + data[at:]
        elif how == "delete":
            data = data[:at] + data[at + len(noise):]
        elif how == "replace":
            data = data[:at] + noise + data[at + len(noise):]
        elif how == "nest":
            data = data[:at] + b"[" * (where % 40) + data[at:]
        elif how == "number":
            data = data[:at] + b"1" * (where % 60) + data[at:]
        else:
            data = data[:at] + b'"\\ud83d' + data[at:]
    check_prepared("chat" if b"messages" in data else "completion", data, gemma)
    check_prepared("native", data, gemma)  # llama-server's /completion reads the same bodies its own way


# -- grammar strings through the bounds -----------------------------------------------------------

DECOYS = ['"(|)"', "[()|{}]", '"\\"(("', "[^)]", "<[1-9]>"]


@st.composite
def grammars(draw):
    """(GBNF text, its nesting depth, its rules, its | separators), built so the counts are known."""
    n_rules = draw(st.integers(1, 9))
    max_depth = alternatives = 0
    lines = []
    for r in range(n_rules):
        depth = draw(st.integers(0, 11))
        options = draw(st.integers(1, 4))
        element = draw(st.sampled_from(DECOYS + ['"a"', "[a-z]"]))
        body = " | ".join([element] * options)
        for _ in range(depth):
            body = f"( {body} ){draw(st.sampled_from(['', '*', '?', '+', '{2}', '{0,3}']))}"
        comment = draw(st.sampled_from(["", " # ((((|||| ::=", " # {9,1}"]))
        lines.append(f"{'root' if r == 0 else f'r{r}'} ::= {body}{comment}")
        max_depth = max(max_depth, depth)
        alternatives += options - 1
    return "\n".join(lines), max_depth, n_rules, alternatives


@FUZZ
@given(case=grammars())
def test_grammar_bounds_refuse_exactly_what_exceeds_them(case):
    text, depth, rules, alternatives = case
    limits = LIMITS.grammar
    exceeded = [name for name, value, limit in (("max_depth", depth, limits.max_depth),
                                                 ("max_rules", rules, limits.max_rules),
                                                 ("max_alternatives", alternatives, limits.max_alternatives))
                if value > limit]
    start = time.process_time()
    if exceeded:
        with pytest.raises(GrammarError) as refused:
            check_grammar(text, limits.native())
        assert any(name in str(refused.value) for name in exceeded)
    else:
        check_grammar(text, limits.native())
    assert time.process_time() - start < CPU_BOUND_S


@FUZZ
@given(text=st.text(alphabet=st.sampled_from(list('()|{}[]"\\#:=<> \naz0123456789,^-*+?')), max_size=400))
def test_any_grammar_text_is_checked_without_crashing(text):
    start = time.process_time()
    try:
        check_grammar(text, LIMITS.grammar.native())
    except GrammarError as exc:
        assert exc.message
    assert time.process_time() - start < CPU_BOUND_S
