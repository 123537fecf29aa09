"""JSON schemas can neither crash nor hang the process (issue 22, bad input).

Random and mutated schemas go through `json_schema=` (the Python bounds,
then llama.cpp's converter in the shim) and, when accepted, through a real
generation on a tiny model, in a child worker process as the grammar fuzz
does (`test_fuzz_grammar.Worker`): a signal kills only the worker, and a call
that does not answer in time is a hang. Each call's CPU time must stay
under a second.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_fuzz_grammar import FUZZ, Worker, assert_survives, worker_code

WORKER = worker_code("json_schema")


@pytest.fixture(scope="module")
def worker() -> Iterator[Worker]:
    w = Worker(WORKER)
    yield w
    print(f"\njson schema fuzz outcomes: {w.outcomes}")
    w.close()


COUNT = st.one_of(st.integers(-2, 5), st.sampled_from([0, 1, 100, 4096, 4097, 10**6, 10**12]),
                  st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=3))
LEAF = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20), st.floats(allow_nan=False),
                 st.text("ab^$[]{}().*+?|\\0123456789,-", max_size=8))
KEYS = st.sampled_from(["type", "properties", "items", "required", "enum", "const", "anyOf", "oneOf", "allOf",
                        "$ref", "$defs", "definitions", "minItems", "maxItems", "minLength", "maxLength",
                        "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "additionalProperties",
                        "prefixItems", "a", "b"])
TYPES = st.sampled_from(["object", "array", "string", "number", "integer", "boolean", "null", "foo"])
REFS = st.sampled_from(["#", "#/$defs/a", "#/definitions/b", "#/properties/a", "http://x/y", "#/$defs/missing"])


def _schemas() -> st.SearchStrategy[object]:
    def node(children: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
        return st.one_of(
            st.dictionaries(KEYS, children, max_size=4),
            st.fixed_dictionaries({"type": TYPES}, optional={"properties": st.dictionaries(
                st.sampled_from(["a", "b", "c"]), children, max_size=3), "items": children,
                "required": st.lists(st.sampled_from(["a", "b", "x"]), max_size=3), "minItems": COUNT,
                "maxItems": COUNT, "maxLength": COUNT, "pattern": LEAF, "enum": st.lists(LEAF, max_size=3),
                "$ref": REFS, "$defs": st.dictionaries(st.sampled_from(["a"]), children, max_size=1)}),
            st.lists(children, max_size=3),
        )
    return st.recursive(LEAF, node, max_leaves=12)


@FUZZ
@given(schema=_schemas())
def test_random_schemas_neither_crash_nor_hang(worker: Worker, schema: object) -> None:
    assert_survives(worker, schema)


@pytest.mark.parametrize("schema", [
    {"type": "array", "items": {"type": "string", "maxLength": 4096}, "minItems": 4096, "maxItems": 4096},
    {"$defs": {"a": {"type": "array", "items": {"$ref": "#/$defs/a"}}}, "$ref": "#/$defs/a"},
    {"type": "integer", "minimum": -10**30, "maximum": 10**30},
    {"type": "string", "pattern": "^(((((((((((((((((((((((((((((((((a)))))))))))))))))))))))))))))))))$"},
    {"type": "string", "pattern": "^a{4096}b{0,4096}$"},
    {"type": "string", "pattern": "^[" + "\\" * 1001 + "$"},
])
def test_edge_schemas_neither_crash_nor_hang(worker: Worker, schema: object) -> None:
    assert_survives(worker, schema)
