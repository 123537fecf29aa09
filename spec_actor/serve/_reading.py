"""`PoolReading`: the pool's figures that ``GET /metrics`` reports, read in one go."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .._pool import ActorPool
from .._stats import StatsSnapshot, sum_snapshots

__all__ = ["PoolReading"]


@dataclass(frozen=True, slots=True)
class PoolReading:
    """The pool's statistics, load and KV-cache use at one moment.

    A sleeping server keeps serving the reading taken as it fell asleep
    (its pool is closed); once awake, its counters continue from there.
    """

    stats: StatsSnapshot
    """Cumulative statistics summed over the actors (`ActorPool.stats`)."""
    busy: int
    """Actors generating."""
    queued: int
    """Requests waiting for an actor."""
    kv_held: int
    """KV-cache cells held (`ActorPool.kv_cells`)."""
    kv_available: int
    """KV-cache cells available."""
    n_decode: int
    """Engine decode steps: the batched pool's session counts them once for all its actors."""

    @classmethod
    def of(cls, pool: ActorPool, base: PoolReading | None = None) -> PoolReading:
        """Read ``pool`` now; with ``base`` (the reading of a closed pool before it), its counts added."""
        actors = pool.actors
        sessions = actors[:1] if pool.batched else actors
        held, available = pool.kv_cells()
        stats, n_decode = pool.stats(), sum(actor.session.steps() for actor in sessions)
        if base is not None:
            # The closed pool's counts, without its last rate (nothing of it runs any more).
            stats = sum_snapshots([dataclasses.replace(base.stats, tokens_per_sec=0.0, running=False), stats])
            n_decode += base.n_decode
        return cls(stats, sum(a.busy for a in actors), sum(a.queued for a in actors), held, available, n_decode)
