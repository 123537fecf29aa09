"""Speculation on a hybrid (recurrent + attention) model: rollback proven, not assumed.

The model is the tiny ``qwen35`` GGUF of tiny_model_fixtures.py: a gated
delta-net block, an attention block and one NextN/MTP block, run by the real
llama.cpp in F32. A rejected draft cannot be trimmed from a recurrent state:

- draft-mtp sessions give the target context ``n_rs_seq = n_draft`` state
  snapshots, and llama.cpp rolls the recurrent state back from them;
- every other type restores a checkpoint taken before the verify batch and
  re-verifies the accepted prefix (the native loop's branch
  ``use_ckpt_tgt && n_accepted < n_draft``).

Both paths must leave greedy output exactly equal to plain greedy output
(F32, one engine configuration: exact equality, no near-tie excuse), with
drafts rejected along the way, and the counters must agree with the events.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, replace

import numpy as np
import pytest
import trio
from tiny_model_fixtures import hybrid_model, tiny_paths  # noqa: F401 - fixtures, found by pytest here

import spec_actor
from spec_actor import Done, Session, Spec, Stats, StatsSnapshot, Token, open_actor
from spec_actor.cli import main as cli_main
from spec_actor._stats import DRAFTER_NAMES
from spec_actor.nif import testing as nt
from spec_actor.testing import tiny_models as tm
from spec_actor.testing._gguf import GGUFValue

# Repeats give every n-gram type something to draft (ngram-cache too).
PROMPT = "the cat and the dog and the cat and the dog and the cat and the"
N = 96  # tokens per run (the issue asks for at least 64)
N_CTX = 512
# One compute thread: the model is tiny, and more threads only wait on each other on a loaded machine.
CTX = {"n_threads": 1}
NGRAM_TYPES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")


def ngram_spec(spec_type: str) -> Spec:
    return Spec(spec_type, n_draft=8, ngram_size_n=2, ngram_size_m=8, ngram_mod_n_match=2)


SPECS = {"mtp": Spec("mtp", n_draft=3), **{t: ngram_spec(t) for t in NGRAM_TYPES}}


@pytest.fixture(scope="module")
def plain_tokens(hybrid_model) -> tuple[int, ...]:
    """Plain greedy decoding of PROMPT: the reference every speculative run must equal."""
    with Session(hybrid_model, n_ctx=N_CTX, spec="none", **CTX) as session:
        result = session.run(PROMPT, max_tokens=N, temp=0.0)
    assert result.status == "done" and len(result.tokens) == N
    assert len(set(result.tokens)) > 8, "the model's greedy path is degenerate"
    return result.tokens


def test_hybrid_model_loads_as_hybrid_with_one_nextn_layer(hybrid_model):
    info = hybrid_model.info
    assert info.arch == "qwen35"
    assert info.is_recurrent  # llama_model_is_hybrid: rollback needs snapshots or checkpoints
    assert info.n_layer == 2 and info.n_layer_nextn == 1 and info.mtp_loaded
    assert "draft-mtp" in info.speculative_types


def test_hybrid_info_command_reports_recurrent_and_one_nextn_layer(tiny_paths, capsys):  # noqa: F811
    assert cli_main(["info", str(tiny_paths.hybrid), "--json"]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert facts["architecture"] == "qwen35"
    assert facts["recurrent"] is True
    assert facts["nextn_layers"] == 1
    assert "draft-mtp" in facts["speculative_types"]
    assert cli_main(["info", str(tiny_paths.hybrid)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(re.fullmatch(r"layers\s+2, embedding width 64, recurrent", line) for line in lines), lines
    assert any(re.match(r"NextN/MTP layers\s+1\b", line) for line in lines), lines


def test_hybrid_recurrent_block_shapes_the_output(hybrid_model, tiny_paths, plain_tokens, tmp_path):  # noqa: F811
    """Without the delta-net block's output the greedy text changes: a badly restored state would show."""
    g = tm.read_gguf(tiny_paths.hybrid)
    tensors = {name: g.tensor(name) for name in g.tensors}
    tensors["blk.0.ssm_out.weight"] = np.zeros_like(tensors["blk.0.ssm_out.weight"])
    metadata = {k: GGUFValue(v, g.metadata_types[k], g.array_types.get(k)) for k, v in g.metadata.items()}
    without = spec_actor.load_model(tm.write_gguf(tmp_path / "no-recurrent-output.gguf", metadata, tensors))
    with Session(without, n_ctx=N_CTX, **CTX) as session:
        tokens = session.run(PROMPT, max_tokens=N, temp=0.0).tokens
    differing = sum(a != b for a, b in zip(tokens, plain_tokens))
    assert differing > N // 2, f"only {differing} of {N} tokens depend on the recurrent block"


