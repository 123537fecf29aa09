"""The ``spec-actor`` command line, run as ``python -m spec_actor.cli`` in a subprocess."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
import trio
from tiny_model_fixtures import tiny_paths  # noqa: F401 - a fixture

import spec_actor
from spec_actor.cli import _bench, _prompts, main
from spec_actor.cli._interrupts import Interrupts

REPO = Path(__file__).resolve().parent.parent
# The directory that holds the spec_actor the tests import (the work tree or site-packages).
PACKAGE_ROOT = Path(spec_actor.__file__).resolve().parent.parent
# `python -m` puts its working directory first on sys.path, ahead of
# PYTHONPATH: run the command from this tests folder, which holds no package,
# so a source checkout (without the built extension) cannot shadow the
# spec_actor under test and PYTHONPATH decides what is imported.
CLI = [sys.executable, "-m", "spec_actor.cli"]
RUN_DIR = Path(__file__).resolve().parent
PROMPT = "The three primary colors are"
TIMEOUT = 120


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(PACKAGE_ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env.pop("SPEC_ACTOR_DEBUG", None)
    env.update(extra)
    return env


def cli(*args: str, input: str | None = None, env: dict[str, str] | None = None,
        cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the command to completion with pipes (off a terminal)."""
    return subprocess.run([*CLI, *args], input=input,
                          stdin=None if input is not None else subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=TIMEOUT, env=env or _env(),
                          cwd=cwd or RUN_DIR)


def popen(*args: str, **kw: object) -> subprocess.Popen[bytes]:
    return subprocess.Popen([*CLI, *args], stdin=subprocess.DEVNULL, env=_env(), cwd=RUN_DIR,
                            **kw)  # type: ignore[call-overload]


