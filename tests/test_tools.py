"""Tool calls and Jinja chat templates (issue 22, items 2 and 3).

Rendering: on small GGUFs carrying real families' templates (from the
llama.cpp source tree the build uses), the prompt equals the template
rendered by an independent Jinja engine (Python's jinja2, as Hugging Face's
``apply_chat_template`` renders it), byte for byte, including tools, tool
results and default system prompts; the two documented differences of
llama.cpp's renderer are applied to the reference: the leading BOS is left to
the tokenizer, and tool-call arguments reach the template as objects.

Calls: the embedded Gemma serves with Llama 3.2's template (a format that
supports tools); ``tool_choice="required"`` or a named function constrains
the reply to a call, whose arguments must validate against the tool's schema.
"""

from __future__ import annotations

import datetime
import json
import re
import sys
from pathlib import Path

import jinja2
import jinja2.ext
import jsonschema
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jinja2.sandbox import ImmutableSandboxedEnvironment
from serve_helpers import http, openai_client, serving, start_cli_server, TIMEOUT
from test_serve_cli import cli
from tiny_model_fixtures import tiny_paths, tiny_target  # noqa: F401

import spec_actor
from spec_actor._tools import ReplyDiffer, parse_reply, render_jinja
from spec_actor.testing import tiny_models

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "native" / "llama"))
import llama_build  # noqa: E402


def _template(name: str) -> str:
    prefix = llama_build.ensure_built(llama_build.shutil.which("cmake") or "cmake", None, None)
    source = Path((prefix / "source-dir.txt").read_text().strip())
    return (source / "models" / "templates" / f"{name}.jinja").read_text()


FAMILIES = {"qwen2.5": "Qwen-Qwen2.5-7B-Instruct", "llama3": "meta-llama-Llama-3.2-3B-Instruct",
            "mistral": "mistralai-Mistral-Nemo-Instruct-2407", "gemma": "google-gemma-2-2b-it"}

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24}},
                   "required": ["city"], "additionalProperties": False}}}
ADD = {"type": "function", "function": {
    "name": "add", "description": "Add two numbers",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer", "minimum": -1000, "maximum": 1000},
                                                    "b": {"type": "integer", "minimum": -1000, "maximum": 1000}},
                   "required": ["a", "b"], "additionalProperties": False}}}
TOOLS = [WEATHER, ADD]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}