# Prompts that share words with PROMPT in another order: the memory and the
# n-gram arms propose continuations that the target leaves part-way.
AUTO_PROMPTS = (PROMPT, PROMPT.replace("dog", "bird"), "the dog and the cat and the dog and the cat", PROMPT + " cat")


def test_hybrid_auto_uses_mtp_and_greedy_equals_plain_greedy(hybrid_model):
    """auto, the default, on the hybrid NextN model: MTP is one of its arms.

    The target keeps llama.cpp's recurrent snapshots for MTP's 3-token drafts
    (n_rs_seq = 3) while the n-gram arms and the memory draft up to 32: a
    rejection deeper than 3 must restore a checkpoint taken before the verify
    batch (it once went unnoticed and the next decode failed). A flat step
    cost makes auto verify whole proposals, so both kinds of rejection
    happen; the output stays exactly plain greedy's. MTP drafts; its drafts
    are seldom right on these prompts, so auto may drop it before one is
    accepted (it costs more than it earns: decision 0062).
    """

    rejected: list[int] = []
    mtp_drafted = 0
    with Session(hybrid_model, n_ctx=N_CTX, **CTX) as session, \
            Session(hybrid_model, n_ctx=N_CTX, spec="none", **CTX) as plain:
        nt.fix_step_cost_table(session._handle, [1000.0] * 33)
        for prompt in AUTO_PROMPTS:
            events: list = []
            result = session.run(prompt, max_tokens=N, temp=0.0, emit_stats_every=1, on_events=events.extend)
            reference = plain.run(prompt, max_tokens=N, temp=0.0)
            assert result.status == "done", result.terminal
            assert result.tokens == reference.tokens, prompt
            steps = steps_of(events)
            assert sum(st.tokens for st in steps) == N
            rejected += [st.drafted - st.accepted for st in steps if st.drafted > st.accepted]
            mtp_drafted += sum(d.drafted for d in result.stats.drafters if d.name == "draft-mtp")
    assert mtp_drafted > 0, "auto never had MTP draft"
    assert any(r > 3 for r in rejected), f"no rejection deeper than the 3 snapshots: {rejected}"
    assert any(r <= 3 for r in rejected), f"no rejection the snapshots undo: {rejected}"


def test_a_refused_seq_rm_ends_the_request_with_an_error_and_the_next_equals_a_fresh_session(
        hybrid_model, plain_tokens):

    with Session(hybrid_model, n_ctx=N_CTX, spec=Spec("mtp", n_draft=3), **CTX) as session:
        nt.refuse_next_seq_rm(session._handle)
        refused = session.run(PROMPT, max_tokens=N, temp=0.0)
        after = session.run(PROMPT, max_tokens=N, temp=0.0)
    assert refused.status == "error", refused.terminal
    assert "llama_memory_seq_rm" in refused.terminal.reason and "rolling back" in refused.terminal.reason
    assert len(refused.tokens) < N
    assert after.status == "done" and after.tokens == plain_tokens


@pytest.mark.parametrize("n_draft", [1, 3, 6])
def test_hybrid_mtp_greedy_equals_plain_greedy(hybrid_model, plain_tokens, n_draft):
    with Session(hybrid_model, n_ctx=N_CTX, spec=Spec("mtp", n_draft=n_draft), **CTX) as session:
        first = session.run(PROMPT, max_tokens=N, temp=0.0)
        again = session.run(PROMPT, max_tokens=N, temp=0.0)  # the session is reused as is
    s = first.stats
    print(s.summary())
    assert first.tokens == plain_tokens
    assert again.tokens == plain_tokens
    assert s.drafts_accepted > 0
    rejected = s.drafts_generated - s.drafts_accepted
    assert rejected >= 5, f"only {rejected} drafted tokens were rejected: the rollback was barely exercised"


