"""Speculation visible per response: llama-server's ``timings`` and vLLM's ``speculative_decoding``.

Both come from the request's final statistics (the ``Done``/``Eog`` event's
snapshot); a stream's ``prompt_progress`` (with its timings so far) comes
from a `Progress` event of the native prefill. The field names are those of
llama-server and of vLLM's per-request speculative metrics, so their
clients and dashboards read them.
"""

from __future__ import annotations

from typing import Any

from .._events import Progress
from .._stats import StatsSnapshot

__all__ = ["progress_timings", "prompt_progress", "speculation_fields", "speculative_decoding", "timings"]


def speculation_fields(stats: StatsSnapshot, completion_tokens: int) -> dict[str, Any]:
    """``{"timings": ..., "speculative_decoding": ...}`` for a response.

    ``completion_tokens`` is what the response delivered (its ``usage``),
    which a stop string can make fewer than the tokens the loop emitted.
    """
    return {"timings": timings(stats, completion_tokens), "speculative_decoding": speculative_decoding(stats)}


def timings(stats: StatsSnapshot, predicted_n: int) -> dict[str, Any]:
    """llama-server's ``timings``: ``cache_n`` prompt tokens reused from the cache, ``prompt_n`` evaluated."""
    predicted_ms = max(stats.timing_us.total - stats.timing_us.prefill, 0) / 1000
    return _timings(stats.prompt_reused, stats.prompt_prefilled, stats.timing_us.prefill / 1000, predicted_n,
                    predicted_ms, stats.drafts_generated, stats.drafts_accepted)


def progress_timings(progress: Progress) -> dict[str, Any]:
    """llama-server's ``timings`` while the prompt is evaluated: its part so far (``prompt_n`` counts the
    processed tokens the cache did not hold), nothing predicted yet."""
    return _timings(progress.cached, progress.processed - progress.cached, progress.time_us / 1000, 0, 0.0, 0, 0)


def _timings(cache_n: int, prompt_n: int, prompt_ms: float, predicted_n: int, predicted_ms: float, draft_n: int,
             draft_n_accepted: int) -> dict[str, Any]:
    decodes = max(predicted_n - 1, 0)  # the first token is sampled from the prompt's logits, without a decode
    return {
        "cache_n": cache_n,
        "prompt_n": prompt_n,
        "prompt_ms": prompt_ms,
        "prompt_per_token_ms": _ratio(prompt_ms, prompt_n),
        "prompt_per_second": _ratio(1000 * prompt_n, prompt_ms),
        "predicted_n": predicted_n,
        "predicted_ms": predicted_ms,
        "predicted_per_token_ms": _ratio(predicted_ms, decodes),
        "predicted_per_second": _ratio(1000 * decodes, predicted_ms),
        "draft_n": draft_n,
        "draft_n_accepted": draft_n_accepted,
    }


def speculative_decoding(stats: StatsSnapshot) -> dict[str, Any]:
    """vLLM's per-request ``speculative_decoding`` figures, with each drafter's share."""
    drafters = [d for d in stats.drafters if d.name != "none"]
    spec_steps = sum(d.steps for d in drafters)
    return {
        "num_spec_steps": spec_steps,
        "num_draft_tokens": stats.drafts_generated,
        "num_accepted_draft_tokens": stats.drafts_accepted,
        "mean_acceptance_length": 1 + _ratio(stats.drafts_accepted, spec_steps),
        "acceptance_rate": stats.acceptance_rate,
        "drafters": [{"name": d.name, "steps": d.steps, "num_draft_tokens": d.drafted,
                      "num_accepted_draft_tokens": d.accepted, "share_of_tokens": d.share} for d in drafters],
    }


def prompt_progress(progress: Progress) -> dict[str, Any]:
    """llama-server's ``prompt_progress``: ``total`` prompt tokens, ``cache`` of them reused, ``processed`` (the
    cached ones included, as llama-server counts them) and ``time_ms``, the time their evaluation took so far."""
    return {"total": progress.total, "cache": progress.cached, "processed": progress.processed,
            "time_ms": progress.time_us / 1000}


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else 0.0