CALL = {"id": "abc123def", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
CONVERSATIONS = {
    "plain": ([{"role": "user", "content": "Hi there"}], None),
    "system": ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"}], None),
    "tools": ([{"role": "user", "content": "Weather in Paris?"}], TOOLS),
    "tool result": ([{"role": "user", "content": "Weather in Paris?"},
                     {"role": "assistant", "content": "", "tool_calls": [CALL]},
                     {"role": "tool", "tool_call_id": "abc123def", "content": "sunny"}], TOOLS),
}


def _reference(template: str, messages: list[dict], tools: list[dict] | None) -> str:
    """The template rendered by jinja2 with the globals Hugging Face's renderer gives templates."""
    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    messages = [m | {"tool_calls": [c | {"function": c["function"] | {"arguments": json.loads(
        c["function"]["arguments"])}} for c in m["tool_calls"]]} if "tool_calls" in m else m for m in messages]
    text = env.from_string(template).render(messages=messages, tools=tools, add_generation_prompt=True,
                                            bos_token="<s>", eos_token="</s>")
    return text.removeprefix("<s>")  # llama.cpp leaves the BOS to the tokenizer


@pytest.fixture(scope="module")
def family_models(tmp_path_factory) -> dict[str, spec_actor.Model]:
    d = tmp_path_factory.mktemp("chat-models")
    return {family: spec_actor.load_model(tiny_models.write_chat_model(d / f"{family}.gguf", _template(name)))
            for family, name in FAMILIES.items()}


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("conversation", CONVERSATIONS)
def test_rendered_prompt_equals_the_templates_own_rendering(family_models, family, conversation):
    model = family_models[family]
    messages, tools = CONVERSATIONS[conversation]
    if family == "gemma" and conversation in ("system", "tool result"):
        # Gemma 2's template refuses system and tool turns; llama.cpp folds a system turn into the first user
        # turn, and a tool turn is a clear error, not a crash
        if conversation == "tool result":
            with pytest.raises(spec_actor.ConfigError, match="roles must alternate"):
                render_jinja(model.handle, messages, tools=tools)
        else:
            assert render_jinja(model.handle, messages).prompt.startswith("<start_of_turn>user\nBe brief.\nHi<end")
        return
    rendered = render_jinja(model.handle, messages, tools=tools)
    assert rendered.prompt == _reference(model.chat_template(), messages, tools)


def test_model_template_renders_chats_by_default_and_gemma_keeps_its_format(family_models, gemma):
    # A GGUF with a template: Jinja adds Qwen's default system prompt, as llama-server does.
    qwen = family_models["qwen2.5"]
    prompt = "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
    tokens, _, rendered = spec_actor._tools.chat_prompt(qwen, [{"role": "user", "content": "Hi"}], {})
    want = qwen.tokenizer.encode(prompt + "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", add_special=True,
                                 parse_special=True)
    assert tokens == want and rendered is not None
    # Content is text through the Jinja path too: Gemma rendered by a Jinja template, a user's
    # "<end_of_turn>" is that text, and the one control token is the markup's.
    end_of_turn = gemma.tokenizer.encode("<end_of_turn>", add_special=False, parse_special=True)
    assert len(end_of_turn) == 1
    tokens, _, rendered = spec_actor._tools.chat_prompt(gemma, [{"role": "user", "content": "<end_of_turn>"}], {},
                                                        template=_template(FAMILIES["gemma"]), jinja=True)
    assert rendered is not None and tokens.count(end_of_turn[0]) == 1
    as_text = gemma.tokenizer.encode("<end_of_turn>", add_special=False, parse_special=False)
    assert any(tokens[i:i + len(as_text)] == as_text for i in range(len(tokens)))
    # The embedded Gemma has no template: its architecture's format, not llama-server's ChatML fallback.
    # (as token ids: message content stays text, only the markup becomes control tokens)
    tokens, _, rendered = spec_actor._tools.chat_prompt(gemma, [{"role": "user", "content": "Hi"}], {})
    want = gemma.tokenizer.encode("<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n", add_special=True,
                                  parse_special=True)
    assert tokens == want and rendered is None


def _valid_call(call) -> dict:
    arguments = json.loads(call.function.arguments)
    jsonschema.validate(arguments, SCHEMAS[call.function.name])
    return arguments


def _joined_calls(chunks) -> list[openai.types.chat.ChatCompletionMessageToolCall]:
    """A stream's call deltas joined per index; a call's first delta has its id, type and name, the rest not."""
    calls: dict[int, dict] = {}
    for chunk in chunks:
        for delta in (chunk.choices[0].delta.tool_calls or ()) if chunk.choices else ():
            if delta.index not in calls:
                assert delta.id and delta.type == "function" and delta.function.name, delta
                calls[delta.index] = {"id": delta.id, "type": "function",
                                      "function": {"name": delta.function.name, "arguments": ""}}
            else:
                assert not delta.id and not delta.function.name, delta
            calls[delta.index]["function"]["arguments"] += delta.function.arguments or ""
    assert sorted(calls) == list(range(len(calls)))
    return [openai.types.chat.ChatCompletionMessageToolCall.model_validate(calls[i]) for i in sorted(calls)]


QUESTIONS = ["What is the weather in Oslo?", "Add 2 and 40.", "Is it raining in Lima?", "What is 7 plus 8?",
             "Weather for Tokyo, please.", "Sum 100 and 23.", "How warm is it in Cairo?", "Compute 5 + 5.",
             "Do I need an umbrella in Dublin?", "What is 12 plus 30?"]


async def test_required_tool_choice_returns_a_valid_call_on_10_prompts(gemma):
    async with serving(gemma, spec="auto", n_ctx=2048, chat_template=_template(FAMILIES["llama3"])) as server:
        client = openai_client(server)
        for i, question in enumerate(QUESTIONS):
            messages = [{"role": "user", "content": question}]
            if i % 2 == 0:
                reply = await client.chat.completions.create(model="m", messages=messages, tools=TOOLS,
                                                             tool_choice="required", max_tokens=120, temperature=0)
                choice = reply.choices[0]
                calls, finish = choice.message.tool_calls, choice.finish_reason
            else:
                chunks = [c async for c in await client.chat.completions.create(
                    model="m", messages=messages, tools=TOOLS, tool_choice="required", max_tokens=120,
                    temperature=0, stream=True)]
                calls, finish = _joined_calls(chunks), chunks[-1].choices[0].finish_reason
            assert finish == "tool_calls" and len(calls) == 1, (question, calls)
            _valid_call(calls[0])
        # a follow-up turn with the tool's result in the history is accepted and answered
        call = reply.choices[0].message.tool_calls[0]
        follow = await client.chat.completions.create(model="m", tools=TOOLS, max_tokens=16, temperature=0, messages=[
            {"role": "user", "content": QUESTIONS[-2]},
            {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
            {"role": "tool", "tool_call_id": call.id, "content": "sunny, 20 C"}])
    assert follow.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert follow.usage.completion_tokens > 0


async def test_named_function_and_none(gemma):
    async with serving(gemma, n_ctx=2048, chat_template=_template(FAMILIES["llama3"])) as server:
        client = openai_client(server)
        named = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "What is the weather in Oslo?"}], tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "add"}}, max_tokens=120, temperature=0)
        none = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Say hello."}], tools=TOOLS, tool_choice="none",
            max_tokens=8, temperature=0)
    (call,) = named.choices[0].message.tool_calls
    assert call.function.name == "add" and set(_valid_call(call)) == {"a", "b"}
    assert none.choices[0].message.tool_calls is None and none.choices[0].message.content


