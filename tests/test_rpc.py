"""RPC workers: a model's layers on `spec-actor rpc-worker` processes (docs/decisions/0097).

Each test starts its workers on 127.0.0.1 as subprocesses of the package's
own command line. Through a worker the tiny float32 model must give exactly
the tokens it gives locally (the worker computes with the same CPU kernels);
speculation and the prefix cache work over it unchanged; and a worker that
dies mid-request ends that request with an error within a bound, after which
the process serves a local model as before. A worker that is stopped
(SIGSTOP) keeps its socket open: the ``rpc_timeout`` bound on each call ends
its request the same way, and a server's ``/health`` then answers 503
(docs/decisions/0105).
"""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from greedy_helpers import assert_equal_within_a_near_tie
from tiny_model_fixtures import tiny_paths, tiny_target  # noqa: F401  (fixtures)

import spec_actor
from serve_helpers import CLI, TESTS_DIR, TIMEOUT, subprocess_env
from spec_actor import ConfigError, Error, ModelLoadError, Session, Token
from spec_actor._rpc import check_timeout, check_workers, parse_worker

N_CTX = 512
DEATH_BOUND = 2.0
"""Seconds from a worker's death to the Error event of the request it served (docs/deployment.md)."""
STUCK_TIMEOUT = 2.0
"""The rpc_timeout of the tests that stop a worker: their requests end by it."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Worker:
    """A ``spec-actor rpc-worker`` subprocess on 127.0.0.1 and its endpoint."""

    def __init__(self) -> None:
        for _ in range(5):  # a port found free may be taken before the worker binds it: try another
            port = _free_port()
            self.proc = subprocess.Popen([*CLI, "rpc-worker", "--port", str(port), "-t", "1"],
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.PIPE, text=True, env=subprocess_env(), cwd=TESTS_DIR)
            self.endpoint = f"127.0.0.1:{port}"
            if self._answers():
                return
            self.stop()
        raise AssertionError("no rpc-worker came up on five free ports")

    def _answers(self) -> bool:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                check_workers([self.endpoint], timeout=5)
                return True
            except ModelLoadError:
                time.sleep(0.05)
        return False

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(TIMEOUT)

    def pause(self) -> None:
        """Stop it (SIGSTOP): its kernel keeps the socket open and acknowledges, but nothing answers."""
        self.proc.send_signal(signal.SIGSTOP)

    def stop(self) -> str:
        """End it (SIGTERM, as Ctrl-C would) and return its stderr."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # a stopped process holds SIGTERM until it continues
            self.proc.terminate()
        _, err = self.proc.communicate(timeout=TIMEOUT)
        return err


@pytest.fixture
def worker() -> Iterator[Worker]:
    w = Worker()
    yield w
    w.stop()


def _prompt(model: spec_actor.Model, n: int, offset: int = 0) -> list[int]:
    n_vocab = model.info.n_vocab
    return [3 + (offset + 11 * i) % (n_vocab - 3) for i in range(n)]


def _run(model: spec_actor.Model, prompt: list[int], spec: str = "none", **options) -> spec_actor.RunResult:
    with Session(model, spec=spec, n_ctx=N_CTX, n_threads=1, **options) as session:
        return session.run(prompt, max_tokens=96, temp=0.0)


def test_greedy_output_through_a_worker_is_the_local_one(worker, tiny_paths, tiny_target):
    remote = spec_actor.load_model(tiny_paths.target, rpc=[worker.endpoint])
    assert remote.rpc == (worker.endpoint,)
    for n_prompt, offset in ((5, 0), (200, 1)):  # one decode, and a prompt over several batches
        prompt = _prompt(tiny_target, n_prompt, offset)
        local = _run(tiny_target, prompt, n_batch=64, n_ubatch=64)
        through = _run(remote, prompt, n_batch=64, n_ubatch=64)
        assert through.status == local.status and len(local.tokens) > 0
        assert through.tokens == local.tokens
    # a second model on the same worker shares this process's one connection to it
    second = spec_actor.load_model(tiny_paths.target, rpc=[worker.endpoint])
    assert _run(second, prompt).tokens == _run(tiny_target, prompt).tokens


