"""llama-server's own routes beside the completions: tokens, templates, server and slot properties.

``POST /tokenize``, ``/detokenize``, ``/apply-template`` and
``/chat/completions/input_tokens`` answer as llama-server does (its
``tools/server/README.md`` and ``server-context.cpp``); their work runs in a
worker thread (`in_worker`). ``GET /slots`` reads the pool and its lock-free
statistics on the event loop; ``GET /props`` answers what was read once as the
server started, so it answers while the server sleeps (`_sleep`).
"""

from __future__ import annotations

from typing import Any

from .. import __version__
from .._errors import SpecActorError
from ._body import parse_body
from ._errors import ApiError, endpoint_off
from ._http import Exchange
from ._prepare import chat_template_text, count_chat_tokens
from ._settings import generation_settings
from ._state import ServerState
from ._timings import speculation_fields
from ._tokens import detokenize as _detokenize
from ._tokens import tokenize as _tokenize
from ._work import answer_in_worker

__all__ = ["apply_template", "detokenize", "input_tokens", "props", "props_body", "slots", "tokenize"]


async def tokenize(exchange: Exchange, state: ServerState) -> None:
    """``POST /tokenize``: ``content`` to token ids (``add_special``, ``parse_special``, ``with_pieces``)."""
    model = state.pool.model
    await answer_in_worker(exchange, state, lambda data: _tokenize(
        parse_body(data, state.limits.body), model.tokenizer, model.info.n_vocab))


async def detokenize(exchange: Exchange, state: ServerState) -> None:
    """``POST /detokenize``: ``tokens`` to text."""
    model = state.pool.model
    await answer_in_worker(exchange, state, lambda data: _detokenize(
        parse_body(data, state.limits.body), model.tokenizer, model.info.n_vocab))


async def apply_template(exchange: Exchange, state: ServerState) -> None:
    """``POST /apply-template``: a chat body's ``messages`` rendered to the ``prompt`` text, without generating.

    ``add_generation_prompt`` (default true) opens the reply's turn; ``chat_template_kwargs`` go to a Jinja template.
    """
    await answer_in_worker(exchange, state, lambda data: {
        "prompt": chat_template_text(data, state.pool.model, state.limits, state.chat_template, state.defaults)})


async def input_tokens(exchange: Exchange, state: ServerState) -> None:
    """``POST /chat/completions/input_tokens``: the prompt tokens a chat completion body would run."""
    await answer_in_worker(exchange, state, lambda data: {
        "object": "response.input_tokens",
        "input_tokens": count_chat_tokens(data, state.pool.model, state.limits, state.chat_template,
                                          state.defaults)})


async def props(exchange: Exchange, state: ServerState) -> None:
    """``GET /props``: the server's model, template, slots and default generation settings (asleep too)."""
    await exchange.send_json(200, state.props | {"is_sleeping": state.keeper.sleeping})


def props_body(state: ServerState) -> dict[str, Any]:
    """``GET /props``' fields, read from the open pool and its model (`ServerState.props`)."""
    pool, model = state.pool, state.pool.model
    spec = pool.actors[0].spec.type
    defaults = state.defaults
    params = generation_settings(defaults.sampling(), n_predict=defaults.n_predict or -1, speculative_type=spec)
    return {
        "default_generation_settings": {"params": params, "n_ctx": state.n_ctx},
        "total_slots": pool.size,
        "model_alias": state.model_name,
        "model_path": model.path,
        "modalities": {"vision": False, "video": False, "audio": False},
        "endpoint_slots": state.endpoints.slots,
        "endpoint_props": False,
        "endpoint_metrics": state.endpoints.metrics,
        "chat_template": _template(state),
        "bos_token": _special_token(state, "bos"),
        "eos_token": _special_token(state, "eos"),
        "build_info": f"spec_actor {__version__}",
        "is_sleeping": False,
        "speculative": {"type": spec, "n_draft": pool.actors[0].spec.n_draft},
    }


async def slots(exchange: Exchange, state: ServerState) -> None:
    """``GET /slots``: one entry per sequence of the pool, llama-server's fields and its speculation figures.

    ``?fail_on_no_slot=1`` answers 503 when every sequence is busy, as llama-server does; a 501 when the
    server was started with ``--no-slots``.
    """
    if not state.endpoints.slots:
        raise endpoint_off("/slots", "--no-slots")
    actors = state.pool.actors
    if exchange.query("fail_on_no_slot") and all(a.busy for a in actors):
        raise ApiError(503, "no slot available: every sequence of the pool is busy", type="unavailable_error",
                       code="no_slot_available")
    entries: list[dict[str, Any]] = []
    for i, actor in enumerate(actors):
        stats = actor.stats()
        entries.append({"id": i, "n_ctx": actor.n_ctx, "speculative": actor.spec.type != "none",
                        "is_processing": actor.busy, "n_queued": actor.queued, "spec": actor.spec.type,
                        "requests": stats.requests, "n_prompt_tokens": stats.prompt_tokens,
                        "n_prompt_tokens_cache": stats.prompt_reused,
                        "n_prompt_tokens_processed": stats.prompt_prefilled}
                       | speculation_fields(stats, stats.tokens_emitted))
    await exchange.send_json(200, entries)


def _template(state: ServerState) -> str:
    """The chat template in use: the server's, else the GGUF's, else the name of llama.cpp's built-in one."""
    model = state.pool.model
    try:
        return state.chat_template or model.chat_template() or model.chat_template_name()
    except SpecActorError:  # no template and no built-in one for this architecture
        return ""


def _special_token(state: ServerState, which: str) -> str:
    """The text of the model's BOS or EOS token; "" when its GGUF names none."""
    model = state.pool.model
    try:
        token = int(model.meta(f"tokenizer.ggml.{which}_token_id"))
        return model.tokenizer.piece(token, special=True).decode("utf-8", "replace")
    except (SpecActorError, ValueError):
        return ""
