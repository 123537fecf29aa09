"""llama-server's native completion body (``POST /completion``), checked and turned into a `Job`.

The body is llama-server's (its ``tools/server/README.md``): ``prompt`` as
text, token ids, texts and ids mixed, or ``{"prompt_string": text}``;
``n_predict`` (-1: until the end of generation or of the context; alias
``max_tokens``), ``stream``, ``cache_prompt``, ``n_probs``,
``return_tokens``, ``response_fields``, ``post_sampling_probs``, ``timings_per_token``,
``return_progress``, the samplers this server has, and
``grammar`` or ``json_schema``. Samplers this server does not have are
accepted only at the values that turn them off (`_settings.OFF`); their
tuning fields, inert then, are only type-checked. The prompt is tokenized
by `_prepare` as llama-server does it: control-token text parsed, BOS
before a leading text.
"""

from __future__ import annotations

from typing import Any

from .._limits import GrammarLimits
from .._validate import MAX_TOP_LOGPROBS
from ._errors import bad_request
from ._fields import get_field, json_object, json_type, short
from ._params import Job, NativeFields, request_options, timings_per_token, unsupported
from ._settings import SAMPLERS

__all__ = ["parse_native"]

# Samplers and options this server does not have: when each is off (the test), and what to send instead.
_SWITCHES: dict[str, tuple[Any, str]] = {
    "dynatemp_range": (lambda v: v == 0, "0"),
    "top_n_sigma": (lambda v: v <= 0, "-1"),
    "xtc_probability": (lambda v: v == 0, "0"),
    "typical_p": (lambda v: v >= 1, "1"),
    "dry_multiplier": (lambda v: v == 0, "0"),
    "mirostat": (lambda v: v == 0, "0"),
    "adaptive_target": (lambda v: v < 0, "-1"),
    "n_indent": (lambda v: v == 0, "0"),
    "t_max_predict_ms": (lambda v: v <= 0, "0"),
}
# Fields that tune a switched-off sampler, or have no effect here (the context is never shifted: a generation
# stops at its end; the pool places requests by their shared prefix): type-checked, else ignored.
_INERT_NUMBERS = ("dynatemp_exponent", "xtc_threshold", "dry_base", "dry_allowed_length", "dry_penalty_last_n",
                  "mirostat_tau", "mirostat_eta", "adaptive_decay", "n_keep", "n_discard", "min_keep",
                  "n_cache_reuse", "id_slot", "sse_ping_interval")
# backend_sampling: where the sampler runs (a GPU's backend), not what it draws
_INERT_FLAGS = ("cache_prompt", "verbose", "backend_sampling")
_NEUTRAL_SAMPLERS = ("penalties", "dry", "top_n_sigma", "typ_p", "xtc")
_PROMPT_FIELD = "prompt_string"
MAX_PROMPTS = 16
"""Most prompts in one request (each a request of the pool's queue)."""


def parse_native(body: object, n_vocab: int, grammar_limits: GrammarLimits = GrammarLimits(),
                 max_choices: int = 1) -> Job:
    """Check the body of ``POST /completion``; a grammar against ``grammar_limits``, ``n_cmpl`` to ``max_choices``.

    Raises:
        ApiError: a 400 naming the field to change.
    """
    body = json_object(body)
    _refuse_switched_on(body)
    prompts = _prompts(body.get("prompt"), n_vocab)
    n = _n_cmpl(body, max_choices)
    n_predict = _n_predict(body)
    n_probs = _n_probs(body)
    return_tokens = get_field(body, "return_tokens", bool, default=False)
    fields = get_field(body, "response_fields", list, default=None)
    if fields is not None and not all(isinstance(f, str) for f in fields):
        raise bad_request("response_fields must be an array of field names", param="response_fields",
                          code="invalid_type")
    if get_field(body, "seed", int, default=None) == -1:  # llama-server's "random seed", the library's default
        body = {k: v for k, v in body.items() if k != "seed"}
    post_sampling = get_field(body, "post_sampling_probs", bool, default=False)
    options = request_options(body, grammar_limits) | {"logprobs": n_probs or None}
    if n_probs and post_sampling:
        options["logprobs_after_sampling"] = True
    # an empty list asks for every field, as llama-server reads it
    native = NativeFields(n_predict, n_probs, return_tokens, tuple(fields) if fields else None,
                          ignore_eos=get_field(body, "ignore_eos", bool, default=False), prompts=tuple(prompts),
                          post_sampling_probs=post_sampling)
    return Job("native", get_field(body, "stream", bool, default=False), False,
               max_tokens=None if n_predict < 0 else n_predict, prompt=prompts[0], options=options, native=native,
               n=n, timings_per_token=timings_per_token(body))


def _n_cmpl(body: dict[str, Any], max_choices: int) -> int:
    """``n_cmpl`` (alias ``n``): completions per prompt, each a sequence of the pool, at most ``max_choices``."""
    name = "n_cmpl" if body.get("n_cmpl") is not None else "n"
    n = get_field(body, name, int, default=1)
    if not 1 <= n <= max_choices:
        raise bad_request(f"{name}={n} is invalid: ask for 1 to {max_choices} completions (the pool's size, "
                          "--pool, or --max-choices)", param=name)
    return n


