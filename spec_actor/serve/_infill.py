"""llama-server's ``POST /infill``: fill in the middle for editor plugins, answered as ``/completion`` is.

The body is llama-server's: ``input_prefix`` and ``input_suffix`` (the text
before and after the cursor, required; text, or texts and token ids mixed),
``input_extra`` (other files, ``[{"filename", "text"}]``), ``prompt`` (text
that continues the prefix), and every field of ``/completion`` but its
prompt. The prompt is assembled in llama.cpp's repo-level FIM order::

    [BOS] [FIM_REP]myproject\n  ([FIM_SEP]filename\n text)...  [FIM_SEP]filename\n
          [FIM_PRE] prefix prompt [FIM_SUF] suffix [FIM_MID]

where a vocabulary without a repo or separator token gets no repo line, and
each extra file is introduced by ``\n\n--- snippet ---\n\n`` instead. A
model whose vocabulary lacks a prefix, suffix or middle token is a 400.
What does not fit the context (less room for the generation) is dropped
from the far ends: the extra files' start first, then the prefix's start,
then the suffix's end (docs/decisions/0103).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from .._model import FimTokens, Model
from ._body import parse_body
from ._completion import native_answer
from ._defaults import RequestDefaults
from ._errors import bad_request, context_exceeded
from ._fields import get_field, json_object, json_type, short
from ._http import Exchange
from ._limits import ServeLimits
from ._logit_bias import with_logit_bias
from ._native import parse_native
from ._prepare import Prepared
from ._state import ServerState
from ._tokens import mixed_tokens

__all__ = ["INFILL_FIELDS", "InfillParts", "infill", "infill_prompt", "prepare_infill"]

INFILL_FIELDS = ("input_prefix", "input_suffix", "input_extra", "prompt")
"""The fields of ``/infill`` beside those of ``/completion``."""

REPO_LINE = "myproject\n"
"""The repository's name after the repo token (llama-server's, which takes no name from the request)."""
LAST_FILE_LINE = "filename\n"
"""The name after the separator that opens the file being edited."""
SNIPPET_LINE = "\n\n--- snippet ---\n\n"
"""What introduces an extra file where the vocabulary has no separator token."""


@dataclass(frozen=True, slots=True)
class InfillParts:
    """An infill request's texts, checked: what the prompt is assembled from."""

    prefix: str | list[int | str]
    suffix: str | list[int | str]
    extra: tuple[tuple[str, str], ...]
    """The other files, (filename, text) each."""
    prompt: str


async def infill(exchange: Exchange, state: ServerState) -> None:
    """``POST /infill``: llama-server's fill-in-the-middle completion."""
    model, n_ctx, limits, defaults = state.pool.model, state.n_ctx, state.limits, state.defaults
    await native_answer(exchange, state, lambda data: prepare_infill(data, model, n_ctx, limits, defaults))


