"""llama-server's native ``POST /completion`` on ``spec-actor serve``, with httpx against a real server.

Expected texts come from the library's own actor with the test servers'
settings; field shapes from llama-server's README and server-task.cpp.
"""

from __future__ import annotations

import json

import jsonschema
from actor_fixtures import QUESTION, STORY
from serve_helpers import CTX, error_of, http, serving, sse_data, wait_for

from spec_actor import open_actor

PROMPT = "I believe the meaning of life is"
_expected: dict[tuple[str, int], str] = {}


async def greedy(model, prompt: str, n: int) -> str:
    """Greedy text of a fresh actor with the test servers' settings (cached)."""
    if (prompt, n) not in _expected:
        async with open_actor(model, spec="none", n_ctx=CTX, n_threads=1) as actor:
            _expected[(prompt, n)] = await actor.generate(prompt, max_tokens=n)
    return _expected[(prompt, n)]


async def stream_events(client, body: dict) -> tuple[list, list[str]]:
    async with client.stream("POST", "/completion", json=body | {"stream": True}) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        lines = [line async for line in response.aiter_lines()]
    return sse_data(lines), lines


async def test_whole_and_streamed_answers_carry_llama_servers_fields(gemma):
    expected = await greedy(gemma, PROMPT, 8)
    n_prompt = len(gemma.tokenizer.encode(PROMPT))
    # no prefix cache: each request runs as on a fresh actor, so greedy texts are equal (decision 0031)
    async with serving(gemma, prefix_cache=False) as server, http(server) as client:
        whole = (await client.post("/completion", json={"prompt": PROMPT, "n_predict": 8,
                                                          "return_tokens": True})).json()
        plain = (await client.post("/completions", json={"prompt": PROMPT, "max_tokens": 8})).json()
        events, lines = await stream_events(client, {"prompt": PROMPT, "n_predict": 8})
    assert whole["content"] == expected == plain["content"]
    assert gemma.tokenizer.decode(whole["tokens"]) == expected and len(whole["tokens"]) == 8
    assert plain["tokens"] == [] and "completion_probabilities" not in whole
    assert (whole["stop"], whole["stop_type"], whole["stopping_word"], whole["truncated"]) == (True, "limit", "", False)
    # the context holds the prompt and every token but the last, which was sampled, never evaluated
    assert (whole["tokens_predicted"], whole["tokens_evaluated"], whole["tokens_cached"]) == (8, n_prompt, n_prompt + 7)
    assert whole["timings"]["predicted_n"] == 8 and whole["timings"]["prompt_n"] == n_prompt
    assert whole["timings"]["cache_n"] == 0 and whole["speculative_decoding"]["num_draft_tokens"] == 0
    assert whole["prompt"] == "<bos>" + PROMPT and whole["model"] == "gemma-3-270m-q4_k_m"
    assert whole["has_new_line"] == ("\n" in expected)
    settings = whole["generation_settings"]
    assert (settings["n_predict"], settings["temperature"], settings["stream"], settings["speculative.types"]) == \
        (8, 0.0, False, "none")
    # the stream: one event per token with its id, then the whole answer's fields; no [DONE]
    *pieces, last = events
    assert "[DONE]" not in events and not any("DONE" in line for line in lines)
    assert len(pieces) == 8 and all(p["stop"] is False and len(p["tokens"]) == 1 for p in pieces)
    assert "".join(p["content"] for p in pieces) == expected
    assert [p["tokens"][0] for p in pieces] == whole["tokens"]
    assert [p["tokens_predicted"] for p in pieces] == list(range(1, 9))
    assert last["stop"] is True and last["content"] == "" and last["tokens"] == []
    assert last["stop_type"] == "limit" and last["timings"]["predicted_n"] == 8
    assert last["generation_settings"]["stream"] is True


