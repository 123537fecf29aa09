"""Batch-versus-single-token logit noise: the measurement behind the near-tie threshold.

Plain decoding evaluates each new token alone; speculative verification
evaluates it inside a batch of drafts. The two round differently, so their
top-1/top-2 logit margins differ slightly. This measures that difference
with the top-2 probe on two sessions of the same model: one whose micro-batch
is a single token (every position evaluated alone, as plain decoding does)
and one that evaluates the whole context as a batch (as verification does).

Run ``python tests/lossless_noise.py`` for the full measurement quoted in
docs/decisions/0019-near-tie-threshold-from-measured-noise.md; the test
suite re-measures a few positions (test_lossless.py).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import spec_actor
from spec_actor import Session
from spec_actor.nif import testing as nt

PROMPTS = (
    "The three primary colors are",
    "Once upon a time, in a small village by the sea, there lived an old fisherman named",
    "def add(a, b):\n    return a + b\n\ndef mul(a, b):\n    return a * b\n\n"
    "Here is the same code again, copied exactly:\n\ndef add(a, b):\n",
    "Describe a cat as a JSON object: ",
)


@dataclass(frozen=True)
class MarginPair:
    """The top-2 probe at one context, evaluated one token at a time and as one batch."""

    single: tuple[int, int, float]
    batch: tuple[int, int, float]

    @property
    def delta(self) -> float:
        """|margin difference| when both paths rank the same two tokens, else their plain margin."""
        return abs(self.single[2] - self.batch[2])


def margin_pairs(model: spec_actor.Model, contexts: Iterable[Sequence[int]], n_ubatch: int,
                 n_ctx: int = 512) -> list[MarginPair]:
    """The top-2 probe of each context on a one-token micro-batch and on micro-batches of ``n_ubatch``.

    A speculative step verifies its last token plus up to n_draft drafts in
    one batch: ``n_ubatch`` of n_draft + 1 reproduces that rounding, and a
    whole-context ``n_ubatch`` the prompt prefill's.
    """
    contexts = [list(c) for c in contexts]
    with Session(model, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=1, n_threads=1) as single:
        singles = [nt.top2(single._handle, c) for c in contexts]
    with Session(model, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ubatch, n_threads=1) as batch:
        return [MarginPair(s, nt.top2(batch._handle, c)) for s, c in zip(singles, contexts)]


def greedy_contexts(model: spec_actor.Model, prompts: Iterable[str], n_tokens: int, every: int) -> list[list[int]]:
    """Contexts along each prompt's own greedy continuation: prompt + the first k tokens, every ``every``."""
    out: list[list[int]] = []
    with Session(model, n_ctx=512, n_threads=1) as plain:
        for prompt in prompts:
            context = plain.tokenize(prompt)
            tokens = list(plain.run(context, max_tokens=n_tokens, temp=0.0).tokens)
            out += [context + tokens[:k] for k in range(0, len(tokens), every)]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=48, help="greedy tokens per prompt")
    parser.add_argument("--every", type=int, default=2, help="probe every k-th position")
    parser.add_argument("--ubatch", type=int, nargs="+", default=[4, 9, 17, 512], help="micro-batch sizes")
    args = parser.parse_args()
    model = spec_actor.load_model()
    contexts = greedy_contexts(model, PROMPTS, args.tokens, args.every)
    for n_ubatch in args.ubatch:
        report(n_ubatch, margin_pairs(model, contexts, n_ubatch))


def report(n_ubatch: int, pairs: list[MarginPair]) -> None:
    """Print the spread of the margin differences of one micro-batch size."""
    same = [p for p in pairs if p.single[:2] == p.batch[:2]]
    deltas = sorted(p.delta for p in same)
    print(f"n_ubatch {n_ubatch} vs 1: {len(pairs)} contexts, same top-2 pair in {len(same)}, "
          f"argmax differs in {sum(p.single[0] != p.batch[0] for p in pairs)}; "
          f"|margin difference| max {deltas[-1]:.5f}, p99 {deltas[int(0.99 * (len(deltas) - 1))]:.5f}, "
          f"median {deltas[len(deltas) // 2]:.5f}; largest margin where the argmax differs: "
          f"{max((max(p.single[2], p.batch[2]) for p in pairs if p.single[0] != p.batch[0]), default=0):.5f}")


if __name__ == "__main__":
    main()