@pytest.mark.parametrize("spec_type", NGRAM_TYPES)
def test_hybrid_ngram_greedy_equals_plain_greedy(hybrid_model, plain_tokens, spec_type):
    with Session(hybrid_model, n_ctx=N_CTX, spec=ngram_spec(spec_type), **CTX) as session:
        result = session.run(PROMPT, max_tokens=N, temp=0.0)
    s = result.stats
    print(spec_type, s.summary())
    assert result.tokens == plain_tokens
    if spec_type != "ngram-cache":
        # a partly accepted draft: the re-verify pass keeps a non-empty prefix.
        # ngram-cache's few drafts on this random model are all wrong (0 of 16
        # accepted, counted once each since decision 0007); the others accept some.
        assert s.drafts_accepted > 0
    assert s.drafts_generated - s.drafts_accepted > 0, "no draft was rejected: the checkpoint was never restored"


# -- counters against events -------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One loop step as the events show it (emit_stats_every=1: a Stats or Done after each step)."""

    emitted_before: int
    tokens: int
    drafted: int
    accepted: int
    drafts: int
    """Drafts proposed (drafted_per_pos[0]): at most one per step."""


def _per_pos(snap: StatsSnapshot, i: int) -> int:
    return snap.drafted_per_pos[i] if i < len(snap.drafted_per_pos) else 0


def steps_of(events: list) -> list[Step]:
    steps: list[Step] = []
    prev: StatsSnapshot | None = None
    emitted = tokens = 0
    for ev in events:
        if isinstance(ev, Token):
            tokens += 1
        elif isinstance(ev, (Stats, Done)):
            snap = ev.snapshot if isinstance(ev, Stats) else ev.stats
            drafted0 = prev.drafts_generated if prev else 0
            accepted0 = prev.drafts_accepted if prev else 0
            drafts0 = _per_pos(prev, 0) if prev else 0
            steps.append(Step(emitted, tokens, snap.drafts_generated - drafted0, snap.drafts_accepted - accepted0,
                              _per_pos(snap, 0) - drafts0))
            emitted += tokens
            tokens = 0
            prev = snap
    return steps


def run_with_step_events(model: spec_actor.Model, spec: Spec,
                         draft_decoded: list[int] | None = None) -> tuple[spec_actor.RunResult, list[Step]]:
    """A run with a Stats event after every step, and its steps; ``draft_decoded`` gets the tokens
    the draft context decoded in the run."""
    events: list = []
    with Session(model, n_ctx=N_CTX, spec=spec, **CTX) as session:
        nt.take_draft_context_tokens(session._handle)
        result = session.run(PROMPT, max_tokens=N, temp=0.0, emit_stats_every=1, on_events=events.extend)
        if draft_decoded is not None:
            draft_decoded.append(nt.take_draft_context_tokens(session._handle))
    steps = steps_of(events)
    assert sum(st.tokens for st in steps) == len(result.tokens) == N
    assert sum(st.drafted for st in steps) == result.stats.drafts_generated
    return result, steps


def test_hybrid_mtp_counters_match_the_events(hybrid_model, plain_tokens):
    """MTP (state snapshots, no re-verify): every step drafts n_draft, capped by the budget."""
    n_draft = 3
    result, steps = run_with_step_events(hybrid_model, Spec("mtp", n_draft=n_draft))
    assert result.tokens == plain_tokens
    for st in steps:
        # p_min = 0: the MTP head always drafts as many tokens as it may
        assert st.drafted == min(n_draft, N - st.emitted_before - 1), st
        assert st.drafts == (1 if st.drafted else 0), st
        # the target samples one token after the accepted prefix
        assert st.accepted == st.tokens - 1, st
    assert any(st.accepted < st.drafted for st in steps)


