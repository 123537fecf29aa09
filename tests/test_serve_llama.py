"""llama-server's own routes on ``spec-actor serve``: tokens, templates, properties, slots, aliases.

Each test talks to a real server over HTTP with httpx. Expected values come
from the model's own tokenizer and template, loaded separately.
"""

from __future__ import annotations

import functools

import trio
from actor_fixtures import QUESTION, REPEATS
from serve_helpers import CTX, error_of, http, serving, wait_for

import spec_actor

CHAT = [{"role": "system", "content": "Answer in one short sentence."},
        {"role": "user", "content": "What colour is the sky on a clear day?"}]
UNICODE = "This is a test string with unicode 媽 and emoji 🤗, and <start_of_turn> as text"


async def test_unprefixed_aliases_answer_as_the_v1_routes(gemma):
    body = {"messages": CHAT, "max_tokens": 8, "temperature": 0}
    # no prefix cache: both run as on a fresh actor, so their greedy texts are equal (decision 0031)
    async with serving(gemma, prefix_cache=False) as server, http(server) as client:
        v1 = (await client.post("/v1/chat/completions", json=body)).json()
        bare = (await client.post("/chat/completions", json=body)).json()
        models, v1_models = (await client.get("/models")).json(), (await client.get("/v1/models")).json()
        health = await client.get("/v1/health")
    assert bare["choices"] == v1["choices"] and bare["usage"] == v1["usage"]
    assert bare["object"] == "chat.completion" and bare["id"] != v1["id"]
    assert models == v1_models and models["data"][0]["id"] == "gemma-3-270m-q4_k_m"
    assert health.json() == {"status": "ok"}


async def test_tokenize_and_detokenize_round_trip_through_the_models_tokenizer(gemma):
    tok = gemma.tokenizer
    async with serving(gemma) as server, http(server) as client:
        plain = (await client.post("/tokenize", json={"content": UNICODE})).json()
        special = (await client.post("/tokenize", json={"content": UNICODE, "add_special": True,
                                                          "parse_special": False})).json()
        pieces = (await client.post("/tokenize", json={"content": UNICODE, "with_pieces": True})).json()
        mixed = (await client.post("/tokenize", json={"content": [2, "Hello", 108, " world"],
                                                        "add_special": True})).json()
        back = (await client.post("/detokenize", json={"tokens": plain["tokens"]})).json()
        with_bos = (await client.post("/detokenize", json={"tokens": special["tokens"]})).json()
        empty = (await client.post("/detokenize", json={"tokens": []})).json()
    # llama-server's defaults: no BOS, special-token text parsed
    assert plain["tokens"] == tok.encode(UNICODE, add_special=False, parse_special=True)
    assert special["tokens"] == tok.encode(UNICODE, add_special=True, parse_special=False)
    assert special["tokens"][0] == 2 and 2 not in plain["tokens"]
    assert [p["id"] for p in pieces["tokens"]] == plain["tokens"]
    for entry in pieces["tokens"]:
        raw = tok.piece(entry["id"], special=True)
        assert entry["piece"] == (raw.decode() if isinstance(entry["piece"], str) else list(raw))
    assert b"".join(bytes(p["piece"]) if isinstance(p["piece"], list) else p["piece"].encode()
                    for p in pieces["tokens"]) == UNICODE.encode()
    # a leading text gets BOS, a text after an id does not
    assert mixed["tokens"] == [2, *tok.encode("Hello", add_special=False, parse_special=True), 108,
                               *tok.encode(" world", add_special=False, parse_special=True)]
    assert back == {"content": UNICODE} and with_bos == {"content": "<bos>" + UNICODE} and empty == {"content": ""}


