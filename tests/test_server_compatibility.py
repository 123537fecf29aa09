"""docs/server-compatibility.md stays true: its table of llama-server's endpoints against the server's real routes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import cast

from spec_actor.serve import ServerState
from spec_actor.serve._app import App

DOC = Path(__file__).resolve().parent.parent / "docs" / "server-compatibility.md"
ROW = re.compile(r"^\| `(GET|POST|DELETE|OPTIONS) ([^`]+)` \| (served|differs|not yet|no) \| (.+) \|$")


def table() -> dict[tuple[str, str], str]:
    """{(method, path): status} of the document's endpoint table; every row must parse."""
    rows = [line for line in DOC.read_text().splitlines() if line.startswith("| `")]
    parsed = [ROW.match(line) for line in rows]
    assert all(parsed), [line for line, m in zip(rows, parsed) if not m]
    out: dict[tuple[str, str], str] = {}
    for match in parsed:
        key = (match[1], match[2])
        assert key not in out, f"{key} is listed twice"
        assert match[4].strip(), f"{key} has no note"
        out[key] = match[3]
    return out


def test_the_table_lists_exactly_the_routes_the_server_has():
    routes = set(App(cast(ServerState, None)).routes)  # the router's own list; its endpoints are not called
    rows = table()
    served = {key for key, status in rows.items() if status in ("served", "differs") and key[0] != "OPTIONS"}
    assert routes == served, (f"routes missing from the table: {sorted(routes - served)}; "
                              f"rows marked served that are no route: {sorted(served - routes)}")
    # the ones not served are really absent (not merely left out of the table)
    absent = {key for key, status in rows.items() if status in ("not yet", "no")}
    assert absent and not absent & routes


def test_the_table_covers_llama_servers_endpoints():
    rows = table()
    # llama-server's routes as its server.cpp registers them in the pinned llama.cpp (single-model mode)
    for method, path in [("POST", "/completion"), ("POST", "/completions"), ("POST", "/infill"),
                         ("POST", "/tokenize"), ("POST", "/detokenize"), ("POST", "/apply-template"),
                         ("GET", "/props"), ("GET", "/slots"), ("POST", "/v1/responses"),
                         ("POST", "/v1/messages"), ("POST", "/v1/messages/count_tokens"),
                         ("POST", "/chat/completions/input_tokens"), ("POST", "/embeddings"),
                         ("POST", "/rerank"), ("GET", "/lora-adapters"), ("GET", "/v1/stream")]:
        assert (method, path) in rows, (method, path)
