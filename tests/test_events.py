import dataclasses

import msgpack
import pytest

from spec_actor._errors import ConfigError, DecodeError, EventDecodeError, SpecActorError
from spec_actor._events import TERMINAL, BatchDecoder, Done, Eog, Error, Progress, RawToken, Stats, Token
from spec_actor._stats import StatsSnapshot

STATS = {
    "iters": 3, "drafts_generated": 6, "drafts_accepted": 4, "tokens_emitted": 7,
    "prompt_tokens": 5, "n_draft": 2, "t_prefill_us": 10, "t_draft_us": 20,
    "t_verify_us": 30, "t_sample_us": 4, "t_total_us": 70, "ttft_us": 12,
    "tokens_per_sec": 100.0, "acceptance_rate": 0.6666, "accepted_per_pos": [3, 1],
    "drafted_per_pos": [3, 3], "requests": 1, "t_decode_us": 55, "drafter": 0,
    "drafter_steps": [0] * 12, "drafter_drafted": [0] * 12, "drafter_accepted": [0] * 12,
    "prompt_reused": 2, "prompt_prefilled": 3,
}  # fmt: skip

decode = BatchDecoder().decode


def pack(batch) -> bytes:
    return msgpack.packb(batch, use_bin_type=True)


def test_token_events_decode_to_raw_tokens():
    events = decode(pack([[0, 17, b"he"], [0, 18, "é".encode()[:1]], [0, 19, b""]]))
    assert events == [RawToken(17, b"he"), RawToken(18, b"\xc3"), RawToken(19, b"")]
    assert events[0].id == 17 and events[0].piece == b"he"


def test_empty_batch():
    assert decode(pack([])) == []


def test_stats_done_eog_error_decode_to_events():
    snap = StatsSnapshot.from_map(STATS)
    assert decode(pack([[0, 1, b"a"], [1, STATS]])) == [RawToken(1, b"a"), Stats(snap)]
    assert decode(pack([[2, STATS]])) == [Done(snap, "max_tokens")]
    assert decode(pack([[0, 1, b"a"], [3, STATS, 106]])) == [RawToken(1, b"a"), Eog(snap, 106)]
    assert decode(pack([[4, 16, "llama_decode failed"]])) == [Error("llama_decode failed", 16)]


def test_progress_events_decode_before_the_first_token():
    assert decode(pack([[5, 40, 8, 8, 0]])) == [Progress(40, 8, 8, 0)]
    assert decode(pack([[5, 40, 8, 40, 1234], [0, 1, b"a"]])) == [Progress(40, 8, 40, 1234), RawToken(1, b"a")]


@pytest.mark.parametrize(
    ("batch", "needle"),
    [
        ({"not": "a list"}, "expected an array of events, found dict"),
        ([[0, 1, "text, not bin"]], "token event: expected [0, token_id:int, piece:bin]"),
        ([[0, 1]], "token event: expected"),
        ([[0, -1.5, b"x"]], "token event: expected"),
        ([[0, True, b"x"]], "token event: expected"),
        ([[False, 1, b"x"]], "expected an event kind from 0 to 5, found bool False"),
        ([[6, 1, b"x"]], "expected an event kind from 0 to 5, found int 6"),
        ([[5, 10, 0, 0]], "progress event: expected [5, total:int, cache:int, processed:int, time_us:int]"),
        ([[5, 10, 0, 0, 1.5]], "progress event: expected"),
        ([["0", 1, b"x"]], "found str '0'"),
        ([[]], "expected a non-empty array, found list []"),
        ([7], "event 0: expected a non-empty array, found int 7"),
        ([[1, STATS, 0]], "stats event: expected [1, stats:map]"),
        ([[2]], "done event: expected [2, stats:map]"),
        ([[3, STATS]], "eog event: expected [3, stats:map, eog_token_id:int]"),
        ([[4, "16", "oops"]], "error event: expected [4, code:int, message:str]"),
        ([[4, 16, b"bytes"]], "error event: expected"),
        ([[0, 1, b"a"], [1, {**STATS, "iters": None}]], "event 1: stats map: iters must be int"),
        ([[2, STATS], [0, 1, b"a"]], "event 1 follows the terminal done event"),
        ([[4, 16, "x"], [1, STATS]], "event 1 follows the terminal error event"),
    ],
)
def test_malformed_batches_raise_with_expected_and_found(batch, needle):
    with pytest.raises(EventDecodeError) as info:
        decode(pack(batch))
    assert needle in str(info.value)


@pytest.mark.parametrize(
    "data",
    [b"", b"\xc1", pack([[0, 1, b"a"]]) + b"\x90", b"\x91\x93\x00\x01\xa1\xff", b"\x91\xc7\x01\x05x"],
    ids=["empty", "never-used-byte", "extra-data", "invalid-utf8-str", "ext-type"],
)
def test_invalid_msgpack_raises_event_decode_error(data):
    with pytest.raises(EventDecodeError):
        decode(data)


def test_event_classes_are_frozen_and_terminal_set():
    assert TERMINAL == (Done, Eog, Error)
    snap = StatsSnapshot.from_map(STATS)
    for ev in (Token(1, "a"), Stats(snap), Progress(3, 0, 1, 5), Done(snap), Eog(snap, 2), Error("x")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(ev, dataclasses.fields(ev)[0].name, None)
        assert isinstance(ev, TERMINAL) == (type(ev) in (Done, Eog, Error))


def test_done_reason_is_checked():
    snap = StatsSnapshot.from_map(STATS)
    assert Done(snap, "stop").reason == "stop"
    with pytest.raises(ConfigError):
        Done(snap, "finished")  # type: ignore[arg-type]


def test_error_event_exception():
    exc = Error("llama_decode failed", 16).exception()
    assert type(exc) is DecodeError and exc.code == 16
    plain = Error("worker died").exception()
    assert type(plain) is SpecActorError and plain.code is None and plain.message == "worker died"


def test_error_made_by_spec_actor_carries_its_exception_and_compares_without_it():
    from spec_actor._errors import GenerationTimeout

    timeout = GenerationTimeout("no event for 1 s")
    event = Error(timeout.message, cause=timeout)
    assert event.exception() is timeout
    assert event == Error("no event for 1 s") and "cause" not in repr(event)
    assert type(Error("native", 16).exception()) is DecodeError
