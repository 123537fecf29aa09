"""Prompts in a batched session: prefixes shared across sequences, and prefill cut into chunks.

A request whose prompt starts with tokens another sequence holds copies
their cells instead of prefilling them, and waits for a sequence that is
prefilling them. Outputs must stay exactly those of lone runs (float32 tiny
model), and the reused counts are derived from the prompts, not from the
library's counters.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import pytest
import trio
from greedy_helpers import collect, first_difference, is_tie_free
from tiny_model_fixtures import tiny_paths, tiny_target  # noqa: F401

import spec_actor
from spec_actor import Done, Eog, Session, Token
from spec_actor._pool import open_pool

N_CTX = 256
N = 16


def _shared_prompts(model: spec_actor.Model, n: int, n_common: int, seed: int) -> list[list[int]]:
    """n prompts: the same n_common tokens, then each its own 5 to 30 tokens.

    Each prompt is drawn again until its plain greedy path of N tokens is
    `is_tie_free`: the outputs are compared exactly with lone runs, and a
    batched sequence's cells may lie in another order than a lone one's
    (rounding noise, docs/decisions/0063). A prompt of seed 21 once parted
    at a margin of 3e-5 between its top two logits.
    """
    rng = random.Random(seed)
    n_vocab = model.info.n_vocab
    common = [rng.randrange(1, n_vocab) for _ in range(n_common)]
    prompts = []
    with Session(model, spec="none", n_ctx=N_CTX, prefix_cache=False, n_threads=1) as plain:
        for _ in range(n):
            for _attempt in range(20):
                own = [rng.randrange(1, n_vocab) for _ in range(rng.randrange(5, 30))]
                while own[0] == common[0]:  # the shared part ends exactly at n_common
                    own[0] = rng.randrange(1, n_vocab)
                if is_tie_free(plain, common + own, N):
                    break
            else:
                raise AssertionError(f"20 tails after seed {seed}'s common part all met a near-tie")
            prompts.append(common + own)
    return prompts


def _alone(model: spec_actor.Model, spec: str, prompt: list[int]) -> list[int]:
    with Session(model, spec=spec, n_ctx=N_CTX, prefix_cache=False, n_threads=1) as session:
        return list(session.run(prompt, max_tokens=N, temp=0.0).tokens)


@pytest.mark.parametrize("spec", ["none", "ngram-simple", "auto"])
async def test_concurrent_prompts_prefill_their_common_prefix_once(tiny_target, spec):  # noqa: F811
    n_common = 120
    prompts = _shared_prompts(tiny_target, 6, n_common, seed=21)
    expected = [_alone(tiny_target, spec, p) for p in prompts]
    got: dict[int, tuple[list[int], Any]] = {}
    async with open_pool(tiny_target, size=6, spec=spec, n_ctx=N_CTX, n_batch=32, n_ubatch=32, memory=0) as pool:
        assert pool.batched

        async def one(i: int) -> None:
            got[i] = await collect(pool, prompts[i], max_tokens=N, temp=0.0)

        async with trio.open_nursery() as nursery:
            for i in range(6):
                nursery.start_soon(one, i)
    for i in range(6):
        tokens, terminal = got[i]
        assert isinstance(terminal, (Done, Eog)), terminal
        assert tokens == expected[i], f"request {i} differs at {first_difference(tokens, expected[i])}"
    # whoever came first prefilled the common tokens; each of the other five copied them
    reused = [got[i][1].stats.prompt_reused for i in range(6)]
    assert sorted(reused) == [0] + [n_common] * 5, reused
    prefilled = sum(got[i][1].stats.prompt_prefilled for i in range(6))
    assert prefilled == sum(len(p) for p in prompts) - 5 * n_common


def test_an_idle_slots_kept_prefix_is_copied_not_prefilled(tiny_target):  # noqa: F811
    prompts = _shared_prompts(tiny_target, 3, 80, seed=5)
    expected = [_alone(tiny_target, "none", p) for p in prompts]
    with Session(tiny_target, spec="none", n_ctx=N_CTX, n_seq=3, n_threads=1) as session:
        first = session.run(prompts[0], seq=0, max_tokens=N, temp=0.0)
        assert first.stats.prompt_reused == 0
        second = session.run(prompts[1], seq=1, max_tokens=N, temp=0.0)
        assert list(second.tokens) == expected[1]
        assert (second.stats.prompt_reused, second.stats.prompt_prefilled) == (80, len(prompts[1]) - 80)
        # forget() drops every slot's kept prefix: nothing is left to copy
        session.forget()
        third = session.run(prompts[2], seq=2, max_tokens=N, temp=0.0)
        assert list(third.tokens) == expected[2]
        assert third.stats.prompt_reused == 0


def test_a_slot_copies_what_its_own_prefix_cache_lacks(tiny_target):  # noqa: F811
    # slot 1 keeps the first 40 tokens of the next prompt; slot 0 holds 90 of them.
    # The order of the runs keeps each sequence's cells in position order: the
    # attention sums run over cells, and a sequence whose later tokens sit in
    # lower cells than its earlier ones rounds differently (noise at a near-tie,
    # as a batch shape is on Gemma; docs/decisions/0063).
    rng = random.Random(8)
    n_vocab = tiny_target.info.n_vocab
    base = [rng.randrange(1, n_vocab) for _ in range(90)]
    mine = base[:40] + [rng.randrange(1, n_vocab) for _ in range(10)]
    theirs = base + [rng.randrange(1, n_vocab) for _ in range(10)]
    nxt = base + [rng.randrange(1, n_vocab) for _ in range(12)]
    with Session(tiny_target, spec="none", n_ctx=N_CTX, n_seq=2, n_threads=1) as session:
        session.run(theirs, seq=0, max_tokens=4, temp=0.0)
        assert session.run(mine, seq=1, max_tokens=4, temp=0.0).stats.prompt_reused == 40
        got = session.run(nxt, seq=1, max_tokens=N, temp=0.0)
        assert list(got.tokens) == _alone(tiny_target, "none", nxt)
        assert got.stats.prompt_reused == 90


def test_no_sharing_without_the_prefix_cache(tiny_target):  # noqa: F811
    prompts = _shared_prompts(tiny_target, 2, 60, seed=9)
    with Session(tiny_target, spec="none", n_ctx=N_CTX, n_seq=2, n_threads=1, prefix_cache=False) as session:
        session.run(prompts[0], seq=0, max_tokens=4, temp=0.0)
        assert session.run(prompts[1], seq=1, max_tokens=4, temp=0.0).stats.prompt_reused == 0


def _steps_while_a_long_prompt_prefills(model: spec_actor.Model, prefill_step_ms: int,
                                        in_first_token_step: bool = False) -> tuple[int, int]:
    """(steps, tokens of the decoding request) from a 240-token prompt's arrival to its first token.

    Slot 0 decodes (plain: one token per step) while slot 1's prompt comes in. With
    ``in_first_token_step`` slot 0's reader holds the step that made its first token until slot 1's
    prompt has been sent, so that the prompt is admitted during that step.
    """
    decoding = threading.Event()
    sent = threading.Event()
    first_token = threading.Event()
    marks: dict[str, int] = {}
    made = [0]

    def count_decoder(events: list[Any]) -> bool:
        made[0] += sum(isinstance(ev, Token) for ev in events)
        if in_first_token_step and not decoding.is_set():
            decoding.set()
            sent.wait(10)
            time.sleep(0.2)  # the prompt's run reaches its admission meanwhile
        decoding.set()
        return True

    def on_long(events: list[Any]) -> bool:
        if not first_token.is_set() and any(isinstance(ev, Token) for ev in events):
            marks["steps"], marks["made"] = session.steps(), made[0]
            first_token.set()
        return True

    rng = random.Random(3)
    long_prompt = [rng.randrange(10, 2000) for _ in range(240)]
    with Session(model, spec="none", n_ctx=512, n_seq=2, n_batch=256, n_ubatch=256,
                 prefill_step_ms=prefill_step_ms, prefix_cache=False) as session:
        decoder = threading.Thread(target=session.run, args=([2, 651, 6037],),
                                   kwargs={"seq": 0, "max_tokens": 400, "temp": 0.0, "on_events": count_decoder})
        decoder.start()
        try:
            assert decoding.wait(60)
            steps0, made0 = session.steps(), made[0]
            sent.set()
            session.run(long_prompt, seq=1, max_tokens=1, temp=0.0, on_events=on_long)
        finally:
            session.cancel(0)
            decoder.join()
    assert first_token.is_set()
    return marks["steps"] - steps0, marks["made"] - made0


def test_a_long_prompt_is_cut_into_chunks_while_another_sequence_decodes(gemma):
    # no cut: the prompt takes one step (n_batch 256 holds it and the other's token)
    steps, _ = _steps_while_a_long_prompt_prefills(gemma, prefill_step_ms=0)
    assert steps <= 3
    # a 1 ms target is below any chunk's time: every step takes the fewest
    # prompt tokens (16), and the decoding sequence makes its token in each
    steps, made = _steps_while_a_long_prompt_prefills(gemma, prefill_step_ms=1)
    assert steps >= 239 // 16 - 1
    assert made >= steps - 2


def test_a_prompt_admitted_in_the_step_of_another_requests_first_token_is_cut(gemma):
    """Since decision 0080 a request's first token comes from the step that read its last prompt chunk,
    the step in which it begins decoding; a prompt its reader sends at once is admitted during that
    step. It came after a decoding sequence all the same, so it is cut to the latency target."""
    steps, made = _steps_while_a_long_prompt_prefills(gemma, prefill_step_ms=1, in_first_token_step=True)
    assert steps >= 239 // 16 - 1
    assert made >= steps - 2


def test_prefill_step_ms_is_checked(tiny_target):  # noqa: F811
    with pytest.raises(spec_actor.ConfigError, match="prefill_step_ms"):
        Session(tiny_target, prefill_step_ms=-1)


@pytest.mark.parametrize("logprobs", [None, 1], ids=["first-token-from-prompt", "first-token-step"])
def test_prompts_that_arrive_together_start_shortest_first_and_first_tokens_wait_for_no_prefill(tiny_target, logprobs):  # noqa: F811
    """Three prompts (30, 600 and 600 tokens) reach the engine in one step, beside a decoding sequence.
    Shortest first, a step takes prompts until it holds 256 of their tokens: the 30 and one 600, then
    the other 600 in a later step. A greedy prompt's first token comes from its last token's row in
    the step that reads it (decision 0080): the first two in one step, the third in the next. With
    logprobs a first token takes a step of its own, which takes no prompt, so that it never waits for
    another prompt's prefill (decision 0071). Counted in engine steps, each first token's step read
    inside it."""
    rng = random.Random(11)
    n_vocab = tiny_target.info.n_vocab
    prompts = {1: [rng.randrange(1, n_vocab) for _ in range(30)],
               2: [rng.randrange(1, n_vocab) for _ in range(600)],
               3: [rng.randrange(1, n_vocab) for _ in range(600)]}
    gate, held = threading.Event(), threading.Event()
    first: dict[int, int] = {}

    def decoder_events(events: list[Any]) -> bool:
        if not gate.is_set():  # hold the step in which the decoder's first token came
            held.set()
            gate.wait(60)
        return True

    def first_token_step(seq: int):
        def on_events(events: list[Any]) -> bool:
            if seq not in first and any(isinstance(ev, Token) for ev in events):
                first[seq] = session.steps()  # inside the step that made it
            return True
        return on_events

    with Session(tiny_target, spec="none", n_ctx=1024, n_seq=4, n_batch=1024, n_ubatch=512, n_threads=1,
                 prefill_step_ms=0, prefix_cache=False) as session:
        decoder = threading.Thread(target=session.run, args=([5, 6, 7],),
                                   kwargs={"seq": 0, "max_tokens": 200, "temp": 0.0, "on_events": decoder_events})
        decoder.start()
        runs = [threading.Thread(target=session.run, args=(prompts[seq],),
                                 kwargs={"seq": seq, "max_tokens": 2, "temp": 0.0, "logprobs": logprobs,
                                         "on_events": first_token_step(seq)}) for seq in prompts]
        try:
            assert held.wait(60)
            for t in runs:
                t.start()
            time.sleep(1.0)  # all three admitted while the held step is under way
            gate.set()
            for t in runs:
                t.join(60)
        finally:
            gate.set()
            session.cancel(0)
            decoder.join(60)
    assert sorted(first) == [1, 2, 3]
    if logprobs is None:
        # the 30 and one 600 (the one admitted first) make their first tokens in the step that reads
        # them, the other 600 in the next
        assert sorted([first[2], first[3]]) == [first[1], first[1] + 1], first
    else:
        # the 30 and one 600 prefill in one step and make their first tokens in the next (no prompt
        # in it); the other 600 prefills in the step after that, its first token one step later
        assert sorted([first[2], first[3]]) == [first[1], first[1] + 2], first


@pytest.mark.parametrize("spec", ["none", "auto"])
def test_a_first_token_from_the_prompts_last_row_gives_a_first_token_steps_output(tiny_target, spec):  # noqa: F811
    """A greedy request takes its first token from its prompt's last row (decision 0080); with logprobs
    it takes it from a step of its own. On the float32 tiny model both give the same whole output, for
    prompts of 1 and 2 tokens, one chunk, and several chunks (n_batch 64): a wrong row, or a last token
    decoded twice or not at all, would change it."""
    rng = random.Random(17)
    n_vocab = tiny_target.info.n_vocab
    with Session(tiny_target, spec=spec, n_ctx=512, n_batch=64, n_ubatch=64, n_threads=1,
                 prefix_cache=False) as session:
        for n_prompt in (1, 2, 37, 64, 65, 200):
            prompt = [rng.randrange(1, n_vocab) for _ in range(n_prompt)]
            steps0 = session.steps()
            from_row = session.run(prompt, max_tokens=24, temp=0.0)
            steps1 = session.steps()
            from_step = session.run(prompt, max_tokens=24, temp=0.0, logprobs=1)
            steps2 = session.steps()
            assert len(from_row.tokens) == 24, n_prompt
            differs_at = first_difference(from_row.tokens, from_step.tokens)
            assert list(from_row.tokens) == list(from_step.tokens), (n_prompt, differs_at)
            if spec == "none":  # one token a step: the engine steps follow from the chunks
                # the prompt's chunks of 64 hold its last token and make the first output token
                assert steps1 - steps0 == -(-n_prompt // 64) + 23, n_prompt
                # the chunks hold all but the last token, which a step of its own decodes
                assert steps2 - steps1 == -(-(n_prompt - 1) // 64) + 24, n_prompt
