import dataclasses
from pathlib import Path

import cffi
import pytest

from spec_actor._errors import EventDecodeError
from spec_actor._stats import NATIVE_FIELDS, StatsSnapshot, Timings, sum_snapshots
from spec_actor.nif import schema

HEADER = Path(__file__).resolve().parents[1] / "native" / "abi" / "spec_actor.h"
ffi = cffi.FFI()
ffi.cdef(HEADER.read_text().split("/* CDEF-BEGIN */")[1].split("/* CDEF-END */")[0])


def stats_map(**over):
    d = {
        "iters": 10, "drafts_generated": 24, "drafts_accepted": 18,
        "tokens_emitted": 28, "prompt_tokens": 7, "n_draft": 3,
        "t_prefill_us": 1500, "t_draft_us": 2000, "t_verify_us": 9000,
        "t_sample_us": 300, "t_total_us": 13000, "ttft_us": 1800,
        "tokens_per_sec": 2450.5, "acceptance_rate": 0.75,
        "accepted_per_pos": [8, 6, 4], "drafted_per_pos": [10, 8, 6],
        "requests": 1, "t_decode_us": 11500, "drafter": 0,
        "drafter_steps": [0] * 12, "drafter_drafted": [0] * 12, "drafter_accepted": [0] * 12,
        "prompt_reused": 3, "prompt_prefilled": 4,
    }  # fmt: skip
    d.update(over)
    return d


def test_from_map_fills_every_field():
    # drafter ids: 0 plain steps, 8 ngram-mod (llama.cpp's order), 11 the memory
    per_drafter = {"drafter_steps": [2] + [0] * 7 + [5, 0, 0, 3], "drafter_drafted": [0] * 8 + [16, 0, 0, 8],
                   "drafter_accepted": [0] * 8 + [12, 0, 0, 6]}
    snap = StatsSnapshot.from_map(stats_map(requests=2, t_decode_us=11000, drafter=8, **per_drafter))
    assert snap.iters == 10
    assert snap.drafts_generated == 24
    assert snap.drafts_accepted == 18
    assert snap.acceptance_rate == 0.75
    assert snap.tokens_emitted == 28
    assert snap.tokens_per_sec == 2450.5
    assert snap.timing_us == Timings(prefill=1500, draft=2000, verify=9000, sample=300, total=13000)
    assert snap.ttft_us == 1800
    assert snap.prompt_tokens == 7
    assert (snap.prompt_reused, snap.prompt_prefilled) == (3, 4)
    assert snap.n_draft == 3
    assert snap.accepted_per_pos == (8, 6, 4)
    assert snap.drafted_per_pos == (10, 8, 6)
    assert (snap.requests, snap.running, snap.decode_us) == (2, False, 11000)
    assert snap.drafter == "ngram-mod"
    assert [(d.name, d.steps, d.drafted, d.accepted, d.share) for d in snap.drafters] == [
        ("none", 2, 0, 0, 0.0), ("ngram-mod", 5, 16, 12, 12 / 28), ("memory", 3, 8, 6, 6 / 28)]


def test_ints_accepted_for_floats():
    snap = StatsSnapshot.from_map(stats_map(tokens_per_sec=0, acceptance_rate=1))
    assert type(snap.tokens_per_sec) is float and type(snap.acceptance_rate) is float


def test_native_map_keys_are_the_struct_fields_but_n_pos_and_running():
    # The header's struct, parsed here independently of the library's key list.
    header_fields = [name for name, _ in ffi.typeof("sa_stats").fields]
    assert schema.STATS_MAP_KEYS == tuple(f for f in header_fields if f not in ("n_pos", "running"))
    assert set(stats_map()) == set(schema.STATS_MAP_KEYS)


@pytest.mark.parametrize(
    ("d", "needle"),
    [
        ({k: v for k, v in stats_map().items() if k != "iters"}, "missing key(s) ['iters']"),
        ({k: v for k, v in stats_map().items() if k != "t_decode_us"}, "missing key(s) ['t_decode_us']"),
        (stats_map(bogus=1), "unknown key(s) ['bogus']"),
        (stats_map(running=1), "unknown key(s) ['running']"),
        (stats_map(iters="10"), "iters must be int, found str"),
        (stats_map(iters=1.0), "iters must be int, found float"),
        (stats_map(iters=True), "iters must be int, found bool"),
        (stats_map(tokens_per_sec="fast"), "tokens_per_sec must be int or float"),
        (stats_map(requests=None), "requests must be int"),
        (stats_map(accepted_per_pos=(1, 2)), "accepted_per_pos must be list"),
        (stats_map(accepted_per_pos=[1, "2"]), "accepted_per_pos must be a list of at most 64 ints"),
        (stats_map(drafted_per_pos=[0] * 65), "drafted_per_pos must be a list of at most 64 ints"),
        (stats_map(drafter_steps=[0] * (len(schema.DRAFTER_NAMES) + 1)),
         f"drafter_steps must be a list of at most {len(schema.DRAFTER_NAMES)} ints"),
        ([1, 2], "expected a map, found list"),
    ],
)
def test_from_map_rejects_malformed(d, needle):
    with pytest.raises(EventDecodeError) as info:
        StatsSnapshot.from_map(d)
    assert needle in str(info.value)


