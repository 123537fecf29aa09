"""OpenAI's Responses API on ``spec-actor serve`` (issue 48, item 2), with the official ``openai`` client.

A Responses request is the chat completion it stands for, run on the same
path: so each expected value here comes from that chat completion, sent by
the same client to ``/v1/chat/completions`` under greedy sampling (the same
messages give the same text, the same prompt tokens). Streams are checked
against the whole response (their deltas join to its text, their last event
carries its output), and the typed events against OpenAI's order and
``sequence_number``s. Calls use Llama 3.2's template (a format with tools),
as tests/test_tools.py does. Bad requests are 400s that name the Responses
field. The servers run without the prefix cache: a reused prefix changes
the prefill's batch shapes, where Gemma may part at a logit near-tie
(decision 0031), and these comparisons are exact.
"""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest
from serve_helpers import error_of, http, openai_client, serving
from test_tools import FAMILIES, SCHEMAS, WEATHER, _template

FUNCTION = {"type": "function"} | WEATHER["function"]
"""The weather tool as the Responses API writes tools: flat, not under ``function``."""


def _events(text: str) -> list[tuple[str, dict]]:
    """(``event:`` name, parsed ``data:``) of each event of a raw event stream."""
    out = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        out.append((lines.get("event"), json.loads(lines["data"])))
    return out


def _ids_dropped(items: list) -> list[dict]:
    """Output items as plain dicts without their random ids (``call_id`` too, for calls)."""
    return [{k: v for k, v in item.model_dump(exclude_none=True).items() if k not in ("id", "call_id")}
            for item in items]


async def test_whole_response_is_the_chat_completion_of_the_same_messages(gemma):
    instructions, question = "Answer in one short sentence.", "What is the capital of France?"
    async with serving(gemma, prefix_cache=False) as server:
        client = openai_client(server)
        response = await client.responses.create(model="m", instructions=instructions, input=question,
                                                 max_output_tokens=24)
        chat = await client.chat.completions.create(model="m", max_tokens=24, messages=[
            {"role": "system", "content": instructions}, {"role": "user", "content": question}])
        bare = await client.responses.create(model="m", input=question, max_output_tokens=24)
        bare_chat = await client.chat.completions.create(model="m", max_tokens=24,
                                                         messages=[{"role": "user", "content": question}])
    assert response.id.startswith("resp_") and response.object == "response" and response.model == chat.model
    (message,) = response.output
    assert message.type == "message" and message.role == "assistant" and message.id.startswith("msg_")
    assert [part.type for part in message.content] == ["output_text"]
    assert response.output_text == chat.choices[0].message.content and response.output_text
    assert bare.output_text == bare_chat.choices[0].message.content
    # the instructions are in the prompt, as the chat's system message
    assert response.usage.input_tokens == chat.usage.prompt_tokens > bare.usage.input_tokens
    assert response.usage.output_tokens == chat.usage.completion_tokens
    assert response.usage.total_tokens == response.usage.input_tokens + response.usage.output_tokens
    want = {"stop": "completed", "length": "incomplete"}[chat.choices[0].finish_reason]
    assert response.status == message.status == want
    assert response.instructions == instructions and response.max_output_tokens == 24
    assert response.temperature == 0 and response.store is False


async def test_stream_deltas_join_to_the_whole_responses_text_in_openais_event_order(gemma):
    body = {"model": "m", "input": "Write a short poem about the sea.", "max_output_tokens": 20}
    async with serving(gemma, prefix_cache=False) as server, http(server) as raw:
        client = openai_client(server)
        whole = await client.responses.create(**body)
        events = [event async for event in await client.responses.create(**body, stream=True)]
        plain = await raw.post("/responses", json=body | {"stream": True})  # llama-server's alias, raw
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) > 1 and "".join(deltas) == whole.output_text
    assert [e.sequence_number for e in events] == list(range(len(events)))
    types = [e.type for e in events]
    assert types == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.content_part.added", *["response.output_text.delta"] * len(deltas),
                     "response.output_text.done", "response.content_part.done", "response.output_item.done",
                     f"response.{whole.status}"]
    done = {e.type: e for e in events}
    assert done["response.output_text.done"].text == whole.output_text
    assert done["response.content_part.done"].part.text == whole.output_text
    item_id = done["response.output_item.added"].item.id
    assert all(e.item_id == item_id for e in events if hasattr(e, "item_id"))
    last = events[-1].response
    assert last.id == events[0].response.id and events[0].response.status == "in_progress"
    assert _ids_dropped(last.output) == _ids_dropped(whole.output) and last.usage == whole.usage
    assert last.status == whole.status and last.incomplete_details == whole.incomplete_details
    # on the wire: each event names its type, and no [DONE] follows the last
    assert plain.status_code == 200 and plain.headers["content-type"].startswith("text/event-stream")
    wire = _events(plain.text)
    assert all(name == data["type"] for name, data in wire) and wire[-1][0] == f"response.{whole.status}"
    assert "[DONE]" not in plain.text