@pytest.mark.parametrize("n_draft", [3, 8])
def test_the_mtp_context_reads_only_committed_tokens(hybrid_model, plain_tokens, n_draft):
    """The MTP head's context decodes each token the target committed once, and its own drafts: a rejected
    draft never enters it, and a verification a checkpoint restore undoes (drafts of 8 outgrow the 3 state
    snapshots) is not read; only its re-verification is (decision 0075).

    A token there is paired with the target's hidden state of the token before it, so a rejected one
    entering it paired the next batch's first token with a rejected token's state.
    """
    decoded: list[int] = []
    result, steps = run_with_step_events(hybrid_model, Spec("mtp", n_draft=n_draft), decoded)
    assert result.tokens == plain_tokens
    assert sum(st.accepted < st.drafted for st in steps) >= 5, "too few rejections to tell"
    n_prompt = len(hybrid_model.tokenizer.encode(PROMPT))
    drafting_steps = sum(1 for st in steps if st.drafted)
    # the prompt but its last token (the first verification decodes it), the verification row of
    # every emitted token, and (p_min 0) n_draft one-token decodes per drafting step, a draft the
    # budget cut at the end included
    assert decoded[0] == (n_prompt - 1) + N + n_draft * drafting_steps, (decoded, n_prompt, drafting_steps)


# The native loop once counted the re-verify pass as a second draft: on the
# first rejected ngram-simple draft (5 drafted, 0 accepted, 2 tokens emitted)
# the counters moved by drafted +6, accepted +1, drafts +2 (decisions 0007, 0013).
@pytest.mark.parametrize("spec_type", ["ngram-simple", "ngram-mod", "ngram-cache"])
def test_hybrid_checkpoint_reverify_counters_match_the_events(hybrid_model, plain_tokens, spec_type):
    """The checkpoint branch: restore, re-verify the accepted prefix, and count each draft once.

    A step whose draft is cut short restores the checkpoint and verifies
    ``accepted + correction`` again, which samples one more token: it emits
    ``accepted + 2`` tokens in one event batch; a fully accepted (or empty)
    draft emits ``accepted + 1``. The counters must count the drafted tokens
    of the one draft proposed and the drafted tokens accepted, not the
    re-verified ones.
    """
    spec = ngram_spec(spec_type)
    result, steps = run_with_step_events(hybrid_model, spec)
    assert result.tokens == plain_tokens
    restored = [st for st in steps if st.accepted < st.drafted]
    assert restored, "no draft was rejected: the checkpoint branch never ran"
    for st in steps:
        assert st.drafts <= 1, f"{st}: one step proposes at most one draft"
        assert st.drafted <= spec.n_draft, st
        assert st.accepted == st.tokens - 1 - (1 if st.accepted < st.drafted else 0), st


def test_the_step_profile_records_every_verification_once(hybrid_model, plain_tokens):
    """The step profile (sa_testing_profile_steps, decision 0110) keeps one record per verification: a draft
    that a checkpoint restore undid and its re-verification are two, counted as the statistics count them
    (one step, the draft's tokens once). Its parts lie within the step. It records only the runs that
    start while it is on.
    """
    with Session(hybrid_model, n_ctx=N_CTX, spec=ngram_spec("ngram-simple"), **CTX) as session:
        assert nt.take_step_profile(session._handle) == []
        nt.profile_steps(session._handle, True)
        result = session.run(PROMPT, max_tokens=N, temp=0.0)
        records = nt.take_step_profile(session._handle)
        nt.profile_steps(session._handle, False)
        session.run(PROMPT, max_tokens=8, temp=0.0)
        assert nt.take_step_profile(session._handle) == []
    assert result.tokens == plain_tokens
    stats = result.stats
    reverified = [r for r in records if r["reverify"]]
    assert reverified, "no draft was rolled back: the checkpoint branch never ran"
    assert len(records) - len(reverified) == stats.iters
    assert sum(r["n_draft"] for r in records if not r["reverify"]) == stats.drafts_generated
    assert sum(r["accepted"] for r in records if not r["reverify"]) == stats.drafts_accepted
    assert {DRAFTER_NAMES[r["drafter"]] for r in records if r["n_draft"]} == {"ngram-simple"}
    assert all(r["drafter"] == 0 and r["accepted"] == 0 for r in records if not r["n_draft"])
    parts = [p for p in nt.STEP_PARTS if p != "step"]
    for r in records:
        assert all(r[p] >= 0 for p in parts) and sum(r[p] for p in parts) <= r["step"], r


