"""``logit_bias`` and ``ignore_eos`` on ``spec-actor serve``, through httpx and the openai SDK against a real server.

Expected outputs are derived from the plain model's own log-probabilities,
not from the biased sampler: at each position of a banned run, the token
generated must be the most likely token that is not banned, given the
tokens before it (teacher-forced, within Gemma's near-tie allowance,
decision 0031); a token pushed up by a large bias must win every position.
"""

from __future__ import annotations

from greedy_helpers import GEMMA_NEAR_TIE, top_logprobs
from serve_helpers import error_of, http, openai_client, serving

from spec_actor import Session
from spec_actor.serve._logit_bias import MAX_LOGIT_BIAS

PROMPT = "I believe the meaning of life is"


def assert_best_allowed(plain: Session, prompt: list[int], got: list[int], banned: set[int]) -> None:
    """Each token of ``got`` is, after the prompt and the tokens before it, the plain model's best unbanned token.

    Two tokens within the near-tie margin of each other may swap.
    """
    for i, token in enumerate(got):
        assert token not in banned, (i, token)
        top = top_logprobs(plain, prompt + got[:i])
        allowed = {t: p for t, p in top.items() if t not in banned}
        best = max(allowed.values())
        assert token in allowed and best - allowed[token] < GEMMA_NEAR_TIE, (i, token, allowed)


async def test_a_banned_token_never_comes_and_each_token_is_the_best_one_left(gemma):
    tok = gemma.tokenizer
    prompt = tok.encode(PROMPT)
    with Session(gemma, spec="none", n_ctx=256, prefix_cache=False) as plain:
        plain_ids = list(plain.run(prompt, max_tokens=6, temp=0.0).tokens)
        banned = {plain_ids[0], plain_ids[1]}  # the two first tokens plain greedy picks
        async with serving(gemma, prefix_cache=False) as server, http(server) as client:
            # llama-server's array form with ids and `false`, its text form, and OpenAI's object form
            as_ids = (await client.post("/completion", json={
                "prompt": PROMPT, "n_predict": 6, "return_tokens": True,
                "logit_bias": [[t, False] for t in banned]})).json()
            as_object = (await client.post("/completion", json={
                "prompt": PROMPT, "n_predict": 6, "return_tokens": True,
                "logit_bias": {str(t): -1e9 for t in banned}})).json()
            text = tok.decode([plain_ids[0]])
            as_text = (await client.post("/completion", json={
                "prompt": PROMPT, "n_predict": 6, "return_tokens": True, "logit_bias": [[text, False]]})).json()
        assert as_ids["tokens"] == as_object["tokens"] and len(as_ids["tokens"]) == 6
        assert_best_allowed(plain, prompt, as_ids["tokens"], banned)
        text_banned = set(tok.encode(text, add_special=False))
        assert_best_allowed(plain, prompt, as_text["tokens"], text_banned)
    # generation_settings lists the biases as llama-server does: a ban's bias is null (its -inf)
    assert sorted(as_ids["generation_settings"]["logit_bias"], key=lambda e: e["token"]) == \
        [{"bias": None, "token": t} for t in sorted(banned)]
    assert as_ids["generation_settings"]["ignore_eos"] is False


async def test_a_large_bias_makes_one_token_win_every_position_on_every_route(gemma):
    tok = gemma.tokenizer
    (banana,) = tok.encode(" banana", add_special=False)
    piece = tok.decode([banana])
    async with serving(gemma) as server, http(server) as client:
        native = (await client.post("/completion", json={"prompt": PROMPT, "n_predict": 5,
                                                         "logit_bias": [[banana, 100]]})).json()
        client_sdk = openai_client(server)
        chat = await client_sdk.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Hi"}], max_tokens=5, logit_bias={str(banana): 100})
        text = await client_sdk.completions.create(model="m", prompt=PROMPT, max_tokens=5,
                                                   logit_bias={str(banana): 100})
    assert native["content"] == chat.choices[0].message.content == text.choices[0].text == piece * 5
    assert native["generation_settings"]["logit_bias"] == [{"bias": 100.0, "token": banana}]


async def test_ignore_eos_bans_every_end_of_generation_token(gemma):
    tok = gemma.tokenizer
    eog = {t for t in range(gemma.info.n_vocab) if tok.is_eog(t)}
    eos = int(gemma.meta("tokenizer.ggml.eos_token_id"))
    assert eos in eog
    prompt = tok.encode(PROMPT)
    pushed = {"prompt": PROMPT, "n_predict": 24, "return_tokens": True, "logit_bias": [[eos, 50]]}
    async with serving(gemma, prefix_cache=False) as server, http(server) as client:
        ends = (await client.post("/completion", json=pushed)).json()
        on = (await client.post("/completion", json=pushed | {"ignore_eos": True})).json()
    # pushed up, the end of sequence comes first; ignore_eos bans it all the same, as llama-server adds the
    # end-of-generation tokens' -inf after the request's biases
    assert (ends["stop_type"], ends["content"], ends["tokens"]) == ("eos", "", [eos])
    assert (on["stop_type"], on["tokens_predicted"], on["generation_settings"]["ignore_eos"]) == ("limit", 24, True)
    listed = on["generation_settings"]["logit_bias"]
    assert listed[0] == {"bias": 50.0, "token": eos}
    assert sorted(e["token"] for e in listed[1:]) == sorted(eog) and all(e["bias"] is None for e in listed[1:])
    with Session(gemma, spec="none", n_ctx=256, prefix_cache=False) as plain:
        assert_best_allowed(plain, prompt, on["tokens"], eog)


async def test_bad_logit_bias_and_ignore_eos_get_a_400_naming_the_entry(gemma):
    n_vocab = gemma.info.n_vocab
    async with serving(gemma) as server, http(server) as client:
        cases = [
            ("x", "logit_bias"), (5, "logit_bias"), ([[1]], "logit_bias[0]"), ([1, 2], "logit_bias[0]"),
            ([[1, -1], [n_vocab, 1]], "logit_bias[1]"), ([[-1, 1]], "logit_bias[0]"), ([[1, True]], "logit_bias[0]"),
            ([[1, "x"]], "logit_bias[0]"), ([[None, 1]], "logit_bias[0]"), ([["", 1]], "logit_bias[0]"),
            ([[1, 1e31]], "logit_bias[0]"), ({"-5": 1}, "logit_bias['-5']"), ({"1": None}, "logit_bias['1']"),
            ({str(n_vocab): 1}, f"logit_bias['{n_vocab}']"),
            ([[1, 1]] * (MAX_LOGIT_BIAS + 1), "logit_bias"),
        ]
        for route, base in (("/completion", {"prompt": "x"}), ("/v1/completions", {"prompt": "x"}),
                            ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]})):
            for value, param in cases:
                error = error_of(await client.post(route, json=base | {"max_tokens": 2, "logit_bias": value}))
                assert error["param"] == param and error["message"], (route, value, error)
            error = error_of(await client.post(route, json=base | {"max_tokens": 2, "ignore_eos": "yes"}))
            assert error["param"] == "ignore_eos"
        assert (await client.post("/completion", json={"prompt": "x", "n_predict": 1,
                                                       "logit_bias": {}})).status_code == 200
