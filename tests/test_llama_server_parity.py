"""``spec-actor serve`` against llama.cpp's own ``llama-server``: one model, the same requests, answers field by field.

Both servers run on loopback ports with the embedded Gemma 3 270M and a
context of `CTX`: llama-server built from the pinned llama.cpp source
(`llama_server_fixtures`), spec-actor's in this process. Every request goes
to both and the answers are compared: ``/tokenize``, ``/detokenize`` and
``/apply-template`` must be equal; ``/completion`` must have the same fields
with the same JSON types, the same greedy text and tokens (or part at a
near-tie, as batch shapes round differently: tests/greedy_helpers.py) and the
same values where llama-server's are not its own business (slot, alias);
``GET /props`` must hold every field of llama-server's that clients read,
with the same types. The differences this server means to have are listed
below, each with its reason (docs/decisions/0104-llama-server-parity.md);
any other makes a test fail.
"""

from __future__ import annotations

import json
import math
from typing import Any

import httpx
import pytest
from greedy_helpers import GEMMA_NEAR_TIE, assert_equal_within_a_near_tie
from llama_server_fixtures import llama_server_binary, running_llama_server
from serve_helpers import CTX, http, serving, sse_data

import spec_actor
from spec_actor import Session

# -- the differences this server means to have ---------------------------------------------------------------

ONLY_OURS = {
    "speculative_decoding": "vLLM's per-request speculation figures (decision 0047)",
    "timings/draft_n": "always sent, 0 without drafts (llama-server sends it only once it drafted)",
    "timings/draft_n_accepted": "as draft_n",
    # /props
    "speculative": "the speculation every slot runs: its type and draft length",
    "default_generation_settings/params/stop": "a request's fields, shown with their defaults",
    "default_generation_settings/params/grammar": "as stop",
    "default_generation_settings/params/dry_sequence_breakers": "as stop",
    "default_generation_settings/params/logit_bias": "as stop",
    "default_generation_settings/params/grammar_lazy": "as stop",
    "default_generation_settings/params/grammar_triggers": "as stop",
    "default_generation_settings/params/preserved_tokens": "as stop",
}
"""Fields this server sends and llama-server does not, with why."""

ONLY_THEIRS = {
    # /props
    "model_ftype": "the quantization's name: the native library does not expose llama.cpp's name for it yet",
    "media_marker": "no multimodal input here",
    "ui": "no web UI here",
    "ui_settings": "no web UI here",
    "cors_proxy_enabled": "no web UI, so no proxy for it",
    "chat_template_caps": "read by llama-server's web UI only; this server renders with the template it names",
}
"""Fields llama-server sends and this server does not, with why."""

OTHER_VALUES = {
    "id_slot": "-1: the pool places a request by its shared prefix, not in a slot the client names",
    "model": "the model's name (the GGUF file name without .gguf); llama-server's alias defaults to the path",
    "generation_settings/reasoning_format": "none: a completion's text is not parsed for reasoning here;"
                                            " llama-server names its default parser, which /completion skips",
    "timings/cache_n": "each server's own prompt cache (compared as prompt_n + cache_n = tokens_evaluated)",
    "timings/prompt_n": "as cache_n",
}
"""Fields both send with the same type and, on purpose, other values (greedy completions compare the rest)."""

STOP_STRING_COUNTS = "tokens_predicted, tokens_cached, timings/predicted_n"
"""After a stop string this server counts the tokens it delivered, not the one that held the stop string
(decision 0021); llama-server counts that one too. The fields that follow from the count."""

