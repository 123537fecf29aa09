"""A shared KV cache (``kv_unified``, llama-server's ``--kv-unified``): docs/decisions/0113.

With ``kv_unified=True`` a batched session's ``n_ctx`` is one cache its
sequences share, and any one of them may fill it (up to
``kv_unified_per_slot``). A step that finds the cache full first drops the
prefixes idle sequences keep, then ends the most recently admitted request
with a clear error; the others go on. Every request that finishes must give
what the same greedy request gives alone on a plain session of its own, on
the float32 tiny model: exactly. End-of-generation tokens are banned, so
each request runs to its max_tokens.
"""

from __future__ import annotations

import math
import random
from typing import Any

import httpx
import pytest
import trio
from greedy_helpers import collect
from serve_helpers import TIMEOUT, error_of, http, serving, start_cli_server
from tiny_model_fixtures import (  # noqa: F401
    hybrid_model_without_mtp,
    mtp_model,
    tiny_draft,
    tiny_paths,
    tiny_target,
)

import spec_actor
from spec_actor import ConfigError, Done, Error, PromptError, Session, Token
from spec_actor._pool import open_pool

N_CTX = 256  # a multiple of 256: llama.cpp pads a cache to one
SA_ERR_DECODE = 16
FULL = "context size has been exceeded"


def _no_eog(model: spec_actor.Model) -> dict[int, float]:
    """A logit bias that bans every end-of-generation token, so a request runs to its max_tokens."""
    return {t: -math.inf for t in range(model.info.n_vocab) if model.tokenizer.is_eog(t)}


def _prompt(model: spec_actor.Model, n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1, model.info.n_vocab) for _ in range(n)]


def _alone(model: spec_actor.Model, prompt: list[int], max_tokens: int) -> list[int]:
    """The request's tokens on a fresh plain session of its own."""
    with Session(model, spec="none", n_ctx=N_CTX, prefix_cache=False, n_threads=1) as session:
        return list(session.run(prompt, max_tokens=max_tokens, temp=0.0, logit_bias=_no_eog(model)).tokens)


def _unified(model: spec_actor.Model, size: int, spec: spec_actor.Spec | str = "none", **options: Any) -> Any:
    return open_pool(model, size=size, spec=spec, n_ctx=N_CTX, kv_unified=True, n_batch=64, n_ubatch=64,
                     memory=0, n_threads=1, **options)


async def test_one_sequence_may_use_the_whole_shared_cache(tiny_target):  # noqa: F811
    prompt = _prompt(tiny_target, 4, seed=1)
    expected = _alone(tiny_target, prompt, 200)
    async with _unified(tiny_target, 4) as pool:
        assert pool.batched and pool.actors[0].n_ctx == N_CTX
        got, terminal = await collect(pool, prompt, max_tokens=200, temp=0.0, logit_bias=_no_eog(tiny_target))
        held, available = pool.kv_cells()
    # 204 cells, where a per-sequence cache would give each of 4 sequences 64
    assert isinstance(terminal, Done) and got == expected and len(got) == 200
    # the utilization gauge counts the shared cache once: its kept prompt and reply (all but the last token) of 256
    assert (held, available) == (len(prompt) + len(got) - 1, N_CTX)


# Greedy output is the same under any spec: the drafting ones re-verify the
# draft of the step whose decode found the cache full, and a draft context
# (draft model, MTP) has room beyond the target's cells. The hybrid's
# attention cache fills beside its recurrent states.
@pytest.mark.parametrize("kind", ["none", "ngram-simple", "draft-simple", "mtp", "hybrid"])
async def test_a_full_cache_ends_only_the_newest_request_and_the_pool_goes_on(
        kind, tiny_target, tiny_draft, mtp_model, hybrid_model_without_mtp):  # noqa: F811
    model = {"hybrid": hybrid_model_without_mtp, "mtp": mtp_model}.get(kind, tiny_target)
    spec = {"draft-simple": spec_actor.Spec("draft-simple", draft_model=tiny_draft),
            "mtp": spec_actor.Spec("mtp", n_draft=3), "hybrid": "none"}.get(kind, kind)
    # A (100 + 30 tokens) and B (60 + 120) fit alone, not together: 100 + 179 > 256 cells.
    a, b, c = _prompt(model, 100, seed=2), _prompt(model, 60, seed=3), _prompt(model, 4, seed=4)
    expected_a, expected_c = _alone(model, a, 30), _alone(model, c, 200)
    bias = _no_eog(model)
    async with _unified(model, 2, spec=spec, stream_buffer=1) as pool:
        assert pool.batched
        async with pool.stream_events(a, max_tokens=30, temp=0.0, logit_bias=bias) as events_a:
            got_a = []
            async for ev in events_a:  # A's prompt is in; unread, A's sequence pauses holding its cells
                if isinstance(ev, Token):
                    got_a.append(ev.id)
                    break
            got_b, terminal_b = await collect(pool, b, max_tokens=120, temp=0.0, logit_bias=bias)
            async for ev in events_a:
                if isinstance(ev, Token):
                    got_a.append(ev.id)
                elif isinstance(ev, (Done, Error)):
                    terminal_a = ev
        # B, admitted last, ended with the cause and what to change; A went on as if alone
        assert isinstance(terminal_b, Error) and terminal_b.code == SA_ERR_DECODE
        assert FULL in terminal_b.reason.lower() and "raise n_ctx" in terminal_b.reason
        assert len(got_b) < 120
        assert isinstance(terminal_a, Done) and got_a == expected_a
        # the pool is usable: a request that needs more than the cells B left takes them
        got_c, terminal_c = await collect(pool, c, max_tokens=200, temp=0.0, logit_bias=bias)
    assert isinstance(terminal_c, Done) and got_c == expected_c


