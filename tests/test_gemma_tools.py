"""Tools on the embedded Gemma out of the box, built-in template names, assistant prefill (issue 48, 3 and 4).

The embedded Gemma 3 270M has no chat template of its own: plain chats keep
llama.cpp's built-in ``gemma`` format, and a chat with tools (or tool turns)
is rendered by the packaged Jinja template of Gemma 3's turns
(docs/decisions/0102). Expected prompts are written out here from Gemma's
turn format and ChatML, not taken from the code under test; calls are
checked against their tool's JSON schema with jsonschema; continuations are
compared with the greedy completion of the expected prompt text.
"""

from __future__ import annotations

import json

import httpx
import jsonschema
import pytest
from serve_helpers import error_of, http, openai_client, serving, start_cli_server, TIMEOUT
from test_serve_cli import cli
from test_tools import SCHEMAS, TOOLS

import spec_actor
from spec_actor._templates import GEMMA3_TOOLS, builtin_names, packaged_template
from spec_actor._tools import render_jinja

ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
CALLED = ASK + [
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "18 degrees and sunny"}]


def turn(role: str, text: str) -> str:
    """One finished Gemma turn."""
    return f"<start_of_turn>{role}\n{text}<end_of_turn>\n"


REPLY = "<start_of_turn>model\n"


def _valid(name: str, arguments: str) -> dict:
    args = json.loads(arguments)
    jsonschema.validate(args, SCHEMAS[name])
    return args


async def test_required_call_on_the_default_server_is_parsed_with_valid_arguments(gemma):
    async with serving(gemma, n_ctx=1024) as server:
        client = openai_client(server)
        required = await client.chat.completions.create(model="m", messages=ASK, tools=TOOLS, tool_choice="required",
                                                        max_tokens=80, temperature=0)
        named = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Add 3 and 4."}], tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "add"}}, max_tokens=80, temperature=0)
        stream = await client.chat.completions.create(model="m", messages=ASK, tools=TOOLS, tool_choice="required",
                                                      max_tokens=80, temperature=0, stream=True)
        pieces = [chunk async for chunk in stream]
    (call,) = required.choices[0].message.tool_calls
    assert required.choices[0].finish_reason == "tool_calls" and call.function.name in SCHEMAS
    _valid(call.function.name, call.function.arguments)
    (add,) = named.choices[0].message.tool_calls
    assert add.function.name == "add" and set(_valid("add", add.function.arguments)) == {"a", "b"}
    # streamed: the deltas of the one call join to the whole reply's call
    deltas = [d for c in pieces if c.choices for d in c.choices[0].delta.tool_calls or ()]
    assert deltas[0].function.name == call.function.name
    assert "".join(d.function.arguments or "" for d in deltas) == call.function.arguments


async def test_a_tool_result_is_rendered_in_gemmas_turns_and_answered(gemma):
    call_text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    expected = (turn("user", "What is the weather in Paris?") + turn("model", call_text)
                + turn("user", "<tool_response>\n18 degrees and sunny\n</tool_response>") + REPLY)
    async with serving(gemma, n_ctx=1024) as server, http(server) as client:
        applied = (await client.post("/apply-template", json={"messages": CALLED})).json()
        with_tools = (await client.post("/apply-template", json={"messages": CALLED, "tools": TOOLS})).json()
        answer = await openai_client(server).chat.completions.create(model="m", messages=CALLED, max_tokens=24,
                                                                     temperature=0)
    assert applied == {"prompt": expected}
    # with tools, the first user turn starts with them, one JSON object a line, and the turns are the same
    preamble, _, rest = with_tools["prompt"].partition("What is the weather in Paris?")
    assert preamble.startswith("<start_of_turn>user\n") and rest == expected.partition("Paris?")[2]
    assert all(f"\n{json.dumps(tool)}\n" in preamble for tool in TOOLS)
    message = answer.choices[0].message
    assert message.role == "assistant" and message.content and message.content.strip()