def test_gemma_through_a_worker_parts_from_the_local_output_only_at_a_near_tie(worker, gemma):
    remote = spec_actor.load_model(gemma.path, rpc=[worker.endpoint])
    prompt = "The harbour was quiet in the early morning. Fishing boats rocked gently at their moorings,"
    with Session(gemma, spec="none", n_ctx=N_CTX, n_threads=1) as plain:
        expected = plain.run(prompt, max_tokens=48, temp=0.0).tokens
        got = _run(remote, prompt).tokens[:48]
        assert len(got) == len(expected) == 48
        assert_equal_within_a_near_tie(plain, prompt, got, expected)


def test_auto_and_the_prefix_cache_work_through_a_worker(worker, tiny_paths, tiny_target):
    remote = spec_actor.load_model(tiny_paths.target, rpc=[worker.endpoint])
    # a prompt that repeats itself: the n-gram drafters find drafts the target accepts
    prompt = _prompt(tiny_target, 40) * 4
    local = _run(tiny_target, prompt).tokens
    with Session(remote, spec="auto", n_ctx=N_CTX, n_threads=1) as session:
        first = session.run(prompt, max_tokens=96, temp=0.0)
        again = session.run(prompt, max_tokens=96, temp=0.0)
    assert first.tokens == again.tokens == local  # speculation is lossless over RPC too
    assert first.stats.drafts_accepted > 0
    assert again.stats.prompt_reused == len(prompt)  # the kept prefix lives on the worker


async def test_a_pool_batches_through_a_worker(worker, tiny_paths, tiny_target):
    remote = spec_actor.load_model(tiny_paths.target, rpc=[worker.endpoint])
    prompts = [_prompt(tiny_target, 30, offset) for offset in (2, 3)]
    expected = [list(_run(tiny_target, p).tokens) for p in prompts]
    got: list[list[int]] = [[], []]
    async with spec_actor.open_pool(remote, size=2, spec="none", n_ctx=N_CTX, n_threads=1) as pool:
        assert pool.batched

        async def one(i: int) -> None:
            async with pool.stream_events(prompts[i], max_tokens=96, temp=0.0) as events:
                got[i] = [ev.id async for ev in events if isinstance(ev, Token)]

        async with trio.open_nursery() as nursery:
            for i in range(2):
                nursery.start_soon(one, i)
    # each sequence of the batch gives what it gives alone: exactly, on the tiny float32 model
    # (as tests/test_engine.py checks locally)
    assert got == expected


async def test_a_worker_killed_mid_request_ends_it_with_an_error_and_the_process_goes_on(tiny_paths, tiny_target):
    dying = Worker()
    remote = spec_actor.load_model(tiny_paths.target, rpc=[dying.endpoint])
    events: list[object] = []
    async with spec_actor.open_actor(remote, spec="none", n_ctx=4096, n_threads=1) as actor:
        async with actor.stream_events(_prompt(tiny_target, 8), max_tokens=4000, temp=0.0) as stream:
            async for event in stream:
                events.append(event)
                if len(events) == 20:
                    await trio.to_thread.run_sync(dying.kill)
                    killed_at = trio.current_time()
        ended_after = trio.current_time() - killed_at
        assert isinstance(events[-1], Error), events[-1]
        assert dying.endpoint in events[-1].reason and "stopped answering" in events[-1].reason
        assert ended_after < DEATH_BOUND
        assert sum(isinstance(e, Token) for e in events) < 4000
        # the actor takes the next request, which ends at once with the same error
        with trio.fail_after(DEATH_BOUND):
            async with actor.stream_events([5, 6, 7], max_tokens=8, temp=0.0) as stream:
                last = [event async for event in stream][-1]
        assert isinstance(last, Error) and dying.endpoint in last.reason
    with pytest.raises(spec_actor.ContextError, match="stopped answering"):
        Session(remote, spec="none", n_ctx=256)
    # a local model works in the same process, and gives its usual output
    assert len(_run(tiny_target, _prompt(tiny_target, 8)).tokens) == 96
    dying.stop()