def test_idle_prefixes_are_dropped_before_any_request_ends(tiny_target):  # noqa: F811
    first, second = _prompt(tiny_target, 4, seed=5), _prompt(tiny_target, 4, seed=6)
    expected = _alone(tiny_target, second, 200)
    bias = _no_eog(tiny_target)
    with Session(tiny_target, spec="none", n_ctx=N_CTX, n_seq=2, kv_unified=True, n_threads=1) as session:
        session.run(first, seq=0, max_tokens=150, temp=0.0, logit_bias=bias)
        kept, _ = session.kv_cells(0)
        assert kept > N_CTX - 204  # sequence 0 keeps its prefix: too many cells for the next request beside it
        result = session.run(second, seq=1, max_tokens=200, temp=0.0, logit_bias=bias)
        assert list(result.tokens) == expected and result.status == "done"
        assert session.kv_cells(0)[0] == 0  # its prefix made the room


async def test_the_per_slot_cap_bounds_each_sequence(tiny_target):  # noqa: F811
    prompt = _prompt(tiny_target, 4, seed=7)
    expected = _alone(tiny_target, prompt, 100)
    async with _unified(tiny_target, 2, kv_unified_per_slot=48) as pool:
        assert pool.actors[0].n_ctx == 48
        got, terminal = await collect(pool, prompt, max_tokens=100, temp=0.0, logit_bias=_no_eog(tiny_target))
        with pytest.raises(PromptError, match="48"):
            await pool.generate(_prompt(tiny_target, 48, seed=8), max_tokens=1)
    # the sequence's 48 positions hold the prompt and the tokens made: it stops there, as a full context
    assert isinstance(terminal, Done) and len(got) == 48 - len(prompt) and got == expected[:len(got)]


@pytest.mark.parametrize(("options", "field"), [
    ({"kv_unified_per_slot": 64}, "kv_unified"),
    ({"kv_unified": True, "kv_unified_per_slot": 8}, "kv_unified_per_slot"),
    ({"kv_unified": "yes"}, "kv_unified"),
])
def test_bad_shared_cache_options_are_refused(tiny_target, options, field):  # noqa: F811
    with pytest.raises(ConfigError, match=field):
        Session(tiny_target, spec="none", n_ctx=N_CTX, n_seq=2, **options)


async def test_the_server_answers_500_for_the_request_it_ends_and_200_in_full_for_the_others(tiny_target):  # noqa: F811
    # three requests of 4 + 100 tokens may share 256 cells or not, as they overlap: each one either
    # gets all its tokens, the same as alone, or llama-server's 500
    prompt = _prompt(tiny_target, 4, seed=9)
    body = {"prompt": prompt, "n_predict": 100, "ignore_eos": True, "temperature": 0, "return_tokens": True}
    async with serving(tiny_target, pool=3, n_ctx=N_CTX, kv_unified=True) as server, http(server) as client:
        answers: list[httpx.Response] = []

        async def one() -> None:
            answers.append(await client.post("/completion", json=body))

        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(one)
        alone = (await client.post("/completion", json=body)).json()
        props = (await client.get("/props")).json()
    assert props["default_generation_settings"]["n_ctx"] == N_CTX
    assert alone["timings"]["predicted_n"] == 100
    assert alone["tokens"] == _alone(tiny_target, prompt, 100)
    for answer in answers:
        if answer.status_code == 200:
            assert answer.json()["tokens"] == alone["tokens"]
        else:
            assert answer.status_code == 500 and FULL in answer.json()["error"]["message"].lower()


@pytest.mark.parametrize(("argv", "n_ctx", "options"), [
    (["--pool", "4", "-kvu"], 4096, {"kv_unified": True}),
    (["--pool", "4", "--kv-unified", "-c", "256"], 256, {"kv_unified": True}),
    # the per-slot cap implies a shared cache, and without -c sizes it to --pool times the cap, as llama-server's
    (["--pool", "4", "--kv-unified-per-slot", "96"], 384, {"kv_unified": True, "kv_unified_per_slot": 96}),
    (["--pool", "4", "--kv-unified-per-slot", "96", "-c", "256"], 256,
     {"kv_unified": True, "kv_unified_per_slot": 96}),
    (["--pool", "4", "-c", "256"], 256, {}),
])
def test_serve_flags_choose_the_shared_cache(argv, n_ctx, options):
    from spec_actor.cli import build_parser
    from spec_actor.cli._serve import _shared_cache

    args = build_parser().parse_args(["serve", *argv])
    got: dict[str, Any] = {}
    assert (_shared_cache(args, got), got) == (n_ctx, options)


def test_the_cli_serves_a_shared_cache_with_its_per_slot_cap():
    proc, url = start_cli_server("--pool", "2", "--spec", "none", "--kv-unified-per-slot", "200")
    try:
        props = httpx.get(f"{url}/props", timeout=TIMEOUT).json()
        slots = httpx.get(f"{url}/slots", timeout=TIMEOUT).json()
        # a request may hold more than -c 256 over 2 slots, up to the cap: prompt and 150 tokens
        body = {"prompt": "Once upon a time", "n_predict": 150, "ignore_eos": True, "temperature": 0}
        long = httpx.post(f"{url}/completion", json=body, timeout=TIMEOUT).json()
        over = httpx.post(f"{url}/completion", json=body | {"prompt": "word " * 220}, timeout=TIMEOUT)
    finally:
        proc.terminate()
        proc.wait(TIMEOUT)
    assert props["default_generation_settings"]["n_ctx"] == 200 and [s["n_ctx"] for s in slots] == [200, 200]
    assert long["timings"]["predicted_n"] == 150
    assert over.status_code == 400 and error_of(over)["n_ctx"] == 200