def reused_graphs_expected(decode_lengths: list[int]) -> int:
    """How many of these decodes (tokens each, in order, on a fresh context) reuse a graph built for an earlier one.

    The kept graphs of decision 0117: a one-token decode reuses the one-token graph once one was built,
    whatever ran between; a longer decode reuses only the graph of the longer decode before it, when that
    one had as many tokens.
    """
    one_token_built, last_longer, reused = False, None, 0
    for n in decode_lengths:
        if n == 1:
            reused += one_token_built
            one_token_built = True
        else:
            reused += n == last_longer
            last_longer = n
    return reused


def test_a_one_token_decode_after_a_drafted_one_reuses_its_graph(hybrid_model, plain_tokens):
    """llama.cpp rebuilt the graph whenever a decode's shape changed, so each plain step after a draft paid for a
    new graph (patch 0011, decision 0117). The reuse count of llama.cpp's own counter must equal what the kept
    graphs give for the run's decodes, read from the step profile: the prompt's, then each verification's
    (its drafted tokens and the one after them).
    """
    with Session(hybrid_model, n_ctx=N_CTX, spec=ngram_spec("ngram-simple"), **CTX) as session:
        before = nt.graphs_reused(session._handle)
        nt.profile_steps(session._handle, True)
        result = session.run(PROMPT, max_tokens=N, temp=0.0)
        records = nt.take_step_profile(session._handle)
        reused = nt.graphs_reused(session._handle) - before
        prompt_length = len(session.tokenize(PROMPT))
    assert result.tokens == plain_tokens
    lengths = [r["n_draft"] + 1 for r in records]
    switches = sum(1 for a, b in zip(lengths, lengths[1:]) if a > 1 and b == 1)
    assert switches >= 3, "too few plain steps right after a draft to tell kept graphs from rebuilt ones"
    assert prompt_length > max(lengths)  # the prompt's graph serves no verification
    assert reused == reused_graphs_expected([prompt_length, *lengths])


# -- cancellation --------------------------------------------------------------------------


def cancel_while_running(session: Session, after_tokens: int) -> spec_actor.RunResult:
    """Cancel from this thread once ``after_tokens`` were delivered, wherever the loop then is.

    The worker is not held: the cancel lands in a draft, a verify, a
    rollback or between steps, as it happens.
    """
    seen = [0]
    reached = threading.Event()
    outcome: dict[str, spec_actor.RunResult] = {}

    def sink(events: list) -> None:
        seen[0] += sum(isinstance(ev, Token) for ev in events)
        if seen[0] >= after_tokens:
            reached.set()

    def work() -> None:
        outcome["result"] = session.run(PROMPT, max_tokens=4000, temp=0.0, on_events=sink)

    worker = threading.Thread(target=work)
    worker.start()
    assert reached.wait(60.0), "the run delivered too few tokens"
    session.cancel()
    worker.join(60.0)
    assert not worker.is_alive()
    return outcome["result"]


@pytest.mark.parametrize("spec_type", ["mtp", "ngram-simple"])
def test_hybrid_cancel_mid_run_then_greedy_equals_a_fresh_session(hybrid_model, plain_tokens, spec_type):
    with Session(hybrid_model, n_ctx=4096, spec=SPECS[spec_type], **CTX) as session:
        for after in (5, 17, 30):
            stopped = cancel_while_running(session, after)
            assert stopped.status == "cancelled" and after <= len(stopped.tokens) < 4000
            n = min(len(stopped.tokens), N)
            assert stopped.tokens[:n] == plain_tokens[:n]
            after_cancel = session.run(PROMPT, max_tokens=N, temp=0.0)
            assert after_cancel.status == "done"
            assert after_cancel.tokens == plain_tokens  # what a fresh session produces (plain_tokens)


# -- through the actor ---------------------------------------------------------------------


@pytest.mark.parametrize("spec_type", ["mtp", "ngram-simple", "ngram-mod"])
async def test_hybrid_actor_greedy_equals_plain_greedy(hybrid_model, plain_tokens, spec_type):
    async with open_actor(hybrid_model, spec=SPECS[spec_type], n_ctx=N_CTX, **CTX) as actor:
        tokens: list[int] = []
        async with actor.stream_events(PROMPT, max_tokens=N, temp=0.0) as events:
            async for ev in events:
                if isinstance(ev, Token):
                    tokens.append(ev.id)
                elif isinstance(ev, Done):
                    last = ev.stats
        assert tuple(tokens) == plain_tokens
        assert last.drafts_generated > last.drafts_accepted > 0


