"""llama-server's native completion, ``POST /completion`` (and ``/completions``), on the OpenAI routes' path.

The body is checked by `_native.parse_native`. The answer goes through
`Answer`, as a chat's does (hang-ups, shutdown, stalls, metrics), shaped as
llama-server's: a whole object with
``content``, ``tokens``, ``stop``, ``stop_type``, ``timings``,
``generation_settings``, ``tokens_cached`` and ``completion_probabilities``;
or a stream of one event per token and a last one with ``stop: true`` and
the same fields, with no ``[DONE]``. With ``return_progress`` the stream
reports the prompt's evaluation first (``prompt_progress``, one event before
it starts and one per chunk the engine decodes); with ``timings_per_token``
every event carries the ``timings`` so far.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio

from .._events import Done, Eog, Progress, Token
from ._errors import shutting_down
from ._generation import Answer, Choice, choice_options
from ._http import Exchange
from ._logprobs import native_probabilities
from ._prepare import Prepared, prepare_body
from ._settings import generation_settings
from ._state import ServerState
from ._timings import progress_timings, prompt_progress, speculation_fields, timings
from ._work import in_worker, read_body

__all__ = ["NativeAnswer", "completion", "native_answer"]


async def completion(exchange: Exchange, state: ServerState) -> None:
    """``POST /completion``: llama-server's native completion."""
    model, n_ctx, limits, template = state.pool.model, state.n_ctx, state.limits, state.chat_template
    await native_answer(exchange, state, lambda data: prepare_body("native", data, model, n_ctx, limits, template,
                                                                   state.max_choices, defaults=state.defaults))


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
    """A native completion's run, answered in llama-server's shape: one answer per choice.

    A request with several prompts, or ``n_cmpl`` above 1, has several
    choices (``n_cmpl`` of each prompt, in order); a whole answer is then
    an array of answers, and a stream's events carry their choice's ``index``.
    """

    def __init__(self, exchange: Exchange, prepared: Prepared, state: ServerState, arrived_at: float) -> None:
        super().__init__(exchange, prepared, state, arrived_at)
        assert self.job.native is not None
        self.native = self.job.native
        self.prompts = prepared.prompt_tokens()
        self.ids: list[list[int]] = [[] for _ in self.choices]
        """Each choice's generated token ids (all of them for a whole answer; a stream sends each at once)."""
        self.probs: list[list[Token]] = [[] for _ in self.choices]
        """Each choice's tokens whose probabilities go into its whole answer."""
        self.has_new_line = [False] * len(self.choices)
        """Whether a token a choice generated held a newline."""

    def _prompt_of(self, choice: Choice) -> list[int]:
        return self.prompts[choice.index // self.job.n]

    async def _deliver(self, choice: Choice, ev: Token) -> None:
        i = choice.index
        self.has_new_line[i] = self.has_new_line[i] or "\n" in ev.text
        if not self.job.stream:
            choice.text.append(ev.text)
            self.ids[i].append(ev.id)
            if self.native.n_probs:
                self.probs[i].append(ev)
            return
        chunk = self._chunk(choice, ev.text, [ev.id])
        if self.job.timings_per_token:
            chunk["timings"] = timings(choice.stats(), choice.tokens)
        if self.native.n_probs:
            chunk["completion_probabilities"] = native_probabilities([ev], self.state.pool.model.tokenizer,
                                                                     self.native.post_sampling_probs)
        await self.exchange.send_event(chunk)

    async def _progress(self, choice: Choice, ev: Progress) -> None:
        """llama-server's report of the prompt's evaluation: an event without text, with ``prompt_progress`` (and
        the ``timings`` so far, with ``timings_per_token``). The first opens the stream."""
        if not self.exchange.started:
            await self._open_stream()
        chunk = self._chunk(choice, "", [])
        if self.job.timings_per_token:
            chunk["timings"] = progress_timings(ev)
        await self.exchange.send_event(chunk | {"prompt_progress": prompt_progress(ev)})

    def _chunk(self, choice: Choice, text: str, ids: list[int]) -> dict[str, Any]:
        """A streamed event of ``choice`` before its last: a piece of text and its token ids."""
        return {"index": choice.index, "content": text, "tokens": ids, "stop": False, "id_slot": -1,
                "tokens_predicted": choice.tokens, "tokens_evaluated": len(self._prompt_of(choice))}

    async def _close_choice(self, choice: Choice, extra: dict[str, Any] | None = None) -> None:
        """A streamed choice's last event: its whole answer's fields, with ``stop: true``."""
        if not self.exchange.started:  # not a single token (an immediate end of generation)
            await self._open_stream()
        await self.exchange.send_event(await self._final(choice))

    async def _respond(self) -> None:
        if not self.job.stream:
            answers = [await self._final(choice) for choice in self.choices]
            await self.exchange.send_json(200, answers[0] if len(answers) == 1 else answers)
            return
        if len(self.choices) == 1:  # several choices sent each as it ended
            await self._close_choice(self.choices[0])
        await self.exchange.end_events()

    async def _final(self, choice: Choice) -> dict[str, Any]:
        """Choice ``choice``'s whole answer (a stream's last event of it), counted in the metrics."""
        i = choice.index
        prompt_tokens, _ = choice.counts()
        self.state.metrics.finished(choice.finish_reason or "stop")
        tokenizer = self.state.pool.model.tokenizer
        prompt_ids = self._prompt_of(choice)
        prompt = await in_worker(self.state, lambda: tokenizer.decode(prompt_ids, special=True))
        stop = self.job.options.get("stop") or []
        stop_type = _stop_type(choice.end)
        # llama-server counts an end-of-generation token among the predicted ones and lists it in `tokens`
        eog = [choice.end.token] if type(choice.end) is Eog else []
        predicted = choice.tokens + len(eog)
        speculation = speculation_fields(choice.stats(), predicted)
        sampling = choice_options(self.job.options, i % self.job.n)["sampling"]  # its own seed
        settings = generation_settings(sampling, n_predict=self.native.n_predict,
                                       stream=self.job.stream, n_probs=self.native.n_probs, stop=stop,
                                       speculative_type=self.state.pool.actors[0].spec.type,
                                       ignore_eos=self.native.ignore_eos,
                                       post_sampling_probs=self.native.post_sampling_probs,
                                       timings_per_token=self.job.timings_per_token)
        answer = {
            "index": i,
            "content": "" if self.job.stream else "".join(choice.text),
            "tokens": self.ids[i] + eog if self.native.return_tokens and not self.job.stream else [],
            "id_slot": -1,
            "stop": True,
            "model": self.state.model_name,
            "tokens_predicted": predicted,
            "tokens_evaluated": prompt_tokens,
            "generation_settings": settings,
            "prompt": prompt,
            "has_new_line": self.has_new_line[i],
            "truncated": self._truncated(choice),
            "stop_type": stop_type,
            "stopping_word": stop[0] if stop_type == "word" and len(stop) == 1 else "",
            # what the context holds, as llama-server counts it: the prompt and every predicted token but
            # the last, which was sampled and never evaluated
            "tokens_cached": prompt_tokens + max(predicted - 1, 0),
        } | speculation
        if self.probs[i]:
            answer["completion_probabilities"] = native_probabilities(self.probs[i], tokenizer,
                                                                      self.native.post_sampling_probs)
        if self.native.response_fields is not None:
            answer = _pick(answer, self.native.response_fields)
        return answer

    def _truncated(self, choice: Choice) -> bool:
        """Whether the context's end stopped ``choice``: it ended by length short of ``n_predict`` (or without one).

        llama-server (without ``--context-shift``) says ``truncated`` then.
        """
        end = choice.end
        if type(end) is not Done or end.reason != "max_tokens":
            return False
        return self.native.n_predict < 0 or choice.tokens < self.native.n_predict


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