async def test_apply_template_and_input_tokens_match_what_a_chat_runs(gemma):
    async with serving(gemma) as server, http(server) as client:
        applied = (await client.post("/apply-template", json={"messages": CHAT})).json()
        counted = (await client.post("/chat/completions/input_tokens", json={"messages": CHAT})).json()
        v1_counted = (await client.post("/v1/chat/completions/input_tokens", json={"messages": CHAT})).json()
        ran = (await client.post("/v1/chat/completions", json={"messages": CHAT, "max_tokens": 1})).json()
    assert applied == {"prompt": gemma.apply_chat_template(CHAT)}
    assert counted == v1_counted == {"object": "response.input_tokens",
                                     "input_tokens": len(gemma.tokenize_chat(CHAT))}
    assert counted["input_tokens"] == ran["usage"]["prompt_tokens"]


async def test_props_describe_the_server(gemma):
    async with serving(gemma, pool=2, spec="ngram-mod") as server, http(server) as client:
        props = (await client.get("/props")).json()
    settings = props["default_generation_settings"]
    assert settings["n_ctx"] == CTX and props["total_slots"] == 2
    params = settings["params"]
    assert (params["temperature"], params["top_k"], params["n_predict"], params["stream"]) == (0.0, 40, -1, False)
    assert params["speculative.types"] == props["speculative"]["type"] == "ngram-mod"
    assert props["model_path"] == gemma.path and props["model_alias"] == "gemma-3-270m-q4_k_m"
    assert (props["bos_token"], props["eos_token"], props["chat_template"]) == ("<bos>", "<eos>", "gemma")
    assert props["build_info"] == f"spec_actor {spec_actor.__version__}" and props["is_sleeping"] is False
    assert props["modalities"] == {"vision": False, "video": False, "audio": False}


async def test_slots_are_the_pools_sequences_with_their_speculation(gemma):
    async with serving(gemma, pool=2, spec="ngram-mod") as server, http(server) as client:
        idle = (await client.get("/slots")).json()
        done = await client.post("/v1/completions", json={"prompt": REPEATS, "max_tokens": 48, "temperature": 0})
        after = (await client.get("/slots")).json()
        stats = [actor.stats() for actor in server.pool.actors]
    assert [s["id"] for s in idle] == [0, 1] and not any(s["is_processing"] for s in idle)
    assert all(s["n_ctx"] == CTX and s["speculative"] and s["spec"] == "ngram-mod" for s in idle)
    assert [s["requests"] for s in idle] == [0, 0] and sorted(s["requests"] for s in after) == [0, 1]
    assert done.status_code == 200
    for slot, snap in zip(after, stats):
        figures = slot["speculative_decoding"]
        assert figures["num_draft_tokens"] == slot["timings"]["draft_n"] == snap.drafts_generated
        assert figures["num_accepted_draft_tokens"] == slot["timings"]["draft_n_accepted"] == snap.drafts_accepted
        assert slot["timings"]["predicted_n"] == snap.tokens_emitted
        assert slot["n_prompt_tokens"] == snap.prompt_tokens
    ran = next(s for s in after if s["requests"])
    assert ran["timings"]["predicted_n"] == 48 and ran["speculative_decoding"]["num_draft_tokens"] > 0


async def test_slots_report_a_running_request_and_fail_on_no_slot(gemma):
    async with serving(gemma) as server, http(server) as client:
        actor = server.pool.actors[0]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(functools.partial(client.post, "/v1/completions", json={
                "prompt": QUESTION, "max_tokens": 400, "temperature": 0, "stream": True}))
            await wait_for(lambda: actor.busy)
            busy = (await client.get("/slots")).json()
            refused = await client.get("/slots", params={"fail_on_no_slot": "1"})
            nursery.cancel_scope.cancel()
        await wait_for(lambda: not actor.busy)
        free = await client.get("/slots", params={"fail_on_no_slot": "1"})
    assert busy[0]["is_processing"] is True
    assert refused.status_code == 503 and refused.json()["error"]["type"] == "unavailable_error"
    assert free.status_code == 200 and free.json()[0]["is_processing"] is False