async def test_prompts_as_tokens_mixed_and_objects_run_the_same_tokens(gemma):
    ids = gemma.tokenizer.encode(PROMPT)  # with BOS, as llama-server's /tokenize add_special gives it
    async with serving(gemma, prefix_cache=False) as server, http(server) as client:
        answers = []
        # text; ids; a batch of one; llama-server's object; one text in an array; the BOS id, then a text
        # (which gets no second BOS): the same tokens every time
        for prompt in (PROMPT, ids, [ids], {"prompt_string": PROMPT}, [PROMPT], [ids[0], PROMPT]):
            answers.append((await client.post("/completion", json={"prompt": prompt, "n_predict": 6})).json())
        special = (await client.post("/completion", json={"prompt": "<start_of_turn>user\nHi<end_of_turn>\n",
                                                            "n_predict": 1})).json()
    assert len({a["content"] for a in answers}) == 1 and answers[0]["content"] == await greedy(gemma, PROMPT, 6)
    assert {a["tokens_evaluated"] for a in answers} == {len(ids)}
    # control-token text in the prompt is parsed into control tokens, as llama-server does
    assert special["tokens_evaluated"] == len(gemma.tokenizer.encode("<start_of_turn>user\nHi<end_of_turn>\n",
                                                                      parse_special=True))
    assert special["tokens_evaluated"] < len(gemma.tokenizer.encode("<start_of_turn>user\nHi<end_of_turn>\n"))


async def test_n_probs_whole_and_streamed(gemma):
    async with serving(gemma, prefix_cache=False) as server, http(server) as client:
        whole = (await client.post("/completion", json={"prompt": PROMPT, "n_predict": 5, "n_probs": 4,
                                                          "return_tokens": True})).json()
        events, _ = await stream_events(client, {"prompt": PROMPT, "n_predict": 5, "n_probs": 4})
    probs = whole["completion_probabilities"]
    assert [p["id"] for p in probs] == whole["tokens"]
    for p in probs:
        assert p["logprob"] <= 0 and bytes(p["bytes"]) == gemma.tokenizer.piece(p["id"], special=True)
        assert len(p["top_logprobs"]) == 4 and p["top_logprobs"][0]["id"] == p["id"]  # greedy: the likeliest
        assert p["top_logprobs"][0]["logprob"] == p["logprob"]
        assert [a["logprob"] for a in p["top_logprobs"]] == sorted((a["logprob"] for a in p["top_logprobs"]),
                                                                   reverse=True)
    streamed = [e["completion_probabilities"] for e in events[:-1]]
    assert all(len(s) == 1 for s in streamed) and [s[0] for s in streamed] == probs
    assert whole["generation_settings"]["n_probs"] == 4


async def test_stop_types_grammar_and_json_schema(gemma):
    expected = await greedy(gemma, STORY, 12)
    cut = expected.index(" ", 2)
    word = expected[cut:cut + 3]
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
    async with serving(gemma, prefix_cache=False) as server, http(server) as client:
        stopped = (await client.post("/completion", json={"prompt": STORY, "n_predict": 12, "stop": [word]})).json()
        eos = (await client.post("/completion", json={"prompt": QUESTION, "n_predict": 20, "return_tokens": True,
                                                        "grammar": 'root ::= "yes" | "no"'})).json()
        shaped = (await client.post("/completion", json={"prompt": QUESTION, "n_predict": 40,
                                                           "json_schema": schema})).json()
        sampled = (await client.post("/completion", json={"prompt": QUESTION, "n_predict": 4, "temperature": 0.7,
                                                            "top_k": 5, "seed": 11, "repeat_last_n": 32,
                                                            "samplers": ["top_k", "top_p", "min_p", "temperature"],
                                                            "mirostat": 0, "typical_p": 1.0, "cache_prompt": False,
                                                            "dry_base": 1.75, "n_keep": -1})).json()
    assert stopped["content"] == expected[:cut] and stopped["stop_type"] == "word"
    assert stopped["stopping_word"] == word
    assert eos["content"] in ("yes", "no") and eos["stop_type"] == "eos"
    # as llama-server: the end-of-generation token is predicted and listed, and it never enters the context
    *text_tokens, last = eos["tokens"]
    assert gemma.tokenizer.decode(text_tokens) == eos["content"] and gemma.tokenizer.is_eog(last)
    assert eos["tokens_predicted"] == eos["timings"]["predicted_n"] == len(text_tokens) + 1
    assert eos["tokens_cached"] == eos["tokens_evaluated"] + len(text_tokens)
    assert eos["generation_settings"]["grammar"] == 'root ::= "yes" | "no"'
    jsonschema.validate(json.loads(shaped["content"]), schema)
    settings = sampled["generation_settings"]
    assert (settings["temperature"], settings["top_k"], settings["seed"], settings["repeat_last_n"]) == \
        (0.7, 5, 11, 32)
    assert sampled["tokens_predicted"] == 4


