"""Prompt progress events (``prompt_progress=True``): the real native prefill, reported chunk by chunk.

A session of ``n_batch`` 32 evaluates a longer prompt in chunks of 32
tokens; each decoded chunk is one `Progress` event, in its own batch (the
last one in the batch of the first token when that token comes from the
prompt's last row). The expected counts are derived from the prompt's
length and the chunk size, the cached ones from the token lists and the
run's statistics, not from the events themselves.
"""

from __future__ import annotations

import random

import pytest
import trio
from tiny_model_fixtures import hybrid_model, tiny_draft, tiny_paths, tiny_target  # noqa: F401

import spec_actor
from spec_actor import ConfigError, Done, Progress, Session, Spec, Stats, Token

N_BATCH = 32
PROMPT = "the quick brown fox jumps over the lazy dog " * 8


def _run(session: Session, prompt: str | list[int], **options: object) -> tuple[list[list[object]], spec_actor.RunResult]:
    batches: list[list[object]] = []

    def sink(events: list[object]) -> bool:
        batches.append(list(events))
        return True

    result = session.run(prompt, max_tokens=4, on_events=sink, **options)
    return batches, result


def _progress(batches: list[list[object]]) -> list[Progress]:
    return [ev for batch in batches for ev in batch if type(ev) is Progress]


def _session(model: spec_actor.Model, **options: object) -> Session:
    return Session(model, spec="none", n_ctx=512, n_batch=N_BATCH, n_ubatch=N_BATCH, n_threads=1, **options)


def test_a_long_prompt_reports_each_chunk_it_decodes(gemma):
    with _session(gemma) as session:
        total = len(session.tokenize(PROMPT))
        assert total > 2 * N_BATCH  # at least three chunks
        batches, result = _run(session, PROMPT, prompt_progress=True)
    progress = _progress(batches)
    # one before any token is evaluated, then one per chunk of N_BATCH tokens, the last one up to the total
    assert [p.processed for p in progress] == [*range(0, total, N_BATCH), total]
    assert all(p.total == total and p.cached == 0 for p in progress)
    assert progress[0].time_us == 0
    times = [p.time_us for p in progress]
    assert times == sorted(times) and times[-1] > 0
    assert times[-1] == result.stats.timing_us.prefill  # the prompt's chunks, as the statistics count them
    # each report arrives as its chunk is done: a batch of its own, the last one with the first token (greedy)
    first_token = next(i for i, batch in enumerate(batches) if any(type(ev) is Token for ev in batch))
    assert [b for b in batches[:first_token]] == [[p] for p in progress[:-1]]
    assert type(batches[first_token][0]) is Progress and type(batches[first_token][1]) is Token
    assert result.status == "done" and len(result.tokens) == 4


def test_without_the_option_a_run_has_no_progress_and_the_same_tokens(gemma):
    with _session(gemma, prefix_cache=False) as session:
        plain, plain_result = _run(session, PROMPT)
        told, told_result = _run(session, PROMPT, prompt_progress=True)
    assert _progress(plain) == [] and _progress(told)
    assert all(type(ev) is not Progress for batch in plain for ev in batch)
    assert plain_result.tokens == told_result.tokens and plain_result.text == told_result.text


def test_a_cached_prefix_counts_as_cached_and_processed_from_the_start(gemma):
    longer = PROMPT + "and then the dog wakes up and chases the fox around the farm yard"
    with _session(gemma) as session:
        _run(session, PROMPT)  # the context keeps this prompt
        first, second = session.tokenize(PROMPT), session.tokenize(longer)
        common = next((i for i, (a, b) in enumerate(zip(first, second)) if a != b), min(len(first), len(second)))
        batches, result = _run(session, longer, prompt_progress=True)
    progress = _progress(batches)
    cached = result.stats.prompt_reused
    assert 0 < cached <= common
    assert progress[0] == Progress(len(second), cached, cached, 0)
    assert [p.processed for p in progress] == [*range(cached, len(second), N_BATCH), len(second)]
    assert all(p.cached == cached and p.total == len(second) for p in progress)


def test_the_same_prompt_again_is_one_report_of_the_whole_prompt(gemma):
    with _session(gemma) as session:
        _run(session, PROMPT)
        total = len(session.tokenize(PROMPT))
        batches, result = _run(session, PROMPT, prompt_progress=True)
    assert _progress(batches) == [Progress(total, total, total, 0)] and result.stats.prompt_reused == total


def test_a_sampled_run_reports_the_whole_prompt_before_its_first_token(gemma):
    # not greedy: the last prompt token is decoded with the first token's step, not with the last chunk
    with _session(gemma) as session:
        total = len(session.tokenize(PROMPT))
        batches, _ = _run(session, PROMPT, prompt_progress=True, temp=0.8, seed=3)
    progress = _progress(batches)
    assert progress[-1].processed == total and progress[0].processed == 0
    processed = [p.processed for p in progress]
    assert processed == sorted(set(processed)) and len(progress) >= 3
    first_token = next(i for i, batch in enumerate(batches) if any(type(ev) is Token for ev in batch))
    assert sum(len(batch) for batch in batches[:first_token]) == len(progress)  # every report before it


