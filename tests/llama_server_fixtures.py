"""llama.cpp's own ``llama-server``, built from the pinned source, run on a loopback port for the parity tests.

`build_llama_server` (bench/llama_server_build.py) compiles it once into the
cached llama.cpp build, with the flags of spec_actor's own build, so both
servers run the same ggml and llama code; later runs find the binary there.
"""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from outside_checkout import REPO

START_SECONDS = 120
"""How long llama-server may take to load the model and answer /health (generous: a loaded machine)."""


def llama_server_binary() -> Path:
    """The path of ``llama-server``, built first if the cached llama.cpp build lacks it (minutes, once)."""
    spec = importlib.util.spec_from_file_location("llama_server_build", REPO / "bench" / "llama_server_build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build_llama_server()


def free_port() -> int:
    """A port of 127.0.0.1 free at the time of the call."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def running_llama_server(binary: Path, model_path: str, *args: str) -> Iterator[str]:
    """``llama-server -m model_path ARGS`` on a free port of 127.0.0.1, ready; yields its URL, stops it after."""
    port = free_port()
    log = tempfile.TemporaryFile("w+")  # a file, not a pipe: its output never blocks it
    proc = subprocess.Popen([str(binary), "-m", model_path, "--host", "127.0.0.1", "--port", str(port),
                             "--no-ui", "--log-disable", *args],
                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_SECONDS
        while True:
            if proc.poll() is not None:
                log.seek(0)
                raise AssertionError(f"llama-server exited with {proc.returncode}: {log.read()[-4000:]}")
            assert time.monotonic() < deadline, f"llama-server did not answer /health in {START_SECONDS} s"
            try:
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
