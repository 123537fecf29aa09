"""``spec-actor serve`` as users run it, in a subprocess, and the serve example."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys

import httpx
from serve_helpers import CLI, TESTS_DIR, TIMEOUT, start_cli_server as start, subprocess_env

EXAMPLES = TESTS_DIR.parent / "examples"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the command to completion; from the tests folder, so PYTHONPATH picks the package."""
    return subprocess.run([*CLI, *args], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=TIMEOUT, env=subprocess_env(), cwd=TESTS_DIR)


def test_serve_streams_then_sigterm_ends_the_stream_cleanly_and_exits():
    proc, url = start("--api-key", "k")
    try:
        assert httpx.get(f"{url}/health", timeout=TIMEOUT).json() == {"status": "ok"}
        assert httpx.get(f"{url}/v1/models", timeout=TIMEOUT).status_code == 401
        body = {"prompt": "Once upon a time", "max_tokens": 200, "temperature": 0, "stream": True}
        with httpx.stream("POST", f"{url}/v1/completions", json=body, headers={"authorization": "Bearer k"},
                          timeout=TIMEOUT) as response:
            lines = response.iter_lines()
            first = next(line for line in lines if line.startswith("data: "))
            proc.send_signal(signal.SIGTERM)
            rest = [line[6:] for line in lines if line.startswith("data: ")]
        assert json.loads(first[6:])["choices"][0]["text"]
        assert rest[-1] == "[DONE]" and json.loads(rest[-2])["error"]["code"] == "shutting_down"
        assert proc.wait(TIMEOUT) == 0
        assert "SIGTERM: stopping" in proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()


def test_serve_exits_on_ctrl_c():
    proc, url = start()
    try:
        assert httpx.get(f"{url}/health", timeout=TIMEOUT).status_code == 200
        proc.send_signal(signal.SIGINT)
        assert proc.wait(TIMEOUT) == 0
        assert "stopped" in proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()


def test_serve_reports_a_taken_port_and_a_bad_spec():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        done = cli("serve", "--port", port, "-c", "256")
    assert done.returncode == 1 and f"cannot serve on 127.0.0.1:{port}" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    bad = cli("serve", "--spec", "nonsense")
    assert bad.returncode == 2 and "argument --spec" in bad.stderr and "nonsense" in bad.stderr


def test_serve_and_query_example():
    done = subprocess.run([sys.executable, str(EXAMPLES / "serve_and_query.py")], capture_output=True, text=True,
                          timeout=TIMEOUT, env=subprocess_env() | {"SPEC_ACTOR_MAX_TOKENS": "8"}, cwd=TESTS_DIR)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert re.search(r"^serving on http://127\.0\.0\.1:\d+$", out, re.M)
    # Greedy text at a logit near-tie differs between SIMD paths and thread counts
    # (docs/decisions/0031), so the shape is asserted, not one machine's words.
    completion = re.search(r"^completion: (['\"])(.+)\1 \((\d+) tokens\)$", out, re.M)
    assert completion and completion.group(2).strip() and completion.group(3) == "8", out
    assert re.search(r'^spec_actor:generation_tokens_total\{model_name="gemma-3-270m-q4_k_m"\} 16\.0$', out, re.M)
    assert out.rstrip().endswith("stopped")


def test_serve_refuses_limits_out_of_range_before_loading_the_model():
    deep = cli("serve", "--grammar-limit", "max_depth=5000")
    unknown = cli("serve", "--body-limit", "depth=3")
    negative = cli("serve", "--send-timeout", "0")
    origin = cli("serve", "--cors-origins", "https://app.example,https://b.example/path")
    choices = cli("serve", "--max-choices", "0")
    assert (deep.returncode, unknown.returncode, negative.returncode, origin.returncode, choices.returncode) == \
        (2, 2, 2, 2, 2)
    assert "--max-choices" in choices.stderr
    assert "max_depth=5000 is invalid" in deep.stderr and "max_number_chars" in unknown.stderr
    assert "--send-timeout" in negative.stderr
    assert "--cors-origins" in origin.stderr and "https://b.example/path" in origin.stderr
