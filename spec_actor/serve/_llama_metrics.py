"""llama-server's ``llamacpp:`` metrics, beside this server's own in ``GET /metrics``.

Dashboards and autoscalers made for llama-server read these names. They
follow its ``server_task_result_metrics::to_metrics`` (the pinned
llama.cpp): plain counters and gauges without labels, each with its HELP
and TYPE lines, and the accepted draft tokens per position. The prompt and
generation counts and times are the ``timings`` the server reported to each
request that ran to its end (`LlamaCppCounts.add`); the throughput gauges
average over the window since the previous scrape, as llama-server's
"buckets" do; the decode counts are the native engine's.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._stats import StatsSnapshot
from ._reading import PoolReading

__all__ = ["LlamaCppCounts", "render_llama_metrics"]

PREFIX = "llamacpp:"


@dataclass(slots=True)
class _Window:
    """Tokens and seconds of one kind of work (prompt or generation)."""

    tokens: int = 0
    seconds: float = 0.0

    def add(self, tokens: int, seconds: float) -> None:
        self.tokens += tokens
        self.seconds += seconds

    def rate(self) -> float:
        """Tokens per second; 0.0 for an empty window."""
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


class LlamaCppCounts:
    """What the requests reported, summed since the start and over the window since the last scrape.

    Thread-safety: add and render from the trio thread.
    """

    def __init__(self) -> None:
        self.prompt = _Window()
        """Prompt tokens evaluated (the prefix cache's aside) and the seconds spent on them."""
        self.predicted = _Window()
        """Tokens generated (an end-of-generation token counted, as llama-server counts it) and their seconds."""
        self.prompt_cached = 0
        """Prompt tokens the prefix cache held."""
        self.n_tokens_max = 0
        """The longest sequence a request made: prompt and generation."""
        self._prompt_window = _Window()
        self._predicted_window = _Window()

    def add(self, stats: StatsSnapshot, predicted: int) -> None:
        """Count one finished generation: its final ``stats`` and the ``predicted`` tokens its answer reported."""
        prompt_seconds = stats.timing_us.prefill / 1e6
        predicted_seconds = max(stats.timing_us.total - stats.timing_us.prefill, 0) / 1e6
        for window in (self.prompt, self._prompt_window):
            window.add(stats.prompt_prefilled, prompt_seconds)
        for window in (self.predicted, self._predicted_window):
            window.add(predicted, predicted_seconds)
        self.prompt_cached += stats.prompt_reused
        self.n_tokens_max = max(self.n_tokens_max, stats.prompt_tokens + predicted)

    def take_rates(self) -> tuple[float, float]:
        """(prompt, generation) tokens per second since the last call, and a new window begun."""
        rates = self._prompt_window.rate(), self._predicted_window.rate()
        self._prompt_window, self._predicted_window = _Window(), _Window()
        return rates


def render_llama_metrics(counts: LlamaCppCounts, reading: PoolReading) -> str:
    """The ``llamacpp:`` metrics of ``counts`` and the pool's ``reading`` as Prometheus text, the throughput
    window restarted."""
    snap, n_decode = reading.stats, reading.n_decode
    prompt_rate, predicted_rate = counts.take_rates()
    counters = [
        ("prompt_tokens_total", "Number of prompt tokens processed, excluding cached tokens", counts.prompt.tokens),
        ("prompt_tokens_cached_total", "Number of prompt tokens reused from the cache", counts.prompt_cached),
        ("prompt_seconds_total", "Total time spent processing prompts", counts.prompt.seconds),
        ("tokens_predicted_total", "Number of generation tokens processed", counts.predicted.tokens),
        ("tokens_predicted_seconds_total", "Total time spent generating tokens", counts.predicted.seconds),
        ("n_decode_total", "Total number of engine decode steps (each decodes every sequence running)", n_decode),
        ("n_tokens_max", "Largest observed sequence length (prompt + generation)", counts.n_tokens_max),
        ("spec_decode_num_draft_tokens_total", "Speculative: Total draft tokens generated", snap.drafts_generated),
        ("spec_decode_num_accepted_tokens_total", "Speculative: Total draft tokens accepted by the target model",
         snap.drafts_accepted),
        ("spec_decode_num_drafts_total", "Speculative: Total speculative decoding verification steps",
         snap.drafted_per_pos[0] if snap.drafted_per_pos else 0),
    ]
    gauges = [
        ("prompt_tokens_seconds", "Average prompt throughput in tokens/s since the previous scrape", prompt_rate),
        ("predicted_tokens_seconds", "Average generation throughput in tokens/s since the previous scrape",
         predicted_rate),
        ("requests_processing", "Number of requests processing", reading.busy),
        ("requests_deferred", "Number of requests deferred", reading.queued),
        ("n_busy_slots_per_decode", "Average number of sequences generating per engine decode step (their "
         "generation steps over the decode steps; prompt chunks not counted)",
         snap.iters / n_decode if n_decode else 0.0),
    ]
    lines: list[str] = []
    for kind, items in (("counter", counters), ("gauge", gauges)):
        for name, doc, value in items:
            full = PREFIX + name
            lines += [f"# HELP {full} {doc}", f"# TYPE {full} {kind}", f"{full} {_number(value)}"]
    if snap.accepted_per_pos:
        name = f"{PREFIX}spec_decode_num_accepted_tokens_per_pos_total"
        lines += [f"# HELP {name} Accepted tokens per draft position", f"# TYPE {name} counter"]
        lines += [f'{name}{{position="{pos}"}} {value}' for pos, value in enumerate(snap.accepted_per_pos)]
    return "\n".join(lines) + "\n"


def _number(value: float) -> str:
    """A sample's value as Prometheus text: integers without a fraction."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))