def test_per_pos_arrays_are_trimmed_to_n_draft():
    snap = StatsSnapshot.from_map(stats_map(n_draft=2, accepted_per_pos=[5, 1] + [0] * 62,
                                            drafted_per_pos=[6, 3] + [0] * 62))  # fmt: skip
    assert snap.accepted_per_pos == (5, 1)
    assert snap.drafted_per_pos == (6, 3)


def test_per_pos_arrays_keep_counts_beyond_a_shrunk_ceiling_and_pad_to_n_draft():
    snap = StatsSnapshot.from_map(stats_map(n_draft=2, accepted_per_pos=[5], drafted_per_pos=[6, 3, 0, 2, 0]))
    assert snap.accepted_per_pos == (5, 0, 0, 0)
    assert snap.drafted_per_pos == (6, 3, 0, 2)
    none = StatsSnapshot.from_map(stats_map(n_draft=0, accepted_per_pos=[0, 0], drafted_per_pos=[]))
    assert none.accepted_per_pos == none.drafted_per_pos == ()


def test_from_fields_reads_a_native_struct():
    s = ffi.new("sa_stats *")
    s.iters, s.tokens_emitted, s.requests, s.running = 4, 9, 3, 1
    s.t_total_us, s.t_decode_us, s.n_draft, s.tokens_per_sec = 777, 555, 3, 12.5
    s.n_pos = 3  # computed natively: max(n_draft, last non-zero position + 1)
    s.accepted_per_pos[0:3] = [4, 1, 0]
    s.drafted_per_pos[0:3] = [4, 4, 2]
    snap = StatsSnapshot.from_fields(**{name: getattr(s, name) for name in NATIVE_FIELDS})
    assert snap.iters == 4 and snap.tokens_emitted == 9 and snap.requests == 3
    assert snap.running is True
    assert snap.timing_us.total == 777 and snap.decode_us == 555
    assert snap.tokens_per_sec == 12.5
    assert snap.accepted_per_pos == (4, 1, 0)
    assert snap.drafted_per_pos == (4, 4, 2)


def test_native_fields_match_the_header_struct():
    assert set(NATIVE_FIELDS) == {name for name, _ in ffi.typeof("sa_stats").fields}


def test_snapshot_is_frozen_slotted_and_documented():
    snap = StatsSnapshot.from_map(stats_map())
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.iters = 0  # type: ignore[misc]
    assert not hasattr(snap, "__dict__")
    source = Path(__file__).resolve().parents[1].joinpath("spec_actor", "_stats.py").read_text()
    for f in dataclasses.fields(StatsSnapshot) + dataclasses.fields(Timings):
        # every field is followed by its docstring
        assert f'{f.name}: ' in source
        after = source.split(f"    {f.name}: ", 1)[1].split("\n", 2)[1]
        assert after.strip().startswith('"""'), f.name


def test_mean_accepted_per_step_and_summary():
    snap = StatsSnapshot.from_map(stats_map())
    assert snap.mean_accepted_per_step == pytest.approx(2.8)
    assert StatsSnapshot.from_map(stats_map(iters=0)).mean_accepted_per_step == 0.0
    line = snap.summary()
    assert "\n" not in line
    for part in ("28 tokens", "2450.5 tok/s", "10 steps", "2.80 tokens/step", "18/24", "75.0%", "ttft 1.8 ms"):
        assert part in line


def test_sum_snapshots_adds_counts_and_per_position_and_recomputes_the_rate():
    a = StatsSnapshot.from_map(stats_map())
    b = StatsSnapshot.from_map(stats_map(drafts_generated=6, drafts_accepted=2, ttft_us=900, n_draft=5,
                                         accepted_per_pos=[2], drafted_per_pos=[3, 2, 1]))  # fmt: skip
    total = sum_snapshots([a, b])
    assert (total.drafts_generated, total.drafts_accepted) == (30, 20)
    assert total.acceptance_rate == pytest.approx(20 / 30)
    assert (total.iters, total.tokens_emitted, total.requests, total.decode_us) == (20, 56, 2, 23000)
    assert total.timing_us == Timings(3000, 4000, 18000, 600, 26000)
    assert total.tokens_per_sec == pytest.approx(2 * 2450.5)
    assert (total.ttft_us, total.n_draft, total.running) == (1800, 5, False)
    # b's arrays are padded to its n_draft of 5
    assert total.accepted_per_pos == (10, 6, 4, 0, 0)
    assert total.drafted_per_pos == (13, 10, 7, 0, 0)
