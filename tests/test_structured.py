"""Structured output: JSON schemas become grammars through llama.cpp's converter (issue 22, item 1).

Outputs are checked with the ``jsonschema`` package, independently of the
converter that made the grammar. Speculation stays on (``auto``, the
default): drafts are verified under the grammar as any other request's.
"""

from __future__ import annotations

import json
import re

import jsonschema
import openai
import pytest
from serve_helpers import http, openai_client, serving

import spec_actor
from spec_actor import open_actor

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "colour": {"enum": ["red", "green", "blue"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 10}, "maxItems": 3},
        "address": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 16},
                           "zip": {"type": "integer", "minimum": 0, "maximum": 99999}},
            "required": ["city", "zip"],
            "additionalProperties": False,
        },
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
    },
    "required": ["name", "colour", "tags", "address"],
    "additionalProperties": False,
}
"""Nested objects, an enum, an array and required fields; every string is bounded, so every output ends."""

PROMPTS = [f"Describe {who} as a JSON record:" for who in (
    "a fisherman from Lisbon", "a baker in Paris", "a teacher from Oslo", "a pilot", "a child who likes trains",
    "my neighbour", "a painter in Rome", "a sailor", "the mayor of a small town", "a doctor from Cairo",
    "a student in Tokyo", "an old farmer", "a chess player", "a singer from Lagos", "a gardener",
    "a software engineer", "a librarian in Dublin", "a mountain guide", "a taxi driver", "a nurse from Lima")]
"""Twenty prompts, each asking for a record."""

MAX_TOKENS = 400
"""Far more than the longest record PERSON allows, so every output is whole."""


def _nested_arrays(depth: int) -> dict:
    schema: dict = {"type": "array"}
    for _ in range(depth - 1):
        schema = {"type": "array", "items": schema}
    return schema


def _valid(text: str, schema: dict) -> dict:
    document = json.loads(text)
    jsonschema.validate(document, schema)
    return document


async def test_generate_with_json_schema_validates_and_speculation_stays_on(gemma):
    async with open_actor(gemma, n_ctx=1024, n_threads=1) as actor:  # spec: "auto"
        for prompt in PROMPTS[:5]:
            async with actor.stream_events(prompt, max_tokens=MAX_TOKENS, json_schema=PERSON) as events:
                evs = [ev async for ev in events]
            _valid("".join(ev.text for ev in evs if type(ev) is spec_actor.Token), PERSON)
            assert type(evs[-1]) is spec_actor.Eog  # the grammar ends the output, not the budget
        stats = actor.stats()
    assert stats.drafts_generated > 0  # speculation ran under the grammar


async def test_json_schema_is_the_grammar_that_llamas_converter_gives(gemma):
    # A schema with one possible output: the grammar forces it whatever the model prefers.
    schema = {"type": "object", "properties": {"k": {"const": "v"}}, "required": ["k"],
              "additionalProperties": False}
    async with open_actor(gemma, n_ctx=256, n_threads=1) as actor:
        text = await actor.generate("Anything", max_tokens=50, json_schema=schema)
        chat = await actor.chat([{"role": "user", "content": "Hi"}], max_tokens=50, json_schema={})
    assert json.loads(text) == {"k": "v"}
    json.loads(chat)  # {} allows any JSON value


def test_session_run_takes_json_schema(gemma):
    session = spec_actor.Session(gemma, n_ctx=256, n_threads=1)
    try:
        result = session.run("A colour:", max_tokens=20, json_schema={"enum": ["red", "green", "blue"]})
    finally:
        session.close()
    assert json.loads(result.text) in ("red", "green", "blue")


@pytest.mark.parametrize(("schema", "match"), [
    ({"type": "array", "minItems": -1}, r"at #.*minItems must be a non-negative integer"),
    ({"$ref": "#/$defs/missing"}, r"missing"),
    ({"type": "object", "properties": {"a": {"type": "array", "maxItems": 10**6}}},
     r"#/properties/a/maxItems=1000000 is larger than 4096"),
    ({"type": "string", "pattern": "^a{100000}$"}, r"#/pattern repeats \{100000\}"),
    (_nested_arrays(70), r"nests deeper than 64 levels at #/items/items"),
])
def test_bad_schemas_raise_grammar_error_naming_the_part(schema, match):
    with pytest.raises(spec_actor.GrammarError, match=match):
        spec_actor.Sampling.from_options(json_schema=schema)


