"""Options of one generation request, validated before the request is queued."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, final

from ._errors import ConfigError
from ._sampling import Sampling
from ._validate import check_int, check_logprobs

__all__ = ["RequestOptions"]


@final
@dataclass(frozen=True, slots=True)
class RequestOptions:
    """What a caller asked for in ``stream``, ``stream_events`` or ``generate``.

    Built by `from_kwargs`, which raises `ConfigError` at the call, before
    anything is queued or reaches native code.
    """

    max_tokens: int = 256
    """Most tokens to generate (at least 1)."""
    emit_stats_every: int = 0
    """Emit a `Stats` event every this many tokens; 0 for none."""
    timeout: float | None = None
    """Seconds without an event, once the request runs, before it fails; None for no limit."""
    deadline: float | None = None
    """`trio.current_time()` by which the request ends, queued or running; None for no limit."""
    stop: tuple[str, ...] = ()
    """Stop strings: the output ends before the first one that appears."""
    add_special: bool = True
    """Add the model's special tokens (BOS) to a text prompt."""
    parse_special: bool = False
    """Parse special-token text (``<start_of_turn>``) in a text prompt."""
    sampling: Sampling = Sampling()
    """How the next token is chosen."""
    logprobs: int | None = None
    """Tokens carry the target's log-probability and this many alternatives (0 to 20); None: none."""
    logprobs_after_sampling: bool = False
    """``logprobs`` are those of the distribution the sampler drew from (after its samplers), not the raw logits'."""
    prompt_progress: bool = False
    """Emit `Progress` events while the prompt is evaluated (one before it starts, one per chunk)."""

    @classmethod
    def from_kwargs(cls, *, max_tokens: int = 256, emit_stats_every: int = 0, timeout: float | None = None,
                    deadline: float | None = None, stop: str | list[str] | tuple[str, ...] | None = None, add_special: bool = True,
                    parse_special: bool = False, sampling: Sampling | None = None,
                    logprobs: int | None = None, logprobs_after_sampling: bool = False, prompt_progress: bool = False,
                    **sampling_options: Any) -> RequestOptions:
        """Validate the public request options.

        Raises:
            ConfigError: An option is unknown or out of range; the message
                names it and says what is allowed.
        """
        check_int("max_tokens", max_tokens, 1, hint="ask for at least one token")
        check_int("emit_stats_every", emit_stats_every, 0, hint="use 0 for no Stats events")
        if timeout is not None:
            if (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                    or not timeout > 0 or math.isnan(timeout)):
                raise ConfigError(f"timeout={timeout!r} is invalid: expected seconds > 0, or None for no limit")
            timeout = float(timeout)
        if deadline is not None:
            if isinstance(deadline, bool) or not isinstance(deadline, (int, float)) or math.isnan(deadline):
                raise ConfigError(f"deadline={deadline!r} is invalid: expected a trio.current_time() value, "
                                  "or None for no limit")
            deadline = float(deadline)
        for name, flag in (("add_special", add_special), ("parse_special", parse_special),
                           ("logprobs_after_sampling", logprobs_after_sampling), ("prompt_progress", prompt_progress)):
            if not isinstance(flag, bool):
                raise ConfigError(f"{name}={flag!r} is invalid: expected True or False")
        if sampling is None:
            sampling = Sampling.from_options(**sampling_options)
        elif not isinstance(sampling, Sampling):
            raise ConfigError(f"sampling={sampling!r} is invalid: expected a spec_actor.Sampling")
        elif sampling_options:
            raise ConfigError("pass either sampling=Sampling(...) or sampler options "
                              f"({', '.join(sorted(sampling_options))}), not both")
        return cls(max_tokens, emit_stats_every, timeout, deadline, _stop_strings(stop), add_special,
                   parse_special, sampling, check_logprobs(logprobs), logprobs_after_sampling, prompt_progress)


def _stop_strings(stop: object) -> tuple[str, ...]:
    if stop is None:
        return ()
    items = (stop,) if isinstance(stop, str) else stop
    if not isinstance(items, (list, tuple)) or not all(isinstance(s, str) and s for s in items):
        raise ConfigError(f"stop={stop!r} is invalid: expected a non-empty string or a list of them")
    return tuple(dict.fromkeys(items))
