"""``n`` choices on ``/v1/completions`` and ``/v1/chat/completions``: one sequence of the pool each.

Expected texts come from the library's own actor (a lone greedy run of the
same prompt); choices run as several sequences of one batched decode and
copy the prompt's cells from each other, so on Gemma a choice may part from
the lone run at a logit near-tie (decision 0031), which `greedy_helpers`
judges.
"""

from __future__ import annotations

import functools

from actor_fixtures import QUESTION, STORY, fresh_greedy
from greedy_helpers import assert_equal_within_a_near_tie
from serve_helpers import CTX, error_of, http, metric, metrics, openai_client, serving, sse_data, wait_for

from spec_actor import Session
from spec_actor._tools import chat_prompt
from spec_actor.serve import ServeLimits

N = 3


def _plain(gemma) -> Session:
    return Session(gemma, spec="none", n_ctx=256, prefix_cache=False)


def _assert_near(gemma, plain: Session, prompt: str, got: str, expected: str) -> None:
    encode = functools.partial(gemma.tokenizer.encode, add_special=False)
    assert_equal_within_a_near_tie(plain, prompt, encode(got), encode(expected))


async def test_greedy_choices_each_equal_a_lone_greedy_run(gemma):
    expected = await fresh_greedy(gemma, STORY, 10, n_ctx=CTX, n_threads=1)
    n_prompt = len(gemma.tokenizer.encode(STORY))
    async with serving(gemma, pool=N) as server:
        client = openai_client(server)
        before = server.pool.stats()
        whole = await client.completions.create(model="m", prompt=STORY, max_tokens=10, temperature=0, n=N)
        after = server.pool.stats()
    assert [c.index for c in whole.choices] == list(range(N))
    assert all(c.finish_reason == "length" for c in whole.choices)
    with _plain(gemma) as plain:
        for choice in whole.choices:
            _assert_near(gemma, plain, STORY, choice.text, expected)
    # the prompt counts once, the completions of every choice add up
    assert (whole.usage.prompt_tokens, whole.usage.completion_tokens) == (n_prompt, N * 10)
    # the choices ran as N requests of the pool; the prompt was evaluated once, the others copied its cells
    # (each still decodes the prompt's last token itself, to sample its first token)
    assert after.requests - before.requests == N
    assert after.prompt_tokens - before.prompt_tokens == N * n_prompt
    assert after.prompt_prefilled - before.prompt_prefilled == n_prompt + (N - 1)


async def test_chat_choices_whole_and_streamed_agree(gemma):
    messages = [{"role": "user", "content": "Name a colour."}]
    async with serving(gemma, pool=2) as server:
        client = openai_client(server)
        whole = await client.chat.completions.create(model="m", messages=messages, max_tokens=8, temperature=0, n=2)
        chunks = [c async for c in await client.chat.completions.create(
            model="m", messages=messages, max_tokens=8, temperature=0, n=2, stream=True,
            stream_options={"include_usage": True})]
    *pieces, usage = chunks
    # every chunk carries one choice, named by its index; each choice opens with its role and closes once
    assert all(len(c.choices) == 1 and c.choices[0].index in (0, 1) for c in pieces)
    by_index = {i: [c.choices[0] for c in pieces if c.choices[0].index == i] for i in (0, 1)}
    streamed = {}
    for i, parts in by_index.items():
        assert parts[0].delta.role == "assistant"
        assert [p.finish_reason for p in parts[:-1]] == [None] * (len(parts) - 1)
        assert parts[-1].finish_reason == whole.choices[i].finish_reason
        streamed[i] = "".join(p.delta.content or "" for p in parts)
    assert usage.choices == [] and usage.usage.prompt_tokens == whole.usage.prompt_tokens
    assert usage.usage.completion_tokens == whole.usage.completion_tokens
    assert [c.index for c in whole.choices] == [0, 1]
    context, _, _ = chat_prompt(gemma, messages, {})  # the prompt tokens the server ran
    with _plain(gemma) as plain:
        for i in (0, 1):
            _assert_near(gemma, plain, context, streamed[i], whole.choices[i].message.content)
            _assert_near(gemma, plain, context, whole.choices[i].message.content, whole.choices[0].message.content)


async def test_sampled_choices_with_a_seed(gemma):
    async with serving(gemma, pool=N) as server:
        client = openai_client(server)
        whole = await client.completions.create(model="m", prompt=QUESTION, max_tokens=12, temperature=1.5, top_p=1,
                                                seed=1234, n=N, logprobs=0)
    assert [c.index for c in whole.choices] == list(range(N))
    tokens = [c.logprobs.tokens for c in whole.choices]
    assert all(tokens) and whole.usage.completion_tokens == sum(map(len, tokens))
    # each choice has a seed of its own (seed + index, as llama-server seeds its child tasks)
    assert len({c.text for c in whole.choices}) > 1


async def test_streamed_completion_choices_reassemble_to_the_whole(gemma):
    async with serving(gemma, pool=2) as server, http(server) as client:
        body = {"prompt": QUESTION, "max_tokens": 8, "temperature": 0, "n": 2}
        whole = (await client.post("/v1/completions", json=body)).json()
        chunks = [c async for c in await openai_client(server).completions.create(model="m", stream=True, **body)]
    texts = {i: "".join(c.choices[0].text for c in chunks if c.choices[0].index == i) for i in (0, 1)}
    assert {len(c.choices) for c in chunks} == {1}
    ends = [(c.choices[0].index, c.choices[0].finish_reason) for c in chunks if c.choices[0].finish_reason]
    assert sorted(ends) == [(i, whole["choices"][i]["finish_reason"]) for i in (0, 1)]
    with _plain(gemma) as plain:
        for i in (0, 1):
            _assert_near(gemma, plain, QUESTION, texts[i], whole["choices"][i]["text"])


async def test_bad_n_is_a_400_naming_n(gemma):
    async with serving(gemma, pool=2) as server, http(server) as client:
        for n in (0, -1, "x", 2.5, True, 3):
            for path, body in (("/v1/completions", {"prompt": "hi"}),
                               ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})):
                error = error_of(await client.post(path, json=body | {"n": n}), 400)
                assert error["param"] == "n", (path, n, error)
        too_many = error_of(await client.post("/v1/completions", json={"prompt": "hi", "n": 3}), 400)
        assert "at most 2" in too_many["message"]
    async with serving(gemma, pool=2, limits=ServeLimits(max_choices=1)) as server, http(server) as client:
        error = error_of(await client.post("/v1/completions", json={"prompt": "hi", "n": 2}), 400)
        assert error["param"] == "n" and "at most 1" in error["message"]


async def test_a_hangup_stops_every_choice(gemma):
    async with serving(gemma, pool=2) as server, http(server) as client:
        body = {"prompt": STORY, "max_tokens": 400, "temperature": 0, "stream": True, "n": 2}
        async with client.stream("POST", "/v1/completions", json=body) as response:
            got = []
            async for line in response.aiter_lines():
                got += sse_data([line])
                if {c["choices"][0]["index"] for c in got} == {0, 1}:
                    break  # both choices are generating; leaving the block closes the connection
        await wait_for(lambda: len(server.state.cancellations) == 2)
        records = list(server.state.cancellations)
        assert {r.reason for r in records} == {"hangup"}
        assert not any(a.busy for a in server.pool.actors)
        assert all(r.tokens_after < 400 for r in records)
        values = await metrics(client)
        assert metric(values, "request_success_total", finished_reason="abort") == 1  # one request