CHAT = [{"role": "system", "content": "Answer in one short sentence."},
        {"role": "user", "content": "What colour is the sky on a clear day?"},
        {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": "And at night?"}]
TEXTS = ["Hello world", " leading space, trailing space ", "This is a test string with unicode 媽 and emoji 🤗",
         "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n", "tabs\tand\nnew lines\n\n", ""]


@pytest.fixture(scope="module")
def llama_url(gemma: spec_actor.Model) -> str:
    """llama-server on the embedded model: one slot of `CTX` tokens, one thread, as the test servers here."""
    with running_llama_server(llama_server_binary(), gemma.path, "-c", str(CTX), "-np", "1", "-t", "1") as url:
        yield url


@pytest.fixture(scope="module")
def plain(gemma: spec_actor.Model) -> Session:
    """Plain greedy decoding on the model, to judge where two greedy texts part (a near-tie or not)."""
    with Session(gemma, spec="none", n_ctx=CTX, prefix_cache=False, n_threads=1) as session:
        yield session


def theirs(url: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=url, timeout=120)


async def both(ours: httpx.AsyncClient, llama: httpx.AsyncClient, method: str, path: str,
               body: Any = None) -> tuple[Any, Any]:
    """The JSON answers of (llama-server, spec-actor) to the same request, both 200."""
    answers = []
    for client in (llama, ours):
        response = await client.request(method, path, json=body)
        assert response.status_code == 200, (client.base_url, path, body, response.text)
        answers.append(response.json())
    return answers[0], answers[1]


# -- comparing -----------------------------------------------------------------------------------------------

def json_type(value: Any) -> str:
    """The JSON type of a decoded value (integers and numbers apart, as a typed client reads them)."""
    if value is None or isinstance(value, (bool, str, list, dict)):
        return type(value).__name__
    return "int" if isinstance(value, int) else "float"


def shape_differences(llama: Any, ours: Any, path: str = "") -> list[str]:
    """Where the two answers differ in fields or types, but the deliberate differences; empty: the same shape.

    Objects are compared field by field, arrays item by item as far as both go.
    """
    if json_type(llama) != json_type(ours):
        return [f"{path or '.'}: llama-server's {json_type(llama)} {llama!r} against {json_type(ours)} {ours!r}"]
    found: list[str] = []
    if isinstance(llama, dict):
        for key in llama.keys() | ours.keys():
            where = f"{path}/{key}" if path else key
            if key not in ours:
                if where not in ONLY_THEIRS:
                    found.append(f"{where}: only llama-server sends it ({llama[key]!r})")
            elif key not in llama:
                if where not in ONLY_OURS:
                    found.append(f"{where}: only spec-actor sends it ({ours[key]!r})")
            else:
                found += shape_differences(llama[key], ours[key], where)
    elif isinstance(llama, list):
        for i, (a, b) in enumerate(zip(llama, ours)):
            found += shape_differences(a, b, f"{path}[{i}]")
    return found


def same_value(a: Any, b: Any) -> bool:
    """Equal, numbers within float32 rounding (llama-server keeps its sampling settings in float32)."""
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and math.isclose(a, b, rel_tol=1e-6)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    return a == b


def assert_same_probabilities(llama: dict[str, Any], ours: dict[str, Any]) -> None:
    """One token's ``completion_probabilities`` entry: the same token, and alternatives with close log-probabilities.

    The two servers' batches round the logits differently (as a near-tie
    allows), so the alternatives' order may differ where they nearly tie:
    those both list are compared by id.
    """
    assert (llama["id"], llama["token"], llama["bytes"]) == (ours["id"], ours["token"], ours["bytes"])
    assert abs(llama["logprob"] - ours["logprob"]) < GEMMA_NEAR_TIE, (llama, ours)
    theirs_top = {top["id"]: top for top in llama["top_logprobs"]}
    ours_top = {top["id"]: top for top in ours["top_logprobs"]}
    assert len(theirs_top) == len(ours_top) and llama["top_logprobs"][0]["id"] == ours["top_logprobs"][0]["id"]
    for token in theirs_top.keys() & ours_top.keys():
        assert (theirs_top[token]["token"], theirs_top[token]["bytes"]) == (ours_top[token]["token"],
                                                                            ours_top[token]["bytes"])
        assert abs(theirs_top[token]["logprob"] - ours_top[token]["logprob"]) < GEMMA_NEAR_TIE


def assert_completions_agree(llama: dict[str, Any], ours: dict[str, Any], plain: Session,
                                   prompt_ids: list[int], *, stop_string: bool = False) -> None:
    """One greedy ``/completion``'s two answers (whole or a stream's last event) agree but where they may not."""
    assert not shape_differences(llama, ours), shape_differences(llama, ours)
    # after a stop string this server lists the tokens it delivered: a prefix of llama-server's
    parted = (ours["tokens"] != llama["tokens"][:len(ours["tokens"])] if stop_string
              else ours["tokens"] != llama["tokens"])
    if parted:  # only at a near-tie; past it the texts follow different contexts
        assert_equal_within_a_near_tie(plain, prompt_ids, ours["tokens"], llama["tokens"])
    skip = {path.split("/")[0] for path in OTHER_VALUES if "/" not in path}
    skip |= {"generation_settings", "timings", "completion_probabilities"}  # compared apart below
    if parted:
        skip |= {"content", "tokens", "has_new_line", "tokens_predicted", "tokens_cached", "stop_type",
                 "stopping_word", "completion_probabilities"}
    if stop_string:
        skip |= {"tokens", "tokens_predicted", "tokens_cached"}
    for key in llama.keys() - skip:
        assert same_value(llama[key], ours[key]), (key, llama[key], ours[key])
    settings = {k for k in llama["generation_settings"] if f"generation_settings/{k}" not in OTHER_VALUES}
    for key in settings:
        assert same_value(llama["generation_settings"][key], ours["generation_settings"][key]), key
    if not parted:
        for a, b in zip(llama.get("completion_probabilities", []), ours.get("completion_probabilities", [])):
            assert_same_probabilities(a, b)
    for answer in (llama, ours):  # the counts' meanings, each server's own numbers
        timings = answer["timings"]
        assert timings["prompt_n"] + timings["cache_n"] == answer["tokens_evaluated"], answer
        assert timings["predicted_n"] == answer["tokens_predicted"], answer
        assert answer["tokens_cached"] == answer["tokens_evaluated"] + answer["tokens_predicted"] - 1, answer
    if stop_string and not parted:  # this server counts the tokens it delivered; llama-server those past them too
        assert ours["tokens_predicted"] == len(ours["tokens"]) <= llama["tokens_predicted"]


# -- the routes ----------------------------------------------------------------------------------------------

async def test_tokenize_answers_are_equal(gemma, llama_url):
    bodies = [{"content": text} for text in TEXTS]
    bodies += [{"content": text, "with_pieces": True} for text in TEXTS]
    bodies += [{"content": text, "add_special": True, "parse_special": False} for text in TEXTS]
    bodies += [{"content": TEXTS[3], "add_special": True, "with_pieces": True},
               {"content": [2, "Hello", 108, " world"], "add_special": True},
               {"content": ["Hello", 9259, " world"], "with_pieces": True}]
    async with serving(gemma) as server, http(server) as ours, theirs(llama_url) as llama:
        for body in bodies:
            expected, got = await both(ours, llama, "POST", "/tokenize", body)
            assert got == expected, body


async def test_system_fingerprint_names_llama_servers_build_then_this_library(gemma, llama_url):
    # llama-server's fingerprint is its llama.cpp build; both servers are built from one source, so this
    # server's begins with the same build, whole and in every chunk of a stream (clients check it is set)
    body = {"messages": CHAT, "max_tokens": 3}
    async with serving(gemma) as server, http(server) as ours, theirs(llama_url) as llama:
        build = (await llama.post("/v1/chat/completions", json=body)).json()["system_fingerprint"]
        whole = (await ours.post("/v1/chat/completions", json=body)).json()
        completion = (await ours.post("/v1/completions", json={"prompt": "Hi", "max_tokens": 3})).json()
        chunks = sse_data((await ours.post("/v1/chat/completions", json=body | {"stream": True})).text.splitlines())
    assert build.startswith("b")
    expected = f"{build}-spec_actor-{spec_actor.__version__}"
    assert whole["system_fingerprint"] == completion["system_fingerprint"] == expected
    assert chunks and all(chunk["system_fingerprint"] == expected for chunk in chunks if chunk != "[DONE]")


async def test_verbose_answers_show_the_prompt_as_llama_server_renders_it(gemma, llama_url):
    # "verbose": true adds llama-server's __verbose: the prompt as the model reads it, its BOS as text
    # (a chat's differs where the servers' templates do: the embedded GGUF has none, decision 0104)
    body = {"prompt": TEXTS[2], "max_tokens": 3, "verbose": True}
    async with serving(gemma) as server, http(server) as ours, theirs(llama_url) as llama:
        expected, got = await both(ours, llama, "POST", "/v1/completions", body)
        chat = (await ours.post("/v1/chat/completions", json={"messages": CHAT, "max_tokens": 3,
                                                               "verbose": True})).json()
        rendered = (await ours.post("/apply-template", json={"messages": CHAT})).json()["prompt"]
        quiet = (await ours.post("/v1/completions", json=body | {"verbose": False})).json()
    assert got["__verbose"]["prompt"] == expected["__verbose"]["prompt"]
    assert got["__verbose"]["tokens_evaluated"] == expected["__verbose"]["tokens_evaluated"] == got["usage"][
        "prompt_tokens"]
    assert got["__verbose"]["content"] == got["choices"][0]["text"]
    assert got["__verbose"]["tokens_predicted"] == got["usage"]["completion_tokens"]
    assert chat["__verbose"]["prompt"].endswith(rendered) and chat["__verbose"]["content"] == chat["choices"][0][
        "message"]["content"]
    assert "__verbose" not in quiet


async def test_detokenize_answers_are_equal(gemma, llama_url):
    n_vocab = gemma.info.n_vocab
    async with serving(gemma) as server, http(server) as ours, theirs(llama_url) as llama:
        token_lists = [[], [2], list(range(0, 300)), list(range(n_vocab - 300, n_vocab)),
                       list(range(0, n_vocab, 997))]  # control tokens, byte tokens, a spread of the vocabulary
        for text in TEXTS:
            tokenized, _ = await both(ours, llama, "POST", "/tokenize", {"content": text, "add_special": True})
            token_lists.append(tokenized["tokens"])
        for tokens in token_lists:
            expected, got = await both(ours, llama, "POST", "/detokenize", {"tokens": tokens})
            assert got == expected, tokens


async def test_apply_template_renders_the_same_prompt_with_the_same_template(gemma, llama_url):
    # The GGUF has no template: llama-server renders its ChatML fallback, this server llama.cpp's format for
    # the architecture (/props' chat_template, decision 0104). Given llama-server's template, the prompts agree.
    async with theirs(llama_url) as llama:
        template = (await llama.get("/props")).json()["chat_template"]
    assert "{%" in template
    async with serving(gemma, chat_template=template) as server, http(server) as ours, theirs(llama_url) as llama:
        for messages in (CHAT, CHAT[1:2]):
            expected, got = await both(ours, llama, "POST", "/apply-template", {"messages": messages})
            assert got == expected and got["prompt"], messages
        # A conversation that ends with an assistant message (the prefill a client wrote) is continued by
        # both: the prompt ends with that message's text, no end of turn and no new turn after it
        expected, got = await both(ours, llama, "POST", "/apply-template", {"messages": CHAT[:3]})
        props = (await ours.get("/props")).json()
    assert got == expected and got["prompt"].endswith(CHAT[2]["content"]), (got, expected)
    assert props["chat_template"] == template


COMPLETIONS = [
    pytest.param({"prompt": "The capital of France is", "n_predict": 24}, id="text-to-the-limit"),
    pytest.param({"prompt": [2, 818, 5279, 529], "n_predict": 8}, id="token-ids"),
    pytest.param({"prompt": "Is the sky blue? Answer:", "n_predict": 8, "grammar": 'root ::= " yes" | " no"'},
                 id="grammar-to-the-end-of-generation"),
    pytest.param({"prompt": "1, 2, 3,", "n_predict": 4, "n_probs": 3}, id="probabilities"),
    pytest.param({"prompt": "<start_of_turn>user\nName a colour.<end_of_turn>\n<start_of_turn>model\n",
                  "n_predict": 16, "stop": ["\n"]}, id="control-tokens-and-a-stop-string"),
]


@pytest.mark.parametrize("body", COMPLETIONS)
async def test_greedy_completion_answers_agree(gemma, llama_url, plain, body):
    body = body | {"temperature": 0, "return_tokens": True}
    async with serving(gemma) as server, http(server) as ours, theirs(llama_url) as llama:
        prompt_ids, _ = await both(ours, llama, "POST", "/tokenize", {"content": body["prompt"], "add_special": True})
        expected, got = await both(ours, llama, "POST", "/completion", body)
    stop_string = expected["stop_type"] == "word"
    assert_completions_agree(expected, got, plain, prompt_ids["tokens"], stop_string=stop_string)
    assert expected["tokens_predicted"] >= 1 and got["timings"]["draft_n"] == 0


async def test_a_stop_string_ends_both_at_the_same_text(gemma, llama_url, plain):
    # the stop string is a piece of the greedy text itself (its fourth and fifth tokens), so both must meet it
    body = {"prompt": "The capital of France is", "n_predict": 16, "temperature": 0, "return_tokens": True}
    async with serving(gemma) as server, http(server) as ours, theirs(llama_url) as llama:
        free, _ = await both(ours, llama, "POST", "/completion", body)
        pieces = [(await llama.post("/tokenize", json={"content": [t], "with_pieces": True})).json()["tokens"][0]
                  ["piece"] for t in free["tokens"][3:5]]
        stop = "".join(pieces)
        prompt_ids, _ = await both(ours, llama, "POST", "/tokenize", {"content": body["prompt"], "add_special": True})
        expected, got = await both(ours, llama, "POST", "/completion", body | {"stop": [stop]})
    assert expected["stop_type"] == "word" and expected["stopping_word"] == stop, expected
    assert expected["content"] == free["content"][:free["content"].index(stop)]
    assert_completions_agree(expected, got, plain, prompt_ids["tokens"], stop_string=True)


async def sse_events(client: httpx.AsyncClient, body: dict[str, Any]) -> list[dict[str, Any]]:
    """A streamed ``/completion``'s events, each decoded (llama-server's native stream has no ``[DONE]``)."""
    events = []
    async with client.stream("POST", "/completion", json=body) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[len("data: "):]))
    return events