async def test_response_fields_pick_and_unnest(gemma):
    async with serving(gemma) as server, http(server) as client:
        picked = (await client.post("/completion", json={
            "prompt": PROMPT, "n_predict": 3, "response_fields": ["content", "generation_settings/n_predict",
                                                                  "timings/predicted_n", "no/such"]})).json()
        whole = (await client.post("/completion", json={"prompt": PROMPT, "n_predict": 3,
                                                         "response_fields": []})).json()
    # an empty list is the whole answer, as llama-server's
    assert whole["content"] == picked["content"] and whole["generation_settings"]["n_predict"] == 3
    assert set(picked) == {"content", "generation_settings/n_predict", "timings/predicted_n"}
    assert picked["generation_settings/n_predict"] == 3 == picked["timings/predicted_n"]
    assert picked["content"] == await greedy(gemma, PROMPT, 3)


async def test_a_hang_up_cancels_a_native_stream(gemma):
    async with serving(gemma) as server, http(server) as client:
        actor = server.pool.actors[0]
        async with client.stream("POST", "/completion", json={"prompt": STORY, "n_predict": -1,
                                                                "stream": True}) as response:
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    break  # hang up after the first token
        await wait_for(lambda: server.state.cancellations and not actor.busy)
        after = await client.post("/completion", json={"prompt": "Hi", "n_predict": 2})
    assert server.state.cancellations[-1].reason == "hangup"
    assert after.status_code == 200 and after.json()["tokens_predicted"] == 2


async def test_bad_native_bodies_get_a_4xx_naming_the_field(gemma):
    n_vocab = gemma.info.n_vocab
    async with serving(gemma, max_body=8192) as server, http(server) as client:
        cases = [
            ({}, "prompt"), ({"prompt": 5}, "prompt"), ({"prompt": None}, "prompt"), ({"prompt": []}, "prompt"),
            ({"prompt": [1, 2.5]}, "prompt[1]"), ({"prompt": [1, False]}, "prompt[1]"),
            ({"prompt": [1, n_vocab]}, "prompt[1]"), ({"prompt": [-3]}, "prompt[0]"),
            ({"prompt": [[1, 2], [3, n_vocab]]}, "prompt[1][1]"), ({"prompt": {"text": "x"}}, "prompt.prompt_string"),
            ({"prompt": {"prompt_string": "x", "multimodal_data": ["AAAA"]}}, "prompt"),
            ({"prompt": "x", "n_predict": "8"}, "n_predict"), ({"prompt": "x", "n_predict": 0}, "n_predict"),
            ({"prompt": "x", "n_predict": -2}, "n_predict"), ({"prompt": "x", "max_tokens": 1.5}, "max_tokens"),
            ({"prompt": "x", "stream": "yes"}, "stream"), ({"prompt": "x", "cache_prompt": 1}, "cache_prompt"),
            ({"prompt": "x", "n_probs": 99}, "n_probs"), ({"prompt": "x", "n_probs": "3"}, "n_probs"),
            ({"prompt": "x", "logprobs": -1}, "logprobs"),
            ({"prompt": "x", "return_tokens": "no"}, "return_tokens"),
            ({"prompt": "x", "temperature": "hot"}, "temperature"), ({"prompt": "x", "top_k": 1.5}, "top_k"),
            ({"prompt": "x", "seed": -7}, "seed"), ({"prompt": "x", "repeat_last_n": "all"}, "repeat_last_n"),
            ({"prompt": "x", "mirostat": 2}, "mirostat"), ({"prompt": "x", "typical_p": 0.5}, "typical_p"),
            ({"prompt": "x", "dry_multiplier": 0.8}, "dry_multiplier"), ({"prompt": "x", "dry_base": "b"}, "dry_base"),
            ({"prompt": "x", "ignore_eos": 1}, "ignore_eos"),
            ({"prompt": "x", "post_sampling_probs": True}, "post_sampling_probs"),
            ({"prompt": "x", "n_cmpl": 3}, "n_cmpl"), ({"prompt": "x", "n": 2}, "n"),
            ({"prompt": "x", "samplers": ["temperature", "top_k"]}, "samplers"),
            ({"prompt": "x", "samplers": ["nucleus"]}, "samplers"), ({"prompt": "x", "samplers": "kt"}, "samplers"),
            ({"prompt": "x", "lora": [{"id": 0, "scale": 1}]}, "lora"),
            ({"prompt": "x", "logit_bias": [[15043, "up"]]}, "logit_bias[0]"),
            ({"prompt": "x", "grammar": "root ::= ("}, "grammar"), ({"prompt": "x", "grammar": 5}, "grammar"),
            ({"prompt": "x", "json_schema": "object"}, "json_schema"),
            ({"prompt": "x", "json_schema": {"type": "object"}, "grammar": "root ::= \"a\""}, "json_schema"),
            ({"prompt": "x", "json_schema": {"type": "nonsense"}}, "json_schema"),
            ({"prompt": "x", "stop": [1]}, "stop"), ({"prompt": "x", "response_fields": [1]}, "response_fields"),
            ({"prompt": "x", "dry_sequence_breakers": "\n"}, "dry_sequence_breakers"),
        ]
        for body, param in cases:
            for streamed in ({"stream": False}, {"stream": True}):
                error = error_of(await client.post("/completion", json=streamed | body))
                assert error["param"] == param and error["message"], (body, error)
        # a prompt longer than the context: llama-server's type and counts
        long_ids = [5] * (CTX + 3)
        error = error_of(await client.post("/completion", json={"prompt": long_ids}))
        assert (error["type"], error["n_ctx"], error["n_prompt_tokens"]) == ("exceed_context_size_error", CTX, CTX + 3)
        # more token ids than --max-body holds: a 413 before any parsing
        assert error_of(await client.post("/completion", json={"prompt": [5] * 5000}), 413)["code"] == \
            "request_too_large"
        assert error_of(await client.post("/completion", content=b"[1, 2"))["code"] == "invalid_json"
        assert error_of(await client.get("/completion"), 405)["code"] == "method_not_allowed"
        assert (await client.post("/completion", json={"prompt": "Hi", "n_predict": 1})).status_code == 200