@pytest.mark.parametrize("kind", ["draft-simple", "mtp-hybrid"])
def test_a_draft_context_or_a_recurrent_target_reports_up_to_the_whole_prompt(request, kind):
    # a draft context decodes the last prompt token with the first draft, a recurrent target checkpoints
    # before it: chunk ends the engine adds, which the reports follow
    if kind == "draft-simple":
        model, spec = request.getfixturevalue("tiny_target"), Spec("draft-simple", n_draft=3,
                                                                     draft_model=request.getfixturevalue("tiny_draft"))
    else:
        model, spec = request.getfixturevalue("hybrid_model"), Spec("mtp", n_draft=2)
    rng = random.Random(5)
    prompt = [rng.randrange(1, model.info.n_vocab) for _ in range(3 * N_BATCH + 7)]
    with Session(model, spec=spec, n_ctx=512, n_batch=N_BATCH, n_ubatch=N_BATCH, n_threads=1) as session:
        batches, result = _run(session, prompt, prompt_progress=True)
        again, _ = _run(session, prompt + prompt[:9], prompt_progress=True)  # its prefix kept
    processed = [p.processed for p in _progress(batches)]
    assert processed[0] == 0 and processed[-1] == len(prompt) and processed == sorted(set(processed))
    assert all(b - a <= N_BATCH for a, b in zip(processed, processed[1:]))
    assert result.status == "done" and len(result.tokens) == 4
    kept = _progress(again)
    assert kept[0].processed == kept[0].cached > 0 and kept[-1].processed == len(prompt) + 9


def test_a_reader_that_stops_at_a_progress_report_stops_the_run(gemma):
    with _session(gemma, prefix_cache=False) as session:
        seen: list[object] = []

        def stop_at_second_report(events: list[object]) -> bool:
            seen.extend(events)
            return sum(type(ev) is Progress for ev in seen) < 2

        result = session.run(PROMPT, max_tokens=4, on_events=stop_at_second_report, prompt_progress=True)
        assert result.status == "stopped" and result.tokens == ()
        assert [type(ev) for ev in seen] == [Progress, Progress]
        # the session serves the next request as usual
        again = session.run(PROMPT, max_tokens=4)
        assert again.status == "done" and len(again.tokens) == 4


async def test_an_actors_event_stream_yields_progress_when_asked(gemma):
    async with spec_actor.open_actor(gemma, spec="none", n_ctx=512, n_batch=N_BATCH, n_ubatch=N_BATCH,
                                     n_threads=1, prefix_cache=False) as actor:
        told = [ev async for ev in actor.stream_events(PROMPT, max_tokens=4, prompt_progress=True,
                                                       emit_stats_every=2)]
        plain = [ev async for ev in actor.stream_events(PROMPT, max_tokens=4, emit_stats_every=2)]
        text = "".join([piece async for piece in actor.stream(PROMPT, max_tokens=4, prompt_progress=True)])
    progress = [ev for ev in told if type(ev) is Progress]
    assert len(progress) >= 3 and progress[-1].processed == progress[-1].total
    assert told.index(progress[-1]) < next(i for i, ev in enumerate(told) if type(ev) is Token)
    assert [ev for ev in told if type(ev) is not Progress and type(ev) is not Stats][:-1] == \
        [ev for ev in plain if type(ev) is not Stats][:-1]
    assert type(told[-1]) is Done and type(plain[-1]) is Done
    assert text == "".join(ev.text for ev in plain if type(ev) is Token)


async def test_a_pool_reports_each_sequences_prompt(gemma):
    async with spec_actor.open_pool(gemma, size=2, spec="none", n_ctx=512, n_batch=N_BATCH, n_ubatch=N_BATCH,
                                    n_threads=1, prefix_cache=False) as pool:
        prompts = [PROMPT, "a different prompt about " + PROMPT]
        totals = [len(gemma.tokenizer.encode(p)) for p in prompts]
        got: list[list[Progress]] = [[], []]

        async def run(i: int) -> None:
            async for ev in pool.stream_events(prompts[i], max_tokens=4, prompt_progress=True):
                if type(ev) is Progress:
                    got[i].append(ev)

        async with trio.open_nursery() as nursery:
            for i in range(2):
                nursery.start_soon(run, i)
    for progress, total in zip(got, totals):
        processed = [p.processed for p in progress]
        assert processed[0] == 0 and processed[-1] == total and processed == sorted(set(processed))
        assert all(p.total == total for p in progress)


@pytest.mark.parametrize("value", ["yes", 1, None])
async def test_prompt_progress_must_be_a_bool(gemma, value):
    async with spec_actor.open_actor(gemma, spec="none", n_ctx=256, n_threads=1) as actor:
        with pytest.raises(ConfigError, match="prompt_progress"):
            actor.stream_events("Hi", prompt_progress=value)
