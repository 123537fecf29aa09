"""Checked wrappers for the test probes of the ABI (its TESTING section).

Not used by generation: the test suite and benchmarks call these to inspect
a session (`spec_actor.Session.top2`, tests/test_stats_snapshots.py).
"""

from __future__ import annotations

from typing import Any

from ._check import check
from ._raw import ffi, lib
from .session import SessionHandle, snapshot_values


def top2(handle: SessionHandle, tokens: list[int]) -> tuple[int, int, float]:
    """(top-1 id, top-2 id, logit margin) after a plain forward pass over tokens.

    Clears the session's memory before and after: not during a run.
    """
    buf = ffi.new("int32_t[]", tokens)
    a, b, m = ffi.new("int32_t *"), ffi.new("int32_t *"), ffi.new("float *")
    check(lib.sa_testing_top2(handle, buf, len(tokens), a, b, m), "top-2 probe")
    return a[0], b[0], m[0]


def poll_stats(handle: SessionHandle, which: int, *, until_requests: int, max_polls: int,
               cap: int = 4096) -> tuple[list[dict[str, Any]], int]:
    """Poll the session's stats natively, as fast as possible, from the calling thread.

    Returns the distinct snapshots seen (each as `session.stats` returns
    them), at most ``cap``, and the number of polls. Stops once
    ``until_requests`` runs have finished or after ``max_polls`` polls.
    Releases the GIL while polling: run it beside a generation.
    """
    out = ffi.new("sa_stats[]", cap)
    n, polls = ffi.new("int32_t *"), ffi.new("int64_t *")
    check(lib.sa_testing_poll_stats(handle, which, until_requests, max_polls, out, cap, n, polls), "poll stats")
    return [snapshot_values(out[i]) for i in range(n[0])], polls[0]


def fix_step_cost(handle: SessionHandle, plain_us: float, intercept_us: float, per_token_us: float) -> None:
    """Fix an auto session's step cost (plain; intercept + per_token * n drafted) instead of measuring it.

    Every sequence of the session gets it. The chooser's decisions then
    depend on what it drafts and what the target accepts, not on the
    machine's load.
    """
    check(lib.sa_testing_fix_step_cost(handle, plain_us, intercept_us, per_token_us), "fix step cost")


def threads_in_use(handle: SessionHandle) -> tuple[int, int]:
    """(decode threads, prompt-batch threads) the session's target context uses now.

    The thread budget sets them per run: call from the run's own thread (its
    event sink) or between runs.
    """
    n, n_batch = ffi.new("int32_t *"), ffi.new("int32_t *")
    check(lib.sa_testing_threads_in_use(handle, n, n_batch), "threads in use")
    return n[0], n_batch[0]


def graphs_reused(handle: SessionHandle) -> int:
    """How many of the session's target decodes reused a graph built for an earlier one (llama.cpp's counter)."""
    out = ffi.new("int64_t *")
    check(lib.sa_testing_graphs_reused(handle, out), "graphs reused")
    return out[0]


def step_cost(observed: list[tuple[int, int]], query: list[int],
              calibrated: list[float] | None = None) -> list[float]:
    """Predicted step costs (us) of a fresh step-cost model after ``observed``.

    ``observed``: (drafted tokens verified, microseconds) per step, in order;
    ``query``: the draft lengths to predict. The model is the one ``auto`` and
    ``n_draft="auto"`` price draft lengths with; no session is involved.
    ``calibrated``: the model first gets this table (us by draft length), as
    auto's sessions get their measured one, and the steps only scale it.
    """
    n = ffi.new("int32_t[]", [o[0] for o in observed] or [0])
    us = ffi.new("int64_t[]", [o[1] for o in observed] or [0])
    table, n_table, q, out = _cost_query(query, calibrated)
    check(lib.sa_testing_calibrated_step_cost(table, n_table, n, us, len(observed), q, len(query), out), "step cost")
    return [out[j] for j in range(len(query))]


def _cost_query(query: list[int], calibrated: list[float] | None) -> tuple[Any, int, Any, Any]:
    """The step-cost probes' native arguments: (table, its length, the lengths queried, the predictions' buffer)."""
    table = calibrated or []
    return (ffi.new("double[]", table or [0.0]), len(table), ffi.new("int32_t[]", query or [0]),
            ffi.new("double[]", max(len(query), 1)))


