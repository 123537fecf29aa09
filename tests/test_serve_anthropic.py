"""Anthropic's Messages API on ``spec-actor serve`` (issue 48, item 2), through the official ``anthropic`` client.

A message runs on the chat completions' path: its text equals the chat
completion of the same conversation (greedy, no prefix cache, so both run as
on a fresh actor: decision 0031), a stream's text equals the whole message's,
and ``count_tokens`` equals the prompt written out by hand in Gemma's format
and tokenized by the model's tokenizer. Tool use runs with Llama 3.2's and
Qwen 2.5's templates (as tests/test_tools.py does): the call's input
validates against its schema, the ``tool_result`` turn renders as the chat
completion's ``tool`` message, and a reply of text then a call is a text
block then a ``tool_use`` block, equal to the chat completion's. Bad input,
and any random body, is a 400 in Anthropic's error shape that names the
field.
"""

from __future__ import annotations

import json

import anthropic
import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from serve_helpers import error_of, http, openai_client, serving, sse_data
from test_tools import FAMILIES, FEW_SHOT, _template
from test_tools import TOOLS as CHAT_TOOLS

from spec_actor.serve import ApiError, BodyLimits, ServeLimits
from spec_actor.serve._anthropic import count_message_tokens, error_body, prepare_messages
from spec_actor.serve._prepare import Prepared

SYSTEM = "Answer in one short sentence."
QUESTION = "What colour is the sky on a clear day?"
WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24}},
                  "required": ["city"], "additionalProperties": False}
TOOLS = [{"name": "get_weather", "description": "The weather in a city", "input_schema": WEATHER_SCHEMA}]
OPENAI_TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                                  "parameters": WEATHER_SCHEMA}}]


def client(server, api_key: str = "unused") -> anthropic.AsyncAnthropic:
    """The official client, pointed at the server, without retries (an error must show)."""
    return anthropic.AsyncAnthropic(base_url=server.url, api_key=api_key, max_retries=0, timeout=120)


def text_of(message) -> str:
    return "".join(block.text for block in message.content if block.type == "text")


async def events_of(stream) -> list:
    return [event async for event in stream]


def streamed(events: list) -> tuple[str, list[dict], object]:
    """(text, tool_use blocks with their joined input, the message_delta event) of a stream's events,
    checking their order: message_start, blocks each started, filled and stopped, message_delta, message_stop."""
    assert events[0].type == "message_start" and events[-1].type == "message_stop"
    assert events[-2].type == "message_delta"
    text, calls, open_index, started = "", [], None, 0
    for event in events[1:-2]:
        if event.type == "content_block_start":
            assert open_index is None and event.index == started
            open_index, block, started = event.index, event.content_block, started + 1
            if block.type == "tool_use":
                calls.append({"name": block.name, "id": block.id, "json": ""})
        elif event.type == "content_block_delta":
            assert event.index == open_index
            if event.delta.type == "text_delta":
                text += event.delta.text
            else:
                calls[-1]["json"] += event.delta.partial_json
        else:
            assert event.type == "content_block_stop" and event.index == open_index
            open_index = None
    assert open_index is None
    return text, [c | {"input": json.loads(c["json"])} for c in calls], events[-2]


async def test_message_is_the_chat_completion_of_the_same_conversation(gemma):
    async with serving(gemma, prefix_cache=False) as server:
        message = await client(server).messages.create(
            model="m", max_tokens=24, system=SYSTEM, messages=[{"role": "user", "content": QUESTION}])
        chat = await openai_client(server).chat.completions.create(
            model="m", max_tokens=24, messages=[{"role": "system", "content": SYSTEM},
                                                {"role": "user", "content": QUESTION}])
        short = await client(server).messages.create(
            model="m", max_tokens=2, system=[{"type": "text", "text": SYSTEM}],
            messages=[{"role": "user", "content": [{"type": "text", "text": QUESTION}]}], metadata={"user_id": "u"})
    choice = chat.choices[0]
    assert message.type == "message" and message.role == "assistant" and message.id.startswith("msg_")
    assert [b.type for b in message.content] == ["text"] and text_of(message) == choice.message.content
    assert message.stop_reason == {"stop": "end_turn", "length": "max_tokens"}[choice.finish_reason]
    assert message.stop_sequence is None
    assert message.usage.input_tokens + message.usage.cache_read_input_tokens == chat.usage.prompt_tokens
    assert message.usage.output_tokens == chat.usage.completion_tokens
    # blocks for system and content render as the strings do; the budget ends the message
    assert chat.usage.completion_tokens > 2
    assert short.stop_reason == "max_tokens" and short.usage.output_tokens == 2
    assert choice.message.content.startswith(text_of(short))