async def test_a_worker_stopped_mid_request_ends_it_by_the_timeout_and_the_process_goes_on(
        worker, tiny_paths, tiny_target):
    prompt = _prompt(tiny_target, 8)
    local = _run(tiny_target, prompt).tokens
    remote = spec_actor.load_model(tiny_paths.target, rpc=[worker.endpoint], rpc_timeout=STUCK_TIMEOUT)
    assert remote.rpc_failure() is None and tiny_target.rpc_failure() is None
    events: list[object] = []
    async with spec_actor.open_actor(remote, spec="none", n_ctx=4096, n_threads=1) as actor:
        # generous: the bound is STUCK_TIMEOUT, this only keeps a failing test from hanging
        with trio.fail_after(TIMEOUT):
            async with actor.stream_events(prompt, max_tokens=4000, temp=0.0) as stream:
                async for event in stream:
                    events.append(event)
                    if len(events) == 20:
                        worker.pause()
        assert isinstance(events[-1], Error), events[-1]
        # it ended by the timeout, not by a closed connection (the worker's process lives)
        assert worker.proc.poll() is None
        expected = f"RPC worker {worker.endpoint} did not answer within the RPC timeout of {STUCK_TIMEOUT:g} s"
        assert expected in events[-1].reason
        assert sum(isinstance(e, Token) for e in events) < 4000
        with trio.fail_after(TIMEOUT):  # the next request ends at once with the same error
            async with actor.stream_events([5, 6, 7], max_tokens=8, temp=0.0) as stream:
                last = [event async for event in stream][-1]
        assert isinstance(last, Error) and expected in last.reason
    assert expected in remote.rpc_failure() and tiny_target.rpc_failure() is None
    with pytest.raises(spec_actor.ContextError, match="did not answer within the RPC timeout"):
        Session(remote, spec="none", n_ctx=256)
    # a local model works in the same process, and gives the output it gave before
    assert len(local) == 96 and _run(tiny_target, prompt).tokens == local


def test_serve_health_turns_503_once_its_worker_is_stuck(worker, tiny_paths, tiny_target):
    import httpx

    from serve_helpers import start_cli_server

    proc, url = start_cli_server("-m", str(tiny_paths.target), "--spec", "none", "--rpc", worker.endpoint,
                                 "--rpc-timeout", f"{STUCK_TIMEOUT:g}")
    try:
        assert httpx.get(f"{url}/health", timeout=TIMEOUT).json() == {"status": "ok"}
        prompt = _prompt(tiny_target, 12, 5)
        ok = httpx.post(f"{url}/v1/completions", json={"prompt": prompt, "max_tokens": 8, "temperature": 0},
                        timeout=TIMEOUT)
        assert ok.status_code == 200
        worker.pause()
        failed = httpx.post(f"{url}/v1/completions", json={"prompt": prompt, "max_tokens": 8, "temperature": 0},
                            timeout=TIMEOUT)
        health = httpx.get(f"{url}/health", timeout=TIMEOUT)
        models = httpx.get(f"{url}/v1/models", timeout=TIMEOUT)
    finally:
        proc.terminate()
        proc.wait(TIMEOUT)
    assert failed.status_code >= 500 and "did not answer within the RPC timeout of 2 s" in failed.text
    assert health.status_code == 503
    error = health.json()["error"]
    assert error["type"] == "unavailable_error" and error["code"] == "rpc_worker_failed"
    assert error["message"].startswith(f"RPC worker {worker.endpoint} did not answer within the RPC timeout")
    assert models.status_code == 200  # only /health reports it: the server still answers


def test_the_rpc_timeout_must_be_positive_and_finite(tiny_paths):
    for bad in (0, -1, float("inf"), float("nan"), "5", True, None, 86401):
        with pytest.raises(ConfigError, match="rpc_timeout=.* must be a number of seconds, more than 0"):
            spec_actor.load_model(tiny_paths.target, rpc=["127.0.0.1:1"], rpc_timeout=bad)
    assert check_timeout(2) == 2000 and check_timeout(0.0001) == 1 and check_timeout(1.5) == 1500
    for bad in ("0", "-3", "inf", "nan", "soon"):
        cli = subprocess.run([*CLI, "serve", "--rpc", "127.0.0.1:1", "--rpc-timeout", bad], capture_output=True,
                             text=True, env=subprocess_env(), cwd=TESTS_DIR, timeout=TIMEOUT)
        assert cli.returncode == 2 and "argument --rpc-timeout:" in cli.stderr and "more than 0" in cli.stderr