def prepare_infill(data: bytes, model: Model, n_ctx: int, limits: ServeLimits,
                   defaults: RequestDefaults = RequestDefaults()) -> Prepared:
    """Check the body of ``POST /infill`` and assemble its prompt (thread-safe, bounded by ``limits``).

    ``defaults`` fill the sampling and length fields the body leaves out.

    Raises:
        ApiError: a 400 naming the field, or saying which FIM tokens the
            model lacks; `context_exceeded` where even the prefix and
            suffix tokens with the prompt do not fit.
    """
    body = json_object(defaults.fill(parse_body(data, limits.body), "native"))
    missing = model.fim_tokens.missing
    if missing:
        raise bad_request(f"infill needs fill-in-the-middle tokens, and this model's vocabulary has no "
                          f"{', '.join(missing)} token; use /completion", code="unsupported")
    parts = _parts(body)
    rest = {k: v for k, v in body.items() if k not in INFILL_FIELDS}
    job = parse_native(rest | {"prompt": parts.prompt}, model.info.n_vocab, limits.grammar)
    job = dataclasses.replace(job, options=with_logit_bias(job.options, rest, model))
    room = min(job.max_tokens or n_ctx // 4, n_ctx // 2)  # kept free for the generation
    tokens = infill_prompt(model, parts, n_ctx - room)
    if len(tokens) >= n_ctx:
        raise context_exceeded(len(tokens), n_ctx, "prompt")
    return Prepared(dataclasses.replace(job, prompt=tokens), tokens, job.options)


def infill_prompt(model: Model, parts: InfillParts, budget: int) -> list[int]:
    """The prompt's token ids in llama.cpp's FIM order, within ``budget`` tokens where the parts allow.

    Raises:
        ApiError: a 400 naming the field of a token id outside the vocabulary.
    """
    fim = model.fim_tokens
    assert fim.prefix is not None and fim.suffix is not None and fim.middle is not None
    tok, n_vocab = model.tokenizer, model.info.n_vocab
    prefix = mixed_tokens(tok, n_vocab, parts.prefix, "input_prefix", add_special=False, parse_special=False)
    suffix = mixed_tokens(tok, n_vocab, parts.suffix, "input_suffix", add_special=False, parse_special=False)
    prompt = tok.encode(parts.prompt, add_special=False, parse_special=True) if parts.prompt else []
    extra = _extra_tokens(model, fim, parts.extra)
    bos = tok.encode("", add_special=True)  # the model's BOS where it wants one, else nothing
    spare = budget - (len(bos) + 3 + len(prompt))
    # keep the ends nearest the cursor: the extra files' end, the prefix's end, the suffix's start
    extra = extra[max(0, len(extra) - max(spare - len(prefix) - len(suffix), 0)):]
    prefix = prefix[max(0, len(prefix) - max(spare - len(extra) - len(suffix), 0)):]
    suffix = suffix[:max(spare - len(extra) - len(prefix), 0)]
    return [*bos, *extra, fim.prefix, *prefix, *prompt, fim.suffix, *suffix, fim.middle]


def _extra_tokens(model: Model, fim: FimTokens, extra: tuple[tuple[str, str], ...]) -> list[int]:
    """The repository line and the extra files, each introduced by the separator (or a snippet line)."""
    def text(value: str) -> list[int]:
        return model.tokenizer.encode(value, add_special=False, parse_special=False)

    tokens: list[int] = []
    if fim.repo is not None:
        tokens += [fim.repo, *text(REPO_LINE)]
    for filename, body in extra:
        tokens += [fim.separator, *text(filename + "\n")] if fim.separator is not None else text(SNIPPET_LINE)
        tokens += text(body)
    if fim.separator is not None:
        tokens += [fim.separator, *text(LAST_FILE_LINE)]
    return tokens


def _parts(body: dict[str, Any]) -> InfillParts:
    """The infill fields of ``body``, checked."""
    for name in ("input_prefix", "input_suffix"):
        value = body.get(name)
        if value is None:
            raise bad_request(f"{name} is required: the text {'before' if name == 'input_prefix' else 'after'} "
                              "the cursor (may be empty)", param=name, code="missing")
        if not isinstance(value, (str, list)):
            raise bad_request(f"{name} must be a string or an array of strings and token ids, not "
                              f"{json_type(value)} {short(value)}", param=name, code="invalid_type")
    prompt = get_field(body, "prompt", str, default="")
    return InfillParts(body["input_prefix"], body["input_suffix"], _extra(body.get("input_extra")), prompt)


def _extra(value: object) -> tuple[tuple[str, str], ...]:
    """``input_extra``: [{"filename": str (default "tmp"), "text": str}], checked."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise bad_request(f"input_extra must be an array of {{\"filename\": string, \"text\": string}}, not "
                          f"{json_type(value)} {short(value)}", param="input_extra", code="invalid_type")
    out = []
    for i, chunk in enumerate(value):
        where = f"input_extra[{i}]"
        if not isinstance(chunk, dict):
            raise bad_request(f"{where} must be an object {{\"filename\", \"text\"}}, not {json_type(chunk)}",
                              param=where, code="invalid_type")
        if not isinstance(chunk.get("text"), str):
            raise bad_request(f"{where}.text must be a string", param=f"{where}.text",
                              code="missing" if chunk.get("text") is None else "invalid_type")
        out.append((get_field(chunk, "filename", str, default="tmp", where=f"{where}.filename"), chunk["text"]))
    return tuple(out)