async def test_a_stream_is_the_whole_message_in_typed_events(gemma):
    body = {"model": "m", "max_tokens": 24, "system": SYSTEM, "messages": [{"role": "user", "content": QUESTION}]}
    async with serving(gemma, prefix_cache=False) as server:
        whole = await client(server).messages.create(**body)
        events = await events_of(await client(server).messages.create(**body, stream=True))
        async with client(server).messages.stream(**body) as stream:
            pieces = [piece async for piece in stream.text_stream]
            final = await stream.get_final_message()
    text, calls, delta = streamed(events)
    assert text == text_of(whole) and "".join(pieces) == text and text_of(final) == text and not calls
    assert len([e for e in events if e.type == "content_block_delta"]) > 1
    assert events[0].message.content == [] and events[0].message.stop_reason is None
    assert delta.delta.stop_reason == whole.stop_reason and delta.usage.output_tokens == whole.usage.output_tokens
    assert final.usage.output_tokens == whole.usage.output_tokens and final.stop_reason == whole.stop_reason
    assert final.usage.input_tokens == whole.usage.input_tokens


async def test_stop_sequence_ends_the_message_before_it_and_is_named(gemma):
    body = {"model": "m", "max_tokens": 24, "messages": [{"role": "user", "content": QUESTION}]}
    async with serving(gemma, prefix_cache=False) as server:
        full = text_of(await client(server).messages.create(**body))
        stop = full[len(full) // 2: len(full) // 2 + 3]
        stopped = await client(server).messages.create(**body, stop_sequences=["never appears", stop])
        events = await events_of(await client(server).messages.create(
            **body, stop_sequences=["never appears", stop], stream=True))
    assert len(stop) == 3, full
    assert stopped.stop_reason == "stop_sequence" and stopped.stop_sequence == stop
    assert text_of(stopped) == full[:full.index(stop)]
    text, _, delta = streamed(events)
    assert text == text_of(stopped)
    assert (delta.delta.stop_reason, delta.delta.stop_sequence) == ("stop_sequence", stop)


async def test_count_tokens_is_the_prompt_in_gemmas_format(gemma):
    messages = [{"role": "user", "content": "Hi"},
                {"role": "assistant", "content": [{"type": "text", "text": "Hello!"}]},
                {"role": "user", "content": QUESTION}]
    # llama.cpp's Gemma format folds the system prompt into the first user turn
    prompt = (f"<start_of_turn>user\n{SYSTEM}\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
              f"<start_of_turn>user\n{QUESTION}<end_of_turn>\n<start_of_turn>model\n")
    want = len(gemma.tokenizer.encode(prompt, add_special=True, parse_special=True))
    async with serving(gemma, prefix_cache=False) as server:
        counted = await client(server).messages.count_tokens(model="m", system=SYSTEM, messages=messages)
        ran = await client(server).messages.create(model="m", max_tokens=1, system=SYSTEM, messages=messages)
    assert counted.input_tokens == want
    assert ran.usage.input_tokens == want and ran.usage.cache_read_input_tokens == 0


async def test_tool_use_round_trip(gemma):
    question = {"role": "user", "content": "What is the weather in Oslo?"}
    body = {"model": "m", "max_tokens": 120, "tools": TOOLS, "tool_choice": {"type": "any"}, "messages": [question]}
    async with serving(gemma, n_ctx=2048, chat_template=_template(FAMILIES["llama3"]), prefix_cache=False) as server, \
            http(server) as raw:
        whole = await client(server).messages.create(**body)
        events = await events_of(await client(server).messages.create(**body, stream=True))
        (call,) = [b for b in whole.content if b.type == "tool_use"]
        result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                               "content": [{"type": "text", "text": "sunny, 20 C"}]}]}
        turn = [question, {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in whole.content]},
                result]
        answered = await client(server).messages.create(model="m", max_tokens=16, tools=TOOLS, messages=turn)
        counted = await client(server).messages.count_tokens(model="m", tools=TOOLS, messages=turn)
        # the same conversation as a chat completion: the prompt it renders, tokenized by the model's tokenizer
        chat = {"tools": OPENAI_TOOLS, "messages": [
            question, {"role": "assistant", "content": text_of(whole), "tool_calls": [
                {"id": call.id, "type": "function",
                 "function": {"name": call.name, "arguments": json.dumps(call.input)}}]},
            {"role": "tool", "tool_call_id": call.id, "content": "sunny, 20 C"}]}
        prompt = (await raw.post("/apply-template", json=chat)).json()["prompt"]
    assert whole.stop_reason == "tool_use" and call.name == "get_weather"
    jsonschema.validate(call.input, WEATHER_SCHEMA)
    _, calls, delta = streamed(events)
    assert [(c["name"], c["input"]) for c in calls] == [(call.name, call.input)] and calls[0]["id"]
    assert delta.delta.stop_reason == "tool_use"
    assert "sunny, 20 C" in prompt
    assert counted.input_tokens == len(gemma.tokenizer.encode(prompt, add_special=True, parse_special=True))
    assert answered.usage.input_tokens == counted.input_tokens and answered.usage.output_tokens > 0
    assert answered.stop_reason in ("end_turn", "max_tokens", "tool_use")


