"""Greedy verification's argmax over a row of logits (native/engine/vec_argmax.cpp).

The native routine finds a row's maximum in blocks with the widest SIMD max
the CPU has, then the first index holding it. Its answer must be exactly
std::max_element's, which numpy's argmax also gives (the first index of the
largest value): rows of every length around the block and vector widths,
ties placed across blocks and lanes, and infinities.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spec_actor.nif import testing

BLOCK = 2048  # native kBlock
VOCAB = 262144  # Gemma 3's vocabulary: the row the hot path sees


def first_max(row: np.ndarray) -> int:
    return int(np.argmax(row))


@pytest.mark.parametrize("n", [1, 3, 15, 16, 17, 63, 64, 65, BLOCK - 1, BLOCK, BLOCK + 1, 3 * BLOCK + 5, VOCAB])
def test_random_rows_of_every_length_agree_with_numpy(n: int) -> None:
    rng = np.random.default_rng(n)
    for _ in range(5):
        row = rng.normal(size=n).astype(np.float32)
        assert testing.argmax(row) == first_max(row)


@given(n=st.integers(1, 5000), data=st.data())
@settings(max_examples=200, deadline=None)
def test_ties_go_to_the_first_index(n: int, data: st.DataObject) -> None:
    """Equal maxima anywhere (same lane, other lanes, other blocks): the first one wins."""
    row = np.array(data.draw(st.lists(st.integers(-3, 3), min_size=n, max_size=n)), dtype=np.float32)
    places = data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=4, unique=True))
    row[places] = 9.0
    assert testing.argmax(row) == min(places) == first_max(row)


def test_infinities() -> None:
    row = np.full(VOCAB, -np.inf, dtype=np.float32)
    assert testing.argmax(row) == 0  # all -inf: the first
    row[BLOCK * 7 + 3] = -1e30
    assert testing.argmax(row) == BLOCK * 7 + 3
    row[VOCAB - 1] = np.inf
    row[VOCAB - 2] = np.inf
    assert testing.argmax(row) == VOCAB - 2


def test_a_nan_is_never_the_maximum() -> None:
    rng = np.random.default_rng(7)
    row = rng.normal(size=3 * BLOCK).astype(np.float32)
    expected = first_max(row)
    row[[0, 5, BLOCK + 1, 2 * BLOCK + 17]] = np.nan
    if expected in (0, 5, BLOCK + 1, 2 * BLOCK + 17):
        expected = first_max(np.nan_to_num(row, nan=-np.inf))
    assert testing.argmax(row) == expected
    assert testing.argmax(np.full(100, np.nan, dtype=np.float32)) == 0


def test_an_empty_row_is_refused() -> None:
    with pytest.raises(Exception, match="n < 1"):
        testing.argmax([])