async def test_max_output_tokens_makes_the_response_incomplete(gemma):
    async with serving(gemma) as server:
        response = await openai_client(server).responses.create(
            model="m", input="Count from 1 to 100, one number per line.", max_output_tokens=3)
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    assert response.usage.output_tokens == 3 and response.output[0].status == "incomplete"


async def test_function_call_round_trip_as_the_chat_completions_would_run_it(gemma):
    question = "What is the weather in Oslo?"
    async with serving(gemma, n_ctx=2048, chat_template=_template(FAMILIES["llama3"]),
                       prefix_cache=False) as server, http(server) as raw:
        client = openai_client(server)
        response = await client.responses.create(model="m", input=question, tools=[FUNCTION],
                                                 tool_choice="required", max_output_tokens=120)
        chat = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": question}],
                                                    tools=[WEATHER], tool_choice="required", max_tokens=120)
        (call,) = [item for item in response.output if item.type == "function_call"]
        # the call and its result go back as input items; the next turn is the chat with the tool's message
        history = [{"role": "user", "content": question}, call.model_dump(exclude_none=True),
                   {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 C"}]
        # (tool_choice "none": an answer in words, not another call)
        follow = await client.responses.create(model="m", input=history, tools=[FUNCTION], tool_choice="none",
                                               max_output_tokens=16)
        chat_follow = await client.chat.completions.create(model="m", tools=[WEATHER], tool_choice="none",
                                                           max_tokens=16, messages=[
            {"role": "user", "content": question},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": call.call_id, "type": "function",
                 "function": {"name": call.name, "arguments": call.arguments}}]},
            {"role": "tool", "tool_call_id": call.call_id, "content": "sunny, 21 C"}])
        counted = await raw.post("/v1/responses/input_tokens", json={"input": history, "tools": [FUNCTION]})
    (want,) = chat.choices[0].message.tool_calls
    assert response.status == call.status == "completed" and call.id.startswith("fc_") and call.call_id
    assert (call.name, call.arguments) == (want.function.name, want.function.arguments)
    jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])
    assert response.tools[0].name == "get_weather" and response.tool_choice == "required"
    assert follow.output_text == chat_follow.choices[0].message.content and follow.output_text
    assert [item.type for item in follow.output] == ["message"]
    assert follow.usage.input_tokens == chat_follow.usage.prompt_tokens == counted.json()["input_tokens"]
    assert follow.usage.output_tokens == chat_follow.usage.completion_tokens > 0


async def test_streamed_call_arguments_join_to_the_whole_responses_call(gemma):
    body = {"model": "m", "input": "Weather for Tokyo, please.", "tools": [FUNCTION],
            "tool_choice": {"type": "function", "name": "get_weather"}, "max_output_tokens": 120}
    async with serving(gemma, n_ctx=2048, chat_template=_template(FAMILIES["llama3"]), prefix_cache=False) as server:
        client = openai_client(server)
        whole = await client.responses.create(**body)
        events = [event async for event in await client.responses.create(**body, stream=True)]
    (call,) = whole.output
    added = [e.item for e in events if e.type == "response.output_item.added"]
    assert [item.type for item in added] == ["function_call"] and added[0].name == "get_weather"
    pieces = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    (done,) = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert len(pieces) > 1 and "".join(pieces) == done.arguments == call.arguments
    assert all(e.item_id == added[0].id for e in events if hasattr(e, "item_id"))
    assert events[-1].type == "response.completed" and _ids_dropped(events[-1].response.output) == _ids_dropped(
        whole.output)
    assert [e.sequence_number for e in events] == list(range(len(events)))


async def test_a_stream_with_tools_under_auto_ends_with_the_whole_responses_output(gemma):
    # under "auto" Gemma may write text, a call, or both: whichever, the stream's items are the whole answer's
    body = {"model": "m", "input": "Tell me a story.", "tools": [FUNCTION], "max_output_tokens": 24}
    async with serving(gemma, n_ctx=2048, chat_template=_template(FAMILIES["llama3"]), prefix_cache=False) as server:
        client = openai_client(server)
        whole = await client.responses.create(**body)
        events = [event async for event in await client.responses.create(**body, stream=True)]
    assert _ids_dropped(events[-1].response.output) == _ids_dropped(whole.output)
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == whole.output_text and events[-1].type == f"response.{whole.status}"