async def test_llama_servers_top_level_json_schema_applies_on_the_openai_routes_too(gemma):
    schema = {"type": "object", "properties": {"colour": {"type": "string", "maxLength": 12}}, "required": ["colour"]}
    messages = [{"role": "user", "content": "What colour is the sky? Answer in JSON."}]
    async with serving(gemma) as server, http(server) as client:
        chat = (await client.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 40,
                                                                 "json_schema": schema})).json()
        text = (await client.post("/v1/completions", json={"prompt": QUESTION, "max_tokens": 40,
                                                            "json_schema": schema})).json()
        both = await client.post("/v1/completions", json={"prompt": QUESTION, "json_schema": schema,
                                                           "response_format": {"type": "json_object"}})
    jsonschema.validate(json.loads(chat["choices"][0]["message"]["content"]), schema)
    jsonschema.validate(json.loads(text["choices"][0]["text"]), schema)
    assert error_of(both)["param"] == "json_schema"


async def test_timings_count_the_prompt_tokens_evaluated_apart_from_those_reused(gemma):
    body = {"prompt": STORY, "n_predict": 2}
    async with serving(gemma) as server, http(server) as client:  # the prefix cache on, as by default
        first = (await client.post("/completion", json=body)).json()
        second = (await client.post("/completion", json=body)).json()
        openai_route = (await client.post("/v1/completions", json={"prompt": STORY, "max_tokens": 2})).json()
    n_prompt = len(gemma.tokenizer.encode(STORY))
    assert (first["timings"]["prompt_n"], first["timings"]["cache_n"]) == (n_prompt, 0)
    # as llama-server: prompt_n counts what was evaluated, cache_n what the cache held
    for answer in (second, openai_route):
        timings = answer["timings"]
        assert timings["cache_n"] > 0
        assert timings["prompt_n"] + timings["cache_n"] == n_prompt
