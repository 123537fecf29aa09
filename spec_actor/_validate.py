"""Parameter checks shared by `Spec` and `Sampling`.

Each check returns the value normalised (ints stay ints, numbers become
floats) or raises `ConfigError` whose message names the parameter, the bad
value and what is allowed.
"""

from __future__ import annotations

import math

from ._errors import ConfigError

INT32_MAX = 2**31 - 1


def _fail(name: str, value: object, expected: str, hint: str) -> ConfigError:
    msg = f"{name}={value!r} is invalid: expected {expected}"
    return ConfigError(f"{msg}; {hint}" if hint else msg)


def check_int(name: str, value: object, lo: int, hi: int = INT32_MAX, hint: str = "") -> int:
    """Return ``value`` if it is an int (not a bool) with ``lo <= value <= hi``."""
    if type(value) is not int or not lo <= value <= hi:
        raise _fail(name, value, f"an int from {lo} to {hi}", hint)
    return value


MAX_TOP_LOGPROBS = 20
"""Most alternatives a token's logprobs may list (OpenAI's top_logprobs limit)."""


def check_logprobs(value: object) -> int | None:
    """Return ``value`` if it is None (no logprobs) or an int from 0 to `MAX_TOP_LOGPROBS`."""
    if value is None:
        return None
    return check_int("logprobs", value, 0, MAX_TOP_LOGPROBS,
                     hint="the number of most likely alternatives per token, or None for no logprobs")


def check_float(
    name: str,
    value: object,
    lo: float = -math.inf,
    hi: float = math.inf,
    *,
    lo_open: bool = False,
    hint: str = "",
) -> float:
    """Return ``float(value)`` if it is a finite int or float within bounds.

    ``lo`` is inclusive unless ``lo_open``; ``hi`` is inclusive.
    """
    try:
        number = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan
    except OverflowError:  # an int too large for a float
        number = math.nan
    if not (math.isfinite(number) and (lo < number if lo_open else lo <= number) and number <= hi):
        bounds = []
        if lo > -math.inf:
            bounds.append(f"{'>' if lo_open else '>='} {lo:g}")
        if hi < math.inf:
            bounds.append(f"<= {hi:g}")
        expected = " ".join(["a finite number", " and ".join(bounds)]).rstrip()
        raise _fail(name, value, expected, hint)
    return number
