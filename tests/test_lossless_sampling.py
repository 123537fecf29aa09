"""Sampled (temperature > 0) speculation: reproducible per seed, and the same distribution as plain sampling.

Lossless speculation must preserve the target model's distribution, not only
its argmax. `test_sampled_token_distribution_matches_plain_sampling` samples
many seeds on a tiny model and compares the frequencies of the token at one
position with plain sampling's by a chi-square test of homogeneity at
significance 0.001 (decision 0020). The seeds are fixed, so the outcome is
deterministic; `test_the_chi_square_check_tells_different_distributions_apart`
shows that the check has the power to fail.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence

import pytest
from tiny_model_fixtures import mtp_model, tiny_draft, tiny_eagle3, tiny_paths, tiny_target  # noqa: F401

import spec_actor
from spec_actor import Session, Spec

PROMPT = "Hello world, this is a tiny model"
NGRAM_TYPES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")
# No filters: every token keeps its probability (the tiny models' are flat: a
# few dozen tokens share most of the mass at each position).
WIDE = dict(temp=0.7, top_k=0, top_p=1.0, min_p=0.0)
POSITION = 5  # the token compared: late enough that drafts were accepted before it
N_SEEDS = 400
ALPHA_Z = 3.0902  # standard normal quantile of 1 - 0.001

Getter = Callable[[str], spec_actor.Model]
# The model drafters draft every step on the tiny models. Sampled text of
# the tiny models does not repeat, so the n-gram types draft nothing there:
# they are checked on Gemma copying code, where they do.
TINY: dict[str, tuple[str, Callable[[Getter], Spec]]] = {
    "mtp": ("mtp_model", lambda get: Spec("mtp", n_draft=3)),
    "draft-simple": ("tiny_target", lambda get: Spec("draft-simple", n_draft=4, draft_model=get("tiny_draft"))),
    "eagle3": ("tiny_target", lambda get: Spec("eagle3", n_draft=3, draft_model=get("tiny_eagle3"))),
}
GEMMA: dict[str, Callable[[Getter], Spec]] = {
    "self-draft": lambda get: Spec("draft-simple", n_draft=4, draft_model=get("gemma")),
    **{t: (lambda t: lambda get: Spec(t, n_draft=8, ngram_size_n=3, ngram_size_m=8,
                                                     ngram_mod_n_match=6))(t) for t in NGRAM_TYPES},
}
COPY_PROMPT = (
    "def add(a, b):\n    return a + b\n\ndef mul(a, b):\n    return a * b\n\n"
    "Here is the same code again, copied exactly:\n\ndef add(a, b):\n"
)


def chi_square_homogeneity(a: Counter[int], b: Counter[int], min_expected: float = 5.0) -> tuple[float, int]:
    """(statistic, degrees of freedom) of a chi-square test that two samples share one distribution.

    Categories whose expected count is under ``min_expected`` in either
    sample are pooled into one, as the test's approximation requires.
    """
    na, nb = sum(a.values()), sum(b.values())
    n = na + nb
    big = [k for k in a.keys() | b.keys() if min(na, nb) * (a[k] + b[k]) / n >= min_expected]
    rows = [(a[k], b[k]) for k in big]
    rest = (na - sum(r[0] for r in rows), nb - sum(r[1] for r in rows))
    if rest[0] + rest[1] > 0:
        rows.append(rest)
    stat = 0.0
    for ca, cb in rows:
        total = ca + cb
        for count, size in ((ca, na), (cb, nb)):
            expected = size * total / n
            stat += (count - expected) ** 2 / expected
    return stat, len(rows) - 1


def chi_square_critical(df: int, z: float = ALPHA_Z) -> float:
    """Upper quantile of the chi-square distribution (Wilson-Hilferty approximation)."""
    h = 2.0 / (9.0 * df)
    return df * (1.0 - h + z * math.sqrt(h)) ** 3


def tokens_at(session: Session, seeds: Sequence[int], position: int, **sampling) -> Counter[int]:
    """How often each token id is sampled at ``position``, one run per seed."""
    counts: Counter[int] = Counter()
    for seed in seeds:
        result = session.run(PROMPT, max_tokens=position + 1, seed=seed, **sampling)
        assert len(result.tokens) == position + 1, result.status
        counts[result.tokens[position]] += 1
    return counts


@pytest.fixture(scope="module")
def plain_counts(tiny_target, mtp_model):
    """Plain sampling's token counts at POSITION, per target model fixture."""
    out = {}
    for name, model in (("tiny_target", tiny_target), ("mtp_model", mtp_model)):
        with Session(model, n_ctx=256, n_threads=1) as plain:
            out[name] = tokens_at(plain, range(N_SEEDS), POSITION, **WIDE)
    return out


