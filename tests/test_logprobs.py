"""logprobs: the target model's log-probabilities at each emitted position (issue 22, item 4).

Under speculation a token may come from a drafter, but its logprobs must be
the target's at its position: equal to those of plain decoding (exactly, up
to float rounding, on the float32 tiny model; within the near-tie rule on
Gemma, whose batched and single-token kernels round differently, decision
0019). The values are checked against an independent probe too: the
difference of the two best log-probabilities is the top-1/top-2 logit margin
that `spec_actor.nif.testing.top2` measures with its own forward pass.
"""

from __future__ import annotations

import math

import pytest
from actor_fixtures import REPEATS
from greedy_helpers import GEMMA_NEAR_TIE
from serve_helpers import CTX, http, openai_client, serving
from tiny_model_fixtures import tiny_draft, tiny_paths, tiny_target  # noqa: F401 - fixtures

import spec_actor
from spec_actor import Spec
from spec_actor.nif import testing as nt

TOP = 5

ROUNDING = 1e-3
"""Allowed log-probability difference on the float32 tiny model: the batched kernels of
verification and the one-token ones of plain decoding round differently (up to 3e-4 seen)."""


def _run(model, spec, prompt, n: int, **options) -> tuple[spec_actor.RunResult, list[spec_actor.Token]]:
    events: list[spec_actor.Token] = []
    session = spec_actor.Session(model, spec=spec, n_ctx=CTX, n_threads=1)
    try:
        result = session.run(prompt, max_tokens=n, logprobs=TOP,
                             on_events=lambda evs: events.extend(e for e in evs if type(e) is spec_actor.Token)
                             or True, **options)
    finally:
        session.close()
    return result, events


def test_speculative_logprobs_equal_plain_on_the_tiny_model(tiny_target, tiny_draft):
    prompt = "the cat sat on the mat and the cat"
    plain, plain_tokens = _run(tiny_target, Spec("none"), prompt, 32)
    spec, spec_tokens = _run(tiny_target, Spec("draft-simple", n_draft=4, draft_model=tiny_draft), prompt, 32)
    assert spec.stats.drafts_accepted > 0
    assert spec.tokens == plain.tokens
    for a, b in zip(plain_tokens, spec_tokens, strict=True):
        assert b.logprob == pytest.approx(a.logprob, abs=ROUNDING)
        assert [i for i, _ in b.top_logprobs] == [i for i, _ in a.top_logprobs]
        assert [p for _, p in b.top_logprobs] == pytest.approx([p for _, p in a.top_logprobs], abs=ROUNDING)


def test_logprobs_agree_with_an_independent_margin_probe(tiny_target):
    prompt = "the cat sat on the mat and the cat"
    result, tokens = _run(tiny_target, Spec("none"), prompt, 12)
    session = spec_actor.Session(tiny_target, spec="none", n_ctx=CTX, n_threads=1)
    try:
        context = session.tokenize(prompt)
        for i, tok in enumerate(tokens):
            top1, top2, margin = nt.top2(session._handle, context + list(result.tokens[:i]))
            (id1, lp1), (id2, lp2) = tok.top_logprobs[:2]
            assert (id1, id2) == (top1, top2)
            assert lp1 - lp2 == pytest.approx(margin, abs=1e-3)
            assert tok.id == id1 and tok.logprob == lp1  # greedy: the chosen token is the best one
            assert [p for _, p in tok.top_logprobs] == sorted((p for _, p in tok.top_logprobs), reverse=True)
            assert sum(math.exp(p) for _, p in tok.top_logprobs) <= 1 + 1e-6
    finally:
        session.close()


@pytest.mark.parametrize("speculative", [False, True], ids=["plain", "draft"])
def test_logprobs_after_sampling_are_the_raw_ones_renormalized_over_top_k(tiny_target, tiny_draft, speculative):
    # temperature 1 and top-k alone: the sampler draws from the raw distribution cut to its k best, so its
    # probabilities are the raw top-k renormalized; a run that verifies drafts keeps them for every token
    spec = Spec("draft-simple", n_draft=4, draft_model=tiny_draft) if speculative else Spec("none")
    prompt = "the cat sat on the mat and the cat"
    sampling = {"temp": 1.0, "top_k": TOP, "top_p": 1.0, "min_p": 0.0, "seed": 7}
    raw_result, raw = _run(tiny_target, spec, prompt, 24, **sampling)
    after_result, after = _run(tiny_target, spec, prompt, 24, logprobs_after_sampling=True, **sampling)
    assert after_result.tokens == raw_result.tokens  # the same draws: only what the events carry differs
    if speculative:
        assert after_result.stats.drafts_accepted > 0
    for r, a in zip(raw, after, strict=True):
        z = sum(math.exp(p) for _, p in r.top_logprobs)
        expected = {i: math.exp(p) / z for i, p in r.top_logprobs}
        assert dict((i, math.exp(p)) for i, p in a.top_logprobs) == pytest.approx(expected, rel=1e-4, abs=1e-6)
        assert math.exp(a.logprob) == pytest.approx(expected[a.id], rel=1e-4)


