"""llama-server's several prompts and ``n_cmpl`` on ``POST /completion``, and ``truncated`` at the context's end.

Expected texts come from the library's own actor (a lone greedy run of each
prompt with the test servers' settings); with one sequence in the pool the
prompts run one after the other, each as on a fresh actor.
"""

from __future__ import annotations

from actor_fixtures import QUESTION, STORY, fresh_greedy
from serve_helpers import CTX, error_of, http, serving, sse_data

from spec_actor.serve._native import MAX_PROMPTS

PROMPT = "I believe the meaning of life is"


async def test_several_prompts_answer_an_array_in_order(gemma):
    tok = gemma.tokenizer
    ids = tok.encode(PROMPT)
    expected = [await fresh_greedy(gemma, p, 6, n_ctx=CTX, n_threads=1) for p in (PROMPT, STORY, QUESTION)]
    async with serving(gemma, prefix_cache=False) as server, http(server) as client:
        # ids, a text and llama-server's object: three prompts, three answers
        whole = (await client.post("/completion", json={
            "prompt": [ids, STORY, {"prompt_string": QUESTION}], "n_predict": 6, "return_tokens": True})).json()
        async with client.stream("POST", "/completion", json={"prompt": [PROMPT, STORY], "n_predict": 6,
                                                              "stream": True}) as response:
            events = sse_data([line async for line in response.aiter_lines()])
        # one prompt in an array of one is one answer, not an array
        single = (await client.post("/completion", json={"prompt": [ids], "n_predict": 6})).json()
    assert isinstance(whole, list) and [a["index"] for a in whole] == [0, 1, 2]
    assert [a["content"] for a in whole] == expected
    assert [a["tokens_evaluated"] for a in whole] == [len(ids), len(tok.encode(STORY)), len(tok.encode(QUESTION))]
    assert [a["prompt"] for a in whole] == ["<bos>" + PROMPT, "<bos>" + STORY, "<bos>" + QUESTION]
    assert all(a["stop_type"] == "limit" and a["tokens_predicted"] == 6 for a in whole)
    assert isinstance(single, dict) and single["content"] == expected[0]
    # a stream: each event names its prompt's index; each prompt's pieces make its text, then its last event
    for index in (0, 1):
        mine = [e for e in events if e["index"] == index]
        assert "".join(e["content"] for e in mine[:-1]) == expected[index]
        assert [e["stop"] for e in mine] == [False] * 6 + [True]
        assert mine[-1]["tokens_predicted"] == 6


async def test_n_cmpl_gives_each_prompt_that_many_completions(gemma):
    async with serving(gemma, pool=2) as server, http(server) as client:
        whole = (await client.post("/completion", json={"prompt": [PROMPT, STORY], "n_cmpl": 2, "n_predict": 4,
                                                        "temperature": 0.9, "seed": 7})).json()
        alias = (await client.post("/completion", json={"prompt": PROMPT, "n": 2, "n_predict": 4})).json()
    # n_cmpl completions of the first prompt, then of the second
    assert [a["index"] for a in whole] == [0, 1, 2, 3]
    assert [a["tokens_evaluated"] for a in whole] == [len(gemma.tokenizer.encode(p)) for p in (PROMPT,) * 2 + (STORY,) * 2]
    # a set seed is seed + the completion's place among its prompt's, as llama-server seeds its child tasks
    assert [a["generation_settings"]["seed"] for a in whole] == [7, 8, 7, 8]
    assert isinstance(alias, list) and len(alias) == 2


async def test_truncated_says_the_context_ended_the_generation(gemma):
    n_ctx = 256  # the smallest context an actor opens
    prompt = gemma.tokenizer.encode(STORY)
    async with serving(gemma, n_ctx=n_ctx) as server, http(server) as client:
        body = {"prompt": STORY, "ignore_eos": True}
        unbounded = (await client.post("/completion", json=body | {"n_predict": -1})).json()
        beyond = (await client.post("/completion", json=body | {"n_predict": n_ctx})).json()
        within = (await client.post("/completion", json=body | {"n_predict": 5})).json()
    # as llama-server without --context-shift: the generation stops once the prompt and the tokens generated
    # fill the context, and says so
    for answer in (unbounded, beyond):
        assert (answer["truncated"], answer["stop_type"]) == (True, "limit")
        assert len(prompt) + answer["timings"]["predicted_n"] == n_ctx
    assert (within["truncated"], within["stop_type"], within["tokens_predicted"]) == (False, "limit", 5)


async def test_bad_prompt_arrays_and_n_cmpl_get_a_400_naming_the_field(gemma):
    n_vocab = gemma.info.n_vocab
    async with serving(gemma, pool=2) as server, http(server) as client:
        cases = [
            ({"prompt": [[1, 2], 5]}, "prompt[0]"), ({"prompt": ["x", 5.5]}, "prompt[1]"), ({"prompt": [[1, n_vocab]]}, "prompt[0][1]"),
            ({"prompt": ["x", []]}, "prompt[1]"), ({"prompt": [[1], {"text": "x"}]}, "prompt[1].prompt_string"),
            ({"prompt": [[1]] * (MAX_PROMPTS + 1)}, "prompt"),
            ({"prompt": "x", "n_cmpl": 3}, "n_cmpl"), ({"prompt": "x", "n_cmpl": 0}, "n_cmpl"),
            ({"prompt": "x", "n_cmpl": "2"}, "n_cmpl"), ({"prompt": "x", "n": 3}, "n"),
        ]
        for body, param in cases:
            error = error_of(await client.post("/completion", json=body | {"n_predict": 2}))
            assert error["param"] == param and error["message"], (body, error)
        # a prompt of the array too long for the context: llama-server's error, naming it
        error = error_of(await client.post("/completion", json={"prompt": ["x", [5] * (CTX + 1)]}))
        assert (error["type"], error["param"], error["n_prompt_tokens"]) == ("exceed_context_size_error", "prompt[1]",
                                                                            CTX + 1)