# tests/test_tools.py's FEW_SHOT, written as Anthropic's blocks: two calls and their results
FEW_SHOT_BLOCKS = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "abc123def", "name": "get_weather",
                                       "input": {"city": "Paris"}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "abc123def", "content": "sunny"}]},
    {"role": "assistant", "content": "It is sunny."},
    {"role": "user", "content": "Add 1 and 2."},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "fed321cba", "name": "add",
                                       "input": {"a": 1, "b": 2}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "fed321cba", "content": "3"}]},
    {"role": "assistant", "content": [{"type": "text", "text": "It is 3."}]}]


async def test_text_then_a_call_is_a_text_block_then_a_tool_use_block_as_the_chat_completions(gemma):
    tools = [{"name": t["function"]["name"], "description": t["function"]["description"],
              "input_schema": t["function"]["parameters"]} for t in CHAT_TOOLS]
    ask = {"role": "user", "content": "Add 2 and 40."}
    body = {"model": "m", "max_tokens": 160, "tools": tools, "messages": FEW_SHOT_BLOCKS + [ask]}
    async with serving(gemma, n_ctx=2048, chat_template=_template(FAMILIES["qwen2.5"]), prefix_cache=False) as server:
        whole = await client(server).messages.create(**body)
        events = await events_of(await client(server).messages.create(**body, stream=True))
        chat = await openai_client(server).chat.completions.create(
            model="m", max_tokens=160, tools=CHAT_TOOLS, messages=FEW_SHOT + [ask])
    message, (chat_call,) = chat.choices[0].message, chat.choices[0].message.tool_calls
    assert [b.type for b in whole.content] == ["text", "tool_use"] and whole.stop_reason == "tool_use"
    text, call = whole.content
    assert text.text == message.content
    assert (call.name, call.input) == (chat_call.function.name, json.loads(chat_call.function.arguments))
    streamed_text, calls, delta = streamed(events)
    assert streamed_text == text.text and [(c["name"], c["input"]) for c in calls] == [(call.name, call.input)]
    assert delta.delta.stop_reason == "tool_use" and delta.usage.output_tokens == whole.usage.output_tokens

