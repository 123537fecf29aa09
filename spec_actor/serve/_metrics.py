"""``GET /metrics``: Prometheus text built with prometheus-client from the pool's lock-free statistics.

Names follow vLLM's (``vllm:num_requests_running``,
``vllm:spec_decode_num_accepted_tokens_per_pos_total``, ...) under the
``spec_actor:`` prefix, so dashboards made for vLLM need only the prefix
changed. Counts come from the native counters at scrape time; the latency
histograms are observed by the server per request. llama-server's own
``llamacpp:`` names follow (`_llama_metrics`).

The three gauges an inference gateway's endpoint picker routes on (the
Gateway API Inference Extension's model-server protocol) are
``num_requests_waiting``, ``num_requests_running`` and
``kv_cache_usage_perc``; with ``vllm_names`` they are exported under vLLM's
names too (`VLLM_GAUGES`), which the picker reads by default
(docs/deployment.md, "Kubernetes").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from .._stats import StatsSnapshot
from ._llama_metrics import LlamaCppCounts, render_llama_metrics
from ._reading import PoolReading

__all__ = ["CONTENT_TYPE", "PREFIX", "VLLM_GAUGES", "ServerMetrics"]

PREFIX = "spec_actor:"
VLLM_PREFIX = "vllm:"
VLLM_GAUGES = ("num_requests_waiting", "num_requests_running", "kv_cache_usage_perc")
"""The gauges exported under vLLM's names as well when asked (``vllm:`` + name)."""
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4

_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0)
_CANCEL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class ServerMetrics:
    """The server's metrics registry: pool counters read at scrape time, request histograms.

    ``reading`` reads the pool at each scrape (`PoolKeeper.reading`: while
    the server sleeps, the reading taken as it fell asleep).

    Thread-safety: observe and render from the trio thread (the pool
    statistics themselves are lock-free).
    """

    def __init__(self, reading: Callable[[], PoolReading], model_name: str, *, vllm_names: bool = False) -> None:
        self.registry = CollectorRegistry()
        self.model_name = model_name
        self._reading = reading
        self.llama = LlamaCppCounts()
        """llama-server's prompt and generation counts (`generated`)."""
        labels = ["model_name"]
        self.ttft = Histogram(f"{PREFIX}time_to_first_token_seconds",
                              "Seconds from a request's arrival to its first generated token.",
                              labels, buckets=_LATENCY_BUCKETS, registry=self.registry).labels(model_name)
        self.e2e = Histogram(f"{PREFIX}e2e_request_latency_seconds",
                             "Seconds from a request's arrival to its end, for requests that ran to the end.",
                             labels, buckets=_LATENCY_BUCKETS, registry=self.registry).labels(model_name)
        self.disconnect_to_idle = Histogram(
            f"{PREFIX}disconnect_to_idle_seconds",
            "Seconds from seeing a client hang up to its actor being idle (native loop stopped).",
            labels, buckets=_CANCEL_BUCKETS, registry=self.registry).labels(model_name)
        self._finished = Counter(f"{PREFIX}request_success", "Requests finished, by finish reason "
                                 "(stop, length, abort: the client hung up or the server stopped, error).",
                                 labels + ["finished_reason"], registry=self.registry)
        self._timeouts = Counter(f"{PREFIX}request_timeouts", "Requests ended by a server limit, by kind (send: "
                                 "the client stopped reading for --send-timeout; read: the body did not arrive "
                                 "within --read-timeout; request: --max-request-seconds).",
                                 labels + ["kind"], registry=self.registry)
        for kind in ("send", "read", "request"):
            self._timeouts.labels(model_name, kind)  # exported at 0 from the start
        self.registry.register(_PoolCollector(reading, model_name, vllm_names))

    def finished(self, reason: str) -> None:
        """Count a finished request."""
        self._finished.labels(self.model_name, reason).inc()

    def timed_out(self, kind: str) -> None:
        """Count a request a limit ended: ``"send"``, ``"read"`` or ``"request"``."""
        self._timeouts.labels(self.model_name, kind).inc()

    def generated(self, stats: StatsSnapshot, predicted: int) -> None:
        """Count a generation that ran to its end: its final ``stats``, the ``predicted`` tokens it reported."""
        self.llama.add(stats, predicted)

    def render(self) -> bytes:
        """The registry, then llama-server's metrics, in Prometheus text format (`CONTENT_TYPE`).

        Restarts the window llama-server's throughput gauges average over.
        """
        return generate_latest(self.registry) + render_llama_metrics(self.llama, self._reading()).encode()