def step_price(observed: list[tuple[int, int, int]], query: list[int],
               calibrated: list[float] | None = None) -> list[float]:
    """As ``step_cost`` through auto's step price.

    ``observed``: (drafted tokens verified, other sequences' tokens in the
    decode, microseconds) per step. A lone one-token step right after a lone
    drafted one, where llama.cpp's graph switches back (decision 0117), does
    not price the one-token cost.
    """
    n = ffi.new("int32_t[]", [o[0] for o in observed] or [0])
    others = ffi.new("int32_t[]", [o[1] for o in observed] or [0])
    us = ffi.new("int64_t[]", [o[2] for o in observed] or [0])
    table, n_table, q, out = _cost_query(query, calibrated)
    check(lib.sa_testing_step_price(table, n_table, n, others, us, len(observed), q, len(query), out), "step price")
    return [out[j] for j in range(len(query))]


def promise_factors(drafts: list[tuple[int, float, int]], n_out: int) -> list[float]:
    """auto's promise record after ``drafts``: the factor on a draft of 1..n_out tokens' expected gain.

    Each draft is (tokens verified, accepted tokens it promised untempered, tokens accepted), in order.
    """
    n = ffi.new("int32_t[]", [d[0] for d in drafts] or [0])
    promise = ffi.new("double[]", [d[1] for d in drafts] or [0.0])
    accepted = ffi.new("int32_t[]", [d[2] for d in drafts] or [0])
    out = ffi.new("double[]", max(n_out, 1))
    check(lib.sa_testing_promise_factors(n, promise, accepted, len(drafts), out, n_out), "promise factors")
    return [out[k] for k in range(n_out)]


def step_cost_calibrations() -> int:
    """Step-cost tables measured by auto sessions in this process (one per model and thread count)."""
    return int(lib.sa_testing_step_cost_calibrations())


def auto_step_cost(handle: SessionHandle, n: int = 33) -> tuple[list[float], bool, float]:
    """An auto session's step cost for 0..n-1 drafted tokens, whether it is a calibrated table, and its scale.

    Call between runs.
    """
    out = ffi.new("double[]", n)
    cal, scale = ffi.new("int32_t *"), ffi.new("double *")
    check(lib.sa_testing_auto_step_cost(handle, out, n, cal, scale), "auto step cost")
    return [out[i] for i in range(n)], bool(cal[0]), scale[0]


def auto_model_arm(handle: SessionHandle) -> tuple[int, bool]:
    """(batches an auto session's model drafter processed, whether its arm is dropped now); between runs."""
    n, dropped = ffi.new("uint64_t *"), ffi.new("int32_t *")
    check(lib.sa_testing_auto_model_arm(handle, n, dropped), "auto model arm")
    return n[0], bool(dropped[0])


def expected_tokens(checked: list[tuple[int, int]], n_cap: int, *, later_floor: float = 0.0,
                    first_prior: float = 0.6) -> list[float]:
    """Expected tokens of a step drafting 0..n_cap tokens, from a fresh acceptance model after ``checked``.

    ``checked``: (positions compared, of which accepted) per draft, in order;
    the model is the per-drafter one of ``auto`` (``later_floor`` 0 there,
    ``first_prior`` 0.6 greedy, 0.3 sampled). No session is involved.
    """
    n = ffi.new("int32_t[]", [c[0] for c in checked] or [0])
    a = ffi.new("int32_t[]", [c[1] for c in checked] or [0])
    out = ffi.new("double[]", n_cap + 1)
    check(lib.sa_testing_expected_tokens(n, a, len(checked), n_cap, later_floor, first_prior, out), "expected tokens")
    return [out[j] for j in range(n_cap + 1)]


def fix_step_cost_table(handle: SessionHandle, us_by_length: list[float]) -> None:
    """Fix an auto session's step cost to ``us_by_length[n]`` for a step verifying n drafted tokens (every sequence's)."""
    buf = ffi.new("double[]", us_by_length)
    check(lib.sa_testing_fix_step_cost_table(handle, buf, len(us_by_length)), "fix step cost table")