async def test_actor_chat_with_tools_returns_parsed_calls(gemma):
    template = _template(FAMILIES["qwen2.5"])
    async with spec_actor.open_actor(gemma, n_ctx=2048, n_threads=1) as actor:
        reply = await actor.chat([{"role": "user", "content": "Add 3 and 4."}], tools=TOOLS, tool_choice="required",
                                 template=template, max_tokens=120)
        text = await actor.chat([{"role": "user", "content": "Hi"}], max_tokens=4)
    assert isinstance(reply, spec_actor.ChatReply) and isinstance(text, str)
    assert len(reply.tool_calls) == 1 and reply.tool_calls[0].name in SCHEMAS
    jsonschema.validate(json.loads(reply.tool_calls[0].arguments), SCHEMAS[reply.tool_calls[0].name])
    assert reply.raw.count("<tool_call>") == 1  # one call without parallel_tool_calls: the reply ends after it


@pytest.mark.parametrize(("body", "param", "match"), [
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice", "nope"),
    ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice", "sometimes"),
    ({"tool_choice": "required"}, "tool_choice", "needs tools"),
    ({"tools": "get_weather"}, "tools", "list"),
    ({"tools": [{"type": "function", "function": {"description": "no name"}}]}, "tools", "name"),
    ({"tools": [WEATHER, WEATHER]}, "tools", "used twice"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "array", "maxItems": 10**9}}}]}, "tools", "larger than 4096"),
    ({"tools": TOOLS, "parallel_tool_calls": "yes"}, "parallel_tool_calls", "boolean"),
    ({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": "x"}]},
     "messages[1].tool_calls", "array"),
    ({"messages": [{"role": "tool", "content": "x", "tool_call_id": 5}]}, "messages[0].tool_call_id", "string"),
])
async def test_bad_tool_fields_are_a_400_naming_the_field(gemma, body, param, match):
    async with serving(gemma, chat_template=_template(FAMILIES["llama3"])) as server, http(server) as client:
        response = await client.post("/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2} | body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and match in error["message"], error


async def test_tools_on_a_gguf_without_template_are_a_400_not_a_500(tiny_target):
    # (the embedded Gemma has none either, but gets Gemma 3's turns with tools: tests/test_gemma_tools.py)
    async with serving(tiny_target) as server:
        with pytest.raises(openai.BadRequestError, match="Jinja chat template"):
            await openai_client(server).chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], tools=TOOLS, max_tokens=2)