def test_logprobs_after_greedy_sampling_are_the_pick_alone(tiny_target):
    result, tokens = _run(tiny_target, Spec("none"), "the cat sat on the mat and the cat", 8,
                          logprobs_after_sampling=True)
    assert [t.id for t in tokens] == list(result.tokens)
    assert all(t.logprob == 0.0 and t.top_logprobs == ((t.id, 0.0),) for t in tokens)


def test_no_logprobs_unless_asked(tiny_target):
    session = spec_actor.Session(tiny_target, spec="none", n_ctx=CTX, n_threads=1)
    tokens: list[spec_actor.Token] = []
    try:
        session.run("the cat", max_tokens=4, logprobs=0)
        session.run("the cat", max_tokens=4, on_events=lambda evs: tokens.extend(
            e for e in evs if type(e) is spec_actor.Token) or True)
        with pytest.raises(spec_actor.ConfigError, match="logprobs=21"):
            session.run("the cat", max_tokens=4, logprobs=21)
    finally:
        session.close()
    assert tokens and all(t.logprob is None and t.top_logprobs == () for t in tokens)


def _near(a: dict, b: dict) -> bool:
    """Two chat logprob entries agree within Gemma's near-tie allowance."""
    return a["token"] == b["token"] and abs(a["logprob"] - b["logprob"]) < GEMMA_NEAR_TIE


async def test_chat_logprobs_under_auto_equal_plain_within_the_near_tie_rule(gemma):
    messages = [{"role": "user", "content": "Count: " + REPEATS}]
    results = {}
    for spec in ("none", "auto"):
        async with serving(gemma, spec=spec) as server:
            client = openai_client(server)
            whole = await client.chat.completions.create(model="m", messages=messages, max_tokens=24, temperature=0,
                                                         logprobs=True, top_logprobs=TOP)
            chunks = [c async for c in await client.chat.completions.create(
                model="m", messages=messages, max_tokens=24, temperature=0, logprobs=True, top_logprobs=TOP,
                stream=True)]
        streamed = [e.model_dump() for c in chunks if c.choices and c.choices[0].logprobs
                    for e in c.choices[0].logprobs.content]
        entries = [e.model_dump() for e in whole.choices[0].logprobs.content]
        assert streamed == entries or all(_near(a, b) for a, b in zip(streamed, entries, strict=True))
        assert len(entries) == whole.usage.completion_tokens
        assert "".join(e["token"] for e in entries) == whole.choices[0].message.content
        assert all(len(e["top_logprobs"]) == TOP and bytes(e["bytes"]).decode() == e["token"] for e in entries)
        results[spec] = (whole, entries)
    (plain, plain_entries), (auto, auto_entries) = results["none"], results["auto"]
    assert auto.model_extra["timings"]["draft_n"] > 0  # the auto run speculated
    if auto.choices[0].message.content == plain.choices[0].message.content:
        assert all(_near(a, b) for a, b in zip(plain_entries, auto_entries, strict=True))
    else:  # a near-tie flipped a token: everything before it agrees, and there the two were close
        i = next(i for i, (a, b) in enumerate(zip(plain_entries, auto_entries)) if a["token"] != b["token"])
        assert all(_near(a, b) for a, b in zip(plain_entries[:i], auto_entries[:i]))
        assert abs(plain_entries[i]["top_logprobs"][0]["logprob"]
                   - plain_entries[i]["top_logprobs"][1]["logprob"]) < GEMMA_NEAR_TIE


async def test_completion_logprobs_in_openais_legacy_shape(gemma):
    async with serving(gemma) as server:
        client = openai_client(server)
        whole = await client.completions.create(model="m", prompt=REPEATS, max_tokens=8, temperature=0, logprobs=3)
        chunks = [c async for c in await client.completions.create(
            model="m", prompt=REPEATS, max_tokens=8, temperature=0, logprobs=3, stream=True)]
    lp = whole.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 8
    assert "".join(lp.tokens) == whole.choices[0].text
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(8)]
    assert all(len(top) == 3 and max(top.values()) >= p - 1e-9 for top, p in zip(lp.top_logprobs, lp.token_logprobs))
    streamed = [t for c in chunks if c.choices[0].logprobs for t in c.choices[0].logprobs.tokens]
    assert streamed == lp.tokens


@pytest.mark.parametrize(("path", "body", "param"), [
    ("/v1/chat/completions", {"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ("/v1/chat/completions", {"logprobs": True, "top_logprobs": -1}, "top_logprobs"),
    ("/v1/chat/completions", {"top_logprobs": 2}, "top_logprobs"),
    ("/v1/chat/completions", {"logprobs": 3}, "logprobs"),
    ("/v1/completions", {"logprobs": 21}, "logprobs"),
    ("/v1/completions", {"logprobs": "yes"}, "logprobs"),
])
async def test_bad_logprobs_are_a_400_naming_the_field(gemma, path, body, param):
    base = {"messages": [{"role": "user", "content": "hi"}]} if "chat" in path else {"prompt": "hi"}
    async with serving(gemma) as server, http(server) as client:
        response = await client.post(path, json=base | body | {"max_tokens": 2})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param