def refuse_next_seq_rm(handle: SessionHandle) -> None:
    """Make the session's next ``llama_memory_seq_rm`` refuse, as a too-deep recurrent rollback does."""
    check(lib.sa_testing_refuse_next_seq_rm(handle), "refuse next seq_rm")


def choose_offer(expected: list[list[float]], us_by_length: list[float], draft_us: float = 0.0,
                 sample_us: float = 0.0, n_others: int = 0, e_others: float = 0.0,
                 rollback_free: int | None = None, save_us: float = 0.0,
                 restore_us: float = 0.0) -> tuple[int, int]:
    """auto's chooser alone: (offer index or -1 for a plain step, draft length).

    ``expected[i][n]``: offer i's expected tokens for a draft of n tokens (``[0]`` is 1).
    ``n_others``/``e_others``: what other sequences put into a batched step
    (their tokens, and the tokens they are expected to make).
    ``rollback_free``: drafts up to this long are undone for free (None: all);
    a longer one pays ``save_us`` for a checkpoint and, when more than
    ``rollback_free`` of its tokens are rejected, ``restore_us`` and a
    re-verification (docs/decisions/0091).
    """
    stride = max(len(e) for e in expected) if expected else 1
    flat = ffi.new("double[]", [x for e in expected for x in e + [0.0] * (stride - len(e))] or [0.0])
    n_max = ffi.new("int32_t[]", [len(e) - 1 for e in expected] or [0])
    cost = ffi.new("double[]", us_by_length)
    offer, n = ffi.new("int32_t *"), ffi.new("int32_t *")
    check(lib.sa_testing_choose_offer(flat, n_max, len(expected), stride, cost, len(us_by_length), draft_us,
                                      sample_us, n_others, e_others, -1 if rollback_free is None else rollback_free,
                                      save_us, restore_us, offer, n), "choose offer")
    return offer[0], n[0]


def allocate_drafts(expected: list[list[float]], us_by_length: list[float], n_fixed: int, e_fixed: float = 0.0,
                    n_total: int = 1 << 16, weights: list[float] | None = None,
                    rollback_free: int | None = None, save_us: float = 0.0,
                    restore_us: float = 0.0) -> list[int]:
    """A batched step's joint draft lengths alone: one length per option.

    ``expected[i][n]``: option i's expected tokens for a draft of n tokens
    (``[0]`` is its sampled token, 1). ``us_by_length[T - 1]``: a decode of T
    tokens. ``n_fixed``: the decode's tokens that do not depend on the choice
    (one per option, and the other sequences'), ``e_fixed`` what those others
    are expected to make; at most ``n_total`` tokens in all. ``weights``: what
    one token of each option is worth (its tokens left over the most any
    sequence has left; None: all 1). ``rollback_free``, ``save_us`` and
    ``restore_us``: every option's rollback price, as `choose_offer`'s.
    """
    stride = max(len(e) for e in expected) if expected else 1
    flat = ffi.new("double[]", [x for e in expected for x in e + [0.0] * (stride - len(e))] or [0.0])
    n_max = ffi.new("int32_t[]", [len(e) - 1 for e in expected] or [0])
    cost = ffi.new("double[]", us_by_length)
    lengths = ffi.new("int32_t[]", max(len(expected), 1))
    w = ffi.new("double[]", weights) if weights is not None else ffi.NULL
    check(lib.sa_testing_allocate_drafts(flat, n_max, len(expected), stride, cost, len(us_by_length), n_fixed,
                                         e_fixed, n_total, w, -1 if rollback_free is None else rollback_free,
                                         save_us, restore_us, lengths), "allocate drafts")
    return [lengths[i] for i in range(len(expected))]


def argmax(values: Any) -> int:
    """The index greedy verification picks from a row of logits (float32): the first of the largest."""
    row = ffi.new("float[]", [float(v) for v in values])
    out = ffi.new("int32_t *")
    check(lib.sa_testing_argmax(row, len(values), out), "argmax")
    return out[0]


def auto_priced_steps(handle: SessionHandle) -> int:
    """Verified steps of sequence 0's auto drafter whose decode fed its step cost (no prompt chunk in it)."""
    out = ffi.new("uint64_t *")
    check(lib.sa_testing_auto_priced_steps(handle, out), "auto priced steps")
    return out[0]


