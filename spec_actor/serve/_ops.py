"""The operational routes, open without an API key: ``GET /health`` and ``GET /metrics``."""

from __future__ import annotations

from ._errors import endpoint_off, rpc_worker_failed, shutting_down
from ._http import Exchange
from ._metrics import CONTENT_TYPE
from ._state import ServerState

__all__ = ["health", "metrics"]


async def health(exchange: Exchange, state: ServerState) -> None:
    """``GET /health``: 200 while serving (asleep too); 503 once stopping, or once the model's RPC worker failed."""
    if state.stopping.is_set():
        raise shutting_down()
    if not state.keeper.sleeping and (failure := state.pool.model.rpc_failure()) is not None:
        raise rpc_worker_failed(failure)
    await exchange.send_json(200, {"status": "ok"})


async def metrics(exchange: Exchange, state: ServerState) -> None:
    """``GET /metrics``: Prometheus text (`ServerMetrics`); when the server started, in llama-server's header
    (capitalized as it writes it: clients that keep headers in a plain dict look it up that way).

    A 501 when the server was started with ``--no-metrics``.
    """
    if not state.endpoints.metrics:
        raise endpoint_off("/metrics", "--no-metrics")
    await exchange.send_bytes(200, state.metrics.render(), [(b"content-type", CONTENT_TYPE.encode()),
                                                            (b"Process-Start-Time-Unix", b"%d" % state.created)])