def test_serve_places_the_model_on_a_worker(worker, tiny_paths, tiny_target):
    import httpx

    from serve_helpers import start_cli_server

    prompt = _prompt(tiny_target, 12, 5)
    proc, url = start_cli_server("-m", str(tiny_paths.target), "--spec", "none", "--rpc", worker.endpoint)
    try:
        reply = httpx.post(f"{url}/v1/completions", json={"prompt": prompt, "max_tokens": 32, "temperature": 0},
                           timeout=TIMEOUT).json()
    finally:
        proc.terminate()
        proc.wait(TIMEOUT)
    with Session(tiny_target, spec="none", n_ctx=256, n_threads=1) as session:
        assert reply["choices"][0]["text"] == session.run(prompt, max_tokens=32, temp=0.0).text


def test_unreachable_or_wrong_workers_fail_the_load_at_once(tiny_paths):
    port = _free_port()  # nothing listens there
    started = time.monotonic()
    with pytest.raises(ModelLoadError, match=f"127.0.0.1:{port} cannot be reached"):
        spec_actor.load_model(tiny_paths.target, rpc=[f"127.0.0.1:{port}"])
    with socket.socket() as silent:  # listens, never answers: the handshake times out
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        endpoint = "127.0.0.1:%d" % silent.getsockname()[1]
        with pytest.raises(ModelLoadError, match="did not answer within 0.5 s"):
            check_workers([endpoint], timeout=0.5)
    assert time.monotonic() - started < 30
    for bad in ("localhost", "host:0", "host:65536", ":80", "a b:1", 80):
        with pytest.raises(ConfigError):
            parse_worker(bad)
    with pytest.raises(ConfigError, match="twice"):
        check_workers(["127.0.0.1:1", "127.0.0.1:1"])


def test_the_handshake_speaks_the_built_protocol():
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "native" / "llama"))
    import llama_build

    from spec_actor import _rpc

    header = (llama_build.ensure_built("cmake", None, None) / "include" / "ggml-rpc.h").read_text()
    major = int(re.search(r"#define RPC_PROTO_MAJOR_VERSION\s+(\d+)", header).group(1))
    assert _rpc._PROTOCOL_MAJOR == major
    assert "ggml_backend_rpc_server_failed" in header  # the edit that reports a dead worker (0097)
    assert "ggml_backend_rpc_set_timeout" in header  # the edit that bounds a stuck one (0105)


def test_the_worker_command_refuses_bad_addresses_and_warns_off_loopback():
    bad = subprocess.run([*CLI, "rpc-worker", "--host", "example.com"], capture_output=True, text=True,
                         env=subprocess_env(), cwd=TESTS_DIR, timeout=TIMEOUT)
    assert bad.returncode == 2 and "is not an IPv4 address" in bad.stderr
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        busy = subprocess.run([*CLI, "rpc-worker", "--port", str(taken.getsockname()[1])], capture_output=True,
                              text=True, env=subprocess_env(), cwd=TESTS_DIR, timeout=TIMEOUT)
    finally:
        taken.close()
    assert busy.returncode != 0 and "cannot listen on 127.0.0.1" in busy.stderr
    assert "WARNING" not in busy.stderr
    port = _free_port()
    open_one = subprocess.Popen([*CLI, "rpc-worker", "--host", "0.0.0.0", "--port", str(port), "-t", "1"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=subprocess_env(),
                                cwd=TESTS_DIR)
    try:
        line = open_one.stderr.readline()
    finally:
        open_one.terminate()
        open_one.communicate(timeout=TIMEOUT)
    assert "no authentication" in line and "SSH tunnel" in line