async def test_text_format_json_schema_is_the_chats_response_format(gemma):
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
              "required": ["city"], "additionalProperties": False}
    async with serving(gemma, prefix_cache=False) as server:
        client = openai_client(server)
        response = await client.responses.create(
            model="m", input="Name a city in Japan.", max_output_tokens=40,
            text={"format": {"type": "json_schema", "name": "city", "schema": schema, "strict": True}})
        chat = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Name a city in Japan."}], max_tokens=40,
            response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": schema}})
    assert response.output_text == chat.choices[0].message.content
    jsonschema.validate(json.loads(response.output_text), schema)
    assert response.text.format.type == "json_schema"


async def test_input_items_count_as_their_chat_messages(gemma):
    # developer is system; text parts join; a call joins the assistant turn before it; its output is a tool turn
    items = [{"role": "developer", "content": "Be brief."},
             {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather "},
                                                             {"type": "input_text", "text": "in Lima?"}]},
             {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
             {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city": "Lima"}'},
             {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "rain"}]}]
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Lima?"},
                {"role": "assistant", "content": "Checking.", "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "get_weather",
                                                                  "arguments": '{"city": "Lima"}'}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "rain"}]
    async with serving(gemma, n_ctx=2048, chat_template=_template(FAMILIES["llama3"])) as server, \
            http(server) as raw:
        got = await raw.post("/responses/input_tokens", json={"input": items, "instructions": "Hi.",
                                                              "tools": [FUNCTION]})
        want = await raw.post("/v1/chat/completions/input_tokens", json={
            "messages": [{"role": "system", "content": "Hi."}, *messages], "tools": [WEATHER]})
    assert got.status_code == want.status_code == 200, got.text
    assert got.json() == want.json() and got.json()["object"] == "response.input_tokens"


async def test_llama_servers_telemetry_timings_per_token_and_prompt_progress(gemma):
    # llama-server's extensions of the Responses stream: each delta's timings so far, the prompt's progress
    body = {"input": "Count from one to ten.", "max_output_tokens": 12, "stream": True}
    async with serving(gemma, prefix_cache=False) as server, http(server) as raw:
        told = _events((await raw.post("/responses", json=body | {"timings_per_token": True,
                                                                   "return_progress": True})).text)
        plain = _events((await raw.post("/responses", json=body)).text)
    done = told[-1][1]
    assert told[-1][0] == "response.incomplete" and "timings" in done  # the budget ends it
    usage = done["response"]["usage"]
    # one report before the prompt is evaluated, one once it is (a prompt shorter than a chunk)
    first, progress = [data["prompt_progress"] for _, data in told if "prompt_progress" in data]
    assert told[1][1]["type"] == "response.in_progress" and told[1][1]["prompt_progress"] == first
    assert first == {"total": usage["input_tokens"], "cache": 0, "processed": 0, "time_ms": 0.0}
    assert progress["total"] == progress["processed"] == usage["input_tokens"]
    assert progress["cache"] == usage["input_tokens_details"]["cached_tokens"] == 0 and progress["time_ms"] > 0
    deltas = [data for _, data in told if data["type"] == "response.output_text.delta"]
    counted = [d["timings"]["predicted_n"] for d in deltas]
    assert deltas and all("timings" in d for d in deltas)
    assert counted == sorted(set(counted)) and counted[-1] <= usage["output_tokens"] == done["timings"]["predicted_n"]
    assert all(d["timings"]["prompt_n"] == usage["input_tokens"] for d in deltas)
    # without the flags: neither, and the same events otherwise
    assert not any("prompt_progress" in data or ("timings" in data and data["type"] != "response.incomplete")
                   for _, data in plain)
    # the second report is an in_progress event of its own
    reported = [name for name, data in told if data["type"] != "response.in_progress" or data is told[1][1]]
    assert [name for name, _ in plain] == reported