async def test_a_streamed_completion_sends_the_same_events(gemma, llama_url, plain):
    body = {"prompt": "Once upon a time", "n_predict": 12, "temperature": 0, "stream": True}
    async with serving(gemma) as server, http(server) as ours, theirs(llama_url) as llama:
        prompt_ids, _ = await both(ours, llama, "POST", "/tokenize", {"content": body["prompt"], "add_special": True})
        expected, got = await sse_events(llama, body), await sse_events(ours, body)
    *expected_tokens, expected_last = expected
    *got_tokens, got_last = got
    for event in expected_tokens + got_tokens:
        assert not event["stop"] and len(event["tokens"]) == 1, event
    for a, b in zip(expected_tokens, got_tokens):
        assert not shape_differences(a, b), shape_differences(a, b)
    tokens = [e["tokens"][0] for e in expected_tokens], [e["tokens"][0] for e in got_tokens]
    if tokens[0] != tokens[1]:
        assert_equal_within_a_near_tie(plain, prompt_ids["tokens"], tokens[1], tokens[0])
    else:
        assert [e["content"] for e in got_tokens] == [e["content"] for e in expected_tokens]
    # the last event: the whole answer's fields, without the text and tokens the events carried
    assert expected_last["stop"] and expected_last["content"] == got_last["content"] == ""
    assert expected_last["tokens"] == got_last["tokens"] == []
    assert not shape_differences(expected_last, got_last), shape_differences(expected_last, got_last)


async def test_props_hold_every_field_clients_read_with_its_type(gemma, llama_url):
    async with serving(gemma) as server, http(server) as ours, theirs(llama_url) as llama:
        expected, got = await both(ours, llama, "GET", "/props")
    differences = shape_differences(expected, got)
    assert not differences, differences
    for key in ("total_slots", "model_path", "modalities", "bos_token", "eos_token", "is_sleeping",
                "endpoint_slots", "endpoint_props"):
        assert got[key] == expected[key], key
    assert got["default_generation_settings"]["n_ctx"] == expected["default_generation_settings"]["n_ctx"] == CTX
    # the default settings but those this server chooses otherwise (greedy by default: decision 0018)
    params, theirs_params = got["default_generation_settings"]["params"], expected["default_generation_settings"][
        "params"]
    for key in theirs_params.keys() - {"temperature"}:
        assert same_value(params[key], theirs_params[key]), key