@pytest.mark.parametrize("spec_type", ["mtp", "ngram-simple"])
async def test_hybrid_actor_leaving_a_stream_early_then_greedy_equals_a_fresh_actor(hybrid_model, spec_type):
    async with open_actor(hybrid_model, spec=SPECS[spec_type], n_ctx=4096, **CTX) as actor:
        for leave_after in (3, 11, 24):
            seen = 0
            async with actor.stream_events(PROMPT, max_tokens=4000, temp=0.0) as events:
                async for ev in events:
                    seen += isinstance(ev, Token)
                    if seen >= leave_after:
                        break  # sets the native cancel flag wherever the loop is
            with trio.fail_after(60):
                again = await actor.generate(PROMPT, max_tokens=N, temp=0.0)
            async with open_actor(hybrid_model, spec=SPECS[spec_type], n_ctx=4096, **CTX) as fresh:
                expected = await fresh.generate(PROMPT, max_tokens=N, temp=0.0)
            assert again == expected


def test_a_deeper_hybrid_trunk_alternates_blocks_and_mtp_greedy_equals_plain_greedy(tmp_path):
    """write_hybrid_mtp_model(dims=...) with 4 trunk blocks (bench_adaptive --trunk-layers): delta-net and
    attention in turn, the NextN block last, and speculation on it as lossless as on the default."""
    path = tm.write_hybrid_mtp_model(tmp_path / "deep.gguf", dims=replace(tm.HYBRID_DIMS, n_layer=4))
    g = tm.read_gguf(path)
    assert g.metadata["qwen35.block_count"] == 5 and g.metadata["qwen35.nextn_predict_layers"] == 1
    assert [f"blk.{i}.ssm_a" in g.tensors for i in range(4)] == [True, False, True, False]
    assert "blk.4.nextn.eh_proj.weight" in g.tensors
    with pytest.raises(ValueError, match="even n_layer"):
        tm.write_hybrid_mtp_model(tmp_path / "odd.gguf", dims=replace(tm.HYBRID_DIMS, n_layer=3))
    model = spec_actor.load_model(path, load_mtp=True)
    try:
        with Session(model, n_ctx=N_CTX, spec="none", **CTX) as plain, \
                Session(model, n_ctx=N_CTX, spec=Spec("mtp", n_draft=3), **CTX) as mtp:
            reference = plain.run(PROMPT, max_tokens=N, temp=0.0)
            result = mtp.run(PROMPT, max_tokens=N, temp=0.0)
    finally:
        model.close()
    assert len(set(reference.tokens)) > 8, "the deeper model's greedy path is degenerate"
    assert result.tokens == reference.tokens
    assert result.stats.drafts_accepted > 0
    assert result.stats.drafts_generated > result.stats.drafts_accepted, "no draft was rejected"


def assert_rollback_modes_equal(model: spec_actor.Model, reference: list[int]) -> None:
    """MTP (snapshots), ngram-simple (checkpoints) and auto each make plain's greedy tokens on PROMPT;
    the fixed drafters also had drafts both accepted and rejected, so both rollback paths ran."""
    for spec in (Spec("mtp", n_draft=3), ngram_spec("ngram-simple"), Spec("auto")):
        with Session(model, n_ctx=N_CTX, spec=spec, **CTX) as session:
            result = session.run(PROMPT, max_tokens=N, temp=0.0)
        assert result.tokens == reference, spec
        if spec.type != "auto":
            assert result.stats.drafts_generated > result.stats.drafts_accepted > 0, spec


# A delta-net with a wider state than the default (and the same head layout
# as a released Qwen 3.5, 2 key heads per 4 value heads), small enough for a test.
WIDE_SSM = tm.SsmDims(state=32, groups=2, v_heads=4)


