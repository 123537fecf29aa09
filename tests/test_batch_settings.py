"""No batch setting reaches a native assert: every combination generates or names what to change.

llama.cpp aborts the process when a verify batch's tail does not fit a
micro-batch on a recurrent target (``GGML_ASSERT(n_ubatch > n_keep_tail)``),
so each table row runs in a child process: an abort fails that row, not the
test run. A row either generates, or raises `ConfigError` naming a setting
and the smallest value that works; that value is then tried and must
generate. Each table runs on one sequence and on three sequences of one
batched session generating at once (their drafts made in one call, decision
0070, so a draft context's batch holds all of them).
"""

from __future__ import annotations

import json
import re

import pytest
from subprocess_helpers import run_child
from tiny_model_fixtures import tiny_paths  # noqa: F401 - fixture, found by pytest here

# (target file, draft file or None, load_mtp, spec type, n_draft or None for the type's default)
CASES = {
    "llama-none": ("target", None, False, "none", None),
    "llama-auto": ("target", None, False, "auto", None),
    "llama-auto-draft": ("target", "draft", False, "auto", None),
    "llama-draft": ("target", "draft", False, "draft", 3),
    "llama-eagle3": ("target", "eagle3", False, "eagle3", 3),
    "llama-dflash": ("target", "dflash", False, "dflash", 3),
    "llama-ngram": ("target", None, False, "ngram-simple", 8),
    "moe-mtp": ("mtp", None, True, "mtp", 3),
    "moe-auto": ("mtp", None, True, "auto", None),
    "hybrid-none": ("hybrid", None, True, "none", None),
    "hybrid-auto": ("hybrid", None, True, "auto", None),
    "hybrid-mtp": ("hybrid", None, True, "mtp", 3),
    "hybrid-mtp-6": ("hybrid", None, True, "mtp", 6),
    "hybrid-ngram": ("hybrid", None, True, "ngram-mod", 8),
}
BATCHES = (1, 2, 3, 4, 5, 6, 8)
N_CTX = (16, 64)

CHILD = r"""
import json, sys, threading
import spec_actor
from spec_actor import ConfigError, Session, Spec

target, draft, load_mtp, spec_type, n_draft = json.loads(sys.argv[1])
rows = json.loads(sys.argv[2])
n_seq = int(sys.argv[3])
model = spec_actor.load_model(target, load_mtp=load_mtp)
options = {"draft_model": spec_actor.load_model(draft)} if draft else {}
if n_draft is not None:
    options["n_draft"] = n_draft
spec = Spec(spec_type, **options)
prompts = ["the cat and the dog and the cat and the", "one two three one two three one", "a b a b a b a b a b"]
for n_batch, n_ubatch, n_ctx in rows:
    print("TRY", n_batch, n_ubatch, n_ctx, flush=True)
    try:
        with Session(model, n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_ubatch, spec=spec, n_threads=1,
                     n_seq=n_seq) as session:
            results = {}
            def run(seq):
                results[seq] = session.run(prompts[seq], seq=seq, max_tokens=6, temp=0.0)
            threads = [threading.Thread(target=run, args=(seq,)) for seq in range(n_seq)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        statuses = {r.status for r in results.values()}
        outcome = {"status": statuses.pop() if len(statuses) == 1 else sorted(statuses),
                   "tokens": min(len(r.tokens) for r in results.values()) if len(results) == n_seq else 0,
                   "reason": "; ".join(getattr(r.terminal, "reason", "") for r in results.values())}
    except ConfigError as e:
        outcome = {"status": "config", "reason": str(e)}
    print("OUT", json.dumps([n_batch, n_ubatch, n_ctx, outcome]), flush=True)
"""


def run_rows(args: list, rows: list[tuple[int, int, int]], n_seq: int) -> dict[tuple[int, int, int], dict]:
    done = run_child(CHILD, json.dumps(args), json.dumps(rows), str(n_seq), timeout=300)
    outcomes = {}
    for line in done.stdout.splitlines():
        if line.startswith("OUT "):
            n_batch, n_ubatch, n_ctx, outcome = json.loads(line[4:])
            outcomes[(n_batch, n_ubatch, n_ctx)] = outcome
    tried = [line for line in done.stdout.splitlines() if line.startswith("TRY ")]
    assert done.returncode == 0, f"the child died at {tried[-1] if tried else 'start'}:\n{done.describe()}"
    return outcomes


# "n_ubatch ... needs n_ubatch >= ... = 5" / "n_batch=2 is too small ...: it must be at least 4"
SMALLEST = re.compile(r"(n_ubatch|n_batch|n_ctx)\b.*?(?:= |at least )(\d+)")


@pytest.mark.parametrize("n_seq", [1, 3])
@pytest.mark.parametrize("case", list(CASES))
def test_every_batch_setting_generates_or_names_the_smallest_that_works(tiny_paths, case, n_seq):  # noqa: F811
    target, draft, load_mtp, spec_type, n_draft = CASES[case]
    args = [str(getattr(tiny_paths, target)), str(getattr(tiny_paths, draft)) if draft else None, load_mtp,
            spec_type, n_draft]
    rows = [(b, u, c) for c in N_CTX for b in BATCHES for u in BATCHES if u <= b]
    outcomes = run_rows(args, rows, n_seq)
    assert set(outcomes) == set(rows)
    fixes = {row: outcome for row, outcome in outcomes.items() if outcome["status"] == "config"}
    for row, outcome in outcomes.items():
        if row not in fixes:
            assert outcome["status"] in ("done", "eog") and outcome["tokens"] >= 1, (case, row, outcome)
    if spec_type in ("none", "auto"):
        # the default spec never makes a small batch an error: auto fits its drafts to the batch;
        # only a batch of one token, which no context takes, is refused
        assert all(row[0] == 1 for row in fixes), f"{case}: {fixes}"
    # Each error's named value is tried; a setting that then refuses another names the next (at most 2 rounds).
    for _ in range(3):
        if not fixes:
            break
        retried = {row: smallest_that_works(row, outcome["reason"], case) for row, outcome in fixes.items()}
        again = run_rows(args, sorted(set(retried.values())), n_seq)
        fixes = {fixed: again[fixed] for fixed in set(retried.values()) if again[fixed]["status"] == "config"}
        for fixed in set(retried.values()) - set(fixes):
            assert again[fixed]["status"] in ("done", "eog"), (case, fixed, again[fixed])
    assert not fixes, f"{case}: still refused after following the errors: {fixes}"


def smallest_that_works(row: tuple[int, int, int], reason: str, case: str) -> tuple[int, int, int]:
    """The row with the setting that ``reason`` names raised to the value it names."""
    found = SMALLEST.search(reason)
    assert found, f"{case} {row}: the error names no setting and value: {reason}"
    settings = dict(zip(("n_batch", "n_ubatch", "n_ctx"), row))
    settings[found.group(1)] = int(found.group(2))
    settings["n_batch"] = max(settings["n_batch"], settings["n_ubatch"])
    return settings["n_batch"], settings["n_ubatch"], settings["n_ctx"]
