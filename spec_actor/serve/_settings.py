"""llama-server's ``generation_settings``: a request's sampling as its ``/completion`` and ``/props`` show it.

The names and the fields are llama-server's (``task_params::to_json``).
Samplers this server does not have (DRY, XTC, typical-p, top-n-sigma,
dynamic temperature, Mirostat) are reported at the values that turn them
off, which is how they run here. ``samplers`` is llama.cpp's default chain,
the one the native sampler builds (``common_sampler_init``).
"""

from __future__ import annotations

import math
from typing import Any

from .._sampling import Sampling

__all__ = ["OFF", "SAMPLERS", "generation_settings"]

SAMPLERS = ("penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature")
"""llama.cpp's default sampler chain, in order: what every request here runs."""

OFF = {"dynatemp_range": 0.0, "dynatemp_exponent": 1.0, "top_n_sigma": -1.0, "xtc_probability": 0.0,
       "xtc_threshold": 0.1, "typical_p": 1.0, "dry_multiplier": 0.0, "dry_base": 1.75, "dry_allowed_length": 2,
       "dry_penalty_last_n": 64, "mirostat": 0, "mirostat_tau": 5.0, "mirostat_eta": 0.1, "adaptive_target": -1.0,
       "adaptive_decay": 0.9, "dry_sequence_breakers": ["\n", ":", "\"", "*"], "n_keep": 0,
       "n_discard": 0, "min_keep": 0, "grammar_lazy": False,
       "grammar_triggers": [], "preserved_tokens": [], "chat_format": "Content-only", "reasoning_format": "none",
       "reasoning_in_content": False, "generation_prompt": "", "backend_sampling": False}
"""llama-server's fields of samplers and options this server does not have, at the values that turn them off.

The chat fields (``chat_format`` ... ``generation_prompt``) are those of a
plain completion: text as it comes, no reasoning taken out of it."""


def generation_settings(sampling: Sampling, *, n_predict: int = -1, stream: bool = False, n_probs: int = 0,
                        stop: list[str] | None = None, speculative_type: str = "none",
                        ignore_eos: bool = False, post_sampling_probs: bool = False,
                        timings_per_token: bool = False) -> dict[str, Any]:
    """The ``generation_settings`` of a request run with ``sampling`` (``n_predict`` -1: no limit).

    ``logit_bias`` lists the sampling's biases as llama-server does,
    ``{"bias", "token"}`` each, a banned token's bias null (-inf in its JSON).
    """
    return {
        "seed": sampling.seed,
        "temperature": sampling.temp,
        "top_k": sampling.top_k,
        "top_p": sampling.top_p,
        "min_p": sampling.min_p,
        "repeat_last_n": sampling.penalty_last_n,
        "repeat_penalty": sampling.repeat_penalty,
        "presence_penalty": sampling.presence_penalty,
        "frequency_penalty": sampling.frequency_penalty,
        **OFF,
        "ignore_eos": ignore_eos,
        "post_sampling_probs": post_sampling_probs,
        "logit_bias": [{"bias": None if math.isinf(bias) else bias, "token": token}
                       for token, bias in sampling.logit_bias],
        "max_tokens": n_predict,
        "n_predict": n_predict,
        "stream": stream,
        "timings_per_token": timings_per_token,
        "n_probs": n_probs,
        "stop": list(stop or ()),
        "grammar": sampling.grammar or "",
        "samplers": list(SAMPLERS),
        "speculative.types": speculative_type,
        "lora": [],
    }