async def test_call_text_the_parser_rejects_stays_the_content(gemma):
    # "auto" does not constrain: Gemma writes what it likes, and the reply carries it as content.
    async with serving(gemma, chat_template=_template(FAMILIES["qwen2.5"])) as server:
        reply = await openai_client(server).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Tell me a story."}], tools=TOOLS, max_tokens=12,
            temperature=0)
    message = reply.choices[0].message
    assert message.tool_calls is None and message.content and reply.choices[0].finish_reason == "length"


FUZZ_TEXT = settings(max_examples=150, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

PIECES = ["<tool_call>", "</tool_call>", "[TOOL_CALLS]", '{"name": "add", "arguments": ', '{"a": 1, "b": 2}',
          '"parameters": ', "{", "}", "[", "]", '"', ",", ":", "\n", "get_weather", "<|eot_id|>", "é", "\\", " "]


@pytest.fixture(scope="module")
def renders(family_models) -> dict[str, object]:
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    return {family: render_jinja(family_models[family].handle, messages, tools=TOOLS)
            for family in ("qwen2.5", "llama3", "mistral")}


@FUZZ_TEXT
@given(text=st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=3)), max_size=12).map("".join),
       partial=st.booleans())
def test_parser_survives_any_reply_text(renders, text, partial):
    for rendered in renders.values():
        reply = parse_reply(text, rendered, partial=partial)
        assert isinstance(reply.content, str) and reply.raw == text
        for call in reply.tool_calls:
            assert call.name and isinstance(call.arguments, str)


async def test_streamed_call_arrives_as_argument_deltas_that_join_to_the_whole_replys(gemma):
    # As llama-server streams them: each token's partial parse, diffed against what was sent.
    body = {"model": "m", "messages": [{"role": "user", "content": "What is the weather in Oslo?"}], "tools": TOOLS,
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}}, "max_tokens": 120,
            "temperature": 0}
    # without the prefix cache: the second request would reuse the first's prompt, which changes the prefill's
    # batch shapes, where Gemma may part at a logit near-tie (decision 0031) and the comparison below is exact
    async with serving(gemma, n_ctx=2048, chat_template=_template(FAMILIES["qwen2.5"]), prefix_cache=False) as server:
        client = openai_client(server)
        whole = await client.chat.completions.create(**body)
        chunks = [c async for c in await client.chat.completions.create(**body, stream=True)]
    (want,) = whole.choices[0].message.tool_calls
    (got,) = _joined_calls(chunks)
    assert (got.function.name, got.function.arguments) == (want.function.name, want.function.arguments)
    _valid_call(got)
    pieces = [d.function.arguments for c in chunks if c.choices for d in c.choices[0].delta.tool_calls or ()
              if d.function.arguments]
    assert len(pieces) > 1, pieces
    assert chunks[-1].choices[0].finish_reason == "tool_calls" and whole.choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize("family", ["qwen2.5", "llama3", "mistral"])
def test_reply_differ_streams_text_then_the_call_in_pieces(renders, family):
    # Text before a call streams as text; the call starts with its name and id, then its arguments grow.
    text = {"qwen2.5": 'Let me check.\n<tool_call>\n{"name": "add", "arguments": {"a": 12, "b": 30}}\n</tool_call>',
            "llama3": '{"name": "add", "parameters": {"a": 12, "b": 30}}',
            "mistral": 'Sure.[TOOL_CALLS][{"name": "add", "arguments": {"a": 12, "b": 30}, "id": "abc123def"}]'}[family]
    rendered = renders[family]
    whole = parse_reply(text, rendered)
    differ = ReplyDiffer(rendered)
    deltas = [d for i in range(1, len(text) + 1) for d in differ.update(text[:i], partial=True)]
    deltas += differ.update(text, partial=False)
    assert "".join(d.content for d in deltas if d.index is None) == whole.content
    (call,) = whole.tool_calls
    starts = [d for d in deltas if d.name]
    assert [(d.index, d.name) for d in starts] == [(0, "add")] and starts[0].id
    assert "".join(d.arguments for d in deltas if d.index == 0) == call.arguments
    assert sum(1 for d in deltas if d.index == 0 and d.arguments) > 1
    assert differ.calls == 1 and differ.update(text, partial=False) == []  # nothing is sent twice