def assert_one_error_line(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode not in (0, None), proc
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("spec-actor: error: "), lines
    for needle in needles:
        assert needle in lines[0], lines[0]


def assert_no_control_characters(text: str) -> None:
    assert "\x1b" not in text and "\r" not in text, repr(text)


# -- generate -------------------------------------------------------------------------


def test_generate_streams_the_same_text_as_the_library(gemma):
    proc = cli("generate", PROMPT, "--max-tokens", "12", "--threads", "2", "--n-ctx", "512")
    assert proc.returncode == 0, proc.stderr
    with spec_actor.Session(gemma, n_ctx=512, n_threads=2) as session:  # both on the default spec (auto)
        expected = session.run(PROMPT, max_tokens=12, temp=0.0)
    assert proc.stdout == expected.text
    [summary] = proc.stderr.splitlines()
    assert summary.startswith("spec-actor: done after ")
    assert "12 tokens at " in summary and "tok/s" in summary


def test_generate_off_a_terminal_writes_no_control_characters():
    # Prompt from stdin, speculative type, sampling options: all off a terminal.
    proc = cli("generate", "--spec", "ngram-cache", "--n-draft", "auto", "-n", "24", "--temp", "0.7",
               "--seed", "7", "--top-k", "20", "--top-p", "0.9", "--min-p", "0.01",
               input=_prompts.COPY)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout
    assert_no_control_characters(proc.stdout)
    assert_no_control_characters(proc.stderr)
    [summary] = proc.stderr.splitlines()
    assert "24 tokens at" in summary and "drafts " in summary


def test_generate_with_a_grammar_and_chat_format(tmp_path):
    grammar = tmp_path / "yesno.gbnf"
    grammar.write_text('root ::= "yes" | "no"\n')
    proc = cli("generate", "Is the sky blue?", "--chat", "--grammar", str(grammar), "-n", "8")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout in ("yes", "no")


def _greedy_reply(model: spec_actor.Model, formatted: str, max_tokens: int) -> spec_actor.RunResult:
    """The greedy reply to a conversation formatted by hand, on a bare session (not the actor)."""
    with spec_actor.Session(model, n_ctx=512, n_threads=2) as session:
        return session.run(formatted, max_tokens=max_tokens, temp=0.0, parse_special=True)


def test_generate_chat_with_a_system_message_uses_the_models_turns(gemma):
    proc = cli("generate", "Name a colour.", "--system", "Answer in one word.", "-n", "12", "-t", "2",
               "--n-ctx", "512")
    assert proc.returncode == 0, proc.stderr
    # Gemma's published turn format, by hand: the system text opens the user turn.
    expected = _greedy_reply(gemma, "<start_of_turn>user\nAnswer in one word.\n\nName a colour.<end_of_turn>\n"
                                    "<start_of_turn>model\n", 12)
    assert proc.stdout == expected.text
    outcome = "end of generation" if expected.status == "eog" else "done"
    assert proc.stderr.startswith(f"spec-actor: {outcome} after "), proc.stderr


def test_generate_chat_template_overrides_the_models_own(gemma):
    proc = cli("generate", "Name a colour.", "--chat-template", "chatml", "-n", "8", "-t", "2", "--n-ctx", "512")
    assert proc.returncode == 0, proc.stderr
    expected = _greedy_reply(gemma, "<|im_start|>user\nName a colour.<|im_end|>\n<|im_start|>assistant\n", 8)
    assert proc.stdout == expected.text


def test_chat_on_a_model_without_a_template_is_one_line(tiny_paths):  # noqa: F811
    proc = cli("generate", "hello", "--chat", "--model", str(tiny_paths.target), "-n", "4")
    assert_one_error_line(proc, "--chat", "no chat template")
    assert proc.returncode == 2


def test_generate_mtp_on_a_model_with_nextn_layers(tiny_paths):  # noqa: F811
    proc = cli("generate", "hello world", "--model", str(tiny_paths.mtp), "--spec", "mtp", "-n", "16")
    assert proc.returncode == 0, proc.stderr
    assert "16 tokens at" in proc.stderr and "drafts " in proc.stderr


def test_generate_with_a_draft_model(tiny_paths):  # noqa: F811
    proc = cli("generate", "hello world", "--model", str(tiny_paths.target),
               "--draft-model", str(tiny_paths.draft), "-n", "16")
    assert proc.returncode == 0, proc.stderr
    assert "16 tokens at" in proc.stderr


def test_ctrl_c_stops_generation_with_stats():
    proc = popen("generate", _prompts.STORY, "--max-tokens", "4000", stdout=subprocess.PIPE,
                 stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.read(1), "no output before the interrupt"
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)  # a hang bound; the stop latency is bench/'s to measure
        err = proc.stderr.read().decode()
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 130, err
    [summary] = err.splitlines()
    assert summary.startswith("spec-actor: interrupted after ") and " tokens at " in summary, err
    assert "Traceback" not in err


def test_a_closed_stdout_stops_generation_quietly():
    proc = popen("generate", _prompts.STORY, "--max-tokens", "4000", stdout=subprocess.PIPE,
                 stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.read(1)
        proc.stdout.close()
        proc.wait(timeout=30)
        err = proc.stderr.read().decode()
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 141, err
    assert err == ""


def _run_on_pty(args: list[str], *, stdout_on_pty: bool, rows: int = 12) -> tuple[int, bytes, bytes]:
    """Run with stderr (and optionally stdout) on a pseudo-terminal; (rc, terminal bytes, piped stdout)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, 100, 0, 0))
    env = _env()
    env["TERM"] = "xterm"
    proc = subprocess.Popen([*CLI, *args], stdin=subprocess.DEVNULL, cwd=RUN_DIR,
                            stdout=slave if stdout_on_pty else subprocess.PIPE, stderr=slave, env=env)
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + TIMEOUT
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: every writer closed the terminal
                    break
                if not chunk:
                    break
                seen += chunk
            elif proc.poll() is not None:
                break
        out = proc.stdout.read() if proc.stdout is not None else b""
        return proc.wait(timeout=10), seen, out
    finally:
        proc.kill()
        proc.wait()
        os.close(master)


def test_status_line_is_redrawn_in_place_on_a_terminal():
    rc, term, out = _run_on_pty(["generate", PROMPT, "-n", "24", "--spec", "ngram-mod"], stdout_on_pty=False)
    assert rc == 0, term
    text = term.decode()
    assert "\r\x1b[2K" in text and "prefill" in text
    assert "spec-actor: done after" in text
    # The last status line is erased before the summary.
    assert text.rindex("\r\x1b[2K") < text.index("spec-actor: done")
    assert out and b"\x1b" not in out


def test_status_line_keeps_the_last_row_when_text_shares_the_terminal():
    rc, term, _ = _run_on_pty(["generate", PROMPT, "-n", "24"], stdout_on_pty=True)
    assert rc == 0, term
    text = term.decode()
    assert "\x1b[1;11r" in text  # scroll region: all rows but the last
    assert "\x1b[12;1H" in text  # the status is drawn on the last row
    assert text.index("\x1b[r") < text.index("spec-actor: done")  # region reset before the summary


# -- errors ---------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "needles"), [
    (["generate", "hi", "--model", "/nonexistent/model.gguf"], ["model file not found", "/nonexistent/model.gguf"]),
    (["info", "/nonexistent/model.gguf"], ["model file not found"]),
    (["generate", "hi", "--spec", "warp-drive"], ["--spec", "warp-drive", "ngram-mod"]),
    (["generate", "hi", "--n-draft", "0"], ["--n-draft", "'0'", "auto"]),
    (["generate", "hi", "--n-draft", "lots"], ["--n-draft", "'lots'"]),
    (["generate", "hi", "--spec", "draft-simple"], ["--draft-model"]),
    (["generate", "hi", "--grammar", "/nonexistent/g.gbnf"], ["grammar file", "/nonexistent/g.gbnf"]),
    (["generate", "hi", "--top-p", "0"], ["top_p"]),
    (["generate", "hi", "--spec-param", "bogus=1"], ["--spec-param", "ngram_mod_n_min"]),
    (["bench", "--types", "none", "nonsense"], ["--types", "nonsense"]),
    (["bench", "--prompts", "poem"], ["--prompts", "poem", "copy"]),
    (["generate", "hi", "--max-tokens", "-3"], ["--max-tokens"]),
    (["frobnicate"], ["frobnicate"]),
    ([], ["COMMAND"]),
])
def test_errors_are_one_line_without_traceback(args, needles):
    assert_one_error_line(cli(*args), *needles)


def test_a_file_that_is_not_a_model_is_one_line(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf at all")
    assert_one_error_line(cli("info", str(bad)), "GGUF")


def test_mtp_on_a_model_without_nextn_layers_is_one_line():
    assert_one_error_line(cli("generate", "hi", "--spec", "mtp", "-n", "4"), "NextN")


def test_bad_options_exit_2_and_runtime_failures_exit_1():
    assert cli("generate", "hi", "--spec", "warp-drive").returncode == 2
    assert cli("generate", "hi", "--model", "/nonexistent/model.gguf").returncode == 1


def test_missing_prompt_is_an_error():
    proc = subprocess.run([*CLI, "generate"], input="", capture_output=True, text=True, env=_env(),
                          timeout=TIMEOUT, cwd=RUN_DIR)
    assert_one_error_line(proc, "prompt")


# -- bench ----------------------------------------------------------------------------


def test_bench_json_schema_on_a_tiny_run(tmp_path):
    out = tmp_path / "bench.json"
    proc = cli("bench", "--types", "none", "ngram-cache", "--prompts", "copy", "--max-tokens", "8",
               "--repeats", "1", "--warmup", "1", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    assert_no_control_characters(proc.stdout + proc.stderr)
    data = json.loads(out.read_text())
    assert data["schema"] == _bench.JSON_SCHEMA
    assert data["command"].startswith("spec-actor bench")
    assert {"path", "name", "arch", "description", "n_params", "size_bytes"} <= data["model"].keys()
    assert {"cpu", "cpu_count", "system", "python"} <= data["machine"].keys()
    assert data["settings"]["max_tokens"] == 8 and data["settings"]["repeats"] == 1
    assert data["settings"]["warmup"] == 1 and data["settings"]["temp"] == 0.0
    assert [(r["prompt"], r["type"]) for r in data["results"]] == [("copy", "none"), ("copy", "ngram-cache")]
    plain, ngram = data["results"]
    for result in data["results"]:
        assert len(result["tokens_per_sec"]) == 1 and result["median_tokens_per_sec"] > 0
        assert result["tokens_emitted"] == [8]
        assert result["prompt_tokens"] > 100
        assert result["mean_accepted_per_step"] >= 1.0
        for key in ("drafts_generated", "drafts_accepted", "iters", "ttft_ms"):
            assert len(result[key]) == 1
    assert plain["n_draft"] == 0 and plain["ratio_to_plain"] == 1.0 and plain["acceptance_rate"] is None
    assert ngram["n_draft"] == 8
    assert ngram["ratio_to_plain"] == pytest.approx(ngram["median_tokens_per_sec"] / plain["median_tokens_per_sec"])
    assert ngram["acceptance_rate"] is None or 0.0 <= ngram["acceptance_rate"] <= 1.0
    # The table on stdout: a header, then one row per type.
    lines = proc.stdout.splitlines()
    assert any(line.split()[:2] == ["prompt", "type"] for line in lines)
    assert any(line.split()[:2] == ["copy", "none"] for line in lines)
    assert any(line.split()[:2] == ["copy", "ngram-cache"] for line in lines)


def test_ctrl_c_stops_bench_and_prints_the_runs_that_finished():
    # stderr on a terminal draws the progress line; SIGINT once the second run has begun.
    master, slave = pty.openpty()
    env = _env()
    env["TERM"] = "xterm"
    proc = subprocess.Popen([*CLI, "bench", "--types", "none,ngram-mod", "--prompts", "copy", "-n", "16",
                             "-r", "50", "--warmup", "0"], stdin=subprocess.DEVNULL, cwd=RUN_DIR,
                            stdout=subprocess.PIPE, stderr=slave, env=env)
    os.close(slave)
    seen = b""
    try:
        deadline = time.monotonic() + TIMEOUT
        while b"bench 2/100" not in seen and time.monotonic() < deadline and proc.poll() is None:
            if select.select([master], [], [], 0.2)[0]:
                seen += os.read(master, 65536)
        assert b"bench 2/100" in seen, seen
        proc.send_signal(signal.SIGINT)
        out = proc.stdout.read().decode() if proc.stdout is not None else ""
        rc = proc.wait(timeout=TIMEOUT)
        while select.select([master], [], [], 0.2)[0]:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    finally:
        proc.kill()
        proc.wait()
        os.close(master)
    err = seen.decode()
    assert rc == 130, err
    assert "interrupted; the table shows the runs that finished" in err and "Traceback" not in err
    rows = [line.split()[:2] for line in out.splitlines()]
    assert ["copy", "none"] in rows  # the first run finished before the signal


def test_interrupts_cancel_the_work_on_a_signal_and_pass_results_and_errors_through():
    async def interrupted() -> str:
        os.kill(os.getpid(), signal.SIGINT)
        await trio.sleep_forever()
        return "never"

    async def bounded(interrupts: Interrupts, work):  # type: ignore[no-untyped-def]
        with trio.fail_after(30):
            return await interrupts.run(work)

    interrupts = Interrupts()
    assert trio.run(bounded, interrupts, interrupted) is None
    assert interrupts.signum == signal.SIGINT and interrupts.exit_code == 130

    async def answer() -> int:
        return 42

    calm = Interrupts()
    assert trio.run(bounded, calm, answer) == 42 and calm.signum is None

    async def fail() -> None:
        raise spec_actor.ConfigError("bad option")

    with pytest.raises(spec_actor.ConfigError, match="bad option"):  # plain, not in an ExceptionGroup
        trio.run(bounded, Interrupts(), fail)


def test_bench_plot_without_matplotlib_is_a_clear_error(tmp_path):
    blocker = tmp_path / "matplotlib"
    blocker.mkdir()
    (blocker / "__init__.py").write_text("raise ImportError('matplotlib is blocked by the test')\n")
    env = _env()
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env["PYTHONPATH"]])
    proc = cli("bench", "--plot", str(tmp_path / "out.png"), env=env)
    assert_one_error_line(proc, "matplotlib", "spec_actor[plot]")
    assert not (tmp_path / "out.png").exists()


def test_bench_plot_writes_a_png(tmp_path):
    import matplotlib  # noqa: F401 - part of the test extras; fail loudly if missing
    png = tmp_path / "bench.png"
    proc = cli("bench", "--types", "none,ngram-mod", "--prompts", "story", "-n", "4", "-r", "1",
               "--warmup", "0", "--plot", str(png))
    assert proc.returncode == 0, proc.stderr
    assert png.read_bytes().startswith(b"\x89PNG")


def test_bench_table_renders_ratios_and_markdown():
    snap = spec_actor.StatsSnapshot.from_fields(
        iters=40, drafts_generated=100, drafts_accepted=80, tokens_emitted=120, prompt_tokens=10,
        t_prefill_us=1, t_draft_us=1, t_verify_us=1, t_sample_us=1, t_total_us=1, ttft_us=1000, n_draft=8,
        tokens_per_sec=100.0, acceptance_rate=0.8, accepted_per_pos=[], drafted_per_pos=[])
    plain = spec_actor.StatsSnapshot.from_fields(
        iters=120, drafts_generated=0, drafts_accepted=0, tokens_emitted=120, prompt_tokens=10,
        t_prefill_us=1, t_draft_us=0, t_verify_us=1, t_sample_us=1, t_total_us=1, ttft_us=1000, n_draft=0,
        tokens_per_sec=50.0, acceptance_rate=0.0, accepted_per_pos=[], drafted_per_pos=[])
    cells = [_bench.Cell("copy", "none", spec_actor.Spec("none"), [plain, plain]),
             _bench.Cell("copy", "ngram-mod", spec_actor.Spec("ngram-mod"), [snap])]
    meta = {"spec_actor_version": "x", "model": {"name": "M", "path": "m.gguf", "description": "d"},
            "machine": {"cpu": "cpu", "cpu_count": 2, "system": "sys"},
            "settings": {"max_tokens": 120, "repeats": 2, "warmup": 1, "threads": 2}}
    text = _bench.render_table(cells, meta)
    row = next(line for line in text.splitlines() if line.startswith("copy") and "ngram-mod" in line)
    assert row.split() == ["copy", "ngram-mod", "8", "100.0", "2.00x", "80.0%", "3.00"]
    md = _bench.render_table(cells, meta, markdown=True)
    assert "| prompt | type | n_draft | tok/s | vs plain | accepted | tok/step |" in md
    assert "| copy | ngram-mod | 8 | 100.0 | 2.00x | 80.0% | 3.00 |" in md


def test_packaged_prompts_match_the_bench_prompt_files():
    prompts = REPO / "bench" / "prompts"
    assert _prompts.COPY == (prompts / "copy.txt").read_text()
    assert _prompts.STORY == (prompts / "story.txt").read_text()
    assert list(_prompts.PROMPTS) == ["copy", "story", "chat"]


# -- info -----------------------------------------------------------------------------


def test_info_on_the_embedded_model(gemma):
    proc = cli("info")
    assert proc.returncode == 0, proc.stderr
    fields = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in proc.stdout.splitlines())
    assert fields["architecture"].startswith("gemma3")
    assert fields["vocabulary"] == f"{gemma.info.n_vocab:,} tokens"
    assert fields["context length"].startswith(f"{gemma.info.n_ctx_train:,}")
    assert fields["NextN/MTP layers"] == "0"
    assert "ngram-mod" in fields["speculative types"] and "draft-mtp" not in fields["speculative types"]
    assert "draft-simple" in fields["with a draft model"]
    assert "draft-mtp" in fields["not available"]
    facts = json.loads(cli("info", "--json").stdout)
    assert facts["parameters"] == gemma.info.n_params and facts["size_bytes"] == gemma.info.size_bytes
    assert facts["nextn_layers"] == 0 and facts["speculative_types"] == list(gemma.info.speculative_types)


def test_info_shows_nextn_layers_and_mtp(tiny_paths):  # noqa: F811
    facts = json.loads(cli("info", str(tiny_paths.mtp), "--json").stdout)
    assert facts["architecture"] == "glm4moe"
    assert facts["nextn_layers"] == 1
    assert "draft-mtp" in facts["speculative_types"] and facts["unavailable"] == []


def test_main_returns_the_exit_status_in_process(capsys):
    assert main(["generate", "hi", "--spec", "warp-drive"]) == 2
    assert capsys.readouterr().err.startswith("spec-actor: error: argument --spec:")
