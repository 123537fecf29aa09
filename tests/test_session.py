"""The native engine through the synchronous Session (real llama.cpp, real model)."""

from __future__ import annotations

import threading
import time

import psutil
import pytest
from greedy_helpers import GEMMA_NEAR_TIE, assert_consistent, assert_lossless, greedy, with_eog

import spec_actor
from spec_actor import Session, Spec

PROMPT = "The three primary colors are"
COPY_PROMPT = (
    "def add(a, b):\n    return a + b\n\n"
    "def mul(a, b):\n    return a * b\n\n"
    "Here is the same code again, copied exactly:\n\n"
    "def add(a, b):\n"
)
NGRAM_TYPES = ["ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache"]


@pytest.fixture(scope="module")
def plain(gemma):
    with Session(gemma, spec="none", n_ctx=1024) as session:
        yield session


def test_plain_greedy_is_deterministic_across_runs_and_sessions(gemma, plain):
    first = greedy(plain, PROMPT)
    second = greedy(plain, PROMPT)
    with Session(gemma, spec="none", n_ctx=1024) as other:
        third = greedy(other, PROMPT)
    assert first.tokens == second.tokens == third.tokens
    assert first.text and first.text == third.text
    assert first.stats.drafts_generated == 0
    assert_consistent(first, 32)


@pytest.mark.parametrize("spec_type", NGRAM_TYPES)
def test_ngram_types_generate_consistent_greedy_text(gemma, plain, spec_type):
    with Session(gemma, spec=Spec(spec_type, n_draft=8, ngram_size_n=3, ngram_size_m=8,
                                  ngram_mod_n_match=8), n_ctx=1024) as session:
        result = greedy(session, COPY_PROMPT, 48)
        assert_consistent(result, 48)
        assert_lossless(plain, COPY_PROMPT, with_eog(result), near_tie=GEMMA_NEAR_TIE)


def test_ngram_drafts_are_accepted_on_copy_prompt(gemma):
    with Session(gemma, spec=Spec("ngram-mod", n_draft=8, ngram_mod_n_match=8), n_ctx=1024) as session:
        result = greedy(session, COPY_PROMPT, 48)
    assert result.stats.drafts_generated > 0
    assert result.stats.drafts_accepted > 0


def test_self_draft_is_accepted_and_matches_plain(gemma, plain):
    spec = Spec("draft-simple", n_draft=4, draft_model=gemma)
    with Session(gemma, spec=spec, n_ctx=1024) as session:
        result = greedy(session, PROMPT, 48)
        assert_consistent(result, 48)
        assert result.stats.drafts_generated > 0
        assert result.stats.acceptance_rate >= 0.8
        assert_lossless(plain, PROMPT, with_eog(result), near_tie=GEMMA_NEAR_TIE)


@pytest.mark.parametrize("prompt", [
    "Translate to Japanese and add emoji: I love cats and sushi. 🐱🍣 猫が好きです。",
    # Gothic letters have no tokens of their own: each is spelled in byte tokens
    "Repeat exactly: 𐌰𐌱𐌲 𐌰𐌱𐌲 𐌰𐌱𐌲 𐌰𐌱𐌲",
])
def test_utf8_pieces_are_valid_and_join_to_the_detokenized_output(gemma, plain, prompt):
    pieces: list[str] = []

    def sink(events):
        pieces.extend(ev.text for ev in events if isinstance(ev, spec_actor.Token))

    result = plain.run(prompt, max_tokens=24, temp=0.0, on_events=sink)
    joined = "".join(pieces)
    for p in pieces:
        p.encode("utf-8")  # valid text: no lone surrogates
    assert joined == result.text == gemma.tokenizer.decode(result.tokens)
    assert any(ord(ch) > 0x2E7F for ch in joined), "the model should write CJK, emoji or Gothic here"
    # a character is never torn: no replacement character before the end of the run
    assert "\ufffd" not in "".join(pieces[:-1])
    split = [t for t in result.tokens if not _valid(gemma.tokenizer.piece(t))]
    if "𐌰" in prompt:
        assert split, "the Gothic prompt should produce byte tokens (partial UTF-8 pieces)"
        assert any(p == "" for p in pieces), "partial characters must be held back as empty pieces"


