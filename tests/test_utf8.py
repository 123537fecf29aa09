from hypothesis import given
from hypothesis import strategies as st

from spec_actor._utf8 import Utf8Stream


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(data)) for c in cuts})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:])]


def _stream(pieces: list[bytes]) -> tuple[list[str], str]:
    stream = Utf8Stream()
    return [stream.push(p) for p in pieces], stream.flush()


@given(st.binary(max_size=64), st.lists(st.integers(0, 64), max_size=12))
def test_arbitrary_bytes_any_split_match_whole_decode(data, cuts):
    pushed, tail = _stream(_split(data, cuts))
    assert "".join(pushed) + tail == data.decode("utf-8", "replace")


@given(
    st.text(alphabet=st.characters(codec="utf-8"), max_size=32)
    | st.sampled_from(["héllo 世界 🦀🎉 👩‍👩‍👧", "\U0010ffff\x00"]),
    st.lists(st.integers(0, 128), max_size=16),
)
def test_valid_text_any_split_is_exact_and_never_replaced(text, cuts):
    pushed, tail = _stream(_split(text.encode("utf-8"), cuts))
    assert "".join(pushed) == text
    assert tail == ""
    assert all("\ufffd" not in p for p in pushed)


def test_split_emoji_is_held_back_until_complete():
    crab = "🦀".encode()
    stream = Utf8Stream()
    assert stream.push(b"a" + crab[:1]) == "a"
    assert stream.pending == 1
    assert stream.push(crab[1:3]) == ""
    assert stream.pending == 3
    assert stream.push(crab[3:] + b"b") == "🦀b"
    assert stream.pending == 0


def test_invalid_bytes_are_replaced_at_once():
    stream = Utf8Stream()
    assert stream.push(b"x\xff") == "x\ufffd"
    assert stream.push(b"\xe4\xb8") == ""  # start of 世, incomplete
    assert stream.push(b"y") == "\ufffdy"  # broken by an ASCII byte


def test_flush_replaces_incomplete_tail_and_resets():
    stream = Utf8Stream()
    assert stream.push("世".encode()[:2]) == ""
    assert stream.flush() == "\ufffd"
    assert stream.pending == 0
    assert stream.push("世".encode()) == "世"
    assert stream.flush() == ""
