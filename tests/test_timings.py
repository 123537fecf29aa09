"""Speculation visible per response: ``timings`` and ``speculative_decoding`` (issue 22, item 5).

The accepted draft tokens are counted independently of the native counter:
the native loop hands over one batch of events per step, and a step emits
its accepted draft tokens plus the target's own token, so a step's accepted
drafts are its batch's tokens minus one (the last step of an ``Eog`` run
emits no token of its own: the end-of-generation token is not emitted). A
fresh `Session` with the same deterministic drafter (``ngram-mod``) and
settings runs the same greedy request as a fresh server; its text must equal
the server's, so its steps are the server's.
"""

from __future__ import annotations

import pytest
from actor_fixtures import REPEATS
from serve_helpers import CTX, http, openai_client, serving

import spec_actor
from spec_actor._stats import DRAFTER_NAMES

MAX_TOKENS = 48


def _count_by_steps(model, prompt: str) -> tuple[str, int, int]:
    """(text, tokens, accepted draft tokens counted from the per-step batches) of a fresh session."""
    steps: list[list[spec_actor.Event]] = []
    session = spec_actor.Session(model, spec="ngram-mod", n_ctx=CTX, n_threads=1)
    try:
        result = session.run(prompt, max_tokens=MAX_TOKENS, on_events=lambda evs: steps.append(list(evs)) or True)
    finally:
        session.close()
    accepted = 0
    for batch in steps:
        n = sum(type(ev) is spec_actor.Token for ev in batch)
        accepted += n if type(batch[-1]) is spec_actor.Eog else n - 1
    assert sum(len([ev for ev in b if type(ev) is spec_actor.Token]) for b in steps) == len(result.tokens)
    return result.text, len(result.tokens), accepted


async def test_draft_n_accepted_equals_the_count_from_the_steps(gemma):
    text, n_tokens, accepted = _count_by_steps(gemma, REPEATS)
    assert accepted > 0  # the prompt repeats: ngram-mod drafts and the target accepts
    async with serving(gemma, spec="ngram-mod") as server, http(server) as client:
        response = await client.post("/v1/completions", json={"prompt": REPEATS, "max_tokens": MAX_TOKENS,
                                                               "temperature": 0})
    body = response.json()
    assert body["choices"][0]["text"] == text
    timings, spec = body["timings"], body["speculative_decoding"]
    assert timings["draft_n_accepted"] == accepted
    assert spec["num_accepted_draft_tokens"] == accepted
    assert timings["predicted_n"] == body["usage"]["completion_tokens"] == n_tokens
    assert timings["prompt_n"] == body["usage"]["prompt_tokens"] == len(gemma.tokenizer.encode(REPEATS))
    assert timings["draft_n"] == spec["num_draft_tokens"] >= accepted
    assert [d["name"] for d in spec["drafters"]] == ["ngram-mod"]
    steps = spec["num_spec_steps"]
    assert steps == spec["drafters"][0]["steps"] > 0
    assert spec["mean_acceptance_length"] == pytest.approx(1 + accepted / steps)


async def test_stream_final_chunk_carries_timings_that_agree_with_the_stream(gemma):
    text, n_tokens, accepted = _count_by_steps(gemma, REPEATS)
    async with serving(gemma, spec="ngram-mod") as server:
        chunks = [c async for c in await openai_client(server).completions.create(
            model="m", prompt=REPEATS, max_tokens=MAX_TOKENS, temperature=0, stream=True,
            stream_options={"include_usage": True})]
    *pieces, closing, usage = chunks
    assert "".join(c.choices[0].text for c in pieces) == text
    assert len(pieces) == n_tokens  # one chunk per token (all of them have text here)
    for final in (closing, usage):
        timings = final.model_extra["timings"]
        assert timings["draft_n_accepted"] == accepted
        assert timings["predicted_n"] == usage.usage.completion_tokens == n_tokens
        assert final.model_extra["speculative_decoding"]["num_accepted_draft_tokens"] == accepted
    assert closing.choices[0].finish_reason == "length"


async def test_every_chat_response_carries_timings_under_auto(gemma):
    messages = [{"role": "user", "content": "Count from one to ten."}]
    async with serving(gemma, spec="auto") as server:
        client = openai_client(server)
        whole = await client.chat.completions.create(model="m", messages=messages, max_tokens=24, temperature=0)
        chunks = [c async for c in await client.chat.completions.create(
            model="m", messages=messages, max_tokens=24, temperature=0, stream=True)]
    for final, n in ((whole, whole.usage.completion_tokens),
                     (chunks[-1], sum(bool(c.choices[0].delta.content) for c in chunks))):
        timings, spec = final.model_extra["timings"], final.model_extra["speculative_decoding"]
        assert timings["predicted_n"] == n
        assert timings["draft_n_accepted"] == spec["num_accepted_draft_tokens"] <= timings["draft_n"]
        assert timings["predicted_ms"] > 0 and timings["predicted_per_second"] > 0
        assert {d["name"] for d in spec["drafters"]} <= set(DRAFTER_NAMES) - {"none"}
    assert all(c.model_extra.get("timings") is None for c in chunks[:-1])