def _valid(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def long_prompt(gemma, n_tokens: int) -> list[int]:
    paragraph = gemma.tokenizer.encode(
        "The quick brown fox jumps over the lazy dog while the river keeps flowing past the old mill. ",
        add_special=False)
    tokens = gemma.tokenizer.encode("Story:", add_special=True)
    while len(tokens) < n_tokens:
        tokens += paragraph
    return tokens[:n_tokens]


def test_cancel_during_long_prefill_stops_it_and_session_stays_usable(gemma):
    # how fast the cancel lands is a latency target: bench/, not here
    prompt = long_prompt(gemma, 3000)
    with Session(gemma, spec="none", n_ctx=4096) as session:
        outcome: dict[str, object] = {}

        def work():
            outcome["result"] = session.run(prompt, max_tokens=8, temp=0.0)

        worker = threading.Thread(target=work)
        worker.start()
        deadline = time.monotonic() + 60
        while not session.last_stats().running:  # the run started: it is in its prefill
            assert time.monotonic() < deadline, "the run never started"
            time.sleep(0.001)
        assert session.last_stats().tokens_emitted == 0
        session.cancel()
        worker.join(timeout=60)
        assert not worker.is_alive()
        assert outcome["result"].status == "cancelled" and outcome["result"].tokens == ()
        after = greedy(session, PROMPT)
    with Session(gemma, spec="none", n_ctx=4096) as fresh:
        assert after.tokens == greedy(fresh, PROMPT).tokens


def test_cancel_flag_persists_until_cleared(gemma, plain):
    plain.cancel()
    result = plain.run(PROMPT, max_tokens=4, clear_cancel=False)
    assert result.status == "cancelled" and result.tokens == ()
    assert greedy(plain, PROMPT, 4).status == "done"


def test_callback_can_stop_the_run(plain):
    seen = []

    def sink(events):
        seen.extend(events)
        return False

    result = plain.run(PROMPT, max_tokens=32, on_events=sink)
    assert result.status == "stopped"
    assert 1 <= len(result.tokens) < 32
    assert plain.last_stats().running is False


def test_stats_events_and_terminal_stats(plain):
    events = []
    result = plain.run(PROMPT, max_tokens=16, emit_stats_every=4, temp=0.0, on_events=events.extend)
    kinds = [type(e).__name__ for e in events]
    assert kinds.count("Stats") >= 3
    assert kinds[-1] in ("Done", "Eog") and kinds.count("Done") + kinds.count("Eog") == 1
    final = events[-1].stats
    assert final.tokens_emitted == len(result.tokens)
    assert final.tokens_per_sec > 0 and final.ttft_us > 0
    # the module's session ran PROMPT before: its context kept the prompt (the prefix cache), all of it
    # with its first token when that run was greedy too (decision 0080), else all but the last token
    assert final.timing_us.prefill > 0 or final.prompt_reused in (final.prompt_tokens - 1, final.prompt_tokens)
    emitted = [e.snapshot.tokens_emitted for e in events if isinstance(e, spec_actor.Stats)]
    assert emitted == sorted(emitted)



def test_compute_threads_belong_to_the_session(gemma):
    """Each session owns its pool of native compute threads and frees it on close."""
    proc = psutil.Process()
    # by thread id, not by count: other threads (trio's cached workers) may
    # come and go meanwhile
    before = {t.id for t in proc.threads()}
    sessions = [Session(gemma, n_ctx=128, n_threads=3, n_threads_batch=2) for _ in range(2)]
    for session in sessions:
        session.run(PROMPT, max_tokens=2)
    # per session: 2 decode workers + 1 batch worker (the calling thread is the third)
    added = {t.id for t in proc.threads()} - before
    assert len(added) == 2 * 3
    for session in sessions:
        session.close()
    assert not added & {t.id for t in proc.threads()}


def test_stats_snapshot_is_reused_only_while_nothing_changed(plain):
    plain.run(PROMPT, max_tokens=2)
    idle, idle_last = plain.stats(), plain.last_stats()
    assert plain.stats() is idle and plain.last_stats() is idle_last  # nothing ran since
    seen: list[spec_actor.StatsSnapshot] = []
    plain.run(PROMPT, max_tokens=6, on_events=lambda _events: seen.append(plain.last_stats()) or True)
    emitted = [s.tokens_emitted for s in seen]
    assert emitted == sorted(emitted) and emitted[-1] >= 5  # live, not the cached idle snapshot
    after = plain.stats()
    assert after is not idle
    assert after.requests == idle.requests + 1
    assert after.tokens_emitted == idle.tokens_emitted + 6
    assert plain.last_stats().tokens_emitted == 6

def test_grammar_constrains_output(plain):
    grammar = 'root ::= "yes" | "no"'
    result = plain.run("Is the sky blue? Answer:", max_tokens=8, temp=0.0, grammar=grammar)
    assert result.text in ("yes", "no")


def test_custom_grammar_root(plain):
    grammar = 'answer ::= "maybe"'
    result = plain.run("Answer:", max_tokens=8, temp=0.0, grammar=grammar, grammar_root="answer")
    assert result.text == "maybe"


# -- bad input: a clear exception, never a crash ------------------------------------


def test_missing_model_file(tmp_path):
    with pytest.raises(spec_actor.ModelLoadError, match="not found"):
        spec_actor.load_model(tmp_path / "nope.gguf")


def test_not_a_gguf(tmp_path):
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"this is not a model" * 10)
    with pytest.raises(spec_actor.ModelLoadError, match="not a GGUF"):
        spec_actor.load_model(bogus)


