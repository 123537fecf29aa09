"""llama-server's native completion, ``POST /completion`` (and ``/completions``), on the OpenAI routes' path.

The body is checked by `_native.parse_native`. The answer goes through
`Answer`, as a chat's does (hang-ups, shutdown, stalls, metrics), shaped as
llama-server's: a whole object with
``content``, ``tokens``, ``stop``, ``stop_type``, ``timings``,
``generation_settings``, ``tokens_cached`` and ``completion_probabilities``;
or a stream of one event per token and a last one with ``stop: true`` and
the same fields, with no ``[DONE]``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio

from .._events import Done, Eog, Token
from ._errors import shutting_down
from ._generation import Answer, Choice
from ._http import Exchange
from ._logprobs import native_probabilities
from ._prepare import Prepared, prepare_body
from ._settings import generation_settings
from ._state import ServerState
from ._timings import speculation_fields
from ._work import in_worker, read_body

__all__ = ["NativeAnswer", "completion", "native_answer"]


async def completion(exchange: Exchange, state: ServerState) -> None:
    """``POST /completion``: llama-server's native completion."""
    model, n_ctx, limits, template = state.pool.model, state.n_ctx, state.limits, state.chat_template
    await native_answer(exchange, state, lambda data: prepare_body("native", data, model, n_ctx, limits, template,
                                                                   defaults=state.defaults))


async def native_answer(exchange: Exchange, state: ServerState, prepare: Callable[[bytes], Prepared]) -> None:
    """Read the body, ``prepare`` it in a worker thread, and answer it in llama-server's native shape.

    Raises:
        ApiError: as `Answer.run`, or what ``prepare`` raises.
    """
    arrived_at = trio.current_time()
    if state.stopping.is_set():
        raise shutting_down()
    data = await read_body(exchange, state)
    prepared = await in_worker(state, prepare, data)
    exchange.stream_end = b""  # llama-server's native stream has no [DONE]
    await NativeAnswer(exchange, prepared, state, arrived_at).run()


class NativeAnswer(Answer):
    """A native completion's run, answered in llama-server's shape."""

    def __init__(self, exchange: Exchange, prepared: Prepared, state: ServerState, arrived_at: float) -> None:
        super().__init__(exchange, prepared, state, arrived_at)
        assert self.job.native is not None
        self.native = self.job.native
        self.prompt_ids = prepared.tokens
        self.ids: list[int] = []
        """The generated token ids (all of them for a whole answer; a stream sends each at once)."""
        self.probs: list[Token] = []
        """Tokens whose probabilities go into the whole answer."""
        self.has_new_line = False
        """Whether a generated token held a newline."""

    async def _deliver(self, choice: Choice, ev: Token) -> None:
        self.has_new_line = self.has_new_line or "\n" in ev.text
        if not self.job.stream:
            choice.text.append(ev.text)
            self.ids.append(ev.id)
            if self.native.n_probs:
                self.probs.append(ev)
            return
        chunk = {"index": 0, "content": ev.text, "tokens": [ev.id], "stop": False, "id_slot": -1,
                 "tokens_predicted": self.tokens, "tokens_evaluated": len(self.prompt_ids)}
        if self.native.n_probs:
            chunk["completion_probabilities"] = native_probabilities([ev], self.state.pool.model.tokenizer)
        await self.exchange.send_event(chunk)

    async def _respond(self) -> None:
        choice = self.choices[0]  # one per native request
        prompt_tokens, _ = self._counts()
        self.state.metrics.finished(choice.finish_reason or "stop")
        stats = self._stats()
        tokenizer = self.state.pool.model.tokenizer
        prompt = await in_worker(self.state, lambda: tokenizer.decode(self.prompt_ids, special=True))
        stop = self.job.options.get("stop") or []
        stop_type = _stop_type(choice.end)
        # llama-server counts an end-of-generation token among the predicted ones and lists it in `tokens`
        eog = [choice.end.token] if type(choice.end) is Eog else []
        predicted = self.tokens + len(eog)
        speculation = speculation_fields(stats, predicted)
        settings = generation_settings(self.job.options["sampling"], n_predict=self.native.n_predict,
                                       stream=self.job.stream, n_probs=self.native.n_probs, stop=stop,
                                       speculative_type=self.state.pool.actors[0].spec.type)
        answer = {
            "index": 0,
            "content": "" if self.job.stream else "".join(choice.text),
            "tokens": self.ids + eog if self.native.return_tokens and not self.job.stream else [],
            "id_slot": -1,
            "stop": True,
            "model": self.state.model_name,
            "tokens_predicted": predicted,
            "tokens_evaluated": prompt_tokens,
            "generation_settings": settings,
            "prompt": prompt,
            "has_new_line": self.has_new_line,
            "truncated": False,
            "stop_type": stop_type,
            "stopping_word": stop[0] if stop_type == "word" and len(stop) == 1 else "",
            # what the context holds, as llama-server counts it: the prompt and every predicted token but
            # the last, which was sampled and never evaluated
            "tokens_cached": prompt_tokens + max(predicted - 1, 0),
        } | speculation
        if self.probs:
            answer["completion_probabilities"] = native_probabilities(self.probs, tokenizer)
        if self.native.response_fields is not None:
            answer = _pick(answer, self.native.response_fields)
        if not self.job.stream:
            await self.exchange.send_json(200, answer)
            return
        if not self.exchange.started:  # not a single token (an immediate end of generation)
            await self._open_stream()
        await self.exchange.send_event(answer)
        await self.exchange.end_events()


def _stop_type(end: Done | Eog | None) -> str:
    """llama-server's ``stop_type``: ``eos`` (end of generation), ``word`` (a stop string), ``limit``."""
    if type(end) is Eog:
        return "eos"
    if type(end) is Done and end.reason == "stop":
        return "word"
    return "limit"


def _pick(answer: dict[str, Any], paths: tuple[str, ...]) -> dict[str, Any]:
    """llama-server's ``response_fields``: the fields at ``paths`` (``"a/b"``: ``answer["a"]["b"]``), under those names."""
    out: dict[str, Any] = {}
    for path in paths:
        value: Any = answer
        for key in path.split("/"):
            if not isinstance(value, dict) or key not in value:
                break
            value = value[key]
        else:
            out[path] = value
    return out