def take_draft_context_tokens(handle: SessionHandle) -> int:
    """Tokens the session's draft context decoded since the last call (0 without one); resets the count."""
    out = ffi.new("uint64_t *")
    check(lib.sa_testing_take_draft_context_tokens(handle, out), "draft context tokens")
    return out[0]


def memory_propose_after(kept: list[list[int]], tail: list[int], n_max: int) -> tuple[list[int], int]:
    """The session memory's lookup for a running request: (its proposal, the match's length).

    ``kept``: the earlier requests' token sequences; ``tail``: the running request's tokens so far.
    """
    flat = [t for seq in kept for t in seq]
    tokens, lengths = ffi.new("int32_t[]", flat or [0]), ffi.new("int32_t[]", [len(q) for q in kept] or [0])
    row = ffi.new("int32_t[]", tail or [0])
    out = ffi.new("int32_t[]", max(n_max, 1))
    n_out, match = ffi.new("int32_t *"), ffi.new("int32_t *")
    check(lib.sa_testing_memory_propose_after(tokens, lengths, len(kept), row, len(tail), n_max, out, n_out, match),
          "memory propose after")
    return list(out[0:n_out[0]]), match[0]


def text_lookup(model: Any, tokens: list[int], n_max: int) -> tuple[list[int], int]:
    """Auto's text lookup over the text of ``tokens`` (model: a model handle): (its proposal, matched bytes)."""
    row = ffi.new("int32_t[]", tokens or [0])
    out = ffi.new("int32_t[]", max(n_max, 1))
    n_out, match = ffi.new("int32_t *"), ffi.new("int32_t *")
    check(lib.sa_testing_text_lookup(model, row, len(tokens), n_max, out, n_out, match), "text lookup")
    return list(out[0:n_out[0]]), match[0]


def splice_lookup(model: Any, tokens: list[int], n_max: int) -> list[int]:
    """Auto's splice lookup after ``tokens`` (the request so far; model: a model handle): its proposal."""
    row = ffi.new("int32_t[]", tokens or [0])
    out = ffi.new("int32_t[]", max(n_max, 1))
    n_out = ffi.new("int32_t *")
    check(lib.sa_testing_splice_lookup(model, row, len(tokens), n_max, out, n_out), "splice lookup")
    return list(out[0:n_out[0]])


def fail_decode(handle: SessionHandle, n: int) -> None:
    """Fault injection: the n-th target decode from now on ends its run with an Error event (0: none).

    The decode itself succeeds first, so the error comes after the memory
    changed, the way a real failure midway would leave it.
    """
    check(lib.sa_testing_fail_decode(handle, n), "fail decode")


STEP_PARTS = ("proposals", "choice", "checkpoint", "decode", "sample", "feed", "observe", "trim", "emit", "restore",
              "step")


def profile_steps(handle: SessionHandle, on: bool) -> None:
    """Record each verified step's time by part in the runs that start from now on (or stop, for later runs)."""
    check(lib.sa_testing_profile_steps(handle, 1 if on else 0), "profile steps")


def take_step_profile(handle: SessionHandle, cap: int = 65536) -> list[dict[str, int]]:
    """The steps recorded since the last call, oldest first (between runs).

    Each is a dict: ``n_draft`` (tokens verified beside the first),
    ``reverify`` (1: a rolled-back draft's accepted part verified again),
    ``accepted`` (drafted tokens confirmed), ``drafter`` (its sa_spec_type or
    drafter id, 0: none; ``spec_actor.Stats`` names them), and
    the microseconds of each part in `STEP_PARTS` (``step``: the whole step,
    from its start to the next one's).
    """
    width = lib.SA_STEP_PROFILE_FIELDS
    out = ffi.new("int64_t[]", cap * width)
    n = ffi.new("int32_t *")
    check(lib.sa_testing_take_step_profile(handle, out, cap, n), "take step profile")
    keys = ("n_draft", "reverify", "accepted", "drafter", *STEP_PARTS)
    return [{k: out[i * width + j] for j, k in enumerate(keys)} for i in range(n[0])]