FEW_SHOT = [  # a history with two calls: the embedded Gemma then starts calls of its own under "auto"
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "abc123def", "content": "sunny"},
    {"role": "assistant", "content": "It is sunny."},
    {"role": "user", "content": "Add 1 and 2."},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "fed321cba", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}]},
    {"role": "tool", "tool_call_id": "fed321cba", "content": "3"},
    {"role": "assistant", "content": "It is 3."}]


async def test_auto_tool_choice_constrains_a_call_once_the_model_starts_it(gemma):
    # llama-server's lazy grammar: free text until the format's call opening, then a valid call.
    rendered = render_jinja(gemma.handle, FEW_SHOT + [{"role": "user", "content": "Hi"}], tools=TOOLS,
                            tool_choice="auto", template=_template(FAMILIES["qwen2.5"]))
    assert rendered.grammar and rendered.triggers and "<tool_call>" in rendered.triggers
    calls = []
    async with spec_actor.open_actor(gemma, n_ctx=2048, n_threads=1) as actor:
        for question in QUESTIONS:
            reply = await actor.chat(FEW_SHOT + [{"role": "user", "content": question}], tools=TOOLS,
                                     tool_choice="auto", template=_template(FAMILIES["qwen2.5"]), max_tokens=160)
            # a call the token budget cut off has no closing tag yet: only a finished call must parse
            if "<tool_call>" in reply.raw and "</tool_call>" in reply.raw:
                assert len(reply.tool_calls) == 1, reply.raw
                calls.append(reply.tool_calls[0])
    assert calls, "the model never started a call"
    for call in calls:
        jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])


def test_under_auto_the_callers_schema_wins_over_the_lazy_call_grammar(family_models):
    qwen, schema = family_models["qwen2.5"], {"type": "object"}
    messages = [{"role": "user", "content": "Hi"}]
    _, lazy, _ = spec_actor._tools.chat_prompt(qwen, messages, {}, tools=TOOLS)
    _, own, _ = spec_actor._tools.chat_prompt(qwen, messages, {"json_schema": schema}, tools=TOOLS)
    assert lazy["grammar"] and "<tool_call>" in lazy["grammar_triggers"]
    assert own["json_schema"] == schema and "grammar" not in own and "grammar_triggers" not in own
    with pytest.raises(spec_actor.ConfigError, match="own grammar"):
        spec_actor._tools.chat_prompt(qwen, messages, {"json_schema": schema}, tools=TOOLS, tool_choice="required")


async def test_a_stream_sends_the_text_before_a_call_as_content_then_the_call(gemma):
    # The same greedy request whole and streamed: the stream's content and calls, joined, are the whole reply's.
    body = {"model": "m", "messages": FEW_SHOT + [{"role": "user", "content": "Add 2 and 40."}], "tools": TOOLS,
            "max_tokens": 160, "temperature": 0}
    # without the prefix cache: the second request would reuse the first's prompt, which changes the prefill's
    # batch shapes, where Gemma may part at a logit near-tie (decision 0031) and the comparison below is exact
    async with serving(gemma, n_ctx=2048, chat_template=_template(FAMILIES["qwen2.5"]), prefix_cache=False) as server:
        client = openai_client(server)
        whole = await client.chat.completions.create(**body)
        chunks = [c async for c in await client.chat.completions.create(**body, stream=True)]
    message = whole.choices[0].message
    assert message.content and message.tool_calls, message  # text, then a call (what this test is about)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == message.content
    assert [(c.function.name, c.function.arguments) for c in _joined_calls(chunks)] == [
        (c.function.name, c.function.arguments) for c in message.tool_calls]
    first_call = next(i for i, c in enumerate(chunks) if c.choices and c.choices[0].delta.tool_calls)
    assert any(c.choices[0].delta.content for c in chunks[:first_call] if c.choices)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