def _refuse_switched_on(body: dict[str, Any]) -> None:
    for name, (off, instead) in _SWITCHES.items():
        value = get_field(body, name, float, default=None)
        if value is not None and not off(value):
            raise bad_request(f"{name}={short(body[name])} is not supported by this server (it has no such "
                              f"sampler or option); send {instead} or leave {name} out", param=name,
                              code="unsupported")
    for name in _INERT_NUMBERS:
        get_field(body, name, float, default=None)
    for name in _INERT_FLAGS:
        get_field(body, name, bool, default=None)
    for name in ("lora", "multimodal_data"):
        value = body.get(name)
        if value not in (None, [], {}):
            raise unsupported(name, name)
    breakers = body.get("dry_sequence_breakers")
    if breakers is not None and not (isinstance(breakers, list) and all(isinstance(b, str) for b in breakers)):
        raise bad_request("dry_sequence_breakers must be an array of strings", param="dry_sequence_breakers",
                          code="invalid_type")
    _check_samplers(body.get("samplers"))


def _check_samplers(samplers: object) -> None:
    """``samplers`` must name the chain that runs here: llama.cpp's default order, samplers that are off aside."""
    if samplers is None:
        return
    if not isinstance(samplers, list) or not all(isinstance(s, str) for s in samplers):
        raise bad_request(f"samplers must be an array of sampler names, not {json_type(samplers)}",
                          param="samplers", code="invalid_type")
    unknown = [s for s in samplers if s not in SAMPLERS]
    if unknown:
        raise bad_request(f"samplers: {short(unknown)} are not samplers; use {', '.join(SAMPLERS)}",
                          param="samplers", code="invalid_value")
    active = [s for s in samplers if s not in _NEUTRAL_SAMPLERS]
    expected = [s for s in SAMPLERS if s not in _NEUTRAL_SAMPLERS]
    if active != expected:
        raise unsupported("samplers", f"samplers={short(samplers)} (this server runs {', '.join(expected)}, "
                                      "in that order)")


def _prompts(prompt: object, n_vocab: int) -> list[str | list[int | str]]:
    """The prompts: one, or an array of several (each a text, an array of ids and texts, or an object).

    As llama-server reads it: an array holding a token id is one prompt; any
    other array (of texts, arrays, objects) holds several.
    """
    if isinstance(prompt, list) and prompt and not any(isinstance(p, int) and not isinstance(p, bool)
                                                       for p in prompt):
        if len(prompt) > MAX_PROMPTS:
            raise bad_request(f"prompt holds {len(prompt)} prompts; send at most {MAX_PROMPTS} per request",
                              param="prompt")
        return [_prompt(p, n_vocab, f"prompt[{i}]") for i, p in enumerate(prompt)]
    return [_prompt(prompt, n_vocab, "prompt")]


def _prompt(prompt: object, n_vocab: int, where: str) -> str | list[int | str]:
    """One prompt: text, texts and token ids (checked against the vocabulary), or an object; errors name ``where``."""
    if isinstance(prompt, dict):
        if prompt.get("multimodal_data") not in (None, []):
            raise unsupported(where, "multimodal_data (this server has no multimodal model)")
        if not isinstance(prompt.get(_PROMPT_FIELD), str):
            raise bad_request(f"{where} as an object must have a string {_PROMPT_FIELD}",
                              param=f"{where}.{_PROMPT_FIELD}", code="invalid_type")
        return prompt[_PROMPT_FIELD]
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        for i, item in enumerate(prompt):
            if isinstance(item, str):
                continue
            if not isinstance(item, int) or isinstance(item, bool):
                raise bad_request(f"{where}[{i}] must be a text or a token id, not {json_type(item)} {short(item)}",
                                  param=f"{where}[{i}]", code="invalid_type")
            if not 0 <= item < n_vocab:
                raise bad_request(f"{where}[{i}] is {item}, outside the vocabulary (token ids 0 to {n_vocab - 1})",
                                  param=f"{where}[{i}]", code="invalid_value")
        if prompt:
            return prompt
    raise bad_request(f"{where} must be a text, an array of token ids and texts, or {{\"{_PROMPT_FIELD}\": text}}, "
                      f"not {json_type(prompt)} {short(prompt)}", param=where,
                      code="missing" if prompt is None else "invalid_type")


def _n_predict(body: dict[str, Any]) -> int:
    for name in ("n_predict", "max_tokens", "max_completion_tokens"):
        value = get_field(body, name, int, default=None)
        if value is not None:
            if value == 0 or value < -1:
                raise bad_request(f"{name}={value} is invalid: ask for at least 1 token, or -1 for no limit "
                                  "(evaluating a prompt without generating is not supported)", param=name)
            return value
    return -1


def _n_probs(body: dict[str, Any]) -> int:
    name = "n_probs" if body.get("n_probs") is not None else "logprobs"
    value = get_field(body, name, int, default=0)
    if not 0 <= value <= MAX_TOP_LOGPROBS:
        raise bad_request(f"{name}={value} is invalid: use 0 to {MAX_TOP_LOGPROBS}", param=name)
    return value
