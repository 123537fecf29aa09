"""Checks shared by the tests that compare speculative output with plain greedy output.

The central check is *teacher-forced equality* (`disputed_positions`):
plain greedy decoding is run from the prompt and compared with the
speculative output token by token. At each disagreement the position is
counted as disputed and plain decoding restarts from the prompt plus the
speculative output up to and including the disputed token, so every later
position is judged on the context the speculative run actually had. A
64-token run with two bugs therefore reports two disputes, not one.

An end-of-generation is part of the compared sequence (as `EOG`), so a run
that stops early, or runs on where plain decoding stopped, is disputed too.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import spec_actor
from spec_actor import Session
from spec_actor.nif import testing as nt

EOG = -1
"""Stands for the end-of-generation token in compared sequences."""

GEMMA_NEAR_TIE = 0.75
"""Largest top-1/top-2 logit margin of Gemma 3 270M Q4_K_M treated as a near-tie.

The largest batch-versus-single-token margin difference measured, 0.60, plus
a quarter for the tail a few hundred samples miss
(docs/decisions/0019-near-tie-threshold-from-measured-noise.md;
test_lossless.py::test_gemma_batch_vs_single_noise_is_below_the_near_tie_threshold
re-measures it). The float32 tiny models get no allowance at all."""


def greedy(session: Session, prompt: str | Sequence[int], n: int = 32, **options) -> spec_actor.RunResult:
    """One greedy run of ``n`` tokens at most."""
    return session.run(prompt, max_tokens=n, temp=0.0, **options)


def assert_consistent(result: spec_actor.RunResult, n_max: int) -> None:
    """The run ended normally and its counters agree with each other and with its tokens."""
    s = result.stats
    assert result.status in ("done", "eog")
    assert s.drafts_accepted <= s.drafts_generated
    assert s.tokens_emitted == len(result.tokens)
    assert 0 < len(result.tokens) <= n_max
    assert sum(s.accepted_per_pos) == s.drafts_accepted
    assert sum(s.drafted_per_pos) == s.drafts_generated
    # every step yields one sampled token plus its accepted drafts (the last
    # step may be cut by max_tokens or end at an end-of-generation token)
    assert s.iters <= s.tokens_emitted + 1
    assert s.tokens_emitted <= s.iters + s.drafts_accepted


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first differing token, or None if the sequences are equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def top_logprobs(plain: Session, context: Sequence[int]) -> dict[int, float]:
    """The plain model's 20 most likely next tokens after ``context``, with their log-probabilities.

    These are the target's raw logits (a grammar on the run being judged
    does not apply), so they show every token that competed there.
    """
    tops: list[tuple[tuple[int, float], ...]] = []
    plain.run(list(context), max_tokens=1, temp=0.0, logprobs=20,
              on_events=lambda events: tops.extend(ev.top_logprobs for ev in events if isinstance(ev, spec_actor.Token)))
    return dict(tops[0])


def assert_equal_within_a_near_tie(plain: Session, prompt: str | Sequence[int], got: Sequence[int],
                                    expected: Sequence[int]) -> None:
    """Gemma: ``got`` equals ``expected`` up to where they part, and there the two tokens' logits are a near-tie.

    Batch shapes (other sequences in the decode, a reused prefix) round
    differently; past the parting token the texts follow different contexts.
    The logits are the target's raw ones (the top 20 log-probabilities of
    plain decoding at that context), so a grammar that ruled out the
    unconstrained favourite does not hide the two tokens that competed.
    """
    j = first_difference(got, expected)
    if j is None:
        return
    logprob = top_logprobs(plain, plain.tokenize(prompt) + list(got[:j]))
    assert got[j] in logprob and expected[j] in logprob, (j, got[j], expected[j], logprob)
    margin = abs(logprob[got[j]] - logprob[expected[j]])
    assert margin < GEMMA_NEAR_TIE, (j, got[j], expected[j], margin)


def with_eog(result: spec_actor.RunResult) -> list[int]:
    """The run's tokens, followed by `EOG` when it ended at an end-of-generation token."""
    return list(result.tokens) + ([EOG] if result.status == "eog" else [])


@dataclass(frozen=True)
class Dispute:
    """A position where plain greedy decoding, given the speculative prefix, disagrees."""

    position: int
    """Index in the speculative output."""
    plain: int
    """What plain greedy decoding produced there (`EOG` for end of generation)."""
    spec: int
    """What the speculative run produced there."""
    top1: int
    """Plain model's best token there (top-2 probe: one batched forward pass)."""
    top2: int
    """Plain model's second-best token there."""
    margin: float
    """Logit margin top1 - top2 there."""
    gap: float
    """How far the lower of ``plain`` and ``spec`` lies below the plain model's best logit there
    (its top 20 log-probabilities); infinite when one of them is not among those."""

    def near_tie(self, threshold: float) -> bool:
        """Whether this dispute is excused: both tokens within ``threshold`` of the plain model's best.

        Mostly the two are the top-2 pair and ``gap`` is their margin; where
        three or more tokens lie that close, rounding may pick any of them.
        """
        return self.gap < threshold