async def test_lazy_grammar_applies_from_its_trigger_and_speculation_keeps_the_text(gemma):
    # A word of the plain reply triggers a grammar: the text up to it is the plain text, what follows
    # is the grammar's; speculation (auto) gives the same text as plain decoding.
    prompt = "The capital of France is Paris. The capital of Italy is Rome. The capital of Spain is"
    async with spec_actor.open_actor(gemma, n_ctx=512, n_threads=1, spec="none") as plain:
        free = await plain.generate(prompt, max_tokens=40)
        words = [w for w in free.split() if w.isalpha() and len(w) > 3]
        assert len(words) > 2, free
        word = words[2]
        grammar = f'root ::= "{word}" " [" [0-9]{{1,3}} "]"'
        triggers = json.dumps([{"type": 1, "value": word}])
        lazy_plain = await plain.generate(prompt, max_tokens=40, grammar=grammar, grammar_triggers=triggers)
    async with spec_actor.open_actor(gemma, n_ctx=512, n_threads=1, spec="auto") as spec:
        lazy_spec = await spec.generate(prompt, max_tokens=40, grammar=grammar, grammar_triggers=triggers)
    before = free[:free.index(word) + len(word)]
    assert lazy_plain.startswith(before) and re.fullmatch(r" \[[0-9]{1,3}\]", lazy_plain[len(before):]), lazy_plain
    assert lazy_spec == lazy_plain


@pytest.mark.parametrize(("triggers", "match"), [
    ('[{"type": 2, "value": "(unclosed"}]', "not a regex"),
    ('[{"type": 3, "value": "[z-a]"}]', "not a regex"),
    ('[{"type": 7, "value": "x"}]', "type 7 is unknown"),
    ('[{"type": 0, "token": -1}]', "not in the vocabulary"),
    ('[{"type": 0, "token": 99999999}]', "not in the vocabulary"),
    ('{"type": 1}', "must be an array"),
    ("not json", "grammar triggers: .*parse error"),
])
async def test_bad_grammar_triggers_are_a_config_error_and_the_actor_stays_usable(gemma, triggers, match):
    async with spec_actor.open_actor(gemma, n_ctx=256, n_threads=1) as actor:
        with pytest.raises(spec_actor.ConfigError, match=match):
            await actor.generate("Hi", max_tokens=4, grammar='root ::= "a"', grammar_triggers=triggers)
        assert await actor.generate("Hi", max_tokens=4)


BAD_TEMPLATES = {"unclosed": "{% for m in messages %}{{ m.content }", "empty if": "{% if %}x{% endif %}"}


@pytest.mark.parametrize("template", BAD_TEMPLATES.values(), ids=BAD_TEMPLATES)
async def test_a_server_with_a_bad_chat_template_does_not_start(gemma, template):
    with pytest.raises(spec_actor.ConfigError, match="chat template cannot render a chat: .*(Parser Error|Unexpected)"):
        async with serving(gemma, chat_template=template):
            pass


def test_serve_chat_template_file_renders_chats_and_a_bad_file_is_a_startup_error(tmp_path):
    bad, good = tmp_path / "bad.jinja", tmp_path / "qwen.jinja"
    bad.write_text(BAD_TEMPLATES["unclosed"])
    good.write_text(_template(FAMILIES["qwen2.5"]))
    refused = cli("serve", "--chat-template", str(bad), "--port", "0")
    missing = cli("serve", "--chat-template", str(tmp_path / "none.jinja"))
    assert refused.returncode == 2 and "chat template cannot render a chat" in refused.stderr, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and "Traceback" not in refused.stderr
    assert missing.returncode == 2 and "--chat-template: cannot read" in missing.stderr
    proc, url = start_cli_server("--chat-template", str(good), "-c", "1024")
    try:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=TIMEOUT)
        reply = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Add 2 and 40."}], tools=TOOLS, tool_choice="required",
            max_tokens=60, temperature=0)
    finally:
        proc.kill()
        proc.wait()
    (call,) = reply.choices[0].message.tool_calls
    _valid_call(call)
