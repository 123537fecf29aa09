"""The OpenAI routes: completions and chat completions (whole or streamed), and the model list."""

from __future__ import annotations

from typing import Literal

import trio

from ._errors import shutting_down
from ._generation import answer
from ._http import Exchange
from ._prepare import prepare_body
from ._state import ServerState
from ._work import in_worker, read_body

__all__ = ["chat", "completions", "models"]


async def completions(exchange: Exchange, state: ServerState) -> None:
    """``POST /v1/completions``."""
    await _generate(exchange, state, "completion")


async def chat(exchange: Exchange, state: ServerState) -> None:
    """``POST /v1/chat/completions``."""
    await _generate(exchange, state, "chat")


async def _generate(exchange: Exchange, state: ServerState, kind: Literal["completion", "chat"]) -> None:
    arrived_at = trio.current_time()
    if state.stopping.is_set():
        raise shutting_down()
    data = await read_body(exchange, state)
    prepared = await in_worker(state, prepare_body, kind, data, state.pool.model, state.n_ctx, state.limits,
                               state.chat_template, state.max_choices, state.defaults)
    await answer(exchange, prepared, state, arrived_at)


async def models(exchange: Exchange, state: ServerState) -> None:
    """``GET /v1/models``: the one model, as OpenAI lists models, with llama-server's ``aliases`` and ``tags``."""
    model = {"id": state.model_name, "aliases": list(state.model_aliases), "tags": list(state.model_tags),
             "object": "model", "created": state.created, "owned_by": "spec_actor"}
    await exchange.send_json(200, {"object": "list", "data": [model]})