async def test_x_api_key_guards_the_routes(gemma):
    body = {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}
    async with serving(gemma, api_key="s3cret") as server, http(server) as raw:
        with pytest.raises(anthropic.AuthenticationError) as info:
            await client(server, api_key="wrong").messages.create(**body)
        missing = await raw.post("/v1/messages", json=body)
        missing_count = await raw.post("/v1/messages/count_tokens", json=body)
        message = await client(server, api_key="s3cret").messages.create(**body)
        bearer = await raw.post("/v1/messages/count_tokens", json=body, headers={"authorization": "Bearer s3cret"})
    assert info.value.status_code == 401 and info.value.body["error"]["type"] == "authentication_error"
    for response in (missing, missing_count):
        assert response.status_code == 401 and response.json()["type"] == "error"
        assert response.json()["error"]["type"] == "authentication_error"
    assert message.usage.output_tokens == 1
    assert bearer.status_code == 200 and bearer.json()["input_tokens"] > 0


HI = [{"role": "user", "content": "hi"}]
GENERATION_FIELDS = ("max_tokens", "temperature", "top_p", "top_k", "stop_sequences", "stream")
BAD = [  # (body beside a valid one, the field the error must name)
    ({"max_tokens": None}, "max_tokens"),
    ({"max_tokens": "ten"}, "max_tokens"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"messages": None}, "messages"),
    ({"messages": "hi"}, "messages"),
    ({"messages": []}, "messages"),
    ({"messages": ["hi"]}, "messages[0]"),
    ({"messages": [{"role": "system", "content": "hi"}]}, "messages[0].role"),
    ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role"),
    ({"messages": [{"role": "user"}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": ["hi"]}]}, "messages[0].content[0]"),
    ({"messages": [{"role": "user", "content": [{"type": "text"}]}]}, "messages[0].content[0].text"),
    ({"messages": [{"role": "user", "content": [{"type": "video"}]}]}, "messages[0].content[0].type"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {
        "type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]}]}, "messages[0].content[0]"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {}}]}]},
     "messages[0].content[0]"),
    ({"messages": HI + [{"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f"}]}]},
     "messages[1].content[0].input"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "content": "x"}]}]},
     "messages[0].content[0].tool_use_id"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a",
                                                 "content": [{"type": "image"}]}]}]},
     "messages[0].content[0].content[0]"),
    ({"messages": [{"role": "user", "content": [{"type": "thinking", "thinking": "hm"}]}]},
     "messages[0].content[0]"),
    ({"messages": HI + [{"role": "assistant", "content": [{"type": "thinking"}]}]}, "messages[1].content[0].thinking"),
    ({"messages": HI + [{"role": "assistant", "content": [{"type": "thinking", "thinking": 5}]}]},
     "messages[1].content[0].thinking"),
    ({"system": 5}, "system"),
    ({"system": [{"type": "text", "text": 5}]}, "system[0].text"),
    ({"temperature": 1.5}, "temperature"),
    ({"temperature": "hot"}, "temperature"),
    ({"top_p": "most"}, "top_p"),
    ({"top_k": 1.5}, "top_k"),
    ({"stop_sequences": "END"}, "stop_sequences"),
    ({"stream": "yes"}, "stream"),
    ({"model": 5}, "model"),
    ({"tools": {"name": "f"}}, "tools"),
    ({"tools": [{"name": "f"}]}, "tools[0].input_schema"),
    ({"tools": [{"input_schema": {"type": "object"}}]}, "tools[0].name"),
    ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0].type"),
    ({"tools": TOOLS + TOOLS}, "tools[1].name"),
    ({"tools": TOOLS, "tool_choice": "any"}, "tool_choice"),
    ({"tools": TOOLS, "tool_choice": {"type": "sometimes"}}, "tool_choice.type"),
    ({"tools": TOOLS, "tool_choice": {"type": "tool"}}, "tool_choice.name"),
    ({"tools": TOOLS, "tool_choice": {"type": "tool", "name": "nope"}}, "nope"),
    ({"tool_choice": {"type": "any"}}, "tool_choice"),
]