PLAIN = [
    ([{"role": "user", "content": "Hi"}], turn("user", "Hi") + REPLY),
    ([{"role": "system", "content": " Be brief. "}, {"role": "user", "content": "Hi\n"},
      {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": [{"type": "text", "text": "Bye"}]}],
     turn("user", "Be brief.\n\nHi") + turn("model", "Hello!") + turn("user", "Bye") + REPLY),
    ([{"role": "system", "content": "A"}, {"role": "system", "content": "B"}, {"role": "user", "content": "x"}],
     turn("user", "AB\n\nx") + REPLY),
]


@pytest.mark.parametrize(("messages", "expected"), PLAIN)
async def test_plain_chats_render_as_before_and_the_packaged_template_agrees(gemma, messages, expected):
    async with serving(gemma) as server, http(server) as client:
        applied = (await client.post("/apply-template", json={"messages": messages})).json()
    # the embedded model's own format: llama.cpp's built-in "gemma"
    assert applied == {"prompt": expected} and gemma.apply_chat_template(messages) == expected
    # without tools, the Jinja template of Gemma 3's turns renders exactly that
    assert render_jinja(gemma.handle, messages, template=packaged_template(GEMMA3_TOOLS)).prompt == expected


async def test_actor_chat_with_tools_on_the_embedded_gemma(gemma):
    async with spec_actor.open_actor(gemma, n_ctx=1024, n_threads=1, spec="none") as actor:
        reply = await actor.chat(ASK, tools=TOOLS, tool_choice="required", max_tokens=80)
        answer = await actor.chat(CALLED, tools=TOOLS, tool_choice="none", max_tokens=16)
    assert isinstance(reply, spec_actor.ChatReply) and len(reply.tool_calls) == 1
    _valid(reply.tool_calls[0].name, reply.tool_calls[0].arguments)
    assert isinstance(answer, spec_actor.ChatReply) and answer.content and not answer.tool_calls


async def test_structured_output_with_tools_on_the_default_server(gemma):
    # under tool_choice "auto" the request's own schema wins over the lazy call grammar
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 16}}, "required": ["city"],
              "additionalProperties": False}
    async with serving(gemma, n_ctx=1024) as server, http(server) as client:
        top = (await client.post("/v1/chat/completions", json={
            "messages": ASK, "tools": TOOLS, "json_schema": schema, "max_tokens": 40})).json()
        fmt = (await client.post("/v1/chat/completions", json={
            "messages": ASK, "tools": TOOLS, "max_tokens": 40,
            "response_format": {"type": "json_schema", "json_schema": {"name": "city", "schema": schema}}})).json()
        native = (await client.post("/completion", json={"prompt": "The capital of France", "n_predict": 40,
                                                          "json_schema": schema})).json()
    for message in (top["choices"][0]["message"], fmt["choices"][0]["message"]):
        assert not message.get("tool_calls")
        jsonschema.validate(json.loads(message["content"]), schema)
    jsonschema.validate(json.loads(native["content"]), schema)


async def test_a_last_assistant_message_is_continued(gemma):
    prefill = "The weather in Paris is"
    messages = ASK + [{"role": "assistant", "content": prefill}]
    expected = turn("user", "What is the weather in Paris?") + REPLY + prefill
    async with serving(gemma, n_ctx=1024) as server, http(server) as client:
        applied = (await client.post("/apply-template", json={"messages": messages})).json()
        chat = (await client.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 12})).json()
        greedy = (await client.post("/completion", json={"prompt": expected, "n_predict": 12})).json()
        with_tools = (await client.post("/apply-template", json={"messages": messages, "tools": TOOLS})).json()
        called = await client.post("/v1/chat/completions", json={"messages": CALLED[:2], "max_tokens": 2})
    assert applied == {"prompt": expected}
    assert chat["choices"][0]["message"]["content"] == greedy["content"] and greedy["content"]
    assert with_tools["prompt"].endswith(REPLY + prefill)
    assert "tool_calls" in error_of(called)["message"]
    assert gemma.apply_chat_template(messages) == expected
    async with spec_actor.open_actor(gemma, n_ctx=1024, n_threads=1, spec="none") as actor:
        assert await actor.chat(messages, max_tokens=12) == greedy["content"]


async def test_chat_template_takes_built_in_names(gemma):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    async with serving(gemma, chat_template="llama3") as server, http(server) as client:
        applied = (await client.post("/apply-template", json={"messages": messages})).json()
        ran = (await client.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 2}))
        tools = await client.post("/v1/chat/completions", json={"messages": messages, "tools": TOOLS})
    header = "<|start_header_id|>{}<|end_header_id|>\n\n"
    assert applied == {"prompt": header.format("system") + "Be brief.<|eot_id|>" + header.format("user")
                       + "Hi<|eot_id|>" + header.format("assistant")}
    assert ran.status_code == 200
    assert "'llama3' cannot render tools" in error_of(tools)["message"]
    assert {"chatml", "llama3", "gemma", "mistral-v7"} <= set(builtin_names())


def test_serve_cli_chat_template_chatml_renders_chatml():
    proc, url = start_cli_server("--chat-template", "chatml")
    try:
        messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
        applied = httpx.post(f"{url}/apply-template", json={"messages": messages}, timeout=TIMEOUT).json()
    finally:
        proc.terminate()
        proc.wait(TIMEOUT)
    assert applied == {"prompt": "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                                 "<|im_start|>assistant\n"}


def test_serve_cli_refuses_a_chat_template_that_is_neither_a_name_nor_a_file():
    proc = cli("serve", "--chat-template", "no-such-template-name")
    assert proc.returncode == 2
    assert "no-such-template-name" in proc.stderr and "chatml" in proc.stderr and "llama3" in proc.stderr
