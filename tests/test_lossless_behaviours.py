"""Behaviours at the edges of speculative batches: UTF-8, stop strings, their counters, a full pool.

A speculative step hands over several tokens in one batch. These tests make
sure that a character split between two batches, and a stop string inside
a batch, come out exactly as plain decoding's text, and that the statistics
count only what was delivered.
"""

from __future__ import annotations

import pytest
import trio

from spec_actor import Done, QueueFullError, Session, Spec, Token, open_actor, open_pool

GOTHIC = "Repeat exactly: 𐌰𐌱𐌲 𐌰𐌱𐌲 𐌰𐌱𐌲 𐌰𐌱𐌲 𐌰𐌱𐌲 𐌰𐌱𐌲"
COPY_PROMPT = (
    "def add(a, b):\n    return a + b\n\n"
    "def mul(a, b):\n    return a * b\n\n"
    "Here is the same code again, copied exactly:\n\n"
    "def add(a, b):\n"
)
COPYING = Spec("ngram-mod", n_draft=8, ngram_mod_n_match=4)


def batches_of(session: Session, prompt: str, n: int) -> tuple[list[list[Token]], str]:
    """The Token events of each loop step of a greedy run, and the run's text."""
    batches: list[list[Token]] = []

    def sink(events):
        batches.append([ev for ev in events if type(ev) is Token])

    result = session.run(prompt, max_tokens=n, temp=0.0, on_events=sink)
    return [b for b in batches if b], result.text


def incomplete_utf8_tail(data: bytes) -> bool:
    """Whether ``data`` ends inside a multi-byte UTF-8 character."""
    try:
        data.decode("utf-8")
        return False
    except UnicodeDecodeError as exc:
        return exc.start >= len(data) - 3 and exc.reason == "unexpected end of data"


def test_a_character_split_across_speculative_batches_comes_out_whole(gemma):
    with Session(gemma, n_ctx=512, n_threads=1) as plain:
        expected = plain.run(GOTHIC, max_tokens=48, temp=0.0)
    with Session(gemma, spec=COPYING, n_ctx=512, n_threads=1) as session:
        batches, text = batches_of(session, GOTHIC, 48)
    # the case under test happened: a multi-token batch, and a batch that
    # ended inside a character whose other bytes came in the next batch
    assert max(len(b) for b in batches) > 1
    raw = b""
    split_at_boundary = 0
    for batch in batches[:-1]:
        raw += b"".join(gemma.tokenizer.piece(t.id) for t in batch)
        split_at_boundary += incomplete_utf8_tail(raw)
    assert split_at_boundary > 0, "no batch boundary fell inside a character"
    pieces = [t.text for b in batches for t in b]
    assert "".join(pieces) == text == expected.text == gemma.tokenizer.decode(expected.tokens)
    assert "\ufffd" not in text and "𐌰𐌱𐌲" in text


def stop_inside_a_batch(batches: list[list[Token]], text: str) -> tuple[str, int, int]:
    """A stop string that first occurs at a token of a batch other than its last.

    Returns the stop string (that token's text), the batch's index and the
    token's index in the batch.
    """
    offset = 0
    for i, batch in enumerate(batches):
        for k, token in enumerate(batch):
            if 0 < k < len(batch) - 1 and len(token.text.strip()) >= 2 and text.find(token.text) == offset:
                return token.text, i, k
            offset += len(token.text)
    raise AssertionError(f"no stop string inside a multi-token batch in {batches!r}")


async def test_stop_string_inside_a_multi_token_batch_counts_only_delivered_tokens(gemma):
    with Session(gemma, spec=COPYING, n_ctx=512, n_threads=1) as session:
        batches, full = batches_of(session, COPY_PROMPT, 64)
    stop, batch_index, k = stop_inside_a_batch(batches, full)
    async with open_actor(gemma, spec=COPYING, n_ctx=512, n_threads=1) as actor:
        async with actor.stream_events(COPY_PROMPT, max_tokens=64, stop=stop) as stream:
            events = [ev async for ev in stream]
    tokens = [ev for ev in events if type(ev) is Token]
    done = events[-1]
    print(f"stop {stop!r} inside batch {batch_index} of {len(batches)}: {[t.text for t in batches[batch_index]]}")
    assert type(done) is Done and done.reason == "stop"
    assert "".join(t.text for t in tokens) == full[:full.index(stop)]
    # the tokens after the stop string, in the same batch and after it, were never delivered
    assert done.stats.tokens_emitted == len(tokens)
    assert stream.stats().tokens_emitted == len(tokens)
    assert len(tokens) == sum(len(b) for b in batches[:batch_index]) + k


async def test_queue_full_error_through_a_pool(gemma):
    async with open_pool(gemma, size=2, n_ctx=128, max_queue=1, n_threads=1) as pool:
        # each actor runs one request and queues one more: the pool is full
        running = [pool.stream_events("Once upon a time", max_tokens=400) for _ in range(2)]
        for stream in running:
            await stream.__aenter__()
        with trio.fail_after(60):
            while not all(a.busy for a in pool.actors):
                await trio.sleep(0.005)
        queued = [pool.stream_events("Once upon a time", max_tokens=2) for _ in range(2)]
        for stream in queued:
            await stream.__aenter__()
        assert [a.queued for a in pool.actors] == [1, 1]
        with pytest.raises(QueueFullError, match="max_queue"):
            async with pool.stream_events("Once upon a time", max_tokens=2):
                pass
        for stream in running + queued:
            await stream.aclose()
        # room again: the pool serves the next request
        assert await pool.generate("Once upon a time", max_tokens=2)