async def test_bad_input_is_a_400_naming_the_field_in_anthropics_shape(gemma):
    async with serving(gemma, chat_template=_template(FAMILIES["llama3"])) as server, http(server) as raw:
        for path in ("/v1/messages", "/v1/messages/count_tokens"):
            for change, field in BAD:
                if path.endswith("count_tokens") and next(iter(change)) in GENERATION_FIELDS:
                    continue  # count_tokens reads no generation fields
                body = {k: v for k, v in ({"model": "m", "max_tokens": 4, "messages": HI, "stream": True}
                                          | change).items() if v is not None}
                response = await raw.post(path, json=body)
                assert response.status_code == 400, (path, change, response.text)
                error = response.json()
                assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error", error
                assert field in error["error"]["message"], (path, change, error)
        not_json = await raw.post("/v1/messages", content=b"{max_tokens: 4",
                                  headers={"content-type": "application/json"})
        not_object = await raw.post("/v1/messages", json=[1])
        no_max = await raw.post("/v1/messages/count_tokens", json={"messages": HI})
        with pytest.raises(anthropic.BadRequestError, match="temperature"):
            # the client (2.x) has no sampling arguments: they go in the body, as other servers take them
            await client(server).messages.create(model="m", max_tokens=4, messages=HI, extra_body={"temperature": 3})
    for response in (not_json, not_object):
        assert response.status_code == 400 and response.json()["error"]["type"] == "invalid_request_error"
    assert no_max.status_code == 200 and no_max.json()["input_tokens"] > 0



async def test_a_stream_the_server_stops_ends_with_an_error_event(gemma):
    async with serving(gemma) as server:
        stream = await client(server).messages.create(model="m", max_tokens=400, messages=[
            {"role": "user", "content": "Tell me a long story about a lighthouse."}], stream=True)
        seen = []
        with pytest.raises(anthropic.APIStatusError) as info:
            async for event in stream:
                seen.append(event.type)
                if event.type == "content_block_delta" and seen.count(event.type) == 1:
                    server.stop()
    assert seen[:3] == ["message_start", "content_block_start", "content_block_delta"]
    assert "message_stop" not in seen
    assert info.value.body == {"type": "error", "error": {"type": "overloaded_error", "message": (
        "the server is shutting down; retry against a running server")}}


QWEN3 = "Qwen-Qwen3-0.6B"
"""A reasoning model's template (llama.cpp's copy): it renders an assistant's ``reasoning_content`` in ``<think>``."""