def test_a_hybrid_with_a_wider_recurrent_state_checkpoints_it_whole_and_every_mode_equals_plain(tmp_path):
    """write_hybrid_mtp_model(ssm=...) sizes the recurrent state llama.cpp keeps per sequence.

    The metadata carries the sizes; the checkpoint that the prefix cache keeps at the end of
    a run holds each delta-net block's state (its v_heads x state x state matrix and the last
    conv_kernel - 1 convolution inputs of q, k and v, in F32), computed here from the file's
    own metadata; MTP (snapshots) and ngram-simple (checkpoints) roll it back exactly.
    """
    path = tm.write_hybrid_mtp_model(tmp_path / "wide-state.gguf", ssm=WIDE_SSM)
    meta = tm.read_gguf(path).metadata
    assert (meta["qwen35.ssm.state_size"], meta["qwen35.ssm.group_count"], meta["qwen35.ssm.time_step_rank"],
            meta["qwen35.ssm.inner_size"]) == (32, 2, 4, 128)
    d_state, d_inner, k = meta["qwen35.ssm.state_size"], meta["qwen35.ssm.inner_size"], meta["qwen35.ssm.conv_kernel"]
    conv_channels = d_inner + 2 * meta["qwen35.ssm.group_count"] * d_state
    state_floats = d_inner * d_state + (k - 1) * conv_channels
    n_recurrent = sum(f"blk.{i}.ssm_a" in tm.read_gguf(path).tensors for i in range(meta["qwen35.block_count"]))
    assert n_recurrent == 1 and WIDE_SSM.state_bytes == 4 * state_floats

    model = spec_actor.load_model(path, load_mtp=True)
    try:
        with Session(model, n_ctx=N_CTX, spec="none", **CTX) as plain:
            reference = plain.run(PROMPT, max_tokens=N, temp=0.0)
            usage = plain.prefix_cache_usage()
        assert usage.checkpoints >= 1
        per_checkpoint = usage.checkpoint_bytes / usage.checkpoints
        # the state itself, and at most a few hundred bytes of llama.cpp's framing around it
        assert 4 * state_floats * n_recurrent <= per_checkpoint <= 4 * state_floats * n_recurrent + 512
        assert_rollback_modes_equal(model, reference.tokens)
    finally:
        model.close()


# A trunk twice the base width: small enough for a test, wide enough that
# every tensor past the embedding changes shape.
WIDE_TRUNK = replace(tm.HYBRID_DIMS, n_embd=128)


def test_a_wider_hybrid_keeps_the_language_in_its_first_64_dimensions_and_every_mode_equals_plain(tmp_path):
    """write_hybrid_mtp_model(dims=...) with n_embd above 64 (decision 0116).

    Every block is as wide as the trunk; the embedding and output rows hold
    the base language in their first 64 columns and nothing past them, the
    output rows scaled by sqrt(64 / n_embd) against the final norm's gain, so
    the greedy path stays varied. MTP (snapshots), ngram-simple
    (checkpoints) and auto roll back exactly.
    """
    path = tm.write_hybrid_mtp_model(tmp_path / "wide-trunk.gguf", dims=WIDE_TRUNK)
    g = tm.read_gguf(path)
    n, base = WIDE_TRUNK.n_embd, 64
    assert g.metadata["qwen35.embedding_length"] == n
    assert g.tensors["blk.0.attn_qkv.weight"].ne[0] == g.tensors["blk.2.nextn.eh_proj.weight"].ne[1] == n
    narrow = tm.read_gguf(tm.write_hybrid_mtp_model(tmp_path / "narrow.gguf"))
    emb, out = g.tensor("token_embd.weight"), g.tensor("output.weight")
    assert not emb[:, base:].any() and not out[:, base:].any()
    np.testing.assert_array_equal(emb[:, :base], narrow.tensor("token_embd.weight"))
    np.testing.assert_allclose(out[:, :base], narrow.tensor("output.weight") * np.sqrt(base / n), rtol=1e-6)
    with pytest.raises(ValueError, match="at least 64"):
        tm.write_hybrid_mtp_model(tmp_path / "thin.gguf", dims=replace(tm.HYBRID_DIMS, n_embd=32))

    model = spec_actor.load_model(path, load_mtp=True)
    try:
        with Session(model, n_ctx=N_CTX, spec="none", **CTX) as plain:
            reference = plain.run(PROMPT, max_tokens=N, temp=0.0)
        assert len(set(reference.tokens)) > 8, "the wider model's greedy path is degenerate"
        assert_rollback_modes_equal(model, reference.tokens)
    finally:
        model.close()