class _PoolCollector:
    """Reads the pool's statistics at every scrape."""

    def __init__(self, reading: Callable[[], PoolReading], model_name: str, vllm_names: bool) -> None:
        self._reading = reading
        self._labels = [model_name]
        self._prefixes = (PREFIX, VLLM_PREFIX) if vllm_names else (PREFIX,)

    def collect(self) -> Iterator[Metric]:
        reading, labels = self._reading(), self._labels
        snap = reading.stats

        def gauge(name: str, doc: str, value: float, prefix: str = PREFIX) -> GaugeMetricFamily:
            metric = GaugeMetricFamily(prefix + name, doc, labels=["model_name"])
            metric.add_metric(labels, value)
            return metric

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            metric = CounterMetricFamily(PREFIX + name, doc, labels=["model_name"])
            metric.add_metric(labels, value)
            return metric

        def per_pos(name: str, doc: str, values: tuple[int, ...]) -> CounterMetricFamily:
            metric = CounterMetricFamily(PREFIX + name, doc, labels=["model_name", "position"])
            for pos, value in enumerate(values):
                metric.add_metric(labels + [str(pos)], value)
            return metric

        held, available = reading.kv_held, reading.kv_available
        for prefix in self._prefixes:  # the endpoint picker's gauges
            yield gauge("num_requests_running", "Requests being served: one per actor generating (its prompt "
                        "being evaluated or its tokens decoded).", reading.busy, prefix)
            yield gauge("num_requests_waiting", "Requests queued for an actor, not yet started.",
                        reading.queued, prefix)
            yield gauge("kv_cache_usage_perc", "KV-cache utilization from 0 to 1: cells held over cells available, "
                        "summed over the actors' sequences; running requests' cells and the prompt prefixes kept "
                        "between requests count as held.", min(held / available, 1.0) if available else 0.0, prefix)
        yield counter("prompt_tokens", "Prompt tokens of the requests.", snap.prompt_tokens)
        yield counter("prefix_cache_queries", "Prompt tokens looked up in the actors' prefix caches.",
                      snap.prompt_tokens)
        yield counter("prefix_cache_hits", "Of those, tokens whose state the cache held (not evaluated again).",
                      snap.prompt_reused)
        yield counter("generation_tokens", "Tokens generated.", snap.tokens_emitted)
        yield gauge("generation_tokens_per_second", "Generation speed: tokens per second of decoding, "
                    "summed over the actors (live while they run).", snap.tokens_per_sec)
        yield counter("spec_decode_num_drafts", "Drafts proposed (loop steps that drafted at least one token).",
                      snap.drafted_per_pos[0] if snap.drafted_per_pos else 0)
        yield counter("spec_decode_num_draft_tokens", "Draft tokens proposed.", snap.drafts_generated)
        yield counter("spec_decode_num_accepted_tokens", "Draft tokens accepted.", snap.drafts_accepted)
        yield per_pos("spec_decode_num_accepted_tokens_per_pos", "Draft tokens accepted at each draft position.",
                      snap.accepted_per_pos)
        yield per_pos("spec_decode_num_draft_tokens_per_pos", "Draft tokens proposed at each draft position.",
                      snap.drafted_per_pos)
        yield gauge("spec_decode_acceptance_rate", "Accepted draft tokens / proposed draft tokens, since start.",
                    snap.acceptance_rate)
