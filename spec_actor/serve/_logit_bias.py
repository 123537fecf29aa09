"""``logit_bias`` and ``ignore_eos``: a request's biases on token logits, as llama-server reads them.

``logit_bias`` is OpenAI's object of token id to bias (``{"15043": -100}``)
or llama-server's array of ``[token, bias]`` pairs; in both, a token may also
be a text, which stands for each of its tokens (tokenized without BOS nor
control tokens), and a bias may be ``false``, which bans the token (-inf).
``ignore_eos: true`` bans every end-of-generation token, as llama-server adds
them to the biases. llama-server skips entries it cannot read; here each is
a 400 naming it (a token outside the vocabulary, a bias that is not a number).
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

from .._model import Model
from .._sampling import Sampling
from ._errors import bad_request
from ._fields import get_field, json_type, short

__all__ = ["MAX_LOGIT_BIAS", "with_logit_bias"]

MAX_LOGIT_BIAS = 4096
"""Most biased tokens per request (texts counted by their tokens)."""


def with_logit_bias(options: dict[str, Any], body: dict[str, Any], model: Model) -> dict[str, Any]:
    """``options`` whose ``sampling`` carries the body's ``logit_bias`` and ``ignore_eos`` (thread-safe).

    Raises:
        ApiError: a 400 naming the field or the entry.
    """
    pairs = _pairs(body.get("logit_bias"), model)
    if get_field(body, "ignore_eos", bool, default=False):
        pairs += [(token, -math.inf) for token in eog_tokens(model)]
    if not pairs:
        return options
    if len(pairs) > MAX_LOGIT_BIAS:
        raise bad_request(f"logit_bias holds {len(pairs)} tokens; send at most {MAX_LOGIT_BIAS}",
                          param="logit_bias")
    sampling: Sampling = options["sampling"]
    return options | {"sampling": dataclasses.replace(sampling, logit_bias=tuple(pairs))}


def eog_tokens(model: Model) -> tuple[int, ...]:
    """The model's end-of-generation tokens, found once per model (a pass over the vocabulary)."""
    found = _EOG.get(model.path)
    if found is None:
        is_eog = model.tokenizer.is_eog
        found = _EOG[model.path] = tuple(t for t in range(model.info.n_vocab) if is_eog(t))
    return found


_ID = re.compile(r"-?[0-9]{1,12}")

_EOG: dict[str, tuple[int, ...]] = {}
"""`eog_tokens` by model path."""


def _pairs(value: object, model: Model) -> list[tuple[int, float]]:
    """The (token, bias) pairs of a ``logit_bias`` field (absent or null: none)."""
    if value is None:
        return []
    if isinstance(value, dict):
        items = [(key, bias, f"logit_bias[{short(key)}]") for key, bias in value.items()]
    elif isinstance(value, list):
        items = []
        for i, entry in enumerate(value):
            if not isinstance(entry, list) or len(entry) != 2:
                raise bad_request(f"logit_bias[{i}] must be a [token, bias] pair, not {json_type(entry)} "
                                  f"{short(entry)}", param=f"logit_bias[{i}]", code="invalid_type")
            items.append((entry[0], entry[1], f"logit_bias[{i}]"))
    else:
        raise bad_request(f"logit_bias must be an object of token to bias or an array of [token, bias] pairs, not "
                          f"{json_type(value)} {short(value)}", param="logit_bias", code="invalid_type")
    pairs: list[tuple[int, float]] = []
    for token, bias, where in items:
        amount = _bias(bias, where)
        pairs += [(t, amount) for t in _tokens(token, model, where)]
    return pairs


def _bias(value: object, where: str) -> float:
    if value is False:
        return -math.inf
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
            and abs(value) <= 1e30:
        return float(value)
    raise bad_request(f"{where}: the bias must be a number (-1e30 to 1e30), or false to ban the token, not "
                      f"{json_type(value)} {short(value)}", param=where, code="invalid_value")


def _tokens(token: object, model: Model, where: str) -> list[int]:
    """The token ids an entry names: an id (a JSON integer, or an object key of digits), or a text's tokens."""
    n_vocab = model.info.n_vocab
    if isinstance(token, str) and _ID.fullmatch(token):  # an object's key that is a number: a token id
        token = int(token)
    if isinstance(token, int) and not isinstance(token, bool):
        if not 0 <= token < n_vocab:
            raise bad_request(f"{where}: token {token} is outside the vocabulary (token ids 0 to {n_vocab - 1})",
                              param=where, code="invalid_value")
        return [token]
    if isinstance(token, str) and token:
        return model.tokenizer.encode(token, add_special=False, parse_special=False)
    raise bad_request(f"{where}: the token must be a token id or a non-empty text, not {json_type(token)} "
                      f"{short(token)}", param=where, code="invalid_type")