@pytest.mark.parametrize("mode", list(TINY))
def test_same_seed_gives_the_same_text_on_tiny_models(request, mode):
    target, build = TINY[mode]
    model, spec = request.getfixturevalue(target), build(request.getfixturevalue)
    with Session(model, spec=spec, n_ctx=256, n_threads=1) as session:
        runs = [session.run(PROMPT, max_tokens=48, seed=seed, **WIDE) for seed in (7, 7, 8)]
        drafted = session.stats().drafts_generated
    with Session(model, spec=spec, n_ctx=256, n_threads=1) as fresh:
        again = fresh.run(PROMPT, max_tokens=48, seed=7, **WIDE)
    assert drafted > 0
    assert runs[0].tokens == runs[1].tokens == again.tokens
    assert runs[0].text == again.text
    assert runs[2].tokens != runs[0].tokens, "another seed should give another text at this temperature"


@pytest.mark.parametrize("mode", list(GEMMA))
def test_same_seed_gives_the_same_text_on_gemma(request, gemma, mode):
    spec = GEMMA[mode](request.getfixturevalue)
    options = dict(max_tokens=32, temp=0.8, seed=1234)
    with Session(gemma, spec=spec, n_ctx=256, n_threads=1) as session:
        first, second = session.run(COPY_PROMPT, **options), session.run(COPY_PROMPT, **options)
    with Session(gemma, spec=spec, n_ctx=256, n_threads=1) as fresh:
        third = fresh.run(COPY_PROMPT, **options)
    assert first.stats.drafts_generated > 0
    assert first.tokens == second.tokens == third.tokens and first.text


@pytest.mark.parametrize("mode", list(TINY))
def test_sampled_token_distribution_matches_plain_sampling(request, plain_counts, mode):
    target, build = TINY[mode]
    model, spec = request.getfixturevalue(target), build(request.getfixturevalue)
    with Session(model, spec=spec, n_ctx=256, n_threads=1) as session:
        spec_counts = tokens_at(session, range(N_SEEDS), POSITION, **WIDE)
        accepted = session.stats().drafts_accepted
    plain = plain_counts[target]
    stat, df = chi_square_homogeneity(plain, spec_counts)
    critical = chi_square_critical(df)
    print(f"{mode}: {len(plain)} plain / {len(spec_counts)} speculative distinct tokens, "
          f"chi2 {stat:.1f} on {df} df (critical {critical:.1f}), {accepted} drafts accepted")
    assert accepted > 0, "no draft was accepted: the runs did not test speculation"
    assert df >= 3, "the distribution is too narrow to compare"
    assert stat < critical


def test_the_chi_square_check_tells_different_distributions_apart(tiny_target, plain_counts):
    """The same check rejects a really different distribution: a lower temperature."""
    with Session(tiny_target, n_ctx=256, n_threads=1) as plain:
        cooler = tokens_at(plain, range(N_SEEDS), POSITION, **{**WIDE, "temp": 0.5})
    stat, df = chi_square_homogeneity(plain_counts["tiny_target"], cooler)
    assert stat > chi_square_critical(df)