def test_truncated_gguf(tmp_path):
    src = spec_actor.default_model_path().read_bytes()[:4096]
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(src)
    with pytest.raises(spec_actor.ModelLoadError):
        spec_actor.load_model(cut)


def test_mtp_on_a_model_without_nextn_layers(gemma):
    with pytest.raises(spec_actor.SpecError, match="no MTP/NextN layers"):
        Session(gemma, spec=Spec("mtp", n_draft=2))


def test_empty_prompt(plain):
    with pytest.raises(spec_actor.PromptError, match="empty"):
        plain.run("", max_tokens=4)
    with pytest.raises(spec_actor.PromptError, match="empty"):
        plain.run([], max_tokens=4)


def test_prompt_longer_than_context(gemma):
    with Session(gemma, n_ctx=64) as small:
        with pytest.raises(spec_actor.PromptError, match="n_ctx"):
            small.run("word " * (small.n_ctx + 10), max_tokens=4)


def test_token_outside_vocabulary(plain, gemma):
    # refused in Python before native code (which refuses it too: test_hardening_misuse)
    with pytest.raises(spec_actor.PromptError, match="is not a token id of this model"):
        plain.run([2, gemma.info.n_vocab + 5], max_tokens=4)


def test_invalid_grammar(plain):
    with pytest.raises(spec_actor.GrammarError, match="grammar"):
        plain.run(PROMPT, max_tokens=4, grammar="root ::= (unclosed")


@pytest.mark.parametrize("options, match", [
    ({"temp": -1.0}, "temp"),
    ({"top_p": 0.0}, "top_p"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"banana": 1}, "banana"),
])
def test_bad_sampling_options(plain, options, match):
    with pytest.raises(spec_actor.ConfigError, match=match):
        plain.run(PROMPT, **options)


@pytest.mark.parametrize("kwargs, match", [
    ({"type": "warp-drive"}, "warp-drive"),
    ({"type": "ngram-mod", "n_draft": 0}, "n_draft"),
    ({"type": "ngram-mod", "n_draft": 4, "n_min": 5}, "n_min"),
    ({"type": "draft-simple", "n_draft": 4, "p_min": 1.5}, "p_min"),
    ({"type": "draft-simple", "n_draft": 4}, "draft_model"),
])
def test_bad_spec(kwargs, match):
    with pytest.raises(spec_actor.ConfigError, match=match):
        Spec(**kwargs)


def test_batch_smaller_than_draft(gemma):
    with pytest.raises(spec_actor.ConfigError, match="n_batch"):
        Session(gemma, spec=Spec("ngram-mod", n_draft=16), n_batch=8, n_ubatch=8)


def test_bad_context_options(gemma):
    with pytest.raises(spec_actor.ConfigError, match="n_ctx"):
        Session(gemma, n_ctx=0)
    with pytest.raises(spec_actor.ConfigError, match="type_k"):
        Session(gemma, type_k="q3_weird")
    with pytest.raises(spec_actor.ConfigError, match="trained for"):
        Session(gemma, n_ctx=10**9)


def test_vocab_only_model_cannot_generate():
    vocab = spec_actor.load_model(vocab_only=True)
    assert vocab.tokenizer.encode("hello")
    with pytest.raises(spec_actor.ConfigError, match="vocab_only"):
        Session(vocab)
