"""Helpers of the serve tests: a server on a free port in the test process, clients, metrics."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import trio
from prometheus_client.parser import text_string_to_metric_families

import spec_actor
from spec_actor import Model
from spec_actor.serve import Server, open_server

CTX = 512
"""The context of most test servers: room for the short prompts and budgets used here."""


@asynccontextmanager
async def serving(model: Model, **options: Any) -> AsyncIterator[Server]:
    """A server on a free port of 127.0.0.1, one actor of one thread unless told otherwise."""
    options.setdefault("n_ctx", CTX)
    options.setdefault("n_threads", 1)
    options.setdefault("spec", "none")  # the tests compare with plain greedy text; auto is the server's default
    async with open_server(model, port=0, **options) as server:
        yield server


def openai_client(server: Server, api_key: str = "unused") -> openai.AsyncOpenAI:
    """The official client, pointed at the server, without retries (a 429 must show)."""
    return openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key=api_key, max_retries=0, timeout=120)


def http(server: Server) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=server.url, timeout=120)


def sse_data(lines: list[str]) -> list[Any]:
    """The ``data:`` payloads of server-sent-event lines: JSON objects, and "[DONE]" as is."""
    out = []
    for line in lines:
        if line.startswith("data: "):
            payload = line[len("data: "):]
            out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def error_of(response: httpx.Response, status: int = 400) -> dict[str, Any]:
    """The ``error`` object of a response that must have ``status``."""
    assert response.status_code == status, response.text
    return response.json()["error"]


async def metrics(client: httpx.AsyncClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """GET /metrics parsed with prometheus-client's parser: {(sample name, labels without model): value}."""
    response = await client.get("/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    values = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "model_name"))
            values[(sample.name, labels)] = sample.value
    return values


def metric(values: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return values[(f"spec_actor:{name}", tuple(sorted(labels.items())))]


async def wait_for(predicate: Any, timeout: float = 30.0) -> None:
    """Poll ``predicate()`` until it is true (fails after ``timeout`` seconds: generous, for loaded machines)."""
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.005)


TESTS_DIR = Path(__file__).resolve().parent


def subprocess_env() -> dict[str, str]:
    """The environment for a subprocess that must import the spec_actor under test (see test_cli.py)."""
    root = str(Path(spec_actor.__file__).resolve().parent.parent)
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))


TIMEOUT = 120
"""Seconds a subprocess step may take before the test fails (generous: a loaded machine)."""
CLI = [sys.executable, "-m", "spec_actor.cli"]
"""The command line of ``spec-actor``. Run it with ``cwd=TESTS_DIR``: ``python -m`` puts its working
directory first on sys.path, and a checkout's root would shadow the installed package."""


def start_cli_server(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], str]:
    """Start ``spec-actor serve`` on a free port (``env`` added to its environment); return the process and
    its URL (from its stderr line)."""
    proc = subprocess.Popen([*CLI, "serve", "--port", "0", "-c", "256", "-t", "1", *args],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=subprocess_env() | (env or {}), cwd=TESTS_DIR)
    found: list[str] = []

    def read() -> None:
        for line in proc.stderr:
            found.append(line)
            if "serving" in line:
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(TIMEOUT)
    match = re.search(r"on (http://\S+) ", found[-1] if found else "")
    assert match, "".join(found)
    return proc, match.group(1)
