"""Prompts and helpers shared by the actor, stream and pool tests.

The model comes from the session-scoped ``gemma`` fixture of conftest.py.
"""

from __future__ import annotations

import functools
from typing import Any

import trio

from spec_actor import Model
from spec_actor._actor import GenerationActor, open_actor

STORY = "Once upon a time, in a small village by the sea, there lived an old fisherman named"
QUESTION = "The three primary colors are"
REPEATS = "1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3,"
PARAGRAPH = (
    "The harbour was quiet in the early morning. Fishing boats rocked gently at their moorings, "
    "gulls circled above the grey water, and the smell of salt and tar hung in the cool air. "
    "Along the quay, old men mended nets and talked about the weather, the price of fish and "
    "the storms of years gone by. "
)

_fresh: dict[tuple[Any, ...], str] = {}


async def fresh_greedy(model: Model, prompt: str, max_tokens: int, **ctx: Any) -> str:
    """Plain greedy output of a freshly opened actor (cached per arguments; spec "none" unless given)."""
    ctx.setdefault("spec", "none")
    key = (id(model), prompt, max_tokens, tuple(sorted(ctx.items())))
    if key not in _fresh:
        async with open_actor(model, **ctx) as actor:
            _fresh[key] = await actor.generate(prompt, max_tokens=max_tokens)
    return _fresh[key]


async def greedy_after(model: Model, earlier: str, prompt: str, max_tokens: int, **ctx: Any) -> str:
    """Plain greedy output of ``prompt`` on a fresh actor whose one earlier request was ``earlier`` (one token).

    What an actor gives after an earlier request, cancelled or not: the
    prefix cache holds the common start of the two prompts, so the new
    prompt's prefill has the same batch shape here as there. A fresh actor's
    prefill, one token longer, may round a near-tie the other way on Gemma
    (decision 0031).
    """
    ctx.setdefault("spec", "none")
    async with open_actor(model, **ctx) as actor:
        await actor.generate(earlier, max_tokens=1)
        return await actor.generate(prompt, max_tokens=max_tokens)


@functools.lru_cache(maxsize=4)
def long_prompt(model: Model, n_tokens: int = 3000) -> str:
    """A prompt of at least ``n_tokens`` tokens: a paragraph repeated."""
    per = len(model.tokenizer.encode(PARAGRAPH, add_special=False))
    reps = n_tokens // per
    while len(model.tokenizer.encode(PARAGRAPH * reps)) < n_tokens:
        reps += 1
    return PARAGRAPH * reps


async def wait_idle(actor: GenerationActor, timeout: float = 60.0) -> None:
    """Wait until the actor's native loop is not running (fails after a generous ``timeout``)."""
    with trio.fail_after(timeout):
        while actor.busy or actor.session.last_stats().running:
            await trio.sleep(0.002)