async def test_thinking_blocks_are_the_assistants_reasoning_which_its_template_renders(gemma):
    # As llama-server converts them: an assistant's thinking blocks become its reasoning_content.
    reasoning = "The user wants the files listed first."
    call = {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Oslo"}}
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "sunny"}]}
    plain = [{"role": "user", "content": "Weather in Oslo?"}, {"role": "assistant", "content": [call]}, result]
    thought = [plain[0], {"role": "assistant", "content": [{"type": "thinking", "thinking": reasoning,
                                                            "signature": "unchecked"}, call]}, result]
    chat = {"tools": OPENAI_TOOLS, "messages": [
        plain[0], {"role": "assistant", "content": "", "reasoning_content": reasoning, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]}
    async with serving(gemma, n_ctx=2048, chat_template=_template(QWEN3)) as server, http(server) as raw:
        without = await client(server).messages.count_tokens(model="m", tools=TOOLS, messages=plain)
        with_thinking = await client(server).messages.count_tokens(model="m", tools=TOOLS, messages=thought)
        prompt = (await raw.post("/apply-template", json=chat)).json()["prompt"]
        chat_tokens = (await raw.post("/chat/completions/input_tokens", json=chat)).json()["input_tokens"]
        not_a_string = await raw.post("/apply-template", json={"messages": [
            plain[0], {"role": "assistant", "content": "x", "reasoning_content": 5}]})
        on_a_user = await raw.post("/v1/chat/completions", json={"messages": [
            {"role": "user", "content": "x", "reasoning_content": "y"}]})
    assert f"<think>\n{reasoning}\n</think>" in prompt
    assert with_thinking.input_tokens == chat_tokens > without.input_tokens
    assert error_of(not_a_string)["param"] == "messages[1].reasoning_content"
    assert error_of(on_a_user)["param"] == "messages[0].reasoning_content"


async def test_messages_carry_timings_and_the_speculation_figures(gemma):
    # Every response carries timings and speculative_decoding (DESIGN.md), Anthropic's too, where
    # llama-server leaves timings out: in the whole message and the stream's message_delta, nowhere else.
    body = {"model": "m", "max_tokens": 4, "messages": HI}
    async with serving(gemma) as server, http(server) as raw:
        whole = (await raw.post("/v1/messages", json=body)).json()
        events = sse_data((await raw.post("/v1/messages", json=body | {"stream": True})).text.splitlines())
    (delta,) = [e for e in events if e["type"] == "message_delta"]
    for shaped in (whole, delta):
        assert shaped["timings"]["predicted_n"] == shaped["usage"]["output_tokens"]
        figures = shaped["speculative_decoding"]
        assert figures["num_accepted_draft_tokens"] <= figures["num_draft_tokens"]
    assert [e["type"] for e in events if "timings" in e] == ["message_delta"]


# Random bodies of Anthropic's shape: the names and block types it uses, with random values in every place.
WORDS = st.sampled_from(["user", "assistant", "system", "text", "tool_use", "tool_result", "image", "thinking",
                         "auto", "any", "tool", "none", "custom", "get_weather", "city"]) | st.text(max_size=6)
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 10**6) | st.floats(allow_nan=False) | WORDS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(WORDS, inner, max_size=4), max_leaves=16)
BLOCK = st.fixed_dictionaries({"type": WORDS}, optional={
    key: VALUES for key in ("text", "id", "name", "input", "tool_use_id", "content", "is_error", "source")})
MESSAGE = st.fixed_dictionaries({"role": WORDS}, optional={"content": WORDS | st.lists(BLOCK | VALUES, max_size=3)})
TOOL = st.fixed_dictionaries({"name": WORDS}, optional={
    "input_schema": st.just(WEATHER_SCHEMA) | VALUES, "type": WORDS, "description": VALUES})
BODY = st.fixed_dictionaries({"messages": st.lists(MESSAGE, max_size=3) | VALUES}, optional={
    "max_tokens": st.integers(-1, 64) | VALUES, "system": VALUES | st.lists(BLOCK, max_size=2),
    "tools": st.lists(TOOL, max_size=2) | VALUES, "stop_sequences": st.lists(WORDS, max_size=3) | VALUES,
    "tool_choice": st.fixed_dictionaries({"type": WORDS}, optional={"name": WORDS, "disable_parallel_tool_use": VALUES})
    | VALUES, "temperature": VALUES, "top_p": VALUES, "top_k": VALUES, "stream": VALUES, "model": VALUES})
LIMITS = ServeLimits(body=BodyLimits(max_depth=16, max_number_chars=24))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(body=BODY, jinja=st.booleans())
def test_random_bodies_are_prepared_or_refused_with_a_400(gemma, body, jinja):
    # What the server runs in its worker thread for /v1/messages and /count_tokens: a prepared chat, or a 400.
    data, template = json.dumps(body).encode(), _template(FAMILIES["llama3"]) if jinja else None
    for work in (lambda: prepare_messages(data, gemma, 512, LIMITS, template),
                 lambda: count_message_tokens(data, gemma, LIMITS, template)):
        try:
            out = work()
        except ApiError as error:
            assert error.status == 400, error
            shaped = error_body(error)
            assert shaped["type"] == "error" and shaped["error"]["type"] == "invalid_request_error"
            assert shaped["error"]["message"]
        else:
            assert isinstance(out, Prepared) and out.tokens or isinstance(out, int) and out > 0
