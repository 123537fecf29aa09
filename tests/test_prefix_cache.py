"""The context kept between requests: reused exactly where a prompt repeats it, never elsewhere.

A request reuses the longest common token prefix of its prompt with what the
session's context holds. Expected reuse counts are derived here from the
requests and their outputs: after a run the context holds the prompt and the
tokens generated after it, less the last one when the run did not end at an
end-of-generation token (that token was sampled, never decoded); see
`held_after`. They are never read back from the native counter they are
compared with. Outputs are compared with a fresh session's: exactly on the
F32 tiny models (hybrid included), by the near-tie rule on Gemma.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import pytest
from greedy_helpers import EOG, GEMMA_NEAR_TIE, assert_lossless
from serve_helpers import http, metric, metrics, openai_client, serving
from tiny_model_fixtures import (  # noqa: F401 - fixtures, found by pytest in this namespace
    hybrid_model,
    mtp_model,
    tiny_dflash,
    tiny_draft,
    tiny_eagle3,
    tiny_paths,
    tiny_target,
)

import spec_actor
from spec_actor import Eog, RunResult, Session, Spec, Stats, Token, open_actor
from spec_actor.nif import testing as nt

N_CTX = 512
CTX = {"n_threads": 1, "n_ctx": N_CTX}  # the tiny models: one thread is fastest on a loaded machine
TEXT = "the cat and the dog and the cat and the dog and the cat and the"
MORE = " and then the dog"


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def held_after(prompt: Sequence[int], result: RunResult) -> list[int]:
    """What the context holds after ``result`` on an attention model: the prompt and the decoded output."""
    out = list(result.tokens) if result.status == "eog" else list(result.tokens[:-1])
    return list(prompt) + out


def fresh(model: spec_actor.Model, spec: Spec | str, prompt: Sequence[int] | str, n: int,
          **options: object) -> RunResult:
    """The same request on a session that never ran anything."""
    with Session(model, spec=spec, **CTX) as session:
        return session.run(prompt, max_tokens=n, temp=0.0, **options)


def run_until(session: Session, prompt: Sequence[int], n: int, stop_after: int, *,
              cancel: bool) -> RunResult:
    """A greedy run ended after ``stop_after`` tokens, by a cancel or by its consumer (stopped)."""
    seen = 0

    def sink(events: list) -> bool:
        nonlocal seen
        seen += sum(type(ev) is Token for ev in events)
        if seen >= stop_after:
            if cancel:
                session.cancel()
                return True
            return False
        return True

    return session.run(prompt, max_tokens=n, temp=0.0, on_events=sink)


# -- a chat through the actor, on Gemma ---------------------------------------------------------

DOC = ("The lighthouse on Gull Rock was built in 1871 from granite quarried on the island. Its lamp burned "
       "whale oil until 1902, then kerosene, and since 1954 it has been electric. The keeper's cottage has "
       "three rooms and a garden where the last keeper, Ada Penrose, grew potatoes and onions. The light "
       "flashes white every ten seconds and can be seen for eighteen nautical miles. ")
QUESTIONS = ("When was the lighthouse built?", "What did the lamp burn first?", "Who was the last keeper?",
             "What grew in the garden?", "How often does the light flash?", "How far can it be seen?")


async def test_six_turn_chat_reuses_the_previous_prompt_and_reply(gemma):
    messages = [{"role": "system", "content": "Answer in one short sentence. " + DOC}]
    held: list[int] | None = None  # what the context holds after the previous turn
    previous_prompt: list[int] = []
    whole_reply_reused = 0
    with Session(gemma, spec="none", prefix_cache=False, n_ctx=2048, n_threads=2) as plain:
        async with open_actor(gemma, n_ctx=2048) as actor:  # the defaults: auto, prefix cache on
            for question in QUESTIONS:
                messages.append({"role": "user", "content": question})
                prompt = gemma.tokenizer.encode(gemma.apply_chat_template(messages), parse_special=True)
                async with actor.chat_events(messages, max_tokens=20, temp=0.0) as events:
                    evs = [ev async for ev in events]
                tokens = [ev.id for ev in evs if type(ev) is Token and ev.id >= 0]
                terminal = evs[-1]
                stats = terminal.stats
                assert stats.prompt_tokens == len(prompt)
                expected = 0 if held is None else min(common_prefix(held, prompt), len(prompt) - 1)
                assert (stats.prompt_reused, stats.prompt_prefilled) == (expected, len(prompt) - expected)
                if held is not None:
                    assert expected >= len(previous_prompt)  # the whole previous prompt, and what follows
                    whole_reply_reused += expected == len(held)
                assert_lossless(plain, prompt, tokens + ([EOG] if type(terminal) is Eog else []), GEMMA_NEAR_TIE)
                reply = "".join(ev.text for ev in evs if type(ev) is Token)
                assert reply.strip(), "an empty reply: the turn tested nothing"
                messages.append({"role": "assistant", "content": reply})
                previous_prompt = prompt
                held = prompt + (tokens if type(terminal) is Eog else tokens[:-1])
            total = actor.stats()
    assert whole_reply_reused >= 3, "the replies re-tokenized differently in most turns"
    assert total.prompt_reused + total.prompt_prefilled == total.prompt_tokens


# -- every drafter kind on the tiny models --------------------------------------------------------

# name -> (model fixture, spec builder, the drafter runs in a second context)
FAMILIES: dict[str, tuple[str, Callable[[Callable[[str], spec_actor.Model]], Spec], bool]] = {
    "none": ("tiny_target", lambda get: Spec("none"), False),
    "ngram-mod": ("tiny_target", lambda get: Spec("ngram-mod", n_draft=8, ngram_mod_n_match=2), False),
    "ngram-simple": ("tiny_target", lambda get: Spec("ngram-simple", n_draft=8, ngram_size_n=2), False),
    "auto": ("tiny_target", lambda get: Spec("auto"), False),
    "draft-simple": ("tiny_target", lambda get: Spec("draft-simple", n_draft=4, draft_model=get("tiny_draft")),
                     True),
    "eagle3": ("tiny_target", lambda get: Spec("eagle3", n_draft=3, draft_model=get("tiny_eagle3")), True),
    "dflash": ("tiny_target", lambda get: Spec("dflash", n_draft=4, draft_model=get("tiny_dflash")), True),
    "mtp": ("mtp_model", lambda get: Spec("mtp", n_draft=3), True),
    "hybrid-none": ("hybrid_model", lambda get: Spec("none"), False),
    "hybrid-ngram-mod": ("hybrid_model", lambda get: Spec("ngram-mod", n_draft=8, ngram_mod_n_match=2), False),
    "hybrid-mtp": ("hybrid_model", lambda get: Spec("mtp", n_draft=3), True),
    "hybrid-auto": ("hybrid_model", lambda get: Spec("auto"), True),  # auto's arms include MTP
}


def expected_reuse(family: str, held: Sequence[int], prompt: Sequence[int]) -> int:
    """What an attention model reuses: the common prefix, leaving the last prompt token to decode
    (two with a draft context, whose hidden state must come from this prompt; EAGLE-3 pairs each
    draft position with the next token, so its last common token is decoded again too)."""
    n_common = common_prefix(held, prompt)
    n = min(n_common, len(prompt) - 1 - FAMILIES[family][2])
    return max(0, min(n, n_common - 1) if family == "eagle3" else n)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_drafter_kind_equals_a_fresh_session(request, family):
    model_fixture, build, _ = FAMILIES[family]
    model = request.getfixturevalue(model_fixture)
    spec = build(request.getfixturevalue)
    hybrid = model.info.is_recurrent
    with Session(model, spec=spec, **CTX) as session:
        p1 = session.tokenize(TEXT)
        r1 = session.run(p1, max_tokens=40, temp=0.0)
        assert r1.tokens == fresh(model, spec, p1, 40).tokens and r1.stats.prompt_reused == 0
        # a continuation: the first request, its output and more
        p2 = held_after(p1, r1) + session.tokenize(MORE, add_special=False)
        r2 = session.run(p2, max_tokens=40, temp=0.0)
        assert r2.tokens == fresh(model, spec, p2, 40).tokens, r2.stats.summary()
        if hybrid:  # the live state, or the checkpoint at the end of the first prompt
            # (before the last two prompt tokens with a draft context: a repeat decodes both again)
            at_prompt_end = len(p1) - 1 - FAMILIES[family][2]
            assert r2.stats.prompt_reused in (len(held_after(p1, r1)), at_prompt_end), r2.stats.prompt_reused
        else:
            assert r2.stats.prompt_reused == expected_reuse(family, held_after(p1, r1), p2)
        # an edit in the middle of the first prompt
        k = len(p1) // 2
        p3 = p1[:k] + session.tokenize(" dog", add_special=False) + p1[k:]
        r3 = session.run(p3, max_tokens=40, temp=0.0)
        assert r3.tokens == fresh(model, spec, p3, 40).tokens
        # a hybrid has no checkpoint before the edit: it starts over
        assert r3.stats.prompt_reused == (0 if hybrid else expected_reuse(family, held_after(p2, r2), p3))
        assert r3.stats.prompt_prefilled == len(p3) - r3.stats.prompt_reused
        # the same prompt again
        r4 = session.run(p3, max_tokens=40, temp=0.0)
        assert r4.tokens == r3.tokens
        assert r4.stats.prompt_reused > 0


def test_hybrid_reuses_checkpoints_within_the_budget(hybrid_model):  # noqa: F811
    with Session(hybrid_model, spec="none", **CTX) as session:
        p1 = session.tokenize(TEXT)
        r1 = session.run(p1, max_tokens=30, temp=0.0)
        usage = session.prefix_cache_usage()
        assert usage.tokens == len(held_after(p1, r1))  # spec none: one token per step, no tail
        assert usage.checkpoints == 2 and usage.saves == 2  # the end of the prompt and of the output
        per_checkpoint = usage.checkpoint_bytes // 2
        # a request that repeats the prompt with another ending resumes at the prompt's checkpoint
        p2 = p1 + session.tokenize(" cat", add_special=False)
        r2 = session.run(p2, max_tokens=30, temp=0.0)
        assert r2.stats.prompt_reused == len(p1) - 1
        assert session.prefix_cache_usage().restores == 1
        assert r2.tokens == fresh(hybrid_model, "none", p2, 30).tokens
    # a budget of one checkpoint keeps the newest
    with Session(hybrid_model, spec="none", prefix_checkpoint_bytes=per_checkpoint, **CTX) as session:
        r1 = session.run(p1, max_tokens=30, temp=0.0)
        usage = session.prefix_cache_usage()
        assert (usage.checkpoints, usage.checkpoint_bytes) == (1, per_checkpoint)
        r2 = session.run(p2, max_tokens=30, temp=0.0)  # the prompt's checkpoint was evicted
        assert r2.stats.prompt_reused == 0 and r2.tokens == fresh(hybrid_model, "none", p2, 30).tokens
        # a continuation of everything still reuses the live state
        p3 = held_after(p2, r2) + session.tokenize(MORE, add_special=False)
        r3 = session.run(p3, max_tokens=30, temp=0.0)
        assert r3.stats.prompt_reused == len(held_after(p2, r2))
        assert r3.tokens == fresh(hybrid_model, "none", p3, 30).tokens
    with Session(hybrid_model, spec="none", prefix_checkpoint_bytes=0, **CTX) as session:
        session.run(p1, max_tokens=30, temp=0.0)
        assert session.prefix_cache_usage().checkpoints == 0


def test_sampled_and_grammar_requests_equal_a_fresh_session(tiny_target):  # noqa: F811
    spec = Spec("ngram-mod", n_draft=8, ngram_mod_n_match=2)
    options = [{"temp": 0.9, "seed": 7}, {"temp": 0.0, "grammar": 'root ::= [a-z ]{8,30} "."'}]
    with Session(tiny_target, spec=spec, **CTX) as session:
        prompt = session.tokenize(TEXT)
        for opts in options:
            first = session.run(prompt, max_tokens=32, **opts)
            prompt = held_after(prompt, first) + session.tokenize(MORE, add_special=False)
            again = session.run(prompt, max_tokens=32, **opts)
            assert again.stats.prompt_reused > 0
            with Session(tiny_target, spec=spec, **CTX) as other:
                assert again.tokens == other.run(prompt, max_tokens=32, **opts).tokens


# -- cancellation and errors ----------------------------------------------------------------------

@pytest.mark.parametrize("model_fixture", ["tiny_target", "hybrid_model"])
@pytest.mark.parametrize("stop_after, cancel", [(1, True), (6, True), (20, True), (6, False)])
def test_reuse_after_a_cancel_between_steps(request, model_fixture, stop_after, cancel):
    model = request.getfixturevalue(model_fixture)
    spec = Spec("ngram-mod", n_draft=8, ngram_mod_n_match=2)
    with Session(model, spec=spec, **CTX) as session:
        p1 = session.tokenize(TEXT)
        r1 = run_until(session, p1, 60, stop_after, cancel=cancel)
        assert r1.status == ("cancelled" if cancel else "stopped") and len(r1.tokens) >= stop_after
        # the context holds exactly the computed tokens: the prompt and the output but its last token
        computed = list(p1) + list(r1.tokens[:-1])
        assert session.prefix_cache_usage().tokens == len(computed)
        p2 = computed + session.tokenize(MORE, add_special=False)
        r2 = session.run(p2, max_tokens=40, temp=0.0)
        assert r2.stats.prompt_reused == len(computed)
        assert r2.tokens == fresh(model, spec, p2, 40).tokens


@pytest.mark.parametrize("model_fixture", ["tiny_target", "hybrid_model"])
@pytest.mark.parametrize("delay_s", [0.0, 0.001, 0.003, 0.01, 0.03])
def test_reuse_after_a_cancel_in_prefill_or_decode(request, model_fixture, delay_s):
    """A cancel from another thread lands anywhere: in a prefill batch, a decode, between steps."""
    model = request.getfixturevalue(model_fixture)
    spec = Spec("ngram-mod", n_draft=8, ngram_mod_n_match=2)
    with Session(model, spec=spec, n_batch=16, n_ubatch=16, **CTX) as session:
        p1 = session.tokenize(TEXT * 4)
        timer = threading.Timer(delay_s, session.cancel)
        timer.start()
        r1 = session.run(p1, max_tokens=200, temp=0.0, clear_cancel=False)
        timer.join()
        session.clear_cancel()
        held = session.prefix_cache_usage().tokens
        computed = list(p1) + list(r1.tokens[:-1])
        assert held <= len(computed)
        p2 = (p1 + list(r1.tokens))[: max(held, 1) + 3] + session.tokenize(MORE, add_special=False)
        r2 = session.run(p2, max_tokens=40, temp=0.0)
        assert r2.tokens == fresh(model, spec, p2, 40).tokens
        assert r2.stats.prompt_reused <= min(held, common_prefix(computed, p2))
        if not model.info.is_recurrent:  # an attention model keeps what was computed
            assert r2.stats.prompt_reused == min(held, len(p2) - 1)


@pytest.mark.parametrize("model_fixture", ["tiny_target", "hybrid_model"])
@pytest.mark.parametrize("fail_at", [1, 2, 5, 30])  # prefill batches (16 tokens each), then steps
def test_an_error_leaves_the_cache_empty(request, model_fixture, fail_at):
    model = request.getfixturevalue(model_fixture)
    spec = Spec("none")  # one decode per token: the 30th comes before the 60th token
    with Session(model, spec=spec, n_batch=16, n_ubatch=16, **CTX) as session:
        p1 = session.tokenize(TEXT)
        before = session.run(p1, max_tokens=20, temp=0.0)  # something to lose
        nt.fail_decode(session._handle, fail_at)
        failing = held_after(p1, before) + session.tokenize(TEXT, add_special=False)
        failed = session.run(failing, max_tokens=60, temp=0.0)
        assert failed.status == "error" and "sa_testing_fail_decode" in failed.terminal.reason
        usage = session.prefix_cache_usage()
        assert (usage.tokens, usage.checkpoints) == (0, 0)
        r = session.run(p1, max_tokens=40, temp=0.0)
        assert r.stats.prompt_reused == 0
        assert r.tokens == fresh(model, spec, p1, 40).tokens


def test_a_consumer_error_keeps_what_was_computed(tiny_target):  # noqa: F811
    class Boom(Exception):
        pass

    def sink(events: list) -> bool:
        if any(type(ev) is Token for ev in events):
            raise Boom
        return True

    with Session(tiny_target, spec="none", **CTX) as session:
        p1 = session.tokenize(TEXT)
        with pytest.raises(Boom):
            session.run(p1, max_tokens=40, temp=0.0, on_events=sink)
        assert session.prefix_cache_usage().tokens == len(p1)  # the prompt, whose own decode made the first token
        r = session.run(p1, max_tokens=40, temp=0.0)
        # the same greedy prompt again takes all of it and that first token (decision 0080)
        assert r.stats.prompt_reused == len(p1) and r.tokens == fresh(tiny_target, "none", p1, 40).tokens


# -- conversations, control -----------------------------------------------------------------------

@pytest.mark.parametrize("model_fixture", ["tiny_target", "hybrid_model"])
async def test_interleaved_conversations_never_share_tokens(request, model_fixture):
    model = request.getfixturevalue(model_fixture)
    spec = Spec("ngram-mod", n_draft=8, ngram_mod_n_match=2)
    system = model.tokenizer.encode("the rules of the game:")
    convs = {"A": system + model.tokenizer.encode(" a cat sat on the mat", add_special=False),
             "B": system + model.tokenizer.encode(" upon a time it was", add_special=False)}
    held: list[int] = []
    async with open_actor(model, spec=spec, **CTX) as actor:
        for turn in range(2):
            for name in "AB":
                prompt = convs[name]
                async with actor.stream_events(prompt, max_tokens=24, temp=0.0) as events:
                    evs = [ev async for ev in events]
                tokens = [ev.id for ev in evs if type(ev) is Token]
                stats = evs[-1].stats
                with Session(model, spec=spec, **CTX) as other:
                    assert tokens == list(other.run(prompt, max_tokens=24, temp=0.0).tokens), (name, turn)
                expected = min(common_prefix(held, prompt), len(prompt) - 1)
                if model.info.is_recurrent:  # checkpoints lie at ends only: never past the common prefix
                    assert stats.prompt_reused <= expected
                else:
                    assert stats.prompt_reused == expected, (name, turn)
                if turn == 0 and name == "B" and not model.info.is_recurrent:
                    assert expected == len(system)  # the shared system prompt, and nothing of A's
                done = type(evs[-1]) is Eog
                held = list(prompt) + (tokens if done else tokens[:-1])
                convs[name] = list(prompt) + tokens + model.tokenizer.encode(" and", add_special=False)


async def test_prefix_cache_off_and_forget(tiny_target):  # noqa: F811
    prompt = tiny_target.tokenizer.encode(TEXT)

    async def reused(actor) -> int:
        # a Stats event after every step that emits (the prompt's step at least): a
        # repeated prompt's 8 tokens may come in two steps, the second one the last
        async with actor.stream_events(prompt, max_tokens=8, temp=0.0, emit_stats_every=1) as events:
            evs = [ev async for ev in events]
        stats_events = [ev.snapshot for ev in evs if type(ev) is Stats]
        assert stats_events and all(s.prompt_reused == evs[-1].stats.prompt_reused for s in stats_events)
        return evs[-1].stats.prompt_reused

    async with open_actor(tiny_target, prefix_cache=False, **CTX) as actor:
        assert [await reused(actor) for _ in range(2)] == [0, 0]
    async with open_actor(tiny_target, **CTX) as actor:
        first, second = await reused(actor), await reused(actor)
        actor.forget()
        third, fourth = await reused(actor), await reused(actor)
        total = actor.stats()
    # a repeated greedy prompt is reused whole, with the first token its own decode made (decision 0080)
    assert (first, second, third, fourth) == (0, len(prompt), 0, len(prompt))
    assert total.prompt_reused == 2 * len(prompt)
    assert total.prompt_prefilled == 4 * len(prompt) - total.prompt_reused
    with pytest.raises(spec_actor.ConfigError, match="prefix_cache"):
        Session(tiny_target, prefix_cache="yes")
    with pytest.raises(spec_actor.ConfigError, match="prefix_checkpoint_bytes"):
        Session(tiny_target, prefix_checkpoint_bytes=-1)


async def test_server_reports_cached_tokens_and_prefix_metrics(gemma):
    messages = [{"role": "user", "content": "Name a colour."}]
    async with serving(gemma) as server:
        client = openai_client(server)
        first = await client.chat.completions.create(model="m", messages=messages, max_tokens=8, temperature=0)
        messages += [{"role": "assistant", "content": first.choices[0].message.content},
                     {"role": "user", "content": "And another one?"}]
        second = await client.chat.completions.create(model="m", messages=messages, max_tokens=8, temperature=0)
        async with http(server) as h:
            values = await metrics(h)
    prompt1 = gemma.tokenizer.encode(gemma.apply_chat_template(messages[:1]), parse_special=True)
    prompt2 = gemma.tokenizer.encode(gemma.apply_chat_template(messages), parse_special=True)
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    # the first prompt and some of the reply (its text re-tokenized may end the common prefix early)
    assert len(prompt1) < cached <= common_prefix(prompt1 + gemma.tokenizer.encode(
        first.choices[0].message.content, add_special=False), prompt2)
    assert metric(values, "prefix_cache_queries_total") == len(prompt1) + len(prompt2)
    assert metric(values, "prefix_cache_hits_total") == cached


def test_serve_cli_has_a_no_prefix_cache_flag():
    import argparse

    from spec_actor.cli import _serve

    parser = argparse.ArgumentParser()
    _serve.add_parser(parser.add_subparsers())
    assert parser.parse_args(["serve"]).prefix_cache is True
    assert parser.parse_args(["serve", "--no-prefix-cache"]).prefix_cache is False


def test_print_stats_reports_the_prefix_cache(tiny_target, hybrid_model, capfd):  # noqa: F811
    with Session(tiny_target, spec="none", **CTX) as session:
        prompt = session.tokenize(TEXT)
        for _ in range(2):
            session.run(prompt, max_tokens=4, temp=0.0)
        session.print_stats()
    err = capfd.readouterr().err
    held = len(prompt) + 3  # the prompt and the output but its last token
    assert f"prefix cache: on, {len(prompt)} of {2 * len(prompt)} prompt tokens reused, {held} tokens held" in err
    assert "checkpoints" not in err
    with Session(hybrid_model, spec="none", **CTX) as session:
        session.run(prompt, max_tokens=4, temp=0.0)
        session.print_stats()
    assert ", 2 checkpoints (" in capfd.readouterr().err
