"""Misuse gets a clear error, not a hang or a crash (issue 11, item 5)."""

from __future__ import annotations

import asyncio
import threading

import pytest
import trio

import spec_actor
from spec_actor import PromptError, WrongContextError
from spec_actor._actor import open_actor
from tiny_model_fixtures import tiny_paths, tiny_target  # noqa: F401 - fixtures

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


def test_open_actor_from_asyncio_says_to_use_trio(tiny_target: spec_actor.Model) -> None:
    async def main() -> None:
        async with open_actor(tiny_target, n_ctx=64):
            pass

    with pytest.raises(WrongContextError, match=r"called from asyncio; spec_actor runs on trio"):
        asyncio.run(main())


def test_open_pool_from_asyncio_says_to_use_trio(tiny_target: spec_actor.Model) -> None:
    async def main() -> None:
        async with spec_actor.open_pool(tiny_target, size=2, n_ctx=64):
            pass

    with pytest.raises(WrongContextError, match=r"open_pool was called from asyncio"):
        asyncio.run(main())


async def test_actor_requests_from_a_foreign_thread_or_asyncio_are_refused(tiny_target: spec_actor.Model) -> None:
    async with open_actor(tiny_target, n_ctx=64) as actor:
        made_here = actor.stream_events("hello", max_tokens=2)
        errors: list[BaseException] = []

        def foreign() -> None:
            for call in (lambda: actor.stream_events("hello", max_tokens=2),
                         lambda: actor.stream("hello", max_tokens=2),
                         lambda: asyncio.run(actor.generate("hello", max_tokens=2)),
                         lambda: asyncio.run(made_here.__anext__())):
                try:
                    call()
                except BaseException as exc:  # noqa: BLE001 - collected for the assertions
                    errors.append(exc)
            errors.append(None)  # type: ignore[arg-type]
            # The documented thread-safe calls still work here.
            errors.append(actor.stats())  # type: ignore[arg-type]

        thread = threading.Thread(target=foreign, name="not-trio")
        with trio.fail_after(60):
            await trio.to_thread.run_sync(thread.start)
            await trio.to_thread.run_sync(thread.join)
        *refused, sentinel, stats = errors
        assert sentinel is None and isinstance(stats, spec_actor.StatsSnapshot)
        assert [type(e) for e in refused] == [WrongContextError] * 4
        assert "thread 'not-trio'" in str(refused[0]) and "trio.from_thread.run" in str(refused[0])
        assert "called from asyncio" in str(refused[2])
        # The actor is unharmed: the stream made on the trio thread runs, and so does a new request.
        async with made_here as events:
            assert isinstance([ev async for ev in events][-1], spec_actor.Done)
        with trio.fail_after(60):
            assert await actor.generate("hello", max_tokens=3) == await actor.generate("hello", max_tokens=3)


async def test_requests_through_trio_from_thread_are_the_documented_way(tiny_target: spec_actor.Model) -> None:
    async with open_actor(tiny_target, n_ctx=64) as actor:
        want = await actor.generate("hello", max_tokens=4)
        with trio.fail_after(60):
            got = await trio.to_thread.run_sync(
                lambda: trio.from_thread.run(lambda: actor.generate("hello", max_tokens=4)))
        assert got == want


@pytest.mark.parametrize("bad", [-1, "n_vocab", 2**31, 2**40, True])
async def test_prompt_token_ids_outside_the_vocabulary_are_a_prompt_error(tiny_target: spec_actor.Model,
                                                                          bad: object) -> None:
    n_vocab = tiny_target.info.n_vocab
    token = n_vocab if bad == "n_vocab" else bad
    async with open_actor(tiny_target, n_ctx=64) as actor:
        with pytest.raises(PromptError, match=rf"prompt token {token!r} at position 1 .* from 0 to {n_vocab - 1}"):
            actor.stream_events([1, token, 2], max_tokens=2)
        # The native layer refuses them too, for callers that skip Python's check.
        session = actor.session
        with pytest.raises(PromptError, match=r"outside the vocabulary"):
            from spec_actor.nif import session as _ns
            _ns.run(session._live(), [1, n_vocab], max_tokens=1, emit_stats_every=0,
                    sampling=spec_actor.Sampling().native_params(), on_batch=lambda data: True)
        # The last id of the vocabulary is in range, and the refusals left the actor as a fresh one:
        # it decodes that prompt to the same tokens as a plain session.
        edge = [1, n_vocab - 1]
        async with actor.stream_events(edge, max_tokens=2) as events:
            got = [ev.id async for ev in events if isinstance(ev, spec_actor.Token)]
    with spec_actor.Session(tiny_target, n_ctx=64, spec="none") as plain:
        want = plain.run(edge, max_tokens=2)
    assert want.tokens and got == list(want.tokens)


async def test_a_stream_iterated_after_its_actor_closed_raises_actor_closed(tiny_target: spec_actor.Model) -> None:
    async with open_actor(tiny_target, n_ctx=64) as actor:
        late_events = actor.stream_events("hello", max_tokens=2)
        late_text = actor.stream("hello", max_tokens=2)
    with trio.fail_after(30):
        with pytest.raises(spec_actor.ActorClosedError, match="closed"):
            async for _ in late_events:
                pass
        with pytest.raises(spec_actor.ActorClosedError, match="closed"):
            async with late_text as text:
                async for _ in text:
                    pass
        with pytest.raises(spec_actor.ActorClosedError, match="closed"):
            actor.stream_events("hello", max_tokens=2)


@pytest.mark.parametrize("spec", ["ngram-cache", "auto"])
def test_prompts_shorter_than_an_ngram_draft_nothing_and_decode_like_plain(tiny_target: spec_actor.Model,
                                                                          spec: str) -> None:
    # llama.cpp's ngram-cache drafter read before its buffer on a context of 2 or 3
    # tokens (AddressSanitizer, under scripts/sanitize.sh); the shim no longer calls
    # it there. Each output must still equal plain greedy decoding's, whole.
    for n in range(1, 6):
        prompt = list(range(1, n + 1))
        with spec_actor.Session(tiny_target, spec="none", n_ctx=64) as plain:
            want = plain.run(prompt, max_tokens=24, temp=0.0).tokens
        with spec_actor.Session(tiny_target, spec=spec, n_ctx=64) as session:
            got = session.run(prompt, max_tokens=24, temp=0.0).tokens
        assert got == want, (n, got, want)