@pytest.mark.parametrize(("options", "error"), [
    ({"json_schema": {}, "grammar": 'root ::= "a"'}, spec_actor.ConfigError),
    ({"json_schema": "{}"}, spec_actor.GrammarError),
    ({"json_schema": True}, spec_actor.GrammarError),
    ({"json_schema": {"type": "number", "minimum": float("nan")}}, spec_actor.GrammarError),
])
def test_json_schema_option_misuse_is_refused(options, error):
    with pytest.raises(error):
        spec_actor.Sampling.from_options(**options)


# -- the server -------------------------------------------------------------------------------

async def test_openai_client_json_schema_validates_on_20_prompts_whole_and_streamed(gemma):
    response_format = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
    async with serving(gemma, spec="auto", n_ctx=1024) as server:
        client = openai_client(server)
        for i, prompt in enumerate(PROMPTS):
            messages = [{"role": "user", "content": prompt}]
            if i % 2 == 0:
                reply = await client.chat.completions.create(model="m", messages=messages, temperature=0,
                                                             max_tokens=MAX_TOKENS, response_format=response_format)
                text, finish = reply.choices[0].message.content, reply.choices[0].finish_reason
            else:
                chunks = [c async for c in await client.chat.completions.create(
                    model="m", messages=messages, temperature=0, max_tokens=MAX_TOKENS, stream=True,
                    response_format=response_format)]
                text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
                finish = chunks[-1].choices[0].finish_reason
            assert finish == "stop", (prompt, text)
            _valid(text, PERSON)


async def test_completions_take_response_format_json_object_and_non_strict_schema(gemma):
    async with serving(gemma, spec="auto") as server:
        client = openai_client(server)
        whole = await client.completions.create(model="m", prompt="A JSON object:", max_tokens=200, temperature=0,
                                                extra_body={"response_format": {"type": "json_object"}})
        schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
        streamed = [c async for c in await client.completions.create(
            model="m", prompt="A number in JSON:", max_tokens=200, temperature=0, stream=True,
            extra_body={"response_format": {"type": "json_schema",
                                            "json_schema": {"name": "n", "schema": schema, "strict": False}}})]
    assert isinstance(json.loads(whole.choices[0].text), dict)
    _valid("".join(c.choices[0].text for c in streamed), schema)


@pytest.mark.parametrize(("response_format", "match"), [
    ({"type": "yaml"}, "response_format.type must be one of text, json_object, json_schema"),
    ({"type": "json_schema"}, "response_format.json_schema must be an object"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "array", "minItems": -1}}},
     "response_format.json_schema.schema: .*minItems must be a non-negative integer"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "pattern": "^a{99999}$"}}},
     r"response_format.json_schema.schema: json_schema #/pattern repeats"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": [1]}}, "must be a JSON schema object"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {}, "strict": "yes"}}, "strict must be a boolean"),
    ("json", "response_format must be an object"),
])
async def test_bad_response_format_is_a_400_naming_it(gemma, response_format, match):
    async with serving(gemma) as server, http(server) as client:
        for path, body in (("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
                           ("/v1/completions", {"prompt": "hi"})):
            response = await client.post(path, json=body | {"response_format": response_format, "max_tokens": 2})
            assert response.status_code == 400, response.text
            error = response.json()["error"]
            assert error["param"] == "response_format"
            assert re.search(match, error["message"]), error["message"]


async def test_response_format_and_grammar_together_are_refused(gemma):
    async with serving(gemma) as server:
        with pytest.raises(openai.BadRequestError, match="either grammar or response_format"):
            await openai_client(server).chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=2,
                response_format={"type": "json_object"}, extra_body={"grammar": 'root ::= "a"'})
