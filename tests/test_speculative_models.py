"""Model-drafted speculation end to end: MTP, draft-simple, EAGLE-3; grammar and adaptive drafting.

The MTP model, the draft pair and the EAGLE-3 drafter are tiny random-weight
GGUFs that the suite writes itself (tiny_model_fixtures.py), run by the real
llama.cpp; the n-gram types and the self-draft run on the embedded Gemma.
Greedy speculative output is compared with the same model's plain greedy
output: speculation must never change what greedy decoding produces.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

import pytest
from greedy_helpers import GEMMA_NEAR_TIE, assert_consistent, assert_lossless, greedy, with_eog
from tiny_model_fixtures import (  # noqa: F401 - fixtures, found by pytest in this namespace
    mtp_model,
    mtp_model_without_mtp,
    tiny_bad_draft,
    tiny_draft,
    tiny_eagle3,
    tiny_paths,
    tiny_target,
)

import spec_actor
from spec_actor import Done, Eog, Session, Spec, SpecError, Stats, Token, open_actor
from spec_actor._spec import AUTO_N_DRAFT_CEILING

PROMPT = "Hello world, this is a tiny model"
N_TINY = 64  # tokens per tiny-model run: milliseconds
N_GEMMA = 48
NGRAM_TYPES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")
COPY_PROMPT = (
    "def add(a, b):\n    return a + b\n\n"
    "def mul(a, b):\n    return a * b\n\n"
    "Here is the same code again, copied exactly:\n\n"
    "def add(a, b):\n"
)

# A JSON object of one or two members with bounded keys and values: at most
# 46 characters, so every model closes it within N_GEMMA tokens, after which
# the grammar admits only the end-of-generation token.
JSON_OBJECT_GRAMMAR = r"""
root   ::= "{" ws member ( "," ws member )? ws "}"
member ::= key ":" ws value
key    ::= "\"" [a-z_]{1,8} "\""
value  ::= "-"? [0-9]{1,4} | "\"" [a-zA-Z0-9 ]{0,6} "\"" | "true" | "false" | "null"
ws     ::= " "?
"""
JSON_PROMPT = "Describe a cat as a JSON object: "

# Speculative settings by name; each builder takes a fixture getter, so the
# parametrized tests load only the models they use.
SpecBuilder = Callable[[Callable[[str], spec_actor.Model]], tuple[spec_actor.Model, Spec]]


def _ngram(model_fixture: str, spec_type: str, n_draft: int | str = 8) -> SpecBuilder:
    return lambda get: (get(model_fixture), Spec(spec_type, n_draft=n_draft, ngram_size_n=2, ngram_size_m=8,
                                                  ngram_mod_n_match=4))


MODES: dict[str, SpecBuilder] = {
    "tiny-none": lambda get: (get("tiny_target"), Spec("none")),
    "tiny-mtp": lambda get: (get("mtp_model"), Spec("mtp", n_draft=3)),
    "tiny-draft-simple": lambda get: (get("tiny_target"), Spec("draft-simple", n_draft=4,
                                                               draft_model=get("tiny_draft"))),
    "tiny-eagle3": lambda get: (get("tiny_target"), Spec("eagle3", n_draft=3, draft_model=get("tiny_eagle3"))),
    **{f"tiny-{t}": _ngram("tiny_target", t) for t in NGRAM_TYPES},
    "gemma-none": lambda get: (get("gemma"), Spec("none")),
    "gemma-self-draft": lambda get: (get("gemma"), Spec("draft-simple", n_draft=4, draft_model=get("gemma"))),
    **{f"gemma-{t}": _ngram("gemma", t) for t in NGRAM_TYPES},
}


def drafting_session(model: spec_actor.Model, spec: Spec, n_ctx: int = 512) -> Session:
    return Session(model, spec=spec, n_ctx=n_ctx)


@pytest.fixture(scope="module")
def mtp_plain(mtp_model):
    """Plain greedy decoding on the MTP model: the reference output and the top-2 probe."""
    with Session(mtp_model, spec="none", n_ctx=512) as session:
        yield session


@pytest.fixture(scope="module")
def target_plain(tiny_target):
    with Session(tiny_target, spec="none", n_ctx=512) as session:
        yield session


def run_collecting(session: Session, prompt: str, n: int, **options) -> tuple[spec_actor.RunResult, list]:
    events: list = []
    result = session.run(prompt, max_tokens=n, temp=0.0, on_events=events.extend, **options)
    return result, events


def assert_events_match_counters(result: spec_actor.RunResult, events: list) -> None:
    """Token events delivered == tokens_emitted; one terminal event, last, with the final stats."""
    tokens = [ev for ev in events if isinstance(ev, Token)]
    assert [t.id for t in tokens] == list(result.tokens)
    assert "".join(t.text for t in tokens) == result.text
    terminal = events[-1]
    assert isinstance(terminal, (Done, Eog))
    assert sum(isinstance(ev, (Done, Eog)) for ev in events) == 1
    assert terminal.stats.tokens_emitted == len(tokens) == result.stats.tokens_emitted
    assert terminal.stats.drafts_generated == result.stats.drafts_generated
    assert terminal.stats.drafts_accepted == result.stats.drafts_accepted
    assert sum(terminal.stats.accepted_per_pos) == terminal.stats.drafts_accepted
    assert sum(terminal.stats.drafted_per_pos) == terminal.stats.drafts_generated


# -- MTP ------------------------------------------------------------------------------


def test_mtp_model_reports_its_nextn_layers(mtp_model, mtp_model_without_mtp):
    assert mtp_model.info.n_layer_nextn == 1 and mtp_model.info.mtp_loaded
    assert "draft-mtp" in mtp_model.info.speculative_types
    assert mtp_model_without_mtp.info.n_layer_nextn == 1 and not mtp_model_without_mtp.info.mtp_loaded


def test_mtp_runs_end_to_end_with_consistent_counters(mtp_model):
    with drafting_session(mtp_model, Spec("mtp", n_draft=3)) as session:
        result, events = run_collecting(session, PROMPT, N_TINY, emit_stats_every=8)
        total = session.stats()
    s = result.stats
    print(s.summary())
    assert_consistent(result, N_TINY)
    assert_events_match_counters(result, events)
    assert result.status == "done" and len(result.tokens) == N_TINY
    assert s.drafts_generated > 0
    assert 0 < s.drafts_accepted <= s.drafts_generated
    assert sum(s.accepted_per_pos) == s.drafts_accepted
    assert s.n_draft == 3
    assert len(s.drafted_per_pos) <= 3
    # acceptance can only fall along the draft: position i+1 is reached only after i is accepted
    assert list(s.accepted_per_pos) == sorted(s.accepted_per_pos, reverse=True)
    assert total.requests == 1 and total.tokens_emitted == s.tokens_emitted
    periodic = [ev.snapshot for ev in events if isinstance(ev, Stats)]
    assert len(periodic) >= 3
    assert all(p.drafts_accepted <= p.drafts_generated for p in periodic)


@pytest.mark.parametrize("n_draft", [1, 3, 6])
def test_mtp_greedy_equals_plain_greedy(mtp_model, mtp_plain, n_draft):
    with drafting_session(mtp_model, Spec("mtp", n_draft=n_draft)) as session:
        first = greedy(session, PROMPT, N_TINY)
        again = greedy(session, PROMPT, N_TINY)  # the session is reused as is
    assert first.stats.drafts_generated > 0
    assert first.tokens == again.tokens
    assert_lossless(mtp_plain, PROMPT, with_eog(first))


def cancel_mid_run(session: Session, prompt: str, max_tokens: int, after_tokens: int) -> spec_actor.RunResult:
    """Run in a worker thread; cancel from this thread once ``after_tokens`` were delivered.

    The worker's event callback waits until the cancel is set, so the loop is
    always stopped between two steps, well before ``max_tokens``.
    """
    reached, cancelled = threading.Event(), threading.Event()
    seen = [0]
    outcome: dict[str, spec_actor.RunResult] = {}

    def sink(events):
        seen[0] += sum(isinstance(ev, Token) for ev in events)
        if seen[0] >= after_tokens and not reached.is_set():
            reached.set()
            assert cancelled.wait(120)

    def work():
        outcome["result"] = session.run(prompt, max_tokens=max_tokens, temp=0.0, on_events=sink)

    worker = threading.Thread(target=work)
    worker.start()
    assert reached.wait(120), "the run delivered too few tokens before ending"
    session.cancel()
    cancelled.set()
    worker.join(120)
    assert not worker.is_alive()
    return outcome["result"]


@pytest.mark.parametrize("mode", ["tiny-mtp", "tiny-eagle3", "tiny-draft-simple"])
def test_cancel_mid_loop_leaves_the_session_reusable_at_once(request, mode):
    model, spec = MODES[mode](request.getfixturevalue)
    with drafting_session(model, spec) as session:
        stopped = cancel_mid_run(session, PROMPT, max_tokens=400, after_tokens=10)
        assert stopped.status == "cancelled" and stopped.terminal is None
        assert 10 <= len(stopped.tokens) < 400
        assert stopped.stats.drafts_generated > 0
        assert not session.last_stats().running
        # no clean-up, no wait: the next run starts from a clean state
        after = greedy(session, PROMPT, N_TINY)
    with drafting_session(model, spec) as fresh:
        expected = greedy(fresh, PROMPT, N_TINY)
    assert after.status == "done"
    assert after.tokens == expected.tokens
    n = min(len(stopped.tokens), N_TINY)
    assert stopped.tokens[:n] == expected.tokens[:n], "the cancelled run had begun the same output"


# -- draft-simple and EAGLE-3 -----------------------------------------------------------


@pytest.mark.parametrize("draft_as", ["model", "path"])
def test_draft_simple_with_a_separate_draft_model(tiny_paths, tiny_target, tiny_draft, target_plain, draft_as):
    draft = tiny_draft if draft_as == "model" else tiny_paths.draft  # a path: the session loads and owns it
    with drafting_session(tiny_target, Spec("draft-simple", n_draft=4, draft_model=draft)) as session:
        assert session.draft_model is not None and session.draft_model.info.n_layer == 1
        result, events = run_collecting(session, PROMPT, N_TINY)
    assert_consistent(result, N_TINY)
    assert_events_match_counters(result, events)
    assert 0 < result.stats.drafts_accepted < result.stats.drafts_generated
    assert_lossless(target_plain, PROMPT, with_eog(result))


def test_eagle3_with_its_drafter(tiny_target, tiny_eagle3, target_plain):
    assert tiny_eagle3.info.arch == "eagle3"
    with drafting_session(tiny_target, Spec("eagle3", n_draft=3, draft_model=tiny_eagle3)) as session:
        result, events = run_collecting(session, PROMPT, N_TINY)
        again = greedy(session, PROMPT, N_TINY)
    assert_consistent(result, N_TINY)
    assert_events_match_counters(result, events)
    assert 0 < result.stats.drafts_accepted < result.stats.drafts_generated
    assert again.tokens == result.tokens
    assert_lossless(target_plain, PROMPT, with_eog(result))


# -- clear errors, never an abort ---------------------------------------------------------


# case -> (target fixture, speculative type, draft fixture or None, what the SpecError says)
SETUP_ERRORS = {
    "incompatible-draft-vocab": ("tiny_target", "draft-simple", "tiny_bad_draft",
                                 r"tiny-draft-incompatible\.gguf is incompatible with target .*tiny-target\.gguf: "
                                 r"token 5 differs"),
    "mtp-loaded-without-load_mtp": ("mtp_model_without_mtp", "mtp", None,
                                    r"tiny-mtp\.gguf has MTP/NextN layers but was loaded without them; "
                                    r"load it with load_mtp=True"),
    "mtp-on-gemma": ("gemma", "mtp", None, r"gemma-3-270m.*\(gemma3 270M.*\) has no MTP/NextN layers"),
    # llama.cpp GGML_ASSERTs on each of these once it builds the first graph
    "eagle3-with-a-plain-llama-drafter": ("tiny_target", "eagle3", "tiny_draft",
                                          r"tiny-draft\.gguf \(architecture llama\) is not an EAGLE-3 drafter"),
    "eagle3-on-gemma": ("gemma", "eagle3", "tiny_eagle3",
                        r"EAGLE-3 cannot draft for target .*gemma-3-270m.*: llama.cpp's gemma3 graph does not export"),
    "eagle3-reads-layers-the-target-lacks": ("tiny_draft", "eagle3", "tiny_eagle3",
                                             r"reads target layer 2 but target .*tiny-draft\.gguf has 1 layers"),
    "dflash-with-a-plain-llama-drafter": ("tiny_target", "dflash", "tiny_draft",
                                          r"tiny-draft\.gguf \(architecture llama\) is not a DFlash drafter"),
}


def setup_error_case(request, case: str) -> tuple[spec_actor.Model, Spec, str]:
    target, spec_type, draft, match = SETUP_ERRORS[case]
    get = request.getfixturevalue
    return get(target), Spec(spec_type, n_draft=2, draft_model=get(draft) if draft else None), match


@pytest.mark.parametrize("case", sorted(SETUP_ERRORS))
def test_unusable_speculative_setup_is_a_clear_spec_error(request, case):
    model, spec, match = setup_error_case(request, case)
    with pytest.raises(SpecError, match=match):
        Session(model, spec=spec, n_ctx=256)
    # the model is still fine for what it can do
    with Session(model, spec="none", n_ctx=256) as plain:
        assert greedy(plain, PROMPT, 4).status == "done"


# -- grammar with speculation ----------------------------------------------------------------


@pytest.mark.parametrize("mode", list(MODES))
def test_json_grammar_constrains_output_in_every_mode(request, mode):
    model, spec = MODES[mode](request.getfixturevalue)
    with drafting_session(model, spec) as session:
        result = greedy(session, JSON_PROMPT, N_GEMMA, grammar=JSON_OBJECT_GRAMMAR)
    print(mode, repr(result.text), result.stats.summary())
    assert result.status == "eog", "the grammar was complete: only end-of-generation was allowed"
    value = json.loads(result.text)
    assert isinstance(value, dict) and 1 <= len(result.text) <= 46
    assert result.stats.drafts_accepted <= result.stats.drafts_generated
    if spec.type in ("draft-mtp", "draft-simple", "draft-eagle3"):
        assert result.stats.drafts_generated > 0


# -- adaptive draft length --------------------------------------------------------------------


# mode -> (builder, prompt, tokens, shortest and longest draft length the step may ask for).
# llama.cpp's MTP and EAGLE-3 drafters draft their whole n_max every step, so
# Spec keeps their ceiling at the model-draft default (3) under "auto" and
# adapts only how much of the draft is verified; draft-simple and the n-gram
# types draft what the step asks, up to the ceiling (16). N-gram types may
# skip drafting (0): their plain steps cost nothing extra.
AUTO_FULL_LENGTH_CAP = 3
ADAPTIVE = {
    "tiny-mtp": (lambda get: (get("mtp_model"), Spec("mtp", n_draft="auto")), PROMPT, N_TINY,
                 1, AUTO_FULL_LENGTH_CAP),
    "tiny-eagle3": (lambda get: (get("tiny_target"), Spec("eagle3", n_draft="auto", draft_model=get("tiny_eagle3"))),
                    PROMPT, N_TINY, 1, AUTO_FULL_LENGTH_CAP),
    "tiny-draft-simple": (lambda get: (get("tiny_target"), Spec("draft-simple", n_draft="auto",
                                                                draft_model=get("tiny_draft"))),
                          PROMPT, N_TINY, 1, AUTO_N_DRAFT_CEILING),
    "gemma-ngram-mod": (_ngram("gemma", "ngram-mod", "auto"), COPY_PROMPT, N_GEMMA, 0, AUTO_N_DRAFT_CEILING),
}


@pytest.mark.parametrize("mode", list(ADAPTIVE))
def test_adaptive_draft_length_stays_within_bounds_and_keeps_greedy_output(request, mode):
    build, prompt, n, lo, hi = ADAPTIVE[mode]
    model, spec = build(request.getfixturevalue)
    assert spec.adaptive and spec.max_draft == hi
    with Session(model, spec="none", n_ctx=512) as plain:
        with drafting_session(model, spec) as session:
            result, events = run_collecting(session, prompt, n, emit_stats_every=1)
        assert_consistent(result, n)
        assert_events_match_counters(result, events)
        # one Stats event per step, the last step's stats in the terminal event
        chosen = [ev.snapshot.n_draft for ev in events if isinstance(ev, Stats)] + [events[-1].stats.n_draft]
        print(mode, "draft lengths chosen:", chosen)
        assert len(chosen) == result.stats.iters
        assert all(0 <= k <= hi for k in chosen)
        assert all(k >= lo for k in chosen[:-1])  # the last step may have no budget left to draft
        assert result.stats.drafts_generated > 0
        assert len(result.stats.drafted_per_pos) <= hi
        assert_lossless(plain, prompt, with_eog(result), GEMMA_NEAR_TIE if mode.startswith("gemma") else 0.0)
        if hi > AUTO_FULL_LENGTH_CAP:
            assert len(set(chosen)) > 1, "the draft length never changed"


# -- the same through the actor ---------------------------------------------------------------


def assert_final_stats_consistent(final, n_tokens: int) -> None:
    assert final.tokens_emitted == n_tokens
    assert 0 < final.drafts_generated
    assert final.drafts_accepted <= final.drafts_generated
    assert sum(final.accepted_per_pos) == final.drafts_accepted
    assert sum(final.drafted_per_pos) == final.drafts_generated


async def test_actor_runs_mtp_end_to_end_with_plain_greedy_output(mtp_model, mtp_plain):
    async with open_actor(mtp_model, spec=Spec("mtp", n_draft=3), n_ctx=512) as actor:
        assert actor.spec.is_mtp
        async with actor.stream_events(PROMPT, max_tokens=N_TINY, emit_stats_every=8) as stream:
            events = [ev async for ev in stream]
        text = await actor.generate(PROMPT, max_tokens=N_TINY)
        total = actor.stats()
    tokens = [ev for ev in events if type(ev) is Token]
    terminal = events[-1]
    assert type(terminal) is Done and sum(type(ev) in (Done, Eog) for ev in events) == 1
    assert_final_stats_consistent(terminal.stats, len(tokens))
    assert terminal.stats.drafts_accepted > 0
    assert any(type(ev) is Stats for ev in events)
    assert_lossless(mtp_plain, PROMPT, [t.id for t in tokens])
    assert text == "".join(t.text for t in tokens)
    assert total.requests == 2 and total.tokens_emitted == 2 * N_TINY


@pytest.mark.parametrize("mode", ["tiny-mtp", "tiny-eagle3"])
async def test_actor_cancel_mid_loop_leaves_it_reusable_at_once(request, mode):
    model, spec = MODES[mode](request.getfixturevalue)
    async with open_actor(model, spec=spec, n_ctx=1024) as actor:
        got = 0
        async with actor.stream_events(PROMPT, max_tokens=900) as stream:
            async for ev in stream:
                got += type(ev) is Token
                if got >= 10:
                    break
        # leaving the stream waited for the native loop to stop: usable right away
        snap = stream.stats()
        assert not snap.running and not actor.busy
        assert 10 <= snap.tokens_emitted < 900 and snap.drafts_generated > 0
        text = await actor.generate(PROMPT, max_tokens=N_TINY)
    async with open_actor(model, spec=spec, n_ctx=1024) as fresh:
        assert text == await fresh.generate(PROMPT, max_tokens=N_TINY)


@pytest.mark.parametrize("mode", ["tiny-draft-simple", "tiny-eagle3"])
async def test_actor_drafts_with_a_separate_model(request, target_plain, mode):
    model, spec = MODES[mode](request.getfixturevalue)
    async with open_actor(model, spec=spec, n_ctx=512) as actor:
        events = [ev async for ev in actor.stream_events(PROMPT, max_tokens=N_TINY)]
    tokens = [ev for ev in events if type(ev) is Token]
    assert type(events[-1]) is Done
    assert_final_stats_consistent(events[-1].stats, len(tokens))
    assert_lossless(target_plain, PROMPT, [t.id for t in tokens])


@pytest.mark.parametrize("case", sorted(SETUP_ERRORS))
async def test_actor_refuses_an_unusable_speculative_setup_at_open(request, case):
    model, spec, match = setup_error_case(request, case)
    with pytest.raises(SpecError, match=match):
        async with open_actor(model, spec=spec, n_ctx=256):
            pytest.fail("open_actor should have raised")


@pytest.mark.parametrize("mode", ["tiny-mtp", "tiny-draft-simple", "tiny-eagle3", "gemma-ngram-mod"])
async def test_actor_json_grammar_with_speculation(request, mode):
    model, spec = MODES[mode](request.getfixturevalue)
    async with open_actor(model, spec=spec, n_ctx=512) as actor:
        events = [ev async for ev in actor.stream_events(JSON_PROMPT, max_tokens=N_GEMMA,
                                                         grammar=JSON_OBJECT_GRAMMAR)]
    assert type(events[-1]) is Eog
    assert isinstance(json.loads("".join(ev.text for ev in events if type(ev) is Token)), dict)


async def test_actor_adaptive_mtp_keeps_greedy_output(mtp_model, mtp_plain):
    async with open_actor(mtp_model, spec=Spec("mtp", n_draft="auto"), n_ctx=512) as actor:
        events = [ev async for ev in actor.stream_events(PROMPT, max_tokens=N_TINY, emit_stats_every=1)]
    chosen = {ev.snapshot.n_draft for ev in events if type(ev) is Stats}
    assert chosen and all(0 <= k <= AUTO_FULL_LENGTH_CAP for k in chosen)
    tokens = [ev.id for ev in events if type(ev) is Token]
    assert_final_stats_consistent(events[-1].stats, len(tokens))
    assert_lossless(mtp_plain, PROMPT, tokens)