async def test_bad_input_on_the_new_routes_is_a_4xx_naming_the_field(gemma):
    n_vocab = gemma.info.n_vocab
    async with serving(gemma, max_body=4096) as server, http(server) as client:
        cases = [
            ("/tokenize", {}, "content"),
            ("/tokenize", {"content": 5}, "content"),
            ("/tokenize", {"content": ["a", 1.5]}, "content[1]"),
            ("/tokenize", {"content": ["a", True]}, "content[1]"),
            ("/tokenize", {"content": ["a", n_vocab]}, "content[1]"),
            ("/tokenize", {"content": [-1]}, "content[0]"),
            ("/tokenize", {"content": "a", "with_pieces": "yes"}, "with_pieces"),
            ("/tokenize", {"content": "a", "add_special": 1}, "add_special"),
            ("/tokenize", {"content": "a", "parse_special": []}, "parse_special"),
            ("/detokenize", {}, "tokens"),
            ("/detokenize", {"tokens": "1 2 3"}, "tokens"),
            ("/detokenize", {"tokens": [1, "2"]}, "tokens[1]"),
            ("/detokenize", {"tokens": [1, 10 ** 12]}, "tokens[1]"),
            ("/detokenize", {"tokens": [3, -5]}, "tokens[1]"),
            ("/apply-template", {"messages": "hi"}, "messages"),
            ("/apply-template", {"messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role"),
            ("/apply-template", {"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
            ("/chat/completions/input_tokens", {"messages": [{"role": "user"}], "tools": "x"}, "tools"),
            ("/chat/completions/input_tokens", {}, "messages"),
        ]
        for path, body, param in cases:
            error = error_of(await client.post(path, json=body))
            assert error["param"] == param and error["message"], (path, body, error)
        for path in ("/tokenize", "/detokenize", "/apply-template", "/chat/completions/input_tokens"):
            assert "JSON object" in error_of(await client.post(path, json=[1, 2]))["message"]
            assert error_of(await client.post(path, content=b"{"))["code"] == "invalid_json"
            # more token ids than --max-body holds: a 413 before any parsing
            huge = await client.post(path, json={"tokens": [1] * 3000, "content": [1] * 3000})
            assert error_of(huge, 413)["code"] == "request_too_large"
            assert error_of(await client.get(path), 405)["code"] == "method_not_allowed"
        for path in ("/props", "/slots"):
            assert error_of(await client.post(path, json={}), 405)["code"] == "method_not_allowed"
        assert (await client.get("/health")).status_code == 200


async def test_the_new_routes_need_the_key_and_health_does_not(gemma):
    async with serving(gemma, api_key="k") as server, http(server) as client:
        refused = [await client.post(p, json={"content": "a", "tokens": [1], "messages": CHAT})
                   for p in ("/tokenize", "/detokenize", "/apply-template", "/chat/completions/input_tokens",
                             "/chat/completions")]
        refused += [await client.get(p) for p in ("/props", "/slots", "/models")]
        allowed = await client.post("/tokenize", json={"content": "a"}, headers={"x-api-key": "k"})
        open_ = [await client.get(p) for p in ("/health", "/v1/health", "/metrics")]
    assert all(r.status_code == 401 and r.json()["error"]["type"] == "authentication_error" for r in refused)
    assert allowed.status_code == 200 and all(r.status_code == 200 for r in open_)


async def test_an_unexpected_failure_is_a_json_500_and_the_server_goes_on(gemma, monkeypatch):
    from spec_actor import ConfigError
    from spec_actor.serve import _llama

    def broken(*args):
        raise KeyError("a bug")

    def refused(*args):
        raise ConfigError("content=... is invalid: a library check")

    async with serving(gemma) as server, http(server) as client:
        monkeypatch.setattr(_llama, "_tokenize", broken)
        bug = await client.post("/tokenize", json={"content": "a"})
        monkeypatch.setattr(_llama, "_tokenize", refused)
        library = await client.post("/tokenize", json={"content": "a"})
        monkeypatch.undo()
        after = await client.post("/tokenize", json={"content": "a"})
    assert error_of(bug, 500) == {"message": "internal error: KeyError", "type": "server_error", "param": None,
                                  "code": None}
    assert error_of(library)["message"] == "content=... is invalid: a library check"
    assert after.status_code == 200 and after.json()["tokens"] == gemma.tokenizer.encode("a", add_special=False)