BAD = [
    ({"timings_per_token": "yes"}, "timings_per_token", "boolean"),
    ({"return_progress": 1}, "return_progress", "boolean"),
    ({"input": None}, "input", "input must be"),
    ({"input": 5}, "input", "not integer"),
    ({"input": []}, "input", "non-empty"),
    ({"input": ["hi"]}, "input[0]", "object"),
    ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role", "robot"),
    ({"input": [{"content": "x"}]}, "input[0].role", "None"),
    ({"input": [{"type": "web_search_call", "id": "ws_1"}]}, "input[0].type", "web_search_call"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type", "keeps no responses"),
    ({"input": [{"role": "user", "content": 5}]}, "input[0].content", "string or an array"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input[0].content[0]",
     "only text"),
    ({"input": [{"role": "user", "content": [{"type": "input_text", "text": 7}]}]}, "input[0].content[0].text",
     "string"),
    ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "input[0].call_id", "call_id"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}]}, "input[0].arguments",
     "string"),
    ({"input": [{"type": "function_call_output", "call_id": "c"}]}, "input[0].output", "output"),
    ({"previous_response_id": "resp_1"}, "previous_response_id", "keeps no responses"),
    ({"conversation": "conv_1"}, "conversation", "keeps no responses"),
    ({"background": True}, "background", "background"),
    ({"instructions": 5}, "instructions", "string"),
    ({"max_output_tokens": 0}, "max_output_tokens", "at least 1"),
    ({"max_output_tokens": "5"}, "max_output_tokens", "integer"),
    ({"temperature": "hot"}, "temperature", "number"),
    ({"top_p": 7}, "top_p", "top_p"),
    ({"stream": "yes"}, "stream", "boolean"),
    ({"tools": {"type": "function"}}, "tools", "array"),
    ({"tools": [{"type": "web_search"}]}, "tools[0].type", "function tools"),
    ({"tools": [{"type": "function"}]}, "tools", "tools[0] must be an object with a non-empty string name"),
    ({"tools": [FUNCTION, FUNCTION]}, "tools", "tools[1].name 'get_weather' is used twice"),
    ({"tools": [FUNCTION], "tool_choice": {"type": "file_search"}}, "tool_choice", "file_search"),
    ({"tools": [FUNCTION], "tool_choice": {"type": "function", "name": "nope"}}, "tool_choice", "nope"),
    ({"text": {"format": {"type": "xml"}}}, "text.format", "xml"),
    ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema", "missing"),
    ({"text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "nope"}}}}, "text.format",
     "text.format.schema"),
    ({"text": "json"}, "text", "object"),
    ({"truncation": "auto"}, "truncation", "auto"),
    ({"include": ["message.output_text.logprobs"]}, "include", "logprobs"),
]


@pytest.mark.parametrize(("body", "param", "match"), BAD, ids=[b[1] + ":" + str(i) for i, b in enumerate(BAD)])
async def test_bad_requests_are_a_400_naming_the_responses_field(gemma, body, param, match):
    async with serving(gemma, chat_template=_template(FAMILIES["llama3"])) as server, http(server) as raw:
        response = await raw.post("/v1/responses", json={"model": "m", "input": "hi", "max_output_tokens": 1} | body)
    error = error_of(response)
    assert error["param"] == param and match in error["message"], error


async def test_other_bad_bodies_are_4xx_and_the_client_raises_its_usual_errors(gemma):
    async with serving(gemma) as server, http(server) as raw:
        not_object = await raw.post("/v1/responses", json=["hi"])
        not_json = await raw.post("/v1/responses", content=b"{input: hi}")
        too_long = await raw.post("/v1/responses", json={"input": "word " * 2000})
        with pytest.raises(openai.BadRequestError, match="previous_response_id"):
            await openai_client(server).responses.create(model="m", input="hi", previous_response_id="resp_x")
        wrong_method = await raw.get("/v1/responses")
    assert "JSON object" in error_of(not_object)["message"]
    assert error_of(not_json)["code"] == "invalid_json"
    assert error_of(too_long)["param"] == "input" and error_of(too_long)["code"] == "context_length_exceeded"
    assert error_of(wrong_method, 405)["code"] == "method_not_allowed"


async def test_shutdown_ends_a_stream_with_an_error_event(gemma):
    body = {"input": "Tell me a long story about a dragon.", "max_output_tokens": 400, "stream": True}
    async with serving(gemma) as server, http(server) as raw:
        async with raw.stream("POST", "/v1/responses", json=body) as response:
            lines = response.aiter_lines()
            async for line in lines:
                if line.startswith("data: ") and "output_text.delta" in line:
                    break
            server.stop()
            rest = "\n".join([line async for line in lines])
    events = _events(rest)
    name, error = events[-1]
    assert name == "error" and error["type"] == "error" and error["code"] == "shutting_down", events[-1]
    assert error["message"] and [d["sequence_number"] for _, d in events] == list(
        range(events[0][1]["sequence_number"], error["sequence_number"] + 1))
    assert all(d["type"] == "response.output_text.delta" for _, d in events[:-1])
