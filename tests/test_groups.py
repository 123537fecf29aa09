"""unwrap_groups: nursery ExceptionGroups become the one exception inside."""

from __future__ import annotations

import sys

import pytest
import trio

if sys.version_info < (3, 11):  # the builtin arrived in 3.11; trio depends on the backport before
    from exceptiongroup import ExceptionGroup

from spec_actor._groups import unwrap_groups


async def test_single_exception_of_our_nursery_is_unwrapped():
    cause = KeyError("cause")
    with pytest.raises(ValueError, match="boom") as info:
        with unwrap_groups():
            async with trio.open_nursery():
                raise ValueError("boom") from cause
    assert info.value.__cause__ is cause


async def test_callers_own_group_keeps_its_shape():
    with pytest.raises(ExceptionGroup) as info:
        with unwrap_groups():
            async with trio.open_nursery():
                raise ExceptionGroup("mine", [ValueError(1)])
    assert info.value.message == "mine"


async def test_several_real_errors_stay_grouped():
    with pytest.raises(ExceptionGroup):
        with unwrap_groups():
            raise ExceptionGroup("two", [ValueError(1), KeyError(2)])


async def test_real_error_wins_over_cancelled():
    with pytest.raises(ValueError):
        with unwrap_groups():
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.sleep_forever)
                await trio.sleep(0)
                raise ValueError("x")