def disputed_positions(plain: Session, prompt: str | Sequence[int], spec: Sequence[int]) -> list[Dispute]:
    """Every position where plain greedy decoding disagrees with ``spec`` (teacher-forced).

    ``plain`` is a session without speculation on the target model; ``spec``
    the speculative output, with `EOG` last if it ended at an
    end-of-generation token (see `with_eog`). Plain decoding restarts from
    the speculative prefix after each disagreement, so each position is
    judged on the speculative run's own context.
    """
    context = plain.tokenize(prompt)
    spec = list(spec)
    ends_eog = bool(spec) and spec[-1] == EOG
    disputes: list[Dispute] = []
    start = 0  # positions before `start` were compared
    while start < len(spec):
        # as many tokens as the speculative run has left, one more where it
        # ended at EOG (plain decoding must end there too, not only stop)
        ref = with_eog(greedy(plain, context + spec[:start], len(spec) - start))
        j = first_difference(ref, spec[start:])
        if j is None:
            break
        assert j < min(len(ref), len(spec) - start), (ref, spec[start:], ends_eog)
        i = start + j
        top1, top2, margin = nt.top2(plain._handle, context + spec[:i])
        logprob = top_logprobs(plain, context + spec[:i])
        best = max(logprob.values())
        gap = max(best - logprob.get(ref[j], -float("inf")), best - logprob.get(spec[i], -float("inf")))
        disputes.append(Dispute(i, ref[j], spec[i], top1, top2, margin, gap))
        if spec[i] == EOG:
            break
        start = i + 1
    return disputes


def assert_lossless(plain: Session, prompt: str | Sequence[int], spec: Sequence[int],
                    near_tie: float = 0.0) -> list[Dispute]:
    """Speculative output equals plain greedy output, teacher-forced, at every position.

    ``near_tie`` is the margin under which a dispute is excused when the two
    tokens are the plain model's top two: 0.0 (the default, for the F32 tiny
    models) excuses nothing; on Gemma pass `GEMMA_NEAR_TIE`. Returns the
    disputes found (all excused), which callers may report.
    """
    disputes = disputed_positions(plain, prompt, spec)
    for d in disputes:
        print(f"disputed position {d.position}: plain {d.plain} vs spec {d.spec}, "
              f"top-2 ({d.top1}, {d.top2}) margin {d.margin:.5f}")
    bad = [d for d in disputes if not d.near_tie(near_tie)]
    assert not bad, (f"{len(bad)} of {len(spec)} positions disputed beyond a near-tie "
                     f"(margin >= {near_tie}): {bad}")
    return disputes


async def collect(source, prompt, **options) -> tuple[list[int], spec_actor.Event | None]:
    """A streamed request's token ids and its terminal event (an actor's or a pool's ``stream_events``)."""
    tokens: list[int] = []
    terminal = None
    async with source.stream_events(prompt, **options) as events:
        async for ev in events:
            if isinstance(ev, spec_actor.Token) and ev.id >= 0:
                tokens.append(ev.id)
            elif isinstance(ev, (spec_actor.Done, spec_actor.Eog, spec_actor.Error)):
                terminal = ev
    return tokens, terminal


def repeated_phrase_prompts(model: spec_actor.Model, n: int, seed: int) -> list[list[int]]:
    """n prompts of 8 to 60 tokens, each a random phrase repeated (drafters find what follows in them)."""
    rng = random.Random(seed)
    n_vocab = model.info.n_vocab
    prompts = []
    for _ in range(n):
        phrase = [rng.randrange(1, n_vocab) for _ in range(rng.randrange(3, 9))]
        prompts.append((phrase * 20)[:rng.randrange(8, 61)])
    return prompts


def is_tie_free(plain: Session, prompt: Sequence[int], n_tokens: int, min_margin: float = 0.01) -> bool:
    """Whether plain greedy decoding of n_tokens after prompt keeps its top two logits min_margin apart.

    A sequence decoded in one batch with others is rounded otherwise than
    alone, even in F32: its cells lie in another order, and the attention
    sums add the same terms in that order. The tiny random models have
    top-2 logit margins as small as 3e-5, so the tests that demand exact
    equality across batch compositions take prompts free of such ties.
    ``plain`` is a session without speculation on the model.
    """
    tokens = list(plain.run(list(prompt), max_tokens=n_tokens, temp=0.0).tokens)
    return all(nt.top2(plain._handle, list(prompt) + tokens[:k])[2] >= min_margin for k in range(len(tokens)))


def tie_free_prompts(model: spec_actor.Model, n: int, seed: int, n_tokens: int,
                     min_margin: float = 0.01) -> list[list[int]]:
    """n of `repeated_phrase_prompts`' prompts that are `is_tie_free` over n_tokens."""
    chosen: list[list[int]] = []
    with Session(model, spec="none", n_ctx=256, prefix_cache=False, n_threads=1) as plain:
        for prompt in repeated_phrase_prompts(model, 4 * n, seed):
            if is_tie_free(plain, prompt, n_tokens, min_margin):
                chosen.append(prompt)
                if len(chosen) == n:
                    return chosen
    raise AssertionError(f"fewer than {n} of {4 * n} prompts are free of near-ties")
